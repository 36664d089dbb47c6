"""Tool specs: what a tool accepts, needs, produces and changes.

A :class:`ToolSpec` is everything the predicate knows about one tool: its argument
validator, reference and grounded arguments, preconditions, effects, error-result
recogniser and probes. :class:`prefixmon.toolset.Toolset` builds and holds them.
"""

from __future__ import annotations

import functools
import inspect
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final, TypeVar

from ..deprecation import moved_names
from ..exceptions import SpecError
from ..verdict import Undetermined
from ._validation import Validator
from .grounding import MATCHES, GroundingMatch
from .provenance import Provenance

__all__ = (
    "MISSING",
    "Effect",
    "ErrorResult",
    "Grounded",
    "Precondition",
    "PreconditionResult",
    "Probe",
    "Produce",
    "ProducePlan",
    "Ref",
    "SymbolicEffect",
    "ToolSpec",
    "callable_name",
    "plan_effect",
    "produce_plan",
    "resolve_path",
    "values_at",
)

__getattr__ = moved_names(
    __name__, {"Toolset": "prefixmon.toolset:Toolset", "Produces": "prefixmon.toolset:Produces"}, removal="0.3.0"
)
"""``prefixmon.rules.spec.Toolset`` moved to :mod:`prefixmon.toolset` in 0.2.0 (``prefixmon.Toolset`` is unchanged)."""

F = TypeVar("F", bound=Callable[..., Any])

PreconditionResult = bool | str | None | Undetermined
"""``True`` or ``None``: holds. ``False``: fails with the precondition's message. ``str``: fails with it.
:class:`~prefixmon.Undetermined`: cannot be decided from what was observed (never a failure)."""


@dataclass(frozen=True, slots=True)
class Ref:
    """Marks an argument as a reference of ``kind`` that an earlier result must have produced.

    ``Annotated[str, Ref("person_id")]``. With ``user=True`` a value that appeared in the
    user's messages is accepted as well (ids the user states, such as a user id).
    A list-valued argument is checked element by element.
    """

    kind: str
    user: bool = False


@dataclass(frozen=True, slots=True)
class Grounded:
    """Marks an argument whose value must be available information.

    The value must have appeared in the user's messages or in an earlier tool result (no
    invented phone numbers, amounts or ids): ``Annotated[str, Grounded()]``, or
    ``grounded={"amount": Grounded("derived")}`` in :meth:`Toolset.tool` and
    :meth:`Toolset.add_schema`. A list-valued argument is checked element by element.

    Matching (``match``; see :mod:`prefixmon.rules.grounding` and docs/grounding.md):

    - ``"exact"``: the value as it is: equal to a value of a result, to a message or one of
      its words; text and numbers also as a case-insensitive substring of informed text.
    - ``"normalized"`` (default): ``exact``, or the same value in another written form: text
      with other case or whitespace (``Blue  Mug`` ↔ ``blue mug``), an id with or without a
      leading ``#`` (``#W123`` ↔ ``w123``), a number with thousands separators, a currency
      symbol or trailing zeros (``$1,234.50`` ↔ ``1234.5``), a date written out, in ISO or
      unambiguously in digits (``May 1st, 2024`` ↔ ``1 May 2024`` ↔ ``2024-05-01``; a date
      written without a year matches that day of any year), an ISO date-time with any
      offset (compared in UTC; a date-time's date counts as seen).
    - ``"derived"``: ``normalized``, or a number that is the sum, difference, product or
      quotient of two numbers seen recently (a refund of two item prices, ``150 = 3 * 50``);
      the verdict lists it in :attr:`~prefixmon.Verdict.derived`. Loose by nature (with small
      numbers seen, many values are derivable): meant for computed amounts.

    Raises:
        SpecError: ``match`` is not one of these.
    """

    match: GroundingMatch = "normalized"
    block: bool = False
    """Whether a value that was not seen blocks the call under a blocking policy. By default an
    information finding is reported (span, event, record) and the call runs: the environment
    accepts a value nobody said, so blocking it would break a working agent."""

    def __post_init__(self) -> None:
        if self.match not in MATCHES:
            raise SpecError(f"Grounded(match={self.match!r}): match must be one of {', '.join(map(repr, MATCHES))}")


