"""Replay throughput of ``prefixmon replay`` before and after issue 17's fixes. Not part of pytest.

Run:  .venv/bin/python benchmarks/bench_replay.py [--rounds 5] [--quick] [--checkout 4c1261e [--instructions]]

Each source is replayed through its ``prefixmon replay`` entry point (``SOURCE.replay`` of
the BFCL source, ``AIRLINE.replay`` / ``RETAIL.replay`` of τ-bench: read the file, replay
every task through a monitor, write the records), on inputs written in this run:

- ``bfcl``: BFCL's multi-turn ground truth of all four categories (800 tasks) written as a
  model's result files (``result/<model>/multi_turn/BFCL_v4_multi_turn_<category>_result.json``,
  what ``prefixmon replay --bfcl`` reads), replayed on BFCL's own environment classes and
  judged by BFCL's checkers;
- ``tau-airline`` / ``tau-retail``: the gold runs of ``airline_test`` and ``retail_test``
  (:func:`~prefixmon.adapters.taubench.replay.gold_rollouts`) as τ-bench results files.

"after" is the code as shipped. "before" is the same replay in the same process with the
old behaviour reproduced (from ``git show ceed821^`` and the commits after it):

- BFCL: the specs built again for every replay (old ``build_toolset``: every schema compiled
  on each call; here ``specs._specs.cache_clear()`` before each replay). The old replay
  already built them once per replay, not per task: within one ``prefixmon replay`` process
  the two sides do the same work, and the ratio shows it.
- τ-bench: the specs built again for every replay (old ``toolset``), and every sandbox made
  as the old ``Sandbox.__init__`` made it: the data folder resolved again (the old
  ``data_dir``: a ``stat`` and a ``realpath``) and tables with their own derived indexes
  (the user index built again per sandbox instead of shared per process).

The old code is put back for the "before" rounds by swapping those functions in (see
``_side``), and taken out again for the "after" rounds; rounds alternate (before, after,
after, before, ...). Records of both sides are compared (same verdicts, same outcomes), so
the reproduction changes speed only. GC is on. Target: throughput >= 2x before.

``--checkout REV`` adds what the reproduction cannot: the whole program as it was at ``REV``
(4c1261e: main when issue 17 was filed), core included. A git worktree of ``REV`` is made and
each round runs both programs in their own fresh processes on the same input files (one
warm-up replay, then ``--repeat`` replays, median), alternating which goes first. Verdicts
may differ where bugs were fixed since; the table counts the calls judged differently.
With ``--instructions`` (needs valgrind), each program's replay is also counted in machine
instructions, which do not move with the load of a shared machine the way time does.

The last column is a profile, not a target: the share of the "after" time spent indexing
results into the monitor's information pool (``TrackedState.ingest``, core code), measured
as a third interleaved side with ``ingest`` swapped for a no-op (that side's records are not
used). No adapter change can make a replay faster than that side.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prefixmon import TrackedState, read_records
from prefixmon.adapters.bfcl import load_tasks
from prefixmon.adapters.bfcl import specs as bfcl_specs
from prefixmon.adapters.bfcl.replay import SOURCE as BFCL
from prefixmon.adapters.bfcl.replay import ground_truth_results
from prefixmon.adapters.taubench import data as tau_data
from prefixmon.adapters.taubench import replay as tau_replay
from prefixmon.adapters.taubench import sandbox as tau_sandbox
from prefixmon.adapters.taubench import toolsets as tau_toolsets
from prefixmon.adapters.taubench._table import Table
from prefixmon.commands import ReplayRequest, ReplaySource

TARGET = 2.0
HERE = Path(__file__).resolve().parent


# -- the old code, as it was -------------------------------------------------------------------
def _old_data_dir(path: str | os.PathLike[str] | None = None) -> Path:
    """``data.data_dir`` before ceed821: the folder found and resolved on every call."""
    if path is not None:
        candidates = [Path(path)]
    elif os.environ.get(tau_data.ENV_VAR):
        candidates = [Path(os.environ[tau_data.ENV_VAR])]
    else:
        candidates = [tau_data.PACKAGED]
    for candidate in candidates:
        if (candidate / "tool_schemas").is_dir():
            return candidate.resolve()
    raise tau_data.DataNotFoundError(f"τ-bench v1 data folder not found (looked in {candidates})")


class _OldSandbox(tau_sandbox.Sandbox):
    """``Sandbox`` before ceed821: data folder resolved per sandbox, derived indexes per table."""

    __slots__ = ()

    def __init__(self, domain: tau_data.Domain, *, data: str | os.PathLike[str] | None = None, replica: bool = False) -> None:
        tables = tau_data._tables(domain, _old_data_dir(data))  # old load_tables: data_dir, then the per-process tables
        self.domain = domain
        self.db = {name: Table(base) for name, base in tables.items()}
        self.tools = tau_sandbox._TOOLS[domain]
        self.replica = replica
        self.divergences = []


def _no_ingest(self: TrackedState, result: Any, *, produce: Mapping[str, str] | None = None, tool: str | None = None) -> None:
    """``TrackedState.ingest`` doing nothing (the profile side only)."""


@dataclass
class _Swap:
    owner: Any
    name: str
    old: Any
    new: Any = None

    def __post_init__(self) -> None:
        self.new = getattr(self.owner, self.name)


@contextlib.contextmanager
def _side(source: str) -> Iterator[None]:
    """The old behaviour of ``source`` for the duration of one replay (``pool-off``: the profile side)."""
    swaps: list[_Swap] = []
    if source == "pool-off":
        swaps = [_Swap(TrackedState, "ingest", _no_ingest)]
    elif source == "bfcl":
        bfcl_specs._specs.cache_clear()  # the old build_toolset made the specs on every call
    else:
        tau_toolsets._specs.cache_clear()
        swaps = [_Swap(tau_replay, "Sandbox", _OldSandbox)]
    for s in swaps:
        setattr(s.owner, s.name, s.old)
    try:
        yield
    finally:
        for s in swaps:
            setattr(s.owner, s.name, s.new)


# -- inputs ------------------------------------------------------------------------------------
def bfcl_inputs(root: Path, categories: tuple[str, ...]) -> list[Path]:
    """The ground truth of ``categories`` as one model's BFCL result files."""
    paths = []
    for category in categories:
        path = root / "result" / "ground-truth" / "multi_turn" / f"BFCL_v4_multi_turn_{category}_result.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w", encoding="utf-8") as f:
            for entry in ground_truth_results(load_tasks([category])):
                f.write(json.dumps(entry) + "\n")
        paths.append(path)
    return paths


