#!/usr/bin/env bash
# Quick start, command 2: install prefixmon with every extra and the test tools into .venv,
# install the BFCL benchmark data as its own step (without its 6 GB of dependencies), and
# run the test suite. Extra arguments go to pytest.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/scripts/setup.sh" "all,test"
"$root/.venv/bin/python" -m pip install -q --no-deps bfcl-eval==2026.3.23 mpmath==1.3.0
cd "$root"
exec "$root/.venv/bin/python" -m pytest "$@"
