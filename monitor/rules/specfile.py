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
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator, model_validator

from .._internal.json_depth import MAX_JSON_DEPTH, deep_line
from ..exceptions import SpecError
from .provenance import Sources

__all__ = (
    "SCHEMA",
    "ArgRule",
    "EffectRule",
    "ErrorRule",
    "Evidence",
    "LetRule",
    "ObserveRule",
    "ProbeRule",
    "ProvenanceRules",
    "RequireRule",
    "SpecFile",
    "ToolRules",
    "TrustRule",
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
_LOOKUP: Final = re.compile(rf"^\s*({_IDENT})\s*\[\s*({_IDENT}(?:\.{_IDENT})*(?:\s*,\s*{_IDENT}(?:\.{_IDENT})*)*)\s*\]\s*$")
"""``order[args.order_id]``: the observed object of a kind, by the value of a path (or of several,
for a composite id: ``flight[args.flight_number, args.date]``)."""
_AT_PATH: Final = re.compile(rf"^(\[\]|{_IDENT}(\[\])?)(\.({_IDENT}(\[\])?|\*))*$")
"""Where objects are in a result: ``orders[]``, ``variants.*`` (each value of a mapping)."""
_EVIDENCE_FOR: Final = re.compile(rf"^(produces|invalidates|observes)\.{_IDENT}$")
_CLOCK: Final = re.compile(r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d{1,6})?)?(Z|[+-]\d{2}:\d{2})?$")
"""``constants.now``: the policy's current time, an ISO date-time (what ``time()`` reads)."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class Evidence(_Model):
    """Why a learned rule is in the file (``prefixmon learn`` writes it; hand-written rules have none)."""

    support: int = Field(ge=0, description="Observations that agree with the rule.")
    counter_examples: int = Field(default=0, ge=0, description="Observations that contradict it.")
    first_seen: str | None = Field(default=None, description="Episode id where it was first seen.")
    last_seen: str | None = Field(default=None, description="Episode id where it was last seen.")
    examples: tuple[str, ...] = Field(default=(), description="A few supporting observations, as text.")
    confidence: float | None = Field(
        default=None,
        ge=0,
        le=1,
        description="A learned precondition: the estimated chance that a call it refuses is one the environment rejects.",
    )
    predicts: tuple[str, ...] = Field(
        default=(), description="A learned precondition: the error texts (ids and numbers masked) it predicts."
    )


class ArgRule(_Model):
    """What one argument (a path into the arguments) must be."""

    ref: str | None = Field(default=None, description="Reference kind: the value must have been returned by an earlier call.")
    user: bool = Field(default=False, description="With ref: a value the user stated is accepted too.")
    grounded: bool | Literal["exact", "normalized", "derived"] = Field(
        default=False,
        description="The value must have appeared in what the agent saw: true (normalized forms count), "
        "exact, or derived (a sum, difference, product or quotient of two seen numbers counts too).",
    )
    block: bool = Field(
        default=False,
        description="With grounded: a value that was not seen blocks the call under a blocking policy "
        "(by default an information finding is reported and the call runs).",
    )
    from_: Sources | None = Field(
        default=None,
        alias="from",
        description="Provenance: the sources the value may come from: user, system, trusted, any, tool:NAME[.PATH] "
        "(a value of a tool's result), text:NAME[.PATH] (free text a tool returned); [] for no rule (not even the "
        "file's provenance.writes).",
    )
    not_from: Sources = Field(
        default=(),
        description="Provenance: sources the value may not carry unless the user said it too (a profile's passport "
        "number in an email body): tool:NAME[.PATH], text:NAME[.PATH], system.",
    )
    pattern: str | None = Field(
        default=None,
        description="A string value must match this regular expression in full (the domain's id format, "
        "e.g. '[a-z]+_[a-z]+_[0-9]+'); otherwise the call fails the schema check. Other types are the schema's.",
    )

    @field_validator("pattern")
    @classmethod
    def _pattern_compiles(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                re.compile(value)
            except re.error as e:
                raise ValueError(f"pattern {value!r} is not a regular expression: {e}") from None
        return value

    @model_validator(mode="after")
    def _block_is_for_grounded(self) -> ArgRule:
        if self.block and not self.grounded:
            raise ValueError("block applies to a grounded argument: add grounded: true")
        return self

    evidence: Evidence | None = None


class TrustRule(_Model):
    """Which tool sources are trusted (by default a value of a result is, and free text is not)."""

    trusted: tuple[str, ...] = Field(default=(), description="Tools or tool.path result fields trusted, free text included.")
    untrusted: tuple[str, ...] = Field(default=(), description="Tools or tool.path result fields not trusted, values included.")


class ProvenanceRules(_Model):
    """Provenance rules for every tool of the file (see docs/provenance.md)."""

    writes: Sources | None = Field(
        default=None,
        min_length=1,
        description="The sources every argument of a write tool (access: write) may come from, unless the argument "
        "says otherwise (args.<name>.from), e.g. [user, trusted].",
    )
    trust: TrustRule = Field(default_factory=TrustRule)


class OrderRule(_Model):
    """Tools an ``after`` / ``before`` rule names, optionally on the same argument value."""

    tools: tuple[str, ...] = Field(min_length=1, description="Tool names (one of them is enough).")
    same: str | dict[str, str] | None = Field(
        default=None,
        description="On the same value: an argument both tools have, or {this tool's argument: the other tool's "
        "argument}; values match as ids do (case, '#' and decorations aside).",
    )

    @model_validator(mode="before")
    @classmethod
    def _list_shorthand(cls, value: Any) -> Any:
        if isinstance(value, str):
            return {"tools": [value]}
        if isinstance(value, (list, tuple)):
            return {"tools": value}
        return value


class ObserveRule(_Model):
    """An object that the tool's result shows, indexed by kind and id for rules to read."""

    object: str = Field(pattern=f"^{_IDENT}$", description="The object's kind, e.g. order.")
    id: str | tuple[str, ...] = Field(
        description="Where its id is: a field of the object (order_id), or a path into the call (args.user_id); "
        "a list of them for a composite id ([flight_number, args.date]: a flight on a date)."
    )
    at: str = Field(
        default="",
        description="Where the object is in the result: '' (the whole result, or each element of a list, nested lists "
        "flattened), 'key', 'items[]', 'variants.*' (each value of a mapping).",
    )

    fields: dict[str, str] = Field(
        default_factory=dict,
        description="Fields to add from the call, {name: args.path}: a variant listed under a product gets "
        "{product_id: args.product_id}.",
    )

    @field_validator("id")
    @classmethod
    def _id_path(cls, value: str | tuple[str, ...]) -> str | tuple[str, ...]:
        return _id_paths(value, "a field name or a path like args.user_id")

    @field_validator("fields")
    @classmethod
    def _field_paths(cls, value: dict[str, str]) -> dict[str, str]:
        for name, path in value.items():
            if not re.match(f"^{_IDENT}$", name) or not (_PATH.match(path) and path.startswith("args.")):
                raise ValueError(f"fields.{name}: {path!r} is not a path into the call like args.product_id")
        return value

    @field_validator("at")
    @classmethod
    def _at_path(cls, value: str) -> str:
        if value and not _AT_PATH.match(value):
            raise ValueError(f"{value!r} is not a result path like 'order', 'orders[]' or 'variants.*'")
        return value


