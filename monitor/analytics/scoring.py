"""How good were the verdicts? Pre-call refusals scored against what the environment did.

A replayed record holds, for every call, the monitor's pre-call verdict (its ``cause``) and
the environment's answer (``error``, set when the environment rejected the call: an error
recogniser of the spec or toolset, a raised error, τ²'s ``error`` flag). Scoring them asks
the question a user asks before switching on ``policy="block"``: *what would this spec have
refused, and was the environment going to refuse it too?*

- A **refusal** is a pre-call failure that blocks under ``block``: ``schema``,
  ``dependency`` or ``precondition``. Information (grounding) findings, and a batch's
  duplicate and conflicting calls (codes ``duplicate_call``, ``batch_conflict``), do not
  block by default (DESIGN §2.1); they are counted apart, as **findings**, with the ones on
  calls the environment ran.
- An **environment error** is a call that reached the environment and was rejected.
- A **refusal of a call that succeeded** is a refusal of a call the environment ran without
  error: under ``block`` it would have broken a working agent. These are listed by cause,
  with the first examples.
- **Recall** is the share of environment errors refused before the call; **precision** the
  share of refusals the environment rejected too (``None`` when undefined).

Calls that never reached the environment (blocked, abandoned, cut short) have no answer to
score and are counted as ``unanswered``. Calls made by the user (τ² telecom's ``user:`` call
ids) are the user's actions, not the agent's, and are left out. Pure Python, like
:mod:`.agreement`: it needs no extra.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from ..batch import CONFLICT, DUPLICATE
from ..records.model import ActionRecord, EpisodeRecord
from ..vocabulary import Cause
from .agreement import Confusion

__all__ = (
    "FINDING_CODES",
    "MAX_EXAMPLES",
    "REFUSING",
    "USER_CALL_PREFIX",
    "Example",
    "VerdictScore",
    "render_scores",
    "score_records",
    "total",
)

REFUSING: Final = frozenset({Cause.SCHEMA, Cause.DEPENDENCY, Cause.PRECONDITION})
"""Causes whose pre-call failure blocks the call under ``policy="block"``."""
FINDING_CODES: Final = frozenset({DUPLICATE, CONFLICT})
"""Codes of failures of those causes that do not block by default (:mod:`prefixmon.batch`)."""
USER_CALL_PREFIX: Final = "user:"
"""Call ids of the user's own tool calls (τ² telecom), which are not the agent's."""
MAX_EXAMPLES: Final = 3
"""Examples kept per cause of refusals of calls that succeeded."""


@dataclass(frozen=True, slots=True)
class Example:
    """One refusal of a call the environment ran: where, and the reason the monitor gave."""

    episode_id: str
    task_id: str
    depth: int
    tool: str
    reason: str


@dataclass(slots=True, kw_only=True)
class VerdictScore:
    """Pre-call refusals of one input scored against the environment's answers."""

    input: str
    episodes: int = 0
    calls: int = 0
    unanswered: int = 0
    """Calls without an answer from the environment (blocked, abandoned, cut short)."""
    confusion: Confusion = field(default_factory=Confusion)
    """Refusals (predicted) against environment errors (actual), over answered calls."""
    caught: Counter[str] = field(default_factory=Counter)
    """Environment errors refused before the call, by the refusal's cause."""
    refused_ok: Counter[str] = field(default_factory=Counter)
    """Refusals of calls the environment ran, by cause."""
    examples: dict[str, list[Example]] = field(default_factory=dict)
    """The first :data:`MAX_EXAMPLES` refusals of calls that succeeded, by cause."""
    findings: int = 0
    """Findings (information; duplicates and conflicts in a batch: reported, not blocking by default) on answered calls."""
    findings_ok: int = 0
    """Findings on calls the environment ran."""

    @property
    def env_errors(self) -> int:
        """Answered calls the environment rejected."""
        return self.confusion.tp + self.confusion.fn

    @property
    def refusals(self) -> int:
        """Answered calls refused before they ran."""
        return self.confusion.tp + self.confusion.fp

    def add(self, record: EpisodeRecord) -> None:
        """Score one episode record's calls."""
        self.episodes += 1
        for action in record.actions:
            if action.tool is None or (action.call_id or "").startswith(USER_CALL_PREFIX):
                continue
            self.calls += 1
            if not action.reached_environment:
                self.unanswered += 1
                continue
            self._answered(record, action)

    def _answered(self, record: EpisodeRecord, action: ActionRecord) -> None:
        cause = action.cause
        finding = cause is Cause.INFORMATION or action.code in FINDING_CODES
        refused = cause in REFUSING and not finding
        rejected = action.error is not None
        self.confusion.add(refused, rejected)
        if finding:
            self.findings += 1
            self.findings_ok += not rejected
        if not refused:
            return
        assert cause is not None
        if rejected:
            self.caught[cause] += 1
            return
        self.refused_ok[cause] += 1
        kept = self.examples.setdefault(cause, [])
        if len(kept) < MAX_EXAMPLES:
            kept.append(Example(record.episode_id, record.task_id, action.depth, action.tool or "", action.reason or ""))

    def merge(self, other: VerdictScore) -> None:
        """Add ``other``'s counts (the total over several inputs)."""
        self.episodes += other.episodes
        self.calls += other.calls
        self.unanswered += other.unanswered
        for name in ("tp", "fp", "fn", "tn"):
            setattr(self.confusion, name, getattr(self.confusion, name) + getattr(other.confusion, name))
        self.caught.update(other.caught)
        self.refused_ok.update(other.refused_ok)
        for cause, examples in other.examples.items():
            kept = self.examples.setdefault(cause, [])
            kept.extend(examples[: MAX_EXAMPLES - len(kept)])
        self.findings += other.findings
        self.findings_ok += other.findings_ok

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready counts, rates (``None`` when undefined) and examples."""
        return {
            "input": self.input,
            "episodes": self.episodes,
            "calls": self.calls,
            "unanswered": self.unanswered,
            "env_errors": self.env_errors,
            "refusals": self.refusals,
            "recall": self.confusion.recall,
            "precision": self.confusion.precision,
            "caught_by_cause": dict(sorted(self.caught.items())),
            "refused_ok_by_cause": dict(sorted(self.refused_ok.items())),
            "examples": {c: [_example(e) for e in es] for c, es in sorted(self.examples.items())},
            "information_findings": self.findings,
            "information_findings_on_successful_calls": self.findings_ok,
            **{k: v for k, v in self.confusion.as_dict().items() if k in ("tp", "fp", "fn", "tn")},
        }


def _example(e: Example) -> dict[str, Any]:
    return {"episode_id": e.episode_id, "task_id": e.task_id, "depth": e.depth, "tool": e.tool, "reason": e.reason}


def score_records(records: Iterable[EpisodeRecord], *, input: str = "") -> VerdictScore:
    """The score of the calls of ``records`` (one input: a file, a replay)."""
    score = VerdictScore(input=input)
    for record in records:
        score.add(record)
    return score


def total(scores: Iterable[VerdictScore]) -> VerdictScore:
    """The scores of several inputs added up."""
    out = VerdictScore(input="total")
    for s in scores:
        out.merge(s)
    return out


def _rate(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}"


def _by_cause(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{c} {n}" for c, n in sorted(counts.items()) if n) or "0"


def render_scores(scores: list[VerdictScore], fmt: str = "text") -> str:
    """A table of the inputs (and their total, with more than one): ``text``/``markdown``, or ``json``.

    Columns: calls, environment errors, refusals, recall, precision, refusals of calls that
    succeeded by cause, information findings on successful calls; then the examples.
    """
    rows = [*scores, total(scores)] if len(scores) > 1 else list(scores)
    if fmt == "json":
        return json.dumps({"inputs": [s.as_dict() for s in scores], "total": rows[-1].as_dict()}, indent=2)
    head = ["input", "calls", "env errors", "refusals", "recall", "precision", "refused but ran", "findings (ran)"]
    table = [
        [
            s.input,
            str(s.calls),
            str(s.env_errors),
            str(s.refusals),
            _rate(s.confusion.recall),
            _rate(s.confusion.precision),
            _by_cause(s.refused_ok),
            f"{s.findings} ({s.findings_ok})",
        ]
        for s in rows
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(["---", *["---:"] * 6, "---"]) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in table]
    examples = rows[-1].examples
    if examples:
        lines.append("")
        lines.append("refusals of calls the environment ran (first examples):")
        for cause, kept in sorted(examples.items()):
            for e in kept:
                lines.append(f"  {cause}: {e.tool} (task {e.task_id}, step {e.depth}): {_one_line(e.reason)}")
    return "\n".join(lines)


def _one_line(text: str, head: int = 90, tail: int = 150) -> str:
    """The reason on one line; a long one keeps its start (the tool, the argument) and its end (why)."""
    text = " ".join(text.split())
    return text if len(text) <= head + tail + 1 else f"{text[:head]}…{text[-tail:]}"
