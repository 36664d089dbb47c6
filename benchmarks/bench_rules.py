"""Rules without a replica: a CEL precondition over an observed object vs the same rule in Python.

Not part of pytest. Every ratio compares two sides measured interleaved in the same run:

1. the checked call (``episode.check``) of a tool whose precondition reads the observed order
   (``order.status == "pending"``), once as a spec-file CEL expression, once as a Python
   precondition reading ``state.objects``;
2. the same CEL check over a state of 10 and of 100,000 observed objects (and as many facts
   and bindings): the activation holds only what the expression reads, so the cost is flat.

    python benchmarks/bench_rules.py [--rounds N] [--calls N]
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import time
from collections.abc import Callable, Mapping
from typing import Any

import anyio

from prefixmon import Monitor, Toolset, Undetermined
from prefixmon.rules.specfile import SCHEMA

ORDER = {"type": "object", "properties": {"order_id": {"type": "string"}, "reason": {"type": "string"}}}
SPEC: dict[str, Any] = {
    "schema": SCHEMA,
    "tools": {
        "get_order_details": {"access": "read", "observes": [{"object": "order", "id": "order_id"}]},
        "cancel_pending_order": {
            "access": "write",
            "let": {"order": "order[args.order_id]"},
            "requires": [{"name": "pending", "expr": 'order.status == "pending"', "message": "not pending"}],
        },
    },
}


def pending_in_python(state: Any, args: Mapping[str, Any]) -> bool | str | Undetermined:
    """The same rule, hand-written: read the observed order, compare its status."""
    seen = state.objects.get("order", args["order_id"])
    if seen is None or not seen.current:
        return Undetermined("the order was not observed")
    return True if seen.fields.get("status") == "pending" else "not pending"


def toolset(cel: bool) -> Toolset:
    """The two tools, the precondition as CEL (spec file) or as Python."""
    tools = Toolset()
    tools.add_schema("get_order_details", ORDER)
    if cel:
        tools.add_schema("cancel_pending_order", ORDER)
        return tools.apply_spec(SPEC)
    tools.add_schema("cancel_pending_order", ORDER, requires=[pending_in_python])
    return tools.apply_spec({"schema": SCHEMA, "tools": {"get_order_details": SPEC["tools"]["get_order_details"]}})


def order(i: int) -> str:
    """An order as the service returns it (JSON text)."""
    return json.dumps(
        {
            "order_id": f"#W{i}",
            "status": "pending" if i % 2 == 0 else "delivered",
            "items": [{"item_id": f"i{i}-{k}", "price": 10.5 + k} for k in range(3)],
            "payment_history": [{"amount": 31.5, "payment_method_id": "gift_card_1"}],
        }
    )


async def prepared(cel: bool, objects: int) -> Any:
    """An open episode that has observed ``objects`` orders (and as many facts and bindings)."""
    monitor = Monitor(toolset(cel))
    ep = monitor.open_episode("bench")
    for i in range(objects):
        pending = await ep.begin("get_order_details", {"order_id": f"#W{i}"})
        pending.done(order(i))
        ep.state.facts[f"f{i}"] = i
        ep.state.bind("order_id", f"#X{i}")
    return ep


def per_call(fn: Callable[[], object], calls: int) -> float:
    """Median seconds per call over ``calls`` calls (GC paused only inside the timed loop)."""
    gc.collect()
    gc.disable()
    try:
        t = time.perf_counter()
        for _ in range(calls):
            fn()
        return (time.perf_counter() - t) / calls
    finally:
        gc.enable()


async def main(rounds: int, calls: int) -> None:
    small_cel, small_py = await prepared(True, 10), await prepared(False, 10)
    large_cel, large_py = await prepared(True, 100_000), await prepared(False, 100_000)
    args = {"order_id": "#W4", "reason": "no longer needed"}
    for ep in (small_cel, small_py, large_cel, large_py):  # the rules decide (no undetermined): the order was observed
        verdict = ep.check("cancel_pending_order", args)
        assert verdict.executable and not verdict.undetermined, verdict
    sides: dict[str, list[float]] = {"cel": [], "python": [], "cel_large": [], "python_large": []}
    for _ in range(rounds):  # interleaved: each round measures every side
        sides["cel"].append(per_call(lambda: small_cel.check("cancel_pending_order", args), calls))
        sides["python"].append(per_call(lambda: small_py.check("cancel_pending_order", args), calls))
        sides["cel_large"].append(per_call(lambda: large_cel.check("cancel_pending_order", args), calls))
        sides["python_large"].append(per_call(lambda: large_py.check("cancel_pending_order", args), calls))
    cel, py, large, py_large = (statistics.median(sides[k]) * 1e6 for k in ("cel", "python", "cel_large", "python_large"))
    print(f"episode.check, precondition over the observed order ({rounds} rounds x {calls} calls, median):")
    print(f"  CEL (spec file):            {cel:7.2f} us")
    print(f"  Python precondition:        {py:7.2f} us")
    print(f"  ratio CEL / Python:         {cel / py:7.2f}x")
    print(f"  CEL over 100,000 objects:   {large:7.2f} us")
    print(f"  ratio 100,000 / 10 objects: {large / cel:7.2f}x   (target <= 1.2x: flat in the state's size)")
    print(f"  same for the Python rule:   {py_large / py:7.2f}x   (what a larger heap alone costs)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--calls", type=int, default=2_000)
    options = parser.parse_args()
    anyio.run(main, options.rounds, options.calls)
