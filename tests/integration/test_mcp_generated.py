"""Generated calls against MCP servers our other tests do not use, with no configuration.

For each tool a server lists, valid arguments are built from its ``inputSchema`` and mutated
into near-valid ones (numbers as strings, extra properties, nulls for optional arguments,
bounds, enums, unicode, ...). Every call goes to a raw server and, through
``MonitorSession(session, policy="block")`` with no rules and no options, to a second server
process with its own state. The monitor must

- refuse no call the server accepts (runs, or runs and fails for a reason of its own), and
- still refuse at least :data:`CAUGHT` of the calls the server rejects as invalid whose
  arguments the published schema shows invalid (read strictly, as ``jsonschema`` does).

Servers (installed by ``scripts/mcp_servers.sh``): from PyPI ``mcp-server-sqlite``,
``mcp-text-editor`` and ``mcp-shell-server`` (mcp 1.x's low-level ``Server``: ``jsonschema``
validation) and ``excel-mcp-server`` (mcp 2.x ``MCPServer``, schemas rewritten without
``null``); from npm ``server-sequential-thinking`` (``z.coerce.number()`` behind plain
integers), ``@kazuph/mcp-taskmanager`` (the SDK's low-level ``Server``, zod inside),
``mcp-sqlite`` and ``server-everything`` (zod through ``McpServer``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

import pytest

pytest.importorskip("mcp")
pytest.importorskip("jsonschema")

import jsonschema
import mcp.types as mcp_types
from hypothesis import find, settings
from hypothesis import strategies as st
from hypothesis.errors import NoSuchExample
from mcp import ClientSession, MCPError
from mcp.types import CallToolResult, TextContent, Tool

from prefixmon import Decision, EpisodeRecord

from .test_mcp_servers import NODE_MODULES, PY_BIN, SERVERS_DIR, MonitoredSession, node, stdio

pytestmark = pytest.mark.integration

CAUGHT: Final = 0.95
"""Share of the schema-visible invalid calls the zero-config monitor must still refuse, per server."""

PY1_BIN = SERVERS_DIR / "py1" / "bin"
NODE_TREES = SERVERS_DIR / "node"
REPORT_FILE = os.environ.get("PREFIXMON_MCP_GENERATED")
"""When set, each server's counts are appended to this JSON Lines file."""

Answer = Literal["accepted", "rejected", "failed"]
"""The raw server's answer: ran it; refused it as invalid; ran it and reported an error."""

_REJECTION: Final = re.compile(
    r"-32602|Input validation error|validation error for|Invalid arguments|Unknown tool|Tool \S+ not found"
)
"""How the servers say a call is invalid: zod through the SDK (-32602), mcp 1.x's low-level
``Server`` (jsonschema), pydantic, hand-written zod checks, and unknown tool names."""


# -- generating arguments from a schema -------------------------------------------------------
class _Missing:
    """No value could be built for a schema."""


MISSING: Final = _Missing()


def _resolve(node: Any, root: Mapping[str, Any]) -> Any:
    """``node`` with its local ``$ref`` followed (one level at a time, a few levels at most)."""
    for _ in range(8):
        if not isinstance(node, Mapping) or not isinstance(node.get("$ref"), str):
            return node
        ref: str = node["$ref"]
        target: Any = root
        for part in ref.removeprefix("#").strip("/").split("/") if ref != "#" else []:
            target = target.get(part.replace("~1", "/").replace("~0", "~")) if isinstance(target, Mapping) else None
        node = {**{k: v for k, v in node.items() if k != "$ref"}, **target} if isinstance(target, Mapping) else {}
    return node


def _branch(node: Mapping[str, Any], root: Mapping[str, Any]) -> Mapping[str, Any]:
    """The schema a value is built for: the first non-null branch of a union, merged with ``node``."""
    node = _resolve(node, root)
    for key in ("anyOf", "oneOf"):
        branches = node.get(key)
        if isinstance(branches, list):
            for sub in branches:
                sub = _resolve(sub, root)
                if isinstance(sub, Mapping) and sub.get("type") != "null":
                    rest = {k: v for k, v in node.items() if k != key}
                    return _branch({**rest, **sub}, root)
    all_of = node.get("allOf")
    if isinstance(all_of, list):
        merged = {k: v for k, v in node.items() if k != "allOf"}
        for sub in all_of:
            sub = _resolve(sub, root)
            if isinstance(sub, Mapping):
                merged = {**merged, **sub, "properties": {**merged.get("properties", {}), **sub.get("properties", {})}}
        return _branch(merged, root)
    return node


