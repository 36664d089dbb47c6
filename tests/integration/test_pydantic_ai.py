"""pydantic-ai's own agent loop, driven by its FunctionModel, with MonitorCapability."""

from __future__ import annotations

import datetime
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import anyio
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pydantic import BaseModel

pytest.importorskip("pydantic_ai")

from pydantic_ai import (
    Agent,
    DeferredToolRequests,
    DeferredToolResults,
    ModelResponse,
    RetryPromptPart,
    TextPart,
    ToolApproved,
    ToolCallPart,
    ToolDenied,
    ToolReturnPart,
)
from pydantic_ai.capabilities import HandleDeferredToolCalls
from pydantic_ai.messages import ModelMessage, ModelRequest
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.tools import RunContext

from prefixmon import (
    Cause,
    Decision,
    EpisodeRecord,
    JsonlSink,
    Monitor,
    Outcome,
    Policy,
    Ref,
    Telemetry,
    Toolset,
    TrackedState,
    read_records,
)
from prefixmon.adapters.pydantic_ai import MonitorCapability, deferred_approval
from prefixmon.batch import DUPLICATE, SIBLING

from ..test_real_traffic_ids import flight_booking
from ._codes import Codes

pytestmark = [pytest.mark.integration, pytest.mark.anyio]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class RuleSlot(BaseModel):
    """The booking slot as the monitor's rules declare it."""

    day: datetime.date
    hour: int


class Slot(BaseModel):
    """The booking slot as the agent's tool declares it (another class, same fields)."""

    day: datetime.date
    hour: int


def tool_returns(messages: list[ModelMessage]) -> list[str]:
    """Contents of the tool returns (and retry prompts, as older pydantic-ai sends) in the last request."""
    last = messages[-1]
    assert isinstance(last, ModelRequest)
    return [str(p.content) for p in last.parts if isinstance(p, (ToolReturnPart, RetryPromptPart))]


def responses(messages: list[ModelMessage]) -> int:
    return sum(isinstance(m, ModelResponse) for m in messages)


class Contacts:
    """A contacts agent: the tools are declared to pydantic-ai and to prefixmon at once."""

    def __init__(self, script: Any, *, policy: Policy | str = "block", register_tools: bool = True, **monitor: Any) -> None:
        self.records: list[EpisodeRecord] = []
        self.book = {"p-17": {"person_id": "p-17", "name": "Fredrik", "phone": "+1 555 0100"}}
        self.runs: dict[str, int] = {}
        self.tools = tools = Toolset()
        self.monitor = Monitor(tools, policy=policy, sink=self.records.append, **monitor)
        self.capability = MonitorCapability(
            self.monitor,
            task_id="t-17",
            labels={"method": "test"},
            outcome=lambda r: Outcome.SUCCESS,
            register_tools=register_tools,
        )
        self.agent: Agent[None, Any] = Agent(
            FunctionModel(script), capabilities=[self.capability], output_type=[str, DeferredToolRequests]
        )
        book, runs = self.book, self.runs

        @self.agent.tool_plain
        @tools.tool(produces="person_id")
        def search_contacts(name: str) -> list[dict[str, str]]:
            """Find contacts by name."""
            return [c for c in book.values() if c["name"] == name]

        @self.agent.tool_plain
        @tools.tool(invalidates="person_id")
        def remove_contact(person_id: Annotated[str, Ref("person_id")]) -> str:
            """Remove a contact."""
            if person_id not in book:
                raise KeyError(f"no contact {person_id}")
            del book[person_id]
            return "removed"

        def has_budget(state: TrackedState, args: Any) -> bool:
            """the amount is above the approval-free limit of 100"""
            return bool(args["amount"] <= 100)

        @self.agent.tool_plain
        @tools.tool(requires=[has_budget])
        def send_money(person_id: str, amount: int) -> str:
            """Send money."""
            runs["send_money"] = runs.get("send_money", 0) + 1
            return f"sent {amount}"


