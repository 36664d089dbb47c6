#!/usr/bin/env bash
# Ruff over the tree (from the dev extra), then strict mypy over the package as users import
# it (prefixmon, prefixmon.adapters, the pytest plugin's top-level module) and over the tests,
# examples and benchmarks. The folders are mapped to import names by setuptools package-dir,
# which mypy cannot follow through an editable install, so a tree of symlinks shows it the layout.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# mypy and ruff come with the dev extra; every other extra and the test tools give mypy the
# types of what the adapters and tests import
bash "$root/scripts/setup.sh" "all,test,dev"
shadow="$(mktemp -d)"
trap 'rm -rf "$shadow"' EXIT
mkdir "$shadow/prefixmon"
for entry in "$root"/monitor/*; do ln -s "$entry" "$shadow/prefixmon/$(basename "$entry")"; done
ln -s "$root/adapters" "$shadow/prefixmon/adapters"
ln -s "$root/pytest_plugin/_prefixmon_pytest.py" "$shadow/_prefixmon_pytest.py"
cd "$root"
"$root/.venv/bin/ruff" check .
"$root/.venv/bin/ruff" format --check .
MYPYPATH="$shadow" "$root/.venv/bin/mypy" --config-file "$root/pyproject.toml" -p prefixmon -m _prefixmon_pytest
MYPYPATH="$shadow" "$root/.venv/bin/mypy" --config-file "$root/pyproject.toml" tests examples benchmarks
