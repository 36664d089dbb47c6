"""Plans: verify a planner's tool-call plan before anything runs (the paper's dual loop).

A plan is an ordered list of steps ``{"tool": ..., "args": {...}, "id": ...}``. An argument
is a literal or a reference to what an earlier step's result will hold,
``{"$ref": "step2.person_id"}`` (a step without an id is ``step1``, ``step2``, ...).

:func:`verify_plan` runs the runtime predicate over a copy-on-write view of an episode's
tracked state, step by step, without running any tool. A reference flows into the
arguments as a symbolic value (:class:`PlanRef`): a reference to an earlier step's produced
kind counts as bound, an earlier step's output counts as seen, and a precondition that
reads one is *undetermined* (only execution reveals the value). Effects and invalidations
of earlier steps are applied to the view, so a later step sees what the earlier ones do.
The verifier is the runtime predicate: same checks, causes, tie-break and reasons.

:func:`revise_plan` is the dual loop: plan, verify, feed the verdict back, revise, up to a
budget; :class:`PlanFollower` matches executed calls to the approved plan. Planner and
verifier work is method-side cost: it never adds actions to an episode.
"""

from __future__ import annotations

import bisect
import contextlib
import copy
import json
import math
import re
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field, fields
from enum import Enum
from typing import TYPE_CHECKING, Any, Final, Literal, NoReturn, cast

import fastjsonschema

from .exceptions import PlanError
from .predicate import Failure, Fault, Undetermined, Verdict, check_dependencies, check_information, check_schema, quote
from .spec import Effect, Precondition, Produce, Ref, Toolset, ToolSpec, values_at
from .state import Binding, TrackedState
from .vocabulary import Cause

if TYPE_CHECKING:
    from .episode import Episode
    from .monitor import Monitor

# -- method labels -------------------------------------------------------------------------
REACT: Final = "react"
"""Interleaved reasoning and acting, no explicit plan."""
PROMPT_PLANNING: Final = "prompt_planning"
"""A plan is generated first but not enforced during execution."""
PLAN_CONDITIONED_REACT: Final = "plan_conditioned_react"
"""The generated (unverified) plan conditions the executor."""
DUAL_LOOP: Final = "dual_loop"
"""The plan is verified and revised before it conditions the executor."""
METHODS: Final = (REACT, PROMPT_PLANNING, PLAN_CONDITIONED_REACT, DUAL_LOOP)
"""The paper's four agent variants, as ``labels={"method": ...}`` values, in ladder order."""

DEFAULT_BUDGET: Final = 5
"""Plans the revise loop verifies at most (the paper's verification budget)."""

_ID = re.compile(r"[A-Za-z0-9_-]+")
_INDEX = re.compile(r"\[(\d+)\]")
_STEP_FIELDS: Final = frozenset({"tool", "args", "arguments", "id", "note"})
_SUMMARY_ITEMS: Final = 20
_LISTED: Final = 10
"""Step ids or labels a reason or deviation names at most (the rest are counted)."""
_SCAN: Final = 32
"""Planned steps of one tool a :class:`PlanFollower` compares a call with, at most, in each direction."""
_MISSING: Final = object()


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
Location = tuple[str | int, ...]
"""A path into a step's arguments: keys and list indices."""


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
        data: dict[str, Any] = {"id": self.id, "tool": self.tool, "args": _to_data(self.args)}
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


def _to_data(value: Any) -> Any:
    if isinstance(value, PlanRef):
        return value.to_data()
    if isinstance(value, Mapping):
        return {k: _to_data(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_to_data(v) for v in value]
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
                raise PlanError(f"{where}: argument '{_loc_text(loc)}': a $ref object must have only the '$ref' key")
            try:
                r = PlanRef.parse(value["$ref"])
            except PlanError as e:
                raise PlanError(f"{where}: argument '{_loc_text(loc)}': {e}") from None
            refs.append((loc, r))
            return r
        return {str(k): _convert(v, (*loc, str(k)), refs, where) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_convert(v, (*loc, i), refs, where) for i, v in enumerate(value)]
    return value


def _loc_text(loc: Location) -> str:
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else part)
    return text


# -- symbolic effects ----------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class SymbolicEffect:
    """An effect with its own plan-time version.

    At runtime it runs ``effect``. In plan verification it runs ``simulate`` (same
    signature, with a :class:`PlanRef` standing for the result), or nothing when
    ``simulate`` is ``None``. Effects without a plan-time version run as they are, with the
    placeholder result: those that do not need the result (``state.facts["cellular"] =
    True``) just work. Effects run on the verifier's copy-on-write view, whose facts,
    bindings and information are private; ``state.env`` is the live environment, which an
    effect should never change (the tool does).
    """

    effect: Effect
    simulate: Effect | None = None

    @property
    def __name__(self) -> str:  # used in fault messages
        return getattr(self.effect, "__name__", type(self.effect).__name__)

    def __call__(self, state: Any, args: Mapping[str, Any], result: Any) -> None:
        self.effect(state, args, result)


def plan_effect(simulate: Effect | None) -> Callable[[Effect], SymbolicEffect]:
    """Decorator: give an effect a plan-time version (``None``: no plan-time change).

    Example::

        def _sim_login(state, args, result):
            state.facts["user"] = args["user_id"]

        @plan_effect(_sim_login)
        def login(state, args, result):
            state.facts["user"] = result["user"]["id"]
    """

    def wrap(effect: Effect) -> SymbolicEffect:
        return SymbolicEffect(effect, simulate)

    return wrap


# -- the copy-on-write view ----------------------------------------------------------------
_SCALAR = (str, bytes, int, float, bool, type(None), PlanRef)


def _shared(value: Any) -> bool:
    """Whether ``value`` can be shared with the parent: nothing reachable from it can change in place."""
    if isinstance(value, _SCALAR):
        return True
    if isinstance(value, (tuple, frozenset)):
        try:
            return all(_shared(v) for v in value)
        except RecursionError:
            return False
    return False


def _private(local: dict[str, Any], key: str, value: Any) -> Any:
    """The view's own copy of a parent's fact, made when an effect first reads it (tuples are looked into)."""
    if not _shared(value):
        value = copy.deepcopy(value)  # effects may change it in place
    local[key] = value
    return value


class _Facts(MutableMapping[str, Any]):
    """Facts of the view: local writes and deletions over the parent's facts."""

    __slots__ = ("_deleted", "_local", "_owner", "_parent")

    def __init__(self, parent: Mapping[str, Any], owner: PlanState) -> None:
        self._parent = parent
        self._local: dict[str, Any] = {}
        self._deleted: set[str] = set()
        self._owner = owner

    def __getitem__(self, key: str) -> Any:
        owner = self._owner
        owner._read_facts = True
        local = self._local
        if key in local:
            value = local[key]
        elif key in self._deleted:
            raise KeyError(key)
        else:
            value = self._parent[key]
            if owner._writing and not isinstance(value, _SCALAR):
                value = _private(local, key, value)
        if type(value) is PlanRef:
            owner._symbols_read.append(value)
        return value

    def get(self, key: str, default: Any = None) -> Any:
        owner = self._owner
        owner._read_facts = True
        value = self._local.get(key, _MISSING)
        if value is _MISSING:
            if self._deleted and key in self._deleted:
                return default
            value = self._parent.get(key, _MISSING)
            if value is _MISSING:
                return default
            if owner._writing and not isinstance(value, _SCALAR):
                value = _private(self._local, key, value)
        elif type(value) is PlanRef:
            owner._symbols_read.append(value)
        return value

    def __contains__(self, key: object) -> bool:
        self._owner._read_facts = True
        return key in self._local or (key not in self._deleted and key in self._parent)

    def __setitem__(self, key: str, value: Any) -> None:
        self._local[key] = value
        if self._deleted:
            self._deleted.discard(key)

    def __delitem__(self, key: str) -> None:
        in_parent = key not in self._deleted and key in self._parent
        if key in self._local:
            del self._local[key]
        elif not in_parent:
            raise KeyError(key)
        if in_parent:
            self._deleted.add(key)

    def __iter__(self) -> Iterator[str]:
        self._owner._read_facts = True
        local, deleted = self._local, self._deleted
        yield from local
        for k in self._parent:
            if k not in local and k not in deleted:
                yield k

    def __len__(self) -> int:
        parent = self._parent
        return len(parent) - len(self._deleted) + sum(1 for k in self._local if k not in parent)

    def copy(self) -> dict[str, Any]:
        """A plain dict of the current facts."""
        return dict(self)

    def __repr__(self) -> str:
        return f"<plan facts: {len(self._local)} changed, {len(self._deleted)} deleted over {len(self._parent)}>"


