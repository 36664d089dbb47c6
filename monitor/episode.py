"""Episodes: one agent run, its calls, its live first-error depth and its record.

An :class:`Episode` is opened by :meth:`prefixmon.Monitor.episode`. Each emitted call gets the
next depth, is judged by the predicate, and is then run, blocked, replanned or escalated by
the policy. ``Episode.call`` runs the tool itself; ``Episode.begin`` / ``PendingCall.done``
split the same work in two for frameworks that run the tool themselves.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import importlib
import inspect
import os
import random
import sys
import uuid
import warnings
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Iterator, Mapping, Sequence
from contextvars import ContextVar, Token
from dataclasses import replace
from datetime import UTC, datetime
from types import CoroutineType, MappingProxyType
from typing import Any, Final, NoReturn, Protocol

from . import predicate
from ._dispatch import NO_OBSERVERS, Entered, start_episode
from ._probes import probe
from .batch import Batch
from .exceptions import SpecError, ToolBlocked
from .grounding import InformedTexts
from .policies import Intervention, Resolution
from .records import ActionRecord, EpisodeRecord, ProbeRecord, Status, build_record, trusted_action, with_content
from .redaction import RecordContent
from .repeats import RejectedCalls
from .snapshot import Approval, Approvals, Snapshot, escalation, take
from .spec import ToolSpec
from .state import TrackedState
from .toolset import Toolset
from .verdict import Failure, ToolCall, Verdict
from .vocabulary import Cause, Decision, Outcome

__all__ = ("Episode", "EpisodeHost", "Executor", "PendingCall", "PlanTracker", "StepMatch", "current_episode")

Executor = Callable[[dict[str, Any]], Any]
"""``(args) -> result`` or an awaitable of it: runs a call the framework owns."""

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


class StepMatch(Protocol):
    """How an executed call relates to the plan that conditions the episode."""

    @property
    def step(self) -> int | None:
        """1-based index of the plan step the call matched, or ``None``."""

    @property
    def deviation(self) -> str | None:
        """How the call deviated from the plan; ``None`` when it followed it."""


class PlanTracker(Protocol):
    """Matches an episode's calls to a plan (:class:`prefixmon.plan.PlanFollower` is one)."""

    def match(self, tool: str, args: Mapping[str, Any] | None, *, ran: bool = False, result: Any = None) -> StepMatch:
        """Match one executed call and advance."""


def current_episode() -> Episode | None:
    """The episode open in the current context, if any."""
    return _current.get()


class PendingCall:
    """A call that the monitor let through and that has not finished yet.

    Run :attr:`call` (which may be a replacement chosen by a replan or escalation hook) with
    :attr:`args`, then report the outcome with :meth:`done` or :meth:`failed`.
    """

    __slots__ = ("_closed", "_episode", "_plain", "_raw", "_replacement", "_token", "args", "decision", "spec", "verdict")

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


_RANDOM_ID_MASK: Final = ~((0xF000 << 64) | (0xC000 << 48)) & ((1 << 128) - 1)
_UUID4_BITS: Final = (0x4000 << 64) | (0x8000 << 48)


_ids: Final = random.Random(os.urandom(32))
"""Where episode ids come from: seeded by the OS once per process, again in a forked child.

Not ``os.urandom`` per id: that call releases the GIL, and with a JSONL sink's writer thread
awake the episode then waited to get it back (17 µs of a one-call episode's 28 µs,
benchmarks/bench_sink.py). Episode ids identify records; they are not secrets."""
os.register_at_fork(after_in_child=lambda: _ids.seed(os.urandom(32)))


def cancellation(exc: BaseException) -> bool:
    """Whether ``exc`` stops the episode from outside: a cancellation, or its coroutine closed
    (``GeneratorExit``). Asks no event loop: there may be none left (a loop that crashed)."""
    if isinstance(exc, (asyncio.CancelledError, GeneratorExit)):
        return True
    trio = sys.modules.get("trio")
    return trio is not None and isinstance(exc, trio.Cancelled)


def _as_text(value: object) -> str | None:
    """``value`` as records hold it, when its text is known: text, a number, a UUID, an enum member, ``None``.

    ``None`` for anything else: its ``str()`` is usually its repr, and that may carry anything
    (a client object's API key) into span names, attributes and logs.
    """
    if isinstance(value, str):
        return str.__str__(value)  # an enum of text: its value
    if value is None:  # a label read from an unset variable
        return "None"
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, int):
        return int.__repr__(value)  # an enum of ints: its value
    if isinstance(value, float):
        return float.__repr__(value)
    if isinstance(value, enum.Enum):
        return f"{type(value).__name__}.{value.name}"
    if isinstance(value, uuid.UUID):
        return uuid.UUID.__str__(value)
    return None


