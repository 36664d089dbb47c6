"""From the learner's counts to a spec file: which regularities become rules, and their evidence.

- **References**: an argument whose accepted values were id-like and, at least
  ``min_confidence`` of the time, returned by an earlier accepted result (or said by the
  user: ``user: true``). The producing (tool, result key) pairs are chosen by a greedy set
  cover (at most ``max_producers``); arguments that share a producer share a kind, named
  after the producer's key when it names an id (``order_id``), else after the argument.
  A producer can bind a kind from one key only (``produces: {kind: key}``); when two keys
  compete, the one that explains more calls stays and arguments that then fall below the
  confidence are dropped (one pass: dropping never changes another argument's producers).
  Producers the cover did not need but that returned the values too under a key naming an
  id, or as their answer, are kept as well (up to ``max_producers``): the next episode may
  take its value from them; so are tools whose results hold the kind under its own name, and
  answering tools named after the kind (``find_user_id_by_email``).
- **Whole results**: a tool whose accepted results are bare texts or integers produces with
  ``"."`` (the answer is the reference); one whose results are objects keyed by names
  (``{"T-Shirt": "9523456873", ...}``: texts and integers only, no key naming an id, at least
  ``min_distinct`` keys that are not identifiers or that vary between results) produces with
  ``"*"`` (every value). Values returned where neither can name them hold the reference
  back, with a note (a later episode could take its value from there and be refused).
- **Grounded / derived**: a non-reference argument whose values the user had said (strings,
  and numbers of 100 or more: smaller ones are counts written as words) is grounded; values
  that only came
  from results are left to references, since a fact the agent looked up once may come from
  anywhere next time; it needs ``min_distinct`` different values (a fact seen k times is
  missed next time with a chance of about 1/(k+2)). A number that was not seen but is the sum, difference, product or
  quotient of two numbers seen recently (the runtime's own test,
  :meth:`TrackedState.derivation`) gets ``grounded: derived``.
- **Invalidations**: a reference argument whose values were, after an accepted call, used
  again and rejected (``min_support`` times) and never accepted again.
- **Errors**: a result shape marked as an error (or reading as one, in unmarked
  transcripts) ``min_support`` times and never on an accepted result; shared by two or more
  tools it goes to ``defaults``.
- **Access**: ``write`` when an object read before and after a call of the tool changed,
  else what the name or description says.
- **Preconditions** (:mod:`prefixmon.learn._mining`): per tool and error class, the predicates
  over arguments and the objects they name that hold on the accepted calls and fail on at
  least ``min_rejected`` rejected calls of the class; the best per class is written in CEL
  with the ``let`` and ``observes`` it needs, enabled when its confidence reaches
  ``enable_above`` (else a disabled suggestion).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from ..rules.specfile import SCHEMA, ArgRule, ErrorRule, Evidence, ObserveRule, RequireRule, SpecFile, ToolRules
from ..toolset import Toolset
from . import _values as V
from ._access import prior_access, words
from ._mining import Candidate, Miner, object_of
from ._stats import EVERY, GIVEN, WHOLE, ArgStats, InvalidationStats, ShapeStats, Tally, ToolStats


class _Thresholds(Protocol):
    @property
    def min_support(self) -> int: ...
    @property
    def min_confidence(self) -> float: ...
    @property
    def min_rejected(self) -> int: ...
    @property
    def examples(self) -> int: ...
    @property
    def max_producers(self) -> int: ...
    @property
    def min_distinct(self) -> int: ...
    @property
    def enable_above(self) -> float: ...


class _Notes(Protocol):
    notes: list[str]


class Learner(Protocol):
    """What the builder reads of a :class:`prefixmon.learn.Learner` (a protocol: the learner imports this module)."""

    tools: Toolset | None
    tool_stats: dict[str, ToolStats]
    args: dict[tuple[str, str], ArgStats]
    invalidations: dict[tuple[str, str], InvalidationStats]
    shapes: dict[V.Shape, ShapeStats]
    miner: Miner

    @property
    def thresholds(self) -> _Thresholds: ...
    @property
    def stats(self) -> _Notes: ...


__all__ = ("build_spec",)

_GENERIC_KEYS: Final = frozenset({"id", "ids", "key", "keys", "value", "values", "name", "result", "results", "data", "items"})
_RESERVED: Final = frozenset({"args", "const", "true", "false", "null", "in"})
_MAX_PRECONDITIONS: Final = 3
"""Learned preconditions written per tool at most (the best of each error class first)."""

Source = tuple[str, str]
Arg = tuple[str, str]


_HIDDEN: Final = ("<unexpressible>", "")
"""A source no ``produces`` entry can name (a whole result or object values of a tool that is neither an answer
nor a mapping keyed by names)."""


@dataclass(slots=True)
class _View:
    """An argument's producers as spec/1 can write them (``.`` and ``*`` only for tools whose results bind that way)."""

    sources: Counter[Source]
    sets: Counter[frozenset[Source]]
    seen: dict[Source, list[str]]
    """Source -> [first episode, last episode, examples...]."""
    hidden: int = 0
    """Calls whose value also came back where produces cannot name it."""
    only_hidden: int = 0
    """Calls whose value came back only there."""
    hidden_by: set[str] = field(default_factory=set)
    """Tools that returned the values where produces cannot name them."""


