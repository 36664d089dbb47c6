"""MCP edge cases against real stdio server subprocesses: protocol eras, transport failures, tool lists.

The servers are this module run as a script (``python -m tests.integration.test_mcp_edges
serve KIND RECORDS [FAILURE_MODE]``), each guarded by :class:`MonitorMiddleware`, writing
its episode records to ``RECORDS`` and its pid to ``RECORDS.pid``:

* ``tools``: an ``MCPServer`` whose tools change at runtime (``add_dyn``, ``remove_echo``)
  and a ``slow`` tool;
* ``paged``: a low-level ``Server`` whose ``tools/list`` has two pages;
* ``badlist``: a low-level ``Server`` whose first ``tools/list`` fails.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

pytest.importorskip("mcp")

from mcp import Client, ClientSession, MCPError, StdioServerParameters, stdio_client
from mcp.server import Server
from mcp.server.mcpserver import MCPServer
from mcp.server.stdio import stdio_server
from mcp.types import CallToolRequestParams, CallToolResult, ListToolsResult, PaginatedRequestParams, TextContent, Tool

from prefixmon import Cause, Decision, EpisodeRecord, read_records
from prefixmon.adapters.mcp import MonitorMiddleware, MonitorSession

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "mcp_server.py"
TEXT_SCHEMA: dict[str, Any] = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}


# -- the servers (run in a subprocess) --------------------------------------------------------
def tools_server(records: str) -> None:
    """An MCPServer whose tool list changes at runtime; the record is written when it stops."""
    guard = MonitorMiddleware(policy="block", sink=records, task_id="tools")
    server = MCPServer("tools", middleware=[guard], lifespan=guard.lifespan(), log_level="WARNING")

    @server.tool()
    def echo(text: str) -> dict[str, Any]:
        return {"echo": text}

    @server.tool()
    async def slow(seconds: float) -> dict[str, Any]:
        await anyio.sleep(seconds)
        return {"slept": seconds}

    @server.tool()
    def boom(x: int) -> int:
        raise RuntimeError(f"kaboom {x}")

    def dyn(n: int) -> dict[str, Any]:
        return {"n": n}

    @server.tool()
    def add_dyn() -> str:
        server.add_tool(dyn)
        return "added"

    @server.tool()
    def remove_echo() -> str:
        server.remove_tool("echo")
        return "removed"

    server.run("stdio")


def low_level_server(kind: str, records: str, failure_mode: str) -> None:
    """A low-level Server: ``paged`` lists ``a`` and ``b`` on two pages; ``badlist`` fails its first listing."""
    pages: list[str | None] = []  # the cursor of every tools/list page served

    async def list_tools(ctx: Any, params: PaginatedRequestParams | None) -> ListToolsResult:
        cursor = params.cursor if params is not None else None
        pages.append(cursor)
        if kind == "badlist":
            if len(pages) == 1:
                raise RuntimeError("listing is broken")
            return ListToolsResult(tools=[Tool(name="echo", input_schema=TEXT_SCHEMA)])
        if cursor is None:
            return ListToolsResult(tools=[Tool(name="a", input_schema=TEXT_SCHEMA)], next_cursor="p2")
        return ListToolsResult(
            tools=[Tool(name="b", input_schema=TEXT_SCHEMA), Tool(name="pages", input_schema={"type": "object"})]
        )

    async def call_tool(ctx: Any, params: CallToolRequestParams) -> CallToolResult:
        if params.name == "pages":  # the cursors of the tools/list pages served so far
            return CallToolResult(content=[TextContent(type="text", text=json.dumps(pages))])
        return CallToolResult(content=[TextContent(type="text", text=f"{params.name} ran")])

    guard = MonitorMiddleware(sink=records, failure_mode=failure_mode, task_id=kind)
    server: Server[Any] = Server(kind, on_list_tools=list_tools, on_call_tool=call_tool, lifespan=guard.lifespan())
    server.middleware.append(guard)

    async def serve() -> None:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    anyio.run(serve)


def main(argv: list[str]) -> None:
    _, kind, records, *rest = argv
    Path(records + ".pid").write_text(str(os.getpid()))
    if kind == "tools":
        tools_server(records)
    else:
        low_level_server(kind, records, rest[0] if rest else "fail_open")


# -- helpers ----------------------------------------------------------------------------------
def server_params(kind: str, records: Path, *extra: str) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable, args=["-m", "tests.integration.test_mcp_edges", "serve", kind, str(records), *extra], cwd=ROOT
    )


@asynccontextmanager
async def session_with(kind: str, records: Path, *extra: str) -> AsyncIterator[ClientSession]:
    """A legacy-handshake client session with a fresh server subprocess."""
    async with stdio_client(server_params(kind, records, *extra)) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


async def records_of(path: Path, count: int = 1) -> list[EpisodeRecord]:
    """The records the server wrote (it writes them as it stops, just after the client closed it)."""
    with anyio.fail_after(10):
        while not path.exists() or len(path.read_text().splitlines()) < count:
            await anyio.sleep(0.05)
    return read_records(path)


def text(result: CallToolResult) -> str:
    return "\n".join(block.text for block in result.content if isinstance(block, TextContent))


def rows(record: EpisodeRecord) -> list[tuple[str | None, Decision, Cause | None, bool]]:
    return [(a.tool, a.decision, a.cause, a.reached_environment) for a in record.actions]


# -- tests ------------------------------------------------------------------------------------
class TestModernProtocol:
    """mcp.Client's default mode (the stateless 2026-07-28 protocol) still gets its episode written."""

    async def test_default_client_mode_record_is_written_when_the_server_stops(self, tmp_path: Path) -> None:
        """With Client(params) the requests share one episode, written by the server's lifespan at shutdown."""
        path = tmp_path / "tools.jsonl"
        async with Client(server_params("tools", path)) as client:
            assert client.protocol_version == "2026-07-28"
            assert not (await client.call_tool("echo", {"text": "hi"})).is_error
            blocked = await client.call_tool("echo", {"txt": "typo"})
        assert blocked.is_error and "missing required argument 'text'" in text(blocked)
        [record] = await records_of(path)
        assert (record.task_id, record.horizon, record.fed, record.status) == ("tools", 2, 2, "finished")

    async def test_the_example_server_writes_its_record_under_the_default_client_mode(self, tmp_path: Path) -> None:
        """examples/mcp_server.py --guard --records writes the episode when a default-mode client closes it."""
        path = tmp_path / "example.jsonl"
        params = StdioServerParameters(command=sys.executable, args=[str(EXAMPLE), "--guard", "--records", str(path)])
        async with Client(params) as client:
            invented = await client.call_tool("send_message", {"person_id": "+1 555 0100", "text": "late"})
            found = await client.call_tool("search_contacts", {"name": "Fredrik"})
        assert invented.is_error and not found.is_error
        [record] = await records_of(path)
        assert (record.task_id, record.horizon, record.fed) == ("contacts-server", 2, 1)
        assert rows(record) == [
            ("send_message", Decision.BLOCK, Cause.DEPENDENCY, False),
            ("search_contacts", Decision.ALLOW, None, True),
        ]


