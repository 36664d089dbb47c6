"""OpenAI Agents SDK integration: tool input guardrails plus a tool wrapper.

Protect an agent's function tools and run it through :class:`MonitorGuardrail`; each run is one
episode::

    from agents import Agent
    from prefixmon import Monitor, Toolset
    from prefixmon.adapters.openai_agents import MonitorGuardrail

    guard = MonitorGuardrail(Monitor(Toolset(), policy="block", sink="episodes.jsonl"))
    agent = guard.protect(Agent(name="assistant", tools=[...]))
    result = await guard.run(agent, "Remove Fredrik from my contacts")

How the monitor acts through the SDK's own mechanisms:

- Every protected function tool gets a **tool input guardrail** that judges the call before
  the tool runs (raw JSON arguments, so malformed JSON is a schema failure). A blocked call
  is answered with ``reject_content`` carrying the monitor's model-readable reason; the run
  goes on and the model may repair the call.
- A **tool wrapper** around ``on_invoke_tool`` reports the outcome (post-call acceptance):
  a result, or an exception the tool's failure handler turned into an error message (seen
  through ``RunConfig.tool_error_formatter``), which is a state-consistency failure.
- **Unknown tools** are returned to the model (``tool_not_found_behavior=
  "return_error_to_model"``) with the monitor's reason, and recorded as schema failures.
- Tools the toolset does not declare are declared from the tools' JSON schemas (zero
  configuration); the agent's tools are the exposed ones.
- **Parallel calls** (a model response with several function calls, which the SDK runs as
  concurrent tasks) are judged as one batch (``Episode.begin_batch``, see docs/batches.md):
  the run hooks note the response's calls, and the first of them to reach the input guardrail
  (or the SDK's unknown-tool answer) admits every call of the response to a protected tool
  or to a tool the agent lacks, at its place, each against the state before the response;
  each call then takes its own admission by its ``call_id``. A reference only a sibling would
  return is refused (``reject_content``, code ``sibling_dependency``, naming the sibling);
  the same side-effecting call twice is a non-blocking ``duplicate_call`` finding. A call of
  the batch whose guardrail never ran (another guardrail rejected it first, the run stopped)
  is recorded as not run at the next model call or when the episode ends. Checked call by
  call: a single call, responses with tools needing approval, handoffs or calls with empty or
  repeated ids, runs without the hooks, and every call of a response if the batch fails.
- The run's user input goes into the information pool, and every tool result. The call id is
  the function call's ``call_id``.

``guard.run`` wraps ``Runner.run``; to drive the runner yourself, open
``async with guard.episode(...)`` and pass ``run_config=guard.run_config()`` and
``hooks=guard.hooks()`` (without the hooks, unknown-tool calls are recorded after the other
calls of the same model response, and parallel calls are checked one by one).
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import json
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from pydantic_core import to_jsonable_python

from prefixmon import Episode, Monitor, Outcome, PendingCall, ToolBlocked, ToolCall
from prefixmon.deprecation import moved_names

from ._batches import Admissions
from ._json import json_or_text

try:
    from agents import (
        Agent,
        FunctionTool,
        Handoff,
        ModelResponse,
        RunConfig,
        RunContextWrapper,
        RunHooks,
        Runner,
        RunResult,
        Tool,
        ToolGuardrailFunctionOutput,
        ToolInputGuardrail,
        ToolInputGuardrailData,
    )
    from agents.run_config import ToolErrorFormatterArgs
    from agents.tool_context import ToolContext
    from openai.types.responses import ResponseFunctionToolCall
except ImportError as e:  # pragma: no cover - exercised only without the extra
    raise ImportError('pip install "prefixmon[openai-agents]"') from e

__all__ = ("MonitorGuardrail",)

GUARDRAIL_NAME = "prefixmon"

_NO_TOOL = "the Agents SDK has no such tool"
"""Why a call of a tool the agent lacks (but the toolset declares) is recorded as not run."""

_NOT_RUN = "the Agents SDK never ran the call"
"""Why a call of a batch is recorded as not run when its guardrail never ran."""


@dataclass(eq=False, kw_only=True)
class _Batch(Admissions):
    """The function calls of one model response, admitted together by the first of them to arrive;
    what no call took at the next model call or when the episode ends was never run by the SDK
    (admissions are kept for protected tools' calls only)."""

    calls: list[tuple[str, str, str, bool]]
    """(call id, name, arguments, unknown), in message order."""
    ready: asyncio.Event | None = None
    """Set when the admission is over."""

    def take_call(self, call_id: str, name: str, arguments: str) -> PendingCall | ToolBlocked | None:
        """This call's admission (see :meth:`Admissions.take`)."""
        return self.take(call_id, any(c[:3] == (call_id, name, arguments) for c in self.calls))


@dataclass(eq=False)
class _RunState:
    episode: Episode
    errors: dict[str, Exception] = field(default_factory=dict)
    """Exceptions the tools' failure handlers turned into messages, by call id."""
    order: list[tuple[str, str, str, bool]] = field(default_factory=list)
    """The last model response's function calls: (call id, name, arguments, unknown)."""
    refused: dict[str, str] = field(default_factory=dict)
    """Unknown-tool calls already recorded: call id -> the model-readable reason."""
    batch: _Batch | None = None
    """The calls of the last model response, when they are admitted as one batch."""

    def drop_batch(self) -> None:
        if self.batch is not None:
            self.batch.drop(_NOT_RUN)
            self.batch = None

    async def batched(self, monitor: Monitor, call_id: str) -> bool:
        """Admit the batch ``call_id`` belongs to (or wait for its admission); whether it holds the call's admission."""
        batch = self.batch
        if batch is None or not batch.holds(call_id):
            return False
        try:
            if not batch.started:
                batch.started = True
                batch.ready = asyncio.Event()
                try:
                    await self._admit(batch)
                except Exception as e:
                    batch.failed = True  # those it admitted or recorded are found by id; the rest are begun one by one
                    monitor.report_fault(self.episode, "openai_agents.batch", e)
                finally:
                    batch.ready.set()
            elif batch.ready is not None:
                await batch.ready.wait()
        except Exception as e:  # never break the run: the call is checked on its own
            monitor.report_fault(self.episode, "openai_agents.batch", e)
            return False
        return not batch.failed

    async def _admit(self, batch: _Batch) -> None:
        begun = await self.episode.begin_batch(
            [ToolCall(name=name, args=arguments, call_id=cid) for cid, name, arguments, _ in batch.calls]
        )
        for (cid, _, _, unknown), taken in zip(batch.calls, begun, strict=True):
            if not unknown:
                batch.admitted[cid] = taken
            elif isinstance(taken, ToolBlocked):  # a tool the agent lacks: the SDK answers it itself
                self.refused[cid] = str(taken)
            else:
                self.refused[cid] = f"Tool {taken.call.name!r} not found."
                taken.abandon(_NO_TOOL, started=False)

    async def record_unknown(self, call_id: str, *, including: bool = False) -> None:
        """Record, in message order, the unknown-tool calls before (or up to) ``call_id``."""
        for cid, name, arguments, unknown in self.order:
            if cid == call_id and not including:
                return
            if unknown and cid not in self.refused:
                await self.refuse(cid, name, arguments)
            if cid == call_id:
                return

    async def refuse(self, call_id: str, name: str, arguments: str | None) -> None:
        self.refused[call_id] = f"Tool {name!r} not found."
        try:
            pending = await self.episode.begin(name, arguments, call_id=call_id)
        except ToolBlocked as blocked:
            self.refused[call_id] = str(blocked)
        else:
            pending.abandon(_NO_TOOL, started=False)


class _OrderHooks(RunHooks[Any]):
    """Notes each model response's function calls: unknown tools are recorded in message order,
    and the calls of a response of several are admitted as one batch."""

    def __init__(self, inner: RunHooks[Any] | None, guardrail: ToolInputGuardrail[Any] | None = None) -> None:
        self.inner = inner
        self.guardrail = guardrail

    async def on_llm_end(self, context: RunContextWrapper[Any], agent: Agent[Any], response: ModelResponse) -> None:
        run = _RUN.get()
        if run is not None:
            handoffs = {h.tool_name if isinstance(h, Handoff) else Handoff.default_tool_name(h) for h in agent.handoffs}
            known = {t.name for t in agent.tools} | handoffs
            run.order = [
                (item.call_id, item.name, item.arguments, item.name not in known)
                for item in response.output
                if isinstance(item, ResponseFunctionToolCall)
            ]
            run.drop_batch()
            run.batch = self._batch(agent, run.order, handoffs)
        if self.inner is not None:
            await self.inner.on_llm_end(context, agent, response)

    def _batch(self, agent: Agent[Any], order: list[tuple[str, str, str, bool]], handoffs: set[str]) -> _Batch | None:
        """The response's calls to admit as one batch, or ``None``: they are checked one by one."""
        if len(order) < 2 or self.guardrail is None:
            return None
        tools = {t.name: t for t in agent.tools}
        calls: list[tuple[str, str, str, bool]] = []
        for call in order:
            _, name, _, unknown = call
            if name in handoffs:
                return None  # the run hands off: the SDK's order of events is its own
            tool = tools.get(name)
            if unknown:
                calls.append(call)
            elif isinstance(tool, FunctionTool) and self.guardrail in (tool.tool_input_guardrails or ()):
                if tool.needs_approval is not False:
                    return None  # approvals are asked call by call (and may interrupt the run)
                calls.append(call)
        ids = {c[0] for c in calls}
        if len(calls) < 2 or len(ids) != len(calls) or "" in ids:
            return None
        return _Batch(ids=tuple(c[0] for c in calls), calls=calls)

    async def on_llm_start(
        self, context: RunContextWrapper[Any], agent: Agent[Any], system_prompt: str | None, input_items: list[Any]
    ) -> None:
        run = _RUN.get()
        if run is not None:
            run.drop_batch()  # the calls of the previous response the SDK did not run
        if self.inner is not None:
            await self.inner.on_llm_start(context, agent, system_prompt, input_items)

    async def on_agent_start(self, context: Any, agent: Agent[Any]) -> None:
        if self.inner is not None:
            await self.inner.on_agent_start(context, agent)

    async def on_agent_end(self, context: Any, agent: Agent[Any], output: Any) -> None:
        if self.inner is not None:
            await self.inner.on_agent_end(context, agent, output)

    async def on_handoff(self, context: RunContextWrapper[Any], from_agent: Agent[Any], to_agent: Agent[Any]) -> None:
        if self.inner is not None:
            await self.inner.on_handoff(context, from_agent, to_agent)

    async def on_tool_start(self, context: RunContextWrapper[Any], agent: Agent[Any], tool: Tool) -> None:
        if self.inner is not None:
            await self.inner.on_tool_start(context, agent, tool)

    async def on_tool_end(self, context: RunContextWrapper[Any], agent: Agent[Any], tool: Tool, result: object) -> None:
        if self.inner is not None:
            await self.inner.on_tool_end(context, agent, tool, result)


_RUN: contextvars.ContextVar[_RunState | None] = contextvars.ContextVar("prefixmon_openai_agents_run", default=None)


def _user_texts(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    texts: list[str] = []
    if isinstance(value, Sequence):
        for item in value:
            if isinstance(item, Mapping) and item.get("role") == "user":
                texts.extend(_user_texts(item.get("content")))
            elif isinstance(item, Mapping) and item.get("type") == "input_text":
                texts.append(str(item.get("text", "")))
    return texts


def _result_value(result: Any) -> Any:
    if isinstance(result, str) and result[:1] in ("{", "["):
        return json_or_text(result)
    return result


class MonitorGuardrail:
    """Checks every function-tool call of OpenAI Agents SDK runs against a :class:`prefixmon.Monitor`.

    Args:
        monitor: the monitor (toolset, policy, sink, observers).
        register_tools: declare protected tools that the toolset lacks from their JSON
            schemas (zero configuration).
    """

    def __init__(self, monitor: Monitor, *, register_tools: bool = True) -> None:
        self.monitor = monitor
        self.register_tools = register_tools
        self.guardrail: ToolInputGuardrail[Any] = ToolInputGuardrail(guardrail_function=self._check, name=GUARDRAIL_NAME)
        self._tools: set[str] = set()

    # -- protecting agents ------------------------------------------------------------------
    def protect(self, agent: Agent[Any]) -> Agent[Any]:
        """A copy of ``agent`` whose function tools are checked (handoff agents too)."""
        tools = [self.protect_tool(t) if isinstance(t, FunctionTool) else t for t in agent.tools]
        handoffs = [self.protect(h) if isinstance(h, Agent) else h for h in agent.handoffs]
        return agent.clone(tools=tools, handoffs=handoffs)

    def protect_tool(self, tool: FunctionTool) -> FunctionTool:
        """A copy of ``tool`` with the input guardrail and the outcome wrapper."""
        toolset = self.monitor.toolset
        if tool.name not in toolset and self.register_tools:
            toolset.add_schema(tool.name, tool.params_json_schema, description=tool.description)
        self._tools.add(tool.name)
        guards = [g for g in tool.tool_input_guardrails or () if g is not self.guardrail]
        return dataclasses.replace(
            tool,
            on_invoke_tool=self._wrap(tool.on_invoke_tool),
            tool_input_guardrails=[*guards, self.guardrail],
        )

    # -- runs -------------------------------------------------------------------------------
    @asynccontextmanager
    async def episode(
        self,
        task_id: str | None = None,
        labels: Mapping[str, str] | None = None,
        *,
        user: Any = None,
        **options: Any,
    ) -> AsyncIterator[Episode]:
        """Open an episode for the runs inside the block (``options`` as for ``Monitor.episode``).

        Args:
            user: the run's input (a string or input items); its user text goes into the pool.
        """
        async with self.monitor.episode(task_id, labels, **options) as ep:
            if options.get("exposed") is None:
                ep.expose(*(name for name in self._tools if name in self.monitor.toolset))
            for text in _user_texts(user):
                ep.user(text)
            run = _RunState(episode=ep)
            token = _RUN.set(run)
            try:
                yield ep
            finally:
                _RUN.reset(token)
                run.drop_batch()

    def run_config(self, base: RunConfig | None = None) -> RunConfig:
        """``base`` (or a default) set to return unknown tools to the model and report tool errors."""
        config = base or RunConfig()
        user_formatter = config.tool_error_formatter

        async def formatter(args: ToolErrorFormatterArgs[Any]) -> str | None:
            message = await self._format_error(args)
            if message is None and user_formatter is not None:
                answer = user_formatter(args)
                return await answer if hasattr(answer, "__await__") else answer  # type: ignore[misc]
            return message

        return dataclasses.replace(config, tool_not_found_behavior="return_error_to_model", tool_error_formatter=formatter)

    def hooks(self, inner: RunHooks[Any] | None = None) -> RunHooks[Any]:
        """Run hooks that keep unknown-tool calls in message order and batch parallel calls (``inner`` is called too)."""
        return _OrderHooks(inner, self.guardrail)

    async def run(
        self,
        agent: Agent[Any],
        input: Any,
        *,
        task_id: str | None = None,
        labels: Mapping[str, str] | None = None,
        outcome: Callable[[RunResult], Outcome | str | None] | None = None,
        run_config: RunConfig | None = None,
        **kwargs: Any,
    ) -> RunResult:
        """``Runner.run`` inside one episode.

        Args:
            agent: a protected agent (see :meth:`protect`).
            input: the run's input.
            outcome: ``(result) -> "success" | "partial" | "failure" | None`` for the record.
            kwargs: passed to ``Runner.run``.
        """
        async with self.episode(task_id, labels, user=input) as ep:
            hooks = _OrderHooks(kwargs.pop("hooks", None), self.guardrail)
            result = await Runner.run(agent, input, run_config=self.run_config(run_config), hooks=hooks, **kwargs)
            if outcome is not None:
                answer = outcome(result)
                if answer is not None:
                    ep.finish(answer)
        return result

    # -- the hooks --------------------------------------------------------------------------
    async def _check(self, data: ToolInputGuardrailData) -> ToolGuardrailFunctionOutput:
        run = _RUN.get()
        if run is None:
            return ToolGuardrailFunctionOutput.allow()
        context = data.context
        call_id = context.tool_call_id
        taken: PendingCall | ToolBlocked | None = None
        if await run.batched(self.monitor, call_id):
            assert run.batch is not None
            taken = run.batch.take_call(call_id, context.tool_name, context.tool_arguments)
        if taken is None:
            await run.record_unknown(call_id)
            try:
                await run.episode.begin(context.tool_name, context.tool_arguments, call_id=call_id)
            except ToolBlocked as blocked:
                taken = blocked
        if isinstance(taken, ToolBlocked):
            verdict = taken.verdict
            info = {"cause": verdict.cause.value if verdict.cause else None, "decision": taken.decision}
            return ToolGuardrailFunctionOutput.reject_content(str(taken), output_info=info)
        return ToolGuardrailFunctionOutput.allow()  # the admitted call waits in the episode for its tool

    def _wrap(self, invoke: Callable[[ToolContext[Any], str], Any]) -> Callable[[ToolContext[Any], str], Any]:
        async def on_invoke_tool(context: ToolContext[Any], arguments: str) -> Any:
            run = _RUN.get()
            pending = run.episode.pending(context.tool_call_id) if run is not None else None
            if run is None or pending is None:
                return await invoke(context, arguments)
            if pending.replaced:  # else the emitted JSON runs untouched (validated args may hold dates, enums)
                replacement = json.dumps(to_jsonable_python(pending.args))
                if pending.call.name != context.tool_name:
                    pending.abandon(
                        f"the Agents SDK cannot run {pending.call.name} in place of {context.tool_name}", started=False
                    )
                    return (
                        f"Call to {context.tool_name!r} was not run: {pending.verdict.reason}\n"
                        f"Guidance: call {pending.call.name} with {replacement} instead."
                    )
                arguments = replacement
            try:
                result = await invoke(context, arguments)
            except Exception as e:
                pending.failed(e)
                raise
            except BaseException:
                pending.abandon()
                raise
            error = run.errors.pop(context.tool_call_id, None)
            if error is not None:
                pending.failed(error)
            else:
                pending.done(_result_value(result))
            return result

        return on_invoke_tool

    async def _format_error(self, args: ToolErrorFormatterArgs[Any]) -> str | None:
        run = _RUN.get()
        if run is None:
            return None
        if args.kind == "tool_exception" and args.error is not None:
            run.errors[args.call_id] = args.error
            return f"{args.tool_name} failed: {type(args.error).__name__}: {args.error}"
        if args.kind == "tool_not_found":
            if await run.batched(self.monitor, args.call_id) and args.call_id in run.refused:
                return run.refused[args.call_id]
            await run.record_unknown(args.call_id, including=True)
            if args.call_id not in run.refused:  # not in the noted response: hooks were not installed
                await run.refuse(args.call_id, args.tool_name, None)
            return run.refused[args.call_id]
        return None


__getattr__ = moved_names(__name__, {"AgentsMonitor": "prefixmon.adapters.openai_agents:MonitorGuardrail"}, removal="0.3.0")
"""The names these classes had before 0.2.0, kept (with a warning) for one release."""
