"""The demo and the CLI verbs that sit on top of the adapters."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from prefixmon import read_records
from prefixmon._cli import main


class TestDemo:
    def test_demo_writes_records_traces_report_and_plot(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """`prefixmon demo` runs every agent, logs first failures live and writes a consistent report."""
        assert main(["demo", "--out", str(tmp_path), "--tasks", "9", "--trials", "2", "--bootstrap", "200"]) == 0
        out = capsys.readouterr().out
        assert "first failure" in out and "Prefix executability" in out
        records = read_records(tmp_path / "records.jsonl")
        assert len(records) == 3 * 9 * 2
        assert {r.labels["method"] for r in records} == {"careful", "plan_conditioned", "sloppy"}
        assert all(not r.invalid_reached_environment for r in records)  # the demo blocks
        report = json.loads((tmp_path / "report.json").read_text())
        by_method = {c["key"]["method"]: c for c in report["cohorts"]}
        assert by_method["careful"]["ter"]["value"] == 1.0 and by_method["careful"]["rr"]["value"] is None
        plan = by_method["plan_conditioned"]
        assert plan["ter"]["value"] < 0.6 < plan["success"]["value"]  # success rests on recovery
        assert plan["rr"]["eligible"] == round(plan["n"] * (1 - plan["ter"]["value"]))
        assert (tmp_path / "pec.png").stat().st_size > 1000
        traces = (tmp_path / "traces.jsonl").read_text().splitlines()
        assert traces and "execute_tool" in traces[0]

    def test_demo_is_reproducible(self, tmp_path: Path) -> None:
        """The same seed gives the same episodes."""
        for name in ("a", "b"):
            assert (
                main(["demo", "--out", str(tmp_path / name), "--tasks", "6", "--trials", "1", "--bootstrap", "50", "--quiet"])
                == 0
            )
        a, b = (read_records(tmp_path / n / "records.jsonl") for n in ("a", "b"))
        assert [(r.task_id, r.fed, r.outcome) for r in a] == [(r.task_id, r.fed, r.outcome) for r in b]


class TestVerbs:
    def test_replay_needs_a_source(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """replay requires --bfcl, --domain or --tools."""
        with pytest.raises(SystemExit) as info:
            main(["replay", str(tmp_path / "x.json"), "--out", str(tmp_path / "r.jsonl")])
        assert info.value.code == 2
        assert "one of the arguments --bfcl --domain --tools is required" in capsys.readouterr().err

    def test_transcripts_one_file_at_a_time(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """Transcript replay takes exactly one file."""
        a, b = tmp_path / "a.json", tmp_path / "b.json"
        for path in (a, b):
            path.write_text("[]")
        code = main(["replay", "--domain", "tau-retail", str(a), str(b), "--out", str(tmp_path / "r.jsonl")])
        assert code == 2 and "one file at a time" in capsys.readouterr().err

    def test_bad_label(self, tmp_path: Path) -> None:
        """Labels must be KEY=VALUE."""
        with pytest.raises(SystemExit):
            main(["replay", "--bfcl", "x.json", "--out", str(tmp_path / "r.jsonl"), "--label", "oops"])
