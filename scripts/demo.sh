#!/usr/bin/env bash
# `make demo`: the largest real job zaya can do today, run as a user would run it: the shape of the CPU
# demo model and of ZAYA1-base, a freshly initialised model directory in Hugging Face's layout, and the
# speed of a full forward+backward training step on 8k tokens.
set -euo pipefail
zaya=$1
cd "$(dirname "$0")/.."
model=runs/demo/init-model

"$zaya" --version
"$zaya" info --preset zaya1-base
"$zaya" info --preset small --seq 512
if [ -f "$model/config.json" ]; then
  echo "using the model already in $model"
else
  "$zaya" init --preset small --out "$model" --seed 0
fi
"$zaya" bench step --model "$model" --batch 16 --seq 512 --steps 3
