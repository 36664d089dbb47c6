"""Episodes and the monitor: policies, hooks, FED, no-tool episodes, faults, isolation."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import anyio
import pytest

from prefixmon import (
    Approve,
    Cause,
    Decision,
    Deny,
    Edit,
    Monitor,
    Observer,
    Outcome,
    Policy,
    Replan,
    SpecError,
    ToolBlocked,
    ToolCall,
    Toolset,
    TrackedState,
    Verdict,
    read_records,
)

from .conftest import build_contacts


class TestBlock:
    async def test_blocked_call_never_runs_and_counts_as_failure(self, contacts: Any) -> None:
        """block raises ToolBlocked with the model-readable reason; the tool does not run; FED counts it."""
        tools, book = contacts
        monitor = Monitor(tools, policy="block")
        async with monitor.episode(task_id="t", env=book) as ep:
            with pytest.raises(ToolBlocked) as info:
                await ep.call("remove_contact", {"person_id": "+1 555 0100"})
            assert ep.fed == 1 and not ep.executable
            assert "search_contacts produces them" in str(info.value)
            assert info.value.verdict.cause is Cause.DEPENDENCY
            found = await ep.call("search_contacts", {"phone_number": "+1 555 0100"})
            await ep.call("remove_contact", {"person_id": found[0]["person_id"]})
            ep.finish("success")
        assert "p-1" not in book
        rec = ep.record
        assert rec is not None
        assert (rec.horizon, rec.fed, rec.executable, rec.outcome) == (3, 1, False, Outcome.SUCCESS)
        assert rec.actions[0].decision is Decision.BLOCK and not rec.actions[0].reached_environment
        assert not rec.invalid_reached_environment
        assert rec.first_failure is not None and rec.first_failure.cause is Cause.DEPENDENCY

    async def test_observe_lets_invalid_calls_reach_the_environment(self, tools: Toolset) -> None:
        """observe records the failure, runs the call, and the record says an invalid call reached the environment."""
        monitor = Monitor(tools)  # observe is the default
        async with monitor.episode(task_id="t") as ep:
            await ep.call("send_money", {"phone_number": "+1 000", "amount": 1})
        assert ep.record is not None
        assert ep.record.actions[0].decision is Decision.OBSERVE
        assert ep.record.invalid_reached_environment

    async def test_policy_per_tool_and_cause(self, tools: Toolset) -> None:
        """Policy resolves tool rules, then cause rules, then the default."""
        policy = Policy(default="block", tools={"send_money": "observe"}, causes={"precondition": "observe"})
        monitor = Monitor(tools, policy=policy)
        async with monitor.episode(task_id="t") as ep:
            await ep.call("send_money", {"phone_number": "x", "amount": 1})  # observed, runs
            await ep.call("search_contacts", {"name": "Amara"})
            await ep.call("send_message", {"person_id": "p-2", "text": "hi"})  # precondition: observed
            with pytest.raises(ToolBlocked):
                await ep.call("remove_contact", {"person_id": "nope"})  # dependency: blocked
        assert ep.record is not None
        assert [a.decision for a in ep.record.actions] == [Decision.OBSERVE, Decision.ALLOW, Decision.OBSERVE, Decision.BLOCK]

    def test_unknown_policy_is_a_spec_error(self, tools: Toolset) -> None:
        """A misspelt policy fails at construction with the valid choices."""
        with pytest.raises(SpecError, match="unknown policy 'blok'"):
            Monitor(tools, policy="blok")
        with pytest.raises(SpecError, match="no replan= hook"):
            Monitor(tools, policy="replan")


class TestReplan:
    async def test_replacement_is_checked_and_runs(self, contacts: Any) -> None:
        """A replan hook's replacement call is checked again and runs; the emitted call still counts."""
        tools, book = contacts
        seen: list[Verdict] = []

        async def replan(verdict: Verdict, call: ToolCall, state: TrackedState) -> Replan:
            seen.append(verdict)
            return Replan(
                guidance="look the contact up first", call=ToolCall(name="search_contacts", args={"phone_number": "+1 555 0100"})
            )

        monitor = Monitor(tools, policy="replan", replan=replan)
        async with monitor.episode(task_id="t", env=book) as ep:
            result = await ep.call("remove_contact", {"person_id": "+1 555 0100"})
            assert result[0]["person_id"] == "p-1"
            await ep.call("remove_contact", {"person_id": "p-1"})  # now bound by the replacement's result
        rec = ep.record
        assert rec is not None and seen[0].cause is Cause.DEPENDENCY
        assert (rec.horizon, rec.fed) == (2, 1)
        first = rec.actions[0]
        assert (first.decision, first.replacement, first.reached_environment) == (Decision.REPLAN, "search_contacts", False)

    async def test_non_executable_replacement_is_blocked(self, tools: Toolset) -> None:
        """A replacement that is itself not executable is not run; the agent gets guidance."""

        async def replan(verdict: Verdict, call: ToolCall, state: TrackedState) -> ToolCall:
            return ToolCall(name="remove_contact", args={"person_id": "still-made-up"})

        monitor = Monitor(tools, policy="replan", replan=replan)
        async with monitor.episode(task_id="t") as ep:
            with pytest.raises(ToolBlocked, match="replacement was not executable"):
                await ep.call("remove_contact", {"person_id": "+1 555 0100"})

    async def test_guidance_only(self, tools: Toolset) -> None:
        """A hook answering with text blocks the call and passes the text to the model."""

        async def replan(verdict: Verdict, call: ToolCall, state: TrackedState) -> str:
            return "search for the contact by phone number first"

        monitor = Monitor(tools, policy="replan", replan=replan)
        async with monitor.episode(task_id="t") as ep:
            with pytest.raises(ToolBlocked) as info:
                await ep.call("remove_contact", {"person_id": "+1 555 0100"})
        assert info.value.decision == "replan" and "Guidance: search for the contact" in str(info.value)

    async def test_raising_hook_falls_back_to_block(self, tools: Toolset) -> None:
        """A replan hook that raises is counted as an internal error and the call is blocked."""

        async def replan(verdict: Verdict, call: ToolCall, state: TrackedState) -> None:
            raise ValueError("planner crashed")

        monitor = Monitor(tools, policy="replan", replan=replan)
        async with monitor.episode(task_id="t") as ep:
            with pytest.raises(ToolBlocked) as info:
                await ep.call("remove_contact", {"person_id": "x"})
        assert info.value.decision == "block"
        assert monitor.stats.internal_errors == 1


