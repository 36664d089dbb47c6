"""LangChain 1.x integration: an agent middleware that checks every tool call.

Add :class:`PrefixmonMiddleware` to ``create_agent``; each invocation of the agent (from
``before_agent`` to ``after_agent``) is one episode::

    from langchain.agents import create_agent
    from prefixmon import Monitor, Toolset
    from prefixmon.adapters.langchain import PrefixmonMiddleware

    monitor = Monitor(Toolset(), policy="block", sink="episodes.jsonl")
    agent = create_agent(model, tools=[...], middleware=[PrefixmonMiddleware(monitor)])

How the monitor acts through the middleware hooks:

- ``wrap_tool_call`` / ``awrap_tool_call`` judge each call before the tool runs (sync and
  async agents alike). A blocked call is answered with an error ``ToolMessage`` carrying the
  monitor's model-readable reason; the tool does not run.
- Tools the toolset does not declare are declared from the agent's own tools (their JSON
  schemas, seen in ``wrap_model_call``), so zero configuration gives schema checks; the tools
  offered to the model are the exposed ones. Calls to unknown tools are recorded too.
- **Escalation** through LangGraph interrupts: give the monitor
  ``escalate=interrupt_escalation`` (and the agent a checkpointer). An escalated call calls
  ``interrupt()`` with a request describing the call; resume with ``Command(resume=...)``
  given ``"approve"``, ``"deny"``, ``{"decision": "edit", "args": {...}}`` (or an
  :class:`~prefixmon.Approve` / :class:`~prefixmon.Edit` / :class:`~prefixmon.Deny`).
  Nothing is recorded before the interrupt, and the episode finds a call id it has already
  admitted or recorded (``Episode.pending`` / ``Episode.action_for``), so the code LangGraph
  re-runs on resume (the wrapper up to the interrupt, or a tool that interrupts itself) does
  not record anything twice. Async agents need Python 3.11+ for this (LangGraph's
  ``interrupt()`` reads its config from a context variable asyncio tasks carry from 3.11 on).
- A tool that raises is recorded as a state-consistency failure and answered with an error
  ``ToolMessage`` (``tool_errors="raise"`` re-raises instead, as LangChain does by default).
- The conversation's human messages and earlier tool messages go into the information pool
  when the episode starts; every tool result when it arrives. The call id is the tool call's
  ``id``.

The episode is opened (``Monitor.open_episode``) in ``before_agent`` and closed
(``Episode.aclose``) in ``after_agent``; it lives in the middleware instance while the graph
is paused, keyed by an id kept in the agent state; resuming in another process starts over
with a new episode. Sync agents run the monitor's async work with ``anyio.run``.
"""

from __future__ import annotations

import contextvars
import functools
import json
import sys
import threading
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, TypeVar

import anyio
from typing_extensions import NotRequired

from prefixmon import (
    ActionRecord,
    Approve,
    Deny,
    Edit,
    Episode,
    Monitor,
    Outcome,
    PendingCall,
    ToolBlocked,
    ToolCall,
    Verdict,
)

try:
    from langchain.agents.middleware import AgentMiddleware, AgentState, ModelRequest, ToolCallRequest
    from langchain.agents.middleware.types import ModelCallResult, ModelResponse, PrivateStateAttr
    from langchain_core.messages import HumanMessage, ToolMessage
    from langchain_core.tools import BaseTool
    from langchain_core.utils.function_calling import convert_to_openai_tool
    from langgraph.errors import GraphBubbleUp
    from langgraph.runtime import Runtime
    from langgraph.types import Command, interrupt
except ImportError as e:  # pragma: no cover - exercised only without the extra
    raise ImportError('pip install "prefixmon[langchain]"') from e

__all__ = ("PrefixmonMiddleware", "PrefixmonState", "interrupt_escalation", "parse_answer")

T = TypeVar("T")

STATE_KEY = "prefixmon_episode"
"""The agent-state key holding the id of the invocation's episode."""