class TestBlockAndRepair:
    """A blocked call reaches the model as a retry prompt; the repaired call runs."""

    async def test_dependency_block_then_repair(self, tmp_path: Path) -> None:
        """The model reads the reason, looks the id up, retries; FED 1, dependency, success."""
        shown: list[str] = []

        def script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            n = responses(messages)
            if n:
                shown.extend(tool_returns(messages))
            if n == 0:
                return ModelResponse(parts=[ToolCallPart("remove_contact", {"person_id": "+1 555 0100"}, tool_call_id="c1")])
            if n == 1:
                assert "search_contacts produces them" in shown[-1]  # the model sees the monitor's reason
                return ModelResponse(parts=[ToolCallPart("search_contacts", {"name": "Fredrik"}, tool_call_id="c2")])
            if n == 2:
                return ModelResponse(parts=[ToolCallPart("remove_contact", {"person_id": "p-17"}, tool_call_id="c3")])
            return ModelResponse(parts=[TextPart("Fredrik is removed")])

        app = Contacts(script)
        sink_path = tmp_path / "episodes.jsonl"
        app.monitor.sink = JsonlSink(sink_path)
        result = await app.agent.run("Remove Fredrik from my contacts, his number is +1 555 0100")

        assert result.output == "Fredrik is removed"
        assert "was never returned by any tool" in shown[0]
        assert app.book == {}
        (record,) = read_records(sink_path)
        assert (record.fed, record.horizon, record.executable) == (1, 3, False)
        assert record.first_failure is not None and record.first_failure.cause is Cause.DEPENDENCY
        assert record.outcome is Outcome.SUCCESS
        assert record.task_id == "t-17" and record.labels["method"] == "test"
        assert [a.call_id for a in record.actions] == ["c1", "c2", "c3"]
        assert [a.decision for a in record.actions] == [Decision.BLOCK, Decision.ALLOW, Decision.ALLOW]
        assert [a.reached_environment for a in record.actions] == [False, True, True]
        assert not record.invalid_reached_environment

    async def test_zero_config_schema_check_and_malformed_json(self) -> None:
        """With an empty toolset the agent's own schemas give schema checks, malformed JSON included."""
        shown: list[str] = []

        def script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            n = responses(messages)
            if n:
                shown.extend(tool_returns(messages))
            if n == 0:
                return ModelResponse(
                    parts=[
                        ToolCallPart("lookup", '{"key": 3', tool_call_id="a1"),
                        ToolCallPart("lookup", {"key": "three"}, tool_call_id="a2"),
                    ]
                )
            if n == 1:
                return ModelResponse(parts=[ToolCallPart("lookup", {"key": 3}, tool_call_id="a3")])
            return ModelResponse(parts=[TextPart("ok")])

        records: list[EpisodeRecord] = []
        monitor = Monitor(Toolset(), policy="block", sink=records.append)
        agent: Agent[None, str] = Agent(FunctionModel(script), capabilities=[MonitorCapability(monitor)])

        @agent.tool_plain
        def lookup(key: int) -> str:
            return f"value {key}"

        await agent.run("look up key 3")
        assert "lookup" in monitor.toolset
        assert "not valid JSON" in shown[0] and "argument 'key': must be integer" in shown[1]
        (record,) = records
        assert [(a.call_id, a.cause) for a in record.actions] == [("a1", Cause.SCHEMA), ("a2", Cause.SCHEMA), ("a3", None)]
        assert record.fed == 1 and record.labels["model"] == "function:script:"

    async def test_unknown_tool_recorded_in_message_order(self) -> None:
        """A call to a tool the agent lacks is recorded at its position in the message."""

        def script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            if responses(messages) == 0:
                return ModelResponse(
                    parts=[
                        ToolCallPart("search_contacts", {"name": "Fredrik"}, tool_call_id="u1"),
                        ToolCallPart("delete_everything", {}, tool_call_id="u2"),
                        ToolCallPart("search_contacts", {"name": "Nobody"}, tool_call_id="u3"),
                    ]
                )
            return ModelResponse(parts=[TextPart("done")])

        app = Contacts(script)
        await app.agent.run("find Fredrik")
        (record,) = app.records
        assert [a.call_id for a in record.actions] == ["u1", "u2", "u3"]
        assert record.fed == 2
        assert record.actions[1].cause is Cause.SCHEMA and "no tool named 'delete_everything'" in (record.actions[1].reason or "")

    async def test_unknown_tool_with_an_id_used_in_an_earlier_turn(self) -> None:
        """Models that reuse ids every turn ("call_0"): the unknown-tool call of turn 2 is still recorded."""
        shown: list[str] = []

        def script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            n = responses(messages)
            if n:
                shown.extend(tool_returns(messages))
            turns = [
                ToolCallPart("search_contacts", {"name": "Fredrik"}, tool_call_id="call_0"),
                ToolCallPart("delete_everything", {}, tool_call_id="call_0"),
                ToolCallPart("remove_contact", {"person_id": "p-99"}, tool_call_id="call_0"),
                ToolCallPart("remove_contact", {"person_id": "p-17"}, tool_call_id="call_0"),
            ]
            return ModelResponse(parts=[turns[n]]) if n < len(turns) else ModelResponse(parts=[TextPart("done")])

        app = Contacts(script)
        await app.agent.run("remove Fredrik")
        assert "delete_everything" in shown[1] and shown[-1] == "removed"
        (record,) = app.records
        assert [a.tool for a in record.actions] == ["search_contacts", "delete_everything", "remove_contact", "remove_contact"]
        assert (record.horizon, record.fed) == (4, 2)
        assert [a.cause for a in record.actions] == [None, Cause.SCHEMA, Cause.DEPENDENCY, None]
        assert [a.reached_environment for a in record.actions] == [True, False, False, True]

    @staticmethod
    async def observed_bad_call(shown: list[str]) -> EpisodeRecord:
        """policy="observe" lets a call with a bad argument type through to pydantic-ai's validation."""

        def script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            if responses(messages):
                shown.extend(tool_returns(messages))
                return ModelResponse(parts=[TextPart("done")])
            return ModelResponse(parts=[ToolCallPart("search_contacts", {"name": 5}, tool_call_id="v1")])

        app = Contacts(script, policy="observe")
        await app.agent.run("find 5")
        (record,) = app.records
        return record

    async def test_observed_call_refused_by_pydantic_ai_validation_is_not_a_rejection(self) -> None:
        """The model gets pydantic-ai's own retry prompt; the record does not call it an environment rejection."""
        shown: list[str] = []
        record = await self.observed_bad_call(shown)
        assert "valid string" in shown[0]
        (action,) = record.actions
        assert action.cause is Cause.SCHEMA and action.decision is Decision.OBSERVE
        assert "validation refused the call" in (action.error or "")
        assert "rejected by the environment" not in (action.error or "")

    async def test_observed_call_refused_by_pydantic_ai_validation_did_not_reach_the_environment(self) -> None:
        """The tool never ran, so the action did not reach the environment."""
        record = await self.observed_bad_call([])
        assert not record.actions[0].reached_environment and not record.invalid_reached_environment

    async def test_emitted_arguments_run_as_emitted(self) -> None:
        """Rules with their own argument model: the tool validates the emitted JSON, not the monitor's objects."""

        shown: list[str] = []
        rules = Toolset()

        @rules.tool
        def book(day: datetime.date, slot: RuleSlot) -> str:
            """Book a slot."""
            raise NotImplementedError  # pydantic-ai runs its own tool; these are the rules

        def script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            if responses(messages):
                shown.extend(tool_returns(messages))
                return ModelResponse(parts=[TextPart("done")])
            args = {"day": "2026-01-02", "slot": {"day": "2026-01-03", "hour": 9}}
            return ModelResponse(parts=[ToolCallPart("book", args, tool_call_id="b1")])

        records: list[EpisodeRecord] = []
        agent: Agent[None, str] = Agent(
            FunctionModel(script), capabilities=[MonitorCapability(Monitor(rules, policy="block", sink=records.append))]
        )

        @agent.tool_plain(name="book")
        def book_slot(day: datetime.date, slot: Slot) -> str:
            """Book a slot."""
            return f"booked {day.isoformat()} {slot.day.isoformat()} {slot.hour}"

        await agent.run("book the 2nd")
        assert shown == ["booked 2026-01-02 2026-01-03 9"]
        (record,) = records
        assert record.fed == 2 and record.actions[0].reached_environment and record.actions[0].error is None