class TestEscalate:
    async def _run(self, tools: Toolset, answer: Any, timeout: float = 5.0) -> Any:
        async def escalate(verdict: Verdict, call: ToolCall) -> Any:
            if answer == "hang":
                await anyio.sleep(60)
            return answer

        monitor = Monitor(tools, policy="escalate", escalate=escalate, escalate_timeout=timeout)
        async with monitor.episode(task_id="t") as ep:
            ep.user("send 20 to +1 555 0100")
            try:
                result = await ep.call("send_money", {"phone_number": "+1 555 0100", "amount": 25})
            except ToolBlocked as blocked:
                result = blocked
        return ep.record, result

    async def test_approve_runs_the_call(self, tools: Toolset) -> None:
        """An approved non-executable call runs; it still counts as a failure and reached the environment."""
        rec, result = await self._run(tools, Approve())
        assert result == {"status": "sent"}
        a = rec.actions[0]
        assert (a.executable, a.decision, a.reached_environment) == (False, Decision.APPROVE, True)

    async def test_edit_is_rechecked(self, tools: Toolset) -> None:
        """Edited arguments are checked again and the edited call runs."""
        rec, result = await self._run(tools, Edit({"phone_number": "+1 555 0100", "amount": 20}))
        assert result == {"status": "sent"}
        assert rec.actions[0].decision is Decision.EDIT and rec.fed == 1

    async def test_deny(self, tools: Toolset) -> None:
        """A denial blocks with the reviewer's reason."""
        rec, result = await self._run(tools, Deny("amount differs from what the user asked"))
        assert isinstance(result, ToolBlocked) and "amount differs" in str(result)
        assert rec.actions[0].decision is Decision.DENY

    async def test_timeout_denies(self, tools: Toolset) -> None:
        """A hook that does not answer in time denies."""
        rec, result = await self._run(tools, "hang", timeout=0.05)
        assert isinstance(result, ToolBlocked) and "no human answered" in str(result)
        assert rec.actions[0].decision is Decision.DENY


