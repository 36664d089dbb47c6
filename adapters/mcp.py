"""MCP (mcp 2.x): check every ``tools/call`` on the client side, the server side, or both.

**Client side.** :class:`MonitorSession` wraps a ``ClientSession`` (or ``mcp.Client``):
it declares every listed tool from its ``inputSchema`` and checks each ``call_tool`` before
it is sent. A call the policy does not run never reaches the server; the caller gets a
``CallToolResult`` with ``isError`` set and the model-readable reason as its text::

    async with stdio_client(params) as (r, w), ClientSession(r, w) as session:
        await session.initialize()
        async with MonitorSession(session, policy="block", rules=RULES) as guarded:
            async with guarded.episode(task_id="t-1") as ep:      # one agent run
                ep.user(request_text)
                result = await guarded.call_tool("send_message", {...}, call_id=llm_call_id)

**Server side.** :class:`MonitorMiddleware` is a server middleware (``ServerMiddleware``:
``async (ctx, call_next) -> result``) for the SDK's low-level ``Server`` and for
``MCPServer`` (the 2.x name of FastMCP; pass ``middleware=[guard], lifespan=guard.lifespan()``),
so a server protects itself from any client. Each client connection is one episode, finished
when the connection closes; stateless 2026-07-28 requests share one episode, finished when
the server stops (the lifespan). Tool specs come from the server's own ``tools/list`` (every
page, re-read when a call names an unlisted tool).

**How argument values are read** (``coercion=``). The schema check refuses only what the
server would refuse, so it reads values as the server's validator does: ``"lax"`` as
pydantic's lax mode (Python SDK / ``MCPServer`` servers: ``"3"`` is an integer there),
``"strict"`` as zod or ajv (TypeScript servers). ``"auto"`` (the client's default) chooses
per server and tool: the server's implementation info when it names its stack (``python``,
``fastmcp`` or ``pydantic`` -> lax; ``typescript``, ``node``, ``zod`` or ``ajv`` -> strict),
else the tool's ``inputSchema``: a declared ``$schema`` of draft-07 or older -> strict (what
the TypeScript SDK's zod conversion emits), otherwise lax (the Python SDK declares none, and
lax refuses less). The server middleware guards a Python SDK server, so it reads lax. A
``rules`` entry's own ``coercion`` wins.

Server errors (``isError`` results, JSON-RPC error answers) are recorded as
``state_consistency`` rejections; transport failures (connection closed, read timeout) as
abandoned calls. Structured results (or JSON text results) feed the information pool and
bind references.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Callable, Collection, Hashable, Iterable, Mapping
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from dataclasses import replace
from typing import Any, Literal, Protocol, TypeAlias, cast, get_args

import anyio

try:
    from mcp import Client, ClientSession, MCPError
    from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
    from mcp.types import (
        CallToolRequestParams,
        CallToolResult,
        ListToolsResult,
        PaginatedRequestParams,
        TextContent,
        Tool,
    )
    from mcp_types import CONNECTION_CLOSED, REQUEST_TIMEOUT
    from mcp_types.version import MODERN_PROTOCOL_VERSIONS
except ImportError as e:  # pragma: no cover - exercised only without the extra
    raise ImportError('pip install "prefixmon[mcp]"') from e

from prefixmon import Episode, Monitor, PendingCall, SpecError, ToolBlocked, Toolset, current_episode
from prefixmon.deprecation import moved_names
from prefixmon.logging import get_logger
from prefixmon.specfile import SpecFile, load_spec, parse_spec

__all__ = [
    "MAX_LIST_PAGES",
    "RELIST_INTERVAL",
    "CoercionChoice",
    "MonitorMiddleware",
    "MonitorSession",
    "ToolSession",
    "blocked_result",
    "coercion_for",
    "declare_tools",
    "result_value",
]

MAX_LIST_PAGES = 100
"""Most ``tools/list`` pages read when learning a server's tools (a cursor that never ends cannot hang)."""

RELIST_INTERVAL = 1.0
"""Seconds before a call to the same unlisted tool name may make the server middleware re-read its tools again."""