class TestBatches:
    """The tool calls of one ModelResponse are judged as one batch (Episode.begin_batch), in the agent's own loop."""

    async def test_a_sibling_dependency_is_refused_before_anything_runs(self) -> None:
        """The removal of an id only the search beside it would return: refused, the sibling named; never run."""
        shown: list[str] = []
        still_there: list[bool] = []

        def script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            n = responses(messages)
            if n:
                shown.extend(tool_returns(messages))
            if n == 0:
                return ModelResponse(
                    parts=[
                        ToolCallPart("search_contacts", {"name": "Fredrik"}, tool_call_id="s1"),
                        ToolCallPart("remove_contact", {"person_id": "p-17"}, tool_call_id="s2"),
                    ]
                )
            if n == 1:
                still_there.append("p-17" in app.book)  # the refused removal did not run
                return ModelResponse(parts=[ToolCallPart("remove_contact", {"person_id": "p-17"}, tool_call_id="s3")])
            return ModelResponse(parts=[TextPart("done")])

        codes = Codes()
        app = Contacts(script, observers=[codes])
        result = await app.agent.run("remove Fredrik")
        assert result.output == "done"
        assert still_there == [True] and app.book == {}  # refused in the batch, then run on its own
        assert "search_contacts (call 1 of this batch) produces them but has not returned" in shown[1]
        (record,) = app.records
        assert [(a.call_id, a.depth, a.decision, a.reached_environment) for a in record.actions] == [
            ("s1", 1, Decision.ALLOW, True),
            ("s2", 2, Decision.BLOCK, False),
            ("s3", 3, Decision.ALLOW, True),
        ]
        assert codes.codes["s2"] == [SIBLING] and record.fed == 2

    async def test_a_duplicate_write_is_reported_and_runs(self) -> None:
        """The same payment twice in one response: the second is a duplicate_call finding; both run (default policy)."""
        shown: list[str] = []

        def script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            if responses(messages):
                shown.extend(tool_returns(messages))
                return ModelResponse(parts=[TextPart("done")])
            args = {"person_id": "p-17", "amount": 50}
            return ModelResponse(
                parts=[
                    ToolCallPart("send_money", args, tool_call_id="d1"),
                    ToolCallPart("send_money", dict(args), tool_call_id="d2"),
                ]
            )

        codes = Codes()
        app = Contacts(script, observers=[codes])
        await app.agent.run("pay Fredrik 50")
        assert shown == ["sent 50", "sent 50"] and app.runs == {"send_money": 2}
        (record,) = app.records
        first, second = record.actions
        assert (first.call_id, first.executable, first.depth) == ("d1", True, 1)
        assert (second.call_id, second.cause, second.decision, second.depth) == ("d2", Cause.PRECONDITION, Decision.OBSERVE, 2)
        assert second.reached_environment and "call 1 of this batch" in (second.reason or "")
        assert codes.codes["d2"] == [DUPLICATE]

    async def test_independent_parallel_calls_all_run(self) -> None:
        """Calls that need nothing of each other: all run, all executable, consecutive depths in message order."""
        ids = [f"i{k}" for k in range(6)]
        shown: list[str] = []

        def script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            if responses(messages):
                shown.extend(tool_returns(messages))
                return ModelResponse(parts=[TextPart("done")])
            return ModelResponse(
                parts=[ToolCallPart("search_contacts", {"name": f"n{k}"}, tool_call_id=i) for k, i in enumerate(ids)]
            )

        codes = Codes()
        app = Contacts(script, observers=[codes])
        await app.agent.run("find them")
        assert shown == ["[]"] * 6
        (record,) = app.records
        assert [(a.call_id, a.depth) for a in record.actions] == [(i, k + 1) for k, i in enumerate(ids)]
        assert record.executable and all(a.reached_environment for a in record.actions)
        assert all(codes.codes[i] == [] for i in ids)

    async def test_an_unknown_tool_keeps_its_place_in_the_batch(self) -> None:
        """A call of a tool the agent lacks never reaches the hooks; in the batch it still takes its depth."""

        def script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            if responses(messages) == 0:
                return ModelResponse(
                    parts=[
                        ToolCallPart("search_contacts", {"name": "Fredrik"}, tool_call_id="u1"),
                        ToolCallPart("delete_everything", {}, tool_call_id="u2"),
                        ToolCallPart("remove_contact", {"person_id": "p-17"}, tool_call_id="u3"),
                    ]
                )
            return ModelResponse(parts=[TextPart("done")])

        codes = Codes()
        app = Contacts(script, observers=[codes])
        await app.agent.run("find Fredrik")
        assert "p-17" in app.book
        (record,) = app.records
        assert [(a.call_id, a.depth, a.cause, a.reached_environment) for a in record.actions] == [
            ("u1", 1, None, True),
            ("u2", 2, Cause.SCHEMA, False),
            ("u3", 3, Cause.DEPENDENCY, False),
        ]
        assert codes.codes["u3"] == [SIBLING]