def type_of(node: Mapping[str, Any]) -> str | None:
    """The JSON type a (branch-resolved) schema asks for, ``None`` when it names none."""
    declared = node.get("type")
    if isinstance(declared, list):
        declared = next((t for t in declared if t != "null"), None)
    if isinstance(declared, str):
        return declared
    if "properties" in node:
        return "object"
    if "items" in node:
        return "array"
    if node.get("enum"):
        return type(node["enum"][0]).__name__.replace("str", "string").replace("int", "integer")
    return None


_PATTERN_CANDIDATES: Final = ("A1", "a", "1", "Sheet1", "A1:B2", "2024-01-15", "x1", "abc", "#FF0000", "FF0000", "00:00")


def _matching(pattern: str) -> str | _Missing:
    """A short string the pattern matches: a usual one, else the simplest hypothesis finds."""
    try:
        for candidate in _PATTERN_CANDIDATES:
            if re.search(pattern, candidate):
                return candidate
        return str(find(st.from_regex(pattern, fullmatch=True), lambda s: True, settings=settings(database=None)))
    except (re.error, NoSuchExample):
        return MISSING


def _string(node: Mapping[str, Any], name: str) -> str | _Missing:
    pattern = node.get("pattern")
    if isinstance(pattern, str):
        return _matching(pattern)
    fmt = node.get("format")
    formats = {"date-time": "2024-01-15T14:30:25Z", "date": "2024-01-15", "email": "a@example.org", "uri": "https://example.org"}
    value = formats.get(fmt, name or "x") if isinstance(fmt, str) else (name or "x")
    low, high = node.get("minLength", 0), node.get("maxLength")
    if len(value) < low:
        value = value + "x" * (low - len(value))
    if isinstance(high, int) and len(value) > high:
        value = value[:high]
    return value


def _number(node: Mapping[str, Any], integer: bool) -> int | float:
    low = node.get("minimum", node.get("exclusiveMinimum"))
    high = node.get("maximum", node.get("exclusiveMaximum"))
    value: int | float = 1
    if isinstance(low, (int, float)) and not isinstance(low, bool):
        value = low + (1 if "exclusiveMinimum" in node and "minimum" not in node else 0)
        value = max(value, 1) if not isinstance(high, (int, float)) or high >= 1 else value
    if isinstance(high, (int, float)) and not isinstance(high, bool) and value > high:
        value = high
    return int(value) if integer else value


def build(node: Any, root: Mapping[str, Any], name: str, hints: Mapping[str, Any], depth: int = 0, full: bool = False) -> Any:
    """A value valid for ``node``: a hint for its property name, else its const, first enum value,
    default, or a value of its type within its bounds; :data:`MISSING` when none can be made."""
    if name in hints:
        return hints[name]
    if not isinstance(node, Mapping) or depth > 6:
        return MISSING
    node = _branch(node, root)
    if "const" in node:
        return node["const"]
    if isinstance(node.get("enum"), list) and node["enum"]:
        return node["enum"][0]
    if "default" in node and node["default"] is not None:
        return node["default"]
    kind = type_of(node)
    if kind == "string":
        return _string(node, name)
    if kind in ("integer", "number"):
        return _number(node, kind == "integer")
    if kind == "boolean":
        return False
    if kind == "null":
        return None
    if kind == "array":
        items = node.get("items") if isinstance(node.get("items"), Mapping) else {}
        item = build(items, root, name.rstrip("s") or "item", hints, depth + 1, full)
        if item is MISSING:
            return MISSING
        return [item] * max(1, int(node.get("minItems", 1)))
    if kind == "object" or kind is None:
        return build_object(node, root, hints, depth + 1, full)
    return MISSING


