"""OpenAI-style tool calls: toolsets from function definitions, tool replies, whole runs.

The model is scripted: a real ``openai.AsyncOpenAI`` client talks to an ``httpx2`` transport (the HTTP client openai 3 uses)
that answers with ``ChatCompletion`` / ``Response`` objects built from the openai package's
own types, and keeps every request so the tests can read what the model was shown.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Generator, Sequence
from pathlib import Path
from typing import Any, Literal

import httpx2
import pytest

pytest.importorskip("openai")

from openai import AsyncOpenAI
from openai.types.chat import ChatCompletion, ChatCompletionMessage, ChatCompletionToolUnionParam
from openai.types.chat.chat_completion import Choice
from openai.types.chat.chat_completion_message_function_tool_call import (
    ChatCompletionMessageFunctionToolCall,
    Function,
)
from openai.types.responses import FunctionToolParam, Response, ResponseFunctionToolCall, ResponseOutputMessage
from openai.types.responses.response_output_text import ResponseOutputText

from prefixmon import Cause, Decision, Monitor, Outcome, SpecError, ToolCall, TrackedState, Verdict, read_records
from prefixmon.adapters.openai import (
    feed_messages,
    result_text,
    run_chat,
    run_function_calls,
    run_responses,
    run_tool_calls,
    toolset_from_openai,
)

CONTACTS = {"p-17": {"person_id": "p-17", "name": "Fredrik Olsen", "phone": "+1 555 0100"}}

CHAT_TOOLS: list[ChatCompletionToolUnionParam] = [
    {
        "type": "function",
        "function": {
            "name": "search_contacts",
            "description": "Find contacts by name.",
            "parameters": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "send_message",
            "description": "Text a contact by person_id.",
            "parameters": {
                "type": "object",
                "properties": {"person_id": {"type": "string"}, "text": {"type": "string"}},
                "required": ["person_id", "text"],
            },
        },
    },
]
RESPONSES_TOOLS: list[FunctionToolParam] = [
    {"type": "function", "name": t["function"]["name"], "parameters": dict(t["function"]["parameters"]), "strict": False}  # type: ignore[typeddict-item]
    for t in CHAT_TOOLS
]
RULES: dict[str, dict[str, Any]] = {
    "search_contacts": {"produces": "person_id"},
    "send_message": {"refs": {"person_id": "person_id"}},
}


class Contacts:
    """The real tools behind the definitions, with a log of what ran."""

    def __init__(self) -> None:
        self.ran: list[tuple[str, dict[str, Any]]] = []

    async def search_contacts(self, name: str) -> dict[str, Any]:
        self.ran.append(("search_contacts", {"name": name}))
        return {"contacts": [c for c in CONTACTS.values() if name.casefold() in c["name"].casefold()]}

    async def send_message(self, person_id: str, text: str) -> dict[str, Any]:
        self.ran.append(("send_message", {"person_id": person_id, "text": text}))
        if person_id not in CONTACTS:
            raise LookupError(f"no contact {person_id!r}")
        return {"status": "sent", "to": CONTACTS[person_id]["phone"]}

    def functions(self) -> dict[str, Callable[..., Any]]:
        return {"search_contacts": self.search_contacts, "send_message": self.send_message}


def monitor_for(contacts: Contacts, *, policy: str = "block", **rules: Any) -> Monitor:
    return Monitor(toolset_from_openai(CHAT_TOOLS, functions=contacts.functions(), rules=rules or RULES), policy=policy)


def call(call_id: str, name: str, arguments: str) -> ChatCompletionMessageFunctionToolCall:
    return ChatCompletionMessageFunctionToolCall(id=call_id, type="function", function=Function(name=name, arguments=arguments))


def assistant(*calls: ChatCompletionMessageFunctionToolCall, content: str | None = None) -> ChatCompletionMessage:
    return ChatCompletionMessage(role="assistant", content=content, tool_calls=list(calls) or None)


class ScriptedModel:
    """Answers each request with the next scripted model output and keeps the requests."""

    def __init__(self, outputs: Sequence[ChatCompletionMessage | list[Any]]) -> None:
        self.outputs = list(outputs)
        self.requests: list[dict[str, Any]] = []

    def handler(self, request: httpx2.Request) -> httpx2.Response:
        body = json.loads(request.content)
        self.requests.append(body)
        out = self.outputs[len(self.requests) - 1]
        if request.url.path.endswith("/chat/completions"):
            assert isinstance(out, ChatCompletionMessage)
            reason: Literal["tool_calls", "stop"] = "tool_calls" if out.tool_calls else "stop"
            payload: Any = ChatCompletion(
                id=f"chatcmpl-{len(self.requests)}",
                object="chat.completion",
                created=0,
                model=body["model"],
                choices=[Choice(index=0, finish_reason=reason, message=out)],
            )
        else:
            payload = Response(
                id=f"resp-{len(self.requests)}",
                object="response",
                created_at=0,
                model=body["model"],
                output=out,  # type: ignore[arg-type]
                parallel_tool_calls=True,
                tool_choice="auto",
                tools=[],
            )
        return httpx2.Response(200, json=payload.model_dump(mode="json", by_alias=True, exclude_none=True))

    def client(self) -> AsyncOpenAI:
        return AsyncOpenAI(
            api_key="scripted",
            base_url="http://scripted.invalid/v1",
            http_client=httpx2.AsyncClient(transport=httpx2.MockTransport(self.handler)),
            max_retries=0,
        )


class TestToolsetFromOpenAI:
    """Declaring tools from OpenAI function definitions."""

    def test_chat_responses_and_bare_definitions(self) -> None:
        """Chat tools, Responses tools and bare definitions all become specs with their schemas."""
        bare = {"name": "ping", "parameters": {"type": "object", "properties": {}}}
        tools = toolset_from_openai([CHAT_TOOLS[0], RESPONSES_TOOLS[1], bare, {"type": "web_search"}])
        assert tools.names == ["search_contacts", "send_message", "ping"]
        assert tools["send_message"].parameters["required"] == ["person_id", "text"]
        assert tools["search_contacts"].description == "Find contacts by name."

    def test_rules_and_functions_attach(self) -> None:
        """rules= become add_schema options and functions= the implementations."""
        contacts = Contacts()
        tools = toolset_from_openai(CHAT_TOOLS, functions=contacts.functions(), rules=RULES)
        assert tools["send_message"].refs[0][0] == "person_id"
        assert tools["search_contacts"].func is not None

    def test_bad_definitions_say_where(self) -> None:
        """A nameless definition, or rules for an unlisted tool, is a SpecError naming the place."""
        with pytest.raises(SpecError, match=r"tools\[1\]: a function definition needs a non-empty 'name'"):
            toolset_from_openai([CHAT_TOOLS[0], {"type": "function", "function": {"parameters": {}}}])
        with pytest.raises(SpecError, match="rules name tools that are not in the tools list: nope"):
            toolset_from_openai(CHAT_TOOLS, rules={"nope": {}})
        with pytest.raises(SpecError, match=r"rules\['send_message'\]: .*unexpected keyword argument 'ref'"):
            toolset_from_openai(CHAT_TOOLS, rules={"send_message": {"ref": {"person_id": "person_id"}}})


class TestRunToolCalls:
    """One assistant message's tool calls, run through an episode."""

    async def test_parallel_calls_get_consecutive_depths_in_order(self) -> None:
        """Calls of one message are judged as one batch and run in message order, at depths 1..n.

        The send uses an id only its sibling search returns: the model could not have seen it,
        so it is refused and told to wait; sent again in the next message, it runs.
        """
        contacts = Contacts()
        monitor = monitor_for(contacts)
        message = assistant(
            call("call_a", "search_contacts", '{"name": "fred"}'),
            call("call_b", "search_contacts", '{"name": "olsen"}'),
            call("call_c", "send_message", '{"person_id": "p-17", "text": "hi"}'),
        )
        async with monitor.episode(task_id="parallel") as ep:
            replies = await run_tool_calls(ep, message)
            again = await run_tool_calls(ep, assistant(call("call_d", "send_message", '{"person_id": "p-17", "text": "hi"}')))
        assert [r["tool_call_id"] for r in replies] == ["call_a", "call_b", "call_c"]
        assert "search_contacts (call 1 of this batch) produces them but has not returned" in str(replies[2]["content"])
        assert json.loads(str(again[0]["content"])) == {"status": "sent", "to": "+1 555 0100"}
        assert ep.record is not None
        assert [(a.depth, a.call_id) for a in ep.record.actions] == [(1, "call_a"), (2, "call_b"), (3, "call_c"), (4, "call_d")]
        assert ep.record.fed == 3 and ep.record.first_failure is not None
        assert ep.record.first_failure.cause is Cause.DEPENDENCY
        assert [name for name, _ in contacts.ran] == ["search_contacts", "search_contacts", "send_message"]

    async def test_a_duplicate_write_is_reported_and_runs(self) -> None:
        """The same message twice in one batch: the second is a duplicate_call finding; both run (default policy)."""
        contacts = Contacts()
        send = '{"person_id": "p-17", "text": "hi"}'
        async with monitor_for(contacts).episode(task_id="duplicate") as ep:
            await run_tool_calls(ep, assistant(call("a", "search_contacts", '{"name": "fred"}')))
            await run_tool_calls(ep, assistant(call("b", "send_message", send), call("c", "send_message", send)))
        assert ep.record is not None
        assert [(a.call_id, a.code, a.reached_environment) for a in ep.record.actions] == [
            ("a", None, True),
            ("b", None, True),
            ("c", "duplicate_call", True),
        ]
        assert [name for name, _ in contacts.ran] == ["search_contacts", "send_message", "send_message"]

    async def test_independent_parallel_calls_are_unaffected(self) -> None:
        """Two different searches in one message both run."""
        contacts = Contacts()
        message = assistant(call("a", "search_contacts", '{"name": "fred"}'), call("b", "search_contacts", '{"name": "olsen"}'))
        async with monitor_for(contacts).episode(task_id="independent") as ep:
            await run_tool_calls(ep, message)
        assert ep.record is not None and ep.record.executable
        assert [name for name, _ in contacts.ran] == ["search_contacts", "search_contacts"]

    @pytest.mark.parametrize(
        "arguments",
        ['{"person_id": "p-17", "text": "hi"', '{"person_id": "p-17", "te', "person_id=p-17", '["p-17"]'],
        ids=["truncated", "cut-mid-key", "not-json", "not-an-object"],
    )
    async def test_malformed_arguments_are_schema_failures_the_model_reads(self, arguments: str) -> None:
        """Malformed or truncated JSON is not run; the reply says why and the record says schema."""
        contacts = Contacts()
        monitor = monitor_for(contacts)
        async with monitor.episode(task_id="malformed") as ep:
            replies = await run_tool_calls(ep, assistant(call("call_1", "send_message", arguments)))
        content = str(replies[0]["content"])
        assert content.startswith("Call to 'send_message' was not run:")
        assert "JSON" in content
        assert contacts.ran == []
        assert ep.record is not None and ep.record.first_failure is not None
        assert ep.record.first_failure.cause is Cause.SCHEMA
        assert ep.record.actions[0].decision is Decision.BLOCK

    async def test_tool_exception_is_a_readable_state_consistency_failure(self) -> None:
        """A tool that raises gets an 'Error: ...' reply and a state_consistency record (observe)."""
        contacts = Contacts()
        monitor = monitor_for(contacts, policy="observe", search_contacts={"produces": "person_id"})
        async with monitor.episode(task_id="raises") as ep:
            replies = await run_tool_calls(ep, assistant(call("c1", "send_message", '{"person_id": "p-99", "text": "x"}')))
        assert replies[0]["content"] == "Error: LookupError: no contact 'p-99'"
        assert ep.record is not None and ep.record.first_failure is not None
        assert ep.record.first_failure.cause is Cause.STATE_CONSISTENCY
        assert ep.record.actions[0].reached_environment

    async def test_unknown_tool_lists_the_available_ones(self) -> None:
        """A call to a tool that was never declared is blocked with the available tool names."""
        monitor = monitor_for(Contacts())
        async with monitor.episode(task_id="unknown") as ep:
            replies = await run_tool_calls(
                ep,
                {
                    "role": "assistant",
                    "tool_calls": [{"id": "x", "type": "function", "function": {"name": "delete_all", "arguments": "{}"}}],
                },
            )
        assert "search_contacts" in str(replies[0]["content"])
        assert ep.record is not None and ep.record.actions[0].cause is Cause.SCHEMA

    async def test_nameless_and_unsupported_calls_are_answered_not_raised(self) -> None:
        """A call without a function name or of an unknown type gets a reply and a schema record; the others still run."""
        monitor = monitor_for(Contacts())
        async with monitor.episode(task_id="odd") as ep:
            replies = await run_tool_calls(
                ep,
                {
                    "role": "assistant",
                    "tool_calls": [
                        {"id": "a", "type": "function", "function": {"arguments": "{}"}},
                        {"id": "b", "type": "browser", "browser": {}},
                        {"id": "d", "type": {"token": "sk-live-SECRET"}},
                        {
                            "id": "c",
                            "type": "function",
                            "function": {"name": "search_contacts", "arguments": '{"name": "Amara"}'},
                        },
                    ],
                },
            )
        assert [r["tool_call_id"] for r in replies] == ["a", "b", "d", "c"]
        assert all("no tool named" in str(r["content"]) for r in replies[:3])
        assert ep.record is not None
        assert [a.cause for a in ep.record.actions] == [Cause.SCHEMA, Cause.SCHEMA, Cause.SCHEMA, None]
        assert [a.tool for a in ep.record.actions[1:3]] == ["<browser call>", "<call of an unknown type>"]  # never a value's repr

    async def test_execute_runs_tools_without_functions(self) -> None:
        """execute= runs calls of tools declared without a function."""
        seen: list[tuple[str, dict[str, Any]]] = []

        async def execute(name: str, args: dict[str, Any]) -> str:
            seen.append((name, args))
            return "done"

        monitor = Monitor(toolset_from_openai(CHAT_TOOLS), policy="block")
        async with monitor.episode(task_id="execute") as ep:
            replies = await run_tool_calls(ep, assistant(call("c1", "search_contacts", '{"name": "a"}')), execute=execute)
        assert replies[0]["content"] == "done"
        assert seen == [("search_contacts", {"name": "a"})]

    def test_agent_closed_outside_any_loop_mid_call(self, tmp_path: Path) -> None:
        """The agent's coroutine closed during a tool call with no loop running (a crashed
        loop, garbage collection): the close goes through and the episode reads cancelled."""

        class _Suspend:
            def __await__(self) -> Generator[None, None, None]:
                yield

        async def execute(name: str, args: dict[str, Any]) -> str:
            await _Suspend()
            return "done"

        path = tmp_path / "r.jsonl"
        monitor = Monitor(toolset_from_openai(CHAT_TOOLS), sink=path)

        async def agent() -> None:
            async with monitor.episode(task_id="closed") as ep:
                await run_tool_calls(ep, assistant(call("c1", "search_contacts", '{"name": "a"}')), execute=execute)

        coro = agent()
        coro.send(None)
        coro.close()
        (record,) = read_records(path)
        assert record.status == "cancelled"
        (action,) = record.actions
        assert action.reached_environment and action.error == "cancelled before the call finished"

    async def test_execute_runs_a_replacement_by_another_tool(self) -> None:
        """A replan hook's call of another tool runs through the same name-aware execute=."""
        seen: list[tuple[str, dict[str, Any]]] = []

        async def execute(name: str, args: dict[str, Any]) -> Any:
            seen.append((name, args))
            return {"contacts": [CONTACTS["p-17"]]} if name == "search_contacts" else {"status": "sent"}

        async def look_up_first(verdict: Verdict, emitted: ToolCall, state: TrackedState) -> ToolCall:
            return ToolCall(name="search_contacts", args={"name": "Fredrik"})

        monitor = Monitor(toolset_from_openai(CHAT_TOOLS, rules=RULES), policy="replan", replan=look_up_first)
        emitted = call("c1", "send_message", '{"person_id": "p-99", "text": "hi"}')
        async with monitor.episode(task_id="replan") as ep:
            replies = await run_tool_calls(ep, assistant(emitted), execute=execute)
            assert ep.state.is_bound("person_id", "p-17")  # the replacement's result was tracked
        assert seen == [("search_contacts", {"name": "Fredrik"})]
        assert json.loads(str(replies[0]["content"])) == {"contacts": [CONTACTS["p-17"]]}
        assert ep.record is not None
        (action,) = ep.record.actions
        assert action.decision is Decision.REPLAN and action.replacement == "search_contacts"
        assert action.cause is Cause.DEPENDENCY and action.error is None and not action.reached_environment


