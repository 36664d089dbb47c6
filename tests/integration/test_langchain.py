"""LangChain 1.x's own agent loop (create_agent), driven by a scripted chat model, with MonitorMiddleware."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

pytest.importorskip("langchain")

from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware, ModelRetryMiddleware
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command, interrupt
from pydantic import Field

from prefixmon import Cause, Decision, Deny, EpisodeRecord, Monitor, Outcome, Policy, Toolset, TrackedState
from prefixmon.adapters.langchain import MonitorMiddleware, interrupt_escalation, parse_answer
from prefixmon.batch import DUPLICATE, SIBLING

from ..test_bounds import collections_watched
from ..test_real_traffic_ids import flight_booking
from ._codes import Codes

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

Script = Callable[[list[BaseMessage]], AIMessage]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class ScriptedChatModel(BaseChatModel):
    """A chat model that answers from a script and binds tools as provider models do."""

    script: Script
    bound: list[str] = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def _generate(
        self, messages: list[BaseMessage], stop: list[str] | None = None, run_manager: Any = None, **kwargs: Any
    ) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=self.script(messages))])

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedChatModel:
        self.bound = [t.name for t in tools]
        return self


def call(name: str, args: dict[str, Any], call_id: str) -> AIMessage:
    return AIMessage("", tool_calls=[{"name": name, "args": args, "id": call_id}])


def answers(messages: list[BaseMessage]) -> int:
    return sum(isinstance(m, AIMessage) for m in messages)


def errors_shown(messages: list[BaseMessage]) -> list[str]:
    return [str(m.content) for m in messages if isinstance(m, ToolMessage) and m.status == "error"]


class Contacts:
    """A contacts agent whose tools carry prefixmon rules."""

    def __init__(self, script: Script, *, policy: Policy | str = "block", checkpointer: Any = None, **monitor: Any) -> None:
        self.records: list[EpisodeRecord] = []
        self.book = {"p-17": {"person_id": "p-17", "name": "Fredrik", "phone": "+1 555 0100"}}
        self.runs: dict[str, int] = {}
        rules = Toolset()
        rules.add_schema("search_contacts", {"type": "object", "properties": {"name": {"type": "string"}}}, produces="person_id")
        rules.add_schema(
            "remove_contact",
            {"type": "object", "properties": {"person_id": {"type": "string"}}, "required": ["person_id"]},
            refs={"person_id": "person_id"},
            invalidates="person_id",
        )

        def within_limit(state: TrackedState, args: Any) -> bool:
            """the amount is above the approval-free limit of 100"""
            return bool(args["amount"] <= 100)

        rules.add_schema(
            "send_money",
            {"type": "object", "properties": {"person_id": {"type": "string"}, "amount": {"type": "integer"}}},
            requires=[within_limit],
        )
        self.monitor = Monitor(rules, policy=policy, sink=self.records.append, **monitor)
        self.middleware = MonitorMiddleware(
            self.monitor, task_id="t-17", labels={"method": "test"}, outcome=lambda state: Outcome.SUCCESS
        )
        book, runs = self.book, self.runs

        @tool
        def search_contacts(name: str) -> list[dict[str, str]]:
            """Find contacts by name."""
            return [c for c in book.values() if c["name"] == name]

        @tool
        def remove_contact(person_id: str) -> str:
            """Remove a contact."""
            if person_id not in book:
                raise KeyError(f"no contact {person_id}")
            del book[person_id]
            return "removed"

        @tool
        def send_money(person_id: str, amount: int) -> str:
            """Send money."""
            runs["send_money"] = runs.get("send_money", 0) + 1
            return f"sent {amount}"

        @tool
        def confirm_and_send(person_id: str, amount: int) -> str:
            """Ask the user to confirm, then send (the tool itself interrupts)."""
            runs["confirm_and_send"] = runs.get("confirm_and_send", 0) + 1
            ok = interrupt({"confirm": amount})
            return f"sent {amount}" if ok else "cancelled"

        self.model = ScriptedChatModel(script=script)
        self.agent_tools = [search_contacts, remove_contact, send_money, confirm_and_send]
        self.agent = create_agent(
            self.model,
            tools=self.agent_tools,
            middleware=[self.middleware],
            checkpointer=checkpointer,
        )


def repair_script(shown: list[str]) -> Script:
    def script(messages: list[BaseMessage]) -> AIMessage:
        n = answers(messages)
        shown[:] = errors_shown(messages)
        if n == 0:
            return call("remove_contact", {"person_id": "+1 555 0100"}, "c1")
        if n == 1:
            assert "search_contacts produces them" in shown[-1]  # the model reads the monitor's reason
            return call("search_contacts", {"name": "Fredrik"}, "c2")
        if n == 2:
            return call("remove_contact", {"person_id": "p-17"}, "c3")
        return AIMessage("Fredrik is removed")

    return script


def assert_repaired(record: EpisodeRecord) -> None:
    assert (record.fed, record.horizon) == (1, 3)
    assert record.first_failure is not None and record.first_failure.cause is Cause.DEPENDENCY
    assert record.outcome is Outcome.SUCCESS and record.task_id == "t-17"
    assert [a.call_id for a in record.actions] == ["c1", "c2", "c3"]
    assert [a.decision for a in record.actions] == [Decision.BLOCK, Decision.ALLOW, Decision.ALLOW]
    assert [a.reached_environment for a in record.actions] == [False, True, True]


def reused_id_script(messages: list[BaseMessage]) -> AIMessage:
    n = answers(messages)
    if n == 0:
        return call("search_contacts", {"name": "Fredrik"}, "call_0")
    if n == 1:
        return call("remove_contact", {"person_id": "p-99"}, "call_0")  # never returned: blocked
    if n == 2:
        return call("remove_contact", {"person_id": "p-17"}, "call_0")
    return AIMessage("done")


def assert_reused_ids_checked(app: Contacts, result: dict[str, Any]) -> None:
    assert "was never returned by any tool" in errors_shown(result["messages"])[0]
    assert app.book == {}
    (record,) = app.records
    assert [(a.tool, a.decision) for a in record.actions] == [
        ("search_contacts", Decision.ALLOW),
        ("remove_contact", Decision.BLOCK),
        ("remove_contact", Decision.ALLOW),
    ]
    assert record.fed == 2


class TestBlockAndRepair:
    """A blocked call is answered with an error ToolMessage; the repaired call runs."""

    async def test_async_agent(self) -> None:
        """ainvoke: the model reads the reason and repairs; FED 1, dependency, success."""
        shown: list[str] = []
        app = Contacts(repair_script(shown))
        result = await app.agent.ainvoke({"messages": [HumanMessage("Remove Fredrik, his number is +1 555 0100")]})
        assert result["messages"][-1].content == "Fredrik is removed"
        assert "was never returned by any tool" in shown[0]
        assert app.book == {}
        (record,) = app.records
        assert_repaired(record)
        assert app.middleware.open_episodes == []

    def test_sync_agent(self) -> None:
        """invoke: the sync wrap_tool_call path records the same episode."""
        shown: list[str] = []
        app = Contacts(repair_script(shown))
        app.agent.invoke({"messages": [HumanMessage("Remove Fredrik, his number is +1 555 0100")]})
        (record,) = app.records
        assert_repaired(record)

    async def test_a_call_id_reused_in_a_later_response_is_a_new_call(self) -> None:
        """Some servers number calls per response ("call_0" every turn): each is checked and recorded."""
        app = Contacts(reused_id_script)
        result = await app.agent.ainvoke({"messages": [HumanMessage("Remove Fredrik")]})
        assert_reused_ids_checked(app, result)

    def test_a_call_id_reused_in_a_later_response_is_a_new_call_sync(self) -> None:
        """The same through invoke (the sync wrap_tool_call path)."""
        app = Contacts(reused_id_script)
        result = app.agent.invoke({"messages": [HumanMessage("Remove Fredrik")]})
        assert_reused_ids_checked(app, result)

    async def test_zero_config_and_unknown_tool(self) -> None:
        """An empty toolset gets the agent's tool schemas; unknown tools are recorded as schema failures."""
        shown: list[str] = []

        def script(messages: list[BaseMessage]) -> AIMessage:
            n = answers(messages)
            shown[:] = errors_shown(messages)
            if n == 0:
                return AIMessage(
                    "",
                    tool_calls=[
                        {"name": "wipe_phone", "args": {}, "id": "z1"},
                        {"name": "lookup", "args": {"key": "three"}, "id": "z2"},
                    ],
                )
            if n == 1:
                return call("lookup", {"key": 3}, "z3")
            return AIMessage("done")

        @tool
        def lookup(key: int) -> str:
            """Look a key up."""
            return f"value {key}"

        records: list[EpisodeRecord] = []
        monitor = Monitor(Toolset(), policy="block", sink=records.append)
        agent = create_agent(ScriptedChatModel(script=script), tools=[lookup], middleware=[MonitorMiddleware(monitor)])
        await agent.ainvoke({"messages": [HumanMessage("look up 3")]})
        assert "no tool named 'wipe_phone'; available tools: lookup" in shown[0]
        assert "argument 'key': must be integer" in shown[1]
        (record,) = records
        assert [(a.call_id, a.cause) for a in record.actions] == [("z1", Cause.SCHEMA), ("z2", Cause.SCHEMA), ("z3", None)]

    async def test_tool_exception_is_state_consistency(self) -> None:
        """A tool that raises is answered with an error ToolMessage and recorded as rejected."""
        shown: list[str] = []

        def script(messages: list[BaseMessage]) -> AIMessage:
            n = answers(messages)
            shown[:] = errors_shown(messages)
            if n == 0:
                return call("search_contacts", {"name": "Fredrik"}, "e1")
            if n == 1:
                app.book.clear()  # someone else deletes the contact meanwhile
                return call("remove_contact", {"person_id": "p-17"}, "e2")
            return AIMessage("gave up")

        app = Contacts(script)
        await app.agent.ainvoke({"messages": [HumanMessage("remove Fredrik")]})
        assert "remove_contact failed: KeyError" in shown[-1]
        (record,) = app.records
        assert record.fed == 2 and record.actions[1].cause is Cause.STATE_CONSISTENCY
        assert record.actions[1].reached_environment and record.invalid_reached_environment


