"""Precondition mining: predicates that hold on every accepted call and fail on a class of rejected ones.

The environment labels its own errors: a rejected call comes back with a text ("not enough
seats", "non-delivered order cannot be exchanged") right after arguments and observed
objects the transcript holds. As invariant miners do (Daikon), :class:`Miner` counts, per
tool, which candidate predicates each call satisfies, on the accepted side and per *error
class* (the error text with its ids, numbers and quotes masked). A candidate is kept when
it holds on the accepted calls it can be decided on and fails on rejected calls of a class.

Candidates (a bounded space, each O(the call's arguments) to count):

- **values**: ``args.p`` (a scalar), the leading non-digit part of an id-like text
  (``args.p.startsWith("certificate_")``), its shape (``#W`` then digits), and a field of the
  object an id argument refers to, as last observed (``order.status``) or the length of a
  list field (``size(order.payment_history)``). A value candidate is either *allowed* (the
  accepted calls' few values: ``order.status == "delivered"``) or *banned* (the values only
  rejected calls had: ``!args.payment_id.startsWith("certificate_")``); the shorter one is
  written.
- **relations** between two arguments: equal list lengths, element-wise different lists
  (``zip(args.item_ids, args.new_item_ids).all(p, p[0] != p[1])``), different scalars.

Each kept rule carries a **confidence**, the estimated chance that a call it refuses is one the
environment rejects: ``(r + 1) / (r + a + u + 2)`` with ``r`` the rejected calls it separates,
``a`` the accepted calls it would have refused (counter-examples) and ``u`` the accepted values
seen once (Good-Turing's estimate of how often the next accepted call shows a value never
seen: in an open value space, such as names or prices, one rejected value says little about the
next; 0 for relations). When the error text names what the predicate reads (``"non-delivered
order cannot be exchanged"`` and ``order.status == "delivered"``; ``"certificate cannot be
used"`` and the prefix ``certificate_``; an argument's words), the environment has said why,
and that counts as :data:`NAMED_PRIOR` more rejections on both sides of the ratio. Rules enabled
in the draft are those at or above :attr:`Thresholds.enable_above`.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Final

from . import _values as V
from ._stats import bounded_add

__all__ = ("Candidate", "Miner", "Nested", "Seen", "Side", "error_class", "shape")

MAX_CLASSES: Final = 16
"""Error classes counted per tool (the rest are one class, ``other``)."""
MAX_FEATURES: Final = 256
"""Value features, and relations, counted per tool and side."""
MAX_VALUES: Final = 16
"""Values counted per feature (an allowed set has at most :data:`_MAX_ALLOWED`)."""
_MAX_ALLOWED: Final = 3
_MAX_ARGS: Final = 12
"""Top-level arguments paired for relations."""
_MAX_TEXT: Final = 64
NAMED_PRIOR: Final = 2
"""Rejections an error text that names the predicate's value, field or argument counts as."""
_WORD: Final = re.compile(r"[A-Za-z]{4,}")
_AMOUNTS: Final = frozenset({"enough", "insufficient", "balance", "exceed", "exceeded", "limit", "many", "much"})
"""Words of an error about an amount ("insufficient gift card balance", "not enough seats"): numbers decided it,
so a value that happens to separate its calls (gift cards, a cabin) is no candidate; relations between numbers are."""
_GENERIC: Final = frozenset(
    {"error", "with", "that", "this", "from", "should", "cannot", "have", "been", "than", "more", "less", "found", "none"}
)

_MASKS: Final = (
    (re.compile(r"'[^']*'|\"[^\"]*\""), "'…'"),
    (re.compile(r"(?<![\w#])#?[\w.-]*\d[\w.-]*"), "<id>"),  # tokens with digits: ids, numbers, dates
)
_PREFIX: Final = re.compile(r"^([^0-9]+)[0-9]")
_RUNS: Final = re.compile(r"[0-9]+|[A-Za-z]+|.", re.DOTALL)

