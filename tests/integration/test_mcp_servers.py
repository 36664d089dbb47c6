"""The zero-config schema check against the official MCP reference servers, over stdio.

Python ``mcp-server-time`` and ``mcp-server-git`` (PyPI; ``MCPServer``, pydantic validation)
and TypeScript ``server-everything``, ``server-filesystem`` and ``server-memory`` (npm; zod
validation), installed by ``scripts/mcp_servers.sh`` (``.ci/run`` runs it first). For a
corpus of calls per server, the monitor's pre-call verdict (``MonitoredSession``,
``policy="block"``, no rules, no options) is compared with the raw server's answer to the
same call, each side on its own server process with its own copy of the state:

- no call the monitor refuses is one the server accepts (or runs and fails for another reason);
- every call the server rejects as invalid (a validation error, an unknown tool, arguments
  that are not a JSON object) is refused by the monitor.

Two in-process servers built with the Python SDK cover what the reference servers do not
use: pydantic types whose lax mode matters (``datetime``, ``bool``, tuples, which pydantic
writes as 2020-12 ``prefixItems``), and a low-level server whose hand-written 2020-12
schemas (``unevaluatedProperties``, ``dependentRequired``, ``prefixItems`` with ``items:
false``) it checks with the ``jsonschema`` reference validator.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, Literal

import pytest

pytest.importorskip("mcp")
pytest.importorskip("jsonschema")

import jsonschema
import mcp.types as mcp_types
from mcp import Client, ClientSession, MCPError, StdioServerParameters, stdio_client
from mcp.server import Server
from mcp.server.mcpserver import MCPServer
from mcp.types import CallToolRequestParams, CallToolResult, ListToolsResult, PaginatedRequestParams, TextContent, Tool
from pydantic import Field

from prefixmon import Decision, EpisodeRecord
from prefixmon.adapters import mcp as mcp_adapter

# the client wrapper's name after the adapter renaming (issue 10), and before it
MonitoredSession: type[Any] = getattr(mcp_adapter, "MonitorSession", None) or mcp_adapter.MonitoredSession

pytestmark = pytest.mark.integration

SERVERS_DIR = Path(
    os.environ.get("PREFIXMON_MCP_SERVERS")
    or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "prefixmon" / "mcp-servers"
)
NODE_MODULES = SERVERS_DIR / "node" / "node_modules" / "@modelcontextprotocol"
PY_BIN = SERVERS_DIR / "py" / "bin"
CONFUSION_FILE = os.environ.get("PREFIXMON_MCP_CONFUSION")
"""When set, the confusion counts of every server are appended to this JSON Lines file."""

Answer = Literal["accepted", "rejected", "failed"]
"""The raw server's answer: ran it; refused it as invalid; ran it and reported an error."""


def _installed() -> str | None:
    """Why the reference servers cannot run here, or ``None``."""
    missing = [str(p) for p in (PY_BIN / "mcp-server-time", PY_BIN / "mcp-server-git") if not p.exists()]
    missing += [
        str(NODE_MODULES / n)
        for n in ("server-everything", "server-filesystem", "server-memory")
        if not (NODE_MODULES / n).exists()
    ]
    if shutil.which("node") is None:
        missing.append("node")
    if shutil.which("git") is None:
        missing.append("git")
    return (
        f"install the MCP reference servers with `bash scripts/mcp_servers.sh`, then run again (missing: {', '.join(missing)})"
        if missing
        else None
    )


NOT_INSTALLED = _installed()
if NOT_INSTALLED and os.environ.get("CI"):
    pytest.fail(f"{NOT_INSTALLED}; .ci/run installs them, so CI must not skip these tests", pytrace=False)
needs_servers = pytest.mark.skipif(NOT_INSTALLED is not None, reason=NOT_INSTALLED or "")


