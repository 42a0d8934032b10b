# Sourced by the training benchmarks (scale_out.sh, context_parallel.sh) with $root and $zaya set: the demo's
# tokenizer and dataset of the Python docs in $data (runs/data, as `make demo` leaves them), made if missing.
data=$root/runs/data
if [ ! -f "$data/python_docs_train.idx" ]; then
  mkdir -p "$data"
  "$zaya" tokenizer train --input /usr/share/doc/python3.11/html/_sources --vocab-size 4096 \
    --output "$data/tokenizer.json" > /dev/null
  "$zaya" prepare --tokenizer "$data/tokenizer.json" --input /usr/share/doc/python3.11/html/_sources \
    --output "$data/python_docs" --val-fraction 0.02 > /dev/null
fi
