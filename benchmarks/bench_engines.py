"""10M episodes through each report engine: DuckDB, Spark SQL (local mode) and in process.

The data is generated here (vectorised, seeded) straight into one ``prefixmon.parquet/1``
file: 10,000,000 episodes, 2 datasets x 4 models x 3 methods (24 cohorts), 5,000 tasks per
dataset, horizons 1..20, every cause and outcome. Each engine then builds the full report
(every metric and curve) in its own process, so its peak memory (max RSS of the process and
its children: Spark's JVM included) is its own. The in-process engine is run on the same
file too (``--python``; it is the small-file engine and is far slower here). Every engine's
point estimates are checked against DuckDB's.

    python benchmarks/bench_engines.py            # 10M episodes, DuckDB and Spark, no bootstrap
    python benchmarks/bench_engines.py --episodes 1000000 --python --bootstrap 200
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Any

import numpy as np


def generate(path: str, n: int, seed: int = 0) -> None:
    """Write ``n`` synthetic episodes to ``path`` in batches of 1M rows."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from prefixmon.records.parquet import arrow_schema

    schema = arrow_schema()
    rng = np.random.default_rng(seed)
    causes = np.array(["schema", "dependency", "precondition", "state_consistency", "information"], dtype=object)
    outcomes = np.array(["success", "partial", "failure", None], dtype=object)
    models = [f"model-{i}" for i in range(4)]
    methods = ["react", "plan_conditioned_react", "dual_loop"]
    datasets = ["bfcl", "tau"]
    batch = 1_000_000
    t0 = np.datetime64("2026-01-01T00:00:00", "us")
    with pq.ParquetWriter(path, schema, compression="zstd") as writer:
        for start in range(0, n, batch):
            m = min(batch, n - start)
            ds = rng.integers(0, 2, m)
            model = rng.integers(0, 4, m)
            method = rng.integers(0, 3, m)
            task = rng.integers(0, 5000, m)
            horizon = rng.integers(1, 21, m).astype(np.int32)
            fails = rng.random(m) < 0.35 + 0.1 * method
            fed = np.where(fails, (rng.random(m) * horizon).astype(np.int32) + 1, horizon + 1).astype(np.int32)
            cause = causes[rng.integers(0, 5, m)]  # read only where the episode failed (the struct is null elsewhere)
            outcome = outcomes[rng.choice(4, m, p=[0.6, 0.15, 0.2, 0.05])]
            keys = [["dataset", "model", "method"]] * m
            labels = pa.MapArray.from_arrays(
                np.arange(0, 3 * m + 1, 3, dtype=np.int32),
                _flat(np.tile(np.array(["dataset", "model", "method"], dtype=object), m)),
                _flat(
                    np.stack(
                        [
                            np.array(datasets, dtype=object)[ds],
                            np.array(models, dtype=object)[model],
                            np.array(methods, dtype=object)[method],
                        ],
                        axis=1,
                    ).ravel()
                ),
            )
            del keys
            ff = pa.StructArray.from_arrays(
                [
                    pa.array(fed, pa.int32()),
                    pa.array(np.full(m, "tool"), pa.string()),
                    pa.array(cause, pa.string()),
                    pa.array(np.full(m, "why")),
                ],
                fields=list(schema.field("first_failure").type),
                mask=pa.array(~fails),
            )
            ts = pa.array(t0 + np.arange(start, start + m).astype("timedelta64[ms]"), pa.timestamp("us", tz="UTC"))
            table = pa.Table.from_arrays(
                [
                    pa.array([f"ep-{i}" for i in range(start, start + m)], pa.string()),
                    pa.array(
                        np.char.add(np.array(datasets)[ds].astype(str), np.char.add("/task-", task.astype(str))), pa.string()
                    ),
                    labels,
                    pa.array(horizon, pa.int32()),
                    pa.array(fed, pa.int32()),
                    pa.array(~fails),
                    pa.array(outcome, pa.string()),
                    ff,
                    pa.array([[]] * m, schema.field("actions").type),
                    ts,
                    ts,
                    pa.array(np.full(m, "finished")),
                    pa.nulls(m, pa.string()),
                    pa.array(np.zeros(m, dtype=bool)),
                    pa.array(np.zeros(m, dtype=bool)),
                ],
                schema=schema,
            )
            writer.write_table(table)


