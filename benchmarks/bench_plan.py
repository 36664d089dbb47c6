"""Benchmark of plan verification (issue 9). Not part of pytest.

Run:  .venv/bin/python benchmarks/bench_plan.py [--facts 100000] [--bindings 100000] [--repeat 200]

A 50-step plan is verified over a large tracked state (100,000 facts and 100,000 bound
references by default, plus an information pool of the same size). The plan mixes every
kind of step: searches whose produced ids later steps reference with ``$ref``, actions on
ids bound before the plan, preconditions over facts, effects that change facts (and make a
later precondition true), invalidations, grounded arguments.

The same 50 calls, with the ``$ref`` values filled in, are then checked by the runtime
monitor over the same large state, in the same run:
  - 50 runtime checks as the monitor runs them per call (``Episode.begin`` + ``PendingCall.done``
    with the call's result: judge, policy, acceptance, result tracking, effects, record; the
    tool's own work excluded),
  - 50 bare predicate checks (``Episode.check``), for reference.
Target: verifying the plan costs no more than the 50 runtime checks. Verifying a step does
what the runtime does for a call (judge it, then apply its invalidations and effects), so it
costs more than the bare predicate check alone. Also printed: the same verification over a
1,000-entry state (the cost does not grow with the state). Medians of ``--repeat`` runs.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from collections.abc import Callable
from typing import Annotated, Any

import anyio

from prefixmon import Grounded, Monitor, Ref, Toolset, TrackedState
from prefixmon.plan import Plan, PlanFollower, parse_plan, verify_plan

STEPS = 50


def build_toolset() -> Toolset:
    """An inventory tool layer with references, preconditions, effects and grounding."""
    tools = Toolset()

    @tools.tool(produces="item_id")
    def find_item(name: str) -> list[dict[str, str]]:
        """Find items by name."""
        return [{"item_id": f"found-{name}", "name": name}]

    def unlocked(state: TrackedState, args: Any) -> bool | str:
        """the store is locked; unlock it first"""
        return bool(state.facts.get("store_open"))

    def in_stock(state: TrackedState, args: Any) -> bool | str:
        return state.facts.get(f"stock:{args['item_id']}", 1) > 0 or f"{args['item_id']} is out of stock"

    def mark_reserved(state: TrackedState, args: Any, result: Any) -> None:
        state.facts[f"reserved:{args['item_id']}"] = True

    @tools.tool(requires=[unlocked, in_stock], effects=[mark_reserved])
    def reserve(item_id: Annotated[str, Ref("item_id")], quantity: int = 1) -> dict[str, str]:
        """Reserve an item."""
        return {"reserved": item_id}

    def open_store(state: TrackedState, args: Any, result: Any) -> None:
        state.facts["store_open"] = True

    @tools.tool(effects=[open_store])
    def unlock_store() -> dict[str, bool]:
        """Open the store."""
        return {"open": True}

    @tools.tool(invalidates="item_id")
    def discontinue(item_id: Annotated[str, Ref("item_id")]) -> dict[str, str]:
        """Remove an item from the catalogue."""
        return {"discontinued": item_id}

    @tools.tool
    def pay(account: Annotated[str, Grounded()], amount: Annotated[float, Grounded()]) -> dict[str, str]:
        """Pay an amount from an account."""
        return {"paid": account}

    return tools


def plan_data() -> list[dict[str, Any]]:
    """50 steps; every step is executable (or undetermined where it reads a $ref)."""
    steps: list[dict[str, Any]] = [{"id": "open", "tool": "unlock_store", "args": {}}]
    i = 0
    while len(steps) < STEPS:
        i += 1
        kind = i % 5
        if kind == 0:
            steps.append({"id": f"find{i}", "tool": "find_item", "args": {"name": f"widget {i}"}})
            steps.append({"tool": "reserve", "args": {"item_id": {"$ref": f"find{i}.item_id"}, "quantity": 2}})
        elif kind == 1:
            steps.append({"tool": "reserve", "args": {"item_id": f"i-{i * 997 % 1_000}"}})
        elif kind == 2:
            steps.append({"tool": "pay", "args": {"account": "acct-7", "amount": 19.99}})
        elif kind == 3:
            steps.append({"tool": "discontinue", "args": {"item_id": f"i-{(i * 7919 + 13) % 1_000}"}})
        else:
            steps.append({"tool": "reserve", "args": {"item_id": f"i-{(i * 31) % 1_000}", "quantity": 1}})
    return steps[:STEPS]


def fill_state(state: TrackedState, n_facts: int, n_bindings: int) -> None:
    """A large state: facts, bound ids and an information pool (not timed)."""
    for k in range(n_facts):
        state.facts[f"stock:i-{k}"] = 5 + k % 7
    state.ingest([{"item_id": f"i-{k}", "sku": 10_000_000 + k} for k in range(n_bindings)], produce={"item_id": "item_id"})
    state.inform("Pay 19.99 from account acct-7, then reserve the widgets.")


def median_seconds(fn: Callable[[], object], repeat: int) -> float:
    """Median wall time of ``fn`` over ``repeat`` runs (the garbage collector paused, as for every timing here)."""
    gc.collect()
    gc.disable()
    try:
        times = []
        for _ in range(repeat):
            t = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t)
    finally:
        gc.enable()
    return statistics.median(times)


async def main(n_facts: int, n_bindings: int, repeat: int) -> int:
    tools = build_toolset()
    monitor = Monitor(tools)
    plan: Plan = parse_plan(plan_data())

    # -- concrete calls: run the plan once for real to learn the $ref values -------------
    async with monitor.episode(task_id="bench-setup") as ep:
        fill_state(ep.state, n_facts, n_bindings)
        follower = PlanFollower(plan, tools)
        calls: list[tuple[str, dict[str, Any], Any]] = []
        for step in plan:
            args = follower.concrete_args(step)
            result = await ep.call(step.tool, args)
            follower.match(step.tool, args, ran=True, result=result)
            calls.append((step.tool, args, result))
        assert ep.executable, ep.actions

    # -- plan verification over a small and over the large state -------------------------
    async with monitor.episode(task_id="bench-small") as ep:
        fill_state(ep.state, 1_000, 1_000)
        assert verify_plan(tools, plan, state=ep.state).approved
        small_s = median_seconds(lambda: verify_plan(tools, plan, state=ep.state), repeat)

    async with monitor.episode(task_id="bench-verify") as ep:
        fill_state(ep.state, n_facts, n_bindings)
        verdict = verify_plan(tools, plan, state=ep.state)
        assert verdict.approved, verdict.feedback()
        assert ep.depth == 0 and len(ep.state.facts) == n_facts
        undetermined = len(verdict.undetermined)
        verify_s = median_seconds(lambda: verify_plan(tools, plan, state=ep.state), repeat)

        # 50 predicate checks of the same calls in the same state (Episode.check)
        def predicate_checks() -> None:
            for name, args, _ in calls:
                ep.check(name, args)

        predicate_s = median_seconds(predicate_checks, repeat)

    # 50 runtime checks as the monitor runs them per call, minus the tool's own work:
    # judge and policy (Episode.begin), then acceptance, result tracking, invalidations,
    # effects and the action record (PendingCall.done). Measured on repeated passes in one
    # episode over the large state, after a first pass (later passes find the ids the plan
    # invalidates stale: the same work, other verdicts), so that the amortised growth of the
    # state's big dicts on a first insertion does not land in one timed pass.
    async with monitor.episode(task_id="bench-runtime") as ep:
        fill_state(ep.state, n_facts, n_bindings)
        for name, args, result in calls:
            (await ep.begin(name, args)).done(result)
        assert ep.executable

        runtime_times: list[float] = []
        gc.collect()
        gc.disable()
        try:
            for _ in range(repeat):
                t = time.perf_counter()
                for name, args, result in calls:
                    pending = await ep.begin(name, args)
                    pending.done(result)
                runtime_times.append(time.perf_counter() - t)
        finally:
            gc.enable()
    runtime_s = statistics.median(runtime_times)

    print(f"state: {n_facts:,} facts, {n_bindings:,} bound references; plan: {len(plan)} steps ({undetermined} undetermined)")
    print(f"verify_plan, large state:          {verify_s * 1e6:8.1f} us  ({verify_s / STEPS * 1e6:.2f} us/step)")
    print(f"verify_plan, 1,000-entry state:    {small_s * 1e6:8.1f} us  ({small_s / STEPS * 1e6:.2f} us/step)")
    print(f"50 runtime checks (begin + done):  {runtime_s * 1e6:8.1f} us  ({runtime_s / STEPS * 1e6:.2f} us/call)")
    print(f"50 predicate checks (ep.check):    {predicate_s * 1e6:8.1f} us  ({predicate_s / STEPS * 1e6:.2f} us/check)")
    ratio = verify_s / runtime_s
    print(f"ratio verify / 50 runtime checks:   {ratio:.2f}   (target <= 1)")
    print(f"ratio verify / 50 predicate checks: {verify_s / predicate_s:.2f}   (a step is judged and its effects applied)")
    print(f"ratio large / small state:          {verify_s / small_s:.2f}   (independent of the state's size)")
    ok = ratio <= 1.0
    print("target (verify <= 50 runtime checks):", "met" if ok else "NOT met")
    return 0 if ok else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--facts", type=int, default=100_000)
    parser.add_argument("--bindings", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=200)
    ns = parser.parse_args()
    sys.exit(anyio.run(main, ns.facts, ns.bindings, ns.repeat))