@dataclass(slots=True)
class _Ref:
    stats: ArgStats
    view: _View
    chosen: list[Source]
    covered: int
    coverage: Counter[Source] = field(default_factory=Counter)
    kind: str = ""


def build_spec(learner: Learner) -> SpecFile:
    """The spec file the learner's counts support."""
    modes = _whole_results(learner)
    refs = _references(learner, modes)
    rules: dict[str, dict[str, Any]] = {name: {} for name in sorted(learner.tool_stats)}

    def tool(name: str) -> dict[str, Any]:
        return rules.setdefault(name, {})

    for (name, path), ref in sorted(refs.items()):
        # the user may state what the corpus's users looked up (a user id, an order number): never a refusal
        tool(name).setdefault("args", {})[path] = ArgRule(ref=ref.kind, user=True, evidence=ref.stats.ref.evidence())
    keep = learner.thresholds.examples
    produced: dict[tuple[str, str], tuple[str, int, str | None, str | None, list[str]]] = {}
    for _, ref in sorted(refs.items()):
        for source in ref.chosen:
            key, n = source[1], ref.view.sources[source]  # the calls whose value it returned
            seen = ref.view.seen.get(source, [])
            found = produced.get((source[0], ref.kind))
            if found is None:
                why = [modes[source[0]][1]] if key in (WHOLE, EVERY) else []  # why the result binds as a whole
                first, last = (seen[0], seen[1]) if seen else (None, None)
                produced[(source[0], ref.kind)] = (key, n, first, last, [*why, *seen[2:][:keep]])
            elif found[0] == key:
                examples = found[4] + [e for e in seen[2:] if e not in found[4]]
                produced[(source[0], ref.kind)] = (key, found[1] + n, found[2], found[3], examples)
    for (producer, kind), (key, n, reason) in _potential_producers(learner, refs, produced, modes).items():
        produced[(producer, kind)] = (key, n, None, None, [reason])
    for (producer, kind), (key, n, first, last, examples) in sorted(produced.items()):
        if producer == GIVEN:
            continue  # held before the episode (bindings), not produced by a tool
        entry = tool(producer)
        entry.setdefault("produces", {})[kind] = key
        entry.setdefault("evidence_for", {})[f"produces.{kind}"] = Evidence(
            support=n,
            first_seen=first,
            last_seen=last,
            examples=tuple(examples[: keep + (key in (WHOLE, EVERY))]) if keep else (),
        )
    _unobserved_producers(learner, refs)
    _grounding(learner, refs, tool)
    _invalidations(learner, refs, tool)
    defaults = _errors(learner, tool)
    _access(learner, tool)
    _preconditions(learner, refs, tool)
    data: dict[str, Any] = {"schema": SCHEMA, "tools": {n: ToolRules.model_validate(r) for n, r in sorted(rules.items())}}
    if defaults:
        data["defaults"] = {"errors": defaults}
    return SpecFile.model_validate(data)


