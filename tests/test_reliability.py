"""Fault injection: the monitor must never be the reason an agent breaks.

Extends tests/test_episode.py (TestInternalErrors, TestRecords) and tests/test_records.py
(SIGKILL) with what they do not cover: that every caught error is also logged, faults in
every observer hook and in the result hooks, async sinks that raise or hang, a real OTLP
exporter pointed at a dead port, broken logging, cancellation and body exceptions at every
stage of a call (hooks running, framework-owned calls pending), and hooks that hang, raise or
answer nonsense.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator, MutableMapping
from pathlib import Path
from typing import Any

import anyio
import pytest
import structlog
from structlog.testing import capture_logs

from prefixmon import (
    Approve,
    Cause,
    Decision,
    Deny,
    Monitor,
    Observer,
    Replan,
    ToolBlocked,
    ToolCall,
    Toolset,
    TrackedState,
    Verdict,
    read_records,
)
from prefixmon.records import build_record
from prefixmon.telemetry import Telemetry
from prefixmon.telemetry.otel_setup import configure_otel

SECRET = "s3cr3t-in-an-exception-message"


def _faulty_tools() -> Toolset:
    """A tool whose precondition, effect and error_result hook all raise, and a clean one."""
    tools = Toolset()

    def broken_rule(state: TrackedState, args: Any) -> bool:
        raise KeyError(f"rule crashed on {SECRET}")

    def broken_effect(state: TrackedState, args: Any, result: Any) -> None:
        raise ZeroDivisionError(SECRET)

    def good_effect(state: TrackedState, args: Any, result: Any) -> None:
        state.facts["good_effect_ran"] = True

    def broken_error_result(result: Any) -> str | None:
        raise TypeError(SECRET)

    @tools.tool(requires=[broken_rule], effects=[broken_effect, good_effect])
    def act(x: int) -> int:
        """Every rule of this tool is broken."""
        return x * 2

    @tools.tool(error_result=broken_error_result)
    def judge(x: int) -> int:
        """Its error_result hook raises."""
        return x

    @tools.tool
    def clean(x: int) -> int:
        """No rules at all."""
        return x

    return tools


def _errors(logs: list[MutableMapping[str, Any]]) -> list[MutableMapping[str, Any]]:
    return [e for e in logs if e["event"] == "monitor_internal_error"]


class TestCountedAndLogged:
    """Every error the monitor catches is counted and logged, without its message."""

    async def test_fail_open_logs_each_fault_and_runs_later_effects(self) -> None:
        """fail_open: the call runs, the remaining effects still run, each fault is one error log line."""
        monitor = Monitor(_faulty_tools(), policy="block")
        with capture_logs() as logs:
            async with monitor.episode(task_id="t") as ep:
                assert await ep.call("act", {"x": 2}) == 4
                assert await ep.call("judge", {"x": 1}) == 1
        assert ep.state.facts["good_effect_ran"] is True
        errors = _errors(logs)
        assert [(e["where"], e["error_type"]) for e in errors] == [
            ("precondition broken_rule of act", "KeyError"),
            ("effect broken_effect of act", "ZeroDivisionError"),
            ("error_result of judge", "TypeError"),
        ]
        assert all(e["log_level"] == "error" and e["episode_id"] == ep.id and e["failure_mode"] == "fail_open" for e in errors)
        assert SECRET not in repr(logs)  # exception messages may quote argument values
        assert monitor.stats.internal_errors == ep.internal_errors == 3
        assert ep.record is not None and ep.record.executable and ep.record.horizon == 2

    async def test_fail_closed_blocks_unchecked_calls_but_not_clean_ones(self) -> None:
        """fail_closed blocks only the call that could not be checked; the agent gets a model-readable error."""
        monitor = Monitor(_faulty_tools(), policy="observe", failure_mode="fail_closed")
        with capture_logs() as logs:
            async with monitor.episode(task_id="t") as ep:
                with pytest.raises(ToolBlocked, match="could not be checked") as info:
                    await ep.call("act", {"x": 2})
                assert await ep.call("clean", {"x": 5}) == 5
        assert info.value.decision == "fail_closed"
        rec = ep.record
        assert rec is not None
        got = [(a.decision, a.reached_environment) for a in rec.actions]
        assert got == [(Decision.FAIL_CLOSED, False), (Decision.ALLOW, True)]
        assert rec.first_failure is not None and rec.first_failure.depth == 1
        assert [e["failure_mode"] for e in _errors(logs)] == ["fail_closed"]

    async def test_fail_closed_effect_fault_after_the_call_ran(self) -> None:
        """An effect that raises after a call ran cannot un-run it: the result is returned, the fault counted."""
        tools = Toolset()

        def broken_effect(state: TrackedState, args: Any, result: Any) -> None:
            raise RuntimeError("effect bug")

        @tools.tool(effects=[broken_effect])
        def act(x: int) -> int:
            return x

        monitor = Monitor(tools, failure_mode="fail_closed")
        async with monitor.episode(task_id="t") as ep:
            assert await ep.call("act", {"x": 9}) == 9
        assert monitor.stats.internal_errors == 1
        assert ep.record is not None and ep.record.actions[0].decision is Decision.ALLOW

    async def test_broken_logging_never_reaches_the_agent(self, tools: Toolset) -> None:
        """A logging pipeline that raises on every event is survived; the fault is still counted."""

        def explode(logger: Any, method: str, event: Any) -> Any:
            raise OSError("log disk full")

        saved = structlog.get_config()
        structlog.configure(processors=[explode], cache_logger_on_first_use=False)
        try:
            tools.add_schema("crash", None, func=lambda: 1, requires=[lambda state, args: bool(1 / 0)])
            monitor = Monitor(tools)
            async with monitor.episode(task_id="t") as ep:
                assert await ep.call("crash", {}) == 1
        finally:
            structlog.configure(**saved)
        assert monitor.stats.internal_errors == 1


class BrokenEverywhere(Observer):
    """An observer whose every hook raises (a telemetry backend gone bad)."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def _boom(self, hook: str) -> None:
        self.calls.append(hook)
        raise RuntimeError(f"{hook} is broken")

    def episode_started(self, episode: Any) -> None:
        self._boom("episode_started")

    def call_started(self, episode: Any, tool: str, call_id: str | None, depth: int) -> Any:
        self.calls.append("call_started")
        return "token"  # a token, so that the per-call hooks below run

    def execution_context(self, episode: Any, call: ToolCall, token: Any) -> Any:
        self._boom("execution_context")

    def call_result(self, episode: Any, depth: int, result: Any, token: Any) -> None:
        self._boom("call_result")

    def call_finished(self, episode: Any, action: Any, verdict: Any, token: Any) -> None:
        self._boom("call_finished")

    def episode_finished(self, episode: Any, record: Any) -> None:
        self._boom("episode_finished")

    def internal_error(self, episode: Any, where: str, error: BaseException) -> None:
        self._boom("internal_error")