def tau_input(root: Path, split: str, limit: int | None) -> Path:
    """The gold runs of ``split`` as a τ-bench results file."""
    path = root / f"{split}.json"
    path.write_text(json.dumps(tau_replay.gold_rollouts(split, limit=limit)), encoding="utf-8")
    return path


# -- measuring ---------------------------------------------------------------------------------
@dataclass
class Case:
    name: str
    source: ReplaySource
    request: ReplayRequest
    before: list[float]
    after: list[float]
    pool_off: list[float]
    tasks: int = 0
    calls: int = 0


def replay_once(case: Case) -> tuple[float, list[Any]]:
    """Seconds for one ``prefixmon replay`` of the case (its summary line swallowed), and what it judged."""
    with contextlib.redirect_stdout(io.StringIO()):
        start = time.perf_counter()
        code = case.source.replay(case.request)
        elapsed = time.perf_counter() - start
    if code != 0:
        raise SystemExit(f"{case.name}: replay exited {code}")
    records = read_records(case.request.out)
    judged = [
        (r.task_id, r.fed, r.outcome, [(a.tool, a.executable, a.cause, a.reason, a.error) for a in r.actions]) for r in records
    ]
    case.tasks = len(records)
    case.calls = sum(r.horizon for r in records)
    return elapsed, judged


def measure(cases: list[Case], rounds: int) -> None:
    for case in cases:  # warm-up (imports, data files, tables), and the two sides must agree
        with _side(case.name):
            _, old = replay_once(case)
        _, new = replay_once(case)
        if old != new:
            raise SystemExit(f"{case.name}: the reproduced old code judges differently from the shipped code")
    for r in range(rounds):
        for case in cases:
            order = ("before", "after", "pool-off") if r % 2 == 0 else ("pool-off", "after", "before")
            for side in order:
                if side == "before":
                    with _side(case.name):
                        case.before.append(replay_once(case)[0])
                elif side == "pool-off":
                    with _side("pool-off"):
                        case.pool_off.append(replay_once(case)[0])
                else:
                    case.after.append(replay_once(case)[0])


