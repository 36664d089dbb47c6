"""Helpers for users' own tests: capture records and verdicts without files or telemetry.

Example::

    from prefixmon import Monitor
    from prefixmon.testing import RecordCapture, VerdictCapture

    records, verdicts = RecordCapture(), VerdictCapture()
    monitor = Monitor(tools, policy="block", sink=records, observers=[verdicts])
    ...  # run the agent
    assert records.one().fed == 1
    assert verdicts.causes() == ["dependency", None]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .observer import Observer
from .records.model import ActionRecord, EpisodeRecord
from .vocabulary import Cause

__all__ = (
    "CapturedCall",
    "RecordCapture",
    "VerdictCapture",
)

if TYPE_CHECKING:
    from .episode import Episode
    from .verdict import Verdict


class RecordCapture:
    """A sink that keeps finished records in memory (pass it as ``Monitor(sink=...)``)."""

    def __init__(self) -> None:
        self.records: list[EpisodeRecord] = []

    async def __call__(self, record: EpisodeRecord) -> None:
        self.records.append(record)

    def one(self) -> EpisodeRecord:
        """The only record; fails when there is not exactly one."""
        if len(self.records) != 1:
            raise AssertionError(f"expected exactly one episode record, got {len(self.records)}")
        return self.records[0]


@dataclass(frozen=True, slots=True, kw_only=True)
class CapturedCall:
    """One recorded action with the verdict behind it."""

    episode_id: str
    action: ActionRecord
    verdict: Verdict


class VerdictCapture(Observer):
    """An observer that keeps every recorded action and its verdict, in order."""

    def __init__(self) -> None:
        self.calls: list[CapturedCall] = []

    def call_finished(self, episode: Episode, action: ActionRecord, verdict: Verdict, token: Any) -> None:
        self.calls.append(CapturedCall(episode_id=episode.id, action=action, verdict=verdict))

    def causes(self) -> list[Cause | None]:
        """The primary cause of each captured action (``None`` when executable)."""
        return [c.action.cause for c in self.calls]

    def reasons(self) -> list[str]:
        """The model-readable reason of each non-executable action."""
        return [c.action.reason or "" for c in self.calls if not c.action.executable]
