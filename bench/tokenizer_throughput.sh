#!/usr/bin/env bash
# Encoding throughput of zaya's tokenizer against the Python `tokenizers` library (encode_batch) on the same
# tokenizer.json, the same documents (the file cut into whole lines of at most 4096 bytes) and the same
# thread counts (OMP_NUM_THREADS for zaya, RAYON_NUM_THREADS for tokenizers). Both take the median of three
# timed passes after one warm-up pass. Needs the reference venv (tools/reference/setup_venv.sh).
# Usage: bench/tokenizer_throughput.sh [TOKENIZER_JSON] [TEXT_FILE] [THREADS...]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tokenizer=${1:-$root/tests/fixtures/tokenizer/byte_level.json}
file=${2:-$root/tests/fixtures/tokenizer/corpus.txt}
shift $(($# < 2 ? $# : 2))
threads=("$@")
[ ${#threads[@]} -gt 0 ] || threads=(1 2)
zaya=${ZAYA:-$root/build/src/zaya}
python=$root/tools/reference/.venv/bin/python

for t in "${threads[@]}"; do
  ours=$("$zaya" --threads "$t" tokenizer bench --tokenizer "$tokenizer" --file "$file" --json)
  peer=$(RAYON_NUM_THREADS=$t TOKENIZERS_PARALLELISM=true "$python" - "$tokenizer" "$file" <<'PY'
import json, statistics, sys, time
from tokenizers import Tokenizer

tokenizer = Tokenizer.from_file(sys.argv[1])
data = open(sys.argv[2], "rb").read()
docs, start = [], 0
while start < len(data):  # whole lines, at most 4096 bytes (as zaya tokenizer bench)
    end = start
    while end < len(data):
        nl = data.find(b"\n", end)
        nl = len(data) if nl < 0 else nl + 1
        if end > start and nl - start > 4096:
            break
        end = nl
    docs.append(data[start:end].decode())
    start = end
tokens = sum(len(e.ids) for e in tokenizer.encode_batch(docs, add_special_tokens=False))
seconds = []
for _ in range(3):
    begin = time.perf_counter()
    tokenizer.encode_batch(docs, add_special_tokens=False)
    seconds.append(time.perf_counter() - begin)
print(json.dumps({"tokens": tokens, "seconds": statistics.median(seconds),
                  "mb_per_second": len(data) / 1e6 / statistics.median(seconds)}))
PY
)
  "$python" - "$t" "$ours" "$peer" <<'PY'
import json, sys
threads, ours, peer = int(sys.argv[1]), json.loads(sys.argv[2]), json.loads(sys.argv[3])
same = "same token count" if ours["tokens"] == peer["tokens"] else f"TOKEN COUNTS DIFFER ({ours['tokens']} vs {peer['tokens']})"
print(f"{threads} thread(s): zaya {ours['mb_per_second']:.2f} MB/s ({ours['mb_per_second'] / threads:.2f} per thread), "
      f"tokenizers {peer['mb_per_second']:.2f} MB/s ({peer['mb_per_second'] / threads:.2f} per thread): "
      f"{ours['mb_per_second'] / peer['mb_per_second']:.2f}x; {same}")
PY
done
