#!/usr/bin/env bash
# A run's bits are a function of its config, data and seed, not of what the machine is doing: the tiny run
# with default settings (the thread governor on) beside a busy process started at different moments, and on
# 1 thread against 2, ends with byte-identical checkpoints, in fp32 and in bf16. And MFU means something: the
# demo's config (small) beside a busy process from its start never logs one above 100%.
# Usage: determinism_test.sh ZAYA_BINARY CONFIGS_DIR
set -u
zaya=$1 configs=$2
tmp=$(mktemp -d)
trap 'kill -9 $(jobs -p) 2>/dev/null; rm -rf "$tmp"' EXIT
source "$(dirname "$0")/report.sh"

docs=/usr/share/doc/python3.11/html/_sources
[ -d "$docs" ] || { echo "FAIL: $docs is missing (scripts/setup.sh installs python3.11-doc)"; exit 1; }
mkdir -p "$tmp/corpus"
cp "$docs"/library/[a-f]*.rst.txt "$tmp/corpus/"
"$zaya" tokenizer train --input "$tmp/corpus" --vocab-size 512 --output "$tmp/tokenizer.json" > "$tmp/log" 2>&1 \
  && "$zaya" prepare --tokenizer "$tmp/tokenizer.json" --input "$tmp/corpus" --output "$tmp/docs" \
     --val-fraction 0.05 > "$tmp/log" 2>&1 || { echo "FAIL: data"; cat "$tmp/log"; exit 1; }
set_data=(--set "data.tokenizer=\"$tmp/tokenizer.json\"" --set "data.validation=\"$tmp/docs_val\""
          --set "stages.0.mixture={\"$tmp/docs_train\" = 1.0}" --set "stages.1.mixture={\"$tmp/docs_train\" = 1.0}")

# A process that keeps one core busy for $1 seconds (the neighbour a shared machine has); its pid in $neighbour.
busy() {
  timeout "$1" bash -c 'while :; do :; done' &
  neighbour=$!
}
# Whether two runs' last checkpoints hold the same model and optimizer state, byte for byte.
same_checkpoint() {
  local a=$1/checkpoints/$(cat "$1/checkpoints/latest") b=$2/checkpoints/$(cat "$2/checkpoints/latest")
  cmp -s "$a/model.safetensors" "$b/model.safetensors" && for f in "$a"/optimizer-*.safetensors; do
    cmp -s "$f" "$b/$(basename "$f")" || return 1
  done
}

for precision in fp32 bf16; do
  run=("$zaya" train "$configs/tiny.toml" "${set_data[@]}" --set "run.precision=\"$precision\"")
  "${run[@]}" --run-dir "$tmp/$precision-quiet" > "$tmp/$precision-quiet.log" 2>&1 \
    || { fail "$precision: the quiet run"; tail -3 "$tmp/$precision-quiet.log"; continue; }
  # A neighbour from the start, then one that comes in the middle of the run.
  busy 60
  "${run[@]}" --run-dir "$tmp/$precision-busy" > "$tmp/$precision-busy.log" 2>&1
  kill $neighbour
  "${run[@]}" --run-dir "$tmp/$precision-later" > "$tmp/$precision-later.log" 2>&1 &
  pid=$!
  sleep 1
  busy 60
  wait $pid
  kill $neighbour
  "${run[@]}" --run-dir "$tmp/$precision-one" --set run.threads=1 > "$tmp/$precision-one.log" 2>&1
  for other in busy later one; do
    if same_checkpoint "$tmp/$precision-quiet" "$tmp/$precision-$other"; then
      ok "$precision: the $other run's checkpoint is byte-identical to the quiet run's"
    else
      fail "$precision: the $other run's checkpoint differs from the quiet run's"
      tail -3 "$tmp/$precision-$other.log"
    fi
  done
  grep -q "another process holds a core" "$tmp/$precision-busy.log" \
    && ok "$precision: the governor took a thread beside the neighbour" \
    || echo "note: $precision: the governor kept its threads beside the neighbour (a machine with cores to spare)"
done

# The demo's config, shortened, beside a neighbour from before its start (its GEMM rate measured while busy).
busy 300
"$zaya" train "$configs/small.toml" "${set_data[@]}" --set stages.0.tokens=65536 --set stages.1.tokens=16384 \
  --set stages.2.tokens=16384 --set "stages.2.mixture={\"$tmp/docs_train\" = 1.0}" --set log.every_steps=1 \
  --set log.console_seconds=0.001 --set eval.every_steps=0 --set sample.every_steps=0 --run-dir "$tmp/small" \
  > "$tmp/small.log" 2>&1
code=$?
kill $neighbour
highest_logged=$(grep -o 'MFU [0-9.]*%' "$tmp/small.log" | tr -d 'MFU %' | sort -g | tail -1)
highest_metric=$(grep '"type":"train"' "$tmp/small/metrics.jsonl" | grep -o '"mfu":[-0-9.e]*' | cut -d: -f2 | sort -g | tail -1)
steps=$(grep -c '"type":"train"' "$tmp/small/metrics.jsonl")
if [ $code -eq 0 ] && [ "$steps" -gt 0 ] && [ -n "$highest_logged" ] \
   && awk -v l="$highest_logged" -v m="$highest_metric" 'BEGIN { exit !(l <= 100 && m <= 1) }'; then
  ok "small beside a busy process: $steps steps, MFU at most $highest_logged% in the log, $highest_metric in metrics.jsonl"
else
  fail "small beside a busy process: exit $code, $steps steps, highest MFU $highest_logged% logged, $highest_metric recorded"
  tail -5 "$tmp/small.log"
fi

report
