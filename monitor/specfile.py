"""Spec files: rules for a tool layer nobody modelled, written as data (YAML or JSON).

A spec file (``"schema": "prefixmon.spec/1"``) declares, per tool, what the monitor cannot
read from a JSON Schema: reference arguments and the tools that produce them,
invalidations, grounded arguments, the objects its results show and the effects it has on
them, read/write access, error-result recognisers, preconditions as CEL expressions over
the call's arguments, the observed objects it names and constants, and probes. The format
is validated with pydantic; :func:`spec_json_schema` publishes it as a JSON Schema so
editors can complete it (``docs/spec.schema.json``). A bad file fails when it is loaded,
with the file, the line and what is wrong; never at call time.

Example::

    schema: prefixmon.spec/1
    tools:
      get_order_details:
        access: read
        produces: {order_id: order_id}
        observes: [{object: order, id: order_id}]
      cancel_pending_order:
        access: write
        args: {order_id: {ref: order_id}}
        let: {order: "order[args.order_id]"}
        requires:
          - expr: order.status == "pending"
            message: "only pending orders can be cancelled; {args.order_id} is {order.status}"
        probes: [{for: order, call: get_order_details, args: {order_id: args.order_id}}]
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator, model_validator

from .exceptions import SpecError

__all__ = (
    "SCHEMA",
    "ArgRule",
    "EffectRule",
    "ErrorRule",
    "Evidence",
    "LetRule",
    "ObserveRule",
    "ProbeRule",
    "RequireRule",
    "SpecFile",
    "ToolRules",
    "load_spec",
    "parse_spec",
    "spec_json_schema",
)

SCHEMA: Final = "prefixmon.spec/1"
"""The value of every spec file's ``schema`` field."""

_IDENT: Final = r"[A-Za-z_][A-Za-z0-9_]*"
_PATH: Final = re.compile(rf"^{_IDENT}(\.{_IDENT})*$")
"""A value path: ``args.order_id``, ``order.user_id``."""
_ARG_PATH: Final = re.compile(rf"^{_IDENT}(\[\])?(\.{_IDENT}(\[\])?)*$")
"""An argument path (``payment_methods[].payment_id``), as ``values_at`` reads it."""
_LOOKUP: Final = re.compile(rf"^\s*({_IDENT})\s*\[\s*({_IDENT}(?:\.{_IDENT})*)\s*\]\s*$")
"""``order[args.order_id]``: the observed object of a kind, by the value of a path."""
_EVIDENCE_FOR: Final = re.compile(rf"^(produces|invalidates|observes)\.{_IDENT}$")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class Evidence(_Model):
    """Why a learned rule is in the file (``prefixmon learn`` writes it; hand-written rules have none)."""

    support: int = Field(ge=0, description="Observations that agree with the rule.")
    counter_examples: int = Field(default=0, ge=0, description="Observations that contradict it.")
    first_seen: str | None = Field(default=None, description="Episode id where it was first seen.")
    last_seen: str | None = Field(default=None, description="Episode id where it was last seen.")
    examples: tuple[str, ...] = Field(default=(), description="A few supporting observations, as text.")


class ArgRule(_Model):
    """What one argument (a path into the arguments) must be."""

    ref: str | None = Field(default=None, description="Reference kind: the value must have been returned by an earlier call.")
    user: bool = Field(default=False, description="With ref: a value the user stated is accepted too.")
    grounded: bool | Literal["exact", "normalized", "derived"] = Field(
        default=False,
        description="The value must have appeared in what the agent saw: true (normalized forms count), "
        "exact, or derived (a sum, difference, product or quotient of two seen numbers counts too).",
    )
    evidence: Evidence | None = None


class ObserveRule(_Model):
    """An object that the tool's result shows, indexed by kind and id for rules to read."""

    object: str = Field(pattern=f"^{_IDENT}$", description="The object's kind, e.g. order.")
    id: str = Field(description="Where its id is: a field of the object (order_id), or a path into the call (args.user_id).")
    at: str = Field(default="", description="Where the object is in the result: '' (the whole result), 'key', 'items[]'.")

    @field_validator("id")
    @classmethod
    def _id_path(cls, value: str) -> str:
        if not _PATH.match(value):
            raise ValueError(f"{value!r} is not a field name or a path like args.user_id")
        return value

    @field_validator("at")
    @classmethod
    def _at_path(cls, value: str) -> str:
        if value and not _ARG_PATH.match(value):
            raise ValueError(f"{value!r} is not a result path like 'order' or 'orders[]'")
        return value


