"""The report: every cohort's metrics with intervals, paired differences, completion.

:func:`build_report` is the one entry point; renderers (:mod:`.render`) and the plot
(:mod:`.plot`) only read the :class:`Report` it returns. :meth:`Report.to_dict` is the
``prefixmon report --format json`` shape (DESIGN §6, a public contract).
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from ..records.model import BadLine, EpisodeRecord
from .bootstrap import CHUNK_CELLS, ProgressFn, percentile_interval, resample_blocks, resample_sums, wilson_interval
from .columns import (
    CAUSES,
    OUTCOMES,
    EpisodeColumns,
    IntArray,
    columns_from_records,
    distinct_episodes,
    task_units,
    unique_pairs,
)
from .completion import Annotation, Attribution, UnstableTask, attribute, read_annotations, unstable_tasks
from .curves import StepCurve, curve_dict
from .inputs import load_columns
from .metrics import FloatArray, Grouping, auc_scale, cohort_sums, episode_statistics, group, ratios

__all__ = (
    "BOOTSTRAPPED",
    "COMPARED",
    "DEFAULT_BY",
    "DEFAULT_CHECKPOINTS",
    "DEFAULT_RESAMPLES",
    "PROGRESS_CHUNK_CELLS",
    "SCHEMA",
    "CohortReport",
    "Comparison",
    "Decomposition",
    "Estimate",
    "Interval",
    "Pair",
    "RecoveryRate",
    "Report",
    "build_report",
    "parse_compare",
)

SCHEMA: Final = "prefixmon.report/2"
"""Name and version of the ``--format json`` document (2: the curves as steps, see :mod:`.curves`)."""
DEFAULT_BY: Final[tuple[str, ...]] = ("dataset", "model", "method")
_DEFAULT_STRATA: Final = "dataset"
DEFAULT_CHECKPOINTS: Final[tuple[int, ...]] = (1, 2, 3, 4, 6, 8, 10)
"""Depths of the PEC checkpoint table (appendix G.1 style)."""
DEFAULT_RESAMPLES: Final = 10_000
PROGRESS_CHUNK_CELLS: Final = 400_000
"""Smaller chunks when a progress bar is shown, so that it moves (results are the same)."""
BOOTSTRAPPED: Final[tuple[str, ...]] = ("ter", "mean_fed", "auc_pec", "success", "completion")
"""Metrics with a bootstrap interval (plus every PEC checkpoint); RR gets a Wilson interval."""
COMPARED: Final[tuple[str, ...]] = ("ter", "mean_fed", "auc_pec", "success", "rr", "completion")
"""Metrics of a paired difference (plus every PEC checkpoint)."""

Interval = tuple[float, float]


@dataclass(frozen=True, slots=True, kw_only=True)
class Estimate:
    """A point estimate and its interval; ``value is None`` means undefined (not 0)."""

    value: float | None
    ci: Interval | None = None
    """95% (or the report's confidence) interval; ``None`` without bootstrap or when undefined."""
    undefined_resamples: int = 0
    """Bootstrap resamples in which the value was undefined (a difference of RRs where a side
    has no failed episode in that resample): left out of ``ci``, which is then conditional on
    the value being defined."""

    def to_dict(self) -> dict[str, Any]:
        """``{"value": ..., "ci": [low, high] | null}``, plus ``undefined_resamples`` when any was."""
        out: dict[str, Any] = {"value": self.value, "ci": None if self.ci is None else [self.ci[0], self.ci[1]]}
        if self.undefined_resamples:
            out["undefined_resamples"] = self.undefined_resamples
        return out


@dataclass(frozen=True, slots=True, kw_only=True)
class RecoveryRate(Estimate):
    """RR with its RR-eligible denominator; the interval is Wilson's on that denominator."""

    eligible: int
    """Episodes with a prefix failure (FED <= T) = N(1 - TER)."""
    recovered: int
    """Of those, the successful ones."""

    def to_dict(self) -> dict[str, Any]:
        """Adds ``eligible``, ``recovered`` and ``interval: "wilson"``."""
        return {**Estimate.to_dict(self), "eligible": self.eligible, "recovered": self.recovered, "interval": "wilson"}


@dataclass(frozen=True, slots=True, kw_only=True)
class Decomposition:
    """P(Y=1) = q·s + (1-q)·r (paper eq. 12); s or r is ``None`` when its regime is empty."""

    q: float
    """TER."""
    s: float | None
    """P(Y=1 | FED = T+1): success rate of fully executable episodes."""
    r: float | None
    """RR: success rate after a prefix failure."""
    uninterrupted: float
    """q·s: share of all episodes that succeeded without any prefix failure."""
    recovered: float
    """(1-q)·r: share of all episodes that succeeded after a prefix failure."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CohortReport:
    """Everything the report says about one cohort."""

    key: Mapping[str, str | None]
    """Label values that define the cohort."""
    n: int
    tasks: int
    """Distinct tasks: (dataset, task id) pairs."""
    ter: Estimate
    mean_fed: Estimate
    auc_pec: Estimate
    rr: RecoveryRate
    success: Estimate
    completion: Estimate
    """Weighted completion (S + 0.5·P) / N."""
    pec: Sequence[float]
    """PEC(k) for k = 1..K (index 0 = depth 1), K = the cohort's largest horizon (a
    :class:`~.curves.StepCurve`: compares equal to the tuple of its values)."""
    pec_elig: Sequence[float | None]
    n_k: Sequence[int]
    checkpoints: Mapping[int, Estimate]
    """PEC at the report's checkpoint depths, with bootstrap intervals."""
    causes: Mapping[str, int]
    """Primary causes of first failures (they sum to RR-eligible)."""
    outcomes: Mapping[str, int]
    """success, partial, failure, and none (no outcome recorded)."""
    decomposition: Decomposition
    unstable: Sequence[UnstableTask]
    """Tasks whose reruns disagree (an :class:`~.completion.UnstableTasks`: built when read)."""
    rerun_tasks: int
    """Tasks with two or more runs in this cohort (the candidates for instability)."""
    attribution: Attribution | None = None

    @property
    def label(self) -> str:
        """The key as one readable string, e.g. ``bfcl / llama-4 / react``."""
        return " / ".join("—" if v is None else v for v in self.key.values()) or "all"


