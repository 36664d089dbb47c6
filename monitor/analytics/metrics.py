"""Prefix-executability metrics per cohort, vectorised (DESIGN §3, paper eqs. 1-12).

A cohort is the set of episodes that share the values of the grouping label keys (for
example dataset x model x method). Every sum here is one ``np.bincount`` over all
episodes at once, so the cost is O(N) whatever the number of cohorts.

Definitions (N episodes, horizon T_i, first-error depth FED_i, success Y_i):

* PEC(k) = (1/N) Σ 1{FED_i > k}; n_k = Σ 1{T_i >= k}; PEC_elig(k) = Σ 1{FED_i > k} / n_k
  (FED_i > k implies T_i >= k, so PEC(k) = (n_k/N)·PEC_elig(k)).
* TER = (1/N) Σ 1{FED_i = T_i + 1}; mean FED; AUC-PEC = (1/N) Σ (FED_i - 1)/T_i.
  The AUC fractions are summed as integers (FED_i - 1)·L/T_i with L the least common
  multiple of the horizons (:func:`auc_scale`), so that every sum, point or resampled,
  is exact and an interval cannot miss its own estimate by a rounding step.
* RR = Σ Y_i·1{FED_i <= T_i} / Σ 1{FED_i <= T_i}, undefined when the denominator
  (RR-eligible) is 0.
* P(Y=1) = q·s + (1-q)·r with q = TER, s = P(Y=1 | FED = T+1), r = RR.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from .columns import (
    CAUSES,
    DENSE_LIMIT,
    EpisodeColumns,
    IntArray,
    combined,
    count_codes,
    fits_table,
    small_int,
    unique_codes,
    unique_pairs,
)

__all__ = (
    "STATISTICS",
    "CohortSums",
    "FloatArray",
    "Grouping",
    "Int64Array",
    "auc_scale",
    "cohort_sums",
    "episode_statistics",
    "group",
    "ratios",
)

FloatArray = npt.NDArray[np.float64]
Int64Array = npt.NDArray[np.int64]

_EXACT: Final = 2**53
"""Integers below this are exact in double precision."""
STATISTICS: Final[tuple[str, ...]] = (
    "n",
    "executable",
    "fed",
    "auc",
    "success",
    "recovered",
    "completion",
)
"""Per-episode statistics the bootstrap sums (then ``pec@k`` for each checkpoint).

