"""How good is a learned spec: its rules beside a hand-written toolset's, and replays that must not refuse what ran.

- :func:`compare_rules`: precision and recall of the learned references, invalidations,
  producers and read/write classes against a reference :class:`~prefixmon.Toolset` (one
  whose rules a person wrote), restricted to what the corpus could show;
- :func:`check_spec`: replay transcripts through a toolset (with a learned spec applied, or
  without, for the baseline) and list every call the environment accepted that the
  monitor would have refused before it ran, and every result its recognisers misread.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..exceptions import ToolBlocked
from ..monitor import Monitor
from ..rules.specfile import SpecFile
from ..toolset import Toolset
from . import _values as V
from .transcript import Call, Message, Transcript

if TYPE_CHECKING:
    from .learner import Learner

__all__ = ("CheckReport", "Comparison", "Refusal", "RuleComparison", "check_spec", "compare_rules")


@dataclass(frozen=True, slots=True, kw_only=True)
class Comparison:
    """One kind of rule, learned beside hand-written: what agrees, what the learner added, what it missed."""

    name: str
    agreed: tuple[tuple[str, str], ...]
    extra: tuple[tuple[str, str], ...]
    """Learned, not hand-written."""
    missed: tuple[tuple[str, str], ...]
    """Hand-written, not learned, though the corpus exercised them."""
    unobserved: tuple[tuple[str, str], ...] = ()
    """Hand-written rules the corpus never exercised (left out of recall)."""

    @property
    def precision(self) -> float | None:
        """Agreed / learned (``None`` when nothing was learned)."""
        n = len(self.agreed) + len(self.extra)
        return len(self.agreed) / n if n else None

    @property
    def recall(self) -> float | None:
        """Agreed / hand-written and exercised (``None`` when there is none)."""
        n = len(self.agreed) + len(self.missed)
        return len(self.agreed) / n if n else None


@dataclass(frozen=True, slots=True, kw_only=True)
class RuleComparison:
    """References, invalidations, producers and read/write, learned beside hand-written."""

    references: Comparison
    invalidations: Comparison
    producers: Comparison
    writes: Comparison | None
    """``None`` when the reference toolset says nothing about read/write."""


def _split(
    name: str, learned: set[tuple[str, str]], expected: set[tuple[str, str]], seen: set[tuple[str, str]] | None
) -> Comparison:
    observable = expected if seen is None else expected & seen
    return Comparison(
        name=name,
        agreed=tuple(sorted(learned & expected)),
        extra=tuple(sorted(learned - expected)),
        missed=tuple(sorted(observable - learned)),
        unobserved=tuple(sorted(expected - observable)),
    )


def compare_rules(spec: SpecFile, reference: Toolset, *, learner: Learner | None = None) -> RuleComparison:
    """Compare a learned spec with a hand-written toolset.

    References and invalidations are compared as (tool, argument path); producers as (tool,
    result key); writes as (tool, ``write``) from ``access`` (learned) and the toolset's
    ``metadata`` (``access``, ``read_only`` or ``write``). With ``learner``, hand-written
    rules whose tool or argument the corpus never showed in an accepted call are counted as
    unobserved, not missed.
    """
    expected_refs = {(t.name, path) for t in reference for path, _ in t.refs}
    expected_inv = {(t.name, path) for t in reference for path, ref in t.refs if ref.kind in t.invalidates}
    expected_prod = {(t.name, p.key) for t in reference for p in t.produces}
    expected_writes = {(t.name, "write") for t in reference if _writes(t.metadata) is True}
    learned_refs: set[tuple[str, str]] = set()
    learned_inv: set[tuple[str, str]] = set()
    learned_prod: set[tuple[str, str]] = set()
    learned_writes: set[tuple[str, str]] = set()
    for name, rules in spec.tools.items():
        for path, arg in rules.args.items():
            if arg.ref:
                learned_refs.add((name, path))
                if arg.ref in rules.invalidates:
                    learned_inv.add((name, path))
        learned_prod |= {(name, key) for key in rules.produces.values()}
        if rules.access == "write":
            learned_writes.add((name, "write"))
    seen_args: set[tuple[str, str]] | None = None
    seen_tools: set[tuple[str, str]] | None = None
    if learner is not None:
        seen_args = {arg for arg, stats in learner.args.items() if stats.accepted}
        called = {name for name, stats in learner.tool_stats.items() if stats.accepted}
        seen_tools = {(name, what) for name in called for what in ("write",)}
        seen_prod = {(t.name, p.key) for t in reference if t.name in called for p in t.produces}
    return RuleComparison(
        references=_split("references", learned_refs, expected_refs, seen_args),
        invalidations=_split("invalidations", learned_inv, expected_inv, seen_args),
        producers=_split("producers", learned_prod, expected_prod, seen_prod if learner is not None else None),
        writes=_split("writes", learned_writes, expected_writes, seen_tools)
        if any(_writes(t.metadata) is not None for t in reference)
        else None,
    )


def _writes(metadata: Mapping[str, Any]) -> bool | None:
    if metadata.get("access") in ("read", "write"):
        return bool(metadata["access"] == "write")
    if "read_only" in metadata:
        return not metadata["read_only"]
    if "write" in metadata:
        return bool(metadata["write"])
    return None


@dataclass(frozen=True, slots=True, kw_only=True)
class Refusal:
    """A call the environment accepted that the monitor judged not executable before it ran."""

    episode: str
    depth: int
    tool: str
    cause: str
    reason: str


@dataclass(slots=True, kw_only=True)
class CheckReport:
    """What replaying transcripts through a toolset showed."""

    episodes: int = 0
    calls: int = 0
    accepted: int = 0
    """Calls the environment accepted."""
    rejected: int = 0
    refused: list[Refusal] = field(default_factory=list)
    """Accepted calls judged not executable before they ran (false alarms)."""
    caught: int = 0
    """Rejected calls judged not executable before they ran."""
    false_errors: list[Refusal] = field(default_factory=list)
    """Accepted results the toolset's recognisers read as errors."""
    missed_errors: int = 0
    """Rejected results the recognisers did not read as errors."""