Feature = tuple[str, ...]
"""``("arg" | "prefix" | "shape" | "raw", path)``: an argument, its leading non-digit part, its shape (and the
id-like value behind those two, counted to tell many values of one shape from one value repeated);
``("field" | "size" | "each", path, id_key, name)``: a field (or a list field's length) of the object the
argument names, or of each object a list argument names."""
Relation = tuple[str, ...]
"""``("size_eq" | "zip_ne" | "ne", a, b)``: arguments a and b; ``("eq_field", a, path, id_key, f)``: argument a
equals field f of the object argument ``path`` names; ``("member", a, path, id_key, f, k)``: a is the k of an
element of that object's list f."""
Seen = tuple[str, str, Mapping[str, Any], tuple[str, str]]
"""An object a call's id names: (argument path, id key, the record as last observed, (tool, at) that showed it)."""
Nested = tuple[str, str, Mapping[str, Any], str, Mapping[str, Any], tuple[str, str]]
"""An object an id inside a list argument's element names: (path, the id's key, the element, id key, record, (tool, at))."""
_VALUE_KINDS: Final = frozenset({"arg", "prefix", "shape", "field", "size", "each"})
_OBJECT_RELATIONS: Final = frozenset({"eq_field", "member"})
_ELEMENT_RELATIONS: Final = frozenset({"elem_le"})
"""``("elem_le", "payment_methods[].payment_id", id_key, f, x)``: each element's x is at most field f of the
object its id names."""


def error_class(result: Any) -> str:
    """An error result as its class: the first line of its text (or its ``error`` field), ids, numbers and quotes masked."""
    if isinstance(result, Mapping):
        found = next((result[k] for k in result if isinstance(k, str) and V.error_key(k) and result[k]), result)
        text = found if isinstance(found, str) else json.dumps(found, default=str, sort_keys=True)[:200]
    else:
        text = result if isinstance(result, str) else str(result)
    text = (text.strip().splitlines() or [""])[0][:200]
    for pattern, mask in _MASKS:
        text = pattern.sub(mask, text)
    return text[:120] or "(empty)"


def shape(text: str) -> str:
    """A text's shape as a regular expression: digit runs any length, letter runs of 3 or more any letters of
    that case, the rest literal (``#W5199551`` -> ``#W[0-9]+``, ``credit_card_42`` -> ``[a-z]+_[a-z]+_[0-9]+``)."""
    out = []
    for run in _RUNS.findall(text):
        if run.isdigit():
            out.append("[0-9]+")
        elif run.isalpha() and run.isascii() and len(run) > 2:
            out.append("[a-z]+" if run.islower() else "[A-Z]+" if run.isupper() else "[A-Za-z]+")
        else:
            out.append(re.escape(run))
    return "".join(out)


@dataclass(slots=True)
class Side:
    """Counts over one side: the accepted calls of a tool, or its rejected calls of one error class."""

    calls: int = 0
    values: dict[Feature, Counter[Hashable]] = field(default_factory=dict)
    failed: Counter[Relation] = field(default_factory=Counter)
    """Calls on which a relation was false."""
    decided: Counter[Relation] = field(default_factory=Counter)
    """Calls on which a relation could be decided."""
    failed_like: dict[Relation, Counter[str]] = field(default_factory=dict)
    """Object relations -> the leading non-digit parts of the argument where the relation was false."""
    first: str | None = None
    last: str | None = None
    examples: list[str] = field(default_factory=list)

    def count(self, features: Iterable[tuple[Feature, Hashable]], relations: Iterable[tuple[Relation, bool, str | None]]) -> None:
        for feature, value in features:
            counter = self.values.get(feature)
            if counter is None:
                if len(self.values) >= MAX_FEATURES:
                    continue
                counter = self.values[feature] = Counter()
            bounded_add(counter, value, MAX_VALUES)
        for relation, holds, like in relations:
            if relation not in self.decided and len(self.decided) >= MAX_FEATURES:
                continue
            self.decided[relation] += 1
            if not holds:
                self.failed[relation] += 1
                if like is not None and (relation in self.failed_like or len(self.failed_like) < MAX_FEATURES):
                    bounded_add(self.failed_like.setdefault(relation, Counter()), like, MAX_VALUES)


@dataclass(slots=True)
class ToolMining:
    """One tool's counts: accepted calls, and rejected calls by error class."""

    accepted: Side = field(default_factory=Side)
    classes: dict[str, Side] = field(default_factory=dict)
    observers: dict[tuple[str, str], Counter[tuple[str, str]]] = field(default_factory=dict)
    """(argument path, id key) -> (tool, at) of the accepted calls' results that showed the object it names
    (for ``observes``)."""


