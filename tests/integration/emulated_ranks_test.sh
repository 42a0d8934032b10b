#!/usr/bin/env bash
# Ranks on GPUs, through the emulator: each rank of an MPI job runs the GPU backend (zaya-emulated,
# run.device "emulated") and moves its gradients, parameters and expert rows with the staged communicator
# (device memory -> host -> MPI -> device; the emulator faults on any other access to its memory). Data
# parallel at 2 ranks, expert parallel 2, context parallel 2 (each sequence split over the 2 GPUs), and 4
# ranks as 2 x 2, each against one CPU process; bf16 at 2
# ranks against one; a run saved by 4 emulated ranks resumed on 2 CPU ranks, and one saved by 2 CPU ranks
# resumed on 4 emulated ones; nccl asked for where there is none.
# Usage: emulated_ranks_test.sh ZAYA_BINARY ZAYA_EMULATED_BINARY COMPARE_TENSORS_BINARY CONFIGS_DIR
set -u
zaya=$1 emulated=$2 compare=$3 configs=$4
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$(dirname "$0")/report.sh"
command -v mpirun > /dev/null || { echo "FAIL: mpirun is missing (scripts/setup.sh installs openmpi-bin)"; exit 1; }
# Ranks that wait yield the cores: the emulated ranks compute on the CPU, four of them on this machine's few.
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_mpi_yield_when_idle=1
mpirun=(timeout 300 mpirun --allow-run-as-root)

source "$(dirname "$0")/tiny_run.sh"
# The tiny run cut to 10 steps (8 of stage 1, 2 of stage 2), checkpoints every 3: the emulator is slow. A
# checkpoint is written while the next steps run, and one starts only once the last is published: a job
# that dies at step 8 holds step 3's for sure, and step 6's if its write had finished.
args+=(--set stages.0.tokens=8192 --set stages.1.tokens=4096 --set checkpoint.every_steps=3)
gpu=(--set 'run.device="emulated"')

"$zaya" "${args[@]}" --run-dir "$tmp/one" > "$tmp/one.log" 2>&1 || { fail "one CPU process"; tail -5 "$tmp/one.log"; }
# The run in $1 ends as the one process did: its losses and final weights to 1e-5.
ends_as_one() {
  local out
  out=$(same_losses "$tmp/one" "$1") && ok "their losses: $out" || fail "their losses: $out"
  out=$("$compare" "$(final "$1")" "$(final "$tmp/one")" 1e-5) && ok "their weights: $out" \
    || fail "their weights: $out"
}

# fp32: the emulated ranks' sums are the CPU's to float rounding (1e-5 in loss and weights, as at 2 CPU ranks).
for layout in "2 1 1" "2 2 1" "2 1 2"; do
  read -r n ep cp <<<"$layout"
  run="$tmp/gpu$n-ep$ep-cp$cp"
  "${mpirun[@]}" -np $n "$emulated" "${args[@]}" "${gpu[@]}" --set run.expert_parallel=$ep \
    --set run.context_parallel=$cp --run-dir "$run" > "$run.log" 2>&1 \
    && grep -q "rank 1 on .*: emulated: the GPU emulator" "$run.log" \
    && grep -q "collectives: mpi, staged through host memory (nccl: the emulated backend has neither" "$run.log" \
    && ok "$n emulated GPU ranks, expert groups of $ep, context groups of $cp, train (each rank's GPU and the collectives said)" \
    || { fail "$n emulated GPU ranks, expert groups of $ep, context groups of $cp"; tail -5 "$run.log"; }
  out=$(same_losses "$tmp/one" "$run") && [ "$(losses "$run" | wc -l)" -eq 10 ] \
    && ok "losses: $out" || fail "losses: $out"
  out=$(same_losses "$tmp/one" "$run" eval) && ok "evaluation: $out" || fail "evaluation: $out"
  out=$("$compare" "$(final "$run")" "$(final "$tmp/one")" 1e-5) && ok "weights: $out" || fail "weights: $out"
  [ -n "$(sample "$tmp/one")" ] && [ "$(sample "$run")" = "$(sample "$tmp/one")" ] && ok "sample" \
    || fail "sample: $(sample "$run") vs $(sample "$tmp/one")"
