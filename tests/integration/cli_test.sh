#!/usr/bin/env bash
# The command line as a user meets it: help, version, exit codes and one-line errors.
# Usage: cli_test.sh ZAYA_BINARY FIXTURES_DIR
set -u
zaya=$1 fixtures=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$(dirname "$0")/report.sh"

check "--version" 0 "zaya 0." -- "$zaya" --version
check "--help lists inspect" 0 "inspect" -- "$zaya" --help
check "inspect --help" 0 "safetensors" -- "$zaya" inspect --help
check "no command" 2 "zaya" -- "$zaya"
check "unknown command" 2 "unknown command 'frobnicate'" -- "$zaya" frobnicate
check "unknown flag" 2 "--bogus" -- "$zaya" inspect --bogus x
check "bad --threads" 2 "threads" -- "$zaya" --threads=-3 inspect x
check "inspect a file" 0 "bf16" -- "$zaya" inspect "$fixtures/io/python_written.safetensors"
check "inspect a sharded model" 0 "model.layers.2.mlp.experts.gate_up_proj" -- "$zaya" inspect "$fixtures/io/sharded_model"

printf '\x07\x00\x00\x00\x00\x00\x00\x00{"w":1}' > "$tmp/bad.safetensors"
check "malformed file" 1 "$tmp/bad.safetensors: tensor 'w'" -- "$zaya" inspect "$tmp/bad.safetensors"
check "missing file" 1 "cannot open" -- "$zaya" inspect "$tmp/none.safetensors"
lines=$("$zaya" inspect "$tmp/bad.safetensors" 2>&1 | wc -l)
[ "$lines" -eq 1 ] && ok "the error is one line" || fail "the error is $lines lines, want 1"

check "info zaya1-base" 0 "8303355728" -- "$zaya" info --preset zaya1-base
check "info needs one source" 2 "give a model (--preset, --config, --model) or --train-config" -- "$zaya" info
check "info bad preset" 1 "unknown preset 'huge'" -- "$zaya" info --preset huge
check "init" 0 "initialised" -- "$zaya" init --preset tiny --out "$tmp/tiny" --seed 3
check "init again over its own directory" 0 "initialised" -- "$zaya" init --preset tiny --out "$tmp/tiny" --seed 3
echo "mine" > "$tmp/tiny/README.md"
check "init refuses a directory holding a user's file" 1 "README.md that zaya did not write" -- \
  "$zaya" init --preset tiny --out "$tmp/tiny"
rm "$tmp/tiny/README.md"
check "init from a config" 0 "initialised" -- "$zaya" init --config "$fixtures/io/config_transformers.json" --out "$tmp/c"
check "forward on the transformers fixture" 0 "loss" -- "$zaya" forward --model "$fixtures/model/odd" \
  --input "$fixtures/model/odd/reference.safetensors" --output "$tmp/out.safetensors" --grads
check "forward output" 0 "grad.model.norm.weight" -- "$zaya" inspect "$tmp/out.safetensors"
check "forward without input_ids" 1 "no input_ids" -- "$zaya" forward --model "$tmp/tiny" \
  --input "$fixtures/io/python_written.safetensors" --output "$tmp/x.safetensors"
check "forward with ids past the vocabulary" 1 "outside the vocabulary" -- "$zaya" forward --model "$fixtures/model/basic" \
  --input "$fixtures/model/odd/reference.safetensors" --output "$tmp/x.safetensors"
check "forward with an id past the vocabulary: the input and its position" 1 \
  "reference.safetensors: tensor 'input_ids': token id 67 at [0, 6] is outside the vocabulary of 64" -- "$zaya" forward \
  --model "$fixtures/model/basic" --input "$fixtures/model/odd/reference.safetensors" --output "$tmp/x.safetensors"