def build_object(
    node: Mapping[str, Any], root: Mapping[str, Any], hints: Mapping[str, Any], depth: int = 0, full: bool = False
) -> Any:
    """An object with every required property (every property when ``full``), or :data:`MISSING`."""
    node = _branch(node, root)
    props: Mapping[str, Any] = node["properties"] if isinstance(node.get("properties"), Mapping) else {}
    required = [r for r in node.get("required", []) if isinstance(r, str)]
    out: dict[str, Any] = {}
    for key in [*required, *([k for k in props if k not in required] if full else [])]:
        value = build(props.get(key, {}), root, key, hints, depth, full)
        if value is MISSING:
            if key in required:
                return MISSING
            continue
        out[key] = value
    return out


@dataclass(frozen=True, slots=True, kw_only=True)
class Case:
    """One generated call: arguments as a dict, or raw (possibly malformed) JSON text."""

    kind: str
    tool: str
    args: dict[str, Any] | str


def _digits_to_arabic_indic(text: str) -> str:
    return text.translate(str.maketrans("0123456789", "٠١٢٣٤٥٦٧٨٩"))


def _scalar_mutations(value: Any, node: Mapping[str, Any]) -> Iterator[tuple[str, Any]]:
    """Near-valid replacements for one valid value of ``node`` (a branch-resolved schema)."""
    kind = type_of(node)
    if kind in ("integer", "number") and isinstance(value, (int, float)) and not isinstance(value, bool):
        yield "number as string", str(value)
        yield "number as padded string", f" {value} "
        yield "number as '5.0'", f"{float(value)}"
        yield "number as '1e0'", f"{value}e0"
        yield "number as '+5'", f"+{value}"
        yield "boolean for a number", True
        yield "one-item array for a number", [value]
        if kind == "integer":
            yield "fraction for an integer", value + 0.5
            yield "integral float for an integer", float(value)
        for bound, step in (("minimum", -1), ("maximum", 1), ("exclusiveMinimum", 0), ("exclusiveMaximum", 0)):
            limit = node.get(bound)
            if isinstance(limit, (int, float)) and not isinstance(limit, bool):
                yield f"bounds ({bound})", limit + step
    if kind == "boolean":
        yield "boolean as string", "true"
        yield "boolean as 0/1", 1
        yield "string for a boolean", "maybe"
    if kind == "string" and isinstance(value, str):
        yield "number for a string", 5
        yield "empty string", ""
        yield "object for a string", {"value": value}
        if isinstance(node.get("enum"), list):
            yield "enum (outside)", "zzz-not-listed"
            if value.swapcase() != value:
                yield "enum (other case)", value.swapcase()
        elif isinstance(node.get("pattern"), str):
            if re.search(r"\d", value):
                yield "non-ASCII digits for a pattern", _digits_to_arabic_indic(value)
            yield "pattern (no match)", "!!"
        else:
            yield "unicode string", value + " Zoë ✓ 日本 😀"
        for bound, text in (("minLength", value[: max(0, int(node.get("minLength", 0)) - 1)]), ("maxLength", None)):
            limit = node.get(bound)
            if isinstance(limit, int) and bound == "minLength" and limit > 0:
                yield "bounds (minLength)", text
            if isinstance(limit, int) and bound == "maxLength":
                yield "bounds (maxLength)", "x" * (limit + 1)
    if kind == "array" and isinstance(value, list):
        yield "JSON text for an array", json.dumps(value)
        if value:
            yield "item for an array", value[0]
        yield "empty array", []
        if isinstance(node.get("maxItems"), int):
            yield "bounds (maxItems)", (value * (node["maxItems"] + 1))[: node["maxItems"] + 1]
    if kind == "object" and isinstance(value, dict):
        yield "JSON text for an object", json.dumps(value)
        yield "extra property (nested)", {**value, "zz_extra": 1}


