"""The monitor: settings shared by every episode, and the episode context manager."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import importlib
import inspect
import os
import warnings
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import anyio

from ._dispatch import OBSERVER_ERRORS
from ._internal.daemon_threads import DaemonThreads
from ._internal.log import get_logger
from .episode import Episode, PlanTracker, cancellation, text_labels
from .exceptions import SpecError
from .observer import Observer
from .policies import EscalateHook, Intervention, Policy, ReplanHook
from .records.model import EpisodeRecord, JsonlSink, Status
from .records.redaction import RecordContent, Redactor
from .rules.grounding import InformedTexts
from .snapshot import Snapshot, restore
from .state import TrackedState
from .toolset import Toolset

__all__ = ("FailureMode", "Monitor", "MonitorStats", "ProbeExecutor", "Sink")

Sink = Callable[[EpisodeRecord], "Awaitable[None] | None"]
"""Receives each finished record: a callable (sync, run in a worker thread, or async)."""

FailureMode = Literal["fail_open", "fail_closed"]

ProbeExecutor = Callable[[str, dict[str, Any]], Any]
"""``(tool, args) -> result`` or an awaitable of it: runs a spec file's read-only probe."""


@dataclass(slots=True, kw_only=True)
class MonitorStats:
    """Counters over the monitor's lifetime."""

    episodes: int = 0
    internal_errors: int = 0
    """Errors the monitor caught in itself: preconditions, effects, hooks, observers, sinks."""
    sink_errors: int = 0
    """Sink failures: a callable sink that raised, a JSON Lines writer's failed opens and writes."""
    sink_timeouts: int = 0
    records_lost: int = 0
    """Records that never reached the sink: refused by a full queue, not serialisable, or cut
    off by a cancellation during delivery (a JSON Lines sink counts its own losses in ``sink.stats``)."""


