"""Episodes: one agent run, its calls, its live first-error depth and its record.

An :class:`Episode` is opened by :meth:`prefixmon.Monitor.episode`. Each emitted call gets the
next depth, is judged by the predicate, and is then run, blocked, replanned or escalated by
the policy. ``Episode.call`` runs the tool itself; ``Episode.begin`` / ``PendingCall.done``
split the same work in two for frameworks that run the tool themselves.
"""

from __future__ import annotations

import inspect
import uuid
from collections.abc import Callable, Iterable, Mapping
from contextvars import ContextVar
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, NoReturn

import anyio

from . import predicate
from .exceptions import SpecError, ToolBlocked
from .policies import Approve, Deny, Edit, Replan
from .predicate import Failure, ToolCall, Verdict
from .records import ActionRecord, EpisodeRecord, Status, build_record
from .spec import ToolSpec, values_at
from .state import TrackedState
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

    __slots__ = ("_closed", "_episode", "_token", "args", "call", "decision", "emitted", "verdict")

    def __init__(
        self,
        episode: Episode,
        verdict: Verdict,
        emitted: ToolCall,
        call: ToolCall,
        args: dict[str, Any],
        decision: Decision,
        token: Any,
    ) -> None:
        self._episode = episode
        self.verdict = verdict
        """The verdict of the call the agent emitted."""
        self.emitted = emitted
        self.call = call
        """The call to run: the emitted one, or a replacement."""
        self.args = args
        """Arguments to run it with (validated when the call was executable)."""
        self.decision = decision
        self._token = token
        self._closed = False

    @property
    def depth(self) -> int:
        """Depth of the emitted call."""
        return self.verdict.depth

    async def run(self, execute: Executor | None = None) -> Any:
        """Run the call with ``execute`` or the tool's own function (does not report the outcome)."""
        if execute is not None:
            result = execute(self.args)
        else:
            spec = self._episode.monitor.toolset.get(self.call.name)
            func = spec.func if spec is not None else None
            if func is None:
                raise SpecError(f"tool {self.call.name!r} has no implementation; pass execute= to run it")
            result = func(**self.args)
        if inspect.isawaitable(result):
            result = await result
        return result

    def done(self, result: Any = None) -> None:
        """The call ran and returned ``result``; judge acceptance and update the state."""
        if self._closed:
            return
        self._closed = True
        self._episode._finish_call(self, result=result, error=None)

    def failed(self, error: BaseException | str) -> None:
        """The call ran and the environment rejected it (an exception or an error message)."""
        if self._closed:
            return
        self._closed = True
        self._episode._finish_call(self, result=None, error=error)

    def abandon(self, why: str = "cancelled") -> None:
        """The call's outcome will never be known (cancelled mid-call)."""
        if self._closed:
            return
        self._closed = True
        self._episode._finish_call(self, result=None, error=None, abandoned=why)


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
    ) -> None:
        self.monitor = monitor
        self.id = episode_id or uuid.uuid4().hex
        self.task_id = task_id if task_id is not None else self.id
        self.labels: dict[str, str] = {**monitor.labels, **{str(k): str(v) for k, v in labels.items()}}
        self.allows_no_tool = allows_no_tool
        toolset = monitor.toolset
        names = [s.name for s in toolset if s.exposed] if exposed is None else list(exposed)
        for n in names:
            if n not in toolset:
                raise SpecError(f"cannot expose unknown tool {n!r}")
        self.state = TrackedState(facts=facts, env=env, exposed=names)
        self.outcome: Outcome | None = None
        self.internal_errors = 0
        self.record: EpisodeRecord | None = None
        """The finished record (set when the episode closes)."""
        self.started_at = datetime.now(timezone.utc)
        self._actions: list[ActionRecord | None] = []
        self._pending: dict[int, PendingCall] = {}
        self._fed: int | None = None
        self._closed = False

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
        return [a for a in self._actions if a is not None]

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
            if monitor.fail_closed and verdict.executable:
                return Verdict(
                    tool=name, call_id=call_id, depth=depth, executable=False, failures=(_fault_failure(name),), args=verdict.args
                )
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
        state = self.state
        state.depth += 1
        depth = state.depth
        self._actions.append(None)
        emitted = ToolCall(name=name, args=args, call_id=call_id)
        token = self._notify_start(name, call_id, depth) if self.monitor.observers else None
        verdict = self._judge(name, args, depth, call_id)
        if verdict.executable:
            assert verdict.args is not None
            return self._pending_for(PendingCall(self, verdict, emitted, emitted, dict(verdict.args), Decision.ALLOW, token))
        if verdict.code == "monitor_fault":
            self._refuse(verdict, token, Decision.FAIL_CLOSED, None)
        action = self.monitor.policy(verdict)
        if action == "observe":
            runnable = self._runnable_args(verdict, args)
            if runnable is None:
                self._refuse(verdict, token, Decision.OBSERVE, None)
            return self._pending_for(PendingCall(self, verdict, emitted, emitted, runnable, Decision.OBSERVE, token))
        if action == "replan":
            return await self._replan(verdict, emitted, token)
        if action == "escalate":
            return await self._escalate(verdict, emitted, token)
        self._refuse(verdict, token, Decision.BLOCK, None)

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
        try:
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
    def _pending_for(self, pending: PendingCall) -> PendingCall:
        self._pending[pending.depth] = pending
        return pending

    @staticmethod
    def _runnable_args(verdict: Verdict, raw: Mapping[str, Any] | str | bytes | None) -> dict[str, Any] | None:
        if verdict.args is not None:
            return dict(verdict.args)
        if verdict.code in ("unknown_tool", "invalid_json"):
            return None
        parsed = predicate.parse_arguments(raw)
        return parsed if isinstance(parsed, dict) else None

    def _refuse(self, verdict: Verdict, token: Any, decision: Decision, guidance: str | None) -> NoReturn:
        self._record(verdict, decision=decision, reached=False, error=None, token=token)
        raise ToolBlocked(verdict, decision=decision.value, guidance=guidance)

    async def _replan(self, verdict: Verdict, emitted: ToolCall, token: Any) -> PendingCall:
        hook = self.monitor.replan
        answer: Replan | ToolCall | str | None = None
        if hook is not None:
            try:
                answer = await hook(verdict, emitted, self.state)
            except Exception as e:
                self._fault("replan hook", e)
                answer = None
        if isinstance(answer, str):
            answer = Replan(guidance=answer)
        elif isinstance(answer, ToolCall):
            answer = Replan(call=answer)
        if answer is None:
            self._refuse(verdict, token, Decision.BLOCK, None)
        assert isinstance(answer, Replan)
        if answer.call is None:
            self._refuse(verdict, token, Decision.REPLAN, answer.guidance)
        assert answer.call is not None
        replacement = self._judge(answer.call.name, answer.call.args, verdict.depth, answer.call.call_id or emitted.call_id)
        if not replacement.executable:
            note = f"the suggested replacement was not executable either: {replacement.reason}"
            self._refuse(verdict, token, Decision.REPLAN, f"{answer.guidance}; {note}" if answer.guidance else note)
        assert replacement.args is not None
        call = ToolCall(name=answer.call.name, args=answer.call.args, call_id=answer.call.call_id or emitted.call_id)
        return self._pending_for(PendingCall(self, verdict, emitted, call, dict(replacement.args), Decision.REPLAN, token))

    async def _escalate(self, verdict: Verdict, emitted: ToolCall, token: Any) -> PendingCall:
        hook = self.monitor.escalate
        answer: Approve | Edit | Deny | None = None
        if hook is not None:
            try:
                with anyio.move_on_after(self.monitor.escalate_timeout):
                    answer = await hook(verdict, emitted)
            except Exception as e:
                self._fault("escalation hook", e)
                self._refuse(verdict, token, Decision.BLOCK, None)
        if answer is None:
            self._refuse(verdict, token, Decision.DENY, f"no human answered within {self.monitor.escalate_timeout:g} s")
        if isinstance(answer, Deny):
            self._refuse(verdict, token, Decision.DENY, answer.reason)
        if isinstance(answer, Approve):
            runnable = self._runnable_args(verdict, emitted.args)
            if runnable is None:
                self._refuse(verdict, token, Decision.DENY, "the call cannot run as emitted")
            assert runnable is not None
            return self._pending_for(PendingCall(self, verdict, emitted, emitted, runnable, Decision.APPROVE, token))
        if isinstance(answer, Edit):
            edited = self._judge(emitted.name, answer.args, verdict.depth, emitted.call_id)
            if not edited.executable:
                self._refuse(verdict, token, Decision.DENY, f"the edited call is not executable either: {edited.reason}")
            assert edited.args is not None
            call = ToolCall(name=emitted.name, args=answer.args, call_id=emitted.call_id)
            return self._pending_for(PendingCall(self, verdict, emitted, call, dict(edited.args), Decision.EDIT, token))
        self._fault("escalation hook", TypeError(f"escalation hook returned {type(answer).__name__}, not Approve/Edit/Deny"))
        self._refuse(verdict, token, Decision.BLOCK, None)

    # -- outcomes ----------------------------------------------------------------------------
    def _finish_call(
        self, pending: PendingCall, *, result: Any, error: BaseException | str | None, abandoned: str | None = None
    ) -> None:
        self._pending.pop(pending.depth, None)
        verdict = pending.verdict
        call = pending.call
        toolset = self.monitor.toolset
        spec = toolset.get(call.name)
        rejection: Failure | None = None
        if abandoned is None:
            try:
                rejection = predicate.acceptance(spec, call.name, result=result, error=error)
            except Exception as e:
                self._fault(f"error_result of {call.name}", e)
            if spec is not None:
                self._absorb(spec, pending, result, accepted=rejection is None and error is None)
        if verdict.executable and rejection is not None and pending.decision is Decision.ALLOW:
            verdict = Verdict(
                tool=verdict.tool,
                call_id=verdict.call_id,
                depth=verdict.depth,
                executable=False,
                failures=(rejection,),
                args=verdict.args,
            )
        error_text = abandoned or (rejection.reason if rejection is not None else None)
        replaced = pending.decision in (Decision.REPLAN, Decision.EDIT)
        self._record(
            verdict,
            decision=pending.decision,
            reached=not replaced,
            error=error_text,
            token=pending._token,
            replacement=call.name if replaced else None,
        )

    def _absorb(self, spec: ToolSpec, pending: PendingCall, result: Any, *, accepted: bool) -> None:
        state = self.state
        try:
            produce = {p.key: p.kind for p in spec.produces} if accepted and spec.produces else None
            if result is not None:
                state.ingest(result, produce=produce, tool=spec.name)
            if not accepted:
                return
            args = pending.args
            for path, ref in spec.refs:
                if ref.kind in spec.invalidates:
                    for _, value in values_at(args, path):
                        state.invalidate(ref.kind, value, by=spec.name)
        except Exception as e:
            self._fault(f"tracking the result of {spec.name}", e)
        for effect in spec.effects:
            try:
                effect(state, pending.args, result)
            except Exception as e:
                self._fault(f"effect {getattr(effect, '__name__', effect)!s} of {spec.name}", e)

    def _record(
        self,
        verdict: Verdict,
        *,
        decision: Decision,
        reached: bool,
        error: str | None,
        token: Any,
        replacement: str | None = None,
    ) -> None:
        depth = verdict.depth
        action = ActionRecord(
            depth=depth,
            tool=verdict.tool,
            call_id=verdict.call_id,
            executable=verdict.executable,
            cause=verdict.cause,
            reason=verdict.reason or None,
            decision=decision,
            reached_environment=reached,
            error=error,
            turn=self.state.turn,
            replacement=replacement,
        )
        self._actions[depth - 1] = action
        if not verdict.executable and (self._fed is None or depth < self._fed):
            self._fed = depth
        if token is not None:
            for obs, tok in zip(self.monitor.observers, token, strict=True):
                try:
                    obs.call_finished(self, action, verdict, tok)
                except Exception as e:
                    self._fault(f"observer {type(obs).__name__}.call_finished", e, notify=False)

    def _notify_start(self, name: str, call_id: str | None, depth: int) -> tuple[Any, ...]:
        tokens = []
        for obs in self.monitor.observers:
            try:
                tokens.append(obs.call_started(self, name, call_id, depth))
            except Exception as e:
                tokens.append(None)
                self._fault(f"observer {type(obs).__name__}.call_started", e, notify=False)
        return tuple(tokens)

    def _fault(self, where: str, error: BaseException, *, notify: bool = True) -> None:
        self.internal_errors += 1
        self.monitor._fault(self, where, error, notify=notify)

    # -- closing -----------------------------------------------------------------------------
    def _close(self, status: Status, error: str | None) -> EpisodeRecord:
        for pending in list(self._pending.values()):
            pending.abandon(
                "cancelled before the call finished" if status == "cancelled" else "the episode ended before the call finished"
            )
        self._closed = True
        actions = [a for a in self._actions if a is not None]
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


def _fault_failure(name: str) -> Failure:
    return Failure(
        cause=Cause.PRECONDITION,
        code="monitor_fault",
        reason=f"{name} could not be checked because of an internal monitor error, and the monitor is fail-closed",
    )
