"""``prefixmon bench toolsandbox``: the predicate against ToolSandbox's real execution context.

(a) **Ground truth**: for every scenario whose milestones name tool calls (see
    :func:`~.env.gold_calls`), those calls in milestone order run through the monitor
    (declared rules, policy observe) on a copy of the scenario's starting context; TER,
    and every sequence that is not fully executable with the reason.
(b) **Perturbations**, at every depth, in the state the ground-truth prefix left: the call
    itself, an unknown tool, a missing required and an extra argument, an invented
    ``person_id`` / ``reminder_id``, a setting set to the value it already has, and the next
    call made one step too early (before the call that enables it: cellular before a
    message, location service before the location, ...). Each is judged pre-call by the
    declared rules and by the dry run, and executed on ToolSandbox's own snapshot of the
    context: the execution label.
(c) **Pre-call prediction** of execution rejections: precision and recall, declared and dry-run.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from prefixmon import Episode, EpisodeRecord, Monitor, PendingCall, ToolBlocked, Verdict
from prefixmon.analytics import Confusion
from prefixmon.commands import run_async

from .._bench import auc_pec, kind_table, pec, prediction_header, prediction_row, predicts_rejection, ter
from .._bench import prediction as predict
from .env import SETTING_TOOLS, GoldCall, SandboxEnv, gold_calls, load_scenarios, registered_tools
from .toolsets import toolset

__all__ = ("BENCH", "BenchReport", "GoldRun", "format_report", "run_bench", "run_gold", "step", "user_messages")

PEC_DEPTHS: Final = (1, 2, 3, 5)
INVENTED: Final = {"person_id": "00000000-0000-0000-0000-000000000000", "reminder_id": "00000000-0000-0000-0000-000000000001"}


def user_messages(env: SandboxEnv) -> list[str]:
    """What the user told the agent in the starting context (user -> agent messages)."""
    from tool_sandbox.common.execution_context import DatabaseNamespace, RoleType  # type: ignore[import-untyped]

    rows = env.context.get_database(DatabaseNamespace.SANDBOX, get_all_history_snapshots=True).to_dicts()
    return [str(r["content"]) for r in rows if r.get("sender") == RoleType.USER and r.get("recipient") == RoleType.AGENT]


async def step(
    ep: Episode, env: SandboxEnv, name: str, args: Mapping[str, Any] | str | None, *, call_id: str | None = None
) -> str | None:
    """Judge one call, run it on ``env``, give the episode its result; returns the rejection, if any."""
    try:
        pending: PendingCall | None = await ep.begin(name, args, call_id=call_id)
    except ToolBlocked:
        pending = None
    run_args = pending.args if pending is not None else args
    outcome = env.run(name, run_args if isinstance(run_args, Mapping) else {})
    if pending is not None:
        if outcome.error is not None:
            pending.failed(outcome.error)
        else:
            pending.done(outcome.result)
    return outcome.error


@dataclass(frozen=True, slots=True, kw_only=True)
class GoldRun:
    """One scenario's ground-truth calls through the monitor."""

    scenario: str
    calls: tuple[GoldCall, ...]
    record: EpisodeRecord
    rejected: tuple[tuple[int, str], ...]
    """(depth, error) of each ground-truth call the execution context rejected."""


async def run_gold(monitor: Monitor, name: str, scenario: Any, calls: Sequence[GoldCall]) -> GoldRun:
    """Run a scenario's ground-truth calls through ``monitor`` on a copy of its starting context."""
    env = SandboxEnv.for_scenario(scenario)
    rejected: list[tuple[int, str]] = []
    async with monitor.episode(
        task_id=name,
        labels={"dataset": "toolsandbox", "method": "ground_truth"},
        env=env,
        exposed=[t for t in env.exposed if t in monitor.toolset],
        allows_no_tool=not calls,
    ) as ep:
        for text in user_messages(env):
            ep.user(text)
        for depth, call in enumerate(calls, start=1):
            error = await step(ep, env, call.name, call.args)
            if error is not None:
                rejected.append((depth, error))
        ep.finish("success")
    assert ep.record is not None
    return GoldRun(scenario=name, calls=tuple(calls), record=ep.record, rejected=tuple(rejected))


@dataclass(frozen=True, slots=True, kw_only=True)
class Trial:
    """One call judged pre-call both ways and executed on a snapshot."""

    scenario: str
    depth: int
    kind: str
    tool: str
    declared: Verdict
    dry_run: Verdict
    rejected: str | None


@dataclass(slots=True)
class BenchReport:
    """Everything ``bench toolsandbox`` measured."""

    gold: list[GoldRun] = field(default_factory=list)
    trials: list[Trial] = field(default_factory=list)
    skipped: dict[str, int] = field(default_factory=dict)
    """Scenarios left out, by reason."""
    seconds: float = 0.0

    def prediction(self, mode: str) -> Confusion:
        """Pre-call prediction of rejections (schema / dependency / precondition) vs execution."""
        return predict(self.trials, mode)