class TestObservers:
    """Observers can fail in any hook; calls and records are unaffected."""

    async def test_every_hook_raising(self, tools: Toolset, tmp_path: Path) -> None:
        """Each raising hook is counted; fail-open, the call runs."""
        broken = BrokenEverywhere()
        path = tmp_path / "r.jsonl"
        monitor = Monitor(tools, observers=[broken], sink=path)
        async with monitor.episode(task_id="t") as ep:
            assert await ep.call("set_cellular", {"on": True}) == {"cellular": True}
        (rec,) = read_records(path)
        assert rec.executable and rec.actions[0].decision is Decision.ALLOW
        assert broken.calls == [
            "episode_started",
            "call_started",
            "execution_context",
            "call_result",
            "call_finished",
            "episode_finished",
        ]
        assert monitor.stats.internal_errors == 5

    async def test_fail_closed_blocks_a_call_whose_observer_failed(self, tools: Toolset, tmp_path: Path) -> None:
        """An observer (an exporter) raising while a call is admitted blocks that call fail-closed; the record says so."""

        class DownExporter(Observer):
            def call_started(self, episode: Any, tool: str, call_id: str | None, depth: int) -> Any:
                raise ConnectionError("the collector is down")

        path = tmp_path / "r.jsonl"
        for mode in ("fail_open", "fail_closed"):
            monitor = Monitor(tools, observers=[DownExporter()], sink=path, failure_mode=mode)
            async with monitor.episode(task_id=mode) as ep:
                if mode == "fail_open":
                    assert await ep.call("set_cellular", {"on": True}) == {"cellular": True}
                else:
                    with pytest.raises(ToolBlocked, match="an observer failed"):
                        await ep.call("set_cellular", {"on": True})
        opened, closed = read_records(path)
        assert opened.actions[0].decision is Decision.ALLOW and opened.actions[0].reached_environment
        assert closed.actions[0].decision is Decision.FAIL_CLOSED and not closed.actions[0].reached_environment

    async def test_a_fault_notifies_observers_and_survives_their_failure(self) -> None:
        """internal_error raising inside fault handling is itself counted, not raised."""
        broken = BrokenEverywhere()
        monitor = Monitor(_faulty_tools(), observers=[broken])
        async with monitor.episode(task_id="t") as ep:
            assert await ep.call("act", {"x": 1}) == 2
        assert broken.calls.count("internal_error") == 2  # the precondition and the effect
        assert ep.internal_errors == 2 + 3  # its faults and its per-call observer hooks
        assert monitor.stats.internal_errors == 2 + 2 + 5  # faults, failing internal_error hooks, every other hook


