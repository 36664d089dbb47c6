"""PEC curves as a figure, one line per cohort (like the paper's Figure 1).

One panel per value of the strata key (usually ``dataset``) when it is a cohort key;
within a panel, colour follows the last cohort key (usually ``method``) and line style
the others (usually ``model``). The format follows the file suffix (``.png``, ``.svg``,
``.pdf``). Uses matplotlib's object API (no pyplot, no global state, no display needed).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from typing import Final, TypeVar

from ._optional import INSTALL_HINT
from .report import CohortReport, Report

__all__ = (
    "MAX_DEPTH",
    "plot_pec",
)

_STYLES: Final = ("-", "--", ":", "-.")
_MARKERS: Final = ("o", "s", "^", "D", "v", "P")
MAX_DEPTH: Final = 30
T = TypeVar("T")


def plot_pec(
    report: Report,
    path: str | os.PathLike[str],
    *,
    max_depth: int | None = None,
    title: str | None = None,
    dpi: int = 150,
) -> str:
    """Write the fixed-cohort PEC curves of every cohort to ``path``.

    Args:
        report: a report from :func:`~.report.build_report`.
        path: output file; ``.png``, ``.svg`` or ``.pdf``.
        max_depth: last depth on the x axis (default: the deepest non-zero PEC, at most 30).
        title: figure title.
        dpi: resolution of raster output.

    Returns:
        The path written.

    Raises:
        ImportError: matplotlib is missing (``pip install "prefixmon[analytics]"``).
    """
    try:
        from matplotlib.figure import Figure
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError(INSTALL_HINT) from e

    name = os.fspath(path)
    by = report.by
    panel_key = report.strata if report.strata in by else None
    panels: dict[str | None, list[CohortReport]] = {}
    for c in report.cohorts:
        panels.setdefault(None if panel_key is None else c.key[panel_key], []).append(c)
    line_keys = [k for k in by if k != panel_key]
    colour_key = line_keys[-1] if line_keys else None
    style_keys = line_keys[:-1]
    colour_values: list[str | None] = _distinct(c.key[colour_key] for c in report.cohorts) if colour_key else [None]
    style_values = _distinct(tuple(c.key[k] for k in style_keys) for c in report.cohorts)

    depth = max_depth
    if depth is None:
        deepest = max((max(_last_positive(c.pec), 1) for c in report.cohorts), default=1)
        depth = min(MAX_DEPTH, deepest + 1)

    n_panels = len(panels)
    cols = min(n_panels, 2)
    rows = (n_panels + cols - 1) // cols
    fig = Figure(figsize=(6.2 * cols + 2.6, 4.2 * rows), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False, sharey=True)
    from matplotlib import colormaps

    cmap = colormaps["tab10" if len(colour_values) <= 10 else "tab20"]
    for index, (panel, members) in enumerate(panels.items()):
        ax = axes[index // cols][index % cols]
        for c in members:
            ys = [1.0, *(c.pec[k - 1] if k <= len(c.pec) else 0.0 for k in range(1, depth + 1))]
            xs = list(range(0, depth + 1))
            ci = colour_values.index(c.key[colour_key]) if colour_key else 0
            si = style_values.index(tuple(c.key[k] for k in style_keys))
            label = " / ".join(_text(c.key[k]) for k in line_keys) or "all"
            ax.plot(
                xs,
                ys,
                color=cmap(ci % cmap.N),
                linestyle=_STYLES[si % len(_STYLES)],
                marker=_MARKERS[si % len(_MARKERS)],
                markersize=3.5,
                linewidth=1.6,
                gid="pec:" + c.label,  # the SVG group id: one per cohort
                label=f"{label}  (TER {c.ter.value:.2f}, n={c.n})" if c.ter.value is not None else label,
            )
        ax.set_title(_text(panel) if panel_key else "PEC", fontsize=11)
        ax.set_xlim(0, depth)
        ax.set_ylim(-0.02, 1.02)
        ax.set_xticks(range(0, depth + 1, max(1, depth // 10)))
        ax.set_xlabel("depth k")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7, loc="upper right", frameon=True, framealpha=0.85)
    for index in range(n_panels, rows * cols):
        axes[index // cols][index % cols].set_visible(False)
    for r in range(rows):
        axes[r][0].set_ylabel("PEC(k) = P[FED > k]")
    fig.suptitle(
        title or "Prefix executability curves (fixed cohort: reached depth k with every call executable)",
        fontsize=11,
    )
    fig.savefig(name, dpi=dpi)
    return name


def _distinct(values: Iterable[T]) -> list[T]:
    out: list[T] = []
    for v in values:
        if v not in out:
            out.append(v)
    return out


def _text(value: object) -> str:
    return "—" if value is None else str(value)


def _last_positive(curve: Sequence[float]) -> int:
    """The deepest depth with PEC above 0, without walking a long curve value by value."""
    last = getattr(curve, "last_positive", None)
    if callable(last):
        return int(last())
    return max((i + 1 for i, v in enumerate(curve) if v > 0), default=0)
