"""The ``prefixmon`` command line.

Each verb is a pair of small functions: ``add_<verb>_command(subparsers)`` declares its
arguments and sets ``handler``; ``run_<verb>(args) -> exit code`` does the work. Verbs are
listed in :data:`COMMANDS`; adding one is adding a pair and a line there.

Heavy imports (numpy, rich, matplotlib) happen inside the handlers, so ``prefixmon
--help`` works without the ``analytics`` extra.

Exit codes: 0 success, 1 bad input (a bad record line, a missing file, a missing extra),
2 usage error (argparse), 130 interrupted.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import IO, TYPE_CHECKING, Final

from . import __version__
from .exceptions import PrefixmonError

if TYPE_CHECKING:
    from .analytics.bootstrap import ProgressFn

PROGRESS_MIN_WORK: Final = 5_000_000
"""Resampled tasks (resamples x tasks) above which a TTY gets a progress bar."""


def _csv_list(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def _int_list(text: str) -> list[int]:
    try:
        return [int(part) for part in _csv_list(text)]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated depths like 1,2,4,8; got {text!r}") from None


def add_report_command(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``prefixmon report``: metrics, intervals, plots and review sheets from record files."""
    p = subparsers.add_parser(
        "report",
        help="prefix-executability report (PEC, FED, TER, AUC-PEC, RR) from episode records",
        description=(
            "Group episodes into cohorts by label keys and report PEC, FED, TER, AUC-PEC, RR, "
            "final success and S/P/F completion, with a paired task-level bootstrap (the same "
            "resampled task ids for every cohort of a dataset that ran the same tasks; comparisons "
            "of cohorts with different task sets use the tasks both ran) and Wilson intervals for RR."
        ),
    )
    p.add_argument("records", nargs="+", metavar="RECORDS", help="episode record files (JSON Lines) or OTLP JSON trace files")
    p.add_argument(
        "--by",
        type=_csv_list,
        default=None,
        metavar="KEYS",
        help="label keys that define cohorts, comma-separated (default: dataset,model,method, those present)",
    )
    p.add_argument(
        "--format", choices=("table", "json", "markdown", "csv"), default="table", help="output format (default: table)"
    )
    p.add_argument("--bootstrap", type=int, default=10_000, metavar="N", help="bootstrap resamples, 0 to skip (default: 10000)")
    p.add_argument("--seed", type=int, default=0, metavar="S", help="bootstrap seed (default: 0)")
    p.add_argument("--confidence", type=float, default=0.95, metavar="LEVEL", help="interval level (default: 0.95)")
    p.add_argument(
        "--strata",
        default="dataset",
        metavar="KEY",
        help="label key within whose values task ids are resampled (default: dataset; 'none' for one stratum)",
    )
    p.add_argument(
        "--checkpoints", type=_int_list, default=None, metavar="DEPTHS", help="PEC checkpoint depths (default: 1,2,3,4,6,8,10)"
    )
    p.add_argument(
        "--compare",
        action="append",
        default=[],
        metavar="A,B",
        help="paired differences between cohorts, e.g. method=dual_loop,method=react (repeatable; "
        "join several keys of one side with '+')",
    )
    p.add_argument("--plot", metavar="FILE", help="write PEC curves to FILE (.png, .svg or .pdf)")
    p.add_argument("--max-depth", type=int, default=None, metavar="K", help="last depth of the plot's x axis")
    p.add_argument("--annotations", metavar="FILE", help="human failure attributions (CSV or JSON Lines)")
    p.add_argument("--review-sheet", metavar="FILE", help="write the review sample (all F and P, a share of S) as CSV")
    p.add_argument("--review-fraction", type=float, default=0.2, metavar="F", help="share of successes to review (default: 0.2)")
    p.add_argument("--output", "-o", metavar="FILE", help="write the report to FILE instead of stdout")
    p.add_argument(
        "--on-error",
        choices=("raise", "skip"),
        default="raise",
        help="a bad record line stops the report (raise, default) or is skipped and counted (skip)",
    )
    p.add_argument(
        "--validate",
        action="store_true",
        help="validate every record with pydantic (slower) instead of the fast column loader",
    )
    p.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="bootstrap progress bar on stderr (default: on for long bootstraps when stderr is a terminal)",
    )
    p.set_defaults(handler=run_report)


