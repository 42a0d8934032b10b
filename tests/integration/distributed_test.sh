#!/usr/bin/env bash
# Training over MPI on this machine (loopback): 2 data-parallel ranks, 2 expert-parallel ranks, 4 ranks as 2
# data-parallel groups of 2 expert-parallel ones, and context parallel layouts (each sequence split over 2
# or 4 ranks, with data and expert parallelism), each against one process with the same global batch
# (losses, evaluation, weights, sample); a rank that fails mid-run ending the job with its reason; a run
# saved at 2 ranks resumed at 1, an expert-parallel one saved at 2 resumed at 4, a context-parallel one
# saved split over 2 resumed whole and split over 4; ranks that disagree on the configuration.
# Usage: distributed_test.sh ZAYA_BINARY COMPARE_TENSORS_BINARY CONFIGS_DIR
set -u
zaya=$1 compare=$2 configs=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$(dirname "$0")/report.sh"
command -v mpirun > /dev/null || { echo "FAIL: mpirun is missing (scripts/setup.sh installs openmpi-bin)"; exit 1; }
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
mpirun=(timeout 300 mpirun --allow-run-as-root)

source "$(dirname "$0")/tiny_run.sh"

"$zaya" "${args[@]}" --run-dir "$tmp/one" > "$tmp/one.log" 2>&1 || { fail "one process"; tail -5 "$tmp/one.log"; }
# Data parallel with a gradient bucket per layer (reduced while the backward pass goes on); the other runs
# take the default bucket size, which holds the tiny model's layers in one.
"${mpirun[@]}" -np 2 "$zaya" "${args[@]}" --set run.gradient_bucket_mb=0.0001 --run-dir "$tmp/two" \
  > "$tmp/two.log" 2>&1 \
  && ok "2 ranks train" || { fail "2 ranks train"; tail -5 "$tmp/two.log"; }
grep -q "2 data-parallel ranks" "$tmp/two.log" && [ "$(grep -c '^starting' "$tmp/two.log")" = 1 ] \
  && ok "rank 0 alone reports" || fail "rank 0 alone reports"
out=$(same_losses "$tmp/one" "$tmp/two") && [ "$(losses "$tmp/two" | wc -l)" -ge 20 ] && ok "losses at 2 ranks: $out" \
  || fail "losses at 2 ranks: $out"
out=$("$compare" "$(final "$tmp/two")" "$(final "$tmp/one")" 1e-5) && ok "weights at 2 ranks: $out" \
  || fail "weights at 2 ranks: $out"

# bf16 (where the CPU has it): 2 data-parallel ranks against one process. Both runs are deterministic; they
# differ only in the order of the gradient sums, which bf16's 8-bit significand amplifies: 20 steps agree
# to 1e-3 in loss (measured: 3e-4). A rank with stale bf16 weights, or the wrong ones, lands far outside.
if "$zaya" bench step --preset tiny --batch 1 --seq 8 --steps 1 | grep -q "precision bf16"; then
  bf16=(--set 'run.precision="bf16"')
  "$zaya" "${args[@]}" "${bf16[@]}" --run-dir "$tmp/one-bf16" > "$tmp/one-bf16.log" 2>&1 \
    && "${mpirun[@]}" -np 2 "$zaya" "${args[@]}" "${bf16[@]}" --run-dir "$tmp/two-bf16" > "$tmp/two-bf16.log" 2>&1 \
    || { fail "bf16 runs"; tail -5 "$tmp/one-bf16.log" "$tmp/two-bf16.log"; }
  out=$(BOUND=1e-3 same_losses "$tmp/one-bf16" "$tmp/two-bf16") && ok "bf16 losses at 2 ranks: $out" \
    || fail "bf16 losses at 2 ranks: $out"
  # Context parallel in bf16: the same bound (the gradient sums' order differs as with data parallelism).
  "${mpirun[@]}" -np 2 "$zaya" "${args[@]}" "${bf16[@]}" --set run.context_parallel=2 --run-dir "$tmp/cp-bf16" \
    > "$tmp/cp-bf16.log" 2>&1 || { fail "bf16 context-parallel run"; tail -5 "$tmp/cp-bf16.log"; }
  out=$(BOUND=1e-3 same_losses "$tmp/one-bf16" "$tmp/cp-bf16") && ok "bf16 losses, context groups of 2: $out" \
    || fail "bf16 losses, context groups of 2: $out"
