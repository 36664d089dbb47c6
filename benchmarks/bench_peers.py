"""prefixmon against its peers on the same two rules (issue 36). Not part of pytest.

Run (the peers are optional and never dependencies of prefixmon: install them in a venv of
their own, from the repository root):

    python -m venv /tmp/peers
    /tmp/peers/bin/pip install . "agent-governance-toolkit[core]==4.1.0" edictum==0.19.0
    /tmp/peers/bin/python benchmarks/bench_peers.py --rounds 3

(``agent-governance-toolkit`` alone installs only its compliance CLI; the policy evaluator,
``agent_os.policies.PolicyEvaluator``, comes with the ``core`` extra.) Without the peers, in
prefixmon's own venv, the benchmark says which are missing and how to install them, and still
measures prefixmon against the hand-written floor:

    .venv/bin/python benchmarks/bench_peers.py [--rounds 15] [--n 2000]

The rules, the same for every contestant:

1. schema: ``get_order(order_id: str)`` and ``refund(order_id: str, amount: number)``; the
   arguments must be exactly these, of these types (a JSON number: int or float; prefixmon's
   tools are declared ``strict=True`` so that ``"5"`` is not coerced), and the tool must exist;
2. stateful: a refund must not exceed the ``total`` of the order that an earlier ``get_order``
   returned for that ``order_id``; an order no result has shown is refused.

The contestants:

- prefixmon: a ``Toolset`` with an effect on ``get_order`` (``state.facts``, the total under
  ``total:<order_id>``) and a precondition on ``refund`` reading it; ``Monitor(policy="block")``.
- floor: the rules hand-written in Python over a dict the host keeps per episode; a refused
  call returns a sentinel (no exception), an allowed one awaits the tool.
- agent-governance-toolkit: ``agent_os.policies.PolicyEvaluator`` over a ``PolicyDocument``.
  Its conditions compare one context field with a constant (no argument schema, no
  comparison of two fields, no state), so the host projects each call into a flat context
  (``tool_name``, ``args_valid`` from the floor's schema check, ``order_known`` and
  ``refund_excess = amount - total`` from host-held totals) and the evaluator's rules
  (``tool_name not_in``, ``args_valid eq False``, ``order_known eq False``,
  ``refund_excess gt 0``, default allow) make the decision.
- edictum: ``edictum.Edictum`` with Python ``@precondition`` contracts (an unknown-tool
  check on ``*``, a schema check per tool, the refund limit) and a ``@postcondition`` on
  ``get_order`` that writes the total into host-held state (edictum's own session store
  keeps counters and strings only, and its preconditions do not see it). A decision is
  ``guard.evaluate(...)`` (its dry run), a guarded call ``await guard.run(...)``.

What is measured, per contestant (microseconds, mean of a chunk of ``--n`` iterations, median
over ``--rounds`` interleaved rounds; every round runs every contestant once per measurement,
the order rotating from round to round; ratios are to prefixmon within this run):

- per decision: a refund judged without running it (prefixmon ``episode.check``), allowed
  (order seen, amount within the total) and refused (amount above the total);
- per guarded call: an allowed refund judged and run, minus a bare ``await refund(**args)``
  timed in the same round; and a refused refund, whole (nothing runs; prefixmon raises
  ``ToolBlocked`` and edictum ``EdictumDenied``, caught by the loop; the floor and the
  evaluator's host return a sentinel);
- per 10-call episode: open (prefixmon ``monitor.episode``; the peers' session/state objects),
  three ``get_order`` and seven ``refund`` calls, four of them refused, close (prefixmon builds
  the episode's record); chunks of ``max(1, n // 10)`` episodes.

Before timing, every contestant plays the scripted episode once, both as decisions and as
guarded calls; their allowed/refused sequences must equal the expected one (asserted, and
printed). GC: collected before each timed chunk and disabled inside it (a collection pause
lands on nobody); setup (building the monitor, evaluator and guard, opening the episode a
decision is judged in) is outside the timed loop. A fresh ``Edictum`` is built each round,
outside timing: its in-memory audit ring holds 50,000 events, past which every emit copies the
ring, and the chunks stay below that.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import importlib.metadata
import statistics
import sys
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import anyio

from prefixmon import Episode, Monitor, ToolBlocked, Toolset, TrackedState

ORDERS: Final[dict[str, dict[str, Any]]] = {
    "o1": {"order_id": "o1", "total": 40.0, "status": "delivered"},
    "o2": {"order_id": "o2", "total": 15.0, "status": "delivered"},
    "o3": {"order_id": "o3", "total": 8, "status": "delivered"},
}
TOOL_NAMES: Final = ("get_order", "refund")

SCRIPT: Final[tuple[tuple[str, dict[str, Any]], ...]] = (
    ("get_order", {"order_id": "o1"}),
    ("get_order", {"order_id": "o2"}),
    ("refund", {"order_id": "o1", "amount": 25.0}),  # within 40.0
    ("refund", {"order_id": "o2", "amount": 20.0}),  # above 15.0
    ("refund", {"order_id": "o3", "amount": 5.0}),  # o3 not seen yet
    ("refund", {"order_id": "o1"}),  # schema: amount missing
    ("get_order", {"order_id": "o3"}),
    ("refund", {"order_id": "o3", "amount": 8}),  # equal to the total (an int)
    ("refund", {"order_id": "o2", "amount": "lots"}),  # schema: not a number
    ("refund", {"order_id": "o2", "amount": 15.0}),  # equal to the total
)
EXPECTED: Final = (True, True, True, False, False, False, True, True, False, True)

PRIME: Final = ("get_order", {"order_id": "o1"})
ALLOWED: Final = ("refund", {"order_id": "o1", "amount": 25.0})
REFUSED: Final = ("refund", {"order_id": "o1", "amount": 99.0})

PEERS: Final = {
    "agent-governance-toolkit": ("agent_os.policies", '"agent-governance-toolkit[core]==4.1.0"'),
    "edictum": ("edictum", "edictum==0.19.0"),
}


# -- the tools (what a guarded call runs) ------------------------------------------------------
async def get_order(order_id: str) -> dict[str, Any]:
    """The order, with its total."""
    return ORDERS[order_id]


async def refund(order_id: str, amount: float) -> dict[str, Any]:
    """Refund part of an order."""
    return {"order_id": order_id, "refunded": amount}


TOOLS: Final[dict[str, Callable[..., Awaitable[dict[str, Any]]]]] = {"get_order": get_order, "refund": refund}


class Refused:
    """What the floor and the evaluator's host return for a refused call."""


