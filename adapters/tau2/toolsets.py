"""Monitor toolsets declared from the real τ² tools.

Every tool of the domain's environment (and, in telecom, every tool of the user's phone)
is declared from its own signature (see :func:`signature_schema`), with ``read`` /
``write`` from τ²'s own type tags (``ToolType.WRITE`` is a write; ``read``,
``think`` and ``generic`` tools change nothing), in one of three modes:

- ``declared``: the references, preconditions and effects of :mod:`.rules`, read over the
  live environment (``state.env``, a :class:`~.env.Tau2Env`);
- ``dry_run``: run the call on an exact copy of the environment first
  (:meth:`~.env.Tau2Env.fork`) and accept only what the real one would accept;
- ``none``: schema checks and environment acceptance only.

The schema check is as strict as τ² and no stricter. τ² calls the Python tool with the
arguments as they are, so top-level values are checked as JSON types (``coercion="strict"``),
and a keyword the function lacks is refused (it raises ``TypeError``); a nested record
(``Payment``, ``Passenger``, ``FlightInfo``, ``APNSettings``) is read by the tool as
``Model(**item)``, pydantic's lax mode, so it is checked with ``coercion="lax"`` and its
required fields are required (``payment_methods[0].payment_id``). The few integer arguments
a tool only hands to a pydantic record (:data:`LAX_ARGUMENTS`) are read laxly too.

Results are recognised as rejections as τ² signals them (see :func:`.rules.refusal`).
Tool metadata: ``domain``, ``write``, ``tool_type`` and ``actor`` (``assistant`` or ``user``).
"""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Mapping
from typing import Any, Final, Literal, Union, get_args, get_origin

from pydantic import BaseModel, create_model
from pydantic.fields import FieldInfo

from prefixmon import Precondition, Toolset, TrackedState, dry_run

from .env import Domain, Tau2Env
from .rules import RULES, ToolRules, refusal

__all__ = ("LAX_ARGUMENTS", "MODES", "Mode", "signature_schema", "toolset")

Mode = Literal["declared", "dry_run", "none"]
MODES: Final[tuple[Mode, ...]] = ("declared", "dry_run", "none")


LAX_ARGUMENTS: Final[frozenset[tuple[str, str]]] = frozenset(
    {
        ("book_reservation", "total_baggages"),  # only passed to Reservation(...)
        ("send_certificate", "amount"),  # only passed to Certificate(...)
        ("update_reservation_baggages", "total_baggages"),  # only assigned to the reservation
    }
)
"""``(tool, argument)`` pairs τ² never computes with: it hands them to a pydantic record, which
reads ``"2"`` as ``2``, so they are checked laxly (the other numbers are used in arithmetic
first, where a string raises)."""


def _is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _as_sent(annotation: Any) -> Any:
    """The annotation as a JSON argument meets it: ``Model | dict`` is ``Model``.

    τ²'s tools take a record or its dict and build the record from the dict
    (``Payment(**payment)``), so a dict is held to the record's fields.
    """
    origin, args = get_origin(annotation), get_args(annotation)
    if origin in (Union, types.UnionType):
        if any(_is_model(a) for a in args):
            args = tuple(a for a in args if a is not dict and get_origin(a) is not dict)
        kept = tuple(_as_sent(a) for a in args)
        return kept[0] if len(kept) == 1 else Union[kept]  # noqa: UP007 (a runtime union of types)
    if origin is list and len(args) == 1:
        return list[_as_sent(args[0])]  # type: ignore[misc]
    return annotation


def _inline(node: Any, defs: Mapping[str, Any], depth: int = 0) -> Any:
    """``node`` with every local ``#/$defs/...`` reference replaced by its definition."""
    if isinstance(node, list):
        return [_inline(v, defs, depth) for v in node]
    if not isinstance(node, dict):
        return node
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/") and ref[8:] in defs and depth < 32:
        rest = {k: v for k, v in node.items() if k != "$ref"}
        return _inline({**defs[ref[8:]], **rest}, defs, depth + 1)
    return {k: _inline(v, defs, depth) for k, v in node.items() if k != "$defs"}


def signature_schema(tool: Any) -> dict[str, Any]:
    """The JSON Schema of a τ² tool's arguments, from its signature.

    τ²'s own argument model (``Tool.params``, built from the signature and docstring) with
    ``Model | dict`` read as ``Model`` (its OpenAI schema accepts any object there, so a
    payment without ``payment_id`` would pass), and ``$defs`` inlined.
    """
    params: type[BaseModel] = tool.params
    fields: dict[str, Any] = {}
    for name, info in params.model_fields.items():
        kept = FieldInfo.merge_field_infos(info, annotation=_as_sent(info.annotation))
        fields[name] = (kept.annotation, kept)
    model = create_model(params.__name__, **fields)
    schema = model.model_json_schema()
    inlined: dict[str, Any] = _inline(schema, schema.get("$defs", {}))
    return inlined


