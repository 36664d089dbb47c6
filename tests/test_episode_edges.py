"""Edge cases of episodes, sinks and specs found in review; each test failed before its fix."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import pytest
from structlog.testing import capture_logs

from prefixmon import (
    Decision,
    EpisodeRecord,
    Grounded,
    Monitor,
    Observer,
    PendingCall,
    ToolBlocked,
    ToolCall,
    Toolset,
    TrackedState,
    Verdict,
    read_records,
)
from prefixmon.episode import Episode


def build_tools() -> Toolset:
    tools = Toolset()

    @tools.tool(produces="pid")
    def search(name: str) -> list[dict[str, str]]:
        return [{"pid": "p-1", "name": name}]

    tools.add_schema(
        "fw_remove",
        {"type": "object", "properties": {"pid": {"type": "string"}}, "required": ["pid"]},
        refs={"pid": "pid"},
    )
    tools.add_schema("fw_lookup", {"type": "object", "properties": {"name": {"type": "string"}}})
    return tools


def replace_with(name: str, args: dict[str, Any]) -> Any:
    async def hook(verdict: Verdict, call: ToolCall, state: TrackedState) -> ToolCall:
        return ToolCall(name=name, args=args)

    return hook


def recorder(ran: list[dict[str, Any]]) -> Any:
    def execute(args: dict[str, Any]) -> str:
        ran.append(args)
        return "removed"

    return execute


class TestSynchronousCallers:
    """Episode.admit and Episode.close_sync do the whole job without an event loop when no hook has to be awaited."""

    def test_admit_and_close_without_an_event_loop(self, tmp_path: Path) -> None:
        """No event loop anywhere (a sync framework's thread): calls are judged, run, blocked and recorded."""
        monitor = Monitor(build_tools(), policy="block", sink=tmp_path / "r.jsonl")
        ep = monitor.open_episode("t")
        pending = ep.admit("search", {"name": "Ada"}, call_id="c1")
        assert isinstance(pending, PendingCall) and pending.verdict.executable
        pending.done([{"pid": "p-1", "name": "Ada"}])
        with pytest.raises(ToolBlocked):  # blocked right here: observe and block await no hook
            ep.admit("fw_remove", {"pid": "p-404"})
        observed = Monitor(build_tools()).open_episode("t")
        let_through = observed.admit("fw_remove", {"pid": "p-404"})
        assert isinstance(let_through, PendingCall) and let_through.decision is Decision.OBSERVE
        let_through.done("removed")
        record = ep.close_sync()
        assert isinstance(record, EpisodeRecord) and (record.horizon, record.fed) == (2, 2)
        assert ep.close_sync() is record  # idempotent
        assert [r.episode_id for r in read_records(tmp_path / "r.jsonl")] == [ep.id]
        assert isinstance(observed.close_sync(), EpisodeRecord)

    async def test_what_needs_a_hook_is_returned_to_await(self) -> None:
        """A replan hook (or a callable sink) is left to the caller to await; the outcome is what begin() gives."""
        kept: list[EpisodeRecord] = []
        monitor = Monitor(build_tools(), policy="replan", replan=replace_with("search", {"name": "Ada"}), sink=kept.append)
        ep = monitor.open_episode("t")
        admitted = ep.admit("fw_remove", {"pid": "p-404"})
        assert not isinstance(admitted, PendingCall)
        pending = await admitted
        assert pending.replaced and pending.call.name == "search"
        pending.done([])
        closed = ep.close_sync()
        assert not isinstance(closed, EpisodeRecord)
        record = await closed
        assert kept == [record] and record.actions[0].replacement == "search"


class TestSinkAwaitable:
    """A sink is ``Callable[[EpisodeRecord], Awaitable[None] | None]``."""

    async def test_sync_callable_returning_awaitable_is_awaited(self) -> None:
        """A plain callable that returns a coroutine (a lambda around an async function) delivers the record."""
        got: list[EpisodeRecord] = []

        async def keep(record: EpisodeRecord) -> None:
            got.append(record)

        monitor = Monitor(build_tools(), sink=lambda r: keep(r))
        async with monitor.episode() as ep:
            await ep.call("search", {"name": "a"})
        assert [r.episode_id for r in got] == [ep.id]
        assert monitor.stats.sink_errors == 0 and monitor.stats.internal_errors == 0


class TestExecuteWithReplacement:
    """``execute=`` runs the emitted tool; a replacement of another tool must not go through it."""

    async def test_replacement_runs_its_own_function(self) -> None:
        """A replacement with an implementation runs that, not the framework's executor of the emitted tool."""
        ran: list[dict[str, Any]] = []
        monitor = Monitor(build_tools(), policy="replan", replan=replace_with("search", {"name": "x"}))
        async with monitor.episode() as ep:
            result = await ep.call("fw_remove", {"pid": "zz"}, execute=recorder(ran))
        assert ran == []
        assert result == [{"pid": "p-1", "name": "x"}]
        assert ep.state.is_bound("pid", "p-1")  # the replacement's result was absorbed as search's

    async def test_replacement_without_function_is_refused(self) -> None:
        """A replacement the executor cannot run is not run at all: ToolBlocked, and a complete record."""
        ran: list[dict[str, Any]] = []
        monitor = Monitor(build_tools(), policy="replan", replan=replace_with("fw_lookup", {"name": "x"}))
        async with monitor.episode() as ep:
            with pytest.raises(ToolBlocked) as blocked:
                await ep.call("fw_remove", {"pid": "zz"}, execute=recorder(ran))
        assert ran == []
        assert "fw_lookup" in str(blocked.value)
        assert ep.record is not None
        (action,) = ep.record.actions
        assert (action.decision, action.reached_environment) == (Decision.REPLAN, False)
        assert not ep.record.invalid_reached_environment


class _BadExit(Observer):
    def __init__(self, *, suppress: bool = False) -> None:
        self.suppress = suppress

    def episode_context(self, episode: Episode) -> contextlib.AbstractContextManager[Any]:
        suppress = self.suppress

        @contextlib.contextmanager
        def cm() -> Iterator[None]:
            if suppress:
                with contextlib.suppress(Exception):
                    yield
                return
            yield
            raise RuntimeError("observer exit failed")

        return cm()


class TestObserverEpisodeContext:
    """An observer's episode context can neither break the agent nor swallow its exception."""

    async def test_exit_that_raises_is_counted_not_raised(self) -> None:
        """A context whose exit raises is a counted internal error; the episode finishes normally."""
        monitor = Monitor(build_tools(), observers=[_BadExit()])
        async with monitor.episode() as ep:
            await ep.call("search", {"name": "a"})
        assert ep.record is not None and ep.record.status == "finished"
        assert monitor.stats.internal_errors == 1

    async def test_context_cannot_swallow_the_body_exception(self) -> None:
        """The agent's own exception still propagates and the record says so."""
        monitor = Monitor(build_tools(), observers=[_BadExit(suppress=True)])
        with pytest.raises(KeyError):
            async with monitor.episode() as ep:
                raise KeyError("agent bug")
        assert ep.record is not None and (ep.record.status, ep.record.error) == ("error", "KeyError")


class TestLiveFed:
    """FED is live: known as soon as a non-executable call is judged."""

    async def test_fed_set_while_observed_call_runs(self) -> None:
        """Under observe, ``ep.fed`` names the non-executable call while it is still running."""
        monitor = Monitor(build_tools())
        async with monitor.episode() as ep:
            pending = await ep.begin("fw_remove", {"pid": "zz"})
            assert not pending.verdict.executable
            assert ep.fed == 1 and not ep.executable
            pending.done("ok")
            assert ep.fed == 1


class TestRecordTypes:
    """Records written by the monitor are always readable."""

    async def test_non_string_task_id_is_written_as_text(self, tmp_path: Path) -> None:
        """An integer task id (benchmarks number their tasks) still gives a valid record."""
        path = tmp_path / "r.jsonl"
        monitor = Monitor(build_tools(), sink=path)
        async with monitor.episode(task_id=17, episode_id=5) as ep:  # type: ignore[arg-type]
            await ep.call("search", {"name": "a"})
        (record,) = read_records(path)
        assert (record.task_id, record.episode_id) == ("17", "5")


class TestSpecDeclaration:
    """Declaring tools is quiet for ordinary argument names."""

    def test_argument_names_shadowing_basemodel_do_not_warn(self) -> None:
        """Arguments named like BaseModel attributes (schema, json, copy) declare without a warning."""
        tools = Toolset()
        with warnings.catch_warnings():
            warnings.simplefilter("error")

            @tools.tool
            def query(schema: str, json: bool = False, copy: bool = False) -> str:
                return schema

        assert tools["query"].validate({"schema": "s", "json": True}) == {"schema": "s", "json": True, "copy": False}


class TestSmallContracts:
    def test_policy_with_unknown_cause_is_a_spec_error(self) -> None:
        """A misspelt cause in a policy names where it is."""
        from prefixmon import Policy, SpecError

        with pytest.raises(SpecError, match=r"Policy.causes: unknown cause 'precondtion'"):
            Policy(causes={"precondtion": "observe"})

    async def test_truthy_precondition_results_hold(self) -> None:
        """A precondition returning a truthy non-string (1) holds; 0 fails with its message."""
        from prefixmon import Monitor, Toolset

        tools = Toolset()

        def one(state: Any, args: Any) -> Any:
            """never shown"""
            return 1

        def zero(state: Any, args: Any) -> Any:
            """zero means no"""
            return 0

        @tools.tool(requires=[one])
        def ok() -> int:
            return 1

        @tools.tool(requires=[zero])
        def nope() -> int:
            return 0

        async with Monitor(tools).episode("t") as ep:
            assert ep.check("ok").executable
            assert ep.check("nope").reason == "nope: zero means no"

    async def test_escalation_without_an_answer_is_not_a_timeout(self) -> None:
        """A hook answering None at once denies without claiming a timeout."""
        from prefixmon import Monitor, ToolBlocked, Toolset

        tools = Toolset()
        tools.add_schema("pay", {"type": "object", "properties": {"to": {"type": "string"}}}, grounded=["to"])

        async def escalate(verdict: Any, call: Any) -> Any:
            return None

        monitor = Monitor(tools, policy="escalate", escalate=escalate)
        async with monitor.episode("t") as ep:
            with pytest.raises(ToolBlocked, match="no human approved the call"):
                await ep.call("pay", {"to": "nobody"}, execute=lambda args: None)


class TestInterruptedCalls:
    """A KeyboardInterrupt (or any BaseException) anywhere in a call still leaves its depth in the record."""

    @staticmethod
    def tools_with(requirement: Any) -> Toolset:
        tools = Toolset()

        @tools.tool
        def first(n: int) -> int:
            return n

        @tools.tool(requires=[requirement])
        def second(n: int) -> int:
            return n

        return tools

    async def test_interrupt_inside_a_precondition(self) -> None:
        def interrupted(state: Any, args: Any) -> bool:
            """never shown"""
            raise KeyboardInterrupt

        sink: list[EpisodeRecord] = []
        monitor = Monitor(self.tools_with(interrupted), sink=sink.append)
        with pytest.raises(KeyboardInterrupt):
            async with monitor.episode("t") as ep:
                await ep.call("first", {"n": 1})
                await ep.call("second", {"n": 2})
        record = sink[0]
        assert record.status == "error" and record.error == "KeyboardInterrupt"
        assert [a.depth for a in record.actions] == [1, 2]
        interrupted_call = record.actions[1]
        assert interrupted_call.tool == "second" and interrupted_call.executable  # not the agent's error
        assert not interrupted_call.reached_environment
        assert interrupted_call.error == "interrupted before the check finished"
        assert record.fed == 3  # horizon + 1: nothing was found invalid

    async def test_interrupt_inside_an_observer_hook(self) -> None:
        class Interrupting(Observer):
            def __init__(self, hook: str) -> None:
                self.hook = hook

            def call_started(self, episode: Episode, tool: str, call_id: str | None, depth: int) -> Any:
                if self.hook == "call_started" and depth == 2:
                    raise KeyboardInterrupt
                return depth

            def call_checked(self, episode: Episode, verdict: Verdict, decision: Decision, token: Any) -> None:
                if self.hook == "call_checked" and token == 2:
                    raise KeyboardInterrupt

        def holds(state: Any, args: Any) -> bool:
            """never shown"""
            return True

        for hook, error in (
            ("call_started", "interrupted before the check finished"),
            ("call_checked", "interrupted before the call ran"),
        ):
            sink: list[EpisodeRecord] = []
            monitor = Monitor(self.tools_with(holds), sink=sink.append, observers=[Interrupting(hook)])
            with pytest.raises(KeyboardInterrupt):
                async with monitor.episode("t") as ep:
                    await ep.call("first", {"n": 1})
                    await ep.call("second", {"n": 2})
            actions = sink[0].actions
            assert [a.depth for a in actions] == [1, 2], hook
            assert actions[1].error == error and not actions[1].reached_environment, hook

    async def test_interrupt_while_the_outcome_is_processed(self) -> None:
        """An effect interrupted after the tool ran: the call is recorded as run, with the interruption."""

        def interrupting_effect(state: Any, args: Any, result: Any) -> None:
            raise KeyboardInterrupt

        tools = Toolset()

        @tools.tool(effects=[interrupting_effect])
        def first(n: int) -> int:
            return n

        sink: list[EpisodeRecord] = []
        with pytest.raises(KeyboardInterrupt):
            async with Monitor(tools, sink=sink.append).episode("t") as ep:
                await ep.call("first", {"n": 1})
        (action,) = sink[0].actions
        assert action.reached_environment and action.error == "interrupted while its outcome was processed"

    async def test_episode_closed_while_a_hook_decides(self) -> None:
        """The call waiting on the escalation hook is in the record, and does not run after the close."""
        import anyio

        from prefixmon import Approve

        ran: list[int] = []

        def never(state: Any, args: Any) -> bool:
            """needs approval"""
            return False

        tools = Toolset()

        @tools.tool
        def first(n: int) -> int:
            return n

        @tools.tool(requires=[never])
        def guarded(n: int) -> int:
            ran.append(n)
            return n

        deciding = anyio.Event()

        async def escalate(verdict: Verdict, call: ToolCall) -> Approve:
            deciding.set()
            await anyio.sleep(0.2)
            return Approve()

        sink: list[EpisodeRecord] = []
        monitor = Monitor(tools, policy="escalate", escalate=escalate, sink=sink.append)
        ep = monitor.open_episode(task_id="t")
        outcome: list[BaseException] = []

        async def agent() -> None:
            await ep.call("first", {"n": 1})
            try:
                await ep.call("guarded", {"n": 2})
            except ToolBlocked as e:
                outcome.append(e)

        async with anyio.create_task_group() as tg:
            tg.start_soon(agent)
            await deciding.wait()
            record = await ep.aclose()
        assert [a.depth for a in record.actions] == [1, 2]
        assert (record.horizon, record.fed) == (2, 2)
        closed = record.actions[1]
        assert (closed.executable, closed.decision, closed.reached_environment) == (False, Decision.BLOCK, False)
        assert closed.error == "the episode ended while the policy hook ran"
        assert ran == [] and len(outcome) == 1 and "the episode has ended" in str(outcome[0])
        assert sink == [record]

    async def test_non_text_ids_and_names_are_stored_as_text(self, tmp_path: Path) -> None:
        """A framework's integer call id or tool name is recorded as text, so the record reads back."""
        path = tmp_path / "r.jsonl"
        tools = Toolset()

        @tools.tool
        def first(n: int) -> int:
            return n

        async with Monitor(tools, sink=path).episode("t") as ep:
            await ep.call("first", {"n": 1}, call_id=0)  # type: ignore[arg-type]
            with pytest.raises(ToolBlocked):
                await ep.call(7, {"n": 1})  # type: ignore[arg-type]
        (record,) = read_records(path)
        assert [(a.tool, a.call_id) for a in record.actions] == [("first", "0"), ("7", None)]
        assert ep.action_for("0") is not None


class TestPendingCallReplaced:
    """Adapters tell a replaced call from the emitted one with ``PendingCall.replaced``."""

    async def test_replaced_only_when_a_hook_replaced_the_call(self) -> None:
        tools = build_tools()
        monitor = Monitor(tools, policy="replan", replan=replace_with("fw_lookup", {"name": "Ada"}))
        async with monitor.episode("t") as ep:
            plain = await ep.begin("fw_lookup", {"name": "Bo"})
            assert not plain.replaced and plain.call.name == "fw_lookup"
            plain.done(None)
            swapped = await ep.begin("fw_remove", {"pid": "p-404"})  # never produced: replanned
            assert swapped.replaced and (swapped.call.name, swapped.args) == ("fw_lookup", {"name": "Ada"})
            swapped.done(None)

    async def test_abandoned_before_it_started_did_not_reach_the_environment(self) -> None:
        """abandon(started=False): the framework refused the call before running it."""
        async with Monitor(build_tools(), policy="observe").episode("t") as ep:
            pending = await ep.begin("fw_remove", {"pid": "p-404"})  # not executable, observed: let through
            pending.abandon("the framework's validation refused it", started=False)
        assert ep.record is not None
        (action,) = ep.record.actions
        assert not action.reached_environment and action.error == "the framework's validation refused it"
        assert not ep.record.invalid_reached_environment


class TestTieBreakWithFaultsAndRejections:
    """The primary cause follows DESIGN §2's order also when faults and rejections join other failures."""

    @staticmethod
    def tools(ran: list[str]) -> Toolset:
        def buggy(state: Any, args: Any) -> bool:
            raise KeyError("balance")

        tools = Toolset()

        @tools.tool(requires=[buggy])
        def wire(to: Annotated[str, Grounded()], amount: float) -> str:
            ran.append(to)
            return "ok"

        @tools.tool
        def send_money(phone: Annotated[str, Grounded()], amount: float) -> str:
            raise RuntimeError("no such account")

        return tools

    async def test_fail_closed_blocks_a_faulty_check_whatever_else_failed(self) -> None:
        """A precondition that raised blocks the call under fail_closed, also when the value is invented."""
        ran: list[str] = []
        monitor = Monitor(self.tools(ran), policy="observe", failure_mode="fail_closed")
        async with monitor.episode("t") as ep:
            ep.user("wire 5 to ACC-1")
            for to in ("ACC-1", "ACC-666"):
                with pytest.raises(ToolBlocked):
                    await ep.call("wire", {"to": to, "amount": 5})
        assert ep.record is not None and ran == []
        assert [(a.decision, a.cause and a.cause.value) for a in ep.record.actions] == [
            (Decision.FAIL_CLOSED, "precondition"),
            (Decision.FAIL_CLOSED, "precondition"),  # the fault outranks the information failure
        ]

    async def test_a_rejection_outranks_an_information_failure(self) -> None:
        """An ungrounded call that ran and was rejected: state_consistency comes before information."""
        monitor = Monitor(self.tools([]), policy="observe")
        async with monitor.episode("t") as ep:
            ep.user("pay my landlord 5")
            with pytest.raises(RuntimeError):
                await ep.call("send_money", {"phone": "+1 555 0000", "amount": 5})
        assert ep.record is not None and ep.record.first_failure is not None
        assert ep.record.first_failure.cause.value == "state_consistency"


class TestEpisodeIds:
    """Generated episode ids: UUID4s, never repeated, not even by a forked child."""

    def test_ids_are_uuid4_hex_and_distinct(self) -> None:
        """Each id parses as a version-4, RFC 4122 UUID, and 10,000 of them are all different."""
        import uuid

        from prefixmon._labels import random_id as _random_id

        ids = [_random_id() for _ in range(10_000)]
        assert len(set(ids)) == len(ids)
        for text in ids[:100]:
            parsed = uuid.UUID(hex=text)
            assert parsed.hex == text and parsed.version == 4 and parsed.variant == uuid.RFC_4122

    def test_a_forked_child_draws_other_ids(self) -> None:
        """After fork the child's generator is seeded afresh: its next ids are not the parent's next ids."""
        import os

        from prefixmon._labels import random_id as _random_id

        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: its next three ids, to the parent
            os.close(read)
            os.write(write, ",".join(_random_id() for _ in range(3)).encode())
            os._exit(0)
        os.close(write)
        with os.fdopen(read) as f:
            child = f.read().split(",")
        os.waitpid(pid, 0)
        parent = [_random_id() for _ in range(3)]
        assert len(child) == 3 and not set(child) & set(parent)


class TestBeginUnchecked:
    """A call the caller cannot describe to the monitor (its tool list failed) is a monitor fault."""

    @pytest.mark.parametrize("failure_mode", ["fail_open", "fail_closed"])
    async def test_the_failure_mode_decides_and_the_name_stays_undeclared(self, failure_mode: Any) -> None:
        """fail-open: runs, recorded executable; fail-closed: refused, decision fail_closed. Counted either way."""
        tools = build_tools()
        monitor = Monitor(tools, policy="block", failure_mode=failure_mode)
        with capture_logs() as events:
            ep = await self._run(monitor, failure_mode)
        assert [e["where"] for e in events if e["event"] == "monitor_internal_error"] == ["checking an undeclared tool"]
        assert "listed_later" not in tools and monitor.stats.internal_errors == 1
        assert ep.record is not None
        first, second = ep.record.actions
        assert (first.tool, first.call_id, first.executable) == ("listed_later", "c1", failure_mode == "fail_open")
        assert first.decision == (Decision.ALLOW if failure_mode == "fail_open" else Decision.FAIL_CLOSED)
        assert first.reached_environment is (failure_mode == "fail_open")
        assert second.executable and second.decision == Decision.ALLOW

    @staticmethod
    async def _run(monitor: Monitor, failure_mode: str) -> Episode:
        async with monitor.episode(task_id="t") as ep:
            why = RuntimeError("the tool list failed")
            if failure_mode == "fail_open":
                pending = await ep.begin_unchecked("listed_later", {"q": 1}, call_id="c1", error=why)
                assert pending.args == {"q": 1}
                pending.done("ok")
            else:
                with pytest.raises(ToolBlocked, match="could not be checked"):
                    await ep.begin_unchecked("listed_later", {"q": 1}, call_id="c1", error=why)
            await ep.call("search", {"name": "a"})  # the next call is checked as usual
        return ep