class _ArgsView(Mapping[str, Any]):
    """Arguments as a precondition sees them; notes reads of symbolic values."""

    __slots__ = ("_args", "_owner", "_symbolic")

    def __init__(self, args: Mapping[str, Any], symbolic: Mapping[str, tuple[PlanRef, ...]], owner: PlanState) -> None:
        self._args = args
        self._symbolic = symbolic
        self._owner = owner

    def __getitem__(self, key: str) -> Any:
        value = self._args[key]
        refs = self._symbolic.get(key)
        if refs:
            self._owner._symbols_read.extend(refs)
        return value

    def __iter__(self) -> Iterator[str]:
        return iter(self._args)

    def __len__(self) -> int:
        return len(self._args)


class PlanState(TrackedState):
    """A copy-on-write view of a tracked state for plan verification.

    Facts, bindings and information written here stay here; reads fall through to the
    parent, which is never changed. Creating one costs O(number of exposed tools), a
    lookup O(what it reads), whatever the size of the parent.
    """

    __slots__ = (
        "_env_value",
        "_invalidated",
        "_parent",
        "_read_env",
        "_read_facts",
        "_sim",
        "_symbolic",
        "_symbols_read",
        "_writing",
    )

    def __init__(self, parent: TrackedState, sim: _Simulation | None = None) -> None:
        self._read_env = False
        self._read_facts = False
        self._writing = False
        self._symbols_read: list[PlanRef] = []
        super().__init__(env=parent.env, exposed=parent.exposed)
        self._parent = parent
        self._sim = sim
        self._symbolic: dict[PlanRef, dict[str, Binding]] = {}
        self._invalidated: dict[tuple[str, str], tuple[PlanRef, Binding]] = {}
        """``{(step id, kind): (reference, stale binding)}``: a step's output invalidated through one path."""
        self.facts = cast("dict[str, Any]", _Facts(parent.facts, self))
        self.depth = parent.depth
        self.turn = parent.turn

    @property
    def env(self) -> Any:
        """The live environment (as it was before the plan: planned steps do not run)."""
        self._read_env = True
        return self._env_value

    @env.setter
    def env(self, value: Any) -> None:
        self._env_value = value

    @property
    def parent(self) -> TrackedState:
        """The state this view reads through to."""
        return self._parent

    # -- references -----------------------------------------------------------------------
    def bind(self, kind: str, value: Any, *, tool: str | None = None, depth: int | None = None) -> None:
        """Bind ``value`` as ``kind`` in the view (a :class:`PlanRef` too)."""
        if isinstance(value, PlanRef):
            b = Binding(kind=kind, depth=self.depth if depth is None else depth, tool=tool)
            self._symbolic.setdefault(value, {})[kind] = b
        else:
            super().bind(kind, value, tool=tool, depth=depth)

    def invalidate(self, kind: str, value: Any, *, by: str | None = None) -> None:
        """Mark a binding stale in the view; the parent's binding is left as it is."""
        if isinstance(value, PlanRef):
            b = self._symbolic_binding(value, kind)
            if b is not None and b.current:
                stale = Binding(kind=kind, depth=b.depth, tool=b.tool, current=False, stale_depth=self.depth, stale_by=by)
                self._symbolic[value][kind] = stale
                self._invalidated.setdefault((value.step, kind), (value, stale))
            return
        local = self._bindings.get(value) if type(value) is str else None
        if local is None or kind not in local:
            inherited = self._parent.binding(value, kind)
            if inherited is None or not inherited.current:
                return
            if type(value) is str:
                stale = Binding(
                    kind=kind, depth=inherited.depth, tool=inherited.tool, current=False, stale_depth=self.depth, stale_by=by
                )
                if local is None:
                    self._bindings[value] = {kind: stale}
                else:
                    local[kind] = stale
                return
            super().bind(kind, value, tool=inherited.tool, depth=inherited.depth)
        super().invalidate(kind, value, by=by)

    def binding(self, value: Any, kind: str | None = None) -> Binding | None:
        """The binding of ``value`` in the view: local, symbolic, or the parent's."""
        if type(value) is PlanRef:
            return self._symbolic_binding(value, kind)
        b = TrackedState.binding(self, value, kind) if self._bindings else None
        return b if b is not None else self._parent.binding(value, kind)

    def _symbolic_binding(self, r: PlanRef, kind: str | None) -> Binding | None:
        """Bound by an effect or invalidated in the view, else produced by an earlier step.

        A produced binding is cached: once a step is earlier and passed its checks, it stays so.
        """
        kinds = self._symbolic.get(r) if self._symbolic else None
        if kinds:
            b = kinds.get(kind) if kind is not None else next(iter(kinds.values()))
            if b is not None:
                return b
        produced = self._produced(r, kind)
        if produced is None:
            return None
        target, p = produced
        sim = self._sim
        assert sim is not None
        spec = sim.specs[target]
        b = Binding(kind=p.kind, depth=sim.depth_of(target), tool=spec.name if spec is not None else None)
        self._symbolic.setdefault(r, {})[p.kind] = b
        return b

    def _produced(self, r: PlanRef, kind: str | None) -> tuple[int, Produce] | None:
        """The earlier step and its produced key that bind ``r`` as ``kind``, if any."""
        sim = self._sim
        if sim is None or not r.path:
            return None
        target = sim.earlier(r.step)
        if target is None:
            return None
        spec = sim.specs[target]
        if spec is None:
            return None
        last = r.path[-1]
        for p in spec.produces:
            if (kind is None or p.kind == kind) and (last == p.key or last == p.kind):
                return target, p
        return None

    def _current_symbol(self, r: PlanRef, kind: str) -> bool:
        """Whether ``r`` is a current ``kind`` (without building a Binding)."""
        kinds = self._symbolic.get(r) if self._symbolic else None
        b = kinds.get(kind) if kinds else None
        if b is not None:
            return b.current
        return self._produced(r, kind) is not None

    def aliased_stale(self, r: PlanRef, kind: str) -> tuple[PlanRef, Binding] | None:
        """Another path to the same step's output that was invalidated as ``kind``, if any.

        One result can hold several values of a kind (``f.person_id``, ``f.contacts[0].person_id``);
        whether two paths name the same value is known only when the step runs.
        """
        if not self._invalidated:
            return None
        other = self._invalidated.get((r.step, kind))
        return other if other is not None and other[0] != r else None

    @property
    def binding_count(self) -> int:
        """Bound values of the parent plus those bound in the view."""
        return self._parent.binding_count + len(self._bindings)

    # -- information pool -----------------------------------------------------------------
    def seen(self, value: Any) -> bool:
        """Seen in the parent, informed in the view, or an earlier step's output."""
        if type(value) is PlanRef:
            sim = self._sim
            return sim is not None and sim.earlier(value.step) is not None
        return self._parent.seen(value) or ((bool(self._pool) or bool(self._texts)) and TrackedState.seen(self, value))

    def user_said(self, value: Any) -> bool:
        """Whether the user's messages (parent or view) contain ``value``."""
        if isinstance(value, PlanRef):
            return False
        return self._parent.user_said(value) or (bool(self._texts) and TrackedState.user_said(self, value))