# -- references ----------------------------------------------------------------------------------
def _whole_results(learner: Learner) -> dict[str, tuple[str, str]]:
    """Tools whose results bind as a whole, with why: ``.`` (answers) or ``*`` (mappings keyed by names).

    ``.``: at least ``min_confidence`` of the tool's accepted results were a bare text or
    integer (``find_user_id_by_email`` -> ``'sara_doe_496'``). ``*``: as many were objects of
    texts and integers only, none of them had a key that names an id (that is a record: its
    id key is the producer), at least ``min_distinct`` different keys were seen, and the keys
    are names, not fields: half of them or more are not identifiers (``T-Shirt``, ``Office
    Chair``), or they vary between results (at least twice as many keys over all results as
    the most one result had). Which values later calls used as a kind decides the rest.
    """
    th = learner.thresholds
    out: dict[str, tuple[str, str]] = {}
    for name, ts in learner.tool_stats.items():
        if not ts.results:
            continue
        if ts.answers and ts.answers / ts.results >= th.min_confidence:
            out[name] = (WHOLE, f"{name} answers with a bare value ({ts.answers} of {ts.results} accepted results)")
            continue
        if not ts.flat or ts.flat / ts.results < th.min_confidence or ts.flat_with_id:
            continue
        distinct = len(ts.flat_keys)
        if distinct < th.min_distinct and not ts.flat_keys_full:
            continue
        names = sum(not V.IDENT.match(k) for k in ts.flat_keys)
        varying = ts.flat_keys_full or distinct >= 2 * ts.most_keys
        if 2 * names >= distinct or varying:
            more = "+" if ts.flat_keys_full else ""
            why = (
                f"{name} returns objects keyed by names ({ts.flat} of {ts.results} accepted results; {distinct}{more} "
                f"different keys, {names} not identifiers, at most {ts.most_keys} in one result; none names an id)"
            )
            out[name] = (EVERY, why)
    return out


def _view(learner: Learner, stats: ArgStats, modes: Mapping[str, tuple[str, str]]) -> _View:
    """The argument's producers as spec/1 writes them: keys of a mapping keyed by names become ``*``; a whole
    result or object value of a tool that binds neither way cannot be named."""

    def where(source: Source) -> Source:
        tool, key = source
        if tool == GIVEN:
            return source
        mode = modes.get(tool, ("", ""))[0]
        if key == WHOLE:
            return source if mode == WHOLE else _HIDDEN
        if mode == EVERY:
            ts = learner.tool_stats[tool]
            return (tool, EVERY) if key == EVERY or key in ts.flat_keys or ts.flat_keys_full else source
        return _HIDDEN if key == EVERY else source

    view = _View(sources=Counter(), sets=Counter(), seen={})
    for source, n in stats.sources.items():
        mapped = where(source)
        view.sources[mapped] += n
        if mapped == _HIDDEN:
            view.hidden_by.add(source[0])
    for sources, n in stats.source_sets.items():
        places = frozenset(where(s) for s in sources)
        view.sets[places] += n
        if _HIDDEN in places:
            if len(places) > 1:
                view.hidden += n
            else:
                view.only_hidden += n
    for source, seen in stats.source_seen.items():
        found = view.seen.setdefault(where(source), [*seen[:2]])
        found[1] = seen[1]
        found.extend(e for e in seen[2:] if e not in found)
    view.sources.pop(_HIDDEN, None)
    return view


def _hidden_where(view: _View, elsewhere: bool) -> str:
    """Where values came back that produces cannot name, for a note (``elsewhere``: also inside results)."""
    parts = [f"{name}: its results are not all bare answers, nor objects keyed by names" for name in sorted(view.hidden_by)]
    if elsewhere or not parts:
        parts.append("in a list of values, or under a key that is not a name inside a result")
    return "; ".join(parts)