else
  echo "skipped: bf16 at 2 ranks (this CPU has neither AVX512-BF16 nor AMX)"
fi

# Expert parallel: 2 ranks sharing the experts, and 4 ranks as 2 data-parallel groups of 2. Each rank holds
# half of the experts; evaluation and the closing sample run over the expert group.
for layout in "2 2" "4 2"; do
  read -r n ep <<<"$layout"
  "${mpirun[@]}" -np $n "$zaya" "${args[@]}" --set run.expert_parallel=$ep --run-dir "$tmp/ep$n" > "$tmp/ep$n.log" 2>&1 \
    && held=$(grep -o "$n data-parallel ranks, experts shared by groups of $ep ([0-9]* of each layer's [0-9]*" "$tmp/ep$n.log") \
    && read -r mine all <<<"$(sed "s/.*(\([0-9]*\) of each layer's \([0-9]*\)/\1 \2/" <<<"$held")" \
    && [ $((mine * ep)) = "$all" ] \
    && ok "$n ranks, expert groups of $ep, train" || { fail "$n ranks, expert groups of $ep"; tail -5 "$tmp/ep$n.log"; }
  out=$(same_losses "$tmp/one" "$tmp/ep$n") && ok "losses at $n ranks, expert groups of $ep: $out" \
    || fail "losses at $n ranks, expert groups of $ep: $out"
  out=$(same_losses "$tmp/one" "$tmp/ep$n" eval) && ok "evaluation at $n ranks, expert groups of $ep: $out" \
    || fail "evaluation at $n ranks, expert groups of $ep: $out"
  out=$("$compare" "$(final "$tmp/ep$n")" "$(final "$tmp/one")" 1e-5) \
    && ok "weights at $n ranks, expert groups of $ep: $out" || fail "weights at $n ranks, expert groups of $ep: $out"
  [ -n "$(sample "$tmp/one")" ] && [ "$(sample "$tmp/ep$n")" = "$(sample "$tmp/one")" ] \
    && ok "sample at $n ranks, expert groups of $ep" \
    || fail "sample at $n ranks, expert groups of $ep: $(sample "$tmp/ep$n") vs $(sample "$tmp/one")"
done
# Context parallel: each sequence split over 2 ranks, 4 ranks as 2 data-parallel groups of 2, 4 ranks on one
# sequence (a query head each, two to a key-value head), and 2 groups of 2 sharing the experts too. The
# tiny model has a full and a sliding-window layer (64 keys: at the 128-token stage the window spans the
# split); the documents are packed into the sequences, so boundaries fall anywhere, the split's included.
# Losses agree to 1e-6, weights to 1e-5 relative (the gradient sums' order differs with the split).
for layout in "2 2 1" "4 2 1" "4 4 1" "4 2 2"; do
  read -r n cp ep <<<"$layout"
  name="$n ranks, context groups of $cp, expert groups of $ep"
  "${mpirun[@]}" -np $n "$zaya" "${args[@]}" --set run.context_parallel=$cp --set run.expert_parallel=$ep \
    --run-dir "$tmp/cp$n-$cp-$ep" > "$tmp/cp$n-$cp-$ep.log" 2>&1 \
    && grep -q "$((n / cp)) data-parallel ranks\? of $cp sharing each sequence (context parallel)" "$tmp/cp$n-$cp-$ep.log" \
    && ok "$name: train" || { fail "$name: train"; tail -5 "$tmp/cp$n-$cp-$ep.log"; }
  out=$(BOUND=1e-6 same_losses "$tmp/one" "$tmp/cp$n-$cp-$ep") && ok "$name: losses $out" || fail "$name: losses $out"
  out=$(BOUND=1e-6 same_losses "$tmp/one" "$tmp/cp$n-$cp-$ep" eval) && ok "$name: evaluation $out" \
    || fail "$name: evaluation $out"
  out=$("$compare" "$(final "$tmp/cp$n-$cp-$ep")" "$(final "$tmp/one")" 1e-5) && ok "$name: weights $out" \
    || fail "$name: weights $out"
  [ "$(sample "$tmp/cp$n-$cp-$ep")" = "$(sample "$tmp/one")" ] && ok "$name: sample" || fail "$name: sample"
done
out=$("${mpirun[@]}" -np 2 "$zaya" "${args[@]}" --set run.context_parallel=3 --run-dir "$tmp/cp3" 2>&1)
[ $? -ne 0 ] && grep -q "field 'run.context_parallel': context parallelism over 3 ranks needs a multiple of 3" <<<"$out" \
  && ok "context groups that do not divide the ranks" || fail "context groups that do not divide the ranks: $out"
# Saved with each sequence split over 2 ranks, resumed whole on one process and split over 4 ranks: both
# end where the one-process run did (the sums' order differs with the split: within the same 1e-5).
"${mpirun[@]}" -np 2 "$zaya" "${args[@]}" --set checkpoint.every_steps=5 --set run.context_parallel=2 \
  --set debug.fail_rank=1 --set debug.fail_step=13 --run-dir "$tmp/cp_fault" > "$tmp/cp_fault.log" 2>&1
cp -r "$tmp/cp_fault" "$tmp/cp_fault4"
for resumed in "1 1 cp_fault" "4 4 cp_fault4"; do
  read -r n cp dir <<<"$resumed"
  "${mpirun[@]}" -np $n "$zaya" "${args[@]}" --set checkpoint.every_steps=5 --set run.context_parallel=$cp \
    --run-dir "$tmp/$dir" > "$tmp/$dir.resume.log" 2>&1 \
    && from=$(grep -o "resuming .*step_\(5\|10\)" "$tmp/$dir.resume.log") \
    && ok "context groups: saved split over 2, resumed over $cp (${from##*/})" \
    || { fail "context groups: resume over $cp"; tail -5 "$tmp/$dir.resume.log"; }
  out=$(same_losses "$tmp/$dir" "$tmp/one") && ok "losses after that resume: $out" || fail "losses after that resume: $out"
  out=$("$compare" "$(final "$tmp/$dir")" "$(final "$tmp/one")" 1e-5) && ok "weights after that resume: $out" \
    || fail "weights after that resume: $out"
done

# Whether every .safetensors file of model directory $1 is byte for byte the one of $2.
same_tensor_files() {
  local tensors
  for tensors in "$1"/*.safetensors; do cmp -s "$tensors" "$2/${tensors##*/}" || return 1; done
}
# Recompute (each whole layer again in the backward pass, its expert exchange included) changes no bit: the
# 2-rank expert-parallel run again, its final weights and optimizer state byte for byte the same.
"${mpirun[@]}" -np 2 "$zaya" "${args[@]}" --set run.expert_parallel=2 --set 'run.recompute="layer"' \
  --run-dir "$tmp/ep2-recompute" > "$tmp/ep2-recompute.log" 2>&1 \
  && same_tensor_files "$(final "$tmp/ep2")" "$(final "$tmp/ep2-recompute")" \
  && ok "recompute at 2 ranks, expert groups of 2: byte-identical weights and optimizer state" \
  || { fail "recompute at 2 ranks, expert groups of 2"; tail -3 "$tmp/ep2-recompute.log"; }
