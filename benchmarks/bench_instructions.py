"""Instructions per episode and per call, counted by valgrind (issue 17's ratios without the noise). Not part of pytest.

Run:  .venv/bin/python benchmarks/bench_instructions.py [--markdown FILE] [--jobs 2]
      (needs valgrind: ``apt-get install valgrind``; about 6 minutes)

Wall-clock ratios on a shared 2-core machine move by tens of percent between runs (see
docs/performance.md). The instructions a piece of code executes do not: each side below runs
in its own process under ``valgrind --tool=cachegrind``: after a warm-up, two children
forked from the warm process run ``N`` and ``3N`` units, and the difference of their counts
divided by ``2N`` is the instructions of one unit (everything the process executes counts:
the garbage collector, the OpenTelemetry SDK, its export thread). Two runs of this file give
the same counts to within 1% (a process of its own per count, as before 2026-12-06, moved
them by up to 24%: the import's count is not repeatable, see ``_run_side``). Instructions
are not time: code that misses the caches runs slower per instruction, which is what the
cold-call row of bench_hot_path.py measures. The ratios here are the work each
configuration adds, the wall-clock ratios what it costs on this machine.
Under valgrind a process runs about 50 times slower, so ``Telemetry()`` without an SDK asks
the API for one (every 0.1 s) about 50 times as often per episode as it does at full speed:
its rows are an upper bound.

Compare two versions of the code by running this file with each one's interpreter (the
sides run with ``sys.executable``, whatever ``prefixmon`` it imports).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import traceback
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Final

HERE: Final = os.path.dirname(os.path.abspath(__file__))
LABELS: Final = {"dataset": "d", "model": "m", "method": "react"}
SIDES: Final[dict[str, tuple[str, int]]] = {
    # name: (what one unit is, N)
    "episode x5, no telemetry": ("a 5-call episode", 1000),
    "episode x5, Telemetry() without an SDK": ("a 5-call episode", 1000),
    "episode x5, Telemetry() sampled out": ("a 5-call episode", 1000),
    "episode x5, Telemetry(trace_ratio=0), left out": ("a 5-call episode", 1000),
    "empty episode": ("an episode", 2000),
    "call": ("a call in a long episode", 5000),
    "call, an observer in every per-call hook doing nothing": ("a call in a long episode", 5000),
    "SDK sampled-out episode span (start and end)": ("a span", 5000),
    "bare execute_tool span, SDK on": ("a span", 2000),
    "call inside the cheapest span, SDK on (floor)": ("a call", 2000),
    "call, Telemetry with the SDK on": ("a call", 2000),
    "indexing a τ-retail result (information pool)": ("a result", 300),
    "pydantic TypeAdapter validation of ping's arguments": ("a validation", 5000),
    "bare await of the tool": ("an await", 5000),
    "5 bare awaits of the tool": ("five awaits", 1000),
    "report: a record line read into columns": ("a line", 10_000),
    "report: a record line read and decoded, nothing else": ("a line", 10_000),
}


# -- the sides (run inside valgrind) ----------------------------------------------------------
def _side(name: str) -> Callable[[int], Awaitable[None]]:
    """The coroutine function running ``n`` units of side ``name``."""
    sys.path.insert(0, HERE)
    import bench_hot_path as hot
    from opentelemetry import context as otel_context
    from opentelemetry import trace
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.sdk.trace.sampling import ALWAYS_OFF
    from opentelemetry.trace import SpanKind

    from prefixmon import Monitor, Observer, Telemetry, TrackedState
    from prefixmon import semconv as sc

    tools = hot.build_tools()
    sampled_out = TracerProvider(sampler=ALWAYS_OFF)
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(hot.DropExporter(), max_queue_size=1 << 16))
    meters = MeterProvider(metric_readers=[InMemoryMetricReader()])
    tracer = provider.get_tracer("bench")
    order = tools["order"].func
    assert order is not None

    class Idle(Observer):
        """Takes part in every per-call hook and does nothing: the dispatch's own cost."""

        def call_started(self, episode: Any, tool: str, call_id: str | None, depth: int) -> int:
            return 1

        def call_checked(self, episode: Any, verdict: Any, decision: Any, token: Any) -> None:
            pass

        def execution_context(self, episode: Any, call: Any, token: Any) -> None:
            return None

        def call_finished(self, episode: Any, action: Any, verdict: Any, token: Any) -> None:
            pass

    def episodes(monitor: Monitor, calls: int) -> Callable[[int], Awaitable[None]]:
        async def run(n: int) -> None:  # bench_hot_path's own episodes (its clock reads are two per chunk)
            await hot.episode_side(monitor, calls, n, LABELS)()

        return run

    def calls(monitor: Monitor) -> Callable[[int], Awaitable[None]]:
        async def run(n: int) -> None:
            await hot.call_side(monitor, n)()

        return run

    def orders(monitor: Monitor) -> Callable[[int], Awaitable[None]]:
        async def run(n: int) -> None:
            async with monitor.episode(task_id="t") as ep:
                await hot.prime(ep)
                for _ in range(n):
                    await ep.call("order", hot.ORDER_ARGS)

        return run

    async def sampled_out_spans(n: int) -> None:
        dropped = sampled_out.get_tracer("bench")
        for _ in range(n):
            dropped.start_span(sc.INVOKE_AGENT, attributes=hot.START_ATTRS).end()

    async def bare_spans(n: int) -> None:
        with tracer.start_as_current_span(sc.INVOKE_AGENT, kind=SpanKind.INTERNAL):
            for depth in range(n):
                attrs = {**hot.START_ATTRS, sc.PREFIXMON_DEPTH: depth}
                with tracer.start_as_current_span(f"{sc.EXECUTE_TOOL} order", kind=SpanKind.INTERNAL, attributes=attrs) as span:
                    await order(**hot.ORDER_ARGS)
                    span.set_attributes(hot.END_ATTRS)

    checks_only = Monitor(tools, policy="block")

    async def floor(n: int) -> None:
        with tracer.start_as_current_span(sc.INVOKE_AGENT, kind=SpanKind.INTERNAL):
            async with checks_only.episode(task_id="floor") as ep:
                await hot.prime(ep)
                for depth in range(n):
                    attrs = {**hot.START_ATTRS, sc.PREFIXMON_DEPTH: depth, **hot.END_ATTRS}
                    span = tracer.start_span(f"{sc.EXECUTE_TOOL} order", kind=SpanKind.INTERNAL, attributes=attrs)
                    token = otel_context.attach(trace.set_span_in_context(span))
                    await ep.call("order", hot.ORDER_ARGS)
                    otel_context.detach(token)
                    span.end()

    results: list[Any] = []

    async def pool(n: int) -> None:  # the results of τ-retail's gold runs in turn, a tracked state per run
        if not results:  # read in the warm-up
            with open(os.environ[POOL_RESULTS], encoding="utf-8") as f:
                results.extend(json.load(f))
        state, current = TrackedState(), -1
        for i in range(n):
            run, tool, produce, content = results[i % len(results)]
            if run != current:
                state, current = TrackedState(), run
            state.ingest(content, produce=produce, tool=tool)

    reference = hot.ping_reference()
    ping = tools["ping"].func
    assert ping is not None

    async def validations(n: int) -> None:  # as bench_hot_path's section 6 validates
        validate, args = reference.validate_python, {"n": 7}
        for _ in range(n):
            validate(args)

    def awaits(calls: int) -> Callable[[int], Awaitable[None]]:
        async def run(n: int) -> None:  # bench_hot_path's bare_side, without its clock reads
            for _ in range(n):
                for i in range(calls):
                    await ping(n=i)

        return run

    offsets: list[int] = []

    def reading(columns: bool) -> Callable[[int], Awaitable[None]]:
        """The first ``n`` lines of bench_report's records, read as one of ``report``'s reading
        processes reads its byte range: into columns, or only decoded (the typed decode that
        makes ``report`` agree with ``--validate``)."""
        from prefixmon.analytics import _parallel, inputs
        from prefixmon.analytics.columns import ColumnBuilder

        async def run(n: int) -> None:
            path = os.environ[RECORDS]
            if not offsets:  # in the warm-up: the whole file's line ends, the same work at N and 3N
                with open(path, "rb") as f:
                    offsets.extend(itertools.accumulate(len(line) for line in f))
            lines = _parallel._lines(path, 0, offsets[n - 1], lambda: None)
            if columns:
                builder = ColumnBuilder(texts=lambda: ((), (), ()))
                inputs._read_records(lines, path, "raise", [], [], builder)
                builder.build()
            else:
                decode = inputs._fast_decoder()
                assert decode is not None
                for line in lines:
                    decode(line)

        return run

    sides: dict[str, Callable[[int], Awaitable[None]]] = {
        "episode x5, no telemetry": episodes(Monitor(tools, policy="block"), 5),
        "episode x5, Telemetry() without an SDK": episodes(Monitor(tools, policy="block", observers=[Telemetry()]), 5),
        "episode x5, Telemetry() sampled out": episodes(
            Monitor(tools, policy="block", observers=[Telemetry(tracer_provider=sampled_out, metrics=False)]), 5
        ),
        "episode x5, Telemetry(trace_ratio=0), left out": episodes(
            Monitor(tools, policy="block", observers=[Telemetry(tracer_provider=provider, metrics=False, trace_ratio=0.0)]), 5
        ),
        "empty episode": episodes(Monitor(tools, policy="block"), 0),
        "call": calls(Monitor(tools, policy="block")),
        "call, an observer in every per-call hook doing nothing": calls(Monitor(tools, policy="block", observers=[Idle()])),
        "SDK sampled-out episode span (start and end)": sampled_out_spans,
        "bare execute_tool span, SDK on": bare_spans,
        "call inside the cheapest span, SDK on (floor)": floor,
        "call, Telemetry with the SDK on": orders(
            Monitor(tools, policy="block", observers=[Telemetry(tracer_provider=provider, meter_provider=meters)])
        ),
        "indexing a τ-retail result (information pool)": pool,
        "pydantic TypeAdapter validation of ping's arguments": validations,
        "bare await of the tool": awaits(1),
        "5 bare awaits of the tool": awaits(5),
        "report: a record line read into columns": reading(columns=True),
        "report: a record line read and decoded, nothing else": reading(columns=False),
    }
    return sides[name]


