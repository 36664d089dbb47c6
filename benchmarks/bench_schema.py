"""The 2020-12 schema check (jsonschema-rs) against the fastjsonschema check it replaced. Not part of pytest.

Run:  .venv/bin/python benchmarks/bench_schema.py [--rounds 30] [--batch 2000] [--quick] [--markdown FILE]

Both validators run in this process on the same schemas and the same arguments, interleaved
round by round (reference, then new), so machine load shifts both alike; each number is the
median over rounds of the per-call time of a batch. The garbage collector is frozen after
setup and disabled inside each timed batch.

- **reference**: the previous validator, as it was: ``fastjsonschema.compile`` of the schema
  without ``$schema`` (so draft-07 for every tool), unknown arguments refused by default,
  the first error only.
- **new**: :func:`prefixmon.rules._validation.schema_validator` as the MCP client's ``auto`` sets it
  up (the schema's dialect, unknown arguments as the schema says, lax coercion for the
  schemas without ``$schema``, strict for the draft-07 ones), every problem located.

1. Validation alone, valid and invalid arguments, per schema (schemas of the MCP reference
   servers plus a pydantic-style one with unions and ``$defs``).
2. The full checked call: ``await episode.call(name, args)`` on a tool whose validator is one
   or the other (telemetry off, no rules), valid arguments; and invalid arguments under
   ``policy="block"`` (the call is refused: ``ToolBlocked`` with the reason).
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import statistics
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any, Final, Literal

import anyio
import fastjsonschema

from prefixmon import Monitor, ToolBlocked, Toolset
from prefixmon.exceptions import ArgumentError
from prefixmon.rules._validation import schema_validator
from prefixmon.verdict import ArgumentProblem

DRAFT7: Final = "http://json-schema.org/draft-07/schema#"

SCHEMAS: Final[dict[str, dict[str, Any]]] = {
    "git_log (Python server)": {
        "type": "object",
        "properties": {
            "repo_path": {"type": "string"},
            "max_count": {"default": 10, "type": "integer"},
            "start_timestamp": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None},
            "end_timestamp": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None},
        },
        "required": ["repo_path"],
    },
    "get-sum (TypeScript server)": {
        "$schema": DRAFT7,
        "type": "object",
        "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
        "required": ["a", "b"],
    },
    "create_entities (nested arrays)": {
        "$schema": DRAFT7,
        "type": "object",
        "properties": {
            "entities": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "name": {"type": "string"},
                        "entityType": {"type": "string"},
                        "observations": {"type": "array", "items": {"type": "string"}},
                    },
                    "required": ["name", "entityType", "observations"],
                },
            }
        },
        "required": ["entities"],
    },
    "order ($defs, enum, ranges)": {
        "type": "object",
        "properties": {
            "order_id": {"type": "string", "pattern": "^#?W[0-9]+$"},
            "items": {"type": "array", "items": {"$ref": "#/$defs/item"}, "minItems": 1},
            "payment": {"enum": ["card", "gift_card", "paypal"]},
            "note": {"anyOf": [{"type": "string", "maxLength": 200}, {"type": "null"}]},
        },
        "required": ["order_id", "items", "payment"],
        "$defs": {
            "item": {
                "type": "object",
                "properties": {"sku": {"type": "string"}, "qty": {"type": "integer", "minimum": 1, "maximum": 99}},
                "required": ["sku", "qty"],
            }
        },
    },
}

ENTITIES = [{"name": f"e{i}", "entityType": "person", "observations": ["a", "b", "c"]} for i in range(10)]
ARGS: Final[dict[str, tuple[dict[str, Any], dict[str, Any]]]] = {
    "git_log (Python server)": ({"repo_path": "/repo", "max_count": 3, "start_timestamp": None}, {"max_count": "three"}),
    "get-sum (TypeScript server)": ({"a": 1, "b": 2.5}, {"a": "1"}),
    "create_entities (nested arrays)": (
        {"entities": ENTITIES},
        {"entities": [*ENTITIES[:9], {"name": "x", "entityType": 5}]},
    ),
    "order ($defs, enum, ranges)": (
        {"order_id": "#W123", "items": [{"sku": "a", "qty": 2}, {"sku": "b", "qty": 1}], "payment": "card", "note": None},
        {"order_id": "W123", "items": [{"sku": "a", "qty": 0}], "payment": "cash"},
    ),
}


def coercion(schema: Mapping[str, Any]) -> Literal["lax", "strict"]:
    """What MonitorSession's ``auto`` picks for a schema (draft-07: a TypeScript server)."""
    return "strict" if schema.get("$schema") == DRAFT7 else "lax"


