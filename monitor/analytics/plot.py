"""PEC curves as a figure, one step curve per cohort (like the paper's Figure 1).

One panel per value of the strata key (usually ``dataset``) when it is a cohort key;
within a panel, colour follows the last cohort key (usually ``method``) and line style
the others (usually ``model``), and no two curves share both (:func:`line_styles`): when
the palette or the styles run out, a curve takes the next free pair, so cohorts that share
a label never draw on top of each other, and each legend entry is its own curve. Each
curve carries its bootstrap band where the report has intervals, and a small panel below
shows the share of episodes still running (``n_k / N``).
The format follows the file suffix (``.png``, ``.svg``, ``.pdf``). Uses matplotlib's object
API (no pyplot, no global state, no display needed).
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, TypeVar

from ._optional import INSTALL_HINT
from .report import CohortReport, Report

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ("MAX_DEPTH", "LineStyle", "line_styles", "pec_figure", "plot_depth", "plot_pec")

LineDash = str | tuple[int, tuple[int, ...]]
_STYLES: Final[tuple[LineDash, ...]] = (
    "-",
    "--",
    ":",
    "-.",
    (0, (5, 1)),
    (0, (3, 1, 1, 1, 1, 1)),
    (0, (8, 2, 1, 2)),
    (0, (1, 3)),
)
_MARKERS: Final = ("o", "s", "^", "D", "v", "P")
MAX_DEPTH: Final = 30
"""The deepest default x axis (``max_depth=`` draws further)."""
T = TypeVar("T")
V = TypeVar("V", int, float)


@dataclass(frozen=True, slots=True, kw_only=True)
class LineStyle:
    """How one cohort's curves are drawn."""

    colour: tuple[float, float, float, float]
    """RGBA."""
    linestyle: LineDash
    """A matplotlib line style: a name or an ``(offset, dashes)`` pattern."""
    marker: str


def line_styles(report: Report) -> dict[tuple[str | None, ...], LineStyle]:
    """A distinct (colour, line style) for every cohort's line key (its values of the keys that are not the panel's).

    Colour follows the last line key and line style the others; when two line keys would
    get the same pair (more values than colours or styles), the later one takes the next
    free pair, the same colour first. With more line keys than pairs, each gets its own
    colour from a continuous colour map.

    Raises:
        ImportError: matplotlib is missing.
    """
    try:
        from matplotlib import colormaps
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError(INSTALL_HINT) from e
    line_keys = _line_keys(report)
    colour_key = line_keys[-1] if line_keys else None
    style_keys = line_keys[:-1]
    lines = _distinct(tuple(c.key[k] for k in line_keys) for c in report.cohorts)
    colour_values: list[str | None] = _distinct(line[-1] for line in lines) if colour_key else [None]
    style_values = _distinct(line[:-1] for line in lines)
    cmap = colormaps["tab10" if len(colour_values) <= 10 else "tab20"]
    n_colours, n_styles = int(cmap.N), len(_STYLES)
    out: dict[tuple[str | None, ...], LineStyle] = {}
    if len(lines) > n_colours * n_styles:
        spread = colormaps["turbo"]
        for i, line in enumerate(lines):
            si = style_values.index(line[:-1])
            out[line] = LineStyle(
                colour=tuple(spread(i / max(len(lines) - 1, 1))),  # type: ignore[arg-type]
                linestyle=_STYLES[si % n_styles],
                marker=_MARKERS[si % len(_MARKERS)],
            )
        return out
    used: set[tuple[int, int]] = set()
    for line in lines:
        ci = colour_values.index(line[-1]) if colour_key else 0
        si = style_values.index(line[:-1]) if style_keys else 0
        pair = next(
            p
            for c_off in range(n_colours)
            for s_off in range(n_styles)
            if (p := ((ci + c_off) % n_colours, (si + s_off) % n_styles)) not in used
        )
        used.add(pair)
        out[line] = LineStyle(
            colour=tuple(cmap(pair[0])),  # type: ignore[arg-type]
            linestyle=_STYLES[pair[1]],
            marker=_MARKERS[pair[1] % len(_MARKERS)],
        )
    return out


