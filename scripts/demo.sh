#!/usr/bin/env bash
# `make demo`: a small ZAYA model of the Python documentation, from raw text to a Hugging Face model, on
# this machine's CPUs in a few minutes. Every step is a zaya command a user would type; each is
# skipped when its result is already there, and the training resumes (or reports the finished run).
set -euo pipefail
zaya=$1
cd "$(dirname "$0")/.."
corpus=/usr/share/doc/python3.11/html/_sources  # Debian's python3.11-doc, installed by scripts/setup.sh
data=runs/data
run=runs/demo
mkdir -p "$data"

if [ ! -f "$data/tokenizer.json" ]; then
  echo "== demo 1/5: training a 4096-token BPE tokenizer on the Python docs"
  "$zaya" tokenizer train --input "$corpus" --vocab-size 4096 --output "$data/tokenizer.json"
fi
if [ ! -f "$data/python_docs_train.idx" ]; then
  echo "== demo 2/5: tokenizing the Python docs into a Megatron dataset"
  "$zaya" prepare --tokenizer "$data/tokenizer.json" --input "$corpus" --output "$data/python_docs" --val-fraction 0.02
fi
echo "== demo 3/5: the baseline to beat: a model that ignores context"
"$zaya" inspect "$data/python_docs_val"
echo "== demo 4/5: training (configs/small.toml: ~3 min on 2 cores in bf16, ~9 in fp32); TensorBoard: tensorboard --logdir $run/tb"
"$zaya" train configs/small.toml --run-dir "$run"
echo "== demo 5/5: exporting $run/model and drawing a sample from it"
"$zaya" export --checkpoint "$run" --out "$run/model"
"$zaya" generate --model "$run/model" --prompt "To open a file in Python, " --max-new-tokens 60 --temperature 0.7 --seed 1