class TestClientTransportFailures:
    """A transport failure is no answer from the tool: the call is abandoned, not judged non-executable."""

    async def test_timeout_and_dead_server_abandon_the_call_and_tool_errors_still_count(self, tmp_path: Path) -> None:
        """Read timeout and a killed server reach the caller as MCPError, leave FED at the tool's own error."""
        records: list[EpisodeRecord] = []
        server_log = tmp_path / "server.jsonl"
        async with (
            session_with("tools", server_log) as session,
            MonitorSession(session, sink=records.append) as guarded,
            guarded.episode(task_id="c"),
        ):
            assert not (await guarded.call_tool("echo", {"text": "hi"}, call_id="ok")).is_error
            rejected = await guarded.call_tool("boom", {"x": 1}, call_id="boom")
            with pytest.raises(MCPError, match="timed out"):
                await guarded.call_tool("slow", {"seconds": 5}, 0.3, call_id="timeout")

            async def kill_server() -> None:
                await anyio.sleep(0.5)
                os.kill(int(Path(str(server_log) + ".pid").read_text()), signal.SIGKILL)

            async with anyio.create_task_group() as tg:
                tg.start_soon(kill_server)
                with pytest.raises(MCPError, match="Connection closed"):
                    await guarded.call_tool("slow", {"seconds": 5}, call_id="killed")
            with pytest.raises(MCPError, match="Connection closed"):
                await guarded.call_tool("echo", {"text": "after"}, call_id="after")
        assert rejected.is_error and text(rejected) == "Error executing tool boom"
        [record] = records
        assert (record.horizon, record.fed) == (5, 2)
        assert record.first_failure is not None and record.first_failure.cause is Cause.STATE_CONSISTENCY
        acts = {a.call_id: a for a in record.actions}
        assert [a.call_id for a in record.actions if not a.executable] == ["boom"]
        assert [(a.call_id, a.reached_environment) for a in record.actions] == [
            ("ok", True),
            ("boom", True),
            ("timeout", True),  # sent; its outcome is unknown
            ("killed", True),
            ("after", False),  # the connection was already gone: never sent
        ]
        assert "timed out" in (acts["timeout"].error or "")
        assert "Connection closed" in (acts["after"].error or "")