_MAX_RELIST_NAMES = 1024
"""Most unlisted names remembered for :data:`RELIST_INTERVAL` (beyond it, unknown names do not re-list)."""


ToolSession: TypeAlias = ClientSession | Client
"""What :class:`MonitorSession` wraps: an initialized ``mcp.ClientSession`` or an entered ``mcp.Client``."""

CoercionChoice: TypeAlias = Literal["auto", "lax", "strict"]
"""How the server reads argument values: ``lax`` (pydantic), ``strict`` (zod, ajv), or ``auto``
(see :func:`coercion_for`)."""

_LAX_STACKS = ("python", "fastmcp", "pydantic")
_STRICT_STACKS = ("typescript", "javascript", "node", "zod", "ajv")
_STRICT_DIALECTS = ("draft-07", "draft-06", "draft-04")


def coercion_for(schema: Mapping[str, Any] | None, server_info: Any = None) -> Literal["lax", "strict"]:
    """The coercion mode ``"auto"`` chooses for one tool of a server.

    Args:
        schema: the tool's ``inputSchema``.
        server_info: the server's implementation info (``initialize`` result ``serverInfo``),
            a model or its wire dict.

    Returns:
        ``"lax"`` or ``"strict"``: from the implementation info when it names the server's
        stack, else ``"strict"`` for a schema that declares draft-07 or older (the TypeScript
        SDK's zod conversion does), else ``"lax"`` (the Python SDK declares no ``$schema``).
    """
    if server_info is not None:
        fields = ("name", "title", "description", "website_url", "websiteUrl")
        text = " ".join(
            str(value)
            for key in fields
            if isinstance(
                value := (server_info.get(key) if isinstance(server_info, Mapping) else getattr(server_info, key, None)), str
            )
        ).lower()
        words = set(text.replace("/", " ").replace("-", " ").replace("_", " ").replace(".", " ").split())
        if words & set(_LAX_STACKS):
            return "lax"
        if words & set(_STRICT_STACKS):
            return "strict"
    declared = schema.get("$schema") if isinstance(schema, Mapping) else None
    if isinstance(declared, str) and any(d in declared for d in _STRICT_DIALECTS):
        return "strict"
    return "lax"


def _check_coercion(coercion: str) -> None:
    if coercion not in get_args(CoercionChoice):
        raise SpecError(f"coercion must be 'auto', 'lax' or 'strict', got {coercion!r}")


# -- shared ---------------------------------------------------------------------------------
def declare_tools(
    toolset: Toolset,
    tools: Iterable[Tool | Mapping[str, Any]],
    *,
    rules: Mapping[str, Mapping[str, Any]] | None = None,
    spec: SpecSource | None = None,
    coercion: CoercionChoice = "auto",
    server_info: Any = None,
) -> list[str]:
    """Declare (or re-declare) MCP tools in ``toolset`` from their input schemas.

    Args:
        toolset: where to declare them.
        tools: ``Tool`` models (``list_tools().tools``) or their wire dicts.
        rules: ``{name: options}``: :meth:`Toolset.add_schema` options per tool, e.g.
            ``{"search_contacts": {"produces": "person_id"}}``.
        spec: a spec file (path, mapping or loaded) whose rules are merged onto the tools it
            names that the server lists.
        coercion: how the server reads argument values (see :func:`coercion_for` for ``"auto"``);
            a rule's own ``coercion`` wins.
        server_info: the server's implementation info, for ``"auto"``.

    Returns:
        The names declared or changed.
    """
    _check_coercion(coercion)
    return _declare(toolset, tools, rules, coercion=coercion, server_info=server_info, spec=_load(spec))