def generate(tool: Tool, hints: Mapping[str, Any], per_kind: int = 2) -> list[Case]:
    """Valid calls and near-valid mutations of them for one tool (each mutation kind on at most
    ``per_kind`` of its properties)."""
    root: Mapping[str, Any] = tool.input_schema or {"type": "object"}
    name = tool.name
    base = build_object(root, root, hints)
    if base is MISSING:
        return []
    full = build_object(root, root, hints, full=True)
    cases = [Case(kind="valid (required only)", tool=name, args=base)]
    if full is not MISSING and full != base:
        cases.append(Case(kind="valid (every property)", tool=name, args=full))
    node = _branch(root, root)
    props: Mapping[str, Any] = node.get("properties", {}) if isinstance(node.get("properties"), Mapping) else {}
    required = [r for r in node.get("required", []) if isinstance(r, str)]
    full_args: dict[str, Any] = full if isinstance(full, dict) else base
    used: Counter[str] = Counter()

    def add(kind: str, args: dict[str, Any]) -> None:
        # an equal call again (2.0 is 1 + 1.0) would meet the monitor's rule against repeating a failed call
        if used[kind] < per_kind and all(c.args != args for c in cases):
            used[kind] += 1
            cases.append(Case(kind=kind, tool=name, args=args))

    if required:
        add("missing required", {k: v for k, v in base.items() if k != required[0]})
    add("extra property", {**base, "zz_extra": "x"})
    for key, sub in props.items():
        if key not in full_args:
            continue
        with_key = {**base, key: full_args[key]}
        if key not in required:
            add("null for an optional property", {**base, key: None})
        else:
            add("null for a required property", {**base, key: None})
        resolved = _branch(sub, root)
        for kind, value in _scalar_mutations(full_args[key], resolved):
            add(kind, {**with_key, key: value})
        items = resolved.get("items")
        value = full_args[key]
        if isinstance(items, Mapping) and isinstance(value, list) and value and isinstance(value[0], dict):
            item_node = _branch(items, root)
            item_required = [r for r in item_node.get("required", []) if isinstance(r, str)]
            if item_required:
                add(
                    "missing required (nested)", {**with_key, key: [{k: v for k, v in value[0].items() if k != item_required[0]}]}
                )
            add("extra property (nested)", {**with_key, key: [{**value[0], "zz_extra": 1}]})
            for item_key, item_sub in (item_node.get("properties") or {}).items():
                if item_key in value[0]:
                    for kind, mutated in _scalar_mutations(value[0][item_key], _branch(item_sub, root)):
                        add(kind + " (nested)", {**with_key, key: [{**value[0], item_key: mutated}]})
    return cases


def common(tool: str, args: dict[str, Any]) -> list[Case]:
    """Calls every server refuses: an unknown tool, malformed JSON, arguments that are not an object."""
    text = json.dumps(args)
    return [
        Case(kind="unknown tool", tool=tool + "_nope", args=args),
        Case(kind="malformed JSON", tool=tool, args=text[:-1]),
        Case(kind="not an object", tool=tool, args="[1, 2]"),
    ]


# -- running them ----------------------------------------------------------------------------
@dataclass(frozen=True, slots=True, kw_only=True)
class Outcome:
    case: Case
    blocked: bool
    reason: str
    answer: Answer
    detail: str
    schema_invalid: bool
    """Whether the published schema, read strictly, shows the arguments invalid."""


def _text(result: CallToolResult) -> str:
    return "\n".join(block.text for block in result.content if isinstance(block, TextContent))


def classify(result: CallToolResult) -> tuple[Answer, str]:
    """A server's answer: a rejection as invalid, a failure of the tool itself, or a run.

    mcp-server-sqlite answers every error (an unknown tool too) with a plain text result.
    """
    text = _text(result)
    if result.is_error or text.startswith("Error: Unknown tool"):
        return ("rejected" if _REJECTION.search(text[:300]) else "failed"), text[:160]
    return ("failed" if text.startswith(("Error:", "Database error:")) else "accepted"), text[:160]


async def send(session: ClientSession, case: Case, root: Path) -> tuple[Answer, str, CallToolResult | None]:
    """What the server itself answers to the case."""
    args = _fill(case.args, root)
    try:
        if isinstance(args, str):
            request = mcp_types.Request(method="tools/call", params={"name": case.tool, "arguments": args})
            result = await session.send_request(request, CallToolResult)
        else:
            result = await session.call_tool(case.tool, args)
    except MCPError as e:
        return "rejected", f"MCPError {e.code}: {str(e)[:120]}", None
    answer, detail = classify(result)
    return answer, detail, result