class LetRule(_Model):
    """A variable a tool's preconditions read: the observed object of a kind with the id at a path."""

    object: str = Field(pattern=f"^{_IDENT}$")
    id: str = Field(description="Path of the id: args.order_id, or a field of an earlier variable (order.user_id).")

    @field_validator("id")
    @classmethod
    def _id_path(cls, value: str) -> str:
        if not _PATH.match(value):
            raise ValueError(f"{value!r} is not a path like args.order_id")
        return value


class RequireRule(_Model):
    """A precondition: a CEL expression over ``args``, the tool's ``let`` variables and ``constants``."""

    expr: str = Field(min_length=1, description="CEL; true means the call may run.")
    name: str | None = Field(default=None, pattern=f"^{_IDENT}$", description="For codes and logs (default: rule_<n>).")
    message: str | None = Field(
        default=None, description="Why the call cannot run, for the model; {args.x} and {order.status} are filled in."
    )
    enabled: bool = Field(default=True, description="A suggestion stays disabled until a person enables it.")
    suggested: bool = Field(default=False, description="Written by prefixmon learn as a candidate, not a known rule.")
    evidence: Evidence | None = None


class EffectRule(_Model):
    """What an accepted call does to an observed object."""

    object: str = Field(pattern=f"^{_IDENT}$")
    id: str = Field(description="Path of the object's id (args.order_id).")
    set: dict[str, Any] = Field(default_factory=dict, description="Fields and their new values.")
    delete: bool = Field(default=False, description="The object no longer exists.")

    @field_validator("id")
    @classmethod
    def _id_path(cls, value: str) -> str:
        if not _PATH.match(value):
            raise ValueError(f"{value!r} is not a path like args.order_id")
        return value


class ProbeRule(_Model):
    """A read-only lookup the monitor makes itself before the call when a ``let`` object was not observed."""

    for_: str = Field(alias="for", pattern=f"^{_IDENT}$", description="The let variable it fills.")
    call: str = Field(description="The read tool to call.")
    args: dict[str, Any] = Field(default_factory=dict, description="Its arguments: values, or paths like args.order_id.")


class ErrorRule(_Model):
    """Recognises a result that means the environment rejected the call."""

    is_error: bool | None = Field(default=None, description="The result's isError flag (MCP) is set.")
    text: str | None = Field(default=None, description="A regular expression searched in the result's text.")
    json_path: str | None = Field(default=None, alias="json", description="A key path in a JSON result that marks an error.")
    equals: Any = Field(default=None, description="With json: the value at the path that means an error (default: present).")
    evidence: Evidence | None = None

    @model_validator(mode="after")
    def _one_test(self) -> ErrorRule:
        if sum(x is not None for x in (self.is_error, self.text, self.json_path)) != 1:
            raise ValueError("give exactly one of is_error, text or json")
        if self.text is not None:
            try:
                re.compile(self.text)
            except re.error as e:
                raise ValueError(f"text: not a regular expression ({e})") from None
        return self