def _declare(
    toolset: Toolset,
    tools: Iterable[Tool | Mapping[str, Any]],
    rules: Mapping[str, Mapping[str, Any]] | None,
    force: Collection[str] = (),
    *,
    coercion: CoercionChoice,
    server_info: Any = None,
    spec: SpecFile | None = None,
) -> list[str]:
    """:func:`declare_tools`; names in ``force`` are re-declared even when they look unchanged."""
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
        if (
            old is not None
            and name not in force
            and dict(old.parameters) == dict(schema or {})
            and old.description == description
        ):
            continue
        mode = coercion_for(schema, server_info) if coercion == "auto" else coercion
        options = {"coercion": mode, **dict(rules.get(name, {}))}
        try:
            toolset.add_schema(name, schema, description=description, replace=True, metadata={"source": "mcp"}, **options)
        except TypeError as e:  # a misspelt option
            raise SpecError(f"rules[{name!r}]: {e}; options are those of Toolset.add_schema") from e
        changed.append(name)
    _apply(toolset, spec, changed)
    return changed


SpecSource = SpecFile | str | os.PathLike[str] | Mapping[str, Any]
"""A spec file: a path (YAML or JSON), its mapping, or a loaded :class:`~prefixmon.specfile.SpecFile`."""


def _load(spec: SpecSource | None) -> SpecFile | None:
    """The spec, loaded now: a bad file fails when the adapter is built, not at call time."""
    if spec is None or isinstance(spec, SpecFile):
        return spec
    return parse_spec(spec) if isinstance(spec, Mapping) else load_spec(spec)


def _apply(toolset: Toolset, spec: SpecFile | None, names: Iterable[str]) -> None:
    """Merge the spec's rules onto the (re-)declared tools it names; probes need their tool listed too."""
    if spec is None:
        return
    chosen = {n: r for n, r in spec.tools.items() if n in set(names)}
    if not chosen:
        return
    known = set(toolset.names) | set(chosen)
    chosen = {n: r.model_copy(update={"probes": tuple(p for p in r.probes if p.call in known)}) for n, r in chosen.items()}
    toolset.apply_spec(spec.model_copy(update={"tools": chosen}))


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


def _names_of(tools: Iterable[Tool | Mapping[str, Any]]) -> set[str]:
    out: set[str] = set()
    for tool in tools:
        name = tool.get("name") if isinstance(tool, Mapping) else getattr(tool, "name", None)
        if isinstance(name, str):
            out.add(name)
    return out


def _transport_failure(exc: BaseException) -> bool:
    """Whether ``exc`` says the connection failed (closed, timed out), not that the tool answered with an error."""
    if isinstance(exc, MCPError):
        return exc.code in (CONNECTION_CLOSED, REQUEST_TIMEOUT)
    return isinstance(
        exc, (TimeoutError, ConnectionError, anyio.BrokenResourceError, anyio.ClosedResourceError, anyio.EndOfStream)
    )


# -- client side ----------------------------------------------------------------------------
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
            the server's implementation info and each tool's schema (:func:`coercion_for`).
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
        _check_coercion(coercion)
        self.coercion: CoercionChoice = coercion
        self.session = session
        if monitor is None:  # a spec file's probes call the server's read-only tools through this session
            monitor_options.setdefault("probe", self._probe)
        self.monitor = monitor if monitor is not None else Monitor(Toolset(), policy=policy, **monitor_options)
        self.rules: dict[str, Mapping[str, Any]] = dict(rules or {})
        self.spec = _load(spec)
        """Rules merged onto the server's tools as they are listed (a spec file)."""
        self._declared: set[str] = set()
        self._gone: set[str] = set()
        """Tools an earlier complete listing had and the last one did not: hidden in the episodes."""
        self._connection_lost = False

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

    def _learn(self, tools: Iterable[Tool]) -> None:
        tools = list(tools)
        listed = _names_of(tools)
        changed = _declare(
            self.toolset, tools, self.rules, coercion=self.coercion, server_info=self.session.server_info, spec=self.spec
        )
        self._declared |= listed
        back = self._gone & listed
        self._gone -= listed
        ep = current_episode()
        if ep is not None and ep.monitor is self.monitor:
            for name in {*changed, *back}:
                _expose(ep, name)

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
        lost_before = self._connection_lost
        try:
            result = await self.session.call_tool(pending.call.name, pending.args, read_timeout_seconds, **kwargs)
        except anyio.get_cancelled_exc_class():
            pending.abandon()
            raise
        except Exception as exc:
            if not _transport_failure(exc):
                pending.failed(exc)
                raise
            if isinstance(exc, MCPError) and exc.code == CONNECTION_CLOSED:
                self._connection_lost = True  # the SDK sends nothing on a closed connection
            pending.abandon(f"no answer: {type(exc).__name__}: {exc}", started=not lost_before)
            raise
        if not isinstance(result, CallToolResult):  # pragma: no cover - claimed extension results
            pending.done(result)
            raise TypeError(f"call_tool returned {type(result).__name__}, not CallToolResult")
        _settle(pending, result)
        return result

    def user(self, message: Any) -> None:
        """Add what the user said to the current episode's information pool."""
        self._episode().user(message)

    async def _probe(self, tool: str, args: dict[str, Any]) -> Any:
        """A spec file's probe: the server's own read-only tool, straight through the session (not an action)."""
        result = await self.session.call_tool(tool, args)
        if _is_error(result):
            return {"isError": True, "content": [{"type": "text", "text": _error_text(result)}]}
        return result_value(result)