# -- verification --------------------------------------------------------------------------
class StepStatus(str, Enum):
    """The verifier's answer for one step."""

    EXECUTABLE = "executable"
    NOT_EXECUTABLE = "not_executable"
    UNDETERMINED = "undetermined"
    """No check fails, but a precondition depends on what only execution reveals."""

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True, slots=True, kw_only=True)
class StepDetail:
    """What a :class:`StepVerdict` says beyond the runtime verdict."""

    why_undetermined: tuple[str, ...] = ()
    hint: str | None = None
    notes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class StepVerdict:
    """The verdict on one planned step."""

    step: PlanStep
    status: StepStatus
    verdict: Verdict
    """The runtime-shaped verdict: failures in tie-break order, ``call_id`` = the step id,
    ``undetermined`` = names of undecided preconditions."""
    detail: StepDetail | None = None
    """Explanations beyond the verdict, when there are any (see the properties)."""

    @property
    def why_undetermined(self) -> tuple[str, ...]:
        """Why each undecided check could not be decided."""
        return self.detail.why_undetermined if self.detail is not None else ()

    @property
    def hint(self) -> str | None:
        """How a planner can repair the step, when there is a clear repair."""
        return self.detail.hint if self.detail is not None else None

    @property
    def notes(self) -> tuple[str, ...]:
        """Effects of the step that could not be simulated."""
        return self.detail.notes if self.detail is not None else ()

    @property
    def executable(self) -> bool:
        """Whether no check fails (executable or undetermined)."""
        return self.status is not StepStatus.NOT_EXECUTABLE

    @property
    def cause(self) -> Cause | None:
        """The primary cause, when not executable."""
        return self.verdict.cause

    @property
    def reason(self) -> str:
        """The primary failure's reason (the runtime's wording)."""
        return self.verdict.reason

    def feedback(self) -> str:
        """One model-readable line about the step."""
        head = f"{self.step.label}"
        if self.status is StepStatus.NOT_EXECUTABLE:
            text = _sentence(f"{head} is not executable ({self.cause}): {self.reason}")
            others = [_sentence(f.reason) for f in self.verdict.failures[1:]]
            if others:
                text += " Also: " + " ".join(others)
            if self.hint:
                text += " Hint: " + _sentence(self.hint)
            return text
        if self.status is StepStatus.UNDETERMINED:
            return f"{head} can only be checked when it runs: {'; '.join(self.why_undetermined)}"
        return f"{head} is executable"


def _sentence(text: str) -> str:
    return text if text.endswith((".", "!", "?")) else text + "."


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanVerdict:
    """The verifier's answer for a whole plan."""

    plan: Plan
    steps: tuple[StepVerdict, ...]
    approved: bool
    problems: tuple[str, ...] = ()
    """Problems of the plan as a whole (an empty plan)."""

    @property
    def rejected(self) -> tuple[StepVerdict, ...]:
        """Steps that are not executable."""
        return tuple(s for s in self.steps if s.status is StepStatus.NOT_EXECUTABLE)

    @property
    def undetermined(self) -> tuple[StepVerdict, ...]:
        """Steps that only execution can decide."""
        return tuple(s for s in self.steps if s.status is StepStatus.UNDETERMINED)

    @property
    def first_failure(self) -> StepVerdict | None:
        """The first step that is not executable."""
        return next((s for s in self.steps if s.status is StepStatus.NOT_EXECUTABLE), None)

    def feedback(self) -> str:
        """Model-readable feedback for the planner: what is wrong with which step, and how to fix it."""
        n = len(self.steps)
        if self.approved:
            lines = [f"The plan is approved: none of its {n} step(s) fails a check."]
            lines += [f"- {s.feedback()}" for s in self.undetermined]
            return "\n".join(lines)
        rejected = self.rejected
        lines = ["The plan is rejected."]
        lines += [f"- {p}" for p in self.problems]
        if rejected:
            lines[0] = f"The plan is rejected: {len(rejected)} of its {n} step(s) cannot execute."
        lines += [f"- {s.feedback()}" for s in self.steps if s.status is not StepStatus.EXECUTABLE]
        if rejected or self.undetermined:
            lines.append("Revise the plan so that every step can execute in order, using only outputs of earlier steps.")
        return "\n".join(lines)


# Every step makes a Verdict and a StepVerdict; a frozen dataclass's __init__ costs about
# twice as much as setting its slots directly, a measurable share of a step's cost (the core
# builds executable verdicts the same way). The plain constructors are used if the fields change.
_VERDICT_FIELDS: Final = ("tool", "call_id", "depth", "executable", "failures", "args", "faults", "undetermined")
_STEP_FIELDS_ORDER: Final = ("step", "status", "verdict", "detail")


def _verdict_builder() -> Callable[[str, str, int, bool, tuple[Failure, ...], Any, tuple[Fault, ...], tuple[str, ...]], Verdict]:
    if tuple(f.name for f in fields(Verdict)) != _VERDICT_FIELDS:
        return lambda t, c, d, e, f, a, fa, u: Verdict(
            tool=t, call_id=c, depth=d, executable=e, failures=f, args=a, faults=fa, undetermined=u
        )
    s0, s1, s2, s3, s4, s5, s6, s7 = (getattr(Verdict, n).__set__ for n in _VERDICT_FIELDS)
    new = object.__new__

    def build(
        t: str, c: str, d: int, e: bool, f: tuple[Failure, ...], a: Any, fa: tuple[Fault, ...], u: tuple[str, ...]
    ) -> Verdict:
        v: Verdict = new(Verdict)
        s0(v, t)
        s1(v, c)
        s2(v, d)
        s3(v, e)
        s4(v, f)
        s5(v, a)
        s6(v, fa)
        s7(v, u)
        return v

    return build


def _step_verdict_builder() -> Callable[[PlanStep, StepStatus, Verdict, StepDetail | None], StepVerdict]:
    if tuple(f.name for f in fields(StepVerdict)) != _STEP_FIELDS_ORDER:
        return lambda st, ss, v, d: StepVerdict(step=st, status=ss, verdict=v, detail=d)
    s0, s1, s2, s3 = (getattr(StepVerdict, n).__set__ for n in _STEP_FIELDS_ORDER)
    new = object.__new__

    def build(st: PlanStep, ss: StepStatus, v: Verdict, d: StepDetail | None) -> StepVerdict:
        sv: StepVerdict = new(StepVerdict)
        s0(sv, st)
        s1(sv, ss)
        s2(sv, v)
        s3(sv, d)
        return sv

    return build


_verdict: Final = _verdict_builder()
_step_verdict: Final = _step_verdict_builder()


class _Simulation:
    """Per-verification bookkeeping shared by the view and the step checks."""

    __slots__ = (
        "base_depth",
        "changed_env",
        "current",
        "index",
        "lost_facts",
        "producers",
        "ran",
        "read_only",
        "samples",
        "specs",
        "steps",
    )

    def __init__(self, plan: Plan, toolset: Toolset, base_depth: int, read_only: frozenset[str]) -> None:
        self.steps = plan.steps
        self.index = {s.id: i for i, s in enumerate(plan.steps)}
        self.specs: list[ToolSpec | None] = [toolset.get(s.tool) for s in plan.steps]
        self.ran = [False] * len(plan.steps)
        self.current = 0
        self.base_depth = base_depth
        self.read_only = read_only
        self.changed_env: str | None = None
        """The first earlier step that may have changed the live environment."""
        self.lost_facts: str | None = None
        """The first earlier step whose effect on the facts could not be simulated."""
        self.samples: dict[tuple[str, Location], Any] = {}
        self.producers: dict[str, tuple[int, str]] = {}
        """``{kind: (index, key)}``: the first earlier step that passed its checks and produces the kind."""

    def passed(self, i: int, spec: ToolSpec) -> None:
        """Step ``i`` passed its checks: its output exists for later steps."""
        self.ran[i] = True
        for p in spec.produces:
            self.producers.setdefault(p.kind, (i, p.key))

    def earlier(self, step_id: str) -> int | None:
        """The index of an earlier step that passed its checks, or ``None``."""
        i = self.index.get(step_id)
        return i if i is not None and i < self.current and self.ran[i] else None

    def depth_of(self, i: int) -> int:
        return self.base_depth + i + 1


