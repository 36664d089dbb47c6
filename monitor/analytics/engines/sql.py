"""Every report metric as SQL, written once and run by DuckDB and by Spark SQL.

The queries read a view ``episodes`` with the columns of ``prefixmon.parquet/1``
(:mod:`prefixmon.records.parquet`) plus ``_file`` (index of the input file) and ``_row`` (row in
it), which each engine provides (:mod:`._duckdb`, :mod:`._spark`). Only four small
expressions differ between the two dialects (:class:`Dialect`): exploding an array, a
series of integers, hex to integer, and materialising a table. Everything else — the
definitions of DESIGN §3 — is the text below, so both engines compute the same thing and
:func:`sql_report` turns the rows into the same :class:`~prefixmon.analytics.Report` the
in-process engine returns, number for number:

* counts and integer sums are exact (``BIGINT``); every ratio is formed in Python with the
  same operation as :func:`~prefixmon.analytics.build_report` (``x / n``), and AUC-PEC is
  the same exact integer sum Σ (FED_i - 1)·L/T_i over L·N (L = the least common multiple of
  the horizons, :func:`~prefixmon.analytics.metrics.auc_scale`);
* PEC(k), n_k and PEC_elig(k) come from running counts at the depths where they change
  (1, every FED, every horizon + 1), summed by window functions (fixed cohort, no censoring);
* RR is undefined (``None``) when RR-eligible is 0; its interval is Wilson's.

Intervals at fleet scale: a **Poisson bootstrap** in SQL. Each resample b gives every task
(dataset, task id) a weight w ~ Poisson(1), derived from ``md5(seed, b, dataset, task id)``,
so the same task gets the same weight in every cohort (paired by task id, as DESIGN §3
asks; rollouts of one task move together), and a cohort's draws depend only on its own
tasks. The resampled statistic is Σ_tasks w · (the task's sums), computed as one join and
one aggregate; the interval is the percentile interval (linear interpolation) of the
resampled ratios. Poisson weights replace the in-process engine's multinomial draws
(which fix each resample's size at the number of tasks and need a sequential random
generator, which SQL engines do not share): the intervals estimate the same thing and agree
closely for more than a few dozen tasks, but are not the in-process draws, and DuckDB and
Spark give identical intervals because they hash the same strings.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from ...vocabulary import Cause, Outcome
from ..bootstrap import wilson_interval
from ..completion import UnstableTask
from ..curves import StepCurve
from ..metrics import auc_scale
from ..report import (
    BOOTSTRAPPED,
    DEFAULT_CHECKPOINTS,
    CohortReport,
    Decomposition,
    Estimate,
    RecoveryRate,
    Report,
    resolve_labels,
)

__all__ = ("POISSON_MAX", "Backend", "Dialect", "poisson_thresholds", "sql_report")

Rows = list[tuple[Any, ...]]
CAUSES: Final[tuple[str, ...]] = tuple(c.value for c in Cause)
POISSON_MAX: Final = 16
"""A weight above this has probability < 1e-14 per task and resample; it is capped there."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Dialect:
    """The few expressions in which DuckDB and Spark SQL differ."""

    name: str
    explode: Callable[[str], str]
    """``explode(array)`` as a select-list expression that yields one row per element."""
    series: Callable[[int], str]
    """A subquery with one integer column ``k`` holding 1..n."""
    hex_to_int: Callable[[str], str]
    """An expression turning 8 hex digits into a BIGINT."""
    string: str
    """The name of the string type in ``CAST``."""


class Backend:
    """An engine that runs SQL: ``query`` returns rows as tuples, ``materialize`` keeps a table."""

    dialect: Dialect

    def query(self, sql: str) -> Rows:  # pragma: no cover - interface
        """Run a query; rows as tuples."""
        raise NotImplementedError

    def materialize(self, name: str, sql: str) -> None:  # pragma: no cover - interface
        """Make ``name`` a table (or cached view) holding the result of ``sql``."""
        raise NotImplementedError


