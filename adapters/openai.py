"""OpenAI-style tool calls: chat completions ``tool_calls`` and Responses function calls.

Build a :class:`~prefixmon.Toolset` from the function definitions you send to the model,
then run every call of an assistant turn through an episode; each call gets a reply the
model can read, including the reason when the monitor blocked it::

    tools = toolset_from_openai(TOOLS, functions={"get_weather": get_weather})
    monitor = Monitor(tools, policy="block")
    async with monitor.episode(task_id="t-1") as ep:
        feed_messages(ep, messages)                        # user text -> information pool
        messages.append(assistant_message_param(message))
        messages += await run_tool_calls(ep, message)      # role="tool" replies, in order

Malformed or truncated JSON arguments are passed to the monitor as the raw string, so
they become ``schema`` failures with a readable reason instead of a crash. Calls of one
message (parallel tool calls) run one after another in message order, so they get
consecutive depths. The model's call id is the record's ``call_id``
(``gen_ai.tool.call.id``).

:func:`run_chat` and :func:`run_responses` drive a whole run (one episode from the user's
request to the model's final answer) on an ``openai.AsyncOpenAI`` client.
"""

from __future__ import annotations

import json
import os
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, cast

try:
    from openai import AsyncOpenAI
    from openai.types.chat import (
        ChatCompletionAssistantMessageParam,
        ChatCompletionMessage,
        ChatCompletionMessageParam,
        ChatCompletionToolMessageParam,
        ChatCompletionToolUnionParam,
    )
    from openai.types.responses import (
        FunctionToolParam,
        Response,
        ResponseFunctionToolCall,
        ResponseInputItemParam,
        ResponseOutputItem,
        ToolParam,
    )
    from openai.types.responses.response_input_item_param import FunctionCallOutput
except ImportError as e:  # pragma: no cover - exercised only without the extra
    raise ImportError('pip install "prefixmon[openai]"') from e
from pydantic import BaseModel

from prefixmon import Episode, EpisodeRecord, Monitor, Outcome, PendingCall, ToolBlocked, ToolCall, Toolset
from prefixmon.episode import cancellation
from prefixmon.rules.specfile import SpecFile

__all__ = [
    "ChatRun",
    "Executor",
    "ResponsesRun",
    "assistant_message_param",
    "feed_input",
    "feed_messages",
    "result_text",
    "run_chat",
    "run_function_calls",
    "run_responses",
    "run_tool_calls",
    "toolset_from_openai",
]

Executor = Callable[[str, dict[str, Any]], Awaitable[Any]]
"""``async (tool_name, args) -> result``: runs a call when the toolset has no function for it."""

Judge = Callable[[Any], "Outcome | str | None"]
"""Maps the run's final model output to the episode outcome (``success`` / ``partial`` / ``failure``)."""


# -- tool definitions -----------------------------------------------------------------------
def toolset_from_openai(
    tools: Iterable[ChatCompletionToolUnionParam | ToolParam | Mapping[str, Any]],
    *,
    functions: Mapping[str, Callable[..., Any]] | None = None,
    rules: Mapping[str, Mapping[str, Any]] | None = None,
    toolset: Toolset | None = None,
    coercion: Literal["lax", "strict"] = "strict",
    spec: SpecFile | str | os.PathLike[str] | Mapping[str, Any] | None = None,
) -> Toolset:
    """Declare every function tool of an OpenAI ``tools`` list in a toolset.

    The same as :meth:`prefixmon.Toolset.from_openai` (which needs no SDK), typed for the
    SDK's tool params, with one difference: argument values are read ``strict`` by default.
    The tools run here, as your functions (or ``execute=``) called with the decoded JSON
    arguments, and nothing between the model and them converts ``"3"`` into ``3``. Pass
    ``coercion="lax"`` when your functions validate with pydantic (a ``rules`` entry's own
    ``coercion`` wins for its tool). ``spec`` is a spec file merged onto the declared tools
    (see :meth:`prefixmon.Toolset.apply_spec`).
    """
    listed = [cast(Mapping[str, Any], t) for t in tools]
    per_tool: dict[str, Mapping[str, Any]] = {}
    for tool in listed:
        fn = tool.get("function", tool) if isinstance(tool, Mapping) else None
        name = fn.get("name") if isinstance(fn, Mapping) else None
        if isinstance(name, str) and tool.get("type", "function") == "function":
            per_tool[name] = {"coercion": coercion}
    for name, options in (rules or {}).items():
        per_tool[name] = {**per_tool.get(name, {}), **options}
    return Toolset.from_openai(listed, functions=functions, rules=per_tool, toolset=toolset, spec=spec)