class TestServerToolList:
    """The middleware judges calls against the server's whole, current tool list."""

    async def test_a_tool_on_a_later_page_is_known_before_the_first_call(self, tmp_path: Path) -> None:
        """A client that read only page 1 can still call a page-2 tool; the middleware read every page."""
        path = tmp_path / "paged.jsonl"
        async with session_with("paged", path) as session:
            page = await session.list_tools()
            assert [t.name for t in page.tools] == ["a"] and page.next_cursor == "p2"
            result = await session.call_tool("b", {"text": "hi"})
            bad = await session.call_tool("b", {"txt": "hi"})
        assert not result.is_error and text(result) == "b ran"
        assert bad.is_error and "missing required argument 'text'" in text(bad)
        [record] = await records_of(path)
        assert rows(record) == [("b", Decision.ALLOW, None, True), ("b", Decision.BLOCK, Cause.SCHEMA, False)]

    async def test_an_unknown_name_relists_once_then_is_refused(self, tmp_path: Path) -> None:
        """A call to an unlisted name re-reads the list once (both pages); a repeat soon after does not."""
        path = tmp_path / "paged.jsonl"
        async with session_with("paged", path) as session:
            before = json.loads(text(await session.call_tool("pages", {})))  # the middleware's own first read
            first = await session.call_tool("nope", {})
            second = await session.call_tool("nope", {})
            after = json.loads(text(await session.call_tool("pages", {})))
        # only the middleware reads page 2 (the SDK client reads page 1 for output schemas):
        # once before the first call, once more for the two calls to the unlisted name
        assert (before.count("p2"), after.count("p2")) == (1, 2)
        assert first.is_error and "there is no tool named 'nope'" in text(first)
        assert second.is_error
        [record] = await records_of(path)
        assert [a.cause for a in record.actions] == [None, Cause.SCHEMA, Cause.SCHEMA, None]

    async def test_tools_added_and_removed_at_runtime(self, tmp_path: Path) -> None:
        """An added tool runs before the client re-lists; a tool the listing dropped is refused, not sent."""
        path = tmp_path / "tools.jsonl"
        async with session_with("tools", path) as session:
            await session.list_tools()
            assert not (await session.call_tool("add_dyn", {})).is_error
            dyn = await session.call_tool("dyn", {"n": 1})  # the client has not re-listed
            assert not (await session.call_tool("remove_echo", {})).is_error
            listed = [t.name for t in (await session.list_tools()).tools]
            gone = await session.call_tool("echo", {"text": "gone"})
        assert not dyn.is_error and json.loads(text(dyn)) == {"n": 1}
        assert "echo" not in listed and "dyn" in listed
        assert gone.is_error and "Call to 'echo' was not run" in text(gone)
        [record] = await records_of(path)
        assert rows(record) == [
            ("add_dyn", Decision.ALLOW, None, True),
            ("dyn", Decision.ALLOW, None, True),
            ("remove_echo", Decision.ALLOW, None, True),
            ("echo", Decision.BLOCK, Cause.SCHEMA, False),
        ]


