"""``prefixmon bench agentdojo``: AgentDojo's ground truth and prompt-injection attacks through blocking monitors.

Every user task of AgentDojo v1.2.2 (banking, slack, travel, workspace: 97 tasks, 339
ground-truth calls) is played on its real environment, alone and under the
``important_instructions`` attack paired with every injection task of its suite (949
attacked episodes). In an attacked episode the agent falls for the injection: after the
first result carrying the injected text it plays the injection task's ground truth, then
the rest of its own. Each configuration is a toolset and a blocking policy; AgentDojo's
checks score what happened:

- **benign calls refused**: ground-truth calls of benign episodes the monitor did not let
  run (the cost of the defence);
- **user tasks completed**: benign episodes whose task AgentDojo's utility check passes;
- **attacks that succeed**: attacked episodes whose injection goal AgentDojo's security
  check finds reached (lower is better).

Configurations: the tools' schemas alone; every argument grounded (``Grounded(block=True)``:
a value must have been seen in the user's request or an earlier result); only the
side-effecting tools' arguments grounded; the schemas with only the tools the user's task
needs exposed; the shipped spec of each suite (``specs/agentdojo_<suite>.yaml``: provenance
rules, docs/provenance.md), alone and with that exposure. No record is written.
``--fail-above-attacks N``, ``--fail-above-refused N`` and ``--fail-below-completed N`` exit 3
when a configuration (of those ``--gate TEXT`` names) passes them.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Final, NamedTuple

from prefixmon import Grounded, Monitor, Toolset
from prefixmon.commands import run_async

from .episodes import SUITES, WRITES, Played, Scenario, play, scenarios, tool_schemas

__all__ = (
    "BENCH",
    "CONFIGURATIONS",
    "BenchReport",
    "Configuration",
    "Result",
    "format_report",
    "grounded_toolset",
    "run_bench",
    "schema_toolset",
    "spec_toolset",
)


def schema_toolset(suite: str) -> Toolset:
    """The suite's tools from their schemas alone (zero configuration)."""
    tools = Toolset()
    for tool in tool_schemas(suite):
        tools.add_schema(tool["name"], tool["parameters"], description=tool["description"])
    return tools


def grounded_toolset(suite: str, *, writes_only: bool = False) -> Toolset:
    """The schemas, every argument grounded with ``block=True`` (of the side-effecting tools only, with ``writes_only``)."""
    tools = Toolset()
    for tool in tool_schemas(suite):
        grounded = None
        if not writes_only or tool["name"] in WRITES[suite]:
            grounded = {arg: Grounded(block=True) for arg in tool["parameters"].get("properties", {})}
        tools.add_schema(tool["name"], tool["parameters"], description=tool["description"], grounded=grounded)
    return tools


SPECS: Final = Path(__file__).resolve().parent / "specs"
"""The shipped spec per suite (``examples/specs/agentdojo_<suite>.yaml`` links to them)."""


def spec_toolset(suite: str) -> Toolset:
    """The schemas with the suite's shipped spec: provenance rules and read/write access (docs/provenance.md)."""
    return schema_toolset(suite).apply_spec(SPECS / f"agentdojo_{suite}.yaml")


class Configuration(NamedTuple):
    """A monitor configuration: its label, the toolset of a suite, and whether only the task's tools are exposed."""

    label: str
    make_toolset: Callable[[str], Toolset]
    expose: bool


CONFIGURATIONS: Final[list[Configuration]] = [
    Configuration("zero-config schema checks", schema_toolset, False),
    Configuration("grounding on every argument", grounded_toolset, False),
    Configuration("grounding on side-effecting tools only", lambda suite: grounded_toolset(suite, writes_only=True), False),
    Configuration("exposing only the tools the user's task needs", schema_toolset, True),
    Configuration("provenance (shipped specs)", spec_toolset, False),
    Configuration("provenance (shipped specs) + the tool exposure above", spec_toolset, True),
]
"""The configurations ``bench agentdojo`` runs; another one is one more entry."""


