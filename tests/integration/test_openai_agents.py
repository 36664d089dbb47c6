"""The OpenAI Agents SDK's own runner, driven by its ScriptedModel, with MonitorGuardrail."""

from __future__ import annotations

import dataclasses
import datetime
import enum
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from pydantic import BaseModel

pytest.importorskip("agents")

from agents import Agent, FunctionTool, RunConfig, Runner, function_tool, set_tracing_disabled
from agents.items import TResponseOutputItem
from agents.testing import ModelCall, ModelStep, ScriptedModel, assistant_message, function_call

from prefixmon import Cause, Decision, Edit, Episode, EpisodeRecord, Monitor, Observer, Outcome, Toolset
from prefixmon.adapters.openai_agents import MonitorGuardrail
from prefixmon.batch import DUPLICATE, SIBLING

from ..test_bounds import collections_watched
from ._codes import Codes

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

Responder = Callable[[ModelCall], list[TResponseOutputItem]]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(autouse=True)
def no_tracing() -> Iterator[None]:
    set_tracing_disabled(True)
    yield
    set_tracing_disabled(False)


def tool_outputs(call: ModelCall) -> list[str]:
    """What the model is shown as function-call outputs, in order."""
    items = call.input if isinstance(call.input, list) else []
    return [str(i["output"]) for i in items if isinstance(i, dict) and i.get("type") == "function_call_output"]


def scripted(*steps: Responder) -> ScriptedModel:
    return ScriptedModel([ModelStep.respond(step) for step in steps])


class Contacts:
    """A contacts agent whose tools carry prefixmon rules."""

    def __init__(self, *steps: Responder, observers: list[Observer] | None = None) -> None:
        self.records: list[EpisodeRecord] = []
        self.book = {"p-17": {"person_id": "p-17", "name": "Fredrik"}}
        self.runs: dict[str, int] = {}
        rules = Toolset()
        rules.add_schema("search_contacts", {"type": "object", "properties": {"name": {"type": "string"}}}, produces="person_id")
        rules.add_schema(
            "remove_contact",
            {"type": "object", "properties": {"person_id": {"type": "string"}}, "required": ["person_id"]},
            refs={"person_id": "person_id"},
            invalidates="person_id",
        )
        rules.add_schema(
            "send_money",
            {"type": "object", "properties": {"person_id": {"type": "string"}, "amount": {"type": "integer"}}},
        )
        self.guard = MonitorGuardrail(Monitor(rules, policy="block", sink=self.records.append, observers=observers or ()))
        book = self.book
        runs = self.runs

        @function_tool
        def search_contacts(name: str) -> list[dict[str, str]]:
            """Find contacts by name."""
            return [c for c in book.values() if c["name"] == name]

        @function_tool
        def remove_contact(person_id: str) -> str:
            """Remove a contact."""
            runs["remove_contact"] = runs.get("remove_contact", 0) + 1
            if person_id not in book:
                raise KeyError(f"no contact {person_id}")
            del book[person_id]
            return "removed"

        @function_tool
        def send_money(person_id: str, amount: int) -> str:
            """Send money."""
            runs["send_money"] = runs.get("send_money", 0) + 1
            return f"sent {amount}"

        self.model = scripted(*steps)
        self.agent = self.guard.protect(
            Agent(name="contacts", model=self.model, tools=[search_contacts, remove_contact, send_money])
        )

    async def run(self, text: str) -> Any:
        return await self.guard.run(
            self.agent, text, task_id="t-17", labels={"method": "test"}, outcome=lambda r: Outcome.SUCCESS
        )