class TestInformationPool:
    """User messages and tool replies reach the information pool."""

    async def test_grounded_argument_needs_the_user_to_have_said_it(self) -> None:
        """A grounded text is information-executable only after the user message that contains it is fed."""
        rules: dict[str, dict[str, Any]] = {**RULES, "send_message": {"refs": {"person_id": "person_id"}, "grounded": ["text"]}}
        contacts = Contacts()
        search = assistant(call("c1", "search_contacts", '{"name": "fred"}'))
        send = assistant(call("c2", "send_message", '{"person_id": "p-17", "text": "running late"}'))
        for fed, executable in ((False, False), (True, True)):
            monitor = Monitor(toolset_from_openai(CHAT_TOOLS, functions=contacts.functions(), rules=rules), policy="observe")
            async with monitor.episode(task_id="grounded") as ep:
                if fed:
                    feed_messages(
                        ep, [{"role": "system", "content": "be brief"}, {"role": "user", "content": "Text Fredrik: running late"}]
                    )
                await run_tool_calls(ep, search)
                await run_tool_calls(ep, send)
            assert ep.record is not None and ep.record.executable is executable
            if not executable:
                assert ep.record.actions[1].cause is Cause.INFORMATION


class TestRunChat:
    """A whole chat completions run against a scripted model."""

    async def test_blocked_call_reason_reaches_the_model_and_the_repair_runs(self) -> None:
        """The invented id is blocked, the model reads why, searches, and the repaired call runs."""
        contacts = Contacts()
        monitor = monitor_for(contacts)
        model = ScriptedModel(
            [
                assistant(call("call_1", "send_message", '{"person_id": "+1 555 0100", "text": "running late"}')),
                assistant(call("call_2", "search_contacts", '{"name": "Fredrik"}')),
                assistant(call("call_3", "send_message", '{"person_id": "p-17", "text": "running late"}')),
                assistant(content="Done: Fredrik has been told."),
            ]
        )
        run = await run_chat(
            model.client(),
            monitor,
            model="scripted-1",
            messages=[{"role": "user", "content": "Text Fredrik (+1 555 0100): running late"}],
            tools=CHAT_TOOLS,
            task_id="chat-e2e",
            judge=lambda final: (
                Outcome.SUCCESS
                if final is not None and ("send_message", {"person_id": "p-17", "text": "running late"}) in contacts.ran
                else Outcome.FAILURE
            ),
        )
        # what the model was shown after the block
        tool_msg = model.requests[1]["messages"][-1]
        assert tool_msg["role"] == "tool" and tool_msg["tool_call_id"] == "call_1"
        assert "needs a person_id returned by an earlier call (search_contacts produces them)" in tool_msg["content"]
        assert model.requests[0]["tools"][1]["function"]["name"] == "send_message"
        # what ran
        assert [name for name, _ in contacts.ran] == ["search_contacts", "send_message"]
        # the record
        record = run.record
        assert (record.horizon, record.fed, record.executable) == (3, 1, False)
        assert record.first_failure is not None and record.first_failure.cause is Cause.DEPENDENCY
        assert record.outcome is Outcome.SUCCESS
        assert record.labels["model"] == "scripted-1"
        assert [a.decision for a in record.actions] == [Decision.BLOCK, Decision.ALLOW, Decision.ALLOW]
        assert not record.invalid_reached_environment
        assert run.final is not None and run.final.content == "Done: Fredrik has been told."
        assert run.turns == 4

    async def test_running_out_of_turns_is_a_failure(self) -> None:
        """Without a final answer within max_turns, the outcome is failure."""
        contacts = Contacts()
        model = ScriptedModel([assistant(call(f"c{i}", "search_contacts", '{"name": "x"}')) for i in range(3)])
        run = await run_chat(
            model.client(),
            monitor_for(contacts),
            model="m",
            messages=[{"role": "user", "content": "hi"}],
            tools=CHAT_TOOLS,
            task_id="t",
            max_turns=2,
        )
        assert run.final is None and run.turns == 2
        assert run.record.outcome is Outcome.FAILURE and run.record.horizon == 2