def plot_pec(
    report: Report,
    path: str | os.PathLike[str],
    *,
    max_depth: int | None = None,
    title: str | None = None,
    reach: bool = True,
    dpi: int = 150,
) -> str:
    """Write the fixed-cohort PEC curves of every cohort to ``path`` (the figure of :func:`pec_figure`).

    Args:
        report: a report from :func:`~.report.build_report`.
        path: output file; ``.png``, ``.svg`` or ``.pdf``.
        max_depth: last depth on the x axis (default: the longest episode, at most 30).
        title: figure title.
        reach: draw the ``n_k / N`` panel under each PEC panel.
        dpi: resolution of raster output.

    Returns:
        The path written.

    Raises:
        ImportError: matplotlib is missing (``pip install "prefixmon[analytics]"``).
    """
    name = os.fspath(path)
    pec_figure(report, max_depth=max_depth, title=title, reach=reach).savefig(name, dpi=dpi)
    return name


def pec_figure(report: Report, *, max_depth: int | None = None, title: str | None = None, reach: bool = True) -> Figure:
    """The fixed-cohort PEC curves of every cohort as a matplotlib figure.

    PEC(k) is drawn as a step function (it changes only at whole depths), with the
    bootstrap interval as a band at every depth the report has one for (its checkpoints:
    ``prefixmon report --plot`` and the demo ask for every plotted depth). Below, ``n_k / N``
    shows how many episodes are still running at depth k: the fixed-cohort curve also falls
    where episodes simply end, and this panel tells that apart from failures. Each cohort's
    curves have their own (colour, line style) (:func:`line_styles`); the legend entry of a
    curve is that curve.

    Args:
        report: a report from :func:`~.report.build_report`.
        max_depth: last depth on the x axis (default: the longest episode, at most 30).
        title: figure title.
        reach: draw the ``n_k / N`` panel under each PEC panel.

    Raises:
        ImportError: matplotlib is missing (``pip install "prefixmon[analytics]"``).
    """
    try:
        from matplotlib.figure import Figure
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError(INSTALL_HINT) from e

    panel_key = _panel_key(report)
    panels: dict[str | None, list[CohortReport]] = {}
    for c in report.cohorts:
        panels.setdefault(None if panel_key is None else c.key[panel_key], []).append(c)
    line_keys = _line_keys(report)
    looks = line_styles(report)
    depth = max_depth if max_depth is not None else plot_depth(report)

    n_panels = len(panels)
    cols = min(n_panels, 2)
    rows = (n_panels + cols - 1) // cols
    fig = Figure(figsize=(6.2 * cols + 2.6, (5.4 if reach else 4.2) * rows), layout="constrained")
    grid = fig.add_gridspec(rows * (2 if reach else 1), cols, height_ratios=[3, 1] * rows if reach else None)
    xs = list(range(depth + 2))  # one step past the last depth, so that its level shows
    first_pec = None
    for index, (panel, members) in enumerate(panels.items()):
        row, col = divmod(index, cols)
        ax = fig.add_subplot(grid[row * (2 if reach else 1), col], sharey=first_pec)
        first_pec = first_pec or ax
        low_ax = fig.add_subplot(grid[row * 2 + 1, col], sharex=ax) if reach else None
        for c in members:
            look = looks[tuple(c.key[k] for k in line_keys)]
            label = " / ".join(_text(c.key[k]) for k in line_keys) or "all"
            ys = [1.0, *(_at(c.pec, k, 0.0) for k in range(1, depth + 1))]
            ys.append(ys[-1])
            lows, highs = _band(c, depth)
            if any(v is not None for v in lows):
                ax.fill_between(
                    xs,
                    [math.nan if v is None else v for v in lows],
                    [math.nan if v is None else v for v in highs],
                    step="post",
                    color=look.colour,
                    alpha=0.15,
                    linewidth=0,
                    gid="band:" + c.label,
                )
            ax.step(
                xs,
                ys,
                where="post",
                color=look.colour,
                linestyle=look.linestyle,
                marker=look.marker,
                markevery=list(range(depth + 1)),
                markersize=3.5,
                linewidth=1.6,
                gid="pec:" + c.label,  # the SVG group id: one per cohort
                label=f"{label}  (TER {c.ter.value:.2f}, n={c.n})" if c.ter.value is not None else label,
            )
            if low_ax is not None:
                running = [1.0, *(_at(c.n_k, k, 0) / c.n for k in range(1, depth + 1))]
                running.append(running[-1])
                low_ax.step(
                    xs,
                    running,
                    where="post",
                    color=look.colour,
                    linestyle=look.linestyle,
                    linewidth=1.2,
                    gid="reach:" + c.label,
                )
        if panel_key:
            ax.set_title(_text(panel), fontsize=11)
        ax.set_xlim(0, depth + 1)
        ax.set_ylim(-0.02, 1.02)
        ticks = range(0, depth + 1, max(1, depth // 10))
        ax.set_xticks(ticks)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7, loc="upper right", frameon=True, framealpha=0.85)
        if col == 0:
            ax.set_ylabel("PEC(k) = P[FED > k]")
        if low_ax is None:
            ax.set_xlabel("depth k")
            continue
        ax.tick_params(labelbottom=False)
        low_ax.set_ylim(-0.04, 1.04)
        low_ax.set_yticks([0, 0.5, 1])
        low_ax.set_xticks(ticks)
        low_ax.grid(True, alpha=0.3)
        low_ax.set_xlabel("depth k")
        if col == 0:
            low_ax.set_ylabel("still running\n$n_k$ / N", fontsize=8)
    level = f"{report.confidence:.0%}" if report.resamples else None
    fig.suptitle(
        title
        or "Prefix executability (fixed cohort: reached depth k with every call executable)"
        + (f"; bands: {level} bootstrap" if level and _has_bands(report, depth) else ""),
        fontsize=11,
    )
    return fig


def _panel_key(report: Report) -> str | None:
    """The cohort key whose values get a panel each: the strata key when it is a cohort key."""
    return report.strata if report.strata in report.by else None


def _line_keys(report: Report) -> list[str]:
    """The cohort keys that tell the curves of one panel apart."""
    panel_key = _panel_key(report)
    return [k for k in report.by if k != panel_key]


def plot_depth(report: Report) -> int:
    """The default last depth of the x axis: the longest episode of any cohort, at most 30."""
    longest = max((len(c.n_k) for c in report.cohorts), default=1)
    return max(1, min(MAX_DEPTH, longest))


def _at(values: Sequence[V], k: int, default: V) -> V:
    """``values[k - 1]`` (index 0 = depth 1), or ``default`` past the end."""
    return values[k - 1] if k <= len(values) else default


def _band(c: CohortReport, depth: int) -> tuple[list[float | None], list[float | None]]:
    """The interval at depths 0..depth+1 (step ends included); ``None`` where the report has none."""
    lows: list[float | None] = [None]
    highs: list[float | None] = [None]
    for k in range(1, depth + 1):
        est = c.checkpoints.get(k)
        ci = est.ci if est is not None else None
        lows.append(None if ci is None else ci[0])
        highs.append(None if ci is None else ci[1])
    lows.append(lows[-1])
    highs.append(highs[-1])
    return lows, highs


def _has_bands(report: Report, depth: int) -> bool:
    return any(
        c.checkpoints.get(k) is not None and c.checkpoints[k].ci is not None for c in report.cohorts for k in range(1, depth + 1)
    )


def _distinct(values: Iterable[T]) -> list[T]:
    out: list[T] = []
    for v in values:
        if v not in out:
            out.append(v)
    return out


def _text(value: object) -> str:
    return "—" if value is None else str(value)
