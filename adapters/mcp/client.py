"""The client side: :class:`MonitorSession` checks each ``call_tool`` before it is sent."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any

import anyio
from mcp import Client, MCPError
from mcp.types import CallToolResult, ListToolsResult, PaginatedRequestParams, TextContent, Tool
from mcp_types import CONNECTION_CLOSED

from prefixmon import Episode, Monitor, PendingCall, SpecError, ToolBlocked, ToolCall, Toolset, current_episode
from prefixmon.episode import cancellation

from ._common import (
    MAX_LIST_PAGES,
    CoercionChoice,
    LearnsReadings,
    Mode,
    SpecSource,
    ToolSession,
    blocked_result,
    check_coercion,
    declare,
    error_text,
    expose,
    is_error,
    learn,
    load_source,
    names_of,
    result_value,
    settle,
    stack_of,
    transport_failure,
)

__all__ = ["MonitorSession"]


class MonitorSession:
    """An MCP client session whose ``call_tool`` is checked before anything is sent.

    Args:
        session: an initialized ``mcp.ClientSession`` or an entered ``mcp.Client``.
        monitor: a monitor to use; its toolset receives the server's tools. Default: a new
            ``Monitor(Toolset(), policy=policy, **monitor_options)``.
        rules: per-tool :meth:`Toolset.add_schema` options (references, preconditions, ...).
        spec: a spec file (path, mapping or loaded) merged onto the server's tools as they are
            listed; loaded here, so a bad file fails now with its file and line.
        policy: used when ``monitor`` is not given (default ``"block"``).
        coercion: how the server reads argument values; ``"auto"`` (default) chooses from
            the server's implementation info, its capabilities and each tool's schema
            (:func:`coercion_for`). Tools ``"auto"`` reads as ``"unknown"`` are read as the
            server's validator reads values once a refusal of the server shows which it is
            (zod's, pydantic's or ``jsonschema``'s messages).
        **monitor_options: further :class:`Monitor` options (``sink=``, ``observers=``, ...).

    Use it as an async context manager (it lists the server's tools on entry), open one
    episode per agent run with :meth:`episode`, and call tools with :meth:`call_tool`.
    """

    def __init__(
        self,
        session: ToolSession,
        monitor: Monitor | None = None,
        *,
        rules: Mapping[str, Mapping[str, Any]] | None = None,
        spec: SpecSource | None = None,
        policy: str = "block",
        coercion: CoercionChoice = "auto",
        **monitor_options: Any,
    ) -> None:
        if monitor is not None and monitor_options:
            raise SpecError(f"pass either monitor= or Monitor options, not both (got {', '.join(sorted(monitor_options))})")
        check_coercion(coercion)
        self.coercion: CoercionChoice = coercion
        self.session = session
        if monitor is None:  # a spec file's probes call the server's read-only tools through this session
            monitor_options.setdefault("probe", self._probe)
        self.monitor = monitor if monitor is not None else Monitor(Toolset(), policy=policy, **monitor_options)
        self.rules: dict[str, Mapping[str, Any]] = dict(rules or {})
        self.spec = load_source(spec)
        """Rules merged onto the server's tools as they are listed (a spec file)."""
        self._declared: set[str] = set()
        self._gone: set[str] = set()
        """Tools an earlier complete listing had and the last one did not: hidden in the episodes."""
        self._connection_lost = False
        self._listed: dict[str, Tool] = {}
        """The last listing of each tool (re-declared when the server's validator is learnt)."""
        self._modes: dict[str, Mode] = {}
        """The mode ``"auto"`` chose for each tool (without a rule's own ``coercion``)."""
        self._learnt: Mode | None = None
        """How the server's validator reads values, as its refusals showed (for tools read as ``"unknown"``)."""

    @property
    def toolset(self) -> Toolset:
        """The toolset the server's tools are declared in."""
        return self.monitor.toolset

    async def __aenter__(self) -> MonitorSession:
        await self.refresh_tools()
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    async def list_tools(self, cursor: str | None = None) -> ListToolsResult:
        """One ``tools/list`` page; the listed tools are declared (or updated) in the toolset."""
        if isinstance(self.session, Client):
            result = await self.session.list_tools(cursor=cursor)
        else:
            result = await self.session.list_tools(params=PaginatedRequestParams(cursor=cursor) if cursor else None)
        self._learn(result.tools)
        return result

    async def refresh_tools(self) -> list[str]:
        """List every tool the server offers (all pages); returns the names.

        Tools an earlier listing had and this one does not are hidden in the current
        episode and in episodes opened later (a call to one is refused as unavailable).
        """
        names: list[str] = []
        cursor: str | None = None
        for _ in range(MAX_LIST_PAGES):
            result = await self.list_tools(cursor)
            names.extend(t.name for t in result.tools)
            cursor = result.next_cursor
            if not cursor:
                break
        if not cursor:  # a complete listing: what it lacks is gone
            self._gone = self._declared - set(names)
            ep = current_episode()
            if ep is not None and ep.monitor is self.monitor and self._gone:
                ep.hide(*self._gone)
        return names

    def _learn(self, tools: Iterable[Tool], *, again: bool = False) -> None:
        tools = list(tools)
        listed = names_of(tools)
        self._listed.update((t.name, t) for t in tools)
        changed = declare(
            self.toolset,
            tools,
            self.rules,
            coercion=self.coercion,
            server_info=self.session.server_info,
            capabilities=self.session.server_capabilities,
            spec=self.spec,
            modes=self._modes,
            learnt=self._learnt,
            again=again,
        )
        self._declared |= listed
        back = self._gone & listed
        self._gone -= listed
        ep = current_episode()
        if ep is not None and ep.monitor is self.monitor:
            for name in {*changed, *back}:
                expose(ep, name)

    @asynccontextmanager
    async def episode(
        self, task_id: str | None = None, labels: Mapping[str, str] | None = None, **options: Any
    ) -> AsyncIterator[Episode]:
        """One agent run: ``async with guarded.episode(task_id=...) as ep`` (see ``Monitor.episode``)."""
        async with self.monitor.episode(task_id, labels, **options) as ep:
            if self._gone and "exposed" not in options:
                ep.hide(*self._gone)
            yield ep

    def _episode(self) -> Episode:
        ep = current_episode()
        if ep is None or ep.monitor is not self.monitor:
            raise RuntimeError(
                "MonitorSession.call_tool runs inside an episode: wrap the agent run in `async with guarded.episode(task_id=...)`"
            )
        return ep

    async def call_tool(
        self,
        name: str,
        arguments: Mapping[str, Any] | str | None = None,
        read_timeout_seconds: float | None = None,
        *,
        call_id: str | None = None,
        **kwargs: Any,
    ) -> CallToolResult:
        """Check the call, then send it unless the policy stops it.

        Args:
            name: the tool.
            arguments: a dict, or the model's raw JSON text (malformed JSON is a schema
                failure, reported to the model).
            read_timeout_seconds: as for ``ClientSession.call_tool``.
            call_id: the model's tool call id, recorded as ``gen_ai.tool.call.id``.
            **kwargs: further ``ClientSession.call_tool`` options (``meta=``, ...).

        Returns:
            the server's result, or an ``isError`` result with the reason when the call was
            not sent.

        Raises:
            MCPError: as ``ClientSession.call_tool``. A transport failure (connection closed,
                read timeout) is no answer from the tool: the call is recorded as abandoned
                (not sent at all when the connection was already known to be closed), not
                as rejected; a JSON-RPC error answer is the tool rejecting the call.
        """
        ep = self._episode()
        try:
            pending = await ep.begin(name, arguments, call_id=call_id)
        except ToolBlocked as blocked:
            return blocked_result(blocked)
        return await self._send(pending, read_timeout_seconds, **kwargs)

    async def call_tools(
        self,
        calls: Sequence[tuple[str, Mapping[str, Any] | str | None] | tuple[str, Mapping[str, Any] | str | None, str | None]],
        read_timeout_seconds: float | None = None,
        **kwargs: Any,
    ) -> list[CallToolResult]:
        """The calls of one model turn, ``(name, arguments[, call_id])``: judged as one batch, the admitted
        ones sent concurrently; one result per call, in order.

        Each call is judged against the state before the turn (docs/batches.md): a reference only
        a sibling would return is refused with a reason naming it, a duplicate or conflicting write
        is reported. A refused call gets an ``isError`` result with the reason, as from
        :meth:`call_tool`, and so does a call the server answered with a JSON-RPC error (the
        others' results are kept). A transport failure (the connection is gone) is raised once
        every call has its outcome.
        """
        ep = self._episode()
        begun = await ep.begin_batch([ToolCall(name=c[0], args=c[1], call_id=c[2] if len(c) > 2 else None) for c in calls])
        results: list[CallToolResult | None] = [blocked_result(b) if isinstance(b, ToolBlocked) else None for b in begun]
        lost: list[BaseException] = []

        async def send(i: int, pending: PendingCall) -> None:
            try:
                results[i] = await self._send(pending, read_timeout_seconds, **kwargs)
            except Exception as exc:
                if transport_failure(exc):
                    lost.append(exc)
                else:
                    results[i] = CallToolResult(content=[TextContent(type="text", text=str(exc))], is_error=True)

        async with anyio.create_task_group() as tg:
            for i, b in enumerate(begun):
                if isinstance(b, PendingCall):
                    tg.start_soon(send, i, b)
        if lost:
            raise lost[0]
        return [r for r in results if r is not None]

    async def _send(self, pending: PendingCall, read_timeout_seconds: float | None, **kwargs: Any) -> CallToolResult:
        """Send an admitted call and record the server's answer (see :meth:`call_tool`)."""
        lost_before = self._connection_lost
        try:
            result = await self.session.call_tool(pending.call.name, pending.args, read_timeout_seconds, **kwargs)
        except Exception as exc:
            if not transport_failure(exc):
                self._refused(learn(pending, exc), pending)
                pending.failed(exc)
                raise
            if isinstance(exc, MCPError) and exc.code == CONNECTION_CLOSED:
                self._connection_lost = True  # the SDK sends nothing on a closed connection
            pending.abandon(f"no answer: {type(exc).__name__}: {exc}", started=not lost_before)
            raise
        except BaseException as exc:
            if cancellation(exc):
                pending.abandon()
            raise
        if not isinstance(result, CallToolResult):  # pragma: no cover - claimed extension results
            pending.done(result)
            raise TypeError(f"call_tool returned {type(result).__name__}, not CallToolResult")
        self._refused(settle(pending, result), pending)
        return result

    def _refused(self, refusal: str | None, pending: PendingCall) -> None:
        """A refusal of the server that shows its validator: the tools read as ``"unknown"`` are read
        as it reads values from then on (the refused call taught the new reading too)."""
        if refusal is None or self._learnt is not None:
            return
        mode = stack_of(refusal)
        unknown = [self._listed[n] for n, m in self._modes.items() if m == "unknown" and n in self._listed]
        if mode is None or not unknown:
            return
        self._learnt = mode
        self._learn(unknown, again=True)
        spec = self.toolset.get(pending.call.name)
        if spec is not None and isinstance(spec.validate, LearnsReadings):
            spec.validate.learn(pending.args, refused=True, error=refusal)

    def user(self, message: Any) -> None:
        """Add what the user said to the current episode's information pool."""
        self._episode().user(message)

    async def _probe(self, tool: str, args: dict[str, Any]) -> Any:
        """A spec file's probe: the server's own read-only tool, straight through the session (not an action)."""
        result = await self.session.call_tool(tool, args)
        if is_error(result):
            return {"isError": True, "content": [{"type": "text", "text": error_text(result)}]}
        return result_value(result)
