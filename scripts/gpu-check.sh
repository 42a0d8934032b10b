#!/usr/bin/env bash
# What a machine with a GPU checks, in one run that fits a short loan of one: the GPU suite, every op against
# the CPU, one-GPU training of configs/small.toml with the NCCL communicator of one rank, two ranks sharing
# the GPU through the staged communicator against one process, and the step benchmarks (medium; a zaya1-base
# layer at 8 x 4096, with each op timed on its own to set beside docs/ARCHITECTURE.md's table of its costs,
# and at 16 x 512). Each part prints its result; the script ends with a summary and exits
# 1 when any part failed. `emulated` runs the same parts on the GPU emulator (zaya-emulated) at small sizes:
# how this script is checked on machines without a GPU.
# Usage: scripts/gpu-check.sh [cuda|emulated] [BUILD_DIR]    (cuda: builds BUILD_DIR, default build-gpu)
set -u
device=${1:-cuda}
build=${2:-build-gpu}
root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$root/tests/integration/report.sh"
source "$root/tests/integration/compare_runs.sh"
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
mpirun=(timeout 600 mpirun --allow-run-as-root)

case "$device" in
  cuda)
    cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DZAYA_GPU=cuda > "$tmp/cmake.log" 2>&1 \
      && cmake --build "$build" --target zaya zaya_gpu_cuda_tests compare_tensors > "$tmp/build.log" 2>&1 \
      || { tail -20 "$tmp/cmake.log" "$tmp/build.log"; echo "FAIL: the CUDA build"; exit 1; }
    zaya="$build/src/zaya" gpu_tests=("$build/tests/zaya_gpu_cuda_tests")
    medium=(--preset medium) layer=(--preset zaya1-base --layers 1) peak=(--peak-tflops 989) collectives=nccl
    big=(--batch 8 --seq 4096 --profile) small=(--batch 16 --seq 512) stages=(700000 300000 100000)
    corpus=(/usr/share/doc/python3.11/html/_sources/library) run=() ;;
  emulated)
    zaya="$build/src/zaya-emulated" gpu_tests=("$build/tests/zaya_gpu_emulated_tests" --gtest_filter='GpuModel.*')
    medium=(--preset tiny --batch 2 --seq 32) layer=(--preset tiny --layers 1) peak=() collectives=auto
    big=(--batch 1 --seq 64 --profile) small=(--batch 2 --seq 32) stages=(8192 4096 4096)
    corpus=(/usr/share/doc/python3.11/html/_sources/library/[a-c]*.rst.txt)
    run=(--set 'model.preset="tiny"' --set batch.micro_batch=2 --set batch.start_sequences=4
         --set batch.sequences=4) ;;
  *) echo "usage: scripts/gpu-check.sh [cuda|emulated] [BUILD_DIR]"; exit 2 ;;
esac
compare="$build/tests/compare_tensors"
on=(--set "run.device=\"$device\"")

# The GPU suite: every kernel, the whole model and training steps against the CPU.
"${gpu_tests[@]}" > "$tmp/suite.log" 2>&1 && ok "the GPU suite: $(grep -o 'PASSED.*' "$tmp/suite.log")" \
  || { fail "the GPU suite"; grep -E "FAILED|Failure" "$tmp/suite.log" | head -20; }
"$zaya" bench ops --device "$device" > "$tmp/ops.log" 2>&1 && ok "every op against the CPU" \
  || fail "bench ops"
cat "$tmp/ops.log"

# configs/small.toml's three stages, cut short, on the Python documentation (as the demo prepares it).
mkdir -p "$tmp/corpus" && cp -r "${corpus[@]}" "$tmp/corpus/"
"$zaya" tokenizer train --input "$tmp/corpus" --vocab-size 4096 --output "$tmp/tokenizer.json" > "$tmp/data.log" 2>&1 \
  && "$zaya" prepare --tokenizer "$tmp/tokenizer.json" --input "$tmp/corpus" --output "$tmp/docs" \
     --val-fraction 0.02 >> "$tmp/data.log" 2>&1 || { fail "data"; tail -3 "$tmp/data.log"; }
args=(train "$root/configs/small.toml" --set "data.tokenizer=\"$tmp/tokenizer.json\""
      --set "data.validation=\"$tmp/docs_val\"" --set 'run.precision="bf16"' "${run[@]}")
for s in 0 1 2; do
  args+=(--set "stages.$s.mixture={\"$tmp/docs_train\" = 1.0}" --set "stages.$s.tokens=${stages[$s]}")
done
"${mpirun[@]}" -np 1 "$zaya" "${args[@]}" "${on[@]}" --set "run.communicator=\"$collectives\"" \
  --run-dir "$tmp/nccl" > "$tmp/nccl.log" 2>&1 && grep -q "finished at step" "$tmp/nccl.log" \
  && ok "small.toml on one GPU, $collectives communicator of one rank: $(grep -o 'finished at step.*' "$tmp/nccl.log")" \
  || { fail "small.toml on one GPU with the $collectives communicator"; tail -5 "$tmp/nccl.log"; }
grep -E "^device|collectives|stage .* \| step" "$tmp/nccl.log" | tail -4

# Two ranks on the one GPU, staged through host memory, against one process: data parallel sums in another
# order, so bf16 runs agree to bf16's resolution (as at 2 CPU ranks), not to the bit.
"${mpirun[@]}" -np 2 "$zaya" "${args[@]}" "${on[@]}" --set 'run.communicator="mpi"' --run-dir "$tmp/two" \
  > "$tmp/two.log" 2>&1 && grep -q "collectives: mpi, staged" "$tmp/two.log" \
  && ok "2 ranks on one GPU, staged" || { fail "2 ranks on one GPU, staged"; tail -5 "$tmp/two.log"; }
out=$(BOUND=1e-2 same_losses "$tmp/nccl" "$tmp/two") && ok "their losses: $out (bound 1e-2)" \
  || fail "their losses: $out"

# The step's speed: medium, and one zaya1-base layer at ZAYA1's sequence length and at 16 x 512.
for bench in "${medium[*]}" "${layer[*]} ${big[*]}" "${layer[*]} ${small[*]}"; do
  read -ra options <<<"$bench"
  "$zaya" bench step --device "$device" "${options[@]}" "${peak[@]}" --steps 3 > "$tmp/bench.log" 2>&1 \
    && ok "bench step $bench" || { fail "bench step $bench"; tail -3 "$tmp/bench.log"; }
  cat "$tmp/bench.log"
done
report