@dataclass(frozen=True, slots=True, kw_only=True)
class Precondition:
    """A named check over the tracked state and the call's arguments.

    Args:
        check: ``(state, args) -> bool | str | None``; see :data:`PreconditionResult`.
        message: the reason used when ``check`` returns ``False``.
        name: for diagnostics; defaults to the function's name.
    """

    check: Callable[[Any, Mapping[str, Any]], PreconditionResult]
    message: str = ""
    name: str = ""

    @classmethod
    def wrap(cls, obj: Precondition | Callable[..., PreconditionResult]) -> Precondition:
        """Accept a bare callable where a precondition is expected."""
        if isinstance(obj, Precondition):
            return obj
        if not callable(obj):
            raise SpecError(f"a precondition must be callable, got {type(obj).__name__}")
        name = callable_name(obj)
        return cls(check=obj, message=_doc(obj) or f"precondition {name} does not hold", name=name)

    def __post_init__(self) -> None:
        _refuse_async(self.check, f"precondition {self.name or callable_name(self.check)}")

    def __call__(self, state: Any, args: Mapping[str, Any]) -> PreconditionResult:
        return self.check(state, args)


Effect = Callable[[Any, Mapping[str, Any], Any], None]
"""``(state, args, result) -> None``: updates the tracked state after a successful call."""

ErrorResult = Callable[[Any], "str | None"]
"""``(result) -> reason | None``: recognises a result that means the environment rejected the call."""


def callable_name(obj: object) -> str:
    """A user callable's name for messages: its ``__name__``, else its type's name — never its
    ``repr``, which may hold a secret (an API key bound in a ``functools.partial``).

    A ``partial`` is named by its function. ``__name__`` counts only when the object or its
    class defines it: a proxy's ``__getattr__`` answers any name, from its configuration.
    """
    while isinstance(obj, functools.partial):
        obj = obj.func
    if inspect.getattr_static(obj, "__name__", None) is not None:
        name = getattr(obj, "__name__", None)
        if isinstance(name, str) and name:
            return name
    return type(obj).__name__


def _doc(obj: object) -> str:
    """The first line of a callable's own docstring (a partial's function's, not ``functools.partial``'s)."""
    while isinstance(obj, functools.partial):
        obj = obj.func
    if inspect.getattr_static(obj, "__doc__", None) is None:  # nor a proxy's __getattr__ answer
        return ""
    doc = inspect.getdoc(obj) or ""
    return doc.splitlines()[0] if doc else ""


def _refuse_async(obj: object, what: str) -> None:
    """Rules run synchronously inside the check: an ``async def`` one would be silently wrong."""
    if inspect.iscoroutinefunction(obj) or inspect.iscoroutinefunction(getattr(obj, "__call__", None)):  # noqa: B004
        raise SpecError(f"{what} is an async function; preconditions, effects and error_result must be plain functions")


@dataclass(frozen=True, slots=True)
class SymbolicEffect:
    """An effect with its own plan-time version.

    At runtime it runs ``effect``. In plan verification it runs ``simulate`` (same
    signature, with a placeholder standing for the result), or nothing when ``simulate`` is
    ``None``. Effects without a plan-time version run as they are, with the placeholder
    result: those that do not need the result (``state.facts["cellular"] = True``) just work.
    """

    effect: Effect
    simulate: Effect | None = None

    @property
    def __name__(self) -> str:  # used in fault messages
        return callable_name(self.effect)

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


MISSING: Final = object()
"""What :func:`resolve_path` returns for a path with no value."""


def resolve_path(path: str, values: Mapping[str, Any]) -> Any:
    """The value at a dotted path (``args.order_id``, ``order.user_id``), or :data:`MISSING`."""
    node: Any = values
    for part in path.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return MISSING
        node = node[part]
    return node


@dataclass(frozen=True, slots=True, kw_only=True)
class Probe:
    """A read-only lookup the monitor makes before a call when an object one of its rules reads was not observed.

    Probes are never agent actions: they are recorded apart from the episode's actions, have
    a budget and a timeout, and fail open.
    """

    name: str
    """The rule variable it fills (a spec file's ``let`` name)."""
    object: str
    """The kind of object it looks up."""
    id: str
    """Path of the object's id: into the call (``args.order_id``) or an object an earlier probe
    of the same call observed (``reservation.user_id``)."""
    call: str
    """The read-only tool it calls."""
    args: Mapping[str, Any]
    """Its arguments: literal values, or paths into the checked call (``args.order_id``)."""
    budget: int = 8
    """Probes an episode makes at most (the budget of the spec file that declared it)."""
    timeout: float = 5.0
    """Seconds the probe may take before it is abandoned (the call is then checked without it)."""

    def arguments(self, values: Mapping[str, Any]) -> dict[str, Any] | None:
        """The probe's arguments, or ``None`` when a path has no value.

        Args:
            values: ``{"args": the checked call's arguments, <let name>: object fields, ...}``;
                a string argument whose first part names one of them is a path into it.
        """
        out: dict[str, Any] = {}
        for key, spec in self.args.items():
            value = resolve_path(spec, values) if isinstance(spec, str) and spec.split(".", 1)[0] in values else spec
            if value is MISSING or value is None:
                return None
            out[key] = value
        return out


