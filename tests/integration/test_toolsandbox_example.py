"""examples/toolsandbox_two_models.py: simulated models x methods as ToolSandbox runs, replayed and reported."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("tool_sandbox", reason="needs ToolSandbox installed from its source (scripts/test.sh installs it)")

from prefixmon import read_records

pytestmark = pytest.mark.integration

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "toolsandbox_two_models.py"


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The example as a user runs it, on the first scenarios."""
    out = tmp_path_factory.mktemp("toolsandbox-two-models")
    args = [sys.executable, str(SCRIPT), "--out", str(out), "--limit", "6", "--bootstrap", "200"]
    done = subprocess.run(args, capture_output=True, text=True, timeout=300, env={**os.environ, "COLUMNS": "200"})
    assert done.returncode == 0, done.stderr
    return out, done.stdout


class TestExampleRun:
    """One command writes ToolSandbox run folders, replays them on its execution context and reports."""

    def test_run_folders_in_toolsandbox_layout(self, run: tuple[Path, str]) -> None:
        """Each model and method has trajectories/<scenario>/conversation.json and a result summary."""
        out, _ = run
        runs = sorted(p for p in out.iterdir() if p.is_dir())
        assert len(runs) == 4
        for folder in runs:
            assert len(list(folder.glob("trajectories/*/conversation.json"))) == 6
            summary = json.loads((folder / "result_summary.json").read_text(encoding="utf-8"))
            assert len(summary["per_scenario_results"]) == 6

    def test_report(self, run: tuple[Path, str]) -> None:
        """Four cohorts of six episodes, PEC checkpoints, the plot and the JSON report."""
        out, stdout = run
        records = read_records(out / "records.jsonl")
        assert len(records) == 24 and len({(r.labels["model"], r.labels["method"]) for r in records}) == 4
        assert "PEC checkpoints" in stdout
        assert (out / "pec.png").stat().st_size > 0
        assert len(json.loads((out / "report.json").read_text(encoding="utf-8"))["cohorts"]) == 4
