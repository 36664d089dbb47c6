"""LangChain 1.x integration: an agent middleware that checks every tool call.

Add :class:`MonitorMiddleware` to ``create_agent``; each invocation of the agent (from
``before_agent`` to ``after_agent``) is one episode::

    from langchain.agents import create_agent
    from prefixmon import Monitor, Toolset
    from prefixmon.adapters.langchain import MonitorMiddleware

    monitor = Monitor(Toolset(), policy="block", sink="episodes.jsonl")
    agent = create_agent(model, tools=[...], middleware=[MonitorMiddleware(monitor)])

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
  ``id``; an id that is empty or repeated within one model response names no single call:
  such calls are recorded with ``call_id=None`` and skip the id-based resume lookups above.
- **Parallel calls** (an ``AIMessage`` with several tool calls, which ToolNode runs
  concurrently) are judged as one batch (``Episode.begin_batch``, see docs/batches.md): the
  first of them to reach ``wrap_tool_call`` admits every call of the message (the last
  ``AIMessage`` of the request's state, less the calls already answered), each against the
  state before the message, and each call then takes its own admission by its id. A
  reference only a sibling would return is refused with code ``sibling_dependency`` naming
  the sibling; the same side-effecting call twice is a non-blocking ``duplicate_call``
  finding. A call of the batch the agent never runs is recorded as not run when the next
  model call starts or the run ends. Messages whose ids are empty or repeated, a single
  call, and agents escalating through interrupts are checked call by call, in the order the
  response lists them (a sync agent's ToolNode runs them in threads, so each waits, at most
  2 s, for the calls before it); so is every call of a message if the batch path fails.

The episode is opened (``Monitor.open_episode``) in ``before_agent`` and closed
(``Episode.aclose``) in ``after_agent``, or with status ``"error"`` when an exception leaves
the middleware's model or tool wrapper (an interrupt keeps it open); put the middleware first
in the list, before any that retries or handles errors. It lives in the middleware instance
while the graph is paused, keyed by an id kept in the agent state; resuming in another
process starts over with a new episode. Sync agents do the monitor's work in their own
thread, without an event loop (``anyio.run`` only where a hook must be awaited: spec-file
probes, replan and escalation hooks, a callable sink).
"""

from __future__ import annotations

import contextvars
import functools
import threading
import warnings
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, NotRequired, TypeVar

import anyio

from prefixmon import (
    ActionRecord,
    Approve,
    Deny,
    Edit,
    Episode,
    EpisodeRecord,
    Monitor,
    Outcome,
    PendingCall,
    ToolBlocked,
    ToolCall,
    Verdict,
)
from prefixmon.commands import run_async
from prefixmon.deprecation import moved_names
from prefixmon.semconv import tool_label

from ._batches import Admissions
from ._json import json_or_text

try:
    from langchain.agents.middleware import AgentMiddleware, AgentState, ModelRequest, ToolCallRequest
    from langchain.agents.middleware.types import (
        ExtendedModelResponse,
        ModelCallResult,
        ModelResponse,
        PrivateStateAttr,
    )
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
    from langchain_core.tools import BaseTool
    from langchain_core.utils.function_calling import convert_to_openai_tool
    from langgraph.errors import GraphBubbleUp
    from langgraph.runtime import Runtime
    from langgraph.types import Command, interrupt
except ImportError as e:  # pragma: no cover - exercised only without the extra
    raise ImportError('pip install "prefixmon[langchain]"') from e

__all__ = ("MonitorMiddleware", "MonitorState", "interrupt_escalation", "parse_answer")

T = TypeVar("T")

STATE_KEY = "prefixmon_episode"
"""The agent-state key holding the id of the invocation's episode."""

_UNFINISHED = "RuntimeError"
"""The error an episode is closed with when its invocation never reached ``after_agent``."""

_TURN_TIMEOUT = 2.0
"""Seconds a sync tool call waits for the calls emitted before it to begin (never a deadlock)."""

_ENDED_KEPT = 1024
"""How many episodes ended by an error are remembered, to tell a run that goes on after it."""

