#!/usr/bin/env bash
# zaya serve against hostile and careless clients (issue 40): every connection and request is bounded
# before the server spends on it. Start-up refusals of flags that disabled authentication or broke the
# server; /metrics labels from a fixed set whatever paths are asked; pipelined requests answered in order;
# a client that leaves cancels its sequences; a prompt that cannot fit refused before it is tokenized;
# memory flat under 20,000 requests to random paths; slowloris and slow bodies (slowhttptest) while a
# completion is answered; the caps and deadlines on connections.
# Usage: serve_hostile_test.sh ZAYA_BINARY FIXTURES_DIR
set -u
zaya=$1 fixtures=$2
here=$(cd "$(dirname "$0")" && pwd)
client="python3 $here/hostile_client.py"
tmp=$(mktemp -d)
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; rm -rf "$tmp"' EXIT
source "$here/report.sh"

"$zaya" tokenizer train --input "$fixtures/eval/text.txt" --input "$fixtures/tokenizer/corpus.txt" \
  --vocab-size 400 --output "$tmp/tokenizer.json" > "$tmp/log" 2>&1 &&
  "$zaya" init --preset tiny --out "$tmp/model" --seed 5 >> "$tmp/log" 2>&1 &&
  cp "$tmp/tokenizer.json" "$tmp/model/" || { cat "$tmp/log"; exit 1; }

# Refused at start, exit 2, naming the flag. `timeout`: a server that starts instead is a failure, not a hang.
refused_at_start() {  # DESCRIPTION FRAGMENT ARGS...
  local description=$1 fragment=$2
  shift 2
  check "$description" 2 "$fragment" -- timeout 30 "$zaya" serve --model "$tmp/model" --port 0 "$@"
}
refused_at_start "an empty --api-key is refused" "--api-key" --api-key ""
check "an empty ZAYA_API_KEY is refused" 2 "ZAYA_API_KEY" -- \
  env ZAYA_API_KEY= timeout 30 "$zaya" serve --model "$tmp/model" --port 0
refused_at_start "--timeout inf is refused" "--timeout" --timeout inf
refused_at_start "--timeout 1e10 is refused" "--timeout" --timeout 1e10
refused_at_start "--host 999.1.1.1 names --host" "--host" --host 999.1.1.1
refused_at_start "--max-queued 100000 is refused" "--max-queued" --max-queued 100000
refused_at_start "--max-running 100000 is refused" "--max-running" --max-running 100000

source "$here/serve_server.sh"

# With an API key: requests without it are answered 401 before routing, and counted too.
export ZAYA_TEST_KEY=sesame
key=(-H "Authorization: Bearer $ZAYA_TEST_KEY")
start_server main --max-running 2 --max-queued 64 --api-key "$ZAYA_TEST_KEY"
[ "$port" != 0 ] && ok "serve: listening on port $port" || { fail "serve did not start"; report; exit 1; }
main_pid=$server_pid
url=http://127.0.0.1:$port

# /metrics: labels from the fixed set after hostile paths (with the key and without), and no line a path
# wrote.
for i in $(seq 25); do curl -s -o /dev/null "${key[@]}" "$url/random/$RANDOM$i"; done
for i in $(seq 25); do curl -s -o /dev/null "$url/random/$RANDOM$i"; done
curl -s -o /dev/null --path-as-is "$url/x%22%7D%200%0Azaya_injected%7Bendpoint%3D%22a%22%7D%201%0A"
curl -s -o /dev/null "${key[@]}" "$url/v1/models"
curl -s "${key[@]}" "$url/metrics" > "$tmp/metrics"
labels=$(grep -o 'endpoint="[^"]*"' "$tmp/metrics" | sort -u | tr '\n' ' ')
unknown=$(grep -o 'endpoint="[^"]*"' "$tmp/metrics" | sort -u |
  grep -v -x -E 'endpoint="(/v1/completions|/v1/models|/health|/metrics|/tokenize|/detokenize|/tokenizer_info|other)"')
[ -z "$unknown" ] && grep -q 'endpoint="other",status="404"} 25' "$tmp/metrics" &&
  grep -q 'endpoint="other",status="401"} 26' "$tmp/metrics" &&
  ok "metrics: 51 unknown paths counted as endpoint=\"other\" ($labels)" ||
  fail "metrics labels: $(echo "$labels" | head -c 300)"
grep -q '^zaya_injected' "$tmp/metrics" && fail "a path injected a line into /metrics" ||
  ok "metrics: no line injected by a path"

out=$($client pipeline "$port" 2>&1) && ok "3 pipelined requests answered in order" ||
  fail "pipelining: $out"

out=$($client leave "$port" whole 2>&1) && ok "non-streamed clients that leave cancel their sequences: $out" ||
  fail "non-streamed clients that leave: $out"
out=$($client leave "$port" stream 2>&1) && ok "streaming clients that leave cancel their sequences: $out" ||
  fail "streaming clients that leave: $out"