REFUSED_CALL: Final = Refused()


# -- the rules, hand-written (the floor; the peers' hosts reuse the schema check) -------------
def args_valid(name: str, args: Mapping[str, Any]) -> bool:
    """Rule 1: the tool exists and its arguments are exactly the declared ones, typed."""
    if name == "refund":
        return len(args) == 2 and type(args.get("order_id")) is str and type(args.get("amount")) in (int, float)
    if name == "get_order":
        return len(args) == 1 and type(args.get("order_id")) is str
    return False


def floor_decide(totals: dict[str, float], name: str, args: Mapping[str, Any]) -> bool:
    """Both rules over the host's ``{order_id: total}``."""
    if not args_valid(name, args):
        return False
    if name == "refund":
        total = totals.get(args["order_id"])
        return total is not None and args["amount"] <= total
    return True


# -- prefixmon ---------------------------------------------------------------------------------
def remember_total(state: TrackedState, args: Any, result: Any) -> None:
    """Effect of get_order: the order's total, for the refund rule."""
    state.facts["total:" + args["order_id"]] = result["total"]


def within_total(state: TrackedState, args: Any) -> bool | str:
    """Rule 2: the refund is at most the total get_order returned for the order."""
    total = state.facts.get("total:" + args["order_id"])
    if total is None:
        return f"order {args['order_id']} was not returned by get_order; call get_order first"
    return args["amount"] <= total or f"the refund exceeds the order's total of {total}"


