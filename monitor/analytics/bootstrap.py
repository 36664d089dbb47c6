"""Paired, task-level, stratified percentile bootstrap, and the Wilson score interval.

The resampling unit is a task within a stratum (a dataset): a resample draws, with
replacement, as many of the tasks a cohort ran as it ran, and every rollout of a drawn
task comes along. Cohorts that ran the same tasks of a stratum (the usual grid: every
model x method on the whole dataset) share **one draw for all of them and every
statistic**: the draw is a vector of multiplicities m (how often each task was drawn), and
the resampled sum of any statistic in any of those cohorts is m · (per-task sums of that
statistic in that cohort). So B resamples of all of them are one matrix product,
(B x U) @ (U x C·S), and their differences are paired. A cohort that ran other tasks
gets its own draw over its own tasks, so its interval does not depend on which other
cohorts are in the input; a comparison with it is resampled over the tasks both ran
(see :func:`~.report.build_report`).

Seeding: each stratum draws from its own generator, seeded with (seed, crc32(stratum
name)), so results do not depend on record order, on chunking, or on which other
datasets or cohorts are in the input.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from .columns import IntArray
from .metrics import FloatArray, Int64Array

__all__ = (
    "BLOCK_CELLS",
    "CHUNK_CELLS",
    "ProgressFn",
    "multiplicities",
    "percentile_interval",
    "resample_blocks",
    "resample_sums",
    "stratum_generator",
    "wilson_interval",
)

ProgressFn = Callable[[int, int], None]
"""``progress(done, total)`` in units of resampled tasks."""

_EXACT_FLOAT32: Final = float(2**24)
CHUNK_CELLS: Final = 4_000_000
"""Upper bound on the multiplicity matrix (resamples x tasks) held at once."""
BLOCK_CELLS: Final = 2_000_000
"""Upper bound on the resampled sums (statistics x cohorts x resamples) :func:`resample_blocks` holds at once."""


def stratum_generator(seed: int, stratum: str | None) -> np.random.Generator:
    """The generator of one stratum: depends only on the seed and the stratum's name."""
    name = "" if stratum is None else stratum
    return np.random.default_rng(np.random.SeedSequence([seed, zlib.crc32(name.encode())]))


def multiplicities(
    rng: np.random.Generator, n_units: int, resamples: int, dtype: type[np.floating[Any]] = np.float64
) -> npt.NDArray[np.floating[Any]]:
    """(resamples, n_units): how often each unit is drawn in each resample of size n_units."""
    draws = rng.integers(0, n_units, size=(resamples, n_units))
    draws += (np.arange(resamples, dtype=np.int64) * n_units)[:, None]
    counts = np.bincount(draws.ravel(), minlength=resamples * n_units)
    return counts.reshape(resamples, n_units).astype(dtype)


def resample_sums(
    values: FloatArray,
    *,
    cohort: IntArray,
    n_cohorts: int,
    task: IntArray,
    task_names: Sequence[str],
    stratum: IntArray,
    strata: Sequence[str | None],
    resamples: int,
    seed: int,
    progress: ProgressFn | None = None,
    chunk_cells: int = CHUNK_CELLS,
) -> FloatArray:
    """Bootstrap sums of per-episode statistics per cohort.

    In each stratum, the cohorts are grouped by the set of tasks they ran; each group
    resamples its own tasks with the stratum's generator, so cohorts with the same tasks
    get the same draws (paired) and a cohort's draws depend only on its own tasks.

    Args:
        values: (N, S) per-episode statistics.
        cohort: cohort index per episode.
        n_cohorts: number of cohorts C.
        task: task code per episode (names in ``task_names``).
        task_names: task id of each code; tasks are ordered by id inside a stratum.
        stratum: stratum index per episode (names in ``strata``).
        strata: stratum names.
        resamples: B.
        seed: base seed.
        progress: called after each chunk with (done, total) resampled tasks.
        chunk_cells: bound on resamples x tasks per chunk (memory); results do not depend on it.

    Returns:
        (S, C, B) array: resample b's sum of statistic s over cohort c (resamples last, so
        that each cohort's draws are contiguous for the percentile step).
    """
    out = np.zeros((values.shape[1], n_cohorts, resamples))
    for members, sums in resample_blocks(
        values,
        cohort=cohort,
        n_cohorts=n_cohorts,
        task=task,
        task_names=task_names,
        stratum=stratum,
        strata=strata,
        resamples=resamples,
        seed=seed,
        progress=progress,
        chunk_cells=chunk_cells,
        block_cells=None,
    ):
        out[:, members] = sums
    return out


