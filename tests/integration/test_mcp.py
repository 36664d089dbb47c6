"""MCP end to end: a real stdio server subprocess, checked on the client side and the server side.

The server is ``examples/mcp_server.py`` (an ``MCPServer`` with contacts tools), launched with
``stdio_client`` exactly as an MCP host would. The model is scripted: it first texts the phone
number the user gave as if it were a ``person_id``, reads the refusal, follows its hint
(search first) and repairs the call with the id the search returned.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

from mcp import Client, ClientSession, StdioServerParameters, stdio_client
from mcp.server import Server
from mcp.types import CallToolRequestParams, CallToolResult, ListToolsResult, PaginatedRequestParams, TextContent, Tool
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from structlog.testing import capture_logs

from prefixmon import Cause, Decision, EpisodeRecord, Outcome, SpecError, Telemetry, Toolset, read_records
from prefixmon.adapters.mcp import MonitorMiddleware, MonitorSession, declare_tools, result_value
from prefixmon.telemetry.logging import LiveLog

from ..test_bounds import collections_watched

pytestmark = pytest.mark.integration

SERVER = Path(__file__).resolve().parents[2] / "examples" / "mcp_server.py"
RULES: dict[str, dict[str, Any]] = {
    "search_contacts": {"produces": "person_id"},
    "send_message": {"refs": {"person_id": "person_id"}},
    "remove_contact": {"refs": {"person_id": "person_id"}, "invalidates": "person_id"},
}
REQUEST = "Text Fredrik (his number is +1 555 0100) that I am running late"

CallTool = Callable[[str, Any, str], Awaitable[CallToolResult]]


@asynccontextmanager
async def stdio_session(*args: str) -> AsyncIterator[ClientSession]:
    """A client session with a fresh server subprocess (closing it ends the process)."""
    params = StdioServerParameters(command=sys.executable, args=[str(SERVER), *args])
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


def text(result: CallToolResult) -> str:
    return "\n".join(block.text for block in result.content if isinstance(block, TextContent))


async def scripted_model(call_tool: CallTool) -> list[CallToolResult]:
    """The scripted model: invent an id, read the refusal, search, repair."""
    results = [await call_tool("send_message", {"person_id": "+1 555 0100", "text": "running late"}, "call_1")]
    if not (results[0].is_error and "search_contacts" in text(results[0])):
        return results  # without a readable hint this model gives up
    results.append(await call_tool("search_contacts", {"name": "Fredrik"}, "call_2"))
    person_id = result_value(results[1])["contacts"][0]["person_id"]
    results.append(await call_tool("send_message", {"person_id": person_id, "text": "running late"}, "call_3"))
    return results


class TestClientSide:
    """MonitorSession checks each call_tool before it is sent to the real server."""

    async def test_blocked_call_never_reaches_the_server_and_the_repair_does(self) -> None:
        """The invented id gets an isError reason, the repaired call is sent, the record says dependency at 1."""
        records: list[EpisodeRecord] = []
        async with stdio_session() as session, MonitorSession(session, rules=RULES, sink=records.append) as guarded:
            assert guarded.toolset.names == ["search_contacts", "send_message", "remove_contact"]
            async with guarded.episode(task_id="text-fredrik", labels={"model": "scripted"}) as ep:
                guarded.user(REQUEST)

                async def call(name: str, args: Any, call_id: str) -> CallToolResult:
                    return await guarded.call_tool(name, args, call_id=call_id)

                results = await scripted_model(call)
                sent = result_value(results[-1])
                ep.finish(Outcome.SUCCESS if sent.get("status") == "sent" else Outcome.FAILURE)
        assert results[0].is_error
        assert text(results[0]) == (
            "Call to 'send_message' was not run: send_message needs a person_id returned by an earlier call "
            "(search_contacts produces them); '+1 555 0100' was never returned by any tool"
        )
        assert sent == {"status": "sent", "to": "+1 555 0100", "count": 1}  # the server sent exactly one message
        [record] = records
        assert (record.horizon, record.fed, record.executable) == (3, 1, False)
        assert record.first_failure is not None and record.first_failure.cause is Cause.DEPENDENCY
        assert record.outcome is Outcome.SUCCESS
        assert [(a.call_id, a.decision, a.reached_environment) for a in record.actions] == [
            ("call_1", Decision.BLOCK, False),
            ("call_2", Decision.ALLOW, True),
            ("call_3", Decision.ALLOW, True),
        ]
        assert not record.invalid_reached_environment

    async def test_malformed_json_and_unknown_tools_are_answered_locally(self) -> None:
        """Raw truncated JSON and unlisted tools get isError schema reasons without a round trip."""
        records: list[EpisodeRecord] = []
        async with (
            stdio_session() as session,
            MonitorSession(session, sink=records.append) as guarded,
            guarded.episode(task_id="bad-input"),
        ):
            truncated = await guarded.call_tool("send_message", '{"person_id": "p-17", "te', call_id="a")
            unknown = await guarded.call_tool("delete_everything", {}, call_id="b")
        assert truncated.is_error and "not valid JSON" in text(truncated)
        assert unknown.is_error and "available tools: remove_contact, search_contacts, send_message" in text(unknown)
        assert [a.cause for a in records[0].actions] == [Cause.SCHEMA, Cause.SCHEMA]

    async def test_zero_config_observe_records_server_rejections(self) -> None:
        """Without rules, in observe mode, a server isError is a state_consistency failure that reached it."""
        records: list[EpisodeRecord] = []
        async with (
            stdio_session() as session,
            MonitorSession(session, policy="observe", sink=records.append) as guarded,
            guarded.episode(task_id="observe"),
        ):
            rejected = await guarded.call_tool("send_message", {"person_id": "p-99", "text": "hi"})
            ok = await guarded.call_tool("search_contacts", {"name": "amara"})
        assert rejected.is_error and "no contact with person_id 'p-99'" in text(rejected)
        assert not ok.is_error
        [record] = records
        assert record.fed == 1 and record.first_failure is not None
        assert record.first_failure.cause is Cause.STATE_CONSISTENCY
        assert record.actions[0].reached_environment and record.actions[0].error is not None

    async def test_call_tool_outside_an_episode_says_how_to_open_one(self) -> None:
        """call_tool without an episode is a clear RuntimeError, not a silent unrecorded call."""
        async with stdio_session() as session, MonitorSession(session) as guarded:
            with pytest.raises(RuntimeError, match=r"async with guarded.episode\(task_id=...\)"):
                await guarded.call_tool("search_contacts", {"name": "x"})

    async def test_mcp_client_works_too(self) -> None:
        """The high-level mcp.Client can be wrapped the same way."""
        records: list[EpisodeRecord] = []
        params = StdioServerParameters(command=sys.executable, args=[str(SERVER)])
        async with (
            Client(params) as client,
            MonitorSession(client, rules=RULES, sink=records.append) as guarded,
            guarded.episode(task_id="client"),
        ):
            results = await scripted_model(lambda n, a, c: guarded.call_tool(n, a, call_id=c))
        assert len(results) == 3 and not results[2].is_error
        assert (records[0].fed, records[0].horizon) == (1, 3)


class TestClientBatches:
    """MonitorSession.call_tools: the calls of one model turn judged as one batch, sent concurrently."""

    async def test_a_sibling_dependency_is_refused_and_independent_calls_run(self) -> None:
        records: list[EpisodeRecord] = []
        async with (
            stdio_session() as session,
            MonitorSession(session, rules=RULES, sink=records.append) as guarded,
            guarded.episode(task_id="turn"),
        ):
            first = await guarded.call_tools(
                [
                    ("search_contacts", {"name": "Fredrik"}, "c1"),
                    ("send_message", {"person_id": "p-17", "text": "late"}, "c2"),  # only the search returns p-17
                    ("search_contacts", {"name": "Olsen"}, "c3"),
                ]
            )
            person_id = result_value(first[0])["contacts"][0]["person_id"]
            second = await guarded.call_tools(
                [
                    ("send_message", {"person_id": person_id, "text": "late"}, "c4"),
                    ("send_message", {"person_id": person_id, "text": "late"}, "c5"),
                ]
            )
        assert [r.is_error for r in first] == [False, True, False]
        assert "search_contacts (call 1 of this batch) produces them but has not returned" in text(first[1])
        assert [r.is_error for r in second] == [False, False]  # a duplicate is reported, and both are sent
        assert sorted(result_value(r)["count"] for r in second) == [1, 2]  # sent concurrently: either may land first
        (record,) = records
        assert [(a.depth, a.call_id, a.code, a.reached_environment) for a in record.actions] == [
            (1, "c1", None, True),
            (2, "c2", "sibling_dependency", False),
            (3, "c3", None, True),
            (4, "c4", None, True),
            (5, "c5", "duplicate_call", True),
        ]

    async def test_a_server_error_answers_its_call_and_keeps_the_others(self) -> None:
        """A tool error of one call is its isError result; the sibling's result is kept."""
        async with stdio_session() as session, MonitorSession(session) as guarded, guarded.episode(task_id="errors"):
            results = await guarded.call_tools(
                [("remove_contact", {"person_id": "nobody"}), ("search_contacts", {"name": "Fredrik"})]
            )
        assert results[0].is_error and "no contact with person_id 'nobody'" in text(results[0])
        assert not results[1].is_error and result_value(results[1])["contacts"]