class TestServerListingFailure:
    """Every call is recorded while the server's own tool listing fails."""

    @pytest.mark.parametrize("mode", ["fail_open", "fail_closed"])
    async def test_calls_during_a_failing_listing_are_recorded(self, tmp_path: Path, mode: str) -> None:
        """fail_open runs the call unchecked (recorded executable); fail_closed refuses it (recorded fail_closed)."""
        path = tmp_path / "badlist.jsonl"
        async with session_with("badlist", path, mode) as session:
            results = [await session.call_tool("echo", {"text": str(i)}) for i in range(3)]
        [record] = await records_of(path)
        if mode == "fail_open":
            assert [r.is_error for r in results] == [False, False, False]
            assert rows(record) == [("echo", Decision.ALLOW, None, True)] * 3
        else:
            assert [r.is_error for r in results] == [True, False, False]
            assert "could not be checked" in text(results[0])
            assert rows(record)[0] == ("echo", Decision.FAIL_CLOSED, Cause.PRECONDITION, False)
            assert rows(record)[1:] == [("echo", Decision.ALLOW, None, True)] * 2
        assert record.horizon == 3


class TestServerMalformedArguments:
    """Wire arguments that are not an object get the SDK's own answer: invalid params; the tool never runs."""

    def test_json_text_arguments_are_invalid_params(self, tmp_path: Path) -> None:
        """'arguments' sent as JSON text, a list or a number: -32602, recorded as schema failures not sent."""
        path = tmp_path / "tools.jsonl"
        proc = subprocess.Popen(
            [sys.executable, *server_params("tools", path).args],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        assert proc.stdin is not None and proc.stdout is not None
        stdin, stdout = proc.stdin, proc.stdout

        def ask(id_: int, method: str, params: dict[str, Any]) -> dict[str, Any]:
            stdin.write(json.dumps({"jsonrpc": "2.0", "id": id_, "method": method, "params": params}) + "\n")
            stdin.flush()
            answer: dict[str, Any] = json.loads(stdout.readline())
            return answer

        try:
            init = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}
            assert "result" in ask(0, "initialize", init)
            stdin.write(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}) + "\n")
            answers = [
                ask(i, "tools/call", {"name": "echo", "arguments": arguments})
                for i, arguments in enumerate(['{"text": "json in a string"}', [1, 2], 5, {"text": "ok"}], 1)
            ]
            stdin.close()
            assert proc.wait(timeout=10) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
            stdout.close()
            if not stdin.closed:
                stdin.close()
        assert [a.get("error", {}).get("code") for a in answers] == [-32602, -32602, -32602, None]
        assert answers[3]["result"]["structuredContent"] == {"echo": "ok"}
        [record] = read_records(path)
        assert rows(record) == [*[("echo", Decision.BLOCK, Cause.SCHEMA, False)] * 3, ("echo", Decision.ALLOW, None, True)]
        assert [a.reason for a in record.actions[:3]] == [
            "echo: arguments must be a JSON object, got str",
            "echo: arguments must be a JSON object, got list",
            "echo: arguments must be a JSON object, got int",
        ]


if __name__ == "__main__":
    main(sys.argv[1:])
