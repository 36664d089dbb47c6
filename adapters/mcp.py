"""MCP (mcp 2.x): check every ``tools/call`` on the client side, the server side, or both.

**Client side.** :class:`MonitoredSession` wraps a ``ClientSession`` (or ``mcp.Client``):
it declares every listed tool from its ``inputSchema`` and checks each ``call_tool`` before
it is sent. A call the policy does not run never reaches the server; the caller gets a
``CallToolResult`` with ``isError`` set and the model-readable reason as its text::

    async with stdio_client(params) as (r, w), ClientSession(r, w) as session:
        await session.initialize()
        async with MonitoredSession(session, policy="block", rules=RULES) as guarded:
            async with guarded.episode(task_id="t-1") as ep:      # one agent run
                ep.user(request_text)
                result = await guarded.call_tool("send_message", {...}, call_id=llm_call_id)

**Server side.** :class:`MonitorMiddleware` is a server middleware (``ServerMiddleware``:
``async (ctx, call_next) -> result``) for the SDK's low-level ``Server`` and for
``MCPServer`` (the 2.x name of FastMCP; pass ``middleware=[...]``), so a server protects
itself from any client. Each client connection is one episode, finished when the connection
closes. Tool specs come from the server's own ``tools/list``.

Server errors (``isError`` results) are recorded as ``state_consistency`` rejections;
structured results (or JSON text results) feed the information pool and bind references.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Hashable, Iterable, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import replace
from typing import Any, Protocol, TypeAlias, cast

import anyio
import structlog

try:
    from mcp import Client, ClientSession
    from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
    from mcp.types import CallToolResult, ListToolsResult, PaginatedRequestParams, TextContent, Tool
    from mcp_types.version import MODERN_PROTOCOL_VERSIONS
except ImportError as e:  # pragma: no cover - exercised only without the extra
    raise ImportError('pip install "prefixmon[mcp]"') from e

from prefixmon import Episode, Monitor, PendingCall, SpecError, ToolBlocked, Toolset, current_episode

__all__ = [
    "MAX_LIST_PAGES",
    "MonitorMiddleware",
    "MonitoredSession",
    "ToolSession",
    "blocked_result",
    "declare_tools",
    "result_value",
]

MAX_LIST_PAGES = 100
"""Most ``tools/list`` pages read when learning a server's tools (a cursor that never ends cannot hang)."""


ToolSession: TypeAlias = ClientSession | Client
"""What :class:`MonitoredSession` wraps: an initialized ``mcp.ClientSession`` or an entered ``mcp.Client``."""


# -- shared ---------------------------------------------------------------------------------
def declare_tools(
    toolset: Toolset,
    tools: Iterable[Tool | Mapping[str, Any]],
    *,
    rules: Mapping[str, Mapping[str, Any]] | None = None,
) -> list[str]:
    """Declare (or re-declare) MCP tools in ``toolset`` from their input schemas.

    Args:
        toolset: where to declare them.
        tools: ``Tool`` models (``list_tools().tools``) or their wire dicts.
        rules: ``{name: options}``: :meth:`Toolset.add_schema` options per tool, e.g.
            ``{"search_contacts": {"produces": "person_id"}}``.

    Returns:
        The names declared or changed.
    """
    rules = rules or {}
    changed: list[str] = []
    for i, tool in enumerate(tools):
        name: Any
        schema: Any
        if isinstance(tool, Tool):
            name, schema, description = tool.name, tool.input_schema, tool.description or ""
        elif isinstance(tool, Mapping):
            name, schema, description = tool.get("name"), tool.get("inputSchema"), str(tool.get("description") or "")
        else:
            raise SpecError(f"tools[{i}]: expected an MCP Tool, got {type(tool).__name__}")
        if not isinstance(name, str) or not name:
            raise SpecError(f"tools[{i}]: an MCP tool needs a non-empty name")
        if schema is not None and not isinstance(schema, Mapping):
            raise SpecError(f"tools[{i}] ({name}): inputSchema must be a JSON Schema object")
        old = toolset.get(name)
        if old is not None and dict(old.parameters) == dict(schema or {}) and old.description == description:
            continue
        try:
            toolset.add_schema(
                name, schema, description=description, replace=True, metadata={"source": "mcp"}, **dict(rules.get(name, {}))
            )
        except TypeError as e:  # a misspelt option
            raise SpecError(f"rules[{name!r}]: {e}; options are those of Toolset.add_schema") from e
        changed.append(name)
    return changed


