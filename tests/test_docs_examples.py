"""docs/metrics.md and docs/policies.md (issue 39): every example runs, and what the pages state
about defaults and names is what the code does.

The examples run in tests/test_readme.py (each ``python`` block with a ``readme-test``
directive, as a script in a fresh folder); here every block of these pages must carry one,
so none is left untested.
"""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from prefixmon import Decision, Monitor
from prefixmon.analytics.report import SCHEMA, build_report
from tests.test_readme import DOCS, blocks

ROOT = Path(__file__).resolve().parent.parent
PAGES = ("docs/metrics.md", "docs/policies.md")
MINUS = "\N{MINUS SIGN}"  # the pages write formulas with the minus sign


def text(page: str) -> str:
    return (ROOT / page).read_text(encoding="utf-8")


class TestEveryExampleRuns:
    """The pages' Python blocks are all run by the docs test."""

    @pytest.mark.parametrize("page", PAGES)
    def test_every_python_block_has_a_directive(self, page: str) -> None:
        """No Python block without ``<!-- readme-test: run -->`` (or ``pytest``) above it."""
        python = [b for b in blocks(text(page), page) if b.language == "python"]
        assert len(python) >= 3
        assert [b.id for b in python if not b.marker] == []
        assert {b.id for b in python} <= {b.id for b in DOCS}  # collected by test_readme


class TestMetricsPage:
    """docs/metrics.md names what the report computes and writes."""

    def test_every_metric_has_its_formula(self) -> None:
        """PEC, n_k, PEC_elig, TER, mean FED, AUC-PEC, RR and RR-eligible, each with its definition."""
        page = text("docs/metrics.md")
        for formula in (
            "| PEC(k) | (1/N) Σ 1{FED_i > k}",
            "| n_k | Σ 1{T_i ≥ k}",
            "| PEC_elig(k) | Σ 1{T_i ≥ k ∧ FED_i > k} / n_k",
            "| TER | (1/N) Σ 1{FED_i = T_i + 1} |",
            "| mean FED | (1/N) Σ FED_i |",
            f"| AUC-PEC | (1/N) Σ (FED_i {MINUS} 1) / T_i |",
            "| RR | Σ Y_i·1{FED_i ≤ T_i} / Σ 1{FED_i ≤ T_i}; **undefined (not 0) when no episode failed** |",
            f"| RR-eligible | Σ 1{{FED_i ≤ T_i}} = N(1 {MINUS} TER)",
            f"P(Y=1) = q·s + (1 {MINUS} q)·r",
        ):
            assert formula in page, formula
        assert "Fixed cohort, no censoring." in page and "Paired task-level bootstrap" in page

    def test_defaults_and_schema(self) -> None:
        """The page's JSON schema name and bootstrap defaults are the code's."""
        page = text("docs/metrics.md")
        assert f"schema `{SCHEMA}`" in page
        defaults = inspect.signature(build_report).parameters
        assert defaults["bootstrap"].default == 10_000 and "over 10,000\n  resamples" in page
        assert defaults["confidence"].default == 0.95 and "a 95% percentile interval" in page


class TestPoliciesPage:
    """docs/policies.md states the monitor's defaults and decisions."""

    def test_defaults(self) -> None:
        """Timeouts, failure mode and policy defaults as documented."""
        page = text("docs/policies.md")
        defaults = inspect.signature(Monitor).parameters
        assert defaults["policy"].default == "observe" and "| `observe` (default) |" in page
        assert defaults["replan_timeout"].default == 60.0 and "`replan_timeout`\n  seconds (default 60)" in page
        assert defaults["escalate_timeout"].default == 60.0 and "`escalate_timeout` seconds (default 60)" in page
        assert defaults["failure_mode"].default == "fail_open" and '`"fail_open"` (default)' in page

    def test_every_decision_is_named(self) -> None:
        """Each decision a record can hold appears on the page."""
        page = text("docs/policies.md")
        assert [d.value for d in Decision if f"`{d.value}`" not in page] == []
