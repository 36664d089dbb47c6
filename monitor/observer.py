"""Observers: where telemetry and live logging plug into episodes.

An observer receives the life of every episode: start, each call (before the check, once
the policy lets it run, around its execution, after its action is recorded), end, and
monitor-internal errors. Every method is optional and every exception an observer raises
is caught, counted and logged, so an observer can never break the agent. With no observers
the monitor does no observer work at all, and an observer is only called for the hooks it
overrides.
"""

from __future__ import annotations

import contextlib
from typing import Any

from ._dispatch import EPISODE_HOOKS, PER_CALL_HOOKS
from .episode import Episode
from .records.model import ActionRecord, EpisodeRecord
from .verdict import ToolCall, Verdict
from .vocabulary import Decision

__all__ = ("Observer",)


class Observer:
    """Base class: override what you need.

    Per call, in order: :meth:`call_started` (its return value is the call's ``token``,
    passed to the later hooks), :meth:`call_checked` and :meth:`execution_context` when the
    call runs, :meth:`call_result` when it returned, and always :meth:`call_finished`.
    """

    def call_hooks(self) -> frozenset[str]:
        """The per-call hooks this observer takes part in; asked once when each episode opens.

        Default: every per-call hook the subclass overrides. Override it to leave out hooks that
        have nothing to do under the observer's current settings, so the monitor skips them.
        """
        cls = type(self)
        return frozenset(name for name in PER_CALL_HOOKS if getattr(cls, name, None) is not getattr(Observer, name))

    def episode_hooks(self, episode: Episode) -> frozenset[str]:
        """The hooks this observer takes part in for ``episode``; asked once, after :meth:`episode_started`.

        Names among the per-call hooks and ``episode_context`` / ``episode_finished``. Default:
        :meth:`call_hooks`, and the episode hooks the subclass overrides. Override it to leave
        out what has nothing to do for this episode (:class:`~prefixmon.telemetry.Telemetry`
        leaves out everything for an episode it neither traces nor measures, so that episode
        costs what it costs without observers).
        """
        cls = type(self)
        episode_level = (name for name in EPISODE_HOOKS if getattr(cls, name, None) is not getattr(Observer, name))
        return self.call_hooks() | frozenset(episode_level)

    def episode_started(self, episode: Episode) -> frozenset[str] | None:
        """An episode was opened.

        It may return the hooks the observer takes part in for the episode (a ``frozenset``, what
        :meth:`episode_hooks` would say); :meth:`episode_hooks` is then not asked.
        """
        return None

    def episode_context(self, episode: Episode) -> contextlib.AbstractContextManager[Any] | None:
        """A context entered while the episode is active in a task (e.g. make its span current)."""
        return None

    def call_started(self, episode: Episode, tool: str, call_id: str | None, depth: int) -> Any:
        """A call was emitted, before it is checked; the return value comes back as ``token``."""
        return None

    def call_checked(self, episode: Episode, verdict: Verdict, decision: Decision, token: Any) -> None:
        """The call was judged and the policy lets it (or its replacement) run; it runs next.

        Not called for calls that do not run (blocked, denied): their next hook is
        :meth:`call_finished`.
        """

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
