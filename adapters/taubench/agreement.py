"""Perturbed-gold agreement: do pre-call verdicts predict the sandbox's own execution outcome?

For every task of the splits and every depth k of its gold sequence, the episode is brought
to the state after the gold prefix a_1..a_{k-1} (through the monitor, on a sandbox), then
a_k and a set of perturbations of it are judged pre-call (``Episode.check``, no side
effects) and each is executed on a fork of the sandbox in that state. A call agrees when
the verdict says executable exactly when the sandbox accepts the call (no ``Error: ...`` /
``Unknown action``).

Perturbations: the gold call itself, an unknown tool name, a missing and an extra
argument, an invented id, another user's payment method, another of the user's own
payment methods, a payment amount off by one, a flight moved by one to three days, a
cabin change, another of the user's orders, an item of the order swapped, another variant
as the new item, an invalid cancellation reason, one passenger fewer, more paid bags.

Run ``python -m prefixmon.adapters.taubench.agreement`` to print the numbers.
"""

from __future__ import annotations

import argparse
import copy
import datetime as dt
import os
import random
import sys
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from prefixmon import Episode, Monitor, ToolBlocked, current_episode
from prefixmon.analytics import Confusion
from prefixmon.commands import run_async

from .data import TauTask, load_policy, load_tasks, split_domain
from .gold import DEFAULT_SPLITS, seed_context
from .sandbox import Sandbox, is_error_result
from .toolsets import spec_toolset, toolset

__all__ = (
    "ID_ARGS",
    "INVENTED",
    "SCHEMA_KINDS",
    "Rules",
    "Summary",
    "Trial",
    "format_summary",
    "main",
    "perturbations",
    "run_suite",
)

SCHEMA_KINDS = frozenset({"unknown_tool", "missing_argument", "extra_argument"})
"""Perturbations that only the schema check needs to catch."""

ID_ARGS = (
    "reservation_id",
    "order_id",
    "user_id",
    "product_id",
    "payment_id",
    "payment_method_id",
    "customer_id",
    "line_id",
    "bill_id",
)
INVENTED = {
    "reservation_id": "ZZ9Q7X",
    "order_id": "#W0000001",
    "user_id": "nobody_smith_0001",
    "product_id": "1000000001",
    "payment_id": "credit_card_0000001",
    "payment_method_id": "credit_card_0000001",
    "customer_id": "C9999",
    "line_id": "L9999",
    "bill_id": "B9999",
}


@dataclass(frozen=True, slots=True, kw_only=True)
class Trial:
    """One judged and executed call."""

    split: str
    task_index: int
    depth: int
    kind: str
    """Perturbation kind (``gold`` for the unperturbed call)."""
    tool: str
    predicted: bool
    """Pre-call verdict: executable."""
    cause: str | None
    accepted: bool
    """The sandbox accepted the call."""
    error: str | None

    @property
    def agrees(self) -> bool:
        """Whether the verdict predicted the sandbox's outcome."""
        return self.predicted == self.accepted


@dataclass(slots=True)
class Summary:
    """Agreement counts."""

    trials: list[Trial] = field(default_factory=list)

    @property
    def n(self) -> int:
        """Number of calls."""
        return len(self.trials)

    @property
    def agreement(self) -> float:
        """Fraction of calls whose verdict predicted the sandbox's outcome."""
        return sum(t.agrees for t in self.trials) / self.n if self.n else float("nan")

    def confusion(self) -> Counter[tuple[bool, bool]]:
        """(predicted executable, accepted) → count."""
        return Counter((t.predicted, t.accepted) for t in self.trials)

    def prediction(self) -> tuple[float | None, float | None]:
        """Pre-call prediction of the sandbox's rejections: (precision, recall); ``None`` when undefined."""
        rejections = Confusion.of((not t.predicted, not t.accepted) for t in self.trials)
        return rejections.precision, rejections.recall

    def by_kind(self) -> dict[str, tuple[int, int]]:
        """Perturbation kind → (agreeing, total)."""
        out: dict[str, list[int]] = {}
        for t in self.trials:
            row = out.setdefault(t.kind, [0, 0])
            row[0] += t.agrees
            row[1] += 1
        return {k: (v[0], v[1]) for k, v in sorted(out.items())}


# -- perturbations --------------------------------------------------------------------------------
def _other_user_payment(db: Mapping[str, Any], user_id: str) -> str | None:
    for uid in db["users"]:
        if uid != user_id:
            for payment_id in db["users"][uid]["payment_methods"]:
                return str(payment_id)
    return None


