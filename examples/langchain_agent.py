"""LangChain 1.x: a monitored ``create_agent`` run on LangGraph's own loop, offline.

Run: ``python examples/langchain_agent.py``. A scripted chat model (it binds tools like a
provider model) tries to remove a contact by phone number, gets an error ``ToolMessage`` with
the monitor's reason, looks the contact up and removes it by id. Then a large transfer is
escalated through a LangGraph ``interrupt``; resuming with ``Command(resume="approve")`` runs
it, recorded once although LangGraph re-runs the tool wrapper on resume.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import anyio

try:
    from langchain.agents import create_agent
    from langchain_core.language_models import BaseChatModel
    from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
    from langchain_core.outputs import ChatGeneration, ChatResult
    from langchain_core.tools import tool
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.types import Command

    from prefixmon import Monitor, Policy, Toolset, TrackedState, read_records
    from prefixmon.adapters.langchain import MonitorMiddleware, interrupt_escalation
except ImportError as e:  # the example's extra is missing: say exactly what to install
    raise SystemExit(f'{e}\nThis example needs the langchain extra: pip install "prefixmon[langchain]"') from None

BOOK = {"p-7f3a": {"person_id": "p-7f3a", "name": "Fredrik Lind", "phone": "+1 555 0100"}}


class ScriptedChatModel(BaseChatModel):
    """Plays the model: reacts to what the tools (and the monitor) told it."""

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedChatModel:
        return self

    def _generate(
        self, messages: list[BaseMessage], stop: list[str] | None = None, run_manager: Any = None, **kwargs: Any
    ) -> ChatResult:
        if isinstance(messages[-1], ToolMessage):
            print(f"  model sees: {messages[-1].content}")
        step = sum(isinstance(m, AIMessage) for m in messages)
        if "send" in str(messages[0].content):
            plan = [("send_money", {"person_id": "p-7f3a", "amount": 500})]
        else:
            plan = [
                ("remove_contact", {"person_id": "+1 555 0100"}),
                ("search_contacts", {"name": "Fredrik Lind"}),
                ("remove_contact", {"person_id": "p-7f3a"}),
            ]
        if step < len(plan):
            name, args = plan[step]
            message = AIMessage("", tool_calls=[{"name": name, "args": args, "id": f"call_{step}"}])
        else:
            message = AIMessage("Done.")
        return ChatResult(generations=[ChatGeneration(message=message)])


@tool
def search_contacts(name: str) -> list[dict[str, str]]:
    """Find contacts by name."""
    return [c for c in BOOK.values() if c["name"] == name]


@tool
def remove_contact(person_id: str) -> str:
    """Remove a contact by its id."""
    BOOK.pop(person_id)
    return "removed"


@tool
def send_money(person_id: str, amount: int) -> str:
    """Send money to a contact."""
    return f"sent {amount} to {person_id}"


def rules() -> Toolset:
    """prefixmon rules for the LangChain tools (their schemas are read from the agent)."""
    tools = Toolset()

    def within_limit(state: TrackedState, args: Any) -> bool:
        """transfers above 100 need a human's approval"""
        return bool(args["amount"] <= 100)

    person = {"type": "object", "properties": {"person_id": {"type": "string"}}, "required": ["person_id"]}
    tools.add_schema("search_contacts", {"type": "object", "properties": {"name": {"type": "string"}}}, produces="person_id")
    tools.add_schema("remove_contact", person, refs={"person_id": "person_id"}, invalidates="person_id")
    money = {"type": "object", "properties": {"person_id": {"type": "string"}, "amount": {"type": "integer"}}}
    tools.add_schema("send_money", money, requires=[within_limit])
    return tools


async def main() -> None:
    sink = Path(tempfile.mkdtemp()) / "episodes.jsonl"
    monitor = Monitor(
        rules(),
        policy=Policy(default="block", tools={"send_money": "escalate"}),
        escalate=interrupt_escalation,
        sink=sink,
        labels={"dataset": "example", "method": "react"},
    )
    middleware = MonitorMiddleware(monitor, outcome=lambda state: "success")
    agent = create_agent(
        ScriptedChatModel(),
        tools=[search_contacts, remove_contact, send_money],
        middleware=[middleware],
        checkpointer=InMemorySaver(),
    )

    print("invocation 1: remove a contact")
    config: Any = {"configurable": {"thread_id": "contacts"}}
    await agent.ainvoke({"messages": [HumanMessage("Remove Fredrik, his number is +1 555 0100")]}, config)

    print("invocation 2: a transfer the policy escalates")
    config = {"configurable": {"thread_id": "transfer"}}
    paused = await agent.ainvoke({"messages": [HumanMessage("send Fredrik 500")]}, config)
    (request,) = paused["__interrupt__"]
    print(f"  interrupted: {request.value['tool']} {request.value['args']} ({request.value['reason']})")
    await agent.ainvoke(Command(resume="approve"), config)

    for record in read_records(sink):
        first = record.first_failure
        print(
            f"record: horizon {record.horizon}, FED {record.fed}, cause {first.cause if first else None}, "
            f"decisions {[str(a.decision) for a in record.actions]}, outcome {record.outcome}"
        )


if __name__ == "__main__":
    anyio.run(main)