def _required_text(value: object, what: str) -> str:
    """:func:`_as_text` of ``value``.

    Raises:
        TypeError: ``value`` has no known text (the message names ``what`` and its type, never its repr).
    """
    text = _as_text(value)
    if text is None:
        raise TypeError(f"{what} must be text, a number, a UUID or an enum member, got {type(value).__name__}")
    return text


def _call_text(value: object) -> str:
    """A framework's odd tool name or call id as records hold it: its text, or ``<TypeName>``."""
    text = _as_text(value)
    return f"<{type(value).__name__}>" if text is None else text


def text_labels(labels: Mapping[Any, Any], into: dict[str, str]) -> dict[str, str]:
    """``into`` updated with ``labels`` as text (records hold text; ints are common).

    Raises:
        TypeError: ``labels`` is not a mapping, or a name or value has no known text (:func:`_as_text`).
    """
    try:
        items = labels.items()
    except AttributeError:
        raise TypeError(f"labels must be a mapping of names to values (a dict), got {type(labels).__name__}") from None
    for k, v in items:
        key = k if type(k) is str else _required_text(k, "a label name")
        into[key] = v if type(v) is str else _required_text(v, f"labels[{key!r}]")
    return into


def _random_id() -> str:
    """A random UUID4 as 32 hex digits, as ``uuid.uuid4().hex`` but without building a ``UUID``.

    Every episode needs one; ``uuid4().hex`` cost 2.5 µs of an empty episode's 16 µs, this
    well under 1 µs (benchmarks/bench_hot_path.py, section 1). Same bits as a UUID4.
    """
    return "%032x" % (_ids.getrandbits(128) & _RANDOM_ID_MASK | _UUID4_BITS)


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
        self.id = _required_text(episode_id, "episode_id") if episode_id is not None and episode_id != "" else _random_id()
        self.task_id = _required_text(task_id, "task_id") if task_id is not None else self.id  # ints are common
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
        self.state = TrackedState(facts=facts, env=env, exposed=names, informed=monitor.informed_texts)
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
        if spec is not None and spec.probes:
            await probe(
                self.state,
                spec,
                args,
                self.state.depth + 1,
                run=self.monitor.run_probe,
                toolset=self.monitor.toolset,
                records=self.probes,
                fault=self._fault,
            )

    def check(self, name: str, args: Mapping[str, Any] | str | bytes | None = None, *, call_id: str | None = None) -> Verdict:
        """Judge a call as if it were emitted next, without recording anything."""
        return self._judge_named(name, args, self.state.depth + 1, call_id)

    def _judge_named(self, name: str, args: Mapping[str, Any] | str | bytes | None, depth: int, call_id: str | None) -> Verdict:
        """:meth:`_judge` of the tool ``name``, its spec looked up here (what the policy hooks judge replacements with)."""
        return self._judge(name, args, depth, call_id, self.monitor.toolset.get(name))

    def _judge(
        self, name: str, args: Mapping[str, Any] | str | bytes | None, depth: int, call_id: str | None, spec: ToolSpec | None
    ) -> Verdict:
        try:
            verdict = predicate.check_declared(spec, self.monitor.toolset, self.state, name, args, depth, call_id)
            if self._rejected and verdict.args is not None and (repeat := self._rejected.repeat(name, verdict.args)) is not None:
                verdict = replace(verdict, executable=False, failures=_in_cause_order(verdict.failures, repeat))
            batch = self.state.batch
            if (
                batch is not None
                and spec is not None
                and verdict.args is not None
                and (found := batch.finding(spec, verdict.args)) is not None
            ):
                verdict = replace(verdict, executable=False, failures=_in_cause_order(verdict.failures, found))
        except Exception as e:
            return self._check_failed(name, args, depth, call_id, e)
        return self._with_faults(verdict, name) if verdict.faults else verdict

    def _check_failed(
        self, name: str, args: Mapping[str, Any] | str | bytes | None, depth: int, call_id: str | None, error: Exception
    ) -> Verdict:
        """The verdict of a call whose check raised: fail-closed blocks it, fail-open lets it run."""
        # a name the toolset lacks may be anything a client made up: never in a metric attribute
        self._fault(f"checking {name}" if name in self.monitor.toolset else "checking an undeclared tool", error)
        if self.monitor.fail_closed:
            return Verdict(tool=name, call_id=call_id, depth=depth, executable=False, failures=(_fault_failure(name),))
        try:
            parsed = predicate.parse_arguments(args)
        except Exception:  # fail-open must not raise what the check already reported
            parsed = {}
        return Verdict(tool=name, call_id=call_id, depth=depth, executable=True, args=parsed if isinstance(parsed, dict) else {})

    def _unkept(self, name: str, call_id: str | None, depth: int, observer_failed: bool) -> Verdict:
        """Fail-closed, the verdict of a call the monitor cannot watch: an observer (an exporter)
        failed while it was admitted, or the sink cannot keep records."""
        why = "an observer failed while it was admitted" if observer_failed else "records cannot be kept (the sink is failing)"
        failure = _fault_failure(name, f"was not run: {why}")
        return Verdict(tool=name, call_id=call_id, depth=depth, executable=False, failures=(failure,))

    def _with_faults(self, verdict: Verdict, name: str) -> Verdict:
        """A verdict whose rules faulted: the faults reported; fail-closed blocks the call."""
        for fault in verdict.faults:
            self._fault(fault.where, fault.error)
        if not self.monitor.fail_closed:
            return verdict
        failures = _in_cause_order(verdict.failures, _fault_failure(name))  # the fault ranks as a precondition
        return Verdict(
            tool=name,
            call_id=verdict.call_id,
            depth=verdict.depth,
            executable=False,
            failures=failures,
            args=verdict.args,
        )

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
            name = _call_text(name)
        if call_id is not None and type(call_id) is not str:
            call_id = _call_text(call_id)
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
            if self.monitor.fail_closed and (self.internal_errors != faults or self.monitor.sink_failing):
                verdict = self._unkept(name, call_id, depth, self.internal_errors != faults)
            elif unchecked is not None:
                verdict = self._check_failed(name, args, depth, call_id, unchecked)
            elif spec is not None and spec.probes:
                return self._guarded(self._probed(spec, name, args, depth, call_id, token), name, call_id, depth, token)
            else:
                verdict = self._judge(name, args, depth, call_id, spec)
            if verdict.executable and not verdict.undetermined:  # the common case, without _decide
                if token is None:  # and no observer: _pending inlined
                    pending = self._open[depth] = PendingCall(self, verdict, args, verdict.args, _ALLOW, None, spec)  # type: ignore[arg-type]
                    return pending
                return self._pending(verdict, args, verdict.args, _ALLOW, token, spec)  # type: ignore[arg-type]
            decided = self._decide(verdict, args, token, spec)
            if type(decided) is PendingCall:
                return decided
            return self._guarded(decided, name, call_id, depth, token, verdict)  # type: ignore[arg-type]
        except BaseException:  # KeyboardInterrupt, a hook's error, a ToolBlocked: the depth is still recorded
            self._interrupted(name, call_id, depth, token, verdict)
            raise

    def _decide(
        self, verdict: Verdict, args: Mapping[str, Any] | str | bytes | None, token: Any, spec: ToolSpec | None
    ) -> PendingCall | Coroutine[Any, Any, PendingCall]:
        """Apply the policy to a judged call: the call to run, or the coroutine that awaits a hook to decide."""
        if verdict.executable:
            if verdict.undetermined and self.monitor.intervention.policy.undetermined == "escalate":
                return self._ask(verdict, args, token)
            return self._pending(verdict, args, verdict.args, _ALLOW, token, spec)  # type: ignore[arg-type]
        hookless = self.monitor.intervention.policy(verdict) in _NO_HOOK
        intervene = self._intervene(verdict, args, token)
        return _completed(intervene) if hookless else intervene

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
            self._interrupted(name, call_id, depth, token, verdict)
            raise

    async def _probed(
        self, spec: ToolSpec, name: str, args: Mapping[str, Any] | str | bytes | None, depth: int, call_id: str | None, token: Any
    ) -> PendingCall:
        """The admission of a call whose spec has probes: look up what its rules read, then judge it."""
        run, toolset = self.monitor.run_probe, self.monitor.toolset
        await probe(self.state, spec, args, depth, run=run, toolset=toolset, records=self.probes, fault=self._fault)
        verdict = self._judge(name, args, depth, call_id, spec)
        decided = self._decide(verdict, args, token, spec)
        return decided if type(decided) is PendingCall else await self._guarded(decided, name, call_id, depth, token, verdict)  # type: ignore[arg-type]

    def _interrupted(self, name: str, call_id: str | None, depth: int, token: Any, verdict: Verdict | None) -> None:
        """Record the call at ``depth`` if an interruption left it unrecorded."""
        if self._slots[depth - 1] is None and depth not in self._open:
            if verdict is None:  # not judged: nothing showed it was not executable
                verdict = Verdict(tool=name, call_id=call_id, depth=depth, executable=True)
                why = "interrupted before the check finished"
            else:
                why = "interrupted before the call ran" if verdict.executable else "interrupted while the policy hook ran"
            self._record(verdict, Decision.BLOCK, False, why, token, None)

    async def _ask(self, verdict: Verdict, raw: Mapping[str, Any] | str | bytes | None, token: Any) -> PendingCall:
        """An executable call that could not be fully decided: a human approves, edits or denies it (FED is untouched)."""
        return await self._resolve(verdict, raw, token, undetermined=True)

    async def _intervene(self, verdict: Verdict, raw: Mapping[str, Any] | str | bytes | None, token: Any) -> PendingCall:
        """Apply the policy to a call that is not executable."""
        depth = verdict.depth
        if self._fed is None or depth < self._fed:  # live: known now, even while an observed call runs
            self._fed = depth
        if any(f.code == "monitor_fault" for f in verdict.failures):
            self._refuse(verdict, token, Resolution(decision=Decision.FAIL_CLOSED))
        return await self._resolve(verdict, raw, token, undetermined=False)

    async def _resolve(
        self, verdict: Verdict, raw: Mapping[str, Any] | str | bytes | None, token: Any, *, undetermined: bool
    ) -> PendingCall:
        """The policy's hooks (or a remembered answer) decide the call: run it as resolved, or refuse it."""
        depth = verdict.depth
        self._hooked[depth] = (verdict, token)
        try:
            resolution = await escalation(
                self.monitor.intervention,
                self._answers(),
                verdict,
                raw,
                self.state,
                undetermined=undetermined,
                judge=self._judge_named,
                fault=self._fault,
            )
        finally:
            del self._hooked[depth]
        if resolution.args is None:
            self._refuse(verdict, token, resolution)
        return self._pending(verdict, raw, resolution.args, resolution.decision, token, None, resolution.call)

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
            self._finish_call(pending, result, None, None)
        return result

    # -- policy decisions --------------------------------------------------------------------
    def _pending(
        self,
        verdict: Verdict,
        raw: Mapping[str, Any] | str | bytes | None,
        args: dict[str, Any],
        decision: Decision,
        token: Any,
        spec: ToolSpec | None,
        replacement: ToolCall | None = None,
    ) -> PendingCall:
        """Let the call run; ``spec`` is the emitted tool's (``None``: look up the tool that runs)."""
        if self._closed:  # the episode ended while a policy hook ran; its record has the call
            raise ToolBlocked(verdict, decision=Decision.BLOCK.value, guidance="the episode has ended")
        if spec is None or replacement is not None:
            spec = self.monitor.toolset.get(replacement.name if replacement is not None else verdict.tool)
        pending = PendingCall(self, verdict, raw, args, decision, token, spec, replacement)
        self._open[verdict.depth] = pending
        if token is not None and self._hooks.checked:
            try:
                self._hooks.call_checked(self, verdict, decision, token)
            except BaseException:  # interrupted before the call ran
                del self._open[verdict.depth]
                self._record(verdict, Decision.BLOCK, False, "interrupted before the call ran", token, None)
                raise
        return pending

    def _refuse(self, verdict: Verdict, token: Any, resolution: Resolution) -> NoReturn:
        if self._slots[verdict.depth - 1] is None:  # else the episode ended while a hook ran, and recorded it
            self._record(verdict, resolution.decision, False, None, token, None)
        raise ToolBlocked(verdict, decision=resolution.decision.value, guidance=resolution.guidance)

    # -- outcomes ----------------------------------------------------------------------------
    def _finish_call(
        self, pending: PendingCall, result: Any, error: BaseException | str | None, abandoned: str | None, *, reached: bool = True
    ) -> None:
        verdict = pending.verdict
        depth = verdict.depth
        self._open.pop(depth, None)
        spec = pending.spec
        replacement = pending._replacement
        if pending._plain and error is None and abandoned is None and self.plan is None:  # the common case
            assert spec is not None
            if self._rejected and not spec.metadata.get("read_only"):
                self._rejected.forget()
            try:
                for fault in predicate.transition(self.state, spec, pending.args, result, accepted=True):
                    self._fault(fault.where, fault.error)
            except BaseException:  # KeyboardInterrupt: the call ran; record it before it propagates
                self._record_cut_short(pending, verdict, verdict.tool)
                raise
            token = pending._token
            hooks = self._hooks
            if token is not None and hooks.result:
                self._tell_result(pending, verdict, verdict.tool, result)
            action = self._slots[depth - 1] = trusted_action(
                depth, verdict.tool, verdict.call_id, True, None, None, pending.decision, True, None, self.state.turn, None
            )
            if self._content is not None:
                self._add_content(action, verdict.args if verdict.args is not None else pending.args, result)
            if token is not None and hooks.finished:
                hooks.call_finished(self, action, verdict, token)
            return
        name = verdict.tool if replacement is None else replacement.name
        rejection: Failure | None = None
        if abandoned is None:
            try:
                if error is not None or (spec is not None and spec.error_result is not None):
                    try:
                        rejection = predicate.acceptance(spec, name, result=result, error=error)
                    except Exception as e:
                        self._fault(f"error_result of {name}", e)
                if spec is not None:
                    for fault in predicate.transition(self.state, spec, pending.args, result, accepted=rejection is None):
                        self._fault(fault.where, fault.error)
            except BaseException:  # KeyboardInterrupt: the call ran; record it before it propagates
                self._record_cut_short(pending, verdict, name)
                raise
        if rejection is not None and replacement is None:  # the emitted call ran and was rejected
            verdict = Verdict(
                tool=verdict.tool,
                call_id=verdict.call_id,
                depth=verdict.depth,
                executable=False,
                failures=_in_cause_order(verdict.failures, rejection),
                args=verdict.args,
            )
        if rejection is not None and not isinstance(error, BaseException) and replacement is None:
            self._rejected.remember(name, pending.args, depth, rejection.reason)  # an error result or message, not a raise
        elif self._rejected and not (spec is not None and spec.metadata.get("read_only")):
            self._rejected.forget()  # a write ran, or a call whose outcome is unknown
        error_text = abandoned or (rejection.reason if rejection is not None else None)
        token = pending._token
        if token is not None and abandoned is None and self._hooks.result:
            self._tell_result(pending, verdict, name, result)
        if replacement is None:
            ran = abandoned is None and error is None and rejection is None
            self._record(verdict, pending.decision, reached, error_text, token, None, pending.args, result, ran)
        else:
            self._record(verdict, pending.decision, False, error_text, token, name, pending.args, result, False)

    def _tell_result(self, pending: PendingCall, verdict: Verdict, name: str, result: Any) -> None:
        """Give the observers taking part the call's raw result; interrupted there, the call is recorded first."""
        try:
            self._hooks.call_result(self, verdict.depth, result, pending._token)
        except BaseException:
            self._record_cut_short(pending, verdict, name)
            raise

    def _record_cut_short(self, pending: PendingCall, verdict: Verdict, name: str) -> None:
        """Record a call that ran but whose outcome was interrupted (KeyboardInterrupt) while processed."""
        replaced = pending._replacement is not None
        why = "interrupted while its outcome was processed"
        self._record(verdict, pending.decision, not replaced, why, pending._token, name if replaced else None)

    def _record(
        self,
        verdict: Verdict,
        decision: Decision,
        reached: bool,
        error: str | None,
        token: Any,
        replacement: str | None,
        args: Mapping[str, Any] | None = None,
        result: Any = None,
        ran: bool = False,
    ) -> None:
        """Record the action at the verdict's depth (and tell the observers taking part)."""
        depth = verdict.depth
        step: int | None = None
        deviation: str | None = None
        if self.plan is not None:
            try:
                match = self.plan.match(verdict.tool, verdict.args if verdict.args is not None else args, ran=ran, result=result)
                step, deviation = match.step, match.deviation
            except Exception as e:
                self._fault("plan matching", e)
            except BaseException:  # KeyboardInterrupt: the action is recorded before it propagates
                self._slots[depth - 1] = _action(verdict, decision, reached, error, self.state.turn, replacement, None, None)
                raise
        action = self._slots[depth - 1] = _action(
            verdict, decision, reached, error, self.state.turn, replacement, step, deviation
        )
        if self._content is not None:
            self._add_content(action, verdict.args if verdict.args is not None else args, result)
        if not verdict.executable and (self._fed is None or depth < self._fed):
            self._fed = depth
        if token is not None and self._hooks.finished:
            self._hooks.call_finished(self, action, verdict, token)

    def _add_content(self, action: ActionRecord, args: Any, result: Any) -> None:
        """Put the call's arguments and result on its new action record, redacted and capped
        (``record_content``); a redaction hook that raises costs only the content (counted and logged)."""
        content = self._content
        assert content is not None
        try:
            arguments = content.arguments(args)
            text = content.result(result, args)
        except Exception as e:
            self._fault("record_content redaction", e)
            return
        with_content(action, arguments, text)

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
                self._record(verdict, Decision.BLOCK, False, "the episode ended while the policy hook ran", token, None)
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