def verify_plan(
    target: Monitor | Episode | Toolset,
    plan: PlanLike,
    *,
    state: TrackedState | None = None,
    allow_undetermined: bool = True,
    read_only: Iterable[str] = (),
    allows_no_tool: bool = False,
) -> PlanVerdict:
    """Check a plan step by step against the runtime predicate, without running any tool.

    Each step is judged in the state the earlier steps would leave: the state of ``target``
    (an episode's tracked state, or ``state``, or a fresh one) seen through a copy-on-write
    view, with the earlier steps' invalidations and effects applied to the view and their
    produced references bound symbolically. A step that fails a check produces nothing.

    Args:
        target: an :class:`~prefixmon.Episode` (its toolset and tracked state), a
            :class:`~prefixmon.Monitor` or a :class:`~prefixmon.Toolset`.
        plan: the plan (see :func:`parse_plan`).
        state: the state to verify against (default: the episode's, or a fresh one).
        allow_undetermined: approve plans with undetermined steps (the runtime monitor
            checks them when they run); ``False`` approves only fully decided plans.
        read_only: tools that do not change the live environment. After any other step, a
            precondition that reads ``state.env`` and fails is undetermined (the environment
            the plan would meet has changed); after read-only steps it fails.
        allows_no_tool: approve an empty plan.

    Returns:
        the verdict: approved or not, and a :class:`StepVerdict` per step.

    Raises:
        PlanError: the plan is malformed.
    """
    toolset, parent = _target(target, state)
    plan = parse_plan(plan)
    only_reads = frozenset(read_only) | {s.name for s in toolset if s.metadata.get("read_only")}
    sim = _Simulation(plan, toolset, parent.depth, only_reads)
    view = PlanState(parent, sim)
    verdicts: list[StepVerdict] = []
    specs, base = sim.specs, parent.depth + 1
    for i, step in enumerate(plan.steps):
        sim.current = i
        view.depth = base + i
        spec = specs[i]
        verdict, args, whys, hint = _check_step(toolset, view, sim, step, spec)
        notes: tuple[str, ...] = ()
        if verdict.executable:
            assert spec is not None and args is not None
            sim.passed(i, spec)
            notes = _apply(view, sim, step, spec, args)
        if not verdict.executable:
            status = StepStatus.NOT_EXECUTABLE
        else:
            status = StepStatus.UNDETERMINED if whys else StepStatus.EXECUTABLE
        detail = StepDetail(why_undetermined=whys, hint=hint, notes=notes) if whys or hint or notes else None
        verdicts.append(_step_verdict(step, status, verdict, detail))
    problems: tuple[str, ...] = ()
    if not plan.steps and not allows_no_tool:
        problems = ("the plan has no steps, and this task cannot be finished without a tool call",)
    approved = not problems and all(
        v.status is StepStatus.EXECUTABLE or (allow_undetermined and v.status is StepStatus.UNDETERMINED) for v in verdicts
    )
    return PlanVerdict(plan=plan, steps=tuple(verdicts), approved=approved, problems=problems)


def _target(target: Any, state: TrackedState | None) -> tuple[Toolset, TrackedState]:
    if isinstance(target, Toolset):
        toolset = target
        parent = state
    elif isinstance(getattr(target, "toolset", None), Toolset):  # a Monitor
        toolset = target.toolset
        parent = state
    elif isinstance(getattr(getattr(target, "monitor", None), "toolset", None), Toolset):  # an Episode
        toolset = target.monitor.toolset
        parent = state if state is not None else target.state
    else:
        raise TypeError(f"verify_plan needs an Episode, a Monitor or a Toolset, got {type(target).__name__}")
    if parent is None:
        parent = TrackedState(exposed=[s.name for s in toolset if s.exposed])
    return toolset, parent


def _check_step(
    toolset: Toolset, view: PlanState, sim: _Simulation, step: PlanStep, spec: ToolSpec | None
) -> tuple[Verdict, dict[str, Any] | None, tuple[str, ...], str | None]:
    """Checks 1, 2, 3 and 5 of the predicate for one step, in tie-break order."""
    depth = view.depth
    whys: list[str] = []
    symbolic = step.symbolic

    # 1. schema: placeholders are validated as sample values of their declared type; a
    # failure of a placeholder itself only makes the step undetermined
    if symbolic and spec is not None:
        validated, failure = _schema_with_refs(toolset, view, sim, step, spec, whys)
    else:
        _, validated, failure = check_schema(toolset, view, step.tool, step.args)
    if failure is not None or validated is None:
        assert failure is not None
        verdict = Verdict(tool=step.tool, call_id=step.id, depth=depth, executable=False, failures=(failure,))
        return verdict, None, (), None
    assert spec is not None
    args = validated
    if symbolic:
        args = dict(validated)
        for name in symbolic:
            args[name] = step.args[name]

    failures: list[Failure] = []
    faults: list[Fault] = []
    undetermined: list[str] = []
    hint: str | None = None

    # 2. dependency: plan references first, then the tool's reference arguments
    dep = _reference_failure(sim, step) if step.refs else None
    if dep is None and spec.refs:
        dep, hint = _ref_arguments(toolset, view, sim, step, spec, args, whys)
    if dep is not None:
        failures.append(dep)

    # 3. precondition
    if spec.requires:
        pre = _preconditions(view, sim, spec, args, symbolic, faults, undetermined, whys)
        if pre is not None:
            failures.append(pre)

    # 5. information (an earlier step's output counts as seen)
    if spec.grounded:
        info = check_information(view, spec, args)
        if info is not None:
            failures.append(info)

    verdict = _verdict(
        step.tool,
        step.id,
        depth,
        not failures,
        tuple(failures) if failures else (),
        args,
        tuple(faults) if faults else (),
        tuple(undetermined) if undetermined else (),
    )
    if failures:  # what only execution decides does not matter for a step that cannot execute
        return verdict, args, (), hint if failures[0] is dep else None
    return verdict, args, tuple(whys) if whys else (), None


def _reference_failure(sim: _Simulation, step: PlanStep) -> Failure | None:
    """A ``$ref`` must name an earlier step that can execute."""
    for loc, r in step.refs:
        i = sim.index.get(r.step)
        if i is not None and i < sim.current and sim.ran[i]:
            continue
        where = f"{step.tool}: argument '{_loc_text(loc)}' refers to {r!r}"
        if i is None:
            known = _listed([s.id for s in sim.steps[: min(sim.current, _LISTED)]], sim.current) or "none"
            return Failure(
                cause=Cause.DEPENDENCY,
                code="unknown_step",
                reason=f"{where}, but the plan has no step {r.step!r} (earlier steps: {known})",
            )
        if i >= sim.current:
            when = "this step itself" if i == sim.current else f"step {i + 1}, which comes later"
            return Failure(
                cause=Cause.DEPENDENCY,
                code="forward_reference",
                reason=f"{where}, but {r.step!r} is {when}; a step can only use outputs of earlier steps",
            )
        if not sim.ran[i]:
            return Failure(
                cause=Cause.DEPENDENCY,
                code="failed_step",
                reason=f"{where}, but {sim.steps[i].label} is not executable, so its output will not exist",
            )
    return None


def _ref_arguments(
    toolset: Toolset,
    view: PlanState,
    sim: _Simulation,
    step: PlanStep,
    spec: ToolSpec,
    args: Mapping[str, Any],
    whys: list[str],
) -> tuple[Failure | None, str | None]:
    """Every reference argument must be bound, current and of its kind (check 2)."""
    for path, r in spec.refs:
        for loc, value in values_at(args, path):
            if type(value) is PlanRef:
                failure = _symbolic_ref_failure(view, sim, spec, loc, r, value)
                if failure is not None:
                    return failure, _hint(toolset, sim, r.kind) if failure.code != "stale_reference" else None
                aliased = view.aliased_stale(value, r.kind)
                if aliased is not None:
                    other, stale = aliased
                    at = stale.stale_depth - sim.base_depth if stale.stale_depth is not None else "?"
                    whys.append(
                        f"whether {value!r} is still a current {r.kind} depends on whether it is the same value as "
                        f"{other!r}, which {stale.stale_by or 'an earlier step'} invalidates at step {at}; known only at run time"
                    )
                continue
            b = view.binding(value, r.kind)
            if (b is not None and b.current) or (b is None and r.user and view.user_said(value)):
                continue
            failure = check_dependencies(toolset, view, spec, args)
            if failure is None:  # pragma: no cover - the runtime check agrees with the test above
                continue
            hint = _hint(toolset, sim, r.kind) if failure.code in ("unbound_reference", "wrong_kind") else None
            return failure, hint
    return None, None