def _flat(values: np.ndarray) -> Any:
    """One contiguous Arrow string array (pyarrow chunks large numpy inputs)."""
    import pyarrow as pa

    arr = pa.array(values, pa.string())
    return arr.combine_chunks() if isinstance(arr, pa.ChunkedArray) else arr


def child(engine: str, path: str, bootstrap: int) -> None:
    """Run one engine and print its timing and report as JSON (runs in its own process)."""
    t = time.perf_counter()
    if engine == "python":
        from prefixmon.analytics import build_report, load_columns

        report = build_report(load_columns(path), bootstrap=bootstrap)
    else:
        from prefixmon.analytics.engines import engine_report

        report = engine_report([path], engine=engine, bootstrap=bootstrap)  # type: ignore[arg-type]
    seconds = time.perf_counter() - t
    d = report.to_dict()
    print(
        json.dumps(
            {
                "seconds": seconds,
                "cohorts": [
                    {k: c[k] for k in ("key", "n", "ter", "mean_fed", "auc_pec", "rr", "success", "pec", "n_k", "causes")}
                    for c in d["cohorts"]
                ],
            }
        )
    )


def _tree_rss_kib(pid: int) -> int:
    """Resident memory of a process and all its descendants (from /proc), in KiB."""
    total = 0
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/status") as f:
                total += next((int(line.split()[1]) for line in f if line.startswith("VmRSS:")), 0)
            with open(f"/proc/{p}/task/{p}/children") as f:
                todo.extend(int(c) for c in f.read().split())
        except (OSError, ValueError):
            continue
    return total


def run(engine: str, path: str, bootstrap: int) -> dict[str, Any]:
    """One engine in a child process; peak memory = the largest sum of RSS over its process tree
    (the JVM's included), sampled every 50 ms."""
    log = tempfile.TemporaryFile("w+")  # Spark logs a lot: a pipe could fill and stall the child  # noqa: SIM115 - closed with the process
    proc = subprocess.Popen(
        [sys.executable, __file__, "--child", engine, "--file", path, "--bootstrap", str(bootstrap)],
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
    )
    peak = 0
    while proc.poll() is None:
        peak = max(peak, _tree_rss_kib(proc.pid))
        time.sleep(0.05)
    out = proc.stdout.read() if proc.stdout else ""
    if proc.returncode:
        log.seek(0)
        err = log.read()
        raise RuntimeError(f"{engine} failed with exit code {proc.returncode}: {err[-2000:]}")
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    result["peak_mb"] = peak / 1024
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=10_000_000)
    parser.add_argument("--bootstrap", type=int, default=0)
    parser.add_argument("--python", action="store_true", help="also run the in-process engine")
    parser.add_argument("--no-spark", action="store_true")
    parser.add_argument("--only", choices=("duckdb", "spark", "python"), help="run this engine only")
    parser.add_argument("--child")
    parser.add_argument("--file")
    args = parser.parse_args()
    if args.child:
        child(args.child, args.file, args.bootstrap)
        return
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "fleet.parquet")
        t = time.perf_counter()
        generate(path, args.episodes)
        size = os.path.getsize(path) / 2**20
        print(f"generated {args.episodes:,} episodes in {time.perf_counter() - t:.1f} s ({size:.0f} MiB Parquet)")
        engines = (
            [args.only]
            if args.only
            else ["duckdb", *(() if args.no_spark else ("spark",)), *(("python",) if args.python else ())]
        )
        results = {}
        for engine in engines:
            results[engine] = r = run(engine, path, args.bootstrap)
            print(
                f"{engine:>7}: {r['seconds']:7.1f} s, {args.episodes / r['seconds']:>12,.0f} episodes/s, "
                f"peak RSS {r['peak_mb']:,.0f} MiB (bootstrap {args.bootstrap})"
            )
        for engine in engines[1:] if "duckdb" in results else ():
            same = results[engine]["cohorts"] == results["duckdb"]["cohorts"]
            print(
                f"{engine} point estimates equal DuckDB's: {same if args.bootstrap == 0 else 'n/a (bootstrap intervals differ by method)'}"  # noqa: E501
            )


if __name__ == "__main__":
    main()