@dataclass(frozen=True, slots=True, kw_only=True)
class Comparison:
    """Paired differences ``a - b`` between two cohorts that differ only in the compared keys.

    The differences are computed on the tasks both cohorts ran (within each stratum): when
    their task sets differ, both sides are restricted to the shared tasks, point estimates
    and bootstrap alike, and resampled with the same draws.
    """

    key: Mapping[str, str | None]
    """The shared label values."""
    a: Mapping[str, str | None]
    b: Mapping[str, str | None]
    paired: bool
    """True when the differences are paired: both sides on the same tasks, resampled with
    the same draws in every stratum. False only when the cohorts share no task."""
    shared_tasks: int
    """Tasks both cohorts ran (same stratum, dataset and task id): the tasks the differences use."""
    tasks_a: int
    """Tasks cohort a ran (per stratum)."""
    tasks_b: int
    """Tasks cohort b ran (per stratum)."""
    differences: Mapping[str, Estimate]
    """``ter``, ``mean_fed``, ``auc_pec``, ``success``, ``rr``, ``completion``, ``pec@k``;
    every value ``None`` when the cohorts share no task."""

    @property
    def computable(self) -> bool:
        """Whether the cohorts share a task (otherwise there is no paired difference)."""
        return self.shared_tasks > 0

    @property
    def restricted(self) -> bool:
        """Whether the task sets differ, so the differences use only part of a cohort's tasks."""
        return self.shared_tasks < max(self.tasks_a, self.tasks_b)