``n`` is 1, ``executable`` is 1{FED = T+1}, ``fed`` is FED, ``auc`` is (FED - 1)·L/T,
``success`` is Y, ``recovered`` is Y·1{FED <= T}, ``completion`` is 1 / 0.5 / 0 for
success / partial / otherwise, ``pec@k`` is 1{FED > k}. L is :func:`auc_scale` (1: the
plain fractions).
"""


def auc_scale(horizon: IntArray, bound: int) -> int:
    """L: the least common multiple of the horizons, so that (FED - 1)·L/T is an integer.

    Args:
        horizon: T_i per episode.
        bound: the largest number of episodes one sum can add up (a resample may draw
            one task many times); L·bound must stay below 2**53 for the sums to be exact.

    Returns:
        L, or 1 (plain fractions, rounded) when the horizons are too many and too varied.
    """
    scale = 1
    top = int(horizon.max()) + 1 if horizon.size else 0
    dense = fits_table(top, len(horizon))
    present = np.flatnonzero(count_codes(horizon, top)) if dense else np.unique(horizon)  # (no sorted copy)
    for t in present.tolist():
        scale = math.lcm(scale, int(t))
        if scale * max(bound, 1) >= _EXACT:
            return 1
    return scale


@dataclass(frozen=True, slots=True, kw_only=True)
class Grouping:
    """Which cohort and which bootstrap stratum each episode belongs to."""

    keys: tuple[str, ...]
    """The label keys that define cohorts."""
    cohort: IntArray
    """Cohort index per episode (in the narrowest signed integers that hold it, see :func:`~.columns.small_int`)."""
    cohort_keys: tuple[tuple[str | None, ...], ...]
    """Label values of each cohort, aligned with ``keys`` (``None`` = label missing)."""
    stratum: IntArray
    """Stratum index per episode (tasks are resampled within a stratum; narrowest integers, as ``cohort``)."""
    strata: tuple[str | None, ...]
    """Name of each stratum (the value of the strata label, usually the dataset)."""


def group(columns: EpisodeColumns, by: Sequence[str], strata: str | None = "dataset") -> Grouping:
    """Assign episodes to cohorts (sorted by label values) and bootstrap strata.

    Only label sets some episode has make cohorts (a selection keeps the lookup tables).
    """
    keys = tuple(by)
    per_set = [tuple(ls.get(k) for k in keys) for ls in columns.label_sets]
    used = {per_set[i] for i in np.unique(columns.label_set).tolist()}
    cohort_keys = tuple(sorted(used, key=lambda t: tuple((v is None, v or "") for v in t)))
    index = {k: i for i, k in enumerate(cohort_keys)}
    cohort_table = np.array([index.get(k, -1) for k in per_set], dtype=small_int(len(cohort_keys)))
    if strata is None:
        stratum = np.zeros(len(columns), dtype=small_int(0))
        names: tuple[str | None, ...] = (None,)
    else:
        stratum, names = columns.label(strata)
    return Grouping(
        keys=keys,
        cohort=cohort_table[columns.label_set] if len(columns) else np.zeros(0, dtype=np.int8),
        cohort_keys=cohort_keys,
        stratum=stratum,
        strata=names,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class CohortSums:
    """Exact per-cohort counts and sums (C cohorts); metrics are ratios of these."""

    n: Int64Array
    """Episodes per cohort (N)."""
    executable: Int64Array
    """Fully executable episodes (TER numerator)."""
    fed_sum: Int64Array
    """Σ FED_i."""
    auc_sum: FloatArray
    """Σ (FED_i - 1)·L/T_i (an exact integer when L > 1)."""
    success: Int64Array
    """Σ Y_i."""
    success_executable: Int64Array
    """Σ Y_i·1{FED_i = T_i + 1} (numerator of s)."""
    recovered: Int64Array
    """Σ Y_i·1{FED_i <= T_i} (RR numerator)."""
    outcomes: Int64Array
    """(C, 4): success, partial, failure, no outcome."""
    causes: Int64Array
    """(C, 5): primary causes of first failures, in :data:`~.columns.CAUSES` order."""
    fed_code: Int64Array
    """Sorted distinct ``cohort·W + FED`` (W = :attr:`width`): every (cohort, FED) that occurs."""
    fed_count: Int64Array
    """Episodes with each ``fed_code``."""
    horizon_code: Int64Array
    """Sorted distinct ``cohort·W + T``."""
    horizon_count: Int64Array
    """Episodes with each ``horizon_code``."""
    width: int = 1
    """W: larger than every FED and horizon."""
    auc_scale: int = 1
    """L of ``auc_sum`` (:func:`auc_scale`)."""

    # The per-depth sums are kept sparse (what occurs), never as cohorts x largest horizon:
    # many cohorts with long bare horizons would otherwise take gigabytes.

    def auc_pec(self, c: int) -> float:
        """AUC-PEC of cohort ``c``: Σ (FED_i - 1)·L/T_i / (L·N), one rounding."""
        return float(self.auc_sum[c]) / (self.auc_scale * int(self.n[c]))

    @property
    def eligible(self) -> Int64Array:
        """RR-eligible = episodes with a prefix failure = N(1 - TER)."""
        return self.n - self.executable

    def _segment(self, codes: Int64Array, counts: Int64Array, c: int) -> tuple[Int64Array, Int64Array]:
        lo, hi = np.searchsorted(codes, [c * self.width, (c + 1) * self.width])
        return codes[lo:hi] - c * self.width, np.cumsum(counts[lo:hi])

    def survivors_at(self, c: int, depths: npt.ArrayLike) -> Int64Array:
        """#{FED_i > k} in cohort ``c`` for each depth k."""
        values, cum = self._segment(self.fed_code, self.fed_count, c)
        at = np.searchsorted(values, np.asarray(depths, dtype=np.int64), side="right")
        below = np.where(at > 0, cum[np.maximum(at - 1, 0)] if cum.size else 0, 0)
        return (int(self.n[c]) - below).astype(np.int64)

    def reach_at(self, c: int, depths: npt.ArrayLike) -> Int64Array:
        """n_k = #{T_i >= k} in cohort ``c`` for each depth k."""
        values, cum = self._segment(self.horizon_code, self.horizon_count, c)
        at = np.searchsorted(values, np.asarray(depths, dtype=np.int64) - 1, side="right")
        below = np.where(at > 0, cum[np.maximum(at - 1, 0)] if cum.size else 0, 0)
        return (int(self.n[c]) - below).astype(np.int64)

    def curve_length(self, c: int) -> int:
        """Largest horizon in cohort ``c`` (the PEC curve is reported for k = 1..this)."""
        values, _ = self._segment(self.horizon_code, self.horizon_count, c)
        return int(values[-1]) if values.size else 0

    def knots(self, c: int) -> Int64Array:
        """The depths 1..K where some per-depth value of cohort ``c`` can change."""
        fed, _ = self._segment(self.fed_code, self.fed_count, c)
        horizon, _ = self._segment(self.horizon_code, self.horizon_count, c)
        k = self.curve_length(c)
        points = np.unique(np.concatenate([np.array([1], dtype=np.int64), fed, horizon + 1]))
        return points[(points >= 1) & (points <= k)]

    @property
    def survivors(self) -> Int64Array:
        """Dense (C, K + 1): column k = Σ 1{FED_i > k}, k = 0..K (K = largest horizon). For small inputs."""
        k_max = max((self.curve_length(c) for c in range(len(self.n))), default=0)
        return np.stack([self.survivors_at(c, np.arange(k_max + 1)) for c in range(len(self.n))]).reshape(len(self.n), -1)

    @property
    def reach(self) -> Int64Array:
        """Dense (C, K + 1): column k = n_k = Σ 1{T_i >= k}. For small inputs."""
        k_max = max((self.curve_length(c) for c in range(len(self.n))), default=0)
        return np.stack([self.reach_at(c, np.arange(k_max + 1)) for c in range(len(self.n))]).reshape(len(self.n), -1)


