"""The learner: one pass over the episodes, bounded counts per tool and argument, then a spec.

:class:`Learner` reads episodes one at a time (``add``) and keeps only bounded statistics
per tool, argument path and result shape; the per-episode state (what was seen, which
values which results returned, the objects observed) is dropped when the episode ends. So
learning costs O(corpus size) time and O(tools x arguments) memory, and a corpus can be
streamed from files of any size. :meth:`Learner.spec` turns the counts into a
:class:`~prefixmon.rules.specfile.SpecFile` (see :mod:`prefixmon.learn._build` for the rules).

Which calls the environment accepted is what the transcript says (:attr:`Call.error`); an
unmarked result counts as rejected when its shape reads as an error (an ``Error:`` prefix,
a non-empty ``error`` field, ``isError``), the convention the error recognisers then learn.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from ..exceptions import SpecError
from ..rules._compile import declares_arg_path
from ..rules.specfile import SpecFile
from ..state import TrackedState
from ..toolset import Toolset
from . import _values as V
from ._access import prior_access, words
from ._mining import Miner, Nested, Seen, error_class
from ._stats import (
    EVERY,
    GIVEN,
    MAX_DISTINCT,
    MAX_NAME_KEYS,
    MAX_SOURCE_SETS,
    MAX_SOURCES,
    WHOLE,
    ArgStats,
    InvalidationStats,
    ShapeStats,
    ToolStats,
    bounded_add,
)
from .transcript import Call, CorpusError, Message, Transcript

__all__ = ("LearnStats", "Learner", "Thresholds", "learn")

_MAX_TOOLS: Final = 4_096
"""Tools learned about without a toolset (the names a corpus makes up are not all tools)."""
_MAX_PATHS: Final = 128
"""Argument paths counted per tool."""
_MAX_SHAPES: Final = 4_096

_MAX_SOURCES_PER_VALUE: Final = 8


@dataclass(frozen=True, slots=True, kw_only=True)
class Thresholds:
    """When an observed regularity becomes a rule.

    Args:
        min_support: observations a rule needs (calls for references and grounding, results for
            error shapes, later rejected uses for invalidations, accepted calls for preconditions).
        min_confidence: share of observations that must agree (1.0: no counter-example at all).
        min_rejected: rejected calls a candidate precondition must separate from the accepted ones.
        examples: supporting observations quoted in each rule's evidence (0: none; they quote
            argument values, so use 0 for sensitive transcripts).
        max_producers: tools (result keys) named as producers of one reference argument at most.
        min_distinct: distinct values a grounded argument needs. A fact seen k different times
            is missed next time with a chance of about 1/(k+2) (the rule of succession), and a
            grounded rule that misses refuses a call the environment runs.
        enable_above: a learned precondition is written enabled when its confidence (the
            estimated chance that a call it refuses is one the environment rejects, see
            :mod:`prefixmon.learn._mining`) is at least this; below, it is a disabled suggestion.
            1: every learned precondition stays disabled.
    """

    min_support: int = 3
    min_confidence: float = 1.0
    min_rejected: int = 1
    examples: int = 3
    max_producers: int = 6
    min_distinct: int = 8
    enable_above: float = 0.75

    def __post_init__(self) -> None:
        if self.min_support < 1:
            raise SpecError(f"min_support must be at least 1, got {self.min_support}")
        if not 0.5 <= self.min_confidence <= 1.0:
            raise SpecError(f"min_confidence must be between 0.5 and 1, got {self.min_confidence}")
        if self.min_rejected < 1:
            raise SpecError(f"min_rejected must be at least 1, got {self.min_rejected}")
        if self.examples < 0:
            raise SpecError(f"examples must be 0 or more, got {self.examples}")
        if self.max_producers < 1:
            raise SpecError(f"max_producers must be at least 1, got {self.max_producers}")
        if not 0.0 <= self.enable_above <= 1.0:
            raise SpecError(f"enable_above must be between 0 and 1, got {self.enable_above}")
        if not 1 <= self.min_distinct <= MAX_DISTINCT:
            raise SpecError(f"min_distinct must be between 1 and {MAX_DISTINCT}, got {self.min_distinct}")


@dataclass(slots=True)
class LearnStats:
    """What the learner read."""

    episodes: int = 0
    calls: int = 0
    undeclared: Counter[str] = field(default_factory=Counter)
    """Calls of tools the toolset does not declare (not learned from; the first 1,024 names are counted)."""
    notes: list[str] = field(default_factory=list)
    """What a reviewer should know: rules held back and why (filled by :meth:`Learner.spec`)."""


@dataclass(slots=True)
class _Observed:
    record: Mapping[str, Any]
    tool: str
    at: str


@dataclass(slots=True)
class _Candidate:
    tool: str
    path: str
    example: str
    origin: int
    """Which call of the episode it was (candidates of one call share it)."""
    rejected_later: bool = False
    accepted_later: bool = False


@dataclass(slots=True)
class _Episode:
    """What one episode has shown so far (dropped when it ends)."""

    id: str
    calls: int = 0
    state: TrackedState = field(default_factory=TrackedState)
    sources: dict[Hashable, list[tuple[str, str]]] = field(default_factory=dict)
    """Value -> (tool, key) of accepted results that returned it: under a key, as the whole result
    (:data:`WHOLE`), or directly in a result object under a key that is not a name (:data:`EVERY`)."""
    unexpressible: set[Hashable] = field(default_factory=set)
    """Values returned where no ``produces`` entry can name them (a list of scalars, a key that is not a name deeper down)."""
    objects: dict[Hashable, dict[str, _Observed]] = field(default_factory=dict)
    """Id value -> {id key: the record showing it}, current ones only."""
    fingerprints: dict[tuple[str, Hashable], tuple[Mapping[str, Any], int]] = field(default_factory=dict)
    """(id key, id) -> (the record as last seen, position in ``named[id]`` then)."""
    named: dict[Hashable, list[str]] = field(default_factory=dict)
    """Id -> tools of the accepted calls that named it, in order."""
    pending: dict[Hashable, list[_Candidate]] = field(default_factory=dict)
    """Id -> accepted calls on it that may have invalidated it."""


class Learner:
    """Streams episodes into bounded statistics; :meth:`spec` drafts the spec file.

    Args:
        tools: the toolset the transcripts used (names, schemas and descriptions); calls of
            other tools are counted in :attr:`stats` and not learned from. ``None``: every tool.
        thresholds: when a regularity becomes a rule.
    """

    def __init__(self, tools: Toolset | None = None, *, thresholds: Thresholds | None = None) -> None:
        self.tools = tools
        self.thresholds = thresholds or Thresholds()
        self.stats = LearnStats()
        self.tool_stats: dict[str, ToolStats] = {}
        self.args: dict[tuple[str, str], ArgStats] = {}
        self.invalidations: dict[tuple[str, str], InvalidationStats] = {}
        self.shapes: dict[V.Shape, ShapeStats] = {}
        self.miner = Miner(self.thresholds.examples)
        self._paths: Counter[str] = Counter()
        self._read_prior: dict[str, bool] = {}
        self._undeclared: set[tuple[str, str]] = set()
        self._names: dict[str, bool] = {}
        """Result keys and whether each is a name ``produces`` can write."""

    # -- reading ------------------------------------------------------------------------------
    def add(self, transcript: Transcript) -> None:
        """Learn from one episode (O(its size))."""
        self.stats.episodes += 1
        ep = _Episode(id=transcript.episode_id)
        for kind, values in transcript.given.items():
            for value in values:
                k = V.key(value)
                if k is not None:
                    ep.sources.setdefault(k, []).append((GIVEN, kind))
        for event in transcript.events:
            if isinstance(event, Message):
                ep.state.inform(event.text, user=event.user)
            elif isinstance(event, Call):
                self._call(ep, event)
        self._end(ep)

    def add_all(self, transcripts: Iterable[Transcript]) -> Learner:
        """Learn from every episode; returns the learner."""
        for transcript in transcripts:
            self.add(transcript)
        return self

    def spec(self) -> SpecFile:
        """The drafted spec file: every rule the counts support, each with its evidence.

        Raises:
            CorpusError: nothing was read, or no episode has a tool call of a declared tool.
        """
        from ._build import build_spec

        if self.stats.episodes == 0:
            raise CorpusError("the corpus is empty: no transcript was read")
        if not any(s.calls for s in self.tool_stats.values()):
            undeclared = f" ({sum(self.stats.undeclared.values())} of undeclared tools)" if self.stats.undeclared else ""
            raise CorpusError(
                f"the corpus has {self.stats.episodes} episode(s) but no tool call of a declared tool{undeclared}; "
                "nothing can be learned"
            )
        return build_spec(self)

    def is_read(self, tool: str) -> bool:
        """Whether the tool reads by its name and description (before any evidence)."""
        found = self._read_prior.get(tool)
        if found is None:
            spec = self.tools.get(tool) if self.tools is not None else None
            found = self._read_prior[tool] = prior_access(tool, spec.description if spec else "") == "read"
        return found

    # -- one call -----------------------------------------------------------------------------
    def _call(self, ep: _Episode, call: Call) -> None:
        self.stats.calls += 1
        ep.calls += 1
        tool = call.tool
        ts = self.tool_stats.get(tool)
        if ts is None and (
            (self.tools is not None and tool not in self.tools) or (self.tools is None and len(self.tool_stats) >= _MAX_TOOLS)
        ):
            bounded_add(self.stats.undeclared, tool, 1_024)
            if call.ran and call.result is not None:
                ep.state.ingest(call.result)
            return
        if ts is None:
            ts = self.tool_stats[tool] = ToolStats()
        ts.calls += 1
        if not call.ran:
            ts.not_run += 1
            return
        data = V.as_data(call.result)
        shapes = V.result_shapes(call.result, data)
        rejected = call.error if call.error is not None else V.error_like(shapes)
        if rejected:
            ts.rejected += 1
        else:
            ts.accepted += 1
        example = f"{ep.id}: {tool} -> {V.short(call.result, 72)}"
        for shape, lexical in shapes:
            self._shape(ep, tool, shape, lexical, call.error, example)
        args = call.arguments if isinstance(call.arguments, Mapping) else None
        leaves = V.argument_leaves(args) if args is not None else []
        if args is None:
            ts.malformed += 1
        hits: list[_Candidate] = []
        for path, value in leaves:
            self._argument(ep, tool, path, value, rejected, hits)
        self._blame(hits)
        if args is not None:
            objects, elements, nested = self._named_objects(ep, args, leaves)
            what = error_class(data if isinstance(data, Mapping) else call.result) if rejected else None
            self.miner.add(
                ep.id,
                tool,
                args,
                objects,
                elements,
                nested,
                what,
                f"{ep.id}: {tool}({V.short(args, 96)}) -> {V.short(call.result, 96)}",
            )
        if call.result is not None:
            ep.state.ingest(data)
        if rejected:
            return
        named = [(path, k) for path, value in leaves if V.id_like(value) and (k := V.key(value)) is not None]
        for _, k in named:
            ep.named.setdefault(k, []).append(tool)
        if not self.is_read(tool):
            for path, k in named:
                if "." not in path and "[]" not in path:  # what a write makes stale at runtime
                    ep.objects.pop(k, None)
        self._index_result(ep, tool, data, call.result)
        for path, k in named:
            candidates = ep.pending.setdefault(k, [])
            if len(candidates) < 16:
                example = f"{ep.id}: {tool}({path}={V.short(k)})"
                candidates.append(_Candidate(tool=tool, path=path, example=example, origin=ep.calls))

    @staticmethod
    def _named_objects(
        ep: _Episode, args: Mapping[str, Any], leaves: list[tuple[str, Any]]
    ) -> tuple[list[Seen], list[Seen], list[Nested]]:
        """The objects, as last observed, that the call's ids name: by a scalar argument, by each id of a list
        argument, and by an id inside an element of a list argument (``payment_methods[].payment_id``)."""
        objects: list[Seen] = []
        elements: list[Seen] = []
        for path, value in leaves:
            k = V.key(value) if "[]" not in path and V.id_like(value) else None
            if k is None:
                continue
            listed = isinstance(args.get(path.split(".", 1)[0]), list)  # a let binds one object, not a list's
            for id_key, obs in ep.objects.get(k, {}).items():
                (elements if listed else objects).append((path, id_key, obs.record, (obs.tool, obs.at)))
        nested: list[Nested] = []
        for name, items in args.items():
            if not isinstance(items, list) or not isinstance(name, str):
                continue
            for item in items[:32]:
                for key, value in item.items() if isinstance(item, Mapping) else ():
                    k = V.key(value) if isinstance(key, str) and V.id_like(value) else None
                    for id_key, obs in ep.objects.get(k, {}).items() if k is not None else ():
                        nested.append((f"{name}[].{key}", key, item, id_key, obs.record, (obs.tool, obs.at)))
        return objects, elements, nested

    def _argument(self, ep: _Episode, tool: str, path: str, value: Any, rejected: bool, hits: list[_Candidate]) -> None:
        keep = self.thresholds.examples
        stats = self.args.get((tool, path))
        if stats is None:
            if self._paths[tool] >= _MAX_PATHS or (tool, path) in self._undeclared:
                return
            spec = self.tools.get(tool) if self.tools is not None else None
            if spec is not None and not declares_arg_path(spec, path):
                self._undeclared.add((tool, path))  # a field the schema does not have: no rule may name it
                return
            self._paths[tool] += 1
            stats = self.args[(tool, path)] = ArgStats()
        k = V.key(value)
        if k is not None and V.id_like(value):
            self._later_use(ep, k, rejected, hits)
        if rejected:
            stats.rejected += 1
            return
        stats.accepted += 1
        if isinstance(value, bool):
            stats.booleans += 1
        elif isinstance(value, (int, float)):
            stats.numbers += 1
        elif isinstance(value, str):
            stats.strings += 1
            stats.empty += not value.strip()
        if V.id_like(value):
            stats.id_like += 1
            stats.opaque += V.opaque(value)
        if k is not None and len(stats.distinct) < MAX_DISTINCT:
            stats.distinct.add(k)
        example = f"{ep.id}: {tool}({path}={V.short(value)})"
        producers = ep.sources.get(k) if k is not None else None
        if producers:
            stats.bound += 1
            stats.co_unexpressible += k in ep.unexpressible
            stats.ref.hit(ep.id, f"{example} <- {_where(producers[0])}", keep)
            seen_by = stats.source_seen
            for source in producers:
                bounded_add(stats.sources, source, MAX_SOURCES)
                seen = seen_by.get(source)
                if seen is None:
                    if len(seen_by) < MAX_SOURCES:
                        seen_by[source] = [ep.id, ep.id, f"{example} <- {_where(source)}"] if keep else [ep.id, ep.id]
                else:
                    seen[1] = ep.id
                    if len(seen) < 2 + keep:
                        quoted = f"{example} <- {_where(source)}"
                        if quoted not in seen:
                            seen.append(quoted)
            bounded_add(stats.source_sets, frozenset(producers), MAX_SOURCE_SETS)
        elif k is not None and ep.state.user_said(value):
            stats.user += 1
            stats.ref.hit(ep.id, f"{example} <- the user", keep)
        else:
            stats.ref.miss()
            if k in ep.unexpressible:
                stats.unexpressible += 1
        if isinstance(value, bool) or value is None:
            return
        if isinstance(value, str) or (isinstance(value, (int, float)) and abs(value) >= 100):
            if ep.state.user_said(value):
                stats.said.hit(ep.id, example, keep)
            else:
                stats.said.miss()
        if ep.state.seen(value):
            stats.grounded.hit(ep.id, example, keep)
            return
        stats.grounded.miss()
        if isinstance(value, (int, float)):
            how = ep.state.derivation(value)  # the runtime's own test, so a learned rule holds there
            if how is not None:
                stats.derived.hit(ep.id, f"{example}: {how}", keep)
                return
        stats.derived.miss()

    def _later_use(self, ep: _Episode, k: Hashable, rejected: bool, hits: list[_Candidate]) -> None:
        for candidate in ep.pending.get(k, ()):
            if rejected:
                hits.append(candidate)
            else:
                candidate.accepted_later = True

    @staticmethod
    def _blame(hits: list[_Candidate]) -> None:
        """A rejected call reused ids that earlier calls acted on: which of them does the rejection speak for?

        One id of a call: that one. Several ids of one call (an access token and the booking it
        cancelled): the one named like the tool (``cancel_booking`` -> the booking), else none
        (the rejection cannot say which id went stale).
        """
        by_origin: dict[int, list[_Candidate]] = {}
        for c in hits:
            by_origin.setdefault(c.origin, []).append(c)
        for group in by_origin.values():
            if len({c.path for c in group}) > 1:
                said = {w.removesuffix("s") for w in words(group[0].tool)}
                group = [c for c in group if _leaf_object(c.path) in said]
                if len({c.path for c in group}) != 1:
                    continue
            for c in group:
                c.rejected_later = True

    def _shape(self, ep: _Episode, tool: str, shape: V.Shape, lexical: bool, mark: bool | None, example: str) -> None:
        stats = self.shapes.get(shape)
        if stats is None:
            if len(self.shapes) >= _MAX_SHAPES:
                return
            stats = self.shapes[shape] = ShapeStats()
        if mark is True or (mark is None and lexical):
            stats.error.hit(ep.id, example, self.thresholds.examples)
            bounded_add(stats.tools, tool, 64)
        elif mark is False or (shape[0] == "json" and shape[2] is None and V.error_key(shape[1])):
            stats.error.miss()  # marked accepted, or an error field that is empty
            bounded_add(stats.ok_tools, tool, 64)
        else:
            stats.unknown += 1

    # -- what an accepted result shows ---------------------------------------------------------
    def _index_result(self, ep: _Episode, tool: str, data: Any, raw: Any) -> None:
        if data is None:
            return
        ts = self._tool(tool)
        if not isinstance(data, (Mapping, list, tuple)):
            value = data.strip() if isinstance(data, str) else data
            k = V.key(value)
            if k is None or k == "":
                return  # no answer: neither for nor against answering with a bare value
            ts.results += 1
            if k in ep.pending:
                self._settle(ep.pending.pop(k), ep.id, reproduced=True)
            # What produces: {kind: "."} binds at runtime: the result itself when it is a text or an integer.
            if isinstance(raw, (str, int)) and not isinstance(raw, bool):
                ts.answers += 1
                self._source(ep, k, (tool, WHOLE))
            else:
                ep.unexpressible.add(k)
            return
        ts.results += 1
        # produces: {kind: "*"} binds every text or integer value of a result object (JSON text parsed only when
        # it starts with "{", as the runtime reads it).
        every = False
        if isinstance(data, Mapping):
            every = not isinstance(raw, (str, bytes)) or raw[:1] in ("{", b"{")
            if every:
                self._flat(ts, data)
        keys = ts.result_keys
        pending, unexpressible = ep.pending, ep.unexpressible
        names = self._names
        for at, value, top in V.result_leaves(data):
            t = type(value)
            k = value if t is str or t is int else V.key(value)
            if k is None:
                continue
            if k in pending:  # returned again: current again, whatever an earlier call did
                self._settle(pending.pop(k), ep.id, reproduced=True)
            named = names.get(at) if at is not None else False
            if named is None and at is not None:
                named = bool(V.IDENT.match(at))
                if len(names) < 65_536:
                    names[at] = named
            if not named or at is None:
                if top and every and (t is str or t is int):
                    self._source(ep, k, (tool, EVERY))
                else:
                    unexpressible.add(k)
                continue
            if at in keys or len(keys) < 256:
                keys[at] += 1
            self._source(ep, k, (tool, at))
        for at, record in V.records(data):
            id_key = V.primary_id(at, record)
            if id_key is None:
                continue
            k = V.key(record[id_key])
            if k is None:
                continue
            ep.objects.setdefault(k, {})[id_key] = _Observed(record=record, tool=tool, at=at)
            self._compare(ep, (id_key, k), record)

    @staticmethod
    def _source(ep: _Episode, k: Hashable, source: tuple[str, str]) -> None:
        found = ep.sources.get(k)
        if found is None:
            ep.sources[k] = [source]
        elif source not in found and len(found) < _MAX_SOURCES_PER_VALUE:
            found.append(source)

    @staticmethod
    def _flat(ts: ToolStats, data: Mapping[Any, Any]) -> None:
        """Count a result object of texts and integers only: a mapping keyed by names, or a flat record."""
        for key, value in data.items():
            t = type(value)
            if (t is not str and t is not int) or type(key) is not str:
                return
        ts.flat += 1
        ts.most_keys = max(ts.most_keys, len(data))
        with_id = False
        seen = ts.flat_keys
        for key in data:
            with_id = with_id or V.names_an_id(key)
            if key not in seen:
                if len(seen) < MAX_NAME_KEYS:
                    seen.add(key)
                else:
                    ts.flat_keys_full = True
        ts.flat_with_id += with_id

    def _compare(self, ep: _Episode, ident: tuple[str, Hashable], record: Mapping[str, Any]) -> None:
        """Access evidence: an object before and after the calls that named it, over the fields both views show.

        Records are compared only when a call named the object in between (most are never named
        again); two views that share less than half their fields are not compared.
        """
        named = ep.named.get(ident[1], [])
        before = ep.fingerprints.get(ident)
        ep.fingerprints[ident] = (record, len(named))
        if before is None:
            return
        between = named[before[1] :]
        if not between:
            return
        old = before[0]
        common = [key for key in record if key in old]
        if 2 * len(common) < min(len(old), len(record)):
            return
        keep = self.thresholds.examples
        what = f"{ident[0]} {V.short(ident[1])}"
        try:
            changed = any(old[key] != record[key] for key in common)
        except Exception:  # values that cannot be compared are no evidence
            return
        if changed:
            tools = set(between)
            if len(tools) == 1:
                (tool,) = tools
                self._tool(tool).access.changed.hit(ep.id, f"{ep.id}: {what} changed after {tool}", keep)
        else:
            for tool in set(between):
                self._tool(tool).access.unchanged.hit(ep.id, f"{ep.id}: {what} unchanged after {tool}", keep)

    def _tool(self, tool: str) -> ToolStats:
        found = self.tool_stats.get(tool)
        if found is None:
            found = self.tool_stats[tool] = ToolStats()
        return found

    def _end(self, ep: _Episode) -> None:
        for candidates in ep.pending.values():
            self._settle(candidates, ep.id, reproduced=False)

    def _settle(self, candidates: list[_Candidate], episode: str, *, reproduced: bool) -> None:
        """Count what happened to ids after the calls that may have invalidated them."""
        for c in candidates:
            if not (c.accepted_later or c.rejected_later) and reproduced:
                continue  # returned again before any use: no evidence either way
            stats = self.invalidations.get((c.tool, c.path))
            if stats is None:
                if len(self.invalidations) >= _MAX_PATHS * 64:
                    continue
                stats = self.invalidations[(c.tool, c.path)] = InvalidationStats()
            if c.accepted_later:
                stats.tally.miss()
            elif c.rejected_later:
                stats.tally.hit(episode, f"{c.example}, then rejected", self.thresholds.examples)
            else:
                stats.unused += 1


def _where(source: tuple[str, str]) -> str:
    """Where a value came from, for an example: ``get_user.orders``, ``find_user_id`` (the whole result), ``list_types.*``."""
    return source[0] if source[1] == WHOLE else f"{source[0]}.{source[1]}"


def _leaf_object(path: str) -> str:
    """The object an argument names: ``booking_id`` -> ``booking``, ``flights[].flight_number`` -> ``flight``."""
    parts = words(path.rsplit(".", 1)[-1].removesuffix("[]"))
    return (
        (parts[-2] if len(parts) > 1 and parts[-1] in ("id", "ids", "number", "key", "token") else parts[-1]).removesuffix("s")
        if parts
        else ""
    )


def learn(
    transcripts: Iterable[Transcript],
    *,
    tools: Toolset | Iterable[Mapping[str, Any]] | None = None,
    thresholds: Thresholds | None = None,
) -> SpecFile:
    """Draft a spec file from recorded episodes, every rule with its evidence.

    Args:
        transcripts: the episodes (streamed: an iterator is read once).
        tools: the toolset, or its OpenAI-style tool definitions; ``None``: every tool called.
        thresholds: when a regularity becomes a rule.

    Raises:
        CorpusError: the corpus is empty or has no tool call.
        SpecError: a tool definition is malformed.
    """
    toolset = tools if isinstance(tools, Toolset) or tools is None else Toolset.from_openai(list(tools))
    return Learner(toolset, thresholds=thresholds).add_all(transcripts).spec()
