"""What the learner counts while it streams episodes: bounded accumulators per tool, argument and shape."""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any, Final

from ..rules.specfile import Evidence

__all__ = (
    "EVERY",
    "GIVEN",
    "WHOLE",
    "AccessStats",
    "ArgStats",
    "InvalidationStats",
    "ShapeStats",
    "Tally",
    "ToolStats",
    "bounded_add",
)

GIVEN: Final = "<given>"
"""The producer of references a transcript says the episode held before it started."""
MAX_SOURCES: Final = 64
"""Distinct producing (tool, key) pairs kept per argument."""
MAX_SOURCE_SETS: Final = 256
"""Distinct combinations of producers kept per argument."""
MAX_DISTINCT: Final = 64
"""Distinct values remembered per argument (enough to tell a constant or a choice from a fact)."""
MAX_NAME_KEYS: Final = 512
"""Distinct keys of a tool's flat result objects remembered (enough to tell a catalogue from a record)."""
WHOLE: Final = "."
"""The result key of a value that was the whole result (a text or number answer): ``produces: {kind: "."}``."""
EVERY: Final = "*"
"""The result key of every value of a result object keyed by names, not fields: ``produces: {kind: "*"}``."""


def bounded_add(counter: Counter[Any], item: Hashable, limit: int, n: int = 1) -> None:
    """Count ``item``; a new item is dropped once ``limit`` distinct items are counted (memory stays bounded)."""
    if item in counter or len(counter) < limit:
        counter[item] += n


@dataclass(slots=True)
class Tally:
    """Support and counter-examples of one rule, with where it was seen and a few examples."""

    support: int = 0
    counter: int = 0
    first: str | None = None
    last: str | None = None
    examples: list[str] = field(default_factory=list)

    def hit(self, episode: str, example: str | None, keep: int) -> None:
        """One observation that agrees."""
        self.support += 1
        if self.first is None:
            self.first = episode
        self.last = episode
        if example is not None and len(self.examples) < keep and example not in self.examples:
            self.examples.append(example)

    def miss(self) -> None:
        """One observation that contradicts."""
        self.counter += 1

    @property
    def confidence(self) -> float:
        """Share of observations that agree (0 when there are none)."""
        total = self.support + self.counter
        return self.support / total if total else 0.0

    def evidence(self, *, support: int | None = None, counter: int | None = None) -> Evidence:
        """The tally as spec-file evidence (``support``/``counter`` override the counts)."""
        return Evidence(
            support=self.support if support is None else support,
            counter_examples=self.counter if counter is None else counter,
            first_seen=self.first,
            last_seen=self.last,
            examples=tuple(self.examples),
        )


@dataclass(slots=True)
class ArgStats:
    """One argument path of one tool, over the calls the environment accepted."""

    accepted: int = 0
    rejected: int = 0
    id_like: int = 0
    opaque: int = 0
    """Values shaped like opaque handles (``credit_card_42``)."""
    booleans: int = 0
    numbers: int = 0
    strings: int = 0
    ref: Tally = field(default_factory=Tally)
    """Agrees: the value was returned earlier (``bound``) or said by the user."""
    bound: int = 0
    user: int = 0
    """Said by the user and returned by no earlier call."""
    unexpressible: int = 0
    """Returned only where ``produces`` cannot name it (a bare result, a value under a key that is not a name)."""
    co_unexpressible: int = 0
    """Returned where ``produces`` can name it, and also where it cannot: the kind has a producer spec files cannot declare."""
    empty: int = 0
    """Empty or blank strings (no value to ground)."""
    grounded: Tally = field(default_factory=Tally)
    """Agrees: the value had appeared in what the agent saw."""
    said: Tally = field(default_factory=Tally)
    """Agrees: the user had said the value (what a grounded rule is written from)."""
    derived: Tally = field(default_factory=Tally)
    """Agrees: an unseen number computed from seen ones."""
    sources: Counter[tuple[str, str]] = field(default_factory=Counter)
    source_sets: Counter[frozenset[tuple[str, str]]] = field(default_factory=Counter)
    source_seen: dict[tuple[str, str], list[str]] = field(default_factory=dict)
    """(tool, key) -> [first episode, last episode, examples...] of the calls whose value it returned."""
    distinct: set[Hashable] = field(default_factory=set)


@dataclass(slots=True)
class InvalidationStats:
    """After an accepted call of a tool on an id: was the id ever accepted again?"""

    tally: Tally = field(default_factory=Tally)
    """Agrees: a later use was rejected and none accepted. Contradicts: a later use was accepted."""
    unused: int = 0
    """Never used again in the episode (no evidence either way)."""


@dataclass(slots=True)
class ShapeStats:
    """One result shape (``Error:`` prefix, ``error`` key, ``isError``) over every result that has it."""

    error: Tally = field(default_factory=Tally)
    """Agrees: marked an error, or unmarked and reading as one. Contradicts: marked accepted, or an empty error field."""
    unknown: int = 0
    """Unmarked results with a shape that does not read as an error."""
    tools: Counter[str] = field(default_factory=Counter)
    """Tools whose error results had the shape."""
    ok_tools: Counter[str] = field(default_factory=Counter)
    """Tools whose accepted results had it."""


@dataclass(slots=True)
class AccessStats:
    """Whether a tool changed what it named: an object read before and after it."""

    changed: Tally = field(default_factory=Tally)
    unchanged: Tally = field(default_factory=Tally)


@dataclass(slots=True)
class ToolStats:
    """Totals of one tool."""

    calls: int = 0
    accepted: int = 0
    rejected: int = 0
    not_run: int = 0
    malformed: int = 0
    """Calls whose arguments were not an object."""
    result_keys: Counter[str] = field(default_factory=Counter)
    """Keys its accepted results held scalars under (what ``produces`` could name)."""
    results: int = 0
    """Accepted calls with a result."""
    answers: int = 0
    """Accepted results that were a bare text or integer (what ``produces: {kind: "."}`` binds)."""
    flat: int = 0
    """Accepted results that were an object of texts and integers only (what ``"*"`` binds every value of)."""
    flat_with_id: int = 0
    """Flat results with a key that names an id (``{"user_id": ...}``): records, not mappings keyed by names."""
    flat_keys: set[str] = field(default_factory=set)
    """Distinct keys of the flat results (at most :data:`MAX_NAME_KEYS`)."""
    flat_keys_full: bool = False
    """More distinct keys were seen than :attr:`flat_keys` holds."""
    most_keys: int = 0
    """The most keys one flat result had."""
    access: AccessStats = field(default_factory=AccessStats)
