"""A batch of calls against the same calls one by one (issue 34). Not part of pytest.

Run:  .venv/bin/python benchmarks/bench_batch.py [--rounds 60] [--per 100]

Both sides admit and report the same five calls of one message in a long-lived episode. One
side calls ``episode.begin`` five times, the other ``episode.begin_batch`` once; rounds
alternate between the two, and the result is the median of per-round means (GC on, frozen
after setup). Two messages:

- five different tools (a search that produces a reference, an order that uses one bound
  earlier and has a precondition, three plain writes). Target: a batch of 5 costs at most 5
  single checks plus one single check's worth (ratio <= 1.2);
- two tools called twice each with other arguments (the duplicate check runs on four of the
  five calls): reported, no target.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final

import anyio

from prefixmon import Monitor, PendingCall, ToolCall, Toolset, TrackedState

TARGET: Final = 1.2
"""A batch of five against five single checks: five calls plus one call's worth."""


def build_tools() -> Toolset:
    tools = Toolset()
    tools.add_schema("search", {"type": "object", "properties": {"name": {"type": "string"}}}, produces="item_id")

    def in_stock(state: TrackedState, args: Any) -> bool:
        return bool(args["quantity"] <= 5)

    tools.add_schema(
        "order",
        {"type": "object", "properties": {"item_id": {"type": "string"}, "quantity": {"type": "integer"}}},
        refs={"item_id": "item_id"},
        requires=[in_stock],
    )
    for name in ("note", "tag", "flag"):
        tools.add_schema(name, {"type": "object", "properties": {"text": {"type": "string"}}})
    return tools


DIFFERENT: Final = (
    ToolCall(name="search", args={"name": "lamp"}),
    ToolCall(name="order", args={"item_id": "i-1", "quantity": 2}),
    ToolCall(name="note", args={"text": "a"}),
    ToolCall(name="tag", args={"text": "b"}),
    ToolCall(name="flag", args={"text": "c"}),
)
"""Five calls of five tools."""
REPEATED: Final = (
    ToolCall(name="search", args={"name": "lamp"}),
    ToolCall(name="order", args={"item_id": "i-1", "quantity": 2}),
    ToolCall(name="order", args={"item_id": "i-1", "quantity": 3}),
    ToolCall(name="note", args={"text": "a"}),
    ToolCall(name="note", args={"text": "b"}),
)
"""Five calls, two tools twice with other arguments."""


async def measure(calls: Sequence[ToolCall], rounds: int, per: int) -> tuple[float, float]:
    monitor = Monitor(build_tools(), policy="block")
    async with monitor.episode(task_id="bench") as ep:
        (await ep.begin("search", {"name": "lamp"})).done({"item_id": "i-1"})

        async def singles() -> float:
            t0 = time.perf_counter_ns()
            for _ in range(per):
                for call in calls:
                    pending = await ep.begin(call.name, call.args)
                    pending.done("ok")
            return (time.perf_counter_ns() - t0) / per

        async def batch() -> float:
            t0 = time.perf_counter_ns()
            for _ in range(per):
                for pending in await ep.begin_batch(calls):
                    assert isinstance(pending, PendingCall)
                    pending.done("ok")
            return (time.perf_counter_ns() - t0) / per

        sides: dict[str, Callable[[], Awaitable[float]]] = {"singles": singles, "batch": batch}
        samples: dict[str, list[float]] = {name: [] for name in sides}
        gc.collect()
        gc.freeze()
        for _ in range(rounds):
            for name, side in sides.items():
                samples[name].append(await side())
        ep.finish("success")
    return statistics.median(samples["singles"]), statistics.median(samples["batch"])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=60, help="interleaved rounds")
    parser.add_argument("--per", type=int, default=100, help="messages of five calls per side and round")
    ns = parser.parse_args(argv)
    print(f"prefixmon batch: python {sys.version.split()[0]}")
    met = True
    for label, calls, target in (("five different tools", DIFFERENT, TARGET), ("two tools twice", REPEATED, None)):
        singles, batch = anyio.run(measure, calls, ns.rounds, ns.per)
        ratio = batch / singles
        verdict = "" if target is None else f" (target <= {target}: {'met' if ratio <= target else 'NOT MET'})"
        met = met and (target is None or ratio <= target)
        print(f"{label}: 5 single checks {singles / 1000:.1f} us, a batch of 5 {batch / 1000:.1f} us, ratio {ratio:.3f}{verdict}")
    return 0 if met else 1


if __name__ == "__main__":
    raise SystemExit(main())