class ToolRules(_Model):
    """The rules of one tool."""

    description: str | None = None
    parameters: dict[str, Any] | None = Field(
        default=None, description="JSON Schema of the arguments, to declare a tool the toolset does not have yet."
    )
    access: Literal["read", "write"] | None = Field(
        default=None, description="read: changes nothing (probes may call it); write: may change what it names."
    )
    args: dict[str, ArgRule] = Field(default_factory=dict, description="Rules per argument path.")
    produces: dict[str, str] = Field(
        default_factory=dict,
        description="{kind: where}: values under a result key become references of the kind; '.' the whole result "
        "(a text or number answer), '*' every value of a result object, '~REGEX' every match in the result's text.",
    )
    invalidates: tuple[str, ...] = Field(default=(), description="Reference kinds its reference arguments stop being.")
    observes: tuple[ObserveRule, ...] = ()
    let: dict[str, LetRule] = Field(default_factory=dict, description="Variables for requires: {name: 'kind[path]'}.")
    requires: tuple[RequireRule, ...] = ()
    effects: tuple[EffectRule, ...] = ()
    stale: tuple[str, ...] = Field(
        default=(), description="Object kinds the tool may change beyond those it names: what was seen of them stops deciding."
    )
    probes: tuple[ProbeRule, ...] = ()
    errors: tuple[ErrorRule, ...] = ()
    evidence: Evidence | None = None
    evidence_for: dict[str, Evidence] = Field(
        default_factory=dict,
        description="Evidence of learned entries that have no field of their own: 'produces.<kind>', "
        "'invalidates.<kind>', 'observes.<object>' (prefixmon learn writes it).",
    )

    @field_validator("evidence_for")
    @classmethod
    def _evidence_keys(cls, value: dict[str, Evidence]) -> dict[str, Evidence]:
        for name in value:
            if not _EVIDENCE_FOR.match(name):
                raise ValueError(f"{name!r} is not 'produces.<kind>', 'invalidates.<kind>' or 'observes.<object>'")
        return value

    @field_validator("let", mode="before")
    @classmethod
    def _let_shorthand(cls, value: Any) -> Any:
        if not isinstance(value, Mapping):
            return value
        out = {}
        for name, rule in value.items():
            if isinstance(rule, str):
                m = _LOOKUP.match(rule)
                if m is None:
                    raise ValueError(f"let {name}: {rule!r} is not 'kind[path]', e.g. order[args.order_id]")
                rule = {"object": m.group(1), "id": m.group(2)}
            out[name] = rule
        return out

    @field_validator("produces")
    @classmethod
    def _produce_keys(cls, value: dict[str, str]) -> dict[str, str]:
        for kind, key in value.items():
            if key.startswith("~"):
                try:
                    re.compile(key[1:])
                except re.error as e:
                    raise ValueError(f"produces.{kind}: {key[1:]!r} is not a regular expression ({e})") from None
            elif not key:
                raise ValueError(f"produces.{kind}: give a result key, '.', '*' or '~REGEX'")
        return value

    @field_validator("args")
    @classmethod
    def _arg_paths(cls, value: dict[str, ArgRule]) -> dict[str, ArgRule]:
        for path in value:
            if not _ARG_PATH.match(path):
                raise ValueError(f"{path!r} is not an argument path like order_id or items[].item_id")
        return value


class Defaults(_Model):
    """Rules every tool of the file gets unless it says otherwise."""

    access: Literal["read", "write"] | None = None
    errors: tuple[ErrorRule, ...] = ()


class SpecFile(_Model):
    """A spec file: rules for tools, constants for expressions, probe limits."""

    schema_: Literal["prefixmon.spec/1"] = Field(alias="schema", description="Format version.")
    constants: dict[str, Any] = Field(default_factory=dict, description="Named values expressions read as constants.<name>.")
    defaults: Defaults = Field(default_factory=Defaults)
    tools: dict[str, ToolRules] = Field(default_factory=dict)
    probe_budget: int = Field(default=8, ge=0, description="Probes the monitor makes at most per episode.")
    probe_timeout: float = Field(default=5.0, gt=0, description="Seconds a probe may take before it is abandoned.")

    _source: str = PrivateAttr(default="<spec>")
    _lines: dict[tuple[str | int, ...], int] = PrivateAttr(default_factory=dict)

    @property
    def source(self) -> str:
        """The file it was read from (``<spec>`` for a mapping)."""
        return self._source

    def where(self, *loc: str | int) -> str:
        """``FILE:LINE`` of a location in the file (the nearest enclosing one that has a line)."""
        line = next((self._lines[loc[:n]] for n in range(len(loc), -1, -1) if loc[:n] in self._lines), None)
        return f"{self._source}:{line}" if line is not None else self._source


def spec_json_schema() -> dict[str, Any]:
    """The published JSON Schema of the format (what editors use to complete spec files)."""
    schema = SpecFile.model_json_schema(by_alias=True)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = "https://prefixmon.dev/schemas/spec-1.json"
    schema["title"] = "prefixmon spec file (prefixmon.spec/1)"
    return schema


