#!/usr/bin/env bash
# `zaya serve` on a machine where another process holds a core: single-stream decode tokens/s (greedy
# completions of TOKENS tokens, the median of RUNS) on N threads and on N - 1, alone and beside one
# busy-loop process. The server's thread governor drops N to N - 1 while the neighbour runs, as training's
# does. Run on an otherwise quiet machine.
# Usage: bench/serve_busy_neighbour.sh MODEL_DIR [ZAYA] [PRECISION] [TOKENS] [RUNS] [THREADS]
set -eu
model=$1 zaya=${2:-build/src/zaya} precision=${3:-bf16} tokens=${4:-64} runs=${5:-5}
threads=${6:-$(nproc)}
work=$(mktemp -d)
server=
trap 'kill $server $busy 2>/dev/null; rm -rf "$work"' EXIT
busy=

# rate THREADS: starts a server on THREADS threads, prints its median tokens/s over RUNS completions.
rate() {
  "$zaya" --threads "$1" serve --model "$model" --port 0 --precision "$precision" 2> "$work/log" &
  server=$!
  local port=
  for _ in $(seq 600); do
    port=$(sed -n 's|.*listening on http://[^:]*:\([0-9]*\).*|\1|p' "$work/log")
    [ -n "$port" ] && break
    sleep 0.2
  done
  [ -n "$port" ] || { cat "$work/log" >&2; exit 1; }
  local request="{\"prompt\": [5, 17, 33, 48, 100, 250, 31, 9], \"max_tokens\": $tokens, \"temperature\": 0}"
  curl -s -o /dev/null "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' -d "$request"
  for _ in $(seq "$runs"); do
    curl -s -o "$work/out" -w '%{time_total}\n' "http://127.0.0.1:$port/v1/completions" \
      -H 'Content-Type: application/json' -d "$request" > "$work/time"
    local made
    made=$(sed -n 's/.*"completion_tokens":\([0-9]*\).*/\1/p' "$work/out")
    awk -v n="$made" '{ printf "%.1f\n", n / $1 }' "$work/time"
  done | sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'
  kill "$server"
  wait "$server" 2>/dev/null || true
  server=
}

alone=$(rate "$threads")
fewer=$(rate $((threads - 1)))
(while :; do :; done) &
busy=$!
loaded=$(rate "$threads")
loaded_fewer=$(rate $((threads - 1)))
kill $busy
busy=
printf '%s, %s, %s tokens, tokens/s alone: %s threads %s, %s threads %s; beside a busy process: %s threads %s, %s threads %s\n' \
  "$(basename "$model")" "$precision" "$tokens" "$threads" "$alone" $((threads - 1)) "$fewer" "$threads" \
  "$loaded" $((threads - 1)) "$loaded_fewer"