# A prompt that cannot fit the context is refused before it is tokenized; so is /tokenize's.
head -c 20000000 /dev/zero | tr '\0' 'a' | sed 's/a\{5\}/abc d/g' > "$tmp/long"
{ printf '{"prompt": "'; cat "$tmp/long"; printf '"}'; } > "$tmp/long.json"
for endpoint in /v1/completions /tokenize; do
  start=$(date +%s.%N)
  got=$(curl -s -o "$tmp/body" -w '%{http_code}' --max-time 60 "${key[@]}" -H 'Content-Type: application/json' \
    --data-binary "@$tmp/long.json" "$url$endpoint")
  took=$(echo "$(date +%s.%N) - $start" | bc)
  if [ "$got" = 400 ] && grep -q '"param":"prompt"' "$tmp/body" && grep -q 'cannot fit' "$tmp/body" &&
    awk -v t="$took" 'BEGIN { exit !(t < 10) }'; then
    ok "a 20 MB prompt to $endpoint refused (400) in ${took} s"
  else
    fail "a 20 MB prompt to $endpoint: HTTP $got in ${took} s: $(head -c 200 "$tmp/body")"
  fi
done

# Memory flat: 20,000 requests to random paths (one a label injection) on keep-alive connections.
out=$($client flood "$port" 20000 "$main_pid" 2>&1) && ok "memory flat under hostile paths: $out" ||
  fail "memory under hostile paths: $out"

# Protocol limits: a head over 16 KiB, a chunked body, Expect: 100-continue.
got=$(curl -s -o /dev/null -w '%{http_code}' -H "X-Pad: $(head -c 17000 /dev/zero | tr '\0' a)" "$url/health")
[ "$got" = 431 ] && ok "a head over 16 KiB: 431" || fail "a head over 16 KiB: HTTP $got"
got=$(curl -s -o /dev/null -w '%{http_code}' "${key[@]}" -H 'Transfer-Encoding: chunked' -d '{"prompt": "a"}' \
  "$url/tokenize")
[ "$got" = 411 ] && ok "a chunked request body: 411" || fail "a chunked request body: HTTP $got"
got=$(curl -s -o /dev/null -w '%{http_code}' "${key[@]}" -H 'Expect: 100-continue' -d '{"prompt": "The cat"}' \
  "$url/tokenize")
[ "$got" = 200 ] && ok "Expect: 100-continue answered" || fail "Expect: 100-continue: HTTP $got"

# slowhttptest: slowloris (headers a line at a time) and slow bodies, 300 connections each, while a
# completion from another address is answered within 2 s.
if ! command -v slowhttptest > /dev/null; then
  fail "slowhttptest is not installed (scripts/setup.sh installs it): the slow-client checks cannot run"
else
  completion='{"prompt": "The cat", "max_tokens": 8, "temperature": 0}'
  for mode in -H -B; do
    slowhttptest $mode -c 300 -r 300 -i 1 -l 15 -t POST -u "$url/v1/completions" -p 3 > "$tmp/slow$mode.log" 2>&1 &
    slow=$!
    pids+=($slow)
    sleep 5
    open=$(curl -s --interface 127.0.0.2 --max-time 2 "${key[@]}" "$url/metrics" |
      grep '^zaya_open_connections ' | cut -d' ' -f2)
    start=$(date +%s.%N)
    got=$(curl -s -o "$tmp/body" -w '%{http_code}' --interface 127.0.0.2 --max-time 2 "${key[@]}" \
      -H 'Content-Type: application/json' -d "$completion" "$url/v1/completions")
    took=$(echo "$(date +%s.%N) - $start" | bc)
    [ "$got" = 200 ] && [ "${open:-0}" -ge 200 ] &&
      ok "slowhttptest $mode: $open connections held, a completion answered in ${took} s" ||
      fail "slowhttptest $mode: HTTP $got in ${took} s with ${open:-?} connections open; $(tail -3 "$tmp/slow$mode.log")"
    kill "$slow" 2>/dev/null
    wait "$slow" 2>/dev/null
  done
fi
kill -TERM "$main_pid"
wait "$main_pid" 2>/dev/null

# The caps and deadlines, small enough to watch.
unset ZAYA_TEST_KEY
start_server limits --max-connections 6 --max-connections-per-client 4 --header-timeout 1 --body-timeout 2 \
  --idle-timeout 2
[ "$port" != 0 ] || { fail "serve with small limits did not start"; report; exit 1; }
out=$($client caps "$port" 4 6 2>&1) && ok "connection caps: $out" || fail "connection caps: $out"
out=$($client slow_head "$port" 4 2>&1) && ok "header timeout: $out" || fail "header timeout: $out"
out=$($client slow_body "$port" 6 2>&1) && ok "body timeout however the bytes trickle: $out" ||
  fail "body timeout: $out"

report
