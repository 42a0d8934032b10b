#!/usr/bin/env bash
# zaya against transformers' ZayaForCausalLM: forward+backward tokens/s on the same weights, inputs' shape
# and thread count, in one run. Needs the reference venv (tools/reference/setup_venv.sh).
# Usage: bench/compare_step.sh [PRESET] [BATCH] [SEQ] [THREADS] [STEPS]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
preset=${1:-small} batch=${2:-16} seq=${3:-512} threads=${4:-$(nproc)} steps=${5:-5}
zaya=$root/build/src/zaya
python=$root/tools/reference/.venv/bin/python
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$zaya" init --preset "$preset" --out "$work/model" --seed 1 > /dev/null
ours=$("$zaya" --threads "$threads" bench step --model "$work/model" --batch "$batch" --seq "$seq" --steps "$steps" --json)
peer=$(OMP_NUM_THREADS=$threads "$python" "$root/bench/transformers_step.py" --model "$work/model" --batch "$batch" \
  --seq "$seq" --steps "$steps" --threads "$threads")
echo "zaya:         $ours"
echo "transformers: $peer"
"$python" - "$ours" "$peer" <<'PY'
import json, sys
ours, peer = json.loads(sys.argv[1]), json.loads(sys.argv[2])
print(f"zaya {ours['tokens_per_second']:.0f} tokens/s, transformers {peer['tokens_per_second']:.0f} tokens/s: "
      f"{ours['tokens_per_second'] / peer['tokens_per_second']:.2f}x; zaya MFU {100 * ours['mfu']:.1f}% "
      f"of {ours['gemm_flops'] / 1e9:.0f} GFLOP/s sgemm")
PY
