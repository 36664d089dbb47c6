"""`prefixmon report` against DuckDB on the same JSON Lines file (issue 17). Not part of pytest.

Run:  .venv/bin/python benchmarks/bench_report.py [--episodes 1000000] [--keep FILE]
      (needs ``pip install duckdb``; 10,000,000 episodes write about 15 GB)

A file this large is read by one process per core (see ``prefixmon.analytics._parallel``);
the peak counts the reading processes too. The floor row decodes every line whole with the
loader's typed decoder in one process and does nothing else: the work that makes the loader
agree with ``--validate`` on every line.

The file is generated here (real records, actions included, see bench_analytics.py). Each
side runs in its own process, one after the other, so its time and peak memory (ru_maxrss)
are its own (VmHWM): DuckDB's ``read_json`` computing N, TER, mean FED, AUC-PEC and success per
cohort, and prefixmon's fast loader plus ``build_report`` (no bootstrap) over every line
read whole. Also: Python objects kept per episode by the loader (allocated blocks / N).
Targets: time <= 2x DuckDB's, peak <= 0.5 GB at 10M episodes.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))

DUCKDB = """
import json, sys, time
import duckdb
t = time.perf_counter()
con = duckdb.connect()
con.execute('SET enable_progress_bar = false')
rows = con.execute('''
  select labels.dataset, labels.model, labels.method, count(*),
         avg(case when executable then 1.0 else 0.0 end), avg(fed), avg((fed - 1) / horizon),
         avg(case when outcome = 'success' then 1.0 else 0.0 end)
  from read_json(?, format='newline_delimited', columns={
      'labels': 'STRUCT(dataset VARCHAR, model VARCHAR, method VARCHAR)', 'horizon': 'INTEGER',
      'fed': 'INTEGER', 'executable': 'BOOLEAN', 'outcome': 'VARCHAR'})
  group by all''', [sys.argv[1]]).fetchall()
hwm = int(open('/proc/self/status').read().split('VmHWM:')[1].split()[0]) / 1024
print(json.dumps({"seconds": time.perf_counter() - t, "peak_mb": hwm,
                  "cohorts": len(rows)}))
"""

PREFIXMON = """
import json, os, resource, sys, time
from prefixmon.analytics import build_report, load_columns
from prefixmon.analytics._parallel import workers_for
t = time.perf_counter()
blocks = sys.getallocatedblocks()
columns = load_columns(sys.argv[1])
kept = (sys.getallocatedblocks() - blocks) / max(len(columns), 1)
report = build_report(columns, bootstrap=0)
seconds = time.perf_counter() - t
hwm = int(open('/proc/self/status').read().split('VmHWM:')[1].split()[0]) / 1024
worker = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
workers = workers_for(sys.argv[1], os.path.getsize(sys.argv[1]))
print(json.dumps({"seconds": seconds, "peak_mb": hwm, "worker_peak_mb": worker if workers > 1 else 0.0,
                  "workers": workers, "cohorts": len(report.cohorts), "objects_per_episode": kept}))
"""

FLOOR = """
import json, sys, time
from prefixmon.analytics.inputs import _fast_decoder
decode = _fast_decoder()
t = time.perf_counter()
with open(sys.argv[1], "rb") as f:
    for line in f:
        decode(line)
print(json.dumps({"seconds": time.perf_counter() - t}))
"""


def run(code: str, path: str) -> dict[str, float]:
    done = subprocess.run([sys.executable, "-c", code, path], capture_output=True, text=True, check=True)
    last = [line for line in done.stdout.splitlines() if line.startswith("{")][-1]  # (DuckDB may draw a progress bar)
    result: dict[str, float] = json.loads(last)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=1_000_000)
    parser.add_argument("--keep", help="write the records file here and keep it (reused when it exists)")
    args = parser.parse_args()
    sys.path.insert(0, HERE)
    from bench_analytics import write_million

    path = args.keep or os.path.join(tempfile.mkdtemp(), "records.jsonl")
    if not os.path.exists(path):
        write_million(path, args.episodes)
    size = os.path.getsize(path) / 1e9
    duck = run(DUCKDB, path)
    ours = run(PREFIXMON, path)
    floor = run(FLOOR, path)
    ratio = ours["seconds"] / duck["seconds"]
    peak_target = 500 * args.episodes / 10_000_000
    print(f"{args.episodes:,} episodes, {size:.2f} GB of JSON Lines")
    print("| side | time | peak | cohorts |")
    print("|---|---:|---:|---:|")
    print(f"| DuckDB read_json + GROUP BY | {duck['seconds']:.1f} s | {duck['peak_mb']:.0f} MB | {duck['cohorts']:.0f} |")
    workers = int(ours["workers"])
    total = ours["peak_mb"] + workers * ours["worker_peak_mb"]
    print(
        f"| prefixmon load_columns + build_report ({workers} reading process(es)) | {ours['seconds']:.1f} s | "
        f"{ours['peak_mb']:.0f} MB (+ {workers} x {ours['worker_peak_mb']:.0f} MB in the readers: at most {total:.0f} MB) | "
        f"{ours['cohorts']:.0f} |"
    )
    print(
        f"| floor: decoding every line whole, one process (what agreeing with --validate takes) | {floor['seconds']:.1f} s | | |"
    )
    print(f"\ntime ratio prefixmon / DuckDB: {ratio:.2f}x (target <= 2x) -> {'met' if ratio <= 2 else 'NOT met'}")
    print(
        f"peak: {total:.0f} MB in all (target at 10M: <= 500 MB; scaled to this size: <= {peak_target:.0f} MB) -> "
        f"{'met' if total <= peak_target else 'NOT met'}"
    )
    print(f"floor / DuckDB: {floor['seconds'] / duck['seconds']:.2f}x on one core")
    print(f"Python objects kept per episode by the loader: {ours['objects_per_episode']:.1f}")
    if not args.keep:
        os.remove(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
