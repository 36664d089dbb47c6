"""The plan model: steps, placeholders for what earlier steps will return, and parsing.

A plan is an ordered list of steps ``{"tool": ..., "args": {...}, "id": ...}``. An argument
is a literal or a reference to what an earlier step's result will hold,
``{"$ref": "step2.person_id"}`` (a step without an id is ``step1``, ``step2``, ...).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, NoReturn

from .._internal.json_depth import MAX_JSON_DEPTH, deeper_than
from ..exceptions import PlanError
from ..predicate import quote
from ..verdict import ArgumentProblem, Location

__all__ = (
    "LISTED",
    "Plan",
    "PlanLike",
    "PlanRef",
    "PlanStep",
    "SymbolicValueError",
    "listed",
    "loc_text",
    "parse_plan",
    "ref",
    "to_data",
)

_ID = re.compile(r"[A-Za-z0-9_-]+")
_INDEX = re.compile(r"\[(\d+)\]")
_STEP_FIELDS: Final = frozenset({"tool", "args", "arguments", "id", "note"})
LISTED: Final = 10
"""Step ids or labels a reason or deviation names at most (the rest are counted)."""


# -- symbolic values -----------------------------------------------------------------------
class SymbolicValueError(TypeError):
    """A placeholder was used as a concrete value (its value is known only after its step runs)."""


@dataclass(frozen=True, slots=True)
class PlanRef:
    """What an earlier step's result will hold: ``{"$ref": "step2.person_id"}``.

    In verification it stands in for the value: it can be compared for identity, indexed
    (``ref["key"]`` is a deeper reference) and quoted, but any use that needs the concrete
    value (truth, ordering, arithmetic, iteration, length) raises :class:`SymbolicValueError`.
    """

    step: str
    """Id of the step whose result holds the value."""
    path: tuple[str, ...] = ()
    """Keys into the result; the last one names a produced key or kind."""
    text: str = field(init=False, compare=False, repr=False)
    """``step2.person_id``."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "text", ".".join((self.step, *self.path)))

    def __hash__(self) -> int:
        return hash(self.text)

    @classmethod
    def parse(cls, text: str) -> PlanRef:
        """Parse ``"step2.person_id"`` (also ``"step2.contacts[0].person_id"``)."""
        if not isinstance(text, str):
            raise PlanError(f"a $ref must be a string like 'step2.person_id', got {type(text).__name__}")
        parts = _INDEX.sub(r".\1", text.strip()).split(".")
        if not parts[0] or not _ID.fullmatch(parts[0]):
            raise PlanError(f"$ref {text!r}: it must start with a step id (letters, digits, '_' or '-'), like 'step2.person_id'")
        if any(not p or p != p.strip() for p in parts[1:]):
            raise PlanError(f"$ref {text!r}: empty or padded field name; write it like 'step2.person_id'")
        return cls(parts[0], tuple(parts[1:]))

    def __getitem__(self, key: object) -> PlanRef:
        return PlanRef(self.step, (*self.path, str(key)))

    def get(self, key: object, default: object = None) -> PlanRef:
        """A deeper reference (mirrors ``dict.get`` for effects that read a result)."""
        return self[key]

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return f'{{"$ref": "{self.text}"}}'

    def to_data(self) -> dict[str, str]:
        """The JSON form, ``{"$ref": "step2.person_id"}``."""
        return {"$ref": self.text}

    def _concrete(self, *_: object) -> NoReturn:
        raise SymbolicValueError(f"{self} is known only after step {self.step!r} runs")

    __bool__ = __iter__ = __len__ = __contains__ = __lt__ = __le__ = __gt__ = __ge__ = _concrete
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = __mod__ = _concrete
    __int__ = __float__ = __index__ = __neg__ = __abs__ = _concrete


def ref(text: str) -> PlanRef:
    """``ref("step2.person_id")``: a reference for plans built in Python."""
    return PlanRef.parse(text)


