"""A spec file on a real MCP server nobody modelled: ``@modelcontextprotocol/server-memory`` over stdio.

The server (TypeScript) keeps a knowledge graph of entities named by strings. The spec
(examples/specs/server_memory.yaml) says that entity names are produced by ``create_entities``
and invalidated by ``delete_entities``. The same sequence of calls goes to a raw server and,
through the monitor (policy ``block``), to a second server with its own state: every call the
monitor refuses is one the raw server rejects, and every call the raw server runs also runs
through the monitor.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

from mcp import ClientSession, StdioServerParameters, stdio_client

from prefixmon import Cause, Decision
from prefixmon.adapters.mcp import MonitorSession

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "examples" / "specs" / "server_memory.yaml"
SERVERS = Path(
    os.environ.get("PREFIXMON_MCP_SERVERS")
    or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "prefixmon" / "mcp-servers"
)
SERVER = SERVERS / "node" / "node_modules" / "@modelcontextprotocol" / "server-memory" / "dist" / "index.js"
MISSING = None if SERVER.is_file() and shutil.which("node") else "server-memory is not installed (bash scripts/mcp_servers.sh)"
if MISSING and os.environ.get("CI"):
    pytest.fail(f"{MISSING}; .ci/run installs it, so CI must not skip this test", pytrace=False)
pytestmark.append(pytest.mark.skipif(MISSING is not None, reason=MISSING or ""))

ADA = {"name": "Ada Lovelace", "entityType": "person", "observations": ["wrote the first program"]}
CALLS: list[tuple[str, dict[str, Any]]] = [
    ("add_observations", {"observations": [{"entityName": "Ada Lovelace", "contents": ["likes tea"]}]}),  # not yet
    ("create_entities", {"entities": [ADA]}),
    ("add_observations", {"observations": [{"entityName": "Ada Lovelace", "contents": ["likes tea"]}]}),
    ("open_nodes", {"names": ["Ada Lovelace"]}),
    ("delete_entities", {"entityNames": ["Ada Lovelace"]}),
    ("add_observations", {"observations": [{"entityName": "Ada Lovelace", "contents": ["gone"]}]}),  # deleted
    ("create_entities", {"entities": [ADA]}),  # created again: current again
    ("add_observations", {"observations": [{"entityName": "Ada Lovelace", "contents": ["back"]}]}),
]


@asynccontextmanager
async def server(root: Path, name: str) -> AsyncIterator[ClientSession]:
    """A fresh server-memory process with its own graph file."""
    params = StdioServerParameters(
        command="node", args=[str(SERVER)], env={**os.environ, "MEMORY_FILE_PATH": str(root / f"{name}.jsonl")}, cwd=str(root)
    )
    with open(root / f"{name}.log", "w", encoding="utf-8") as log:
        async with stdio_client(params, errlog=log) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            yield session


def _rejected(result: Any) -> bool:
    """Whether the server's answer is an error (MCP ``isError``)."""
    return bool(result.is_error)


class TestServerMemorySpec:
    """References and invalidation from a spec file, judged against the real server."""

    async def test_the_spec_refuses_only_what_the_server_rejects(self, tmp_path: Path) -> None:
        """Calls on a name nobody created (or that was deleted) are refused; the server rejects them too."""
        raw: list[bool] = []
        async with server(tmp_path, "raw") as session:
            for tool, args in CALLS:
                raw.append(_rejected(await session.call_tool(tool, args)))
        refused: list[bool] = []
        reasons: list[str] = []
        async with (
            server(tmp_path, "monitored") as session,
            MonitorSession(session, spec=SPEC, policy="block") as guarded,
            guarded.episode(task_id="memory") as ep,
        ):
            for tool, args in CALLS:
                result = await guarded.call_tool(tool, args)  # a refused call gets an isError result with the reason
                refused.append(ep.actions[-1].decision is Decision.BLOCK)
                if refused[-1]:
                    reasons.append(result.content[0].text)  # type: ignore[union-attr]
        assert raw == [True, False, False, False, False, True, False, False], raw
        assert refused == [True, False, False, False, False, True, False, False]
        assert all(r for r, m in zip(raw, refused, strict=True) if m)  # never refuses what the server runs
        assert "needs a entity" in reasons[0] or "needs an entity" in reasons[0]
        assert "invalidated by delete_entities" in reasons[1]
        record = ep.record
        assert record is not None and record.first_failure is not None
        assert record.first_failure.cause is Cause.DEPENDENCY and record.fed == 1
        assert [a.reached_environment for a in record.actions] == [False, True, True, True, True, False, True, True]

    async def test_a_bad_spec_fails_when_the_session_is_built(self, tmp_path: Path) -> None:
        """A typo in the spec file is a SpecError naming file and line before any call is made."""
        bad = tmp_path / "bad.yaml"
        bad.write_text(SPEC.read_text(encoding="utf-8").replace("invalidates:", "invalidate:"), encoding="utf-8")
        from prefixmon import SpecError

        async with server(tmp_path, "x") as session:
            with pytest.raises(SpecError, match=r"bad\.yaml:\d+: .*unknown field 'invalidate'"):
                MonitorSession(session, spec=bad)

    def test_the_spec_file_is_valid_json_schema_data(self) -> None:
        """The shipped spec loads (and its names match the server's tools, checked above)."""
        from prefixmon.rules.specfile import load_spec

        spec = load_spec(SPEC)
        assert json.loads(spec.model_dump_json())["tools"]["delete_entities"]["invalidates"] == ["entity"]
