"""The verdicts an episode makes itself: of a check that failed, a monitor fault, a merged failure.

:func:`prefixmon.predicate.check_call` judges a call against the tracked state. When that
check raises, when a rule faults, or when the monitor cannot watch the call (an observer failed,
the sink cannot keep records), the episode makes the verdict here: fail-open lets the call run,
fail-closed refuses it with a ``monitor_fault`` precondition failure. A failure the episode adds
(a repeat, a batch finding, a rejection) joins the verdict's failures in cause order. Kept apart
from :mod:`prefixmon.episode` so the episode reads as calls and decisions; the functions take
the episode as the small :class:`VerdictHost` below (no import of the episode module, hence no
cycle).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final, Protocol

from ._call import ParsedCall
from .toolset import Toolset
from .verdict import Failure, Verdict
from .vocabulary import Cause

__all__ = ("VerdictHost", "check_failed", "fault_failure", "in_cause_order", "unkept", "with_faults")


class _Judges(Protocol):
    """What the episode's own verdicts need of the monitor (:class:`prefixmon.Monitor` is one)."""

    @property
    def toolset(self) -> Toolset:
        """The tools and their rules."""

    @property
    def fail_closed(self) -> bool:
        """Whether a monitor-internal error blocks the call."""


class VerdictHost(Protocol):
    """What the episode's own verdicts need of the episode (:class:`prefixmon.Episode` is one)."""

    @property
    def monitor(self) -> _Judges:
        """The monitor that opened the episode."""

    def _fault(self, where: str, error: BaseException, *, notify: bool = True) -> None:
        """Count and report an error the monitor caught in itself."""


def check_failed(episode: VerdictHost, call: ParsedCall, depth: int, error: Exception) -> Verdict:
    """The verdict of a call whose check raised: fail-closed blocks it, fail-open lets it run."""
    name, call_id = call.tool, call.call_id
    # a name the toolset lacks may be anything a client made up: never in a metric attribute
    episode._fault(f"checking {name}" if name in episode.monitor.toolset else "checking an undeclared tool", error)
    if episode.monitor.fail_closed:
        return Verdict(tool=name, call_id=call_id, depth=depth, executable=False, failures=(fault_failure(name),))
    return Verdict(tool=name, call_id=call_id, depth=depth, executable=True, args=call.args if call.args is not None else {})


def unkept(name: str, call_id: str | None, depth: int, observer_failed: bool) -> Verdict:
    """Fail-closed, the verdict of a call the monitor cannot watch: an observer (an exporter)
    failed while it was admitted, or the sink cannot keep records."""
    why = "an observer failed while it was admitted" if observer_failed else "records cannot be kept (the sink is failing)"
    failure = fault_failure(name, f"was not run: {why}")
    return Verdict(tool=name, call_id=call_id, depth=depth, executable=False, failures=(failure,))


def with_faults(episode: VerdictHost, verdict: Verdict, name: str) -> Verdict:
    """A verdict whose rules faulted: the faults reported; fail-closed blocks the call."""
    for fault in verdict.faults:
        episode._fault(fault.where, fault.error)
    if not episode.monitor.fail_closed:
        return verdict
    failures = in_cause_order(verdict.failures, fault_failure(name))  # the fault ranks as a precondition
    return Verdict(
        tool=name,
        call_id=verdict.call_id,
        depth=verdict.depth,
        executable=False,
        failures=failures,
        args=verdict.args,
    )


_CAUSE_RANK: Final[Mapping[Cause, int]] = MappingProxyType({cause: rank for rank, cause in enumerate(Cause)})


def in_cause_order(failures: tuple[Failure, ...], extra: Failure) -> tuple[Failure, ...]:
    """``failures`` with ``extra`` added in tie-break order (after the failures of its own cause)."""
    rank = _CAUSE_RANK[extra.cause]
    at = next((i for i, f in enumerate(failures) if _CAUSE_RANK[f.cause] > rank), len(failures))
    return (*failures[:at], extra, *failures[at:])


def fault_failure(name: str, what: str = "could not be checked because of an internal monitor error") -> Failure:
    """Fail-closed, the failure of a call blocked because of the monitor itself."""
    return Failure(cause=Cause.PRECONDITION, code="monitor_fault", reason=f"{name} {what}, and the monitor is fail-closed")