@dataclass(frozen=True, slots=True, kw_only=True)
class Case:
    """One call of the corpus: arguments as a dict, or raw (possibly malformed) JSON text."""

    kind: str
    tool: str
    args: dict[str, Any] | str
    known_miss: str = ""
    """Why the zero-config check lets this server rejection through (asserted to stay so)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Outcome:
    case: Case
    blocked: bool
    reason: str
    answer: Answer
    detail: str


def _fill(value: Any, root: Path) -> Any:
    """The case's arguments with ``{root}`` replaced by this side's state directory."""
    if isinstance(value, str):
        return value.replace("{root}", str(root))
    if isinstance(value, list):
        return [_fill(v, root) for v in value]
    if isinstance(value, dict):
        return {k: _fill(v, root) for k, v in value.items()}
    return value


def _text(result: CallToolResult) -> str:
    return "\n".join(block.text for block in result.content if isinstance(block, TextContent))


def _classify(result: CallToolResult) -> tuple[Answer, str]:
    """A server's ``isError`` result: a validation rejection or a failure of the tool itself."""
    text = _text(result)
    if not result.is_error:
        return "accepted", text[:120]
    # zod (TypeScript SDK) answers -32602 in an isError result; MCPServer a pydantic ValidationError
    # (MCPServer answers an unknown tool with an isError result, python-sdk#3659)
    if "-32602" in text or "validation error for" in text or text.startswith("Unknown tool"):
        return "rejected", text[:160]
    return "failed", text[:160]


async def raw_answer(session: ClientSession | Client, case: Case, root: Path) -> tuple[Answer, str]:
    """What the server itself answers to the case (nothing in between)."""
    args = _fill(case.args, root)
    try:
        if isinstance(args, str):  # what a client sends when it passes the model's text through
            request = mcp_types.Request(method="tools/call", params={"name": case.tool, "arguments": args})
            if isinstance(session, Client):
                result = await session.session.send_request(request, CallToolResult)
            else:
                result = await session.send_request(request, CallToolResult)
        else:
            result = await session.call_tool(case.tool, args)
    except MCPError as e:  # a protocol error: unknown tool, invalid params
        return "rejected", f"MCPError {e.code}: {str(e)[:120]}"
    return _classify(result)


async def compare(
    name: str,
    connect: Callable[[Path], AbstractAsyncContextManager[ClientSession | Client]],
    make_state: Callable[[Path], None],
    cases: list[Case],
    tmp_path: Path,
    rules: dict[str, dict[str, Any]] | None = None,
) -> list[Outcome]:
    """Run every case on a raw server and on a monitored one (each with its own state)."""
    raw_root, mon_root = tmp_path / "raw", tmp_path / "monitored"
    for root in (raw_root, mon_root):
        root.mkdir()
        make_state(root)
    outcomes: list[Outcome] = []
    records: list[EpisodeRecord] = []
    async with (
        connect(raw_root) as raw,
        connect(mon_root) as session,
        MonitoredSession(session, policy="block", rules=rules, sink=records.append) as guarded,
    ):
        async with guarded.episode(task_id=name) as ep:
            for case in cases:
                answer, detail = await raw_answer(raw, case, raw_root)
                args = _fill(case.args, mon_root)
                result = await guarded.call_tool(case.tool, args)
                text = _text(result)
                blocked = result.is_error and text.startswith(f"Call to {case.tool!r} was not run:")
                if not blocked:  # it reached the monitored server, which must answer as the raw one did
                    assert _classify(result)[0] == answer, (case, text)
                outcomes.append(Outcome(case=case, blocked=blocked, reason=text if blocked else "", answer=answer, detail=detail))
        assert ep.record is not None
    [record] = records
    decisions = [a.decision for a in record.actions]
    assert decisions.count(Decision.BLOCK) == sum(o.blocked for o in outcomes)
    return outcomes


def confusion(outcomes: list[Outcome]) -> Counter[str]:
    return Counter(f"{'blocked' if o.blocked else 'allowed'}/{o.answer}" for o in outcomes)