out=$("${mpirun[@]}" -np 2 "$zaya" "${args[@]}" --set run.expert_parallel=3 --run-dir "$tmp/ep3" 2>&1)
[ $? -ne 0 ] && grep -q "run.expert_parallel" <<<"$out" && ok "expert groups that do not divide the ranks" \
  || fail "expert groups that do not divide the ranks: $out"

# A rank failing at step 13 ends the job within seconds, with its reason; the run resumes at 1 rank from
# its last checkpoint and ends where the 2-rank run ended. Checkpoints are written in the background, so
# the one of step 10 may still be in flight when the job dies (then it is lost, as it would be in a real
# failure); the one of step 5 is published before step 11 starts (a write starts only after the last one).
fault_args=("${args[@]}" --set checkpoint.every_steps=5)
start=$(date +%s)
"${mpirun[@]}" -np 2 "$zaya" "${fault_args[@]}" --set debug.fail_rank=1 --set debug.fail_step=13 \
  --run-dir "$tmp/fault" > "$tmp/fault.log" 2>&1
code=$? elapsed=$(($(date +%s) - start))
[ $code -ne 0 ] && [ $code -ne 124 ] && [ $elapsed -lt 60 ] \
  && grep -q "error on rank 1 of 2: .*injected failure at step 13" "$tmp/fault.log" \
  && ok "a failing rank ends the job in ${elapsed}s with its reason" || { fail "failing rank (exit $code)"; tail -5 "$tmp/fault.log"; }