class TestRunResponses:
    """A whole Responses API run against a scripted model."""

    async def test_function_call_outputs_carry_the_reason_and_the_repair_runs(self) -> None:
        """Blocked function calls answer with function_call_output items the model reads."""
        contacts = Contacts()
        monitor = monitor_for(contacts)

        def fc(call_id: str, name: str, arguments: str) -> ResponseFunctionToolCall:
            return ResponseFunctionToolCall(
                type="function_call", call_id=call_id, name=name, arguments=arguments, id=f"fc_{call_id}"
            )

        final = ResponseOutputMessage(
            id="msg_1",
            type="message",
            role="assistant",
            status="completed",
            content=[ResponseOutputText(type="output_text", text="Sent.", annotations=[])],
        )
        model = ScriptedModel(
            [
                [
                    fc("call_1", "search_contacts", '{"name": "Fredrik"}'),
                    fc("call_2", "send_message", '{"person_id": "p-17", "text": "late"'),
                ],
                [fc("call_3", "send_message", '{"person_id": "p-17", "text": "late"}')],
                [final],
            ]
        )
        run = await run_responses(
            model.client(),
            monitor,
            model="scripted-r",
            input="Tell Fredrik I am late",
            tools=RESPONSES_TOOLS,
            task_id="responses-e2e",
            judge=lambda r: "success" if r is not None else "failure",
        )
        second = model.requests[1]["input"]
        outputs = [item for item in second if item.get("type") == "function_call_output"]
        assert [o["call_id"] for o in outputs] == ["call_1", "call_2"]
        assert "not valid JSON" in outputs[1]["output"]
        assert [name for name, _ in contacts.ran] == ["search_contacts", "send_message"]
        record = run.record
        assert (record.horizon, record.fed) == (3, 2)
        assert record.first_failure is not None and record.first_failure.cause is Cause.SCHEMA
        assert record.outcome is Outcome.SUCCESS
        assert [a.call_id for a in record.actions] == ["call_1", "call_2", "call_3"]

    async def test_run_function_calls_ignores_other_items(self) -> None:
        """Only function_call items run; messages and reasoning are skipped."""
        contacts = Contacts()
        monitor = monitor_for(contacts)
        items: list[Any] = [
            {"type": "message", "role": "assistant", "content": []},
            {"type": "function_call", "call_id": "k", "name": "search_contacts", "arguments": '{"name": "o"}'},
        ]
        async with monitor.episode(task_id="items") as ep:
            outputs = await run_function_calls(ep, items)
        assert outputs == [
            {"type": "function_call_output", "call_id": "k", "output": result_text({"contacts": [CONTACTS["p-17"]]})}
        ]


async def test_feed_messages_keeps_ids_the_assistant_made_up_from_the_user() -> None:
    """The assistant writes an id no tool returned; the user repeats it: it is still the assistant's."""
    async with Monitor(toolset_from_openai(CHAT_TOOLS), policy="observe").episode(task_id="echo") as ep:
        feed_messages(
            ep,
            [
                {"role": "user", "content": "Who is p-17?"},
                {"role": "assistant", "content": "p-17 is Fredrik; his manager is p-99."},
                {"role": "user", "content": "Then text p-99 instead."},
            ],
        )
        assert ep.state.user_said("p-17") and not ep.state.agent_made_up("p-17")
        assert ep.state.agent_made_up("p-99") and not ep.state.user_said("p-99")