def report(name: str, outcomes: list[Outcome]) -> None:
    """Assert the agreement; print (and optionally record) the confusion counts."""
    counts = confusion(outcomes)
    print(f"\n{name}: {len(outcomes)} calls; " + ", ".join(f"{k}={v}" for k, v in sorted(counts.items())))
    for o in outcomes:
        mark = "BLOCK" if o.blocked else "allow"
        print(f"  {mark} {o.answer:<8} {o.case.kind:<22} {o.case.tool} {json.dumps(o.case.args)[:70]}")
    if CONFUSION_FILE:
        with open(CONFUSION_FILE, "a", encoding="utf-8") as f:
            f.write(json.dumps({"server": name, "calls": len(outcomes), **counts}) + "\n")
    refused_but_accepted = [o for o in outcomes if o.blocked and o.answer != "rejected"]
    assert not refused_but_accepted, "the monitor refused calls the server runs:\n" + "\n".join(
        f"{o.case}: {o.reason} / server: {o.answer} {o.detail}" for o in refused_but_accepted
    )
    missed = [o for o in outcomes if not o.blocked and o.answer == "rejected" and not o.case.known_miss]
    assert not missed, "the monitor let through calls the server rejects:\n" + "\n".join(f"{o.case}: {o.detail}" for o in missed)
    stale = [o.case for o in outcomes if o.case.known_miss and (o.blocked or o.answer != "rejected")]
    assert not stale, f"known misses that are no longer missed: {stale}"
    assert counts["blocked/rejected"] > 0 and counts["allowed/accepted"] > 0  # the corpus exercises both sides


def common(tool: str, args: dict[str, Any]) -> list[Case]:
    """Cases every server shares: an unknown tool, malformed JSON, arguments that are not an object."""
    text = json.dumps(args)
    return [
        Case(kind="unknown tool", tool=tool + "_nope", args=args),
        Case(kind="malformed JSON", tool=tool, args=text[:-1]),
        Case(kind="not an object", tool=tool, args="[1, 2]"),
    ]


# -- the reference servers ------------------------------------------------------------------
def stdio(
    command: str, *args: str, env: dict[str, str] | None = None
) -> Callable[[Path], AbstractAsyncContextManager[ClientSession]]:
    def connect(root: Path) -> AbstractAsyncContextManager[ClientSession]:
        @asynccontextmanager
        async def run() -> AsyncIterator[ClientSession]:
            params = StdioServerParameters(
                command=command,
                args=[a.replace("{root}", str(root)) for a in args],
                env={**os.environ, **{k: v.replace("{root}", str(root)) for k, v in (env or {}).items()}},
                cwd=str(root),
            )
            with open(root / "server.log", "w", encoding="utf-8") as log:
                async with stdio_client(params, errlog=log) as (read, write), ClientSession(read, write) as session:
                    await session.initialize()
                    yield session

        return run()

    return connect


def node(
    package: str, *args: str, env: dict[str, str] | None = None
) -> Callable[[Path], AbstractAsyncContextManager[ClientSession]]:
    return stdio("node", str(NODE_MODULES / package / "dist" / "index.js"), *args, env=env)


def no_state(root: Path) -> None:
    return None


def git_repo(root: Path) -> None:
    repo = root / "repo"
    repo.mkdir()
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.org",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.org",
    }
    for cmd in (["init", "-q", "-b", "main"], ["add", "a.txt"], ["commit", "-q", "-m", "first"]):
        if cmd[0] == "add":
            (repo / "a.txt").write_text("one\n", encoding="utf-8")
        subprocess.run(["git", *cmd], cwd=repo, env=env, check=True, capture_output=True)
    (repo / "b.txt").write_text("two\n", encoding="utf-8")


def files(root: Path) -> None:
    (root / "fs").mkdir()
    (root / "fs" / "a.txt").write_text("alpha\nbeta\n", encoding="utf-8")


