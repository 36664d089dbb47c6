"""``prefixmon bench bfcl``: the predicate against BFCL's real environments.

Replays each task's ground truth and perturbations of it (see :mod:`.perturb`) through the
monitor (policy ``observe``: every call runs, so the rollout after a failure is kept) and
labels each variant by executing it on a fresh environment. Reports

(a) PEC, TER, mean FED and AUC-PEC of the ground truth and of each perturbation family;
(b) agreement of the monitor's FED, and of its cause (interface vs environment), with the
    execution labels;
(c) pre-call prediction of environment rejections: precision and recall with the declared
    preconditions only, and with the dry-run mode.

Ground-truth variants the environment itself refuses are BFCL data bugs; they are listed by
task id.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Final

from prefixmon import Cause, EpisodeRecord, Monitor
from prefixmon.analytics import Confusion
from prefixmon.commands import run_async
from prefixmon.records.model import write_records

from .._bench import auc_pec, fmt, pec, prediction_header, prediction_row, ter
from .data import CATEGORIES, BfclTask, load_tasks
from .perturb import FAMILIES, Execution, Variant, execute, ground_truth_calls, perturb
from .specs import build_toolset, run_task

__all__ = (
    "BENCH",
    "GROUND_TRUTH",
    "PEC_DEPTHS",
    "BenchReport",
    "BfclBench",
    "Confusion",
    "FamilyStats",
    "configure_parser",
    "format_report",
    "report_json",
    "run",
    "run_bench",
)

GROUND_TRUTH: Final = "ground_truth"
PEC_DEPTHS: Final = (1, 2, 3, 5, 10)


@dataclass(slots=True)
class FamilyStats:
    """Per family: the monitor's records and the execution labels."""

    n: int = 0
    feds: list[tuple[int, int]] = field(default_factory=list)
    """(monitor FED, horizon) per variant."""
    label_feds: list[int] = field(default_factory=list)
    fed_agree: int = 0
    cause_agree: int = 0
    cause_n: int = 0


@dataclass(slots=True)
class BenchReport:
    """Everything the bench measured."""

    tasks: int = 0
    variants: int = 0
    seconds: float = 0.0
    families: dict[str, FamilyStats] = field(default_factory=dict)
    prediction: dict[str, Confusion] = field(default_factory=dict)
    data_bugs: list[tuple[str, int, str, str]] = field(default_factory=list)
    """Ground-truth failures by execution: (task id, depth, call, why)."""
    disagreements: list[tuple[str, str, str, str]] = field(default_factory=list)
    """(task id, family, note, what differed), first few kept."""
    records: list[EpisodeRecord] = field(default_factory=list)
    """The monitor's records in the declared mode (labels: dataset, category, family, method)."""

    @property
    def fed_agreement(self) -> float:
        """Share of variants whose monitor FED equals the execution label's."""
        n = sum(f.n for f in self.families.values())
        return sum(f.fed_agree for f in self.families.values()) / n if n else 1.0

    @property
    def cause_agreement(self) -> float:
        """Among variants failing at the same depth, share whose cause class matches."""
        n = sum(f.cause_n for f in self.families.values())
        return sum(f.cause_agree for f in self.families.values()) / n if n else 1.0


def _label_class(execution: Execution) -> str | None:
    first = execution.first
    if first is None:
        return None
    return "interface" if first.refused is not None else "environment"


def _record_class(record: EpisodeRecord) -> str | None:
    if record.first_failure is None:
        return None
    return "interface" if record.first_failure.cause is Cause.SCHEMA else "environment"


