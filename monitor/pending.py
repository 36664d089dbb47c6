"""The pending call, its decision and its outcome: what the policy lets through, and what came of it.

A judged call that is not simply executable goes to the policy: it is observed, blocked, or a
replan or escalation hook (or a remembered answer) decides it. What is let through becomes a
:class:`PendingCall`, which the framework (or :meth:`prefixmon.Episode.call`) runs and reports
with ``done`` / ``failed`` / ``abandon``; :func:`settle` then judges that outcome, updates the
state and records the call. Kept apart from :mod:`prefixmon.episode` so each reads as one
concept; the functions take the episode as the small :class:`CallHost` below (no import of
the episode module, hence no cycle).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Coroutine
from types import CoroutineType
from typing import Any, Final, NoReturn, Protocol

from . import predicate
from ._call import ParsedCall, RawArgs
from ._dispatch import Entered
from ._recording import Recorder, add_content, record
from ._verdicts import in_cause_order
from .exceptions import SpecError, ToolBlocked
from .policies import Intervention, Resolution
from .records.model import trusted_action
from .repeats import RejectedCalls
from .rules.spec import ToolSpec
from .snapshot import Approvals, escalation
from .toolset import Toolset
from .verdict import Failure, ToolCall, Verdict
from .vocabulary import Decision

__all__ = ("CallHost", "Executor", "PendingCall", "PolicyHost")

Executor = Callable[[dict[str, Any]], Any]
"""``(args) -> result`` or an awaitable of it: runs a call the framework owns."""


class PolicyHost(Protocol):
    """What the policy's decision needs of the monitor (:class:`prefixmon.Monitor` is one)."""

    @property
    def toolset(self) -> Toolset:
        """The tools and their rules."""

    @property
    def intervention(self) -> Intervention:
        """Carries out the policy on calls that are not executable."""


class CallHost(Recorder, Protocol):
    """What a pending call and the policy's decision need of their episode (:class:`prefixmon.Episode` is one)."""

    @property
    def monitor(self) -> PolicyHost:
        """The monitor that opened the episode."""

    @property
    def _closed(self) -> bool:
        """Whether the episode has ended."""

    @property
    def _open(self) -> dict[int, PendingCall]:
        """The open calls, by depth."""

    @property
    def _hooked(self) -> dict[int, tuple[Verdict, Any]]:
        """Calls waiting on a replan or escalation hook: their verdict and token, by depth."""

    def _answers(self) -> Approvals:
        """The episode's remembered escalation answers."""

    def _judge_named(self, name: str, args: RawArgs, depth: int, call_id: str | None) -> Verdict:
        """Judge a call of ``name`` at ``depth`` (what the policy hooks judge replacements with)."""

    @property
    def _rejected(self) -> RejectedCalls:
        """Calls the environment refused since the last write (:mod:`prefixmon.repeats`)."""