def blocked_result(blocked: ToolBlocked) -> CallToolResult:
    """The ``isError`` result a blocked call gets: its text is the reason, written for the model."""
    return CallToolResult(content=[TextContent(type="text", text=str(blocked))], is_error=True)


def _texts(content: Iterable[Any]) -> list[str]:
    out: list[str] = []
    for block in content:
        text = block.get("text") if isinstance(block, Mapping) else getattr(block, "text", None)
        if isinstance(text, str):
            out.append(text)
    return out


def result_value(result: CallToolResult | Mapping[str, Any]) -> Any:
    """What a tool result means, for the information pool and reference bindings.

    ``structuredContent`` when present; otherwise the text blocks, each parsed as JSON when
    it is JSON.
    """
    content: Iterable[Any]
    if isinstance(result, CallToolResult):
        structured, content = result.structured_content, result.content
    else:
        structured, content = result.get("structuredContent"), result.get("content") or ()
    if structured is not None:
        return structured
    values: list[Any] = []
    for text in _texts(content):
        try:
            values.append(json.loads(text))
        except ValueError:
            values.append(text)
    return values[0] if len(values) == 1 else values


def _error_text(result: CallToolResult | Mapping[str, Any]) -> str:
    content = result.content if isinstance(result, CallToolResult) else (result.get("content") or ())
    return "\n".join(_texts(content)) or "the tool returned an error result"


def _is_error(result: CallToolResult | Mapping[str, Any]) -> bool:
    return bool(result.is_error if isinstance(result, CallToolResult) else result.get("isError"))


def _expose(ep: Episode, name: str) -> None:
    """Expose a tool declared after the episode opened (a later ``tools/list``)."""
    spec = ep.monitor.toolset.get(name)
    if spec is not None and spec.exposed and name not in ep.state.exposed:
        ep.expose(name)