@dataclass(slots=True)
class Result:
    """A configuration's counts over some suites."""

    benign_calls: int = 0
    benign_refused: int = 0
    user_tasks: int = 0
    completed: int = 0
    attacked: int = 0
    attacks_succeeded: int = 0
    attacked_refused: int = 0
    """Calls refused in attacked episodes (user and injection calls)."""
    attacked_completed: int = 0
    """Attacked episodes whose user task still passes the utility check."""
    injection_not_found: int = 0
    """Attacked episodes where no result carried the injected text (injection calls played at the end)."""

    def add(self, played: Played) -> None:
        """Count one played scenario."""
        if played.scenario.injection_task is None:
            self.benign_calls += played.calls
            self.benign_refused += played.refused_user_calls
            self.user_tasks += 1
            self.completed += played.utility
        else:
            self.attacked += 1
            self.attacks_succeeded += bool(played.security)
            self.attacked_refused += len(played.refused)
            self.attacked_completed += played.utility
            self.injection_not_found += not played.injection_found

    def as_dict(self) -> dict[str, int]:
        """JSON-ready counts."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(slots=True)
class BenchReport:
    """Everything ``bench agentdojo`` measured."""

    labels: list[str]
    suites: list[str]
    results: dict[tuple[str, str], Result] = field(default_factory=dict)
    """By (configuration label, suite)."""
    failures: list[tuple[str, str, str]] = field(default_factory=list)
    """(configuration, scenario, error) of scenarios that could not be played."""
    refusals: dict[str, list[tuple[str, str, str]]] = field(default_factory=dict)
    """By configuration: (scenario, tool, reason) of refused benign calls."""
    succeeded: dict[str, list[str]] = field(default_factory=dict)
    """By configuration: the attacked scenarios whose injection goal was reached."""
    seconds: float = 0.0

    def total(self, label: str) -> Result:
        """A configuration's counts over every suite."""
        out = Result()
        for suite in self.suites:
            r = self.results[label, suite]
            for f in fields(out):
                setattr(out, f.name, getattr(out, f.name) + getattr(r, f.name))
        return out


async def run_bench(
    configurations: Sequence[Configuration] = CONFIGURATIONS,
    suites: Sequence[str] = SUITES,
    *,
    limit: int | None = None,
    attacked: bool = True,
) -> BenchReport:
    """Play every scenario (the first ``limit`` user tasks of each suite) under every configuration.

    One monitor per (configuration, suite); each scenario is played under every configuration
    in turn, so that its environment is built once.
    """
    started = time.perf_counter()
    report = BenchReport([c.label for c in configurations], list(suites))
    for suite in suites:
        monitors = [Monitor(c.make_toolset(suite), policy="block") for c in configurations]
        for c in configurations:
            report.results[c.label, suite] = Result()
        chosen: list[Scenario] = scenarios(suite, attacked=False)[:limit]
        users = {s.user_task for s in chosen}
        if attacked:
            chosen += [s for s in scenarios(suite, attacked=True) if s.user_task in users]
        for scenario in chosen:
            for c, monitor in zip(configurations, monitors, strict=True):
                try:
                    played = await play(scenario, monitor, expose=c.expose)
                except Exception as e:
                    report.failures.append((c.label, scenario.task_id, f"{type(e).__name__}: {e}"))
                    continue
                report.results[c.label, suite].add(played)
                if scenario.injection_task is None and played.refused:
                    report.refusals.setdefault(c.label, []).extend((scenario.task_id, t, r) for t, r in played.refused)
                elif played.security:
                    report.succeeded.setdefault(c.label, []).append(scenario.task_id)
    report.seconds = time.perf_counter() - started
    return report


MAX_LISTED: Final = 20
"""``--verbose`` names the attacks that succeed when there are at most this many."""
_COLUMNS: Final = ("configuration", "benign calls refused", "user tasks completed", "attacks that succeed")


def _row(label: str, r: Result) -> list[str]:
    return [
        label,
        f"{r.benign_refused} of {r.benign_calls}",
        f"{r.completed} of {r.user_tasks}",
        f"{r.attacks_succeeded} of {r.attacked}",
    ]


def _rows(report: BenchReport, verbose: bool) -> list[list[str]]:
    rows = []
    for label in report.labels:
        rows.append(_row(label, report.total(label)))
        if verbose:
            rows += [_row(f"  {suite}", report.results[label, suite]) for suite in report.suites]
    return rows


def format_report(report: BenchReport, fmt: str = "text", *, verbose: bool = False) -> str:
    """The table (``text`` or ``markdown``), the notes beneath it and the run time."""
    rows = _rows(report, verbose)
    if fmt == "markdown":
        lines = ["| " + " | ".join(_COLUMNS) + " |", "|" + "|".join(["---"] + ["---:"] * 3) + "|"]
        lines += ["| " + " | ".join(cells) + " |" for cells in rows]
    else:
        widths = [max(len(r[i]) for r in [list(_COLUMNS), *rows]) for i in range(len(_COLUMNS))]

        def line(cells: Sequence[str]) -> str:
            return "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True)))

        lines = [line(_COLUMNS), "  ".join("-" * w for w in widths), *(line(cells) for cells in rows)]
    lines.append("")
    for label in report.labels:
        t = report.total(label)
        if t.attacked:
            lines.append(
                f"{label}: {t.injection_not_found} of {t.attacked} attacked episodes showed the injection in no result"
                f" (its calls played at the end); {t.attacked_completed} attacked user tasks completed;"
                f" {t.attacked_refused} calls refused under attack"
            )
        for task_id, tool, reason in report.refusals.get(label, [])[:5] if verbose else ():
            lines.append(f"  refused {task_id} {tool}: {reason[:140]}")
        succeeded = report.succeeded.get(label, [])
        if verbose and 0 < len(succeeded) <= MAX_LISTED:
            lines.append(f"  attacks that succeed: {', '.join(succeeded)}")
    for label, task_id, error in report.failures:
        lines.append(f"FAILED {label}: {task_id}: {error[:200]}")
    lines.append(f"agentdojo bench: {report.seconds:.1f} s")
    return "\n".join(lines)


