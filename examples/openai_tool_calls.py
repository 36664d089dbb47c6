"""OpenAI tool calls: a chat completions loop whose every tool call is checked first.

Run: ``python examples/openai_tool_calls.py``. It runs offline: a real ``openai.AsyncOpenAI``
client talks to a scripted model (an ``httpx2`` transport that answers with the openai
package's own ``ChatCompletion`` objects). The model first texts the phone number the user
gave as if it were a person id; the monitor blocks that call and the model reads why in the
tool reply, searches, and sends the message with the real id. Point ``client`` at the real
API (``AsyncOpenAI()``) to run the same loop against a live model.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any, Literal

import anyio

try:
    import httpx2
    from openai import AsyncOpenAI
    from openai.types.chat import ChatCompletion, ChatCompletionMessage, ChatCompletionToolUnionParam
    from openai.types.chat.chat_completion import Choice
    from openai.types.chat.chat_completion_message_function_tool_call import ChatCompletionMessageFunctionToolCall, Function

    from prefixmon import Monitor, Outcome
    from prefixmon.adapters.openai import run_chat, toolset_from_openai
except ImportError as e:  # the example's extra is missing: say exactly what to install
    raise SystemExit(f'{e}\nThis example needs the openai extra: pip install "prefixmon[openai]"') from None

TOOLS: list[ChatCompletionToolUnionParam] = [
    {
        "type": "function",
        "function": {
            "name": "search_contacts",
            "description": "Find contacts by name; returns their person_id values.",
            "parameters": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "send_message",
            "description": "Text a contact, by the person_id search_contacts returned.",
            "parameters": {
                "type": "object",
                "properties": {"person_id": {"type": "string"}, "text": {"type": "string"}},
                "required": ["person_id", "text"],
            },
        },
    },
]
CONTACTS = {"p-17": {"person_id": "p-17", "name": "Fredrik Olsen", "phone": "+1 555 0100"}}
SENT: list[dict[str, str]] = []


def search_contacts(name: str) -> dict[str, Any]:
    return {"contacts": [c for c in CONTACTS.values() if name.casefold() in c["name"].casefold()]}


def send_message(person_id: str, text: str) -> dict[str, Any]:
    SENT.append({"person_id": person_id, "text": text})
    return {"status": "sent", "to": CONTACTS[person_id]["phone"]}


def scripted_model() -> AsyncOpenAI:
    """A client whose 'model' replays a script, reading the tool replies it is sent."""

    def tool_call(call_id: str, name: str, args: dict[str, Any]) -> ChatCompletionMessage:
        call = ChatCompletionMessageFunctionToolCall(
            id=call_id, type="function", function=Function(name=name, arguments=json.dumps(args))
        )
        return ChatCompletionMessage(role="assistant", tool_calls=[call])

    def answer(request: httpx2.Request) -> httpx2.Response:
        body = json.loads(request.content)
        last = body["messages"][-1]
        if last["role"] == "user":
            message = tool_call("call_1", "send_message", {"person_id": "+1 555 0100", "text": "running late"})
        elif last["tool_call_id"] == "call_1":  # blocked: the reply says to search first
            message = tool_call("call_2", "search_contacts", {"name": "Fredrik"})
        elif last["tool_call_id"] == "call_2":
            person_id = json.loads(last["content"])["contacts"][0]["person_id"]
            message = tool_call("call_3", "send_message", {"person_id": person_id, "text": "running late"})
        else:
            message = ChatCompletionMessage(role="assistant", content="Fredrik knows you are running late.")
        reason: Literal["tool_calls", "stop"] = "tool_calls" if message.tool_calls else "stop"
        completion = ChatCompletion(
            id="chatcmpl-scripted",
            object="chat.completion",
            created=0,
            model=body["model"],
            choices=[Choice(index=0, finish_reason=reason, message=message)],
        )
        return httpx2.Response(200, json=completion.model_dump(mode="json", exclude_none=True))

    transport = httpx2.MockTransport(answer)
    return AsyncOpenAI(
        api_key="offline", base_url="http://scripted.invalid/v1", http_client=httpx2.AsyncClient(transport=transport)
    )


async def main() -> None:
    tools = toolset_from_openai(
        TOOLS,
        functions={"search_contacts": search_contacts, "send_message": send_message},
        rules={"search_contacts": {"produces": "person_id"}, "send_message": {"refs": {"person_id": "person_id"}}},
    )
    records = Path(tempfile.mkdtemp()) / "openai.jsonl"
    monitor = Monitor(tools, policy="block", sink=records)
    run = await run_chat(
        scripted_model(),
        monitor,
        model="scripted",
        messages=[{"role": "user", "content": "Text Fredrik (+1 555 0100) that I am running late"}],
        tools=TOOLS,
        task_id="text-fredrik",
        judge=lambda final: Outcome.SUCCESS if SENT else Outcome.FAILURE,
    )
    for message in run.messages:
        m: dict[str, Any] = dict(message)
        if m["role"] == "tool":
            print(f"tool    [{m['tool_call_id']}] {m['content']}")
        elif m.get("tool_calls"):
            calls = ", ".join(f"{c['function']['name']}({c['function']['arguments']})" for c in m["tool_calls"])
            print(f"model   {calls}")
        else:
            print(f"{m['role']:<7} {m['content']}")
    record = run.record
    failure = record.first_failure
    print(f"\nhorizon {record.horizon}, FED {record.fed}, cause {failure.cause if failure else None}, outcome {record.outcome}")
    print(f"record written to {records}")


if __name__ == "__main__":
    anyio.run(main)
