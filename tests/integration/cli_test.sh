#!/usr/bin/env bash
# The command line as a user meets it: help, version, exit codes and one-line errors.
# Usage: cli_test.sh ZAYA_BINARY FIXTURES_DIR
set -u
zaya=$1 fixtures=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0

check() {  # check DESCRIPTION EXPECTED_EXIT EXPECTED_OUTPUT_FRAGMENT -- COMMAND...
  local description=$1 want_code=$2 want_text=$3
  shift 4
  local out code
  out=$("$@" 2>&1)
  code=$?
  if [ "$code" -ne "$want_code" ] || ! grep -qF -- "$want_text" <<<"$out"; then
    echo "FAIL: $description: exit $code (want $want_code), output:"
    echo "$out" | head -5
    failures=$((failures + 1))
  else
    echo "ok: $description"
  fi
}

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
[ "$lines" -eq 1 ] || { echo "FAIL: error is $lines lines, want 1"; failures=$((failures + 1)); }

echo "$((12 - failures)) passed, $failures failed"
[ "$failures" -eq 0 ]