class TestServerSide:
    """MonitorMiddleware protects the server itself, whatever the client does."""

    async def test_guarded_server_refuses_and_records_the_connection(self, tmp_path: Path) -> None:
        """An unprotected client's invalid call is refused by the server; the connection is one episode."""
        path = tmp_path / "server.jsonl"
        async with stdio_session("--guard", "--records", str(path)) as session:

            async def call(name: str, args: Any, call_id: str) -> CallToolResult:
                return await session.call_tool(name, args)  # a plain client: no checks of its own

            results = await scripted_model(call)
            removed = await session.call_tool("remove_contact", {"person_id": "p-17"})
            stale = await session.call_tool("send_message", {"person_id": "p-17", "text": "again"})
        assert "needs a person_id returned by an earlier call" in text(results[0])
        assert result_value(results[2])["status"] == "sent"
        assert not removed.is_error
        assert stale.is_error and "p-17" in text(stale)
        [record] = read_records(path)  # written when the connection closed
        assert (record.horizon, record.fed) == (5, 1)
        assert record.task_id == "contacts-server"
        assert [a.cause for a in record.actions] == [Cause.DEPENDENCY, None, None, None, Cause.DEPENDENCY]
        assert [a.decision for a in record.actions] == [Decision.BLOCK, *[Decision.ALLOW] * 3, Decision.BLOCK]
        assert record.outcome is None  # a server cannot know whether the user's task succeeded
        assert all(a.call_id for a in record.actions)  # JSON-RPC request ids

    @pytest.mark.parametrize("mode", ["legacy", "auto"])
    async def test_low_level_server_middleware_in_both_protocol_eras(self, mode: str) -> None:
        """On a low-level Server, the middleware learns tools from tools/list and blocks bad calls."""
        ran: list[str] = []

        async def list_tools(ctx: Any, params: PaginatedRequestParams | None) -> ListToolsResult:
            schema = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}
            return ListToolsResult(tools=[Tool(name="echo", input_schema=schema)])

        async def call_tool(ctx: Any, params: CallToolRequestParams) -> CallToolResult:
            ran.append(str((params.arguments or {}).get("text")))
            return CallToolResult(content=[TextContent(type="text", text=ran[-1])])

        records: list[EpisodeRecord] = []
        guard = MonitorMiddleware(sink=records.append)
        server: Server[Any] = Server("echo", on_list_tools=list_tools, on_call_tool=call_tool)
        server.middleware.append(guard)
        async with guard, Client(server, mode=mode) as client:
            good = await client.call_tool("echo", {"text": "hi"})
            bad = await client.call_tool("echo", {"txt": "hi"})
        assert text(good) == "hi" and ran == ["hi"]
        # the schema says nothing about 'txt' (servers ignore such names): what is wrong is the missing 'text'
        assert bad.is_error and text(bad) == "Call to 'echo' was not run: echo: missing required argument 'text'"
        [record] = records
        assert (record.horizon, record.fed) == (2, 2)
        assert record.first_failure is not None and record.first_failure.cause is Cause.SCHEMA