class TestToolErrors:
    """A tool that raises is a state-consistency failure, and the run goes on."""

    async def test_exception_becomes_tool_failed(self) -> None:
        """The model sees the failure; the action reached the environment and is not executable."""
        shown: list[str] = []

        def script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            n = responses(messages)
            if n:
                shown.extend(tool_returns(messages))
            if n == 0:
                return ModelResponse(parts=[ToolCallPart("search_contacts", {"name": "Fredrik"}, tool_call_id="e1")])
            if n == 1:
                app.book.clear()  # someone else deletes the contact meanwhile
                return ModelResponse(parts=[ToolCallPart("remove_contact", {"person_id": "p-17"}, tool_call_id="e2")])
            return ModelResponse(parts=[TextPart("gave up")])

        app = Contacts(script)
        result = await app.agent.run("remove Fredrik")
        assert result.output == "gave up"
        assert "remove_contact failed: KeyError" in shown[-1]
        (record,) = app.records
        assert record.fed == 2 and record.actions[1].cause is Cause.STATE_CONSISTENCY
        assert record.actions[1].reached_environment and "KeyError" in (record.actions[1].error or "")
        assert record.invalid_reached_environment


class TestEscalation:
    """Escalation goes through pydantic-ai's deferred tool approval."""

    @staticmethod
    def script(shown: list[str]) -> Any:
        def run(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            n = responses(messages)
            if n and isinstance(messages[-1], ModelRequest):
                shown.extend(tool_returns(messages))
            if n == 0:
                return ModelResponse(parts=[ToolCallPart("send_money", {"person_id": "p-17", "amount": 500}, tool_call_id="m1")])
            return ModelResponse(parts=[TextPart("finished")])

        return run

    def app(self, shown: list[str]) -> Contacts:
        return Contacts(
            self.script(shown),
            policy=Policy(default="block", tools={"send_money": "escalate"}),
            escalate=deferred_approval,
        )

    async def test_run_pauses_then_approval_continues_the_episode(self) -> None:
        """Run 1 ends with DeferredToolRequests; run 2's approval runs the call in the same episode."""
        shown: list[str] = []
        app = self.app(shown)
        first = await app.agent.run("send Fredrik 500")
        assert isinstance(first.output, DeferredToolRequests)
        (pending,) = first.output.approvals
        assert pending.tool_call_id == "m1"
        assert first.output.metadata["m1"]["prefixmon"]["cause"] == "precondition"
        assert app.records == []  # the episode waits for the approval

        second = await app.agent.run(
            message_history=first.all_messages(),
            deferred_tool_results=DeferredToolResults(approvals={"m1": ToolApproved()}),
        )
        assert second.output == "finished"
        assert shown == ["sent 500"]
        (record,) = app.records
        (action,) = record.actions
        assert action.decision is Decision.APPROVE and action.reached_environment
        assert record.fed == 1 and action.cause is Cause.PRECONDITION and record.invalid_reached_environment

    async def test_override_args_is_an_edit(self) -> None:
        """Approving with other arguments records an edit; the edited call is checked and runs."""
        shown: list[str] = []
        app = self.app(shown)
        first = await app.agent.run("send Fredrik 500")
        await app.agent.run(
            message_history=first.all_messages(),
            deferred_tool_results=DeferredToolResults(
                approvals={"m1": ToolApproved(override_args={"person_id": "p-17", "amount": 90})}
            ),
        )
        assert shown == ["sent 90"]
        (record,) = app.records
        assert record.actions[0].decision is Decision.EDIT and not record.invalid_reached_environment

    async def test_denial_is_recorded(self) -> None:
        """A denial reaches the model and is recorded as deny; the tool never runs."""
        shown: list[str] = []
        app = self.app(shown)
        first = await app.agent.run("send Fredrik 500")
        await app.agent.run(
            message_history=first.all_messages(),
            deferred_tool_results=DeferredToolResults(approvals={"m1": ToolDenied("too much money")}),
        )
        assert shown == ["too much money"]
        (record,) = app.records
        assert record.actions[0].decision is Decision.DENY and not record.actions[0].reached_environment

    async def test_inline_handler_resolves_within_one_run(self) -> None:
        """A HandleDeferredToolCalls capability approves inline: one run, one record."""
        shown: list[str] = []
        app = self.app(shown)

        async def approve(ctx: RunContext[Any], requests: DeferredToolRequests) -> DeferredToolResults:
            return requests.build_results(approve_all=True)

        result = await app.agent.run("send Fredrik 500", capabilities=[HandleDeferredToolCalls(handler=approve)])
        assert result.output == "finished" and shown == ["sent 500"]
        (record,) = app.records
        assert record.actions[0].decision is Decision.APPROVE

    async def test_never_answered_is_closed_as_denied(self) -> None:
        """close_parked() closes an episode whose approval never came."""
        app = self.app([])
        await app.agent.run("send Fredrik 500")
        (record,) = await app.capability.close_parked()
        assert record.actions[0].decision is Decision.DENY and app.records == [record]


class TestEpisodeLifetime:
    """Each run opens its episode in wrap_run and closes it there, however the run ends (pydantic-ai: asyncio only)."""

    @staticmethod
    def search_then(final: Callable[[], ModelResponse]) -> Any:
        def script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            if responses(messages) == 0:
                return ModelResponse(parts=[ToolCallPart("search_contacts", {"name": "Fredrik"}, tool_call_id="s1")])
            return final()

        return script

    async def test_failed_run_closes_the_episode_as_error(self) -> None:
        """A model that raises ends the run; the record keeps the calls so far and says error."""

        def crash() -> ModelResponse:
            raise ConnectionError("model backend down")

        app = Contacts(self.search_then(crash))
        with pytest.raises(ConnectionError):
            await app.agent.run("find Fredrik")
        (record,) = app.records
        assert (record.status, record.error, record.outcome) == ("error", "ConnectionError", None)
        assert [(a.call_id, a.reached_environment) for a in record.actions] == [("s1", True)]

    @pytest.mark.xfail(
        sys.version_info < (3, 11),
        strict=True,
        reason="asyncio before 3.11 cannot retract the cancel that hits aclose's shielded sink delivery",
    )
    async def test_cancelled_run_closes_the_episode_as_cancelled(self) -> None:
        """Cancelling a run mid-tool abandons the call; the record still reaches the sink."""
        started = anyio.Event()

        def script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            return ModelResponse(parts=[ToolCallPart("wait_for_reply", {}, tool_call_id="w1")])

        records: list[EpisodeRecord] = []
        agent: Agent[None, str] = Agent(
            FunctionModel(script), capabilities=[MonitorCapability(Monitor(Toolset(), sink=records.append))]
        )

        @agent.tool_plain
        async def wait_for_reply() -> str:
            started.set()
            await anyio.sleep_forever()
            return "never"  # pragma: no cover

        async with anyio.create_task_group() as tg:
            tg.start_soon(agent.run, "wait for the reply")
            await started.wait()
            tg.cancel_scope.cancel()
        (record,) = records
        assert record.status == "cancelled"
        (action,) = record.actions
        assert action.call_id == "w1" and action.reached_environment  # it was running: its outcome is unknown
        assert action.error == "cancelled before the call finished"

    async def test_tool_spans_are_children_of_the_episode_span(self) -> None:
        """With Telemetry, each execute_tool span nests under the run's invoke_agent span, which ends with the run."""
        spans = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(spans))
        app = Contacts(
            self.search_then(lambda: ModelResponse(parts=[TextPart("found")])),
            observers=[Telemetry(tracer_provider=provider, metrics=False)],
        )
        await app.agent.run("find Fredrik")
        assert not trace.get_current_span().is_recording()  # the episode span does not outlive the run
        by_name = {span.name: span for span in spans.get_finished_spans()}
        episode, tool = by_name["invoke_agent"], by_name["execute_tool search_contacts"]
        assert tool.parent is not None and episode.context is not None
        assert tool.parent.span_id == episode.context.span_id
        assert episode.attributes is not None and episode.attributes["prefixmon.episode.id"] == app.records[0].episode_id