def _settle(pending: PendingCall, result: CallToolResult | Mapping[str, Any]) -> None:
    if _is_error(result):
        pending.failed(_error_text(result))
    else:
        pending.done(result_value(result))


# -- server side ----------------------------------------------------------------------------
class MonitorMiddleware:
    """Server middleware that checks every ``tools/call`` before the tool runs.

    Register it on ``MCPServer(..., middleware=[guard], lifespan=guard.lifespan())`` (or
    append it to a low-level ``Server.middleware`` and pass ``lifespan=guard.lifespan()``
    there). A call the policy does not run gets an ``isError`` result whose text tells the
    model why; the tool never runs.

    Args:
        monitor: a monitor to use. Default: a new ``Monitor(Toolset(), policy=policy,
            **monitor_options)``; the server's tools are declared from its own
            ``tools/list`` (with ``rules``) before the first call is checked.
        rules: per-tool :meth:`Toolset.add_schema` options.
        spec: a spec file merged onto the tools as they are listed (see :class:`MonitorSession`).
        policy: used when ``monitor`` is not given (default ``"block"``).
        coercion: how the guarded server reads argument values: ``"lax"`` (default:
            ``MCPServer`` validates with pydantic's lax mode) or ``"strict"`` (a low-level
            server that validates with a JSON Schema validator).
        task_id: the episodes' task id (default: the episode id).
        labels: the episodes' labels.
        key: groups calls into episodes (``ctx -> hashable``); default: one episode per
            client connection, finished when it closes. Episodes under a custom key are
            finished by :meth:`aclose`.
        **monitor_options: further :class:`Monitor` options (``sink=``, ``observers=``, ...).

    Each client connection of the 2025 protocol (initialize handshake) is one episode,
    finished (and written to the sink) when the connection closes. Requests of the
    stateless 2026-07-28 protocol (``mcp.Client``'s default) carry no connection: they
    share one episode, finished by :meth:`aclose` -- which :meth:`lifespan` calls when the
    server stops.

    The tool list is the server's own ``tools/list``, every page of it, read before the
    first call is checked. A call to a name the list lacks re-reads it (at most once per
    name per :data:`RELIST_INTERVAL` seconds), so tools added at runtime are known; tools a
    complete listing no longer has are hidden, so a call to one is refused.
    """

    def __init__(
        self,
        monitor: Monitor | None = None,
        *,
        rules: Mapping[str, Mapping[str, Any]] | None = None,
        spec: SpecSource | None = None,
        policy: str = "block",
        coercion: CoercionChoice = "lax",
        task_id: str | None = None,
        labels: Mapping[str, str] | None = None,
        key: Callable[[ServerRequestContext[Any, Any]], Hashable] | None = None,
        **monitor_options: Any,
    ) -> None:
        if monitor is not None and monitor_options:
            raise SpecError(f"pass either monitor= or Monitor options, not both (got {', '.join(sorted(monitor_options))})")
        _check_coercion(coercion)
        self.coercion: CoercionChoice = coercion
        self.monitor = monitor if monitor is not None else Monitor(Toolset(), policy=policy, **monitor_options)
        self.rules: dict[str, Mapping[str, Any]] = dict(rules or {})
        self.spec = _load(spec)
        """Rules merged onto the server's tools as they are listed (a spec file)."""
        self.key = key
        self.task_id = task_id
        self.labels: dict[str, str] = dict(labels or {})
        self._listed = False
        """Whether a complete listing (every page) has been read."""
        self._generation = 0
        """Complete listings read so far (a waiter for the lock skips re-reading one just read)."""
        self._declared: set[str] = set()
        """Every name this middleware declared (tools the user declared otherwise are never hidden)."""
        self._gone: set[str] = set()
        """Declared names the last complete listing lacked: hidden in every episode."""
        self._unchecked: set[str] = set()
        """Names declared as stand-ins while the listing failed: replaced by the real listing."""
        self._relisted: dict[str, float] = {}
        self._episodes: dict[Hashable, Episode] = {}
        self._lock = anyio.Lock()

    @property
    def toolset(self) -> Toolset:
        """The toolset the server's tools are declared in."""
        return self.monitor.toolset

    def lifespan(
        self, inner: Callable[[Any], AbstractAsyncContextManager[Any]] | None = None
    ) -> Callable[[Any], AbstractAsyncContextManager[Any]]:
        """A server lifespan that finishes the open episodes (writes their records) when the server stops.

        Pass it as ``MCPServer(..., lifespan=guard.lifespan())`` or ``Server(...,
        lifespan=guard.lifespan())``; wrap your own lifespan with ``guard.lifespan(mine)``.
        """

        @asynccontextmanager
        async def run(app: Any) -> AsyncIterator[Any]:
            try:
                if inner is None:
                    yield {}
                else:
                    async with inner(app) as state:
                        yield state
            finally:
                with anyio.CancelScope(shield=True):
                    await self.aclose()

        return run

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        if ctx.method == "tools/list" and ctx.request_id is not None:
            result = await call_next(ctx)
            try:
                # one page the client asked for: the whole list only when it is the only page
                self._learn(_tools_of(result), complete=not (ctx.params or {}).get("cursor") and not _next_cursor(result))
            except Exception as e:  # a listing the monitor cannot read must not break the client's
                self._log_listing_error(e)
            return result
        if ctx.method != "tools/call" or ctx.request_id is None:
            return await call_next(ctx)
        params = dict(ctx.params or {})
        name = params.get("name")
        if not isinstance(name, str):
            return await call_next(ctx)  # the SDK answers malformed params itself
        arguments = params.get("arguments")
        malformed = arguments is not None and not isinstance(arguments, Mapping)
        listing_error = await self._ensure_listed(ctx, call_next, name)
        if listing_error is not None and name not in self.toolset:
            self._stand_in(name, listing_error)
        ep = self._episode_for(ctx)
        if name not in self._gone:
            _expose(ep, name)
        raw = json.dumps(arguments, default=str) if malformed else arguments  # the wire text: "not an object"
        try:
            pending = await ep.begin(name, raw, call_id=str(ctx.request_id))
        except ToolBlocked as blocked:
            if malformed:  # answer as the SDK does without the monitor: invalid params
                CallToolRequestParams.model_validate(params, by_name=False)
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

    # -- the tool list ----------------------------------------------------------------------
    async def _ensure_listed(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext, name: str) -> BaseException | None:
        """Read the tool list when it is not known yet, or when ``name`` is not on it; the listing's error, if any."""
        if self._listed and not self._unlisted(name):
            return None
        if self._listed and not self._may_relist(name):
            return None
        try:
            await self._list(ctx, call_next, self._generation)
        except Exception as e:  # never break the client: the call is checked (or refused) as the monitor's failure mode says
            self._log_listing_error(e)
            return e
        return None

    def _unlisted(self, name: str) -> bool:
        return name not in self.toolset or name in self._gone

    def _may_relist(self, name: str) -> bool:
        """Rate limit of re-reads for unlisted names: once per name per :data:`RELIST_INTERVAL`."""
        now = anyio.current_time()
        last = self._relisted.get(name)
        if last is not None and now - last < RELIST_INTERVAL:
            return False
        if len(self._relisted) >= _MAX_RELIST_NAMES:
            self._relisted = {k: t for k, t in self._relisted.items() if now - t < RELIST_INTERVAL}
            if len(self._relisted) >= _MAX_RELIST_NAMES:
                return False
        self._relisted[name] = now
        return True

    async def _list(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext, generation: int) -> None:
        """Read the server's own tool listing (every page) through the rest of the chain."""
        async with self._lock:
            if self._generation != generation:  # read while this request waited
                return
            tools: list[Any] = []
            cursor: str | None = None
            for _ in range(MAX_LIST_PAGES):
                params: dict[str, Any] = {k: v for k, v in (ctx.params or {}).items() if k == "_meta"}
                if cursor:
                    params["cursor"] = cursor
                page = await call_next(replace(ctx, method="tools/list", params=params or None))
                tools.extend(_tools_of(page) or ())
                cursor = _next_cursor(page)
                if not cursor:
                    break
            else:
                get_logger().warning("mcp_tool_listing_truncated", pages=MAX_LIST_PAGES)
            self._learn(tools, complete=not cursor)
            if cursor:  # truncated: known as far as it goes, and not re-read on every call
                self._listed = True
                self._generation += 1

    def _learn(self, tools: list[Any] | None, *, complete: bool) -> None:
        """Declare listed tools; a ``complete`` listing also hides the tools it no longer has."""
        if tools is None:
            return
        listed = _names_of(tools)
        changed = _declare(
            self.toolset, tools, self.rules, force=self._unchecked & listed, coercion=self.coercion, spec=self.spec
        )
        self._unchecked -= listed
        self._declared |= listed
        back = self._gone & listed
        gone = self._declared - listed if complete else self._gone - listed
        self._gone = gone
        for ep in self._episodes.values():
            for name in {*changed, *back}:
                _expose(ep, name)
            if gone:
                ep.hide(*gone)
        if complete:
            self._listed = True
            self._generation += 1

    def _stand_in(self, name: str, error: BaseException) -> None:
        """Declare ``name`` while the tool list cannot be read: every check of it is a monitor fault.

        The core then applies its failure mode: fail-open records the call as executable and
        runs it (the fault is counted and logged); fail-closed refuses it (``fail_closed``).
        """
        why = f"the server's tool listing failed ({type(error).__name__}: {error})"

        def tool_listing(state: Any, args: Mapping[str, Any]) -> bool:
            raise RuntimeError(why)

        self.toolset.add_schema(
            name,
            {"type": "object", "additionalProperties": True},
            replace=True,
            requires=[tool_listing],
            metadata={"source": "mcp", "unchecked": why},
        )
        self._unchecked.add(name)
        self._declared.add(name)

    def _log_listing_error(self, e: BaseException) -> None:
        get_logger().error("mcp_tool_listing_failed", error_type=type(e).__name__, failure_mode=self.monitor.failure_mode)

    # -- episodes ---------------------------------------------------------------------------
    def _episode_for(self, ctx: ServerRequestContext[Any, Any]) -> Episode:
        """The episode of the request's connection (or ``key``), opened on its first checked call."""
        connection = _connection_of(ctx)
        key = self.key(ctx) if self.key is not None else (id(connection) if connection is not None else None)
        ep = self._episodes.get(key)
        if ep is None:  # no await between the lookup and the insert: no other request can race it
            ep = self.monitor.open_episode(self.task_id, self.labels)
            if self._gone:
                ep.hide(*self._gone)
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


def _tools_of(result: Any) -> list[Any] | None:
    tools = result.get("tools") if isinstance(result, Mapping) else getattr(result, "tools", None)
    return tools if isinstance(tools, list) else None


def _next_cursor(result: Any) -> str | None:
    cursor = result.get("nextCursor") if isinstance(result, Mapping) else getattr(result, "next_cursor", None)
    return cursor if isinstance(cursor, str) and cursor else None


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


__getattr__ = moved_names(__name__, {"MonitoredSession": "prefixmon.adapters.mcp:MonitorSession"}, removal="0.3.0")
"""The names these classes had before 0.2.0, kept (with a warning) for one release."""
