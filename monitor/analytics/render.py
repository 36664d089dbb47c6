"""Renderers of a :class:`~.report.Report`: rich terminal tables, Markdown, CSV, JSON.

Undefined values (RR when nothing failed, PEC_elig past every horizon) print as ``—`` in
tables, an empty cell in CSV and ``null`` in JSON; never as 0.
"""

from __future__ import annotations

import csv
import io
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Literal

from ._optional import INSTALL_HINT
from .columns import CAUSES
from .completion import UnstableTask
from .report import CohortReport, Comparison, Estimate, Report

__all__ = (
    "DASH",
    "FORMATS",
    "MAX_UNSTABLE_ROWS",
    "PIPE_WIDTH",
    "Format",
    "Section",
    "fmt",
    "fmt_estimate",
    "render",
    "render_csv",
    "render_json",
    "render_markdown",
    "render_table",
    "sections",
)

if TYPE_CHECKING:
    from rich.console import Console

Format = Literal["table", "json", "markdown", "csv"]
FORMATS: Final[tuple[str, ...]] = ("table", "json", "markdown", "csv")
DASH: Final = "—"
MAX_UNSTABLE_ROWS: Final = 30
"""Unstable tasks listed in tables; JSON lists them all."""


def fmt(x: float | None, digits: int = 2) -> str:
    """A number with ``digits`` decimals, or ``—`` when undefined."""
    return DASH if x is None else f"{x:.{digits}f}"


def fmt_estimate(e: Estimate, digits: int = 2, *, signed: bool = False) -> tuple[str, str]:
    """``(value, "[low, high]")``; the interval part is empty without an interval."""
    if e.value is None:
        return DASH, ""
    value = f"{e.value:+.{digits}f}" if signed else f"{e.value:.{digits}f}"
    if e.ci is None:
        return value, ""
    return value, f"[{e.ci[0]:.{digits}f}, {e.ci[1]:.{digits}f}]"


@dataclass(frozen=True, slots=True, kw_only=True)
class Section:
    """One table of the report, independent of the output format."""

    title: str
    headers: tuple[str, ...]
    key_columns: int
    """How many leading columns are labels (left-aligned)."""
    rows: tuple[tuple[tuple[str, str], ...], ...]
    """Each cell is ``(value, interval)``; interval may be empty."""
    notes: tuple[str, ...] = ()


def _cell(text: str) -> tuple[str, str]:
    return text, ""


