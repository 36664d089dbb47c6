"""Counting a pre-call predictor against execution labels (shared by the benchmark verbs)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ("Confusion", "auc_pec", "pec", "ter")


@dataclass(slots=True)
class Confusion:
    """Counts of a binary predictor ("the environment will reject this call") against execution."""

    tp: int = 0
    fp: int = 0
    fn: int = 0
    tn: int = 0

    def add(self, predicted: bool, actual: bool) -> None:
        """Count one prediction."""
        if predicted and actual:
            self.tp += 1
        elif predicted:
            self.fp += 1
        elif actual:
            self.fn += 1
        else:
            self.tn += 1

    @property
    def n(self) -> int:
        """Number of predictions."""
        return self.tp + self.fp + self.fn + self.tn

    @property
    def precision(self) -> float | None:
        """tp / (tp + fp), or ``None`` with no positive prediction."""
        return self.tp / (self.tp + self.fp) if self.tp + self.fp else None

    @property
    def recall(self) -> float | None:
        """tp / (tp + fn), or ``None`` with no actual rejection."""
        return self.tp / (self.tp + self.fn) if self.tp + self.fn else None

    @property
    def agreement(self) -> float | None:
        """(tp + tn) / n, or ``None`` with no prediction."""
        return (self.tp + self.tn) / self.n if self.n else None


def ter(feds: Sequence[tuple[int, int]]) -> float:
    """Share of (FED, horizon) pairs that are fully executable."""
    return sum(1 for fed, t in feds if fed == t + 1) / len(feds) if feds else float("nan")


def pec(feds: Sequence[tuple[int, int]], k: int) -> float:
    """PEC(k): share of episodes whose first k actions are executable."""
    return sum(1 for fed, _ in feds if fed > k) / len(feds) if feds else float("nan")


def auc_pec(feds: Sequence[tuple[int, int]]) -> float:
    """AUC-PEC = mean of (FED - 1) / T."""
    return sum((fed - 1) / t for fed, t in feds) / len(feds) if feds else float("nan")
