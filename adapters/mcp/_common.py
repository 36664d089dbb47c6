"""What the MCP client session and server middleware share: declaring tools, reading results."""

from __future__ import annotations

import ast
import os
import re
from collections.abc import Iterable, Mapping
from typing import Any, Final, Literal, Protocol, TypeAlias, get_args, runtime_checkable

import anyio

try:
    from mcp import Client, ClientSession, MCPError
    from mcp.types import INVALID_PARAMS, CallToolResult, TextContent, Tool
    from mcp_types import CONNECTION_CLOSED, REQUEST_TIMEOUT
except ImportError as e:  # pragma: no cover - exercised only without the extra
    raise ImportError('pip install "prefixmon[mcp]"') from e

from prefixmon import Episode, PendingCall, SpecError, ToolBlocked, Toolset
from prefixmon.records.jsonlines import too_deep
from prefixmon.rules.specfile import SpecFile, load_spec, parse_spec

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

Mode: TypeAlias = Literal["lax", "strict", "zod", "unknown"]
"""How a server reads argument values (``Toolset.add_schema``'s ``coercion``)."""

MAX_LIST_PAGES = 100
"""Most ``tools/list`` pages read when learning a server's tools (a cursor that never ends cannot hang)."""

RELIST_INTERVAL = 1.0
"""Seconds before a call to the same unlisted tool name may make the server middleware re-read its tools again."""

MAX_RELIST_NAMES = 1024
"""Most unlisted names remembered for :data:`RELIST_INTERVAL` (beyond it, unknown names do not re-list)."""


ToolSession: TypeAlias = ClientSession | Client
"""What :class:`MonitorSession` wraps: an initialized ``mcp.ClientSession`` or an entered ``mcp.Client``."""

CoercionChoice: TypeAlias = Literal["auto", "lax", "strict", "zod", "unknown"]
"""How the server reads argument values: ``lax`` (pydantic), ``strict`` (ajv, ``jsonschema``),
``zod`` (strict, but zod may coerce numbers and strip properties), ``unknown``, or ``auto``
(see :func:`coercion_for`)."""

_LAX_STACKS = ("python", "fastmcp", "pydantic")
_ZOD_STACKS = ("typescript", "javascript", "node", "zod")
_STRICT_STACKS = ("ajv",)
_ZOD_DIALECTS = ("draft-07", "draft-06", "draft-04")


def _field(obj: Any, *names: str) -> Any:
    """A field of a model or of its wire dict (the first of ``names`` present)."""
    for name in names:
        value = obj.get(name) if isinstance(obj, Mapping) else getattr(obj, name, None)
        if value is not None:
            return value
    return None


def _stack_named(server_info: Any) -> Mode | None:
    """The mode the implementation info's words name (``python``, ``zod``, ...), if any."""
    fields = ("name", "title", "description", "website_url", "websiteUrl")
    text = " ".join(v for key in fields if isinstance(v := _field(server_info, key), str)).lower()
    words = set(text.replace("/", " ").replace("-", " ").replace("_", " ").replace(".", " ").split())
    if words & set(_LAX_STACKS):
        return "lax"
    if words & set(_ZOD_STACKS):
        return "zod"
    if words & set(_STRICT_STACKS):
        return "strict"
    return None


def _python_sdk(capabilities: Any) -> Literal[1, 2] | None:
    """The major version of the Python MCP SDK that answered ``initialize``, when its capabilities show it.

    mcp 1.x's ``Server`` always sends ``experimental`` (``{}`` when it has none); mcp 2.x's
    ``MCPServer`` sends ``prompts``, ``resources`` and ``tools``, each with ``listChanged: false``.
    The TypeScript SDK sends neither (``tools: {}`` or ``listChanged: true``).
    """
    if capabilities is None:
        return None
    if isinstance(_field(capabilities, "experimental"), Mapping):
        return 1
    parts = [_field(capabilities, key) for key in ("prompts", "resources", "tools")]
    if all(p is not None and _field(p, "list_changed", "listChanged") is False for p in parts):
        return 2
    return None


