#!/usr/bin/env bash
# `zaya tokenizer` as a user meets it: train from a directory, encode, decode, bench, exit codes and one-line
# errors.
# Usage: tokenizer_cli_test.sh ZAYA_BINARY FIXTURES_DIR
set -u
zaya=$1 fixtures=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$(dirname "$0")/report.sh"

corpus=$fixtures/tokenizer/corpus.txt
mkdir -p "$tmp/texts/sub"
head -c 300000 "$corpus" > "$tmp/texts/a.txt"
tail -c 200000 "$corpus" > "$tmp/texts/sub/b.md"
printf 'ignored: not a text extension\n' > "$tmp/texts/c.bin"
printf 'good line\nbad \xff line\n' > "$tmp/bad.txt"

check "train from a directory" 0 "1000 tokens (2 special, 256 bytes" -- "$zaya" tokenizer train \
  --input "$tmp/texts" --vocab-size 1000 --special "<s>" "</s>" --output "$tmp/tok.json"
check "encode --text" 0 "0 " -- "$zaya" tokenizer encode --tokenizer "$tmp/tok.json" --text "<s>hello world"
check "encode --json" 0 "[" -- "$zaya" tokenizer encode --tokenizer "$tmp/tok.json" --text "hello" --json
ids=$("$zaya" tokenizer encode --tokenizer "$tmp/tok.json" --text "<s>Hello, wörld! 日本")
check "decode" 0 "<s>Hello, wörld! 日本" -- "$zaya" tokenizer decode --tokenizer "$tmp/tok.json" $ids
check "decode --skip-special" 0 "Hello, wörld! 日本" -- "$zaya" tokenizer decode --tokenizer "$tmp/tok.json" \
  --skip-special $ids
check "encode --file" 0 " " -- "$zaya" tokenizer encode --tokenizer "$fixtures/tokenizer/byte_fallback.json" \
  --file "$tmp/texts/a.txt"
check "bench" 0 "MB/s per thread" -- "$zaya" --threads 2 tokenizer bench \
  --tokenizer "$fixtures/tokenizer/byte_level.json" --file "$tmp/texts/a.txt" --repeat 1
check "bench --json" 0 '"mb_per_second_per_thread"' -- "$zaya" tokenizer bench \
  --tokenizer "$fixtures/tokenizer/gpt2.json" --file "$tmp/texts/a.txt" --repeat 1 --json

check "encode needs a text" 2 "give --text or --file" -- "$zaya" tokenizer encode --tokenizer "$tmp/tok.json"
check "encode: invalid UTF-8 names file and line" 1 "$tmp/bad.txt: invalid UTF-8 at line 2" -- \
  "$zaya" tokenizer encode --tokenizer "$tmp/tok.json" --file "$tmp/bad.txt"
check "train: invalid UTF-8 names file and line" 1 "$tmp/bad.txt: invalid UTF-8 at line 2" -- \
  "$zaya" tokenizer train --input "$tmp/bad.txt" --vocab-size 300 --output "$tmp/x.json"
check "train: vocabulary too small" 1 "below 260" -- "$zaya" tokenizer train --input "$tmp/texts" \
  --vocab-size 100 --output "$tmp/x.json"
check "train: no input" 1 "no such file" -- "$zaya" tokenizer train --input "$tmp/none" --output "$tmp/x.json"
printf '{"model": {"type": "WordPiece", "vocab": {}}}' > "$tmp/wordpiece.json"
check "unsupported model" 1 "$tmp/wordpiece.json: field 'model.type': not supported: WordPiece" -- \
  "$zaya" tokenizer encode --tokenizer "$tmp/wordpiece.json" --text x
printf '{"model": ' > "$tmp/broken.json"
check "malformed tokenizer.json" 1 "$tmp/broken.json: invalid JSON" -- \
  "$zaya" tokenizer encode --tokenizer "$tmp/broken.json" --text x
lines=$("$zaya" tokenizer encode --tokenizer "$tmp/broken.json" --text x 2>&1 | wc -l)
[ "$lines" -eq 1 ] && ok "the error is one line" || fail "the error is $lines lines, want 1"

report