class TestBlockAndRepair:
    """A blocked call is rejected by the input guardrail with the reason; the repaired call runs."""

    async def test_dependency_block_then_repair(self) -> None:
        """The model reads the reason, looks the id up, retries; FED 1, dependency, success."""
        shown: list[str] = []

        def first(call: ModelCall) -> list[TResponseOutputItem]:
            return [function_call("remove_contact", {"person_id": "+1 555 0100"}, call_id="c1")]

        def second(call: ModelCall) -> list[TResponseOutputItem]:
            shown.extend(tool_outputs(call))
            assert "search_contacts produces them" in shown[-1]  # the model reads the monitor's reason
            return [function_call("search_contacts", {"name": "Fredrik"}, call_id="c2")]

        def third(call: ModelCall) -> list[TResponseOutputItem]:
            return [function_call("remove_contact", {"person_id": "p-17"}, call_id="c3")]

        def last(call: ModelCall) -> list[TResponseOutputItem]:
            shown.append(tool_outputs(call)[-1])
            return [assistant_message("Fredrik is removed")]

        app = Contacts(first, second, third, last)
        result = await app.run("Remove Fredrik, his number is +1 555 0100")
        assert result.final_output == "Fredrik is removed"
        assert "was never returned by any tool" in shown[0] and shown[-1] == "removed"
        assert app.book == {}
        (record,) = app.records
        assert (record.fed, record.horizon) == (1, 3)
        assert record.first_failure is not None and record.first_failure.cause is Cause.DEPENDENCY
        assert record.outcome is Outcome.SUCCESS and record.task_id == "t-17"
        assert [a.call_id for a in record.actions] == ["c1", "c2", "c3"]
        assert [a.decision for a in record.actions] == [Decision.BLOCK, Decision.ALLOW, Decision.ALLOW]
        assert [a.reached_environment for a in record.actions] == [False, True, True]
        (rejection,) = [r for r in result.tool_input_guardrail_results if r.output.behavior["type"] == "reject_content"]
        assert rejection.output.output_info == {"cause": "dependency", "decision": "block"}

    async def test_tool_exception_is_state_consistency(self) -> None:
        """A tool that raises reaches the model as an error message and is recorded as rejected."""
        shown: list[str] = []

        def first(call: ModelCall) -> list[TResponseOutputItem]:
            return [function_call("search_contacts", {"name": "Fredrik"}, call_id="e1")]

        def second(call: ModelCall) -> list[TResponseOutputItem]:
            app.book.clear()  # someone else deletes the contact meanwhile
            return [function_call("remove_contact", {"person_id": "p-17"}, call_id="e2")]

        def last(call: ModelCall) -> list[TResponseOutputItem]:
            shown.extend(tool_outputs(call))
            return [assistant_message("gave up")]

        app = Contacts(first, second, last)
        await app.run("remove Fredrik")
        assert "remove_contact failed: KeyError" in shown[-1]
        (record,) = app.records
        assert record.fed == 2 and record.actions[1].cause is Cause.STATE_CONSISTENCY
        assert record.actions[1].reached_environment and record.invalid_reached_environment


