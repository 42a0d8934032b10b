#!/usr/bin/env bash
# zaya serve and zaya eval as a client meets them, over loopback with curl: the endpoints, greedy answers
# that do not depend on what else is running, streams, scoring, errors, the API key, and a clean stop.
# The Python clients (openai, lm-evaluation-harness) are in tests/peer/serve_peer.py.
# Usage: serve_test.sh ZAYA_BINARY FIXTURES_DIR
set -u
zaya=$1 fixtures=$2
tmp=$(mktemp -d)
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; rm -rf "$tmp"' EXIT
source "$(dirname "$0")/report.sh"

"$zaya" tokenizer train --input "$fixtures/eval/text.txt" --input "$fixtures/tokenizer/corpus.txt" \
  --vocab-size 400 --output "$tmp/tokenizer.json" > "$tmp/log" 2>&1 &&
  "$zaya" init --preset tiny --out "$tmp/model" --seed 5 >> "$tmp/log" 2>&1 &&
  cp "$tmp/tokenizer.json" "$tmp/model/" || { cat "$tmp/log"; exit 1; }

source "$(dirname "$0")/serve_server.sh"

start_server main --max-running 4
[ "$port" != 0 ] && ok "serve: listening on port $port" || { fail "serve did not start"; report; exit 1; }
url=http://127.0.0.1:$port

# status URL [BODY]: the HTTP status; the body lands in $tmp/body.
status() {
  if [ $# -gt 1 ]; then
    curl -s -o "$tmp/body" -w '%{http_code}' -H 'Content-Type: application/json' --data-binary "$2" "$url$1"
  else
    curl -s -o "$tmp/body" -w '%{http_code}' "$url$1"
  fi
}
# expect DESCRIPTION WANT_STATUS WANT_FRAGMENT PATH [BODY]
expect() {
  local description=$1 want=$2 fragment=$3
  shift 3
  local got
  got=$(status "$@")
  if [ "$got" = "$want" ] && grep -qF -- "$fragment" "$tmp/body"; then
    ok "$description"
  else
    fail "$description: HTTP $got (want $want), body: $(head -c 300 "$tmp/body")"
  fi
}

expect "GET /health" 200 '"ok"' /health
expect "GET /v1/models names the model" 200 '"id":"model"' /v1/models
expect "GET /tokenizer_info" 200 '"model_max_length"' /tokenizer_info
expect "POST /tokenize" 200 '"count"' /tokenize '{"prompt": "The cat sat"}'
ids=$(grep -o '"tokens":\[[0-9,]*\]' "$tmp/body" | grep -o '\[.*\]')
expect "POST /detokenize inverts it" 200 '"prompt":"The cat sat"' /detokenize "{\"tokens\": $ids}"

greedy='{"prompt": "The cat", "max_tokens": 24, "temperature": 0}'
expect "completion" 200 '"finish_reason":"length"' /v1/completions "$greedy"
alone=$(grep -o '"text":"[^"]*"' "$tmp/body")
expect "the same greedy completion from token ids" 200 "$alone" /v1/completions \
  "{\"prompt\": $(curl -s -H 'Content-Type: application/json' -d '{"prompt": "The cat"}' "$url/tokenize" |
    grep -o '"tokens":\[[0-9,]*\]' | grep -o '\[.*\]'), \"max_tokens\": 24, \"temperature\": 0}"
expect "a seed makes sampling repeatable" 200 '"text"' /v1/completions \
  '{"prompt": "The", "max_tokens": 16, "seed": 7, "n": 2}'
