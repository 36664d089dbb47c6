"""Provenance (check 6): what indexing who said each value and checking a rule cost, as ratios in one run.

Not part of pytest. Every ratio compares two sides measured interleaved in the same run:

1. a checked call (``episode.check``) of ``send_money`` with a provenance rule on its recipient,
   against the same call with the recipient grounded instead (the information check, its
   nearest peer: a lookup of the value in what was seen), and with no rule at all;
2. the same provenance check over an episode that has seen 10 results and one that has seen
   2,000 (about 10,000 indexed values): a check reads only the argument's forms, so the cost is flat;
3. settling a 50-transaction result (indexing it for grounding, and for provenance when a rule
   exists), with and without a rule: the index costs O(result size) on arrival.

    python benchmarks/bench_provenance.py [--rounds N] [--calls N]
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

import anyio

from prefixmon import Episode, Monitor, Toolset

SEND = {"type": "object", "properties": {"recipient": {"type": "string"}, "amount": {"type": "number"}}}
LIST = {"type": "object", "properties": {"n": {"type": "integer"}}}
FRIEND = "GB29NWBK60161331926819"


def transactions(n: int, start: int = 0) -> list[dict[str, Any]]:
    """``n`` transactions as a bank returns them: ids, IBANs, amounts, dates and a free-text subject."""
    return [
        {
            "id": start + i,
            "sender": f"GB{start + i:020d}",
            "recipient": "me",
            "amount": 10.5 + i,
            "date": f"2024-05-{1 + i % 28:02d}",
            "subject": f"dinner at the place number {i} with friends",
        }
        for i in range(n)
    ] + [{"id": -1, "sender": FRIEND, "recipient": "me", "amount": 12.0, "date": "2024-05-01", "subject": "pizza"}]


def toolset(rule: bool, *, grounded: bool = False) -> Toolset:
    """The two tools; ``send_money``'s recipient with a provenance rule (``rule``) or grounded (``grounded``)."""
    tools = Toolset()
    tools.add_schema("get_transactions", LIST)
    tools.add_schema(
        "send_money",
        SEND,
        provenance={"recipient": ["user", "trusted"]} if rule else None,
        grounded=["recipient"] if grounded else None,
    )
    return tools


async def opened(tools: Toolset, results: int) -> Episode:
    """An episode whose agent has seen ``results`` transaction lists of 5 (the friend's IBAN among them)."""
    ep = Monitor(tools).open_episode()
    ep.user("Please refund my friend for the pizza")
    for r in range(results):
        pending = await ep.begin("get_transactions", {"n": 5})
        pending.done(transactions(5, start=10 * r))
    return ep


def timed(fn: Callable[[], Any], calls: int) -> float:
    """Seconds per call of ``fn`` over ``calls`` calls."""
    gc.disable()
    try:
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        return (time.perf_counter() - t0) / calls
    finally:
        gc.enable()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    async def build() -> tuple[Episode, Episode, Episode, Episode]:
        return (
            await opened(toolset(False), 10),
            await opened(toolset(False, grounded=True), 10),
            await opened(toolset(True), 10),
            await opened(toolset(True), 2000),
        )

    plain, grounded, ruled, big = anyio.run(build)
    assert ruled.state.provenance is not None and plain.state.provenance is None
    call = {"recipient": FRIEND, "amount": 12.0}
    for ep in (plain, grounded, ruled, big):
        assert ep.check("send_money", call).executable
    result = transactions(50)
    sides: dict[str, list[float]] = {
        k: [] for k in ("no rule", "grounded", "rule", "rule, 2,000 results", "settle", "settle, rule")
    }

    async def settle(tools: Toolset) -> float:
        ep = Monitor(tools).open_episode()
        ep.user("refund")
        t = 0.0
        for _ in range(200):
            pending = await ep.begin("get_transactions", {"n": 50})
            t0 = time.perf_counter()
            pending.done(result)
            t += time.perf_counter() - t0
        return t / 200

    for _ in range(args.rounds):
        sides["no rule"].append(timed(lambda: plain.check("send_money", call), args.calls))
        sides["grounded"].append(timed(lambda: grounded.check("send_money", call), args.calls))
        sides["rule"].append(timed(lambda: ruled.check("send_money", call), args.calls))
        sides["rule, 2,000 results"].append(timed(lambda: big.check("send_money", call), args.calls))
        sides["settle"].append(anyio.run(settle, toolset(False)))
        sides["settle, rule"].append(anyio.run(settle, toolset(True)))
    med = {k: statistics.median(v) for k, v in sides.items()}
    rows = [
        ("checked call with a provenance rule / the recipient grounded instead", med["rule"] / med["grounded"], "<= 1.5x"),
        ("checked call with a provenance rule / no rule (the no-rules fast path)", med["rule"] / med["no rule"], "(no target)"),
        ("the same check after 2,000 results / after 10", med["rule, 2,000 results"] / med["rule"], "about 1x (flat)"),
        ("settling a 50-transaction result, rule / no rule", med["settle, rule"] / med["settle"], "(no target: O(result size))"),
    ]
    if args.json:
        print(json.dumps({"medians_us": {k: v * 1e6 for k, v in med.items()}, "ratios": {r[0]: r[1] for r in rows}}, indent=2))
        return
    print(f"medians of {args.rounds} interleaved rounds (µs): " + ", ".join(f"{k} {v * 1e6:.2f}" for k, v in med.items()))
    for name, ratio, target in rows:
        print(f"  {name}: {ratio:.2f}x (target {target})")


if __name__ == "__main__":
    main()