async def echo_server(guard: MonitorMiddleware, ran: list[str]) -> Server[Any]:
    """A low-level server with one ``echo`` tool, guarded by ``guard``."""

    async def list_tools(ctx: Any, params: PaginatedRequestParams | None) -> ListToolsResult:
        schema = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}
        return ListToolsResult(tools=[Tool(name="echo", input_schema=schema)])

    async def call_tool(ctx: Any, params: CallToolRequestParams) -> CallToolResult:
        ran.append(str((params.arguments or {}).get("text")))
        return CallToolResult(content=[TextContent(type="text", text=ran[-1])])

    server: Server[Any] = Server("echo", on_list_tools=list_tools, on_call_tool=call_tool)
    server.middleware.append(guard)
    return server


class TestServerEpisodeLifetime:
    """Server-side episodes are opened and closed by the middleware itself, on any anyio backend."""

    @pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
    async def test_each_connection_is_an_episode_closed_at_teardown(self, anyio_backend: str) -> None:
        """Two connections give two records, each written when its client disconnects; no helper thread is started."""
        ran: list[str] = []
        records: list[EpisodeRecord] = []
        guard = MonitorMiddleware(sink=records.append, task_id="echo-task")
        server = await echo_server(guard, ran)
        threads = threading.active_count()
        async with Client(server, mode="legacy") as client:
            await client.call_tool("echo", {"text": "one"})
            await client.call_tool("echo", {"txt": "typo"})
            assert threading.active_count() <= threads  # the open episode needs no thread of its own
            assert records == []
        assert [(r.horizon, r.fed, r.status) for r in records] == [(2, 2, "finished")]
        async with Client(server, mode="legacy") as client:
            await client.call_tool("echo", {"text": "two"})
        assert [(r.horizon, r.fed, r.executable) for r in records] == [(2, 2, False), (1, 2, True)]
        assert records[0].episode_id != records[1].episode_id
        assert {r.task_id for r in records} == {"echo-task"}
        await guard.aclose()  # nothing is left open
        assert len(records) == 2 and ran == ["one", "two"]

    @pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
    async def test_aclose_finishes_episodes_under_a_custom_key(self, anyio_backend: str) -> None:
        """Episodes grouped by key= outlive connections and are finished by aclose()."""
        ran: list[str] = []
        records: list[EpisodeRecord] = []
        guard = MonitorMiddleware(sink=records.append, key=lambda ctx: "everyone")
        server = await echo_server(guard, ran)
        for text_ in ("a", "b"):
            async with Client(server, mode="legacy") as client:
                await client.call_tool("echo", {"text": text_})
        assert records == []
        await guard.aclose()
        [record] = records
        assert record.horizon == 2 and [a.reached_environment for a in record.actions] == [True, True]