def _fill(value: Any, root: Path) -> Any:
    if isinstance(value, str):
        return value.replace("{root}", str(root))
    if isinstance(value, list):
        return [_fill(v, root) for v in value]
    if isinstance(value, dict):
        return {k: _fill(v, root) for k, v in value.items()}
    return value


def schema_invalid(tools: Mapping[str, Tool], case: Case) -> bool:
    """Whether the published schema (or the tool list) shows the call invalid, read strictly."""
    tool = tools.get(case.tool)
    if tool is None or isinstance(case.args, str):
        return True
    schema = dict(tool.input_schema or {"type": "object"})
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    return not cls(schema).is_valid(case.args)


@dataclass(frozen=True, slots=True, kw_only=True)
class Server:
    """One server: how to start it over stdio, its state, and values its arguments need."""

    name: str
    connect: Callable[[Path], AbstractAsyncContextManager[ClientSession]]
    needs: tuple[Path, ...]
    make_state: Callable[[Path], None] = lambda root: None
    hints: Mapping[str, Any] = field(default_factory=dict)
    """Values for arguments of these names (``{root}`` is the state directory)."""
    tool_hints: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    skip: frozenset[str] = frozenset()
    """Tools not called: they wait for the client (sampling, elicitation) or for seconds."""


async def run(server: Server, tmp_path: Path) -> list[Outcome]:
    """Every generated case on a raw server and on a monitored one (each with its own state)."""
    raw_root, mon_root = tmp_path / "raw", tmp_path / "monitored"
    for root in (raw_root, mon_root):
        root.mkdir()
        server.make_state(root)
    outcomes: list[Outcome] = []
    records: list[EpisodeRecord] = []
    async with (
        server.connect(raw_root) as raw,
        server.connect(mon_root) as session,
        MonitoredSession(session, policy="block", sink=records.append) as guarded,
    ):
        listed = {t.name: t for t in (await raw.list_tools()).tools if t.name not in server.skip}
        cases: list[Case] = []
        for tool in listed.values():
            cases += generate(tool, {**server.hints, **server.tool_hints.get(tool.name, {})})
        first = next(c for c in cases if isinstance(c.args, dict))
        assert isinstance(first.args, dict)
        cases += common(first.tool, first.args)
        async with guarded.episode(task_id=server.name) as ep:
            for case in cases:
                answer, detail, _ = await send(raw, case, raw_root)
                result = await guarded.call_tool(case.tool, _fill(case.args, mon_root))
                text = _text(result)
                blocked = bool(result.is_error) and text.startswith(f"Call to {case.tool!r} was not run:")
                outcomes.append(
                    Outcome(
                        case=case,
                        blocked=blocked,
                        reason=text if blocked else "",
                        answer=answer,
                        detail=detail,
                        schema_invalid=schema_invalid(listed, case),
                    )
                )
        assert ep.record is not None
    [record] = records
    assert [a.decision for a in record.actions].count(Decision.BLOCK) == sum(o.blocked for o in outcomes)
    return outcomes


@dataclass(frozen=True, slots=True, kw_only=True)
class Counts:
    """What one server's run measured."""

    calls: int
    accepted: int
    """Calls the server ran (ran and failed included)."""
    refused_but_accepted: int
    invalid: int
    """Calls the server rejected as invalid."""
    shown: int
    """Of those, the ones whose arguments the published schema shows invalid."""
    caught: int
    """Of those, the ones the monitor refused."""

    @property
    def share_caught(self) -> float:
        return self.caught / self.shown if self.shown else 1.0


def count(outcomes: list[Outcome]) -> Counts:
    shown = [o for o in outcomes if o.answer == "rejected" and o.schema_invalid]
    return Counts(
        calls=len(outcomes),
        accepted=sum(o.answer != "rejected" for o in outcomes),
        refused_but_accepted=sum(o.blocked and o.answer != "rejected" for o in outcomes),
        invalid=sum(o.answer == "rejected" for o in outcomes),
        shown=len(shown),
        caught=sum(o.blocked for o in shown),
    )


