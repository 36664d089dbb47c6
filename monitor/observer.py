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
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from .episode import Episode
    from .records import ActionRecord, EpisodeRecord
    from .verdict import ToolCall, Verdict
    from .vocabulary import Decision


class Observer:
    """Base class: override what you need.

    Per call, in order: :meth:`call_started` (its return value is the call's ``token``,
    passed to the later hooks), :meth:`call_checked` and :meth:`execution_context` when the
    call runs, :meth:`call_result` when it returned, and always :meth:`call_finished`.
    """

    def episode_started(self, episode: Episode) -> None:
        """An episode was opened."""

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


_PER_CALL: Final = ("call_started", "call_checked", "execution_context", "call_result", "call_finished")


class _CallHooks:
    """Which observers take part in each per-call hook (internal; built once per episode).

    Each hook lists ``(index, observer)`` pairs, ``index`` being the observer's position in
    the call's token tuple. An observer is left out of a hook it does not override (the
    base class's method does nothing), or that its ``_idle_call_hooks`` names (nothing to do
    under its settings when the episode opens), so an observer that only logs finished calls
    costs nothing when calls start, run and return.
    """

    __slots__ = ("any", "checked", "context", "finished", "result", "size", "started")

    def __init__(self, observers: tuple[Observer, ...]) -> None:
        hooks: dict[str, list[tuple[int, Observer]]] = {name: [] for name in _PER_CALL}
        for i, obs in enumerate(observers):
            idle = getattr(obs, "_idle_call_hooks", ())
            for name in _PER_CALL:
                if name not in idle and _overrides(obs, name):
                    hooks[name].append((i, obs))
        self.started: tuple[tuple[int, Observer], ...] = tuple(hooks["call_started"])
        self.checked: tuple[tuple[int, Observer], ...] = tuple(hooks["call_checked"])
        self.context: tuple[tuple[int, Observer], ...] = tuple(hooks["execution_context"])
        self.result: tuple[tuple[int, Observer], ...] = tuple(hooks["call_result"])
        self.finished: tuple[tuple[int, Observer], ...] = tuple(hooks["call_finished"])
        self.size = len(observers)
        """Length of a call's token tuple: one slot per observer."""
        self.any = any(hooks.values())
        """Whether any observer takes part in any per-call hook."""


def _overrides(obs: object, name: str) -> bool:
    """Whether ``obs`` has its own ``name`` hook (not the base class's no-op)."""
    method = getattr(obs, name, None)
    if method is None:
        return False
    return getattr(method, "__func__", None) is not getattr(Observer, name)