def result_text(result: Any) -> str:
    """A tool result as the text of a tool reply (strings as they are, data as JSON)."""
    if isinstance(result, str):
        return result
    if isinstance(result, BaseModel):
        return result.model_dump_json()
    try:
        return json.dumps(result, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return str(result)


def _error_text(exc: BaseException) -> str:
    return f"Error: {type(exc).__name__}: {exc}" if str(exc) else f"Error: {type(exc).__name__}"


async def _execute(pending: PendingCall, execute: Executor | None) -> Any:
    """Run the call to run (a hook's replacement included): its function, else ``execute``."""
    spec = pending.spec
    if execute is None or (spec is not None and spec.func is not None):
        return await pending.run()
    name = pending.call.name
    if pending.replaced and name != pending.verdict.tool:
        # execute= knows every tool by name, so it runs a replacement by another tool too;
        # PendingCall.run hands an executor the emitted tool only, so this runs outside the
        # observers' execution contexts (the tool's own spans do not nest under its call span)
        return await execute(name, pending.args)
    return await pending.run(lambda args: execute(name, args))  # inside the observers' contexts


async def _run_batch(
    episode: Episode, calls: list[tuple[str, str | None, str]], execute: Executor | None, raise_errors: bool
) -> list[tuple[str | None, str]]:
    """Judge the calls of one message as a batch, then run the admitted ones in order: (call id, reply text)."""
    begun = await episode.begin_batch(
        [ToolCall(name=name, args=arguments, call_id=call_id) for name, call_id, arguments in calls]
    )
    replies: list[tuple[str | None, str]] = []
    for (_, call_id, _), pending in zip(calls, begun, strict=True):
        text = str(pending) if isinstance(pending, ToolBlocked) else await _run_one(pending, execute, raise_errors)
        replies.append((call_id, text))
    return replies


async def _run_one(pending: PendingCall, execute: Executor | None, raise_errors: bool) -> str:
    try:
        result = await _execute(pending, execute)
    except ToolBlocked as blocked:  # an observed call of an undeclared tool, and no execute= to run it
        return str(blocked)
    except Exception as exc:
        pending.failed(exc)
        if raise_errors:
            raise
        return _error_text(exc)
    except BaseException as exc:
        if cancellation(exc):
            pending.abandon()
        raise
    pending.done(result)
    return result_text(result)


# -- chat completions -----------------------------------------------------------------------
def _get(obj: Any, key: str) -> Any:
    return obj.get(key) if isinstance(obj, Mapping) else getattr(obj, key, None)


def _chat_calls(message: ChatCompletionMessage | Mapping[str, Any]) -> list[tuple[str, str | None, str]]:
    """(name, id, raw arguments) for each tool call of an assistant message, in order."""
    calls: list[tuple[str, str | None, str]] = []
    for call in _get(message, "tool_calls") or ():
        kind = _get(call, "type") or "function"
        if kind == "function":
            fn = _get(call, "function")
            name, arguments = _get(fn, "name"), _get(fn, "arguments")
        elif kind == "custom":  # free-form input: offered to the tool as its single "input" argument
            custom = _get(call, "custom")
            name, arguments = _get(custom, "name"), json.dumps({"input": _get(custom, "input")})
        else:  # recorded as a call of an unknown tool: a schema failure the model can read
            name, arguments = (f"<{kind} call>" if isinstance(kind, str) else "<call of an unknown type>"), None
        if not isinstance(name, str):
            name = ""  # no function name: an unknown tool, answered like any other refusal
        calls.append((name, _get(call, "id"), arguments if isinstance(arguments, str) else json.dumps(arguments)))
    return calls


async def run_tool_calls(
    episode: Episode,
    message: ChatCompletionMessage | ChatCompletionAssistantMessageParam | Mapping[str, Any],
    *,
    execute: Executor | None = None,
    raise_errors: bool = False,
) -> list[ChatCompletionToolMessageParam]:
    """Run every tool call of a chat completions assistant message through ``episode``.

    The calls are judged together, as one batch (:meth:`Episode.begin_batch`: none sees what
    another returns; a reference only a sibling produces is refused and names it), then run
    one after another in message order (consecutive depths). A blocked call is not run; its
    reply is the monitor's model-readable reason.

    Args:
        episode: the running episode.
        message: ``choice.message`` (or the same message as a dict).
        execute: ``async (name, args) -> result`` for tools without a function in the toolset
            (a replan hook's replacement by another tool included).
        raise_errors: re-raise a tool's own exception instead of replying ``"Error: ..."``.

    Returns:
        One ``{"role": "tool", "tool_call_id": ..., "content": ...}`` per call, in order.
    """
    return [
        {"role": "tool", "tool_call_id": call_id or "", "content": content}
        for call_id, content in await _run_batch(episode, _chat_calls(message), execute, raise_errors)
    ]


def assistant_message_param(message: ChatCompletionMessage) -> ChatCompletionAssistantMessageParam:
    """The assistant message as a request message (to append to ``messages``)."""
    param: dict[str, Any] = {"role": "assistant", "content": message.content}
    if message.tool_calls:
        param["tool_calls"] = [call.model_dump(mode="json", exclude_none=True) for call in message.tool_calls]
    if message.refusal is not None:
        param["refusal"] = message.refusal
    return cast(ChatCompletionAssistantMessageParam, param)


def _content_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    parts: list[str] = []
    for part in content:
        text = _get(part, "text")
        if isinstance(text, str):
            parts.append(text)
    return "\n".join(parts)


def feed_messages(episode: Episode, messages: Iterable[ChatCompletionMessageParam | Mapping[str, Any]]) -> None:
    """Add what the agent has seen in a chat history to the information pool.

    User messages go in as user information; tool replies as tool information; the assistant's
    own text is noted (:meth:`Episode.assistant`: ids it made up do not count as the user's when
    the user repeats them). Feeding the same history again is harmless.
    """
    for msg in messages:
        role = _get(msg, "role")
        text = _content_text(_get(msg, "content")) if role in ("user", "tool", "function", "assistant") else ""
        if not text:
            continue
        if role == "user":
            episode.user(text)
        elif role == "assistant":
            episode.assistant(text)
        else:
            episode.inform(text)


# -- responses ------------------------------------------------------------------------------
def _function_calls(items: Response | Iterable[ResponseOutputItem | Mapping[str, Any]]) -> list[tuple[str, str | None, str]]:
    source = items.output if isinstance(items, Response) else items
    calls: list[tuple[str, str | None, str]] = []
    for item in source:
        if _get(item, "type") != "function_call":
            continue
        name, call_id, arguments = _get(item, "name"), _get(item, "call_id"), _get(item, "arguments")
        if not isinstance(name, str):
            name = ""  # no function name: an unknown tool, answered like any other refusal
        calls.append((name, call_id, arguments if isinstance(arguments, str) else json.dumps(arguments)))
    return calls


async def run_function_calls(
    episode: Episode,
    output: Response | Iterable[ResponseOutputItem | ResponseFunctionToolCall | Mapping[str, Any]],
    *,
    execute: Executor | None = None,
    raise_errors: bool = False,
) -> list[FunctionCallOutput]:
    """Run every ``function_call`` item of a Responses output through ``episode``.

    Same rules as :func:`run_tool_calls`; other output items are ignored.

    Returns:
        One ``{"type": "function_call_output", "call_id": ..., "output": ...}`` per call.
    """
    return [
        {"type": "function_call_output", "call_id": call_id, "output": text}
        for call_id, text in await _run_batch(episode, _function_calls(output), execute, raise_errors)
    ]


def feed_input(episode: Episode, items: str | Iterable[ResponseInputItemParam | Mapping[str, Any]]) -> None:
    """Add what the agent has seen in a Responses ``input`` to the information pool."""
    if isinstance(items, str):
        episode.user(items)
        return
    for item in items:
        kind, role = _get(item, "type"), _get(item, "role")
        if role in ("user", "assistant") and kind in (None, "message"):
            text = _content_text(_get(item, "content"))
            if text:
                (episode.user if role == "user" else episode.assistant)(text)
        elif kind == "function_call_output":
            text = _content_text(_get(item, "output"))
            if text:
                episode.inform(text)


# -- whole runs -----------------------------------------------------------------------------
@dataclass(kw_only=True)
class ChatRun:
    """The result of :func:`run_chat`."""

    messages: list[ChatCompletionMessageParam]
    """The full conversation, ending with the final assistant message."""
    final: ChatCompletionMessage | None
    """The last assistant message without tool calls; ``None`` if ``max_turns`` ran out."""
    record: EpisodeRecord
    """The finished episode."""
    turns: int = 0
    """Model requests made."""


@dataclass(kw_only=True)
class ResponsesRun:
    """The result of :func:`run_responses`."""

    input: list[ResponseInputItemParam | dict[str, Any]] = field(default_factory=list)
    """Every input item sent, plus the model's outputs and the function call outputs."""
    final: Response | None
    """The last response without function calls; ``None`` if ``max_turns`` ran out."""
    record: EpisodeRecord
    turns: int = 0


def _outcome(judge: Judge | None, final: Any) -> Outcome | None:
    if judge is None:
        return None if final is not None else Outcome.FAILURE
    value = judge(final)
    return None if value is None else Outcome(value)


async def run_chat(
    client: AsyncOpenAI,
    monitor: Monitor,
    *,
    model: str,
    messages: Sequence[ChatCompletionMessageParam],
    tools: Sequence[ChatCompletionToolUnionParam],
    task_id: str,
    labels: Mapping[str, str] | None = None,
    execute: Executor | None = None,
    judge: Judge | None = None,
    max_turns: int = 16,
    **create: Any,
) -> ChatRun:
    """Run a chat completions tool loop as one episode, from the request to the final answer.

    The episode starts before the first model request and finishes when the model answers
    without tool calls (or after ``max_turns`` requests, as a failure).

    Args:
        client: an ``openai.AsyncOpenAI`` (or compatible) client.
        monitor: the monitor whose toolset describes ``tools``.
        model, messages, tools: as for ``client.chat.completions.create``.
        task_id, labels: the episode's task id and labels (``model`` is added).
        execute: runs calls whose tool has no function in the toolset.
        judge: maps the final message to the outcome; without one the outcome is left unset.
        max_turns: most model requests.
        **create: further ``chat.completions.create`` arguments.
    """
    history: list[ChatCompletionMessageParam] = list(messages)
    final: ChatCompletionMessage | None = None
    turns = 0
    async with monitor.episode(task_id=task_id, labels={"model": model, **(labels or {})}) as ep:
        feed_messages(ep, history)
        while turns < max_turns:
            turns += 1
            completion = await client.chat.completions.create(model=model, messages=history, tools=tools, **create)
            message = completion.choices[0].message
            history.append(assistant_message_param(message))
            if not message.tool_calls:
                final = message
                break
            replies = await run_tool_calls(ep, message, execute=execute)
            history.extend(replies)
        outcome = _outcome(judge, final)
        if outcome is not None:
            ep.finish(outcome=outcome)
    return ChatRun(messages=history, final=final, record=_record(ep), turns=turns)


async def run_responses(
    client: AsyncOpenAI,
    monitor: Monitor,
    *,
    model: str,
    input: str | Sequence[ResponseInputItemParam],
    tools: Sequence[ToolParam | FunctionToolParam],
    task_id: str,
    labels: Mapping[str, str] | None = None,
    execute: Executor | None = None,
    judge: Judge | None = None,
    max_turns: int = 16,
    **create: Any,
) -> ResponsesRun:
    """Run a Responses API function-calling loop as one episode (see :func:`run_chat`).

    The conversation is kept client-side: each request sends the previous input, the
    model's output items and the ``function_call_output`` items.
    """
    items: list[Any] = [{"role": "user", "content": input}] if isinstance(input, str) else list(input)
    final: Response | None = None
    turns = 0
    async with monitor.episode(task_id=task_id, labels={"model": model, **(labels or {})}) as ep:
        feed_input(ep, items)
        while turns < max_turns:
            turns += 1
            response = await client.responses.create(model=model, input=items, tools=tools, **create)
            items.extend(item.model_dump(mode="json", exclude_none=True, by_alias=True) for item in response.output)
            outputs = await run_function_calls(ep, response, execute=execute)
            if not outputs:
                final = response
                break
            items.extend(outputs)
        outcome = _outcome(judge, final)
        if outcome is not None:
            ep.finish(outcome=outcome)
    return ResponsesRun(input=items, final=final, record=_record(ep), turns=turns)


def _record(ep: Episode) -> EpisodeRecord:
    record = ep.record
    if record is None:  # pragma: no cover - the episode has exited
        raise RuntimeError("the episode has no record")
    return record