async def check_spec(transcripts: Iterable[Transcript], tools: Toolset) -> CheckReport:
    """Replay ``transcripts`` through ``tools`` (policy observe) and compare each verdict with what the environment did.

    Each call is judged before its recorded result is looked at; then the environment's
    answer is applied (``failed`` for a rejected result; ``done`` for an accepted one, which
    the toolset's recognisers then read as they would at runtime). Which results the
    environment rejected is what the transcript marks, or for unmarked results their shape
    (as the learner reads them).
    """
    report = CheckReport()
    monitor = Monitor(tools, policy="observe")
    for transcript in transcripts:
        report.episodes += 1
        async with monitor.episode(task_id=transcript.episode_id, bindings=transcript.given) as ep:
            for event in transcript.events:
                if isinstance(event, Message):
                    if event.user:
                        ep.user(event.text)
                    else:
                        ep.inform(event.text)
                    continue
                assert isinstance(event, Call)
                try:
                    pending = await ep.begin(event.tool, event.arguments, call_id=event.call_id)
                except ToolBlocked as blocked:  # nothing could run it (observe lets every known tool through)
                    if event.ran and not _rejected(event):
                        report.calls += 1
                        report.accepted += 1
                        report.refused.append(
                            Refusal(
                                episode=transcript.episode_id,
                                depth=ep.depth,
                                tool=event.tool,
                                cause="blocked",
                                reason=str(blocked),
                            )
                        )
                    continue
                if not event.ran:
                    pending.abandon("not run in the recorded episode", started=False)
                    continue
                report.calls += 1
                rejected = _rejected(event)
                verdict = pending.verdict
                spec = tools.get(event.tool)
                recognised = spec.error_result(event.result) if spec is not None and spec.error_result is not None else None
                if rejected:
                    report.rejected += 1
                    report.caught += not verdict.executable
                    report.missed_errors += not recognised
                    pending.failed(str(event.result))
                    continue
                report.accepted += 1
                if not verdict.executable:
                    failure = verdict.failures[0]
                    report.refused.append(
                        Refusal(
                            episode=transcript.episode_id,
                            depth=verdict.depth,
                            tool=event.tool,
                            cause=str(failure.cause),
                            reason=failure.reason,
                        )
                    )
                if recognised:
                    report.false_errors.append(
                        Refusal(
                            episode=transcript.episode_id,
                            depth=verdict.depth,
                            tool=event.tool,
                            cause="state_consistency",
                            reason=str(recognised),
                        )
                    )
                pending.done(event.result)
            ep.finish("success" if transcript.outcome is None else transcript.outcome)
    return report


def _rejected(call: Call) -> bool:
    """Whether the environment rejected the call: its mark, else its result's shape."""
    if call.error is not None:
        return call.error
    return V.error_like(V.result_shapes(call.result, V.as_data(call.result)))
