"""``prefixmon report``: metrics, intervals, plots and review sheets from record files."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import sys
from collections import Counter
from collections.abc import Iterator, Sequence
from typing import IO, TYPE_CHECKING, Final

from .args import csv_list, fraction, int_list, level, non_negative_int, positive_int
from .paths import InputProblem, check_input, check_inputs, check_output

if TYPE_CHECKING:
    from ..analytics.bootstrap import ProgressFn
    from ..analytics.columns import EpisodeColumns
    from ..analytics.report import Report
    from ..records.model import BadLine

PROGRESS_MIN_WORK: Final = 5_000_000
"""Resampled tasks (resamples x tasks) above which a TTY gets a progress bar."""


class ReportCommand:
    """``prefixmon report``."""

    help = "prefix-executability report (PEC, FED, TER, AUC-PEC, RR) from episode records"
    description = (
        "Group episodes into cohorts by label keys and report PEC, FED, TER, AUC-PEC, RR, "
        "final success and S/P/F completion, with a paired task-level bootstrap (the same "
        "resampled task ids for every cohort of a dataset that ran the same tasks; comparisons "
        "of cohorts with different task sets use the tasks both ran) and Wilson intervals for RR."
    )

    def configure(self, parser: argparse.ArgumentParser) -> None:
        """The verb's arguments."""
        parser.add_argument(
            "records", nargs="+", metavar="RECORDS", help="episode record files (JSON Lines) or OTLP JSON trace files"
        )
        parser.add_argument(
            "--engine",
            choices=("python", "duckdb", "spark"),
            default=None,
            help="who computes the report: python (in process), duckdb or spark (SQL over Parquet inputs; "
            "Poisson bootstrap paired by task id). Default: duckdb when every input is Parquet, else python",
        )
        parser.add_argument(
            "--by",
            type=csv_list,
            default=None,
            metavar="KEYS",
            help="label keys that define cohorts, comma-separated (default: dataset,model,method, those present)",
        )
        parser.add_argument(
            "--format", choices=("table", "json", "markdown", "csv"), default="table", help="output format (default: table)"
        )
        parser.add_argument(
            "--bootstrap",
            type=non_negative_int,
            default=10_000,
            metavar="N",
            help="bootstrap resamples, 0 to skip (default: 10000)",
        )
        parser.add_argument("--seed", type=non_negative_int, default=0, metavar="S", help="bootstrap seed (default: 0)")
        parser.add_argument("--confidence", type=level, default=0.95, metavar="LEVEL", help="interval level (default: 0.95)")
        parser.add_argument(
            "--strata",
            default="dataset",
            metavar="KEY",
            help="label key within whose values task ids are resampled (default: dataset; 'none' for one stratum)",
        )
        parser.add_argument(
            "--checkpoints", type=int_list, default=None, metavar="DEPTHS", help="PEC checkpoint depths (default: 1,2,3,4,6,8,10)"
        )
        parser.add_argument(
            "--compare",
            action="append",
            default=[],
            metavar="A,B",
            help="paired differences between cohorts, e.g. method=dual_loop,method=react (repeatable; "
            "join several keys of one side with '+')",
        )
        parser.add_argument("--plot", metavar="FILE", help="write PEC curves to FILE (.png, .svg or .pdf)")
        parser.add_argument("--max-depth", type=positive_int, default=None, metavar="K", help="last depth of the plot's x axis")
        parser.add_argument("--annotations", metavar="FILE", help="human failure attributions (CSV or JSON Lines)")
        parser.add_argument("--review-sheet", metavar="FILE", help="write the review sample (all F and P, a share of S) as CSV")
        parser.add_argument(
            "--review-fraction", type=fraction, default=0.2, metavar="F", help="share of successes to review (default: 0.2)"
        )
        parser.add_argument("--output", "-o", metavar="FILE", help="write the report to FILE instead of stdout")
        parser.add_argument(
            "--on-error",
            choices=("raise", "skip"),
            default="raise",
            help="a bad record line stops the report (raise, default) or is skipped and counted (skip)",
        )
        parser.add_argument(
            "--validate",
            action="store_true",
            help="validate every record with pydantic (slower) instead of the fast column loader",
        )
        parser.add_argument(
            "--progress",
            action=argparse.BooleanOptionalAction,
            default=None,
            help="bootstrap progress bar on stderr (default: on for long bootstraps when stderr is a terminal)",
        )

    def run(self, args: argparse.Namespace) -> int:
        """Build and print the report."""
        return run_report(args)