@dataclass(frozen=True, slots=True, kw_only=True)
class Report:
    """The result of :func:`build_report`."""

    by: tuple[str, ...]
    cohorts: tuple[CohortReport, ...]
    comparisons: tuple[Comparison, ...] = ()
    checkpoints: tuple[int, ...] = DEFAULT_CHECKPOINTS
    resamples: int = 0
    """Bootstrap resamples (0 = no bootstrap intervals)."""
    seed: int = 0
    confidence: float = 0.95
    strata: str | None = "dataset"
    """Label key whose values are the bootstrap strata (task ids are resampled within one)."""
    episodes: int = 0
    skipped: tuple[BadLine, ...] = ()
    """Lines skipped by the reader (``on_error="skip"``)."""
    unmatched_annotations: tuple[Annotation, ...] = ()
    attribution: bool = False
    """Whether an annotation file was given."""
    duplicates: tuple[str, ...] = ()
    """Episode ids read again (each repeat once, in input order); every episode counts once."""

    def cohort(self, **key: str) -> CohortReport:
        """The cohort whose key has these values (e.g. ``report.cohort(method="react")``).

        Raises:
            KeyError: no cohort, or more than one, matches.
        """
        found = [c for c in self.cohorts if all(c.key.get(k) == v for k, v in key.items())]
        if len(found) != 1:
            raise KeyError(f"{len(found)} cohorts match {key}")
        return found[0]

    def to_dict(self) -> dict[str, Any]:
        """The ``--format json`` document (DESIGN §6): NaN and undefined values are null."""
        return {
            "schema": SCHEMA,
            "by": list(self.by),
            "episodes": self.episodes,
            "duplicate_episodes": len(self.duplicates),
            "bootstrap": {
                "resamples": self.resamples,
                "seed": self.seed,
                "confidence": self.confidence,
                "unit": "task_id",
                "strata": self.strata,
                # Differences always use the same draws for both sides (over the shared tasks).
                "paired": self.resamples > 0,
            },
            "checkpoints": list(self.checkpoints),
            "cohorts": [_cohort_dict(c) for c in self.cohorts],
            "comparisons": [
                {
                    "key": dict(cmp.key),
                    "a": dict(cmp.a),
                    "b": dict(cmp.b),
                    "paired": cmp.paired,
                    "shared_tasks": cmp.shared_tasks,
                    "tasks_a": cmp.tasks_a,
                    "tasks_b": cmp.tasks_b,
                    "differences": {k: e.to_dict() for k, e in cmp.differences.items()},
                }
                for cmp in self.comparisons
            ],
            "skipped_lines": [{"path": b.path, "line": b.line, "message": b.message} for b in self.skipped],
            "unmatched_annotations": [a.where for a in self.unmatched_annotations],
        }


def _cohort_dict(c: CohortReport) -> dict[str, Any]:
    d = c.decomposition
    out: dict[str, Any] = {
        "key": dict(c.key),
        "n": c.n,
        "tasks": c.tasks,
        "ter": c.ter.to_dict(),
        "mean_fed": c.mean_fed.to_dict(),
        "auc_pec": c.auc_pec.to_dict(),
        "rr": c.rr.to_dict(),
        "success": c.success.to_dict(),
        "completion": c.completion.to_dict(),
        # as steps (the depths where the value changes): one value per depth was 740 MB of
        # JSON for a 34 KB input (200 cohorts with bare horizons of 100,000)
        "pec": curve_dict(c.pec),
        "pec_elig": curve_dict(c.pec_elig),
        "n_k": curve_dict(c.n_k),
        "pec_checkpoints": {str(k): e.to_dict() for k, e in c.checkpoints.items()},
        "causes": dict(c.causes),
        "outcomes": dict(c.outcomes),
        "decomposition": {"q": d.q, "s": d.s, "r": d.r, "uninterrupted": d.uninterrupted, "recovered": d.recovered},
        "unstable_tasks": [
            {
                "task_id": u.task_id,
                "dataset": u.dataset,
                "runs": u.runs,
                "outcomes": dict(u.outcomes),
                "mean": u.mean,
                "spread": u.spread,
            }
            for u in c.unstable
        ],
        "rerun_tasks": c.rerun_tasks,
    }
    if c.attribution is not None:
        a = c.attribution
        out["attribution"] = {
            "counts": dict(a.counts),
            "excluded": a.excluded,
            "model_only_completion": a.model_only_completion,
            "model_failure_rate": a.model_failure_rate,
        }
    return out