def run_report(args: argparse.Namespace) -> int:
    """Handler of ``prefixmon report``."""
    from .analytics import build_report, load_columns, plot_pec, render, render_table, review_sample, write_review_sheet
    from .analytics.columns import columns_from_records, distinct_episodes
    from .analytics.metrics import group
    from .analytics.report import DEFAULT_CHECKPOINTS
    from .records import BadLine, read_records

    skipped: list[BadLine] = []
    if args.validate:
        columns = columns_from_records(read_records(*args.records, on_error=args.on_error, errors=skipped))
    else:
        columns = load_columns(*args.records, on_error=args.on_error, errors=skipped)
    for bad in skipped[:5]:
        print(f"prefixmon report: skipped {bad.path}:{bad.line}: {bad.message}", file=sys.stderr)
    if len(skipped) > 5:
        print(f"prefixmon report: ... {len(skipped)} bad lines skipped in all", file=sys.stderr)
    strata = None if args.strata.lower() == "none" else args.strata
    with _progress_bar(args.progress, args.bootstrap, len(columns.task_ids)) as progress:
        report = build_report(
            columns,
            by=args.by,
            bootstrap=args.bootstrap,
            seed=args.seed,
            confidence=args.confidence,
            checkpoints=args.checkpoints or DEFAULT_CHECKPOINTS,
            strata=strata,
            compare=args.compare,
            annotations=args.annotations,
            skipped=skipped,
            progress=progress,
        )
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
        plot_pec(report, args.plot, max_depth=args.max_depth)
        print(f"prefixmon report: PEC plot written to {args.plot}", file=sys.stderr)
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