_ANSWER: contextvars.ContextVar[Approve | Edit | Deny | None] = contextvars.ContextVar("prefixmon_langchain_answer", default=None)


class MonitorState(AgentState[Any]):
    """Agent state with the (private) id of the open episode."""

    prefixmon_episode: NotRequired[Annotated[str | None, PrivateStateAttr]]


async def interrupt_escalation(verdict: Verdict, call: ToolCall) -> Approve | Edit | Deny:
    """Escalation hook that routes escalations through LangGraph ``interrupt``.

    Pass it as ``Monitor(..., escalate=interrupt_escalation)``. Inside an agent with
    :class:`MonitorMiddleware` it returns the answer the graph was resumed with; anywhere
    else (or for a call whose arguments do not even fit the schema) it denies.
    """
    answer = _ANSWER.get()
    if answer is not None:
        return answer
    if verdict.cause is not None and verdict.cause.value == "schema":
        return Deny(f"nothing to approve: {verdict.reason}")
    return Deny("this call needs approval, which only a LangGraph agent with MonitorMiddleware can ask for")


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


def _wait(pending: Awaitable[T]) -> T:
    """Await monitor work that needs a hook from a sync agent, whose nodes run in threads with no event loop."""
    return run_async(functools.partial(_awaited, pending))


async def _awaited(pending: Awaitable[T]) -> T:
    return await pending


def _admit_sync(episode: Episode, name: str, args: Any, call_id: str | None, answer: Approve | Edit | Deny | None) -> PendingCall:
    """Admit a call of a sync agent: right here when no hook needs an event loop (``anyio.run`` cost
    about 650 µs a call), through ``anyio.run`` only for probes, replan and escalation hooks."""
    token = _ANSWER.set(answer)  # read by interrupt_escalation, wherever the hook runs
    try:
        admitted = episode.admit(name, args, call_id=call_id)
        return admitted if isinstance(admitted, PendingCall) else _wait(admitted)
    finally:
        _ANSWER.reset(token)


def _close_sync(episode: Episode, status: Literal["finished", "error"] = "finished", error: str | None = None) -> None:
    """Close an episode from a sync agent: right here unless a callable sink has to be awaited."""
    closed = episode.close_sync(status, error)
    if not isinstance(closed, EpisodeRecord):
        _wait(closed)


@dataclass(eq=False)
class _Response:
    """The tool calls of one model response, in the order the model emitted them.

    Tells apart calls whose ids do not name one call (empty, or repeated within the
    response), and lets the calls of a sync agent, which ToolNode runs in threads, begin in
    emission order: each waits (bounded) until the calls before it have had their turn.
    """

    calls: list[tuple[str, str, Any]]
    """``(id, name, args)`` of each call."""
    ambiguous: frozenset[str]
    """Ids that are empty or repeated within the response."""
    claimed: list[bool] = field(init=False)
    passed: list[bool] = field(init=False)
    """Whether each call has had its turn (begun, refused, or given up)."""
    turns: threading.Condition = field(default_factory=threading.Condition)

    def __post_init__(self) -> None:
        self.claimed = [False] * len(self.calls)
        self.passed = [False] * len(self.calls)

    @classmethod
    def of(cls, result: Any) -> _Response:
        """The tool calls of a ``wrap_model_call`` handler's result."""
        if isinstance(result, ExtendedModelResponse):
            result = result.model_response
        messages = result.result if isinstance(result, ModelResponse) else [result]
        answered = {m.tool_call_id for m in messages if isinstance(m, ToolMessage)}  # structured output
        calls = [
            (c.get("id") or "", c["name"], c.get("args"))
            for m in messages
            if isinstance(m, AIMessage)
            for c in m.tool_calls
            if (c.get("id") or "") not in answered
        ]
        ids = [i for i, _, _ in calls]
        ambiguous = frozenset(i for i in ids if not i or ids.count(i) > 1)
        return cls(calls=calls, ambiguous=ambiguous)

    def claim(self, call_id: str, name: str, args: Any) -> int | None:
        """The position of this call in the response (identical calls take the first free one)."""
        with self.turns:
            free = [i for i, c in enumerate(self.calls) if not self.claimed[i] and c[0] == call_id]
            exact = [i for i in free if self.calls[i][1:] == (name, args)]
            if exact or (free and call_id not in self.ambiguous):
                index = (exact or free)[0]
                self.claimed[index] = True
                return index
            return None

    def wait_for_turn(self, index: int) -> None:
        """Wait until the calls emitted before ``index`` have had their turn, at most ``_TURN_TIMEOUT``."""
        with self.turns:
            self.turns.wait_for(lambda: all(self.passed[:index]), timeout=_TURN_TIMEOUT)

    def pass_turn(self, index: int) -> None:
        with self.turns:
            self.passed[index] = True
            self.turns.notify_all()