def parse_compare(spec: str) -> tuple[dict[str, str], dict[str, str]]:
    """``"method=dual_loop,method=react"`` → ``({"method": "dual_loop"}, {"method": "react"})``.

    Each side may fix several keys joined by ``+``: ``model=a+method=x,model=b+method=x``.

    Raises:
        ValueError: not two sides of ``key=value`` pairs over the same keys.
    """
    sides = spec.split(",")
    if len(sides) != 2:
        raise ValueError(f"--compare takes two sides separated by a comma, like method=dual_loop,method=react; got {spec!r}")
    parsed: list[dict[str, str]] = []
    for side in sides:
        pairs: dict[str, str] = {}
        for item in side.split("+"):
            k, eq, v = item.partition("=")
            if not eq or not k.strip() or not v.strip():
                raise ValueError(f"--compare: expected key=value, got {item!r} in {spec!r}")
            pairs[k.strip()] = v.strip()
        parsed.append(pairs)
    if set(parsed[0]) != set(parsed[1]):
        raise ValueError(f"--compare: both sides must fix the same keys, got {spec!r}")
    return parsed[0], parsed[1]


def _nan_to_none(x: float) -> float | None:
    return None if math.isnan(x) else float(x)


def resolve_labels(present: Sequence[str], by: Sequence[str] | None, strata: str | None) -> tuple[tuple[str, ...], str | None]:
    """The cohort keys and the strata label of a report, given the label keys some episode has.

    ``by`` defaults to those of :data:`DEFAULT_BY` present. The default strata label
    (``dataset``) is dropped when no episode has it (one stratum); any other label no episode
    has is an error, as an unknown ``by`` key is (a typo must not silently change the intervals).

    Raises:
        ValueError: a ``by`` key or a strata label that no episode has.
    """
    keys = tuple(by) if by is not None else tuple(k for k in DEFAULT_BY if k in present)
    missing = [k for k in keys if k not in present]
    if strata is not None and strata not in present:
        if strata != _DEFAULT_STRATA:
            missing.append(strata)
        strata = None
    if missing:
        raise ValueError(f"no episode has the label {missing[0]!r} (labels present: {', '.join(present) or 'none'})")
    return keys, strata


