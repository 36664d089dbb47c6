"""The developer's loop: without the MCP reference servers, `scripts/test.sh` and the skipped tests say
how to install them (issue 39)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
HINT = "bash scripts/mcp_servers.sh"
SERVER_FILES = (
    "py/bin/mcp-server-time",
    "py/bin/mcp-server-git",
    "node/node_modules/@modelcontextprotocol/server-everything",
    "node/node_modules/@modelcontextprotocol/server-filesystem",
    "node/node_modules/@modelcontextprotocol/server-memory",
)


def clean_env(servers: Path, **more: str) -> dict[str, str]:
    """This environment with the MCP servers looked for in ``servers``, and not as CI (where a skip fails)."""
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "PREFIXMON_FAIL_ON_SKIP")}
    return {**env, "PREFIXMON_MCP_SERVERS": str(servers), **more}


def fake_root(tmp_path: Path) -> Path:
    """A copy of scripts/test.sh beside a no-op setup.sh and a .venv/bin/python that only exits 0."""
    root = tmp_path / "repo"
    (root / "scripts").mkdir(parents=True)
    shutil.copy(ROOT / "scripts" / "test.sh", root / "scripts" / "test.sh")
    (root / "scripts" / "setup.sh").write_text("#!/usr/bin/env bash\n", encoding="utf-8")
    python = root / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text("#!/usr/bin/env bash\nexit 0\n", encoding="utf-8")
    python.chmod(0o755)
    return root


def tools_on_path(tmp_path: Path) -> str:
    """A PATH on which ``node`` and ``git`` exist (stubs), before the usual one."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("node", "git"):
        (bin_dir / tool).write_text("#!/usr/bin/env bash\nexit 0\n", encoding="utf-8")
        (bin_dir / tool).chmod(0o755)
    return f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"


class TestMcpServersHint:
    """A fresh machine is told the command that installs the MCP reference servers."""

    def test_test_sh_says_how_to_install_them(self, tmp_path: Path) -> None:
        """scripts/test.sh prints the install command when the servers are missing, and nothing when they are there."""
        root = fake_root(tmp_path)
        servers = tmp_path / "servers"
        servers.mkdir()
        env = clean_env(servers, PATH=tools_on_path(tmp_path), PREFIXMON_TOOLSANDBOX_SRC=str(tmp_path / "none"))
        done = subprocess.run(["bash", str(root / "scripts" / "test.sh")], capture_output=True, text=True, env=env, timeout=60)
        assert done.returncode == 0, done.stderr
        assert HINT in done.stderr and "tests/integration/test_mcp_servers.py will be skipped" in done.stderr
        for name in SERVER_FILES:
            (servers / name).parent.mkdir(parents=True, exist_ok=True)
            (servers / name).touch()
        done = subprocess.run(["bash", str(root / "scripts" / "test.sh")], capture_output=True, text=True, env=env, timeout=60)
        assert done.returncode == 0, done.stderr
        assert "mcp_servers" not in done.stderr

    def test_skip_reason_says_how_to_install_them(self, tmp_path: Path) -> None:
        """The skipped tests' reason starts with the install command (pytest cuts a long summary line at its end)."""
        pytest.importorskip("mcp", reason="the mcp extra is not installed")
        pytest.importorskip("jsonschema", reason="the mcp extra is not installed")
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "tests/integration/test_mcp_servers.py", "-q", "-p", "no:cacheprovider", "-rs"],
            capture_output=True,
            text=True,
            env=clean_env(tmp_path / "nothing-here"),
            cwd=ROOT,
            timeout=300,
        )
        assert done.returncode == 0, done.stdout[-3000:]
        skipped = [line for line in done.stdout.splitlines() if line.startswith("SKIPPED")]
        assert skipped and all("test_mcp_servers.py:" in line for line in skipped)
        assert all(line.split(": ", 1)[1].startswith(f"install the MCP reference servers with `{HINT}`") for line in skipped)