def _top_level(schema: Mapping[str, Any], lax: set[str]) -> dict[str, Any]:
    """``schema`` with its records reduced to ``object`` and the ``lax`` arguments to any value.

    What τ² itself checks before the tool reads a record or a lax argument: JSON types at the
    top (``flights`` a list of objects, ``cabin`` one of its strings).
    """

    def records(node: Any) -> Any:
        if isinstance(node, list):
            return [records(v) for v in node]
        if not isinstance(node, dict):
            return node
        if node.get("type") == "object":
            return {"type": "object"}
        return {k: records(v) for k, v in node.items()}

    props = {k: ({} if k in lax else records(v)) for k, v in schema.get("properties", {}).items()}
    return {**schema, "properties": props}


def _validator(name: str, schema: Mapping[str, Any]) -> Any:
    """Top-level JSON types checked strictly, then the records and lax arguments as pydantic reads them."""
    lax = {arg for tool, arg in LAX_ARGUMENTS if tool == name}
    probe = Toolset()
    top = probe.add_schema("top", _top_level(schema, lax), coercion="strict", unknown="forbid").validate
    nested = probe.add_schema("nested", schema, coercion="lax", unknown="forbid").validate

    def validate(args: dict[str, Any]) -> dict[str, Any]:
        return nested(top(args))

    return validate


def _error_result(tool: str) -> Any:
    def recognise(result: object) -> str | None:
        if not isinstance(result, str):
            return None
        return refusal(tool, result, result.startswith("Error:"))

    return recognise


def _dry_run(tool: str) -> Precondition:
    def run(clone: Tau2Env, args: Mapping[str, Any]) -> Any:
        outcome = clone.run(tool, args)
        return refusal(tool, outcome.content, outcome.error)

    def snapshot(env: Any) -> Any:
        return env.fork() if isinstance(env, Tau2Env) else None

    def judge(state: TrackedState, args: Mapping[str, Any]) -> str | None:
        if not isinstance(state.env, Tau2Env):
            return None
        result = inner.check(state, args)
        return result if isinstance(result, str) else None

    inner = dry_run(run, snapshot=snapshot, error_result=lambda r: r if isinstance(r, str) else None, name=f"dry_run_{tool}")
    return Precondition(check=judge, name="dry_run", message="a dry run on a copy of the environment was rejected")


def toolset(domain: Domain, mode: Mode = "declared", *, env: Tau2Env | None = None) -> Toolset:
    """The monitor toolset of a τ² domain: the agent's tools and (telecom) the user's.

    Args:
        domain: ``airline``, ``retail`` or ``telecom``.
        mode: ``declared``, ``dry_run`` or ``none`` (see the module docstring).
        env: an environment to read the tools from (default: a fresh one).

    Raises:
        ValueError: unknown mode, or rules naming a tool the environment does not have.
    """
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; expected one of {list(MODES)}")
    env = env if env is not None else Tau2Env(domain)
    rules = RULES[domain]()
    tools = Toolset()
    seen: set[str] = set()
    for actor, kit in (("assistant", env.environment.tools), ("user", env.environment.user_tools)):
        if kit is None:
            continue
        for name, tool in kit.get_tools().items():
            seen.add(name)
            function = tool.openai_schema["function"]
            schema = signature_schema(tool)
            rule = rules.get(name, ToolRules())
            tool_type = env.tool_type(name)
            spec = tools.add_schema(
                name,
                schema,
                description=function.get("description", ""),
                coercion="lax",  # replaced below: strict at the top, lax inside records
                unknown="forbid",  # a keyword the function lacks raises TypeError
                requires=rule.requires if mode == "declared" else (_dry_run(name),) if mode == "dry_run" else (),
                produces=list(rule.produces),
                effects=rule.effects,
                refs=dict(rule.refs) if mode == "declared" else None,
                grounded=rule.grounded if mode == "declared" else None,
                error_result=_error_result(name),
                metadata={"domain": domain, "write": tool_type == "write", "tool_type": tool_type, "actor": actor},
            )
            tools.add(dataclasses.replace(spec, validate=_validator(name, schema)), replace=True)
    unknown = sorted(set(rules) - seen)
    if unknown:
        raise ValueError(f"τ² {domain}: rules name tools the environment does not have: {unknown}")
    return tools