def _cover(view: _View, limit: int) -> tuple[list[Source], int, Counter[Source]]:
    """Greedy set cover of the calls by producers: (chosen, calls covered, calls each chosen one covers)."""
    remaining = {s - {_HIDDEN}: n for s, n in view.sets.items()}
    chosen: list[Source] = []
    coverage: Counter[Source] = Counter()
    covered = 0
    while remaining and len(chosen) < limit:
        score: Counter[Source] = Counter()
        for sources, n in remaining.items():
            for source in sources:
                score[source] += n
        if not score:
            break
        best = min(score, key=lambda s: (-score[s], s))
        chosen.append(best)
        coverage[best] = score[best]
        covered += score[best]
        remaining = {s: n for s, n in remaining.items() if best not in s}
    # Producers the cover did not need but that returned these values too, under a key that
    # names an id or as their answer: the next episode may take its value from them.
    for source, n in sorted(view.sources.items(), key=lambda kv: (-kv[1], kv[0])):
        if len(chosen) >= limit:
            break
        if source not in chosen and (source[0] == GIVEN or source[1] in (WHOLE, EVERY) or V.names_an_id(source[1])):
            chosen.append(source)
            coverage[source] = n
    return chosen, covered, coverage


def _references(learner: Learner, modes: Mapping[str, tuple[str, str]]) -> dict[Arg, _Ref]:
    th = learner.thresholds
    refs: dict[Arg, _Ref] = {}
    for arg, stats in learner.args.items():
        n = stats.accepted
        if n < th.min_support or stats.id_like < n or stats.bound == 0 or stats.ref.confidence < th.min_confidence:
            continue
        named = V.names_an_id(arg[1].rsplit(".", 1)[-1].removesuffix("[]"))
        if not named and (stats.opaque < n or len(stats.distinct) < 2):
            continue  # returned earlier, but a fact (a zip code, a state) or a constant, not a handle
        view = _view(learner, stats, modes)
        hidden = stats.co_unexpressible + view.hidden
        if hidden:
            learner.stats.notes.append(
                f"{arg[0]}.{arg[1]}: not written as a reference: {hidden} of its values were also returned "
                f"where produces cannot name them ({_hidden_where(view, stats.co_unexpressible > 0)})"
            )
            continue
        refs[arg] = _Ref(stats=stats, view=view, chosen=[], covered=0)
    for arg, ref in list(refs.items()):
        ref.chosen, ref.covered, ref.coverage = _cover(ref.view, th.max_producers)
        if not ref.chosen or (ref.covered + ref.stats.user) / ref.stats.accepted < th.min_confidence:
            if ref.view.only_hidden:
                learner.stats.notes.append(
                    f"{arg[0]}.{arg[1]}: not written as a reference: {ref.view.only_hidden} of its values were returned "
                    f"only where produces cannot name them ({_hidden_where(ref.view, False)})"
                )
            del refs[arg]
    for members, sources in _components(refs):
        kind = _kind_name(members, sources)
        for arg in members:
            refs[arg].kind = kind
    # A producer binds a kind from one key (produces: {kind: key}): where two keys compete, the
    # one that explains more calls stays; calls only the other explained are then uncovered.
    keys: dict[tuple[str, str], Counter[str]] = {}
    for ref in refs.values():
        for (producer, key), n in ref.coverage.items():
            keys.setdefault((producer, ref.kind), Counter())[key] += n
    emitted = {pk: min(c, key=lambda k: (-c[k], k)) for pk, c in keys.items()}
    for arg, ref in list(refs.items()):
        allowed = {s for s in ref.chosen if emitted.get((s[0], ref.kind)) == s[1]}
        covered = sum(n for sources, n in ref.view.sets.items() if sources & allowed)
        if (covered + ref.stats.user) / ref.stats.accepted < th.min_confidence:
            del refs[arg]
            continue
        ref.chosen = [s for s in ref.chosen if s in allowed]
        ref.coverage = Counter({s: n for s, n in ref.coverage.items() if s in allowed})
        ref.covered = covered
    kinds = {ref.kind for ref in refs.values()}
    empty = _View(sources=Counter(), sets=Counter(), seen={})
    for arg, stats in learner.args.items():
        # Ids of a known kind that the user always stated (an access token given in the request).
        n = stats.accepted
        leaf = _leaf(arg[1])
        if arg in refs or n < th.min_support or stats.id_like < n or stats.bound or leaf not in kinds or stats.unexpressible:
            continue
        if V.names_an_id(leaf) and stats.user / n >= th.min_confidence:
            refs[arg] = _Ref(stats=stats, view=empty, chosen=[], covered=0, kind=leaf)
    return refs