def _symbolic_ref_failure(view: PlanState, sim: _Simulation, spec: ToolSpec, loc: str, r: Ref, value: PlanRef) -> Failure | None:
    if view._current_symbol(value, r.kind):
        return None
    b = view.binding(value, r.kind)
    arg = "" if loc == r.kind else f" for '{loc}'"
    if b is not None:
        by = f" by {b.stale_by}" if b.stale_by else ""
        return Failure(
            cause=Cause.DEPENDENCY,
            code="stale_reference",
            reason=(
                f"{spec.name} needs a current {r.kind}{arg}; {value!r} will no longer be valid "
                f"(invalidated{by} at step {b.stale_depth - sim.base_depth if b.stale_depth is not None else '?'})"
            ),
        )
    target = sim.index[value.step]
    source = sim.specs[target]
    kinds = sorted({p.kind for p in source.produces}) if source is not None else []
    made = f"produces {', '.join(kinds)}" if kinds else "produces no references"
    return Failure(
        cause=Cause.DEPENDENCY,
        code="wrong_kind",
        reason=f"{spec.name} needs a {r.kind}{arg}; {value!r} is not one ({sim.steps[target].label} {made})",
    )


def _listed(items: Sequence[str], total: int) -> str:
    """``a, b, c`` naming at most the first :data:`_LISTED` of ``total`` items, and counting the rest."""
    shown = ", ".join(items[:_LISTED])
    return shown + (f" and {total - _LISTED} more" if total > _LISTED else "")


def _hint(toolset: Toolset, sim: _Simulation, kind: str) -> str:
    made = sim.producers.get(kind)
    if made is not None:
        i, key = made
        return f'use the output of an earlier step, e.g. {{"$ref": "{sim.steps[i].id}.{key}"}}'
    producers = toolset.producers_of(kind)
    if producers:
        key = next((p.key for p in toolset[producers[0]].produces if p.kind == kind), kind)
        tools = " or ".join(producers)
        return f'add an earlier step that calls {tools} and pass {{"$ref": "<that step\'s id>.{key}"}}'
    return f"no tool produces a {kind}; the value must come from the state before the plan"


def _preconditions(
    view: PlanState,
    sim: _Simulation,
    spec: ToolSpec,
    args: Mapping[str, Any],
    symbolic: Mapping[str, tuple[PlanRef, ...]],
    faults: list[Fault],
    undetermined: list[str],
    whys: list[str],
) -> Failure | None:
    """Every explicit precondition must hold (check 3); what execution alone decides is undetermined."""
    seen_args: Mapping[str, Any] = _ArgsView(args, symbolic, view) if symbolic else args
    symbols_read = view._symbols_read
    for pre in spec.requires:
        view._read_env = view._read_facts = False
        if symbols_read:
            symbols_read.clear()
        try:
            result = pre.check(view, seen_args)
        except Exception as e:
            if not symbols_read:
                faults.append(Fault(where=f"precondition {pre.name} of {spec.name}", error=e))
            undetermined.append(pre.name)
            whys.append(_why_symbolic(pre, view, sim) if symbols_read else f"precondition {pre.name} raised {e!r}")
            continue
        if not symbols_read and (result is True or result is None):
            continue
        if isinstance(result, Undetermined):
            undetermined.append(pre.name)
            whys.append(f"precondition {pre.name}: {result.why or 'undetermined before execution'}")
            continue
        if symbols_read:
            undetermined.append(pre.name)
            whys.append(_why_symbolic(pre, view, sim))
            continue
        if view._read_env and sim.changed_env is not None:
            undetermined.append(pre.name)
            whys.append(f"precondition {pre.name} reads the environment, which {sim.changed_env} may change before this step")
            continue
        if view._read_facts and sim.lost_facts is not None:
            undetermined.append(pre.name)
            whys.append(f"precondition {pre.name} reads facts that {sim.lost_facts} changes in a way known only when it runs")
            continue
        message = result if isinstance(result, str) and result else (pre.message or f"precondition {pre.name} does not hold")
        return Failure(cause=Cause.PRECONDITION, code=f"precondition:{pre.name}", reason=f"{spec.name}: {message}")
    if symbols_read:
        symbols_read.clear()
    return None


def _why_symbolic(pre: Precondition, view: PlanState, sim: _Simulation) -> str:
    read = view._symbols_read
    if len(read) == 1:
        r = read[0]
        i = sim.index.get(r.step)
        return f"precondition {pre.name} reads {r!r}, known only after {sim.steps[i].label if i is not None else r.step} runs"
    refs = list(dict.fromkeys(read))
    steps = list(dict.fromkeys(r.step for r in refs))
    labels = [sim.steps[sim.index[s]].label if s in sim.index else s for s in steps]
    return (
        f"precondition {pre.name} reads {', '.join(map(repr, refs))}, known only after "
        f"{' and '.join(labels)} {'runs' if len(labels) == 1 else 'run'}"
    )


def _apply(view: PlanState, sim: _Simulation, step: PlanStep, spec: ToolSpec, args: Mapping[str, Any]) -> tuple[str, ...]:
    """Apply a step symbolically: invalidations, then effects with a placeholder result."""
    if spec.invalidates:
        for path, r in spec.refs:
            if r.kind in spec.invalidates:
                for _, value in values_at(args, path):
                    view.invalidate(r.kind, value, by=spec.name)
    if sim.changed_env is None and step.tool not in sim.read_only:
        sim.changed_env = step.label
    if not spec.effects:
        return ()
    notes: list[str] = []
    result = step.output
    view._writing = True
    try:
        for effect in spec.effects:
            simulate: Effect | None = effect.simulate if type(effect) is SymbolicEffect else effect
            if simulate is None:
                continue
            try:
                simulate(view, args, result)
            except Exception as e:
                name = getattr(effect, "__name__", type(effect).__name__)
                notes.append(f"effect {name} could not be simulated ({type(e).__name__}: {e})")
                if sim.lost_facts is None:
                    sim.lost_facts = step.label
    finally:
        view._writing = False
    return tuple(notes) if notes else ()


def _with_samples(sim: _Simulation, step: PlanStep, spec: ToolSpec) -> dict[str, Any]:
    """The step's arguments with each placeholder replaced by a sample of its declared type."""
    out: dict[str, Any] = dict(step.args)
    root = spec.parameters
    samples = sim.samples
    for loc, _ in step.refs:
        top = str(loc[0])
        if out[top] is step.args[top] and len(loc) > 1:
            out[top] = copy.deepcopy(_to_data(step.args[top]))
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


def _schema_with_refs(
    toolset: Toolset, view: PlanState, sim: _Simulation, step: PlanStep, spec: ToolSpec, whys: list[str]
) -> tuple[dict[str, Any] | None, Failure | None]:
    """Check 1 for a step with references: literals must fit; a reference may only be undecided.

    The arguments are validated with each placeholder replaced by a sample of its declared
    type. When that fails, the problems the validator reports are located: one at a
    reference (the sample did not fit a ``pattern``, say) says nothing about the plan, one
    elsewhere is a real failure. When every reported problem is at a reference, the other
    arguments are validated again against the schema with those locations unconstrained
    (unless the validator reports every problem at once, as pydantic does), so a literal
    next to a reference is not approved unchecked (unless that relaxed schema cannot be
    compiled or walked, when the step is judged on the located problems alone).
    """
    raw = _with_samples(sim, step, spec)
    _, validated, failure = check_schema(toolset, view, step.tool, raw)
    if failure is None or failure.code != "invalid_arguments":
        return validated, failure
    refs = {_dotted(loc): r for loc, r in step.refs}
    parts, more = _error_parts(failure.reason, step.tool)
    at_refs: list[str] = []
    real: list[str] = []
    for kind, loc, text in parts:
        ref_loc = _ref_location(loc, refs) if kind == "value" else None
        if ref_loc is None:
            real.append(text)
        elif ref_loc not in at_refs:
            at_refs.append(ref_loc)
    if real:
        if len(real) == len(parts):
            return None, failure
        reason = f"{step.tool}: " + "; ".join(real) + (" (and more)" if more else "")
        return None, Failure(cause=Cause.SCHEMA, code="invalid_arguments", reason=reason)
    if more or not _reports_every_error(spec):
        problem = _relaxed_problem(spec, step, refs, raw)
        if isinstance(problem, Failure):
            return None, problem
        if problem is not None and problem not in at_refs:
            at_refs.append(problem)
    for loc in at_refs:
        whys.append(f"whether '{loc}' fits the schema depends on {refs[loc]!r}, known only when it runs")
    return dict(step.args), None


