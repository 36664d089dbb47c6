"""Two models x two methods on ToolSandbox: trajectories in, paper-style PEC report out.

No LLM can be called offline, so the agents are SIMULATED from each scenario's ground truth
(the calls its milestones name, see ``prefixmon.adapters.toolsandbox.gold_calls``; the
scenarios whose ground truth runs end to end), with
error habits per model and method, and every call runs on ToolSandbox's real execution
context:

- method ``react`` acts and reads each result; ``plan_first`` commits to its plan first, so
  it more often skips the call a later one depends on (turning cellular service, Wi-Fi or
  location service on, or low-battery mode off), reads the error, makes the missing call and
  retries: a recovery;
- model ``sim-steady`` rarely drops a call for good; ``sim-hasty`` more often does.

The script writes one ToolSandbox run folder per model and method in the layout its CLI
writes (``<out>/<model>__<method>/trajectories/<scenario>/conversation.json`` and
``result_summary.json``; the similarity here is the share of the scenario's milestone calls
that ran, standing in for ToolSandbox's milestone matching), replays each with
``prefixmon replay --domain toolsandbox RUN --label model=... --label method=...``, and
prints ``prefixmon report --by model,method`` (TER, AUC-PEC, success, RR with intervals, PEC
checkpoints), a JSON copy and the PEC plot.

Run: ``python examples/toolsandbox_two_models.py [--out DIR] [--limit N]``. On real
ToolSandbox runs the same two commands apply: ``prefixmon replay --domain toolsandbox
data/agent_<model>_user_<user>_<date>/ --out records.jsonl --label model=<model>`` then
``prefixmon report records.jsonl --by model``.
"""

from __future__ import annotations

import argparse
import logging
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from prefixmon._cli import main as prefixmon
from prefixmon.adapters.toolsandbox import SETTING_TOOLS
from prefixmon.adapters.toolsandbox.bench import scenarios_with_gold, user_messages
from prefixmon.adapters.toolsandbox.env import SandboxEnv
from prefixmon.adapters.toolsandbox.replay import record_conversation, write_run

ENABLERS: Final = frozenset(SETTING_TOOLS.values())


@dataclass(frozen=True, slots=True, kw_only=True)
class Agent:
    """A simulated model and method: chances per scenario."""

    model: str
    method: str
    skip_enabler: float
    """Make the call that needs a setting before the call that sets it (then repair)."""
    drop: float
    """Leave out one call for good."""


AGENTS: Final = (
    Agent(model="sim-steady", method="react", skip_enabler=0.15, drop=0.05),
    Agent(model="sim-steady", method="plan_first", skip_enabler=0.7, drop=0.05),
    Agent(model="sim-hasty", method="react", skip_enabler=0.2, drop=0.25),
    Agent(model="sim-hasty", method="plan_first", skip_enabler=0.8, drop=0.25),
)


def rollout(name: str, calls: Sequence[Any], agent: Agent, seed: int) -> list[tuple[str, dict[str, Any]]]:
    """The calls one simulated agent makes (deterministic per seed, agent and scenario)."""
    rng = random.Random(f"{seed}/{agent.model}/{agent.method}/{name}")
    plan = [(c.name, dict(c.args)) for c in calls]
    if len(plan) > 1 and rng.random() < agent.drop:
        plan.pop(rng.randrange(len(plan)))
    out: list[tuple[str, dict[str, Any]]] = []
    for i, (tool, args) in enumerate(plan):
        following = plan[i + 1] if i + 1 < len(plan) else None
        if tool in ENABLERS and following is not None and rng.random() < agent.skip_enabler:
            out.append(following)  # too early: it fails, the agent reads why, enables, retries
        out.append((tool, args))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """Write, replay and report; returns the exit code."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("toolsandbox-two-models"), help="output folder (default: %(default)s)")
    parser.add_argument("--limit", type=int, default=None, metavar="N", help="first N runnable scenarios (default: all)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the simulated agents and the bootstrap (default: 0)")
    parser.add_argument("--bootstrap", type=int, default=2000, metavar="N", help="bootstrap resamples (default: %(default)s)")
    args = parser.parse_args(argv)
    if args.limit is not None and args.limit < 1:
        parser.error(f"--limit must be at least 1, got {args.limit}")
    logging.getLogger("tool_sandbox").setLevel(logging.ERROR)
    runnable, _ = scenarios_with_gold()
    # Only ground truths the context runs end to end can stand in for a correct agent (the
    # others name partial calls; ``prefixmon bench toolsandbox`` lists them).
    runnable = [
        (name, sc, calls)
        for name, sc, calls in runnable
        if not any(record_conversation(name, "", [(c.name, c.args) for c in calls])[1])
    ][: args.limit]
    args.out.mkdir(parents=True, exist_ok=True)
    parts = []
    for agent in AGENTS:
        conversations: dict[str, list[dict[str, Any]]] = {}
        similarity: dict[str, float] = {}
        for name, scenario, calls in runnable:
            said = " ".join(user_messages(SandboxEnv.for_scenario(scenario)))
            made = rollout(name, calls, agent, args.seed)
            messages, errors = record_conversation(name, said, made)
            ran = {(tool, repr(sorted(a.items()))) for (tool, a), e in zip(made, errors, strict=True) if e is None}
            similarity[name] = sum((c.name, repr(sorted(c.args.items()))) in ran for c in calls) / len(calls)
            conversations[name] = messages
        run = args.out / f"{agent.model}__{agent.method}"
        write_run(run, conversations, similarity)
        part = args.out / f"{agent.model}__{agent.method}.records.jsonl"
        replay = ["replay", "--domain", "toolsandbox", str(run), "--out", str(part)]
        replay += ["--label", f"model={agent.model}", "--label", f"method={agent.method}"]
        print("$ prefixmon " + " ".join(replay))
        code = prefixmon(replay)
        if code != 0:
            return code
        parts.append(part)
    records = args.out / "records.jsonl"
    records.write_text("".join(p.read_text(encoding="utf-8") for p in parts), encoding="utf-8")

    report = ["report", str(records), "--by", "model,method", "--bootstrap", str(args.bootstrap), "--seed", str(args.seed)]
    report += ["--compare", "method=plan_first,method=react"]
    plot = args.out / "pec.png"
    print("\n$ prefixmon " + " ".join([*report, "--plot", str(plot)]))
    code = prefixmon([*report, "--plot", str(plot)])
    if code != 0:
        return code
    return prefixmon([*report, "--format", "json", "--output", str(args.out / "report.json")])


if __name__ == "__main__":
    raise SystemExit(main())