def _engine(args: argparse.Namespace) -> str:
    """The engine to use; SQL engines read Parquet only and do not do everything the in-process one does.

    Raises:
        ValueError: an input or an option the chosen SQL engine cannot take.
    """
    from ..records.parquet import is_parquet

    parquet = all(is_parquet(p) for p in args.records)
    engine: str | None = args.engine
    if engine is None:
        if not parquet:
            return "python"
        try:
            import duckdb  # noqa: F401
        except ImportError:
            print(
                'prefixmon report: duckdb is not installed (pip install "prefixmon[duckdb]"); reading the Parquet input in process',  # noqa: E501
                file=sys.stderr,
            )
            return "python"
        engine = "duckdb"
    if engine == "python":
        return engine
    if not parquet:
        others = ", ".join(p for p in args.records if not is_parquet(p))
        raise ValueError(
            f"--engine {engine} reads Parquet files; convert {others} with `prefixmon export ... --out FILE.parquet`"
        )
    unsupported = [
        flag
        for flag, used in (
            ("--compare", bool(args.compare)),
            ("--annotations", bool(args.annotations)),
            ("--review-sheet", bool(args.review_sheet)),
            ("--validate", bool(args.validate)),
            ("--on-error skip", args.on_error == "skip"),
        )
        if used
    ]
    if unsupported:
        raise ValueError(f"{', '.join(unsupported)}: computed by the in-process engine only; use --engine python")
    return engine


def _check_plot_format(path: str) -> None:
    """Refuse a ``--plot`` file whose extension matplotlib cannot write, before any work.

    Raises:
        InputProblem: the extension is missing or unknown; names the option.
        ImportError: matplotlib is missing.
    """
    from ..analytics._optional import INSTALL_HINT

    try:
        from matplotlib.backend_bases import FigureCanvasBase
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError(INSTALL_HINT) from e
    suffix = os.path.splitext(path)[1].lower().removeprefix(".")
    if suffix not in FigureCanvasBase.get_supported_filetypes():
        raise InputProblem(f"--plot {path}: unknown image format {suffix or '(no extension)'!r}; use .png, .svg or .pdf")


def run_report(args: argparse.Namespace) -> int:
    """Handler of ``prefixmon report``."""
    check_inputs(args.records, jsonl=True)
    if args.annotations:
        check_input(args.annotations, option="--annotations")
    for option, out in (("--output", args.output), ("--plot", args.plot), ("--review-sheet", args.review_sheet)):
        if out:  # before any work: a report computed and then lost to a missing folder helps nobody
            check_output(out, option=option)
    if args.plot:
        _check_plot_format(args.plot)
    engine = _engine(args)
    if engine != "python":
        return _run_sql_report(args, engine)
    from ..analytics import build_report, load_columns, review_sample, write_review_sheet
    from ..analytics.columns import columns_from_records, distinct_episodes
    from ..analytics.metrics import group
    from ..analytics.report import DEFAULT_CHECKPOINTS
    from ..records.parquet import iter_file_records

    skipped: list[BadLine] = []
    if args.validate:
        columns = columns_from_records(iter_file_records(args.records, on_error=args.on_error, errors=skipped))
    else:
        columns = load_columns(*args.records, on_error=args.on_error, errors=skipped)
    for bad in skipped[:5]:
        print(f"prefixmon report: skipped {bad.path}:{bad.line}: {bad.message}", file=sys.stderr)
    if len(skipped) > 5:
        print(f"prefixmon report: ... {len(skipped)} bad lines skipped in all", file=sys.stderr)
    if not len(columns):
        raise InputProblem(_no_episodes(args.records, skipped))
    strata = None if args.strata.lower() == "none" else args.strata
    checkpoints = tuple(args.checkpoints or DEFAULT_CHECKPOINTS)
    with _progress_bar(args.progress, args.bootstrap, len(columns.task_ids)) as progress:
        plotted = build_report(
            columns,
            by=args.by,
            bootstrap=args.bootstrap,
            seed=args.seed,
            confidence=args.confidence,
            checkpoints=with_plot_depths(checkpoints, columns, args.max_depth) if args.plot else checkpoints,
            strata=strata,
            compare=args.compare,
            annotations=args.annotations,
            skipped=skipped,
            progress=progress,
        )
    report = only_checkpoints(plotted, checkpoints)
    _output(report, args, plotted)
    if args.review_sheet:
        columns, _ = distinct_episodes(columns)
        grouping = group(columns, report.by, None)
        items = review_sample(columns, fraction=args.review_fraction, seed=args.seed, cohort=grouping.cohort)
        n = write_review_sheet(args.review_sheet, items)
        print(
            f"prefixmon report: review sheet with {n} episodes written to {args.review_sheet} "
            "(fill the five checklist columns with yes/no and 'attribution' with model/tool/environment/task; "
            "then pass it back with --annotations)",
            file=sys.stderr,
        )
    return 0


