"""Argument validators: pydantic models for Python tools, JSON Schema for schema-declared tools.

A validator is ``(args) -> args``: it returns the validated (possibly normalised) arguments
or raises :class:`~prefixmon.exceptions.ArgumentError` with every problem it found, located,
so that callers (the predicate, plan verification) read structure, never message text.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

import fastjsonschema
from pydantic import BaseModel, ValidationError
from pydantic_core import SchemaValidator

from .exceptions import ArgumentError, SpecError
from .verdict import ArgumentProblem, Location

__all__ = ("MAX_PROBLEMS", "Validator", "model_validator", "schema_validator")

Validator = Callable[[dict[str, Any]], dict[str, Any]]
"""Validates and normalises a dict of arguments; raises :class:`ArgumentError`."""

MAX_PROBLEMS: Final = 20
"""Problems kept per failed validation (the rest are counted in ``ArgumentError.more``)."""


def _pydantic_problems(e: ValidationError) -> ArgumentError:
    problems = []
    for err in e.errors(include_url=False)[:MAX_PROBLEMS]:
        loc: Location = tuple(p if isinstance(p, int) else str(p) for p in err["loc"])
        kind = err["type"]
        if kind == "missing":
            problems.append(ArgumentProblem(kind="missing", location=loc, message=err["msg"]))
        elif kind == "extra_forbidden":
            problems.append(ArgumentProblem(kind="unknown", location=loc, message=err["msg"]))
        else:
            problems.append(ArgumentProblem(kind="value" if loc else "root", location=loc, message=err["msg"]))
    return ArgumentError(problems, more=max(0, e.error_count() - len(problems)))


def model_validator(model: type[BaseModel]) -> Validator:
    """A validator for a pydantic model of the arguments (every problem is reported)."""
    # The core validator directly (what model_validate calls), skipping its Python wrapper.
    core = model.__pydantic_validator__
    validate = core.validate_python if isinstance(core, SchemaValidator) else model.model_validate

    def run(args: dict[str, Any]) -> dict[str, Any]:
        try:
            return validate(args).__dict__
        except ValidationError as e:
            raise _pydantic_problems(e) from None

    return run


def _schema_problem(e: fastjsonschema.JsonSchemaValueException) -> ArgumentProblem:
    loc: Location = tuple(p if isinstance(p, int) else str(p) for p in (e.path or [])[1:])
    msg = e.message
    if msg.startswith("data."):
        msg = msg[len("data.") :]
    elif msg.startswith("data "):
        msg = "arguments " + msg[len("data ") :]
    if e.rule == "required" and isinstance(e.rule_definition, list):
        missing = next((m for m in e.rule_definition if f"{m}" in msg), None)
        if missing is not None:
            return ArgumentProblem(kind="missing", location=(*loc, str(missing)), message=msg)
    if e.rule == "additionalProperties":
        return ArgumentProblem(kind="unknown", location=loc, message=msg)
    if not loc:
        return ArgumentProblem(kind="root", location=(), message=msg)
    dotted = ".".join(str(p) for p in loc)
    if msg.startswith(dotted + " "):
        msg = msg[len(dotted) + 1 :]
    return ArgumentProblem(kind="value", location=loc, message=msg)


def schema_validator(name: str, schema: Mapping[str, Any], *, forbid_unknown: bool) -> Validator:
    """A validator for a JSON Schema of the arguments, compiled once.

    Args:
        name: the tool, for error messages.
        schema: the arguments' schema.
        forbid_unknown: reject arguments the schema does not name, unless the schema says
            ``additionalProperties`` itself.

    Raises:
        SpecError: the schema cannot be compiled.
    """
    prepared = {k: v for k, v in schema.items() if k != "$schema"}
    prepared.setdefault("type", "object")
    try:
        compiled = fastjsonschema.compile(prepared, use_default=False)
    except (fastjsonschema.JsonSchemaDefinitionException, ValueError, TypeError, KeyError, AttributeError, RecursionError) as e:
        problem = "nested too deeply" if isinstance(e, RecursionError) else f"{type(e).__name__}: {e}"
        raise SpecError(f"tool {name!r}: its JSON Schema cannot be compiled ({problem})") from e
    props = schema.get("properties")
    known = frozenset(props) if isinstance(props, Mapping) else None
    check_unknown = forbid_unknown and known is not None and "additionalProperties" not in schema

    def run(args: dict[str, Any]) -> dict[str, Any]:
        if check_unknown:
            extra = [k for k in args if k not in known]  # type: ignore[operator]
            if extra:
                raise ArgumentError(
                    [ArgumentProblem(kind="unknown", location=(k,), message="not allowed") for k in extra[:MAX_PROBLEMS]],
                    more=max(0, len(extra) - MAX_PROBLEMS),
                )
        try:
            compiled(args)
        except fastjsonschema.JsonSchemaValueException as e:
            raise ArgumentError([_schema_problem(e)]) from None
        return args

    return run