class TestDeclareTools:
    """Tool specs from MCP tool listings (no server needed)."""

    def test_models_and_wire_dicts_declare_and_redeclare(self) -> None:
        """Tool models and wire dicts both declare; an unchanged listing changes nothing, a new schema replaces."""
        schema = {"type": "object", "properties": {"q": {"type": "string"}}}
        toolset = Toolset()
        assert declare_tools(toolset, [Tool(name="find", input_schema=schema)], rules={"find": {"produces": "id"}}) == ["find"]
        assert declare_tools(toolset, [{"name": "find", "inputSchema": schema}]) == []
        wider = {**schema, "required": ["q"]}
        assert declare_tools(toolset, [{"name": "find", "inputSchema": wider}]) == ["find"]
        assert toolset["find"].parameters["required"] == ["q"]

    def test_bad_entries_say_where(self) -> None:
        """A nameless tool or a misspelt rule option is a SpecError naming it."""
        with pytest.raises(SpecError, match=r"tools\[1\]: an MCP tool needs a non-empty name"):
            declare_tools(Toolset(), [{"name": "a"}, {"inputSchema": {}}])
        with pytest.raises(SpecError, match=r"rules\['a'\]: .*'produce'"):
            declare_tools(Toolset(), [{"name": "a"}], rules={"a": {"produce": "id"}})