def resample_blocks(
    values: FloatArray,
    *,
    cohort: IntArray,
    n_cohorts: int,
    task: IntArray,
    task_names: Sequence[str],
    stratum: IntArray,
    strata: Sequence[str | None],
    resamples: int,
    seed: int,
    progress: ProgressFn | None = None,
    chunk_cells: int = CHUNK_CELLS,
    block_cells: int | None = BLOCK_CELLS,
) -> Iterator[tuple[Int64Array, FloatArray]]:
    """:func:`resample_sums` a block of cohorts at a time: ``(cohorts, sums)`` with sums (S, len(cohorts), B).

    A cohort's draws depend only on its own tasks, so the blocks hold the numbers
    :func:`resample_sums` gives (up to rounding: chunks may sum in another order); only the
    memory differs (at most about ``block_cells`` sums at once, ``None``: one block).
    Arguments as :func:`resample_sums`.
    """
    n_stats = values.shape[1]
    unit_of = np.full(int(task.max(initial=0)) + 1, -1, dtype=np.int64)
    plan: list[_Group] = []
    for d, name in enumerate(strata):
        where = np.flatnonzero(stratum == d)
        if not where.size:
            continue
        codes = np.unique(task[where])
        order = np.argsort(np.array([task_names[c] for c in codes], dtype=object), kind="stable")
        unit_of[codes[order]] = np.arange(codes.size)
        unit = unit_of[task[where]]
        present, local = np.unique(cohort[where], return_inverse=True)
        local = local.reshape(-1)
        ran = np.zeros((present.size, codes.size), dtype=np.bool_)
        ran[local, unit] = True
        task_sets, set_of = np.unique(ran, axis=0, return_inverse=True)
        set_of = set_of.reshape(-1)
        episode_set = set_of[local]
        for k in range(task_sets.shape[0]):
            units = np.flatnonzero(task_sets[k])
            mine = episode_set == k
            renumber = np.full(codes.size, -1, dtype=np.int64)
            renumber[units] = np.arange(units.size)
            plan.append(
                _Group(
                    stratum=name,
                    episodes=where[mine],
                    unit=renumber[unit[mine]],
                    members=present[set_of == k].astype(np.int64),
                    n_units=int(units.size),
                )
            )
    per_block = n_cohorts if block_cells is None else max(1, block_cells // max(n_stats * resamples, 1))
    blocks = [(lo, min(n_cohorts, lo + per_block)) for lo in range(0, n_cohorts, per_block)]
    total = resamples * sum(g.n_units for lo, hi in blocks for g in plan if np.any((g.members >= lo) & (g.members < hi)))
    done = 0
    for lo, hi in blocks:
        out = np.zeros((n_stats, hi - lo, resamples))
        for g in plan:
            members = g.members[(g.members >= lo) & (g.members < hi)]
            if not members.size:
                continue
            n_members = int(members.size)
            member_of = np.full(n_cohorts, -1, dtype=np.int64)
            member_of[members] = np.arange(n_members)
            local = member_of[cohort[g.episodes]]
            inside = local >= 0
            episodes, unit, local = g.episodes[inside], g.unit[inside], local[inside]
            n_units = g.n_units
            # per_task[u, s * C_k + c]: sum of statistic s over the episodes of task u in cohort c.
            flat = (unit[:, None] * n_stats + np.arange(n_stats)) * n_members + local[:, None]
            per_task = np.bincount(flat.ravel(), weights=values[episodes].ravel(), minlength=n_units * n_stats * n_members)
            # Single precision halves the memory traffic of the matrix product, and is exact when
            # every per-task sum is a multiple of 0.5 (counts, halves of completion, AUC fractions
            # scaled to integers) and every resampled sum stays below 2**24. Otherwise double
            # precision: a rounded sum could put an interval beside its own point estimate.
            doubled = per_task * 2.0
            exact32 = float(np.abs(doubled).max(initial=0.0)) * n_units < _EXACT_FLOAT32 and bool(
                np.all(doubled == np.round(doubled))
            )
            dtype: type[np.floating[Any]] = np.float32 if exact32 else np.float64
            per_task_t = np.ascontiguousarray(per_task.reshape(n_units, n_stats * n_members).T, dtype=dtype)
            rng = stratum_generator(seed, g.stratum)  # the same draws in every block
            chunk = max(1, min(resamples, chunk_cells // max(n_units, 1)))
            for start in range(0, resamples, chunk):
                b = min(chunk, resamples - start)
                m = multiplicities(rng, n_units, b, dtype)
                out[:, members - lo, start : start + b] += (per_task_t @ m.T).reshape(n_stats, n_members, b)
                done += b * n_units
                if progress is not None:
                    progress(done, total)
        yield np.arange(lo, hi, dtype=np.int64), out


@dataclass(frozen=True, slots=True, kw_only=True)
class _Group:
    """Cohorts of one stratum that ran the same tasks: they share one draw."""

    stratum: str | None
    episodes: npt.NDArray[np.intp]
    """The group's episodes (indices into the statistics)."""
    unit: npt.NDArray[np.int64]
    """Task of each of those episodes, numbered 0..n_units-1 in task id order."""
    members: npt.NDArray[np.int64]
    """The cohorts (sorted)."""
    n_units: int


def percentile_interval(draws: FloatArray, confidence: float = 0.95) -> tuple[FloatArray, FloatArray]:
    """Percentile interval over the last axis (numpy's default linear interpolation).

    NaN draws (an undefined ratio in that resample) are left out.

    Returns:
        ``(low, high)`` with the shape of ``draws[..., 0]``; NaN where every draw is NaN.
    """
    alpha = (1.0 - confidence) / 2.0
    # A full sort of contiguous rows is faster than np.quantile's partition for two
    # quantiles over many rows, and puts NaN last so the valid count gives the positions.
    ordered = np.sort(draws, axis=-1)
    valid = np.count_nonzero(~np.isnan(ordered), axis=-1)
    out = []
    for q in (alpha, 1.0 - alpha):
        h = q * np.maximum(valid - 1, 0)
        lo = np.floor(h).astype(np.int64)
        hi = np.minimum(lo + 1, np.maximum(valid - 1, 0))
        frac = h - lo
        a = np.take_along_axis(ordered, lo[..., None], axis=-1)[..., 0]
        b = np.take_along_axis(ordered, hi[..., None], axis=-1)[..., 0]
        value = a + frac * (b - a)
        out.append(np.where(valid > 0, value, np.nan))
    return out[0], out[1]


def wilson_interval(successes: int, n: int, confidence: float = 0.95) -> tuple[float, float] | None:
    """Wilson score interval for a proportion; ``None`` when n = 0 (the rate is undefined)."""
    if n <= 0:
        return None
    z = NormalDist().inv_cdf(1.0 - (1.0 - confidence) / 2.0)
    p = successes / n
    z2n = z * z / n
    denom = 1.0 + z2n
    centre = (p + z2n / 2.0) / denom
    half = z * math.sqrt(p * (1.0 - p) / n + z2n / (4.0 * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)
