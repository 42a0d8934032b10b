#!/usr/bin/env bash
# zaya against transformers' ZayaForCausalLM: forward+backward tokens/s on the same weights, inputs' shape
# and thread count, in one run: zaya in fp32 and bf16, transformers in fp32 and under bf16 autocast. Needs
# the reference venv (tools/reference/setup_venv.sh).
# Usage: bench/compare_step.sh [PRESET] [BATCH] [SEQ] [THREADS] [STEPS]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
preset=${1:-small} batch=${2:-16} seq=${3:-512} threads=${4:-$(nproc)} steps=${5:-5}
zaya=$root/build/src/zaya
python=$root/tools/reference/.venv/bin/python
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$zaya" init --preset "$preset" --out "$work/model" --seed 1 > /dev/null
zaya_step() {
  "$zaya" --threads "$threads" bench step --model "$work/model" --batch "$batch" --seq "$seq" --steps "$steps" \
    --precision "$1" --json
}
peer_step() {
  OMP_NUM_THREADS=$threads "$python" "$root/bench/transformers_step.py" --model "$work/model" --batch "$batch" \
    --seq "$seq" --steps "$steps" --threads "$threads" "$@"
}
zaya_fp32=$(zaya_step fp32)
zaya_bf16=$(zaya_step bf16)
peer_fp32=$(peer_step)
peer_bf16=$(peer_step --autocast)
printf '%s\n' "zaya fp32:                  $zaya_fp32" "zaya bf16:                  $zaya_bf16" \
  "transformers fp32:          $peer_fp32" "transformers bf16 autocast: $peer_bf16"
"$python" - "$zaya_fp32" "$zaya_bf16" "$peer_fp32" "$peer_bf16" <<'PY'
import json, sys
zf, zb, pf, pb = (json.loads(a) for a in sys.argv[1:])
rate = lambda r: r["tokens_per_second"]
print(f"tokens/s: zaya fp32 {rate(zf):.0f}, zaya bf16 {rate(zb):.0f}, transformers fp32 {rate(pf):.0f}, "
      f"transformers bf16 autocast {rate(pb):.0f}")
print(f"zaya bf16 / zaya fp32 {rate(zb) / rate(zf):.2f}x; zaya bf16 / transformers fp32 {rate(zb) / rate(pf):.2f}x; "
      f"zaya bf16 / transformers autocast {rate(zb) / rate(pb):.2f}x; zaya fp32 / transformers fp32 "
      f"{rate(zf) / rate(pf):.2f}x")
print(f"MFU: zaya fp32 {100 * zf['mfu']:.1f}% of {zf['gemm_flops'] / 1e9:.0f} GFLOP/s sgemm; zaya bf16 "
      f"{100 * zb['mfu']:.1f}% of {zb['gemm_flops'] / 1e9:.0f} GFLOP/s bf16 GEMM")
PY