def _variants(
    call: GoldCall, following: GoldCall | None, env: SandboxEnv, required: Sequence[str]
) -> Iterator[tuple[str, str, dict[str, Any]]]:
    yield "gold", call.name, dict(call.args)
    yield "unknown_tool", f"{call.name}_v2", dict(call.args)
    missing = next((r for r in required if r in call.args), None)
    if missing is not None:
        yield "missing_argument", call.name, {k: v for k, v in call.args.items() if k != missing}
    yield "extra_argument", call.name, {**call.args, "note": "please hurry"}
    for arg, value in INVENTED.items():
        if arg in call.args:
            yield "invented_id", call.name, {**call.args, arg: value}
    for setting, tool in SETTING_TOOLS.items():
        if call.name == tool:
            yield "setting_unchanged", tool, {"on": bool(env.setting(setting))}
    if following is not None:
        yield "next_too_early", following.name, dict(following.args)


async def _trials(declared: Monitor, dry: Monitor, name: str, scenario: Any, calls: Sequence[GoldCall]) -> list[Trial]:
    env = SandboxEnv.for_scenario(scenario)
    out: list[Trial] = []
    exposed = [t for t in env.exposed if t in declared.toolset]
    async with (
        declared.episode(task_id=name, env=env, exposed=exposed) as ep_d,
        dry.episode(task_id=name, env=env, exposed=exposed) as ep_r,
    ):
        for text in user_messages(env):
            ep_d.user(text)
            ep_r.user(text)
        for depth, call in enumerate(calls, start=1):
            spec = declared.toolset.get(call.name)
            required = list(spec.parameters.get("required", ())) if spec is not None else []
            following = calls[depth] if depth < len(calls) else None
            for kind, tool, args in _variants(call, following, env, required):
                declared_verdict, dry_verdict = ep_d.check(tool, args), ep_r.check(tool, args)
                out.append(
                    Trial(
                        scenario=name,
                        depth=depth,
                        kind=kind,
                        tool=tool,
                        declared=declared_verdict,
                        dry_run=dry_verdict,
                        rejected=env.fork().run(tool, args).error,
                    )
                )
            pendings: list[PendingCall | None] = []
            for ep in (ep_d, ep_r):
                try:
                    pendings.append(await ep.begin(call.name, dict(call.args)))
                except ToolBlocked:
                    pendings.append(None)
            outcome = env.run(call.name, call.args)
            for pending in pendings:
                if pending is not None:
                    pending.failed(outcome.error) if outcome.error is not None else pending.done(outcome.result)
    return out


def scenarios_with_gold(limit: int | None = None) -> tuple[list[tuple[str, Any, list[GoldCall]]], dict[str, int]]:
    """(name, scenario, ground-truth calls) of the runnable scenarios, and counts of those left out."""
    tools = registered_tools()
    runnable: list[tuple[str, Any, list[GoldCall]]] = []
    skipped = {"no milestone names a tool call": 0, "needs the network search tools": 0}
    for name, scenario in sorted(load_scenarios().items()):
        calls = gold_calls(scenario)
        if calls is None:
            skipped["no milestone names a tool call"] += 1
        elif any(c.name not in tools for c in calls):
            skipped["needs the network search tools"] += 1
        else:
            runnable.append((name, scenario, calls))
    return runnable[:limit], skipped


async def run_bench(*, limit: int | None = None, perturb: bool = True) -> BenchReport:
    """Run the ground-truth and perturbation suites over the first ``limit`` runnable scenarios."""
    started = time.perf_counter()
    report = BenchReport()
    runnable, report.skipped = scenarios_with_gold(limit)
    declared = Monitor(toolset("declared"), policy="observe")
    dry = Monitor(toolset("dry_run"), policy="observe")
    for name, scenario, calls in runnable:
        report.gold.append(await run_gold(declared, name, scenario, calls))
        if perturb:
            report.trials.extend(await _trials(declared, dry, name, scenario, calls))
    report.seconds = time.perf_counter() - started
    return report


def _reason(g: GoldRun) -> str:
    ff = g.record.first_failure
    assert ff is not None
    own = dict(g.rejected).get(ff.depth)
    call = g.calls[ff.depth - 1]
    if own is not None:
        if "missing a required argument" in own or "No search criteria" in own:
            return f"the milestone names {call.source} without the arguments its similarity match leaves open ({own[:90]})"
        return f"the execution context rejects the milestone's call {call.source}: {own[:100]}"
    return f"the execution context accepts {call.source}; the monitor does not: [{ff.cause}] {ff.reason}"


