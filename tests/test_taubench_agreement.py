"""τ-bench perturbed-gold suite: pre-call verdicts against the sandbox's own outcomes."""

from __future__ import annotations

import anyio

from prefixmon.adapters.taubench.agreement import SCHEMA_KINDS, format_summary, run_suite


class TestAgreement:
    """Verdicts predict execution on gold calls and their perturbations."""

    def test_at_least_99_percent(self) -> None:
        """Agreement is at least 0.99 overall and on state perturbations, with no missed rejection."""
        summary = anyio.run(lambda: run_suite(("airline_test", "retail_test", "retail_dev")))
        print(format_summary(summary))
        assert summary.n > 4000
        assert summary.agreement >= 0.99
        state = [t for t in summary.trials if t.kind not in SCHEMA_KINDS]
        assert sum(t.agrees for t in state) / len(state) >= 0.99
        assert summary.confusion()[(True, False)] == 0

    def test_every_perturbation_kind_occurs(self) -> None:
        """The suite exercises each perturbation kind at least once."""
        summary = anyio.run(lambda: run_suite(("airline_test", "retail_dev")))
        kinds = set(summary.by_kind())
        assert {"gold", "unknown_tool", "invented_id", "amount_off", "flight_moved", "other_order", "other_variant"} <= kinds