def _quote(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def poisson_thresholds(limit: int = POISSON_MAX) -> list[float]:
    """F(k) = P(X <= k) for X ~ Poisson(1), k = 0..limit-1 (inverse-CDF sampling)."""
    out: list[float] = []
    p = term = math.exp(-1.0)
    for k in range(limit):
        out.append(p)
        term /= k + 1
        p += term
    return out


def _poisson(u: str) -> str:
    """A Poisson(1) draw from a uniform ``u`` in [0, 1), by the inverse CDF."""
    cases = " ".join(f"WHEN {u} < {f!r} THEN {k}" for k, f in enumerate(poisson_thresholds()))
    return f"CASE {cases} ELSE {POISSON_MAX} END"


def sql_report(
    backend: Backend,
    *,
    by: Sequence[str] | None = None,
    bootstrap: int = 0,
    seed: int = 0,
    confidence: float = 0.95,
    checkpoints: Sequence[int] = DEFAULT_CHECKPOINTS,
    strata: str | None = "dataset",
) -> Report:
    """The report of the episodes in the backend's ``episodes`` view.

    Args:
        backend: DuckDB or Spark, with ``episodes`` registered.
        by: label keys that define cohorts; default: those of dataset, model, method present.
        bootstrap: Poisson bootstrap resamples (0: no intervals but Wilson's for RR).
        seed: seed of the bootstrap weights.
        confidence: interval level.
        checkpoints: PEC depths reported with intervals.
        strata: the label key reported as the bootstrap strata (Poisson weights are drawn
            per task, which stratifies by every label at once).

    Raises:
        ValueError: as :func:`~prefixmon.analytics.build_report` (no episodes, an unknown
            ``by`` key, a bad checkpoint, level or resample count).
    """
    d = backend.dialect
    cps = tuple(sorted(set(checkpoints)))
    if any(k < 1 for k in cps):
        raise ValueError(f"checkpoints must be depths >= 1, got {list(checkpoints)}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if bootstrap < 0:
        raise ValueError(f"bootstrap must be >= 0 resamples, got {bootstrap}")

    # Each episode id once: its first occurrence in input order (file, then row).
    ranked = "SELECT *, ROW_NUMBER() OVER (PARTITION BY episode_id ORDER BY _file, _row) AS _rn FROM episodes"
    backend.materialize("_ranked", ranked)
    again = backend.query("SELECT episode_id, _file, _row FROM _ranked WHERE _rn > 1")
    duplicates = tuple(str(r[0]) for r in sorted(again, key=lambda r: (int(r[1]), int(r[2]))))
    present = tuple(
        sorted(
            str(r[0])
            for r in backend.query(
                f"SELECT DISTINCT k FROM (SELECT {d.explode('map_keys(labels)')} AS k FROM _ranked WHERE _rn = 1) t"
            )
        )
    )
    keys, strata = resolve_labels(present, by, strata)

    key_cols = [f"labels[{_quote(k)}] AS k{i}" for i, k in enumerate(keys)]
    kc = [f"k{i}" for i in range(len(keys))]
    # cohorts: one row per distinct key tuple, numbered; e: the distinct episodes with their cohort.
    backend.materialize(
        "_base",
        "SELECT "
        + ", ".join(
            [
                *key_cols,
                "labels['dataset'] AS ds",
                "CASE WHEN labels['dataset'] IS NULL THEN '0' ELSE concat('1', labels['dataset']) END AS ds_key",
                "task_id",
                "horizon",
                "fed",
                "outcome",
                "first_failure.cause AS cause",
            ]
        )
        + " FROM _ranked WHERE _rn = 1",
    )
    grouped = f" GROUP BY {', '.join(kc)}" if kc else ""
    cohort_rows = backend.query(f"SELECT {', '.join([*kc, 'COUNT(*)'])} FROM _base{grouped}")
    if not cohort_rows or not sum(int(r[-1]) for r in cohort_rows):
        raise ValueError("no episodes to report on")
    cohort_keys = sorted(
        (tuple(None if v is None else str(v) for v in r[:-1]) for r in cohort_rows),
        key=lambda t: tuple((v is None, v or "") for v in t),
    )
    cohort_values = " UNION ALL ".join(
        "SELECT "
        + ", ".join(
            [f"{c} AS cid", *(f"{f'CAST(NULL AS {d.string})' if v is None else _quote(v)} AS k{i}" for i, v in enumerate(ck))]
        )
        for c, ck in enumerate(cohort_keys)
    )
    on = " AND ".join(f"b.k{i} IS NOT DISTINCT FROM c.k{i}" for i in range(len(keys))) or "1 = 1"
    backend.materialize(
        "_e",
        "SELECT c.cid, b.ds, b.ds_key, b.task_id, b.horizon, b.fed, b.outcome, b.cause, "
        "CASE WHEN b.fed = b.horizon + 1 THEN 1 ELSE 0 END AS exe, "
        "CASE WHEN b.outcome = 'success' THEN 1 ELSE 0 END AS y, "
        "CASE WHEN b.outcome = 'success' THEN 1.0 WHEN b.outcome = 'partial' THEN 0.5 ELSE 0.0 END AS score "
        f"FROM _base b JOIN ({cohort_values}) c ON {on}",
    )
    n_cohorts = len(cohort_keys)

    # L for exact AUC sums: bounded by (tasks) x (most runs of one task in one cohort).
    n_units, max_runs = backend.query(
        "SELECT COUNT(*), MAX(m) FROM (SELECT ds_key, task_id, MAX(runs) AS m FROM "
        "(SELECT cid, ds_key, task_id, COUNT(*) AS runs FROM _e GROUP BY cid, ds_key, task_id) r "
        "GROUP BY ds_key, task_id) u"
    )[0]
    import numpy as np

    horizons = np.array([int(r[0]) for r in backend.query("SELECT DISTINCT horizon FROM _e")], dtype=np.int32)
    scale = auc_scale(horizons, int(n_units) * int(max_runs))
    auc_expr = f"(fed - 1) * CAST({scale} / horizon AS BIGINT)" if scale > 1 else "CAST(fed - 1 AS DOUBLE) / horizon"

    def count(cond: str) -> str:
        return f"SUM(CASE WHEN {cond} THEN 1 ELSE 0 END)"

    sums_sql = ", ".join(
        [
            "cid",
            "COUNT(*)",
            "SUM(exe)",
            "SUM(fed)",
            f"SUM({auc_expr})",
            "SUM(y)",
            "SUM(y * exe)",
            "SUM(y * (1 - exe))",
            *(count(f"outcome = {_quote(o.value)}") for o in Outcome),
            count("outcome IS NULL"),
            *(count(f"cause = {_quote(c)}") for c in CAUSES),
            "MAX(horizon)",
            *(count(f"fed > {k}") for k in cps),
        ]
    )
    sums = {int(r[0]): r[1:] for r in backend.query(f"SELECT {sums_sql} FROM _e GROUP BY cid")}

    # PEC curves at their change points only (1, every FED, every horizon + 1): the running
    # counts of first errors and of ended episodes up to each, summed by windows. A grid of
    # every depth was cohorts x the largest horizon rows (20 million for 200 bare horizons of 100,000).
    running = "ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW"
    curve_sql = (
        "WITH ev AS (SELECT cid, fed AS k, COUNT(*) AS fc, 0 AS hc FROM _e GROUP BY cid, fed "
        "UNION ALL SELECT cid, horizon + 1 AS k, 0 AS fc, COUNT(*) AS hc FROM _e GROUP BY cid, horizon "
        "UNION ALL SELECT DISTINCT cid, 1 AS k, 0 AS fc, 0 AS hc FROM _e), "
        "pts AS (SELECT cid, k, SUM(fc) AS fc, SUM(hc) AS hc FROM ev GROUP BY cid, k) "
        f"SELECT cid, k, SUM(fc) OVER (PARTITION BY cid ORDER BY k {running}) AS failed, "
        f"SUM(hc) OVER (PARTITION BY cid ORDER BY k {running}) AS ended FROM pts"
    )
    curves: dict[int, list[tuple[int, int, int]]] = {c: [] for c in range(n_cohorts)}
    for cid, k, failed, ended in backend.query(curve_sql):
        curves[int(cid)].append((int(k), int(failed), int(ended)))

    # Tasks, reruns, unstable tasks: per (cohort, task) outcome counts and score sums.
    per_task = (
        "SELECT cid, ds, task_id, COUNT(*) AS runs, "
        + ", ".join(
            [
                *(count(f"outcome = {_quote(o.value)}") + f" AS o{j}" for j, o in enumerate(Outcome)),
                count("outcome IS NULL") + " AS o3",
            ]
        )
        + ", SUM(score) AS tot, SUM(score * score) AS sq FROM _e GROUP BY cid, ds, task_id"
    )
    tasks: dict[int, tuple[int, int]] = {
        int(r[0]): (int(r[1]), int(r[2]))
        for r in backend.query(
            f"SELECT cid, COUNT(*), SUM(CASE WHEN runs >= 2 THEN 1 ELSE 0 END) FROM ({per_task}) t GROUP BY cid"
        )
    }
    # reruns disagree when their S / P / F results do: no outcome (o3) counts as F (o2)
    distinct_outcomes = " + ".join(f"CASE WHEN {n} > 0 THEN 1 ELSE 0 END" for n in ("o0", "o1", "o2 + o3"))
    unstable: dict[int, list[UnstableTask]] = {c: [] for c in range(n_cohorts)}
    names = (*(o.value for o in Outcome), "none")
    for cid, ds, task_id, runs, o0, o1, o2, o3, tot, sq in backend.query(
        f"SELECT * FROM ({per_task}) t WHERE runs >= 2 AND {distinct_outcomes} >= 2"
    ):
        r = int(runs)
        mean = float(tot) / r
        unstable[int(cid)].append(
            UnstableTask(
                task_id=str(task_id),
                dataset=None if ds is None else str(ds),
                runs=r,
                outcomes={name: int(v) for name, v in zip(names, (o0, o1, o2, o3), strict=True) if v},
                mean=mean,
                spread=math.sqrt(max(0.0, (float(sq) - r * mean * mean) / (r - 1))),
            )
        )
    for found in unstable.values():
        found.sort(key=lambda t: (t.task_id, t.dataset is None, t.dataset or ""))

    low: dict[str, dict[int, float]] = {}
    high: dict[str, dict[int, float]] = {}
    if bootstrap:
        low, high = _bootstrap(backend, cps, scale, auc_expr, bootstrap, seed, confidence)

    def estimate(metric: str, c: int, value: float | None) -> Estimate:
        lo = low.get(metric, {}).get(c)
        hi = high.get(metric, {}).get(c)
        if value is None or lo is None or hi is None:
            return Estimate(value=value)
        return Estimate(value=value, ci=(float(lo), float(hi)))

    cohorts: list[CohortReport] = []
    for c, ck in enumerate(cohort_keys):
        row = sums[c]
        n, exe, fed_sum, auc_sum, success, success_exe, recovered = (
            int(row[0]),
            int(row[1]),
            int(row[2]),
            row[3],
            *map(int, row[4:7]),
        )
        o_s, o_p, o_f, o_none = map(int, row[7:11])
        end = 11 + len(CAUSES)
        causes = {name: int(v) for name, v in zip(CAUSES, row[11:end], strict=True)}
        k_len = int(row[end])
        cp_counts = dict(zip(cps, map(int, row[end + 1 :]), strict=True))
        # PEC(k) = #{FED > k} / N and n_k = #{T >= k}: N less the first errors at or before k,
        # N less the episodes that ended before k
        points = sorted(p for p in curves[c] if p[0] <= k_len)
        knots = np.array([p[0] for p in points], dtype=np.int64)
        survivors = np.array([n - p[1] for p in points], dtype=np.int64)
        reach = np.array([n - p[2] for p in points], dtype=np.int64)
        with np.errstate(invalid="ignore", divide="ignore"):
            elig = np.where(reach > 0, survivors / reach, np.nan)
        eligible = n - exe
        q = exe / n
        s = success_exe / exe if exe else None
        rr = recovered / eligible if eligible else None
        auc_value = float(int(auc_sum) if scale > 1 else float(auc_sum)) / (scale * n)
        cohorts.append(
            CohortReport(
                key=dict(zip(keys, ck, strict=True)),
                n=n,
                tasks=tasks[c][0],
                ter=estimate("ter", c, q),
                mean_fed=estimate("mean_fed", c, fed_sum / n),
                auc_pec=estimate("auc_pec", c, auc_value),
                rr=RecoveryRate(
                    value=rr, ci=wilson_interval(recovered, eligible, confidence), eligible=eligible, recovered=recovered
                ),
                success=estimate("success", c, success / n),
                completion=estimate("completion", c, (o_s + 0.5 * o_p) / n),
                pec=StepCurve(k_len, knots, survivors / n),
                pec_elig=StepCurve(k_len, knots, elig, none_for_nan=True),
                n_k=StepCurve(k_len, knots, reach, kind=int),
                checkpoints={k: estimate(f"pec@{k}", c, cp_counts[k] / n) for k in cps},
                causes=causes,
                outcomes={"success": o_s, "partial": o_p, "failure": o_f, "none": o_none},
                decomposition=Decomposition(q=q, s=s, r=rr, uninterrupted=success_exe / n, recovered=recovered / n),
                unstable=tuple(unstable[c]),
                rerun_tasks=tasks[c][1],
            )
        )
    return Report(
        by=keys,
        cohorts=tuple(cohorts),
        checkpoints=cps,
        resamples=bootstrap,
        seed=seed,
        confidence=confidence,
        strata=strata,
        episodes=sum(c.n for c in cohorts),
        duplicates=duplicates,
    )


def _bootstrap(
    backend: Backend,
    cps: Sequence[int],
    scale: int,
    auc_expr: str,
    resamples: int,
    seed: int,
    confidence: float,
) -> tuple[dict[str, dict[int, float]], dict[str, dict[int, float]]]:
    """Poisson-bootstrap percentile intervals of every bootstrapped metric, per cohort."""
    d = backend.dialect
    stats = {
        "n": "COUNT(*)",
        "x": "SUM(exe)",
        "f": "SUM(fed)",
        "a": f"SUM({auc_expr})",
        "y": "SUM(y)",
        "c": "SUM(score)",
        **{f"p{k}": f"SUM(CASE WHEN fed > {k} THEN 1 ELSE 0 END)" for k in cps},
    }
    per_task = ", ".join(f"{v} AS {k}" for k, v in stats.items())
    h = f"md5(concat_ws('|', {_quote(str(seed))}, CAST(w.b AS {d.string}), u.ds_key, u.task_id))"
    uniform = f"(CAST({d.hex_to_int(f'substr({h}, 1, 8)')} AS DOUBLE) / 4294967296.0)"
    backend.materialize("_pt", f"SELECT cid, ds_key, task_id, {per_task} FROM _e GROUP BY cid, ds_key, task_id")
    backend.materialize(
        "_w",
        f"SELECT u.ds_key, u.task_id, w.b, {_poisson(uniform)} AS w "
        f"FROM (SELECT DISTINCT ds_key, task_id FROM _pt) u CROSS JOIN (SELECT k AS b FROM ({d.series(resamples)}) s0) w",
    )
    resampled = ", ".join(f"SUM(w.w * t.{k}) AS {k}" for k in stats)
    ratios: Mapping[str, str] = {
        "ter": "CAST(x AS DOUBLE) / n",
        "mean_fed": "CAST(f AS DOUBLE) / n",
        "auc_pec": f"CAST(a AS DOUBLE) / (n * {scale})",
        "success": "CAST(y AS DOUBLE) / n",
        "completion": "CAST(c AS DOUBLE) / n",
        **{f"pec@{k}": f"CAST(p{k} AS DOUBLE) / n" for k in cps},
    }
    alpha = (1.0 - confidence) / 2.0
    metrics = [m for m in ratios if m in BOOTSTRAPPED or m.startswith("pec@")]
    cols = ", ".join(
        f"percentile_cont({q!r}) WITHIN GROUP (ORDER BY m{j})" for j, _ in enumerate(metrics) for q in (alpha, 1.0 - alpha)
    )
    per_b = ", ".join(f"{ratios[m]} AS m{j}" for j, m in enumerate(metrics))
    sql = (
        f"WITH bs AS (SELECT t.cid, w.b, {resampled} FROM _pt t JOIN _w w ON t.ds_key = w.ds_key AND t.task_id = w.task_id "
        "WHERE w.w > 0 GROUP BY t.cid, w.b), "
        f"r AS (SELECT cid, {per_b} FROM bs WHERE n > 0) "
        f"SELECT cid, {cols} FROM r GROUP BY cid"
    )
    low: dict[str, dict[int, float]] = {m: {} for m in metrics}
    high: dict[str, dict[int, float]] = {m: {} for m in metrics}
    for row in backend.query(sql):
        cid = int(row[0])
        for j, m in enumerate(metrics):
            lo, hi = row[1 + 2 * j], row[2 + 2 * j]
            if lo is not None and hi is not None:
                low[m][cid] = float(lo)
                high[m][cid] = float(hi)
    return low, high