def calls(*emitted: tuple[str, dict[str, Any], str]) -> AIMessage:
    return AIMessage("", tool_calls=[{"name": n, "args": a, "id": i} for n, a, i in emitted])


def parallel_script(call_id: str) -> Script:
    """One response with three calls sharing ``call_id``; the middle one invents a person id."""

    def script(messages: list[BaseMessage]) -> AIMessage:
        if answers(messages) == 0:
            return calls(
                ("search_contacts", {"name": "Fredrik"}, call_id),
                ("remove_contact", {"person_id": "p-99"}, call_id),  # never returned: blocked
                ("search_contacts", {"name": "Bob"}, call_id),
            )
        return AIMessage("done")

    return script


def assert_each_call_checked_once(app: Contacts, result: dict[str, Any]) -> None:
    replies = [m for m in result["messages"] if isinstance(m, ToolMessage)]
    assert [(m.name, m.status) for m in replies] == [
        ("search_contacts", "success"),
        ("remove_contact", "error"),
        ("search_contacts", "success"),
    ]
    assert "'p-99' was never returned by any tool" in str(replies[1].content)
    assert "Fredrik" in str(replies[0].content) and replies[2].content in ([], "[]")  # nobody named Bob
    assert "p-17" in app.book  # the blocked removal never ran
    (record,) = app.records
    assert [(a.tool, a.decision, a.reached_environment) for a in record.actions] == [
        ("search_contacts", Decision.ALLOW, True),
        ("remove_contact", Decision.BLOCK, False),
        ("search_contacts", Decision.ALLOW, True),
    ]
    assert [a.call_id for a in record.actions] == [None, None, None]  # an ambiguous id names no single call
    assert (record.horizon, record.fed) == (3, 2) and app.middleware.open_episodes == []