def load_spec(path: str | os.PathLike[str]) -> SpecFile:
    """Read a spec file (``.yaml``, ``.yml`` or ``.json``).

    Raises:
        SpecError: the file cannot be read or parsed, or does not fit the format; the message
            is ``FILE:LINE: what is wrong``.
    """
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise SpecError(f"{file}: not UTF-8 text (byte {e.start})") from None
    except OSError as e:
        raise SpecError(f"{file}: cannot read it ({e.strerror or e})") from None
    return parse_spec(text, source=str(file), json_only=file.suffix.lower() == ".json")


def parse_spec(data: str | Mapping[str, Any], *, source: str = "<spec>", json_only: bool = False) -> SpecFile:
    """A spec from YAML or JSON text, or from a mapping already loaded.

    Raises:
        SpecError: as for :func:`load_spec` (a mapping has no line numbers).
    """
    lines: dict[tuple[str | int, ...], int] = {}
    if isinstance(data, str):
        loaded = _load_text(data, source, json_only)
        lines = _lines(data)
    else:
        loaded = data
    if not isinstance(loaded, Mapping):
        raise SpecError(f"{source}:1: a spec file is an object with 'schema' and 'tools', got {type(loaded).__name__}")
    try:
        spec = SpecFile.model_validate(loaded)
    except ValidationError as e:
        raise SpecError(_describe(e, source, lines)) from None
    spec._source = source
    spec._lines = lines
    return spec


def _load_text(text: str, source: str, json_only: bool) -> Any:
    if json_only:
        try:
            return json.loads(text)
        except json.JSONDecodeError as e:
            raise SpecError(f"{source}:{e.lineno}: not JSON ({e.msg}, column {e.colno})") from None
        except RecursionError:
            raise SpecError(f"{source}:1: nested too deeply") from None
    try:
        return yaml.safe_load(text)
    except yaml.MarkedYAMLError as e:
        line = e.problem_mark.line + 1 if e.problem_mark is not None else 1
        raise SpecError(f"{source}:{line}: not YAML ({e.problem or e})") from None
    except yaml.YAMLError as e:
        raise SpecError(f"{source}:1: not YAML ({e})") from None
    except RecursionError:
        raise SpecError(f"{source}:1: nested too deeply") from None


def _lines(text: str) -> dict[tuple[str | int, ...], int]:
    """``{location: 1-based line}`` of every mapping key and sequence item (YAML's node marks; JSON is YAML)."""
    out: dict[tuple[str | int, ...], int] = {}
    try:
        root = yaml.compose(text)
    except (yaml.YAMLError, RecursionError):
        return out

    def walk(node: yaml.Node, loc: tuple[str | int, ...], depth: int) -> None:
        if depth > 64:
            return
        out.setdefault(loc, node.start_mark.line + 1)
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                sub = (*loc, str(key.value))
                out[sub] = key.start_mark.line + 1
                walk(value, sub, depth + 1)
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                walk(item, (*loc, i), depth + 1)

    if root is not None:
        walk(root, (), 0)
    return out


def _describe(error: ValidationError, source: str, lines: Mapping[tuple[str | int, ...], int]) -> str:
    """``FILE:LINE: where: what`` for the first problem (and how many more)."""
    problems = error.errors(include_url=False)
    first = problems[0]
    loc = tuple(p for p in first["loc"] if not (isinstance(p, str) and p.startswith("function-")))
    line = next((lines[loc[:n]] for n in range(len(loc), -1, -1) if loc[:n] in lines), None)
    where = ".".join(str(p) for p in loc) or "the file"
    message = str(first["msg"]).removeprefix("Value error, ")
    if first["type"] == "extra_forbidden":
        message = f"unknown field {loc[-1]!r}" if loc else "unknown field"
        where = ".".join(str(p) for p in loc[:-1]) or "the file"
    elif first["type"] == "missing":
        message = f"missing required field {loc[-1]!r}"
        where = ".".join(str(p) for p in loc[:-1]) or "the file"
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    return f"{source}:{line if line is not None else 1}: {where}: {message}{more}"