def coercion_for(schema: Mapping[str, Any] | None, server_info: Any = None, capabilities: Any = None) -> Mode:
    """The coercion mode ``"auto"`` chooses for one tool of a server.

    Args:
        schema: the tool's ``inputSchema``.
        server_info: the server's implementation info (``initialize`` result ``serverInfo``),
            a model or its wire dict.
        capabilities: the server's capabilities (``initialize`` result ``capabilities``).

    Returns:
        In this order: the mode the implementation info names (``python``, ``fastmcp``,
        ``pydantic`` -> ``"lax"``; ``typescript``, ``javascript``, ``node``, ``zod`` ->
        ``"zod"``; ``ajv`` -> ``"strict"``); ``"lax"`` for a schema pydantic wrote for a
        function (titled ``<name>Arguments``: FastMCP / ``MCPServer``); ``"zod"`` for one
        that declares draft-07 or older (what the TypeScript SDK's zod conversion emits: zod
        may coerce a number, or strip a property, the schema does not show); ``"strict"`` for
        mcp 1.x's low-level ``Server`` (it validates with ``jsonschema``); ``"lax"`` for mcp
        2.x's ``MCPServer``; else ``"unknown"``: nothing refused that a common server reads
        as fitting, until the server refuses such a value.
    """
    if server_info is not None and (named := _stack_named(server_info)) is not None:
        return named
    if isinstance(schema, Mapping):
        title = schema.get("title")
        if isinstance(title, str) and title.endswith("Arguments"):
            return "lax"
        declared = schema.get("$schema")
        if isinstance(declared, str) and any(d in declared for d in _ZOD_DIALECTS):
            return "zod"
    sdk = _python_sdk(capabilities)
    if sdk == 1:
        return "strict"
    if sdk == 2:
        return "lax"
    return "unknown"


_VALIDATION: Final = re.compile(
    r"-32602|[Vv]alidation error|Invalid arguments|invalid_type|is not of type|is a required property"
    r"|Input should be|[Ee]xpected \w+, received|Invalid input"
)
"""How servers say a call's arguments are invalid: the SDKs' -32602, zod's issues, pydantic's
and ``jsonschema``'s messages."""

_STACK_ANSWERS: Final[tuple[tuple[Mode, re.Pattern[str]], ...]] = (
    ("zod", re.compile(r'"code":\s*"invalid_type"|[Ee]xpected \w+, received \w+|Invalid input: expected')),
    ("lax", re.compile(r"validation errors? for \w+|Input should be a valid")),
    ("strict", re.compile(r"is not of type '\w+'|is a required property")),
)
"""What a server's refusal says about its validator: zod, pydantic or the Python ``jsonschema``."""


def refusal_text(result: CallToolResult | Mapping[str, Any] | BaseException) -> str | None:
    """The server's message when it refused a call as invalid (``None``: it ran the call)."""
    if isinstance(result, MCPError):
        return str(result) if result.code == INVALID_PARAMS else None
    if isinstance(result, BaseException):
        return None
    if not is_error(result):
        return None
    text = error_text(result)
    return text if _VALIDATION.search(text[:2000]) else None


def stack_of(refusal: str) -> Mode | None:
    """The validator a server's refusal message shows (``zod``, pydantic's ``lax``, ``jsonschema``'s ``strict``)."""
    head = refusal[:2000]
    for mode, pattern in _STACK_ANSWERS:
        if pattern.search(head):
            return mode
    return None


@runtime_checkable
class LearnsReadings(Protocol):
    """A validator that learns from the server's answers how it reads values (a JSON Schema
    validator of ``Toolset.add_schema``)."""

    def learn(self, args: dict[str, Any], *, refused: bool, error: str = "") -> tuple[str, ...]: ...


def learn(pending: PendingCall, answer: CallToolResult | Mapping[str, Any] | BaseException) -> str | None:
    """Let the call's validator learn from the server's answer; the server's message when it refused the call as invalid."""
    refusal = refusal_text(answer)
    spec = pending.spec
    if spec is not None and isinstance(spec.validate, LearnsReadings):
        spec.validate.learn(pending.args, refused=refusal is not None, error=refusal or "")
    return refusal


