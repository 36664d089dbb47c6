"""Two models x two methods on τ²-bench: results files in, paper-style PEC report out.

No LLM can be called offline, so the agents are SIMULATED from each task's gold actions,
with error habits per model and method, and every call runs on τ²'s real environment
(``prefixmon.adapters.tau2.replay.record_simulation``, which writes τ²'s own message models
and scores the run with τ²'s database check):

- method ``react``: acts on what it has; ``plan_first``: commits to a plan before it reads,
  so it more often calls a write with an id it assumed (an invented reservation / order /
  customer id), reads the error, then makes the correct call — a recovery;
- model ``sim-steady``: rarely slips; ``sim-hasty``: more often drops a gold action it
  thinks done (a slip it does not repair, so the database check fails).

Both first make the reads the gold actions leave out (the user's profile, their
reservations or orders, a flight search; in telecom the customer behind the phone number),
as an agent does (``prefixmon.adapters.tau2.episodes.context_reads``).

The script writes one τ² results file per model and method (``<out>/<model>__<method>__<domain>.json``,
the layout ``tau2 run`` writes its ``Results`` in), replays each with
``prefixmon replay --domain tau2-<domain> FILE --label method=<method>`` (the model comes
from the file's ``info.agent_info.llm``), and prints ``prefixmon report --by model,method``
with a paired bootstrap (TER, AUC-PEC, success, RR with intervals, PEC checkpoints), a JSON
copy and the PEC plot.

Run: ``python examples/tau2_two_models.py [--out DIR] [--domains airline,retail] [--limit N]``.
On real τ² results files the same two commands apply: ``prefixmon replay --domain
tau2-airline results.json --out records.jsonl --label method=react`` (per file), then
``prefixmon report records.jsonl --by model,method``.
"""

from __future__ import annotations

import argparse
import json
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from prefixmon._cli import main as prefixmon
from prefixmon.adapters.tau2 import DOMAINS, Domain, Tau2Env, load_tasks, silence_tau2_logs
from prefixmon.adapters.tau2.episodes import context_reads
from prefixmon.adapters.tau2.replay import record_simulation

INVENTED: Final[Mapping[str, str]] = {
    "reservation_id": "ZZ9Q7X",
    "order_id": "#W0000001",
    "user_id": "nobody_smith_0001",
    "customer_id": "C9999",
    "line_id": "L9999",
}


@dataclass(frozen=True, slots=True, kw_only=True)
class Agent:
    """A simulated model and method: chances per task."""

    model: str
    method: str
    slip: float
    """Drop one gold action (not repaired)."""
    probe: float
    """Before a call with an id argument, try it with an invented id first (then the right call)."""


AGENTS: Final = (
    Agent(model="sim-steady", method="react", slip=0.05, probe=0.10),
    Agent(model="sim-steady", method="plan_first", slip=0.05, probe=0.60),
    Agent(model="sim-hasty", method="react", slip=0.25, probe=0.15),
    Agent(model="sim-hasty", method="plan_first", slip=0.25, probe=0.70),
)


def rollout(domain: Domain, task: Any, agent: Agent, seed: int) -> list[tuple[str, dict[str, Any], Any]]:
    """The calls one simulated agent makes on ``task`` (deterministic per seed, agent and task)."""
    rng = random.Random(f"{seed}/{agent.model}/{agent.method}/{task.id}")
    reads = [(name, args, "assistant") for name, args, _ in context_reads(Tau2Env.for_task(domain, task), task)]
    gold = [(a.name, dict(a.arguments), a.requestor) for a in task.evaluation_criteria.actions or ()]
    if gold and rng.random() < agent.slip:
        gold.pop(rng.randrange(len(gold)))
    # The reads follow the lookups that find the user (retail's find_user_id_by_*), as in a real chat.
    lookups = 0
    while lookups < len(gold) and gold[lookups][0].startswith("find_user_id"):
        lookups += 1
    calls: list[tuple[str, dict[str, Any], Any]] = [*gold[:lookups], *reads]
    probed = False
    for name, args, requestor in gold[lookups:]:
        key = next((k for k in INVENTED if k in args), None)
        if key is not None and requestor == "assistant" and not probed and rng.random() < agent.probe:
            calls.append((name, {**args, key: INVENTED[key]}, requestor))
            probed = True
        calls.append((name, args, requestor))
    return calls


def write_results(out: Path, domain: Domain, agent: Agent, limit: int | None, seed: int) -> Path:
    """One τ² results file of ``agent`` on ``domain``'s tasks."""
    tasks = load_tasks(domain)[:limit]
    simulations = [
        record_simulation(domain, task, rollout(domain, task, agent, seed), sim_id=f"{agent.model}-{agent.method}-{task.id}")
        for task in tasks
    ]
    results = {
        "timestamp": "simulated",
        "info": {"agent_info": {"implementation": agent.method, "llm": agent.model}, "environment_info": {"domain_name": domain}},
        "tasks": [],
        "simulations": simulations,
    }
    path = out / f"{agent.model}__{agent.method}__{domain}.json"
    path.write_text(json.dumps(results), encoding="utf-8")
    return path


def main(argv: Sequence[str] | None = None) -> int:
    """Write, replay and report; returns the exit code."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("tau2-two-models"), help="output folder (default: %(default)s)")
    parser.add_argument(
        "--domains", default="airline,retail", help=f"comma-separated, of {', '.join(DOMAINS)} (default: %(default)s)"
    )
    parser.add_argument("--limit", type=int, default=None, metavar="N", help="first N tasks per domain (default: all)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the simulated agents and the bootstrap (default: 0)")
    parser.add_argument("--bootstrap", type=int, default=2000, metavar="N", help="bootstrap resamples (default: %(default)s)")
    args = parser.parse_args(argv)
    domains = [d.strip() for d in args.domains.split(",") if d.strip()]
    unknown = sorted(set(domains) - set(DOMAINS))
    if unknown:
        parser.error(f"unknown domains {', '.join(unknown)}; known: {', '.join(DOMAINS)}")
    if args.limit is not None and args.limit < 1:
        parser.error(f"--limit must be at least 1, got {args.limit}")
    silence_tau2_logs()
    args.out.mkdir(parents=True, exist_ok=True)
    records = args.out / "records.jsonl"
    parts = []
    for domain in domains:
        for agent in AGENTS:
            path = write_results(args.out, domain, agent, args.limit, args.seed)
            part = args.out / f"{path.stem}.records.jsonl"
            replay = ["replay", "--domain", f"tau2-{domain}", str(path), "--out", str(part), "--label", f"method={agent.method}"]
            print("$ prefixmon " + " ".join(replay))
            code = prefixmon(replay)
            if code != 0:
                return code
            parts.append(part)
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