python3 - "$tmp/long_ids.safetensors" <<'PY'
import json, struct, sys
count = 1000000  # one row of a million tokens, past the tiny model's context
header = json.dumps({"input_ids": {"dtype": "I32", "shape": [1, count], "data_offsets": [0, 4 * count]}}).encode()
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<Q", len(header)) + header + bytes(4 * count))
PY
check "forward on rows longer than the context: refused before the work" 1 \
  "tensor 'input_ids': rows of 1000000 tokens are longer than the model's context" -- \
  bash -c 'ulimit -v 2000000; exec "$0" forward --model "$1" --input "$2" --output "$3"' "$zaya" "$tmp/tiny" \
  "$tmp/long_ids.safetensors" "$tmp/long_out.safetensors"
: > "$tmp/empty.txt"
check "tokenizer train on an empty corpus" 1 "field '--input': no text to learn from" -- "$zaya" tokenizer train \
  --input "$tmp/empty.txt" --vocab-size 300 --output "$tmp/empty_tokenizer.json"
[ ! -e "$tmp/empty_tokenizer.json" ] && ok "no tokenizer written from an empty corpus" || fail "a tokenizer from nothing"
if [ "$(id -u)" -eq 0 ] && command -v setpriv > /dev/null; then
  # As nobody, in a directory nobody may use, with a subdirectory nobody may not read.
  chmod 755 "$tmp" && mkdir -p "$tmp/shared/corpus/locked" && chmod 777 "$tmp/shared"
  # Everything nobody reads is here: the checkout itself may be in a directory only root enters.
  echo "text" > "$tmp/shared/corpus/a.txt" && chmod 000 "$tmp/shared/corpus/locked"
  cp "$fixtures/tokenizer/byte_level.json" "$tmp/shared/tokenizer.json" && chmod 644 "$tmp/shared/tokenizer.json"
  check "an unreadable subdirectory of the input is named" 1 "corpus/locked: cannot list: Permission denied" -- \
    setpriv --reuid=65534 --regid=65534 --clear-groups "$zaya" prepare --tokenizer "$tmp/shared/tokenizer.json" \
    --input "$tmp/shared/corpus" --output "$tmp/shared/out"
  check "an unreadable subdirectory of tokenizer train's input is named" 1 "corpus/locked: cannot list" -- \
    setpriv --reuid=65534 --regid=65534 --clear-groups "$zaya" tokenizer train --input "$tmp/shared/corpus" \
    --vocab-size 300 --output "$tmp/shared/tokenizer.json"
  chmod 755 "$tmp/shared/corpus/locked" && chmod 700 "$tmp"
fi
check "eval --json into a directory that does not exist: refused before scoring" 1 \
  "field '--json': cannot be written: the directory $tmp/missing_dir does not exist" -- "$zaya" eval --model "$tmp/tiny" \
  --tokenizer "$fixtures/tokenizer/byte_level.json" --text "$fixtures/eval/text.txt" --json "$tmp/missing_dir/scores.json"
"$zaya" tokenizer train --input "$fixtures/eval/text.txt" --vocab-size 300 --output "$tmp/tokenizer300.json" > /dev/null
check "eval reading more at once than the model's context" 1 "field '--max-length': must be at most the model's context" -- \
  "$zaya" eval --model "$tmp/tiny" --tokenizer "$tmp/tokenizer300.json" --text "$fixtures/eval/text.txt" \
  --max-length 100000000
# Outputs never overwrite an input, a model or a checkpoint without --force.
cp "$fixtures/model/odd/reference.safetensors" "$tmp/in.safetensors"
cp "$tmp/tiny/model.safetensors" "$tmp/tiny.before"
check "forward refuses to write over the model" 1 "model.safetensors: field '--output': exists" -- "$zaya" forward \
  --model "$tmp/tiny" --input "$tmp/in.safetensors" --output "$tmp/tiny/model.safetensors"
cmp -s "$tmp/tiny/model.safetensors" "$tmp/tiny.before" && ok "the model is intact" || fail "the model was changed"
check "forward refuses to write over its input" 1 "would overwrite this command's input" -- "$zaya" forward \
  --model "$fixtures/model/odd" --input "$tmp/in.safetensors" --output "$tmp/./in.safetensors"
