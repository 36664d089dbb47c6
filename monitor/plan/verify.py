"""Plan verification: the runtime predicate, step by step, over a copy-on-write view of the state.

Each step is judged by :mod:`prefixmon.predicate` (the same checks, causes, tie-break and
reasons as at runtime) in the state the earlier steps would leave: the verifier applies the
earlier steps' state transitions to a :class:`~prefixmon.plan._view.PlanState` and binds
their produced references symbolically. It adds only what plans need: placeholders
(``{"$ref": ...}``), and *undetermined* where a check depends on a value only execution
reveals.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any, Final

from .._internal.trusted import trusted_constructor
from ..exceptions import ArgumentError
from ..predicate import check_schema, judge, reference_failure, schema_failure, transition
from ..rules.spec import Precondition, ToolSpec, values_at
from ..state import TrackedState
from ..toolset import Toolset
from ..verdict import ArgumentProblem, Failure, Undetermined, Verdict
from ..vocabulary import Cause
from ._samples import with_samples
from ._view import ArgsView, PlanState, Simulation
from .model import LISTED, Plan, PlanLike, PlanRef, PlanStep, listed, loc_text, parse_plan

__all__ = ("PlanVerdict", "StepDetail", "StepStatus", "StepVerdict", "verify_plan")


class StepStatus(StrEnum):
    """The verifier's answer for one step."""

    EXECUTABLE = "executable"
    NOT_EXECUTABLE = "not_executable"
    UNDETERMINED = "undetermined"
    """No check fails, but a precondition depends on what only execution reveals."""


@dataclass(frozen=True, slots=True, kw_only=True)
class StepDetail:
    """What a :class:`StepVerdict` says beyond the runtime verdict."""

    why_undetermined: tuple[str, ...] = ()
    hint: str | None = None
    notes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class StepVerdict:
    """The verdict on one planned step."""

    step: PlanStep
    status: StepStatus
    verdict: Verdict
    """The runtime-shaped verdict: failures in tie-break order, ``call_id`` = the step id,
    ``undetermined`` = names of undecided preconditions."""
    detail: StepDetail | None = None
    """Explanations beyond the verdict, when there are any (see the properties)."""

    @property
    def why_undetermined(self) -> tuple[str, ...]:
        """Why each undecided check could not be decided."""
        return self.detail.why_undetermined if self.detail is not None else ()

    @property
    def hint(self) -> str | None:
        """How a planner can repair the step, when there is a clear repair."""
        return self.detail.hint if self.detail is not None else None

    @property
    def notes(self) -> tuple[str, ...]:
        """Effects of the step that could not be simulated."""
        return self.detail.notes if self.detail is not None else ()

    @property
    def executable(self) -> bool:
        """Whether no check fails (executable or undetermined)."""
        return self.status is not StepStatus.NOT_EXECUTABLE

    @property
    def cause(self) -> Cause | None:
        """The primary cause, when not executable."""
        return self.verdict.cause

    @property
    def reason(self) -> str:
        """The primary failure's reason (the runtime's wording)."""
        return self.verdict.reason

    def feedback(self) -> str:
        """One model-readable line about the step."""
        head = f"{self.step.label}"
        if self.status is StepStatus.NOT_EXECUTABLE:
            text = _sentence(f"{head} is not executable ({self.cause}): {self.reason}")
            others = [_sentence(f.reason) for f in self.verdict.failures[1:]]
            if others:
                text += " Also: " + " ".join(others)
            if self.hint:
                text += " Hint: " + _sentence(self.hint)
            return text
        if self.status is StepStatus.UNDETERMINED:
            return f"{head} can only be checked when it runs: {'; '.join(self.why_undetermined)}"
        return f"{head} is executable"


