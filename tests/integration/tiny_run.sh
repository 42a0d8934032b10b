# Sourced by the distributed tests (distributed_test.sh, hosts_test.sh), after report.sh with $zaya, $tmp and
# $configs set: the data of a tiny run (a tokenizer and a dataset from the Python docs), the run's arguments,
# and the helpers that compare runs (compare_runs.sh).
docs=/usr/share/doc/python3.11/html/_sources
[ -d "$docs" ] || { echo "FAIL: $docs is missing (scripts/setup.sh installs python3.11-doc)"; exit 1; }
mkdir -p "$tmp/corpus"
cp "$docs"/library/[a-f]*.rst.txt "$tmp/corpus/"
"$zaya" tokenizer train --input "$tmp/corpus" --vocab-size 512 --output "$tmp/tokenizer.json" > "$tmp/log" 2>&1 \
  && "$zaya" prepare --tokenizer "$tmp/tokenizer.json" --input "$tmp/corpus" --output "$tmp/docs" \
     --val-fraction 0.05 > "$tmp/log" 2>&1 || { echo "FAIL: data"; cat "$tmp/log"; exit 1; }

# The tiny run cut to 20 steps of a fixed global batch of 16 sequences (4 micro-batches of 4), one thread
# per rank, a checkpoint every 10 steps, in fp32: the parallel runs equal one process to float rounding
# (1e-5). In bf16 a difference of reduction order in the 7th digit of a master weight can flip a rounding of
# its bf16 copy, and the runs drift apart at bf16's resolution; distributed_test.sh's bf16 check says how far.
args=(train "$configs/tiny.toml" --set 'run.precision="fp32"' --set "data.tokenizer=\"$tmp/tokenizer.json\""
      --set "data.validation=\"$tmp/docs_val\"" --set "stages.0.mixture={\"$tmp/docs_train\" = 1.0}"
      --set "stages.1.mixture={\"$tmp/docs_train\" = 1.0}" --set stages.0.tokens=16384 --set stages.1.tokens=8192
      --set batch.start_sequences=16 --set run.threads=1 --set checkpoint.every_steps=10 --set eval.every_steps=10)
source "$(dirname "${BASH_SOURCE[0]}")/compare_runs.sh"