class TestParallelCalls:
    """Parallel calls of one response: each checked and recorded once, in emission order."""

    @pytest.mark.parametrize("call_id", ["", "call_0"])
    async def test_ambiguous_ids_async(self, call_id: str) -> None:
        """ainvoke: calls with empty or repeated ids are told apart; the blocked one never runs."""
        app = Contacts(parallel_script(call_id))
        result = await app.agent.ainvoke({"messages": [HumanMessage("remove Fredrik")]})
        assert_each_call_checked_once(app, result)

    @pytest.mark.parametrize("call_id", ["", "call_0"])
    def test_ambiguous_ids_sync(self, call_id: str) -> None:
        """invoke: the same through the threaded sync path."""
        app = Contacts(parallel_script(call_id))
        result = app.agent.invoke({"messages": [HumanMessage("remove Fredrik")]})
        assert_each_call_checked_once(app, result)

    def test_sync_depths_follow_emission_order(self) -> None:
        """invoke runs parallel calls in threads; the depths still follow the order in the AIMessage."""
        ids = [f"c{i}" for i in range(8)]

        def script(messages: list[BaseMessage]) -> AIMessage:
            if answers(messages) == 0:
                return calls(*[("search_contacts", {"name": f"n{i}"}, i) for i in ids])
            return AIMessage("done")

        for _ in range(4):
            app = Contacts(script)
            app.agent.invoke({"messages": [HumanMessage("find them")]})
            (record,) = app.records
            assert [a.call_id for a in record.actions] == ids
            assert [a.depth for a in record.actions] == list(range(1, 9))


Case = tuple[Contacts, Callable[[dict[str, Any]], None]]
"""An agent, and the checks of what its run returned."""