TIME_CASES = [
    Case(kind="valid", tool="get_current_time", args={"timezone": "UTC"}),
    Case(kind="valid", tool="convert_time", args={"source_timezone": "UTC", "time": "14:30", "target_timezone": "Asia/Tokyo"}),
    Case(kind="unknown extra argument", tool="get_current_time", args={"timezone": "UTC", "format": "iso"}),
    Case(kind="tool failure", tool="convert_time", args={"source_timezone": "UTC", "time": "25:99", "target_timezone": "UTC"}),
    Case(kind="tool failure", tool="get_current_time", args={"timezone": "Mars/Olympus"}),
    Case(kind="missing required", tool="get_current_time", args={}),
    Case(kind="missing required", tool="convert_time", args={"source_timezone": "UTC", "time": "14:30"}),
    Case(kind="wrong type", tool="get_current_time", args={"timezone": 5}),
    Case(kind="wrong type", tool="convert_time", args={"source_timezone": "UTC", "time": 1430, "target_timezone": "UTC"}),
    *common("get_current_time", {"timezone": "UTC"}),
]

REPO = "{root}/repo"
GIT_CASES = [
    Case(kind="valid", tool="git_status", args={"repo_path": REPO}),
    Case(kind="valid", tool="git_log", args={"repo_path": REPO, "max_count": 2}),
    Case(kind="valid", tool="git_create_branch", args={"repo_path": REPO, "branch_name": "feature", "base_branch": None}),
    Case(kind="'3' for an integer", tool="git_log", args={"repo_path": REPO, "max_count": "3"}),
    Case(kind="'3' for an integer", tool="git_diff_unstaged", args={"repo_path": REPO, "context_lines": " 5 "}),
    Case(kind="lax integer", tool="git_log", args={"repo_path": REPO, "max_count": True}),
    Case(kind="lax integer", tool="git_log", args={"repo_path": REPO, "max_count": 2.0}),
    Case(kind="JSON text for a list", tool="git_add", args={"repo_path": REPO, "files": '["b.txt"]'}),
    Case(kind="naive ISO datetime", tool="git_log", args={"repo_path": REPO, "start_timestamp": "2024-01-15T14:30:25"}),
    Case(kind="unknown extra argument", tool="git_status", args={"repo_path": REPO, "verbose": True}),
    Case(kind="tool failure", tool="git_checkout", args={"repo_path": REPO, "branch_name": "no-such-branch"}),
    Case(kind="tool failure", tool="git_status", args={"repo_path": "/nonexistent"}),
    Case(kind="missing required", tool="git_commit", args={"repo_path": REPO}),
    Case(kind="missing required", tool="git_diff", args={"repo_path": REPO}),
    Case(kind="wrong type", tool="git_log", args={"repo_path": REPO, "max_count": "three"}),
    Case(kind="wrong type", tool="git_log", args={"repo_path": REPO, "max_count": 2.5}),
    Case(kind="wrong type", tool="git_log", args={"repo_path": REPO, "start_timestamp": 5}),
    Case(kind="wrong type", tool="git_show", args={"repo_path": REPO, "revision": 5}),
    Case(kind="wrong type", tool="git_add", args={"repo_path": REPO, "files": "b.txt"}),
    Case(kind="range (minItems)", tool="git_add", args={"repo_path": REPO, "files": []}),
    *common("git_status", {"repo_path": REPO}),
]

EVERYTHING_CASES = [
    Case(kind="valid", tool="echo", args={"message": "hi"}),
    Case(kind="valid", tool="get-sum", args={"a": 1, "b": 2.5}),
    Case(kind="valid", tool="get-annotated-message", args={"messageType": "success", "includeImage": False}),
    Case(kind="valid", tool="get-resource-links", args={"count": 10}),
    Case(kind="valid", tool="get-env", args={}),
    Case(kind="unknown extra argument", tool="get-sum", args={"a": 1, "b": 2, "c": 3}),
    Case(kind="unknown extra argument", tool="echo", args={"message": "hi", "loud": True}),
    Case(
        kind="'3' for a number",
        tool="get-sum",
        args={"a": "1", "b": 2},
        known_miss="zod may coerce a number (z.coerce.number() publishes a plain number): the first refusal teaches it",
    ),
    Case(kind="'3' for a number, again", tool="get-sum", args={"a": 1, "b": "2"}),
    Case(kind="'true' for a boolean", tool="get-annotated-message", args={"messageType": "debug", "includeImage": "true"}),
    Case(kind="missing required", tool="echo", args={}),
    Case(kind="missing required", tool="get-sum", args={"a": 1}),
    Case(kind="wrong type", tool="echo", args={"message": 5}),
    Case(kind="wrong type", tool="get-sum", args={"a": [1], "b": 2}),
    Case(kind="enum", tool="get-annotated-message", args={"messageType": "info"}),
    Case(kind="enum", tool="get-structured-content", args={"location": "Paris"}),
    Case(kind="range (maximum)", tool="get-resource-links", args={"count": 11}),
    Case(kind="range (minimum)", tool="get-resource-links", args={"count": 0}),
    *common("echo", {"message": "hi"}),
]