def _action(
    verdict: Verdict,
    decision: Decision,
    reached: bool,
    error: str | None,
    turn: int,
    replacement: str | None,
    step: int | None,
    deviation: str | None,
) -> ActionRecord:
    """The action record of a verdict (the trusted constructor when the verdict is consistent)."""
    failures = verdict.failures
    if not failures:
        if verdict.executable and verdict.depth >= 1:  # the common case
            tool, call_id = verdict.tool, verdict.call_id
            return trusted_action(
                verdict.depth, tool, call_id, True, None, None, decision, reached, error, turn, replacement, step, deviation
            )
        failure = None
    else:
        failure = failures[0]
    consistent = verdict.executable == (failure is None) and verdict.depth >= 1
    build = trusted_action if consistent else ActionRecord  # else: the validating constructor
    return build(
        depth=verdict.depth,
        tool=verdict.tool,
        call_id=verdict.call_id,
        executable=verdict.executable,
        cause=failure.cause if failure is not None else None,
        reason=(failure.reason or None) if failure is not None else None,
        decision=decision,
        reached_environment=reached,
        error=error,
        turn=turn,
        replacement=replacement,
        plan_step=step,
        deviation=deviation,
        code=(failure.code or None) if failure is not None else None,
    )


async def _then(delivery: Awaitable[None], record: EpisodeRecord, interrupt: BaseException | None = None) -> EpisodeRecord:
    """Await a record's delivery, then give the record (or raise the interrupt that came while it was built)."""
    await delivery
    if interrupt is not None:
        raise interrupt
    return record


