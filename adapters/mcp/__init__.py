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
pydantic's lax mode (``"3"`` is an integer there), ``"strict"`` as ``jsonschema`` or ajv,
``"zod"`` as zod (strict, but ``z.coerce.number()`` may read ``"3"`` and ``z.object`` strips
what ``additionalProperties: false`` forbids), ``"unknown"`` as any of them. What a mode only
*may* accept is let through until the server refuses such a value; its answers teach the
monitor (per tool and type, and ``null`` per argument). ``"auto"`` (the client's default)
chooses per server and tool (:func:`coercion_for`): implementation info naming its stack;
schemas pydantic wrote (``<name>Arguments``) -> lax; ``$schema`` draft-07 (the TypeScript
SDK) -> zod; mcp 1.x's low-level ``Server`` (``experimental`` capabilities) -> strict; mcp
2.x's ``MCPServer`` -> lax; else unknown, until a refusal's wording shows zod, pydantic or
``jsonschema``. The server middleware guards a Python SDK server, so it reads lax. A
``rules`` entry's own ``coercion`` wins.

Server errors (``isError`` results, JSON-RPC error answers) are recorded as
``state_consistency`` rejections; transport failures (connection closed, read timeout) as
abandoned calls. Structured results, and text results that are JSON or a Python literal
(``str(rows)``), feed the information pool and bind references.
"""

from prefixmon.deprecation import moved_names

from ._common import (
    MAX_LIST_PAGES,
    RELIST_INTERVAL,
    CoercionChoice,
    SpecSource,
    ToolSession,
    blocked_result,
    coercion_for,
    declare_tools,
    result_value,
)
from .client import MonitorSession
from .server import MonitorMiddleware

__all__ = [
    "MAX_LIST_PAGES",
    "RELIST_INTERVAL",
    "CoercionChoice",
    "MonitorMiddleware",
    "MonitorSession",
    "SpecSource",
    "ToolSession",
    "blocked_result",
    "coercion_for",
    "declare_tools",
    "result_value",
]

__getattr__ = moved_names(__name__, {"MonitoredSession": "prefixmon.adapters.mcp:MonitorSession"}, removal="0.3.0")
"""The names these classes had before 0.2.0, kept (with a warning) for one release."""