async def run_bench(
    tasks: Iterable[BfclTask],
    *,
    per_family: int = 2,
    seed: int = 0,
    keep_disagreements: int = 20,
) -> BenchReport:
    """Run the bench over ``tasks``.

    Args:
        per_family: perturbations per family and task (positions drawn with ``seed``).
    """
    started = time.perf_counter()
    declared = Monitor(build_toolset("declared"))
    dry = Monitor(build_toolset("dry_run"))
    report = BenchReport()
    report.prediction = {"declared": Confusion(), "dry_run": Confusion()}
    rng = random.Random(seed)
    for task in tasks:
        report.tasks += 1
        gt = Variant(task=task, family=GROUND_TRUTH, note="ground truth", turns=ground_truth_calls(task))
        for variant in (gt, *perturb(task, rng, per_family=per_family)):
            report.variants += 1
            label = execute(task, variant.turns)
            if variant.family == GROUND_TRUTH and label.first is not None:
                first = label.first
                report.data_bugs.append((task.id, first.depth, first.call.to_source(), first.refused or first.rejected or ""))
            labels = {"dataset": "bfcl", "category": task.category, "family": variant.family}
            records: dict[str, EpisodeRecord] = {}
            for mode, monitor in (("declared", declared), ("dry_run", dry)):
                run = await run_task(monitor, task, variant.turns, labels={**labels, "method": mode})
                assert run.episode.record is not None
                records[mode] = run.episode.record
            report.records.append(records["declared"])
            _score(report, variant, label, records, keep_disagreements)
    report.seconds = time.perf_counter() - started
    return report


def _score(report: BenchReport, variant: Variant, label: Execution, records: dict[str, EpisodeRecord], keep: int) -> None:
    stats = report.families.setdefault(variant.family, FamilyStats())
    record = records["declared"]
    stats.n += 1
    stats.feds.append((record.fed, record.horizon))
    stats.label_feds.append(label.fed)
    if record.fed == label.fed:
        stats.fed_agree += 1
        if label.first is not None:
            stats.cause_n += 1
            if _label_class(label) == _record_class(record):
                stats.cause_agree += 1
            elif len(report.disagreements) < keep:
                report.disagreements.append(
                    (
                        variant.task.id,
                        variant.family,
                        variant.note,
                        f"cause {record.first_failure.cause if record.first_failure else None} vs label {_label_class(label)}",
                    )
                )
    elif len(report.disagreements) < keep:
        report.disagreements.append(
            (
                variant.task.id,
                variant.family,
                variant.note,
                f"monitor FED {record.fed} ({record.first_failure.reason if record.first_failure else 'executable'}) "
                f"vs label FED {label.fed} ({label.first.refused or label.first.rejected if label.first else 'executable'})",
            )
        )
    for mode, rec in records.items():
        confusion = report.prediction[mode]
        for call_label, action in zip(label.calls, rec.actions, strict=True):
            if not call_label.reached:
                continue
            predicted = not action.executable and action.cause is not Cause.STATE_CONSISTENCY
            confusion.add(predicted, call_label.rejected is not None)


def format_report(report: BenchReport) -> str:
    """The report as plain text tables."""
    lines = [
        f"BFCL multi-turn bench: {report.tasks} tasks, {report.variants} variants, {report.seconds:.1f} s",
        "",
        "(a) prefix executability (monitor, declared preconditions; label = execution)",
        f"{'family':<14}{'n':>6}{'TER':>8}{'label TER':>10}{'mean FED':>10}{'AUC-PEC':>9}"
        + "".join(f"{'PEC@' + str(k):>8}" for k in PEC_DEPTHS),
    ]
    order = [GROUND_TRUTH, *FAMILIES]
    for fam in order:
        s = report.families.get(fam)
        if s is None or not s.n:
            continue
        label_ter = sum(1 for lf, (_, t) in zip(s.label_feds, s.feds, strict=True) if lf == t + 1) / s.n
        mean_fed = sum(f for f, _ in s.feds) / s.n
        lines.append(
            f"{fam:<14}{s.n:>6}{ter(s.feds):>8.3f}{label_ter:>10.3f}{mean_fed:>10.2f}{auc_pec(s.feds):>9.3f}"
            + "".join(f"{pec(s.feds, k):>8.3f}" for k in PEC_DEPTHS)
        )
    lines += ["", "(b) agreement with execution labels", f"{'family':<14}{'FED agree':>10}{'cause agree':>12}"]
    for fam in order:
        s = report.families.get(fam)
        if s is None or not s.n:
            continue
        cause = s.cause_agree / s.cause_n if s.cause_n else None
        lines.append(f"{fam:<14}{s.fed_agree / s.n:>10.4f}{fmt(cause):>12}")
    lines.append(f"{'all':<14}{report.fed_agreement:>10.4f}{report.cause_agreement:>12.4f}")
    lines += [
        "",
        "(c) pre-call prediction of environment rejections (calls that reached the environment)",
        prediction_header(14, 8),
    ]
    lines += [prediction_row(mode, c, 14, 8) for mode, c in report.prediction.items()]
    lines += ["", f"ground truth refused by execution (BFCL data bugs): {len(report.data_bugs)}"]
    lines += [f"  {tid} depth {d}: {call[:70]}  -- {why[:90]}" for tid, d, call, why in report.data_bugs]
    if report.disagreements:
        lines += ["", "first disagreements:"]
        lines += [f"  {tid} [{fam}] {note[:60]}: {what[:160]}" for tid, fam, note, what in report.disagreements]
    return "\n".join(lines)