_GENERIC_WORDS: Final = frozenset({"details", "detail", "info", "information", "status", "history", "list", "all", "by", "of"})


def _potential_producers(
    learner: Learner,
    refs: Mapping[Arg, _Ref],
    produced: Mapping[tuple[str, str], Any],
    modes: Mapping[str, tuple[str, str]],
) -> dict[tuple[str, str], tuple[str, int, str]]:
    """Producers no observed use needed, which the next episode may take its value from (more producers never
    refuse more): tools whose results hold a learned kind under its own name (``card_id``) or under a key that
    produces it elsewhere (``orders``, as ``get_user_details`` returns them), under ``id`` when
    the tool is named after the kind's object (``create_ticket`` -> ``ticket_id``), or as their bare answer
    when the tool is named after the kind (``find_user_id_by_email`` -> ``user_id``)."""
    kinds = {ref.kind for ref in refs.values()}
    keys_of: dict[str, set[str]] = {}
    for (producer, kind), (key, *_) in produced.items():
        if producer != GIVEN and key not in (WHOLE, EVERY) and key != kind:
            keys_of.setdefault(kind, set()).add(key)
    out: dict[tuple[str, str], tuple[str, int, str]] = {}
    for name, stats in sorted(learner.tool_stats.items()):
        used = {key for (producer, _), (key, *_) in produced.items() if producer == name}
        said = words(name)
        named = [w.removesuffix("s") for w in said if w not in _GENERIC_WORDS]
        answers = modes.get(name, ("", ""))[0] == WHOLE
        for kind in sorted(kinds):
            if (name, kind) in produced:
                continue
            elsewhere = sorted(k for k in keys_of.get(kind, ()) if k in stats.result_keys and k not in used)
            if kind in stats.result_keys and kind not in used:
                out[(name, kind)] = (kind, stats.result_keys[kind], f"{name} returns {kind}, named like the {kind}s")
                used.add(kind)
            elif elsewhere:  # modify_user_address returns the user's orders as get_user_details does
                key = elsewhere[0]
                out[(name, kind)] = (key, stats.result_keys[key], f"{name} returns {key}, where other tools return {kind}s")
                used.add(key)
            elif "id" in stats.result_keys and "id" not in used and named and named[-1] == _object_name(kind):
                out[(name, kind)] = ("id", stats.result_keys["id"], f"{name} returns id, named like the {kind}s")
                used.add("id")
            elif answers and WHOLE not in used and _says(said, words(kind)):
                out[(name, kind)] = (WHOLE, stats.answers, f"{modes[name][1]}, and its name says {kind}")
                used.add(WHOLE)
    return out


def _says(said: list[str], kind: list[str]) -> bool:
    """Whether a tool's name words hold a kind's words in a row (``find_user_id_by_email`` holds ``user_id``; a
    one-word kind such as ``id`` says too little)."""
    n = len(kind)
    return n > 1 and any(said[i : i + n] == kind for i in range(len(said) - n + 1))


def _unobserved_producers(learner: Learner, refs: Mapping[Arg, _Ref]) -> None:
    """Notes for declared tools the corpus never ran that may return a learned kind (named after its object)."""
    if learner.tools is None:
        return
    ran = {name for name, stats in learner.tool_stats.items() if stats.accepted}
    objects = {ref.kind: _object_name(ref.kind) for ref in refs.values()}
    for spec in sorted(learner.tools, key=lambda s: s.name):
        if spec.name in ran:
            continue
        said = {w.removesuffix("s") for w in words(spec.name)}
        for kind, obj in sorted(objects.items()):
            if obj.split("_")[-1] in said:
                learner.stats.notes.append(
                    f"{spec.name} never ran in the corpus, and its name suggests it returns {obj}s: if it returns {kind} "
                    f"values, add it to the producers of {kind} (produces), or calls with them are refused"
                )


def _leaf(path: str) -> str:
    """The argument's own name: ``flights[].flight_number`` -> ``flight_number``, ``item_ids`` -> ``item_id``."""
    leaf = path.rsplit(".", 1)[-1].removesuffix("[]")
    return leaf[:-1] if leaf.endswith("_ids") else leaf