def sibling_case() -> Case:
    """The removal of an id only the search beside it would return: refused, the sibling named; never run."""
    shown: list[str] = []
    still_there: list[bool] = []

    def script(messages: list[BaseMessage]) -> AIMessage:
        n = answers(messages)
        shown[:] = errors_shown(messages)
        if n == 0:
            return calls(("search_contacts", {"name": "Fredrik"}, "s1"), ("remove_contact", {"person_id": "p-17"}, "s2"))
        if n == 1:
            still_there.append("p-17" in app.book)  # the refused removal did not run
            return call("remove_contact", {"person_id": "p-17"}, "s3")
        return AIMessage("done")

    codes = Codes()
    app = Contacts(script, observers=[codes])

    def check(result: dict[str, Any]) -> None:
        assert still_there == [True] and app.book == {}  # refused in the batch, then run on its own
        (refusal,) = shown
        assert "search_contacts (call 1 of this batch) produces them but has not returned" in refusal
        (record,) = app.records
        assert [(a.call_id, a.depth, a.decision, a.reached_environment) for a in record.actions] == [
            ("s1", 1, Decision.ALLOW, True),
            ("s2", 2, Decision.BLOCK, False),
            ("s3", 3, Decision.ALLOW, True),
        ]
        assert codes.codes["s2"] == [SIBLING] and record.fed == 2
        assert app.middleware.open_episodes == []

    return app, check


def duplicate_case() -> Case:
    """The same payment twice in one message: the second is a duplicate_call finding; both run (default policy)."""

    def script(messages: list[BaseMessage]) -> AIMessage:
        if answers(messages) == 0:
            args = {"person_id": "p-17", "amount": 50}
            return calls(("send_money", args, "d1"), ("send_money", dict(args), "d2"))
        return AIMessage("done")

    codes = Codes()
    app = Contacts(script, observers=[codes])

    def check(result: dict[str, Any]) -> None:
        assert app.runs == {"send_money": 2}
        assert [m.content for m in result["messages"] if isinstance(m, ToolMessage)] == ["sent 50", "sent 50"]
        (record,) = app.records
        first, second = record.actions
        assert (first.call_id, first.executable, first.depth) == ("d1", True, 1)
        assert (second.call_id, second.cause, second.decision, second.depth) == ("d2", Cause.PRECONDITION, Decision.OBSERVE, 2)
        assert second.reached_environment and "call 1 of this batch" in (second.reason or "")
        assert codes.codes["d2"] == [DUPLICATE]

    return app, check


def independent_case() -> Case:
    """Calls that need nothing of each other: all run, all executable, consecutive depths in message order."""
    ids = [f"i{k}" for k in range(6)]

    def script(messages: list[BaseMessage]) -> AIMessage:
        if answers(messages) == 0:
            return calls(*[("search_contacts", {"name": f"n{k}"}, i) for k, i in enumerate(ids)])
        return AIMessage("done")

    codes = Codes()
    app = Contacts(script, observers=[codes])

    def check(result: dict[str, Any]) -> None:
        assert [m.status for m in result["messages"] if isinstance(m, ToolMessage)] == ["success"] * 6
        (record,) = app.records
        assert [(a.call_id, a.depth) for a in record.actions] == [(i, k + 1) for k, i in enumerate(ids)]
        assert record.executable and all(a.reached_environment for a in record.actions)
        assert all(codes.codes[i] == [] for i in ids)
        assert app.middleware.open_episodes == []

    return app, check


CASES = {"sibling": sibling_case, "duplicate": duplicate_case, "independent": independent_case}