FS = "{root}/fs"
FILESYSTEM_CASES = [
    Case(kind="valid", tool="read_text_file", args={"path": FS + "/a.txt", "head": 1}),
    Case(kind="valid", tool="list_directory", args={"path": FS}),
    Case(kind="valid", tool="write_file", args={"path": FS + "/b.txt", "content": "new"}),
    Case(
        kind="valid",
        tool="edit_file",
        args={"path": FS + "/a.txt", "edits": [{"oldText": "beta", "newText": "gamma"}], "dryRun": True},
    ),
    Case(kind="valid", tool="list_allowed_directories", args={}),
    Case(kind="unknown extra argument", tool="read_text_file", args={"path": FS + "/a.txt", "encoding": "utf8"}),
    Case(
        kind="unknown extra argument",
        tool="edit_file",
        args={"path": FS + "/a.txt", "edits": [{"oldText": "x", "newText": "y", "regex": False}], "dryRun": True},
    ),
    Case(kind="tool failure", tool="read_text_file", args={"path": "/etc/hostname"}),
    Case(kind="tool failure", tool="read_text_file", args={"path": FS + "/missing.txt"}),
    Case(
        kind="'3' for a number",
        tool="read_text_file",
        args={"path": FS + "/a.txt", "head": "1"},
        known_miss="zod may coerce a number (z.coerce.number() publishes a plain number): the first refusal teaches it",
    ),
    Case(kind="'3' for a number, again", tool="read_text_file", args={"path": FS + "/a.txt", "tail": "1"}),
    Case(kind="missing required", tool="write_file", args={"path": FS + "/c.txt"}),
    Case(kind="missing required (nested)", tool="edit_file", args={"path": FS + "/a.txt", "edits": [{"oldText": "beta"}]}),
    Case(kind="wrong type", tool="read_multiple_files", args={"paths": FS + "/a.txt"}),
    Case(kind="wrong type", tool="edit_file", args={"path": FS + "/a.txt", "edits": [], "dryRun": "yes"}),
    Case(kind="range (minItems)", tool="read_multiple_files", args={"paths": []}),
    Case(kind="enum", tool="list_directory_with_sizes", args={"path": FS, "sortBy": "date"}),
    *common("list_directory", {"path": FS}),
]

ENTITY = {"name": "Ada", "entityType": "person", "observations": ["writes programs"]}
MEMORY_CASES = [
    Case(kind="valid", tool="create_entities", args={"entities": [ENTITY]}),
    Case(kind="valid", tool="search_nodes", args={"query": "Ada"}),
    Case(kind="valid", tool="open_nodes", args={"names": ["Ada"]}),
    Case(kind="valid", tool="add_observations", args={"observations": [{"entityName": "Ada", "contents": ["likes tea"]}]}),
    Case(kind="valid", tool="read_graph", args={}),
    Case(kind="unknown extra argument", tool="search_nodes", args={"query": "Ada", "limit": 5}),
    Case(kind="unknown extra argument", tool="create_entities", args={"entities": [{**ENTITY, "name": "Bob", "age": 3}]}),
    Case(kind="tool failure", tool="add_observations", args={"observations": [{"entityName": "Nobody", "contents": ["x"]}]}),
    Case(kind="missing required", tool="create_entities", args={}),
    Case(kind="missing required (nested)", tool="create_entities", args={"entities": [{"name": "Eve", "entityType": "person"}]}),
    Case(kind="wrong type", tool="open_nodes", args={"names": "Ada"}),
    Case(kind="wrong type", tool="search_nodes", args={"query": 1}),
    Case(
        kind="wrong type (nested)",
        tool="create_relations",
        args={"relations": [{"from": "Ada", "to": 7, "relationType": "knows"}]},
    ),
    *common("search_nodes", {"query": "Ada"}),
]


