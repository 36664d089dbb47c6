"""The dual loop: plan, verify, feed the verdict back, revise, up to a budget.

Planner and verifier work is method-side cost: it never adds actions to an episode.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from ..exceptions import PlanError
from ..rules.spec import ToolSpec
from ..state import TrackedState
from ..toolset import Toolset
from .model import Plan, PlanLike, parse_plan
from .verify import PlanVerdict, _target, verify_plan

__all__ = (
    "DEFAULT_BUDGET",
    "PlanAttempt",
    "PlanRevision",
    "Planner",
    "describe_tools",
    "revise_plan",
    "summarize_state",
)

DEFAULT_BUDGET: Final = 5
"""Plans the revise loop verifies at most (the paper's verification budget)."""
_SUMMARY_ITEMS: Final = 20


def describe_tools(tools: Iterable[ToolSpec]) -> list[dict[str, Any]]:
    """A JSON-ready catalogue of tools for a planner's prompt.

    Each entry has ``name``, ``description``, ``parameters``, and when declared:
    ``produces`` (reference kinds the result binds, ``{kind: key}``), ``references``
    (``{argument: kind}`` that must come from an earlier result), ``grounded`` arguments and
    ``requires`` (precondition messages).
    """
    out: list[dict[str, Any]] = []
    for spec in tools:
        entry: dict[str, Any] = {"name": spec.name, "description": spec.description, "parameters": dict(spec.parameters)}
        if spec.produces:
            entry["produces"] = {p.kind: p.key for p in spec.produces}
        if spec.refs:
            entry["references"] = {path: r.kind for path, r in spec.refs}
        if spec.grounded:
            entry["grounded"] = list(spec.grounded)
        if spec.requires:
            entry["requires"] = [p.message or p.name for p in spec.requires]
        if spec.invalidates:
            entry["invalidates"] = sorted(spec.invalidates)
        out.append(entry)
    return out


def summarize_state(state: TrackedState, *, limit: int = _SUMMARY_ITEMS) -> str:
    """A compact, model-readable summary of a tracked state (see :meth:`TrackedState.summary`)."""
    return state.summary(limit=limit)


Planner = Callable[[str, Sequence[ToolSpec], str, str | None], Awaitable[PlanLike]]
"""``async (goal, tools, state_summary, feedback) -> plan``; ``feedback`` is ``None`` the first time."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanAttempt:
    """One round of the revise loop."""

    number: int
    """1-based."""
    plan: Plan | None
    """The plan, or ``None`` when the planner's output did not parse."""
    verdict: PlanVerdict | None
    error: str | None = None
    """Why the attempt has no plan: the planner's output did not parse, or the planner raised."""
    feedback: str
    """What the verifier said about this attempt (given to the planner for the next one)."""
    planner_seconds: float
    verifier_seconds: float

    @property
    def approved(self) -> bool:
        """Whether this attempt's plan was approved."""
        return self.verdict is not None and self.verdict.approved


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanRevision:
    """The outcome of the revise loop: the approved plan (if any) and every attempt."""

    goal: str
    plan: Plan | None
    """The approved plan; ``None`` when no plan was approved within the budget."""
    verdict: PlanVerdict | None
    """The approved plan's verdict."""
    attempts: tuple[PlanAttempt, ...]
    budget: int
    planner_error: Exception | None = field(default=None, compare=False)
    """The exception the planner raised, which ended the loop early; ``None`` when it did not.

    The failed call is the last attempt (no plan, ``error`` says what was raised), so the
    attempts before it and the method-side time spent are kept. Re-raise it to propagate.
    """

    @property
    def approved(self) -> bool:
        """Whether a plan was approved."""
        return self.plan is not None

    @property
    def planner_seconds(self) -> float:
        """Total planner time (method-side cost)."""
        return sum(a.planner_seconds for a in self.attempts)

    @property
    def verifier_seconds(self) -> float:
        """Total verification time (method-side cost)."""
        return sum(a.verifier_seconds for a in self.attempts)

    def labels(self) -> dict[str, str]:
        """Episode labels describing the method-side cost: ``plan_attempts``, ``plan_approved``."""
        return {"plan_attempts": str(len(self.attempts)), "plan_approved": "true" if self.approved else "false"}


async def revise_plan(
    planner: Planner,
    goal: str,
    toolset: Toolset,
    *,
    state: TrackedState | None = None,
    budget: int = DEFAULT_BUDGET,
    allow_undetermined: bool = True,
    read_only: Iterable[str] = (),
    allows_no_tool: bool = False,
) -> PlanRevision:
    """The dual loop: plan, verify, feed the verdict back, revise; up to ``budget`` plans.

    The planner gets the goal, the exposed tool specs, a state summary
    (:func:`summarize_state`) and the feedback on its previous plan (``None`` at first); a
    plan that does not parse is an attempt too, and the parse error is the feedback.
    Nothing runs and the episode's depth does not change: planner and verifier work is
    method-side cost.

    Args:
        planner: ``async (goal, tools, state_summary, feedback) -> plan``.
        goal: the user's goal.
        toolset: the tools the planner may use.
        budget: the most plans to verify (default 5, as in the paper).
        state, allow_undetermined, read_only, allows_no_tool: as for :func:`verify_plan`.

    Returns:
        every attempt, and the approved plan only if one was approved. A planner that raises
        (an ``Exception``, such as an API timeout) ends the loop: its call is the last
        attempt and the exception is :attr:`PlanRevision.planner_error`; cancellation and
        other ``BaseException`` propagate.
    """
    if budget < 1:
        raise ValueError(f"budget must be at least 1, got {budget}")
    toolset, parent = _target(toolset, state)
    specs = [s for s in toolset if s.name in parent.exposed]
    summary = summarize_state(parent)
    read_only = tuple(read_only)
    feedback: str | None = None
    attempts: list[PlanAttempt] = []
    for number in range(1, budget + 1):
        started = time.perf_counter()
        try:
            proposed = await planner(goal, specs, summary, feedback)
        except Exception as e:
            attempts.append(
                PlanAttempt(
                    number=number,
                    plan=None,
                    verdict=None,
                    error=f"the planner raised {type(e).__name__}: {e}",
                    feedback="",
                    planner_seconds=time.perf_counter() - started,
                    verifier_seconds=0.0,
                )
            )
            return PlanRevision(goal=goal, plan=None, verdict=None, attempts=tuple(attempts), budget=budget, planner_error=e)
        planned = time.perf_counter()
        try:
            plan = parse_plan(proposed)
        except PlanError as e:
            feedback = (
                f"The plan could not be read: {e}. Write it as a JSON list of steps "
                '{"tool": ..., "args": {...}}, using {"$ref": "<step id>.<field>"} for outputs of earlier steps.'
            )
            attempts.append(
                PlanAttempt(
                    number=number,
                    plan=None,
                    verdict=None,
                    error=str(e),
                    feedback=feedback,
                    planner_seconds=planned - started,
                    verifier_seconds=time.perf_counter() - planned,
                )
            )
            continue
        verdict = verify_plan(
            toolset,
            plan,
            state=parent,
            allow_undetermined=allow_undetermined,
            read_only=read_only,
            allows_no_tool=allows_no_tool,
        )
        feedback = verdict.feedback()
        attempts.append(
            PlanAttempt(
                number=number,
                plan=plan,
                verdict=verdict,
                feedback=feedback,
                planner_seconds=planned - started,
                verifier_seconds=time.perf_counter() - planned,
            )
        )
        if verdict.approved:
            return PlanRevision(goal=goal, plan=plan, verdict=verdict, attempts=tuple(attempts), budget=budget)
    return PlanRevision(goal=goal, plan=None, verdict=None, attempts=tuple(attempts), budget=budget)
