"""pydantic-ai integration: a capability that checks every tool call of an agent run.

Add :class:`MonitorCapability` to an agent; each ``agent.run`` is one episode::

    from pydantic_ai import Agent
    from prefixmon import Monitor, Toolset
    from prefixmon.adapters.pydantic_ai import MonitorCapability

    monitor = Monitor(Toolset(), policy="block", sink="episodes.jsonl")
    agent = Agent(model, tools=[...], capabilities=[MonitorCapability(monitor)])

How the monitor acts through pydantic-ai's own hooks:

- **Checks** run in ``wrap_tool_validate``, in the order the model emitted the calls, before
  pydantic-ai validates the arguments. Tools the toolset does not declare are declared from the
  agent's own tool definitions (their JSON schemas), so zero configuration gives schema
  checks; rules the toolset declares for a tool win.
- **Blocked** calls raise :class:`~pydantic_ai.ModelRetry`: the model gets the monitor's
  reason as a retry prompt and may repair the call (within the tool's retry budget).
- **Escalation** uses deferred tool approval. Give the monitor ``escalate=deferred_approval``:
  a call the policy escalates raises :class:`~pydantic_ai.ApprovalRequired`, so it is resolved
  inline by a ``HandleDeferredToolCalls`` capability or ends the run with
  :class:`~pydantic_ai.DeferredToolRequests`. The episode then stays open and continues in the
  run that passes ``deferred_tool_results``: an approval records ``approve`` (``edit`` when it
  overrides the arguments), a denial ``deny``. Any other ``escalate=`` hook is awaited in-process.
- **Tool exceptions** are recorded as state-consistency failures and reach the model as
  :class:`~pydantic_ai.ToolFailed` results instead of aborting the run.
- Calls to tools the agent does not have never reach pydantic-ai's hooks; they are recorded
  (schema failures) from the message history, in message order.
- **Parallel calls** (a ``ModelResponse`` with several ``ToolCallPart`` s, which pydantic-ai
  validates in order and then runs concurrently) are judged as one batch
  (``Episode.begin_batch``, see docs/batches.md): the first of them to reach
  ``wrap_tool_validate`` admits every function-tool call of the run's last model response
  (calls of tools the agent lacks included, at their place), each against the state before
  the response, and each call then takes its own admission by its ``tool_call_id``. A
  reference only a sibling would return is refused with code ``sibling_dependency`` naming the
  sibling; the same side-effecting call twice is a non-blocking ``duplicate_call`` finding. A
  call of the batch pydantic-ai never validates is recorded as not run at the next model
  request or when the run ends. A single call, runs escalating through ``deferred_approval``,
  approved calls and responses with calls handled already are checked call by call; so is
  every call of a response if the batch path fails.
- The run's prompt, earlier user prompts and tool returns in the message history, and every
  tool result go into the information pool. The call id is pydantic-ai's ``tool_call_id``.
"""

from __future__ import annotations

import contextvars
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import anyio
from pydantic_core import to_jsonable_python