class TestBatches:
    """The tool calls of one AIMessage are judged as one batch (Episode.begin_batch), in the agent's own loop."""

    @pytest.mark.parametrize("case", CASES)
    async def test_async_agent(self, case: str) -> None:
        """ainvoke: ToolNode runs the calls concurrently; the first to arrive admits the whole message."""
        app, check = CASES[case]()
        check(await app.agent.ainvoke({"messages": [HumanMessage("do it")]}))

    @pytest.mark.parametrize("case", CASES)
    def test_sync_agent(self, case: str) -> None:
        """invoke: ToolNode runs the calls in threads; the first to arrive admits the whole message."""
        app, check = CASES[case]()
        check(app.agent.invoke({"messages": [HumanMessage("do it")]}))

    async def test_a_call_changed_on_its_way_is_checked_as_it_runs(self) -> None:
        """A middleware placed before MonitorMiddleware changes a call: the emitted one is recorded as not run,
        the changed one is checked on its own and runs."""

        class Rewrite(AgentMiddleware[Any, Any, Any]):
            async def awrap_tool_call(self, request: Any, handler: Any) -> Any:
                if request.tool_call["id"] == "x2":
                    request = request.override(tool_call={**request.tool_call, "args": {"name": "Fredrik"}})
                return await handler(request)

        def script(messages: list[BaseMessage]) -> AIMessage:
            if answers(messages) == 0:
                return calls(("search_contacts", {"name": "Bob"}, "x1"), ("search_contacts", {"name": "Eve"}, "x2"))
            return AIMessage("done")

        app = Contacts(script)
        agent = create_agent(app.model, tools=app.agent_tools, middleware=[Rewrite(), app.middleware])
        result = await agent.ainvoke({"messages": [HumanMessage("find them")]})
        replies = [m for m in result["messages"] if isinstance(m, ToolMessage)]
        assert [m.status for m in replies] == ["success", "success"] and "Fredrik" in str(replies[1].content)
        (record,) = app.records
        assert [(a.call_id, a.depth, a.reached_environment, a.error) for a in record.actions] == [
            ("x1", 1, True, None),
            ("x2", 2, False, "the call was changed before it ran"),
            ("x2", 3, True, None),
        ]

    async def test_a_tool_that_interrupts_itself_in_a_batch_is_recorded_once(self) -> None:
        """The graph pauses inside one call of a batch and resumes: that call is reused, not admitted again."""

        def script(messages: list[BaseMessage]) -> AIMessage:
            if answers(messages) == 0:
                return calls(
                    ("search_contacts", {"name": "Fredrik"}, "t1"),
                    ("confirm_and_send", {"person_id": "p-17", "amount": 50}, "t2"),
                )
            return AIMessage("finished")

        app = Contacts(script, checkpointer=InMemorySaver())
        config: Any = {"configurable": {"thread_id": "th-batch"}}
        await app.agent.ainvoke({"messages": [HumanMessage("send Fredrik 50")]}, config)
        assert app.records == [] and app.middleware.open_episodes[0].depth == 2  # both admitted, one paused
        done = await app.agent.ainvoke(Command(resume=True), config)
        assert done["messages"][-1].content == "finished"
        (record,) = app.records
        assert [(a.call_id, a.depth, a.reached_environment) for a in record.actions] == [("t1", 1, True), ("t2", 2, True)]
        assert record.executable

    @staticmethod
    def raising_sibling() -> Contacts:
        """A message whose first call raises with tool_errors="raise": the run fails while its siblings run."""

        def script(messages: list[BaseMessage]) -> AIMessage:
            if answers(messages) == 0:
                return call("search_contacts", {"name": "Fredrik"}, "s1")
            app.book.clear()  # someone else deletes the contact meanwhile: the removal raises KeyError
            return calls(
                ("remove_contact", {"person_id": "p-17"}, "r1"),
                ("search_contacts", {"name": "Bob"}, "r2"),
                ("search_contacts", {"name": "Eve"}, "r3"),
            )

        app = Contacts(script)
        app.middleware.tool_errors = "raise"
        return app

    @staticmethod
    def assert_each_call_recorded_once(app: Contacts) -> None:
        (record,) = app.records
        assert record.status == "error" and record.error == "KeyError"
        assert [(a.call_id, a.depth) for a in record.actions] == [("s1", 1), ("r1", 2), ("r2", 3), ("r3", 4)]
        assert record.actions[1].cause is Cause.STATE_CONSISTENCY and record.actions[1].reached_environment
        assert app.middleware.open_episodes == []

    async def test_a_sibling_that_raises_loses_no_call(self) -> None:
        """ainvoke: the failing call ends the episode; every call of the batch is recorded once, at its depth."""
        app = self.raising_sibling()
        with pytest.raises(KeyError):
            await app.agent.ainvoke({"messages": [HumanMessage("remove Fredrik")]})
        self.assert_each_call_recorded_once(app)

    def test_a_sibling_that_raises_loses_no_call_sync(self) -> None:
        """invoke: the same through the threaded sync path."""
        app = self.raising_sibling()
        with pytest.raises(KeyError):
            app.agent.invoke({"messages": [HumanMessage("remove Fredrik")]})
        self.assert_each_call_recorded_once(app)


