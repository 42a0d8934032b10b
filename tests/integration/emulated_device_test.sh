#!/usr/bin/env bash
# Whole commands on the GPU backend, through the emulator (zaya-emulated, run.device / --device "emulated"):
# a forward pass and a training run of the tiny model against the CPU's (zaya), that run resumed on the
# CPU, the step benchmark, and the emulated device's refusals. What the GPU unit tests check op by op, here as a user runs it.
# Usage: emulated_device_test.sh ZAYA_BINARY ZAYA_EMULATED_BINARY COMPARE_TENSORS_BINARY CONFIGS_DIR FIXTURES_DIR
set -u
zaya=$1 emulated=$2 compare=$3 configs=$4 fixtures=$5
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$(dirname "$0")/report.sh"

# A forward pass with gradients: logits, loss and every gradient as the CPU computes them (f32: a few ulps
# per op, compounded over two layers; the GPU unit tests' bounds).
model="$fixtures/model/odd"
"$zaya" forward --model "$model" --input "$model/reference.safetensors" --output "$tmp/cpu.safetensors" --grads \
  --device cpu > /dev/null 2>&1 || fail "forward on the CPU"
out=$("$emulated" forward --model "$model" --input "$model/reference.safetensors" --output "$tmp/gpu.safetensors" \
  --grads --device emulated 2>&1) && ok "forward on the emulated GPU" || { fail "forward on the emulated GPU"; echo "$out" | tail -3; }
out=$("$compare" "$tmp/gpu.safetensors" "$tmp/cpu.safetensors" 1e-4) && ok "its logits and gradients: $out" \
  || fail "its logits and gradients: $out"

# The tiny run on each device: the emulated one fails at step 13 (an injected fault; it saves the last step
# it finished) and resumes on the CPU (the files are the same on every device). Its losses are the CPU run's to
# 1e-5 and its final weights to 1e-4: the GPU sums in other orders, and the routes stay the CPU's.
source "$(dirname "$0")/tiny_run.sh"
"$zaya" "${args[@]}" --run-dir "$tmp/cpu" > "$tmp/cpu.log" 2>&1 || { fail "train on the CPU"; tail -3 "$tmp/cpu.log"; }
"$emulated" "${args[@]}" --set 'run.device="emulated"' --set debug.fail_rank=0 --set debug.fail_step=13 \
  --run-dir "$tmp/gpu" > "$tmp/gpu.log" 2>&1
grep -q "emulated: the GPU emulator" "$tmp/gpu.log" && grep -q "injected failure at step 13" "$tmp/gpu.log" \
  && ok "train on the emulated GPU to step 13" || { fail "train on the emulated GPU"; tail -3 "$tmp/gpu.log"; }
"$zaya" "${args[@]}" --run-dir "$tmp/gpu" > "$tmp/resume.log" 2>&1 \
  && from=$(grep -o "resuming .*checkpoints/step_[0-9]*" "$tmp/resume.log") && ok "its checkpoint resumes on the CPU (${from##*/})" \
  || { fail "its checkpoint resumes on the CPU"; grep -m3 "resum\|error" "$tmp/resume.log"; }
out=$(same_losses "$tmp/cpu" "$tmp/gpu") && ok "its losses: $out" || fail "its losses: $out"
out=$("$compare" "$(final "$tmp/gpu")" "$(final "$tmp/cpu")" 1e-4) && ok "its weights: $out" || fail "its weights: $out"

check "bench step on the emulated GPU" 0 "emulated: the GPU emulator" -- \
  "$emulated" bench step --device emulated --preset tiny --batch 1 --seq 32 --steps 1
# The backend counts every read of a device value: one per step (the experts' products size themselves on
# the device).
check "bench step counts its host reads: 1" 0 "host reads per step (forward+backward): 1 " -- \
  "$emulated" bench step --device emulated --preset tiny --batch 1 --seq 32 --steps 1
check "generate on the emulated GPU: refused, naming what it lacks" 1 \
  "field '--device': the emulated backend cannot run decoding and scoring" -- \
  "$emulated" generate --model "$model" --tokenizer "$fixtures/tokenizer/byte_level.json" --prompt x --device emulated
check "zaya itself has no emulated device" 1 "field '--device'" -- \
  "$zaya" bench step --device emulated --preset tiny --batch 1 --seq 32 --steps 1
report
