#!/usr/bin/env bash
# Install the MCP servers that tests/integration/test_mcp_servers.py and test_mcp_generated.py
# run over stdio, pinned, under ${PREFIXMON_MCP_SERVERS:-~/.cache/prefixmon/mcp-servers}:
#   py/   Python servers on mcp 2.x (the official reference ones, excel-mcp-server)
#   py1/  Python servers on mcp 1.x (its low-level Server validates with jsonschema)
#   node/ the official TypeScript reference servers; node/<name>/ each other npm server with
#         its own tree (and pinned SDK and zod), so none changes what another one resolves.
# Safe to run again (pip and npm skip what is already there). Needs python3 and node/npm; the
# npm mcp-sqlite builds sqlite3 from source (about a minute, once).
set -euo pipefail
dir="${PREFIXMON_MCP_SERVERS:-${XDG_CACHE_HOME:-$HOME/.cache}/prefixmon/mcp-servers}"
python="${PYTHON:-python3}"
py_packages=(mcp-server-time==2026.10.19 mcp-server-git==2026.10.19 excel-mcp-server==2.2.2)
py1_packages=(mcp==1.30.0 mcp-server-sqlite==2025.4.25 mcp-text-editor==1.0.2 mcp-shell-server==1.1.14)
npm_packages=(
  @modelcontextprotocol/server-everything@2026.8.31
  @modelcontextprotocol/server-filesystem@2026.8.31
  @modelcontextprotocol/server-memory@2026.8.31
)
# name:packages (the first is the server; the SDK and zod are pinned beside it)
npm_own_trees=(
  "sequential-thinking:@modelcontextprotocol/server-sequential-thinking@2026.8.31 @modelcontextprotocol/sdk@1.32.2 zod@4.6.7"
  "mcp-taskmanager:@kazuph/mcp-taskmanager@1.1.1 @modelcontextprotocol/sdk@1.32.2 zod@3.25.76"
  "mcp-sqlite:mcp-sqlite@1.0.9 @modelcontextprotocol/sdk@1.32.2 zod@4.6.7 sqlite3@5.1.7"
)
npm_install() {
  JOBS="${JOBS:-max}" npm install --prefix "$1" --no-fund --no-audit --no-save --loglevel=error "${@:2}" >/dev/null
}
for venv in py py1; do
  if [ ! -x "$dir/$venv/bin/python" ]; then
    "$python" -m venv "$dir/$venv"
  fi
done
"$dir/py/bin/python" -m pip install -q --disable-pip-version-check "${py_packages[@]}"
"$dir/py1/bin/python" -m pip install -q --disable-pip-version-check "${py1_packages[@]}"
mkdir -p "$dir/node"
npm_install "$dir/node" "${npm_packages[@]}"
installed=("${py_packages[@]}" "${py1_packages[@]}" "${npm_packages[@]}")
for tree in "${npm_own_trees[@]}"; do
  name="${tree%%:*}"
  read -r -a packages <<<"${tree#*:}"
  mkdir -p "$dir/node/$name"
  npm_install "$dir/node/$name" "${packages[@]}"
  installed+=("${packages[0]}")
done
printf '%s\n' "${installed[@]}" >"$dir/installed.txt"
echo "MCP servers installed in $dir"