class TestNoTool:
    async def test_no_tool_episode_not_allowed(self, tools: Toolset) -> None:
        """An episode with no call has T=1 and fails when the task needs a tool."""
        async with Monitor(tools).episode(task_id="t") as ep:
            ep.finish("failure")
        rec = ep.record
        assert rec is not None
        assert (rec.horizon, rec.fed, rec.executable) == (1, 1, False)
        assert rec.actions[0].tool is None

    async def test_no_tool_episode_allowed(self, tools: Toolset) -> None:
        """When the task allows finishing without tools, the terminal slot is executable (FED 2)."""
        async with Monitor(tools).episode(task_id="t", allows_no_tool=True) as ep:
            ep.finish("success")
        assert ep.record is not None
        assert (ep.record.horizon, ep.record.fed, ep.record.executable) == (1, 2, True)


class TestInternalErrors:
    @staticmethod
    def _buggy_tools() -> Toolset:
        tools = Toolset()

        def buggy(state: TrackedState, args: Any) -> bool:
            raise KeyError("oops")

        def bad_effect(state: TrackedState, args: Any, result: Any) -> None:
            raise ZeroDivisionError

        @tools.tool(requires=[buggy], effects=[bad_effect])
        def act(x: int) -> int:
            return x

        return tools

    async def test_fail_open(self) -> None:
        """A raising precondition or effect is counted and logged; the call proceeds."""
        monitor = Monitor(self._buggy_tools(), policy="block")
        async with monitor.episode(task_id="t") as ep:
            assert await ep.call("act", {"x": 3}) == 3
        assert ep.record is not None and ep.record.executable
        assert monitor.stats.internal_errors == 2 and ep.internal_errors == 2

    async def test_fail_closed(self) -> None:
        """Fail-closed blocks a call the monitor could not check."""
        monitor = Monitor(self._buggy_tools(), policy="observe", failure_mode="fail_closed")
        async with monitor.episode(task_id="t") as ep:
            with pytest.raises(ToolBlocked, match="internal monitor error") as info:
                await ep.call("act", {"x": 3})
        assert info.value.decision == "fail_closed"
        assert monitor.stats.internal_errors == 1

    async def test_failing_observer_and_sink_never_reach_the_agent(self, tools: Toolset, tmp_path: Path) -> None:
        """An observer or sink that raises is counted; the agent's calls complete."""

        class Broken(Observer):
            def call_started(self, episode: Any, tool: str, call_id: str | None, depth: int) -> Any:
                raise RuntimeError("telemetry down")

            def call_finished(self, *args: Any) -> None:
                raise RuntimeError("telemetry down")

        def sink(record: Any) -> None:
            raise OSError("disk full")

        monitor = Monitor(tools, observers=[Broken()], sink=sink)
        async with monitor.episode(task_id="t") as ep:
            assert await ep.call("set_cellular", {"on": True}) == {"cellular": True}
        assert monitor.stats.sink_errors == 1 and monitor.stats.internal_errors == 3

    async def test_hanging_sink_times_out(self, tools: Toolset) -> None:
        """A sink that blocks is abandoned after sink_timeout."""
        import threading

        release = threading.Event()

        def sink(record: Any) -> None:
            release.wait(5)

        monitor = Monitor(tools, sink=sink, sink_timeout=0.05)
        async with monitor.episode(task_id="t") as ep:
            await ep.call("set_cellular", {"on": True})
        release.set()
        assert monitor.stats.sink_timeouts == 1


class TestRecords:
    async def test_body_exception_leaves_a_complete_record(self, tools: Toolset, tmp_path: Path) -> None:
        """An exception in the agent body still writes a complete record."""
        path = tmp_path / "r.jsonl"
        monitor = Monitor(tools, sink=path)
        with pytest.raises(ZeroDivisionError):
            async with monitor.episode(task_id="t") as ep:
                await ep.call("set_cellular", {"on": True})
                _ = 1 / 0
        (rec,) = read_records(path)
        assert (rec.status, rec.error, rec.horizon) == ("error", "ZeroDivisionError", 1)

    async def test_cancellation_mid_call_leaves_a_complete_record(self, tmp_path: Path) -> None:
        """A call cancelled while it runs is recorded with its error; the record is written."""
        tools = Toolset()

        @tools.tool
        async def slow(seconds: float) -> str:
            await anyio.sleep(seconds)
            return "done"

        path = tmp_path / "r.jsonl"
        monitor = Monitor(tools, sink=path)
        with anyio.move_on_after(0.05):
            async with monitor.episode(task_id="t") as ep:
                await ep.call("slow", {"seconds": 0.0})
                await ep.call("slow", {"seconds": 10})
        (rec,) = read_records(path)
        assert rec.status == "cancelled" and rec.horizon == 2
        assert rec.actions[1].error == "cancelled before the call finished"

    async def test_call_ids_and_labels(self, tools: Toolset) -> None:
        """Records carry call ids, merged labels and the task id."""
        monitor = Monitor(tools, labels={"dataset": "demo", "model": "m0"})
        async with monitor.episode(task_id="t-9", labels={"model": "m1", "method": "react"}) as ep:
            await ep.call("set_cellular", {"on": True}, call_id="call_abc")
        assert ep.record is not None
        assert ep.record.labels == {"dataset": "demo", "model": "m1", "method": "react"}
        assert ep.record.actions[0].call_id == "call_abc" and ep.record.task_id == "t-9"