from prefixmon import (
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
from prefixmon.deprecation import moved_names
from prefixmon.episode import cancellation

from ._batches import Admissions

try:
    from pydantic_ai import (
        AgentRunResult,
        ApprovalRequired,
        CallDeferred,
        DeferredToolRequests,
        ModelResponse,
        ModelRetry,
        RunContext,
        TextPart,
        ToolCallPart,
        ToolFailed,
        ToolReturnPart,
        UserPromptPart,
    )
    from pydantic_ai.capabilities import AbstractCapability
    from pydantic_ai.capabilities.abstract import (
        RawToolArgs,
        ValidatedToolArgs,
        WrapRunHandler,
        WrapToolExecuteHandler,
        WrapToolValidateHandler,
    )
    from pydantic_ai.exceptions import SkipToolExecution, ToolFailedError, ToolRetryError
    from pydantic_ai.messages import ModelMessage, ModelRequest
    from pydantic_ai.models import ModelRequestContext
    from pydantic_ai.tools import ToolDefinition
except ImportError as e:  # pragma: no cover - exercised only without the extra
    raise ImportError('pip install "prefixmon[pydantic-ai]"') from e

__all__ = ("MonitorCapability", "deferred_approval")

_ANSWER: contextvars.ContextVar[Approve | Edit | Deny | None] = contextvars.ContextVar(
    "prefixmon_pydantic_ai_answer", default=None
)


async def deferred_approval(verdict: Verdict, call: ToolCall) -> Approve | Edit | Deny:
    """Escalation hook that routes escalations through pydantic-ai's deferred tool approval.

    Pass it as ``Monitor(..., escalate=deferred_approval)``. Inside a run monitored by
    :class:`MonitorCapability` it returns the approval the application gave through
    ``DeferredToolResults`` (or a ``HandleDeferredToolCalls`` handler); anywhere else it denies.
    """
    answer = _ANSWER.get()
    if answer is not None:
        return answer
    if verdict.cause is not None and verdict.cause.value == "schema":
        return Deny(f"nothing to approve: {verdict.reason}")
    return Deny("this call needs approval, which only a pydantic-ai run with MonitorCapability can ask for")


async def _close(episode: Episode, error: BaseException | None = None) -> EpisodeRecord:
    """Close the run's episode; an exception that ended the run marks it cancelled or errored."""
    if error is None:
        return await episode.aclose()
    if cancellation(error):
        return await episode.aclose("cancelled")
    return await episode.aclose("error", type(error).__name__)


@dataclass(eq=False)
class _Escalated:
    """A call waiting for a deferred approval (checked, not yet emitted to the episode)."""

    tool: str
    args: RawToolArgs
    """The arguments the model emitted."""


_REFUSED = "pydantic-ai refused the call before it could run"
"""Why a call of a tool the agent lacks is recorded as not run."""

_NOT_RUN = "pydantic-ai never ran the call"
"""Why a call of a batch is recorded as not run when it never reached the hooks."""


@dataclass(eq=False, kw_only=True)
class _Batch(Admissions):
    """The tool calls of one model response, admitted together by the first of them to reach the hooks;
    what no call took at the next model request or when the run ends was never run by pydantic-ai."""

    position: int
    """The position of the model response in the run's messages."""
    calls: list[ToolCallPart]
    """The calls, in message order."""
    ready: anyio.Event | None = None
    """Set when the admission is over."""

    def in_response(self, position: int, call_id: str) -> bool:
        return position == self.position and self.holds(call_id)

    def take_call(self, call: ToolCallPart, args: RawToolArgs) -> PendingCall | ToolBlocked | None:
        """This call's admission (see :meth:`Admissions.take`)."""
        emitted = next((c for c in self.calls if c.tool_call_id == call.tool_call_id), None)
        unchanged = emitted is not None and emitted.tool_name == call.tool_name and _same_args(emitted.args, args)
        return self.take(call.tool_call_id, unchanged)


@dataclass(eq=False)
class _RunState:
    """What one episode needs across the hooks (and runs) that make it up."""

    episode: Episode
    escalations: dict[str, _Escalated] = field(default_factory=dict)
    """Calls waiting for a deferred approval, by call id."""
    seen: set[tuple[int, str]] = field(default_factory=set)
    """Calls emitted to the episode: (position of their model response in the messages, call id).

    Keyed by response, not by call id alone: models that reuse ids every turn ("call_0")
    would otherwise hide a later call behind an earlier turn's record.
    """
    batch: _Batch | None = None
    """The calls of the latest response of several, admitted as one batch."""

    def drop_batch(self) -> None:
        if self.batch is not None:
            self.batch.drop(_NOT_RUN)

    def handled(self, position: int, call_id: str) -> bool:
        """Whether the call of that response is recorded, admitted, or waiting for an approval already."""
        return (position, call_id) in self.seen or call_id in self.escalations or self.episode.pending(call_id) is not None


@dataclass(eq=False)
class _Shared:
    parked: dict[str, _RunState] = field(default_factory=dict)
    """Episodes waiting for a deferred approval, by the call ids they wait for."""


def _text_of(content: Any) -> list[str]:
    if isinstance(content, str):
        return [content]
    if isinstance(content, Sequence):
        return [c for c in content if isinstance(c, str)]
    return []


def _last_response_at(messages: Sequence[ModelMessage]) -> tuple[int, ModelResponse] | None:
    """The last model response and its position in the messages."""
    for i in range(len(messages) - 1, -1, -1):
        message = messages[i]
        if isinstance(message, ModelResponse):
            return i, message
    return None


def _last_response(messages: Sequence[ModelMessage]) -> ModelResponse | None:
    found = _last_response_at(messages)
    return found[1] if found is not None else None


def _same_args(a: RawToolArgs | None, b: RawToolArgs | None) -> bool:
    def norm(x: RawToolArgs | None) -> Any:
        if isinstance(x, str):
            try:
                return json.loads(x) if x.strip() else {}
            except ValueError:
                return x
        return x or {}

    return bool(norm(a) == norm(b))


def _as_dict(args: RawToolArgs) -> dict[str, Any]:
    if isinstance(args, dict):
        return args
    parsed = json.loads(args) if args.strip() else {}
    if not isinstance(parsed, dict):
        raise ValueError("tool arguments must be a JSON object")
    return parsed


@dataclass
class MonitorCapability(AbstractCapability[Any]):
    """Checks every tool call of each agent run against a :class:`prefixmon.Monitor`.

    Args:
        monitor: the monitor (toolset, policy, sink, observers).
        task_id: the task of each run: a string, or ``(ctx) -> str``; default: the episode id.
        labels: episode labels (``model`` defaults to the agent's model name).
        outcome: ``(result) -> "success" | "partial" | "failure" | None``, called when a run
            ends; default: no outcome.
        register_tools: declare the agent's tools that the toolset lacks from their JSON
            schemas (zero configuration); ``False`` makes such calls unknown tools.
    """

    monitor: Monitor
    task_id: str | Callable[[RunContext[Any]], str] | None = None
    labels: Mapping[str, str] | None = None
    outcome: Callable[[AgentRunResult[Any]], Outcome | str | None] | None = None
    register_tools: bool = True
    _shared: _Shared = field(default_factory=_Shared, repr=False, compare=False)
    _state: _RunState | None = field(default=None, repr=False, compare=False)

    @classmethod
    def get_serialization_name(cls) -> str | None:
        return None

    @property
    def episode(self) -> Episode | None:
        """The episode of the run this (per-run) instance serves, if any."""
        return self._state.episode if self._state is not None else None

    async def for_run(self, ctx: RunContext[Any]) -> MonitorCapability:
        return replace(self, _state=None)

    async def close_parked(self) -> list[EpisodeRecord]:
        """Close every episode still waiting for a deferred approval (its calls are denied).

        Returns:
            the records of the episodes closed.
        """
        states = list({id(s): s for s in self._shared.parked.values()}.values())
        self._shared.parked.clear()
        records: list[EpisodeRecord] = []
        for state in states:
            await self._deny_open_escalations(state, "the approval was never given")
            records.append(await _close(state.episode))
        return records

    # -- run boundaries ---------------------------------------------------------------------
    async def wrap_run(self, ctx: RunContext[Any], *, handler: WrapRunHandler) -> AgentRunResult[Any]:
        state = self._resume(ctx) or self._open(ctx)
        self._state = state
        try:
            result = await handler()
        except BaseException as e:
            state.drop_batch()
            await _close(state.episode, e)
            raise
        state.drop_batch()
        await self._reconcile(ctx, state, result.all_messages())
        output = result.output
        waiting = (
            [c.tool_call_id for c in output.approvals if c.tool_call_id in state.escalations]
            if isinstance(output, DeferredToolRequests)
            else []
        )
        if waiting:
            for call_id in waiting:
                self._shared.parked[call_id] = state
            return result
        await self._deny_open_escalations(state, "the call was not approved")
        if self.outcome is not None:
            try:
                outcome = self.outcome(result)
            except Exception as e:
                await _close(state.episode, e)
                raise
            if outcome is not None:
                state.episode.finish(outcome)
        await _close(state.episode)
        return result

    def _resume(self, ctx: RunContext[Any]) -> _RunState | None:
        parked = self._shared.parked
        if not parked:
            return None
        response = _last_response(ctx.messages)
        if response is None:
            return None
        for part in response.parts:
            if isinstance(part, ToolCallPart) and part.tool_call_id in parked:
                state = parked[part.tool_call_id]
                for call_id in [k for k, v in parked.items() if v is state]:
                    del parked[call_id]
                return state
        return None

    def _open(self, ctx: RunContext[Any]) -> _RunState:
        labels = dict(self.labels or {})
        if "model" not in labels and "model" not in self.monitor.labels:
            labels["model"] = ctx.model.model_name
        task_id = self.task_id(ctx) if callable(self.task_id) else self.task_id
        episode = self.monitor.open_episode(task_id, labels)
        for message in ctx.messages:
            if isinstance(message, ModelResponse):
                for said in message.parts:
                    if isinstance(said, TextPart) and said.content:
                        episode.assistant(said.content)
                continue
            for part in message.parts:
                if isinstance(part, UserPromptPart):
                    for text in _text_of(part.content):
                        episode.user(text)
                elif isinstance(part, ToolReturnPart):
                    episode.inform(part.content)
        if ctx.prompt is not None:
            for text in _text_of(ctx.prompt):
                episode.user(text)
        return _RunState(episode=episode)

    # -- calls the hooks never see -----------------------------------------------------------
    async def before_model_request(self, ctx: RunContext[Any], request_context: ModelRequestContext) -> ModelRequestContext:
        state = self._state
        if state is not None:
            state.drop_batch()  # the calls of the previous response pydantic-ai did not run
            await self._reconcile(ctx, state, ctx.messages)
            await self._deny_open_escalations(state, None, messages=ctx.messages)
        return request_context

    async def _reconcile(
        self, ctx: RunContext[Any], state: _RunState, messages: Sequence[ModelMessage], upto: str | None = None
    ) -> None:
        """Record, in message order, calls pydantic-ai refused before any hook (unknown tools)."""
        found = _last_response_at(messages)
        manager = ctx.tool_manager
        if found is None:
            return
        position, response = found
        for part in response.parts:
            if not isinstance(part, ToolCallPart):
                continue
            call_id = part.tool_call_id
            if call_id == upto:
                return
            if state.handled(position, call_id):
                continue
            if manager is None or manager.get_tool_def(part.tool_name) is not None:
                continue  # the tool hooks see this call
            state.seen.add((position, call_id))
            try:
                pending = await state.episode.begin(part.tool_name, part.args, call_id=call_id)
            except ToolBlocked:
                continue
            pending.abandon(_REFUSED, started=False)

    async def _deny_open_escalations(
        self, state: _RunState, why: str | None, *, messages: Sequence[ModelMessage] | None = None
    ) -> None:
        """Record escalated calls that were answered with a denial (or never answered)."""
        if not state.escalations:
            return
        denials: dict[str, str] = {}
        if messages is not None:
            for message in messages:
                if isinstance(message, ModelRequest):
                    for part in message.parts:
                        if isinstance(part, ToolReturnPart) and part.tool_call_id in state.escalations:
                            denials[part.tool_call_id] = str(part.content)
        for call_id in list(state.escalations):
            reason = denials.get(call_id, why)
            if reason is None:
                continue
            escalated = state.escalations.pop(call_id)
            token = _ANSWER.set(Deny(reason))
            try:
                pending = await state.episode.begin(escalated.tool, escalated.args, call_id=call_id)
            except ToolBlocked:
                continue
            finally:
                _ANSWER.reset(token)
            pending.abandon("the call was denied")  # pragma: no cover - Deny never admits a call

    # -- tool calls --------------------------------------------------------------------------
    def _declare(self, state: _RunState, tool_def: ToolDefinition) -> None:
        name = tool_def.name
        toolset = self.monitor.toolset
        if name not in toolset:
            if not self.register_tools:
                return
            toolset.add_schema(name, tool_def.parameters_json_schema, description=tool_def.description or "")
        if name not in state.episode.state.exposed:
            state.episode.expose(name)

    # -- batches: the calls of one model response, admitted together --------------------------
    def _batch_for(self, ctx: RunContext[Any], state: _RunState, call: ToolCallPart) -> _Batch | None:
        """The batch of the response this call belongs to, or ``None``: the call is checked on its own."""
        if self.monitor.escalate is deferred_approval or ctx.tool_call_approved:  # approvals are asked call by call
            return None
        found = _last_response_at(ctx.messages)
        manager = ctx.tool_manager
        if found is None or manager is None:
            return None
        position, response = found
        call_id = call.tool_call_id
        current = state.batch
        if current is not None and current.in_response(position, call_id):
            return current
        calls: list[ToolCallPart] = []
        for part in response.parts:
            if isinstance(part, ToolCallPart):
                tool_def = manager.get_tool_def(part.tool_name)
                if tool_def is None or tool_def.kind == "function":  # what pydantic-ai runs with the response
                    calls.append(part)
        ids = {c.tool_call_id for c in calls}
        if len(calls) < 2 or len(ids) != len(calls) or call_id not in ids or any(state.handled(position, i) for i in ids):
            return None
        if current is not None:
            current.drop(_NOT_RUN)
        state.batch = _Batch(ids=tuple(c.tool_call_id for c in calls), position=position, calls=calls)
        return state.batch

    async def _admit_batch(self, ctx: RunContext[Any], state: _RunState, batch: _Batch) -> None:
        batch.started = True
        manager = ctx.tool_manager
        known: list[bool] = []
        for part in batch.calls:
            tool_def = manager.get_tool_def(part.tool_name) if manager is not None else None
            known.append(tool_def is not None)
            if tool_def is not None:
                self._declare(state, tool_def)  # every tool of the batch, before any is judged
            state.seen.add((batch.position, part.tool_call_id))
        begun = await state.episode.begin_batch(
            [ToolCall(name=c.tool_name, args=c.args if c.args is not None else {}, call_id=c.tool_call_id) for c in batch.calls]
        )
        for part, runs, taken in zip(batch.calls, known, begun, strict=True):
            if runs:
                batch.admitted[part.tool_call_id] = taken
            elif isinstance(taken, PendingCall):  # a tool the agent lacks: the hooks never see the call
                taken.abandon(_REFUSED, started=False)

    async def _batched(
        self, ctx: RunContext[Any], state: _RunState, call: ToolCallPart, args: RawToolArgs
    ) -> PendingCall | ToolBlocked | None:
        """This call's admission from its response's batch (admitting the batch if it is the first to arrive), or ``None``."""
        try:
            batch = self._batch_for(ctx, state, call)
            if batch is None:
                return None
            if not batch.started:
                batch.ready = anyio.Event()
                try:
                    await self._admit_batch(ctx, state, batch)
                except Exception as e:
                    batch.failed = True  # those it admitted or recorded are found by id; the rest are begun one by one
                    self.monitor.report_fault(state.episode, "pydantic_ai.batch", e)
                finally:
                    batch.ready.set()
            elif batch.ready is not None:
                await batch.ready.wait()
            if batch.failed:
                return None
            return batch.take_call(call, args)
        except Exception as e:  # never break the agent: the call is checked on its own
            self.monitor.report_fault(state.episode, "pydantic_ai.batch", e)
            return None

    async def wrap_tool_validate(
        self,
        ctx: RunContext[Any],
        *,
        call: ToolCallPart,
        tool_def: ToolDefinition,
        args: RawToolArgs,
        handler: WrapToolValidateHandler,
    ) -> ValidatedToolArgs:
        state = self._state
        if state is None or tool_def.kind == "output":
            return await handler(args)
        batched = await self._batched(ctx, state, call, args)
        if isinstance(batched, ToolBlocked):
            raise ModelRetry(str(batched)) from None
        if batched is None:
            return await self._validate_alone(ctx, state, call, tool_def, args, handler)
        return await self._validated(batched, call.tool_name, args, handler)

    async def _validate_alone(
        self,
        ctx: RunContext[Any],
        state: _RunState,
        call: ToolCallPart,
        tool_def: ToolDefinition,
        args: RawToolArgs,
        handler: WrapToolValidateHandler,
    ) -> ValidatedToolArgs:
        """Admit a call on its own (not one of a batch), then let pydantic-ai validate it."""
        call_id = call.tool_call_id
        episode = state.episode
        await self._reconcile(ctx, state, ctx.messages, upto=call_id)
        if episode.pending(call_id) is not None:  # an admitted call validated again (deferred, then approved)
            return await handler(args)
        self._declare(state, tool_def)
        name = call.tool_name
        escalated = state.escalations.pop(call_id, None) if ctx.tool_call_approved else None
        answer: Approve | Edit | Deny | None = None
        if escalated is not None:
            answer = Approve() if _same_args(escalated.args, args) else Edit(_as_dict(args))
            args = escalated.args
        elif self.monitor.escalate is deferred_approval and not ctx.tool_call_approved:
            verdict = episode.check(name, args, call_id=call_id)
            if (
                not verdict.executable
                and verdict.cause is not None
                and verdict.cause.value != "schema"
                and self.monitor.policy(verdict) == "escalate"
            ):
                await handler(args)
                state.escalations[call_id] = _Escalated(tool=name, args=args)
                raise ApprovalRequired(metadata={"prefixmon": {"cause": verdict.cause.value, "reason": verdict.reason}})
        found = _last_response_at(ctx.messages)
        if found is not None:
            state.seen.add((found[0], call_id))
        token = _ANSWER.set(answer)
        try:
            pending = await episode.begin(name, args, call_id=call_id)
        except ToolBlocked as blocked:
            raise ModelRetry(str(blocked)) from None
        finally:
            _ANSWER.reset(token)
        return await self._validated(pending, name, args, handler)

    @staticmethod
    async def _validated(
        pending: PendingCall, name: str, args: RawToolArgs, handler: WrapToolValidateHandler
    ) -> ValidatedToolArgs:
        """Let pydantic-ai validate an admitted call (the arguments it runs with)."""
        # a replacement runs with its checked arguments, as JSON values (the tool validates them
        # again, maybe with other classes than the rules'); else the emitted arguments run as emitted
        run_args: RawToolArgs = to_jsonable_python(pending.args) if pending.replaced else args
        if pending.call.name != name:
            pending.abandon(f"pydantic-ai cannot run {pending.call.name} in place of {name}", started=False)
            raise ModelRetry(
                f"Call to {name!r} was not run: {pending.verdict.reason}\n"
                f"Guidance: call {pending.call.name} with {json.dumps(run_args)} instead."
            )
        try:
            return await handler(run_args)
        except (ApprovalRequired, CallDeferred):
            raise  # the call stays open in the episode until a later run executes it
        except ModelRetry as e:  # the tool never ran: its arguments did not validate
            pending.abandon(f"pydantic-ai's argument validation refused the call: {e.message}", started=False)
            raise
        except Exception as e:
            pending.abandon(f"pydantic-ai's argument validation refused the call: {type(e).__name__}: {e}", started=False)
            raise

    async def wrap_tool_execute(
        self,
        ctx: RunContext[Any],
        *,
        call: ToolCallPart,
        tool_def: ToolDefinition,
        args: ValidatedToolArgs,
        handler: WrapToolExecuteHandler,
    ) -> Any:
        state = self._state
        pending = state.episode.pending(call.tool_call_id) if state is not None else None
        if pending is None:
            return await handler(args)
        try:
            result = await handler(args)
        except (ApprovalRequired, CallDeferred):
            raise  # the call stays open in the episode until a later run executes it
        except SkipToolExecution:
            pending.abandon("a capability skipped the execution", started=False)
            raise
        except ModelRetry as e:
            pending.failed(e.message)
            raise
        except ToolFailed as e:
            pending.failed(e.message)
            raise
        except (ToolRetryError, ToolFailedError) as e:
            pending.failed(str(e) or type(e).__name__)
            raise
        except Exception as e:
            pending.failed(e)
            raise ToolFailed(f"{call.tool_name} failed: {type(e).__name__}: {e}") from e
        except BaseException:
            pending.abandon()
            raise
        pending.done(result)
        return result


__getattr__ = moved_names(__name__, {"PrefixmonCapability": "prefixmon.adapters.pydantic_ai:MonitorCapability"}, removal="0.3.0")
"""The names these classes had before 0.2.0, kept (with a warning) for one release."""