@pytest.mark.parametrize(("first", "executable"), [("agent", False), ("user", True)])
async def test_an_id_the_model_made_up_in_an_earlier_turn(first: str, executable: bool) -> None:
    """History: the model wrote flight HAT902 no tool returned, the user repeats it: the booking is refused.

    When the user named it first, the same booking runs.
    """
    from pydantic_ai.messages import UserPromptPart

    said = "Book flight HAT902 for me." if first == "user" else "Which direct flights are there?"
    history: list[ModelMessage] = [
        ModelRequest(parts=[UserPromptPart(said)]),
        ModelResponse(parts=[TextPart("Direct flights: | May 27 | HAT902 | $500 |")]),
    ]

    def script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if sum(isinstance(m, ModelResponse) for m in messages) == 1:
            return ModelResponse(parts=[ToolCallPart("book", {"flight_number": "HAT902"}, tool_call_id="b1")])
        return ModelResponse(parts=[TextPart("done")])

    rules = flight_booking()
    records: list[EpisodeRecord] = []
    agent: Agent[None, str] = Agent(
        FunctionModel(script), capabilities=[MonitorCapability(Monitor(rules, policy="block", sink=records.append))]
    )

    @agent.tool_plain
    def book(flight_number: str) -> str:
        return "Error: Flight HAT902 not found"

    await agent.run("Yes, HAT902 please.", message_history=history)
    (record,) = records
    assert record.actions[0].executable is executable, record.actions[0].reason
    if not executable:
        assert "first written by the agent itself" in (record.actions[0].reason or "")
