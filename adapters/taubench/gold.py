"""Gold action sequences on the sandbox, and through the monitor.

:func:`sandbox_failures` runs every gold action of a split on a fresh sandbox per task and
lists the actions the environment itself rejects. :func:`monitor_gold` runs the same
sequences through a monitored episode (policy ``observe``) and reports TER and, per task
that is not fully executable, the first failure.

Gold sequences omit most of the reads an agent makes before it acts (the user's profile,
the reservation or order, the flight search, the product's variants). The monitored replay
therefore starts each episode with the task's instruction as the user's message and the
policy as information, and the results of those reads as context at depth 0: the user's details, each of the user's
reservations or orders, the products in those orders, and a direct-flight search for every
segment a gold booking or flight change uses.

Run ``python -m prefixmon.adapters.taubench.gold`` to print both reports.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from prefixmon import EpisodeRecord, Monitor, ToolBlocked, Toolset, TrackedState
from prefixmon.commands import run_async

from .data import TauTask, load_policy, load_tasks, split_domain
from .sandbox import Sandbox, is_error_result
from .toolsets import toolset

__all__ = (
    "DEFAULT_SPLITS",
    "GoldEpisode",
    "GoldFailure",
    "main",
    "monitor_gold",
    "read_user_records",
    "report",
    "run_gold_episode",
    "sandbox_failures",
    "seed_context",
    "ter",
)

DEFAULT_SPLITS = ("airline_test", "retail_test", "retail_dev")


@dataclass(frozen=True, slots=True, kw_only=True)
class GoldFailure:
    """A gold action the sandbox rejects."""

    split: str
    task_index: int
    depth: int
    """1-based position of the action in the task's gold sequence."""
    tool: str
    error: str
    """The environment's error result."""


@dataclass(frozen=True, slots=True, kw_only=True)
class GoldEpisode:
    """One gold sequence through the monitor."""

    split: str
    task: TauTask
    record: EpisodeRecord
    sandbox_errors: tuple[tuple[int, str], ...]
    """(depth, error) of each gold action the sandbox rejected."""


def sandbox_failures(split: str, *, data: str | os.PathLike[str] | None = None) -> list[GoldFailure]:
    """Every gold action of ``split`` that the sandbox rejects, in task order."""
    domain = split_domain(split)
    failures = []
    for task in load_tasks(split, data):
        sandbox = Sandbox(domain, data=data)
        for depth, action in enumerate(task.actions, start=1):
            result = sandbox.invoke(action.name, action.kwargs)
            if is_error_result(result):
                failures.append(GoldFailure(split=split, task_index=task.task_index, depth=depth, tool=action.name, error=result))
    return failures


def seed_context(state: TrackedState, sandbox: Sandbox, task: TauTask, tools: Toolset) -> None:
    """Give the episode what an agent would have read before the gold actions (depth 0).

    ``sandbox`` must be in the task's initial state; only read tools are run on it.
    """

    def read(name: str, **kwargs: Any) -> Any:
        result = sandbox.invoke(name, kwargs)
        if is_error_result(result):
            return None
        spec = tools[name]
        state.ingest(result, produce={p.key: p.kind for p in spec.produces}, tool=name)
        for effect in spec.effects:
            effect(state, kwargs, result)
        if spec.observe is not None:  # what the result shows of the environment's objects (spec-file rules)
            spec.observe(state, kwargs, result)
        return json.loads(result) if result[:1] in "{[" else result

    state.bind("user_id", task.user_id, tool="task", depth=0)
    user = read("get_user_details", user_id=task.user_id)
    if user is None:
        return
    read_user_records(read, sandbox.domain, user)
    if sandbox.domain == "airline":
        for action in task.actions:
            for segment in action.kwargs.get("flights", ()) if action.name.endswith(("_reservation", "_flights")) else ():
                flight = sandbox.db["flights"].get(segment.get("flight_number"))
                if flight is not None:
                    read(
                        "search_direct_flight",
                        origin=flight["origin"],
                        destination=flight["destination"],
                        date=segment.get("date"),
                    )


def read_user_records(read: Callable[..., Any], domain: str, user: Mapping[str, Any]) -> None:
    """The reads an agent makes after a user's details: each reservation (airline); each order and its products (retail).

    ``read(tool, **arguments)`` runs a read tool and returns its parsed result, or ``None``
    when the environment rejected it. τ² derives its airline and retail domains from
    τ-bench's, so both adapters seed gold episodes with these reads.
    """
    if domain == "airline":
        for reservation_id in user.get("reservations", ()):
            read("get_reservation_details", reservation_id=reservation_id)
        return
    products: dict[str, None] = {}
    for order_id in user.get("orders", ()):
        order = read("get_order_details", order_id=order_id)
        for item in order.get("items", ()) if order else ():
            products.setdefault(item["product_id"], None)
    for product_id in products:
        read("get_product_details", product_id=product_id)


