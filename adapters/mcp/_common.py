"""What the MCP client session and server middleware share: declaring tools, reading results."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any, Literal, TypeAlias, get_args

import anyio

try:
    from mcp import Client, ClientSession, MCPError
    from mcp.types import CallToolResult, TextContent, Tool
    from mcp_types import CONNECTION_CLOSED, REQUEST_TIMEOUT
except ImportError as e:  # pragma: no cover - exercised only without the extra
    raise ImportError('pip install "prefixmon[mcp]"') from e

from prefixmon import Episode, PendingCall, SpecError, ToolBlocked, Toolset
from prefixmon.specfile import SpecFile, load_spec, parse_spec

from .._json import json_or_text

__all__ = [
    "MAX_LIST_PAGES",
    "RELIST_INTERVAL",
    "CoercionChoice",
    "SpecSource",
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

MAX_RELIST_NAMES = 1024
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


def check_coercion(coercion: str) -> None:
    if coercion not in get_args(CoercionChoice):
        raise SpecError(f"coercion must be 'auto', 'lax' or 'strict', got {coercion!r}")


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
    check_coercion(coercion)
    return declare(toolset, tools, rules, coercion=coercion, server_info=server_info, spec=load_source(spec))


def declare(
    toolset: Toolset,
    tools: Iterable[Tool | Mapping[str, Any]],
    rules: Mapping[str, Mapping[str, Any]] | None,
    *,
    coercion: CoercionChoice,
    server_info: Any = None,
    spec: SpecFile | None = None,
) -> list[str]:
    """:func:`declare_tools`: the names of the tools declared or re-declared (an unchanged one is left as it is)."""
    rules = rules or {}
    changed: list[str] = []
    for i, tool in enumerate(tools):
        name: Any
        schema: Any
        if isinstance(tool, Tool):
            name, schema, description = tool.name, tool.input_schema, tool.description or ""
            read_only = getattr(tool.annotations, "read_only_hint", None) is True
        elif isinstance(tool, Mapping):
            name, schema, description = tool.get("name"), tool.get("inputSchema"), str(tool.get("description") or "")
            hints = tool.get("annotations")
            read_only = isinstance(hints, Mapping) and hints.get("readOnlyHint") is True
        else:
            raise SpecError(f"tools[{i}]: expected an MCP Tool, got {type(tool).__name__}")
        if not isinstance(name, str) or not name:
            raise SpecError(f"tools[{i}]: an MCP tool needs a non-empty name")
        if schema is not None and not isinstance(schema, Mapping):
            raise SpecError(f"tools[{i}] ({name}): inputSchema must be a JSON Schema object")
        old = toolset.get(name)
        if old is not None and dict(old.parameters) == dict(schema or {}) and old.description == description:
            continue
        mode = coercion_for(schema, server_info) if coercion == "auto" else coercion
        options = {"coercion": mode, **dict(rules.get(name, {}))}
        try:
            # readOnlyHint: the server says the tool changes nothing (a refused call retried after it is refused again)
            metadata = {"source": "mcp", **({"read_only": True} if read_only else {})}
            toolset.add_schema(name, schema, description=description, replace=True, metadata=metadata, **options)
        except TypeError as e:  # a misspelt option
            raise SpecError(f"rules[{name!r}]: {e}; options are those of Toolset.add_schema") from e
        changed.append(name)
    _apply(toolset, spec, changed)
    return changed


SpecSource = SpecFile | str | os.PathLike[str] | Mapping[str, Any]
"""A spec file: a path (YAML or JSON), its mapping, or a loaded :class:`~prefixmon.specfile.SpecFile`."""


def load_source(spec: SpecSource | None) -> SpecFile | None:
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
    it is JSON (text nested too deeply to parse stays text).
    """
    content: Iterable[Any]
    if isinstance(result, CallToolResult):
        structured, content = result.structured_content, result.content
    else:
        structured, content = result.get("structuredContent"), result.get("content") or ()
    if structured is not None:
        return structured
    values = [json_or_text(text) for text in _texts(content)]
    return values[0] if len(values) == 1 else values


def error_text(result: CallToolResult | Mapping[str, Any]) -> str:
    content = result.content if isinstance(result, CallToolResult) else (result.get("content") or ())
    return "\n".join(_texts(content)) or "the tool returned an error result"


def is_error(result: CallToolResult | Mapping[str, Any]) -> bool:
    return bool(result.is_error if isinstance(result, CallToolResult) else result.get("isError"))


def expose(ep: Episode, name: str) -> None:
    """Expose a tool declared after the episode opened (a later ``tools/list``)."""
    spec = ep.monitor.toolset.get(name)
    if spec is not None and spec.exposed and name not in ep.state.exposed:
        ep.expose(name)


def names_of(tools: Iterable[Tool | Mapping[str, Any]]) -> set[str]:
    out: set[str] = set()
    for tool in tools:
        name = tool.get("name") if isinstance(tool, Mapping) else getattr(tool, "name", None)
        if isinstance(name, str):
            out.add(name)
    return out


def transport_failure(exc: BaseException) -> bool:
    """Whether ``exc`` says the connection failed (closed, timed out), not that the tool answered with an error."""
    if isinstance(exc, MCPError):
        return exc.code in (CONNECTION_CLOSED, REQUEST_TIMEOUT)
    return isinstance(
        exc, (TimeoutError, ConnectionError, anyio.BrokenResourceError, anyio.ClosedResourceError, anyio.EndOfStream)
    )


def settle(pending: PendingCall, result: CallToolResult | Mapping[str, Any]) -> None:
    if is_error(result):
        pending.failed(error_text(result))
    else:
        pending.done(result_value(result))