class TestServerListingFailure:
    """A server whose own tools/list fails never breaks its clients."""

    @pytest.mark.parametrize(("mode", "ran_expected"), [("fail_open", ["hi"]), ("fail_closed", [])])
    async def test_failing_listing_fails_open_or_closed(self, mode: str, ran_expected: list[str]) -> None:
        """fail_open lets the call through unchecked; fail_closed answers it with an isError result."""
        ran: list[str] = []

        listings: list[int] = []

        async def list_tools(ctx: Any, params: PaginatedRequestParams | None) -> ListToolsResult:
            listings.append(1)
            if len(listings) == 1:  # the middleware's own first read fails (the client lists again later)
                raise RuntimeError("listing is broken")
            return ListToolsResult(tools=[Tool(name="echo", input_schema={"type": "object"})])

        async def call_tool(ctx: Any, params: CallToolRequestParams) -> CallToolResult:
            ran.append(str((params.arguments or {}).get("text")))
            return CallToolResult(content=[TextContent(type="text", text=ran[-1])])

        guard = MonitorMiddleware(failure_mode=mode)
        server: Server[Any] = Server("echo", on_list_tools=list_tools, on_call_tool=call_tool)
        server.middleware.append(guard)
        async with guard, Client(server, mode="legacy") as client:
            result = await client.call_tool("echo", {"text": "hi"})
        assert ran == ran_expected
        assert bool(result.is_error) is (mode == "fail_closed")

    @pytest.mark.parametrize("mode", ["fail_open", "fail_closed"])
    async def test_names_called_during_an_outage_stay_made_up(self, mode: str) -> None:
        """While tools/list fails, a name a client makes up is not declared: telemetry and logs label it as
        a made-up name (a long one is <unknown tool>), the toolset does not grow, and the failure mode decides."""
        made_up = "lookup_" + "a" * 100 + "_sk-live-SECRET"
        ran: list[str] = []
        listing_works = False

        async def list_tools(ctx: Any, params: PaginatedRequestParams | None) -> ListToolsResult:
            if not listing_works:
                raise RuntimeError("tool registry unavailable")
            return ListToolsResult(tools=[Tool(name="echo", input_schema={"type": "object"})])

        async def call_tool(ctx: Any, params: CallToolRequestParams) -> CallToolResult:
            ran.append(params.name)
            return CallToolResult(content=[TextContent(type="text", text="unknown tool")], is_error=True)

        spans = InMemorySpanExporter()
        tp = TracerProvider()
        tp.add_span_processor(SimpleSpanProcessor(spans))
        records: list[EpisodeRecord] = []
        guard = MonitorMiddleware(
            failure_mode=mode,
            sink=records.append,
            observers=[Telemetry(tracer_provider=tp, tool_spans="own"), LiveLog(log_calls=True)],
        )
        server: Server[Any] = Server("s", on_list_tools=list_tools, on_call_tool=call_tool)
        server.middleware.append(guard)
        with capture_logs() as events:
            async with guard, Client(server, mode="legacy") as client:
                for name in (made_up, "short_made_up", made_up):
                    await client.call_tool(name, {})
                assert made_up not in guard.toolset and "short_made_up" not in guard.toolset
                listing_works = True
                await client.call_tool("echo", {})
        tp.shutdown()
        assert guard.toolset.names == ["echo"]
        assert ran == ([made_up, "short_made_up", made_up, "echo"] if mode == "fail_open" else ["echo"])
        [record] = records
        assert [a.tool for a in record.actions] == [made_up, "short_made_up", made_up, "echo"]
        expected = Decision.ALLOW if mode == "fail_open" else Decision.FAIL_CLOSED
        assert [a.decision for a in record.actions[:3]] == [expected] * 3
        assert guard.monitor.stats.internal_errors == 3
        finished = spans.get_finished_spans()
        exported = repr(
            [(s.name, dict(s.attributes or {}), [(e.name, dict(e.attributes or {})) for e in s.events]) for s in finished]
        )
        assert "SECRET" not in exported and "SECRET" not in repr(events)
        assert "short_made_up" in exported  # a short made-up name is kept, as for any undeclared tool
        assert not any("short_made_up" in s.name for s in finished)  # but never in a span name


class TestDeeplyNestedResults:
    """A text block nested too deeply to parse is information as text, never a RecursionError."""

    async def test_a_deep_text_result_leaves_both_sides_and_collections_room(self) -> None:
        """A server returns JSON text 5,000 levels deep; its guard and a guarded client both record the call
        as run, and no collection meets a full stack."""
        deep = '{"id": "doc-1", "body": ' + "[" * 5_000 + "]" * 5_000 + "}"

        async def list_tools(ctx: Any, params: PaginatedRequestParams | None) -> ListToolsResult:
            return ListToolsResult(tools=[Tool(name="fetch", input_schema={"type": "object"})])

        async def call_tool(ctx: Any, params: CallToolRequestParams) -> CallToolResult:
            return CallToolResult(content=[TextContent(type="text", text=deep)])

        served: list[EpisodeRecord] = []
        guard = MonitorMiddleware(sink=served.append, task_id="deep")
        server: Server[Any] = Server("deep", on_list_tools=list_tools, on_call_tool=call_tool)
        server.middleware.append(guard)
        seen: list[EpisodeRecord] = []
        with collections_watched() as failures:
            async with (
                guard,
                Client(server, mode="legacy") as client,
                MonitorSession(client, sink=seen.append) as guarded,
                guarded.episode(task_id="deep"),
            ):
                result = await guarded.call_tool("fetch", {}, call_id="d1")
        assert failures == []
        assert not result.is_error and text(result) == deep
        for records in (served, seen):
            [record] = records
            assert [(a.decision, a.reached_environment, a.error) for a in record.actions] == [(Decision.ALLOW, True, None)]