def build_report(
    source: EpisodeColumns | Iterable[EpisodeRecord] | str | os.PathLike[str],
    *,
    by: Sequence[str] | None = None,
    bootstrap: int = DEFAULT_RESAMPLES,
    seed: int = 0,
    confidence: float = 0.95,
    checkpoints: Sequence[int] = DEFAULT_CHECKPOINTS,
    strata: str | None = _DEFAULT_STRATA,
    compare: Sequence[str | tuple[Mapping[str, str], Mapping[str, str]]] = (),
    annotations: Sequence[Annotation] | str | os.PathLike[str] | None = None,
    skipped: Sequence[BadLine] = (),
    progress: ProgressFn | None = None,
) -> Report:
    """Compute the full report.

    Each episode id counts once: repeats (the same file given twice, a sink that retried)
    are dropped and listed in :attr:`Report.duplicates`. A task is a (dataset, task id) pair.

    Args:
        source: columns (:func:`~.inputs.load_columns`), episode records, or the path of a
            records (or traces) file.
        by: label keys that define cohorts; default: those of dataset, model, method
            that occur in the records.
        bootstrap: resamples of the task-level paired bootstrap (0: no intervals but Wilson's).
        seed: seed of the bootstrap (nothing else in the report is random).
        confidence: interval level.
        checkpoints: PEC depths reported with intervals.
        strata: label key within whose values tasks are resampled (``None``: one stratum;
            the default, ``dataset``, is one stratum when no episode has it).
        compare: pairs of cohort selectors, e.g. ``"method=dual_loop,method=react"`` or
            ``({"method": "dual_loop"}, {"method": "react"})``; each pair compares every
            two cohorts that match its sides and agree on the other keys, on the tasks both ran.
        annotations: human failure attributions (a file path or parsed annotations).
        skipped: bad lines the reader skipped, carried into the report.
        progress: bootstrap progress callback ``(done, total)``.

    Raises:
        ValueError: an unknown ``by`` key or ``strata`` label, a ``compare`` spec with an unknown key or value or
            that matches no pair of cohorts, a bad checkpoint or level, or no episodes.
    """
    if isinstance(source, EpisodeColumns):
        columns = source
    elif isinstance(source, (str, os.PathLike)):
        columns = load_columns(source)
    else:
        columns = columns_from_records(source)
    columns, again = distinct_episodes(columns)
    if not len(columns):
        raise ValueError("no episodes to report on")
    keys, strata = resolve_labels(columns.label_keys(), by, strata)
    cps = tuple(sorted(set(checkpoints)))
    if any(k < 1 for k in cps):
        raise ValueError(f"checkpoints must be depths >= 1, got {list(checkpoints)}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if bootstrap < 0:
        raise ValueError(f"bootstrap must be >= 0 resamples, got {bootstrap}")
    pairs = [_parse_pair(c, keys) for c in compare]

    grouping = group(columns, keys, strata)
    _check_values(pairs, keys, grouping.cohort_keys)
    n_cohorts = len(grouping.cohort_keys)
    unit, units = task_units(columns)
    unit_ids = [t for _, t in units]
    cohort_tasks, runs, _ = unique_pairs(grouping.cohort, len(units), unit, inverse=False)
    tasks_per_cohort = np.bincount(cohort_tasks // len(units), minlength=n_cohorts)
    # A sum (point or resampled) adds at most (tasks) x (most runs of one task in one cohort) episodes.
    scale = auc_scale(columns.horizon, len(units) * int(runs.max()))
    sums = cohort_sums(columns, grouping.cohort, n_cohorts, scale)
    at_checkpoints = [sums.survivors_at(c, cps) for c in range(n_cohorts)]
    checkpoint_counts = {k: np.array([int(a[j]) for a in at_checkpoints], dtype=np.int64) for j, k in enumerate(cps)}
    statistics = episode_statistics(columns, cps, scale) if bootstrap or pairs else None
    draws: dict[str, FloatArray] = {}
    low: dict[str, FloatArray] = {}
    high: dict[str, FloatArray] = {}
    if bootstrap and statistics is not None:
        # A block of cohorts at a time: every resampled sum of every cohort at once was
        # statistics x cohorts x resamples numbers (535 MB for 200 one-episode cohorts).
        # Comparisons of cohorts that ran the same tasks reuse the cohorts' draws, so those are kept.
        interval_metrics = (*BOOTSTRAPPED, *(f"pec@{k}" for k in cps))
        for m in interval_metrics:
            low[m], high[m] = np.full(n_cohorts, math.nan), np.full(n_cohorts, math.nan)
        for members, block in resample_blocks(
            statistics,
            cohort=grouping.cohort,
            n_cohorts=n_cohorts,
            task=unit,
            task_names=unit_ids,
            stratum=grouping.stratum,
            strata=grouping.strata,
            resamples=bootstrap,
            seed=seed,
            progress=progress,
            chunk_cells=CHUNK_CELLS if progress is None else PROGRESS_CHUNK_CELLS,
        ):
            block_draws = ratios(block, cps, scale)
            del block
            for m in interval_metrics:
                low[m][members], high[m][members] = percentile_interval(block_draws[m], confidence)
            if pairs:
                for m, d in block_draws.items():
                    draws.setdefault(m, np.empty((n_cohorts, bootstrap)))[members] = d

    def estimate(metric: str, c: int, value: float | None) -> Estimate:
        if value is None or metric not in low:
            return Estimate(value=value)
        lo_, hi_ = float(low[metric][c]), float(high[metric][c])
        return Estimate(value=value, ci=None if math.isnan(lo_) else (lo_, hi_))

    unstable, rerun = unstable_tasks(columns, grouping.cohort, n_cohorts, (unit, units))
    attributions: list[Attribution] | None = None
    unmatched: list[Annotation] = []
    if annotations is not None:
        notes = read_annotations(annotations) if isinstance(annotations, (str, os.PathLike)) else list(annotations)
        attributions, unmatched = attribute(columns, grouping.cohort, n_cohorts, notes)

    cohorts: list[CohortReport] = []
    for c in range(n_cohorts):
        n = int(sums.n[c])
        exe = int(sums.executable[c])
        eligible = n - exe
        recovered = int(sums.recovered[c])
        k_len = sums.curve_length(c)
        knots = sums.knots(c)
        survivors = sums.survivors_at(c, knots).astype(np.float64)
        reach = sums.reach_at(c, knots).astype(np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            elig = np.where(reach > 0, survivors / reach, np.nan)
        q = exe / n
        s = int(sums.success_executable[c]) / exe if exe else None
        r = recovered / eligible if eligible else None
        cohorts.append(
            CohortReport(
                key=dict(zip(keys, grouping.cohort_keys[c], strict=True)),
                n=n,
                tasks=int(tasks_per_cohort[c]),
                ter=estimate("ter", c, q),
                mean_fed=estimate("mean_fed", c, int(sums.fed_sum[c]) / n),
                auc_pec=estimate("auc_pec", c, sums.auc_pec(c)),
                rr=RecoveryRate(
                    value=r,
                    ci=wilson_interval(recovered, eligible, confidence),
                    eligible=eligible,
                    recovered=recovered,
                ),
                success=estimate("success", c, int(sums.success[c]) / n),
                completion=estimate("completion", c, (int(sums.outcomes[c, 0]) + 0.5 * int(sums.outcomes[c, 1])) / n),
                pec=StepCurve(k_len, knots, survivors / n),
                pec_elig=StepCurve(k_len, knots, elig, none_for_nan=True),
                n_k=StepCurve(k_len, knots, reach.astype(np.int64), kind=int),
                checkpoints={k: estimate(f"pec@{k}", c, int(checkpoint_counts[k][c]) / n) for k in cps},
                causes={name: int(sums.causes[c, j]) for j, name in enumerate(CAUSES)},
                outcomes={**{o: int(sums.outcomes[c, j]) for j, o in enumerate(OUTCOMES)}, "none": int(sums.outcomes[c, 3])},
                decomposition=Decomposition(
                    q=q,
                    s=s,
                    r=r,
                    uninterrupted=int(sums.success_executable[c]) / n,
                    recovered=recovered / n,
                ),
                unstable=unstable[c],
                rerun_tasks=rerun[c],
                attribution=None if attributions is None else attributions[c],
            )
        )

    comparisons: list[Comparison] = []
    if pairs and statistics is not None:
        shared = _SharedTasks(
            grouping=grouping,
            unit=unit,
            unit_ids=unit_ids,
            statistics=statistics,
            draws=draws,
            checkpoints=cps,
            auc_scale=scale,
            resamples=bootstrap,
            seed=seed,
            confidence=confidence,
        )
        comparisons = shared.compare(cohorts, pairs, keys)
    return Report(
        by=keys,
        cohorts=tuple(cohorts),
        comparisons=tuple(comparisons),
        checkpoints=cps,
        resamples=bootstrap,
        seed=seed,
        confidence=confidence,
        strata=strata,
        episodes=len(columns),
        skipped=tuple(skipped),
        unmatched_annotations=tuple(unmatched),
        attribution=annotations is not None,
        duplicates=tuple(again),
    )


Pair = tuple[str, dict[str, str], dict[str, str]]
"""A compare spec as given (for messages), its a side and its b side."""


def _parse_pair(spec: str | tuple[Mapping[str, str], Mapping[str, str]], keys: tuple[str, ...]) -> Pair:
    if isinstance(spec, str):
        a, b = parse_compare(spec)
        text = spec
    else:
        a, b = dict(spec[0]), dict(spec[1])
        text = ",".join(_selector(side) for side in (a, b))
    for k in (*a, *b):
        if k not in keys:
            raise ValueError(f"--compare {text!r}: key {k!r} is not one of the cohort keys ({', '.join(keys)})")
    if not a or set(a) != set(b):
        raise ValueError(f"--compare {text!r}: both sides must fix the same keys")
    return text, a, b


def _check_values(pairs: Sequence[Pair], keys: tuple[str, ...], cohort_keys: Sequence[tuple[str | None, ...]]) -> None:
    """Every value a compare spec names must be the value of some cohort."""
    for text, a, b in pairs:
        for side in (a, b):
            for k, v in side.items():
                i = keys.index(k)
                values = sorted({value for ck in cohort_keys if (value := ck[i]) is not None})
                if v not in values:
                    raise ValueError(f"--compare {text!r}: no cohort has {k}={v!r} ({k} values: {', '.join(values)})")


@dataclass(frozen=True, slots=True, kw_only=True)
class _SharedTasks:
    """Paired differences on the tasks both cohorts ran."""

    grouping: Grouping
    unit: IntArray
    """Task (dataset, task id) code per episode."""
    unit_ids: Sequence[str]
    statistics: FloatArray
    draws: Mapping[str, FloatArray]
    """The cohorts' own bootstrap ratios (empty without bootstrap)."""
    checkpoints: tuple[int, ...]
    auc_scale: int
    resamples: int
    seed: int
    confidence: float

    def compare(self, cohorts: Sequence[CohortReport], pairs: Sequence[Pair], keys: tuple[str, ...]) -> list[Comparison]:
        """Every comparison the specs ask for, in spec order then cohort order.

        Raises:
            ValueError: a spec that matches no pair of cohorts.
        """
        index = {tuple(c.key.values()): i for i, c in enumerate(cohorts)}
        g = self.grouping
        n_units = int(self.unit.max(initial=-1)) + 1
        # The tasks of each cohort as sorted (stratum, task) codes: a task is shared when both
        # cohorts ran it in the same stratum.
        self_su = g.stratum.astype(np.int64) * n_units + self.unit
        n_su = len(g.strata) * n_units
        codes = np.unique(g.cohort.astype(np.int64) * n_su + self_su)
        bounds = np.searchsorted(codes, np.arange(len(cohorts) + 1, dtype=np.int64) * n_su)
        task_sets = [codes[bounds[c] : bounds[c + 1]] % n_su for c in range(len(cohorts))]
        metrics = [*COMPARED, *(f"pec@{k}" for k in self.checkpoints)]
        out: list[Comparison] = []
        for text, a_sel, b_sel in pairs:
            found = 0
            for i, ca in enumerate(cohorts):
                if any(ca.key.get(k) != v for k, v in a_sel.items()):
                    continue
                b_key = {**ca.key, **b_sel}
                j = index.get(tuple(b_key[k] for k in keys))
                if j is None:
                    continue
                found += 1
                cb = cohorts[j]
                sa, sb = task_sets[i], task_sets[j]
                if np.array_equal(sa, sb):
                    n_shared = int(sa.size)
                    diffs = self._same_tasks(ca, cb, i, j, metrics)
                else:
                    shared = np.intersect1d(sa, sb, assume_unique=True)
                    n_shared = int(shared.size)
                    if n_shared:
                        mask = ((g.cohort == i) | (g.cohort == j)) & np.isin(self_su, shared)
                        diffs = self._on_tasks(mask, j, metrics)
                    else:
                        diffs = {m: Estimate(value=None) for m in metrics}
                out.append(
                    Comparison(
                        key={k: v for k, v in ca.key.items() if k not in a_sel},
                        a={k: ca.key[k] for k in a_sel},
                        b={k: cb.key[k] for k in b_sel},
                        paired=n_shared > 0,
                        shared_tasks=n_shared,
                        tasks_a=int(sa.size),
                        tasks_b=int(sb.size),
                        differences=diffs,
                    )
                )
            if not found:
                others = [k for k in keys if k not in a_sel]
                raise ValueError(
                    f"--compare {text!r} matches no pair of cohorts: no cohort with "
                    f"{_selector(a_sel)} has a counterpart with {_selector(b_sel)}"
                    + (f" and the same {', '.join(others)}" if others else "")
                )
        return out

    def _same_tasks(self, ca: CohortReport, cb: CohortReport, i: int, j: int, metrics: Sequence[str]) -> dict[str, Estimate]:
        """Both cohorts ran the same tasks: their own estimates and (shared) draws."""
        values = {m: _difference(_metric(ca, m), _metric(cb, m)) for m in metrics}
        if not self.draws:
            return {m: Estimate(value=v) for m, v in values.items()}
        # every metric's paired differences in one percentile pass
        return _estimates(metrics, values, np.stack([self.draws[m][i] - self.draws[m][j] for m in metrics]), self.confidence)

    def _on_tasks(self, mask: npt.NDArray[np.bool_], j: int, metrics: Sequence[str]) -> dict[str, Estimate]:
        """Both cohorts restricted to the shared tasks (``mask``): point and draws from those episodes."""
        side = (self.grouping.cohort[mask] == j).astype(np.int32)  # 0 = a, 1 = b
        stats = self.statistics[mask]
        point = ratios(
            np.stack([stats[side == 0].sum(axis=0), stats[side == 1].sum(axis=0)], axis=1), self.checkpoints, self.auc_scale
        )
        values = {m: _difference(_nan_to_none(float(point[m][0])), _nan_to_none(float(point[m][1]))) for m in metrics}
        if not self.resamples:
            return {m: Estimate(value=v) for m, v in values.items()}
        boot = ratios(
            resample_sums(
                stats,
                cohort=side,
                n_cohorts=2,
                task=self.unit[mask],
                task_names=self.unit_ids,
                stratum=self.grouping.stratum[mask],
                strata=self.grouping.strata,
                resamples=self.resamples,
                seed=self.seed,
            ),
            self.checkpoints,
            self.auc_scale,
        )
        return _estimates(metrics, values, np.stack([boot[m][0] - boot[m][1] for m in metrics]), self.confidence)


def _estimates(
    metrics: Sequence[str], values: Mapping[str, float | None], draws: FloatArray, confidence: float
) -> dict[str, Estimate]:
    """Every metric's paired difference: its value, percentile interval (one pass over the
    rows of ``draws``) and the resamples in which it was undefined."""
    lows, highs = percentile_interval(draws, confidence)
    undefined = np.count_nonzero(np.isnan(draws), axis=-1)
    out = {}
    for row, m in enumerate(metrics):
        value = values[m]
        if value is None:
            out[m] = Estimate(value=None)
            continue
        ci = None if math.isnan(lows[row]) else (float(lows[row]), float(highs[row]))
        out[m] = Estimate(value=value, ci=ci, undefined_resamples=int(undefined[row]))
    return out


def _difference(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a - b


def _selector(sel: Mapping[str, str]) -> str:
    return "+".join(f"{k}={v}" for k, v in sel.items())


def _metric(c: CohortReport, name: str) -> float | None:
    if name.startswith("pec@"):
        return c.checkpoints[int(name[4:])].value
    value: float | None = getattr(c, name).value
    return value