def report_json(report: BenchReport) -> dict[str, Any]:
    """The report as JSON-ready data."""
    fams = {}
    for fam, s in report.families.items():
        fams[fam] = {
            "n": s.n,
            "ter": ter(s.feds),
            "mean_fed": sum(f for f, _ in s.feds) / s.n if s.n else None,
            "auc_pec": auc_pec(s.feds),
            "pec": {str(k): pec(s.feds, k) for k in PEC_DEPTHS},
            "fed_agreement": s.fed_agree / s.n if s.n else None,
            "cause_agreement": s.cause_agree / s.cause_n if s.cause_n else None,
        }
    return {
        "tasks": report.tasks,
        "variants": report.variants,
        "seconds": report.seconds,
        "families": fams,
        "fed_agreement": report.fed_agreement,
        "cause_agreement": report.cause_agreement,
        "prediction": {m: c.as_dict() for m, c in report.prediction.items()},
        "data_bugs": [{"task_id": t, "depth": d, "call": c, "why": w} for t, d, c, w in report.data_bugs],
    }


def configure_parser(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``prefixmon bench bfcl``."""
    parser.add_argument(
        "--categories", nargs="+", default=list(CATEGORIES), choices=CATEGORIES, help="multi-turn categories (default: all four)"
    )
    parser.add_argument("--per-family", type=int, default=2, metavar="N", help="perturbations per family and task (default: 2)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the perturbation positions")
    parser.add_argument("--limit", type=int, default=None, metavar="N", help="only the first N tasks of each category")
    parser.add_argument(
        "--out", default=None, metavar="RECORDS.jsonl", help="write the monitor's episode records (declared mode) here"
    )
    parser.add_argument("--format", choices=("table", "json"), default="table")


def run(args: argparse.Namespace) -> int:
    """Run the bench; prints the report. Returns 0, or 1 if a target was missed."""
    if args.per_family < 0:
        print("prefixmon bench bfcl: --per-family must be >= 0", file=sys.stderr)
        return 2
    tasks = []
    for category in args.categories:
        chunk = load_tasks([category])
        tasks.extend(chunk[: args.limit] if args.limit is not None else chunk)
    report = run_async(lambda: run_bench(tasks, per_family=args.per_family, seed=args.seed))
    if args.out:
        write_records(args.out, report.records)
    if args.format == "json":
        print(json.dumps(report_json(report), indent=2))
    else:
        print(format_report(report))
    dec, dry = report.prediction["declared"], report.prediction["dry_run"]
    ok = (
        report.fed_agreement >= 0.99
        and (dec.recall or 0) >= 0.90
        and (dec.precision or 0) >= 0.99
        and dry.recall == 1.0
        and dry.precision == 1.0
    )
    return 0 if ok else 1


class BfclBench:
    """``prefixmon bench bfcl`` (the ``bfcl`` entry point of ``prefixmon.bench``)."""

    help = "BFCL multi-turn: ground truth and perturbations, labelled by execution"
    description = (__doc__ or "").split("\n\n")[0]

    def configure(self, parser: argparse.ArgumentParser) -> None:
        """The bench's arguments."""
        configure_parser(parser)

    def run(self, args: argparse.Namespace) -> int:
        """Run the bench."""
        return run(args)


BENCH: Final = BfclBench()