class Monitor:
    """Checks every tool call of its episodes against a toolset and applies a policy.

    Args:
        toolset: the tools and their rules.
        policy: ``"observe"`` (default: record only), ``"block"``, ``"replan"``,
            ``"escalate"``, or a :class:`Policy` per tool and cause.
        replan: ``async (verdict, call, state) -> Replan | ToolCall | str | None``; required
            when the policy can replan. A hook that raises, or does not answer within
            ``replan_timeout`` seconds, falls back to block.
        escalate: ``async (verdict, call) -> Approve | Edit | Deny``; required when the
            policy can escalate. No answer within ``escalate_timeout`` seconds denies.
        failure_mode: what a monitor-internal error (a precondition that raises, an observer
            or exporter failing while a call is admitted, a sink that cannot keep records) does
            to the call: ``"fail_open"`` lets it through, ``"fail_closed"`` blocks it (while
            the sink is failing, every call). Either way the error is counted and logged.
        sink: receives each finished :class:`EpisodeRecord`: a path (a :class:`JsonlSink`
            is made for it, whose writer thread appends every record; the episode never
            waits on the disk), a :class:`JsonlSink`, or a callable. A callable that raises
            or hangs longer than ``sink_timeout`` is counted and logged; the agent goes on.
            The JSON Lines writer's failures (read-only file system, disk full) are counted
            in ``stats.sink_errors`` and logged at the next episode's end.
        observers: telemetry and logging hooks (see :class:`Observer`).
        labels: labels merged into every episode's labels (an episode's own win).
        probe: ``(tool, args) -> result`` (sync or async): runs the read-only lookups spec
            files declare (``probes:``). Default: the toolset's own implementation of the
            probe's tool; without one (a replay), probes are not made.
        record_content: put each call's arguments (compact JSON text) and its tool's result
            (text) on its action record (``ActionRecord.arguments`` / ``.result``), redacted by
            ``content_redact`` and cut at ``max_content_chars``, as
            ``Telemetry(capture_content=True)`` records them on spans (``prefixmon learn`` learns
            from such records). Off by default: records then hold no argument values or results
            and are written exactly as without the option (``docs/security.md``). A call that
            raised has no result (``error`` holds the exception); a redaction hook that raises
            costs the call's content only (counted and logged).
        content_redact: how recorded content is redacted: ``"secrets"`` (default:
            :func:`~prefixmon.records.redaction.redact_secrets`), a hook such as
            :func:`~prefixmon.records.redaction.redact_keys`, or ``None`` to record it as it is.
        max_content_chars: recorded arguments and results longer than this are cut (with a marker).
    """

    def __init__(
        self,
        toolset: Toolset,
        *,
        policy: Policy | str = "observe",
        replan: ReplanHook | None = None,
        replan_timeout: float = 60.0,
        escalate: EscalateHook | None = None,
        escalate_timeout: float = 60.0,
        failure_mode: FailureMode = "fail_open",
        sink: Sink | str | os.PathLike[str] | None = None,
        sink_timeout: float = 10.0,
        observers: Sequence[Observer] = (),
        labels: Mapping[str, str] | None = None,
        probe: ProbeExecutor | None = None,
        record_content: bool = False,
        content_redact: Redactor | Literal["secrets"] | None = "secrets",
        max_content_chars: int = 4096,
    ) -> None:
        if not isinstance(toolset, Toolset):
            raise SpecError(f"Monitor needs a Toolset, got {type(toolset).__name__}")
        self.toolset = toolset
        self.policy = Policy.coerce(policy)
        self.intervention = Intervention(
            self.policy, replan=replan, replan_timeout=replan_timeout, escalate=escalate, escalate_timeout=escalate_timeout
        )
        """Carries out the policy on calls that are not executable (hooks and timeouts included)."""
        if failure_mode not in ("fail_open", "fail_closed"):
            raise SpecError(f"failure_mode must be 'fail_open' or 'fail_closed', got {failure_mode!r}")
        self.replan = replan
        self.replan_timeout = replan_timeout
        self.escalate = escalate
        self.escalate_timeout = escalate_timeout
        self.failure_mode: FailureMode = failure_mode
        self.fail_closed = failure_mode == "fail_closed"
        self.sink: Sink | None = JsonlSink(sink) if isinstance(sink, (str, os.PathLike)) else sink
        self.sink_timeout = sink_timeout
        self.observers: tuple[Observer, ...] = tuple(observers)
        self.labels: dict[str, str] = text_labels(labels or {}, {})
        self.stats = MonitorStats()
        self.probe_executor = probe
        self.content = RecordContent.make(content_redact, max_content_chars) if record_content else None
        """How each call's arguments and result are put on its action record (``record_content``); ``None``: they are not."""
        self._log = get_logger()  # structlog when the application configured it, else stdlib logging
        self._threads = DaemonThreads()
        """Where plain-function sinks run: a sink that never returns cannot keep the process alive."""
        self._sink_errors_seen = 0
        self._delivery_failed = False
        """The last record could not be handed to the sink (fail-closed blocks calls until one is)."""
        """The JSON Lines writer's error count already reported through :meth:`_fault`."""
        self.informed_texts: InformedTexts | None = InformedTexts()
        """Long texts told to its episodes (a system prompt, a policy), read once for all of them; ``None``: each reads them."""

    def open_episode(
        self,
        task_id: str | None = None,
        labels: Mapping[str, str] | None = None,
        *,
        episode_id: str | None = None,
        env: Any = None,
        exposed: Iterable[str] | None = None,
        allows_no_tool: bool = False,
        facts: Mapping[str, Any] | None = None,
        bindings: Mapping[str, Iterable[Any]] | None = None,
        plan: PlanTracker | None = None,
    ) -> Episode:
        """Open an episode that is closed explicitly with ``await episode.aclose()``.

        For lifetimes that no ``async with`` block can span (a protocol server's connection,
        a framework's run hooks). Arguments as for :meth:`episode`.
        """
        ep = Episode(
            self,
            task_id=task_id,
            labels=labels or {},
            episode_id=episode_id,
            env=env,
            exposed=exposed,
            allows_no_tool=allows_no_tool,
            facts=facts,
            bindings=bindings,
            plan=plan,
        )
        self.stats.episodes += 1  # the episode told its observers that it started
        return ep

    def episode(
        self,
        task_id: str | None = None,
        labels: Mapping[str, str] | None = None,
        *,
        episode_id: str | None = None,
        env: Any = None,
        exposed: Iterable[str] | None = None,
        allows_no_tool: bool = False,
        facts: Mapping[str, Any] | None = None,
        bindings: Mapping[str, Iterable[Any]] | None = None,
        plan: PlanTracker | None = None,
    ) -> contextlib.AbstractAsyncContextManager[Episode]:
        """Open an episode; its record is complete when the block exits, however it exits.

        Args:
            task_id: the task (several rollouts of one task share it); default: the episode id.
            labels: e.g. ``{"dataset": ..., "model": ..., "method": ...}``. Values are text;
                numbers, bools, ``None``, UUIDs and enum members are written as text. Anything
                else is a ``TypeError``: an object's ``str()`` is usually its repr, which could
                carry a secret into spans and logs. The same holds for ``task_id`` and ``episode_id``.
            episode_id: default: a random hex id.
            env: a live environment object preconditions may read as ``state.env``.
            exposed: tools available at the start (default: every tool declared exposed).
            allows_no_tool: the task may be finished without any tool call.
            facts: initial facts of the tracked state.
            bindings: references known before the episode starts, ``{kind: values}`` (ids
                the environment already holds), bound at depth 0.
            plan: the plan that conditions the executor, as a tracker
                (``prefixmon.plan.PlanFollower(verdict, toolset)``); each recorded action notes
                the plan step it matched and how it deviated.

        Returns:
            an async context manager: ``async with monitor.episode(...) as ep``. The episode
            opens when the block is entered.
        """
        return _EpisodeBlock(
            self,
            task_id,
            labels,
            {
                "episode_id": episode_id,
                "env": env,
                "exposed": exposed,
                "allows_no_tool": allows_no_tool,
                "facts": facts,
                "bindings": bindings,
                "plan": plan,
            },
        )

    def resume(
        self,
        snapshot: Snapshot | Mapping[str, Any] | str | bytes,
        *,
        env: Any = None,
        plan: PlanTracker | None = None,
        episode_id: str | None = None,
    ) -> contextlib.AbstractAsyncContextManager[Episode]:
        """Continue an episode from its :meth:`Episode.snapshot` (``async with monitor.resume(snap) as ep``).

        The episode keeps its id, task, labels, start time, actions, approvals and tracked state
        (facts, bindings, exposure, turn, order counts, the texts it was told): the next call
        gets the snapshot's depth + 1, the record at the end holds every action, before the
        snapshot and after, and a call answered before is not asked again. What a snapshot does
        not hold is listed in :mod:`prefixmon.snapshot`.

        Args:
            snapshot: a :class:`~prefixmon.snapshot.Snapshot`, its JSON data (``model_dump(mode="json")``) or its JSON text.
            env: the live environment, as for :meth:`episode` (it is not in the snapshot).
            plan: a plan tracker, as for :meth:`episode` (it is not in the snapshot).
            episode_id: an id for the continued episode (default: the snapshot's). If the
                first part's record reached the sink too, both have the same id, and readers
                count an id once (its first record): give the continuation its own id then.

        Raises:
            RecordError: not a snapshot of ``prefixmon.snapshot/1``, or malformed (the message names the field).
            SpecError: it exposes a tool this monitor's toolset does not have.
        """
        snap = Snapshot.load(snapshot)
        unknown = [n for n in snap.exposed if n not in self.toolset]
        if unknown:
            raise SpecError(f"the snapshot exposes tools this toolset does not have: {', '.join(map(repr, unknown))}")
        if episode_id is not None and episode_id != "":
            snap = snap.model_copy(update={"episode_id": episode_id})
        return _ResumedBlock(self, snap, env, plan)

    def verify_plan(self, plan: Any, *, state: TrackedState | None = None, **options: Any) -> Any:
        """Deprecated: use ``prefixmon.verify_plan(monitor.toolset, plan, state=...)``."""
        warnings.warn(
            "Monitor.verify_plan is deprecated and will be removed in 0.3.0; use prefixmon.verify_plan(monitor.toolset, plan)",
            DeprecationWarning,
            stacklevel=2,
        )
        return importlib.import_module("prefixmon.plan").verify_plan(self.toolset, plan, state=state, **options)

    async def run_probe(self, tool: str, args: dict[str, Any]) -> Any:
        """Run a probe's read-only call (``probe=``, else the tool's implementation).

        Raises:
            LookupError: nothing can run it (no executor and no implementation).
        """
        run = self.probe_executor
        if run is not None:
            result = run(tool, args)
        else:
            spec = self.toolset.get(tool)
            if spec is None or spec.func is None:
                raise LookupError(f"no implementation of {tool!r} to probe with")
            result = spec.func(**args)
        return (await result) if inspect.isawaitable(result) else result

    async def deliver(self, episode: Episode, record: EpisodeRecord) -> None:
        """Hand a closed episode's record to the sink (as ``Episode.aclose`` does, after its observers were told)."""
        rest = self.deliver_now(episode, record)
        if rest is not None:
            await rest

    @property
    def sink_failing(self) -> bool:
        """Whether records cannot be kept now: the last one could not be delivered, or the
        JSON Lines sink's writer cannot write. Fail-closed, calls are blocked meanwhile."""
        sink = self.sink
        return self._delivery_failed or (isinstance(sink, JsonlSink) and sink.failing)

    def deliver_now(self, episode: Episode, record: EpisodeRecord) -> Awaitable[None] | None:
        """:meth:`deliver` without an event loop where nothing needs one.

        Without a sink, or with a :class:`JsonlSink` (a queue hand-off), the record is
        delivered right here and ``None`` returned. A callable sink has to be awaited (it runs
        in a worker thread or is awaited, with the sink timeout): the delivery is returned as
        an awaitable; await it (or run it with ``anyio.run``) exactly once.
        """
        sink = self.sink
        if sink is None:
            return None
        if isinstance(sink, JsonlSink):
            self._hand_off(episode, sink, record)
            return None
        return self._deliver(episode, record)

    async def _deliver(self, ep: Episode, record: EpisodeRecord) -> None:
        sink = self.sink
        assert sink is not None
        self._delivery_failed = True  # until the sink returns
        in_thread = False
        with anyio.CancelScope(shield=True), anyio.move_on_after(self.sink_timeout) as scope:
            try:
                if inspect.iscoroutinefunction(sink) or inspect.iscoroutinefunction(getattr(sink, "__call__", None)):  # noqa: B004
                    await sink(record)  # type: ignore[misc]
                else:  # a plain callable may still return an awaitable (see Sink)
                    in_thread = True
                    result = await self._threads.run(functools.partial(sink, record), late=functools.partial(self._late, ep))
                    in_thread = False
                    if inspect.isawaitable(result):
                        await result
                self._delivery_failed = False
            except anyio.get_cancelled_exc_class() as e:
                if scope.cancel_called:  # our timeout: counted below
                    raise
                if in_thread:  # the call goes on in its thread, or never started: _late counts it
                    raise
                if _cancel_requested():  # a real cancellation cut the delivery short: the record is lost
                    self.stats.records_lost += 1
                    self._fault(ep, "sink", e)
                    raise
                self.stats.sink_errors += 1  # the sink's own stray CancelledError: nobody cancelled us
                self._fault(ep, "sink", e)
            except Exception as e:
                self.stats.sink_errors += 1
                self._fault(ep, "sink", e)
        if scope.cancelled_caught:
            self.stats.sink_timeouts += 1
            self._fault(ep, "sink", TimeoutError(f"the sink did not finish within {self.sink_timeout:g} s"))

    def _late(self, ep: Episode, outcome: tuple[bool, Any] | None) -> None:
        """What became of a plain sink's call its episode stopped waiting for (timed out or
        cancelled). Runs in the call's thread when the call finishes there: the observers,
        which need not be thread-safe, are not told."""
        if outcome is None:  # never started: every delivery thread was busy
            self.stats.records_lost += 1
            self._fault(
                ep,
                "sink",
                RuntimeError("the record never reached the sink: no delivery thread took it before its episode stopped waiting"),
            )
        elif not outcome[0]:
            self.stats.sink_errors += 1
            self._fault(ep, "sink", outcome[1], notify=False)
        else:
            self._delivery_failed = False

    def report_fault(self, episode: Episode | None, where: str, error: BaseException, *, notify: bool = True) -> None:
        """Count and log an error the monitor caught in itself, and tell the observers (unless ``notify`` is off).

        Adapters call it for errors in their own glue; it never raises.
        """
        self._fault(episode, where, error, notify=notify)

    def _hand_off(self, ep: Episode, sink: JsonlSink, record: EpisodeRecord) -> None:
        """Queue the record for the sink's writer; report what the writer met since the last hand-off."""
        try:
            accepted = sink.submit(record)
        except Exception as e:  # serialisation failed: the record cannot be written
            self.stats.sink_errors += 1
            self.stats.records_lost += 1
            self._delivery_failed = True
            self._fault(ep, "sink", e)
            return
        self._delivery_failed = not accepted
        errors = sink.stats.errors
        if errors != self._sink_errors_seen:
            self.stats.sink_errors += errors - self._sink_errors_seen
            self._sink_errors_seen = errors
            self._fault(ep, "sink", sink.last_error or OSError("the sink's writer failed"))
        if not accepted:
            self.stats.records_lost += 1
            self._fault(ep, "sink", OverflowError(f"the sink's queue is full or closed; record {record.episode_id!r} dropped"))

    def _fault(self, episode: Episode | None, where: str, error: BaseException, *, notify: bool = True) -> None:
        self.stats.internal_errors += 1
        with contextlib.suppress(Exception):  # a broken logging setup must not break the agent either
            self._log.error(
                "monitor_internal_error",
                where=where,
                error_type=type(error).__name__,
                episode_id=episode.id if episode is not None else None,
                failure_mode=self.failure_mode,
            )
        if notify:
            for obs in self.observers:
                try:
                    obs.internal_error(episode, where, error)
                except OBSERVER_ERRORS:
                    self.stats.internal_errors += 1