def _components(refs: Mapping[Arg, _Ref]) -> list[tuple[list[Arg], Counter[Source]]]:
    """Arguments joined by shared producers (union-find), each with its producers' coverage."""
    parent: dict[Any, Any] = {}

    def find(x: Any) -> Any:
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for arg, ref in refs.items():
        for source in ref.chosen:
            parent[find(("arg", arg))] = find(("src", source))
        find(("arg", arg))
    groups: dict[Any, tuple[list[Arg], Counter[Source]]] = {}
    for arg, ref in sorted(refs.items()):
        members, sources = groups.setdefault(find(("arg", arg)), ([], Counter()))
        members.append(arg)
        sources.update(ref.coverage)
    return list(groups.values())


def _kind_name(members: list[Arg], sources: Counter[Source]) -> str:
    """A kind named after what the episode was given (``bindings`` use the name), else the producers' key when it
    names an id (``order_id``), else after the arguments."""
    given: Counter[str] = Counter({key: n for (producer, key), n in sources.items() if producer == GIVEN})
    if given:
        return min(given, key=lambda k: (-given[k], k))
    keys: Counter[str] = Counter()
    for (_, key), n in sources.items():
        if key.lower() not in _GENERIC_KEYS and V.names_an_id(key):
            keys[key] += n
    if keys:
        return min(keys, key=lambda k: (-keys[k], k))
    leaves: Counter[str] = Counter(_leaf(path) for _, path in members)
    return min(leaves, key=lambda k: (-leaves[k], k))


# -- grounding ---------------------------------------------------------------------------------------
def _grounding(learner: Learner, refs: Mapping[Arg, _Ref], tool: Any) -> None:
    th = learner.thresholds
    for (name, path), stats in sorted(learner.args.items()):
        n = stats.accepted
        if (name, path) in refs or n < th.min_support or stats.booleans or stats.empty or _constrained(learner, name, path):
            continue
        seen = stats.grounded.support
        said = stats.said
        if said.support + said.counter == n and said.confidence >= th.min_confidence and len(stats.distinct) >= th.min_distinct:
            tool(name).setdefault("args", {})[path] = ArgRule(grounded=True, evidence=said.evidence())
        elif stats.numbers == n and stats.derived.support and (seen + stats.derived.support) / n >= th.min_confidence:
            evidence = stats.derived.evidence(counter=n - seen - stats.derived.support)
            tool(name).setdefault("args", {})[path] = ArgRule(grounded="derived", evidence=evidence)


def _constrained(learner: Learner, name: str, path: str) -> bool:
    """Whether the schema fixes the argument's values (``enum``, ``const``): a choice, not a fact."""
    spec = learner.tools.get(name) if learner.tools is not None else None
    node: Any = spec.parameters if spec is not None else None
    for part in path.split("."):
        many = part.endswith("[]")
        part = part.removesuffix("[]")
        props = node.get("properties") if isinstance(node, Mapping) else None
        node = props.get(part) if isinstance(props, Mapping) else None
        if many and isinstance(node, Mapping):
            node = node.get("items")
        if node is None:
            return False
    if isinstance(node, Mapping) and isinstance(node.get("items"), Mapping) and "." not in path and "[]" not in path:
        items = node["items"]
        if "enum" in items or "const" in items:
            return True
    return isinstance(node, Mapping) and ("enum" in node or "const" in node)


# -- invalidations --------------------------------------------------------------------------------------
def _invalidations(learner: Learner, refs: Mapping[Arg, _Ref], tool: Any) -> None:
    th = learner.thresholds
    found: dict[tuple[str, str], Tally] = {}
    for (name, path), stats in sorted(learner.invalidations.items()):
        ref = refs.get((name, path))
        t = stats.tally
        if ref is None or t.support < th.min_support or t.confidence < th.min_confidence:
            continue
        found[(name, ref.kind)] = t
    for (name, kind), t in sorted(found.items()):
        # The runtime invalidates every reference argument of the kind: none of them may disagree.
        others = [learner.invalidations.get(arg) for arg, ref in refs.items() if arg[0] == name and ref.kind == kind]
        if any(o is not None and o.tally.counter and o.tally.confidence < th.min_confidence for o in others):
            continue
        entry = tool(name)
        entry["invalidates"] = (*entry.get("invalidates", ()), kind)
        entry.setdefault("evidence_for", {})[f"invalidates.{kind}"] = t.evidence()