def _sentence(text: str) -> str:
    return text if text.endswith((".", "!", "?")) else text + "."


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanVerdict:
    """The verifier's answer for a whole plan."""

    plan: Plan
    steps: tuple[StepVerdict, ...]
    approved: bool
    problems: tuple[str, ...] = ()
    """Problems of the plan as a whole (an empty plan)."""

    @property
    def rejected(self) -> tuple[StepVerdict, ...]:
        """Steps that are not executable."""
        return tuple(s for s in self.steps if s.status is StepStatus.NOT_EXECUTABLE)

    @property
    def undetermined(self) -> tuple[StepVerdict, ...]:
        """Steps that only execution can decide."""
        return tuple(s for s in self.steps if s.status is StepStatus.UNDETERMINED)

    @property
    def first_failure(self) -> StepVerdict | None:
        """The first step that is not executable."""
        return next((s for s in self.steps if s.status is StepStatus.NOT_EXECUTABLE), None)

    def feedback(self) -> str:
        """Model-readable feedback for the planner: what is wrong with which step, and how to fix it."""
        n = len(self.steps)
        if self.approved:
            lines = [f"The plan is approved: none of its {n} step(s) fails a check."]
            lines += [f"- {s.feedback()}" for s in self.undetermined]
            return "\n".join(lines)
        rejected = self.rejected
        lines = ["The plan is rejected."]
        lines += [f"- {p}" for p in self.problems]
        if rejected:
            lines[0] = f"The plan is rejected: {len(rejected)} of its {n} step(s) cannot execute."
        lines += [f"- {s.feedback()}" for s in self.steps if s.status is not StepStatus.EXECUTABLE]
        if rejected or self.undetermined:
            lines.append("Revise the plan so that every step can execute in order, using only outputs of earlier steps.")
        return "\n".join(lines)


_step_verdict: Final = trusted_constructor(StepVerdict, ("step", "status", "verdict", "detail"))
"""Every step makes one: built without the frozen ``__init__`` (as the runtime builds executable verdicts)."""


def verify_plan(
    toolset: Toolset,
    plan: PlanLike,
    *,
    state: TrackedState | None = None,
    allow_undetermined: bool = True,
    read_only: Iterable[str] = (),
    allows_no_tool: bool = False,
) -> PlanVerdict:
    """Check a plan step by step against the runtime predicate, without running any tool.

    Each step is judged in the state the earlier steps would leave: ``state`` (an episode's
    ``episode.state``, or a fresh state) seen through a copy-on-write view, with the earlier
    steps' invalidations and effects applied to the view and their produced references bound
    symbolically. A step that fails a check produces nothing.

    Args:
        toolset: the tools the plan calls.
        plan: the plan (see :func:`~prefixmon.plan.parse_plan`).
        state: the state to verify against (default: a fresh state, every exposed tool available).
        allow_undetermined: approve plans with undetermined steps (the runtime monitor
            checks them when they run); ``False`` approves only fully decided plans.
        read_only: tools that do not change the live environment. After any other step, a
            precondition that reads ``state.env`` and fails is undetermined (the environment
            the plan would meet has changed); after read-only steps it fails.
        allows_no_tool: approve an empty plan.

    Returns:
        the verdict: approved or not, and a :class:`StepVerdict` per step.

    Raises:
        PlanError: the plan is malformed.
    """
    toolset, parent = _target(toolset, state)
    plan = parse_plan(plan)
    only_reads = frozenset(read_only) | {s.name for s in toolset if s.metadata.get("read_only")}
    sim = Simulation(plan, toolset, parent.depth, only_reads)
    view = PlanState(parent, sim)
    watch = _Watch(view, sim)
    verdicts: list[StepVerdict] = []
    specs, base = sim.specs, parent.depth + 1
    for i, step in enumerate(plan.steps):
        sim.current = i
        view.depth = base + i
        spec = specs[i]
        verdict, whys, hint = _check_step(toolset, view, sim, watch, step, spec)
        notes: tuple[str, ...] = ()
        if verdict.executable:
            assert spec is not None and verdict.args is not None
            sim.passed(i, spec)
            notes = _simulate(view, sim, step, spec, verdict.args)
            status = StepStatus.UNDETERMINED if whys else StepStatus.EXECUTABLE
        else:
            status = StepStatus.NOT_EXECUTABLE
        detail = StepDetail(why_undetermined=whys, hint=hint, notes=notes) if whys or hint or notes else None
        verdicts.append(_step_verdict(step, status, verdict, detail))
    problems: tuple[str, ...] = ()
    if not plan.steps and not allows_no_tool:
        problems = ("the plan has no steps, and this task cannot be finished without a tool call",)
    approved = not problems and all(
        v.status is StepStatus.EXECUTABLE or (allow_undetermined and v.status is StepStatus.UNDETERMINED) for v in verdicts
    )
    return PlanVerdict(plan=plan, steps=tuple(verdicts), approved=approved, problems=problems)