class _EpisodeBlock:
    """``async with monitor.episode(...)``: opens the episode on entry, closes it however the block exits.

    A plain class rather than an ``@asynccontextmanager`` generator: the generator, its
    wrapper and an ``ExitStack`` were about 40% of an empty episode's cost.
    """

    __slots__ = ("_entered", "_episode", "_labels", "_monitor", "_options", "_reset", "_task_id")

    def __init__(self, monitor: Monitor, task_id: str | None, labels: Mapping[str, str] | None, options: dict[str, Any]) -> None:
        self._monitor = monitor
        self._task_id = task_id
        self._labels = labels
        self._options = options
        self._episode: Episode | None = None
        self._reset: Any = None
        self._entered: Any = None

    async def __aenter__(self) -> Episode:
        if self._episode is not None:
            raise RuntimeError("an episode block can be entered only once; call monitor.episode(...) again")
        ep = self._episode = self._monitor.open_episode(self._task_id, self._labels, **self._options)
        self._reset, self._entered = ep._enter()
        return ep

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        ep = self._episode
        assert ep is not None
        status: Status = "finished"
        error: str | None = None
        if exc is not None:
            if cancellation(exc):
                status = "cancelled"
            else:
                status, error = "error", type(exc).__name__
        try:
            ep._leave(self._reset, self._entered, exc)
        finally:
            await ep.aclose(status, error)