_NOT_RUN = "the agent never ran the call"
"""Why a call of a batch is recorded as not run when its turn never came."""

_CUT_SHORT = "the run failed before the call's turn"
"""Why a call of a batch is recorded as not run when the run failed before it began."""


def _message_calls(state: Any) -> list[tuple[str, str, Any]] | None:
    """``(id, name, args)`` of the calls of the state's last ``AIMessage`` that ToolNode runs, when they form a batch.

    The calls not yet answered by a ``ToolMessage`` after it (structured output answers its
    own), as create_agent sends them to the tools; ``None`` for fewer than two, or for ids
    that do not name one call each (empty or repeated).
    """
    messages = state.get("messages") if isinstance(state, Mapping) else getattr(state, "messages", None)
    if not isinstance(messages, Sequence):
        return None
    answered: set[str] = set()
    for message in reversed(messages):
        if isinstance(message, ToolMessage):
            answered.add(message.tool_call_id)
        elif isinstance(message, AIMessage):
            calls = [(c.get("id") or "", c["name"], c.get("args")) for c in message.tool_calls]
            calls = [c for c in calls if c[0] not in answered]
            ids = {c[0] for c in calls}
            if len(calls) < 2 or len(ids) != len(calls) or "" in ids:
                return None
            return calls
    return None


@dataclass(eq=False)
@dataclass(eq=False, kw_only=True)
class _Batch(Admissions):
    """The tool calls of one ``AIMessage``, admitted together by the first of them to reach the middleware;
    what no call took when the next model call starts or the run ends was never run by the agent."""

    model_call: int
    """The model call whose response holds the calls."""
    calls: list[tuple[str, str, Any]]
    """``(id, name, args)`` of each call, in message order."""
    ready: anyio.Event | None = None
    """Set when the admission is over (async agents: the calls run concurrently on one event loop)."""

    def in_message(self, model_call: int, call_id: str) -> bool:
        return model_call == self.model_call and self.holds(call_id)


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
    response: _Response | None = None
    """The tool calls of the latest model response."""
    batch: _Batch | None = None
    """The calls of the latest message of several, admitted as one batch."""
    closed: bool = False
    """Closed by an error of the run; calls still in flight are not begun."""

    def rerun_of(self, call_id: str) -> ActionRecord | None:
        """The recorded call that LangGraph runs again on resume, or ``None`` for a new call.

        A call id seen in an earlier model response is a new call that reuses the id (some
        servers number calls per response), not a re-run.
        """
        if self.emitted_in.get(call_id) != self.model_calls:
            return None
        return self.episode.action_for(call_id)

    def call_id_of(self, raw_id: str) -> str | None:
        """The id the episode knows the call by: ``None`` when it does not name one call."""
        if not raw_id or (self.response is not None and raw_id in self.response.ambiguous):
            return None
        return raw_id

    def drop_batch(self, why: str = _NOT_RUN) -> frozenset[str]:
        """Record the calls of the batch the agent did not run as not run; their ids."""
        return self.batch.drop(why) if self.batch is not None else frozenset()


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
        return json_or_text(content)
    return _text(content) if not isinstance(content, str) else content