_UNFINISHED = "RuntimeError"
"""The error an episode is closed with when its invocation never reached ``after_agent``."""

_ANSWER: contextvars.ContextVar[Approve | Edit | Deny | None] = contextvars.ContextVar("prefixmon_langchain_answer", default=None)


class PrefixmonState(AgentState[Any]):
    """Agent state with the (private) id of the open episode."""

    prefixmon_episode: NotRequired[Annotated[str | None, PrivateStateAttr]]


async def interrupt_escalation(verdict: Verdict, call: ToolCall) -> Approve | Edit | Deny:
    """Escalation hook that routes escalations through LangGraph ``interrupt``.

    Pass it as ``Monitor(..., escalate=interrupt_escalation)``. Inside an agent with
    :class:`PrefixmonMiddleware` it returns the answer the graph was resumed with; anywhere
    else (or for a call whose arguments do not even fit the schema) it denies.
    """
    answer = _ANSWER.get()
    if answer is not None:
        return answer
    if verdict.cause is not None and verdict.cause.value == "schema":
        return Deny(f"nothing to approve: {verdict.reason}")
    return Deny("this call needs approval, which only a LangGraph agent with PrefixmonMiddleware can ask for")


def parse_answer(value: Any) -> Approve | Edit | Deny:
    """Turn a ``Command(resume=...)`` value into an escalation answer.

    Accepted: an ``Approve`` / ``Edit`` / ``Deny``; ``True`` / ``"approve"``; ``False`` /
    ``"deny"``; or a mapping ``{"decision": "approve" | "edit" | "deny", "args": {...},
    "reason": "..."}``. Anything else denies, saying what was received.
    """
    if isinstance(value, (Approve, Edit, Deny)):
        return value
    if value is True or value == "approve":
        return Approve()
    if value is False or value == "deny":
        return Deny()
    if isinstance(value, Mapping):
        decision = value.get("decision", value.get("type"))
        if decision == "approve":
            return Approve()
        if decision == "edit" and isinstance(value.get("args"), Mapping):
            return Edit(dict(value["args"]))
        if decision in ("deny", "reject"):
            reason = value.get("reason", value.get("message"))
            return Deny(str(reason)) if reason else Deny()
    return Deny(f"unrecognised escalation answer {value!r}; expected approve, edit or deny")


def _run_sync(func: Callable[[], Awaitable[T]]) -> T:
    """Run monitor work from a sync agent, whose nodes run in threads with no event loop."""
    return anyio.run(func)


@dataclass(eq=False)
class _Live:
    """One open episode across the graph's nodes and interrupts.

    The calls in flight are the episode's own (``Episode.pending`` / ``Episode.action_for``
    by call id), so the code LangGraph re-runs on resume finds them there.
    """

    episode: Episode
    lock: threading.Lock = field(default_factory=threading.Lock)
    """Serialises monitor work of a sync agent, whose tool calls run in threads."""
    tools: dict[str, BaseTool] = field(default_factory=dict)
    model_calls: int = 0
    """Model calls so far: the tool calls of one model response share this number."""
    emitted_in: dict[str, int] = field(default_factory=dict)
    """The model call whose response emitted each recorded call id."""

    def rerun_of(self, call_id: str) -> ActionRecord | None:
        """The recorded call that LangGraph runs again on resume, or ``None`` for a new call.

        A call id seen in an earlier model response is a new call that reuses the id (some
        servers number calls per response), not a re-run.
        """
        if self.emitted_in.get(call_id) != self.model_calls:
            return None
        return self.episode.action_for(call_id)


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(c if isinstance(c, str) else str(c.get("text", "")) if isinstance(c, Mapping) else "" for c in content)
    return str(content)


def _tool_message_for(result: ToolMessage | Command[Any], call_id: str) -> ToolMessage | None:
    if isinstance(result, ToolMessage):
        return result
    update = result.update
    messages = update.get("messages", []) if isinstance(update, Mapping) else []
    for m in messages:
        if isinstance(m, ToolMessage) and m.tool_call_id == call_id:
            return m
    return None