@dataclass(frozen=True, slots=True, kw_only=True)
class Produce:
    """Where a result holds references of ``kind``; ``key`` is one of:

    - ``name``: every value under the key ``name`` anywhere in the result (a scalar, or each
      scalar of a list under it: ``{"orders": ["#W1", "#W2"]}``);
    - ``name.*`` / ``name{}``: every scalar value / every key of the mappings under ``name``
      (``{"variants": {"1008292230": {...}}}`` holds item ids as keys);
    - ``*`` / ``{}``: every scalar value (or list item) / every key of the result itself
      (``{"Bookshelf": "8600330539"}`` holds product ids as values);
    - ``.``: the result as a whole (a text or number answer);
    - ``~REGEX``: every match of the pattern (its first group, when it has one) in the result's text.

    A plain ``name`` also covers a text answer: the id-like words of a result that is plain text
    (not JSON) count as the kinds the tool produces by name (``Certificate certificate_3221322
    added to user ...``; words with a digit, not amounts or dates).
    """

    kind: str
    key: str


_WHOLE_KEYS: Final = frozenset((".", "*", "{}"))


@dataclass(frozen=True, slots=True)
class ProducePlan:
    """A tool's ``produces`` sorted by how each is found (see :class:`Produce`), made once per tool."""

    keys: Mapping[str, str]
    """``{result key: kind}``: found while the result is walked (and the kinds a text answer names)."""
    values: tuple[tuple[str, str], ...] = ()
    """``(key, kind)``: the values of the mappings under ``key`` (``key.*``)."""
    mapping_keys: tuple[tuple[str, str], ...] = ()
    """``(key, kind)``: the keys of the mappings under ``key`` (``key{}``)."""
    whole: tuple[tuple[str, str], ...] = ()
    """``(form, kind)`` with form ``.``, ``*`` or ``{}``: read from the result itself."""
    patterns: tuple[tuple[re.Pattern[str], str], ...] = ()
    """``(pattern, kind)`` of ``~REGEX``."""

    @property
    def special(self) -> bool:
        """Whether anything beyond result keys is declared (the result is then read once more)."""
        return bool(self.values or self.mapping_keys or self.whole or self.patterns)