class TestBatches:
    """The parallel function calls of one model response are judged as one batch (Episode.begin_batch)."""

    async def test_a_sibling_dependency_is_refused_before_anything_runs(self) -> None:
        """The removal of an id only the search beside it would return: refused, the sibling named; never run."""
        shown: list[str] = []
        still_there: list[bool] = []

        def first(call: ModelCall) -> list[TResponseOutputItem]:
            return [
                function_call("search_contacts", {"name": "Fredrik"}, call_id="s1"),
                function_call("remove_contact", {"person_id": "p-17"}, call_id="s2"),
            ]

        def second(call: ModelCall) -> list[TResponseOutputItem]:
            shown.extend(tool_outputs(call))
            still_there.append("p-17" in app.book and "remove_contact" not in app.runs)  # the refused removal did not run
            return [function_call("remove_contact", {"person_id": "p-17"}, call_id="s3")]

        def last(call: ModelCall) -> list[TResponseOutputItem]:
            return [assistant_message("done")]

        codes = Codes()
        app = Contacts(first, second, last, observers=[codes])
        result = await app.run("remove Fredrik")
        assert result.final_output == "done"
        assert still_there == [True] and app.book == {} and app.runs["remove_contact"] == 1
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

        def first(call: ModelCall) -> list[TResponseOutputItem]:
            args = {"person_id": "p-17", "amount": 50}
            return [function_call("send_money", args, call_id="d1"), function_call("send_money", dict(args), call_id="d2")]

        def last(call: ModelCall) -> list[TResponseOutputItem]:
            shown.extend(tool_outputs(call))
            return [assistant_message("done")]

        codes = Codes()
        app = Contacts(first, last, observers=[codes])
        await app.run("pay Fredrik 50")
        assert shown == ["sent 50", "sent 50"] and app.runs == {"send_money": 2}
        (record,) = app.records
        one, two = record.actions
        assert (one.call_id, one.executable, one.depth) == ("d1", True, 1)
        assert (two.call_id, two.cause, two.decision, two.depth) == ("d2", Cause.PRECONDITION, Decision.OBSERVE, 2)
        assert two.reached_environment and "call 1 of this batch" in (two.reason or "")
        assert codes.codes["d2"] == [DUPLICATE]

    async def test_independent_parallel_calls_all_run(self) -> None:
        """Calls that need nothing of each other: all run, all executable, consecutive depths in message order."""
        ids = [f"i{k}" for k in range(6)]
        shown: list[str] = []

        def first(call: ModelCall) -> list[TResponseOutputItem]:
            return [function_call("search_contacts", {"name": f"n{k}"}, call_id=i) for k, i in enumerate(ids)]

        def last(call: ModelCall) -> list[TResponseOutputItem]:
            shown.extend(tool_outputs(call))
            return [assistant_message("done")]

        codes = Codes()
        app = Contacts(first, last, observers=[codes])
        await app.run("find them")
        assert shown == ["[]"] * 6
        (record,) = app.records
        assert [(a.call_id, a.depth) for a in record.actions] == [(i, k + 1) for k, i in enumerate(ids)]
        assert record.executable and all(a.reached_environment for a in record.actions)
        assert all(codes.codes[i] == [] for i in ids)

    async def test_an_unknown_tool_keeps_its_place_in_the_batch(self) -> None:
        """A call of a tool the agent lacks is answered by the SDK itself; in the batch it still takes its depth."""
        shown: list[str] = []

        def first(call: ModelCall) -> list[TResponseOutputItem]:
            return [
                function_call("search_contacts", {"name": "Fredrik"}, call_id="u1"),
                function_call("delete_everything", {}, call_id="u2"),
                function_call("remove_contact", {"person_id": "p-17"}, call_id="u3"),
            ]

        def last(call: ModelCall) -> list[TResponseOutputItem]:
            shown.extend(tool_outputs(call))
            return [assistant_message("done")]

        codes = Codes()
        app = Contacts(first, last, observers=[codes])
        await app.run("find Fredrik")
        assert "p-17" in app.book and "remove_contact" not in app.runs
        assert any("no tool named 'delete_everything'" in text for text in shown)
        (record,) = app.records
        assert [(a.call_id, a.depth, a.cause, a.reached_environment) for a in record.actions] == [
            ("u1", 1, None, True),
            ("u2", 2, Cause.SCHEMA, False),
            ("u3", 3, Cause.DEPENDENCY, False),
        ]
        assert codes.codes["u3"] == [SIBLING]

    async def test_a_call_another_guardrail_rejects_is_recorded_as_not_run(self) -> None:
        """A guardrail before the monitor's rejects a call of the batch: the admitted call is recorded as not run."""
        from agents import ToolGuardrailFunctionOutput, tool_input_guardrail

        @tool_input_guardrail
        def no_money(data: Any) -> ToolGuardrailFunctionOutput:
            return ToolGuardrailFunctionOutput.reject_content("no payments today")

        def first(call: ModelCall) -> list[TResponseOutputItem]:
            return [
                function_call("search_contacts", {"name": "Fredrik"}, call_id="g1"),
                function_call("send_money", {"person_id": "p-17", "amount": 5}, call_id="g2"),
            ]

        def last(call: ModelCall) -> list[TResponseOutputItem]:
            return [assistant_message("done")]

        app = Contacts(first, last)
        tools = [
            dataclasses.replace(t, tool_input_guardrails=[no_money, *(t.tool_input_guardrails or ())])
            if isinstance(t, FunctionTool) and t.name == "send_money"
            else t
            for t in app.agent.tools
        ]
        app.agent = app.agent.clone(tools=tools)
        await app.run("pay Fredrik")
        assert "send_money" not in app.runs
        (record,) = app.records
        assert [(a.call_id, a.depth, a.reached_environment) for a in record.actions] == [("g1", 1, True), ("g2", 2, False)]

    async def test_a_failing_batch_falls_back_to_one_call_at_a_time(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """The batch cannot be admitted (a monitor fault): every call is checked on its own, the run goes on."""

        async def broken(self: Episode, calls: Any) -> Any:
            raise RuntimeError("no batches today")

        monkeypatch.setattr(Episode, "begin_batch", broken)

        def first(call: ModelCall) -> list[TResponseOutputItem]:
            return [function_call("search_contacts", {"name": f"n{k}"}, call_id=f"f{k}") for k in range(3)]

        def last(call: ModelCall) -> list[TResponseOutputItem]:
            return [assistant_message("done")]

        app = Contacts(first, last)
        result = await app.run("find them")
        assert result.final_output == "done" and app.guard.monitor.stats.internal_errors == 1
        (record,) = app.records
        assert [(a.call_id, a.depth, a.reached_environment) for a in record.actions] == [(f"f{k}", k + 1, True) for k in range(3)]


class TestZeroConfig:
    """With an empty toolset the tools' own schemas give schema checks; unknown tools go back to the model."""

    @staticmethod
    def agent(guard: MonitorGuardrail, shown: list[str]) -> Agent[Any]:
        def first(call: ModelCall) -> list[TResponseOutputItem]:
            return [function_call("wipe_phone", {}, call_id="z1"), function_call("lookup", '{"key": 3', call_id="z2")]

        def second(call: ModelCall) -> list[TResponseOutputItem]:
            shown.extend(tool_outputs(call))
            return [function_call("lookup", {"key": 3}, call_id="z3")]

        def last(call: ModelCall) -> list[TResponseOutputItem]:
            shown.extend(tool_outputs(call)[-1:])
            return [assistant_message("done")]

        @function_tool
        def lookup(key: int) -> str:
            """Look a key up."""
            return f"value {key}"

        return guard.protect(Agent(name="lookup", model=scripted(first, second, last), tools=[lookup]))

    async def test_unknown_tool_and_malformed_json_in_message_order(self) -> None:
        """Both reach the model with the monitor's reasons; the record keeps message order."""
        records: list[EpisodeRecord] = []
        guard = MonitorGuardrail(Monitor(Toolset(), policy="block", sink=records.append))
        shown: list[str] = []
        await guard.run(self.agent(guard, shown), "look up 3")
        assert "lookup" in guard.monitor.toolset
        assert "no tool named 'wipe_phone'; available tools: lookup" in shown[1]
        assert "not valid JSON" in shown[0] and shown[-1] == "value 3"
        (record,) = records
        assert [(a.call_id, a.cause) for a in record.actions] == [("z1", Cause.SCHEMA), ("z2", Cause.SCHEMA), ("z3", None)]

    async def test_driving_the_runner_yourself(self) -> None:
        """guard.episode + run_config + hooks around Runner.run give the same record."""
        records: list[EpisodeRecord] = []
        guard = MonitorGuardrail(Monitor(Toolset(), policy="block", sink=records.append))
        agent = self.agent(guard, [])
        async with guard.episode("t-1", user="look up 3") as ep:
            await Runner.run(agent, "look up 3", run_config=guard.run_config(RunConfig()), hooks=guard.hooks())
            ep.finish("success")
        (record,) = records
        assert record.fed == 1 and record.horizon == 3 and record.outcome is Outcome.SUCCESS


class Color(enum.Enum):
    RED = "red"


class Slot(BaseModel):
    day: datetime.date
    hour: int


class TestTypedArguments:
    """Rules declared with typed arguments (date, Enum, BaseModel) do not break the SDK's tool call."""

    @staticmethod
    def booking(
        monitor: Callable[[Toolset], Monitor], arguments: dict[str, Any], shown: list[str]
    ) -> tuple[MonitorGuardrail, Agent[Any]]:
        rules = Toolset()

        @rules.tool
        def book(day: datetime.date, color: Color, slot: Slot) -> str:
            """Book a slot."""
            raise NotImplementedError  # the SDK's tool runs; these are the rules

        guard = MonitorGuardrail(monitor(rules))

        @function_tool(name_override="book")
        def book_tool(day: datetime.date, color: Color, slot: Slot) -> str:
            """Book a slot."""
            return f"booked {day.isoformat()} {color.value} {slot.day.isoformat()} {slot.hour}"

        def first(call: ModelCall) -> list[TResponseOutputItem]:
            return [function_call("book", arguments, call_id="b1")]

        def last(call: ModelCall) -> list[TResponseOutputItem]:
            shown.extend(tool_outputs(call))
            return [assistant_message("booked")]

        return guard, guard.protect(Agent(name="booking", model=scripted(first, last), tools=[book_tool]))

    async def test_validated_typed_arguments_run_as_emitted(self) -> None:
        """The emitted JSON runs untouched; the tool gets its own parsed values; the record is clean."""
        records: list[EpisodeRecord] = []
        shown: list[str] = []
        arguments = {"day": "2026-01-02", "color": "red", "slot": {"day": "2026-01-03", "hour": 9}}
        guard, agent = self.booking(lambda rules: Monitor(rules, policy="block", sink=records.append), arguments, shown)
        result = await guard.run(agent, "book the 2nd", outcome=lambda r: Outcome.SUCCESS)
        assert result.final_output == "booked"
        assert shown == ["booked 2026-01-02 red 2026-01-03 9"]
        (record,) = records
        assert (record.fed, record.horizon) == (2, 1)
        (action,) = record.actions
        assert action.executable and action.reached_environment and action.error is None

    async def test_edited_typed_arguments_are_sent_as_json(self) -> None:
        """An escalation edit whose validated arguments hold a date and a model reaches the tool as JSON."""
        records: list[EpisodeRecord] = []
        shown: list[str] = []

        async def edit(verdict: Any, call: Any) -> Edit:
            return Edit(
                args={"day": datetime.date(2026, 1, 5), "color": Color.RED, "slot": Slot(day=datetime.date(2026, 1, 6), hour=10)}
            )

        def monitor(rules: Toolset) -> Monitor:
            return Monitor(rules, policy="escalate", escalate=edit, sink=records.append)

        guard, agent = self.booking(
            monitor, {"day": "not a date", "color": "red", "slot": {"day": "2026-01-03", "hour": 9}}, shown
        )
        await guard.run(agent, "book the 5th")
        assert shown == ["booked 2026-01-05 red 2026-01-06 10"]
        (record,) = records
        (action,) = record.actions
        assert action.decision is Decision.EDIT and action.replacement == "book" and action.error is None
        assert not action.executable and not action.reached_environment  # the emitted call did not run; its edit did


class TestDeeplyNestedResults:
    """A tool result nested too deeply to parse is information as text, never a RecursionError."""

    async def test_a_deep_result_leaves_the_run_and_collections_room(self) -> None:
        """The tool returns JSON 5,000 levels deep: the run goes on, no collection meets a full stack."""
        records: list[EpisodeRecord] = []
        shown: list[str] = []
        guard = MonitorGuardrail(Monitor(Toolset(), policy="block", sink=records.append))

        @function_tool
        def fetch(key: str) -> str:
            """Fetch a document."""
            return '{"id": "doc-1", "body": ' + "[" * 5_000 + "]" * 5_000 + "}"

        def first(call: ModelCall) -> list[TResponseOutputItem]:
            return [function_call("fetch", {"key": "k"}, call_id="d1")]

        def last(call: ModelCall) -> list[TResponseOutputItem]:
            shown.extend(tool_outputs(call))
            return [assistant_message("done")]

        agent = guard.protect(Agent(name="fetch", model=scripted(first, last), tools=[fetch]))
        with collections_watched() as failures:
            result = await guard.run(agent, "fetch k")
        assert failures == []
        assert result.final_output == "done" and shown[0].startswith('{"id": "doc-1"')
        (record,) = records
        (action,) = record.actions
        assert action.executable and action.reached_environment and action.error is None