class TestInterrupts:
    """Escalation goes through LangGraph interrupts and is idempotent per call id on resume."""

    @staticmethod
    def app(tool_name: str = "send_money") -> Contacts:
        def script(messages: list[BaseMessage]) -> AIMessage:
            if answers(messages) == 0:
                return call(tool_name, {"person_id": "p-17", "amount": 500}, "m1")
            return AIMessage("finished")

        return Contacts(
            script,
            policy=Policy(default="block", tools={"send_money": "escalate"}),
            escalate=interrupt_escalation,
            checkpointer=InMemorySaver(),
        )

    async def test_approve_after_interrupt(self) -> None:
        """The graph pauses with the monitor's request; approving runs the call once, recorded once."""
        app = self.app()
        config: Any = {"configurable": {"thread_id": "th-1"}}
        paused = await app.agent.ainvoke({"messages": [HumanMessage("send Fredrik 500")]}, config)
        (request,) = paused["__interrupt__"]
        assert request.value["type"] == "prefixmon.escalation" and request.value["cause"] == "precondition"
        assert "approval-free limit" in request.value["reason"]
        assert app.records == [] and len(app.middleware.open_episodes) == 1
        assert app.middleware.open_episodes[0].depth == 0  # nothing recorded before the interrupt

        done = await app.agent.ainvoke(Command(resume="approve"), config)
        assert done["messages"][-1].content == "finished"
        assert app.runs == {"send_money": 1}
        (record,) = app.records
        (action,) = record.actions
        assert action.decision is Decision.APPROVE and action.cause is Cause.PRECONDITION and action.reached_environment

    async def test_edit_and_deny(self) -> None:
        """An edit runs the edited (checked) call; a denial reaches the model and never runs the tool."""
        app = self.app()
        config: Any = {"configurable": {"thread_id": "th-edit"}}
        await app.agent.ainvoke({"messages": [HumanMessage("send Fredrik 500")]}, config)
        edit = {"decision": "edit", "args": {"person_id": "p-17", "amount": 90}}
        edited = await app.agent.ainvoke(Command(resume=edit), config)
        assert [m.content for m in edited["messages"] if isinstance(m, ToolMessage)] == ["sent 90"]
        decisions = [app.records[-1].actions[0].decision]
        assert decisions == [Decision.EDIT]

        config = {"configurable": {"thread_id": "th-deny"}}
        await app.agent.ainvoke({"messages": [HumanMessage("send Fredrik 500")]}, config)
        denied = await app.agent.ainvoke(Command(resume={"decision": "deny", "reason": "too much"}), config)
        (reply,) = [m for m in denied["messages"] if isinstance(m, ToolMessage)]
        assert reply.status == "error" and "too much" in str(reply.content)
        assert app.records[-1].actions[0].decision is Decision.DENY
        assert app.runs == {"send_money": 1}

    async def test_tool_that_interrupts_itself_is_recorded_once(self) -> None:
        """The wrapper runs again on resume; the admitted call is reused, not emitted twice."""
        app = self.app("confirm_and_send")
        config: Any = {"configurable": {"thread_id": "th-self"}}
        await app.agent.ainvoke({"messages": [HumanMessage("send Fredrik 500")]}, config)
        await app.agent.ainvoke(Command(resume=True), config)
        assert app.runs == {"confirm_and_send": 2}  # LangGraph re-ran the tool up to its interrupt
        (record,) = app.records
        assert record.horizon == 1 and record.actions[0].decision is Decision.ALLOW and record.executable

    def test_sync_interrupt(self) -> None:
        """The sync path escalates through interrupts as well."""
        app = self.app()
        config: Any = {"configurable": {"thread_id": "th-sync"}}
        app.agent.invoke({"messages": [HumanMessage("send Fredrik 500")]}, config)
        app.agent.invoke(Command(resume=True), config)
        (record,) = app.records
        assert record.actions[0].decision is Decision.APPROVE and app.runs == {"send_money": 1}


def crash_once_script() -> Script:
    """Search, then crash the model once; the next invocation answers."""
    crashed: list[bool] = []

    def script(messages: list[BaseMessage]) -> AIMessage:
        if answers(messages) == 0:
            return call("search_contacts", {"name": "Fredrik"}, "s1")
        if not crashed:
            crashed.append(True)
            raise ConnectionError("model backend down")
        return AIMessage("done")

    return script


def assert_closed_when_it_failed(app: Contacts) -> None:
    (first,) = app.records
    assert (first.status, first.error, first.outcome) == ("error", "ConnectionError", None)
    assert [(a.call_id, a.reached_environment) for a in first.actions] == [("s1", True)]
    assert app.middleware.open_episodes == []


def assert_next_invocation_is_new(app: Contacts) -> None:
    first, second = app.records
    assert (second.status, second.outcome) == ("finished", Outcome.SUCCESS)
    assert [a.tool for a in second.actions if a.tool is not None] == []  # the answer needed no tool call
    assert first.episode_id != second.episode_id and app.middleware.open_episodes == []


def tool_raises_script(app: Contacts) -> Script:
    """Search, then remove a contact someone else deleted meanwhile (the tool raises KeyError)."""

    def script(messages: list[BaseMessage]) -> AIMessage:
        if answers(messages) == 0:
            return call("search_contacts", {"name": "Fredrik"}, "s1")
        app.book.clear()
        return call("remove_contact", {"person_id": "p-17"}, "r1")

    return script