def produce_plan(produce: Mapping[str, str]) -> ProducePlan:
    """``{key: kind}`` (a tool's ``produces``) as a :class:`ProducePlan`; O(len(produce)).

    Raises:
        SpecError: a ``~REGEX`` that does not compile.
    """
    keys: dict[str, str] = {}
    values: list[tuple[str, str]] = []
    mapping_keys: list[tuple[str, str]] = []
    whole: list[tuple[str, str]] = []
    patterns: list[tuple[re.Pattern[str], str]] = []
    for key, kind in produce.items():
        if key in _WHOLE_KEYS:
            whole.append((key, kind))
        elif key[:1] == "~" and len(key) > 1:
            try:
                patterns.append((re.compile(key[1:]), kind))
            except re.error as e:
                raise SpecError(f"produces {kind}: {key[1:]!r} is not a regular expression ({e})") from None
        elif key.endswith(".*") and len(key) > 2:
            values.append((key[:-2], kind))
        elif key.endswith("{}") and len(key) > 2:
            mapping_keys.append((key[:-2], kind))
        else:
            keys[key] = kind
    if not (values or mapping_keys or whole or patterns):
        return ProducePlan(MappingProxyType(keys))
    return ProducePlan(MappingProxyType(keys), tuple(values), tuple(mapping_keys), tuple(whole), tuple(patterns))


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolSpec:
    """Everything the predicate knows about one tool.

    Built by :meth:`Toolset.tool` and :meth:`Toolset.add_schema`; not usually constructed
    directly.
    """

    name: str
    """The tool's name as the agent calls it."""
    description: str = ""
    parameters: Mapping[str, Any]
    """JSON Schema of the arguments."""
    validate: Validator
    """Validates and normalises a dict of arguments; raises ``ArgumentError``."""
    func: Callable[..., Any] | None = None
    """The implementation, if the toolset runs it; ``None`` when a framework does."""
    is_async: bool = False
    requires: tuple[Precondition, ...] = ()
    effects: tuple[Effect, ...] = ()
    produces: tuple[Produce, ...] = ()
    invalidates: frozenset[str] = frozenset()
    """Reference kinds whose argument values become stale after a successful call."""
    refs: tuple[tuple[str, Ref], ...] = ()
    """(argument, Ref) pairs in declaration order."""
    grounded: tuple[str, ...] = ()
    """Paths of grounded arguments (see :class:`Grounded`)."""
    grounding: Mapping[str, Grounded] = field(default_factory=dict)
    """Options of grounded arguments given any; the others are matched as ``Grounded()``."""
    provenance: Mapping[str, Provenance] = field(default_factory=dict)
    """``{argument path: Provenance}``: the sources each argument's value may come from (:mod:`prefixmon.rules.provenance`)."""
    error_result: ErrorResult | None = None
    exposed: bool = True
    """Whether the tool is available from the start of an episode."""
    metadata: Mapping[str, Any] = field(default_factory=dict)
    """Free-form facts about the tool; ``read_only`` (bool) and ``access`` (``read``/``write``) are read by the monitor."""
    probes: tuple[Probe, ...] = ()
    """Read-only lookups the monitor makes before this tool runs, when an object its rules read is missing."""
    observe: Effect | None = None
    """How an accepted call changes the observed objects (what its result shows, what it makes stale);
    also applied to the results of probes, which change nothing else."""
    order_log: tuple[str, ...] | None = None
    """What the episode's :class:`~prefixmon.order.OrderLog` keeps of this tool's accepted calls, for order
    rules that name it: ``None`` nothing, else it is counted and these arguments' values kept."""
    produce_map: Mapping[str, str] = field(init=False, repr=False, compare=False)
    """``{result key: kind}`` of :attr:`produces`, derived once so no call rebuilds it."""
    produce_plan: ProducePlan = field(init=False, repr=False, compare=False)
    """:attr:`produces` sorted by how each is found (:func:`produce_plan`), derived once."""
    grounded_match: tuple[tuple[str, GroundingMatch], ...] = field(init=False, repr=False, compare=False)
    """``(path, match)`` of every grounded argument, derived once for the information check."""
    grounded_blocking: frozenset[str] = field(init=False, repr=False, compare=False)
    """Paths of grounded arguments declared ``Grounded(block=True)``."""
    has_rules: bool = field(init=False, repr=False, compare=False)
    """Whether a call has anything to judge after its schema: references, preconditions, grounded arguments or provenance."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "produce_map", MappingProxyType({p.key: p.kind for p in self.produces}))
        object.__setattr__(self, "produce_plan", produce_plan(self.produce_map))
        unknown = [path for path in self.grounding if path not in self.grounded]
        if unknown:
            raise SpecError(f"tool {self.name!r}: grounding options for arguments that are not grounded: {', '.join(unknown)}")
        options = self.grounding
        default = Grounded()
        object.__setattr__(self, "grounded_match", tuple((path, options.get(path, default).match) for path in self.grounded))
        object.__setattr__(self, "grounded_blocking", frozenset(path for path, g in options.items() if g.block))
        object.__setattr__(self, "has_rules", bool(self.refs or self.requires or self.grounded or self.provenance))


def values_at(args: Mapping[str, Any], path: str) -> Iterator[tuple[str, Any]]:
    """Yield ``(location, value)`` for an argument path.

    A plain name is one argument; ``a.b`` descends into a dict key and ``a[]`` iterates a
    list, e.g. ``payment_methods[].payment_id``. A list-valued plain argument yields each
    element. Missing parts and ``None`` values yield nothing.
    """
    if "." not in path and "[]" not in path:
        value = args.get(path)
        if value is None:
            return
        if isinstance(value, (list, tuple)):
            for i, v in enumerate(value):
                if v is not None:
                    yield f"{path}[{i}]", v
        else:
            yield path, value
        return
    yield from _descend(args, path.split("."), "")


def _descend(obj: Any, parts: list[str], loc: str) -> Iterator[tuple[str, Any]]:
    if not parts:
        if obj is not None:
            yield loc, obj
        return
    head, rest = parts[0], parts[1:]
    many = head.endswith("[]")
    key = head[:-2] if many else head
    if not isinstance(obj, Mapping):
        return
    value = obj.get(key)
    where = f"{loc}.{key}" if loc else key
    if many:
        if isinstance(value, (list, tuple)):
            for i, item in enumerate(value):
                yield from _descend(item, rest, f"{where}[{i}]")
    else:
        yield from _descend(value, rest, where)