def _target(target: Any, state: TrackedState | None) -> tuple[Toolset, TrackedState]:
    """The toolset and parent state; an episode or a monitor as ``target`` is deprecated."""
    if not isinstance(target, Toolset):
        monitor = getattr(target, "monitor", None)
        owner = target if isinstance(getattr(target, "toolset", None), Toolset) else monitor
        if owner is None or not isinstance(getattr(owner, "toolset", None), Toolset):
            raise TypeError(f"verify_plan needs a Toolset, got {type(target).__name__}")
        warnings.warn(
            "verify_plan(episode or monitor, plan) is deprecated and will be removed in 0.3.0; "
            "call verify_plan(monitor.toolset, plan, state=episode.state)",
            DeprecationWarning,
            stacklevel=3,
        )
        if state is None and monitor is not None:  # an episode: its own state
            state = target.state
        target = owner.toolset
    if state is None:
        state = TrackedState(exposed=[s.name for s in target if s.exposed])
    return target, state


class _Watch:
    """Sees what each precondition of a step reads in the view, and what only execution decides."""

    __slots__ = ("names", "raised", "sim", "step", "view", "whys")

    def __init__(self, view: PlanState, sim: Simulation) -> None:
        self.view = view
        self.sim = sim
        self.step: PlanStep | None = None
        self.whys: list[str] = []
        """Why each undecided precondition is undecided, in precondition order."""
        self.names: list[str] = []
        """Their names, in the same order."""
        self.raised = False
        """Whether a precondition raised without reading a placeholder (a fault, and undecided)."""

    def start(self, step: PlanStep) -> None:
        """A new step is judged."""
        self.step = step
        self.whys = []
        self.names = []
        self.raised = False

    def before(self, pre: Precondition, args: Mapping[str, Any]) -> Mapping[str, Any]:
        """Reset the read marks; arguments holding placeholders are seen through a view that notes reads."""
        view = self.view
        view._read_env = view._read_facts = False
        view._symbols_read.clear()
        step = self.step
        return ArgsView(args, step.symbolic, view) if step is not None and step.symbolic else args

    def after(self, pre: Precondition, outcome: Failure | Undetermined | None, error: Exception | None) -> str | None:
        """Why the outcome depends on execution: a placeholder was read, or the environment or facts it read change."""
        view, sim = self.view, self.sim
        if view._symbols_read:
            why = _why_symbolic(pre, view, sim)
        elif error is not None:  # a fault, which the predicate records; undecided here
            self.raised = True
            self.names.append(pre.name)
            self.whys.append(f"precondition {pre.name} raised {error!r}")
            return None
        elif isinstance(outcome, Undetermined):
            why = f"precondition {pre.name}: {outcome.why or 'undetermined before execution'}"
        elif outcome is None:
            return None
        elif view._read_env and sim.changed_env is not None:
            why = f"precondition {pre.name} reads the environment, which {sim.changed_env} may change before this step"
        elif view._read_facts and sim.lost_facts is not None:
            why = f"precondition {pre.name} reads facts that {sim.lost_facts} changes in a way known only when it runs"
        else:
            return None
        self.names.append(pre.name)
        self.whys.append(why)
        return why


