"""The server side: :class:`MonitorMiddleware` checks each ``tools/call`` before the tool runs."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Hashable, Mapping
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from dataclasses import replace
from typing import Any, Protocol, cast

import anyio
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.types import CallToolRequestParams, CallToolResult
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from prefixmon import Episode, Monitor, SpecError, ToolBlocked, Toolset
from prefixmon.episode import cancellation
from prefixmon.telemetry.logging import get_logger

from ._common import (
    MAX_LIST_PAGES,
    MAX_RELIST_NAMES,
    RELIST_INTERVAL,
    CoercionChoice,
    SpecSource,
    blocked_result,
    check_coercion,
    declare,
    expose,
    load_source,
    names_of,
    settle,
)

__all__ = ["MonitorMiddleware"]


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
            ``MCPServer`` validates with pydantic's lax mode; ``null`` for an optional
            argument without a default is let through until the server refuses one),
            ``"strict"`` (a low-level server that validates with a JSON Schema validator),
            ``"zod"`` or ``"unknown"``.
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
        check_coercion(coercion)
        self.coercion: CoercionChoice = coercion
        self.monitor = monitor if monitor is not None else Monitor(Toolset(), policy=policy, **monitor_options)
        self.rules: dict[str, Mapping[str, Any]] = dict(rules or {})
        self.spec = load_source(spec)
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
        unchecked = None if listing_error is None or name in self.toolset else _listing_failed(listing_error)
        ep = self._episode_for(ctx)
        if name not in self._gone:
            expose(ep, name)
        raw = json.dumps(arguments, default=str) if malformed else arguments  # the wire text: "not an object"
        try:
            if unchecked is None:
                pending = await ep.begin(name, raw, call_id=str(ctx.request_id))
            else:  # the name stays undeclared: it may be anything a client made up
                pending = await ep.begin_unchecked(name, raw, call_id=str(ctx.request_id), error=unchecked)
        except ToolBlocked as blocked:
            if malformed:  # answer as the SDK does without the monitor: invalid params
                CallToolRequestParams.model_validate(params, by_name=False)
            return blocked_result(blocked)
        call = pending.call
        try:
            result = await call_next(replace(ctx, params={**params, "name": call.name, "arguments": pending.args}))
        except Exception as exc:
            pending.failed(exc)
            raise
        except BaseException as exc:
            if cancellation(exc):
                pending.abandon()
            raise
        if isinstance(result, (CallToolResult, Mapping)):
            settle(pending, result)
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
        if len(self._relisted) >= MAX_RELIST_NAMES:
            self._relisted = {k: t for k, t in self._relisted.items() if now - t < RELIST_INTERVAL}
            if len(self._relisted) >= MAX_RELIST_NAMES:
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
        listed = names_of(tools)
        changed = declare(self.toolset, tools, self.rules, coercion=self.coercion, spec=self.spec)
        self._declared |= listed
        back = self._gone & listed
        gone = self._declared - listed if complete else self._gone - listed
        self._gone = gone
        for ep in self._episodes.values():
            for name in {*changed, *back}:
                expose(ep, name)
            if gone:
                ep.hide(*gone)
        if complete:
            self._listed = True
            self._generation += 1

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


def _listing_failed(error: BaseException) -> RuntimeError:
    """Why a call to a name the listing could not confirm is not checked (its type and message, no traceback)."""
    return RuntimeError(f"the server's tool listing failed ({type(error).__name__}: {error})")


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
