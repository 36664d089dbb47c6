"""Order rules cost O(1) per call, whatever the episode's history (issue 34). Not part of pytest.

Run:  .venv/bin/python benchmarks/bench_order.py [--rounds 40] [--per 200] [--history 100000]

One episode per side, a write ruled by ``after=get_order, same="order_id"``, ``at_most`` and
``not_after``; the "long" side's episode first ran ``--history`` reads of distinct orders (so
the order log holds that many values), the "short" side's ten. Both then admit and report the
same write of an order read early on; rounds alternate between the sides, and the result is
the median of per-round means. A third side, the same write without rules, says what the
rules cost at all. Target: long / short <= 1.2 (a check reads a dict and a set, never the history).
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from typing import Final

import anyio

from prefixmon import Episode, Monitor, Toolset

TARGET: Final = 1.2
ORDER: Final = {"type": "object", "properties": {"order_id": {"type": "string"}}}


def build_tools(rules: bool) -> Toolset:
    tools = Toolset()
    tools.add_schema("get_order", ORDER, metadata={"read_only": True})
    tools.add_schema("modify_order", ORDER)
    tools.add_schema("transfer_to_human", {"type": "object", "properties": {}})
    if rules:
        tools.order("modify_order", after="get_order", same="order_id", at_most=10**9, not_after="transfer_to_human")
    return tools


async def _per_call(ep: Episode, per: int) -> float:
    t0 = time.perf_counter_ns()
    for _ in range(per):
        pending = await ep.begin("modify_order", {"order_id": "W5"})
        pending.done("ok")
    return (time.perf_counter_ns() - t0) / per / 1000


async def main(rounds: int, per: int, history: int) -> int:
    sides: dict[str, Episode] = {}
    async with (
        Monitor(build_tools(True)).episode(task_id="short") as short,
        Monitor(build_tools(True)).episode(task_id="long") as long,
        Monitor(build_tools(False)).episode(task_id="plain") as plain,
    ):
        for ep, n in ((short, 10), (long, history), (plain, 10)):
            for i in range(n):
                (await ep.begin("get_order", {"order_id": f"W{i}"})).done("{}")
        sides = {"short": short, "long": long, "plain": plain}
        gc.collect()
        gc.freeze()
        times: dict[str, list[float]] = {name: [] for name in sides}
        for _ in range(rounds):
            for name, ep in sides.items():
                times[name].append(await _per_call(ep, per))
    short_us, long_us, plain_us = (statistics.median(times[n]) for n in ("short", "long", "plain"))
    ratio = long_us / short_us
    print(f"prefixmon order rules: python {sys.version.split()[0]}")
    print(
        f"a ruled write after 10 reads {short_us:.2f} us, after {history:,} reads {long_us:.2f} us: ratio {ratio:.3f} "
        f"(target <= {TARGET}: {'met' if ratio <= TARGET else 'NOT met'}); without rules {plain_us:.2f} us"
    )
    return 0 if ratio <= TARGET else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--per", type=int, default=200)
    parser.add_argument("--history", type=int, default=100_000)
    args = parser.parse_args()
    sys.exit(anyio.run(main, args.rounds, args.per, args.history))
