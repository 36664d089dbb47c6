#!/usr/bin/env bash
# CI step: are the lower bounds in pyproject.toml true? Installs the declared minimum
# versions (uv's lowest-direct resolution: every direct requirement at the lowest version
# the others allow) into two fresh virtual environments, fails when a floor cannot be
# installed together with the rest, and runs the tests there:
#   core   prefixmon[analytics,otlp,cel,test]  -> the core, analytics, spec-file and CLI tests
#   all    prefixmon[all,test]             -> the adapter tests (OpenAI, MCP, pydantic-ai,
#                                              LangChain, OpenAI Agents) and the examples
# then builds the wheel with the build-system's setuptools floor.
# Environment: MIN_VENVS (default .venv-min), PYTHON (default python3).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
base="${MIN_VENVS:-$root/.venv-min}"
python="${PYTHON:-python3}"
cd "$root"

mkdir -p "$base"
if [ ! -x "$base/tools/bin/uv" ]; then
  "$python" -m venv "$base/tools"
  "$base/tools/bin/python" -m pip install -q uv
fi
uv="$base/tools/bin/uv"

fresh() {  # fresh ENV EXTRAS: a new venv with prefixmon[EXTRAS] at the declared floors
  rm -rf "${base:?}/$1"
  "$uv" venv -q --python "$python" "$base/$1"
  "$uv" pip install -q --python "$base/$1/bin/python" --resolution lowest-direct -e "$root[$2]"
}

echo "== minimum versions: core (prefixmon[analytics,otlp,cel,test]) =="
fresh core "analytics,otlp,cel,test"
"$base/core/bin/python" scripts/check_floors.py pyproject.toml dependencies analytics otlp cel test
# the BFCL data, as scripts/test.sh installs it (its own step, without its dependencies)
"$uv" pip install -q --python "$base/core/bin/python" --no-deps bfcl-eval==2026.3.23 mpmath==1.3.0
# (the adapters' renamed classes need the adapters: checked in the next venv)
timeout -s ABRT -k 30 1200 "$base/core/bin/python" -m pytest -q -p no:cacheprovider tests --ignore=tests/integration --ignore=tests/test_openai_adapter.py \
  --deselect tests/test_exports.py::TestExports::test_renamed_adapter_classes_warn

echo "== minimum versions: adapters (prefixmon[all,test]) =="
fresh all "all,test"
"$base/all/bin/python" scripts/check_floors.py pyproject.toml mcp openai pydantic-ai langchain openai-agents
timeout -s ABRT -k 30 1200 "$base/all/bin/python" -m pytest -q -p no:cacheprovider \
  tests/test_openai_adapter.py tests/integration/test_mcp.py tests/integration/test_mcp_edges.py \
  tests/integration/test_pydantic_ai.py tests/integration/test_langchain.py tests/integration/test_openai_agents.py \
  tests/test_examples.py tests/test_first_toolset.py tests/test_exports.py

echo "== minimum versions: build backend =="
floor="$("$base/core/bin/python" -c '
import tomllib
from packaging.requirements import Requirement
reqs = tomllib.load(open("pyproject.toml", "rb"))["build-system"]["requires"]
(setuptools,) = [r for r in map(Requirement, reqs) if r.name == "setuptools"]
print(next(s.version for s in setuptools.specifier if s.operator == ">="))')"
rm -rf "${base:?}/build"
"$uv" venv -q --python "$python" "$base/build"
"$uv" pip install -q --python "$base/build/bin/python" "setuptools==$floor" pip
"$base/build/bin/python" -m pip wheel -q --no-deps --no-build-isolation -w "$base/build/dist" .
echo "setuptools $floor builds $(ls "$base/build/dist")"
