"""Coercion: the argument values a server may read as something else before it validates them.

pydantic's lax mode (Python MCP SDK, FastMCP) reads ``"3"`` as an integer, a naive ISO datetime
as a ``datetime`` and JSON text as a list; a zod or ajv server does not, unless a zod schema
coerces (``z.coerce.number()`` reads a value as JavaScript's ``Number()`` does, and publishes a
plain ``number``). :func:`coerce` turns arguments into what a lax server would see before they
are validated against the tool's JSON Schema, following the schema's local ``$ref``s only;
:func:`js_number` is ``Number()``.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import re
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal, TypeAlias

from pydantic import TypeAdapter, ValidationError

from .._internal.json_depth import MAX_JSON_DEPTH, deeper_than

__all__ = (
    "LAX_FORMATS",
    "MAX_DEPTH",
    "Reading",
    "Readings",
    "Tolerance",
    "coerce",
    "js_number",
    "json_type",
    "object_nodes",
    "optional_without_default",
    "path_text",
    "pre_parse",
    "python_matches",
    "required_at",
    "schema_at",
    "types_of",
)

MAX_DEPTH: Final = 64
"""Nesting deeper than this is not walked (coercion and error location stop there)."""

_INT: Final = TypeAdapter(int)
_FLOAT: Final = TypeAdapter(float)
_BOOL: Final = TypeAdapter(bool)
_DATETIME: Final = TypeAdapter(dt.datetime)
_DATE: Final = TypeAdapter(dt.date)
_TIME: Final = TypeAdapter(dt.time)
_DURATION: Final = TypeAdapter(dt.timedelta)
_UUID: Final = TypeAdapter(uuid.UUID)

_TEMPORAL: Final[Mapping[str, TypeAdapter[Any]]] = {
    "date-time": _DATETIME,
    "date": _DATE,
    "time": _TIME,
    "duration": _DURATION,
}
"""Formats whose pydantic type also accepts numbers (unix timestamps, seconds) in lax mode."""


def _lax_format(adapter: TypeAdapter[Any]) -> Callable[[str], bool]:
    def check(value: str) -> bool:
        try:
            adapter.validate_python(value)
        except ValidationError:
            return False
        return True

    return check


LAX_FORMATS: Final[Mapping[str, Callable[[str], bool]]] = {
    **{name: _lax_format(adapter) for name, adapter in _TEMPORAL.items()},
    "uuid": _lax_format(_UUID),
}
"""Asserted formats in lax mode: what pydantic's parser of the type accepts (a naive datetime,
a date-only ``date-time``, a UUID without hyphens); other formats as JSON Schema defines them."""


def json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "integer" if value.is_integer() else "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, (list, tuple)):
        return "array"
    if isinstance(value, Mapping):
        return "object"
    return type(value).__name__


# -- lax coercion: what pydantic's lax mode (and the Python MCP SDK) would accept -------------
def _resolve(ref: str, root: Mapping[str, Any]) -> Any:
    """The local target of ``ref`` (``#`` or ``#/json/pointer``), or ``None``."""
    if ref == "#":
        return root
    if not ref.startswith("#/"):
        return None
    node: Any = root
    for raw in ref[2:].split("/"):
        part = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(node, Mapping) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return None
    return node


def _members(node: Mapping[str, Any], root: Mapping[str, Any], depth: int = 0) -> Iterator[Mapping[str, Any]]:
    """``node`` and the schemas that apply beside it (local ``$ref``, ``allOf``), flattened."""
    if depth > 8:
        return
    yield node
    ref = node.get("$ref")
    if isinstance(ref, str):
        target = _resolve(ref, root)
        if isinstance(target, Mapping):
            yield from _members(target, root, depth + 1)
    all_of = node.get("allOf")
    if isinstance(all_of, list):
        for sub in all_of:
            if isinstance(sub, Mapping):
                yield from _members(sub, root, depth + 1)


def object_nodes(node: Mapping[str, Any], root: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    """Every schema that may say what an object's properties are: members and union branches."""
    for member in _members(node, root):
        yield member
        for key in ("anyOf", "oneOf"):
            branches = member.get(key)
            if isinstance(branches, list):
                for sub in branches:
                    if isinstance(sub, Mapping):
                        yield from _members(sub, root, 1)


def _types(node: Mapping[str, Any], root: Mapping[str, Any]) -> tuple[set[str] | None, str | None]:
    """The JSON types a schema allows (``None``: any) and its ``format``, through ``$ref``, ``allOf``
    and union branches."""
    allowed: set[str] | None = None
    fmt: str | None = None
    for member in _members(node, root):
        if isinstance(member.get("format"), str):
            fmt = fmt or member["format"]
        declared = member.get("type")
        here: set[str] | None = None
        if isinstance(declared, str):
            here = {declared}
        elif isinstance(declared, list):
            here = {t for t in declared if isinstance(t, str)}
        else:
            for key in ("anyOf", "oneOf"):
                branches = member.get(key)
                if isinstance(branches, list) and branches:
                    union: set[str] | None = set()
                    for sub in branches:
                        sub_types, sub_fmt = _types(sub, root) if isinstance(sub, Mapping) else (None, None)
                        fmt = fmt or sub_fmt
                        if sub_types is None or union is None:
                            union = None
                        else:
                            union |= sub_types
                    here = union if here is None else (here & union if union is not None else here)
        if here is not None:
            allowed = here if allowed is None else allowed & here
    return allowed, fmt


def types_of(node: Any, root: Mapping[str, Any]) -> set[str] | None:
    """The JSON types a schema allows (``None``: any, or not a schema)."""
    return _types(node, root)[0] if isinstance(node, Mapping) else None


_JS_DECIMAL: Final = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|[+-]?Infinity")
_JS_RADIX: Final = re.compile(r"0[xX][0-9a-fA-F]+|0[oO][0-7]+|0[bB][01]+")
_JS_SPACE: Final = " \t\n\v\f\r\u00a0\u1680\u2028\u2029\u202f\u205f\u3000\ufeff" + "".join(map(chr, range(0x2000, 0x200B)))
"""What JavaScript's ``Number()`` trims: white space and line terminators."""


def _js_text_number(text: str) -> float | None:
    text = text.strip(_JS_SPACE)
    if not text:
        return 0.0
    if _JS_DECIMAL.fullmatch(text):
        return float(text.replace("Infinity", "inf"))
    if _JS_RADIX.fullmatch(text):
        return float(int(text, 0))
    return None


def js_number(value: Any, depth: int = 0) -> float | None:
    """``Number(value)`` in JavaScript, for a JSON value; ``None`` for NaN.

    What ``z.coerce.number()`` reads: numeric text (trimmed; ``""`` is 0, ``"1e1"`` 10,
    ``"0x10"`` 16), booleans (0, 1), ``null`` (0), an array through its text (``[]`` 0,
    ``[2]`` 2, ``[1, 2]`` NaN); an object is NaN.
    """
    if value is None or isinstance(value, bool):
        return float(bool(value))
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        return _js_text_number(value)
    if isinstance(value, (list, tuple)) and depth < 8:
        if not value:
            return 0.0
        if len(value) == 1:
            item = value[0]
            if item is None:
                return 0.0
            if isinstance(item, bool):  # String(true) is "true": NaN
                return None
            return js_number(item, depth + 1) if isinstance(item, (str, int, float, list, tuple)) else None
    return None


def required_at(root: Mapping[str, Any], path: list[str | int]) -> bool | None:
    """Whether the property ``path`` ends with is required by its object (``None``: not a property)."""
    if not path or not isinstance(path[-1], str):
        return None
    parent = schema_at(root, path[:-1]) if len(path) > 1 else root
    if not isinstance(parent, Mapping):
        return None
    for node in object_nodes(parent, root):
        required = node.get("required")
        if isinstance(required, list) and path[-1] in required:
            return True
    return False


def __coerce_scalar(value: Any, allowed: set[str], fmt: str | None) -> Any:
    kind = json_type(value)
    if kind in allowed or (kind == "integer" and "number" in allowed):
        return value
    if "integer" in allowed and isinstance(value, (str, bool, float)):
        try:
            return _INT.validate_python(value)
        except ValidationError:
            pass
    if "number" in allowed and isinstance(value, (str, bool)):
        try:
            number = _FLOAT.validate_python(value)
        except ValidationError:
            pass
        else:
            if math.isfinite(number):
                return number
    if "boolean" in allowed and isinstance(value, (str, int, float)) and not isinstance(value, bool):
        try:
            return _BOOL.validate_python(value)
        except ValidationError:
            pass
    if (
        "string" in allowed
        and fmt is not None
        and fmt in _TEMPORAL
        and isinstance(value, (int, float))
        and not isinstance(value, bool)
    ):
        try:
            parsed = _TEMPORAL[fmt].validate_python(value)
        except ValidationError:
            pass
        else:
            return parsed.isoformat() if hasattr(parsed, "isoformat") else str(parsed)
    return value


def coerce(value: Any, node: Any, root: Mapping[str, Any], depth: int) -> Any:
    """``value`` as pydantic's lax mode would read it for ``node`` (the same object when nothing changes)."""
    if not isinstance(node, Mapping) or depth > MAX_DEPTH:
        return value
    if isinstance(value, Mapping):
        out: dict[str, Any] | None = None
        nodes = list(object_nodes(node, root))
        for key, item in value.items():
            sub = _property_schema(nodes, key)
            if sub is None:
                continue
            new = coerce(item, sub, root, depth + 1)
            if new is not item:
                if out is None:
                    out = dict(value)
                out[key] = new
        return value if out is None else out
    if isinstance(value, (list, tuple)):
        nodes = list(object_nodes(node, root))
        items: list[Any] | None = None
        for i, item in enumerate(value):
            sub = _item_schema(nodes, i)
            if sub is None:
                continue
            new = coerce(item, sub, root, depth + 1)
            if new is not item:
                if items is None:
                    items = list(value)
                items[i] = new
        return value if items is None else items
    allowed, fmt = _types(node, root)
    if allowed is None:
        return value
    return __coerce_scalar(value, allowed, fmt)


def _property_schema(nodes: list[Mapping[str, Any]], key: str) -> Any:
    for node in nodes:
        props = node.get("properties")
        if isinstance(props, Mapping) and key in props:
            return props[key]
    for node in nodes:
        pattern_props = node.get("patternProperties")
        if isinstance(pattern_props, Mapping):
            for pattern, sub in pattern_props.items():
                try:
                    if re.search(str(pattern), key):
                        return sub
                except re.error:
                    continue
    for node in nodes:
        extra = node.get("additionalProperties")
        if isinstance(extra, Mapping):
            return extra
    return None


def _item_schema(nodes: list[Mapping[str, Any]], index: int) -> Any:
    for node in nodes:
        prefix = node.get("prefixItems")
        items = node.get("items")
        if isinstance(prefix, list):
            if index < len(prefix):
                return prefix[index]
            if isinstance(items, Mapping):
                return items
        elif isinstance(items, list):  # draft-07 and earlier: a tuple
            if index < len(items):
                return items[index]
            extra = node.get("additionalItems")
            if isinstance(extra, Mapping):
                return extra
        elif isinstance(items, Mapping):
            return items
    return None


def schema_at(root: Mapping[str, Any], path: list[str | int]) -> Any:
    """The schema that applies to the value at ``path`` (through refs, compositions and unions)."""
    node: Any = root
    for depth, part in enumerate(path):
        if not isinstance(node, Mapping) or depth > MAX_DEPTH:
            return None
        nodes = list(object_nodes(node, root))
        node = _item_schema(nodes, part) if isinstance(part, int) else _property_schema(nodes, part)
        if node is None:
            return None
    return node


def pre_parse(value: str, node: Any, root: Mapping[str, Any]) -> Any:
    """A top-level argument as the Python MCP SDK pre-parses it.

    ``MCPServer`` (FastMCP) parses a top-level string argument as JSON when its parameter is
    not a plain ``str`` and the text is a JSON array, object or ``null`` (models send lists as
    JSON text); pydantic's lax mode then validates the result.
    """
    if not isinstance(node, Mapping):
        return value
    allowed, _ = _types(node, root)
    if allowed is None or allowed == {"string"}:
        return value
    if deeper_than(value, MAX_JSON_DEPTH):  # json.loads would recurse near the interpreter's limit
        return value
    try:
        decoded = json.loads(value)
    except (ValueError, RecursionError):
        return value
    return decoded if isinstance(decoded, (list, dict)) or decoded is None else value


# -- what a server may read, and what its answers showed --------------------------------------
Reading: TypeAlias = Literal["lax", "number", "absent", "extra"]
"""A way the server may read a value the schema refuses, when the monitor cannot know whether
it does: ``lax`` pydantic's lax mode; ``number`` JavaScript's ``Number()`` for a number;
``absent`` ``null`` for an optional argument without a default, as if it were left out (a
schema rewritten without its ``null`` branch); ``extra`` a property the schema forbids, stripped."""

MAY: Final[Mapping[str, frozenset[Reading]]] = {
    "lax": frozenset({"absent"}),
    "strict": frozenset(),
    "zod": frozenset({"number", "extra"}),
    "unknown": frozenset({"lax", "number", "absent"}),
}
"""What each coercion mode only may read (tolerated until the server refuses it)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Tolerance:
    """A value the schema refuses that the server may read as fitting."""

    location: tuple[str | int, ...]
    readings: tuple[Reading, ...]
    key: str
    """What the readings are learnt for: the JSON type read (``integer``), the argument's path
    (``absent``), ``properties`` (``extra``)."""


class Readings:
    """The readings a coercion mode may make (:data:`MAY`), less those the server refused."""

    __slots__ = ("_confirmed", "_refused", "_root", "may")

    def __init__(self, mode: str, root: Mapping[str, Any]) -> None:
        self.may = MAY.get(mode, frozenset())
        self._root = root
        self._refused: set[tuple[Reading, str]] = set()
        self._confirmed: set[tuple[Reading, str]] = set()
        """Readings the server accepted: never ruled out afterwards."""

    def open(self, reading: Reading, key: str) -> bool:
        """Whether ``reading`` may still be made for ``key``."""
        return reading in self.may and (reading, key) not in self._refused

    def refused(self, reading: Reading, key: str) -> bool:
        """Whether the server refused ``reading`` for ``key``."""
        return (reading, key) in self._refused

    def candidates(self, value: Any, node: Any, depth: int) -> list[tuple[Reading, Any, str]]:
        """What pydantic's lax mode and ``Number()`` read ``value`` as for ``node``: (reading, value, key)."""
        if not isinstance(node, Mapping):
            return []
        out: list[tuple[Reading, Any, str]] = []
        allowed = _types(node, self._root)[0] or set()
        lax = pre_parse(value, node, self._root) if depth == 1 and isinstance(value, str) else value
        lax = coerce(lax, node, self._root, depth)
        if lax is not value:
            out.append(("lax", lax, target(lax, allowed)))
        if allowed & {"integer", "number"} and (isinstance(value, bool) or not isinstance(value, (int, float))):
            number = js_number(value)
            if number is not None and math.isfinite(number) and ("number" in allowed or number.is_integer()):
                as_number: int | float = int(number) if number.is_integer() else number
                out.append(("number", as_number, target(as_number, allowed)))
        return out

    def read(self, value: Any, node: Any, depth: int) -> tuple[tuple[Reading, ...], Any, str]:
        """The open readings that turn ``value`` into one value (the first one's), that value and its key."""
        applied: list[Reading] = []
        new: Any = value
        key = ""
        for reading, candidate, candidate_key in self.candidates(value, node, depth):
            if self.open(reading, candidate_key) and (not applied or candidate == new):
                if not applied:
                    new, key = candidate, candidate_key
                applied.append(reading)
        return tuple(applied), new, key

    def learn(self, tolerated: list[Tolerance], *, refused: bool, error: str) -> tuple[str, ...]:
        """Confirm the readings a call passed by (it ran) or rule them out (the server refused it
        as invalid: each one, or those at arguments its message names when several applied)."""
        if not tolerated:
            return ()
        if not refused:
            for t in tolerated:
                self._confirmed.update((r, t.key) for r in t.readings)
            return ()
        blamed = tolerated if len(tolerated) == 1 else [t for t in tolerated if names_in(error, t.location)]
        ruled: list[str] = []
        for t in blamed:
            for r in t.readings:
                if (r, t.key) not in self._confirmed and (r, t.key) not in self._refused:
                    self._refused.add((r, t.key))
                    ruled.append(f"{r} for {t.key}")
        return tuple(ruled)


_TYPE_ORDER: Final = ("integer", "number", "boolean", "string", "array", "object", "null")


def target(value: Any, allowed: set[str] | None = None) -> str:
    """The JSON type a reading turned a value into, as the schema names it (``1`` for a ``number`` is a number)."""
    kind = json_type(value)
    if allowed:
        if kind == "integer" and "integer" not in allowed and "number" in allowed:
            return "number"
        for t in _TYPE_ORDER:
            if t == kind and t in allowed:
                return t
    return kind


def path_text(path: Iterable[str | int]) -> str:
    """A location written as ``order.items[0]``."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def names_in(error: str, location: Iterable[str | int]) -> bool:
    """Whether a server's message names the argument at ``location`` (quoted, ``at name`` or ``name:``)."""
    names = [p for p in location if isinstance(p, str)]
    if not names:
        return False
    name = names[-1]
    return any(form in error for form in (f'"{name}"', f"'{name}'", f"at {name}", f"{name}:"))


def optional_without_default(root: Mapping[str, Any], path: list[str | int], node: Any) -> bool:
    """Whether the argument at ``path`` may be left out and says no default (pydantic's
    ``X | None = None`` once the ``null`` branch is stripped; an ``X = value`` keeps its default)."""
    if required_at(root, path) is not False:
        return False
    return not (isinstance(node, Mapping) and node.get("default") is not None)


_PY_PATTERNS: Final[dict[str, re.Pattern[str] | None]] = {}


def python_matches(pattern: str, value: str) -> bool:
    """Whether Python's ``re`` finds ``pattern`` in ``value`` (``False`` when it cannot read it)."""
    if pattern in _PY_PATTERNS:
        compiled = _PY_PATTERNS[pattern]
    else:
        try:
            compiled = re.compile(pattern)
        except (re.error, RecursionError, OverflowError):
            compiled = None
        if len(_PY_PATTERNS) < 1024:
            _PY_PATTERNS[pattern] = compiled
    return compiled is not None and compiled.search(value) is not None
