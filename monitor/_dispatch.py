"""Observer dispatch for one episode: each per-call hook goes only to the observers taking part in it.

Built once per episode from ``Observer.call_hooks()``, so an observer that only logs finished
calls costs nothing when calls start, run and return, and with no observers the episode does
no observer work at all. Every exception an observer raises is reported through ``fault``
(counted and logged, never raised), and an observer's context can never swallow the tool's
own exception.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Final

from ._readonly import MappingView, view
from ._trusted import trusted_constructor
from .verdict import ToolCall, Verdict

__all__ = ("OBSERVER_ERRORS", "PER_CALL_HOOKS", "Dispatch", "FaultFn")

PER_CALL_HOOKS: Final = ("call_started", "call_checked", "execution_context", "call_result", "call_finished")
"""The observer hooks called for every tool call, in the order they happen."""

OBSERVER_ERRORS: Final = (Exception, asyncio.CancelledError)
"""What an observer's hook may raise and have counted as its own fault. Hooks are plain
functions: a ``CancelledError`` one raises is stray (a real cancellation reaches a task at an
``await``), so it must not mark the episode cancelled."""

FaultFn = Callable[[str, BaseException], None]
"""``(where, error)``: report an error the monitor caught in itself."""

Entered = list[tuple[Any, contextlib.AbstractContextManager[Any]]]


def _hooks_of(obs: Any) -> frozenset[str]:
    """The per-call hooks ``obs`` takes part in (what it says, or every hook it has)."""
    ask = getattr(obs, "call_hooks", None)
    if ask is not None:
        return frozenset(ask())
    return frozenset(name for name in PER_CALL_HOOKS if callable(getattr(obs, name, None)))


class Dispatch:
    """The observers of one episode, by hook. Each hook's list holds ``(index, observer)``,
    ``index`` being the observer's slot in a call's token tuple."""

    __slots__ = ("any", "checked", "context", "fault", "finished", "observers", "result", "size", "started", "viewed")

    def __init__(self, observers: Sequence[Any], fault: FaultFn) -> None:
        self.observers = tuple(observers)
        self.fault = fault
        hooks: dict[str, list[tuple[int, Any]]] = {name: [] for name in PER_CALL_HOOKS}
        for i, obs in enumerate(self.observers):
            try:
                taking_part = _hooks_of(obs)
            except OBSERVER_ERRORS as e:
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
        self.viewed: tuple[Verdict | None, Verdict | None] = (None, None)
        """The last verdict given to observers and its read-only form (call_checked, then call_finished, share it)."""

    def _fault(self, obs: Any, hook: str, error: BaseException) -> None:
        self.fault(f"observer {type(obs).__name__}.{hook}", error)

    # -- episode -----------------------------------------------------------------------------
    @contextlib.contextmanager
    def episode_contexts(self, episode: Any) -> Iterator[None]:
        """Every observer's ``episode_context`` entered around the block."""
        with contextlib.ExitStack() as stack:
            for obs in self.observers:
                try:
                    cm = obs.episode_context(episode)
                    if cm is not None:
                        cm.__enter__()
                        stack.push(self._guarded_exit(obs, cm))
                except OBSERVER_ERRORS as e:
                    self._fault(obs, "episode_context", e)
            yield

    def _guarded_exit(self, obs: Any, cm: contextlib.AbstractContextManager[Any]) -> Callable[..., bool]:
        """``cm.__exit__`` for an ExitStack: an observer's error is counted, and it cannot swallow
        the agent's exception."""

        def exit_(exc_type: Any, exc: Any, tb: Any) -> bool:
            try:
                cm.__exit__(exc_type, exc, tb)
            except OBSERVER_ERRORS as e:
                if e is not exc:  # re-raising the agent's own exception is not an observer error
                    self._fault(obs, "episode_context", e)
            return False

        return exit_

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

    def call_checked(self, episode: Any, verdict: Any, decision: Any, token: tuple[Any, ...]) -> None:
        """The policy lets the call run (observers see its arguments read-only: they cannot change what runs)."""
        source, viewed = self.viewed
        if source is not verdict or viewed is None:
            viewed = _viewed(verdict)
            self.viewed = (verdict, viewed)
        verdict = viewed
        for i, obs in self.checked:
            try:
                obs.call_checked(episode, verdict, decision, token[i])
            except OBSERVER_ERRORS as e:
                self._fault(obs, "call_checked", e)

    def enter_execution(self, episode: Any, call: Any, token: tuple[Any, ...]) -> Entered | None:
        """Enter the observers' execution contexts; ``None`` when none was entered."""
        entered: Entered | None = None
        args = call.args
        if type(args) is dict or (args is not None and not isinstance(args, (str, bytes)) and isinstance(args, Mapping)):
            source, viewed = self.viewed  # the emitted dict is often the validated one, already viewed
            shown = viewed.args if viewed is not None and source is not None and source.args is args else view(args)
            call = _call(call.name, shown, call.call_id)
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
        result = view(result)
        for i, obs in self.result:
            try:
                obs.call_result(episode, depth, result, token[i])
            except OBSERVER_ERRORS as e:
                self._fault(obs, "call_result", e)

    def call_finished(self, episode: Any, action: Any, verdict: Any, token: tuple[Any, ...]) -> None:
        """The call's action was recorded."""
        source, viewed = self.viewed
        if source is not verdict or viewed is None:
            viewed = _viewed(verdict)
            self.viewed = (verdict, viewed)
        verdict = viewed
        for i, obs in self.finished:
            try:
                obs.call_finished(episode, action, verdict, token[i])
            except OBSERVER_ERRORS as e:
                self._fault(obs, "call_finished", e)


_verdict: Final = trusted_constructor(
    Verdict, ("tool", "call_id", "depth", "executable", "failures", "args", "faults", "undetermined")
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
    )