@dataclass(frozen=True, slots=True)
class Candidate:
    """A predicate that separates one error class from the accepted calls."""

    expr: str
    """CEL: true means the call may run."""
    feature: Feature | Relation
    separated: int
    """Rejected calls of the class on which it is false."""
    support: int
    """Accepted calls on which it was decided."""
    counter: int
    """Accepted calls on which it is false."""
    unseen: int
    """Accepted values seen once (value forms; 0 for relations)."""
    literals: int
    error: str
    """The class: the masked error text it predicts."""
    shown: str
    """What the accepted calls had, for the message."""
    words: tuple[frozenset[str], frozenset[str]] = (frozenset(), frozenset())
    """Words of its values, and of the field or arguments it reads, to match against the error text."""
    named: int = 0
    """2: the error text names one of its values; 1: the field or an argument it reads; 0: neither."""
    allowed: bool = False
    """An allowed set (refuses values never accepted) rather than a banned one."""
    distinct: int = 0
    """Distinct values the accepted calls had (value forms; for a prefix or a shape, the values behind it)."""

    @property
    def confidence(self) -> float:
        """Estimated chance that a call it refuses is rejected by the environment."""
        prior = NAMED_PRIOR if self.named else 0
        return (self.separated + 1 + prior) / (self.separated + self.counter + self.unseen + 2 + prior)


class Miner:
    """Counts candidate predicates per tool, call by call (bounded memory: tools x features x values)."""

    def __init__(self, examples: int) -> None:
        self.tools: dict[str, ToolMining] = {}
        self._examples = examples

    def add(
        self,
        episode: str,
        tool: str,
        args: Mapping[str, Any],
        objects: Iterable[Seen],
        elements: Iterable[Seen],
        nested: Iterable[Nested],
        error: str | None,
        example: str,
    ) -> None:
        """One call that ran: ``error`` is its class (``None``: accepted); ``objects`` those its id arguments
        name, ``elements`` those the ids of its list arguments name, ``nested`` those an id inside an element
        of a list argument names (``payment_methods[].payment_id``)."""
        mining = self.tools.get(tool)
        if mining is None:
            mining = self.tools[tool] = ToolMining()
        if error is None:
            side = mining.accepted
        else:
            if error not in mining.classes and len(mining.classes) >= MAX_CLASSES:
                error = "other"
            side = mining.classes.setdefault(error, Side())
        side.calls += 1
        if side.first is None:
            side.first = episode
        side.last = episode
        if error is not None and len(side.examples) < self._examples:
            side.examples.append(example)
        features = list(_arg_features(args))
        relations = list(_relations(args))
        ids = [(k, v) for k, v in list(args.items())[:_MAX_ARGS] if isinstance(k, str) and V.IDENT.match(k) and V.opaque(v)]
        for path, id_key, record, seen_by in objects:
            if error is None:
                self._observed(mining, (path, id_key), seen_by)
            others = [(a, v) for a, v in ids if a != path]
            for name, value in list(record.items())[:32]:
                if not isinstance(name, str) or not V.IDENT.match(name) or name == id_key:
                    continue
                if isinstance(value, (list, tuple, Mapping)):
                    features.append((("size", path, id_key, name), len(value)))
                    if isinstance(value, list) and others and value and isinstance(value[0], Mapping):
                        relations.extend(_members(others, path, id_key, name, value))
                elif _fact(value):
                    features.append((("field", path, id_key, name), value))
                    if isinstance(value, str) and V.opaque(value):
                        relations.extend((("eq_field", a, path, id_key, name), v == value, _prefix(v)) for a, v in others)
        listed: set[tuple[Feature, Hashable]] = set()
        for path, id_key, record, seen_by in elements:
            if error is None:
                self._observed(mining, (path, id_key), seen_by)
            for name, value in list(record.items())[:32]:
                if isinstance(name, str) and V.IDENT.match(name) and name != id_key and _fact(value):
                    listed.add((("each", path, id_key, name), value))  # one count per call and value
        features.extend(listed)
        bounds: dict[Relation, bool] = {}
        for path, key, item, id_key, record, seen_by in nested:
            if error is None:
                self._observed(mining, (path, id_key), seen_by)
            numbers = [
                (x, v) for x, v in list(item.items())[:16] if x != key and isinstance(x, str) and V.IDENT.match(x) and _number(v)
            ]
            for name, value in list(record.items())[:32]:
                if isinstance(name, str) and V.IDENT.match(name) and _number(value):
                    for x, v in numbers:  # each element's number at most its object's: a balance that covers an amount
                        relation = ("elem_le", path, id_key, name, x)
                        bounds[relation] = bounds.get(relation, True) and v <= value
        relations.extend((r, holds, None) for r, holds in bounds.items())
        side.count(features, relations)

    @staticmethod
    def _observed(mining: ToolMining, at: tuple[str, str], seen_by: tuple[str, str]) -> None:
        observers = mining.observers.get(at)
        if observers is None and len(mining.observers) < MAX_FEATURES:
            observers = mining.observers[at] = Counter()
        if observers is not None:
            bounded_add(observers, seen_by, 8)

    def candidates(self, tool: str, *, min_support: int, min_rejected: int, max_counter: float) -> list[Candidate]:
        """Every predicate that separates an error class of the tool from its accepted calls, best first per class."""
        mining = self.tools.get(tool)
        if mining is None:
            return []
        accepted = mining.accepted
        out: list[Candidate] = []
        for error, side in sorted(mining.classes.items()):
            if side.calls < min_rejected:
                continue
            found: list[Candidate] = []
            for feature, rejected in side.values.items():
                allowed = accepted.values.get(feature)
                if allowed is None or feature[0] == "raw":
                    continue
                raw = accepted.values.get(("raw", feature[1])) if feature[0] in ("prefix", "shape") else allowed
                found.extend(
                    replace(c, distinct=len(raw or ()))
                    for c in _value_candidates(feature, allowed, rejected, error, min_support, min_rejected)
                )
            for relation, failed in side.failed.items():
                support = accepted.decided[relation]
                counter = accepted.failed[relation]
                if failed >= min_rejected and support >= min_support and counter <= max_counter * support:
                    found.append(
                        Candidate(
                            expr=_relation_expr(relation, side.failed_like.get(relation)),
                            feature=relation,
                            separated=failed,
                            support=support,
                            counter=counter,
                            unseen=0,
                            literals=0,
                            error=error,
                            shown=_relation_shown(relation),
                            words=_feature_words(relation, ()),
                        )
                    )
            words = _words(error)
            amounts = bool(words & _AMOUNTS)
            for c in found:
                named = 2 if words & c.words[0] else 1 if words & c.words[1] else 0
                if amounts and c.feature[0] in _VALUE_KINDS:
                    continue
                if named or c.distinct != 1 or c.feature[0] not in ("arg", "prefix", "shape"):
                    out.append(replace(c, named=named))
                # else: every accepted call passed the same value (a corpus of one user name): any rejected call with
                # another one "separates", whatever the environment rejected it for
        out.extend(_named_by_tool(tool, accepted, min_support))
        out.sort(key=lambda c: (-c.confidence, -c.named, -c.separated, c.literals, not c.allowed, c.expr))
        return out