class TestSinks:
    """Record sinks that raise or hang are counted and logged; the agent goes on."""

    async def test_async_sink_that_raises(self, tools: Toolset) -> None:
        """An async sink raising is a counted, logged sink error."""

        async def sink(record: Any) -> None:
            raise ConnectionError("record store down")

        monitor = Monitor(tools, sink=sink)
        with capture_logs() as logs:
            async with monitor.episode(task_id="t") as ep:
                await ep.call("set_cellular", {"on": True})
        assert ep.record is not None and ep.record.horizon == 1
        assert monitor.stats.sink_errors == 1
        assert [(e["where"], e["error_type"]) for e in _errors(logs)] == [("sink", "ConnectionError")]

    async def test_async_sink_that_hangs_is_abandoned(self, tools: Toolset) -> None:
        """An async sink that never returns is cut off after sink_timeout; the episode exits."""
        cut_off: list[bool] = []

        async def sink(record: Any) -> None:
            try:
                await anyio.Event().wait()  # never set: only the sink timeout ends this
            finally:
                cut_off.append(True)

        monitor = Monitor(tools, sink=sink, sink_timeout=0.1)
        with capture_logs() as logs:
            async with monitor.episode(task_id="t") as ep:
                await ep.call("set_cellular", {"on": True})
        assert cut_off == [True]  # the episode exited because the sink was cancelled, not because it returned
        assert monitor.stats.sink_timeouts == 1
        assert [(e["where"], e["error_type"]) for e in _errors(logs)] == [("sink", "TimeoutError")]

    @pytest.mark.parametrize("anyio_backend", ["asyncio"])  # trio.Cancelled cannot be raised by hand
    async def test_a_sink_raising_a_stray_cancellation_is_a_sink_error(self, tools: Toolset, anyio_backend: str) -> None:
        """A CancelledError the sink raises itself (nobody cancelled the agent) is counted, not raised."""
        import asyncio

        async def sink(record: Any) -> None:
            raise asyncio.CancelledError

        monitor = Monitor(tools, sink=sink)
        with capture_logs() as logs:
            async with monitor.episode(task_id="t") as ep:
                await ep.call("set_cellular", {"on": True})
        assert ep.record is not None and monitor.stats.sink_errors == 1
        assert [(e["where"], e["error_type"]) for e in _errors(logs)] == [("sink", "CancelledError")]

    def test_a_sync_sink_that_never_returns_does_not_keep_the_process_alive(self) -> None:
        """The sink runs in a daemon thread: after sink_timeout the agent goes on and the process can exit."""
        script = textwrap.dedent(
            """
            import time, anyio
            from prefixmon import Monitor, Toolset
            tools = Toolset()

            @tools.tool
            def ping(n: int) -> int:
                return n

            def sink(record):
                time.sleep(3600)  # a write to a stuck mount

            async def main():
                monitor = Monitor(tools, sink=sink, sink_timeout=0.2)
                async with monitor.episode("t") as ep:
                    await ep.call("ping", {"n": 1})
                print(monitor.stats.sink_timeouts)

            anyio.run(main)
            """
        )
        # The sink sleeps an hour: the process exiting at all shows the thread did not keep it alive
        # (the subprocess timeout only turns a regression into a failure instead of a hang).
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip().splitlines()[-1] == "1"  # one sink timeout (logged above it)

    async def test_sync_sinks_share_daemon_threads(self, tools: Toolset) -> None:
        """Sync sinks run one after another reuse an idle thread; a raising sink is a counted sink error."""
        threads: list[threading.Thread] = []

        def sink(record: Any) -> None:
            threads.append(threading.current_thread())
            if len(threads) == 3:
                raise OSError("disk full")

        monitor = Monitor(tools, sink=sink)
        for _ in range(3):
            async with monitor.episode(task_id="t") as ep:
                await ep.call("set_cellular", {"on": True})
        assert len(set(threads)) == 1 and threads[0].daemon and threads[0] is not threading.main_thread()
        assert monitor.stats.sink_errors == 1

    @pytest.mark.parametrize("anyio_backend", ["asyncio"])
    async def test_a_real_cancellation_during_delivery_still_cancels(self, tools: Toolset, anyio_backend: str) -> None:
        """task.cancel() while an async sink runs: the agent's task is cancelled, not swallowed as a sink error."""
        import asyncio

        started = asyncio.Event()

        async def sink(record: Any) -> None:
            started.set()
            await asyncio.sleep(1)

        monitor = Monitor(tools, sink=sink, sink_timeout=5)

        async def agent() -> None:
            async with monitor.episode(task_id="t") as ep:
                await ep.call("set_cellular", {"on": True})

        task = asyncio.ensure_future(agent())
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert monitor.stats.sink_errors == 0

    async def test_hanging_sink_delivery_survives_cancellation(self, tools: Toolset) -> None:
        """A cancelled episode still delivers its record (shielded), bounded by the sink timeout."""
        got: list[Any] = []

        async def sink(record: Any) -> None:
            await anyio.sleep(0.05)
            got.append(record)

        monitor = Monitor(tools, sink=sink, sink_timeout=1)
        with anyio.move_on_after(0.05):
            async with monitor.episode(task_id="t") as ep:
                await ep.call("set_cellular", {"on": True})
                await anyio.sleep(10)
        assert [r.status for r in got] == ["cancelled"]


