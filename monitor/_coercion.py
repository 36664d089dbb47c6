"""Lax coercion: the argument values a pydantic-based server (Python MCP SDK, FastMCP) would accept.

pydantic's lax mode reads ``"3"`` as an integer, a naive ISO datetime as a ``datetime`` and
JSON text as a list; a zod or ajv server does not. :func:`coerce` turns arguments into what a
lax server would see before they are validated against the tool's JSON Schema, following the
schema's local ``$ref``s only.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import re
import uuid
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Final

from pydantic import TypeAdapter, ValidationError

from ._json_depth import MAX_JSON_DEPTH, deeper_than

__all__ = ("LAX_FORMATS", "MAX_DEPTH", "coerce", "json_type", "object_nodes", "pre_parse", "schema_at")

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