class PendingCall:
    """A call that the monitor let through and that has not finished yet.

    Run :attr:`call` (which may be a replacement chosen by a replan or escalation hook) with
    :attr:`args`, then report the outcome with :meth:`done` or :meth:`failed`.
    """

    __slots__ = ("_closed", "_episode", "_plain", "_raw", "_replacement", "_token", "args", "decision", "spec", "verdict")

    def __init__(
        self,
        episode: CallHost,
        verdict: Verdict,
        raw: RawArgs,
        args: dict[str, Any],
        decision: Decision,
        token: Any,
        spec: ToolSpec | None,
        replacement: ToolCall | None = None,
    ) -> None:
        self._episode = episode
        self.verdict = verdict
        """The verdict of the call the agent emitted."""
        self.args = args
        """Arguments to run the call with (validated when it was executable)."""
        self.decision = decision
        self.spec = spec
        """The spec of the call to run."""
        self._raw = raw
        self._replacement = replacement
        self._token = token
        self._closed = False
        self._plain = replacement is None and spec is not None and spec.error_result is None and verdict.executable
        """Executable, as emitted, and no error result to recognise: its outcome takes the fast path."""

    @property
    def depth(self) -> int:
        """Depth of the emitted call."""
        return self.verdict.depth

    @property
    def emitted(self) -> ToolCall:
        """The call as the agent emitted it."""
        return ToolCall(name=self.verdict.tool, args=self._raw, call_id=self.verdict.call_id)

    @property
    def call(self) -> ToolCall:
        """The call to run: the emitted one, or a replacement."""
        return self._replacement or self.emitted

    @property
    def replaced(self) -> bool:
        """Whether a hook replaced the emitted call (another tool, or edited arguments).

        When it did, run :attr:`call` with :attr:`args`; otherwise the emitted call runs as
        it was emitted (:attr:`args` are its validated arguments).
        """
        return self._replacement is not None

    @property
    def _swapped(self) -> bool:
        """Whether a hook replaced the call by a call of another tool."""
        return self._replacement is not None and self._replacement.name != self.verdict.tool

    async def run(self, execute: Executor | None = None) -> Any:
        """Run the call with ``execute`` (emitted tool only) or the tool's own function; does not report the outcome."""
        func: Callable[..., Any] | None = None
        if execute is None or self._swapped:  # execute= runs the emitted tool, never a replacement of another
            func = self.spec.func if self.spec is not None else None
            if func is None and self.spec is None and execute is None:  # an undeclared tool, observed: nothing here runs it
                self.abandon("there is no such tool to run", started=False)
                raise ToolBlocked(self.verdict, decision=self.decision.value)
            if func is None:
                hint = f"execute= runs {self.verdict.tool!r} only" if execute is not None else "pass execute= to run it"
                raise SpecError(f"tool {self.call.name!r} has no implementation; {hint}")
        episode = self._episode
        token = self._token
        dispatch = episode._hooks
        entered: Entered | None = None
        if token is not None and dispatch.context:
            call = self._replacement
            if call is None:
                verdict = self.verdict
                entered = dispatch.enter_execution(episode, verdict.tool, self._raw, verdict.call_id, token)
            else:
                entered = dispatch.enter_execution(episode, call.name, call.args, call.call_id, token)
        if entered is None:
            result = func(**self.args) if func is not None else execute(self.args)  # type: ignore[misc]
            return (await result) if type(result) is CoroutineType or inspect.isawaitable(result) else result
        try:
            result = func(**self.args) if func is not None else execute(self.args)  # type: ignore[misc]
            if type(result) is CoroutineType or inspect.isawaitable(result):
                result = await result
        except BaseException as e:
            dispatch.exit_execution(entered, e)
            raise
        dispatch.exit_execution(entered, None)
        return result

    def done(self, result: Any = None) -> None:
        """The call ran and returned ``result``; judge acceptance and update the state."""
        if not self._closed:
            self._closed = True
            settle(self._episode, self, result, None, None)

    def failed(self, error: BaseException | str) -> None:
        """The call ran and the environment rejected it (an exception or an error message)."""
        if not self._closed:
            self._closed = True
            settle(self._episode, self, None, error, None)

    def abandon(self, why: str = "cancelled before the call finished", *, started: bool = True) -> None:
        """The call's outcome will never be known (cancelled mid-call).

        Args:
            why: recorded as the action's error.
            started: ``False`` when the call never started (the framework refused it before
                running it): it is then recorded as not having reached the environment.
        """
        if not self._closed:
            self._closed = True
            settle(self._episode, self, None, None, why, reached=started)

    def _cut_short(self, verdict: Verdict, name: str) -> None:
        """Record a call that ran but whose outcome was interrupted (KeyboardInterrupt) while processed."""
        replaced = self._replacement is not None
        why = "interrupted while its outcome was processed"
        record(self._episode, verdict, self.decision, not replaced, why, self._token, name if replaced else None)


_ALLOW: Final = Decision.ALLOW
"""(An enum member read through its class costs about 0.1 µs on Python 3.11, once per call.)"""

_NO_HOOK: Final = frozenset({"observe", "block"})

_BLOCKED: Final = Resolution(decision=Decision.BLOCK)
"""Policy actions that :class:`~prefixmon.policies.Intervention` carries out without awaiting a hook."""