def build_monitor() -> Monitor:
    tools = Toolset()
    tools.tool(effects=[remember_total], strict=True)(get_order)
    tools.tool(requires=[within_total], strict=True)(refund)
    return Monitor(tools, policy="block")


# -- contestants -------------------------------------------------------------------------------
Decide = Callable[[str, dict[str, Any]], bool]


@dataclass
class Contestant:
    """One way of enforcing the rules: each hook runs a chunk of n iterations, returns its ns."""

    name: str
    how: str
    decisions: Callable[[tuple[str, dict[str, Any]], int], Awaitable[int]]
    guarded: Callable[[tuple[str, dict[str, Any]], int], Awaitable[int]]
    episodes: Callable[[int], Awaitable[int]]
    play: Callable[[], Awaitable[tuple[list[bool], list[bool]]]]
    """The script once: (decisions without running, outcomes of guarded calls)."""
    new_round: Callable[[], None] = field(default=lambda: None)


def timed_start() -> int:
    gc.collect()
    gc.disable()
    return time.perf_counter_ns()


def timed_end(t0: int) -> int:
    elapsed = time.perf_counter_ns() - t0
    gc.enable()
    return elapsed


def prefixmon_contestant() -> Contestant:
    monitor = build_monitor()

    async def decisions(call: tuple[str, dict[str, Any]], n: int) -> int:
        name, args = call
        async with monitor.episode(task_id="decide") as ep:
            await ep.call(*PRIME)
            check = ep.check
            t0 = timed_start()
            for _ in range(n):
                check(name, args)
            return timed_end(t0)

    async def guarded(guarded_call: tuple[str, dict[str, Any]], n: int) -> int:
        name, args = guarded_call
        async with monitor.episode(task_id="guarded") as ep:
            await ep.call(*PRIME)
            call = ep.call
            t0 = timed_start()
            for _ in range(n):
                try:  # noqa: SIM105 (contextlib.suppress costs a context manager per call)
                    await call(name, args)
                except ToolBlocked:
                    pass
            return timed_end(t0)

    async def one_episode() -> None:
        async with monitor.episode(task_id="refunds") as ep:
            for name, args in SCRIPT:
                try:  # noqa: SIM105 (contextlib.suppress costs a context manager per call)
                    await ep.call(name, args)
                except ToolBlocked:
                    pass

    async def episodes(n: int) -> int:
        t0 = timed_start()
        for _ in range(n):
            await one_episode()
        return timed_end(t0)

    async def play() -> tuple[list[bool], list[bool]]:
        decided: list[bool] = []
        outcomes: list[bool] = []
        async with monitor.episode(task_id="agreement") as ep:
            for name, args in SCRIPT:
                decided.append(check_ok(ep, name, args))
                try:
                    await ep.call(name, args)
                    outcomes.append(True)
                except ToolBlocked:
                    outcomes.append(False)
        return decided, outcomes

    how = "Toolset: effect on get_order writes state.facts; precondition on refund reads it"
    return Contestant("prefixmon", how, decisions, guarded, episodes, play)


def check_ok(ep: Episode, name: str, args: dict[str, Any]) -> bool:
    return ep.check(name, args).executable


def host_contestant(name: str, how: str, decide_for: Callable[[dict[str, float]], Decide]) -> Contestant:
    """A contestant whose host holds the totals and runs the tool when ``decide`` allows it."""

    def guard_for(totals: dict[str, float]) -> Callable[[str, dict[str, Any]], Awaitable[object]]:
        decide = decide_for(totals)

        async def call(tool: str, args: dict[str, Any]) -> object:
            if not decide(tool, args):
                return REFUSED_CALL
            result = await TOOLS[tool](**args)
            if tool == "get_order":
                totals[args["order_id"]] = result["total"]
            return result

        return call

    async def decisions(call: tuple[str, dict[str, Any]], n: int) -> int:
        tool, args = call
        totals: dict[str, float] = {}
        await guard_for(totals)(*PRIME)
        decide = decide_for(totals)
        t0 = timed_start()
        for _ in range(n):
            decide(tool, args)
        return timed_end(t0)

    async def guarded(guarded_call: tuple[str, dict[str, Any]], n: int) -> int:
        tool, args = guarded_call
        call = guard_for({})
        await call(*PRIME)
        t0 = timed_start()
        for _ in range(n):
            await call(tool, args)
        return timed_end(t0)

    async def episodes(n: int) -> int:
        t0 = timed_start()
        for _ in range(n):
            call = guard_for({})
            for tool, args in SCRIPT:
                await call(tool, args)
        return timed_end(t0)

    async def play() -> tuple[list[bool], list[bool]]:
        totals: dict[str, float] = {}
        call = guard_for(totals)
        decide = decide_for(totals)
        decided: list[bool] = []
        outcomes: list[bool] = []
        for tool, args in SCRIPT:
            decided.append(decide(tool, args))
            outcomes.append(await call(tool, args) is not REFUSED_CALL)
        return decided, outcomes

    return Contestant(name, how, decisions, guarded, episodes, play)


