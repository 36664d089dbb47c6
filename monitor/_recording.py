"""Record building: the action record of each judged call, written into its episode.

An episode keeps one slot per depth. When a call is settled (it ran, was refused, or was cut
short) its :class:`~prefixmon.records.model.ActionRecord` is built here from the verdict and
the decision, matched to the plan the episode follows, given its redacted content, and the
observers taking part are told. Kept apart from :mod:`prefixmon.episode` so the episode reads
as calls and decisions; the functions take the episode as the small :class:`Recorder` below
(no import of the episode module, hence no cycle).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from ._dispatch import Dispatch
from .records.model import ActionRecord, trusted_action, with_content
from .records.redaction import RecordContent
from .state import TrackedState
from .verdict import Verdict
from .vocabulary import Decision

__all__ = ("PlanTracker", "Recorder", "StepMatch", "action_record", "add_content", "record", "record_interrupted")


class StepMatch(Protocol):
    """How an executed call relates to the plan that conditions the episode."""

    @property
    def step(self) -> int | None:
        """1-based index of the plan step the call matched, or ``None``."""

    @property
    def deviation(self) -> str | None:
        """How the call deviated from the plan; ``None`` when it followed it."""


class PlanTracker(Protocol):
    """Matches an episode's calls to a plan (:class:`prefixmon.plan.PlanFollower` is one)."""

    def match(self, tool: str, args: Mapping[str, Any] | None, *, ran: bool = False, result: Any = None) -> StepMatch:
        """Match one executed call and advance."""


class Recorder(Protocol):
    """What recording an action needs of its episode (:class:`prefixmon.Episode` is one)."""

    _fed: int | None
    """Depth of the first non-executable action so far."""

    @property
    def plan(self) -> PlanTracker | None:
        """Matches each recorded action to the approved plan, when the episode carries one."""

    @property
    def state(self) -> TrackedState:
        """The episode's tracked state (its turn is recorded)."""

    @property
    def _slots(self) -> list[ActionRecord | None]:
        """The recorded action of each depth."""

    @property
    def _open(self) -> Mapping[int, object]:
        """The open calls, by depth."""

    @property
    def _content(self) -> RecordContent | None:
        """What of each call its action records; ``None``: nothing."""

    @property
    def _hooks(self) -> Dispatch:
        """The observers taking part in each per-call hook."""

    def _fault(self, where: str, error: BaseException, *, notify: bool = True) -> None:
        """Count and report an error the monitor caught in itself."""


def record(
    episode: Recorder,
    verdict: Verdict,
    decision: Decision,
    reached: bool,
    error: str | None,
    token: Any,
    replacement: str | None,
    args: Mapping[str, Any] | None = None,
    result: Any = None,
    ran: bool = False,
) -> None:
    """Record the action at the verdict's depth (and tell the observers taking part)."""
    depth = verdict.depth
    step: int | None = None
    deviation: str | None = None
    if episode.plan is not None:
        try:
            match = episode.plan.match(verdict.tool, verdict.args if verdict.args is not None else args, ran=ran, result=result)
            step, deviation = match.step, match.deviation
        except Exception as e:
            episode._fault("plan matching", e)
        except BaseException:  # KeyboardInterrupt: the action is recorded before it propagates
            episode._slots[depth - 1] = action_record(
                verdict, decision, reached, error, episode.state.turn, replacement, None, None
            )
            raise
    action = episode._slots[depth - 1] = action_record(
        verdict, decision, reached, error, episode.state.turn, replacement, step, deviation
    )
    if episode._content is not None:
        add_content(episode, action, verdict.args if verdict.args is not None else args, result)
    if not verdict.executable and (episode._fed is None or depth < episode._fed):
        episode._fed = depth
    if token is not None and episode._hooks.finished:
        episode._hooks.call_finished(episode, action, verdict, token)


def record_interrupted(
    episode: Recorder, name: str, call_id: str | None, depth: int, token: Any, verdict: Verdict | None
) -> None:
    """Record the call at ``depth`` if an interruption left it unrecorded."""
    if episode._slots[depth - 1] is None and depth not in episode._open:
        if verdict is None:  # not judged: nothing showed it was not executable
            verdict = Verdict(tool=name, call_id=call_id, depth=depth, executable=True)
            why = "interrupted before the check finished"
        else:
            why = "interrupted before the call ran" if verdict.executable else "interrupted while the policy hook ran"
        record(episode, verdict, Decision.BLOCK, False, why, token, None)


def add_content(episode: Recorder, action: ActionRecord, args: Any, result: Any) -> None:
    """Put the call's arguments and result on its new action record, redacted and capped
    (``record_content``); a redaction hook that raises costs only the content (counted and logged)."""
    content = episode._content
    assert content is not None
    try:
        arguments = content.arguments(args)
        text = content.result(result, args)
    except Exception as e:
        episode._fault("record_content redaction", e)
        return
    with_content(action, arguments, text)


def action_record(
    verdict: Verdict,
    decision: Decision,
    reached: bool,
    error: str | None,
    turn: int,
    replacement: str | None,
    step: int | None,
    deviation: str | None,
) -> ActionRecord:
    """The action record of a verdict (the trusted constructor when the verdict is consistent)."""
    failures = verdict.failures
    if not failures:
        if verdict.executable and verdict.depth >= 1:  # the common case
            tool, call_id = verdict.tool, verdict.call_id
            return trusted_action(
                verdict.depth, tool, call_id, True, None, None, decision, reached, error, turn, replacement, step, deviation
            )
        failure = None
    else:
        failure = failures[0]
    consistent = verdict.executable == (failure is None) and verdict.depth >= 1
    build = trusted_action if consistent else ActionRecord  # else: the validating constructor
    return build(
        depth=verdict.depth,
        tool=verdict.tool,
        call_id=verdict.call_id,
        executable=verdict.executable,
        cause=failure.cause if failure is not None else None,
        reason=(failure.reason or None) if failure is not None else None,
        decision=decision,
        reached_environment=reached,
        error=error,
        turn=turn,
        replacement=replacement,
        plan_step=step,
        deviation=deviation,
        code=(failure.code or None) if failure is not None else None,
    )