def add_demo_command(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``prefixmon demo``: scripted agents through the monitor, then the report."""
    p = subparsers.add_parser(
        "demo",
        help="run scripted agents with different error habits through the monitor and report",
        description=(
            "Run a population of scripted agents (careful, plan-conditioned, sloppy) on a small "
            "phone-assistant tool layer through a blocking monitor, log first failures live, "
            "write episode records and OTLP traces to a folder, and print the report."
        ),
    )
    p.add_argument("--out", default="prefixmon-demo", metavar="DIR", help="output folder (default: %(default)s)")
    p.add_argument("--tasks", type=int, default=30, metavar="N", help="tasks per agent (default: %(default)s)")
    p.add_argument("--trials", type=int, default=2, metavar="N", help="rollouts per task (default: %(default)s)")
    p.add_argument("--seed", type=int, default=7, help="seed of tasks and agents (default: %(default)s)")
    p.add_argument("--bootstrap", type=int, default=2000, metavar="N", help="bootstrap resamples (default: %(default)s)")
    p.add_argument("--quiet", action="store_true", help="do not print live first-failure events")
    p.set_defaults(handler=run_demo)


def run_demo(args: argparse.Namespace) -> int:
    """Run the demo; returns the exit code."""
    from .demo import main as demo_main

    return demo_main(
        out=args.out, tasks=args.tasks, trials=args.trials, seed=args.seed, bootstrap=args.bootstrap, live=not args.quiet
    )


def _key_value(text: str) -> str:
    if "=" not in text or text.startswith("="):
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return text


def add_replay_command(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``prefixmon replay``: turn recorded agent runs into episode records."""
    p = subparsers.add_parser(
        "replay",
        help="judge recorded agent runs (BFCL result files, tau-bench or OpenAI-messages transcripts)",
        description=(
            "Replay recorded runs through the monitor and write one episode record per rollout: "
            "--bfcl for BFCL multi-turn result files (replayed on the real environment classes), "
            "--domain tau-airline|tau-retail for tau-bench trajectories, --tools TOOLS.json for "
            "generic OpenAI-messages JSON Lines transcripts."
        ),
    )
    p.add_argument("files", nargs="+", metavar="FILE", help="result or transcript files")
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--bfcl", action="store_true", help="the files are BFCL multi-turn result files")
    source.add_argument("--domain", choices=("tau-airline", "tau-retail"), help="tau-bench domain of the transcripts")
    source.add_argument("--tools", metavar="TOOLS.json", help="OpenAI tool definitions for generic transcripts")
    p.add_argument("--out", required=True, metavar="RECORDS.jsonl", help="episode records are written here")
    p.add_argument("--label", action="append", default=[], type=_key_value, metavar="KEY=VALUE", help="label every record")
    p.add_argument("--mode", choices=("declared", "dry_run", "none"), default="declared", help="BFCL precondition mode")
    p.add_argument("--format", choices=("auto", "tau", "openai-jsonl"), default="auto", help="transcript format")
    p.add_argument("--data", metavar="DIR", help="tau-bench data folder (default: $PREFIXMON_TAU_DATA or ../shared/data)")
    p.set_defaults(handler=run_replay)


def run_replay(args: argparse.Namespace) -> int:
    """Dispatch ``replay`` to the BFCL or the transcript replayer."""
    if args.bfcl:
        from .adapters.bfcl import replay as bfcl_replay

        return bfcl_replay.run(args)
    from .adapters.taubench import replay as tau_replay

    if len(args.files) != 1:
        print("prefixmon replay: transcripts are replayed one file at a time", file=sys.stderr)
        return 2
    args.file = args.files[0]
    args.label = [tuple(item.split("=", 1)) for item in args.label]
    return tau_replay.run(args)


def add_bench_command(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``prefixmon bench``: the predicate against real benchmark environments."""
    p = subparsers.add_parser("bench", help="check the monitor against benchmark environments (bfcl, tau)")
    benches = p.add_subparsers(dest="bench", metavar="BENCH", required=True)
    bfcl_help = "BFCL multi-turn: ground truth and perturbations, labelled by execution"
    try:
        from .adapters.bfcl import bench as bfcl_bench
    except ImportError as e:  # bfcl-eval is installed as its own step; say how
        error = e
        missing = benches.add_parser("bfcl", help=bfcl_help)
        missing.add_argument("rest", nargs=argparse.REMAINDER)
        missing.set_defaults(handler=lambda _: _missing_bfcl(error))
    else:
        bfcl = benches.add_parser("bfcl", help=bfcl_help, description=(bfcl_bench.__doc__ or "").split("\n\n")[0])
        bfcl_bench.configure_parser(bfcl)
        bfcl.set_defaults(handler=bfcl_bench.run)
    tau = benches.add_parser(
        "tau",
        help="tau-bench airline and retail: gold sequences and perturbed-gold agreement with the sandbox",
    )
    tau.add_argument("--split", action="append", help="task split (default: airline_test, retail_test, retail_dev)")
    tau.add_argument("--seed", type=int, default=0)
    tau.add_argument("--data", metavar="DIR", help="tau-bench data folder")
    tau.set_defaults(handler=run_bench_tau)


def _missing_bfcl(error: ImportError) -> int:
    print(
        f"prefixmon bench bfcl: {error}; install the BFCL data with `pip install --no-deps bfcl-eval==2026.3.23 mpmath==1.3.0`",
        file=sys.stderr,
    )
    return 1


def run_bench_tau(args: argparse.Namespace) -> int:
    """Gold-sequence report and perturbed-gold agreement for tau-bench."""
    import anyio

    from .adapters.taubench import agreement, gold

    splits = args.split or list(gold.DEFAULT_SPLITS)
    print(gold.report(splits, data=args.data))
    print()
    summary = anyio.run(lambda: agreement.run_suite(splits, seed=args.seed, data=args.data))
    print(agreement.format_summary(summary))
    return 0


COMMANDS: list[Callable[[argparse._SubParsersAction[argparse.ArgumentParser]], None]] = [
    add_demo_command,
    add_report_command,
    add_replay_command,
    add_bench_command,
]
"""Verb declarations, in help order."""


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser (every verb in :data:`COMMANDS`)."""
    parser = argparse.ArgumentParser(
        prog="prefixmon",
        description="Prefix-executability monitor and metrics for tool-using LLM agents.",
    )
    parser.add_argument("--version", action="version", version=f"prefixmon {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for add in COMMANDS:
        add(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``prefixmon`` console script; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    handler: Callable[[argparse.Namespace], int] = args.handler
    try:
        return handler(args)
    except KeyboardInterrupt:
        print(f"prefixmon {args.command}: interrupted", file=sys.stderr)
        return 130
    except (PrefixmonError, ValueError, OSError, ImportError) as e:
        print(f"prefixmon {args.command}: error: {_describe(e)}", file=sys.stderr)
        return 1
    except (RecursionError, MemoryError, OverflowError) as e:  # input past what a reader guards against
        what = "nested too deeply" if isinstance(e, RecursionError) else "too large"
        print(f"prefixmon {args.command}: error: the input is {what} to process ({type(e).__name__})", file=sys.stderr)
        return 1


def _describe(e: BaseException) -> str:
    if isinstance(e, FileNotFoundError) and e.filename:
        return f"no such file: {os.fspath(e.filename)}"
    if isinstance(e, ImportError):
        hint = str(e) if str(e).startswith("pip install") else 'pip install "prefixmon[analytics]"'
        return f"a package is missing; install it with: {hint}"
    return str(e)


if __name__ == "__main__":
    raise SystemExit(main())
