#!/usr/bin/env bash
# Quick start, command 1: install prefixmon into .venv and run the demo.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/scripts/setup.sh" analytics,otlp
exec "$root/.venv/bin/prefixmon" demo "$@"