first=$(cat "$tmp/body" | grep -o '"text":"[^"]*"')
status /v1/completions '{"prompt": "The", "max_tokens": 16, "seed": 7, "n": 2}' > /dev/null
[ "$(grep -o '"text":"[^"]*"' "$tmp/body")" = "$first" ] && ok "seeded choices repeat" || fail "seeded choices differ"

# Eight clients at once (the engine decodes them together): each gets the text it gets alone.
# Each client waits for its whole answer however busy the machine is (a slow answer is not a wrong one).
clients=()
for i in $(seq 8); do
  curl -s --max-time 600 -H 'Content-Type: application/json' -d "$greedy" "$url/v1/completions" \
    > "$tmp/concurrent.$i" &
  clients+=($!)
done
wait "${clients[@]}"
same=0 unanswered=0
for i in $(seq 8); do
  if ! grep -q '"usage"' "$tmp/concurrent.$i"; then
    unanswered=$((unanswered + 1))
  elif grep -qF "$alone" "$tmp/concurrent.$i"; then
    same=$((same + 1))
  else
    echo "alone: $alone; concurrent: $(grep -o '"text":"[^"]*"' "$tmp/concurrent.$i")" >&2
  fi
done
[ "$same" -eq 8 ] && ok "8 concurrent greedy requests each equal the request alone" ||
  fail "$same of 8 concurrent requests equal the request alone ($unanswered unanswered)"

expect "echo with logprobs, max_tokens 0: the prompt scored" 200 '"token_logprobs":[null,' /v1/completions \
  '{"prompt": "The cat sat on the mat", "max_tokens": 0, "echo": true, "logprobs": 2}'
grep -qF '"text":"The cat sat on the mat"' "$tmp/body" && ok "echo returns the prompt" || fail "echo: $(cat "$tmp/body")"

# Greedy: a sampled stream could draw the end-of-text token before 12 and end with "stop" (it did, once).
curl -sN -H 'Content-Type: application/json' -d '{"prompt": "The", "max_tokens": 12, "stream": true, "temperature": 0}' \
  "$url/v1/completions" > "$tmp/stream"
[ "$(tail -n 2 "$tmp/stream" | head -n 1)" = "data: [DONE]" ] && grep -q '"finish_reason":"length"' "$tmp/stream" &&
  ok "a stream ends with its finish reason and data: [DONE]" || fail "stream: $(tail -c 300 "$tmp/stream")"
# A client that leaves mid-stream: the server goes on serving others.
curl -sN -H 'Content-Type: application/json' -d '{"prompt": "The", "max_tokens": 900, "stream": true}' \
  "$url/v1/completions" | head -c 100 > /dev/null
expect "served after a client left mid-stream" 200 "$alone" /v1/completions "$greedy"

expect "malformed JSON: 400" 400 '"type":"invalid_request_error"' /v1/completions '{"prompt": '
expect "negative max_tokens: 400 naming it" 400 '"param":"max_tokens"' /v1/completions \
  '{"prompt": "a", "max_tokens": -3}'
expect "a field of the wrong type: 400" 400 '"param":"temperature"' /v1/completions \
  '{"prompt": "a", "temperature": "warm"}'
expect "a prompt longer than the context: 400" 400 "maximum context length is 1024" /v1/completions \
  "{\"prompt\": \"$(head -c 15000 /dev/zero | tr '\0' 'a' | sed 's/a\{5\}/abc d/g')\"}"
expect "a token id outside the vocabulary: 400" 400 '"param":"prompt"' /v1/completions \
  '{"prompt": [1, 999999]}'
expect "an unknown endpoint: 404" 404 '"error"' /v1/chat/nothing
head -c 40000000 /dev/zero | tr '\0' ' ' > "$tmp/huge"
got=$(curl -s -o "$tmp/body" -w '%{http_code}' -H 'Content-Type: application/json' --data-binary "@$tmp/huge" \
  "$url/v1/completions")
[ "$got" = 413 ] && ok "a body over 32 MiB: 413" || fail "a body over 32 MiB: HTTP $got"
expect "GET /metrics counts requests" 200 'zaya_requests_total{endpoint="/v1/completions",status="400"}' /metrics
grep -q '^zaya_generation_tokens_total [1-9]' "$tmp/body" && ok "metrics count generated tokens" ||
  fail "metrics: $(head -c 300 "$tmp/body")"

kill -TERM "$server_pid"
for _ in $(seq 50); do kill -0 "$server_pid" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$server_pid" 2>/dev/null; then
  fail "SIGTERM did not stop the server in 5 s"
else
  wait "$server_pid"
  code=$?
  [ "$code" -eq 0 ] && grep -q "stopping (SIGTERM)" "$tmp/main.log" && ok "SIGTERM stops the server, exit 0" ||
    fail "after SIGTERM: exit $code, $(tail -2 "$tmp/main.log")"
fi

start_server keyed --api-key sesame
url=http://127.0.0.1:$port
expect "with --api-key, no key: 401" 401 '"authentication_error"' /v1/models
got=$(curl -s -o /dev/null -w '%{http_code}' -H 'Authorization: Bearer sesame' "$url/v1/models")
[ "$got" = 200 ] && ok "with the key: 200" || fail "with the key: HTTP $got"
expect "with --api-key, /health stays open" 200 '"ok"' /health
check "a port in use: one-line error" 1 "cannot listen on 127.0.0.1:$port" -- \
  "$zaya" serve --model "$tmp/model" --port "$port"
check "serve a missing model" 1 "$tmp/none" -- "$zaya" serve --model "$tmp/none"

# --precision bf16 (the expert weights held as bf16 alone): a prompt scores as the float32 server scores it,
# within bf16's rounding of each product's inputs (2^-8 relative): log-probabilities within 0.1% of float32's
# (0.02% here; 0.17% with the expert weights lost), and so are zaya eval's sums of them below (0.008%).
score='{"prompt": "The cat sat on the mat and looked at the door", "max_tokens": 0, "echo": true, "logprobs": 0}'
logprobs_of() {
  curl -s -H 'Content-Type: application/json' --data-binary "$score" "http://127.0.0.1:$1/v1/completions" |
    grep -o '"token_logprobs":\[[^]]*\]'
}
start_server fp32
fp32_logprobs=$(logprobs_of "$port")
start_server bf16 --precision bf16
grep -q "bf16" "$tmp/bf16.log" && ok "serve --precision bf16 says so" || fail "bf16 server: $(cat "$tmp/bf16.log")"
bf16_logprobs=$(logprobs_of "$port")
# within_bf16 DESCRIPTION A B: the numbers of A and B (lists of the same length; nulls and anything else but
# numbers dropped) differ by at most 0.1% of A's, and not by nothing: equal numbers would mean that B ran in
# float32 too.
within_bf16() {
  local largest
  largest=$(awk -v a="$2" -v b="$3" 'BEGIN {
    gsub(/null,?|[^-0-9.e,]/, "", a); gsub(/null,?|[^-0-9.e,]/, "", b)
    n = split(a, x, ","); m = split(b, y, ",")
    if (n == 0 || n != m) { print "mismatch " n " " m; exit }
    worst = 0
    for (i = 1; i <= n; i++) {
      d = (x[i] - y[i]) / x[i]; if (d < 0) d = -d; if (d > worst) worst = d
    }
    print worst }')
  awk -v w="$largest" 'BEGIN { exit !(w ~ /^[0-9.e-]+$/ && w + 0 > 0 && w + 0 <= 0.001) }' &&
    ok "$1 within 0.1% of float32's (largest relative difference $largest)" ||
    fail "$1 against float32's: $largest ($2 against $3)"
}
within_bf16 "bf16 serve's log-probabilities" "$fp32_logprobs" "$bf16_logprobs"

# A server on two cores, one of them held by a busy process, drops a thread, as training does: on both
# cores beside such a process, medium decoded 2.2x slower than on one. The two cores are the first two this
# test may run on (Cpus_allowed_list, ranges expanded).
cpus=()
for part in $(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status | tr ',' ' '); do
  if [[ $part == *-* ]]; then cpus+=($(seq "${part%-*}" "${part#*-}")); else cpus+=("$part"); fi
done
if [ "${#cpus[@]}" -ge 2 ]; then
  taskset -c "${cpus[0]}" bash -c 'while :; do :; done' &
  busy=$!
  pids+=($busy)
  taskset -c "${cpus[0]},${cpus[1]}" "$zaya" --threads 2 serve --model "$tmp/model" --port 0 2> "$tmp/shared.log" &
  shared=$!
  pids+=($shared)
  port=
  for _ in $(seq 100); do
    port=$(grep -o 'listening on http://127.0.0.1:[0-9]*' "$tmp/shared.log" | grep -o '[0-9]*$')
    [ -n "$port" ] && break
    sleep 0.1
  done
  for _ in $(seq 60); do
    [ -n "$port" ] || break
    grep -q "another process holds a core" "$tmp/shared.log" && break
    curl -s -o /dev/null -H 'Content-Type: application/json' --max-time 60 \
      -d '{"prompt": "The", "max_tokens": 256, "temperature": 0}' "http://127.0.0.1:$port/v1/completions"
  done
  kill "$busy" "$shared"
  grep -q "another process holds a core: 1 thread instead of 2" "$tmp/shared.log" &&
    ok "serve beside a busy process on one of its two cores drops a thread" ||
    fail "serve beside a busy process kept its threads: $(tail -3 "$tmp/shared.log")"
fi

# zaya eval on the task fixtures: a table, the JSON, and one-line errors.
check "eval: tasks and a text" 0 "bits/byte" -- "$zaya" eval --model "$tmp/model" \
  --task "$fixtures/eval/arc.jsonl" --task "$fixtures/eval/hellaswag.jsonl" --task "$fixtures/eval/mmlu.jsonl" \
  --text "$fixtures/eval/text.txt" --json "$tmp/eval.json"
grep -q '"choice_loglikelihoods"' "$tmp/eval.json" && ok "eval: per-item log-likelihoods in the JSON" ||
  fail "eval JSON: $(head -c 300 "$tmp/eval.json")"
check "eval --precision bf16" 0 "bits/byte" -- "$zaya" eval --model "$tmp/model" --precision bf16 \
  --task "$fixtures/eval/arc.jsonl" --task "$fixtures/eval/hellaswag.jsonl" --task "$fixtures/eval/mmlu.jsonl" \
  --text "$fixtures/eval/text.txt" --json "$tmp/eval_bf16.json"
choices_of() { tr -d ' \n' < "$1" | grep -o '"choice_loglikelihoods":\[[^]]*\]' | tr '\n' ','; }
within_bf16 "bf16 eval's choice log-likelihoods" "$(choices_of "$tmp/eval.json")" "$(choices_of "$tmp/eval_bf16.json")"
check "eval: not a task file" 1 "text.txt: line 1" -- "$zaya" eval --model "$tmp/model" \
  --task "$fixtures/eval/text.txt"
check "eval: nothing to score" 1 "give at least one --task, --text or --dataset" -- "$zaya" eval --model "$tmp/model"
"$zaya" prepare --tokenizer "$tmp/tokenizer.json" --input "$fixtures/eval/text.txt" --output "$tmp/docs" > /dev/null 2>&1
check "eval: a prepared dataset's documents" 0 "bits/byte" -- "$zaya" eval --model "$tmp/model" \
  --dataset "$tmp/docs_train" --json "$tmp/dataset.json"
grep -q '"documents": 1' "$tmp/dataset.json" && ok "eval: the dataset's document counted" ||
  fail "eval dataset JSON: $(head -c 300 "$tmp/dataset.json")"
check "eval: a dataset that is not there" 1 "$tmp/none" -- "$zaya" eval --model "$tmp/model" --dataset "$tmp/none"
check "eval: --json over its input" 1 "--force" -- "$zaya" eval --model "$tmp/model" \
  --task "$tmp/eval.json" --json "$tmp/eval.json"

report
