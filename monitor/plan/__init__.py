"""Plans: verify a planner's tool-call plan before anything runs (the paper's dual loop).

- :mod:`~prefixmon.plan.model`: plans, steps and ``{"$ref": ...}`` placeholders; :func:`parse_plan`;
- :mod:`~prefixmon.plan.verify`: :func:`verify_plan`, the runtime predicate over a
  copy-on-write view of the state, step by step, without running any tool;
- :mod:`~prefixmon.plan.revise`: :func:`revise_plan`, plan → verify → feedback → revise;
- :mod:`~prefixmon.plan.follow`: :class:`PlanFollower`, which matches executed calls to the
  approved plan (pass it as ``Monitor.episode(plan=...)`` or to ``Episode.follow``).

Method labels of the paper's four agent variants, for ``labels={"method": ...}``:
:data:`REACT`, :data:`PROMPT_PLANNING`, :data:`PLAN_CONDITIONED_REACT`, :data:`DUAL_LOOP`.
"""

from __future__ import annotations

from typing import Final

from ..rules.spec import SymbolicEffect as SymbolicEffect
from ..rules.spec import plan_effect as plan_effect
from ._view import PlanState as PlanState
from .follow import DeviationKind as DeviationKind
from .follow import PlanFollower as PlanFollower
from .follow import PlanMatch as PlanMatch
from .follow import deviation_kind as deviation_kind
from .model import Plan as Plan
from .model import PlanLike as PlanLike
from .model import PlanRef as PlanRef
from .model import PlanStep as PlanStep
from .model import SymbolicValueError as SymbolicValueError
from .model import parse_plan as parse_plan
from .model import ref as ref
from .revise import DEFAULT_BUDGET as DEFAULT_BUDGET
from .revise import PlanAttempt as PlanAttempt
from .revise import Planner as Planner
from .revise import PlanRevision as PlanRevision
from .revise import describe_tools as describe_tools
from .revise import revise_plan as revise_plan
from .revise import summarize_state as summarize_state
from .verify import PlanVerdict as PlanVerdict
from .verify import StepDetail as StepDetail
from .verify import StepStatus as StepStatus
from .verify import StepVerdict as StepVerdict
from .verify import verify_plan as verify_plan

REACT: Final = "react"
"""Interleaved reasoning and acting, no explicit plan."""
PROMPT_PLANNING: Final = "prompt_planning"
"""A plan is generated first but not enforced during execution."""
PLAN_CONDITIONED_REACT: Final = "plan_conditioned_react"
"""The generated (unverified) plan conditions the executor."""
DUAL_LOOP: Final = "dual_loop"
"""The plan is verified and revised before it conditions the executor."""
METHODS: Final = (REACT, PROMPT_PLANNING, PLAN_CONDITIONED_REACT, DUAL_LOOP)
"""The paper's four agent variants, as ``labels={"method": ...}`` values, in ladder order."""

__all__ = (
    "DEFAULT_BUDGET",
    "DUAL_LOOP",
    "METHODS",
    "PLAN_CONDITIONED_REACT",
    "PROMPT_PLANNING",
    "REACT",
    "DeviationKind",
    "Plan",
    "PlanAttempt",
    "PlanFollower",
    "PlanLike",
    "PlanMatch",
    "PlanRef",
    "PlanRevision",
    "PlanState",
    "PlanStep",
    "PlanVerdict",
    "Planner",
    "StepDetail",
    "StepStatus",
    "StepVerdict",
    "SymbolicEffect",
    "SymbolicValueError",
    "describe_tools",
    "deviation_kind",
    "parse_plan",
    "plan_effect",
    "ref",
    "revise_plan",
    "summarize_state",
    "verify_plan",
)