# -- client side ----------------------------------------------------------------------------
class MonitoredSession:
    """An MCP client session whose ``call_tool`` is checked before anything is sent.

    Args:
        session: an initialized ``mcp.ClientSession`` or an entered ``mcp.Client``.
        monitor: a monitor to use; its toolset receives the server's tools. Default: a new
            ``Monitor(Toolset(), policy=policy, **monitor_options)``.
        rules: per-tool :meth:`Toolset.add_schema` options (references, preconditions, ...).
        policy: used when ``monitor`` is not given (default ``"block"``).
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
        policy: str = "block",
        **monitor_options: Any,
    ) -> None:
        if monitor is not None and monitor_options:
            raise SpecError(f"pass either monitor= or Monitor options, not both (got {', '.join(sorted(monitor_options))})")
        self.session = session
        self.monitor = monitor if monitor is not None else Monitor(Toolset(), policy=policy, **monitor_options)
        self.rules: dict[str, Mapping[str, Any]] = dict(rules or {})

    @property
    def toolset(self) -> Toolset:
        """The toolset the server's tools are declared in."""
        return self.monitor.toolset

    async def __aenter__(self) -> MonitoredSession:
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
        """List every tool the server offers (all pages); returns the names."""
        names: list[str] = []
        cursor: str | None = None
        for _ in range(MAX_LIST_PAGES):
            result = await self.list_tools(cursor)
            names.extend(t.name for t in result.tools)
            cursor = result.next_cursor
            if not cursor:
                break
        return names

    def _learn(self, tools: Iterable[Tool]) -> None:
        changed = declare_tools(self.toolset, tools, rules=self.rules)
        ep = current_episode()
        if ep is not None and ep.monitor is self.monitor:
            for name in changed:
                _expose(ep, name)

    @asynccontextmanager
    async def episode(
        self, task_id: str | None = None, labels: Mapping[str, str] | None = None, **options: Any
    ) -> AsyncIterator[Episode]:
        """One agent run: ``async with guarded.episode(task_id=...) as ep`` (see ``Monitor.episode``)."""
        async with self.monitor.episode(task_id, labels, **options) as ep:
            yield ep

    def _episode(self) -> Episode:
        ep = current_episode()
        if ep is None or ep.monitor is not self.monitor:
            raise RuntimeError(
                "MonitoredSession.call_tool runs inside an episode: wrap the agent run in "
                "`async with guarded.episode(task_id=...)`"
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
        """
        ep = self._episode()
        try:
            pending = await ep.begin(name, arguments, call_id=call_id)
        except ToolBlocked as blocked:
            return blocked_result(blocked)
        try:
            result = await self.session.call_tool(pending.call.name, pending.args, read_timeout_seconds, **kwargs)
        except anyio.get_cancelled_exc_class():
            pending.abandon()
            raise
        except Exception as exc:
            pending.failed(exc)
            raise
        if not isinstance(result, CallToolResult):  # pragma: no cover - claimed extension results
            pending.done(result)
            raise TypeError(f"call_tool returned {type(result).__name__}, not CallToolResult")
        _settle(pending, result)
        return result

    def user(self, message: Any) -> None:
        """Add what the user said to the current episode's information pool."""
        self._episode().user(message)


def _settle(pending: PendingCall, result: CallToolResult | Mapping[str, Any]) -> None:
    if _is_error(result):
        pending.failed(_error_text(result))
    else:
        pending.done(result_value(result))


# -- server side ----------------------------------------------------------------------------
class MonitorMiddleware:
    """Server middleware that checks every ``tools/call`` before the tool runs.

    Register it on ``MCPServer(..., middleware=[MonitorMiddleware(...)])`` or append it to a
    low-level ``Server.middleware``. A call the policy does not run gets an ``isError``
    result whose text tells the model why; the tool never runs.

    Args:
        monitor: a monitor to use. Default: a new ``Monitor(Toolset(), policy=policy,
            **monitor_options)``; the server's tools are declared from its own
            ``tools/list`` (with ``rules``) before the first call is checked.
        rules: per-tool :meth:`Toolset.add_schema` options.
        policy: used when ``monitor`` is not given (default ``"block"``).
        task_id: the episodes' task id (default: the episode id).
        labels: the episodes' labels.
        key: groups calls into episodes (``ctx -> hashable``); default: one episode per
            client connection, finished when it closes. Episodes under a custom key are
            finished by :meth:`aclose`.
        **monitor_options: further :class:`Monitor` options (``sink=``, ``observers=``, ...).

    Each client connection is one episode, finished (and written to the sink) when the
    connection closes; call :meth:`aclose` to finish the episodes still open, e.g. at
    shutdown.
    """

    def __init__(
        self,
        monitor: Monitor | None = None,
        *,
        rules: Mapping[str, Mapping[str, Any]] | None = None,
        policy: str = "block",
        task_id: str | None = None,
        labels: Mapping[str, str] | None = None,
        key: Callable[[ServerRequestContext[Any, Any]], Hashable] | None = None,
        **monitor_options: Any,
    ) -> None:
        if monitor is not None and monitor_options:
            raise SpecError(f"pass either monitor= or Monitor options, not both (got {', '.join(sorted(monitor_options))})")
        self.monitor = monitor if monitor is not None else Monitor(Toolset(), policy=policy, **monitor_options)
        self.rules: dict[str, Mapping[str, Any]] = dict(rules or {})
        self.key = key
        self.task_id = task_id
        self.labels: dict[str, str] = dict(labels or {})
        self._listed = False
        self._episodes: dict[Hashable, Episode] = {}
        self._lock = anyio.Lock()

    @property
    def toolset(self) -> Toolset:
        """The toolset the server's tools are declared in."""
        return self.monitor.toolset

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        if ctx.method == "tools/list" and ctx.request_id is not None:
            result = await call_next(ctx)
            self._learn(result)
            return result
        if ctx.method != "tools/call" or ctx.request_id is None:
            return await call_next(ctx)
        params = dict(ctx.params or {})
        name = params.get("name")
        if not isinstance(name, str):
            return await call_next(ctx)  # the SDK answers malformed params itself
        if not self._listed:
            try:
                await self._list(ctx, call_next)
            except Exception as e:  # never break the client: fail open (unchecked) or closed, as the monitor says
                structlog.get_logger("prefixmon").error(
                    "mcp_tool_listing_failed", error_type=type(e).__name__, failure_mode=self.monitor.failure_mode
                )
                if self.monitor.failure_mode == "fail_closed":
                    text = f"{name} was not run: the monitor could not read this server's tools"
                    return CallToolResult(content=[TextContent(type="text", text=text)], is_error=True)
                return await call_next(ctx)
        ep = self._episode_for(ctx)
        _expose(ep, name)
        try:
            pending = await ep.begin(name, params.get("arguments"), call_id=str(ctx.request_id))
        except ToolBlocked as blocked:
            return blocked_result(blocked)
        call = pending.call
        try:
            result = await call_next(replace(ctx, params={**params, "name": call.name, "arguments": pending.args}))
        except anyio.get_cancelled_exc_class():
            pending.abandon()
            raise
        except Exception as exc:
            pending.failed(exc)
            raise
        if isinstance(result, (CallToolResult, Mapping)):
            _settle(pending, result)
        else:
            pending.done(result)
        return result

    def _learn(self, result: HandlerResult) -> None:
        tools = result.get("tools") if isinstance(result, Mapping) else getattr(result, "tools", None)
        if isinstance(tools, list):
            changed = declare_tools(self.toolset, tools, rules=self.rules)
            for ep in self._episodes.values():
                for name in changed:
                    _expose(ep, name)
            self._listed = True

    async def _list(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> None:
        """Read the server's own tool listing through the rest of the chain."""
        async with self._lock:
            if self._listed:
                return
            cursor: str | None = None
            for _ in range(MAX_LIST_PAGES):
                params: dict[str, Any] = {k: v for k, v in (ctx.params or {}).items() if k == "_meta"}
                if cursor:
                    params["cursor"] = cursor
                page = await call_next(replace(ctx, method="tools/list", params=params or None))
                self._learn(page)
                cursor = page.get("nextCursor") if isinstance(page, Mapping) else getattr(page, "next_cursor", None)
                if not cursor:
                    break
            self._listed = True

    def _episode_for(self, ctx: ServerRequestContext[Any, Any]) -> Episode:
        """The episode of the request's connection (or ``key``), opened on its first checked call."""
        connection = _connection_of(ctx)
        key = self.key(ctx) if self.key is not None else (id(connection) if connection is not None else None)
        ep = self._episodes.get(key)
        if ep is None:  # no await between the lookup and the insert: no other request can race it
            ep = self.monitor.open_episode(self.task_id, self.labels)
            self._episodes[key] = ep
            if connection is not None and self.key is None:
                connection.exit_stack.push_async_callback(self._finish, key)
        return ep

    async def _finish(self, key: Hashable) -> None:
        ep = self._episodes.pop(key, None)
        if ep is not None:
            await ep.aclose()

    async def aclose(self) -> None:
        """Finish every episode still open (their records go to the sink)."""
        for key in list(self._episodes):
            await self._finish(key)

    async def __aenter__(self) -> MonitorMiddleware:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class _Connection(Protocol):
    exit_stack: AsyncExitStack
    protocol_version: str


def _connection_of(ctx: ServerRequestContext[Any, Any]) -> _Connection | None:
    """The client connection a request arrived on, when it spans several requests.

    mcp 2.3's ``ServerRequestContext`` has no public connection attribute yet (its
    ``Context`` rework will add ``ctx.connection``); the per-request ``ServerSession`` holds
    it. A 2026-07-28 (stateless) request gets a fresh connection of its own, which is no
    run boundary: such requests share one episode, finished by
    :meth:`MonitorMiddleware.aclose` (or pass ``key=`` to group them yourself).
    """
    connection = getattr(ctx, "connection", None) or getattr(ctx.session, "_connection", None)
    if not hasattr(connection, "exit_stack") or getattr(connection, "protocol_version", None) in MODERN_PROTOCOL_VERSIONS:
        return None
    return cast(_Connection, connection)
