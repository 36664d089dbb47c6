"""`prefixmon report` against DuckDB on the same JSON Lines file (issue 17). Not part of pytest.

Run:  .venv/bin/python benchmarks/bench_report.py [--episodes 1000000] [--keep FILE] [--repeat 2]
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
import time

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


def _tree(pid: int) -> list[int]:
    """``pid`` and its descendants (Linux ``/proc``)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as f:
                    todo.extend(int(c) for c in f.read().split())
        except OSError:
            pass
    return out


def _tree_mb(pids: list[int]) -> float:
    """The first process's RSS plus the private pages (USS) of the others, its children.

    Pages a forked reader shares with its parent (the interpreter, the imported modules)
    are counted once, in the parent; what a reader holds on its own is added.
    """
    total = 0
    for i, p in enumerate(pids):
        try:
            with open(f"/proc/{p}/smaps_rollup") as f:
                fields = dict(line.split()[:2] for line in f if line.endswith("kB\n"))
        except OSError:
            continue
        if i == 0:
            total += int(fields.get("Rss:", 0))
        else:
            total += int(fields.get("Private_Clean:", 0)) + int(fields.get("Private_Dirty:", 0))
    return total / 1024


def run(code: str, path: str) -> dict[str, float]:
    """Run one side in its own process; also samples the memory of its process tree every 20 ms.

    The RSS peaks of a parent and its forked readers, summed, count the pages they share
    (the interpreter, the imported modules) once per process; the sample (see
    :func:`_tree_mb`) counts them once (a peak between two samples may be missed).
    """
    with subprocess.Popen([sys.executable, "-c", code, path], stdout=subprocess.PIPE, text=True) as child:
        peak = 0.0
        while child.poll() is None:
            peak = max(peak, _tree_mb(_tree(child.pid)))
            time.sleep(0.02)
        stdout = child.stdout.read() if child.stdout is not None else ""
    if child.returncode:
        raise RuntimeError(f"a benchmark process failed (exit code {child.returncode})")
    last = [line for line in stdout.splitlines() if line.startswith("{")][-1]  # (DuckDB may draw a progress bar)
    result: dict[str, float] = json.loads(last)
    result["tree_mb"] = peak
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=1_000_000)
    parser.add_argument("--keep", help="write the records file here and keep it (reused when it exists)")
    parser.add_argument("--repeat", type=int, default=2, help="runs of each side, alternating (default 2)")
    args = parser.parse_args()
    sys.path.insert(0, HERE)
    from bench_analytics import write_million

    path = args.keep or os.path.join(tempfile.mkdtemp(), "records.jsonl")
    if not os.path.exists(path):
        write_million(path, args.episodes)
    size = os.path.getsize(path) / 1e9
    # The sides run one after the other, alternating, --repeat times: on a shared machine
    # the load changes from one run to the next, so each pair's ratio is reported too.
    ducks, ours = [], []
    for _ in range(args.repeat):
        ducks.append(run(DUCKDB, path))
        ours.append(run(PREFIXMON, path))
    floor = run(FLOOR, path)
    duck = min(ducks, key=lambda r: r["seconds"])
    best = min(ours, key=lambda r: r["seconds"])
    ratio = best["seconds"] / duck["seconds"]
    peak_target = 500 * args.episodes / 10_000_000
    print(f"{args.episodes:,} episodes, {size:.2f} GB of JSON Lines; best of {args.repeat} runs each")
    print("| side | time | peak (RSS) | peak (tree, sampled) | cohorts |")
    print("|---|---:|---:|---:|---:|")
    print(
        f"| DuckDB read_json + GROUP BY | {duck['seconds']:.1f} s | {duck['peak_mb']:.0f} MB | {duck['tree_mb']:.0f} MB | "
        f"{duck['cohorts']:.0f} |"
    )
    workers = int(best["workers"])
    total = best["peak_mb"] + workers * best["worker_peak_mb"]
    print(
        f"| prefixmon load_columns + build_report ({workers} reading process(es)) | {best['seconds']:.1f} s | "
        f"{best['peak_mb']:.0f} MB (+ {workers} x {best['worker_peak_mb']:.0f} MB in the readers: at most {total:.0f} MB) | "
        f"{max(r['tree_mb'] for r in ours):.0f} MB in all | {best['cohorts']:.0f} |"
    )
    print(
        "| floor: decoding every line whole, one process (what agreeing with --validate takes) | "
        f"{floor['seconds']:.1f} s | | | |"
    )
    pairs = ", ".join(
        f"{o['seconds']:.1f}/{d['seconds']:.1f} s = {o['seconds'] / d['seconds']:.2f}x" for o, d in zip(ours, ducks, strict=True)
    )
    print(f"\nruns (prefixmon/DuckDB): {pairs}")
    print(f"time ratio prefixmon / DuckDB, best runs: {ratio:.2f}x (target <= 2x) -> {'met' if ratio <= 2 else 'NOT met'}")
    print(
        f"peak: RSS summed {total:.0f} MB, tree {max(r['tree_mb'] for r in ours):.0f} MB (target at 10M: <= 500 MB; "
        f"scaled to this size: <= {peak_target:.0f} MB)"
    )
    print(f"floor / DuckDB: {floor['seconds'] / duck['seconds']:.2f}x on one core")
    print(f"Python objects kept per episode by the loader: {best['objects_per_episode']:.1f}")
    if not args.keep:
        os.remove(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