def _dotted(loc: Sequence[str | int]) -> str:
    return ".".join(str(p) for p in loc)


_PART_SPLIT: Final = re.compile(r"; (?=(?:argument|missing required argument|unknown argument) ')")
_MORE: Final = re.compile(r" \(and \d+ more\)$")
_QUOTED: Final = re.compile(r"^(missing required argument|unknown argument|argument) '(.*?)'(?::|$)")
_BRACKET: Final = re.compile(r"\[(\d+)\]")


def _error_parts(reason: str, tool: str) -> tuple[list[tuple[str, str | None, str]], bool]:
    """Split a schema failure's reason into ``(kind, location, text)`` problems, and whether more were left out.

    ``kind`` is ``missing``, ``unknown`` (both structural), ``value`` (a value at ``location``
    does not fit) or ``root`` (the arguments as a whole; location ``None``). The formats are
    those :mod:`prefixmon.spec` writes for pydantic and JSON-Schema validators.
    """
    text = reason[len(tool) + 2 :] if reason.startswith(f"{tool}: ") else reason
    more = _MORE.search(text)
    if more is not None:
        text = text[: more.start()]
    parts: list[tuple[str, str | None, str]] = []
    for part in _PART_SPLIT.split(text):
        m = _QUOTED.match(part)
        if m is not None:
            kind = {"missing required argument": "missing", "unknown argument": "unknown"}.get(m.group(1), "value")
            parts.append((kind, _BRACKET.sub(r".\1", m.group(2)), part))
        elif part.startswith("arguments ") or " " not in part:
            parts.append(("root", None, part))
        else:  # a JSON-Schema message that starts with the location: "order.id must match pattern ..."
            parts.append(("value", _BRACKET.sub(r".\1", part.split(" ", 1)[0]), part))
    return parts, more is not None


def _ref_location(loc: str | None, refs: Mapping[str, PlanRef]) -> str | None:
    """The reference location that ``loc`` is at or inside, if any."""
    if loc is None:
        return None
    if loc in refs:
        return loc
    return next((r for r in refs if loc.startswith(r + ".")), None)


def _reports_every_error(spec: ToolSpec) -> bool:
    """Whether the tool's validator lists every problem (pydantic models do, up to a count)."""
    return "model_validator" in getattr(spec.validate, "__qualname__", "")


def _relaxed_problem(spec: ToolSpec, step: PlanStep, refs: Mapping[str, PlanRef], raw: Mapping[str, Any]) -> Failure | str | None:
    """Validate against the schema with every reference location unconstrained.

    Returns a failure of a literal argument, the reference location a problem is still
    reported at (the schema constrains it from elsewhere), or ``None`` when the rest fits.
    """
    validate = _compile_relaxed(spec.parameters, [loc for loc, _ in step.refs])  # rare: only when a sample failed
    if validate is None:
        return None
    try:
        validate(dict(raw))
    except fastjsonschema.JsonSchemaValueException as e:
        path = [str(p) for p in (e.path or [])[1:]]
        at = _ref_location(".".join(path), refs) if path else None
        if at is not None:
            return at
        loc = ".".join(path)
        msg = e.message.replace("data.", "", 1) if e.message.startswith("data.") else e.message
        if msg.startswith("data "):
            msg = "arguments " + msg[5:]
        text = f"argument '{loc}': {msg}" if loc and not msg.startswith(loc) else msg
        return Failure(cause=Cause.SCHEMA, code="invalid_arguments", reason=f"{spec.name}: {text}")
    except RecursionError:
        return None
    return None


def _compile_relaxed(schema: Mapping[str, Any], locs: Sequence[Location]) -> Callable[[Any], Any] | None:
    relaxed: Any = copy.deepcopy({k: v for k, v in schema.items() if k != "$schema"})
    relaxed.setdefault("type", "object")
    for loc in locs:
        holder: Any = None
        key: Any = None
        node: Any = relaxed
        for part in loc:
            if not isinstance(node, dict) or "$ref" in node or any(c in node for c in ("anyOf", "oneOf", "allOf")):
                break  # cannot see further in: unconstrain what holds it
            items = node.get("items")
            props = node.get("properties")
            if isinstance(part, int) and isinstance(items, dict):
                holder, key = node, "items"
            elif isinstance(part, int) and isinstance(items, list) and part < len(items):
                holder, key = items, part
            elif isinstance(part, str) and isinstance(props, dict) and part in props:
                holder, key = props, part
            else:
                break
            node = holder[key]
        if holder is not None:
            holder[key] = {}
    try:
        return cast("Callable[[Any], Any]", fastjsonschema.compile(relaxed, use_default=False))
    except Exception:  # a schema the runtime compiled; a relaxed copy that does not compile is not checked
        return None


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


# -- planner support -----------------------------------------------------------------------
def describe_tools(tools: Iterable[ToolSpec]) -> list[dict[str, Any]]:
    """A JSON-ready catalogue of tools for a planner's prompt.

    Each entry has ``name``, ``description``, ``parameters``, and when declared:
    ``produces`` (reference kinds the result binds, ``{kind: key}``), ``references``
    (``{argument: kind}`` that must come from an earlier result), ``grounded`` arguments and
    ``requires`` (precondition messages).
    """
    out: list[dict[str, Any]] = []
    for spec in tools:
        entry: dict[str, Any] = {"name": spec.name, "description": spec.description, "parameters": dict(spec.parameters)}
        if spec.produces:
            entry["produces"] = {p.kind: p.key for p in spec.produces}
        if spec.refs:
            entry["references"] = {path: r.kind for path, r in spec.refs}
        if spec.grounded:
            entry["grounded"] = list(spec.grounded)
        if spec.requires:
            entry["requires"] = [p.message or p.name for p in spec.requires]
        if spec.invalidates:
            entry["invalidates"] = sorted(spec.invalidates)
        out.append(entry)
    return out


def summarize_state(state: TrackedState, *, limit: int = _SUMMARY_ITEMS) -> str:
    """A compact, model-readable summary of a tracked state (at most ``limit`` items per part).

    Costs O(limit), whatever the size of the state.
    """
    lines = [f"actions so far: {state.depth}; turn: {state.turn}"]
    if state.exposed:
        names = sorted(state.exposed)
        lines.append(
            "available tools: " + ", ".join(names[:limit]) + (f" and {len(names) - limit} more" if len(names) > limit else "")
        )
    facts = state.facts
    if facts:
        shown = [f"{k}={quote(facts[k])}" for k, _ in zip(facts, range(limit), strict=False)]
        more = f" and {len(facts) - len(shown)} more" if len(facts) > len(shown) else ""
        lines.append("facts: " + ", ".join(shown) + more)
    bindings = state._bindings
    if bindings:
        shown = []
        for value, kinds in bindings.items():
            for kind, b in kinds.items():
                shown.append(f"{kind} {quote(value)}" + ("" if b.current else " (no longer valid)"))
            if len(shown) >= limit:
                break
        more = f" and {len(bindings) - limit} more values" if len(bindings) > limit else ""
        lines.append("references returned so far: " + ", ".join(shown[:limit]) + more)
    texts = state._texts
    if texts:
        lines.append(f"user messages: {len(texts)}")
    return "\n".join(lines)