@needs_servers
class TestReferenceServers:
    """Zero-config verdicts agree with the real servers' own validation."""

    async def test_time(self, tmp_path: Path) -> None:
        """mcp-server-time (Python, pydantic): extras run, validation errors are refused."""
        connect = stdio(str(PY_BIN / "mcp-server-time"), "--local-timezone", "UTC")
        report("mcp-server-time", await compare("time", connect, no_state, TIME_CASES, tmp_path))

    async def test_git(self, tmp_path: Path) -> None:
        """mcp-server-git (Python, pydantic lax): '3', True and JSON text lists run as the server coerces them."""
        connect = stdio(str(PY_BIN / "mcp-server-git"), "--repository", REPO)
        report("mcp-server-git", await compare("git", connect, git_repo, GIT_CASES, tmp_path))

    async def test_everything(self, tmp_path: Path) -> None:
        """server-everything (TypeScript, zod): strict types, stripped extras, enums and ranges."""
        report(
            "server-everything",
            await compare("everything", node("server-everything", "stdio"), no_state, EVERYTHING_CASES, tmp_path),
        )

    async def test_filesystem(self, tmp_path: Path) -> None:
        """server-filesystem (TypeScript, zod): nested items are checked; path policy is the server's."""
        connect = node("server-filesystem", FS)
        report("server-filesystem", await compare("filesystem", connect, files, FILESYSTEM_CASES, tmp_path))

    async def test_memory(self, tmp_path: Path) -> None:
        """server-memory (TypeScript, zod): nested objects in arrays."""
        connect = node("server-memory", env={"MEMORY_FILE_PATH": "{root}/memory.jsonl"})
        report("server-memory", await compare("memory", connect, no_state, MEMORY_CASES, tmp_path))

    async def test_auto_coercion_per_server(self, tmp_path: Path) -> None:
        """auto reads the Python servers lax and the TypeScript servers as zod (their schemas declare draft-07)."""
        modes: dict[str, set[str]] = {}
        for name, connect in (
            ("time", stdio(str(PY_BIN / "mcp-server-time"))),
            ("everything", node("server-everything", "stdio")),
        ):
            root = tmp_path / name
            root.mkdir()
            async with connect(root) as session, MonitoredSession(session) as guarded:
                modes[name] = {getattr(spec.validate, "coercion", "?") for spec in guarded.toolset}
        assert modes == {"time": {"lax"}, "everything": {"zod"}}

    async def test_read_only_hints_let_a_repeated_rejection_be_refused(self, tmp_path: Path) -> None:
        """server-filesystem's readOnlyHint marks its reads.

        A rejected read sent again after only reads is refused; after a write it runs.
        """
        files(tmp_path)
        missing = {"path": str(tmp_path / "fs" / "nowhere.txt")}
        async with (
            node("server-filesystem", FS)(tmp_path) as session,
            MonitoredSession(session, policy="block") as guarded,
            guarded.episode(task_id="repeat"),
        ):
            read_only = {spec.name for spec in guarded.toolset if spec.metadata.get("read_only")}
            assert {"read_text_file", "list_directory"} <= read_only and "write_file" not in read_only
            first = await guarded.call_tool("read_text_file", missing)
            assert first.is_error and "was not run" not in _text(first)  # the server's own rejection
            await guarded.call_tool("list_directory", {"path": str(tmp_path / "fs")})  # a read changes nothing
            again = await guarded.call_tool("read_text_file", missing)
            assert again.is_error and _text(again).startswith("Call to 'read_text_file' was not run:")
            assert "same arguments" in _text(again) or "again" in _text(again), _text(again)
            await guarded.call_tool("write_file", {"path": str(tmp_path / "fs" / "other.txt"), "content": "x"})
            after_write = await guarded.call_tool("read_text_file", missing)
            assert after_write.is_error and "was not run" not in _text(after_write)  # it reached the server