def sections(report: Report) -> list[Section]:
    """The report's tables in display order."""
    by = report.by
    keyed = [tuple(_cell(DASH if c.key[k] is None else str(c.key[k])) for k in by) for c in report.cohorts]
    conf = f"{report.confidence:.0%}"
    interval_note = (
        f"Intervals: {conf} percentile bootstrap, {report.resamples:,} resamples of each cohort's tasks"
        + (f" within each {report.strata}" if report.strata else "")
        + f", the same draws for cohorts that ran the same tasks (paired); seed {report.seed}. "
        "RR: Wilson interval on RR-eligible."
        if report.resamples
        else f"No bootstrap (--bootstrap 0). RR: {conf} Wilson interval on RR-eligible."
    )
    out = [
        Section(
            title=f"Prefix executability ({report.episodes:,} episodes, {len(report.cohorts)} cohorts)",
            headers=(*by, "N", "TER", "mean FED", "AUC-PEC", "success", "RR", "RR-elig."),
            key_columns=len(by),
            rows=tuple(
                (
                    *k,
                    _cell(str(c.n)),
                    fmt_estimate(c.ter),
                    fmt_estimate(c.mean_fed),
                    fmt_estimate(c.auc_pec),
                    fmt_estimate(c.success),
                    fmt_estimate(c.rr),
                    _cell(str(c.rr.eligible)),
                )
                for k, c in zip(keyed, report.cohorts, strict=True)
            ),
            notes=(interval_note, f"{DASH} = undefined: RR has no eligible episode when none failed."),
        ),
        Section(
            title="PEC checkpoints (fixed cohort: reaching depth k with an executable prefix)",
            headers=(*by, *(f"PEC@{k}" for k in report.checkpoints)),
            key_columns=len(by),
            rows=tuple(
                (*k, *(fmt_estimate(c.checkpoints[d]) for d in report.checkpoints))
                for k, c in zip(keyed, report.cohorts, strict=True)
            ),
            notes=("A late decline can be termination before depth k as well as failure (eq. 7).",),
        ),
    ]
    show_none = any(c.outcomes["none"] for c in report.cohorts)
    out.append(
        Section(
            title="Outcomes (S/P/F), success decomposition and first-failure causes",
            headers=(
                *by,
                "S",
                "P",
                "F",
                *(("none",) if show_none else ()),
                "completion",
                "q·s",
                "(1-q)·r",
                *CAUSES,
            ),
            key_columns=len(by),
            rows=tuple(
                (
                    *k,
                    _cell(str(c.outcomes["success"])),
                    _cell(str(c.outcomes["partial"])),
                    _cell(str(c.outcomes["failure"])),
                    *((_cell(str(c.outcomes["none"])),) if show_none else ()),
                    fmt_estimate(c.completion),
                    _cell(fmt(c.decomposition.uninterrupted)),
                    _cell(fmt(c.decomposition.recovered)),
                    *(_cell(str(c.causes[name])) for name in CAUSES),
                )
                for k, c in zip(keyed, report.cohorts, strict=True)
            ),
            notes=(
                "completion = (S + 0.5·P) / N.  success = q·s + (1-q)·r: q·s succeeded with every prefix "
                "executable, (1-q)·r succeeded after a prefix failure (recovery).",
            ),
        )
    )
    if report.comparisons:
        metrics = ("ter", "mean_fed", "auc_pec", "success", "rr", "completion")
        titles = ("ΔTER", "Δmean FED", "ΔAUC-PEC", "Δsuccess", "ΔRR", "Δcompletion")
        compared = [_compare_key(cmp, by) for cmp in report.comparisons]
        within = f" (within each {report.strata})" if report.strata else ""
        notes = [
            f"Each difference is computed on the tasks both sides ran{within}, and its interval from the same "
            "resampled tasks for both sides (paired bootstrap); an interval that excludes 0 is a paired effect "
            "at that level.",
        ]
        if any(cmp.restricted for cmp in report.comparisons):
            notes.append(
                "'paired on n shared tasks': the two cohorts ran different tasks, so both are compared on "
                "the n they share only (their own rows above use all their tasks)."
            )
        left_out = {cmp.differences["rr"].undefined_resamples for cmp in report.comparisons} - {0}
        if left_out:
            notes.append(
                f"ΔRR was undefined in {'' if len(left_out) == 1 else 'up to '}{max(left_out)} of {report.resamples} "
                "resamples (a side had no failed task in them): its interval leaves them out, so it holds given that "
                "both sides failed somewhere."
            )
        if any(not cmp.computable for cmp in report.comparisons):
            notes.append(f"'no shared task': the two cohorts ran no task in common, so there is no paired difference ({DASH}).")
        out.append(
            Section(
                title="Paired differences (a - b)",
                headers=(*by, "tasks", *titles),
                key_columns=len(by) + 1,
                rows=tuple(
                    (*key, *(fmt_estimate(cmp.differences[m], signed=True) for m in metrics))
                    for key, cmp in zip(compared, report.comparisons, strict=True)
                ),
                notes=tuple(notes),
            )
        )
        out.append(
            Section(
                title="Paired differences at the PEC checkpoints (a - b)",
                headers=(*by, "tasks", *(f"ΔPEC@{k}" for k in report.checkpoints)),
                key_columns=len(by) + 1,
                rows=tuple(
                    (*key, *(fmt_estimate(cmp.differences[f"pec@{k}"], signed=True) for k in report.checkpoints))
                    for key, cmp in zip(compared, report.comparisons, strict=True)
                ),
            )
        )
    total = sum(len(c.unstable) for c in report.cohorts)
    # the rows shown: only these tasks are built (see UnstableTasks)
    unstable: list[tuple[tuple[tuple[str, str], ...], CohortReport, UnstableTask]] = []
    for k, c in zip(keyed, report.cohorts, strict=True):
        unstable.extend((k, c, u) for u in c.unstable[: MAX_UNSTABLE_ROWS - len(unstable)])
    if unstable:
        out.append(
            Section(
                title=f"Unstable tasks: reruns disagree ({total})",
                headers=(*by, "task", "runs", "S/P/F", "mean ± spread"),
                key_columns=len(by) + 1,
                rows=tuple(
                    (
                        *k,
                        _cell(u.task_id if "dataset" in by or u.dataset is None else f"{u.task_id} ({u.dataset})"),
                        _cell(str(u.runs)),
                        _cell(
                            "/".join(str(u.outcomes.get(o, 0)) for o in ("success", "partial", "failure"))
                            + (f" +{u.outcomes['none']} none" if u.outcomes.get("none") else "")
                        ),
                        _cell(f"{u.mean:.2f} ± {u.spread:.2f}"),
                    )
                    for k, _, u in unstable[:MAX_UNSTABLE_ROWS]
                ),
                notes=(
                    (f"Showing {MAX_UNSTABLE_ROWS} of {total}; --format json lists all. " if total > MAX_UNSTABLE_ROWS else "")
                    + "Score S = 1, P = 0.5, F = 0; spread = sample standard deviation. An unstable task "
                    "is the first suspect for an environment problem.",
                ),
            )
        )
    if report.attribution:
        out.append(
            Section(
                title="Failure attribution (human review)",
                headers=(
                    *by,
                    "model",
                    "tool",
                    "environment",
                    "task",
                    "unattributed",
                    "model-only completion",
                    "model failure rate",
                ),
                key_columns=len(by),
                rows=tuple(
                    (
                        *k,
                        *(_cell(str(c.attribution.counts[a])) for a in ("model", "tool", "environment", "task", "unattributed")),
                        _cell(fmt(c.attribution.model_only_completion)),
                        _cell(fmt(c.attribution.model_failure_rate)),
                    )
                    for k, c in zip(keyed, report.cohorts, strict=True)
                    if c.attribution is not None
                ),
                notes=(
                    "Only model failures enter cross-model comparison: model-only completion leaves out "
                    "episodes whose failure was put on a tool, the environment or the task. Fix those first.",
                    *(
                        (f"{len(report.unmatched_annotations)} annotation(s) matched no non-success episode.",)
                        if report.unmatched_annotations
                        else ()
                    ),
                ),
            )
        )
    if report.skipped:
        out[0] = Section(
            title=out[0].title,
            headers=out[0].headers,
            key_columns=out[0].key_columns,
            rows=out[0].rows,
            notes=(
                *out[0].notes,
                f"{len(report.skipped)} bad line(s) skipped, first: {report.skipped[0].path}:"
                f"{report.skipped[0].line}: {report.skipped[0].message}",
            ),
        )
    return out