class TestEpisodeLifetime:
    """A run that raises closes its episode as an error and delivers the record; an interrupted one stays open."""

    async def test_async_model_error_closes_the_episode(self) -> None:
        """ainvoke: the model's exception ends the episode with status error and its type; the next run is new."""
        app = Contacts(crash_once_script(), checkpointer=InMemorySaver())
        config: Any = {"configurable": {"thread_id": "th-crash"}}
        with pytest.raises(ConnectionError):
            await app.agent.ainvoke({"messages": [HumanMessage("find Fredrik")]}, config)
        assert_closed_when_it_failed(app)
        await app.agent.ainvoke({"messages": [HumanMessage("try again")]}, config)
        assert_next_invocation_is_new(app)

    def test_sync_model_error_closes_the_episode(self) -> None:
        """invoke: the same, with the monitor's async work run from sync nodes."""
        app = Contacts(crash_once_script(), checkpointer=InMemorySaver())
        config: Any = {"configurable": {"thread_id": "th-crash-sync"}}
        with pytest.raises(ConnectionError):
            app.agent.invoke({"messages": [HumanMessage("find Fredrik")]}, config)
        assert_closed_when_it_failed(app)
        app.agent.invoke({"messages": [HumanMessage("try again")]}, config)
        assert_next_invocation_is_new(app)

    async def test_failed_runs_without_checkpointer_do_not_pile_up(self) -> None:
        """Without a checkpointer every failed run is its own error record; no episode stays open."""
        app = Contacts(crash_once_script())
        for _ in range(3):
            with pytest.raises(ConnectionError):
                await app.agent.ainvoke({"messages": [HumanMessage("find Fredrik")]})
            app.model.script = crash_once_script()
        assert [(r.status, r.error, r.horizon) for r in app.records] == [("error", "ConnectionError", 1)] * 3
        assert app.middleware.open_episodes == []

    @staticmethod
    def raising_app() -> Contacts:
        app = Contacts(crash_once_script())
        app.model.script = tool_raises_script(app)
        app.middleware.tool_errors = "raise"
        return app

    @staticmethod
    def assert_tool_error_recorded(app: Contacts) -> None:
        (record,) = app.records
        assert (record.status, record.error, record.horizon, record.fed) == ("error", "KeyError", 2, 2)
        assert record.actions[1].cause is Cause.STATE_CONSISTENCY and record.actions[1].reached_environment
        assert app.middleware.open_episodes == []

    async def test_tool_errors_raise_closes_the_episode(self) -> None:
        """tool_errors="raise": the tool's exception is recorded, re-raised, and ends the episode."""
        app = self.raising_app()
        with pytest.raises(KeyError):
            await app.agent.ainvoke({"messages": [HumanMessage("remove Fredrik")]})
        self.assert_tool_error_recorded(app)

    def test_tool_errors_raise_closes_the_episode_sync(self) -> None:
        """The same through invoke."""
        app = self.raising_app()
        with pytest.raises(KeyError):
            app.agent.invoke({"messages": [HumanMessage("remove Fredrik")]})
        self.assert_tool_error_recorded(app)

    async def test_retries_inside_the_middleware_keep_one_episode(self) -> None:
        """A retrying middleware placed after MonitorMiddleware hides the failed attempt: one finished episode."""
        app = Contacts(crash_once_script())
        retry = ModelRetryMiddleware(max_retries=1, initial_delay=0.0, jitter=False)
        stack: list[AgentMiddleware[Any, Any, Any]] = [app.middleware, retry]
        agent = create_agent(app.model, tools=list(app.agent_tools), middleware=stack)
        result = await agent.ainvoke({"messages": [HumanMessage("find Fredrik")]})
        assert result["messages"][-1].content == "done"
        (record,) = app.records
        assert (record.status, record.horizon) == ("finished", 1) and app.middleware.open_episodes == []

    @staticmethod
    def retried_app(second: str = "remove_contact", **monitor: Any) -> tuple[Contacts, Any]:
        """A retrying middleware placed before MonitorMiddleware: the error passes through it first."""
        crashed: list[bool] = []

        def script(messages: list[BaseMessage]) -> AIMessage:
            n = answers(messages)
            if n == 0:
                return call("search_contacts", {"name": "Fredrik"}, "s1")
            if not crashed:
                crashed.append(True)
                raise ConnectionError("model backend down")
            return call(second, {"person_id": "p-17"}, "r1") if n == 1 else AIMessage("done")

        app = Contacts(script, **monitor)
        retry = ModelRetryMiddleware(max_retries=1, initial_delay=0.0, jitter=False)
        stack: list[AgentMiddleware[Any, Any, Any]] = [retry, app.middleware]
        return app, create_agent(app.model, tools=list(app.agent_tools), middleware=stack)

    async def test_run_going_on_after_its_episode_ended_fail_closed(self) -> None:
        """fail_closed: a call after the error is refused, saying where MonitorMiddleware belongs."""
        app, agent = self.retried_app(failure_mode="fail_closed")
        result = await agent.ainvoke({"messages": [HumanMessage("remove Fredrik")]})
        assert "place MonitorMiddleware first" in errors_shown(result["messages"])[0]
        assert "p-17" in app.book  # the unchecked removal never ran
        (record,) = app.records
        assert (record.status, record.error, record.horizon) == ("error", "ConnectionError", 1)

    async def test_run_going_on_after_its_episode_ended_fail_open(self) -> None:
        """fail_open (default): the call runs unchecked, with a RuntimeWarning that says why."""
        app, agent = self.retried_app()
        with pytest.warns(RuntimeWarning, match="'remove_contact' runs unchecked"):
            await agent.ainvoke({"messages": [HumanMessage("remove Fredrik")]})
        assert app.book == {}
        assert [(r.status, r.horizon) for r in app.records] == [("error", 1)]

    async def test_made_up_name_running_unchecked_is_not_repeated_in_the_warning(self) -> None:
        """The warning labels a long name the model made up as telemetry does: <unknown tool>."""
        made_up = "remove_" + "x" * 80 + "_sk-live-SECRET"
        app, agent = self.retried_app(made_up)
        with pytest.warns(RuntimeWarning, match="'<unknown tool>' runs unchecked") as warned:
            await agent.ainvoke({"messages": [HumanMessage("remove Fredrik")]})
        assert not any("SECRET" in str(w.message) for w in warned)
        assert "p-17" in app.book


