"""Observers: where telemetry and live logging plug into episodes.

An observer receives the life of every episode: start, each call (before the check and
after its action is recorded), end, and monitor-internal errors. Every method is optional
and every exception an observer raises is caught, counted and logged, so an observer can
never break the agent. With no observers the monitor does no observer work at all.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .episode import Episode
    from .predicate import ToolCall, Verdict
    from .records import ActionRecord, EpisodeRecord


class Observer:
    """Base class: override what you need."""

    def episode_started(self, episode: Episode) -> None:
        """An episode was opened."""

    def episode_context(self, episode: Episode) -> contextlib.AbstractContextManager[Any] | None:
        """A context entered while the episode is active in a task (e.g. make its span current)."""
        return None

    def call_started(self, episode: Episode, tool: str, call_id: str | None, depth: int) -> Any:
        """A call was emitted, before it is checked; the return value comes back as ``token``."""
        return None

    def execution_context(self, episode: Episode, call: ToolCall, token: Any) -> contextlib.AbstractContextManager[Any] | None:
        """A context entered around the tool's execution (e.g. make the tool span current)."""
        return None

    def call_result(self, episode: Episode, depth: int, result: Any, token: Any) -> None:
        """The raw result of the call at ``depth`` (for opt-in content capture)."""

    def call_finished(self, episode: Episode, action: ActionRecord, verdict: Verdict, token: Any) -> None:
        """The call's action was recorded: it was blocked, or it ran and its outcome is known."""

    def episode_finished(self, episode: Episode, record: EpisodeRecord) -> None:
        """The episode closed; ``record`` is final."""

    def internal_error(self, episode: Episode | None, where: str, error: BaseException) -> None:
        """The monitor caught an error of its own (a buggy precondition, a failing sink)."""
