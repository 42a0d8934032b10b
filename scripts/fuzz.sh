#!/usr/bin/env bash
# Runs the libFuzzer targets (fuzz/) from their committed seed corpora under ASan + UBSan.
#   scripts/fuzz.sh smoke BUILD_DIR   each target a fixed 2000 executions (make test: a regression check)
#   scripts/fuzz.sh long BUILD_DIR    each target FUZZ_RUNS executions (default 10 million; make fuzz)
# New inputs go to a scratch directory, never into the committed corpus; an input that crashes, leaks or
# hangs (over 10 s) is kept as fuzz/findings/<target>-<kind>-<hash> and the script fails.
set -uo pipefail
mode=${1:?smoke or long} build=${2:?build directory}
root=$(cd "$(dirname "$0")/.." && pwd)
runs=$([ "$mode" = smoke ] && echo 2000 || echo "${FUZZ_RUNS:-10000000}")
shopt -s nullglob
targets=()  # every target the build made (fuzz/CMakeLists.txt lists them)
for binary in "$root/$build"/fuzz/*_fuzz; do
  name=$(basename "$binary")
  targets+=("${name%_fuzz}")
done
[ ${#targets[@]} -gt 0 ] || { echo "fuzz: no targets in $build/fuzz (make build-fuzz)"; exit 1; }
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
mkdir -p "$root/fuzz/findings"
failed=0
for target in "${targets[@]}"; do
  mkdir -p "$scratch/$target"
  log="$scratch/$target.log"
  start=$(date +%s)
  "$root/$build/fuzz/${target}_fuzz" -runs="$runs" -max_len=16384 -timeout=10 -rss_limit_mb=4096 \
    -artifact_prefix="$root/fuzz/findings/$target-" "$scratch/$target" "$root/fuzz/corpus/$target" > "$log" 2>&1
  code=$?
  done_line=$(grep -E '^#[0-9]+.*DONE' "$log" | tail -1)
  executions=$(sed -n 's/^#\([0-9]*\).*DONE.*/\1/p' <<<"$done_line")
  if [ $code -eq 0 ]; then
    echo "fuzz $target: ${executions:-?} executions in $(($(date +%s) - start)) s, no finding (${done_line#*DONE   })"
  else
    failed=1
    echo "fuzz $target: FINDING (exit $code); input kept in fuzz/findings/; the report:"
    grep -E 'ERROR|SUMMARY|runtime error|Test unit written' "$log" | head -8
  fi
done
exit $failed
