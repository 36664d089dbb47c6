"""Episodes: one agent run, its calls, its live first-error depth and its record.

An :class:`Episode` is opened by :meth:`prefixmon.Monitor.episode`. Each emitted call gets the
next depth, is judged by the predicate, and is then run, blocked, replanned or escalated by
the policy. ``Episode.call`` runs the tool itself; ``Episode.begin`` / ``PendingCall.done``
split the same work in two for frameworks that run the tool themselves.

This module holds the episode and a call's admission. The pending call, the policy's decision
and a call's outcome are :mod:`prefixmon.pending`; record building is ``_recording``; the
verdicts the episode makes itself (monitor faults) are ``_verdicts``; labels and ids as text
are ``_labels``.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import inspect
import sys
import warnings
from collections.abc import Awaitable, Coroutine, Iterable, Iterator, Mapping, Sequence
from contextvars import ContextVar, Token
from dataclasses import replace
from datetime import UTC, datetime
from types import CoroutineType, MappingProxyType
from typing import Any, Final, Protocol

from . import predicate
from ._call import ParsedCall, RawArgs, at_door, made, parse_call
from ._dispatch import NO_OBSERVERS, Entered, start_episode
from ._labels import call_text, random_id, required_text
from ._labels import text_labels as text_labels
from ._probes import probe
from ._recording import PlanTracker as PlanTracker
from ._recording import StepMatch as StepMatch
from ._recording import record as record_action
from ._recording import record_interrupted
from ._verdicts import check_failed, in_cause_order, unkept, with_faults
from .batch import Batch
from .exceptions import SpecError, ToolBlocked
from .pending import Executor as Executor
from .pending import PendingCall as PendingCall
from .pending import decide, let_run, settle
from .policies import Intervention
from .records.model import ActionRecord, EpisodeRecord, ProbeRecord, Status, build_record
from .records.redaction import RecordContent
from .repeats import RejectedCalls
from .rules.grounding import InformedTexts
from .rules.provenance import ProvenanceIndex
from .rules.spec import ToolSpec
from .snapshot import Approval, Approvals, Snapshot, take
from .state import TrackedState
from .toolset import Toolset
from .verdict import ToolCall, Verdict
from .vocabulary import Decision, Outcome

__all__ = ("Episode", "EpisodeHost", "Executor", "PendingCall", "PlanTracker", "StepMatch", "current_episode")

_current: ContextVar[Episode | None] = ContextVar("prefixmon_episode", default=None)


class EpisodeHost(Protocol):
    """What an episode needs from the monitor that opened it (:class:`prefixmon.Monitor` is one)."""

    @property
    def toolset(self) -> Toolset:
        """The tools and their rules."""

    @property
    def labels(self) -> Mapping[str, str]:
        """Labels merged into every episode's labels."""

    @property
    def observers(self) -> Sequence[Any]:
        """Telemetry and logging hooks."""

    @property
    def fail_closed(self) -> bool:
        """Whether a monitor-internal error blocks the call."""

    @property
    def sink_failing(self) -> bool:
        """Whether records cannot be kept now (fail-closed blocks calls meanwhile)."""

    @property
    def intervention(self) -> Intervention:
        """Carries out the policy on calls that are not executable."""

    @property
    def informed_texts(self) -> InformedTexts | None:
        """Where long texts told to its episodes are read once for all of them (``None``: each episode reads them)."""

    @property
    def content(self) -> RecordContent | None:
        """What of each call its action record holds (``Monitor(record_content=True)``); ``None``: nothing."""

    def report_fault(self, episode: Episode | None, where: str, error: BaseException, *, notify: bool = True) -> None:
        """Count, log and report an error the monitor caught in itself."""

    def deliver_now(self, episode: Episode, record: EpisodeRecord) -> Awaitable[None] | None:
        """Hand a closed episode's record to the sink (its observers were told it finished), right
        here where nothing needs an event loop; else the awaitable that delivers it."""

    async def run_probe(self, tool: str, args: dict[str, Any]) -> Any:
        """Run a read-only probe call; raises ``LookupError`` when nothing can run it."""