def _why_class(g: GoldRun) -> str:
    ff = g.record.first_failure
    assert ff is not None
    own = dict(g.rejected).get(ff.depth)
    if own is None:
        return "monitor disagrees with execution"
    if "missing a required argument" in own or "No search criteria" in own:
        return "milestone names a partial call"
    return "execution rejects the milestone's call"


def format_report(report: BenchReport, *, show: int = 15) -> str:
    """The report as plain text."""
    feds = [(g.record.fed, g.record.horizon) for g in report.gold]
    lines = [
        f"ToolSandbox bench (real execution context): {len(report.gold)} scenarios, {report.seconds:.1f} s",
        "left out: " + ", ".join(f"{n} ({why})" for why, n in report.skipped.items()),
        "",
        "(a) ground truth from the milestones, through the monitor (declared rules)",
        f"  TER {ter(feds):.3f} ({sum(g.record.executable for g in report.gold)}/{len(report.gold)}), "
        f"AUC-PEC {auc_pec(feds):.3f}, " + ", ".join(f"PEC@{k} {pec(feds, k):.3f}" for k in PEC_DEPTHS),
    ]
    failing = [g for g in report.gold if not g.record.executable]
    classes: dict[str, int] = {}
    for g in failing:
        classes[_why_class(g)] = classes.get(_why_class(g), 0) + 1
    lines.append("  not fully executable: " + (", ".join(f"{n} {why}" for why, n in sorted(classes.items())) or "none"))
    for g in failing[:show]:
        assert g.record.first_failure is not None
        lines.append(f"    {g.scenario}: FED {g.record.fed} — {_reason(g)}")
    if len(failing) > show:
        lines.append(f"    ... and {len(failing) - show} more (--show N lists more)")
    if report.trials:
        lines += ["", "(b) perturbations labelled by execution on a snapshot of the context"]
        lines += kind_table(report.trials)
        lines += ["", "(c) pre-call prediction of execution rejections (schema / dependency / precondition)"]
        lines.append(prediction_header())
        lines += [prediction_row(mode, report.prediction(mode)) for mode in ("declared", "dry_run")]
        wrong = [t for t in report.trials if predicts_rejection(t.declared) != (t.rejected is not None)]
        if wrong:
            lines.append(f"declared disagreements: {len(wrong)}")
            for t in wrong[:show]:
                what = t.rejected or f"[{t.declared.cause}] {t.declared.reason}"
                lines.append(f"  {t.scenario} depth {t.depth} {t.kind} {t.tool}: {what[:120]}")
    return "\n".join(lines)


def report_json(report: BenchReport) -> dict[str, Any]:
    """The headline numbers as JSON-ready data."""
    feds = [(g.record.fed, g.record.horizon) for g in report.gold]
    return {
        "seconds": report.seconds,
        "scenarios": len(report.gold),
        "skipped": report.skipped,
        "ter": ter(feds),
        "auc_pec": auc_pec(feds),
        "not_executable": [
            {"scenario": g.scenario, "fed": g.record.fed, "why": _reason(g)} for g in report.gold if not g.record.executable
        ],
        "prediction": {mode: report.prediction(mode).as_dict() for mode in ("declared", "dry_run")},
    }


class ToolSandboxBench:
    """``prefixmon bench toolsandbox`` (the ``toolsandbox`` entry point of ``prefixmon.bench``)."""

    help = "ToolSandbox scenarios on the real execution context: ground truth from milestones, perturbations"
    description = (__doc__ or "").split("\n\n")[0]

    def configure(self, parser: argparse.ArgumentParser) -> None:
        """The bench's arguments."""
        parser.add_argument("--limit", type=int, default=None, metavar="N", help="only the first N runnable scenarios")
        parser.add_argument("--no-perturb", action="store_true", help="ground truth only")
        parser.add_argument("--show", type=int, default=15, metavar="N", help="failures and disagreements to list")
        parser.add_argument("--format", choices=("table", "json"), default="table")

    def run(self, args: argparse.Namespace) -> int:
        """Run the bench; exit 1 when a dry-run prediction disagrees with execution."""
        try:
            import tool_sandbox  # type: ignore[import-untyped]  # noqa: F401
        except ImportError:
            print("prefixmon bench toolsandbox: install ToolSandbox (see docs/benchmarks.md)", file=sys.stderr)
            return 2
        logging.getLogger("tool_sandbox").setLevel(logging.ERROR)
        report = run_async(lambda: run_bench(limit=args.limit, perturb=not args.no_perturb))
        print(json.dumps(report_json(report), indent=2) if args.format == "json" else format_report(report, show=args.show))
        dry = report.prediction("dry_run")
        return 0 if not report.trials or (dry.fp == 0 and dry.fn == 0) else 1


BENCH: Final = ToolSandboxBench()
