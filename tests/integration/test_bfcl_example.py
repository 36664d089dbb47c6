"""examples/bfcl_two_models.py: two simulated models' BFCL result files, replayed and reported side by side."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

pytest.importorskip("bfcl_eval")

from prefixmon import Cause, Outcome, read_records
from prefixmon.adapters.bfcl import ground_truth_calls, replay_files, task_index

pytestmark = pytest.mark.integration

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "bfcl_two_models.py"
MODELS = ("sim-careful-FC", "sim-plan-first")
CATEGORIES = ("base", "miss_func")
LIMIT = 4
METRICS = ("ter", "mean_fed", "auc_pec", "rr", "success")


def _example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bfcl_two_models", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their module while the class is built
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The example as a user runs it, on the first tasks of each category."""
    out = tmp_path_factory.mktemp("bfcl-two-models")
    args = [sys.executable, str(SCRIPT), "--out", str(out), "--limit", str(LIMIT), "--bootstrap", "200"]
    done = subprocess.run(args, capture_output=True, text=True, timeout=120, env={**os.environ, "COLUMNS": "200"})
    assert done.returncode == 0, done.stderr
    return out, done.stdout


class TestExampleRun:
    """One command writes result files, replays them and reports the two models."""

    def test_result_files_in_bfcl_layout(self, run: tuple[Path, str]) -> None:
        """Each model has one result file per category at BFCL's path, one entry per task, in its own encoding."""
        out, _ = run
        for model in MODELS:
            for category in CATEGORIES:
                path = out / "result" / model / "multi_turn" / f"BFCL_v4_multi_turn_{category}_result.json"
                entries = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
                assert [e["id"] for e in entries] == [f"multi_turn_{category}_{i}" for i in range(LIMIT)]
                steps = [step for e in entries for turn in e["result"] for step in turn]
                assert steps
                if model == "sim-careful-FC":  # function calling: [{name: "json args"}]
                    assert all(
                        isinstance(s, list) and all(isinstance(json.loads(next(iter(c.values()))), dict) for c in s)
                        for s in steps
                    )
                else:  # prompting: "[f(a=1), g()]"
                    assert all(isinstance(s, str) and s.startswith("[") for s in steps)

    def test_two_labelled_cohorts(self, run: tuple[Path, str]) -> None:
        """The records hold both models on the same task ids, labelled from the result paths."""
        out, _ = run
        records = list(read_records(out / "records.jsonl"))
        assert Counter(r.labels["model"] for r in records) == {m: LIMIT * len(CATEGORIES) for m in MODELS}
        assert {r.labels["dataset"] for r in records} == {"bfcl"}
        assert Counter(r.labels["category"] for r in records) == {c: LIMIT * len(MODELS) for c in CATEGORIES}
        ids = {m: sorted(r.task_id for r in records if r.labels["model"] == m) for m in MODELS}
        assert ids[MODELS[0]] == ids[MODELS[1]]
        for r in records:
            assert r.task_id.startswith(f"multi_turn_{r.labels['category']}_")
            assert r.horizon >= 1 and 1 <= r.fed <= r.horizon + 1

    def test_report_json_has_the_contract_fields(self, run: tuple[Path, str]) -> None:
        """report.json has one cohort per model with DESIGN §6's fields, consistent with the records."""
        out, _ = run
        report: dict[str, Any] = json.loads((out / "report.json").read_text(encoding="utf-8"))
        records = list(read_records(out / "records.jsonl"))
        cohorts = {c["key"]["model"]: c for c in report["cohorts"]}
        assert set(cohorts) == set(MODELS)
        for model, cohort in cohorts.items():
            mine = [r for r in records if r.labels["model"] == model]
            assert cohort["n"] == len(mine)
            for metric in METRICS:
                assert set(cohort[metric]) >= {"value", "ci"}
            assert cohort["ter"]["value"] == pytest.approx(sum(r.executable for r in mine) / len(mine))
            assert cohort["success"]["value"] == pytest.approx(sum(r.outcome is Outcome.SUCCESS for r in mine) / len(mine))
            assert 0 <= cohort["ter"]["value"] <= cohort["auc_pec"]["value"] <= 1
            low, high = cohort["ter"]["ci"]
            assert low <= cohort["ter"]["value"] <= high
            assert cohort["rr"]["eligible"] == sum(not r.executable for r in mine)
            # the curves as steps: value[j] holds from depth[j] on, through length (the longest episode)
            assert {cohort[c]["length"] for c in ("pec", "pec_elig", "n_k")} == {max(r.horizon for r in mine)}
            assert cohort["n_k"]["depth"][0] == 1 and cohort["n_k"]["value"][0] == len(mine)
            assert set(cohort["causes"]) == {c.value for c in Cause}
            assert sum(cohort["causes"].values()) == sum(not r.executable for r in mine)
        (comparison,) = report["comparisons"]
        assert comparison["paired"] and comparison["a"] == {"model": "sim-plan-first"}

    def test_table_and_plot(self, run: tuple[Path, str]) -> None:
        """The table on stdout shows both models side by side; the PEC plot is a PNG."""
        out, stdout = run
        assert "$ prefixmon replay --bfcl" in stdout
        assert f"replayed {LIMIT * len(CATEGORIES) * len(MODELS)} task(s)" in stdout
        table = stdout.split("Prefix executability", 1)[1]
        assert all(model in table for model in MODELS)
        assert "sim-plan-first - sim-careful-FC" in table
        assert (out / "pec.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


class TestHabits:
    """The simulated habits make the failures they claim, judged on the real environments."""

    async def test_plan_first_recovers_from_an_early_tool(self, tmp_path: Path) -> None:
        """Calling a held-out tool a turn early is a schema failure at that depth; the repeated call still succeeds."""
        example = _example()
        task = task_index()["multi_turn_miss_func_0"]
        habits = example.Habits(name="always-early", encoding="prompt", slip=0.0, early=1.0, probe=0.0)
        turns = example.simulate(task, habits, 0)
        gt = ground_truth_calls(task)
        (held_out_turn,) = (t for t in task.missed_function if t > 0)
        early_call, stop = turns[held_out_turn - 1][-1]
        assert stop and early_call.name in task.missed_function[held_out_turn]
        assert early_call in gt[held_out_turn]
        path = tmp_path / "result" / "always-early" / "multi_turn" / "BFCL_v4_multi_turn_miss_func_result.json"
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps({"id": task.id, "result": [example.steps_of(t, "prompt") for t in turns]}) + "\n")
        (record,) = (await replay_files([path])).records
        depth = sum(len(t) for t in turns[:held_out_turn])
        assert record.first_failure is not None
        assert (record.fed, record.first_failure.tool, record.first_failure.cause) == (depth, early_call.name, Cause.SCHEMA)
        assert record.outcome is Outcome.SUCCESS
        assert record.labels["model"] == "always-early"

    async def test_plan_first_recovers_from_an_invented_id(self, tmp_path: Path) -> None:
        """An invented id is a dependency failure; the correct call right after it lets the task succeed."""
        example = _example()
        habits = example.Habits(name="always-probe", encoding="fc", slip=0.0, early=0.0, probe=1.0)
        task = task_index()["multi_turn_base_5"]
        turns = example.simulate(task, habits, 0)
        probes = [(t, i, call) for t, turn in enumerate(turns) for i, (call, stop) in enumerate(turn) if stop]
        ((t, i, invented),) = probes
        assert turns[t][i + 1][0].name == invented.name and turns[t][i + 1][0] != invented
        path = tmp_path / "result" / "always-probe" / "multi_turn" / "BFCL_v4_multi_turn_base_result.json"
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps({"id": task.id, "result": [example.steps_of(turn, "fc") for turn in turns]}) + "\n")
        (record,) = (await replay_files([path])).records
        assert record.first_failure is not None
        assert record.first_failure.cause is Cause.DEPENDENCY and record.first_failure.tool == invented.name
        assert record.fed == sum(len(turn) for turn in turns[:t]) + i + 1
        assert record.outcome is Outcome.SUCCESS