def _named_by_tool(tool: str, accepted: Side, min_support: int) -> Iterable[Candidate]:
    """A field of the named object that had one value, which the tool's name says, on every accepted call
    (``cancel_pending_order`` and ``order.status == "pending"``): the name is the environment's word for the
    precondition, so it counts as :data:`NAMED_PRIOR` rejections even when none was seen."""
    said = _words(tool.replace("_", " "))
    for feature, values in accepted.values.items():
        if feature[0] != "field" or len(values) != 1:
            continue
        (value,) = values
        support = values[value]
        if isinstance(value, str) and support >= min_support and _words(value) and _words(value) <= said:
            yield Candidate(
                expr=_allowed_expr(feature, [value]),
                feature=feature,
                separated=0,
                support=support,
                counter=0,
                unseen=0,
                literals=1,
                error="",
                shown=_shown_value("field", value),
                named=2,
                allowed=True,
            )


def _arg_features(args: Mapping[str, Any]) -> Iterable[tuple[Feature, Hashable]]:
    for name, value in list(args.items())[:_MAX_ARGS]:
        if not isinstance(name, str) or not V.IDENT.match(name):
            continue
        if value is None or isinstance(value, (bool, int, float)):
            yield ("arg", name), value
        elif isinstance(value, str) and len(value) <= _MAX_TEXT:
            if not V.opaque(value):
                yield ("arg", name), value
            if any(c.isdigit() for c in value):
                yield ("prefix", name), _prefix(value)
                yield ("shape", name), shape(value)
                yield ("raw", name), value  # how many values share the prefix and the shape (not a candidate)