def _run_sql_report(args: argparse.Namespace, engine: str) -> int:
    """``prefixmon report FILE.parquet --engine duckdb|spark``."""
    from ..analytics.engines import engine_report
    from ..analytics.report import DEFAULT_CHECKPOINTS

    report = engine_report(
        args.records,
        engine="spark" if engine == "spark" else "duckdb",
        by=args.by,
        bootstrap=args.bootstrap,
        seed=args.seed,
        confidence=args.confidence,
        checkpoints=args.checkpoints or DEFAULT_CHECKPOINTS,
        strata=None if args.strata.lower() == "none" else args.strata,
    )
    if args.bootstrap:
        print(
            f"prefixmon report: {engine}: intervals from a Poisson bootstrap paired by task id (docs/fleet.md)", file=sys.stderr
        )
    _output(report, args)
    return 0


def _output(report: Report, args: argparse.Namespace, plotted: Report | None = None) -> None:
    """Print or write the report, and the plot (of ``plotted``: the report with every plotted depth)."""
    from ..analytics import plot_pec, render, render_table

    if report.duplicates:  # build_report counted each episode id once
        print(
            f"prefixmon report: {len(report.duplicates)} episode(s) read more than once, each counted once "
            f"(first: {report.duplicates[0]!r}); check for duplicate inputs",
            file=sys.stderr,
        )
    if args.output:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(render(report, args.format))
        print(f"prefixmon report: wrote {args.output}", file=sys.stderr)
    elif args.format == "table":
        render_table(report)
    else:
        text = render(report, args.format)
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
    if args.plot:
        plot_pec(plotted if plotted is not None else report, args.plot, max_depth=args.max_depth)
        print(f"prefixmon report: PEC plot written to {args.plot}", file=sys.stderr)


def with_plot_depths(checkpoints: Sequence[int], columns: EpisodeColumns, max_depth: int | None) -> tuple[int, ...]:
    """``checkpoints`` plus every depth a PEC plot of ``columns`` shows, so that its bands have no gaps."""
    from ..analytics.plot import MAX_DEPTH

    longest = int(columns.horizon.max()) if len(columns) else 1
    depth = max_depth if max_depth is not None else max(1, min(MAX_DEPTH, longest))
    return tuple(sorted({*checkpoints, *range(1, depth + 1)}))


def only_checkpoints(report: Report, checkpoints: Sequence[int]) -> Report:
    """``report`` as if built with just ``checkpoints`` (the depths added for a plot's bands dropped).

    The bootstrap draws do not depend on the checkpoints, so the kept intervals are the ones
    a report without the plot has.
    """
    keep = set(checkpoints)
    if set(report.checkpoints) == keep:
        return report

    def kept(metric: str) -> bool:
        return not metric.startswith("pec@") or int(metric.removeprefix("pec@")) in keep

    return dataclasses.replace(
        report,
        checkpoints=tuple(sorted(keep)),
        cohorts=tuple(
            dataclasses.replace(c, checkpoints={k: e for k, e in c.checkpoints.items() if k in keep}) for c in report.cohorts
        ),
        comparisons=tuple(
            dataclasses.replace(cmp, differences={m: e for m, e in cmp.differences.items() if kept(m)})
            for cmp in report.comparisons
        ),
    )


def _no_episodes(paths: Sequence[str], skipped: Sequence[BadLine]) -> str:
    """Why there is nothing to report on, naming the inputs."""
    bad = Counter(b.path for b in skipped)
    parts = [f"{p}: {bad[p]} bad line(s) skipped" if bad[p] else f"{p}: no episode record in it" for p in paths]
    return "no episodes to report on (" + "; ".join(parts) + ")"


@contextlib.contextmanager
def _progress_bar(setting: bool | None, resamples: int, tasks: int, stream: IO[str] | None = None) -> Iterator[ProgressFn | None]:
    """A rich progress bar on stderr, or ``None`` when it should not show.

    ``setting`` None means: show when stderr is a terminal and the bootstrap is long.
    """
    out = sys.stderr if stream is None else stream
    show = setting if setting is not None else (out.isatty() and resamples * tasks >= PROGRESS_MIN_WORK)
    if not show or resamples <= 0:
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

    console = Console(file=out)
    with Progress(
        TextColumn("bootstrap {task.fields[resamples]:,} resamples"),
        BarColumn(),
        TextColumn("{task.percentage:>3.0f}%"),
        TimeRemainingColumn(),
        console=console,
        transient=True,
    ) as bar:
        task = bar.add_task("bootstrap", total=1.0, resamples=resamples)

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done / max(total, 1))

        yield update
