#!/usr/bin/env bash
# A training step on a machine where another process holds a core: `zaya bench step` tokens/s alone on N
# threads, alone on N - 1, and on N with one busy-loop process beside it (the thread governor drops to N - 1
# while the neighbour runs). Medians of STEPS steps; run on an otherwise quiet machine.
# Usage: bench/busy_neighbour.sh [ZAYA] [PRESET] [BATCH] [SEQ] [STEPS] [THREADS]
set -eu
zaya=${1:-build/src/zaya} preset=${2:-small} batch=${3:-16} seq=${4:-512} steps=${5:-12}
threads=${6:-$(nproc)}
rate() {
  "$zaya" --threads "$1" bench step --preset "$preset" --batch "$batch" --seq "$seq" --steps "$steps" --json \
    | sed -n 's/.*"tokens_per_second":\([0-9.e+]*\).*/\1/p' | xargs printf '%.0f\n'
}
alone=$(rate "$threads")
fewer=$(rate $((threads - 1)))
(while :; do :; done) &
busy=$!
trap 'kill $busy 2>/dev/null' EXIT
loaded=$(rate "$threads")
kill $busy
printf '%s, batch %s x %s, tokens/s: %s threads alone %s; %s threads alone %s; %s threads beside a busy process %s\n' \
  "$preset" "$batch" "$seq" "$threads" "$alone" $((threads - 1)) "$fewer" "$threads" "$loaded"