def cohort_sums(columns: EpisodeColumns, cohort: IntArray, n_cohorts: int, auc_scale: int = 1) -> CohortSums:
    """Every exact count the point estimates need, in one pass of bincounts (L = ``auc_scale``)."""
    # 32-bit codes and counts from tables: at ten million episodes, 64-bit copies of every
    # column and sorted copies of them were most of a report's memory
    c = cohort
    horizon, fed = columns.horizon, columns.fed
    executable = fed == horizon + 1
    y = columns.outcome == 0

    def count(mask: npt.NDArray[np.bool_]) -> Int64Array:
        return count_codes(c, n_cohorts, mask).astype(np.int64)

    width = (int(horizon.max()) if horizon.size else 0) + 2
    fed_code, fed_count, _ = unique_pairs(cohort, width, fed, inverse=False)
    horizon_code, horizon_count, _ = unique_pairs(cohort, width, horizon, inverse=False)
    outcome_code = np.where(columns.outcome < 0, 3, columns.outcome).astype(np.int8)
    outcomes = count_codes(combined(c, 4, outcome_code), n_cohorts * 4).reshape(n_cohorts, 4)
    failed = columns.cause >= 0
    n_causes = len(CAUSES)
    causes = count_codes(combined(c, n_causes, columns.cause), n_cohorts * n_causes, failed).reshape(n_cohorts, n_causes)
    fed_sum = np.zeros(n_cohorts, dtype=np.int64)  # exact: the sum of FED * (episodes with it) per cohort
    np.add.at(fed_sum, fed_code // width, (fed_code % width) * fed_count)
    return CohortSums(
        n=count_codes(c, n_cohorts).astype(np.int64),
        executable=count(executable),
        fed_sum=fed_sum,
        auc_sum=_auc_sums(c, fed, horizon, auc_scale, n_cohorts, width),
        success=count(y),
        success_executable=count(y & executable),
        recovered=count(y & ~executable),
        outcomes=outcomes.astype(np.int64),
        causes=causes.astype(np.int64),
        fed_code=fed_code.astype(np.int64),
        fed_count=fed_count.astype(np.int64),
        horizon_code=horizon_code.astype(np.int64),
        horizon_count=horizon_count.astype(np.int64),
        width=width,
        auc_scale=auc_scale,
    )


def _auc_sums(cohort: IntArray, fed: IntArray, horizon: IntArray, scale: int, n_cohorts: int, width: int) -> FloatArray:
    """Σ (FED_i - 1)·L/T_i per cohort, from the counts of each (cohort, FED, T) when they fit a table."""
    size = n_cohorts * width * width
    if size > DENSE_LIMIT:  # long horizons: one value per episode
        return np.bincount(cohort, weights=_auc(fed, horizon, scale), minlength=n_cohorts).astype(np.float64)
    codes, counts, _ = unique_codes(combined(combined(cohort, width, fed), width, horizon), size, inverse=False)
    t = codes % width
    f = (codes // width) % width
    return np.bincount(codes // (width * width), weights=_auc(f, t, scale) * counts, minlength=n_cohorts).astype(np.float64)


_Numbers = npt.NDArray[np.integer[Any]] | FloatArray


def _auc(fed: _Numbers, horizon: _Numbers, scale: int) -> FloatArray:
    """(FED - 1)·L/T per episode: integers when L > 1."""
    if scale > 1:
        return ((fed - 1).astype(np.int64) * (scale // horizon.astype(np.int64))).astype(np.float64)
    return ((fed - 1) / horizon).astype(np.float64)


def episode_statistics(columns: EpisodeColumns, checkpoints: Sequence[int], auc_scale: int = 1) -> FloatArray:
    """(N, S) matrix of per-episode statistics, columns :data:`STATISTICS` then ``pec@k`` (L = ``auc_scale``)."""
    horizon = columns.horizon.astype(np.float64)
    fed = columns.fed.astype(np.float64)
    executable = fed == horizon + 1
    y = columns.outcome == 0
    completion = np.where(y, 1.0, np.where(columns.outcome == 1, 0.5, 0.0))
    cols = [
        np.ones_like(fed),
        executable.astype(np.float64),
        fed,
        _auc(fed, horizon, auc_scale),
        y.astype(np.float64),
        (y & ~executable).astype(np.float64),
        completion,
        *((fed > k).astype(np.float64) for k in checkpoints),
    ]
    return np.stack(cols, axis=1) if len(fed) else np.zeros((0, len(cols)))


def ratios(sums: FloatArray, checkpoints: Sequence[int], auc_scale: int = 1) -> dict[str, FloatArray]:
    """Metric values from summed statistics (first axis = :func:`episode_statistics` columns).

    Works on point sums (shape (S, C)) and bootstrap sums (shape (S, C, B)) alike; an
    undefined ratio (zero denominator) is NaN. ``auc_scale`` is the L of the AUC sums.
    """
    n = sums[0]
    executable = sums[1]
    with np.errstate(invalid="ignore", divide="ignore"):
        out = {
            "ter": executable / n,
            "mean_fed": sums[2] / n,
            "auc_pec": sums[3] / (n * auc_scale),
            "success": sums[4] / n,
            "rr": sums[5] / (n - executable),
            "completion": sums[6] / n,
        }
        for j, k in enumerate(checkpoints):
            out[f"pec@{k}"] = sums[len(STATISTICS) + j] / n
    return out