# -- error results -----------------------------------------------------------------------------------------
def _errors(learner: Learner, tool: Any) -> list[ErrorRule]:
    th = learner.thresholds
    defaults: list[ErrorRule] = []
    for shape, stats in sorted(learner.shapes.items(), key=lambda kv: _shape_order(kv[0])):
        t = stats.error
        if t.support < th.min_support or t.confidence < th.min_confidence:
            continue
        kind, what, value = shape
        evidence = t.evidence()
        if kind == "text":
            rule = ErrorRule(text=what, evidence=evidence)
        elif kind == "is_error":
            rule = ErrorRule(is_error=bool(value), evidence=evidence)
        else:
            rule = ErrorRule.model_validate({"json": what, "equals": value, "evidence": evidence})
        if len(stats.tools) >= 2:
            defaults.append(rule)
        else:
            (name,) = stats.tools
            entry = tool(name)
            entry["errors"] = (*entry.get("errors", ()), rule)
    return defaults


def _shape_order(shape: V.Shape) -> tuple[str, str, str]:
    return (shape[0], shape[1], json.dumps(shape[2]))


# -- read / write ----------------------------------------------------------------------------------------------
def _access(learner: Learner, tool: Any) -> None:
    th = learner.thresholds
    for name, stats in sorted(learner.tool_stats.items()):
        changed, unchanged = stats.access.changed, stats.access.unchanged
        spec = learner.tools.get(name) if learner.tools is not None else None
        prior = prior_access(name, spec.description if spec is not None else "")
        why = f"{name}: its name says {prior}"
        if changed.support:
            access, evidence = "write", changed.evidence(counter=unchanged.support)
        elif prior is not None:
            agree = unchanged if prior == "read" else changed
            examples = (why, *agree.examples)[: max(th.examples, 1)]
            evidence = Evidence(
                support=agree.support, first_seen=agree.first, last_seen=agree.last, examples=examples if th.examples else ()
            )
            access = prior
        elif unchanged.support >= th.min_support:
            access, evidence = "read", unchanged.evidence()
        else:
            continue
        entry = tool(name)
        entry["access"] = access
        entry["evidence"] = evidence


# -- candidate preconditions -------------------------------------------------------------------------------------
def _object_name(kind: str) -> str:
    for suffix in ("_ids", "_id", "_number", "_code", "_key", "Id", "ID"):
        if kind.endswith(suffix) and len(kind) > len(suffix):
            name = kind[: -len(suffix)]
            break
    else:
        name = f"{kind}_object"
    return name if V.IDENT.match(name) and name not in _RESERVED else f"{name}_object"


def _preconditions(learner: Learner, refs: Mapping[Arg, _Ref], tool: Any) -> None:
    th = learner.thresholds
    for name in sorted(learner.miner.tools):
        mining = learner.miner.tools[name]
        written: dict[str, int] = {}
        classes: set[str] = set()
        entry = tool(name)
        lets: dict[str, Any] = dict(entry.get("let", {}))
        requires: list[dict[str, Any]] = []
        for c in learner.miner.candidates(
            name, min_support=th.min_support, min_rejected=th.min_rejected, max_counter=1 - th.min_confidence
        ):
            if c.error in classes:
                continue  # the class has its best rule
            if c.expr in written:  # one predicate, several classes
                classes.add(c.error)
                rule = requires[written[c.expr]]
                if c.error:
                    predicts = (*rule["evidence"].predicts, c.error)[:_MAX_PRECONDITIONS]
                    rule["evidence"] = rule["evidence"].model_copy(update={"predicts": predicts})
                continue
            if len(requires) >= _MAX_PRECONDITIONS:
                break
            at = object_of(c.feature)
            placed = _place(c, refs, name, lets, mining.observers.get(at) if at else None)
            if placed is None:
                continue
            expr, message, observes = placed
            classes.add(c.error)
            side = mining.classes.get(c.error)
            seen = (
                (f"{c.separated} of {side.calls} rejected call(s): {c.error}", *side.examples)
                if side is not None
                else (f"no rejected call; the tool's name says {c.shown}",)
            )
            written[c.expr] = len(requires)
            requires.append(
                {
                    "expr": expr,
                    "name": _rule_name(c, {r["name"] for r in requires}),
                    "message": message,
                    "enabled": c.confidence >= th.enable_above,
                    "suggested": True,
                    "evidence": Evidence(
                        support=c.support,
                        counter_examples=c.counter,
                        first_seen=mining.accepted.first,
                        last_seen=mining.accepted.last,
                        confidence=round(c.confidence, 3),
                        predicts=(c.error,) if c.error else (),
                        examples=seen[: th.examples + 1] if th.examples else (),
                    ),
                }
            )
            for producer, observe in observes:
                _observe(tool(producer), observe)
        if requires:
            if lets:
                entry["let"] = lets
            entry["requires"] = (*entry.get("requires", ()), *(RequireRule.model_validate(r) for r in requires))


