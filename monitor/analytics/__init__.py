"""Offline prefix-executability metrics over episode records (DESIGN §3).

Needs the ``analytics`` extra (numpy; rich for terminal tables, matplotlib for plots)::

    from prefixmon.analytics import build_report, load_columns, render

    report = build_report(load_columns("runs/records.jsonl"), by=["model", "method"], seed=1)
    print(render(report, "markdown"))

Analytics read records only; they never import the runtime. :class:`Confusion`
(:mod:`.agreement`, agreement counts of a predictor with labels) is pure Python and imports
without the extra, so benchmark verbs count with it in any install; every other name then
raises the install hint.
"""

from typing import TYPE_CHECKING, Any

from ._optional import INSTALL_HINT
from .agreement import Confusion as Confusion

try:
    import numpy  # noqa: F401 - every name below needs it
except ImportError as _missing:  # pragma: no cover - tests/test_analytics_agreement.py runs this in a subprocess
    _MISSING = _missing
    if not TYPE_CHECKING:  # mypy sees the else branch's names with their types; only a real miss ends here

        def __getattr__(name: str) -> Any:
            if name in __all__:
                raise ImportError(INSTALL_HINT) from _MISSING
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
else:
    from .bootstrap import percentile_interval as percentile_interval
    from .bootstrap import resample_sums as resample_sums
    from .bootstrap import wilson_interval as wilson_interval
    from .columns import EpisodeColumns as EpisodeColumns
    from .columns import columns_from_records as columns_from_records
    from .completion import CHECKLIST as CHECKLIST
    from .completion import Annotation as Annotation
    from .completion import Attribution as Attribution
    from .completion import ReviewItem as ReviewItem
    from .completion import UnstableTask as UnstableTask
    from .completion import read_annotations as read_annotations
    from .completion import review_sample as review_sample
    from .completion import write_review_sheet as write_review_sheet
    from .inputs import load_columns as load_columns
    from .inputs import register_reader as register_reader
    from .plot import plot_pec as plot_pec
    from .render import render as render
    from .render import render_table as render_table
    from .report import DEFAULT_CHECKPOINTS as DEFAULT_CHECKPOINTS
    from .report import CohortReport as CohortReport
    from .report import Comparison as Comparison
    from .report import Decomposition as Decomposition
    from .report import Estimate as Estimate
    from .report import RecoveryRate as RecoveryRate
    from .report import Report as Report
    from .report import build_report as build_report
    from .report import parse_compare as parse_compare

__all__ = (
    "CHECKLIST",
    "DEFAULT_CHECKPOINTS",
    "INSTALL_HINT",
    "Annotation",
    "Attribution",
    "CohortReport",
    "Comparison",
    "Confusion",
    "Decomposition",
    "EpisodeColumns",
    "Estimate",
    "RecoveryRate",
    "Report",
    "ReviewItem",
    "UnstableTask",
    "build_report",
    "columns_from_records",
    "load_columns",
    "parse_compare",
    "percentile_interval",
    "plot_pec",
    "read_annotations",
    "register_reader",
    "render",
    "render_table",
    "resample_sums",
    "review_sample",
    "wilson_interval",
    "write_review_sheet",
)
