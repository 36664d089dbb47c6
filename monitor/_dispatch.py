"""Observer dispatch for one episode: each per-call hook goes only to the observers taking part in it.

Built once per episode from ``Observer.call_hooks()``, so an observer that only logs finished
calls costs nothing when calls start, run and return, and with no observers the episode does
no observer work at all. Every exception an observer raises is reported through ``fault``
(counted and logged, never raised), and an observer's context can never swallow the tool's
own exception.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Final

__all__ = ("NO_OBSERVERS", "PER_CALL_HOOKS", "Dispatch", "Entered", "FaultFn")

PER_CALL_HOOKS: Final = ("call_started", "call_checked", "execution_context", "call_result", "call_finished")
"""The observer hooks called for every tool call, in the order they happen."""

FaultFn = Callable[[str, BaseException], None]
"""``(where, error)``: report an error the monitor caught in itself."""

Entered = list[tuple[Any, contextlib.AbstractContextManager[Any]]]
"""Observer contexts entered, with their observers, outermost first."""


def _hooks_of(obs: Any) -> frozenset[str]:
    """The per-call hooks ``obs`` takes part in (what it says, or every hook it has)."""
    ask = getattr(obs, "call_hooks", None)
    if ask is not None:
        return frozenset(ask())
    return frozenset(name for name in PER_CALL_HOOKS if callable(getattr(obs, name, None)))


class Dispatch:
    """The observers of one episode, by hook. Each hook's list holds ``(index, observer)``,
    ``index`` being the observer's slot in a call's token tuple."""

    __slots__ = ("any", "checked", "context", "fault", "finished", "observers", "result", "size", "started")

    def __init__(self, observers: Sequence[Any], fault: FaultFn) -> None:
        self.observers = tuple(observers)
        self.fault = fault
        hooks: dict[str, list[tuple[int, Any]]] = {name: [] for name in PER_CALL_HOOKS}
        for i, obs in enumerate(self.observers):
            try:
                taking_part = _hooks_of(obs)
            except Exception as e:
                self._fault(obs, "call_hooks", e)
                continue
            for name in PER_CALL_HOOKS:
                if name in taking_part:
                    hooks[name].append((i, obs))
        self.started: tuple[tuple[int, Any], ...] = tuple(hooks["call_started"])
        self.checked: tuple[tuple[int, Any], ...] = tuple(hooks["call_checked"])
        self.context: tuple[tuple[int, Any], ...] = tuple(hooks["execution_context"])
        self.result: tuple[tuple[int, Any], ...] = tuple(hooks["call_result"])
        self.finished: tuple[tuple[int, Any], ...] = tuple(hooks["call_finished"])
        self.size = len(self.observers)
        """Length of a call's token tuple: one slot per observer."""
        self.any = any(hooks.values())
        """Whether any observer takes part in any per-call hook."""

    def _fault(self, obs: Any, hook: str, error: BaseException) -> None:
        self.fault(f"observer {type(obs).__name__}.{hook}", error)

    # -- episode -----------------------------------------------------------------------------
    @contextlib.contextmanager
    def episode_contexts(self, episode: Any) -> Iterator[None]:
        """Every observer's ``episode_context`` entered around the block."""
        entered = self.enter_episode(episode)
        try:
            yield
        except BaseException as e:
            self.exit_episode(entered, e)
            raise
        self.exit_episode(entered, None)

    def enter_episode(self, episode: Any) -> Entered:
        """Enter every observer's ``episode_context``; what was entered, for :meth:`exit_episode`."""
        entered: Entered = []
        for obs in self.observers:
            try:
                cm = obs.episode_context(episode)
                if cm is not None:
                    cm.__enter__()
                    entered.append((obs, cm))
            except Exception as e:
                self._fault(obs, "episode_context", e)
        return entered

    def exit_episode(self, entered: Entered, error: BaseException | None) -> None:
        """Exit what :meth:`enter_episode` entered, innermost first.

        An observer's error is counted, and an observer cannot swallow the agent's exception.
        """
        for obs, cm in reversed(entered):
            try:
                if error is None:
                    cm.__exit__(None, None, None)
                else:
                    cm.__exit__(type(error), error, error.__traceback__)
            except Exception as e:
                if e is not error:  # re-raising the agent's own exception is not an observer error
                    self._fault(obs, "episode_context", e)

    # -- per call ----------------------------------------------------------------------------
    def call_started(self, episode: Any, name: str, call_id: str | None, depth: int) -> tuple[Any, ...]:
        """``call_started`` of each observer; the call's token tuple (one slot per observer)."""
        started = self.started
        if self.size == 1:  # the common case: one observer
            if not started:
                return (None,)
            obs = started[0][1]
            try:
                return (obs.call_started(episode, name, call_id, depth),)
            except Exception as e:
                self._fault(obs, "call_started", e)
                return (None,)
        tokens: list[Any] = [None] * self.size
        for i, obs in started:
            try:
                tokens[i] = obs.call_started(episode, name, call_id, depth)
            except Exception as e:
                self._fault(obs, "call_started", e)
        return tuple(tokens)

    def call_checked(self, episode: Any, verdict: Any, decision: Any, token: tuple[Any, ...]) -> None:
        """The policy lets the call run."""
        for i, obs in self.checked:
            try:
                obs.call_checked(episode, verdict, decision, token[i])
            except Exception as e:
                self._fault(obs, "call_checked", e)

    def enter_execution(self, episode: Any, call: Any, token: tuple[Any, ...]) -> Entered | None:
        """Enter the observers' execution contexts; ``None`` when none was entered."""
        entered: Entered | None = None
        for i, obs in self.context:
            try:
                cm = obs.execution_context(episode, call, token[i])
                if cm is not None:
                    cm.__enter__()
                    if entered is None:
                        entered = []
                    entered.append((obs, cm))
            except Exception as e:
                self._fault(obs, "execution_context", e)
        return entered

    def exit_execution(self, entered: Entered, error: BaseException | None) -> None:
        """Exit what :meth:`enter_execution` entered, innermost first."""
        for obs, cm in reversed(entered):
            try:
                if error is None:
                    cm.__exit__(None, None, None)
                else:
                    cm.__exit__(type(error), error, error.__traceback__)
            except Exception as e:
                self._fault(obs, "execution_context", e)

    def call_result(self, episode: Any, depth: int, result: Any, token: tuple[Any, ...]) -> None:
        """The raw result of the call at ``depth``."""
        for i, obs in self.result:
            try:
                obs.call_result(episode, depth, result, token[i])
            except Exception as e:
                self._fault(obs, "call_result", e)

    def call_finished(self, episode: Any, action: Any, verdict: Any, token: tuple[Any, ...]) -> None:
        """The call's action was recorded."""
        for i, obs in self.finished:
            try:
                obs.call_finished(episode, action, verdict, token[i])
            except Exception as e:
                self._fault(obs, "call_finished", e)


def _no_fault(where: str, error: BaseException) -> None:
    """The fault handler of :data:`NO_OBSERVERS` (it has no observers to fail)."""


NO_OBSERVERS: Final = Dispatch((), _no_fault)
"""The dispatch of every episode of a monitor without observers (immutable: nothing to dispatch)."""