def _dead_port() -> int:
    """A local TCP port nothing listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class TestDeadExporter:
    """A real OTLP/HTTP exporter pointed at a closed port."""

    async def test_calls_complete_and_shutdown_is_bounded(
        self, tools: Toolset, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
    ) -> None:
        """Calls never wait for the failing exports (none runs on the agent's thread); the SDK logs them; nothing raises."""
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        export_threads: list[threading.Thread] = []
        export = OTLPSpanExporter.export

        def counted_export(self: OTLPSpanExporter, spans: Any) -> Any:
            export_threads.append(threading.current_thread())
            return export(self, spans)  # the real exporter, against the closed port

        monkeypatch.setattr(OTLPSpanExporter, "export", counted_export)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "1")  # seconds: bounds the exporter's retries
        otel = configure_otel(otlp_endpoint=f"http://127.0.0.1:{_dead_port()}", batch=True)
        monitor = Monitor(
            tools,
            policy="block",
            observers=[Telemetry(tracer_provider=otel.tracer_provider, meter_provider=otel.meter_provider)],
        )
        agent_thread = threading.current_thread()
        for i in range(20):
            async with monitor.episode(task_id=f"t{i}") as ep:
                await ep.call("search_contacts", {"name": "Amara"})
                with pytest.raises(ToolBlocked):
                    await ep.call("remove_contact", {"person_id": "nobody"})
        # Bounded by what the agent waits for, not by a clock: no export ran in the agent's thread.
        assert agent_thread not in export_threads
        with caplog.at_level(logging.WARNING):
            otel.force_flush()  # the exporter fails here, in the SDK, not in the agent
            otel.shutdown()  # bounded by OTEL_EXPORTER_OTLP_TIMEOUT per attempt
        assert export_threads  # the spans did go to the (dead) exporter
        assert ep.record is not None and ep.record.fed == 2
        assert monitor.stats.internal_errors == 0
        assert any("export" in r.getMessage().lower() for r in caplog.records)