# -- another checkout, in its own processes ------------------------------------------------------
SIDE = """
import contextlib, io, json, os, statistics, sys, time
from pathlib import Path
from prefixmon import read_records
from prefixmon.commands import ReplayRequest
from prefixmon.adapters.bfcl.replay import SOURCE as BFCL
from prefixmon.adapters.taubench import replay as tau
name, out, repeat, files = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3]), tuple(Path(f) for f in sys.argv[4:])
source = {"bfcl": BFCL, "tau-airline": tau.AIRLINE, "tau-retail": tau.RETAIL}[name]
request = ReplayRequest(source=name, files=files, out=out)


def once():
    with contextlib.redirect_stdout(io.StringIO()):
        start = time.perf_counter()
        code = source.replay(request)
        elapsed = time.perf_counter() - start
    if code != 0:
        raise SystemExit(f"{name}: replay exited {code}")
    return elapsed


once()  # warm-up
if repeat < 0:  # under valgrind: children forked from this warm process replay 1 and 3 times
    sys.path.append(os.environ["BENCH_REPLAY_HERE"])  # bench_instructions (stdlib imports only)
    from bench_instructions import fork_runs

    fork_runs(lambda count: [once() for _ in range(count)], (1, 3), f"{name} replays")
    raise SystemExit(0)
seconds = [once() for _ in range(repeat)]
judged = [[r.task_id, [[a.tool, a.executable, a.cause] for a in r.actions]] for r in read_records(out)]
print(json.dumps({"seconds": statistics.median(seconds), "judged": judged}))
"""


@dataclass
class Checkout:
    """A worktree of another revision, importable as ``prefixmon`` through a path of its own."""

    rev: str
    root: Path
    path: Path

    @classmethod
    def make(cls, rev: str, tmp: Path) -> Checkout:
        root, path = tmp / "checkout", tmp / "checkout-path"
        subprocess.run(["git", "-C", str(HERE.parent), "worktree", "add", "--detach", "-q", str(root), rev], check=True)
        (root / "monitor" / "adapters").symlink_to(root / "adapters")  # as the package maps them
        path.mkdir()
        (path / "prefixmon").symlink_to(root / "monitor")
        return cls(rev=rev, root=root, path=path)

    def remove(self) -> None:
        subprocess.run(["git", "-C", str(HERE.parent), "worktree", "remove", "--force", str(self.root)], check=False)
        shutil.rmtree(self.path, ignore_errors=True)