def _result_value(message: ToolMessage) -> Any:
    content = message.content
    if isinstance(content, str) and content[:1] in ("{", "["):
        try:
            return json.loads(content)
        except ValueError:
            return content
    return _text(content) if not isinstance(content, str) else content


class PrefixmonMiddleware(AgentMiddleware[PrefixmonState, Any, Any]):
    """Checks every tool call of each agent invocation against a :class:`prefixmon.Monitor`.

    Args:
        monitor: the monitor (toolset, policy, sink, observers).
        task_id: the task of each invocation: a string or ``(state, runtime) -> str``;
            default: the episode id.
        labels: episode labels.
        outcome: ``(state) -> "success" | "partial" | "failure" | None``, called in
            ``after_agent``; default: no outcome.
        register_tools: declare the agent's tools that the toolset lacks from their JSON
            schemas (zero configuration); ``False`` makes such calls unknown tools.
        tool_errors: ``"return"`` (default) answers a tool's exception with an error
            ``ToolMessage`` so the run goes on; ``"raise"`` re-raises it after recording.
    """

    state_schema = PrefixmonState

    def __init__(
        self,
        monitor: Monitor,
        *,
        task_id: str | Callable[[Any, Runtime[Any]], str] | None = None,
        labels: Mapping[str, str] | None = None,
        outcome: Callable[[Any], Outcome | str | None] | None = None,
        register_tools: bool = True,
        tool_errors: Literal["return", "raise"] = "return",
    ) -> None:
        super().__init__()
        if tool_errors not in ("return", "raise"):
            raise ValueError(f"PrefixmonMiddleware: tool_errors must be 'return' or 'raise', got {tool_errors!r}")
        self.monitor = monitor
        self.task_id = task_id
        self.labels = dict(labels or {})
        self.outcome = outcome
        self.register_tools = register_tools
        self.tool_errors = tool_errors
        self._live: dict[str, _Live] = {}

    @property
    def open_episodes(self) -> list[Episode]:
        """Episodes currently open (running, or paused at an interrupt)."""
        return [live.episode for live in self._live.values()]

    def _uses_interrupts(self) -> bool:
        return self.monitor.escalate is interrupt_escalation

    # -- episode boundaries ------------------------------------------------------------------
    def _open(self, state: Any, runtime: Runtime[Any]) -> dict[str, Any]:
        task_id = self.task_id(state, runtime) if callable(self.task_id) else self.task_id
        episode = self.monitor.open_episode(task_id, self.labels)
        for message in state.get("messages", ()):
            if isinstance(message, HumanMessage):
                episode.user(_text(message.content))
            elif isinstance(message, ToolMessage):
                episode.inform(_result_value(message))
        self._live[episode.id] = _Live(episode=episode)
        return {STATE_KEY: episode.id}

    def _pop(self, state: Any) -> Episode | None:
        live = self._live.pop(state.get(STATE_KEY) or "", None)
        return live.episode if live is not None else None

    async def abefore_agent(self, state: PrefixmonState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        stale = self._pop(state)
        if stale is not None:  # the previous invocation never reached after_agent
            await stale.aclose("error", _UNFINISHED)
        return self._open(state, runtime)

    def before_agent(self, state: PrefixmonState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        stale = self._pop(state)
        if stale is not None:
            _run_sync(functools.partial(stale.aclose, "error", _UNFINISHED))
        return self._open(state, runtime)

    def _set_outcome(self, episode: Episode, state: Any) -> None:
        if self.outcome is not None:
            outcome = self.outcome(state)
            if outcome is not None:
                episode.finish(outcome)

    async def aafter_agent(self, state: PrefixmonState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        episode = self._pop(state)
        if episode is not None:
            try:
                self._set_outcome(episode, state)
            except Exception as e:
                await episode.aclose("error", type(e).__name__)
                raise
            await episode.aclose()
        return {STATE_KEY: None}

    def after_agent(self, state: PrefixmonState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        episode = self._pop(state)
        if episode is not None:
            try:
                self._set_outcome(episode, state)
            except Exception as e:
                _run_sync(functools.partial(episode.aclose, "error", type(e).__name__))
                raise
            _run_sync(episode.aclose)
        return {STATE_KEY: None}

    def _live_for(self, state: Any) -> _Live | None:
        key = state.get(STATE_KEY) if isinstance(state, Mapping) else getattr(state, STATE_KEY, None)
        return self._live.get(key) if key else None

    # -- tools the model is offered ----------------------------------------------------------
    def _declare(self, request: ModelRequest[Any]) -> None:
        live = self._live_for(request.state)
        if live is None:
            return
        live.model_calls += 1
        toolset = self.monitor.toolset
        for tool in request.tools:
            if not isinstance(tool, BaseTool):
                continue
            name = tool.name
            live.tools[name] = tool
            if name not in toolset:
                if not self.register_tools:
                    continue
                function = convert_to_openai_tool(tool)["function"]
                toolset.add_schema(name, function.get("parameters"), description=function.get("description", ""))
            if name not in live.episode.state.exposed:
                live.episode.expose(name)

    def wrap_model_call(
        self, request: ModelRequest[Any], handler: Callable[[ModelRequest[Any]], ModelResponse[Any]]
    ) -> ModelCallResult[Any]:
        with self._lock_of(request.state):
            self._declare(request)
        return handler(request)

    async def awrap_model_call(
        self, request: ModelRequest[Any], handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]]
    ) -> ModelCallResult[Any]:
        self._declare(request)
        return await handler(request)

    def _lock_of(self, state: Any) -> threading.Lock:
        live = self._live_for(state)
        return live.lock if live is not None else threading.Lock()

    # -- tool calls --------------------------------------------------------------------------
    def _escalation_answer(
        self, live: _Live, name: str, args: Any, call_id: str, *, asynchronous: bool
    ) -> Approve | Edit | Deny | None:
        """Ask a human through ``interrupt()`` when the policy escalates this call.

        Nothing is recorded before ``interrupt()``: it raises the first time, and returns the
        resume value when LangGraph re-runs this code on resume.
        """
        if not self._uses_interrupts():
            return None
        verdict = live.episode.check(name, args, call_id=call_id)
        if verdict.executable or verdict.cause is None or verdict.cause.value == "schema":
            return None
        if self.monitor.policy(verdict) != "escalate":
            return None
        request = {
            "type": "prefixmon.escalation",
            "tool": name,
            "call_id": call_id,
            "args": args,
            "cause": verdict.cause.value,
            "reason": verdict.reason,
            "decisions": ["approve", "edit", "deny"],
        }
        if asynchronous and sys.version_info < (3, 11):
            raise RuntimeError(
                f"cannot escalate {name} through interrupt_escalation: LangGraph's interrupt() in an async "
                "agent needs Python 3.11+ (asyncio tasks carry its config only from 3.11 on); "
                "run the agent with invoke() or use Python 3.11+"
            )
        return parse_answer(interrupt(request))

    @staticmethod
    def _blocked(blocked: ToolBlocked, name: str, call_id: str) -> ToolMessage:
        return ToolMessage(content=str(blocked), tool_call_id=call_id, name=name, status="error")

    @staticmethod
    def _refused_again(action: ActionRecord, name: str, call_id: str) -> ToolMessage:
        """The answer to a re-run of a call the monitor did not run: the decision stands."""
        text = f"Call to {name!r} was not run: {action.reason or action.decision.value}"
        return ToolMessage(content=text, tool_call_id=call_id, name=name, status="error")

    def _request_for(self, live: _Live, request: ToolCallRequest, pending: PendingCall) -> ToolCallRequest:
        if pending.call is pending.emitted:
            return request
        call = request.tool_call.copy()
        call["name"], call["args"] = pending.call.name, dict(pending.args)
        tool = live.tools.get(pending.call.name, request.tool)
        return request.override(tool_call=call) if tool is None else request.override(tool_call=call, tool=tool)

    @staticmethod
    def _settle(pending: PendingCall, call_id: str, result: ToolMessage | Command[Any]) -> None:
        message = _tool_message_for(result, call_id)
        if message is None:
            pending.done(None)
        elif message.status == "error":
            pending.failed(_text(message.content))
        else:
            pending.done(_result_value(message))

    def _failed(self, pending: PendingCall, call_id: str, name: str, error: Exception) -> ToolMessage:
        pending.failed(error)
        if self.tool_errors == "raise":
            raise error
        return ToolMessage(
            content=f"{name} failed: {type(error).__name__}: {error}", tool_call_id=call_id, name=name, status="error"
        )

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
    ) -> ToolMessage | Command[Any]:
        live = self._live_for(request.state)
        if live is None:
            return await handler(request)
        call = request.tool_call
        call_id, name, args = call.get("id") or "", call["name"], call.get("args")
        episode = live.episode
        pending = episode.pending(call_id)  # admitted before an interrupt inside the tool
        if pending is None:
            recorded = live.rerun_of(call_id)
            if recorded is not None:  # a re-run of a recorded call: not a new action
                if not recorded.reached_environment:
                    return self._refused_again(recorded, name, call_id)
                return await handler(request)
            answer = self._escalation_answer(live, name, args, call_id, asynchronous=True)
            token = _ANSWER.set(answer)
            live.emitted_in[call_id] = live.model_calls
            try:
                pending = await episode.begin(name, args, call_id=call_id)
            except ToolBlocked as blocked:
                return self._blocked(blocked, name, call_id)
            finally:
                _ANSWER.reset(token)
        try:
            result = await handler(self._request_for(live, request, pending))
        except GraphBubbleUp:
            raise  # an interrupt inside the tool: the call stays open until the graph resumes
        except Exception as e:
            return self._failed(pending, call_id, name, e)
        except BaseException:
            pending.abandon()
            raise
        self._settle(pending, call_id, result)
        return result

    def wrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], ToolMessage | Command[Any]],
    ) -> ToolMessage | Command[Any]:
        live = self._live_for(request.state)
        if live is None:
            return handler(request)
        call = request.tool_call
        call_id, name, args = call.get("id") or "", call["name"], call.get("args")
        episode = live.episode
        with live.lock:
            pending = episode.pending(call_id)
            recorded = live.rerun_of(call_id) if pending is None else None
        if recorded is not None:  # a re-run of a recorded call: not a new action
            if not recorded.reached_environment:
                return self._refused_again(recorded, name, call_id)
            return handler(request)
        if pending is None:
            answer = self._escalation_answer(live, name, args, call_id, asynchronous=False)
            with live.lock:
                live.emitted_in[call_id] = live.model_calls
                try:
                    pending = _run_sync(functools.partial(self._begin, episode, name, args, call_id, answer))
                except ToolBlocked as blocked:
                    return self._blocked(blocked, name, call_id)
        try:
            result = handler(self._request_for(live, request, pending))
        except GraphBubbleUp:
            raise  # an interrupt inside the tool: the call stays open until the graph resumes
        except Exception as e:
            with live.lock:
                return self._failed(pending, call_id, name, e)
        except BaseException:
            with live.lock:
                pending.abandon()
            raise
        with live.lock:
            self._settle(pending, call_id, result)
        return result

    @staticmethod
    async def _begin(episode: Episode, name: str, args: Any, call_id: str, answer: Approve | Edit | Deny | None) -> PendingCall:
        token = _ANSWER.set(answer)
        try:
            return await episode.begin(name, args, call_id=call_id)
        finally:
            _ANSWER.reset(token)