def _compare_key(cmp: Comparison, by: Sequence[str]) -> tuple[tuple[str, str], ...]:
    """The cohort key columns (``a - b`` in each compared key) and the tasks the difference used."""
    cells = []
    for k in by:
        if k in cmp.a:
            cells.append(_cell(f"{_value(cmp.a[k])} - {_value(cmp.b[k])}"))
        else:
            cells.append(_cell(_value(cmp.key.get(k))))
    return (*cells, _cell(_tasks(cmp)))


def _tasks(cmp: Comparison) -> str:
    if not cmp.computable:
        return "no shared task"
    if cmp.restricted:
        return f"paired on {cmp.shared_tasks} shared task{'s' if cmp.shared_tasks != 1 else ''}"
    return str(cmp.shared_tasks)


def _value(v: str | None) -> str:
    return DASH if v is None else str(v)


def render_json(report: Report) -> str:
    """The DESIGN §6 JSON document (strict JSON: no NaN)."""
    return json.dumps(report.to_dict(), indent=2, allow_nan=False, ensure_ascii=False)


def render_markdown(report: Report) -> str:
    """GitHub-flavoured Markdown tables, one per section."""
    lines: list[str] = []
    for s in sections(report):
        lines.append(f"### {s.title}")
        lines.append("")
        lines.append("| " + " | ".join(_md(h) for h in s.headers) + " |")
        lines.append("|" + "|".join(":---" if i < s.key_columns else "---:" for i in range(len(s.headers))) + "|")
        for row in s.rows:
            lines.append("| " + " | ".join(_md(v if not ci else f"{v} {ci}") for v, ci in row) + " |")
        lines.append("")
        lines.extend(f"_{_md(n)}_" for n in s.notes)
        lines.append("")
    return "\n".join(lines)


def _md(text: str) -> str:
    return text.replace("|", "\\|")


