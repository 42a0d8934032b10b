#!/usr/bin/env bash
# Training throughput at 1 and 2 ranks on this machine, and what data parallelism would ask of a network.
# The `small` preset trains a fixed batch of 32 x 512 tokens for STEPS steps: on one process with all the
# cores, then over MPI as 2 data-parallel ranks (gradients reduced in 1 MB buckets during the backward pass,
# and in one reduction after it) and as 2 expert-parallel ranks, with the cores shared out.
# Reported: median tokens/s, step time, time in collectives and bytes handed to them per step (steps after
# the first two). From the bytes per step at 2 ranks, per parameter, it works out what zaya1-base with data
# parallelism only (ZAYA1's own layout) moves per step over 2 nodes and the bandwidth that takes at ZAYA1's
# reported 2.5 s per step.
# Usage: bench/scale_out.sh [STEPS]   (needs runs/data from `make demo`, or builds it)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
steps=${1:-10}
zaya=$root/build/src/zaya
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
cores=$(nproc)
source "$root/bench/demo_data.sh"
cat > "$work/bench.toml" <<TOML
[model]
preset = "small"
router_init = "fan_in"
[data]
tokenizer = "$data/tokenizer.json"
[[stages]]
name = "bench"
tokens = $((steps * 32 * 512))
seq_len = 512
mixture = { "$data/python_docs_train" = 1.0 }
[batch]
micro_batch = 8
sequences = 32
[checkpoint]
every_steps = 0
every_minutes = 0
[sample]
max_new_tokens = 0
[log]
tensorboard = false
TOML

# Medians over steps 3.. of metrics.jsonl: tokens/s, step seconds, communication seconds and bytes, and the
# gradient reduction's part of those seconds.
medians() {
  grep '"type":"train"' "$1/metrics.jsonl" | tail -n +3 | python3 -c '
import json, statistics, sys
rows = [json.loads(line) for line in sys.stdin]
m = lambda key: statistics.median(r.get(key, 0) for r in rows)
print(m("tokens_per_second"), m("step_seconds"), m("communication_seconds"), m("communication_bytes"),
      m("gradient_reduction_seconds"))'
}
run() {  # name, ranks, threads per rank, extra --set
  local name=$1 ranks=$2 threads=$3; shift 3
  if [ "$ranks" = 1 ]; then
    "$zaya" train "$work/bench.toml" --set run.threads=$threads "$@" --run-dir "$work/$name" > "$work/$name.log"
  else
    mpirun --allow-run-as-root -np "$ranks" "$zaya" train "$work/bench.toml" --set run.threads=$threads "$@" \
      --run-dir "$work/$name" > "$work/$name.log"
  fi
  medians "$work/$name"
}

read -r one_rate one_step _ _ _ <<<"$(run one 1 "$cores")"
half=$((cores / 2 > 0 ? cores / 2 : 1))
read -r dp_rate dp_step dp_comm dp_bytes dp_grad <<<"$(run dp 2 $half --set run.gradient_bucket_mb=1)"
read -r after_rate after_step after_comm _ after_grad <<<"$(run after 2 $half --set run.gradient_bucket_mb=0)"
read -r ep_rate ep_step ep_comm ep_bytes _ <<<"$(run ep 2 $half --set run.expert_parallel=2)"
small=$("$zaya" info --preset small | sed -n 's/^  total  *\([0-9]*\).*/\1/p')
base=$("$zaya" info --preset zaya1-base | sed -n 's/^  total  *\([0-9]*\).*/\1/p')
python3 - "$one_rate" "$one_step" "$dp_rate" "$dp_step" "$dp_comm" "$dp_bytes" "$dp_grad" "$after_rate" \
  "$after_step" "$after_comm" "$after_grad" "$ep_rate" "$ep_step" "$ep_comm" "$ep_bytes" "$small" "$base" "$cores" <<'PY'
import sys
(one_rate, one_step, dp_rate, dp_step, dp_comm, dp_bytes, dp_grad, after_rate, after_step, after_comm, after_grad,
 ep_rate, ep_step, ep_comm, ep_bytes, small, base, cores) = map(float, sys.argv[1:])
print(f"small preset, 32 x 512 tokens per step, {int(cores)} cores")
print(f"  1 process, {int(cores)} threads:        {one_rate:8.0f} tokens/s, {one_step:.3f} s/step")
print(f"  2 data-parallel ranks:           {dp_rate:8.0f} tokens/s ({dp_rate / one_rate:.2f}x), {dp_step:.3f} s/step, "
      f"{dp_comm:.3f} s in collectives ({100 * dp_comm / dp_step:.1f}%), {dp_bytes / 1e6:.1f} MB handed to them; "
      f"1 MB gradient buckets reduced during the backward pass: {dp_grad:.4f} s of it")
print(f"    the same, reduced after it:    {after_rate:8.0f} tokens/s ({after_rate / one_rate:.2f}x), "
      f"{after_step:.3f} s/step, {after_comm:.3f} s in collectives ({100 * after_comm / after_step:.1f}%), "
      f"the gradient reduction {after_grad:.4f} s of it")
print(f"  2 expert-parallel ranks:         {ep_rate:8.0f} tokens/s ({ep_rate / one_rate:.2f}x), {ep_step:.3f} s/step, "
      f"{ep_comm:.3f} s in the step's collectives (the experts' all-to-alls are inside the compute), "
      f"{ep_bytes / 1e6:.1f} MB handed to them (each rank holds half of the experts, reduced by no other rank)")
per_param = dp_bytes / small  # bytes per parameter per step: reduce-scatter of f32 gradients + all-gather of f32 weights
step_bytes = per_param * base
# Over 2 nodes with a ring, each node sends (and receives) half of every collective's payload across the link.
link = step_bytes / 2
print(f"zaya1-base, data parallel only, f32 gradients and weights: {per_param:.1f} bytes per parameter per step "
      f"= {step_bytes / 1e9:.1f} GB handed to collectives per rank per step; over 2 nodes {link / 1e9:.1f} GB "
      f"cross the link each way per step: {8 * link / 2.5 / 1e9:.0f} Gb/s per node at 2.5 s/step "
      f"(ZAYA1's nodes have 8 x 400 Gb/s)")
PY
