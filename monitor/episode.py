"""Episodes: one agent run, its calls, its live first-error depth and its record.

An :class:`Episode` is opened by :meth:`prefixmon.Monitor.episode`. Each emitted call gets the
next depth, is judged by the predicate, and is then run, blocked, replanned or escalated by
the policy. ``Episode.call`` runs the tool itself; ``Episode.begin`` / ``PendingCall.done``
split the same work in two for frameworks that run the tool themselves.
"""

from __future__ import annotations

import contextlib
import inspect
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextvars import ContextVar
from datetime import datetime, timezone
from types import CoroutineType, MappingProxyType
from typing import TYPE_CHECKING, Any, Final, NoReturn

import anyio

from . import predicate
from .exceptions import SpecError, ToolBlocked
from .observer import Observer, _CallHooks
from .plan import PlanFollower, PlanLike, PlanVerdict, verify_plan
from .policies import Approve, Deny, Edit, Replan
from .records import ActionRecord, EpisodeRecord, Status, build_record, trusted_action
from .spec import ToolSpec, values_at
from .state import TrackedState
from .verdict import Failure, ToolCall, Verdict
from .vocabulary import Cause, Decision, Outcome

if TYPE_CHECKING:
    from .monitor import Monitor

Executor = Callable[[dict[str, Any]], Any]
"""``(args) -> result`` or an awaitable of it: runs a call the framework owns."""

_current: ContextVar[Episode | None] = ContextVar("prefixmon_episode", default=None)


def current_episode() -> Episode | None:
    """The episode open in the current context, if any."""
    return _current.get()