def report(name: str, outcomes: list[Outcome]) -> Counts:
    """Print (and optionally record) the counts and every disagreement; assert the targets."""
    counts = count(outcomes)
    print(
        f"\n{name}: {counts.calls} calls, {counts.accepted} accepted, {counts.refused_but_accepted} refused but accepted, "
        f"{counts.caught}/{counts.shown} schema-visible invalid caught ({counts.share_caught:.1%}), "
        f"{counts.invalid - counts.shown} invalid only by the server's own rules"
    )
    kinds: dict[str, Counter[str]] = {}
    for o in outcomes:
        kinds.setdefault(o.case.kind, Counter())[f"{'refused' if o.blocked else 'allowed'}/{o.answer}"] += 1
    if os.environ.get("PREFIXMON_MCP_GENERATED_KINDS"):
        for kind, c in sorted(kinds.items()):
            print(f"  {kind:<40} " + ", ".join(f"{k}={v}" for k, v in sorted(c.items())))
    for o in outcomes:
        if o.blocked != (o.answer == "rejected"):
            mark = "REFUSED" if o.blocked else "missed" if o.schema_invalid else "unseen"
            why = o.reason.split(" was not run: ", 1)[-1] if o.blocked else o.detail
            print(f"  {mark:<7} {o.answer:<8} {o.case.kind:<32} {o.case.tool} {json.dumps(o.case.args)[:60]}  {why[:90]!r}")
    if REPORT_FILE:
        with open(REPORT_FILE, "a", encoding="utf-8") as f:
            f.write(json.dumps({"server": name, **asdict(counts)}) + "\n")
    refused = [o for o in outcomes if o.blocked and o.answer != "rejected"]
    assert not refused, "the monitor refused calls the server runs:\n" + "\n".join(
        f"{o.case}: {o.reason} / server: {o.answer} {o.detail}" for o in refused
    )
    assert counts.share_caught >= CAUGHT, f"{name}: only {counts.caught} of {counts.shown} schema-visible invalid calls refused"
    assert counts.shown > 0 and counts.accepted > 0  # the corpus exercises both sides
    return counts


# -- the servers -------------------------------------------------------------------------------
def sqlite_db(root: Path) -> None:
    with sqlite3.connect(root / "data.db") as db:
        db.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT)")
        db.execute("INSERT INTO t (name) VALUES ('a')")


def text_files(root: Path) -> None:
    (root / "a.txt").write_text("one\ntwo\nthree\n", encoding="utf-8")
    (root / "a.csv").write_text("x,y\n1,2\n", encoding="utf-8")


def tree(name: str, *parts: str) -> Path:
    return NODE_TREES / name / "node_modules" / Path(*parts)