def _user_of(db: Mapping[str, Any], args: Mapping[str, Any]) -> Any:
    if "user_id" in args:
        return db["users"].get(args["user_id"])
    if "reservation_id" in args and args["reservation_id"] in db.get("reservations", {}):
        return db["users"].get(db["reservations"][args["reservation_id"]]["user_id"])
    if "order_id" in args and args["order_id"] in db.get("orders", {}):
        return db["users"].get(db["orders"][args["order_id"]]["user_id"])
    return None


def perturbations(
    name: str, args: Mapping[str, Any], db: Mapping[str, Any], rng: random.Random, required: Sequence[str]
) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """(kind, tool, arguments) variants of one gold call, each meant to be judged in the same state.

    ``db`` is the environment's database in that state as tables of JSON-like records
    (``db["users"][user_id]["payment_methods"]``); it is only read.
    """
    yield "gold", name, dict(args)
    yield "unknown_tool", f"{name}_v2", dict(args)
    if required:
        missing = dict(args)
        missing.pop(required[0], None)
        yield "missing_argument", name, missing
    yield "extra_argument", name, {**args, "note": "please hurry"}
    for arg in ID_ARGS:
        if arg in args:
            yield "invented_id", name, {**args, arg: INVENTED[arg]}
            break
    user = _user_of(db, args)
    payment_arg = next((a for a in ("payment_id", "payment_method_id") if a in args), None)
    if payment_arg is not None and user is not None:
        foreign = _other_user_payment(db, args.get("user_id", ""))
        if foreign is not None and foreign not in user["payment_methods"]:
            yield "foreign_payment", name, {**args, payment_arg: foreign}
        own = [p for p in user["payment_methods"] if p != args[payment_arg]]
        if own:
            yield "own_other_payment", name, {**args, payment_arg: rng.choice(own)}
    if name == "book_reservation":
        bumped = copy.deepcopy(dict(args))
        bumped["payment_methods"][0]["amount"] += 1
        yield "amount_off", name, bumped
        if user is not None:
            owned = list(user["payment_methods"])
            swapped = copy.deepcopy(dict(args))
            swapped["payment_methods"][0]["payment_id"] = rng.choice(owned)
            yield "own_other_payment", name, swapped
    if args.get("flights"):
        moved = copy.deepcopy(dict(args))
        segment = moved["flights"][rng.randrange(len(moved["flights"]))]
        day = dt.date.fromisoformat(segment["date"]) + dt.timedelta(days=rng.randint(1, 3))
        segment["date"] = day.isoformat()
        yield "flight_moved", name, moved
    if "cabin" in args:
        cabins = [c for c in ("basic_economy", "economy", "business") if c != args["cabin"]]
        yield "cabin_changed", name, {**args, "cabin": rng.choice(cabins)}
    if "order_id" in args and user is not None:
        others = [o for o in user.get("orders", ()) if o != args["order_id"]]
        if others:
            yield "other_order", name, {**args, "order_id": rng.choice(others)}
    if args.get("item_ids") and "order_id" in args and args["order_id"] in db.get("orders", {}):
        order = db["orders"][args["order_id"]]
        held = [i["item_id"] for i in order["items"] if i["item_id"] not in args["item_ids"]]
        swapped_items = list(args["item_ids"])
        swapped_items[0] = rng.choice(held) if held else "0000000001"
        yield "item_swapped", name, {**args, "item_ids": swapped_items}
        if args.get("new_item_ids"):
            item = next((i for i in order["items"] if i["item_id"] == args["item_ids"][0]), None)
            if item is not None:
                variants = [v for v in db["products"][item["product_id"]]["variants"] if v != args["new_item_ids"][0]]
                if variants:
                    new_items = list(args["new_item_ids"])
                    new_items[0] = rng.choice(variants)
                    yield "other_variant", name, {**args, "new_item_ids": new_items}
    if name == "cancel_pending_order":
        yield "invalid_reason", name, {**args, "reason": "changed my mind"}
    if name == "update_reservation_passengers" and len(args["passengers"]) > 1:
        yield "passenger_dropped", name, {**args, "passengers": args["passengers"][:-1]}
    if name == "update_reservation_baggages":
        yield (
            "more_paid_bags",
            name,
            {
                **args,
                "total_baggages": args["total_baggages"] + 3,
                "nonfree_baggages": args["nonfree_baggages"] + 3,
            },
        )


