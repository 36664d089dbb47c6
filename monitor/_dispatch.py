"""Observer dispatch for one episode: each hook goes only to the observers taking part in it.

Built once per episode, after the observers were told it started, from what each says it
takes part in for it (what ``episode_started`` returned, else ``Observer.episode_hooks()``):
an observer that only logs finished calls costs nothing when calls start, run and return,
telemetry costs nothing for an episode it does not trace, and with no observers the episode
does no observer work at all. Every exception an observer raises is reported through
``fault`` (counted and logged, never raised), and an observer's context can never swallow
the tool's own exception.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from ._internal.readonly import MappingView, view
from ._internal.trusted import trusted_constructor
from .verdict import ToolCall, Verdict

__all__ = (
    "EPISODE_HOOKS",
    "NO_OBSERVERS",
    "OBSERVER_ERRORS",
    "PER_CALL_HOOKS",
    "Dispatch",
    "Entered",
    "FaultFn",
    "start_episode",
)

PER_CALL_HOOKS: Final = ("call_started", "call_checked", "execution_context", "call_result", "call_finished")
"""The observer hooks called for every tool call, in the order they happen."""
EPISODE_HOOKS: Final = ("episode_context", "episode_finished")
"""The observer hooks of an episode after ``episode_started`` that an observer may leave out for it."""

OBSERVER_ERRORS: Final = (Exception, asyncio.CancelledError)
"""What an observer's hook may raise and have counted as its own fault. Hooks are plain
functions: a ``CancelledError`` one raises is stray (a real cancellation reaches a task at an
``await``), so it must not mark the episode cancelled."""

FaultFn = Callable[[str, BaseException], None]
"""``(where, error)``: report an error the monitor caught in itself."""

Entered = list[tuple[Any, contextlib.AbstractContextManager[Any]]]
"""Observer contexts entered, with their observers, outermost first."""


def _hooks_of(obs: Any) -> frozenset[str]:
    """The hooks of an observer that has no ``episode_hooks``: what ``call_hooks`` says, or every hook it has."""
    ask = getattr(obs, "call_hooks", None)
    if ask is not None:
        return frozenset(ask()) | frozenset(EPISODE_HOOKS)
    return frozenset(name for name in (*PER_CALL_HOOKS, *EPISODE_HOOKS) if callable(getattr(obs, name, None)))


class Dispatch:
    """The observers of one episode, by hook. Each per-call hook's list holds ``(index, observer)``,
    ``index`` being the observer's slot in a call's token tuple.

    Args:
        observers: the episode's observers.
        fault: reports an observer's error.
        taking_part: the hooks each observer takes part in for the episode (see :func:`start_episode`).
    """

    __slots__ = (
        "any",
        "checked",
        "context",
        "contexts",
        "fault",
        "finished",
        "finishing",
        "result",
        "size",
        "started",
        "viewed",
    )

    def __init__(self, observers: Sequence[Any], fault: FaultFn, taking_part: Sequence[frozenset[str]]) -> None:
        observers = tuple(observers)
        self.fault = fault
        self.size = len(observers)
        """Length of a call's token tuple: one slot per observer."""
        hooks: dict[str, list[tuple[int, Any]]] = {name: [] for name in (*PER_CALL_HOOKS, *EPISODE_HOOKS)}
        for i, (obs, names) in enumerate(zip(observers, taking_part, strict=True)):
            for name in names:
                listed = hooks.get(name)
                if listed is not None:
                    listed.append((i, obs))
        self.started: tuple[tuple[int, Any], ...] = tuple(hooks["call_started"])
        self.checked: tuple[tuple[int, Any], ...] = tuple(hooks["call_checked"])
        self.context: tuple[tuple[int, Any], ...] = tuple(hooks["execution_context"])
        self.result: tuple[tuple[int, Any], ...] = tuple(hooks["call_result"])
        self.finished: tuple[tuple[int, Any], ...] = tuple(hooks["call_finished"])
        self.any = bool(self.started or self.checked or self.context or self.result or self.finished)
        """Whether any observer takes part in any per-call hook."""
        self.contexts: tuple[Any, ...] = tuple(obs for _, obs in hooks["episode_context"])
        """Observers whose ``episode_context`` is entered while the episode is active."""
        self.finishing: tuple[Any, ...] = tuple(obs for _, obs in hooks["episode_finished"])
        """Observers told when the episode finished."""
        self.viewed: tuple[Verdict | None, Verdict | None] = (None, None)
        """The last verdict given to observers and its read-only form (call_checked, then call_finished, share it)."""

    def _fault(self, obs: Any, hook: str, error: BaseException) -> None:
        self.fault(f"observer {type(obs).__name__}.{hook}", error)

    # -- episode -----------------------------------------------------------------------------
    def enter_episode(self, episode: Any) -> Entered:
        """Enter every observer's ``episode_context``; what was entered, for :meth:`exit_episode`."""
        entered: Entered = []
        for obs in self.contexts:
            try:
                cm = obs.episode_context(episode)
                if cm is not None:
                    cm.__enter__()
                    entered.append((obs, cm))
            except OBSERVER_ERRORS as e:
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
            except OBSERVER_ERRORS as e:
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
            except OBSERVER_ERRORS as e:
                self._fault(obs, "call_started", e)
                return (None,)
        tokens: list[Any] = [None] * self.size
        for i, obs in started:
            try:
                tokens[i] = obs.call_started(episode, name, call_id, depth)
            except OBSERVER_ERRORS as e:
                self._fault(obs, "call_started", e)
        return tuple(tokens)

    def _view(self, verdict: Verdict) -> Verdict:
        """``verdict`` read-only for observers (made once per verdict)."""
        source, viewed = self.viewed
        if source is not verdict or viewed is None:
            viewed = _viewed(verdict)
            self.viewed = (verdict, viewed)
        return viewed

    def call_checked(self, episode: Any, verdict: Any, decision: Any, token: tuple[Any, ...]) -> None:
        """The policy lets the call run (observers see its arguments read-only: they cannot change what runs)."""
        if not self.checked:
            return
        verdict = self._view(verdict)
        for i, obs in self.checked:
            try:
                obs.call_checked(episode, verdict, decision, token[i])
            except OBSERVER_ERRORS as e:
                self._fault(obs, "call_checked", e)

    def enter_execution(self, episode: Any, name: str, args: Any, call_id: str | None, token: tuple[Any, ...]) -> Entered | None:
        """Enter the observers' execution contexts for the call ``name(args)``; ``None`` when none was entered."""
        entered: Entered | None = None
        if not self.context:
            return None
        if type(args) is dict or (args is not None and not isinstance(args, (str, bytes)) and isinstance(args, Mapping)):
            source, viewed = self.viewed  # the emitted dict is often the validated one, already viewed
            args = viewed.args if viewed is not None and source is not None and source.args is args else view(args)
        call = _call(name, args, call_id)
        for i, obs in self.context:
            try:
                cm = obs.execution_context(episode, call, token[i])
                if cm is not None:
                    cm.__enter__()
                    if entered is None:
                        entered = []
                    entered.append((obs, cm))
            except OBSERVER_ERRORS as e:
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
            except OBSERVER_ERRORS as e:
                self._fault(obs, "execution_context", e)

    def call_result(self, episode: Any, depth: int, result: Any, token: tuple[Any, ...]) -> None:
        """The raw result of the call at ``depth`` (read-only: the agent gets it next)."""
        if not self.result:
            return
        result = view(result)
        for i, obs in self.result:
            try:
                obs.call_result(episode, depth, result, token[i])
            except OBSERVER_ERRORS as e:
                self._fault(obs, "call_result", e)

    def call_finished(self, episode: Any, action: Any, verdict: Any, token: tuple[Any, ...]) -> None:
        """The call's action was recorded."""
        if not self.finished:
            return
        verdict = self._view(verdict)
        for i, obs in self.finished:
            try:
                obs.call_finished(episode, action, verdict, token[i])
            except OBSERVER_ERRORS as e:
                self._fault(obs, "call_finished", e)

    def finish_episode(self, episode: Any, record: Any, report: FaultFn) -> None:
        """Tell the observers taking part that the episode finished; ``report`` reports their errors."""
        for obs in self.finishing:
            try:
                obs.episode_finished(episode, record)
            except OBSERVER_ERRORS as e:
                report(f"observer {type(obs).__name__}.episode_finished", e)


