#!/usr/bin/env bash
# Context parallelism against data parallelism on 2 ranks of this machine, side by side at the same global
# batch: the `small` preset trains 4 sequences of 8192 tokens per step, micro-batches of 2 sequences,
# either as 2 data-parallel ranks (each its own 2 sequences whole) or as one group of 2 ranks sharing each
# sequence (run.context_parallel = 2: each rank half of all 4). Reported: median tokens/s and step time of
# each (steps after the first two), and what the split's exchanges cost: their seconds per step (waiting for
# the other rank included) and the bytes a rank sends in them, against the model's own step.
# Usage: bench/context_parallel.sh [STEPS]   (needs runs/data from `make demo`, or builds it)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
steps=${1:-6}
zaya=$root/build/src/zaya
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
threads=$(($(nproc) / 2 > 0 ? $(nproc) / 2 : 1))
source "$root/bench/demo_data.sh"
cat > "$work/bench.toml" <<TOML
[model]
preset = "small"
router_init = "fan_in"
[data]
tokenizer = "$data/tokenizer.json"
[[stages]]
name = "bench"
tokens = $((steps * 4 * 8192))
seq_len = 8192
mixture = { "$data/python_docs_train" = 1.0 }
[batch]
micro_batch = 2
sequences = 4
[run]
precision = "fp32"
threads = $threads
[checkpoint]
every_steps = 0
every_minutes = 0
[sample]
max_new_tokens = 0
[log]
tensorboard = false
TOML

# Medians over steps 3.. of metrics.jsonl: tokens/s, step seconds, context exchange seconds, bytes.
medians() {
  grep '"type":"train"' "$1/metrics.jsonl" | tail -n +3 | python3 -c '
import json, statistics, sys
rows = [json.loads(line) for line in sys.stdin]
m = lambda key: statistics.median(r.get(key, 0) for r in rows)
print(m("tokens_per_second"), m("step_seconds"), m("context_exchange_seconds"), m("communication_bytes"))'
}
run() {  # name, --set arguments
  local name=$1
  shift
  mpirun --allow-run-as-root -np 2 "$zaya" train "$work/bench.toml" "$@" --run-dir "$work/$name" > "$work/$name.log"
  medians "$work/$name"
}

read -r dp_rate dp_step _ dp_bytes <<<"$(run dp)"
read -r cp_rate cp_step cp_exchange cp_bytes <<<"$(run cp --set run.context_parallel=2)"
python3 - "$dp_rate" "$dp_step" "$dp_bytes" "$cp_rate" "$cp_step" "$cp_exchange" "$cp_bytes" "$threads" <<'PY'
import sys
dp_rate, dp_step, dp_bytes, cp_rate, cp_step, cp_exchange, cp_bytes, threads = map(float, sys.argv[1:])
print(f"small preset, fp32, 4 x 8192 tokens per step, micro-batches of 2, 2 ranks of {int(threads)} threads")
print(f"  data parallel (C = 1):     {dp_rate:8.0f} tokens/s, {dp_step:.2f} s/step, {dp_bytes / 1e6:.1f} MB to collectives")
print(f"  context parallel (C = 2):  {cp_rate:8.0f} tokens/s ({cp_rate / dp_rate:.2f}x), {cp_step:.2f} s/step, "
      f"{cp_bytes / 1e6:.1f} MB to collectives")
print(f"  the split's exchanges: {cp_exchange:.2f} s per step ({100 * cp_exchange / cp_step:.1f}% of it), "
      f"{(cp_bytes - dp_bytes) / 1e6:.1f} MB more sent per rank than data parallelism's step")
PY