# -- what the reference servers do not use ---------------------------------------------------
def pydantic_server() -> MCPServer:
    """An ``MCPServer`` whose parameters are pydantic types with a lax reading."""
    server = MCPServer("pydantic-types")

    @server.tool()
    def schedule(when: datetime, attendees: Annotated[int, Field(ge=1, le=50)], online: bool = False) -> str:
        """Schedule a meeting."""
        return f"{when.isoformat()} {attendees} {online}"

    @server.tool()
    def move(point: tuple[int, int], label: Literal["a", "b"] = "a") -> str:
        """Move to a point (pydantic writes the tuple as prefixItems)."""
        return f"{point} {label}"

    return server


PYDANTIC_CASES = [
    Case(kind="valid", tool="schedule", args={"when": "2024-01-15T14:30:25+00:00", "attendees": 3}),
    Case(kind="naive ISO datetime", tool="schedule", args={"when": "2024-01-15T14:30:25", "attendees": 3}),
    Case(kind="date for a datetime", tool="schedule", args={"when": "2024-01-15", "attendees": 3}),
    Case(kind="unix time for a datetime", tool="schedule", args={"when": 1700000000, "attendees": 3}),
    Case(kind="'3' for an integer", tool="schedule", args={"when": "2024-01-15T14:30:25", "attendees": "3"}),
    Case(kind="'yes' for a boolean", tool="schedule", args={"when": "2024-01-15T14:30:25", "attendees": 3, "online": "yes"}),
    Case(kind="unknown extra argument", tool="schedule", args={"when": "2024-01-15T14:30:25", "attendees": 3, "room": "A"}),
    Case(kind="2020-12 prefixItems", tool="move", args={"point": [1, 2]}),
    Case(kind="2020-12 prefixItems, lax", tool="move", args={"point": ["1", 2.0], "label": "b"}),
    Case(kind="JSON text for a tuple", tool="move", args={"point": "[1, 2]"}),
    Case(
        kind="not a datetime",
        tool="schedule",
        args={"when": "next week", "attendees": 3},
        known_miss="format is an annotation unless asserted (assert_formats=True catches it)",
    ),
    Case(kind="range (maximum)", tool="schedule", args={"when": "2024-01-15T14:30:25", "attendees": "51"}),
    Case(kind="range (minimum)", tool="schedule", args={"when": "2024-01-15T14:30:25", "attendees": 0}),
    Case(kind="wrong type", tool="schedule", args={"when": "2024-01-15T14:30:25", "attendees": 3, "online": "maybe"}),
    Case(kind="2020-12 prefixItems, too long", tool="move", args={"point": [1, 2, 3]}),
    Case(kind="2020-12 prefixItems, wrong item", tool="move", args={"point": [1, "x"]}),
    Case(kind="enum (Literal)", tool="move", args={"point": [1, 2], "label": "c"}),
    Case(kind="missing required", tool="move", args={}),
    *common("move", {"point": [1, 2]}),
]

