"""Policies: what to do with a call that is not executable.

A :class:`Policy` maps a verdict to one of ``observe`` (record it, let it run), ``block`` (do
not run it; the agent gets a model-readable error), ``replan`` (ask an async hook for
guidance or a replacement call, which is checked again) or ``escalate`` (ask an async human
hook to approve, edit or deny). :class:`Intervention` carries out that choice, hooks and
timeouts included, and answers with a :class:`Resolution`; only the episode turns a
resolution into a run or a ``ToolBlocked``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal, TypeAlias

import anyio

from ._call import ParsedCall, RawArgs
from .exceptions import SpecError
from .verdict import ToolCall, Verdict
from .vocabulary import Cause, Decision

__all__ = (
    "ACTIONS",
    "Action",
    "Approve",
    "Deny",
    "Edit",
    "EscalateHook",
    "Intervention",
    "Judge",
    "Policy",
    "Replan",
    "ReplanHook",
    "Resolution",
    "runnable_args",
)

Action: TypeAlias = Literal["observe", "block", "replan", "escalate"]
_REFUSE: Final = frozenset({"block", "replan"})
"""Actions that keep the call from running as emitted."""
ACTIONS: tuple[Action, ...] = ("observe", "block", "replan", "escalate")


def _action(value: str, where: str) -> Action:
    if value not in ACTIONS:
        raise SpecError(f"{where}: unknown policy {value!r}; expected one of {', '.join(ACTIONS)}")
    return value


def _cause(value: Cause | str, where: str) -> None:
    try:
        Cause(value)
    except ValueError:
        raise SpecError(f"{where}: unknown cause {value!r}; expected one of {', '.join(c.value for c in Cause)}") from None


@dataclass(frozen=True, slots=True, kw_only=True)
class Policy:
    """Chooses an action per tool and per cause.

    Resolution: ``tools[tool]`` (an action, or ``{cause: action}``), then ``causes[cause]``,
    then ``default``. A failure that does not block by default (an information
    finding: :attr:`~prefixmon.Failure.blocks`) is observed where the resolution says
    ``block`` or ``replan`` (the call runs; ``escalate`` still asks a human), unless a
    ``{cause: action}`` rule names its cause or its argument says ``Grounded(block=True)``.

    Example::

        Policy(default="block", tools={"send_money": "escalate"}, causes={"information": "observe"})
    """

    default: Action = "observe"
    tools: Mapping[str, Action | Mapping[Cause | str, Action]] = field(default_factory=dict)
    causes: Mapping[Cause | str, Action] = field(default_factory=dict)
    undetermined: Literal["pass", "escalate"] = "pass"
    """What happens to an executable call with a precondition that could not be decided from
    what was observed: it runs (``pass``, default), or a human decides (``escalate``). It is
    never blocked and never counts as a failure."""

    def __post_init__(self) -> None:
        _action(self.default, "Policy.default")
        for tool, rule in self.tools.items():
            if isinstance(rule, str):
                _action(rule, f"Policy.tools[{tool!r}]")
            else:
                for cause, act in rule.items():
                    _cause(cause, f"Policy.tools[{tool!r}]")
                    _action(act, f"Policy.tools[{tool!r}][{cause!r}]")
        for cause, act in self.causes.items():
            _cause(cause, "Policy.causes")
            _action(act, f"Policy.causes[{cause!r}]")
        if self.undetermined not in ("pass", "escalate"):
            raise SpecError(f"Policy.undetermined: expected 'pass' or 'escalate', got {self.undetermined!r}")

    @classmethod
    def coerce(cls, policy: Policy | str) -> Policy:
        """Accept an action name as a policy that applies it everywhere."""
        if isinstance(policy, Policy):
            return policy
        return cls(default=_action(policy, "policy"))

    def __call__(self, verdict: Verdict) -> Action:
        # (a Cause is a StrEnum: it hashes and compares as its value, so a rule keyed "schema" is found by Cause.SCHEMA)
        cause = verdict.cause
        rule = self.tools.get(verdict.tool)
        if cause is not None and not verdict.failures[0].blocks:  # only a rule naming its cause blocks it
            act = rule.get(cause) if rule is not None and not isinstance(rule, str) else None
            act = act or self.causes.get(cause)
            if act is not None:
                return act
            chosen = rule if isinstance(rule, str) else self.default
            return "observe" if chosen in _REFUSE else chosen  # reported, the call runs (a human may still review it)
        if isinstance(rule, str):
            return rule
        if rule is not None and cause is not None:
            act = rule.get(cause)
            if act is not None:
                return act
        if cause is not None:
            act = self.causes.get(cause)
            if act is not None:
                return act
        return self.default

    def uses(self, action: Action) -> bool:
        """Whether any rule of this policy can choose ``action``."""
        acts: set[str] = {self.default, *self.causes.values()}
        if self.undetermined == "escalate":
            acts.add("escalate")
        for rule in self.tools.values():
            acts.update([rule] if isinstance(rule, str) else rule.values())
        return action in acts


@dataclass(frozen=True, slots=True, kw_only=True)
class Replan:
    """A replan hook's answer: guidance for the agent, and/or a replacement call to run instead."""

    guidance: str | None = None
    call: ToolCall | None = None