class PendingCall:
    """A call that the monitor let through and that has not finished yet.

    Run :attr:`call` (which may be a replacement chosen by a replan or escalation hook) with
    :attr:`args`, then report the outcome with :meth:`done` or :meth:`failed`.
    """

    __slots__ = ("_closed", "_episode", "_raw", "_replacement", "_token", "args", "decision", "spec", "verdict")

    def __init__(
        self,
        episode: Episode,
        verdict: Verdict,
        raw: Mapping[str, Any] | str | bytes | None,
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
        entered = self._episode._enter_execution(self) if self._token is not None else None
        if entered is None:
            result = func(**self.args) if func is not None else execute(self.args)  # type: ignore[misc]
            return (await result) if type(result) is CoroutineType or inspect.isawaitable(result) else result
        try:
            result = func(**self.args) if func is not None else execute(self.args)  # type: ignore[misc]
            if type(result) is CoroutineType or inspect.isawaitable(result):
                result = await result
        except BaseException as e:
            self._episode._exit_execution(entered, e)
            raise
        self._episode._exit_execution(entered, None)
        return result

    def done(self, result: Any = None) -> None:
        """The call ran and returned ``result``; judge acceptance and update the state."""
        if not self._closed:
            self._closed = True
            self._episode._finish_call(self, result, None, None)

    def failed(self, error: BaseException | str) -> None:
        """The call ran and the environment rejected it (an exception or an error message)."""
        if not self._closed:
            self._closed = True
            self._episode._finish_call(self, None, error, None)

    def abandon(self, why: str = "cancelled before the call finished", *, started: bool = True) -> None:
        """The call's outcome will never be known (cancelled mid-call).

        Args:
            why: recorded as the action's error.
            started: ``False`` when the call never started (the framework refused it before
                running it): it is then recorded as not having reached the environment.
        """
        if not self._closed:
            self._closed = True
            self._episode._finish_call(self, None, None, why, reached=started)


class _Slot:
    """Internal bookkeeping of one recorded action; turned into an ActionRecord on demand.

    It keeps what the record needs and drops the verdict (whose arguments may be large), so
    an episode's memory grows with its number of calls, not with their payloads.
    """

    __slots__ = (
        "_built",
        "call_id",
        "decision",
        "depth",
        "deviation",
        "error",
        "executable",
        "failure",
        "plan_step",
        "reached",
        "replacement",
        "tool",
        "turn",
    )

    def __init__(
        self, verdict: Verdict, decision: Decision, reached: bool, error: str | None, turn: int, replacement: str | None
    ) -> None:
        self.tool = verdict.tool
        self.call_id = verdict.call_id
        self.depth = verdict.depth
        self.executable = verdict.executable
        self.failure = verdict.failures[0] if verdict.failures else None
        self.decision = decision
        self.reached = reached
        self.error = error
        self.turn = turn
        self.replacement = replacement
        self.plan_step: int | None = None
        self.deviation: str | None = None
        self._built: ActionRecord | None = None

    def action(self) -> ActionRecord:
        if self._built is not None:  # built once: for the observers, then for the record
            return self._built
        self._built = self._build()
        return self._built

    def _build(self) -> ActionRecord:
        failure = self.failure
        consistent = self.executable == (failure is None) and self.depth >= 1
        build = trusted_action if consistent else ActionRecord  # else: the validating constructor
        return build(
            depth=self.depth,
            tool=self.tool,
            call_id=self.call_id,
            executable=self.executable,
            cause=failure.cause if failure is not None else None,
            reason=(failure.reason or None) if failure is not None else None,
            decision=self.decision,
            reached_environment=self.reached,
            error=self.error,
            turn=self.turn,
            replacement=self.replacement,
            plan_step=self.plan_step,
            deviation=self.deviation,
        )


class Episode:
    """One monitored agent run. Open it with ``async with monitor.episode(...) as ep``."""

    def __init__(
        self,
        monitor: Monitor,
        *,
        task_id: str | None,
        labels: Mapping[str, str],
        episode_id: str | None,
        env: Any,
        exposed: Iterable[str] | None,
        allows_no_tool: bool,
        facts: Mapping[str, Any] | None,
        bindings: Mapping[str, Iterable[Any]] | None = None,
        plan: PlanLike | PlanVerdict | PlanFollower | None = None,
    ) -> None:
        self.monitor = monitor
        self.id = str(episode_id) if episode_id is not None and episode_id != "" else uuid.uuid4().hex
        self.task_id = str(task_id) if task_id is not None else self.id  # records hold text (ints are common)
        self.labels: dict[str, str] = {**monitor.labels, **{str(k): str(v) for k, v in labels.items()}}
        self.allows_no_tool = allows_no_tool
        toolset = monitor.toolset
        names = [s.name for s in toolset if s.exposed] if exposed is None else list(exposed)
        for n in names:
            if n not in toolset:
                raise SpecError(f"cannot expose unknown tool {n!r}")
        self.state = TrackedState(facts=facts, env=env, exposed=names)
        self.plan: PlanFollower | None = (
            None if plan is None else plan if isinstance(plan, PlanFollower) else PlanFollower(plan, toolset)
        )
        """Matches each recorded action to the approved plan, when the episode carries one."""
        for kind, values in (bindings or {}).items():
            for value in values:
                self.state.bind(kind, value, depth=0)
        self.outcome: Outcome | None = None
        self.internal_errors = 0
        self.record: EpisodeRecord | None = None
        """The finished record (set when the episode closes)."""
        self.started_at = datetime.now(timezone.utc)
        self._slots: list[_Slot | None] = []
        self._open: dict[int, PendingCall] = {}
        self._hooked: dict[int, tuple[Verdict, Any]] = {}
        """Calls waiting on a replan or escalation hook: their verdict and token, by depth."""
        self._depth_of: dict[str, int] = {}
        self._fed: int | None = None
        self._closed = False
        self._hooks = _CallHooks(monitor.observers)
        """The observers taking part in each per-call hook."""

    # -- live view -------------------------------------------------------------------------
    @property
    def depth(self) -> int:
        """Number of actions emitted so far."""
        return self.state.depth

    @property
    def fed(self) -> int | None:
        """Depth of the first non-executable action so far, or ``None``."""
        return self._fed

    @property
    def executable(self) -> bool:
        """Whether every action so far was executable."""
        return self._fed is None

    @property
    def actions(self) -> list[ActionRecord]:
        """Recorded actions so far, in depth order."""
        return [s.action() for s in self._slots if s is not None]

    def action_for(self, call_id: str) -> ActionRecord | None:
        """The recorded action of the call emitted with ``call_id``, if it is recorded yet."""
        depth = self._depth_of.get(call_id)
        slot = self._slots[depth - 1] if depth is not None else None
        return slot.action() if slot is not None else None

    def pending(self, call_id: str) -> PendingCall | None:
        """The open (let through, not yet finished) call emitted with ``call_id``, if any."""
        depth = self._depth_of.get(call_id)
        return self._open.get(depth) if depth is not None else None

    @contextlib.contextmanager
    def activate(self) -> Iterator[Episode]:
        """Make this the current episode (and its observers' contexts current) inside the block.

        ``Monitor.episode`` does this for its body; code using :meth:`Monitor.open_episode`
        may wrap each request or hook with it, in whatever task runs it.
        """
        reset = _current.set(self)
        try:
            with contextlib.ExitStack() as stack:
                for obs in self.monitor.observers:
                    try:
                        cm = obs.episode_context(self)
                        if cm is not None:
                            cm.__enter__()
                            stack.push(self._guarded_exit(obs, cm))
                    except Exception as e:
                        self._fault(f"observer {type(obs).__name__}.episode_context", e, notify=False)
                yield self
        finally:
            _current.reset(reset)

    def _guarded_exit(self, obs: Observer, cm: contextlib.AbstractContextManager[Any]) -> Callable[..., bool]:
        """``cm.__exit__`` for an ExitStack: an observer's error is counted, never raised, and it
        cannot swallow the agent's exception."""

        def exit_(exc_type: Any, exc: Any, tb: Any) -> bool:
            try:
                cm.__exit__(exc_type, exc, tb)
            except Exception as e:
                if e is not exc:  # re-raising the agent's own exception is not an observer error
                    self._fault(f"observer {type(obs).__name__}.episode_context", e, notify=False)
            return False

        return exit_

    def follow(self, plan: PlanLike | PlanVerdict | PlanFollower) -> PlanFollower:
        """Condition the rest of the episode on ``plan``: later actions note the step they matched."""
        self.plan = plan if isinstance(plan, PlanFollower) else PlanFollower(plan, self.monitor.toolset)
        return self.plan

    def verify_plan(self, plan: PlanLike, **options: Any) -> PlanVerdict:
        """Verify ``plan`` against this episode's current state without running anything (see :func:`prefixmon.verify_plan`)."""
        return verify_plan(self, plan, **options)

    # -- information and exposure ------------------------------------------------------------
    def user(self, message: Any) -> None:
        """Add what the user said (text or data) to the information pool."""
        self.state.inform(message)

    def inform(self, value: Any) -> None:
        """Add any other information the agent has seen to the pool."""
        self.state.inform(value)

    def expose(self, *names: str) -> None:
        """Make tools available from now on."""
        for n in names:
            if n not in self.monitor.toolset:
                raise SpecError(f"cannot expose unknown tool {n!r}")
        self.state.exposed.update(names)

    def hide(self, *names: str) -> None:
        """Make tools unavailable from now on."""
        self.state.exposed.difference_update(names)

    def next_turn(self, *, exposed: Iterable[str] | None = None) -> int:
        """Start the next turn, optionally replacing the exposed tools; returns its index."""
        self.state.turn += 1
        if exposed is not None:
            self.state.exposed.clear()
            self.expose(*exposed)
        return self.state.turn

    def finish(self, outcome: Outcome | str) -> None:
        """Set the task outcome: ``success``, ``partial`` or ``failure``."""
        self.outcome = Outcome(outcome)

    # -- checking ----------------------------------------------------------------------------
    def check(self, name: str, args: Mapping[str, Any] | str | bytes | None = None, *, call_id: str | None = None) -> Verdict:
        """Judge a call as if it were emitted next, without recording anything."""
        return self._judge(name, args, self.state.depth + 1, call_id)

    def _judge(self, name: str, args: Mapping[str, Any] | str | bytes | None, depth: int, call_id: str | None) -> Verdict:
        monitor = self.monitor
        try:
            verdict = predicate.check(monitor.toolset, self.state, name, args, depth=depth, call_id=call_id)
        except Exception as e:
            self._fault(f"checking {name}", e)
            if monitor.fail_closed:
                return Verdict(tool=name, call_id=call_id, depth=depth, executable=False, failures=(_fault_failure(name),))
            parsed = predicate.parse_arguments(args)
            return Verdict(
                tool=name, call_id=call_id, depth=depth, executable=True, args=parsed if isinstance(parsed, dict) else {}
            )
        if verdict.faults:
            for fault in verdict.faults:
                self._fault(fault.where, fault.error)
            if monitor.fail_closed:  # blocked whatever else failed; the fault ranks as a precondition
                failures = _in_cause_order(verdict.failures, _fault_failure(name))
                return Verdict(tool=name, call_id=call_id, depth=depth, executable=False, failures=failures, args=verdict.args)
        return verdict

    async def begin(
        self, name: str, args: Mapping[str, Any] | str | bytes | None = None, *, call_id: str | None = None
    ) -> PendingCall:
        """Emit a call: judge it and apply the policy.

        Returns:
            the call to run; report its outcome with ``done`` or ``failed``.

        Raises:
            ToolBlocked: the call is not run (blocked, denied, replanned without a runnable
                replacement, or nothing could run at all).
        """
        if self._closed:
            raise SpecError(f"episode {self.id!r} is closed")
        if type(name) is not str:  # a framework's odd value: records hold text
            name = str(name)
        if call_id is not None and type(call_id) is not str:
            call_id = str(call_id)
        state = self.state
        state.depth += 1
        depth = state.depth
        self._slots.append(None)
        if call_id is not None:
            self._depth_of[call_id] = depth
        token: tuple[Any, ...] | None = None
        verdict: Verdict | None = None
        try:
            if self._hooks.any:
                token = self._notify_start(name, call_id, depth)
            verdict = self._judge(name, args, depth, call_id)
            if verdict.executable:
                return self._pending(verdict, args, verdict.args, Decision.ALLOW, token)  # type: ignore[arg-type]
            return await self._intervene(verdict, args, token)
        except BaseException:  # KeyboardInterrupt, cancellation, a hook's error: the depth is still recorded
            if self._slots[depth - 1] is None and depth not in self._open:
                if verdict is None:  # not judged: nothing showed it was not executable
                    verdict = Verdict(tool=name, call_id=call_id, depth=depth, executable=True)
                    why = "interrupted before the check finished"
                else:
                    why = "interrupted before the call ran" if verdict.executable else "interrupted while the policy hook ran"
                self._record(verdict, Decision.BLOCK, False, why, token, None)
            raise

    async def _intervene(self, verdict: Verdict, raw: Mapping[str, Any] | str | bytes | None, token: Any) -> PendingCall:
        """Apply the policy to a call that is not executable."""
        depth = verdict.depth
        if self._fed is None or depth < self._fed:  # live: known now, even while an observed call runs
            self._fed = depth
        if any(f.code == "monitor_fault" for f in verdict.failures):
            self._refuse(verdict, token, Decision.FAIL_CLOSED, None)
        action = self.monitor.policy(verdict)
        if action == "observe":
            runnable = self._runnable_args(verdict, raw)
            if runnable is None:
                self._refuse(verdict, token, Decision.OBSERVE, None)
            return self._pending(verdict, raw, runnable, Decision.OBSERVE, token)
        if action == "block":
            self._refuse(verdict, token, Decision.BLOCK, None)
        self._hooked[depth] = (verdict, token)
        try:
            if action == "replan":
                return await self._replan(verdict, raw, token)
            return await self._escalate(verdict, raw, token)
        finally:
            del self._hooked[depth]

    async def call(
        self,
        name: str,
        args: Mapping[str, Any] | str | bytes | None = None,
        *,
        call_id: str | None = None,
        execute: Executor | None = None,
    ) -> Any:
        """Emit a call, and run it unless the policy stops it.

        Args:
            name: the tool's name.
            args: a dict, raw JSON text (malformed JSON is a schema failure), or ``None``.
            call_id: the framework's id for the call.
            execute: runs the call when the framework owns the tool; default: the spec's function.

        Returns:
            the tool's result (of the replacement call, if a hook replaced it).

        Raises:
            ToolBlocked: the call was not run; ``str()`` of it is written for the model.
            Exception: whatever the tool raised, after it was recorded as a rejection.
        """
        pending = await self.begin(name, args, call_id=call_id)
        if execute is not None and pending._swapped and (pending.spec is None or pending.spec.func is None):
            replacement = pending.call.name
            pending.abandon(f"execute= runs {name} and cannot run the replacement {replacement}")
            raise ToolBlocked(pending.verdict, decision=Decision.REPLAN.value, guidance=f"call {replacement} instead")
        try:
            func = pending.spec.func if execute is None and pending._token is None and pending.spec is not None else None
            if func is not None:  # the common case, without run()'s extra coroutine
                result = func(**pending.args)
                if type(result) is CoroutineType or inspect.isawaitable(result):
                    result = await result
            else:
                result = await pending.run(execute)
        except anyio.get_cancelled_exc_class():
            pending.abandon()
            raise
        except Exception as e:
            pending.failed(e)
            raise
        pending.done(result)
        return result

    # -- policy decisions --------------------------------------------------------------------
    def _pending(
        self,
        verdict: Verdict,
        raw: Mapping[str, Any] | str | bytes | None,
        args: dict[str, Any],
        decision: Decision,
        token: Any,
        replacement: ToolCall | None = None,
    ) -> PendingCall:
        if self._closed:  # the episode ended while a policy hook ran; its record has the call
            raise ToolBlocked(verdict, decision=Decision.BLOCK.value, guidance="the episode has ended")
        spec = self.monitor.toolset.get(replacement.name if replacement is not None else verdict.tool)
        pending = PendingCall(self, verdict, raw, args, decision, token, spec, replacement)
        self._open[verdict.depth] = pending
        if token is not None:
            try:
                for i, obs in self._hooks.checked:
                    try:
                        obs.call_checked(self, verdict, decision, token[i])
                    except Exception as e:
                        self._fault(f"observer {type(obs).__name__}.call_checked", e, notify=False)
            except BaseException:  # interrupted before the call ran
                del self._open[verdict.depth]
                self._record(verdict, Decision.BLOCK, False, "interrupted before the call ran", token, None)
                raise
        return pending

    @staticmethod
    def _runnable_args(verdict: Verdict, raw: Mapping[str, Any] | str | bytes | None) -> dict[str, Any] | None:
        if verdict.args is not None:
            return dict(verdict.args)
        if verdict.code == "invalid_json":
            return None
        parsed = predicate.parse_arguments(raw)
        return parsed if isinstance(parsed, dict) else None

    def _refuse(self, verdict: Verdict, token: Any, decision: Decision, guidance: str | None) -> NoReturn:
        if self._slots[verdict.depth - 1] is None:  # else the episode ended while a hook ran, and recorded it
            self._record(verdict, decision, False, None, token, None)
        raise ToolBlocked(verdict, decision=decision.value, guidance=guidance)

    async def _replan(self, verdict: Verdict, raw: Mapping[str, Any] | str | bytes | None, token: Any) -> PendingCall:
        hook = self.monitor.replan
        answer: Replan | ToolCall | str | None = None
        emitted = ToolCall(name=verdict.tool, args=raw, call_id=verdict.call_id)
        if hook is not None:
            try:
                with anyio.move_on_after(self.monitor.replan_timeout) as scope:
                    answer = await hook(verdict, emitted, self.state)
                if scope.cancelled_caught:
                    self._fault("replan hook", TimeoutError(f"no answer within {self.monitor.replan_timeout:g} s"))
            except Exception as e:
                self._fault("replan hook", e)
                answer = None
        if isinstance(answer, str):
            answer = Replan(guidance=answer)
        elif isinstance(answer, ToolCall):
            answer = Replan(call=answer)
        if not isinstance(answer, Replan):
            self._refuse(verdict, token, Decision.BLOCK, None)
        if answer.call is None:
            self._refuse(verdict, token, Decision.REPLAN, answer.guidance)
        call = ToolCall(name=answer.call.name, args=answer.call.args, call_id=answer.call.call_id or emitted.call_id)
        checked = self._judge(call.name, call.args, verdict.depth, call.call_id)
        if not checked.executable or checked.args is None:
            note = f"the suggested replacement was not executable either: {checked.reason}"
            self._refuse(verdict, token, Decision.REPLAN, f"{answer.guidance}; {note}" if answer.guidance else note)
        return self._pending(verdict, raw, dict(checked.args), Decision.REPLAN, token, call)

    async def _escalate(self, verdict: Verdict, raw: Mapping[str, Any] | str | bytes | None, token: Any) -> PendingCall:
        hook = self.monitor.escalate
        answer: Approve | Edit | Deny | None = None
        emitted = ToolCall(name=verdict.tool, args=raw, call_id=verdict.call_id)
        timed_out = False
        if hook is not None:
            try:
                with anyio.move_on_after(self.monitor.escalate_timeout) as scope:
                    answer = await hook(verdict, emitted)
                timed_out = scope.cancelled_caught
            except Exception as e:
                self._fault("escalation hook", e)
                self._refuse(verdict, token, Decision.BLOCK, None)
        if answer is None:
            why = f"no human answered within {self.monitor.escalate_timeout:g} s" if timed_out else "no human approved the call"
            self._refuse(verdict, token, Decision.DENY, why)
        if isinstance(answer, Deny):
            self._refuse(verdict, token, Decision.DENY, answer.reason)
        if isinstance(answer, Approve):
            runnable = self._runnable_args(verdict, raw)
            if runnable is None:
                self._refuse(verdict, token, Decision.DENY, "the call cannot run as emitted")
            return self._pending(verdict, raw, runnable, Decision.APPROVE, token)
        if isinstance(answer, Edit):
            edited = self._judge(verdict.tool, answer.args, verdict.depth, verdict.call_id)
            if not edited.executable or edited.args is None:
                self._refuse(verdict, token, Decision.DENY, f"the edited call is not executable either: {edited.reason}")
            call = ToolCall(name=verdict.tool, args=answer.args, call_id=verdict.call_id)
            return self._pending(verdict, raw, dict(edited.args), Decision.EDIT, token, call)
        self._fault("escalation hook", TypeError(f"escalation hook returned {type(answer).__name__}, not Approve/Edit/Deny"))
        self._refuse(verdict, token, Decision.BLOCK, None)

    # -- outcomes ----------------------------------------------------------------------------
    def _finish_call(
        self, pending: PendingCall, result: Any, error: BaseException | str | None, abandoned: str | None, *, reached: bool = True
    ) -> None:
        self._open.pop(pending.verdict.depth, None)
        verdict = pending.verdict
        spec = pending.spec
        decision = pending.decision
        replaced = pending._replacement is not None
        name = pending._replacement.name if pending._replacement is not None else verdict.tool
        rejection: Failure | None = None
        if abandoned is None:
            try:
                if error is not None or (spec is not None and spec.error_result is not None):
                    try:
                        rejection = predicate.acceptance(spec, name, result=result, error=error)
                    except Exception as e:
                        self._fault(f"error_result of {name}", e)
                if spec is not None:
                    self._absorb(spec, pending.args, result, rejection is None)
            except BaseException:  # KeyboardInterrupt: the call ran; record it before it propagates
                self._record_cut_short(pending, verdict, name)
                raise
        if rejection is not None and not replaced:  # the emitted call ran and was rejected
            verdict = Verdict(
                tool=verdict.tool,
                call_id=verdict.call_id,
                depth=verdict.depth,
                executable=False,
                failures=_in_cause_order(verdict.failures, rejection),
                args=verdict.args,
            )
        error_text = abandoned or (rejection.reason if rejection is not None else None)
        token = pending._token
        if token is not None and abandoned is None:
            try:
                for i, obs in self._hooks.result:
                    try:
                        obs.call_result(self, verdict.depth, result, token[i])
                    except Exception as e:
                        self._fault(f"observer {type(obs).__name__}.call_result", e, notify=False)
            except BaseException:
                self._record_cut_short(pending, verdict, name)
                raise
        self._record(
            verdict,
            decision,
            reached and not replaced,
            error_text,
            pending._token,
            name if replaced else None,
            args=pending.args,
            result=result,
            ran=abandoned is None and error is None and rejection is None and not replaced,
        )

    def _record_cut_short(self, pending: PendingCall, verdict: Verdict, name: str) -> None:
        """Record a call that ran but whose outcome was interrupted (KeyboardInterrupt) while processed."""
        replaced = pending._replacement is not None
        why = "interrupted while its outcome was processed"
        self._record(verdict, pending.decision, not replaced, why, pending._token, name if replaced else None)

    def _absorb(self, spec: ToolSpec, args: Mapping[str, Any], result: Any, accepted: bool) -> None:
        state = self.state
        try:
            if result is not None:
                produce = spec.produce_map if accepted and spec.produces else None
                state.ingest(result, produce=produce, tool=spec.name)
            if accepted and spec.invalidates:
                for path, ref in spec.refs:
                    if ref.kind in spec.invalidates:
                        for _, value in values_at(args, path):
                            state.invalidate(ref.kind, value, by=spec.name)
        except Exception as e:
            self._fault(f"tracking the result of {spec.name}", e)
        if accepted:
            for effect in spec.effects:
                try:
                    effect(state, args, result)
                except Exception as e:
                    self._fault(f"effect {getattr(effect, '__name__', effect)!s} of {spec.name}", e)

    def _record(
        self,
        verdict: Verdict,
        decision: Decision,
        reached: bool,
        error: str | None,
        token: Any,
        replacement: str | None,
        *,
        args: Mapping[str, Any] | None = None,
        result: Any = None,
        ran: bool = False,
    ) -> None:
        depth = verdict.depth
        slot = _Slot(verdict, decision, reached, error, self.state.turn, replacement)
        self._slots[depth - 1] = slot
        if self.plan is not None:
            try:
                match = self.plan.match(verdict.tool, verdict.args if verdict.args is not None else args, ran=ran, result=result)
                slot.plan_step, slot.deviation = match.step, match.deviation
            except Exception as e:
                self._fault("plan matching", e)
        if not verdict.executable and (self._fed is None or depth < self._fed):
            self._fed = depth
        if token is not None and self._hooks.finished:
            action = slot.action()  # built only when an observer wants it
            for i, obs in self._hooks.finished:
                try:
                    obs.call_finished(self, action, verdict, token[i])
                except Exception as e:
                    self._fault(f"observer {type(obs).__name__}.call_finished", e, notify=False)

    # -- observer dispatch (per call; each hook goes only to the observers that override it) -----
    def _notify_start(self, name: str, call_id: str | None, depth: int) -> tuple[Any, ...]:
        """``call_started`` of each observer; the call's token tuple (one slot per observer)."""
        hooks = self._hooks
        started = hooks.started
        if hooks.size == 1:  # the common case: one observer
            if not started:
                return (None,)
            obs = started[0][1]
            try:
                return (obs.call_started(self, name, call_id, depth),)
            except Exception as e:
                self._fault(f"observer {type(obs).__name__}.call_started", e, notify=False)
                return (None,)
        tokens: list[Any] = [None] * hooks.size
        for i, obs in started:
            try:
                tokens[i] = obs.call_started(self, name, call_id, depth)
            except Exception as e:
                self._fault(f"observer {type(obs).__name__}.call_started", e, notify=False)
        return tuple(tokens)

    def _enter_execution(self, pending: PendingCall) -> list[tuple[Observer, contextlib.AbstractContextManager[Any]]] | None:
        """Enter the observers' execution contexts for ``pending``; ``None`` when there are none."""
        context = self._hooks.context
        if not context:
            return None
        token = pending._token
        call = pending.call
        entered: list[tuple[Observer, contextlib.AbstractContextManager[Any]]] | None = None
        for i, obs in context:
            try:
                cm = obs.execution_context(self, call, token[i])
                if cm is not None:
                    cm.__enter__()
                    if entered is None:
                        entered = []
                    entered.append((obs, cm))
            except Exception as e:
                self._fault(f"observer {type(obs).__name__}.execution_context", e, notify=False)
        return entered

    def _exit_execution(
        self, entered: list[tuple[Observer, contextlib.AbstractContextManager[Any]]], error: BaseException | None
    ) -> None:
        """Exit what :meth:`_enter_execution` entered, innermost first.

        An observer's error is counted, never raised, and a context cannot swallow the tool's
        exception.
        """
        for obs, cm in reversed(entered):
            try:
                if error is None:
                    cm.__exit__(None, None, None)
                else:
                    cm.__exit__(type(error), error, error.__traceback__)
            except Exception as e:
                self._fault(f"observer {type(obs).__name__}.execution_context", e, notify=False)

    def _fault(self, where: str, error: BaseException, *, notify: bool = True) -> None:
        self.internal_errors += 1
        self.monitor._fault(self, where, error, notify=notify)

    # -- closing -----------------------------------------------------------------------------
    async def aclose(self, status: Status = "finished", error: str | None = None) -> EpisodeRecord:
        """Close an episode opened with :meth:`Monitor.open_episode`; idempotent.

        Abandons calls still open, builds the record, notifies observers and delivers the
        record to the sink (shielded from cancellation, bounded by the sink timeout).
        """
        if self.record is not None:
            return self.record
        record = self._close(status, error)
        await self.monitor._finished(self, record)
        return record

    def _close(self, status: Status, error: str | None) -> EpisodeRecord:
        for pending in list(self._open.values()):
            pending.abandon(
                "cancelled before the call finished" if status == "cancelled" else "the episode ended before the call finished"
            )
        for verdict, token in list(self._hooked.values()):  # not run: the hook's answer comes too late
            self._record(verdict, Decision.BLOCK, False, "the episode ended while the policy hook ran", token, None)
        self._closed = True
        actions = self.actions
        record = build_record(
            episode_id=self.id,
            task_id=self.task_id,
            labels=self.labels,
            actions=actions,
            outcome=self.outcome,
            started_at=self.started_at,
            ended_at=datetime.now(timezone.utc),
            status=status,
            error=error,
            allows_no_tool=self.allows_no_tool,
        )
        self.record = record
        return record


_CAUSE_RANK: Final[Mapping[Cause, int]] = MappingProxyType({cause: rank for rank, cause in enumerate(Cause)})


def _in_cause_order(failures: tuple[Failure, ...], extra: Failure) -> tuple[Failure, ...]:
    """``failures`` with ``extra`` added in tie-break order (after the failures of its own cause)."""
    rank = _CAUSE_RANK[extra.cause]
    at = next((i for i, f in enumerate(failures) if _CAUSE_RANK[f.cause] > rank), len(failures))
    return (*failures[:at], extra, *failures[at:])


def _fault_failure(name: str) -> Failure:
    return Failure(
        cause=Cause.PRECONDITION,
        code="monitor_fault",
        reason=f"{name} could not be checked because of an internal monitor error, and the monitor is fail-closed",
    )
