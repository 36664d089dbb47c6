"""Sample values of a JSON Schema, standing in for placeholders when a step's arguments are validated.

A placeholder's value is known only when its step runs; to check the literal arguments
beside it, the step is validated with each placeholder replaced by a simple value of the
type its schema location declares.
"""

from __future__ import annotations

import contextlib
import copy
import math
from collections.abc import Mapping
from typing import Any, Final

from ..rules.spec import ToolSpec
from ..verdict import Location
from .model import PlanStep, to_data

__all__ = ("with_samples",)

_MISSING: Final = object()


def with_samples(samples: dict[tuple[str, Location], Any], step: PlanStep, spec: ToolSpec) -> dict[str, Any]:
    """The step's arguments with each placeholder replaced by a sample of its declared type.

    ``samples`` caches one sample per (tool, location) for the verification.
    """
    out: dict[str, Any] = dict(step.args)
    root = spec.parameters
    for loc, _ in step.refs:
        top = str(loc[0])
        if out[top] is step.args[top] and len(loc) > 1:
            out[top] = copy.deepcopy(to_data(step.args[top]))
        key = (step.tool, loc)
        sample = samples.get(key, _MISSING)
        if sample is _MISSING:
            sample = samples[key] = _sample(_subschema(root, loc), root)
        if len(loc) == 1:
            out[top] = sample
            continue
        holder: Any = out[top]
        with contextlib.suppress(KeyError, IndexError, TypeError):
            for part in loc[1:-1]:
                holder = holder[part]
            holder[loc[-1]] = sample
    return out


def _resolve_schema(schema: Any, root: Mapping[str, Any]) -> Any:
    for _ in range(8):
        if not isinstance(schema, Mapping):
            return {}
        pointer = schema.get("$ref")
        if isinstance(pointer, str) and pointer.startswith("#/"):
            node: Any = root
            for part in pointer[2:].split("/"):
                node = node.get(part, {}) if isinstance(node, Mapping) else {}
            schema = node
            continue
        for combo in ("anyOf", "oneOf", "allOf"):
            options = schema.get(combo)
            if isinstance(options, list) and options:
                concrete = [o for o in options if not (isinstance(o, Mapping) and o.get("type") == "null")]
                schema = concrete[0] if concrete else options[0]
                break
        else:
            return schema
    return schema


def _subschema(root: Mapping[str, Any], loc: Location) -> Any:
    schema: Any = root
    for part in loc:
        schema = _resolve_schema(schema, root)
        if isinstance(part, int):
            items = schema.get("items", {})
            schema = items[part] if isinstance(items, list) and part < len(items) else items
        else:
            props = schema.get("properties", {})
            schema = props.get(part, {}) if isinstance(props, Mapping) else {}
    return _resolve_schema(schema, root)


_FORMATS: Final = {
    "date": "2000-01-01",
    "date-time": "2000-01-01T00:00:00Z",
    "time": "00:00:00",
    "uuid": "00000000-0000-0000-0000-000000000000",
    "email": "someone@example.com",
    "uri": "https://example.com",
}


def _sample(schema: Any, root: Mapping[str, Any]) -> Any:
    if not isinstance(schema, Mapping):
        return "placeholder"
    if "const" in schema:
        return schema["const"]
    enum = schema.get("enum")
    if isinstance(enum, list) and enum:
        return enum[0]
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "string")
    if kind in ("integer", "number"):
        return _number_sample(schema, integer=kind == "integer")
    if kind == "boolean":
        return False
    if kind == "array":
        return []
    if kind == "object":
        return {}
    fmt = schema.get("format")
    if isinstance(fmt, str) and fmt in _FORMATS:
        return _FORMATS[fmt]
    return "x" * max(1, int(schema.get("minLength", 1) or 1))


def _number_sample(schema: Mapping[str, Any], *, integer: bool) -> int | float:
    """The smallest simple number that meets ``minimum``, ``exclusiveMinimum`` and ``multipleOf``."""

    def num(key: str) -> float | None:
        v = schema.get(key)
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None

    low, excl, step = num("minimum"), schema.get("exclusiveMinimum"), num("multipleOf")
    value = low if low is not None else 0.0
    if excl is True and low is not None:  # draft 4: a flag on minimum
        value = low + (1 if integer else 0.5)
    elif (x := num("exclusiveMinimum")) is not None and value <= x:
        value = math.floor(x) + 1 if integer else x + 1
    if integer:
        value = math.ceil(value)
    if step is not None and step > 0:
        value = math.ceil(value / step) * step
    high = num("maximum")
    if high is not None and value > high and low is None and excl is None:
        value = high
    return int(value) if integer and float(value).is_integer() else float(value)