"$zaya" "${fault_args[@]}" --run-dir "$tmp/fault" > "$tmp/resume.log" 2>&1 \
  && from=$(grep -o "resuming .*step_\(5\|10\)" "$tmp/resume.log") \
  && ok "saved at 2 ranks, resumed at 1 (${from##*/})" || { fail "resume at 1"; tail -5 "$tmp/resume.log"; }
out=$(same_losses "$tmp/fault" "$tmp/two") && ok "losses after the resume: $out" || fail "losses after the resume: $out"
out=$("$compare" "$(final "$tmp/fault")" "$(final "$tmp/two")" 1e-5) && ok "weights after the resume: $out" \
  || fail "weights after the resume: $out"

# Expert parallel, saved at 2 ranks (each holding half of the experts and their optimizer state) and
# resumed at 4 ranks as 2 groups of 2, whose optimizer ranges differ: it ends where the one-process run did.
"${mpirun[@]}" -np 2 "$zaya" "${fault_args[@]}" --set run.expert_parallel=2 --set debug.fail_rank=0 \
  --set debug.fail_step=13 --run-dir "$tmp/ep_fault" > "$tmp/ep_fault.log" 2>&1
"${mpirun[@]}" -np 4 "$zaya" "${fault_args[@]}" --set run.expert_parallel=2 --run-dir "$tmp/ep_fault" \
  > "$tmp/ep_resume.log" 2>&1 \
  && from=$(grep -o "resuming .*step_\(5\|10\)" "$tmp/ep_resume.log") \
  && ok "expert groups: saved at 2 ranks, resumed at 4 (${from##*/})" || { fail "expert groups: resume at 4"; tail -5 "$tmp/ep_resume.log"; }
out=$(same_losses "$tmp/ep_fault" "$tmp/one") && ok "losses after that resume: $out" || fail "losses after that resume: $out"
out=$("$compare" "$(final "$tmp/ep_fault")" "$(final "$tmp/one")" 1e-5) && ok "weights after that resume: $out" \
  || fail "weights after that resume: $out"

# A rank killed outright (-9, no chance to say why) still ends the whole job within seconds, not a hang.
start=$(date +%s)
"${mpirun[@]}" -np 2 "$zaya" "${args[@]}" --set stages.0.tokens=4096000 --run-dir "$tmp/killed" \
  > "$tmp/killed.log" 2>&1 &
launcher=$!
victim=""
while [ -z "$victim" ] && kill -0 $launcher 2>/dev/null; do
  grep -q "step " "$tmp/killed.log" 2>/dev/null && victim=$(pgrep -f -n -- "--run-dir $tmp/killed" | grep -v "^$launcher$" | head -1)
  sleep 0.2
done
[ -n "$victim" ] && kill -9 "$victim"
wait $launcher
code=$? elapsed=$(($(date +%s) - start))
[ -n "$victim" ] && [ $code -ne 0 ] && [ $code -ne 124 ] && [ $elapsed -lt 60 ] \
  && ok "a rank killed with -9 ends the job (exit $code, ${elapsed}s)" || { fail "killed rank (exit $code)"; tail -5 "$tmp/killed.log"; }

# Ranks started with different configurations refuse, each saying why.
"${mpirun[@]}" -np 1 "$zaya" "${args[@]}" --run-dir "$tmp/split" : -np 1 "$zaya" "${args[@]}" --set run.seed=2 \
  --run-dir "$tmp/split" > "$tmp/split.log" 2>&1
[ $? -ne 0 ] && [ "$(grep -c 'ranks disagree on the run configuration' "$tmp/split.log")" = 2 ] \
  && ok "ranks that disagree on the configuration" || { fail "disagreeing ranks"; tail -5 "$tmp/split.log"; }

report