def _check_step(
    toolset: Toolset, view: PlanState, sim: Simulation, watch: _Watch, step: PlanStep, spec: ToolSpec | None
) -> tuple[Verdict, tuple[str, ...], str | None]:
    """The predicate's verdict on one step, why it is undetermined, and a repair hint."""
    depth = view.depth
    whys: list[str] = []
    if step.refs and spec is not None:  # 1. schema: placeholders as samples of their declared type
        args, failure = _schema_with_refs(toolset, view, sim, step, spec, whys)
    else:
        _, args, failure = check_schema(toolset, view, step.tool, step.args)
    if failure is not None or args is None:
        assert failure is not None
        return Verdict(tool=step.tool, call_id=step.id, depth=depth, executable=False, failures=(failure,)), (), None
    assert spec is not None
    placeholder = _placeholder_failure(sim, step) if step.refs else None
    watch.start(step)
    verdict = judge(toolset, view, spec, args, depth=depth, call_id=step.id, watch=watch, dependency=placeholder, sent=step.args)
    if not verdict.executable:  # what only execution decides does not matter for a step that cannot execute
        first = verdict.failures[0]
        repairable = first.cause is Cause.DEPENDENCY and first is not placeholder
        return verdict, (), _hint(toolset, view, sim, spec, args, first) if repairable else None
    if watch.raised:
        verdict = replace(verdict, undetermined=tuple(watch.names))
    whys.extend(watch.whys)
    _aliasing(view, sim, spec, args, whys)
    return verdict, tuple(whys), None


def _schema_with_refs(
    toolset: Toolset, view: PlanState, sim: Simulation, step: PlanStep, spec: ToolSpec, whys: list[str]
) -> tuple[dict[str, Any] | None, Failure | None]:
    """Check 1 for a step with placeholders: literals must fit; a placeholder may only be undecided.

    The arguments are validated with each placeholder replaced by a sample of its declared
    type. A problem the validator reports at or inside a placeholder's location, or a value
    problem at a location that holds one (a combinator over the object, say), depends on the
    value only execution reveals; any other problem is a real failure.
    """
    _, validated, failure = check_schema(toolset, view, step.tool, with_samples(sim.samples, step, spec))
    if failure is None or failure.code != "invalid_arguments":
        if validated is not None:
            validated = {**validated, **{name: step.args[name] for name in step.symbolic}}
        return validated, failure
    refs = [loc for loc, _ in step.refs]
    real: list[ArgumentProblem] = []
    undecided: list[tuple[str | int, ...]] = []
    for problem in failure.problems:
        at = _placeholder_at(problem, refs)
        if at is None:
            real.append(problem)
        elif at not in undecided:
            undecided.append(at)
    if real:
        return None, failure if len(real) == len(failure.problems) else schema_failure(step.tool, ArgumentError(real))
    by_loc = dict(step.refs)
    for loc in undecided:
        whys.append(f"whether '{loc_text(loc)}' fits the schema depends on {by_loc[loc]!r}, known only when it runs")
    return dict(step.args), None


def _placeholder_at(problem: ArgumentProblem, refs: list[tuple[str | int, ...]]) -> tuple[str | int, ...] | None:
    """The placeholder location a problem may be caused by: it is at or inside one, or holds one."""
    loc = problem.location
    for r in refs:
        if loc[: len(r)] == r:
            return r
    if problem.kind in ("value", "root"):
        return next((r for r in refs if r[: len(loc)] == loc), None)
    return None


