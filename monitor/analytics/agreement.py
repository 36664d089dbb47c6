"""Agreement of a binary predictor with labels: the confusion counts the benchmark verbs report.

A pre-call verdict predicts "the environment will reject this call"; executing the call
labels whether it did. :class:`Confusion` counts the four outcomes::

    precision = tp / (tp + fp)      recall = tp / (tp + fn)      agreement = (tp + tn) / n

each ``None`` where its denominator is 0 (undefined, not 0). Pure Python: unlike the rest
of :mod:`prefixmon.analytics` it needs no extra, so benchmark verbs count with it anywhere.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ("Confusion",)


@dataclass(slots=True, kw_only=True)
class Confusion:
    """Counts of a binary predictor against labels (positive: "the environment rejects the call")."""

    tp: int = 0
    """Predicted positive, labelled positive."""
    fp: int = 0
    """Predicted positive, labelled negative (a false alarm)."""
    fn: int = 0
    """Predicted negative, labelled positive (a miss)."""
    tn: int = 0
    """Predicted negative, labelled negative."""

    @classmethod
    def of(cls, pairs: Iterable[tuple[bool, bool]]) -> Confusion:
        """The counts of ``(predicted, actual)`` pairs."""
        counts = cls()
        for predicted, actual in pairs:
            counts.add(predicted, actual)
        return counts

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
        """tp / (tp + fn), or ``None`` with no actual positive."""
        return self.tp / (self.tp + self.fn) if self.tp + self.fn else None

    @property
    def agreement(self) -> float | None:
        """(tp + tn) / n, or ``None`` with no prediction."""
        return (self.tp + self.tn) / self.n if self.n else None

    def as_dict(self) -> dict[str, float | int | None]:
        """Precision, recall and the four counts, JSON-ready (the benchmark verbs' ``--format json``)."""
        return {"precision": self.precision, "recall": self.recall, "tp": self.tp, "fp": self.fp, "fn": self.fn, "tn": self.tn}
