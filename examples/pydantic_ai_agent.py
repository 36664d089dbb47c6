"""pydantic-ai: a monitored agent run on pydantic-ai's own loop, offline.

Run: ``python examples/pydantic_ai_agent.py``. A scripted ``FunctionModel`` plays the LLM: it
tries to remove a contact by the phone number the user gave, gets the monitor's reason as a
retry prompt, looks the contact up and removes it by id. Then a large transfer is escalated
through deferred tool approval: the run pauses with ``DeferredToolRequests`` and the approval
continues the same episode. Records go to a JSON Lines file.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Annotated, Any

import anyio

try:
    from pydantic_ai import (
        Agent,
        DeferredToolRequests,
        DeferredToolResults,
        ModelResponse,
        TextPart,
        ToolApproved,
        ToolCallPart,
        ToolReturnPart,
    )
    from pydantic_ai.messages import ModelMessage
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from prefixmon import Monitor, Policy, Ref, Toolset, TrackedState, read_records
    from prefixmon.adapters.pydantic_ai import MonitorCapability, deferred_approval
except ImportError as e:  # the example's extra is missing: say exactly what to install
    raise SystemExit(f'{e}\nThis example needs the pydantic-ai extra: pip install "prefixmon[pydantic-ai]"') from None

BOOK = {"p-7f3a": {"person_id": "p-7f3a", "name": "Fredrik Lind", "phone": "+1 555 0100"}}


def scripted_llm(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Plays the model: reacts to what the tools (and the monitor) told it."""
    shown = [str(p.content) for p in messages[-1].parts if isinstance(p, ToolReturnPart)]
    for text in shown:
        print(f"  model sees: {text}")
    step = sum(isinstance(m, ModelResponse) for m in messages)
    prompt = str(getattr(messages[0].parts[-1], "content", "")) if messages[0].parts else ""
    if "send" in prompt:
        if step == 0:
            return ModelResponse(parts=[ToolCallPart("send_money", {"person_id": "p-7f3a", "amount": 500})])
        return ModelResponse(parts=[TextPart("Sent.")])
    plan = [
        ToolCallPart("remove_contact", {"person_id": "+1 555 0100"}),
        ToolCallPart("search_contacts", {"name": "Fredrik Lind"}),
        ToolCallPart("remove_contact", {"person_id": "p-7f3a"}),
    ]
    return ModelResponse(parts=[plan[step]] if step < len(plan) else [TextPart("Fredrik is removed.")])


def build(sink: Path) -> tuple[Agent[None, Any], MonitorCapability]:
    tools = Toolset()

    def within_limit(state: TrackedState, args: Any) -> bool:
        """transfers above 100 need a human's approval"""
        return bool(args["amount"] <= 100)

    monitor = Monitor(
        tools,
        policy=Policy(default="block", tools={"send_money": "escalate"}),
        escalate=deferred_approval,
        sink=sink,
        labels={"dataset": "example", "method": "react"},
    )
    capability = MonitorCapability(monitor, outcome=lambda result: "success")
    agent: Agent[None, Any] = Agent(
        FunctionModel(scripted_llm), capabilities=[capability], output_type=[str, DeferredToolRequests]
    )

    # One function, declared to pydantic-ai (schema) and to prefixmon (rules).
    @agent.tool_plain
    @tools.tool(produces="person_id")
    def search_contacts(name: str) -> list[dict[str, str]]:
        """Find contacts by name."""
        return [c for c in BOOK.values() if c["name"] == name]

    @agent.tool_plain
    @tools.tool(invalidates="person_id")
    def remove_contact(person_id: Annotated[str, Ref("person_id")]) -> str:
        """Remove a contact by its id."""
        BOOK.pop(person_id)
        return "removed"

    @agent.tool_plain
    @tools.tool(requires=[within_limit])
    def send_money(person_id: str, amount: int) -> str:
        """Send money to a contact."""
        return f"sent {amount} to {person_id}"

    return agent, capability


async def main() -> None:
    sink = Path(tempfile.mkdtemp()) / "episodes.jsonl"
    agent, _ = build(sink)
    print("run 1: remove a contact")
    result = await agent.run("Remove Fredrik from my contacts, his number is +1 555 0100")
    print(f"  output: {result.output}")

    print("run 2: a transfer the policy escalates")
    paused = await agent.run("please send Fredrik 500")
    assert isinstance(paused.output, DeferredToolRequests)
    (call,) = paused.output.approvals
    reason = paused.output.metadata[call.tool_call_id]["prefixmon"]["reason"]
    print(f"  paused for approval: {call.tool_name} {call.args} ({reason})")
    done = await agent.run(
        message_history=paused.all_messages(),
        deferred_tool_results=DeferredToolResults(approvals={call.tool_call_id: ToolApproved()}),
    )
    print(f"  output after approval: {done.output}")

    for record in read_records(sink):
        first = record.first_failure
        print(
            f"record: horizon {record.horizon}, FED {record.fed}, cause {first.cause if first else None}, "
            f"decisions {[str(a.decision) for a in record.actions]}, outcome {record.outcome}"
        )


if __name__ == "__main__":
    anyio.run(main)