Planner = Callable[[str, Sequence[ToolSpec], str, str | None], Awaitable[PlanLike]]
"""``async (goal, tools, state_summary, feedback) -> plan``; ``feedback`` is ``None`` the first time."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanAttempt:
    """One round of the revise loop."""

    number: int
    """1-based."""
    plan: Plan | None
    """The plan, or ``None`` when the planner's output did not parse."""
    verdict: PlanVerdict | None
    error: str | None = None
    """Why the attempt has no plan: the planner's output did not parse, or the planner raised."""
    feedback: str
    """What the verifier said about this attempt (given to the planner for the next one)."""
    planner_seconds: float
    verifier_seconds: float

    @property
    def approved(self) -> bool:
        """Whether this attempt's plan was approved."""
        return self.verdict is not None and self.verdict.approved


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanRevision:
    """The outcome of the revise loop: the approved plan (if any) and every attempt."""

    goal: str
    plan: Plan | None
    """The approved plan; ``None`` when no plan was approved within the budget."""
    verdict: PlanVerdict | None
    """The approved plan's verdict."""
    attempts: tuple[PlanAttempt, ...]
    budget: int
    planner_error: Exception | None = field(default=None, compare=False)
    """The exception the planner raised, which ended the loop early; ``None`` when it did not.

    The failed call is the last attempt (no plan, ``error`` says what was raised), so the
    attempts before it and the method-side time spent are kept. Re-raise it to propagate.
    """

    @property
    def approved(self) -> bool:
        """Whether a plan was approved."""
        return self.plan is not None

    @property
    def planner_seconds(self) -> float:
        """Total planner time (method-side cost)."""
        return sum(a.planner_seconds for a in self.attempts)

    @property
    def verifier_seconds(self) -> float:
        """Total verification time (method-side cost)."""
        return sum(a.verifier_seconds for a in self.attempts)

    def labels(self) -> dict[str, str]:
        """Episode labels describing the method-side cost: ``plan_attempts``, ``plan_approved``."""
        return {"plan_attempts": str(len(self.attempts)), "plan_approved": "true" if self.approved else "false"}


async def revise_plan(
    planner: Planner,
    goal: str,
    target: Monitor | Episode | Toolset,
    *,
    state: TrackedState | None = None,
    budget: int = DEFAULT_BUDGET,
    allow_undetermined: bool = True,
    read_only: Iterable[str] = (),
    allows_no_tool: bool = False,
) -> PlanRevision:
    """The dual loop: plan, verify, feed the verdict back, revise; up to ``budget`` plans.

    The planner gets the goal, the exposed tool specs, a state summary
    (:func:`summarize_state`) and the feedback on its previous plan (``None`` at first); a
    plan that does not parse is an attempt too, and the parse error is the feedback.
    Nothing runs and the episode's depth does not change: planner and verifier work is
    method-side cost.

    Args:
        planner: ``async (goal, tools, state_summary, feedback) -> plan``.
        goal: the user's goal.
        target: as for :func:`verify_plan`.
        budget: the most plans to verify (default 5, as in the paper).
        state, allow_undetermined, read_only, allows_no_tool: as for :func:`verify_plan`.

    Returns:
        every attempt, and the approved plan only if one was approved. A planner that raises
        (an ``Exception``, such as an API timeout) ends the loop: its call is the last
        attempt and the exception is :attr:`PlanRevision.planner_error`; cancellation and
        other ``BaseException`` propagate.
    """
    if budget < 1:
        raise ValueError(f"budget must be at least 1, got {budget}")
    toolset, parent = _target(target, state)
    specs = [s for s in toolset if s.name in parent.exposed]
    summary = summarize_state(parent)
    read_only = tuple(read_only)
    feedback: str | None = None
    attempts: list[PlanAttempt] = []
    for number in range(1, budget + 1):
        started = time.perf_counter()
        try:
            proposed = await planner(goal, specs, summary, feedback)
        except Exception as e:
            attempts.append(
                PlanAttempt(
                    number=number,
                    plan=None,
                    verdict=None,
                    error=f"the planner raised {type(e).__name__}: {e}",
                    feedback="",
                    planner_seconds=time.perf_counter() - started,
                    verifier_seconds=0.0,
                )
            )
            return PlanRevision(goal=goal, plan=None, verdict=None, attempts=tuple(attempts), budget=budget, planner_error=e)
        planned = time.perf_counter()
        try:
            plan = parse_plan(proposed)
        except PlanError as e:
            feedback = (
                f"The plan could not be read: {e}. Write it as a JSON list of steps "
                '{"tool": ..., "args": {...}}, using {"$ref": "<step id>.<field>"} for outputs of earlier steps.'
            )
            attempts.append(
                PlanAttempt(
                    number=number,
                    plan=None,
                    verdict=None,
                    error=str(e),
                    feedback=feedback,
                    planner_seconds=planned - started,
                    verifier_seconds=time.perf_counter() - planned,
                )
            )
            continue
        verdict = verify_plan(
            toolset,
            plan,
            state=parent,
            allow_undetermined=allow_undetermined,
            read_only=read_only,
            allows_no_tool=allows_no_tool,
        )
        feedback = verdict.feedback()
        attempts.append(
            PlanAttempt(
                number=number,
                plan=plan,
                verdict=verdict,
                feedback=feedback,
                planner_seconds=planned - started,
                verifier_seconds=time.perf_counter() - planned,
            )
        )
        if verdict.approved:
            return PlanRevision(goal=goal, plan=plan, verdict=verdict, attempts=tuple(attempts), budget=budget)
    return PlanRevision(goal=goal, plan=None, verdict=None, attempts=tuple(attempts), budget=budget)


DeviationKind = Literal["skipped", "repeated", "arguments_differ", "not_in_plan"]


def deviation_kind(deviation: str) -> DeviationKind:
    """The low-cardinality kind of a deviation text written by :class:`PlanFollower` (for telemetry)."""
    if deviation.startswith("arguments differ"):
        return "arguments_differ"
    if deviation.startswith("skipped"):
        return "skipped"
    if deviation.startswith("repeats"):
        return "repeated"
    return "not_in_plan"


# -- runtime conditioning ------------------------------------------------------------------
@dataclass(frozen=True, slots=True, kw_only=True)
class PlanMatch:
    """How one executed call relates to the plan (``ActionRecord.plan_step`` / ``deviation``)."""

    step: int | None
    """1-based index of the plan step the call matched, or ``None``."""
    deviation: str | None = None
    """How the call deviated from the plan; ``None`` when it followed it."""