def _side_process(
    case: Case, repeat: int, checkout: Checkout | None, wrapper: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    """One fresh process (under ``wrapper``, e.g. valgrind) replaying the case after a warm-up, ``repeat`` times
    (-1: two children forked after the warm-up replay 1 and 3 times, see :func:`replay_instructions`)."""
    env = dict(os.environ, BENCH_REPLAY_HERE=str(HERE))
    if checkout is not None:
        env["PYTHONPATH"] = str(checkout.path)
    out = case.request.out.with_suffix(".checkout.jsonl" if checkout else ".main.jsonl")
    files = [str(f) for f in case.request.files]
    return subprocess.run(
        [*wrapper, sys.executable, "-c", SIDE, case.name, str(out), str(repeat), *files],
        env=env,
        cwd=tempfile.gettempdir(),
        check=True,
        capture_output=True,
        text=True,
    )


def run_side(case: Case, repeat: int, checkout: Checkout | None) -> tuple[float, list[Any]]:
    """One fresh process replaying the case ``repeat`` times: median seconds and what it judged."""
    answer = json.loads(_side_process(case, repeat, checkout).stdout.strip().splitlines()[-1])
    return answer["seconds"], answer["judged"]


def replay_instructions(case: Case, checkout: Checkout | None) -> float:
    """Machine instructions of one replay (valgrind): after a warm-up replay, two children forked
    from the warm process replay 1 and 3 times; the difference of their counts, halved.

    Instructions are not time, but unlike time on a shared machine they do not move between
    runs (see bench_instructions.py, whose forked children this uses for the same reason:
    one process per count moved by the import's own variation).
    """
    from bench_instructions import VALGRIND, per_forked_unit

    return per_forked_unit(_side_process(case, -1, checkout, VALGRIND), 1, f"{case.name} replay")


def instructions_checkout(cases: list[Case], checkout: Checkout) -> str:
    """Instructions of one replay, this code against ``checkout``'s (one valgrind process pair each)."""
    rev = checkout.rev
    rows = [
        f"| replay | calls | {rev}: instructions per call | main: instructions per call | main / {rev} (throughput) |",
        "|---|---:|---:|---:|---:|",
    ]
    for case in cases:
        old, new = replay_instructions(case, checkout), replay_instructions(case, None)
        rows.append(f"| {case.name} | {case.calls} | {old / case.calls:,.0f} | {new / case.calls:,.0f} | {old / new:.2f}x |")
    return "\n".join(rows)


def measure_checkout(cases: list[Case], checkout: Checkout, rounds: int, repeat: int) -> str:
    """Throughput of this code against ``checkout``'s, interleaved rounds of fresh processes."""
    rev = checkout.rev
    rows = [
        f"| replay | tasks | calls | {rev}: calls/s | main: calls/s | main / {rev} | calls judged differently |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for case in cases:
        seconds: dict[str, list[float]] = {"old": [], "new": []}
        judged: dict[str, list[Any]] = {}
        for r in range(rounds):
            for side in ("old", "new") if r % 2 == 0 else ("new", "old"):
                took, judged[side] = run_side(case, repeat, checkout if side == "old" else None)
                seconds[side].append(took)
        old, new = judged["old"], judged["new"]
        calls = sum(len(actions) for _, actions in new)
        differ = abs(sum(len(actions) for _, actions in old) - calls) + sum(
            a != b for (_, xs), (_, ys) in zip(old, new, strict=False) for a, b in zip(xs, ys, strict=False)
        )
        o, n = statistics.median(seconds["old"]), statistics.median(seconds["new"])
        rows.append(f"| {case.name} | {len(new)} | {calls} | {calls / o:,.0f} | {calls / n:,.0f} | {o / n:.2f}x | {differ} |")
    return "\n".join(rows)


def table(cases: list[Case]) -> tuple[str, bool]:
    rows = [
        "| replay | tasks | calls | before: tasks/s | before: calls/s | after: tasks/s | after: calls/s "
        "| ratio | target | met | pool share of after |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|:---:|---:|",
    ]
    ok = True
    for c in cases:
        b, a, p = statistics.median(c.before), statistics.median(c.after), statistics.median(c.pool_off)
        ratio = b / a
        ok &= ratio >= TARGET
        met = "yes" if ratio >= TARGET else "**no**"
        rows.append(
            f"| {c.name} | {c.tasks} | {c.calls} | {c.tasks / b:,.0f} | {c.calls / b:,.0f} | {c.tasks / a:,.0f} | "
            f"{c.calls / a:,.0f} | {ratio:.2f}x | >= {TARGET:.0f}x | {met} | {1 - p / a:.0%} |"
        )
    return "\n".join(rows), ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="one BFCL category, 20 tasks per τ split, 2 rounds")
    parser.add_argument("--only", choices=("bfcl", "tau-airline", "tau-retail"), action="append")
    parser.add_argument("--checkout", metavar="REV", help="also measure against the whole program at REV (e.g. 4c1261e)")
    parser.add_argument("--repeat", type=int, default=3, help="replays per process with --checkout (after one warm-up)")
    parser.add_argument(
        "--instructions", action="store_true", help="with --checkout: also count the instructions of one replay (needs valgrind)"
    )
    args = parser.parse_args(argv)
    categories = ("base",) if args.quick else ("base", "miss_func", "miss_param", "long_context")
    limit = 20 if args.quick else None
    rounds = 2 if args.quick else args.rounds
    only = set(args.only or ("bfcl", "tau-airline", "tau-retail"))
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        cases: list[Case] = []
        sources: Mapping[str, Callable[[], tuple[ReplaySource, tuple[Path, ...]]]] = {
            "bfcl": lambda: (BFCL, tuple(bfcl_inputs(root, categories))),
            "tau-airline": lambda: (tau_replay.AIRLINE, (tau_input(root, "airline_test", limit),)),
            "tau-retail": lambda: (tau_replay.RETAIL, (tau_input(root, "retail_test", limit),)),
        }
        for name, make in sources.items():
            if name in only:
                source, files = make()
                request = ReplayRequest(source=name, files=files, out=root / f"{name}.jsonl")
                cases.append(Case(name=name, source=source, request=request, before=[], after=[], pool_off=[]))
        measure(cases, rounds)
        text, ok = table(cases)
        if args.checkout:
            checkout = Checkout.make(args.checkout, root)
            try:
                versus = measure_checkout(cases, checkout, rounds, args.repeat)
                if args.instructions:
                    versus += "\n\n" + instructions_checkout(cases, checkout)
            finally:
                checkout.remove()
    print(text)
    print(f"\n{rounds} interleaved rounds, medians; before and after judged every call alike.")
    if args.checkout:
        print(
            f"\n{versus}\n\n{rounds} interleaved rounds of fresh processes, {args.repeat} replays each after a warm-up, medians."
        )
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