def decide(
    episode: CallHost, verdict: Verdict, call: ParsedCall, token: Any, spec: ToolSpec | None
) -> PendingCall | Coroutine[Any, Any, PendingCall]:
    """Apply the policy to a judged call: the call to run, or the coroutine that awaits a hook to decide."""
    if verdict.executable:
        if verdict.undetermined and episode.monitor.intervention.policy.undetermined == "escalate":
            return _ask(episode, verdict, call, token)
        return let_run(episode, verdict, call.raw, verdict.args, _ALLOW, token, spec)  # type: ignore[arg-type]
    action = episode.monitor.intervention.policy(verdict)
    if action == "block":  # the common refusal, carried out here: no hook, nothing to await
        _failed(episode, verdict, token)
        refuse(episode, verdict, token, _BLOCKED)
    intervene = _intervene(episode, verdict, call, token)
    return completed(intervene) if action in _NO_HOOK else intervene


async def _ask(episode: CallHost, verdict: Verdict, call: ParsedCall, token: Any) -> PendingCall:
    """An executable call that could not be fully decided: a human approves, edits or denies it (FED is untouched)."""
    return await _resolve(episode, verdict, call, token, undetermined=True)


async def _intervene(episode: CallHost, verdict: Verdict, call: ParsedCall, token: Any) -> PendingCall:
    """Apply the policy to a call that is not executable."""
    _failed(episode, verdict, token)
    return await _resolve(episode, verdict, call, token, undetermined=False)


def _failed(episode: CallHost, verdict: Verdict, token: Any) -> None:
    """What a call that is not executable does whatever the policy: it may be the episode's first
    error (FED is live: known now, even while an observed call runs), and a monitor fault refuses it."""
    depth = verdict.depth
    if episode._fed is None or depth < episode._fed:
        episode._fed = depth
    if any(f.code == "monitor_fault" for f in verdict.failures):
        refuse(episode, verdict, token, Resolution(decision=Decision.FAIL_CLOSED))


async def _resolve(episode: CallHost, verdict: Verdict, call: ParsedCall, token: Any, *, undetermined: bool) -> PendingCall:
    """The policy's hooks (or a remembered answer) decide the call: run it as resolved, or refuse it."""
    depth = verdict.depth
    episode._hooked[depth] = (verdict, token)
    try:
        resolution = await escalation(
            episode.monitor.intervention,
            episode._answers(),
            verdict,
            call,
            episode.state,
            undetermined=undetermined,
            judge=episode._judge_named,
            fault=episode._fault,
        )
    finally:
        del episode._hooked[depth]
    if resolution.args is None:
        refuse(episode, verdict, token, resolution)
    return let_run(episode, verdict, call.raw, resolution.args, resolution.decision, token, None, resolution.call)


def let_run(
    episode: CallHost,
    verdict: Verdict,
    raw: RawArgs,
    args: dict[str, Any],
    decision: Decision,
    token: Any,
    spec: ToolSpec | None,
    replacement: ToolCall | None = None,
) -> PendingCall:
    """Let the call run; ``spec`` is the emitted tool's (``None``: look up the tool that runs)."""
    if episode._closed:  # the episode ended while a policy hook ran; its record has the call
        raise ToolBlocked(verdict, decision=Decision.BLOCK.value, guidance="the episode has ended")
    if spec is None or replacement is not None:
        spec = episode.monitor.toolset.get(replacement.name if replacement is not None else verdict.tool)
    pending = PendingCall(episode, verdict, raw, args, decision, token, spec, replacement)
    episode._open[verdict.depth] = pending
    hooks = episode._hooks
    if token is not None and hooks.checked:
        try:
            hooks.call_checked(episode, verdict, decision, token)
        except BaseException:  # interrupted before the call ran
            del episode._open[verdict.depth]
            record(episode, verdict, Decision.BLOCK, False, "interrupted before the call ran", token, None)
            raise
    return pending


def refuse(episode: CallHost, verdict: Verdict, token: Any, resolution: Resolution) -> NoReturn:
    """Record the refused call (unless the episode ended while a hook ran, and recorded it) and raise :class:`ToolBlocked`."""
    if episode._slots[verdict.depth - 1] is None:
        record(episode, verdict, resolution.decision, False, None, token, None)
    raise ToolBlocked(verdict, decision=resolution.decision.value, guidance=resolution.guidance)