def _rule_name(c: Candidate, taken: set[str]) -> str:
    """``learned_status``, ``learned_payment_id_2``: what the rule reads."""
    f = c.feature
    read = f[3] if f[0] in ("field", "size", "each", "elem_le") else f"{f[1]}_{f[4]}" if object_of(f) else "_".join(f[1:3])
    base = re.sub(r"[^A-Za-z0-9_]", "_", f"learned_{read}")[:56]
    name, n = base, 1
    while name in taken:
        n += 1
        name = f"{base}_{n}"
    return name


def _place(
    c: Candidate, refs: Mapping[Arg, _Ref], name: str, lets: dict[str, Any], observers: Counter[tuple[str, str]] | None
) -> tuple[str, str, list[tuple[str, ObserveRule]]] | None:
    """The candidate's CEL with its object bound (a ``let`` it adds), its message, and the producers that must
    observe the object; ``None`` when it cannot be written (no reference names the object, a ``let`` clash)."""
    what = (
        f"the environment answered {c.error!r} to such calls; the calls it accepted had {c.shown}"
        if c.error
        else f"the tool's name says {c.shown}, as every call the environment accepted had"
    )
    at = object_of(c.feature)
    if at is None:
        arg = c.feature[1]
        return c.expr, (f"{arg} is {{args.{arg}}}: {what}" if c.feature[0] in ("arg", "prefix", "shape") else what), []
    path, id_key = at
    if not all(V.IDENT.match(p.removesuffix("[]")) for p in path.split(".")):
        return None
    ref = refs.get((name, path))
    leaf = path.rsplit(".", 1)[-1]
    if ref is not None and id_key != ref.kind and id_key not in {key for _, key in ref.chosen}:
        return None  # the record was found by an id of another kind (an order by its user_id)
    if ref is None and id_key not in (leaf, "id"):
        return None  # no reference says what the argument names, and the record's id key does not either
    obj = _object_name(ref.kind if ref is not None else leaf)
    if c.feature[0] == "each":  # seen(obj, i) for each id of the list: no let
        what = f"a {obj} of args.{path} had {c.feature[3]} other than {c.shown}: {what}"
    elif c.feature[0] != "elem_le":
        let = {"object": obj, "id": f"args.{path}"}
        if lets.get(obj, let) != let:
            return None  # two arguments of one kind: the first keeps the name
        lets[obj] = let
    if c.feature[0] == "field":
        what = f"{obj} {{args.{path}}} has {c.feature[3]} {{{obj}.{c.feature[3]}}}: {what}"
    observes = [
        (producer, ObserveRule(object=obj, id=id_key, at=where))
        for (producer, where), _ in (observers or Counter()).most_common(3)
    ]
    return c.expr.replace(f"{{{path}}}", obj), what, observes


def _observe(entry: dict[str, Any], rule: ObserveRule) -> None:
    existing: Iterable[ObserveRule] = entry.get("observes", ())
    if any(o.object == rule.object and o.at == rule.at for o in existing):
        return
    entry["observes"] = (*existing, rule)
