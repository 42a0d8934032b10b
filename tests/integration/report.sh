# Sourced by the integration tests. ok/fail record one check's outcome; `check` runs a command and wants
# its exit code and a fragment of its output; `report` prints the tally and fails when any check did.
passed=0 failed=0
ok() { echo "ok: $1"; passed=$((passed + 1)); }
fail() { echo "FAIL: $1"; failed=$((failed + 1)); }

check() {  # check DESCRIPTION EXPECTED_EXIT EXPECTED_OUTPUT_FRAGMENT -- COMMAND...
  local description=$1 want_code=$2 want_text=$3
  shift 4
  local out code
  out=$("$@" 2>&1)
  code=$?
  if [ "$code" -ne "$want_code" ] || ! grep -qF -- "$want_text" <<<"$out"; then
    fail "$description: exit $code (want $want_code), output:"
    echo "$out" | head -5
  else
    ok "$description"
  fi
}

report() {
  echo "$passed passed, $failed failed"
  [ "$failed" -eq 0 ]
}
