#!/usr/bin/env bash
# Runs a peer test (a Python script against the live reference) with the reference venv, or reports it
# skipped (exit 77, ctest's SKIP_RETURN_CODE) where that venv has not been built.
# Usage: run_peer.sh SCRIPT ARGS...
root=$(cd "$(dirname "$0")/../.." && pwd)
python=$root/tools/reference/.venv/bin/python
if [ ! -x "$python" ]; then
  echo "skipped: no reference venv (run tools/reference/setup_venv.sh)"
  exit 77
fi
exec "$python" "$@"