def check_coercion(coercion: str) -> None:
    if coercion not in get_args(CoercionChoice):
        raise SpecError(f"coercion must be 'auto', 'lax', 'strict', 'zod' or 'unknown', got {coercion!r}")


def declare_tools(
    toolset: Toolset,
    tools: Iterable[Tool | Mapping[str, Any]],
    *,
    rules: Mapping[str, Mapping[str, Any]] | None = None,
    spec: SpecSource | None = None,
    coercion: CoercionChoice = "auto",
    server_info: Any = None,
    capabilities: Any = None,
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
        capabilities: the server's capabilities (``initialize`` result), for ``"auto"``.

    Returns:
        The names declared or changed.
    """
    check_coercion(coercion)
    return declare(
        toolset, tools, rules, coercion=coercion, server_info=server_info, capabilities=capabilities, spec=load_source(spec)
    )


def declare(
    toolset: Toolset,
    tools: Iterable[Tool | Mapping[str, Any]],
    rules: Mapping[str, Mapping[str, Any]] | None,
    *,
    coercion: CoercionChoice,
    server_info: Any = None,
    capabilities: Any = None,
    spec: SpecFile | None = None,
    modes: dict[str, Mode] | None = None,
    learnt: Mode | None = None,
    again: bool = False,
) -> list[str]:
    """:func:`declare_tools`: the names of the tools declared or re-declared (an unchanged one is left
    as it is unless ``again``). ``modes`` receives the mode ``"auto"`` chose for each tool declared;
    ``learnt`` (the mode the server's answers showed) replaces its ``"unknown"``."""
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
        if not again and old is not None and dict(old.parameters) == dict(schema or {}) and old.description == description:
            continue
        mode = coercion_for(schema, server_info, capabilities) if coercion == "auto" else coercion
        if modes is not None and coercion == "auto" and "coercion" not in rules.get(name, {}):
            modes[name] = mode
        if mode == "unknown" and learnt is not None:
            mode = learnt
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
"""A spec file: a path (YAML or JSON), its mapping, or a loaded :class:`~prefixmon.rules.specfile.SpecFile`."""


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


MAX_LITERAL_TEXT: Final = 1_000_000
"""Longest text result read as a Python literal (longer ones stay text)."""

_LITERAL_START: Final = re.compile(r"\s*[\[{(]")


def _json_or_literal(text: str) -> Any:
    """A text result as JSON, else as a Python literal (``str()`` of a list of dicts, as
    ``mcp-server-sqlite`` answers), else the text itself."""
    value = json_or_text(text)
    if value is not text or len(text) > MAX_LITERAL_TEXT or _LITERAL_START.match(text) is None or too_deep(text):
        return value
    try:
        parsed = ast.literal_eval(text.strip())
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return text
    return list(parsed) if isinstance(parsed, tuple) else parsed if isinstance(parsed, (list, dict)) else text


def result_value(result: CallToolResult | Mapping[str, Any]) -> Any:
    """What a tool result means, for the information pool and reference bindings.

    ``structuredContent`` when present; otherwise the text blocks, each parsed as JSON when
    it is JSON, or as a Python literal list or dict when it is one (a Python server that
    answers ``str(rows)``); other text stays text, and so does text nested too deeply to parse.
    """
    content: Iterable[Any]
    if isinstance(result, CallToolResult):
        structured, content = result.structured_content, result.content
    else:
        structured, content = result.get("structuredContent"), result.get("content") or ()
    if structured is not None:
        return structured
    values = [_json_or_literal(text) for text in _texts(content)]
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


def settle(pending: PendingCall, result: CallToolResult | Mapping[str, Any]) -> str | None:
    """Record the server's answer (the call's validator learns from it); its message when it refused the call as invalid."""
    refusal = learn(pending, result)
    if is_error(result):
        pending.failed(error_text(result))
    else:
        pending.done(result_value(result))
    return refusal