def _placeholder_failure(sim: Simulation, step: PlanStep) -> Failure | None:
    """A ``$ref`` must name an earlier step that can execute."""
    for loc, r in step.refs:
        i = sim.index.get(r.step)
        if i is not None and i < sim.current and sim.ran[i]:
            continue
        where = f"{step.tool}: argument '{loc_text(loc)}' refers to {r!r}"
        if i is None:
            known = listed([s.id for s in sim.steps[: min(sim.current, LISTED)]], sim.current) or "none"
            return Failure(
                cause=Cause.DEPENDENCY,
                code="unknown_step",
                reason=f"{where}, but the plan has no step {r.step!r} (earlier steps: {known})",
            )
        if i >= sim.current:
            when = "this step itself" if i == sim.current else f"step {i + 1}, which comes later"
            return Failure(
                cause=Cause.DEPENDENCY,
                code="forward_reference",
                reason=f"{where}, but {r.step!r} is {when}; a step can only use outputs of earlier steps",
            )
        return Failure(
            cause=Cause.DEPENDENCY,
            code="failed_step",
            reason=f"{where}, but {sim.steps[i].label} is not executable, so its output will not exist",
        )
    return None


def _aliasing(view: PlanState, sim: Simulation, spec: ToolSpec, args: Mapping[str, Any], whys: list[str]) -> None:
    """A placeholder whose step's output was invalidated through another path may be stale."""
    if not view.invalidated_any:
        return
    for path, r in spec.refs:
        for _, value in values_at(args, path):
            if type(value) is not PlanRef:
                continue
            aliased = view.aliased_stale(value, r.kind)
            if aliased is not None:
                other, stale = aliased
                at = stale.stale_depth - sim.base_depth if stale.stale_depth is not None else "?"
                whys.append(
                    f"whether {value!r} is still a current {r.kind} depends on whether it is the same value as "
                    f"{other!r}, which {stale.stale_by or 'an earlier step'} invalidates at step {at}; known only at run time"
                )


def _hint(
    toolset: Toolset, view: PlanState, sim: Simulation, spec: ToolSpec, args: Mapping[str, Any], failure: Failure
) -> str | None:
    """How to repair a reference failure: use an earlier step's output, or add a step that produces the kind."""
    if failure.code == "stale_reference":
        return None
    kind = next(
        (
            r.kind
            for path, r in spec.refs
            for loc, value in values_at(args, path)
            if (f := reference_failure(toolset, view, spec, loc, r, value)) is not None and f.code == failure.code
        ),
        None,
    )
    if kind is None:
        return None
    made = sim.producers.get(kind)
    if made is not None:
        i, key = made
        return f'use the output of an earlier step, e.g. {{"$ref": "{sim.steps[i].id}.{key}"}}'
    producers = toolset.producers_of(kind)
    if producers:
        key = next((p.key for p in toolset[producers[0]].produces if p.kind == kind), kind)
        tools = " or ".join(producers)
        return f'add an earlier step that calls {tools} and pass {{"$ref": "<that step\'s id>.{key}"}}'
    return f"no tool produces a {kind}; the value must come from the state before the plan"


def _why_symbolic(pre: Precondition, view: PlanState, sim: Simulation) -> str:
    read = view._symbols_read
    if len(read) == 1:
        r = read[0]
        i = sim.index.get(r.step)
        return f"precondition {pre.name} reads {r!r}, known only after {sim.steps[i].label if i is not None else r.step} runs"
    refs = list(dict.fromkeys(read))
    steps = list(dict.fromkeys(r.step for r in refs))
    labels = [sim.steps[sim.index[s]].label if s in sim.index else s for s in steps]
    return (
        f"precondition {pre.name} reads {', '.join(map(repr, refs))}, known only after "
        f"{' and '.join(labels)} {'runs' if len(labels) == 1 else 'run'}"
    )


def _simulate(view: PlanState, sim: Simulation, step: PlanStep, spec: ToolSpec, args: Mapping[str, Any]) -> tuple[str, ...]:
    """Apply a step's state transition to the view, with its placeholder output as the result."""
    if sim.changed_env is None and step.tool not in sim.read_only:
        sim.changed_env = step.label
    faults = transition(view, spec, args, step.output, accepted=True, simulate=True)
    if not faults:
        return ()
    if sim.lost_facts is None:
        sim.lost_facts = step.label
    return tuple(f"{f.where} could not be simulated ({type(f.error).__name__}: {f.error})" for f in faults)