# -- the suite ------------------------------------------------------------------------------------
async def _task_trials(
    monitor: Monitor, split: str, task: TauTask, rng: random.Random, data: Any, *, probes: bool = False
) -> list[Trial]:
    domain = split_domain(split)
    sandbox = Sandbox(domain, data=data)
    trials: list[Trial] = []
    async with monitor.episode(task_id=f"{split}/{task.task_index}", env=sandbox) as ep:
        ep.inform(load_policy(domain, data))
        ep.user(task.instruction)
        seed_context(ep.state, Sandbox(domain, data=data), task, monitor.toolset)
        for depth, action in enumerate(task.actions, start=1):
            spec = monitor.toolset.get(action.name)
            required = list(spec.parameters.get("required", ())) if spec is not None else []
            for kind, name, args in perturbations(action.name, action.kwargs, sandbox.db, rng, required):
                if probes:
                    await ep.probe(name, args)
                verdict = ep.check(name, args)
                result = sandbox.fork().invoke(name, args)
                error = is_error_result(result)
                trials.append(
                    Trial(
                        split=split,
                        task_index=task.task_index,
                        depth=depth,
                        kind=kind,
                        tool=name,
                        predicted=verdict.executable,
                        cause=None if verdict.cause is None else str(verdict.cause),
                        accepted=error is None,
                        error=error,
                    )
                )
            await _advance(ep, sandbox, action.name, action.kwargs)
    return trials


async def _advance(ep: Episode, sandbox: Sandbox, name: str, args: Mapping[str, Any]) -> None:
    try:
        pending = await ep.begin(name, dict(args))
    except ToolBlocked:
        return
    pending.done(sandbox.invoke(pending.call.name, pending.args))


Rules = Literal["database", "spec", "spec+probes"]
"""``database``: the adapter's rules over the sandbox's database; ``spec``: the shipped
observation-only spec files, which read only what results showed; ``spec+probes``: the same,
with the files' probes reading (on the sandbox, read-only tools only) what a call needs and
nobody observed yet."""


async def run_suite(
    splits: Sequence[str] = DEFAULT_SPLITS,
    *,
    seed: int = 0,
    data: str | os.PathLike[str] | None = None,
    rules: Rules = "database",
) -> Summary:
    """Judge and execute every gold call of ``splits`` and its perturbations."""
    rng = random.Random(seed)
    summary = Summary()
    build = toolset if rules == "database" else spec_toolset
    for split in splits:
        monitor = Monitor(build(split_domain(split), data=data), policy="observe", probe=_probe_on_the_sandbox)
        probes = rules == "spec+probes"
        for task in load_tasks(split, data):
            summary.trials.extend(await _task_trials(monitor, split, task, rng, data, probes=probes))
    return summary


def _probe_on_the_sandbox(tool: str, args: dict[str, Any]) -> Any:
    """Probes run on the episode's own sandbox (read-only tools: the state does not change)."""
    episode = current_episode()
    if episode is None or not isinstance(episode.state.env, Sandbox):
        raise LookupError("no sandbox to probe")
    return episode.state.env.invoke(tool, args)


def format_summary(summary: Summary, *, show: int = 10) -> str:
    """The agreement numbers as text."""
    c = summary.confusion()
    lines = [
        f"perturbed-gold agreement: {summary.agreement:.4f} ({sum(t.agrees for t in summary.trials)}/{summary.n} calls)",
        f"  verdict executable & sandbox accepts: {c[(True, True)]}",
        f"  verdict not executable & sandbox rejects: {c[(False, False)]}",
        f"  verdict executable but sandbox rejects (missed): {c[(True, False)]}",
        f"  verdict not executable but sandbox accepts (flagged): {c[(False, True)]}",
    ]
    state = [t for t in summary.trials if t.kind not in SCHEMA_KINDS]
    if state:
        agree = sum(t.agrees for t in state)
        lines.append(
            f"  excluding unknown-tool / missing / extra-argument calls: {agree / len(state):.4f} ({agree}/{len(state)})"
        )
    lines.append("  by perturbation (agree/total):")
    for kind, (agree, total) in summary.by_kind().items():
        lines.append(f"    {kind:<20} {agree}/{total}")
    disagreements = [t for t in summary.trials if not t.agrees]
    if disagreements:
        lines.append(f"  disagreements (first {min(show, len(disagreements))} of {len(disagreements)}):")
        for t in disagreements[:show]:
            what = f"sandbox: {t.error}" if t.error else f"verdict: {t.cause}"
            lines.append(f"    {t.split} task {t.task_index} depth {t.depth} {t.kind} {t.tool} — {what}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m prefixmon.adapters.taubench.agreement [--split S ...] [--seed N] [--data DIR]``."""
    parser = argparse.ArgumentParser(prog="python -m prefixmon.adapters.taubench.agreement", description=__doc__.split("\n\n")[0])
    parser.add_argument("--split", action="append", help=f"task split (default: {', '.join(DEFAULT_SPLITS)})")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data", help="τ-bench data folder")
    parser.add_argument("--show", type=int, default=10, help="disagreements to list")
    args = parser.parse_args(argv)
    summary = run_async(lambda: run_suite(args.split or DEFAULT_SPLITS, seed=args.seed, data=args.data))
    print(format_summary(summary, show=args.show))
    return 0


if __name__ == "__main__":
    sys.exit(main())
