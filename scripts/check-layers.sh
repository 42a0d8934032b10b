#!/usr/bin/env bash
# The layers of src/, enforced (docs/ARCHITECTURE.md, "Layers"): a folder includes zaya headers only from
# the folders its layer may use, so that no include runs up a layer or across to a sibling. Prints each
# include that breaks the rule as FILE:LINE and exits 1; `make test` runs it (ctest's `layers`).
# Usage: check-layers.sh [SRC_DIR]
set -u
src=${1:-$(cd "$(dirname "$0")/../src" && pwd)}
declare -A uses=(
  [core]="core"
  [io]="core io"
  [dist]="core dist"
  [backend]="core dist backend"
  [tokenizer]="core io tokenizer"
  [data]="core io tokenizer data"
  [model]="core io backend dist model"
  [optim]="core io backend dist model optim"
  [infer]="core io backend dist model infer"
  [eval]="core io backend dist tokenizer data model infer eval"
  [train]="core io backend dist tokenizer data model optim infer train"
  [serve]="core io backend dist tokenizer data model infer serve"
  [cli]="core io backend dist tokenizer data model optim infer eval train serve cli"
)
broken=0
for dir in "$src"/*/; do
  folder=$(basename "$dir")
  if [ -z "${uses[$folder]+set}" ]; then
    echo "$dir: a folder with no layer: add it to scripts/check-layers.sh and docs/ARCHITECTURE.md"
    broken=1
    continue
  fi
  while IFS=: read -r file line included; do
    target=${included%%/*}
    if [[ " ${uses[$folder]} " != *" $target "* ]]; then
      echo "$file:$line: $folder/ may not include \"$included\" ($folder uses: ${uses[$folder]})"
      broken=1
    fi
  done < <(grep -rnoE '^#include "[a-z_]+/[^"]+"' "$dir" | sed -E 's/#include "([^"]+)"/\1/')
done
[ $broken -eq 0 ] && echo "layers: every include of src/ runs down its layers"
exit $broken