class TestCancellationAndErrors:
    """Whatever stops an episode, its record is complete and delivered."""

    @pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
    async def test_cancel_while_replan_hook_runs(self, tools: Toolset, tmp_path: Path, anyio_backend: str) -> None:
        """Cancelled inside a slow replan hook: the call is recorded as blocked, the record written."""

        async def replan(verdict: Verdict, call: ToolCall, state: TrackedState) -> str:
            await anyio.sleep(10)
            return "never"

        path = tmp_path / "r.jsonl"
        monitor = Monitor(tools, policy="replan", replan=replan, sink=path)
        with anyio.move_on_after(0.05):
            async with monitor.episode(task_id="t") as ep:
                await ep.call("remove_contact", {"person_id": "ghost"})
        (rec,) = read_records(path)
        assert rec.status == "cancelled" and rec.horizon == 1 and rec.fed == 1
        a = rec.actions[0]
        assert (a.decision, a.reached_environment, a.error) == (Decision.BLOCK, False, "interrupted while the policy hook ran")

    async def test_cancel_while_escalation_hook_waits(self, tools: Toolset, tmp_path: Path) -> None:
        """Cancelled while a human is asked: recorded, not run, record written."""

        async def escalate(verdict: Verdict, call: ToolCall) -> Approve:
            await anyio.sleep(10)
            return Approve()

        path = tmp_path / "r.jsonl"
        monitor = Monitor(tools, policy="escalate", escalate=escalate, escalate_timeout=60, sink=path)
        with anyio.move_on_after(0.05):
            async with monitor.episode(task_id="t") as ep:
                await ep.call("send_money", {"phone_number": "+1 000", "amount": 5})
        (rec,) = read_records(path)
        assert rec.status == "cancelled" and not rec.actions[0].reached_environment
        assert not rec.invalid_reached_environment

    async def test_framework_owned_call_never_reported(self, tools: Toolset, tmp_path: Path) -> None:
        """begin() without done(): the episode end abandons the call and the record says so."""
        path = tmp_path / "r.jsonl"
        monitor = Monitor(tools, sink=path)
        async with monitor.episode(task_id="t") as ep:
            pending = await ep.begin("set_cellular", {"on": True}, call_id="c-1")
            assert pending.args == {"on": True}
        (rec,) = read_records(path)
        a = rec.actions[0]
        assert rec.status == "finished" and a.call_id == "c-1" and a.error == "the episode ended before the call finished"
        pending.done({"cellular": True})  # too late: ignored, nothing raises
        assert read_records(path)[0].actions[0].error == "the episode ended before the call finished"

    async def test_body_exception_with_calls_in_flight(self, tools: Toolset, tmp_path: Path) -> None:
        """The agent body raising while a framework call is pending: status error, the call abandoned."""
        path = tmp_path / "r.jsonl"
        monitor = Monitor(tools, sink=path)
        with pytest.raises(LookupError):
            async with monitor.episode(task_id="t") as ep:
                await ep.call("search_contacts", {"name": "Fredrik"})
                await ep.begin("send_message", {"person_id": "p-1", "text": "hi"})
                raise LookupError(SECRET)
        (rec,) = read_records(path)
        assert (rec.status, rec.error, rec.horizon) == ("error", "LookupError", 2)
        assert rec.actions[1].error == "the episode ended before the call finished"
        assert SECRET not in path.read_text()  # only the exception type is recorded

    async def test_tool_raising_base_exception_is_recorded_and_propagates(self, tmp_path: Path) -> None:
        """A tool raising KeyboardInterrupt-like BaseExceptions is not swallowed; the record is still written."""
        tools = Toolset()

        @tools.tool
        def stop(x: int) -> int:
            raise SystemExit(3)

        path = tmp_path / "r.jsonl"
        monitor = Monitor(tools, sink=path)
        with pytest.raises(SystemExit):
            async with monitor.episode(task_id="t") as ep:
                await ep.call("stop", {"x": 1})
        (rec,) = read_records(path)
        assert rec.status == "error" and rec.error == "SystemExit" and rec.horizon == 1

    async def test_faults_stay_in_their_episode(self) -> None:
        """Concurrent episodes: one hitting faults does not disturb the others' verdicts or records."""
        tools = _faulty_tools()
        monitor = Monitor(tools, failure_mode="fail_closed")
        records: dict[int, Any] = {}

        async def agent(i: int) -> None:
            async with monitor.episode(task_id=f"t{i}") as ep:
                with contextlib.suppress(ToolBlocked):
                    await ep.call("act" if i % 3 == 0 else "clean", {"x": i})
                await anyio.sleep(0)
                await ep.call("clean", {"x": i})
            records[i] = ep.record

        async with anyio.create_task_group() as tg:
            for i in range(60):
                tg.start_soon(agent, i)
        for i, rec in records.items():
            assert rec.executable is (i % 3 != 0)
            assert rec.horizon == 2
        assert monitor.stats.internal_errors == 20