# -- plans ---------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True, kw_only=True)
class PlanStep:
    """One planned tool call."""

    index: int
    """1-based position in the plan."""
    id: str
    """The step's id (``step<index>`` unless the plan named it)."""
    tool: str
    args: Mapping[str, Any]
    """Literal arguments, with :class:`PlanRef` where the plan had ``{"$ref": ...}``."""
    note: str = ""
    """The planner's own comment, if any."""
    refs: tuple[tuple[Location, PlanRef], ...] = ()
    """Every reference in the arguments with its location, found when the plan was parsed."""
    symbolic: Mapping[str, tuple[PlanRef, ...]] = field(default_factory=dict)
    """Top-level arguments that hold references, and the references each holds."""
    output: PlanRef = field(init=False)
    """The step's whole result as a reference (what its effects see in verification)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "output", PlanRef(self.id))

    @property
    def label(self) -> str:
        """``step2 (remove_contact)``."""
        return f"{self.id} ({self.tool})"

    def to_data(self) -> dict[str, Any]:
        """The JSON form of the step."""
        data: dict[str, Any] = {"id": self.id, "tool": self.tool, "args": to_data(self.args)}
        if self.note:
            data["note"] = self.note
        return data


@dataclass(frozen=True, slots=True, kw_only=True)
class Plan:
    """An ordered list of planned tool calls. Build it with :func:`parse_plan`."""

    steps: tuple[PlanStep, ...]

    def __len__(self) -> int:
        return len(self.steps)

    def __iter__(self) -> Iterator[PlanStep]:
        return iter(self.steps)

    @property
    def tools(self) -> frozenset[str]:
        """The tools the plan's steps call: the allow list of an episode scoped to it
        (``monitor.episode(exposed=plan.tools)``), so an injected instruction cannot reach another tool."""
        return frozenset(s.tool for s in self.steps)

    def step(self, step_id: str) -> PlanStep | None:
        """The step with that id, or ``None``."""
        return next((s for s in self.steps if s.id == step_id), None)

    def to_data(self) -> list[dict[str, Any]]:
        """The JSON form: a list of steps with ``{"$ref": ...}`` references."""
        return [s.to_data() for s in self.steps]

    def to_json(self, **kwargs: Any) -> str:
        """The plan as JSON text (``kwargs`` go to ``json.dumps``)."""
        return json.dumps(self.to_data(), **kwargs)


PlanLike = Plan | str | bytes | Sequence[Any] | Mapping[str, Any]
"""What :func:`parse_plan` accepts: a plan, JSON text, a list of steps, or ``{"steps": [...]}``."""


def to_data(value: Any) -> Any:
    if isinstance(value, PlanRef):
        return value.to_data()
    if isinstance(value, Mapping):
        return {k: to_data(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_data(v) for v in value]
    return value


def parse_plan(plan: PlanLike) -> Plan:
    """Parse a plan from JSON text or Python objects.

    Accepts a list of steps, an object ``{"steps": [...]}``, their JSON text (a Markdown code
    fence around it is tolerated), or a :class:`Plan`. Each step is an object with ``tool``
    (a string), ``args`` (an object, or JSON text of one; ``arguments`` is accepted too),
    optional ``id`` and ``note``. Whether the tools exist and the arguments fit is checked by
    :func:`verify_plan`, not here.

    Raises:
        PlanError: the plan is malformed; the message names the step and the field.
    """
    if isinstance(plan, Plan):
        return plan
    data: Any = plan
    if isinstance(data, (str, bytes)):
        data = _load_json(data)
    if isinstance(data, Mapping):
        extra = sorted(str(k) for k in data if k not in ("steps", "goal"))
        if "steps" not in data:
            raise PlanError("the plan must be a list of steps or an object with a 'steps' list")
        if extra:
            raise PlanError(f"the plan object has unknown field(s) {', '.join(map(repr, extra))}; expected 'steps'")
        data = data["steps"]
    if isinstance(data, (str, bytes)) or not isinstance(data, Sequence):
        raise PlanError(f"the plan's steps must be a list, got {type(data).__name__}")
    steps: list[PlanStep] = []
    owners: dict[str, int] = {}
    for i, raw in enumerate(data, 1):
        step = _parse_step(i, raw)
        if step.id in owners:
            raise PlanError(f"plan step {i} ({step.tool}): field 'id': {step.id!r} is already the id of step {owners[step.id]}")
        owners[step.id] = i
        steps.append(step)
    return Plan(steps=tuple(steps))


def _load_json(text: str | bytes) -> Any:
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as e:
            raise PlanError(f"the plan is not valid UTF-8 (byte {e.start})") from None
    stripped = text.strip()
    if stripped.startswith("```"):
        stripped = stripped.split("\n", 1)[1] if "\n" in stripped else ""
        stripped = stripped.rsplit("```", 1)[0]
    if deeper_than(stripped, MAX_JSON_DEPTH):  # json would recurse near the interpreter's limit
        raise PlanError(f"the plan is nested too deeply to parse (more than {MAX_JSON_DEPTH} levels)")
    try:
        return json.loads(stripped)
    except json.JSONDecodeError as e:
        raise PlanError(f"the plan is not valid JSON: {e.msg} at line {e.lineno} column {e.colno}") from None
    except RecursionError:
        raise PlanError("the plan is nested too deeply to parse") from None


def _parse_step(index: int, raw: Any) -> PlanStep:
    where = f"plan step {index}"
    if isinstance(raw, PlanStep):
        raw = {"id": raw.id, "tool": raw.tool, "args": raw.args, "note": raw.note}
    if not isinstance(raw, Mapping):
        raise PlanError(f"{where}: a step must be an object with 'tool' and 'args', got {type(raw).__name__}")
    tool = raw.get("tool")
    if not isinstance(tool, str) or not tool.strip():
        got = "it is missing" if tool is None else f"got {type(tool).__name__} {quote(tool)}"
        raise PlanError(f"{where}: field 'tool' must be a tool name; {got}")
    where = f"plan step {index} ({tool})"
    unknown = sorted(str(k) for k in raw if k not in _STEP_FIELDS)
    if unknown:
        raise PlanError(
            f"{where}: unknown field(s) {', '.join(map(repr, unknown))}; "
            "a step has 'tool', 'args', and optionally 'id' and 'note'"
        )
    if "args" in raw and "arguments" in raw:
        raise PlanError(f"{where}: give 'args' or 'arguments', not both")
    field_name = "arguments" if "arguments" in raw else "args"
    args = raw.get(field_name)
    if args is None:
        args = {}
    if isinstance(args, (str, bytes)):
        try:
            text = args.decode("utf-8", "replace") if isinstance(args, bytes) else args  # (for the depth alone)
            if deeper_than(text, MAX_JSON_DEPTH):
                raise PlanError(
                    f"{where}: field '{field_name}' is nested too deeply to parse (more than {MAX_JSON_DEPTH} levels)"
                )
            args = json.loads(args) if args.strip() else {}
        except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as e:
            raise PlanError(f"{where}: field '{field_name}' is not valid JSON ({e})") from None
    if not isinstance(args, Mapping):
        raise PlanError(f"{where}: field '{field_name}' must be an object of argument values, got {type(args).__name__}")
    step_id = raw.get("id")
    if step_id is None:
        step_id = f"step{index}"
    elif not isinstance(step_id, str) or not _ID.fullmatch(step_id):
        raise PlanError(f"{where}: field 'id' must be letters, digits, '_' or '-', got {quote(step_id)}")
    note = raw.get("note") or ""
    if not isinstance(note, str):
        raise PlanError(f"{where}: field 'note' must be a string, got {type(note).__name__}")
    refs: list[tuple[Location, PlanRef]] = []
    try:
        converted = {str(k): _convert(v, (str(k),), refs, where) for k, v in args.items()}
    except RecursionError:
        raise PlanError(f"{where}: field '{field_name}' is nested too deeply") from None
    symbolic: dict[str, tuple[PlanRef, ...]] = {}
    for loc, r in refs:
        symbolic[str(loc[0])] = (*symbolic.get(str(loc[0]), ()), r)
    return PlanStep(index=index, id=step_id, tool=tool, args=converted, note=note, refs=tuple(refs), symbolic=symbolic)


def _convert(value: Any, loc: Location, refs: list[tuple[Location, PlanRef]], where: str) -> Any:
    if isinstance(value, PlanRef):
        refs.append((loc, value))
        return value
    if isinstance(value, Mapping):
        if "$ref" in value:
            if len(value) != 1:
                raise PlanError(f"{where}: argument '{loc_text(loc)}': a $ref object must have only the '$ref' key")
            try:
                r = PlanRef.parse(value["$ref"])
            except PlanError as e:
                raise PlanError(f"{where}: argument '{loc_text(loc)}': {e}") from None
            refs.append((loc, r))
            return r
        return {str(k): _convert(v, (*loc, str(k)), refs, where) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_convert(v, (*loc, i), refs, where) for i, v in enumerate(value)]
    return value


def loc_text(loc: Location) -> str:
    """A location written as ``order.items[0]``."""
    return ArgumentProblem(kind="value", location=loc, message="").path


def listed(items: Sequence[str], total: int) -> str:
    """``a, b, c`` naming at most the first :data:`LISTED` of ``total`` items, and counting the rest."""
    shown = ", ".join(items[:LISTED])
    return shown + (f" and {total - LISTED} more" if total > LISTED else "")