def _relations(args: Mapping[str, Any]) -> Iterable[tuple[Relation, bool, str | None]]:
    named = [(k, v) for k, v in list(args.items())[:_MAX_ARGS] if isinstance(k, str) and V.IDENT.match(k)]
    for i, (a, x) in enumerate(named):
        for b, y in named[i + 1 :]:
            if isinstance(x, list) and isinstance(y, list):
                yield ("size_eq", a, b), len(x) == len(y), None
                if len(x) == len(y) and all(_scalar(v) for v in (*x, *y)):
                    yield ("zip_ne", a, b), all(p != q for p, q in zip(x, y, strict=True)), None
            elif isinstance(x, str) and isinstance(y, str) and x and y:
                yield ("ne", a, b), x != y, None


def _words(*texts: Any) -> frozenset[str]:
    found: set[str] = set()
    for text in texts:
        for w in _WORD.findall(str(text)):
            w = w.lower().removesuffix("s")
            if w not in _GENERIC:
                found.add(w)
    return frozenset(found)


def _feature_words(feature: Feature | Relation, values: Iterable[Hashable]) -> tuple[frozenset[str], frozenset[str]]:
    """(words of the values, words of the field or arguments read); a field's object is not one of them."""
    kind = feature[0]
    names = (
        [feature[3]]
        if kind in ("field", "size", "each")
        else [feature[1], *feature[4:]]
        if kind in _OBJECT_RELATIONS
        else [feature[1], feature[3], feature[4]]
        if kind in _ELEMENT_RELATIONS
        else list(feature[1:3])
    )
    return _words(*values), _words(*names)


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _fact(value: Any) -> bool:
    """A field value a predicate may compare: a scalar, a text of at most 64 characters."""
    return value is None or isinstance(value, (bool, int, float)) or (isinstance(value, str) and len(value) <= _MAX_TEXT)


def _prefix(value: str) -> str:
    m = _PREFIX.match(value)
    return m.group(1) if m else ""


def _members(
    others: list[tuple[str, Any]], path: str, id_key: str, name: str, items: list[Any]
) -> Iterable[tuple[Relation, bool, str | None]]:
    """For each key of the list's records holding ids, whether each id argument is one of them."""
    keys = [k for k in list(items[0])[:8] if isinstance(k, str) and V.IDENT.match(k) and V.opaque(items[0][k])]
    for k in keys:
        held = {e.get(k) for e in items[:64] if isinstance(e, Mapping)}
        for a, v in others:
            yield ("member", a, path, id_key, name, k), v in held, _prefix(v)


def object_of(feature: Feature | Relation) -> tuple[str, str] | None:
    """(argument path, id key) of the object a feature or relation reads, if any."""
    if feature[0] in ("field", "size", "each"):
        return feature[1], feature[2]
    if feature[0] in _OBJECT_RELATIONS:
        return feature[2], feature[3]
    if feature[0] in _ELEMENT_RELATIONS:
        return feature[1], feature[2]
    return None


def _scalar(value: Any) -> bool:
    return isinstance(value, (str, int, float)) and not isinstance(value, bool)


def _value_candidates(
    feature: Feature, allowed: Counter[Hashable], rejected: Counter[Hashable], error: str, min_support: int, min_rejected: int
) -> Iterable[Candidate]:
    """The allowed and the banned form of a value feature (exact: an accepted value is never banned, never outside
    the allowed set)."""
    support = sum(allowed.values())
    banned = sorted((v for v in rejected if v not in allowed), key=_sort_key)
    if support < min_support or sum(rejected[v] for v in banned) < min_rejected:
        return
    kind = feature[0]
    unseen = sum(1 for n in allowed.values() if n == 1)  # an open value space: one rejection says little

    def candidate(values: list[Hashable], separated: int, allowing: bool) -> Candidate:
        shown = " or ".join(_shown_value(kind, v) for v in values)
        return Candidate(
            expr=(_allowed_expr if allowing else _banned_expr)(feature, values),
            feature=feature,
            separated=separated,
            support=support,
            counter=0,
            unseen=unseen,
            literals=len(values),
            error=error,
            shown=shown if allowing else f"not {shown}",
            words=_feature_words(feature, values),
            allowed=allowing,
        )

    if len(allowed) <= _MAX_ALLOWED:  # the accepted calls' few values: a new value is refused
        yield candidate(sorted(allowed, key=_sort_key), sum(rejected[v] for v in banned), True)
    if kind != "arg" or not any(isinstance(v, str) and V.opaque(v) for v in banned):
        values = banned[:_MAX_ALLOWED]  # only what rejected calls had: a new value runs
        separated = sum(rejected[v] for v in values)
        if separated >= min_rejected:
            yield candidate(values, separated, False)


def _sort_key(value: Hashable) -> tuple[str, str]:
    return (type(value).__name__, repr(value))