class TestHooks:
    """Escalation and replan hooks that hang, raise or answer nonsense."""

    async def test_escalation_hook_that_raises_blocks(self, tools: Toolset) -> None:
        """A raising escalation hook is counted and the call blocked, never run."""

        async def escalate(verdict: Verdict, call: ToolCall) -> Approve:
            raise RuntimeError("pager down")

        monitor = Monitor(tools, policy="escalate", escalate=escalate)
        async with monitor.episode(task_id="t") as ep:
            with pytest.raises(ToolBlocked) as info:
                await ep.call("send_money", {"phone_number": "+1 000", "amount": 5})
        assert info.value.decision == "block"
        assert monitor.stats.internal_errors == 1
        assert ep.record is not None and not ep.record.invalid_reached_environment

    @pytest.mark.parametrize("answer", [None, 42, "approve", Replan(guidance="x")])
    async def test_escalation_hook_nonsense_answer(self, tools: Toolset, answer: Any) -> None:
        """An answer that is not Approve/Edit/Deny never runs the call."""

        async def escalate(verdict: Verdict, call: ToolCall) -> Any:
            return answer

        monitor = Monitor(tools, policy="escalate", escalate=escalate)
        async with monitor.episode(task_id="t") as ep:
            with pytest.raises(ToolBlocked):
                await ep.call("send_money", {"phone_number": "+1 000", "amount": 5})
        assert ep.record is not None and not ep.record.actions[0].reached_environment

    @pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
    async def test_hanging_escalation_denies_and_the_episode_goes_on(self, tools: Toolset, anyio_backend: str) -> None:
        """A hook that hangs is timed out and denies; later calls still work and the hook is not left running."""
        finished: list[bool] = []

        async def escalate(verdict: Verdict, call: ToolCall) -> Deny:
            try:
                await anyio.sleep(3600)
            finally:
                finished.append(True)
            return Deny()

        monitor = Monitor(tools, policy="escalate", escalate=escalate, escalate_timeout=0.05)
        async with monitor.episode(task_id="t") as ep:
            ep.user("send 5 to +1 555 0100")
            with pytest.raises(ToolBlocked, match=r"no human answered within 0\.05 s") as info:
                await ep.call("send_money", {"phone_number": "+1 000", "amount": 5})
            assert finished == [True]  # the hour-long hook was cut off by the timeout, not waited for
            assert await ep.call("send_money", {"phone_number": "+1 555 0100", "amount": 5}) == {"status": "sent"}
        assert info.value.decision == "deny" and finished == [True]
        assert ep.record is not None
        assert [a.decision for a in ep.record.actions] == [Decision.DENY, Decision.ALLOW]

    @pytest.mark.parametrize("answer", [42, ["search_contacts"], Approve(), ToolCall(name="no_such_tool", args={})], ids=repr)
    async def test_replan_nonsense_answer_blocks(self, tools: Toolset, answer: Any) -> None:
        """A replan answer that is neither Replan, ToolCall, text nor None blocks, never runs anything."""

        async def replan(verdict: Verdict, call: ToolCall, state: TrackedState) -> Any:
            return answer

        monitor = Monitor(tools, policy="replan", replan=replan)
        async with monitor.episode(task_id="t") as ep:
            with pytest.raises(ToolBlocked):
                await ep.call("remove_contact", {"person_id": "ghost"})
        assert ep.record is not None
        a = ep.record.actions[0]
        assert not a.reached_environment and a.cause is Cause.DEPENDENCY

    async def test_replan_hook_raising_base_exception_is_not_swallowed(self, tools: Toolset) -> None:
        """Cancellation-like BaseExceptions from a hook propagate (only Exceptions fall back to block)."""

        async def replan(verdict: Verdict, call: ToolCall, state: TrackedState) -> Any:
            raise KeyboardInterrupt

        monitor = Monitor(tools, policy="replan", replan=replan)
        with pytest.raises(KeyboardInterrupt):
            async with monitor.episode(task_id="t") as ep:
                await ep.call("remove_contact", {"person_id": "ghost"})
        assert ep.record is not None and ep.record.status == "error"
        assert ep.record.actions[0].decision is Decision.BLOCK


