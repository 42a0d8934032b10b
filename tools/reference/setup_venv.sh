#!/usr/bin/env bash
# Builds tools/reference/.venv from PyPI with the pinned requirements. Only the fixture scripts and the
# `peer` tests need it; `make test` does not.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
venv="$here/.venv"
stamp="$venv/.requirements.sha256"
want=$(sha256sum "$here/requirements.txt" | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then exit 0; fi
python3 -m venv "$venv"
"$venv/bin/pip" install -q --upgrade pip
"$venv/bin/pip" install -q -r "$here/requirements.txt"
echo "$want" > "$stamp"