async def run_gold_episode(
    monitor: Monitor, split: str, task: TauTask, *, data: str | os.PathLike[str] | None = None
) -> GoldEpisode:
    """One task's gold sequence through ``monitor`` on a fresh sandbox (policy: the monitor's)."""
    domain = split_domain(split)
    sandbox = Sandbox(domain, data=data)
    errors: list[tuple[int, str]] = []
    async with monitor.episode(
        task_id=f"{split}/{task.task_index}",
        labels={"dataset": split, "domain": f"tau-{domain}", "method": "gold"},
        env=sandbox,
        allows_no_tool=not task.actions,
    ) as ep:
        ep.inform(load_policy(domain, data))
        ep.user(task.instruction)
        seed_context(ep.state, Sandbox(domain, data=data), task, monitor.toolset)
        for action in task.actions:
            try:
                pending = await ep.begin(action.name, action.kwargs)
            except ToolBlocked:
                errors.append((ep.depth, f"Unknown action {action.name}"))
                continue
            result = sandbox.invoke(pending.call.name, pending.args)
            if is_error_result(result):
                errors.append((ep.depth, result))
            pending.done(result)
        ep.finish("success")
    assert ep.record is not None
    return GoldEpisode(split=split, task=task, record=ep.record, sandbox_errors=tuple(errors))


async def monitor_gold(split: str, *, data: str | os.PathLike[str] | None = None) -> list[GoldEpisode]:
    """Every gold sequence of ``split`` through a monitor with policy ``observe``."""
    monitor = Monitor(toolset(split_domain(split), data=data), policy="observe")
    return [await run_gold_episode(monitor, split, task, data=data) for task in load_tasks(split, data)]


def ter(episodes: Sequence[GoldEpisode]) -> float:
    """Fraction of episodes whose every action was executable."""
    return sum(1 for e in episodes if e.record.executable) / len(episodes) if episodes else float("nan")


def report(splits: Sequence[str], *, data: str | os.PathLike[str] | None = None) -> str:
    """Both reports as text: sandbox rejections, then TER through the monitor with reasons."""
    lines: list[str] = []
    for split in splits:
        failures = sandbox_failures(split, data=data)
        tasks = load_tasks(split, data)
        n_actions = sum(len(t.actions) for t in tasks)
        failed_tasks = sorted({f.task_index for f in failures})
        lines.append(
            f"{split}: {len(tasks)} tasks, {n_actions} gold actions; the sandbox rejects "
            f"{len(failures)} action(s) in {len(failed_tasks)} task(s)"
        )
        for f in failures:
            lines.append(f"  task {f.task_index} action {f.depth} {f.tool}: {f.error}")
        episodes = run_async(functools.partial(monitor_gold, split, data=data))
        failing = [e for e in episodes if not e.record.executable]
        explained = [e for e in failing if e.sandbox_errors and e.record.fed == e.sandbox_errors[0][0]]
        lines.append(
            f"  through the monitor: TER {ter(episodes):.3f} ({len(episodes) - len(failing)}/{len(episodes)}); "
            f"{len(explained)} of {len(failing)} not fully executable because the gold sequence itself "
            "fails at that action"
        )
        for e in failing:
            ff = e.record.first_failure
            assert ff is not None
            own = dict(e.sandbox_errors).get(ff.depth)
            if own:
                why = f"gold fails in the sandbox: {own}"
            elif ff.cause == "information":
                why = "the sandbox accepts it, but the value is in neither the instruction, the policy nor the context"
            else:
                why = "the sandbox accepts it (the monitor disagrees)"
            lines.append(f"  task {e.task.task_index} FED {ff.depth} {ff.tool} [{ff.cause}] {ff.reason} — {why}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m prefixmon.adapters.taubench.gold [--split S ...] [--data DIR]``."""
    parser = argparse.ArgumentParser(prog="python -m prefixmon.adapters.taubench.gold", description=__doc__.split("\n\n")[0])
    parser.add_argument("--split", action="append", help=f"task split (default: {', '.join(DEFAULT_SPLITS)})")
    parser.add_argument("--data", help="τ-bench data folder")
    args = parser.parse_args(argv)
    print(report(args.split or DEFAULT_SPLITS, data=args.data))
    return 0


if __name__ == "__main__":
    sys.exit(main())
