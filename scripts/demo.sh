#!/usr/bin/env bash
# `make demo`: the largest real job zaya can do today, run as a user would run it.
set -euo pipefail
zaya=$1
cd "$(dirname "$0")/.."
"$zaya" --version
"$zaya" inspect tests/fixtures/io/sharded_model