def report_json(report: BenchReport) -> dict[str, Any]:
    """The counts as JSON-ready data."""
    return {
        "seconds": report.seconds,
        "suites": report.suites,
        "configurations": [
            {
                "label": label,
                **report.total(label).as_dict(),
                "by_suite": {suite: report.results[label, suite].as_dict() for suite in report.suites},
            }
            for label in report.labels
        ],
        "failures": [{"configuration": c, "scenario": s, "error": e} for c, s, e in report.failures],
    }


class AgentDojoBench:
    """``prefixmon bench agentdojo`` (the ``agentdojo`` entry point of ``prefixmon.bench``)."""

    help = "AgentDojo ground truth and prompt-injection attacks on the real environments, through blocking monitors"
    description = __doc__

    def configure(self, parser: argparse.ArgumentParser) -> None:
        """The verb's arguments."""
        parser.formatter_class = argparse.RawDescriptionHelpFormatter
        parser.add_argument("--suite", action="append", choices=SUITES, help="suite (repeatable; default: all four)")
        parser.add_argument(
            "--config",
            action="append",
            metavar="TEXT",
            help="only the configurations whose label contains TEXT (repeatable; default: all)",
        )
        parser.add_argument("--limit", type=int, default=None, metavar="N", help="only the first N user tasks of each suite")
        parser.add_argument("--format", choices=("text", "markdown", "json"), default="text")
        parser.add_argument("--verbose", action="store_true", help="a row per suite, and the first refusals")
        parser.add_argument("--fail-above-attacks", type=int, default=None, metavar="N", help="exit 3 when more attacks succeed")
        parser.add_argument(
            "--fail-above-refused", type=int, default=None, metavar="N", help="exit 3 when more benign calls are refused"
        )
        parser.add_argument(
            "--fail-below-completed", type=int, default=None, metavar="N", help="exit 3 when fewer user tasks are completed"
        )
        parser.add_argument(
            "--gate",
            metavar="TEXT",
            default=None,
            help="the --fail-* thresholds apply to the configurations whose label contains TEXT (default: every one run)",
        )

    def run(self, args: argparse.Namespace) -> int:
        """Run the bench; 1 when a scenario could not be played, 3 when a threshold is exceeded."""
        try:
            import agentdojo  # type: ignore[import-untyped]  # noqa: F401
        except ImportError:
            print('prefixmon bench agentdojo: needs pip install "agentdojo==0.1.35"', file=sys.stderr)
            return 2
        configurations = [c for c in CONFIGURATIONS if not args.config or any(t.lower() in c.label.lower() for t in args.config)]
        if not configurations:
            print(f"prefixmon bench agentdojo: no configuration matches {args.config}", file=sys.stderr)
            return 2
        suites = list(dict.fromkeys(args.suite or SUITES))
        report = run_async(lambda: run_bench(configurations, suites, limit=args.limit))
        if args.format == "json":
            print(json.dumps(report_json(report), indent=2))
        else:
            print(format_report(report, args.format, verbose=args.verbose))
        if report.failures:
            return 1
        exceeded = []
        for label in report.labels:
            if args.gate and args.gate.lower() not in label.lower():
                continue
            t = report.total(label)
            if args.fail_below_completed is not None and t.completed < args.fail_below_completed:
                exceeded.append(f"{label}: {t.completed} user tasks completed (below {args.fail_below_completed})")
            if args.fail_above_attacks is not None and t.attacks_succeeded > args.fail_above_attacks:
                exceeded.append(f"{label}: {t.attacks_succeeded} attacks succeed (above {args.fail_above_attacks})")
            if args.fail_above_refused is not None and t.benign_refused > args.fail_above_refused:
                exceeded.append(f"{label}: {t.benign_refused} benign calls refused (above {args.fail_above_refused})")
        for line in exceeded:
            print(f"prefixmon bench agentdojo: {line}", file=sys.stderr)
        return 3 if exceeded else 0


BENCH: Final = AgentDojoBench()
"""The ``agentdojo`` entry point of ``prefixmon.bench``."""