@dataclass(frozen=True, slots=True)
class Approve:
    """Escalation answer: run the call as emitted."""


@dataclass(frozen=True, slots=True)
class Edit:
    """Escalation answer: run the call with these arguments instead (they are checked again)."""

    args: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Deny:
    """Escalation answer: do not run the call."""

    reason: str = "a human reviewer denied this call"


ReplanHook: TypeAlias = Callable[[Verdict, ToolCall, Any], Awaitable["Replan | ToolCall | str | None"]]
"""``async (verdict, call, state) -> Replan | ToolCall | str | None``."""
EscalateHook: TypeAlias = Callable[[Verdict, ToolCall], Awaitable["Approve | Edit | Deny"]]
"""``async (verdict, call) -> Approve | Edit | Deny``; a timeout denies."""


Judge: TypeAlias = Callable[[str, RawArgs, int, "str | None"], Verdict]
"""``(name, args, depth, call_id) -> verdict``: checks a replacement or edited call."""
FaultFn: TypeAlias = Callable[[str, BaseException], None]
"""``(where, error)``: reports an error the monitor caught in itself."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Resolution:
    """What to do with a call that is not executable."""

    decision: Decision
    args: dict[str, Any] | None = None
    """Arguments to run the call with; ``None`` when it is not run."""
    call: ToolCall | None = None
    """A replacement call to run instead (a replan's replacement, a human's edit)."""
    guidance: str | None = None
    """Text for the agent from a hook (why it was not run, what to do instead)."""

    @property
    def runs(self) -> bool:
        """Whether the call (or its replacement) runs."""
        return self.args is not None


class Intervention:
    """Carries out a :class:`Policy`: observe, block, replan or escalate, with their hooks and timeouts.

    A hook that raises, times out or answers with something it should not is a monitor fault
    (reported through ``fault``) and the call is blocked; an escalation nobody answers in
    time is denied, whatever the hook returns afterwards.
    """

    __slots__ = ("escalate", "escalate_timeout", "policy", "replan", "replan_timeout")

    def __init__(
        self,
        policy: Policy,
        *,
        replan: ReplanHook | None = None,
        replan_timeout: float = 60.0,
        escalate: EscalateHook | None = None,
        escalate_timeout: float = 60.0,
    ) -> None:
        if policy.uses("replan") and replan is None:
            raise SpecError("the policy can replan, but no replan= hook was given")
        if policy.uses("escalate") and escalate is None:
            raise SpecError("the policy can escalate, but no escalate= hook was given")
        self.policy = policy
        self.replan = replan
        self.replan_timeout = replan_timeout
        self.escalate = escalate
        self.escalate_timeout = escalate_timeout

    async def resolve(self, verdict: Verdict, call: ParsedCall, state: Any, *, judge: Judge, fault: FaultFn) -> Resolution:
        """Decide what happens to ``call``, which is not executable (never raises)."""
        action = self.policy(verdict)
        if action == "observe":
            runnable = runnable_args(verdict, call)
            return Resolution(decision=Decision.OBSERVE, args=runnable)
        if action == "block":
            return Resolution(decision=Decision.BLOCK)
        if action == "replan":
            return await self._replan(verdict, call, state, judge, fault)
        return await self._escalate(verdict, call, judge, fault)

    async def resolve_undetermined(self, verdict: Verdict, call: ParsedCall, *, judge: Judge, fault: FaultFn) -> Resolution:
        """An executable call with undecided preconditions, under ``Policy(undetermined="escalate")``: a human decides."""
        return await self._escalate(verdict, call, judge, fault)

    async def _replan(self, verdict: Verdict, call: ParsedCall, state: Any, judge: Judge, fault: FaultFn) -> Resolution:
        hook = self.replan
        emitted = ToolCall(name=verdict.tool, args=call.raw, call_id=verdict.call_id)
        answer: Any = None
        if hook is not None:
            try:
                with anyio.move_on_after(self.replan_timeout) as scope:
                    answer = await hook(verdict, emitted, state)
                if _timed_out(scope):  # an answer after the timeout (a shielded or cancel-swallowing hook) is ignored
                    fault("replan hook", TimeoutError(f"no answer within {self.replan_timeout:g} s"))
                    answer = None
            except Exception as e:
                fault("replan hook", e)
                answer = None
        if isinstance(answer, str):
            answer = Replan(guidance=answer)
        elif isinstance(answer, ToolCall):
            answer = Replan(call=answer)
        if not isinstance(answer, Replan) or (answer.call is not None and not isinstance(answer.call, ToolCall)):
            if answer is not None:
                what = type(answer.call if isinstance(answer, Replan) else answer).__name__
                fault("replan hook", TypeError(f"the replan hook answered with {what}, not Replan, ToolCall or str"))
            return Resolution(decision=Decision.BLOCK)
        if answer.call is None:
            return Resolution(decision=Decision.REPLAN, guidance=answer.guidance)
        replacement = ToolCall(name=answer.call.name, args=answer.call.args, call_id=answer.call.call_id or emitted.call_id)
        checked = judge(replacement.name, replacement.args, verdict.depth, replacement.call_id)
        if not checked.executable or checked.args is None:
            note = f"the suggested replacement was not executable either: {checked.reason}"
            return Resolution(decision=Decision.REPLAN, guidance=f"{answer.guidance}; {note}" if answer.guidance else note)
        return Resolution(decision=Decision.REPLAN, args=dict(checked.args), call=replacement, guidance=answer.guidance)

    async def _escalate(self, verdict: Verdict, call: ParsedCall, judge: Judge, fault: FaultFn) -> Resolution:
        hook = self.escalate
        emitted = ToolCall(name=verdict.tool, args=call.raw, call_id=verdict.call_id)
        answer: Any = None
        timed_out = False
        if hook is not None:
            try:
                with anyio.move_on_after(self.escalate_timeout) as scope:
                    answer = await hook(verdict, emitted)
                timed_out = _timed_out(scope)
            except Exception as e:
                fault("escalation hook", e)
                return Resolution(decision=Decision.BLOCK)
        if timed_out or answer is None:  # a timeout denies, whatever the hook returned after it
            why = f"no human answered within {self.escalate_timeout:g} s" if timed_out else "no human approved the call"
            return Resolution(decision=Decision.DENY, guidance=why)
        if isinstance(answer, Deny):
            return Resolution(decision=Decision.DENY, guidance=answer.reason)
        if isinstance(answer, Approve):
            runnable = runnable_args(verdict, call)
            if runnable is None:
                return Resolution(decision=Decision.DENY, guidance="the call cannot run as emitted")
            return Resolution(decision=Decision.APPROVE, args=runnable)
        if isinstance(answer, Edit):
            edited = judge(verdict.tool, answer.args, verdict.depth, verdict.call_id)
            if not edited.executable or edited.args is None:
                return Resolution(decision=Decision.DENY, guidance=f"the edited call is not executable either: {edited.reason}")
            replacement = ToolCall(name=verdict.tool, args=answer.args, call_id=verdict.call_id)
            return Resolution(decision=Decision.EDIT, args=dict(edited.args), call=replacement)
        fault("escalation hook", TypeError(f"escalation hook returned {type(answer).__name__}, not Approve/Edit/Deny"))
        return Resolution(decision=Decision.BLOCK)


def _timed_out(scope: anyio.CancelScope) -> bool:
    """Whether a hook's time ran out, also when it answered anyway (shielded itself, or swallowed the cancellation)."""
    return scope.cancelled_caught or scope.cancel_called or anyio.current_time() >= scope.deadline


def runnable_args(verdict: Verdict, call: ParsedCall) -> dict[str, Any] | None:
    """The arguments ``call``, judged ``verdict``, can still run with, or ``None`` when nothing can run."""
    if verdict.args is not None:
        return dict(verdict.args)
    if verdict.code == "invalid_json":  # an unknown tool's call can still run where the framework owns the tools
        return None
    return call.args