class TestParseAnswer:
    """Resume values map to escalation answers."""

    def test_forms(self) -> None:
        """Strings, booleans, mappings and answer objects are understood; anything else denies."""
        assert type(parse_answer("approve")).__name__ == "Approve"
        assert parse_answer({"decision": "edit", "args": {"a": 1}}).args == {"a": 1}  # type: ignore[union-attr]
        assert parse_answer(False) == Deny()
        assert "unrecognised" in parse_answer(42).reason  # type: ignore[union-attr]


DEEP = "[" * 5_000 + "]" * 5_000
"""A tool result nested far past MAX_JSON_DEPTH (400 levels)."""


class TestDeeplyNestedResults:
    """Tool results nested too deeply to parse are information as text, never a RecursionError."""

    async def test_deep_results_leave_the_agent_and_collections_room(self) -> None:
        """A deep result in the conversation and one a tool returns: the run goes on, no collection meets a full stack."""

        def script(messages: list[BaseMessage]) -> AIMessage:
            return call("fetch", {"key": "k"}, "d2") if answers(messages) == 1 else AIMessage("done")

        @tool
        def fetch(key: str) -> str:
            """Fetch a document."""
            return '{"id": "doc-1", "body": ' + DEEP + "}"

        records: list[EpisodeRecord] = []
        monitor = Monitor(Toolset(), policy="block", sink=records.append)
        agent = create_agent(ScriptedChatModel(script=script), tools=[fetch], middleware=[MonitorMiddleware(monitor)])
        with collections_watched() as failures:
            result = await agent.ainvoke(
                {
                    "messages": [
                        HumanMessage("fetch k"),
                        call("fetch", {"key": "j"}, "d1"),
                        ToolMessage(DEEP, tool_call_id="d1", name="fetch"),  # a deep result already in the conversation
                    ]
                }
            )
        assert failures == []
        assert result["messages"][-1].content == "done"
        (record,) = records
        assert [(a.call_id, a.decision, a.reached_environment) for a in record.actions] == [("d2", Decision.ALLOW, True)]
        assert record.status != "error"


@pytest.mark.parametrize(("first", "executable"), [("agent", False), ("user", True)])
async def test_an_id_the_model_made_up_in_an_earlier_turn(first: str, executable: bool) -> None:
    """History: the model wrote flight HAT902 no tool returned, the user repeats it: the booking is refused.

    When the user named it first, the same booking runs.
    """
    said = "Book flight HAT902 for me." if first == "user" else "Which direct flights are there?"

    def script(messages: list[BaseMessage]) -> AIMessage:
        if not any(isinstance(m, ToolMessage) for m in messages):
            return call("book", {"flight_number": "HAT902"}, "b1")
        return AIMessage("done")

    @tool
    def book(flight_number: str) -> str:
        """Book a flight."""
        return "Error: Flight HAT902 not found"

    rules = flight_booking()
    records: list[EpisodeRecord] = []
    monitor = Monitor(rules, policy="block", sink=records.append)
    agent = create_agent(ScriptedChatModel(script=script), tools=[book], middleware=[MonitorMiddleware(monitor)])
    await agent.ainvoke(
        {
            "messages": [
                HumanMessage(said),
                AIMessage("Direct flights: | May 27 | HAT902 | $500 |"),
                HumanMessage("Yes, HAT902 please."),
            ]
        }
    )
    (record,) = records
    assert record.actions[0].executable is executable, record.actions[0].reason
    if not executable:
        assert "first written by the agent itself" in (record.actions[0].reason or "")