done

# 4 emulated ranks as 2 data-parallel groups of 2 expert-parallel ones fail at step 8; the run resumes on 2
# CPU ranks (data parallel alone), and ends as one process does.
"${mpirun[@]}" -np 4 "$emulated" "${args[@]}" "${gpu[@]}" --set run.expert_parallel=2 --set debug.fail_rank=3 \
  --set debug.fail_step=8 --run-dir "$tmp/there" > "$tmp/there.log" 2>&1
grep -q "error on rank 3 of 4: .*injected failure at step 8" "$tmp/there.log" \
  && "${mpirun[@]}" -np 2 "$zaya" "${args[@]}" --run-dir "$tmp/there" > "$tmp/there-resume.log" 2>&1 \
  && grep -q "resuming .*checkpoints/step_[36]" "$tmp/there-resume.log" \
  && ok "4 emulated GPU ranks (2 x 2) save, 2 CPU ranks resume" \
  || { fail "4 emulated GPU ranks, then 2 CPU ranks"; tail -3 "$tmp/there.log" "$tmp/there-resume.log"; }
ends_as_one "$tmp/there"

# And back: 2 CPU ranks fail at step 8; 4 emulated ranks (2 x 2) resume.
"${mpirun[@]}" -np 2 "$zaya" "${args[@]}" --set debug.fail_rank=0 --set debug.fail_step=8 --run-dir "$tmp/back" \
  > "$tmp/back.log" 2>&1
grep -q "injected failure at step 8" "$tmp/back.log" \
  && "${mpirun[@]}" -np 4 "$emulated" "${args[@]}" "${gpu[@]}" --set run.expert_parallel=2 --run-dir "$tmp/back" \
    > "$tmp/back-resume.log" 2>&1 \
  && grep -q "resuming .*checkpoints/step_[36]" "$tmp/back-resume.log" \
  && ok "2 CPU ranks save, 4 emulated GPU ranks (2 x 2) resume" \
  || { fail "2 CPU ranks, then 4 emulated GPU ranks"; tail -3 "$tmp/back.log" "$tmp/back-resume.log"; }
ends_as_one "$tmp/back"

# bf16: 2 emulated ranks against one emulated process. Only the order of the gradient sums differs, which
# bf16's 8-bit significand amplifies as at 2 CPU ranks (distributed_test.sh): 10 steps agree to 1e-3 in loss.
bf16=("${gpu[@]}" --set 'run.precision="bf16"')
"$emulated" "${args[@]}" "${bf16[@]}" --run-dir "$tmp/one-bf16" > "$tmp/one-bf16.log" 2>&1 \
  && "${mpirun[@]}" -np 2 "$emulated" "${args[@]}" "${bf16[@]}" --run-dir "$tmp/two-bf16" > "$tmp/two-bf16.log" 2>&1 \
  || { fail "bf16 runs"; tail -5 "$tmp/one-bf16.log" "$tmp/two-bf16.log"; }
out=$(BOUND=1e-3 same_losses "$tmp/one-bf16" "$tmp/two-bf16") && ok "bf16 losses at 2 emulated GPU ranks: $out" \
  || fail "bf16 losses at 2 emulated GPU ranks: $out"

# NCCL asked for where it cannot run: before anything trains, in one line naming the field and why.
out=$("${mpirun[@]}" -np 2 "$emulated" "${args[@]}" "${gpu[@]}" --set 'run.communicator="nccl"' \
  --run-dir "$tmp/nccl" 2>&1)
[ $? -ne 0 ] && grep -q "field 'run.communicator': nccl cannot run here: the emulated backend has neither NCCL nor RCCL" <<<"$out" \
  && ! grep -q "step 1 " <<<"$out" && ok "nccl without NCCL: refused, saying why" || fail "nccl without NCCL: $out"
report