def _run_side(name: str, n: int) -> None:
    """Warm up, then run ``n`` and ``3n`` units each in a child forked from the warm process.

    Both children start from the same state, so their counts (valgrind counts a forked child
    from its parent's total) differ by the 2n units (and by what the SDK's export thread of
    the parent does meanwhile, well under 0.1%), whereas importing the package is not
    repeatable to the instruction (pydantic-core and jsonschema-rs seed their hash maps at
    random): by tens of millions of instructions a process, as much as 2n units of some sides.
    Each child prints ``unit-run PID COUNT`` for the driver; a child that fails prints its
    traceback, and the process exits non-zero.
    """
    run = _side(name)

    async def units(count: int) -> None:
        await run(count)

    asyncio.run(units(200))  # warm-up: caches filled, lazy imports done
    fork_runs(lambda count: asyncio.run(units(count)), (n, 3 * n), repr(name))


def fork_runs(run: Callable[[int], object], counts: tuple[int, ...], what: str) -> None:
    """``run(count)`` for each count in a child forked from this warm process, one after the other.

    Each child prints ``unit-run PID COUNT`` (what :func:`per_forked_unit` reads) and leaves
    without the parent's exit handlers; a child that fails prints its traceback, and this
    process then exits non-zero. (bench_replay.py's processes use it too.)
    """
    for count in counts:
        sys.stdout.flush()
        pid = os.fork()
        if pid == 0:
            status = 0
            try:
                run(count)
                print(f"unit-run {os.getpid()} {count}", flush=True)
            except BaseException:
                traceback.print_exc()
                sys.stderr.flush()
                status = 1
            os._exit(status)
        if os.waitpid(pid, 0)[1]:
            raise SystemExit(f"the child running {count} units of {what} failed")