class _OnceInterrupted:
    """``func``, but the first call raises KeyboardInterrupt, as a Ctrl-C landing there would."""

    def __init__(self, func: Any) -> None:
        self.func, self.fired = func, False

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if not self.fired:
            self.fired = True
            raise KeyboardInterrupt
        return self.func(*args, **kwargs)


class TestFailClosedSinks:
    """Fail-closed, a sink that cannot keep records blocks calls until it can again."""

    async def test_jsonl_sink_that_cannot_write(self, tools: Toolset, tmp_path: Path) -> None:
        (tmp_path / "file").write_text("not a folder")
        modes: tuple[tuple[Any, bool], ...] = (("fail_open", True), ("fail_closed", False))
        for mode, ran in modes:
            monitor = Monitor(tools, sink=tmp_path / "file" / "r.jsonl", failure_mode=mode)
            async with monitor.episode(task_id="t") as ep:
                if ran:
                    assert await ep.call("set_cellular", {"on": True}) == {"cellular": True}
                else:
                    with pytest.raises(ToolBlocked, match="records cannot be kept"):
                        await ep.call("set_cellular", {"on": True})
            assert ep.record is not None and ep.record.actions[0].reached_environment is ran

    async def test_callable_sink_failing_then_recovering(self, tools: Toolset) -> None:
        failing = [True]
        got: list[str] = []

        async def sink(record: Any) -> None:
            if failing[0]:
                raise ConnectionError("the record store is down")
            got.append(record.task_id)

        monitor = Monitor(tools, sink=sink, failure_mode="fail_closed")
        async with monitor.episode(task_id="first") as ep:  # nothing failed yet: the call runs
            await ep.call("set_cellular", {"on": True})
        async with monitor.episode(task_id="second") as ep:  # the last delivery failed: blocked
            with pytest.raises(ToolBlocked):
                await ep.call("set_cellular", {"on": True})
        failing[0] = False  # this record is delivered, so calls run again
        async with monitor.episode(task_id="third") as ep:
            with pytest.raises(ToolBlocked):
                await ep.call("set_cellular", {"on": True})
        async with monitor.episode(task_id="fourth") as ep:
            await ep.call("set_cellular", {"on": True})
        assert got == ["third", "fourth"]


class TestInterruptedWhileClosing:
    """A Ctrl-C that lands while the record is built or handed to the sink still leaves the record."""

    @pytest.mark.parametrize("where", ["prefixmon.episode.build_record", "prefixmon.records.model.record_line"])
    async def test_jsonl_sink(self, tools: Toolset, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str) -> None:
        path = tmp_path / "r.jsonl"
        monitor = Monitor(tools, sink=path)
        module, _, name = where.rpartition(".")
        interrupted = _OnceInterrupted(getattr(sys.modules[module], name))
        monkeypatch.setattr(where, interrupted)
        with pytest.raises(KeyboardInterrupt):
            async with monitor.episode(task_id="t") as ep:
                await ep.call("add_contact", {"name": "Ann"})
        assert interrupted.fired
        (record,) = read_records(path)
        assert record.task_id == "t" and record.horizon == 1 and ep.record is not None

    async def test_callable_sink(self, tools: Toolset, monkeypatch: pytest.MonkeyPatch) -> None:
        got: list[Any] = []

        async def sink(record: Any) -> None:
            got.append(record)

        monitor = Monitor(tools, sink=sink)
        monkeypatch.setattr("prefixmon.episode.build_record", _OnceInterrupted(build_record))
        with pytest.raises(KeyboardInterrupt):
            async with monitor.episode(task_id="t"):
                pass
        assert [r.task_id for r in got] == ["t"]


@pytest.fixture(autouse=True)
def _no_leaked_structlog_config() -> Iterator[None]:
    saved = structlog.get_config()
    yield
    structlog.configure(**saved)