def subject(feature: Feature) -> str:
    """The CEL the feature reads: ``args.p``, ``order.status``, ``size(order.payment_history)``."""
    kind = feature[0]
    if kind in ("arg", "prefix", "shape"):
        return f"args.{feature[1]}"
    obj = f"{{{feature[1]}}}"  # filled with the let variable (the object name for "each") by the builder
    if kind == "each":
        return f'seen("{obj}", i).{feature[3]}'
    return f"size({obj}.{feature[3]})" if kind == "size" else f"{obj}.{feature[3]}"


def _one(feature: Feature, value: Hashable) -> str:
    s = subject(feature)
    kind = feature[0]
    if kind == "prefix":
        return f"{s}.startsWith({literal(value)})"
    if kind == "shape":
        return f"{s}.matches({literal('^' + str(value) + '$')})"
    return f"{s} == {literal(value)}"


def _each(feature: Feature, expr: str) -> str:
    """A predicate over each element of a list argument (``i``: one of its ids)."""
    return f"args.{feature[1]}.all(i, {expr})" if feature[0] == "each" else expr


def _allowed_expr(feature: Feature, values: list[Hashable]) -> str:
    return _each(feature, _allowed(feature, values))


def _banned_expr(feature: Feature, values: list[Hashable]) -> str:
    return _each(feature, _banned(feature, values))


def _allowed(feature: Feature, values: list[Hashable]) -> str:
    s, kind = subject(feature), feature[0]
    if kind in ("prefix", "shape"):
        return f"type({s}) != string || " + " || ".join(_one(feature, v) for v in values)
    if len(values) == 1:
        return _one(feature, values[0])
    return f"{s} in [{', '.join(literal(v) for v in values)}]"


def _banned(feature: Feature, values: list[Hashable]) -> str:
    s, kind = subject(feature), feature[0]
    if kind in ("prefix", "shape"):
        return f"type({s}) != string || !(" + " || ".join(_one(feature, v) for v in values) + ")"
    if len(values) == 1:
        return f"{s} != {literal(values[0])}"
    return f"!({s} in [{', '.join(literal(v) for v in values)}])"


def _shown_value(kind: str, value: Hashable) -> str:
    if kind == "prefix":
        return f"a value starting {literal(value)}"
    if kind == "shape":
        return f"a value shaped {value}"
    return literal(value)


def _relation_expr(relation: Relation, like: Counter[str] | None = None) -> str:
    """The relation in CEL; an object relation refuses only ids like those it was false on in rejected calls
    (``|| !args.a.startsWith("credit_card_")``): an id of another kind may follow another rule."""
    rel, a, b = relation[:3]
    if rel in _ELEMENT_RELATIONS:
        listed, key = a.split("[].", 1)
        f, x = relation[3], relation[4]
        seen = f'seen("{{{a}}}", p.{key}).{f}'
        return f"args.{listed}.all(p, !has({seen}) || {seen} >= p.{x})"
    if rel in _OBJECT_RELATIONS:
        expr = (
            f"args.{a} == {{{b}}}.{relation[4]}"
            if rel == "eq_field"
            else f"{{{b}}}.{relation[4]}.exists(e, e.{relation[5]} == args.{a})"
        )
        if not like or "" in like or len(like) > _MAX_ALLOWED:
            return expr
        starts = " || ".join(f"args.{a}.startsWith({literal(p)})" for p in sorted(like))
        return f"{expr} || !(type(args.{a}) == string && ({starts}))"
    if rel == "size_eq":
        return f"size(args.{a}) == size(args.{b})"
    if rel == "zip_ne":
        return f"zip(args.{a}, args.{b}).all(p, p[0] != p[1])"
    return f"args.{a} != args.{b}"


def _relation_shown(relation: Relation) -> str:
    rel, a, b = relation[:3]
    if rel in _ELEMENT_RELATIONS:
        return f"each {relation[4]} of {a.split('[].', 1)[0]} at most the {relation[3]} of its {a.split('[].', 1)[1]}"
    if rel == "eq_field":
        return f"{a} equal to its {relation[4]}"
    if rel == "member":
        return f"{a} among the {relation[5]} of its {relation[4]}"
    if rel == "size_eq":
        return f"as many {a} as {b}"
    if rel == "zip_ne":
        return f"each of {a} different from its {b}"
    return f"{a} different from {b}"


def literal(value: Any) -> str:
    """A value as a CEL literal."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    return repr(value)
