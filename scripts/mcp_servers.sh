#!/usr/bin/env bash
# Install the official MCP reference servers that tests/integration/test_mcp_servers.py runs
# over stdio: the Python ones from PyPI into their own virtualenv, the TypeScript ones from
# npm, pinned, under ${PREFIXMON_MCP_SERVERS:-~/.cache/prefixmon/mcp-servers}. Safe to run
# again (pip and npm skip what is already there). Needs python3 and node/npm.
set -euo pipefail
dir="${PREFIXMON_MCP_SERVERS:-${XDG_CACHE_HOME:-$HOME/.cache}/prefixmon/mcp-servers}"
python="${PYTHON:-python3}"
py_packages=(mcp-server-time==2026.10.19 mcp-server-git==2026.10.19)
npm_packages=(
  @modelcontextprotocol/server-everything@2026.8.31
  @modelcontextprotocol/server-filesystem@2026.8.31
  @modelcontextprotocol/server-memory@2026.8.31
)
mkdir -p "$dir/node"
if [ ! -x "$dir/py/bin/python" ]; then
  "$python" -m venv "$dir/py"
fi
"$dir/py/bin/python" -m pip install -q --disable-pip-version-check "${py_packages[@]}"
npm install --prefix "$dir/node" --no-fund --no-audit --no-save --loglevel=error "${npm_packages[@]}" >/dev/null
printf '%s\n' "${py_packages[@]}" "${npm_packages[@]}" >"$dir/installed.txt"
echo "MCP reference servers installed in $dir"