def _id_paths(value: str | tuple[str, ...], what: str) -> str | tuple[str, ...]:
    """An id path, or the non-empty list of paths of a composite id."""
    paths = (value,) if isinstance(value, str) else value
    if not paths:
        raise ValueError("a composite id lists at least one path")
    for path in paths:
        if not _PATH.match(path):
            raise ValueError(f"{path!r} is not {what}")
    return value


class LetRule(_Model):
    """A variable a tool's preconditions read: the observed object of a kind with the id at a path."""

    object: str = Field(pattern=f"^{_IDENT}$")
    id: str | tuple[str, ...] = Field(
        description="Path of the id: args.order_id, or a field of an earlier variable (order.user_id); "
        "a list of paths for a composite id."
    )

    @field_validator("id")
    @classmethod
    def _id_path(cls, value: str | tuple[str, ...]) -> str | tuple[str, ...]:
        return _id_paths(value, "a path like args.order_id")

    @property
    def paths(self) -> tuple[str, ...]:
        """The id's paths (one, or the parts of a composite id)."""
        return (self.id,) if isinstance(self.id, str) else self.id


class RequireRule(_Model):
    """A precondition: a CEL expression over ``args``, the tool's ``let`` variables and ``constants``."""

    expr: str = Field(min_length=1, description="CEL; true means the call may run.")
    name: str | None = Field(default=None, pattern=f"^{_IDENT}$", description="For codes and logs (default: rule_<n>).")
    message: str | None = Field(
        default=None, description="Why the call cannot run, for the model; {args.x} and {order.status} are filled in."
    )
    last_seen: bool = Field(
        default=False,
        description="Decide from objects as last seen even after a write made them stale (stale:), for rules "
        "such writes cannot make true: a payment method's kind, a balance they only spend. Objects a tool "
        "forgets (forgets:) or deleted still leave the rule undetermined.",
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
    forgets: tuple[str, ...] = Field(
        default=(),
        description="Object kinds the tool may change in any direction (a refund raises a balance): what was seen of "
        "them stops deciding even for last_seen rules.",
    )
    probes: tuple[ProbeRule, ...] = ()
    errors: tuple[ErrorRule, ...] = ()
    after: OrderRule | None = Field(
        default=None,
        description="The tool needs one of these to have succeeded earlier in the episode: [get_order_details], "
        "or {tools: [get_order_details], same: order_id} for the same order.",
    )
    before: OrderRule | None = Field(default=None, description="These tools need this one earlier (an after rule on each).")
    at_most: int | None = Field(default=None, ge=0, description="The tool succeeds at most this many times per episode.")
    not_after: tuple[str, ...] = Field(default=(), description="The tool may not run once one of these has succeeded.")
    commutes: tuple[str, ...] = Field(
        default=(),
        description="Tools whose calls in the same batch may change the same object as this one without a conflict "
        "(the order they run in does not matter); the tool itself, for two of its own calls.",
    )
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
                parts = [p.strip() for p in m.group(2).split(",")]
                rule = {"object": m.group(1), "id": parts[0] if len(parts) == 1 else parts}
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
    constants: dict[str, Any] = Field(
        default_factory=dict,
        description="Named values expressions read as constants.<name>. 'now' is the policy's clock (an ISO date-time, "
        "e.g. 2024-05-15T15:00:00): expressions compare dates with it through time(), e.g. time(f.date) < time(constants.now).",
    )
    given: tuple[str, ...] = Field(
        default=(),
        description="Reference kinds the application binds when an episode starts (monitor.episode(bindings=...)): "
        "a ref of one of these kinds needs no tool that produces it.",
    )
    defaults: Defaults = Field(default_factory=Defaults)
    provenance: ProvenanceRules = Field(default_factory=ProvenanceRules)
    tools: dict[str, ToolRules] = Field(default_factory=dict)
    probe_budget: int = Field(default=8, ge=0, description="Probes the monitor makes at most per episode.")

    @field_validator("constants")
    @classmethod
    def _clock(cls, value: dict[str, Any]) -> dict[str, Any]:
        now = value.get("now")
        if now is not None and not (isinstance(now, str) and _CLOCK.match(now)):
            raise ValueError(
                f"now: {now!r} is not an ISO date-time like '2024-05-15T15:00:00' (the policy's current time; quote it in YAML)"
            )
        return value

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
        loaded, lines = _load_text(data, source, json_only)
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


_MAX_REPEATED: Final = 100_000
"""Values that aliases may repeat in one YAML file, in all: a few kilobytes of nested anchors
(a "billion laughs") would otherwise expand to gigabytes in whatever walks or copies the spec."""

_MERGE_TAG: Final = "tag:yaml.org,2002:merge"


class _BadNode(Exception):
    """A problem in a file's text at a 1-based line (``None``: not known yet), before the file's name is added."""

    def __init__(self, line: int | None, message: str) -> None:
        super().__init__(message)
        self.line = line
        self.message = message


def _too_long(digits: str) -> str:
    """Why an integer Python refuses to convert (``sys.get_int_max_str_digits``) is rejected."""
    count = sum(c.isdigit() for c in digits)
    return f"an integer of {count} digits is too long (at most {sys.get_int_max_str_digits()})"


_MAX_YAML_DEPTH: Final = 200
"""Deepest nesting of a YAML spec, aliases expanded. PyYAML composes a level in three frames of recursion, so YAML
nested in blocks (which the bracket count of :func:`._json_depth.deep_line` does not see) or in
brackets up to JSON's bound would reach the interpreter's limit: it is refused at its line first."""


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing what it would accept silently or fail on without a line.

    Aliases may repeat at most :data:`_MAX_REPEATED` values and not contain themselves (counted
    while composing, so a bomb stops at the alias that sets it off); a key given twice in a
    mapping, an integer too long to convert and nesting past :data:`_MAX_YAML_DEPTH` are errors
    at their line.
    """

    def __init__(self, text: str, *, skim_deep: bool = False) -> None:
        super().__init__(text)
        self._measures: dict[yaml.Node, tuple[int, int]] = {}
        """``(values, nesting)`` under each node composed so far, with aliases expanded: how many
        values it holds and how many collections deep it goes."""
        self._repeated = 0
        self._checked: set[yaml.Node] = set()
        self._depth = 0
        """Collections open around the node being composed."""
        self._skim_deep = skim_deep
        """Read a collection past the bound without composing it (a null stands for it) instead of
        refusing it: for the location lines of JSON, which json itself reads deeper."""

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        """The next node; an alias adds the size of what it repeats to the file's total, and its depth to where it is."""
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()  # type: ignore[no-untyped-call]  # untyped in types-PyYAML
            anchor = getattr(event, "anchor", None)
            node = self.anchors.get(anchor) if isinstance(anchor, str) else None
            if node is not None:
                line = event.start_mark.line + 1
                measures = self._measures.get(node)
                if measures is None:  # the anchor's node is still being composed: the alias is inside it
                    raise _BadNode(line, f"alias *{anchor} refers to a value that contains it")
                size, height = measures
                self._repeated += size
                if self._repeated > _MAX_REPEATED:
                    raise _BadNode(line, f"aliases repeat more than {_MAX_REPEATED} values (at *{anchor})")
                if self._depth + height > _MAX_YAML_DEPTH:
                    raise _BadNode(line, f"nested too deeply (more than {_MAX_YAML_DEPTH} levels, through alias *{anchor})")
            return super().compose_node(parent, index)
        nests = self.check_event(yaml.SequenceStartEvent, yaml.MappingStartEvent)
        self._depth += nests
        try:
            if nests and self._depth > _MAX_YAML_DEPTH:
                if not self._skim_deep:
                    line = self.peek_event().start_mark.line + 1  # type: ignore[no-untyped-call]
                    raise _BadNode(line, f"nested too deeply (more than {_MAX_YAML_DEPTH} levels)")
                node = self._skimmed()
            else:
                node = super().compose_node(parent, index)
        finally:
            self._depth -= nests
        if node is None:
            return None
        if isinstance(node, yaml.MappingNode):
            children = [child for pair in node.value for child in pair]
        else:
            children = node.value if isinstance(node, yaml.SequenceNode) else []
        size = height = 0
        for child in children:
            child_size, child_height = self._measures[child]
            size += child_size
            height = max(height, child_height)
        self._measures[node] = (1 + size, nests + height)
        return node

    def _skimmed(self) -> yaml.Node:
        """Read the collection that starts here to its end without composing it (its events in a
        loop, not recursion); a null scalar stands for it."""
        start = end = self.get_event()  # type: ignore[no-untyped-call]
        open_ = 1
        while open_:
            end = self.get_event()  # type: ignore[no-untyped-call]
            if isinstance(end, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
                open_ += 1
            elif isinstance(end, (yaml.SequenceEndEvent, yaml.MappingEndEvent)):
                open_ -= 1
        return yaml.ScalarNode("tag:yaml.org,2002:null", "", start.start_mark, end.end_mark)

    def flatten_mapping(self, node: yaml.MappingNode) -> None:
        """Merge ``<<`` keys, after refusing a key the mapping itself gives twice (a merged one may be overridden)."""
        if node not in self._checked:
            self._checked.add(node)
            seen: set[Any] = set()
            for key_node, _ in node.value:
                if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == _MERGE_TAG:
                    continue
                key = self.construct_object(key_node)
                if key in seen:
                    raise _BadNode(key_node.start_mark.line + 1, f"duplicate key {key!r}")
                seen.add(key)
        super().flatten_mapping(node)

    def construct_checked_int(self, node: yaml.Node) -> int:
        """An integer scalar, or an error at its line when it has too many digits to convert."""
        try:
            value: int = self.construct_yaml_int(node)  # type: ignore[arg-type]  # int scalars are ScalarNodes
        except ValueError:
            raise _BadNode(node.start_mark.line + 1, _too_long(str(node.value))) from None
        return value


_Loader.add_constructor("tag:yaml.org,2002:int", _Loader.construct_checked_int)


def _decode_json(text: str, source: str) -> Any:
    """``json.loads``, but a key given twice in an object or an integer too long to convert is an error.

    Raises:
        SpecError: ``FILE:LINE: duplicate key 'name'`` (``FILE:`` alone when the line cannot be
            found) or ``FILE:LINE: an integer of N digits is too long``. Text that is not JSON
            raises what ``json.loads`` raises.
    """

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in items:
            if key in out:
                raise _BadNode(_json_duplicate_line(text, key), f"duplicate key {key!r}")
            out[key] = value
        return out

    def integer(digits: str) -> int:
        try:
            return int(digits)
        except ValueError:
            at = text.find(digits)
            raise _BadNode(text.count("\n", 0, at) + 1 if at >= 0 else None, _too_long(digits)) from None

    try:
        return json.loads(text, object_pairs_hook=pairs, parse_int=integer)
    except _BadNode as e:
        raise SpecError(f"{source}:{e.line}: {e.message}" if e.line is not None else f"{source}: {e.message}") from None


def _json_duplicate_line(text: str, key: str) -> int | None:
    """The line of the second ``key`` in the first object (in the order JSON completes them) that has it twice."""
    try:
        root = _Loader(text, skim_deep=True).get_single_node()  # JSON is YAML, nearly always
    except (yaml.YAMLError, _BadNode, RecursionError):
        return None

    def find(node: yaml.Node, depth: int) -> int | None:
        if depth > 256:
            return None
        if isinstance(node, yaml.MappingNode):
            for _, value in node.value:
                if (line := find(value, depth + 1)) is not None:
                    return line
            keys = [k for k, _ in node.value if isinstance(k, yaml.ScalarNode) and k.value == key]
            return keys[1].start_mark.line + 1 if len(keys) > 1 else None
        if isinstance(node, yaml.SequenceNode):
            return next((line for item in node.value if (line := find(item, depth + 1)) is not None), None)
        return None

    return find(root, 0) if root is not None else None


def _load_text(text: str, source: str, json_only: bool) -> tuple[Any, dict[tuple[str | int, ...], int]]:
    """The loaded value of a spec's text and the lines of its locations (see :func:`_lines`)."""
    deep = deep_line(text) if isinstance(text, str) else None
    if deep is not None:  # json and PyYAML would recurse near the interpreter's limit
        raise SpecError(f"{source}:{deep}: nested too deeply (more than {MAX_JSON_DEPTH} levels)")
    if json_only:
        try:
            loaded = _decode_json(text, source)
        except json.JSONDecodeError as e:
            raise SpecError(f"{source}:{e.lineno}: not JSON ({e.msg}, column {e.colno})") from None
        except RecursionError:
            raise SpecError(f"{source}:1: nested too deeply") from None
        try:
            root = _Loader(text, skim_deep=True).get_single_node()
        except (yaml.YAMLError, _BadNode, RecursionError):
            return loaded, {}
        return loaded, _lines(root)
    try:
        loader = _Loader(text)
    except yaml.reader.ReaderError as e:  # a character YAML cannot hold (NUL, most control characters)
        line = text.count("\n", 0, e.position) + 1 if isinstance(text, str) else 1
        raise SpecError(f"{source}:{line}: not YAML (unacceptable character #x{e.character:04x})") from None
    try:
        root = loader.get_single_node()
        loaded = loader.construct_document(root) if root is not None else None
        return loaded, _lines(root)
    except _BadNode as e:
        raise SpecError(f"{source}:{e.line}: {e.message}") from None
    except yaml.MarkedYAMLError as e:
        line = e.problem_mark.line + 1 if e.problem_mark is not None else 1
        raise SpecError(f"{source}:{line}: not YAML ({e.problem or e})") from None
    except yaml.YAMLError as e:
        raise SpecError(f"{source}:1: not YAML ({e})") from None
    except RecursionError:
        raise SpecError(f"{source}:1: nested too deeply") from None
    finally:
        loader.dispose()


def _lines(root: yaml.Node | None) -> dict[tuple[str | int, ...], int]:
    """``{location: 1-based line}`` of every mapping key and sequence item (YAML's node marks; JSON is YAML).

    Aliased nodes are walked at every reference, so locations inside them get their anchor's
    lines; the loader has bounded how much aliases repeat (:data:`_MAX_REPEATED`).
    """
    out: dict[tuple[str | int, ...], int] = {}

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