check "forward over its input with --force" 0 "loss" -- "$zaya" forward --model "$fixtures/model/odd" \
  --input "$tmp/in.safetensors" --output "$tmp/in.safetensors" --force
check "tokenizer train refuses to write over an input" 1 "--force" -- "$zaya" tokenizer train \
  --input "$tmp/in.safetensors" --output "$tmp/in.safetensors"
{ printf '{"a":'; head -c 100000 /dev/zero | tr '\0' '['; head -c 100000 /dev/zero | tr '\0' ']'; printf '}'; } \
  > "$tmp/deep.json"
check "a config.json nested 100000 deep" 1 "JSON nested deeper than 64 levels" -- "$zaya" info --config "$tmp/deep.json"
check "--threads past the cores is clamped" 0 "more than the" -- "$zaya" --threads 1000000 info --preset tiny
check "info at a sequence length of 4e18 (closed form, no loop)" 0 "4000000000000000000" -- \
  timeout 10 "$zaya" info --preset tiny --seq 4000000000000000000
check "info --memory: the plan per rank and the largest micro-batch that fits" 0 \
  "largest micro-batch that fits: " -- "$zaya" info --preset tiny --memory --ranks 4 --expert-parallel 2 \
  --seq 128 --device-memory 100MB
check "info --memory --recompute layer: the recomputed layer apart, and each setting's activations" 0 \
  "activations with run.recompute: none " -- "$zaya" info --preset tiny --memory --recompute layer
check "info --memory --recompute layer: the recomputed layer's line" 0 "recomputed layer's activations" -- \
  "$zaya" info --preset tiny --memory --recompute layer
check "info --memory with a size that is not one" 1 "field '--device-memory': expected a size such as 80GB" -- \
  "$zaya" info --preset tiny --memory --device-memory 80parsecs
check "info --memory with experts that do not divide" 1 "field 'run.expert_parallel'" -- \
  "$zaya" info --preset tiny --memory --ranks 3 --expert-parallel 3
check "info --memory --context-parallel 2: a rank's slice, on as many ranks" 0 \
  "memory per rank: 2 ranks, expert parallel 1, context parallel 2, micro-batch 1 x 128 tokens" -- \
  "$zaya" info --preset tiny --memory --context-parallel 2 --seq 128
check "info --memory with a sequence the context groups do not divide" 1 "field 'run.context_parallel'" -- \
  "$zaya" info --preset tiny --memory --context-parallel 2 --seq 127
check "info --memory with context groups that do not divide the heads" 1 "field 'run.context_parallel'" -- \
  "$zaya" info --preset tiny --memory --context-parallel 8 --seq 128
check "a model under ulimit -v 400 MB: an error, not a crash" 1 "may map 390 MiB (ulimit -v)" -- \
  bash -c 'ulimit -v 400000; exec "$0" bench step --preset tiny --batch 1 --seq 16 --steps 1' "$zaya"
check "init of a model larger than ulimit -v allows" 1 "this process may map" -- \
  bash -c 'ulimit -v 700000; exec "$0" init --preset medium --out "$1"' "$zaya" "$tmp/medium"
# A one-line edit asking a small model's files for 65,536 layers: the missing tensor is named before the
# config's size (5 GB of values) is allocated.
mkdir -p "$tmp/many_layers"
cp "$fixtures/model/basic/model.safetensors" "$tmp/many_layers/"
sed -e 's/"num_hidden_layers": 2/"num_hidden_layers": 65536/' -e '/"layer_types"/,/\]/d' \
  "$fixtures/model/basic/config.json" > "$tmp/many_layers/config.json"
check "a config asking for more layers than the files hold, under ulimit -v 3 GB" 1 "lacks this parameter" -- \
  bash -c 'ulimit -v 3000000; exec "$0" bench decode --model "$1" --runs 1' "$zaya" "$tmp/many_layers"