SQL = {"query": "SELECT name FROM t"}
SERVERS = [
    Server(
        name="mcp-server-sqlite",
        connect=stdio(str(PY1_BIN / "mcp-server-sqlite"), "--db-path", "{root}/data.db"),
        needs=(PY1_BIN / "mcp-server-sqlite",),
        make_state=sqlite_db,
        hints={"table_name": "t", "insight": "sales grow"},
        tool_hints={
            "read_query": SQL,
            "write_query": {"query": "INSERT INTO t (name) VALUES ('b')"},
            "create_table": {"query": "CREATE TABLE IF NOT EXISTS u (x TEXT)"},
        },
    ),
    Server(
        name="mcp-text-editor",
        connect=stdio(str(PY1_BIN / "mcp-text-editor")),
        needs=(PY1_BIN / "mcp-text-editor",),
        make_state=text_files,
        hints={"file_path": "{root}/a.txt", "path": "{root}/a.txt", "file_hash": "0" * 64, "encoding": "utf-8"},
    ),
    Server(
        name="mcp-shell-server",
        connect=stdio(str(PY1_BIN / "mcp-shell-server"), env={"ALLOW_COMMANDS": "echo"}),
        needs=(PY1_BIN / "mcp-shell-server",),
        hints={"command": ["echo", "hi"], "directory": "{root}", "stdin": "text", "timeout": 5},
    ),
    Server(
        name="excel-mcp-server",
        connect=stdio(str(PY_BIN / "excel-mcp-server"), "stdio", "--allow-dir", "{root}"),
        needs=(PY_BIN / "excel-mcp-server",),
        make_state=text_files,
        hints={"path": "{root}/book.xlsx", "csv_path": "{root}/a.csv", "directory": "{root}", "sheet": "Sheet1"},
    ),
    Server(
        name="server-sequential-thinking",
        connect=stdio(
            "node", str(tree("sequential-thinking", "@modelcontextprotocol", "server-sequential-thinking", "dist", "index.js"))
        ),
        needs=(tree("sequential-thinking", "@modelcontextprotocol", "server-sequential-thinking"),),
        hints={"thought": "think"},
    ),
    Server(
        name="mcp-taskmanager",
        connect=stdio(
            "node",
            str(tree("mcp-taskmanager", "@kazuph", "mcp-taskmanager", "dist", "index.js")),
            env={"TASK_MANAGER_FILE_PATH": "{root}/tasks.json"},
        ),
        needs=(tree("mcp-taskmanager", "@kazuph", "mcp-taskmanager"),),
        hints={"requestId": "req-1", "taskId": "task-1"},
    ),
    Server(
        name="mcp-sqlite",
        connect=stdio("node", str(tree("mcp-sqlite", "mcp-sqlite", "mcp-sqlite-server.js")), "{root}/data.db"),
        needs=(tree("mcp-sqlite", "mcp-sqlite"),),
        make_state=sqlite_db,
        hints={"sql": "SELECT name FROM t", "table": "t", "tableName": "t", "data": {"name": "b"}, "conditions": {"id": 1}},
    ),
    Server(
        name="server-everything",
        connect=node("server-everything", "stdio"),
        needs=(NODE_MODULES / "server-everything",),
        skip=frozenset(
            {
                "trigger-long-running-operation",
                "simulate-research-query",
                "gzip-file-as-resource",
                "toggle-simulated-logging",
                "toggle-subscriber-updates",
                "trigger-sampling-request",
                "trigger-elicitation-request",
            }
        ),
    ),
]


@pytest.fixture
def anyio_backend() -> str:
    """One event loop: the servers, not the loop, are under test."""
    return "asyncio"


def _missing(server: Server) -> str | None:
    absent = [str(p) for p in server.needs if not p.exists()]
    if server.needs and str(server.needs[0]).startswith(str(NODE_TREES)) and shutil.which("node") is None:
        absent.append("node")
    return f"not installed (run scripts/mcp_servers.sh): {', '.join(absent)}" if absent else None


@pytest.mark.parametrize("server", SERVERS, ids=[s.name for s in SERVERS])
async def test_zero_config(server: Server, tmp_path: Path) -> None:
    """No call the server accepts is refused; the schema-visible invalid ones are still caught."""
    why = _missing(server)
    if why is not None:
        if os.environ.get("CI"):
            pytest.fail(f"{server.name} {why}; .ci/run installs it, so CI must not skip it", pytrace=False)
        pytest.skip(why)
    report(server.name, await run(server, tmp_path))


SQLITE = SERVERS[0]


class TestTextResultsFeedReferences:
    """mcp-server-sqlite answers ``str(rows)``: Python-literal text binds references and is information."""

    async def test_a_listed_table_can_be_described(self, tmp_path: Path) -> None:
        """describe_table('products') right after list_tables returned it is run; a table never listed is refused, truly."""
        why = _missing(SQLITE)
        if why is not None:
            pytest.skip(why)
        rules = {"list_tables": {"produces": {"table": "name"}}, "describe_table": {"refs": {"table_name": "table"}}}
        async with (
            SQLITE.connect(tmp_path) as session,
            MonitoredSession(session, policy="block", rules=rules) as guarded,
            guarded.episode(task_id="sqlite"),
        ):
            created = await guarded.call_tool("create_table", {"query": "CREATE TABLE products (id INTEGER, name TEXT)"})
            assert _text(created) == "Table created successfully"
            listed = await guarded.call_tool("list_tables", {})
            assert _text(listed) == "[{'name': 'products'}]"
            described = await guarded.call_tool("describe_table", {"table_name": "products"})
            assert not described.is_error and "'name': 'id'" in _text(described)
            ghost = await guarded.call_tool("describe_table", {"table_name": "ghost"})
            assert ghost.is_error and "'ghost' was never returned by any tool" in _text(ghost)
