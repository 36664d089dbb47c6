#!/usr/bin/env bash
# Create .venv (if missing) and install prefixmon with the given extras, e.g. `setup.sh analytics`.
# Sourced by demo.sh and test.sh; safe to run again (pip skips what is already there).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
extras="${1:-analytics}"
python="${PYTHON:-python3}"
if [ ! -x "$root/.venv/bin/python" ]; then
  "$python" -m venv "$root/.venv"
  "$root/.venv/bin/python" -m pip install -q --upgrade pip
fi
"$root/.venv/bin/python" -m pip install -q -e "$root[$extras]"