def current_episode() -> Episode | None:
    """The episode open in the current context, if any."""
    return _current.get()


def cancellation(exc: BaseException) -> bool:
    """Whether ``exc`` stops the episode from outside: a cancellation, or its coroutine closed
    (``GeneratorExit``). Asks no event loop: there may be none left (a loop that crashed)."""
    if isinstance(exc, (asyncio.CancelledError, GeneratorExit)):
        return True
    trio = sys.modules.get("trio")
    return trio is not None and isinstance(exc, trio.Cancelled)


_OUTCOMES: Final[Mapping[str, Outcome]] = MappingProxyType({o.value: o for o in Outcome})
"""Outcome by value (an ``Outcome`` is its own value, so it finds itself)."""


class Episode:
    """One monitored agent run. Open it with ``async with monitor.episode(...) as ep``."""

    def __init__(
        self,
        monitor: EpisodeHost,
        *,
        task_id: str | None,
        labels: Mapping[str, str],
        episode_id: str | None,
        env: Any,
        exposed: Iterable[str] | None,
        allows_no_tool: bool,
        facts: Mapping[str, Any] | None,
        bindings: Mapping[str, Iterable[Any]] | None = None,
        plan: PlanTracker | Any = None,
    ) -> None:
        self.monitor = monitor
        """The monitor that opened the episode."""
        self.id = required_text(episode_id, "episode_id") if episode_id is not None and episode_id != "" else random_id()
        self.task_id = required_text(task_id, "task_id") if task_id is not None else self.id  # ints are common
        self.labels: dict[str, str] = text_labels(labels, dict(monitor.labels))
        self.allows_no_tool = allows_no_tool
        toolset = monitor.toolset
        if exposed is None:  # shared with every episode until one changes it: no cost per tool
            names: Iterable[str] = toolset.exposed_names()
        else:
            names = list(exposed)
            for n in names:
                if n not in toolset:
                    raise SpecError(f"cannot expose unknown tool {n!r}")
        self.state = TrackedState(
            facts=facts,
            env=env,
            exposed=names,
            informed=monitor.informed_texts,
            provenance=ProvenanceIndex() if toolset.tracks_provenance() else None,
        )
        self.plan: PlanTracker | None = None if plan is None else _tracker(plan, toolset)
        """Matches each recorded action to the approved plan, when the episode carries one."""
        if bindings:
            for kind, values in bindings.items():
                for value in values:
                    self.state.bind(kind, value, depth=0)
        self.outcome: Outcome | None = None
        self.internal_errors = 0
        self.record: EpisodeRecord | None = None
        """The finished record (set when the episode closes)."""
        self.started_at = datetime.now(UTC)
        self._slots: list[ActionRecord | None] = []
        """The recorded action of each depth (``None`` while its call is being decided or runs)."""
        self._open: dict[int, PendingCall] = {}
        self._rejected = RejectedCalls()
        """Calls the environment refused since the last write (:mod:`prefixmon.repeats`)."""
        self._hooked: dict[int, tuple[Verdict, Any]] = {}
        """Calls waiting on a replan or escalation hook: their verdict and token, by depth."""
        self._depth_of: dict[str, int] = {}
        self._fed: int | None = None
        self._approvals: Approvals | None = None
        """The escalation answers given in this episode (:mod:`prefixmon.snapshot`); made at the first escalation."""
        self._told: list[tuple[str, Any]] = []
        """What :meth:`user`, :meth:`inform` and :meth:`assistant` were given, in order (for :meth:`snapshot`)."""
        self._closed = False
        self.probes: list[ProbeRecord] = []
        """Lookups the monitor made itself before calls (spec-file probes), in order."""
        self._content: RecordContent | None = monitor.content
        """What of each call its action records (``Monitor(record_content=True)``); ``None``: nothing."""
        observers = monitor.observers
        self._hooks = start_episode(self, observers) if observers else NO_OBSERVERS
        """The observers taking part in each per-call hook (asked once they were told the episode started)."""

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
        return [a for a in self._slots if a is not None]

    def action_for(self, call_id: str) -> ActionRecord | None:
        """The recorded action of the call emitted with ``call_id``, if it is recorded yet."""
        depth = self._depth_of.get(call_id)
        return self._slots[depth - 1] if depth is not None else None

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
        reset, entered = self._enter()
        try:
            yield self
        except BaseException as e:
            self._leave(reset, entered, e)
            raise
        self._leave(reset, entered, None)

    def _enter(self) -> tuple[Token[Episode | None], Entered | None]:
        """Make this the current episode and enter the observers' episode contexts (see :meth:`activate`)."""
        reset = _current.set(self)
        hooks = self._hooks
        return reset, (hooks.enter_episode(self) if hooks.contexts else None)

    def _leave(self, reset: Token[Episode | None], entered: Entered | None, error: BaseException | None) -> None:
        """Undo :meth:`_enter`: the observers' contexts (innermost first), then the current episode."""
        try:
            if entered:
                self._hooks.exit_episode(entered, error)
        finally:
            try:
                _current.reset(reset)
            except ValueError:  # exited in another task: the entering task's context is not ours to restore
                if _current.get() is self:
                    _current.set(None if reset.old_value is reset.MISSING else reset.old_value)

    def follow(self, plan: PlanTracker | Any) -> PlanTracker:
        """Condition the rest of the episode on a plan: later actions note the step they matched.

        Args:
            plan: a :class:`prefixmon.plan.PlanFollower` (``PlanFollower(verdict, toolset)``).
                Passing a plan or a plan verdict itself still works but is deprecated.
        """
        self.plan = _tracker(plan, self.monitor.toolset)
        return self.plan

    def verify_plan(self, plan: Any, **options: Any) -> Any:
        """Deprecated: use ``prefixmon.verify_plan(monitor.toolset, plan, state=episode.state)``."""
        warnings.warn(
            "Episode.verify_plan is deprecated and will be removed in 0.3.0; "
            "use prefixmon.verify_plan(episode.monitor.toolset, plan, state=episode.state)",
            DeprecationWarning,
            stacklevel=2,
        )
        options.setdefault("state", self.state)
        return _plan_module().verify_plan(self.monitor.toolset, plan, **options)

    # -- information and exposure ------------------------------------------------------------
    def user(self, message: Any) -> None:
        """Add what the user said (text or data) to the information pool.

        Values the user states count as seen information, and satisfy ``Ref(kind, user=True)``.
        An object that breaks indexing is a counted monitor fault, as it is in a tool result.
        """
        self._told.append(("user", message))
        try:
            self.state.inform(message, user=True)
        except Exception as e:
            self._fault("tracking what the user said", e)

    def assistant(self, text: str) -> None:
        """Note what the agent itself wrote (its message text; tool calls go through :meth:`call`).

        It is not information the agent has seen. An id in it that the agent was not given (no
        tool returned it, the user did not say it) is the agent's own: if the user repeats it, it
        still does not count as stated by the user, so a call that refers to it fails the
        dependency check (a flight number from a table the agent made up, echoed by the user).
        """
        self._told.append(("assistant", text))
        try:
            self.state.agent_wrote(text)
        except Exception as e:
            self._fault("tracking what the agent wrote", e)

    def inform(self, value: Any) -> None:
        """Add other information the agent has seen (a system prompt, a policy document) to the pool.

        It counts as seen information, but not as something the user said.
        """
        self._told.append(("inform", value))
        try:
            self.state.inform(value)
        except Exception as e:
            self._fault("tracking informed values", e)

    # -- approvals and snapshots -------------------------------------------------------------
    @property
    def approvals(self) -> list[Approval]:
        """The escalation answers remembered in this episode; the same call escalated again gets its answer unasked."""
        return self._approvals.entries if self._approvals is not None else []

    def _answers(self) -> Approvals:
        """The episode's remembered escalation answers (made when first needed: most episodes never escalate)."""
        approvals = self._approvals
        if approvals is None:
            approvals = self._approvals = Approvals()
        return approvals

    def snapshot(self) -> Snapshot:
        """What is needed to continue this episode with :meth:`Monitor.resume <prefixmon.Monitor.resume>` (JSON data).

        It holds the application's own values (arguments, facts, the texts told): store it
        like any checkpoint. See :mod:`prefixmon.snapshot` for what it does not hold.

        Raises:
            SpecError: a call is open or waiting on a hook.
            RecordError: a fact is not JSON data.
        """
        return take(self)

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
        found = _OUTCOMES.get(outcome) if isinstance(outcome, str) else None
        self.outcome = found if found is not None else Outcome(outcome)  # anything else: the enum's own error

    # -- checking ----------------------------------------------------------------------------
    async def probe(self, name: str, args: Mapping[str, Any] | str | bytes | None = None) -> None:
        """Make the spec-file probes a call of ``name`` would make before it is judged, without emitting it.

        :meth:`begin` does this for every call; use it before :meth:`check` to judge a call
        with what its probes observe. Probes are recorded in :attr:`probes`, never as actions.
        """
        spec = self.monitor.toolset.get(name)
        if spec is not None and spec.probes and (parsed := parse_call(name, args, None).args) is not None:
            await probe(
                self.state,
                spec,
                parsed,
                self.state.depth + 1,
                run=self.monitor.run_probe,
                toolset=self.monitor.toolset,
                records=self.probes,
                fault=self._fault,
            )

    def check(self, name: str, args: Mapping[str, Any] | str | bytes | None = None, *, call_id: str | None = None) -> Verdict:
        """Judge a call as if it were emitted next, without recording anything."""
        return self._judge_named(name, args, self.state.depth + 1, call_id)

    def _judge_named(self, name: str, args: RawArgs, depth: int, call_id: str | None) -> Verdict:
        """:meth:`_judge` of the tool ``name``, its spec looked up here (what the policy hooks judge replacements with)."""
        return self._judge(name, args, call_id, at_door(name, args, call_id), depth, self.monitor.toolset.get(name))

    def _judge(
        self, name: str, args: RawArgs, call_id: str | None, call: ParsedCall | None, depth: int, spec: ToolSpec | None
    ) -> Verdict:
        """The predicate's verdict, plus what only the episode sees: a call the environment refused
        already (:mod:`prefixmon.repeats`), a finding of its batch (:mod:`prefixmon.batch`), faults.

        ``call`` is what :func:`~prefixmon._call.at_door` made of the arguments (``None``: a dict).
        """
        try:
            if call is None:  # a dict: nothing to parse
                verdict = predicate.check_parsed(spec, self.monitor.toolset, self.state, name, args, depth, call_id)  # type: ignore[arg-type]
            else:
                verdict = predicate.check_call(spec, self.monitor.toolset, self.state, call, depth)
            if self._rejected and verdict.args is not None and (repeat := self._rejected.repeat(name, verdict.args)) is not None:
                verdict = replace(verdict, executable=False, failures=in_cause_order(verdict.failures, repeat))
            batch = self.state.batch
            if (
                batch is not None
                and spec is not None
                and verdict.args is not None
                and (found := batch.finding(spec, verdict.args)) is not None
            ):
                verdict = replace(verdict, executable=False, failures=in_cause_order(verdict.failures, found))
        except Exception as e:
            return check_failed(self, made(call, name, args, call_id), depth, e)
        return with_faults(self, verdict, name) if verdict.faults else verdict

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
        admitted = self._admit(name, args, call_id)
        return admitted if type(admitted) is PendingCall else await admitted  # type: ignore[misc]

    async def begin_batch(
        self, calls: Sequence[ToolCall | tuple[str, Mapping[str, Any] | str | bytes | None] | tuple[str, Any, str | None]]
    ) -> list[PendingCall | ToolBlocked]:
        """Emit every call of one assistant message: judge each against the state before the batch.

        What one call returns is applied only when it is reported (``done``), so no call of the
        batch sees another's result; a reference only a sibling produces is a dependency failure
        naming it, and a side-effecting call repeated in the batch is reported
        (:mod:`prefixmon.batch`). The calls take consecutive depths in message order.

        Args:
            calls: :class:`ToolCall` s or ``(name, args[, call_id])`` tuples.

        Returns:
            per call, in order, the call to run (report it with ``done`` or ``failed``) or the
            :class:`ToolBlocked` that says why it is not run (``str()`` is for the model).
        """
        state = self.state
        outer = state.batch
        batch = state.batch = (
            Batch([c.name if isinstance(c, ToolCall) else c[0] for c in calls], self.monitor.toolset) if len(calls) > 1 else None
        )
        out: list[PendingCall | ToolBlocked] = []
        try:
            for i, c in enumerate(calls):
                if batch is not None:
                    batch.index = i
                try:
                    if isinstance(c, ToolCall):
                        admitted = self._admit(c.name, c.args, c.call_id)
                    else:
                        admitted = self._admit(c[0], c[1], c[2] if len(c) > 2 else None)
                    out.append(admitted if type(admitted) is PendingCall else await admitted)  # type: ignore[misc]
                except ToolBlocked as blocked:
                    out.append(blocked)
        finally:
            state.batch = outer
        return out

    async def begin_unchecked(
        self, name: str, args: Mapping[str, Any] | str | bytes | None = None, *, call_id: str | None = None, error: Exception
    ) -> PendingCall:
        """Emit a call the monitor cannot check, as :meth:`begin` does: ``error`` says why (the
        tools' declarations could not be read, say). It counts as a monitor fault: fail-open runs
        the call unchecked, fail-closed refuses it. ``name`` need not be declared; telemetry and
        logs label it as a name the model made up.

        Raises:
            ToolBlocked: the call is not run (fail-closed, or the policy's hooks refused it).
        """
        admitted = self._admit(name, args, call_id, error)
        return admitted if type(admitted) is PendingCall else await admitted  # type: ignore[misc]

    def admit(
        self, name: str, args: Mapping[str, Any] | str | bytes | None = None, *, call_id: str | None = None
    ) -> PendingCall | Awaitable[PendingCall]:
        """Emit a call, as :meth:`begin` does, without an event loop when nothing needs one.

        For synchronous callers (a framework's sync tool path): the call is judged and the
        policy applied right here, unless a hook has to be awaited (a spec file's probes, a
        replan or escalation hook). Then the rest is returned as an awaitable; await it (or
        run it with ``anyio.run``) exactly once.

        Returns:
            the call to run (report its outcome with ``done`` or ``failed``), or an awaitable of it.

        Raises:
            ToolBlocked: the call is not run (blocked here; an awaitable raises it when awaited).
        """
        return self._admit(name, args, call_id)

    def _admit(
        self, name: str, args: Mapping[str, Any] | str | bytes | None, call_id: str | None, unchecked: Exception | None = None
    ) -> PendingCall | Awaitable[PendingCall]:
        if self._closed:
            raise SpecError(f"episode {self.id!r} is closed")
        if type(name) is not str:  # a framework's odd value: records hold text
            name = call_text(name)
        if call_id is not None and type(call_id) is not str:
            call_id = call_text(call_id)
        state = self.state
        state.depth += 1
        depth = state.depth
        self._slots.append(None)
        if call_id is not None:
            self._depth_of[call_id] = depth
        token: tuple[Any, ...] | None = None
        verdict: Verdict | None = None
        try:
            faults = self.internal_errors
            if self._hooks.any:
                token = self._hooks.call_started(self, name, call_id, depth)
            spec = self.monitor.toolset.get(name)
            call = None if type(args) is dict else parse_call(name, args, call_id)  # at_door, inlined: the one parse
            if self.monitor.fail_closed and (self.internal_errors != faults or self.monitor.sink_failing):
                verdict = unkept(name, call_id, depth, self.internal_errors != faults)
            elif unchecked is not None:
                verdict = check_failed(self, made(call, name, args, call_id), depth, unchecked)
            elif spec is not None and spec.probes:
                probed = self._probed(spec, made(call, name, args, call_id), depth, token)
                return self._guarded(probed, name, call_id, depth, token)
            else:
                verdict = self._judge(name, args, call_id, call, depth, spec)
            if verdict.executable and not verdict.undetermined:  # the common case, without _decide
                if token is None:  # and no observer: _pending inlined
                    pending = self._open[depth] = PendingCall(self, verdict, args, verdict.args, _ALLOW, None, spec)  # type: ignore[arg-type]
                    return pending
                return let_run(self, verdict, args, verdict.args, _ALLOW, token, spec)  # type: ignore[arg-type]
            decided = decide(self, verdict, made(call, name, args, call_id), token, spec)
            if type(decided) is PendingCall:
                return decided
            return self._guarded(decided, name, call_id, depth, token, verdict)  # type: ignore[arg-type]
        except BaseException:  # KeyboardInterrupt, a hook's error, a ToolBlocked: the depth is still recorded
            record_interrupted(self, name, call_id, depth, token, verdict)
            raise

    async def _guarded(
        self,
        rest: Coroutine[Any, Any, PendingCall],
        name: str,
        call_id: str | None,
        depth: int,
        token: Any,
        verdict: Verdict | None = None,
    ) -> PendingCall:
        """Await the rest of an admission; whatever interrupts it, the depth is still recorded."""
        try:
            return await rest
        except BaseException:  # cancellation, a hook's error: the depth is still recorded
            record_interrupted(self, name, call_id, depth, token, verdict)
            raise

    async def _probed(self, spec: ToolSpec, call: ParsedCall, depth: int, token: Any) -> PendingCall:
        """The admission of a call whose spec has probes: look up what its rules read, then judge it."""
        if call.args is not None:
            run, toolset = self.monitor.run_probe, self.monitor.toolset
            await probe(self.state, spec, call.args, depth, run=run, toolset=toolset, records=self.probes, fault=self._fault)
        verdict = self._judge(call.tool, call.raw, call.call_id, call, depth, spec)
        decided = decide(self, verdict, call, token, spec)
        if type(decided) is PendingCall:
            return decided
        return await self._guarded(decided, call.tool, call.call_id, depth, token, verdict)  # type: ignore[arg-type]

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
        pending = self._admit(name, args, call_id)
        if type(pending) is not PendingCall:
            pending = await pending  # type: ignore[misc]
        if execute is not None and pending._swapped and (pending.spec is None or pending.spec.func is None):
            replacement = pending.call.name
            pending.abandon(f"execute= runs {name} and cannot run the replacement {replacement}")
            raise ToolBlocked(pending.verdict, decision=Decision.REPLAN.value, guidance=f"call {replacement} instead")
        try:
            func = (
                pending.spec.func
                if execute is None and pending.spec is not None and (pending._token is None or not self._hooks.context)
                else None
            )
            if func is not None:  # the common case, without run()'s extra coroutine
                result = func(**pending.args)
                if type(result) is CoroutineType or inspect.isawaitable(result):
                    result = await result
            else:
                result = await pending.run(execute)
        except Exception as e:
            pending.failed(e)
            raise
        except BaseException as e:
            if cancellation(e):
                pending.abandon()
            raise
        if not pending._closed:  # pending.done(result), one frame less
            pending._closed = True
            settle(self, pending, result, None, None)
        return result

    def _fault(self, where: str, error: BaseException, *, notify: bool = True) -> None:
        self.internal_errors += 1
        self.monitor.report_fault(self, where, error, notify=notify)

    def _host_fault(self, where: str, error: BaseException) -> None:
        """An observer's error in ``episode_started`` or ``episode_finished``: counted and logged by the monitor only."""
        self.monitor.report_fault(self, where, error, notify=False)

    def _observer_fault(self, where: str, error: BaseException) -> None:
        """An observer's own error: counted and logged, not sent to the observers again."""
        self._fault(where, error, notify=False)

    # -- closing -----------------------------------------------------------------------------
    async def aclose(self, status: Status = "finished", error: str | None = None) -> EpisodeRecord:
        """Close an episode opened with :meth:`Monitor.open_episode`; idempotent.

        Abandons calls still open, builds the record, notifies observers and delivers the
        record to the sink (shielded from cancellation, bounded by the sink timeout).
        """
        if self.record is not None:
            return self.record
        record, rest, interrupt = self._end(status, error)
        if rest is not None:  # (no coroutine without a sink or with a JSON Lines one)
            await rest
        if interrupt is not None:
            raise interrupt
        return record

    def close_sync(self, status: Status = "finished", error: str | None = None) -> EpisodeRecord | Awaitable[EpisodeRecord]:
        """:meth:`aclose` without an event loop when nothing needs one; idempotent.

        For synchronous callers (a framework's sync run hooks): the record is built, the
        observers told and the record handed to a :class:`~prefixmon.JsonlSink` right here. A
        callable sink has to be awaited: then the rest is returned as an awaitable; await it
        (or run it with ``anyio.run``) exactly once.

        Returns:
            the record, or an awaitable of it.
        """
        if self.record is not None:
            return self.record
        record, rest, interrupt = self._end(status, error)
        if rest is not None:
            return _then(rest, record, interrupt)
        if interrupt is not None:
            raise interrupt
        return record

    def _end(self, status: Status, error: str | None) -> tuple[EpisodeRecord, Awaitable[None] | None, BaseException | None]:
        """Build the record, tell the observers and hand the record to the sink.

        An interrupt (KeyboardInterrupt, SystemExit) landing anywhere in this must not cost the
        record: the step it cut short is done once more, and the interrupt is returned, for the
        caller to raise once the record is delivered. (Cut short at the very moment a line was
        queued, the record may be written twice; readers count an episode id once.)
        """
        interrupt: BaseException | None = None
        try:
            record = self._close(status, error)
        except BaseException as e:
            if self.record is None:  # interrupted while it was built: build it again (an error here propagates)
                self._close(status, error)
            assert self.record is not None
            record, interrupt = self.record, e
        try:
            if self._hooks.finishing:
                self._hooks.finish_episode(self, record, self._host_fault)
        except BaseException as e:  # an observer raising KeyboardInterrupt
            interrupt = interrupt or e
        try:
            rest = self.monitor.deliver_now(self, record)
        except BaseException as e:  # interrupted while it was handed off: hand it off again
            interrupt = interrupt or e
            rest = self.monitor.deliver_now(self, record)
        return record, rest, interrupt

    def _close(self, status: Status, error: str | None) -> EpisodeRecord:
        if self._open:
            why = "cancelled before the call finished" if status == "cancelled" else "the episode ended before the call finished"
            for pending in list(self._open.values()):
                pending.abandon(why)
        if self._hooked:
            for verdict, token in list(self._hooked.values()):  # not run: the hook's answer comes too late
                record_action(self, verdict, Decision.BLOCK, False, "the episode ended while the policy hook ran", token, None)
        self._closed = True
        record = build_record(
            episode_id=self.id,
            task_id=self.task_id,
            labels=self.labels,
            actions=self.actions,
            outcome=self.outcome,
            started_at=self.started_at,
            ended_at=datetime.now(UTC),
            status=status,
            error=error,
            allows_no_tool=self.allows_no_tool,
            probes=self.probes,
        )
        self.record = record
        return record


async def _then(delivery: Awaitable[None], record: EpisodeRecord, interrupt: BaseException | None = None) -> EpisodeRecord:
    """Await a record's delivery, then give the record (or raise the interrupt that came while it was built)."""
    await delivery
    if interrupt is not None:
        raise interrupt
    return record


_ALLOW: Final = Decision.ALLOW
"""(An enum member read through its class costs about 0.1 µs on Python 3.11, once per call.)"""


def _plan_module() -> Any:
    """``prefixmon.plan``, for the deprecated shims only (the core does not depend on the plan layer)."""
    return importlib.import_module("prefixmon.plan")


def _tracker(plan: Any, toolset: Toolset) -> PlanTracker:
    """A plan tracker; a plan or plan verdict given directly is wrapped (deprecated)."""
    if callable(getattr(plan, "match", None)):
        tracker: PlanTracker = plan
        return tracker
    warnings.warn(
        "passing a plan itself to Monitor.episode(plan=...) or Episode.follow() is deprecated and will be "
        "removed in 0.3.0; pass prefixmon.plan.PlanFollower(plan, monitor.toolset)",
        DeprecationWarning,
        stacklevel=3,
    )
    follower: PlanTracker = _plan_module().PlanFollower(plan, toolset)
    return follower