def floor_contestant() -> Contestant:
    def decide_for(totals: dict[str, float]) -> Decide:
        return lambda tool, args: floor_decide(totals, tool, args)

    how = "hand-written Python over a host-held {order_id: total} dict"
    return host_contestant("floor", how, decide_for)


def agt_contestant() -> Contestant:
    policies = importlib.import_module("agent_os.policies")
    document = policies.PolicyDocument(
        name="refunds",
        rules=[
            {
                "name": "unknown_tool",
                "condition": {"field": "tool_name", "operator": "not_in", "value": list(TOOL_NAMES)},
                "action": "deny",
                "priority": 100,
                "message": "unknown tool",
            },
            {
                "name": "schema",
                "condition": {"field": "args_valid", "operator": "eq", "value": False},
                "action": "deny",
                "priority": 90,
                "message": "arguments do not fit the tool's schema",
            },
            {
                "name": "unknown_order",
                "condition": {"field": "order_known", "operator": "eq", "value": False},
                "action": "deny",
                "priority": 80,
                "message": "order not returned by get_order",
            },
            {
                "name": "over_total",
                "condition": {"field": "refund_excess", "operator": "gt", "value": 0},
                "action": "deny",
                "priority": 70,
                "message": "refund exceeds the order total",
            },
        ],
        defaults={"action": "allow"},
    )
    evaluate = policies.PolicyEvaluator(policies=[document]).evaluate

    def decide_for(totals: dict[str, float]) -> Decide:
        def decide(tool: str, args: dict[str, Any]) -> bool:
            valid = args_valid(tool, args)
            context: dict[str, Any] = {"tool_name": tool, "args_valid": valid}
            if valid and tool == "refund":
                total = totals.get(args["order_id"])
                context["order_known"] = total is not None
                if total is not None:
                    context["refund_excess"] = args["amount"] - total
            return bool(evaluate(context).allowed)

        return decide

    how = (
        "PolicyEvaluator rules on a host-built flat context (args_valid from the floor's schema check;"
        " order_known, refund_excess from host-held totals): the evaluator cannot type-check"
        " arguments, compare two fields or hold state"
    )
    return host_contestant("agent-governance-toolkit", how, decide_for)