def start_episode(episode: Any, observers: Sequence[Any]) -> Dispatch:
    """Tell the observers that ``episode`` started, then build its dispatch from the hooks each
    takes part in (what ``episode_started`` returned, else what ``episode_hooks`` says).

    Args:
        episode: the new episode; its ``_host_fault`` reports an error of ``episode_started``,
            its ``_observer_fault`` the observers' errors in the hooks that follow (looked up
            only when needed: an episode no observer takes part in builds neither).
        observers: its observers.

    Returns:
        the episode's dispatch: :data:`NO_OBSERVERS` when no observer takes part in anything
        for this episode (telemetry with no SDK configured), so it costs nothing more.
    """
    taking_part: list[frozenset[str]] = []
    for obs in observers:
        names: Any = None
        try:
            names = obs.episode_started(episode)
        except OBSERVER_ERRORS as e:
            episode._host_fault(f"observer {type(obs).__name__}.episode_started", e)
        if type(names) is not frozenset:  # it did not say: asked (when asking fails: the episode hooks, as before asking)
            try:
                ask = getattr(obs, "episode_hooks", None)
                names = frozenset(ask(episode)) if ask is not None else _hooks_of(obs)
            except OBSERVER_ERRORS as e:
                episode._observer_fault(f"observer {type(obs).__name__}.episode_hooks", e)
                names = frozenset(EPISODE_HOOKS)
        taking_part.append(names)
    if not any(taking_part):
        return NO_OBSERVERS
    return Dispatch(observers, episode._observer_fault, taking_part)


def _no_fault(where: str, error: BaseException) -> None:
    """The fault handler of :data:`NO_OBSERVERS` (it has no observers to fail)."""


NO_OBSERVERS: Final = Dispatch((), _no_fault, ())
"""The dispatch of every episode of a monitor without observers (immutable: nothing to dispatch)."""


_verdict: Final = trusted_constructor(
    Verdict, ("tool", "call_id", "depth", "executable", "failures", "args", "faults", "undetermined", "derived")
)
_call: Final = trusted_constructor(ToolCall, ("name", "args", "call_id"))


def _viewed(verdict: Verdict) -> Verdict:
    """``verdict`` with its arguments as a read-only view (the same verdict when it has none)."""
    args = verdict.args
    if args is None or type(args) is MappingView:
        return verdict
    return _verdict(
        verdict.tool,
        verdict.call_id,
        verdict.depth,
        verdict.executable,
        verdict.failures,
        MappingView(args),
        verdict.faults,
        verdict.undetermined,
        verdict.derived,
    )