_ALLOW: Final = Decision.ALLOW
"""(An enum member read through its class costs about 0.1 µs on Python 3.11, once per call.)"""

_NO_HOOK: Final = frozenset({"observe", "block"})
"""Policy actions that :class:`~prefixmon.policies.Intervention` carries out without awaiting a hook."""


def _completed(coro: Coroutine[Any, Any, PendingCall]) -> PendingCall:
    """The result of a coroutine that finishes without suspending (an intervention that calls no hook).

    Lets :meth:`Episode.admit` observe or block a call without an event loop; only used for
    the policy actions in :data:`_NO_HOOK` (tests/test_episode_edges.py checks that they never suspend).
    """
    try:
        coro.send(None)
    except StopIteration as done:
        result: PendingCall = done.value
        return result
    coro.close()
    raise RuntimeError("an intervention without a hook suspended; it must finish without awaiting")


_CAUSE_RANK: Final[Mapping[Cause, int]] = MappingProxyType({cause: rank for rank, cause in enumerate(Cause)})


def _in_cause_order(failures: tuple[Failure, ...], extra: Failure) -> tuple[Failure, ...]:
    """``failures`` with ``extra`` added in tie-break order (after the failures of its own cause)."""
    rank = _CAUSE_RANK[extra.cause]
    at = next((i for i, f in enumerate(failures) if _CAUSE_RANK[f.cause] > rank), len(failures))
    return (*failures[:at], extra, *failures[at:])


def _fault_failure(name: str, what: str = "could not be checked because of an internal monitor error") -> Failure:
    """Fail-closed, the failure of a call blocked because of the monitor itself."""
    return Failure(cause=Cause.PRECONDITION, code="monitor_fault", reason=f"{name} {what}, and the monitor is fail-closed")


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