check "a negative --batch, in a few words" 2 "--batch: must be positive, got -5 (see" -- "$zaya" bench step --batch -5
check "--batch x --seq past 2^31 tokens" 1 "is more than 2147483648 tokens a step" -- \
  "$zaya" bench step --preset tiny --batch 4000000000 --seq 4000000000
check "bench step" 0 "tokens/s" -- "$zaya" bench step --preset tiny --batch 2 --seq 32 --steps 1
check "bench step --profile: each op's share, and the host's" 0 "outside the ops (the host)" -- \
  "$zaya" bench step --preset tiny --batch 2 --seq 32 --steps 1 --profile
check "bench decode: one sequence and a batch, side by side" 0 "tokens/s, 3 sequences" -- \
  "$zaya" bench decode --preset tiny --batch 3 --prompt 5 --new-tokens 4 --runs 1
check "bench decode --profile: where a decode step's time goes" 0 "attention_decode" -- \
  "$zaya" bench decode --preset tiny --batch 2 --prompt 5 --new-tokens 4 --runs 1 --profile
check "bench decode --batch 1: the one sequence alone, profiled" 0 "1 sequence, 4 decode steps profiled" -- \
  "$zaya" bench decode --preset tiny --batch 1 --prompt 5 --new-tokens 4 --runs 1 --profile
check "bench decode with no new tokens, in a few words" 2 "--new-tokens: must be positive" -- \
  "$zaya" bench decode --preset tiny --new-tokens 0
check "bench decode past the model's context" 1 "more than the model's context" -- \
  "$zaya" bench decode --preset tiny --prompt 100000 --new-tokens 2
# bench ops: every op of the table (check_ops fails on an op without a call; the binary says how many ops
# its table has) in the table it prints; the CPU against itself, the baseline that runs everywhere.
out=$("$zaya" bench ops --device cpu --preset tiny --repeats 1 2>&1)
code=$?
table=$(sed -n 's/^every op of the table: \([0-9]*\) ops in [0-9]* calls$/\1/p' <<<"$out")
# The rows between the header and the legend, by their first column.
printed=$(sed -n '/^op  /,/^rel err:/p' <<<"$out" | sed '1d;$d' | awk '{print $1}' | sort -u | wc -l)
[ "$code" -eq 0 ] && [ -n "$table" ] && [ "$table" -gt 0 ] && [ "$printed" -eq "$table" ] &&
  ok "bench ops prints every op ($table)" || fail "bench ops: exit $code, $printed ops printed of ${table:-?}"
check "bench ops with a device that does not exist" 1 "field '--device': expected" -- \
  "$zaya" bench ops --device tpu
check "bench step on a GPU this build cannot use (no build links HIP yet)" 1 "field '--device'" -- \
  "$zaya" bench step --preset tiny --device hip
check "forward on a GPU this build cannot use" 1 "field '--device'" -- \
  "$zaya" forward --model "$tmp/tiny" --input "$tmp/ids.safetensors" --output "$tmp/gpu_out.safetensors" --device hip
for command in "generate --prompt x" "eval --text $fixtures/eval/text.txt" serve; do
  check "${command%% *} on a GPU this build cannot use" 1 "field '--device'" -- \
    "$zaya" $command --model "$tmp/tiny" --tokenizer "$fixtures/tokenizer/byte_level.json" --device hip
done
check "generate on the device auto picks (the CPU here)" 0 "" -- "$zaya" generate --model "$tmp/tiny" \
  --tokenizer "$tmp/tokenizer300.json" --prompt x --max-new-tokens 2 --device auto
check "generate on the CPU named" 0 "" -- "$zaya" generate --model "$tmp/tiny" \
  --tokenizer "$tmp/tokenizer300.json" --prompt x --max-new-tokens 2 --device cpu
check "bench decode on a GPU this build cannot use" 1 "field '--device'" -- \
  "$zaya" bench decode --preset tiny --device hip
lines=$("$zaya" bench ops --device tpu 2>&1 | wc -l)
[ "$lines" -eq 1 ] && ok "the --device error is one line" || fail "the --device error is $lines lines, want 1"

report