def settle(
    episode: CallHost,
    pending: PendingCall,
    result: Any,
    error: BaseException | str | None,
    abandoned: str | None,
    *,
    reached: bool = True,
) -> None:
    """Settle a call that was let through: judge its outcome, update the state, record it and tell the observers."""
    verdict = pending.verdict
    depth = verdict.depth
    episode._open.pop(depth, None)
    spec = pending.spec
    replacement = pending._replacement
    if pending._plain and error is None and abandoned is None and episode.plan is None:  # the common case
        assert spec is not None
        if episode._rejected and not spec.metadata.get("read_only"):
            episode._rejected.forget()
        try:
            for fault in predicate.transition(episode.state, spec, pending.args, result, accepted=True):
                episode._fault(fault.where, fault.error)
        except BaseException:  # KeyboardInterrupt: the call ran; record it before it propagates
            pending._cut_short(verdict, verdict.tool)
            raise
        token = pending._token
        hooks = episode._hooks
        if token is not None and hooks.result:
            _tell_result(episode, pending, verdict, verdict.tool, result)
        action = episode._slots[depth - 1] = trusted_action(
            depth, verdict.tool, verdict.call_id, True, None, None, pending.decision, True, None, episode.state.turn, None
        )
        if episode._content is not None:
            add_content(episode, action, verdict.args if verdict.args is not None else pending.args, result)
        if token is not None and hooks.finished:
            hooks.call_finished(episode, action, verdict, token)
        return
    name = verdict.tool if replacement is None else replacement.name
    rejection: Failure | None = None
    if abandoned is None:
        try:
            if error is not None or (spec is not None and spec.error_result is not None):
                try:
                    rejection = predicate.acceptance(spec, name, result=result, error=error)
                except Exception as e:
                    episode._fault(f"error_result of {name}", e)
            if spec is not None:
                for fault in predicate.transition(episode.state, spec, pending.args, result, accepted=rejection is None):
                    episode._fault(fault.where, fault.error)
        except BaseException:  # KeyboardInterrupt: the call ran; record it before it propagates
            pending._cut_short(verdict, name)
            raise
    if rejection is not None and replacement is None:  # the emitted call ran and was rejected
        verdict = Verdict(
            tool=verdict.tool,
            call_id=verdict.call_id,
            depth=verdict.depth,
            executable=False,
            failures=in_cause_order(verdict.failures, rejection),
            args=verdict.args,
        )
    if rejection is not None and not isinstance(error, BaseException) and replacement is None:
        episode._rejected.remember(name, pending.args, depth, rejection.reason)  # an error result or message, not a raise
    elif episode._rejected and not (spec is not None and spec.metadata.get("read_only")):
        episode._rejected.forget()  # a write ran, or a call whose outcome is unknown
    error_text = abandoned or (rejection.reason if rejection is not None else None)
    token = pending._token
    if token is not None and abandoned is None and episode._hooks.result:
        _tell_result(episode, pending, verdict, name, result)
    if replacement is None:
        ran = abandoned is None and error is None and rejection is None
        record(episode, verdict, pending.decision, reached, error_text, token, None, pending.args, result, ran)
    else:
        record(episode, verdict, pending.decision, False, error_text, token, name, pending.args, result, False)


def _tell_result(episode: CallHost, pending: PendingCall, verdict: Verdict, name: str, result: Any) -> None:
    """Give the observers taking part the call's raw result; interrupted there, the call is recorded first."""
    try:
        episode._hooks.call_result(episode, verdict.depth, result, pending._token)
    except BaseException:
        pending._cut_short(verdict, name)
        raise


def completed(coro: Coroutine[Any, Any, PendingCall]) -> PendingCall:
    """The result of a coroutine that finishes without suspending (an intervention that calls no hook).

    Lets :meth:`prefixmon.Episode.admit` observe or block a call without an event loop; only used
    for the policy actions in :data:`_NO_HOOK` (tests/test_episode_edges.py checks that they never suspend).
    """
    try:
        coro.send(None)
    except StopIteration as done:
        result: PendingCall = done.value
        return result
    coro.close()
    raise RuntimeError("an intervention without a hook suspended; it must finish without awaiting")
