"""What the benchmark verbs share: prefix metrics of a few episodes, and the rows of their tables.

``prefixmon bench bfcl``, ``tau2`` and ``toolsandbox`` report PEC, TER and AUC-PEC of small
groups of episodes (a family, a domain) from (FED, horizon) pairs, and the pre-call
prediction of environment rejections as a :class:`~prefixmon.analytics.Confusion` table;
the τ² and ToolSandbox verbs also judge each perturbed call with the declared rules and the
dry run (a :class:`JudgedTrial`) and tabulate agreement per perturbation kind. Pure Python:
the verbs run without the ``analytics`` extra.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Final, Protocol

from prefixmon import Cause, Verdict
from prefixmon.analytics import Confusion

__all__ = (
    "PREDICTIVE",
    "JudgedTrial",
    "auc_pec",
    "fmt",
    "kind_table",
    "pec",
    "prediction",
    "prediction_header",
    "prediction_row",
    "predicts_rejection",
    "ter",
)

PREDICTIVE: Final = frozenset({Cause.SCHEMA, Cause.DEPENDENCY, Cause.PRECONDITION})
"""Causes that predict the environment's rejection (information findings do not: it accepts them)."""


def ter(feds: Sequence[tuple[int, int]]) -> float:
    """Share of (FED, horizon) pairs that are fully executable."""
    return sum(1 for fed, t in feds if fed == t + 1) / len(feds) if feds else float("nan")


def pec(feds: Sequence[tuple[int, int]], k: int) -> float:
    """PEC(k): share of episodes whose first k actions are executable."""
    return sum(1 for fed, _ in feds if fed > k) / len(feds) if feds else float("nan")


def auc_pec(feds: Sequence[tuple[int, int]]) -> float:
    """AUC-PEC = mean of (FED - 1) / T."""
    return sum((fed - 1) / t for fed, t in feds) / len(feds) if feds else float("nan")


def fmt(x: float | None) -> str:
    """A rate to three decimals, ``n/a`` when undefined."""
    return "n/a" if x is None else f"{x:.3f}"


class JudgedTrial(Protocol):
    """One call judged pre-call by the declared rules and by the dry run, then executed on a copy."""

    @property
    def kind(self) -> str:
        """Perturbation kind (``gold`` for the call itself)."""

    @property
    def declared(self) -> Verdict:
        """The declared rules' verdict."""

    @property
    def dry_run(self) -> Verdict:
        """The dry run's verdict."""

    @property
    def rejected(self) -> str | None:
        """Execution label: why the environment rejected the call, or ``None``."""


def predicts_rejection(verdict: Verdict) -> bool:
    """Whether ``verdict`` predicts the environment will reject the call (not executable, for a :data:`PREDICTIVE` cause)."""
    return not verdict.executable and verdict.cause in PREDICTIVE


def prediction(trials: Iterable[JudgedTrial], mode: str) -> Confusion:
    """Pre-call prediction of rejections by the verdicts of ``mode`` (``declared``, else the dry run's) against execution."""
    return Confusion.of(
        (predicts_rejection(t.declared if mode == "declared" else t.dry_run), t.rejected is not None) for t in trials
    )


def kind_table(trials: Sequence[JudgedTrial]) -> list[str]:
    """Per perturbation kind: trials, how many execution rejected, and how often each mode's executable flag agrees."""
    kinds: dict[str, list[JudgedTrial]] = {}
    for t in trials:
        kinds.setdefault(t.kind, []).append(t)
    lines = [f"{'kind':<20}{'n':>6}{'rejected':>9}{'declared agree':>15}{'dry-run agree':>14}"]
    for kind, group in sorted(kinds.items()):
        rej = sum(t.rejected is not None for t in group)
        d = sum(t.declared.executable == (t.rejected is None) for t in group)
        r = sum(t.dry_run.executable == (t.rejected is None) for t in group)
        lines.append(f"{kind:<20}{len(group):>6}{rej:>9}{d / len(group):>15.4f}{r / len(group):>14.4f}")
    return lines


def prediction_header(label_width: int = 10, tn_width: int = 7) -> str:
    """The header of a prediction table (precision, recall and the four counts)."""
    return f"{'mode':<{label_width}}{'precision':>10}{'recall':>8}{'tp':>7}{'fp':>6}{'fn':>6}{'tn':>{tn_width}}"


def prediction_row(label: str, c: Confusion, label_width: int = 10, tn_width: int = 7) -> str:
    """One row of a prediction table, under :func:`prediction_header` of the same widths."""
    return f"{label:<{label_width}}{fmt(c.precision):>10}{fmt(c.recall):>8}{c.tp:>7}{c.fp:>6}{c.fn:>6}{c.tn:>{tn_width}}"
