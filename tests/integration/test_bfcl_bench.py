"""The predicate against BFCL's real environments: ground truth, perturbations, execution labels."""

from __future__ import annotations

import argparse

import pytest

pytest.importorskip("bfcl_eval")

from prefixmon import Monitor
from prefixmon.adapters.bfcl import bench as bench_cli
from prefixmon.adapters.bfcl import build_toolset, format_report, ground_truth_calls, load_tasks, run_bench, run_task, task_index

pytestmark = pytest.mark.integration

DATA_BUGS = {f"multi_turn_{c}_{n}" for c in ("base", "miss_func", "miss_param", "long_context") for n in (173, 188)} | {
    "multi_turn_miss_func_49"
}
"""Ground truth BFCL's own environments refuse (see the adapter's report)."""


class TestGroundTruth:
    """All 800 ground truths replay with no false alarm outside BFCL's data bugs."""

    @pytest.mark.parametrize("mode", ["declared", "dry_run"])
    async def test_ter_is_one_outside_data_bugs(self, mode: str) -> None:
        """Every non-executable ground truth is one of the documented data bugs, and every bug is caught."""
        monitor = Monitor(build_toolset(mode))  # type: ignore[arg-type]
        failing = set()
        for task in load_tasks():
            run = await run_task(monitor, task, ground_truth_calls(task))
            assert run.episode.record is not None
            if not run.episode.record.executable:
                failing.add(task.id)
        assert failing == DATA_BUGS


class TestBench:
    """Perturbations labelled by execution."""

    async def test_agreement_and_prediction(self) -> None:
        """On a sample, FED agrees with execution, declared rules predict rejections, dry run is exact."""
        ids = [f"multi_turn_{c}_{n}" for c in ("base", "miss_func", "long_context") for n in range(0, 200, 9)]
        ids += ["multi_turn_base_173", "multi_turn_miss_func_49"]
        index = task_index()
        report = await run_bench([index[i] for i in ids], per_family=2, seed=1)
        assert report.fed_agreement >= 0.99
        assert report.cause_agreement >= 0.99
        declared, dry = report.prediction["declared"], report.prediction["dry_run"]
        assert declared.tp > 50
        assert (declared.precision or 0) >= 0.99 and (declared.recall or 0) >= 0.90
        assert dry.precision == 1.0 and dry.recall == 1.0
        assert {t for t, *_ in report.data_bugs} == {"multi_turn_base_173", "multi_turn_miss_func_49"}
        assert {"drop", "swap", "corrupt_type", "early_tool", "invent_id"} <= set(report.families)
        text = format_report(report)
        assert "FED agree" in text and "multi_turn_base_173" in text

    def test_cli_json(self, capsys: pytest.CaptureFixture[str]) -> None:
        """run() with --format json prints the report and exits 0 when the targets are met."""
        parser = argparse.ArgumentParser()
        bench_cli.configure_parser(parser)
        code = bench_cli.run(
            parser.parse_args(["--categories", "base", "--limit", "15", "--per-family", "1", "--format", "json"])
        )
        import json

        data = json.loads(capsys.readouterr().out)
        assert code == 0
        assert data["tasks"] == 15 and data["fed_agreement"] >= 0.99
        assert data["prediction"]["dry_run"]["recall"] == 1.0