def edictum_contestant() -> Contestant:
    ed = importlib.import_module("edictum")
    holder: dict[str, dict[str, float]] = {"totals": {}}
    """Host-held state: the current episode's ``{order_id: total}``."""

    def known_tool(call: Any) -> Any:
        return ed.Decision.pass_() if call.tool_name in TOOL_NAMES else ed.Decision.fail("unknown tool")

    def get_order_schema(call: Any) -> Any:
        ok = args_valid("get_order", call.args)
        return ed.Decision.pass_() if ok else ed.Decision.fail("get_order takes order_id: str")

    def refund_schema(call: Any) -> Any:
        ok = args_valid("refund", call.args)
        return ed.Decision.pass_() if ok else ed.Decision.fail("refund takes order_id: str, amount: number")

    def refund_within_total(call: Any) -> Any:
        args = call.args
        total = holder["totals"].get(args.get("order_id"))
        if total is None:
            return ed.Decision.fail("order not returned by get_order; call get_order first")
        amount = args.get("amount")
        if type(amount) not in (int, float) or amount > total:
            return ed.Decision.fail(f"the refund exceeds the order's total of {total}")
        return ed.Decision.pass_()

    def remember(call: Any, result: Any) -> Any:
        holder["totals"][call.args["order_id"]] = result["total"]
        return ed.Decision.pass_()

    rules = [
        ed.precondition("*")(known_tool),
        ed.precondition("get_order")(get_order_schema),
        ed.precondition("refund")(refund_schema),
        ed.precondition("refund")(refund_within_total),
        ed.postcondition("get_order")(remember),
    ]
    guard: list[Any] = []
    sessions = [0]

    def new_round() -> None:
        # the default limits (200 executions, 500 attempts per session) would refuse the timed chunks
        limits = ed.OperationLimits(max_attempts=1 << 62, max_tool_calls=1 << 62)
        guard[:] = [ed.Edictum(mode="enforce", rules=rules, limits=limits)]

    new_round()
    denied = ed.EdictumDenied

    def open_session() -> str:
        holder["totals"] = {}
        sessions[0] += 1
        return f"episode-{sessions[0]}"

    async def decisions(call: tuple[str, dict[str, Any]], n: int) -> int:
        tool, args = call
        g = guard[0]
        sid = open_session()
        await g.run(*PRIME, get_order, session_id=sid)
        evaluate = g.evaluate
        t0 = timed_start()
        for _ in range(n):
            evaluate(tool, args)
        return timed_end(t0)

    async def guarded(guarded_call: tuple[str, dict[str, Any]], n: int) -> int:
        tool, args = guarded_call
        g = guard[0]
        sid = open_session()
        await g.run(*PRIME, get_order, session_id=sid)
        run = g.run
        t0 = timed_start()
        for _ in range(n):
            try:  # noqa: SIM105 (contextlib.suppress costs a context manager per call)
                await run(tool, args, refund, session_id=sid)
            except denied:
                pass
        return timed_end(t0)

    async def episodes(n: int) -> int:
        run = guard[0].run
        t0 = timed_start()
        for _ in range(n):
            sid = open_session()
            for tool, args in SCRIPT:
                try:  # noqa: SIM105 (contextlib.suppress costs a context manager per call)
                    await run(tool, args, TOOLS[tool], session_id=sid)
                except denied:
                    pass
        return timed_end(t0)

    async def play() -> tuple[list[bool], list[bool]]:
        g = guard[0]
        sid = open_session()
        decided: list[bool] = []
        outcomes: list[bool] = []
        for tool, args in SCRIPT:
            decided.append(g.evaluate(tool, args).decision == "allow")
            try:
                await g.run(tool, args, TOOLS[tool], session_id=sid)
                outcomes.append(True)
            except denied:
                outcomes.append(False)
        return decided, outcomes

    how = (
        "Python @precondition contracts (unknown tool, schema, refund limit) and a @postcondition"
        " on get_order recording the total in host-held state (edictum's preconditions cannot read"
        " its session store, which keeps counters and strings); OperationLimits raised so that the"
        " timed chunks are not cut off at 200 calls per session"
    )
    return Contestant("edictum", how, decisions, guarded, episodes, play, new_round)


# -- the run -----------------------------------------------------------------------------------
def peer_version(dist: str) -> str:
    return importlib.metadata.version(dist)


def load_peers() -> tuple[list[Contestant], list[str]]:
    """The peers that import, and a line for each that does not."""
    found: list[Contestant] = []
    missing: list[str] = []
    makers: dict[str, Callable[[], Contestant]] = {
        "agent-governance-toolkit": agt_contestant,
        "edictum": edictum_contestant,
    }
    for dist, (module, spec) in PEERS.items():
        try:
            importlib.import_module(module)
        except ImportError as e:
            missing.append(f"{dist}: not importable ({e}); pip install {spec} (in a separate venv, see the docstring)")
            continue
        found.append(makers[dist]())
    return found, missing


async def bare_chunk(n: int) -> int:
    tool, args = ALLOWED
    func = TOOLS[tool]
    t0 = timed_start()
    for _ in range(n):
        await func(**args)
    return timed_end(t0)


