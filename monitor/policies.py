"""Policies: what to do with a call that is not executable.

A policy maps a verdict to one of ``observe`` (record it, let it run), ``block`` (do not run
it; the agent gets a model-readable error), ``replan`` (ask an async hook for guidance or a
replacement call, which is checked again) or ``escalate`` (ask an async human hook to
approve, edit or deny). Only the episode turns these decisions into exceptions.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

from .exceptions import SpecError
from .verdict import ToolCall, Verdict
from .vocabulary import Cause

Action: TypeAlias = Literal["observe", "block", "replan", "escalate"]
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
    then ``default``.

    Example::

        Policy(default="block", tools={"send_money": "escalate"}, causes={"information": "observe"})
    """

    default: Action = "observe"
    tools: Mapping[str, Action | Mapping[Cause | str, Action]] = field(default_factory=dict)
    causes: Mapping[Cause | str, Action] = field(default_factory=dict)

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

    @classmethod
    def coerce(cls, policy: Policy | str) -> Policy:
        """Accept an action name as a policy that applies it everywhere."""
        if isinstance(policy, Policy):
            return policy
        return cls(default=_action(policy, "policy"))

    def __call__(self, verdict: Verdict) -> Action:
        cause = verdict.cause
        rule = self.tools.get(verdict.tool)
        if isinstance(rule, str):
            return rule
        if rule is not None and cause is not None:
            act = rule.get(cause) or rule.get(cause.value)
            if act is not None:
                return act
        if cause is not None:
            act = self.causes.get(cause) or self.causes.get(cause.value)
            if act is not None:
                return act
        return self.default

    def uses(self, action: Action) -> bool:
        """Whether any rule of this policy can choose ``action``."""
        acts = {self.default, *self.causes.values()}
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