class _ResumedBlock(_EpisodeBlock):
    """``async with monitor.resume(snapshot)``: as :class:`_EpisodeBlock`, the episode restored from the snapshot."""

    __slots__ = ("_env", "_plan", "_snapshot")

    def __init__(self, monitor: Monitor, snapshot: Snapshot, env: Any, plan: PlanTracker | None) -> None:
        super().__init__(monitor, snapshot.task_id, snapshot.labels, {})
        self._snapshot = snapshot
        self._env = env
        self._plan = plan

    async def __aenter__(self) -> Episode:
        if self._episode is not None:
            raise RuntimeError("a resume block can be entered only once; call monitor.resume(...) again")
        snap = self._snapshot
        ep = self._episode = self._monitor.open_episode(
            snap.task_id,
            snap.labels,
            episode_id=snap.episode_id,
            env=self._env,
            exposed=snap.exposed,
            allows_no_tool=snap.allows_no_tool,
            facts=snap.facts,
            plan=self._plan,
        )
        restore(ep, snap)
        self._reset, self._entered = ep._enter()
        return ep


def _cancel_requested() -> bool:
    """Whether the current task was asked to cancel (always assumed outside asyncio 3.11+)."""
    try:
        task = asyncio.current_task()
    except RuntimeError:  # not asyncio (trio cancellations are always real)
        return True
    cancelling = getattr(task, "cancelling", None)
    return task is None or cancelling is None or cancelling() > 0