# -- the driver ---------------------------------------------------------------------------------
POOL_RESULTS: Final = "BENCH_INSTRUCTIONS_POOL_RESULTS"
"""Where the driver wrote the results the information-pool side indexes (the sides read the same file)."""
VALGRIND: Final = ("valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null")
"""The command prefix that counts a process's instructions (no cache simulation, no output file)."""
RECORDS: Final = "BENCH_INSTRUCTIONS_RECORDS"
"""Where the driver wrote the record lines the report sides read (bench_report's records: 48 cohorts)."""


def write_retail_results(path: str) -> None:
    """τ-retail's gold runs' tool results, each with what its tool's spec produces, as JSON rows."""
    from prefixmon.adapters.taubench.replay import gold_rollouts
    from prefixmon.adapters.taubench.toolsets import toolset

    tools = toolset("retail")
    rows = []
    for run, rollout in enumerate(gold_rollouts("retail_test")):
        for message in rollout["traj"]:
            if message.get("role") == "tool":
                spec = tools.get(message["name"])
                produce = dict(spec.produce_map) if spec is not None and spec.produces else None
                rows.append((run, message["name"], produce, message["content"]))
    with open(path, "w", encoding="utf-8") as f:
        json.dump(rows, f)


def per_unit(name: str) -> float:
    """Instructions of one unit of ``name``: (count of the 3N child - count of the N child) / 2N."""
    _, n = SIDES[name]
    done = subprocess.run(
        [*VALGRIND, sys.executable, os.path.abspath(__file__), "--side", name, "--n", str(n)],
        capture_output=True,
        text=True,
        check=False,
    )
    return per_forked_unit(done, n, name)