@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
class TestConcurrency:
    async def test_200_episodes_do_not_share_state(self, anyio_backend: str) -> None:
        """200 concurrent episodes: each sees only its own bindings, facts and FED."""
        tools, _book = build_contacts()
        monitor = Monitor(tools, policy="block")
        records: dict[int, Any] = {}

        async def agent(i: int) -> None:
            async with monitor.episode(task_id=f"t{i}", labels={"i": str(i)}) as ep:
                if i % 2:
                    await ep.call("search_contacts", {"name": "Amara"})
                    await anyio.sleep(0)
                    await ep.call("set_cellular", {"on": True})
                await anyio.sleep(0)
                with contextlib.suppress(ToolBlocked):
                    await ep.call("send_message", {"person_id": "p-2", "text": f"hi {i}"})
            records[i] = ep.record

        async with anyio.create_task_group() as tg:
            for i in range(200):
                tg.start_soon(agent, i)
        for i, rec in records.items():
            assert rec.labels == {"i": str(i)}
            if i % 2:
                assert rec.executable and rec.horizon == 3
            else:
                assert (rec.fed, rec.first_failure.cause) == (1, Cause.DEPENDENCY)
        assert len(records) == 200


class TestExplicitLifetime:
    async def test_open_episode_and_aclose_across_tasks(self, tools: Toolset, tmp_path: Path) -> None:
        """An episode opened without `async with` can be used and closed from other tasks; aclose is idempotent."""
        monitor = Monitor(tools, sink=tmp_path / "r.jsonl")
        ep = monitor.open_episode("t", {"method": "m"})

        async def use() -> None:
            await ep.call("set_cellular", {"on": True}, call_id="c1")

        async with anyio.create_task_group() as tg:
            tg.start_soon(use)
        first = await ep.aclose()
        assert await ep.aclose() is first
        (rec,) = read_records(tmp_path / "r.jsonl")
        assert rec.horizon == 1 and rec.actions[0].call_id == "c1"

    async def test_lookup_by_call_id(self, tools: Toolset) -> None:
        """action_for and pending find a call by its framework id."""
        async with Monitor(tools).episode("t") as ep:
            pending = await ep.begin("set_cellular", {"on": True}, call_id="c1")
            assert ep.pending("c1") is pending and ep.action_for("c1") is None
            pending.done({"cellular": True})
            assert ep.pending("c1") is None
            action = ep.action_for("c1")
            assert action is not None and action.executable and action.depth == 1
            assert ep.action_for("nope") is None


class TestBoundedResources:
    async def test_hanging_replan_hook_times_out_and_blocks(self, tools: Toolset) -> None:
        """A replan hook that never answers is abandoned after replan_timeout; the call is blocked."""

        async def replan(verdict: Verdict, call: ToolCall, state: TrackedState) -> None:
            await anyio.sleep(60)

        monitor = Monitor(tools, policy="replan", replan=replan, replan_timeout=0.05)
        async with monitor.episode(task_id="t") as ep:
            with pytest.raises(ToolBlocked) as info:
                await ep.call("remove_contact", {"person_id": "x"})
        assert info.value.decision == "block" and monitor.stats.internal_errors == 1

    async def test_recorded_calls_do_not_keep_their_arguments(self, tools: Toolset) -> None:
        """An episode's memory grows with its calls, not with their payloads (1 MB arguments)."""
        import tracemalloc

        big = "x" * 1_000_000
        tracemalloc.start()
        try:
            async with Monitor(tools).episode(task_id="t") as ep:
                base = tracemalloc.get_traced_memory()[0]
                for i in range(30):
                    await ep.call("search_contacts", {"name": f"{big}{i}"})  # a fresh 1 MB string each time
                held = tracemalloc.get_traced_memory()[0] - base
        finally:
            tracemalloc.stop()
        assert held < 5_000_000, f"{held:,} bytes held for 30 calls"