class PlanFollower:
    """Matches an episode's calls, in order, to the plan that conditions the executor.

    A call that is the next expected step follows the plan; one that matches a later step
    skips the steps between; one that repeats a completed step, calls the expected tool with
    other arguments, or is not in the plan is a deviation. A ``$ref`` argument is compared
    with what the referenced step's result actually held. A step is completed when a call
    matching it ran and the environment accepted it (a blocked call can be retried).
    Calls are matched as they finish: an episode that runs calls concurrently gets them
    matched in the order they finished, not the order they were emitted. A call is compared
    only with steps of its own tool, at most 32 after the expected step and 32 before it, so
    matching costs the same whatever the plan's length; a call that fits a step further
    ahead counts as other arguments for the next step of its tool.

    Args:
        plan: the plan (or a verdict on it).
        toolset: lets a ``$ref`` that names a produced kind find the result key it is bound from.
    """

    def __init__(self, plan: Plan | PlanVerdict | PlanLike, toolset: Toolset | None = None) -> None:
        self.plan = plan.plan if isinstance(plan, PlanVerdict) else parse_plan(plan)
        self._toolset = toolset
        self._results: dict[str, list[Any]] = {}
        self._done: set[int] = set()
        self._cursor = 0
        self._by_id = {s.id: s for s in self.plan.steps}
        self._by_tool: dict[str, list[int]] = {}
        """0-based positions of each tool's steps, in plan order: a call is compared only with its tool's steps."""
        for i, s in enumerate(self.plan.steps):
            self._by_tool.setdefault(s.tool, []).append(i)

    @property
    def next_step(self) -> PlanStep | None:
        """The step the executor is expected to run next."""
        steps = self.plan.steps
        return steps[self._cursor] if self._cursor < len(steps) else None

    @property
    def completed(self) -> tuple[PlanStep, ...]:
        """Steps that ran and were accepted, in plan order."""
        return tuple(s for s in self.plan.steps if s.index in self._done)

    @property
    def missed(self) -> tuple[PlanStep, ...]:
        """Steps that have not been completed."""
        return tuple(s for s in self.plan.steps if s.index not in self._done)

    def concrete_args(self, step: PlanStep) -> dict[str, Any]:
        """The step's arguments with each ``$ref`` replaced by the first value the result held.

        Raises:
            PlanError: a referenced step has not run, or its result holds no such value.
        """

        def fill(value: Any, loc: Location) -> Any:
            if isinstance(value, PlanRef):
                found = self.resolve(value)
                if not found:
                    state = "has not run" if value.step not in self._results else "returned no such value"
                    raise PlanError(f"plan step {step.index} ({step.tool}): argument '{_loc_text(loc)}': {value.step} {state}")
                return found[0]
            if isinstance(value, Mapping):
                return {k: fill(v, (*loc, k)) for k, v in value.items()}
            if isinstance(value, list):
                return [fill(v, (*loc, i)) for i, v in enumerate(value)]
            return value

        return {k: fill(v, (k,)) for k, v in step.args.items()}

    def resolve(self, r: PlanRef) -> list[Any] | None:
        """Values the referenced step's results held at the reference's path, newest first.

        ``None`` when the step has not run. A step that ran more than once (a retry) offers
        the values of every run.
        """
        results = self._results.get(r.step)
        if results is None:
            return None
        found: list[Any] = []
        for result in reversed(results):
            if isinstance(result, (str, bytes)) and result[:1] in ("{", "[", b"{", b"["):
                with contextlib.suppress(ValueError, RecursionError):
                    result = json.loads(result)
            if not r.path:
                found.append(result)
                continue
            values = _descend(result, r.path)
            if not values:
                keys = {r.path[-1]}
                step = self._by_id.get(r.step)
                spec = self._toolset.get(step.tool) if self._toolset is not None and step is not None else None
                if spec is not None:
                    keys |= {p.key for p in spec.produces if p.kind == r.path[-1]}
                _collect(result, keys, values, 0)
            found.extend(values)
        return found

    def match(self, tool: str, args: Mapping[str, Any] | None, *, ran: bool = False, result: Any = None) -> PlanMatch:
        """Match one executed call to the plan and advance.

        Args:
            tool: the emitted call's tool.
            args: its arguments (validated, or parsed when they did not validate).
            ran: the call ran and the environment accepted it.
            result: its result, when it ran (later ``$ref`` arguments are compared with it).
        """
        steps = self.plan.steps
        args = args or {}
        cursor = self._cursor
        found: PlanStep | None = None
        deviation: str | None = None
        # Only steps of the same tool are compared, at most _SCAN of them each way: the cost of a
        # call does not grow with the plan.
        positions = self._by_tool.get(tool, ())
        at = bisect.bisect_right(positions, cursor)  # this tool's first step after the cursor
        if cursor < len(steps) and self._fits(steps[cursor], tool, args) is None:
            found = steps[cursor]
        else:
            later = next((steps[i] for i in positions[at : at + _SCAN] if self._fits(steps[i], tool, args) is None), None)
            if later is not None:
                found = later
                deviation = "skipped " + self._skipped(cursor, later.index - 1)
            else:
                before = bisect.bisect_left(positions, cursor)
                recent = positions[max(0, before - _SCAN) : before]
                earlier = next(
                    (steps[i] for i in reversed(recent) if i + 1 in self._done and self._fits(steps[i], tool, args) is None),
                    None,
                )
                if earlier is not None:
                    found, deviation = earlier, f"repeats {earlier.label}, which already ran"
                elif cursor < len(steps) and steps[cursor].tool == tool:
                    found = steps[cursor]
                    deviation = f"arguments differ from {found.label}: {self._fits(found, tool, args)}"
                elif at < len(positions):
                    same_tool = steps[positions[at]]
                    found = same_tool
                    deviation = (
                        f"arguments differ from {same_tool.label}: {self._fits(same_tool, tool, args)}; "
                        f"skipped {self._skipped(cursor, same_tool.index - 1)}"
                    )
                elif cursor >= len(steps):
                    deviation = f"{tool} is not in the plan (all {len(steps)} planned steps were already taken)"
                else:
                    deviation = f"{tool} is not in the plan (expected {steps[cursor].label})"
        if found is not None and ran:
            self._results.setdefault(found.id, []).append(result)
            self._done.add(found.index)
            if found.index - 1 >= self._cursor:
                self._cursor = found.index
        return PlanMatch(step=found.index if found is not None else None, deviation=deviation)

    def _skipped(self, start: int, stop: int) -> str:
        """Labels of the steps at positions ``start`` to ``stop - 1`` (the first few, and a count)."""
        steps = self.plan.steps
        return _listed([s.label for s in steps[start : min(stop, start + _LISTED)]], stop - start)

    def _fits(self, step: PlanStep, tool: str, args: Mapping[str, Any]) -> str | None:
        """``None`` when the call is the step, else how its arguments differ."""
        if step.tool != tool:
            return f"the tool is {tool}, not {step.tool}"
        diffs: list[str] = []
        for key, planned in step.args.items():
            self._compare(planned, args.get(key, _MISSING), key, diffs)
            if diffs:
                break
        return diffs[0] if diffs else None

    def _compare(self, planned: Any, actual: Any, loc: str, diffs: list[str]) -> None:
        if isinstance(planned, PlanRef):
            candidates = self.resolve(planned)
            if candidates is None or any(_same(c, actual) for c in candidates):
                return
            shown = ", ".join(quote(c) for c in candidates[:3]) or "nothing"
            got = "missing" if actual is _MISSING else quote(actual)
            diffs.append(f"'{loc}' is {got}, the plan has {planned!r} ({shown})")
        elif isinstance(planned, Mapping) and isinstance(actual, Mapping):
            for k, v in planned.items():
                self._compare(v, actual.get(k, _MISSING), f"{loc}.{k}", diffs)
        elif isinstance(planned, list) and isinstance(actual, (list, tuple)) and len(planned) == len(actual):
            for i, (p, a) in enumerate(zip(planned, actual, strict=True)):
                self._compare(p, a, f"{loc}[{i}]", diffs)
        elif not _same(planned, None if actual is _MISSING else actual):
            got = "missing" if actual is _MISSING else quote(actual)
            diffs.append(f"'{loc}' is {got}, the plan has {quote(planned)}")


def _same(a: Any, b: Any) -> bool:
    if a == b:
        return True
    scalar = (int, float, str)
    if isinstance(a, scalar) and isinstance(b, scalar) and not isinstance(a, bool) and not isinstance(b, bool):
        return str(a) == str(b)
    return False


def _descend(obj: Any, path: Sequence[str]) -> list[Any]:
    items = [obj]
    for part in path:
        nxt: list[Any] = []
        for item in items:
            if hasattr(item, "model_dump"):
                item = item.model_dump()
            if isinstance(item, Mapping):
                if part in item:
                    nxt.append(item[part])
            elif isinstance(item, (list, tuple)):
                if part.isdigit() and int(part) < len(item):
                    nxt.append(item[int(part)])
                else:
                    nxt.extend(x[part] for x in item if isinstance(x, Mapping) and part in x)
        items = nxt
    flat: list[Any] = []
    for item in items:
        if isinstance(item, (list, tuple)):
            flat.extend(item)
        else:
            flat.append(item)
    return flat


def _collect(obj: Any, keys: set[str], out: list[Any], level: int) -> None:
    if level > 64 or len(out) > 10_000:
        return
    if hasattr(obj, "model_dump"):
        obj = obj.model_dump()
    if isinstance(obj, Mapping):
        for k, v in obj.items():
            if k in keys and not isinstance(v, (Mapping, list, tuple)):
                out.append(v)
            else:
                _collect(v, keys, out, level + 1)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            _collect(v, keys, out, level + 1)


__all__ = (
    "DEFAULT_BUDGET",
    "DUAL_LOOP",
    "METHODS",
    "PLAN_CONDITIONED_REACT",
    "PROMPT_PLANNING",
    "REACT",
    "DeviationKind",
    "Plan",
    "PlanAttempt",
    "PlanFollower",
    "PlanLike",
    "PlanMatch",
    "PlanRef",
    "PlanRevision",
    "PlanState",
    "PlanStep",
    "PlanVerdict",
    "Planner",
    "StepDetail",
    "StepStatus",
    "StepVerdict",
    "SymbolicEffect",
    "SymbolicValueError",
    "describe_tools",
    "deviation_kind",
    "parse_plan",
    "plan_effect",
    "ref",
    "revise_plan",
    "summarize_state",
    "verify_plan",
)