def per_forked_unit(done: subprocess.CompletedProcess[str], n: int, what: str) -> float:
    """Instructions of one unit from a valgrind process whose forked children ran ``n`` and
    ``3n`` units and printed ``unit-run PID COUNT`` (see :func:`_run_side`)."""
    if done.returncode:
        raise RuntimeError(f"{what}: the valgrind process exited {done.returncode}:\n{done.stderr[-3000:]}")
    units = {int(pid): int(count) for pid, count in re.findall(r"^unit-run (\d+) (\d+)$", done.stdout, re.MULTILINE)}
    counts = {int(pid): int(refs.replace(",", "")) for pid, refs in re.findall(r"==(\d+)== I\s+refs:\s+([\d,]+)", done.stderr)}
    by_units = {units[pid]: refs for pid, refs in counts.items() if pid in units}
    if set(by_units) != {n, 3 * n}:
        raise RuntimeError(f"no instruction count from valgrind for both runs of {what!r}:\n{done.stderr[-2000:]}")
    return (by_units[3 * n] - by_units[n]) / (2 * n)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--side", help=argparse.SUPPRESS)
    parser.add_argument("--n", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--markdown", help="also write the table to this file")
    parser.add_argument("--jobs", type=int, default=2, help="valgrind processes at once (default 2)")
    args = parser.parse_args()
    if args.side is not None:
        _run_side(args.side, args.n)
        return 0
    if shutil.which("valgrind") is None:
        print("bench_instructions.py needs valgrind (apt-get install valgrind)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        os.environ[POOL_RESULTS] = os.path.join(tmp, "retail-results.json")
        write_retail_results(os.environ[POOL_RESULTS])
        os.environ[RECORDS] = os.path.join(tmp, "records.jsonl")
        sys.path.insert(0, HERE)
        from bench_analytics import write_million

        write_million(os.environ[RECORDS], 30_000)  # 3N lines: the children read from the first line too
        with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            ir = dict(zip(SIDES, pool.map(per_unit, SIDES), strict=True))
    e5, call, idle = ir["episode x5, no telemetry"], ir["call"], ir["call, an observer in every per-call hook doing nothing"]
    bare, floor, monitor = (
        ir["bare execute_tool span, SDK on"],
        ir["call inside the cheapest span, SDK on (floor)"],
        ir["call, Telemetry with the SDK on"],
    )
    validation = ir["pydantic TypeAdapter validation of ping's arguments"]
    call_overhead = call - ir["bare await of the tool"]
    episode_overhead = e5 - ir["5 bare awaits of the tool"]
    rows = [
        ("checked call overhead / pydantic TypeAdapter validation of the same arguments (target <= 6x)",
         f"{call_overhead:,.0f} / {validation:,.0f}", f"{call_overhead / validation:.2f}x"),
        ("5-call episode overhead (open, calls, finish, close) / that validation (target <= 45x)",
         f"{episode_overhead:,.0f}", f"{episode_overhead / validation:.1f}x"),
        ("5-call episode, no telemetry", f"{e5:,.0f}", ""),
        ("  Telemetry() without an SDK / no telemetry", f"{ir['episode x5, Telemetry() without an SDK']:,.0f}",
         f"{ir['episode x5, Telemetry() without an SDK'] / e5:.3f}x"),
        ("  Telemetry() sampled out / no telemetry", f"{ir['episode x5, Telemetry() sampled out']:,.0f}",
         f"{ir['episode x5, Telemetry() sampled out'] / e5:.3f}x"),
        ("    floor: the SDK's sampled-out span alone / a 5-call episode",
         f"{ir['SDK sampled-out episode span (start and end)']:,.0f}",
         f"{1 + ir['SDK sampled-out episode span (start and end)'] / e5:.3f}x"),
        ("  Telemetry(trace_ratio=0), left out before the SDK is asked / no telemetry",
         f"{ir['episode x5, Telemetry(trace_ratio=0), left out']:,.0f}",
         f"{ir['episode x5, Telemetry(trace_ratio=0), left out'] / e5:.3f}x"),
        ("empty episode, in calls", f"{ir['empty episode']:,.0f}", f"{ir['empty episode'] / call:.2f} calls"),
        ("open + close of a 5-call episode, in calls", "", f"{(e5 - 5 * call) / call:.2f} calls"),
        ("checked call (zero-rule ping, tool included)", f"{call:,.0f}", ""),
        ("  with an observer in every per-call hook doing nothing / without", f"{idle:,.0f}", f"{idle / call:.2f}x"),
        ("SDK on: bare execute_tool span (export thread included)", f"{bare:,.0f}", ""),
        ("  floor: checks inside the cheapest span / bare span", f"{floor:,.0f}", f"{floor / bare:.2f}x"),
        ("  monitor with Telemetry / bare span", f"{monitor:,.0f}", f"{monitor / bare:.2f}x"),
        ("indexing a τ-retail gold-run result into the information pool, in checked calls",
         f"{ir['indexing a τ-retail result (information pool)']:,.0f}",
         f"{ir['indexing a τ-retail result (information pool)'] / call:.1f} calls"),
        ("report: a record line read into columns, as a reading process reads its range",
         f"{ir['report: a record line read into columns']:,.0f}", ""),
        ("  of which reading and decoding it (msgspec's typed decode, what agreeing with --validate takes)",
         f"{ir['report: a record line read and decoded, nothing else']:,.0f}",
         f"{ir['report: a record line read and decoded, nothing else'] / ir['report: a record line read into columns']:.0%}"),
    ]  # fmt: skip
    lines = ["| what | instructions per unit | ratio |", "|---|---:|---:|"]
    lines += [f"| {what} | {count} | {ratio} |" for what, count, ratio in rows]
    table = "\n".join(lines)
    print(table)
    if args.markdown:
        with open(args.markdown, "w", encoding="utf-8") as f:
            f.write(table + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
