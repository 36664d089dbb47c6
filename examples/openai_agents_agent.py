"""OpenAI Agents SDK: a monitored run on the SDK's own runner, offline.

Run: ``python examples/openai_agents_agent.py``. The SDK's ``ScriptedModel`` plays the LLM: it
calls a tool that does not exist and removes a contact by phone number; the monitor answers
both (``reject_content`` from the tool input guardrail, and the unknown tool returned to the
model); it then looks the contact up and removes it by id.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import anyio

try:
    from agents import Agent, function_tool, set_tracing_disabled
    from agents.items import TResponseOutputItem
    from agents.testing import ModelCall, ModelStep, ScriptedModel, assistant_message, function_call

    from prefixmon import Monitor, Toolset, read_records
    from prefixmon.adapters.openai_agents import MonitorGuardrail
except ImportError as e:  # the example's extra is missing: say exactly what to install
    raise SystemExit(f'{e}\nThis example needs the openai-agents extra: pip install "prefixmon[openai-agents]"') from None

BOOK = {"p-7f3a": {"person_id": "p-7f3a", "name": "Fredrik Lind", "phone": "+1 555 0100"}}


SHOWN: list[str] = []


def show(call: ModelCall) -> None:
    """Print the tool outputs the model gets to see for the first time."""
    items: list[Any] = call.input if isinstance(call.input, list) else []
    outputs = [str(i["output"]) for i in items if isinstance(i, dict) and i.get("type") == "function_call_output"]
    for text in outputs[len(SHOWN) :]:
        print(f"  model sees: {text}")
    SHOWN[:] = outputs


def step(*items: TResponseOutputItem) -> ModelStep:
    def respond(call: ModelCall) -> list[TResponseOutputItem]:
        show(call)
        return list(items)

    return ModelStep.respond(respond)


@function_tool
def search_contacts(name: str) -> list[dict[str, str]]:
    """Find contacts by name."""
    return [c for c in BOOK.values() if c["name"] == name]


@function_tool
def remove_contact(person_id: str) -> str:
    """Remove a contact by its id."""
    BOOK.pop(person_id)
    return "removed"


async def main() -> None:
    set_tracing_disabled(True)
    sink = Path(tempfile.mkdtemp()) / "episodes.jsonl"
    rules = Toolset()  # schemas come from the tools; rules are added per tool
    rules.add_schema("search_contacts", search_contacts.params_json_schema, produces="person_id")
    rules.add_schema("remove_contact", remove_contact.params_json_schema, refs={"person_id": "person_id"})
    guard = MonitorGuardrail(Monitor(rules, policy="block", sink=sink, labels={"dataset": "example", "method": "react"}))

    model = ScriptedModel(
        [
            step(
                function_call("delete_contact", {"name": "Fredrik"}, call_id="call_0"),
                function_call("remove_contact", {"person_id": "+1 555 0100"}, call_id="call_1"),
            ),
            step(function_call("search_contacts", {"name": "Fredrik Lind"}, call_id="call_2")),
            step(function_call("remove_contact", {"person_id": "p-7f3a"}, call_id="call_3")),
            step(assistant_message("Fredrik is removed.")),
        ]
    )
    agent = guard.protect(Agent(name="contacts", model=model, tools=[search_contacts, remove_contact]))
    result = await guard.run(agent, "Remove Fredrik, his number is +1 555 0100", outcome=lambda r: "success")
    print(f"  output: {result.final_output}")

    for record in read_records(sink):
        first = record.first_failure
        print(
            f"record: horizon {record.horizon}, FED {record.fed}, cause {first.cause if first else None}, "
            f"decisions {[str(a.decision) for a in record.actions]}, outcome {record.outcome}"
        )


if __name__ == "__main__":
    anyio.run(main)
