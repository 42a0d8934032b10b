#!/usr/bin/env bash
# A training step on a machine where another process holds a core: `zaya bench step` tokens/s alone on N
# threads and on N - 1, then both again beside one busy-loop process (the thread governor drops N to N - 1
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
loaded_fewer=$(rate $((threads - 1)))
kill $busy
printf '%s, batch %s x %s, tokens/s alone: %s threads %s, %s threads %s; beside a busy process: %s threads %s, %s threads %s\n' \
  "$preset" "$batch" "$seq" "$threads" "$alone" $((threads - 1)) "$fewer" "$threads" "$loaded" $((threads - 1)) "$loaded_fewer"