class MonitorMiddleware(AgentMiddleware[MonitorState, Any, Any]):
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
            ``ToolMessage`` so the run goes on; ``"raise"`` re-raises it after recording, which
            ends the episode with status ``"error"``.
    """

    state_schema = MonitorState

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
            raise ValueError(f"MonitorMiddleware: tool_errors must be 'return' or 'raise', got {tool_errors!r}")
        self.monitor = monitor
        self.task_id = task_id
        self.labels = dict(labels or {})
        self.outcome = outcome
        self.register_tools = register_tools
        self.tool_errors = tool_errors
        self._live: dict[str, _Live] = {}
        self._ended: dict[str, str] = {}
        """Episodes closed by an error that passed through this middleware, by state key."""
        self._not_run: dict[str, frozenset[str]] = {}
        """Ids of the calls of a batch such an episode recorded as not run, by state key."""

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
            elif isinstance(message, AIMessage):
                if text := _text(message.content):
                    episode.assistant(text)
            elif isinstance(message, ToolMessage):
                episode.inform(_result_value(message))
        self._live[episode.id] = _Live(episode=episode)
        return {STATE_KEY: episode.id}

    def _pop(self, state: Any) -> Episode | None:
        key = state.get(STATE_KEY) or ""
        self._ended.pop(key, None)
        self._not_run.pop(key, None)
        live = self._live.pop(key, None)
        if live is None:
            return None
        live.drop_batch()
        return live.episode

    @staticmethod
    def _key_of(state: Any) -> str | None:
        key = state.get(STATE_KEY) if isinstance(state, Mapping) else getattr(state, STATE_KEY, None)
        return key if isinstance(key, str) and key else None

    def _end(self, state: Any, error: BaseException) -> _Live | None:
        """Take the episode of a run that fails with ``error`` out of the open ones.

        Returns the live episode to close (``aclose("error", type name)``), or ``None`` when
        another call already ended it. Calls still in flight are not begun any more.
        """
        key = self._key_of(state)
        live = self._live.pop(key, None) if key is not None else None
        if key is None or live is None:
            return None
        self._ended[key] = type(error).__name__
        while len(self._ended) > _ENDED_KEPT:
            oldest = next(iter(self._ended))
            del self._ended[oldest]
            self._not_run.pop(oldest, None)
        return live

    def _drop_ended(self, state: Any, live: _Live) -> None:
        """The calls of the batch that never had their turn: recorded as not run, and refused if they come late."""
        dropped = live.drop_batch(_CUT_SHORT)
        key = self._key_of(state)
        if dropped and key is not None and key in self._ended:
            self._not_run[key] = dropped

    async def _aend(self, state: Any, error: BaseException) -> None:
        live = self._end(state, error)
        if live is not None:
            live.closed = True
            self._drop_ended(state, live)
            await live.episode.aclose("error", type(error).__name__)

    def _sync_end(self, state: Any, error: BaseException) -> None:
        live = self._end(state, error)
        if live is not None:
            with live.lock:  # not while another thread's call is being admitted
                live.closed = True
                self._drop_ended(state, live)
                _close_sync(live.episode, "error", type(error).__name__)

    def _after_end(self, request: ToolCallRequest) -> ToolMessage | None:
        """A tool call of a run that went on after its episode ended with an error.

        That happens when middleware placed before MonitorMiddleware handles an error that
        passed through it (a retry, a fallback). ``failure_mode="fail_closed"`` refuses the
        call; otherwise it runs unchecked, with a warning.
        """
        key = self._key_of(request.state)
        error = self._ended.get(key) if key is not None else None
        if key is None or error is None:
            return None
        call = request.tool_call
        if (call.get("id") or "") in self._not_run.get(key, ()):  # recorded as not run: it is not run
            return self._not_begun(call["name"], call.get("id") or "")
        why = (
            f"the prefixmon episode of this run ended with {error}, which a middleware placed before "
            "MonitorMiddleware then handled; place MonitorMiddleware first in the middleware list"
        )
        if self.monitor.failure_mode == "fail_closed":
            return ToolMessage(
                content=f"Call to {call['name']!r} was not run: {why}",
                tool_call_id=call.get("id") or "",
                name=call["name"],
                status="error",
            )
        label = tool_label(str(call["name"]), self.monitor.toolset)  # logs may carry it: a made-up name may be anything
        warnings.warn(f"{label!r} runs unchecked: {why}", RuntimeWarning, stacklevel=2)
        return None

    async def abefore_agent(self, state: MonitorState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        stale = self._pop(state)
        if stale is not None:  # the previous invocation never reached after_agent
            await stale.aclose("error", _UNFINISHED)
        return self._open(state, runtime)

    def before_agent(self, state: MonitorState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        stale = self._pop(state)
        if stale is not None:
            _close_sync(stale, "error", _UNFINISHED)
        return self._open(state, runtime)

    def _set_outcome(self, episode: Episode, state: Any) -> None:
        if self.outcome is not None:
            outcome = self.outcome(state)
            if outcome is not None:
                episode.finish(outcome)

    async def aafter_agent(self, state: MonitorState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        episode = self._pop(state)
        if episode is not None:
            try:
                self._set_outcome(episode, state)
            except Exception as e:
                await episode.aclose("error", type(e).__name__)
                raise
            await episode.aclose()
        return {STATE_KEY: None}

    def after_agent(self, state: MonitorState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        episode = self._pop(state)
        if episode is not None:
            try:
                self._set_outcome(episode, state)
            except Exception as e:
                _close_sync(episode, "error", type(e).__name__)
                raise
            _close_sync(episode)
        return {STATE_KEY: None}

    def _live_for(self, state: Any) -> _Live | None:
        key = self._key_of(state)
        return self._live.get(key) if key is not None else None

    # -- tools the model is offered ----------------------------------------------------------
    def _declare(self, request: ModelRequest[Any]) -> None:
        live = self._live_for(request.state)
        if live is None:
            return
        live.drop_batch()  # the calls of the previous message the agent did not run
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

    def _note(self, request: ModelRequest[Any], result: ModelCallResult[Any]) -> None:
        live = self._live_for(request.state)
        if live is not None:
            live.response = _Response.of(result)

    def wrap_model_call(
        self, request: ModelRequest[Any], handler: Callable[[ModelRequest[Any]], ModelResponse[Any]]
    ) -> ModelCallResult[Any]:
        with self._lock_of(request.state):
            self._declare(request)
        try:
            result = handler(request)
        except GraphBubbleUp:
            raise
        except Exception as e:
            self._sync_end(request.state, e)
            raise
        self._note(request, result)
        return result

    async def awrap_model_call(
        self, request: ModelRequest[Any], handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]]
    ) -> ModelCallResult[Any]:
        self._declare(request)
        try:
            result = await handler(request)
        except GraphBubbleUp:
            raise
        except Exception as e:
            await self._aend(request.state, e)
            raise
        self._note(request, result)
        return result

    def _lock_of(self, state: Any) -> threading.Lock:
        live = self._live_for(state)
        return live.lock if live is not None else threading.Lock()

    # -- tool calls --------------------------------------------------------------------------
    def _escalation_answer(self, live: _Live, name: str, args: Any, call_id: str | None) -> Approve | Edit | Deny | None:
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
        if not pending.replaced:
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
        return ToolMessage(
            content=f"{name} failed: {type(error).__name__}: {error}", tool_call_id=call_id, name=name, status="error"
        )

    @staticmethod
    def _not_begun(name: str, call_id: str) -> ToolMessage:
        text = f"Call to {name!r} was not run: the run failed before its turn"
        return ToolMessage(content=text, tool_call_id=call_id, name=name, status="error")

    # -- batches: the calls of one message, admitted together ---------------------------------
    def _batch_for(self, live: _Live, request: ToolCallRequest) -> _Batch | None:
        """The batch of the message this call belongs to, or ``None``: the call is checked on its own."""
        try:
            return self._find_batch(live, request)
        except Exception as e:  # never break the agent: the call is checked on its own
            self.monitor.report_fault(live.episode, "langchain.batch", e)
            return None

    def _find_batch(self, live: _Live, request: ToolCallRequest) -> _Batch | None:
        if live.closed or self._uses_interrupts():  # an interrupt asks about one call, from that call's own task
            return None
        raw_id = request.tool_call.get("id") or ""
        current = live.batch
        if current is not None and current.in_message(live.model_calls, raw_id):
            return current
        calls = _message_calls(request.state)
        if calls is None or not any(c[0] == raw_id for c in calls):
            return None
        if current is not None:
            current.drop(_NOT_RUN)
        live.batch = _Batch(ids=tuple(c[0] for c in calls), model_call=live.model_calls, calls=calls)
        return live.batch

    def _batch_calls(self, live: _Live, batch: _Batch) -> list[ToolCall]:
        batch.started = True
        for call_id, _, _ in batch.calls:
            live.emitted_in[call_id] = live.model_calls
        return [ToolCall(name=name, args=args, call_id=call_id) for call_id, name, args in batch.calls]

    @staticmethod
    def _take(live: _Live, batch: _Batch, request: ToolCallRequest) -> PendingCall | ToolBlocked | None:
        if batch.failed or not batch.admitted:
            return None
        call = request.tool_call
        raw_id = call.get("id") or ""
        taken = batch.take(raw_id, (raw_id, call["name"], call.get("args")) in batch.calls)
        if taken is None and raw_id in batch.changed:
            live.emitted_in.pop(raw_id, None)  # a new call to begin, not a re-run of the one recorded
        return taken

    def _batch_failed(self, live: _Live, batch: _Batch, error: BaseException) -> None:
        """The admission failed part-way: its calls are checked one by one (those it admitted or recorded are found by id)."""
        batch.failed = True
        self.monitor.report_fault(live.episode, "langchain.batch", error)

    async def _abatched(self, live: _Live, batch: _Batch, request: ToolCallRequest) -> PendingCall | ToolBlocked | None:
        """This call's admission from its message's batch (admitting the batch if it is the first to arrive), or ``None``."""
        try:
            if not batch.started:
                batch.ready = anyio.Event()
                try:
                    begun = await live.episode.begin_batch(self._batch_calls(live, batch))
                    batch.admit(begun)
                except Exception as e:
                    self._batch_failed(live, batch, e)
                finally:
                    batch.ready.set()  # cancelled too: the others go on one by one
            elif batch.ready is not None:
                await batch.ready.wait()
            return self._take(live, batch, request)
        except Exception as e:  # never break the agent: the call is checked on its own
            self.monitor.report_fault(live.episode, "langchain.batch", e)
            return None

    def _sync_batched(self, live: _Live, request: ToolCallRequest) -> PendingCall | ToolBlocked | None:
        """:meth:`_abatched` for a sync agent, whose ToolNode runs the calls in threads (``live.lock`` held)."""
        try:
            batch = self._batch_for(live, request)
            if batch is None:
                return None
            if not batch.started:
                try:
                    begun = _wait(live.episode.begin_batch(self._batch_calls(live, batch)))
                    batch.admit(begun)
                except Exception as e:
                    self._batch_failed(live, batch, e)
            return self._take(live, batch, request)
        except Exception as e:  # never break the agent: the call is checked on its own
            self.monitor.report_fault(live.episode, "langchain.batch", e)
            return None

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
    ) -> ToolMessage | Command[Any]:
        live = self._live_for(request.state)
        if live is None:
            refused = self._after_end(request)
            return refused if refused is not None else await handler(request)
        call = request.tool_call
        raw_id, name, args = call.get("id") or "", call["name"], call.get("args")
        call_id = live.call_id_of(raw_id)  # None: the id does not name one call; no resume lookups
        episode = live.episode
        batch = self._batch_for(live, request)
        batched = await self._abatched(live, batch, request) if batch is not None else None
        if isinstance(batched, ToolBlocked):
            return self._blocked(batched, name, raw_id)
        pending = batched
        if pending is None and call_id is not None:
            pending = episode.pending(call_id)  # admitted before an interrupt
        if pending is None:
            recorded = live.rerun_of(call_id) if call_id is not None else None
            if recorded is not None:  # a re-run of a recorded call: not a new action
                if not recorded.reached_environment:
                    return self._refused_again(recorded, name, raw_id)
                return await handler(request)
            answer = self._escalation_answer(live, name, args, call_id)
            if live.closed:
                return self._not_begun(name, raw_id)
            token = _ANSWER.set(answer)
            if call_id is not None:
                live.emitted_in[call_id] = live.model_calls
            try:
                pending = await episode.begin(name, args, call_id=call_id)
            except ToolBlocked as blocked:
                return self._blocked(blocked, name, raw_id)
            finally:
                _ANSWER.reset(token)
        try:
            result = await handler(self._request_for(live, request, pending))
        except GraphBubbleUp:
            raise  # an interrupt inside the tool: the call stays open until the graph resumes
        except Exception as e:
            message = self._failed(pending, raw_id, name, e)
            if self.tool_errors == "raise":
                await self._aend(request.state, e)
                raise
            return message
        except BaseException:
            pending.abandon()
            raise
        self._settle(pending, raw_id, result)
        return result

    def wrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], ToolMessage | Command[Any]],
    ) -> ToolMessage | Command[Any]:
        live = self._live_for(request.state)
        if live is None:
            refused = self._after_end(request)
            return refused if refused is not None else handler(request)
        call = request.tool_call
        raw_id, name, args = call.get("id") or "", call["name"], call.get("args")
        response = live.response
        turn = response.claim(raw_id, name, args) if response is not None else None
        try:
            if response is not None and turn is not None:  # ToolNode runs the calls in threads: keep emission order
                response.wait_for_turn(turn)
            started = self._sync_begin(live, request, raw_id, name, args)
        finally:
            if response is not None and turn is not None:
                response.pass_turn(turn)
        if not isinstance(started, PendingCall):
            return started if isinstance(started, ToolMessage) else handler(request)
        pending = started
        try:
            result = handler(self._request_for(live, request, pending))
        except GraphBubbleUp:
            raise  # an interrupt inside the tool: the call stays open until the graph resumes
        except Exception as e:
            with live.lock:
                message = self._failed(pending, raw_id, name, e)
            if self.tool_errors == "raise":
                self._sync_end(request.state, e)
                raise
            return message
        except BaseException:
            with live.lock:
                pending.abandon()
            raise
        with live.lock:
            self._settle(pending, raw_id, result)
        return result

    def _sync_begin(
        self, live: _Live, request: ToolCallRequest, raw_id: str, name: str, args: Any
    ) -> PendingCall | ToolMessage | None:
        """Admit a call of a sync agent: the call to run, the answer that refuses it, or ``None`` to re-run it."""
        call_id = live.call_id_of(raw_id)  # None: the id does not name one call; no resume lookups
        episode = live.episode
        with live.lock:
            batched = self._sync_batched(live, request)
            if isinstance(batched, ToolBlocked):
                return self._blocked(batched, name, raw_id)
            pending = batched if batched is not None else episode.pending(call_id) if call_id is not None else None
            recorded = live.rerun_of(call_id) if pending is None and call_id is not None else None
        if pending is not None:
            return pending  # admitted before an interrupt inside the tool
        if recorded is not None:  # a re-run of a recorded call: not a new action
            return None if recorded.reached_environment else self._refused_again(recorded, name, raw_id)
        answer = self._escalation_answer(live, name, args, call_id)
        with live.lock:
            if live.closed:
                return self._not_begun(name, raw_id)
            if call_id is not None:
                live.emitted_in[call_id] = live.model_calls
            try:
                return _admit_sync(episode, name, args, call_id, answer)
            except ToolBlocked as blocked:
                return self._blocked(blocked, name, raw_id)


__getattr__ = moved_names(
    __name__,
    {
        "PrefixmonMiddleware": "prefixmon.adapters.langchain:MonitorMiddleware",
        "PrefixmonState": "prefixmon.adapters.langchain:MonitorState",
    },
    removal="0.3.0",
)
"""The names these classes had before 0.2.0, kept (with a warning) for one release."""