KEYWORD_TOOLS = [
    Tool(
        name="tag",
        description="unevaluatedProperties over allOf",
        input_schema={
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "allOf": [{"properties": {"name": {"type": "string"}}, "required": ["name"]}],
            "properties": {"colour": {"type": "string"}},
            "unevaluatedProperties": False,
        },
    ),
    Tool(
        name="ship",
        description="dependentRequired",
        input_schema={
            "type": "object",
            "properties": {"address": {"type": "string"}, "postcode": {"type": "string"}, "gift": {"type": "boolean"}},
            "dependentRequired": {"address": ["postcode"]},
        },
    ),
    Tool(
        name="pair",
        description="prefixItems with items: false",
        input_schema={
            "type": "object",
            "properties": {"pair": {"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}], "items": False}},
            "required": ["pair"],
        },
    ),
]

KEYWORD_CASES = [
    Case(kind="valid", tool="tag", args={"name": "n", "colour": "red"}),
    Case(kind="valid (allOf property)", tool="tag", args={"name": "n"}),
    Case(kind="valid", tool="ship", args={"gift": True}),
    Case(kind="valid", tool="ship", args={"address": "1 Road", "postcode": "AB1"}),
    Case(kind="valid", tool="pair", args={"pair": ["a", 1]}),
    Case(kind="valid (shorter tuple)", tool="pair", args={"pair": ["a"]}),
    Case(kind="unknown extra argument", tool="ship", args={"gift": False, "note": "x"}),
    Case(kind="unevaluatedProperties", tool="tag", args={"name": "n", "size": 3}),
    Case(kind="dependentRequired", tool="ship", args={"address": "1 Road"}),
    Case(kind="prefixItems + items: false", tool="pair", args={"pair": ["a", 1, 2]}),
    Case(kind="prefixItems wrong item", tool="pair", args={"pair": [1, 1]}),
    Case(kind="missing required (allOf)", tool="tag", args={"colour": "red"}),
    *common("pair", {"pair": ["a", 1]}),
]


def keyword_server() -> Server[Any]:
    """A low-level server that validates its hand-written 2020-12 schemas with ``jsonschema``."""
    by_name = {t.name: t for t in KEYWORD_TOOLS}

    async def list_tools(ctx: Any, params: PaginatedRequestParams | None) -> ListToolsResult:
        return ListToolsResult(tools=KEYWORD_TOOLS)

    async def call_tool(ctx: Any, params: CallToolRequestParams) -> CallToolResult:
        tool = by_name.get(params.name)
        if tool is None:
            raise MCPError(code=mcp_types.INVALID_PARAMS, message=f"Unknown tool: {params.name}")
        errors = sorted(jsonschema.Draft202012Validator(tool.input_schema).iter_errors(params.arguments or {}), key=str)
        if errors:
            return CallToolResult(
                content=[TextContent(type="text", text=f"-32602 invalid arguments: {errors[0].message}")], is_error=True
            )
        return CallToolResult(content=[TextContent(type="text", text="ok")])

    return Server("keywords", on_list_tools=list_tools, on_call_tool=call_tool)


def in_process(make: Callable[[], Any]) -> Callable[[Path], AbstractAsyncContextManager[Client]]:
    def connect(root: Path) -> AbstractAsyncContextManager[Client]:
        return Client(make(), mode="legacy")

    return connect


class TestWhatReferenceServersDoNotUse:
    """Lax pydantic types and 2020-12 keywords, on real Python SDK servers (in process)."""

    async def test_pydantic_types(self, tmp_path: Path) -> None:
        """Naive datetimes, unix times, '3', 'yes' and tuples as pydantic reads them; bad values refused."""
        report(
            "MCPServer pydantic types", await compare("pydantic", in_process(pydantic_server), no_state, PYDANTIC_CASES, tmp_path)
        )

    async def test_asserted_formats_read_as_pydantic_does(self, tmp_path: Path) -> None:
        """assert_formats=True parses date-time as pydantic does: naive and unix times run, 'next week' is refused."""
        cases = [c for c in PYDANTIC_CASES if c.tool == "schedule" and not c.kind.startswith(("range", "wrong"))]
        cases = [Case(kind=c.kind, tool=c.tool, args=c.args) for c in cases]  # nothing is missed now
        rules = {"schedule": {"assert_formats": True}}
        outcomes = await compare("pydantic-formats", in_process(pydantic_server), no_state, cases, tmp_path, rules=rules)
        report("MCPServer pydantic types, assert_formats=True", outcomes)
        assert [o.case.kind for o in outcomes if o.blocked and o.case.tool == "schedule"] == ["not a datetime"]

    async def test_2020_12_keywords(self, tmp_path: Path) -> None:
        """unevaluatedProperties, dependentRequired and prefixItems + items: false as jsonschema applies them."""
        report(
            "low-level server, 2020-12 keywords",
            await compare("keywords", in_process(keyword_server), no_state, KEYWORD_CASES, tmp_path),
        )