def reference_validator(name: str, schema: Mapping[str, Any]) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """The fastjsonschema validator as it was (unknown arguments refused; first error only)."""
    prepared = {k: v for k, v in schema.items() if k != "$schema"}
    prepared.setdefault("type", "object")
    compiled = fastjsonschema.compile(prepared, use_default=False)
    props = schema.get("properties")
    known = frozenset(props) if isinstance(props, Mapping) else None
    check_unknown = known is not None and "additionalProperties" not in schema

    def run(args: dict[str, Any]) -> dict[str, Any]:
        if check_unknown:
            extra = [k for k in args if k not in known]  # type: ignore[operator]
            if extra:
                raise ArgumentError([ArgumentProblem(kind="unknown", location=(k,), message="not allowed") for k in extra])
        try:
            compiled(args)
        except fastjsonschema.JsonSchemaValueException as e:
            raise ArgumentError([ArgumentProblem(kind="value", location=(), message=e.message)]) from None
        return args

    return run


ROWS: list[tuple[str, str, str]] = []


def row(name: str, value: str, detail: str) -> None:
    ROWS.append((name, value, detail))
    print(f"  {name:<62} {value:>10}   {detail}", flush=True)


def per_call_ns(fn: Callable[[dict[str, Any]], Any], args: dict[str, Any], batch: int) -> float:
    pc = time.perf_counter_ns
    gc.disable()
    try:
        start = pc()
        for _ in range(batch):
            try:  # noqa: SIM105 - contextlib.suppress costs more than the check it would time
                fn(args)
            except ArgumentError:
                pass
        return (pc() - start) / batch
    finally:
        gc.enable()


def validation(rounds: int, batch: int) -> None:
    print("\n1. validation alone (median per-call time over interleaved rounds)")
    for label, schema in SCHEMAS.items():
        old = reference_validator(label, schema)
        new = schema_validator(label, schema, coercion=coercion(schema))
        for kind, args in zip(("valid", "invalid"), ARGS[label], strict=True):
            old_t: list[float] = []
            new_t: list[float] = []
            for _ in range(rounds):
                old_t.append(per_call_ns(old, args, batch))
                new_t.append(per_call_ns(new, args, batch))
            o, n = statistics.median(old_t), statistics.median(new_t)
            problems = 0
            try:
                new(args)
            except ArgumentError as e:
                problems = len(e.problems) + e.more
            row(
                f"{label}, {kind}",
                f"{n / o:.2f}x",
                f"new {n / 1000:.2f} us, fastjsonschema {o / 1000:.2f} us, problems {problems}",
            )


async def checked_call(rounds: int, batch: int) -> None:
    print("\n2. full checked call, telemetry off, no rules (median per-call time over interleaved rounds)")
    pc = time.perf_counter_ns
    for label, schema in SCHEMAS.items():
        valid, invalid = ARGS[label]

        async def tool(**kwargs: Any) -> str:
            return "ok"

        new_tools = Toolset()
        spec = new_tools.add_schema("t", schema, func=tool, coercion=coercion(schema))
        old_tools = Toolset()
        old_tools.add(dataclasses.replace(spec, validate=reference_validator(label, schema)))
        for kind, args in (("valid", valid), ("invalid, blocked", invalid)):
            times: dict[str, list[float]] = {"old": [], "new": []}
            for _ in range(rounds):
                for side, tools in (("old", old_tools), ("new", new_tools)):
                    async with Monitor(tools, policy="block").episode(task_id="bench") as ep:
                        gc.disable()
                        try:
                            start = pc()
                            for _ in range(batch):
                                try:  # noqa: SIM105 - as above
                                    await ep.call("t", args)
                                except ToolBlocked:
                                    pass
                            times[side].append((pc() - start) / batch)
                        finally:
                            gc.enable()
            o, n = statistics.median(times["old"]), statistics.median(times["new"])
            row(f"episode.call, {label}, {kind}", f"{n / o:.2f}x", f"new {n / 1000:.2f} us, fastjsonschema {o / 1000:.2f} us")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--batch", type=int, default=2000)
    parser.add_argument("--quick", action="store_true", help="5 rounds of 500 calls")
    parser.add_argument("--markdown", help="write the table to this file")
    ns = parser.parse_args(argv)
    rounds, batch = (5, 500) if ns.quick else (ns.rounds, ns.batch)
    print(f"python {sys.version.split()[0]}, fastjsonschema {fastjsonschema.VERSION}, {rounds} rounds x {batch} calls per side")
    gc.collect()
    gc.freeze()
    validation(rounds, batch)
    anyio.run(checked_call, rounds, max(1, batch // 4))
    if ns.markdown:
        lines = ["| measurement | new / fastjsonschema | detail |", "|---|---:|---|"]
        lines += [f"| {name} | {value} | {detail} |" for name, value, detail in ROWS]
        with open(ns.markdown, "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