def render_csv(report: Report) -> str:
    """One row per cohort (``row=cohort``), then one per paired difference (``row=difference``).

    A difference row's ``tasks`` is the number of shared tasks it was computed on, and its
    ``rr_undefined_resamples`` the resamples ΔRR's interval left out (a side had no failed task).
    """
    metrics = ("ter", "mean_fed", "auc_pec", "success", "rr", "completion")
    cps = [f"pec@{k}" for k in report.checkpoints]
    header = [
        "row",
        *report.by,
        "n",
        "tasks",
        *(f"{m}{suffix}" for m in (*metrics, *cps) for suffix in ("", "_low", "_high")),
        "rr_eligible",
        "success_count",
        "partial_count",
        "failure_count",
        "no_outcome_count",
        *(f"cause_{c}" for c in CAUSES),
        "decomposition_s",
        "unstable_tasks",
        "rr_undefined_resamples",
    ]
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(header)

    def triple(e: Estimate) -> list[object]:
        lo, hi = e.ci if e.ci is not None else ("", "")
        return ["" if e.value is None else e.value, lo, hi]

    for c in report.cohorts:
        ests = [getattr(c, m) for m in metrics] + [c.checkpoints[k] for k in report.checkpoints]
        w.writerow(
            [
                "cohort",
                *("" if c.key[k] is None else c.key[k] for k in report.by),
                c.n,
                c.tasks,
                *(x for e in ests for x in triple(e)),
                c.rr.eligible,
                c.outcomes["success"],
                c.outcomes["partial"],
                c.outcomes["failure"],
                c.outcomes["none"],
                *(c.causes[name] for name in CAUSES),
                "" if c.decomposition.s is None else c.decomposition.s,
                len(c.unstable),
                "",
            ]
        )
    for cmp in report.comparisons:
        key = {**cmp.key, **{k: f"{cmp.a[k]} - {cmp.b[k]}" for k in cmp.a}}
        ests = [cmp.differences[m] for m in (*metrics, *cps)]
        w.writerow(
            [
                "difference",
                *("" if key.get(k) is None else key[k] for k in report.by),
                "",
                cmp.shared_tasks,
                *(x for e in ests for x in triple(e)),
                *([""] * (len(header) - 4 - len(report.by) - 3 * len(ests))),
                cmp.differences["rr"].undefined_resamples,
            ]
        )
    return buf.getvalue()


PIPE_WIDTH: Final = 200
"""Table width when stdout is not a terminal and ``COLUMNS`` is unset."""


def render_table(report: Report, console: Console | None = None) -> None:
    """Print the report as rich tables (to stdout unless a console is given).

    Raises:
        ImportError: rich is missing (``pip install "prefixmon[analytics]"``).
    """
    try:
        from rich.console import Console as RichConsole
        from rich.table import Table
        from rich.text import Text
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError(INSTALL_HINT) from e
    if console is None:  # piped or redirected: wide enough that no column collapses (COLUMNS still wins)
        console = RichConsole()
        if not console.is_terminal and "COLUMNS" not in os.environ:
            console = RichConsole(width=PIPE_WIDTH)
    con = console
    for s in sections(report):
        table = Table(title=s.title, title_justify="left", title_style="bold", header_style="bold")
        for i, h in enumerate(s.headers):
            if i < s.key_columns:
                widest = max([len(h), *(len(row[i][0]) for row in s.rows)])
                table.add_column(h, justify="left", no_wrap=True, min_width=min(widest, 28))
            else:
                table.add_column(h, justify="right", no_wrap=True)
        for row in s.rows:
            cells = []
            for v, ci in row:
                t = Text(v)
                if ci:  # the interval goes on its own line: keeps wide tables readable
                    t.append("\n" + ci, style="dim")
                cells.append(t)
            table.add_row(*cells)
        con.print(table)
        for n in s.notes:
            con.print(Text(n, style="dim"))
        con.print()


def render(report: Report, fmt_: Format | str = "table", *, width: int = 160) -> str:
    """The report as text in one of :data:`FORMATS` (``table`` is rich's plain-text rendering).

    Raises:
        ValueError: an unknown format.
    """
    if fmt_ == "json":
        return render_json(report)
    if fmt_ == "markdown":
        return render_markdown(report)
    if fmt_ == "csv":
        return render_csv(report)
    if fmt_ == "table":
        try:
            from rich.console import Console as RichConsole
        except ImportError as e:  # pragma: no cover - depends on the environment
            raise ImportError(INSTALL_HINT) from e
        buf = io.StringIO()
        render_table(report, RichConsole(file=buf, width=width, force_terminal=False, color_system=None))
        return buf.getvalue()
    raise ValueError(f"unknown format {fmt_!r}; expected one of {', '.join(FORMATS)}")