def fmt(us: float, base: float) -> str:
    return f"{us:.2f} us ({us / base:.2f}x)" if base > 0 else f"{us:.2f} us"


async def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=15, help="interleaved rounds (default 15)")
    parser.add_argument("--n", type=int, default=2000, help="iterations per timed chunk (default 2000)")
    opts = parser.parse_args(argv)
    rounds, n = max(1, opts.rounds), max(1, opts.n)
    n_episodes = max(1, n // 10)

    peers, missing = load_peers()
    contestants = [prefixmon_contestant(), floor_contestant(), *peers]
    print(f"python {sys.version.split()[0]}; prefixmon {peer_version('prefixmon')}")
    for c in peers:
        print(f"{c.name} {peer_version(c.name)}")
    for line in missing:
        print(f"missing peer: {line}")
    print("\nhow each contestant expresses the rules:")
    for c in contestants:
        print(f"- {c.name}: {c.how}")

    print("\nagreement on the scripted 10-call episode (allowed = 1, refused = 0):")
    expected = list(EXPECTED)
    print(f"  {'expected':<26} {''.join(str(int(x)) for x in expected)}")
    for c in contestants:
        decided, outcomes = await c.play()
        d, o = "".join(str(int(x)) for x in decided), "".join(str(int(x)) for x in outcomes)
        print(f"  {c.name:<26} decisions {d}  guarded calls {o}")
        assert decided == expected, f"{c.name} decided {decided}, expected {expected}"
        assert outcomes == expected, f"{c.name} allowed/refused {outcomes}, expected {expected}"
    print(f"  all {len(contestants)} contestants agree")

    names = [c.name for c in contestants]
    allowed: dict[str, list[float]] = {c: [] for c in names}
    refused: dict[str, list[float]] = {c: [] for c in names}
    overhead: dict[str, list[float]] = {c: [] for c in names}
    blocked: dict[str, list[float]] = {c: [] for c in names}
    episode: dict[str, list[float]] = {c: [] for c in names}
    bare: list[float] = []
    print(f"\ntiming: {rounds} rounds, chunks of {n} decisions/calls and {n_episodes} episodes ...", flush=True)
    for r in range(rounds):
        for c in contestants:
            c.new_round()
        order = contestants[r % len(contestants) :] + contestants[: r % len(contestants)]
        for c in order:
            allowed[c.name].append(await c.decisions(ALLOWED, n) / n / 1000)
        for c in order:
            refused[c.name].append(await c.decisions(REFUSED, n) / n / 1000)
        guarded: dict[str, float] = {}
        bare_us = await bare_chunk(n) / n / 1000
        for c in order:
            guarded[c.name] = await c.guarded(ALLOWED, n) / n / 1000
        bare_us = min(bare_us, await bare_chunk(n) / n / 1000)
        bare.append(bare_us)
        for c in order:
            overhead[c.name].append(guarded[c.name] - bare_us)
        for c in order:
            blocked[c.name].append(await c.guarded(REFUSED, n) / n / 1000)
        for c in order:
            episode[c.name].append(await c.episodes(n_episodes) / n_episodes / 1000)

    rows = [
        ("decision, refund allowed", allowed),
        ("decision, refund refused (over the total)", refused),
        ("guarded call overhead, refund allowed", overhead),
        ("guarded call, refund refused (nothing runs)", blocked),
        ("10-call episode, open to close", episode),
    ]
    print(f"\nbare await refund(**args): {statistics.median(bare):.2f} us (median)")
    print("\n| measurement (median, us; ratio to prefixmon) | " + " | ".join(names) + " |")
    print("|---|" + "---:|" * len(names))
    for label, data in rows:
        med = {c: statistics.median(v) for c, v in data.items()}
        base = med["prefixmon"]
        print(f"| {label} | " + " | ".join(fmt(med[c], base) for c in names) + " |")
    if missing:
        print("\nnot measured (missing): " + ", ".join(m.split(":", 1)[0] for m in missing))


if __name__ == "__main__":
    anyio.run(main)
