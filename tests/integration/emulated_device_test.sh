#!/usr/bin/env bash
# Whole commands on the GPU backend, through the emulator (zaya-emulated, run.device / --device "emulated"):
# a forward pass and a training run of the tiny model against the CPU's (zaya), that run resumed on the
# CPU, the step benchmark, decoding and scoring (generate, eval, serve, bench decode), and a refusal. What the GPU unit tests check op by op, here as a user runs it.
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
# Decoding and scoring on the emulated GPU (its caches and logits in device memory): greedy generation writes
# the CPU's text, eval scores as the CPU does (log-likelihoods to 1e-5 relative), zaya serve answers the same
# greedy completion, bench decode runs.
"$zaya" init --preset tiny --out "$tmp/tiny" --seed 3 > /dev/null
"$zaya" tokenizer train --input "$fixtures/eval/text.txt" --vocab-size 300 --output "$tmp/tokenizer300.json" > /dev/null
cp "$tmp/tokenizer300.json" "$tmp/tiny/tokenizer.json"
generate=(generate --model "$tmp/tiny" --prompt "The cat" --max-new-tokens 24 --temperature 0)
cpu_text=$("$zaya" "${generate[@]}" --device cpu 2> /dev/null)
gpu_text=$("$emulated" "${generate[@]}" --device emulated 2> "$tmp/generate_gpu.log")
[ -n "$cpu_text" ] && [ "$gpu_text" = "$cpu_text" ] && ok "generate on the emulated GPU: the CPU's text" \
  || fail "generate on the emulated GPU: '$gpu_text', the CPU's '$cpu_text'"
eval_args=(eval --model "$tmp/tiny" --text "$fixtures/eval/text.txt" --task "$fixtures/eval/arc.jsonl" --limit 4)
"$zaya" "${eval_args[@]}" --device cpu --json "$tmp/eval_cpu.json" > /dev/null 2>&1
"$emulated" "${eval_args[@]}" --device emulated --json "$tmp/eval_gpu.json" > /dev/null 2>&1
out=$(python3 - "$tmp/eval_cpu.json" "$tmp/eval_gpu.json" <<'PY' 2>&1
import json, sys
def scores(path):
    d = json.load(open(path))
    out = [x for t in d["tasks"] for item in t["per_item"] for x in item["choice_loglikelihoods"]]
    return out + [t["loglikelihood"] for t in d["text"]]
cpu, gpu = scores(sys.argv[1]), scores(sys.argv[2])
worst = max(abs(a - b) / max(1.0, abs(a)) for a, b in zip(cpu, gpu))
print(f"{len(cpu)} log-likelihoods, largest relative difference {worst:.1e}")
sys.exit(0 if len(cpu) == len(gpu) == 17 and worst <= 1e-5 else 1)
PY
) && ok "eval on the emulated GPU: $out" || fail "eval on the emulated GPU: $out"
zaya=$emulated
source "$(dirname "$0")/serve_server.sh"
pids=()
cp -r "$tmp/tiny" "$tmp/model"
start_server serve_gpu --device emulated
if [ "$port" != 0 ]; then
  answer=$(curl -s --max-time 300 -H 'Content-Type: application/json' \
    -d '{"prompt": "The cat", "max_tokens": 24, "temperature": 0}' "http://127.0.0.1:$port/v1/completions")
  [ "$(grep -o '"text":"[^"]*"' <<< "$answer")" = "\"text\":\"${cpu_text#The cat}\"" ] \
    && ok "zaya serve on the emulated GPU: the CPU's greedy completion" \
    || fail "zaya serve on the emulated GPU: $answer, the CPU's '${cpu_text#The cat}'"
  kill "${pids[@]}" 2> /dev/null
  wait "${pids[@]}" 2> /dev/null
else
  fail "zaya serve on the emulated GPU did not start"
fi
zaya=$1
check "bench decode on the emulated GPU" 0 "tokens/s" -- \
  "$emulated" bench decode --device emulated --preset tiny --batch 2 --prompt 8 --new-tokens 4 --runs 1
check "zaya itself has no emulated device" 1 "field '--device'" -- \
  "$zaya" bench step --device emulated --preset tiny --batch 1 --seq 32 --steps 1
report
