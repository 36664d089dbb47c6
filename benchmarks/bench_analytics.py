"""Benchmark of the offline analytics (issue 4). Not part of pytest.

Run:  .venv/bin/python benchmarks/bench_analytics.py [--episodes 1000000] [--skip-scipy]

1. Paper-size grid: 4 datasets (BFCL 200, ToolSandbox 200, Airline 50, Retail 114 tasks)
   x 3 models x 4 methods, one rollout per task = 6,768 episodes in 48 cohorts. Every
   metric and PEC checkpoint with a paired task-level bootstrap of 10,000 resamples.
   Target: < 0.5 s. Then the same statistics with ``scipy.stats.bootstrap`` (one call per
   cohort and statistic, task-level resampling), and the ratio.
2. 1,000,000 episodes written as a real record file (JSON Lines, actions included),
   loaded with the fast column loader and reported without bootstrap. Target: < 10 s.

The records are synthetic but real: every line is an ``EpisodeRecord`` serialised by
``prefixmon.records`` (a sample is re-validated with pydantic), with cohort parameters in
the range of the paper's Table 2.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Final

import numpy as np

from prefixmon.analytics import EpisodeColumns, Report, build_report, load_columns
from prefixmon.records import ActionRecord, EpisodeRecord, build_record, dumps_record, loads_record, read_records, write_records
from prefixmon.vocabulary import Cause, Outcome

DATASETS: Final = {"bfcl": 200, "toolsandbox": 200, "airline": 50, "retail": 114}
MODELS: Final = ("gpt-5.4", "gpt-4.1", "llama-4")
METHODS: Final = ("react", "prompt_planning", "plan_conditioned_react", "dual_loop")
# (TER, success if executable, RR) per method, loosely after Table 2.
PARAMS: Final = {
    "react": (0.62, 0.85, 0.25),
    "prompt_planning": (0.78, 0.9, 0.2),
    "plan_conditioned_react": (0.3, 0.95, 0.75),
    "dual_loop": (0.92, 0.85, 0.3),
}
MODEL_SHIFT: Final = {"gpt-5.4": 0.05, "gpt-4.1": 0.0, "llama-4": -0.2}
CAUSES: Final = tuple(Cause)
NOW: Final = datetime(2026, 1, 1, tzinfo=UTC)


def episode_shapes(rng: np.random.Generator, n: int, method: str, model: str) -> Iterator[tuple[int, int, Outcome, Cause]]:
    """(horizon, fed, outcome, cause) for n episodes of one cohort."""
    ter, s, r = PARAMS[method]
    ter = min(0.99, max(0.01, ter + MODEL_SHIFT[model]))
    horizon = np.minimum(10, 1 + rng.poisson(3.5, n))
    executable = rng.random(n) < ter
    fed = np.where(executable, horizon + 1, 1 + (rng.random(n) * horizon).astype(int))
    success = rng.random(n) < np.where(executable, s, r)
    partial = ~success & (rng.random(n) < 0.3)
    cause = rng.integers(0, len(CAUSES), n)
    for i in range(n):
        outcome = Outcome.SUCCESS if success[i] else Outcome.PARTIAL if partial[i] else Outcome.FAILURE
        yield int(horizon[i]), int(fed[i]), outcome, CAUSES[int(cause[i])]


def make_record(
    episode_id: str, task_id: str, labels: dict[str, str], horizon: int, fed: int, outcome: Outcome, cause: Cause
) -> EpisodeRecord:
    actions = [
        ActionRecord(
            depth=d,
            tool=f"tool_{d % 7}",
            call_id=f"call_{d}",
            executable=d != fed,
            cause=cause if d == fed else None,
            reason=f"{cause.value} check failed for argument 'x'" if d == fed else None,
            reached_environment=True,
        )
        for d in range(1, horizon + 1)
    ]
    return build_record(
        episode_id=episode_id, task_id=task_id, labels=labels, actions=actions, outcome=outcome, started_at=NOW, ended_at=NOW
    )


def paper_grid(seed: int = 7) -> list[EpisodeRecord]:
    rng = np.random.default_rng(seed)
    records = []
    for dataset, n_tasks in DATASETS.items():
        for model in MODELS:
            for method in METHODS:
                labels = {"dataset": dataset, "model": model, "method": method}
                for t, (h, f, o, c) in enumerate(episode_shapes(rng, n_tasks, method, model)):
                    records.append(make_record(f"{dataset}-{model}-{method}-{t}", f"{dataset}-{t:03d}", labels, h, f, o, c))
    return records


def scipy_equivalent(columns: EpisodeColumns, report: Report) -> float:
    """Same statistics with scipy.stats.bootstrap: one call per cohort and statistic."""
    from scipy.stats import bootstrap  # type: ignore[import-untyped]

    from prefixmon.analytics.metrics import episode_statistics, group

    grouping = group(columns, report.by, report.strata)
    stats = episode_statistics(columns, report.checkpoints)
    names = ["ter", "mean_fed", "auc_pec", "success", "completion", *(f"pec@{k}" for k in report.checkpoints)]
    columns_of = [1, 2, 3, 4, 6, *range(7, 7 + len(report.checkpoints))]
    rng = np.random.default_rng(0)
    start = time.perf_counter()
    for c in range(len(grouping.cohort_keys)):
        members = np.flatnonzero(grouping.cohort == c)
        tasks, inverse = np.unique(columns.task[members], return_inverse=True)
        den = np.bincount(inverse, minlength=tasks.size).astype(float)
        for j in columns_of:
            num = np.bincount(inverse, weights=stats[members, j], minlength=tasks.size)
            bootstrap(
                (num, den),
                lambda a, b, axis=-1: a.sum(axis=axis) / b.sum(axis=axis),
                paired=True,
                vectorized=True,
                n_resamples=report.resamples,
                method="percentile",
                rng=rng,
            )
    del names
    return time.perf_counter() - start


def write_million(path: str, n: int, seed: int = 11) -> None:
    """n real record lines: one pydantic-serialised template per distinct shape, ids filled in."""
    rng = np.random.default_rng(seed)
    combos = [(d, m, x) for d in DATASETS for m in MODELS for x in METHODS]
    templates: dict[tuple[int, int, int, Outcome, Cause], list[str]] = {}
    per = n // len(combos) + 1
    written = 0
    with open(path, "w", encoding="utf-8") as f:
        for ci, (dataset, model, method) in enumerate(combos):
            labels = {"dataset": dataset, "model": model, "method": method}
            count = min(per, n - written)
            if count <= 0:
                break
            lines = []
            for i, (h, fed, o, c) in enumerate(episode_shapes(rng, count, method, model)):
                key = (ci, h, fed, o, c)
                parts = templates.get(key)
                if parts is None:
                    line = dumps_record(make_record("@@EPISODE@@", "@@TASK@@", labels, h, fed, o, c))
                    parts = templates[key] = line.replace("@@TASK@@", "@@EPISODE@@").split("@@EPISODE@@")
                task = f"{dataset}-{i % 5000:04d}"
                lines.append(f"{parts[0]}{dataset}-{model}-{method}-{i}{parts[1]}{task}{parts[2]}\n")
            f.writelines(lines)
            written += count


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=1_000_000)
    parser.add_argument("--resamples", type=int, default=10_000)
    parser.add_argument("--skip-scipy", action="store_true")
    parser.add_argument("--keep", help="write the big records file here and keep it")
    args = parser.parse_args()
    print(f"numpy {np.__version__}, {os.cpu_count()} CPUs, Python {sys.version.split()[0]}")

    # 1. Paper-size grid.
    with tempfile.TemporaryDirectory() as tmp:
        grid_path = os.path.join(tmp, "grid.jsonl")
        write_records(grid_path, paper_grid())
        t0 = time.perf_counter()
        columns = load_columns(grid_path)
        t_load = time.perf_counter() - t0
    build_report(columns, bootstrap=200, seed=0)  # warm-up (imports, allocator)
    runs = []
    report = None
    for _ in range(5):
        t0 = time.perf_counter()
        report = build_report(
            columns, bootstrap=args.resamples, seed=0, compare=["method=dual_loop,method=plan_conditioned_react"]
        )
        runs.append(time.perf_counter() - t0)
    assert report is not None
    t_grid = statistics.median(runs)
    n_stats = 5 + len(report.checkpoints)
    print(
        f"\n[1] paper grid: {len(columns):,} episodes, {len(report.cohorts)} cohorts, "
        f"{len(report.comparisons)} paired comparisons, {n_stats} bootstrapped statistics per cohort "
        f"+ Wilson RR, {args.resamples:,} paired task-level resamples"
    )
    print(f"    load (fast column loader): {t_load * 1000:.1f} ms")
    print(
        f"    build_report: median {t_grid * 1000:.0f} ms, first {runs[0] * 1000:.0f} ms, best {min(runs) * 1000:.0f} ms "
        f"(runs: {', '.join(f'{r * 1000:.0f}' for r in runs)})  -> {'OK' if t_grid < 0.5 else 'OVER'} target 500 ms"
    )
    c = report.cohort(dataset="bfcl", model="llama-4", method="plan_conditioned_react")
    print(
        f"    e.g. bfcl/llama-4/plan_conditioned_react: TER {c.ter.value:.3f} {c.ter.ci}, "
        f"RR {c.rr.value:.3f} (eligible {c.rr.eligible})"
    )
    if not args.skip_scipy:
        t_scipy = scipy_equivalent(columns, report)
        calls = len(report.cohorts) * n_stats
        print(f"    scipy.stats.bootstrap, same statistics ({calls} calls, task-level, percentile): {t_scipy:.2f} s")
        print(f"    ratio scipy / prefixmon (median run): {t_scipy / t_grid:.0f}x")

    # 2. A million episodes from a records file.
    path = args.keep or os.path.join(tempfile.mkdtemp(), "million.jsonl")
    t0 = time.perf_counter()
    write_million(path, args.episodes)
    t_write = time.perf_counter() - t0
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        sample = [next(f) for _ in range(1000)]
    for line in sample:
        loads_record(line)  # the file is made of valid records
    print(f"\n[2] {args.episodes:,} episodes: wrote {size / 1e9:.2f} GB of records in {t_write:.1f} s (1,000 lines re-validated)")
    t0 = time.perf_counter()
    big = load_columns(path)
    t_load = time.perf_counter() - t0
    t0 = time.perf_counter()
    big_report = build_report(big, bootstrap=0)
    t_report = time.perf_counter() - t0
    total = t_load + t_report
    print(f"    load_columns: {t_load:.2f} s ({t_load / len(big) * 1e6:.2f} µs/episode)")
    print(f"    build_report (no bootstrap, {len(big_report.cohorts)} cohorts): {t_report:.2f} s")
    print(f"    total: {total:.2f} s -> {'OK' if total < 10 else 'OVER'} target 10 s")
    head = os.path.join(os.path.dirname(path), "head.jsonl")
    with open(path, "rb") as src, open(head, "wb") as dst:
        for _ in range(50_000):
            dst.write(src.readline())
    t0 = time.perf_counter()
    validated = read_records(head)
    t_val = time.perf_counter() - t0
    per = t_val / len(validated)
    print(
        f"    for comparison, read_records (pydantic, full validation) on 50,000 lines: {per * 1e6:.1f} µs/episode "
        f"-> ~{per * args.episodes:.0f} s for {args.episodes:,}"
    )
    os.remove(head)
    if not args.keep:
        os.remove(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
