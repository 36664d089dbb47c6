"""The ``prefixmon`` command line: ``report`` (other verbs have their own tests)."""

from __future__ import annotations

import csv
import json
import os
import pty
import select
import shutil
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from prefixmon._cli import build_parser, main
from prefixmon.commands import run_async
from prefixmon.records import ActionRecord, EpisodeRecord, build_record, dumps_record, write_records
from prefixmon.vocabulary import Cause, Outcome

NOW = datetime(2026, 1, 1, tzinfo=UTC)
PREFIXMON = shutil.which("prefixmon", path=str(Path(sys.executable).parent))


def episode(i: int, task: str, labels: dict[str, str], horizon: int, fed: int, outcome: Outcome) -> EpisodeRecord:
    """A real record."""
    actions = [
        ActionRecord(
            depth=d,
            tool="search" if d == 1 else "update",
            executable=d != fed,
            cause=Cause.DEPENDENCY if d == fed else None,
            reason="id was never returned by any tool" if d == fed else None,
        )
        for d in range(1, horizon + 1)
    ]
    return build_record(
        episode_id=f"ep-{i}", task_id=task, labels=labels, actions=actions, outcome=outcome, started_at=NOW, ended_at=NOW
    )


@pytest.fixture(scope="module")
def records_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One dataset, two methods on the same 40 tasks."""
    out = []
    for t in range(40):
        task = f"task-{t}"
        out.append(episode(2 * t, task, {"dataset": "bfcl", "model": "m", "method": "dual_loop"}, 3, 4, Outcome.SUCCESS))
        fed = 1 + t % 3
        outcome = Outcome.SUCCESS if t % 2 else Outcome.FAILURE
        out.append(episode(2 * t + 1, task, {"dataset": "bfcl", "model": "m", "method": "react"}, 3, fed, outcome))
    path = tmp_path_factory.mktemp("cli") / "records.jsonl"
    write_records(path, out)
    return path


class TestReport:
    """``prefixmon report`` in-process."""

    def test_json(self, records_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """--format json prints the contract document; --compare adds paired differences."""
        code = main(
            ["report", str(records_file), "--format", "json", "--bootstrap", "300", "--compare", "method=dual_loop,method=react"]
        )
        assert code == 0
        doc = json.loads(capsys.readouterr().out)
        assert [c["key"]["method"] for c in doc["cohorts"]] == ["dual_loop", "react"]
        assert doc["cohorts"][0]["rr"]["value"] is None
        assert doc["cohorts"][1]["ter"]["value"] == 0.0
        assert doc["bootstrap"] == {
            "resamples": 300,
            "seed": 0,
            "confidence": 0.95,
            "unit": "task_id",
            "strata": "dataset",
            "paired": True,
        }
        diff = doc["comparisons"][0]
        assert diff["a"] == {"method": "dual_loop"} and diff["paired"] is True
        assert diff["differences"]["ter"]["value"] == 1.0

    def test_table_is_default(self, records_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """Without --format the rich table is printed."""
        assert main(["report", str(records_file), "--bootstrap", "100", "--by", "method"]) == 0
        out = capsys.readouterr().out
        assert "Prefix executability" in out and "dual_loop" in out and "PEC@1" in out

    def test_piped_table_keeps_every_column(
        self, records_file: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Written to a pipe (not a terminal), the table is wide enough that no column collapses."""
        monkeypatch.delenv("COLUMNS", raising=False)
        assert main(["report", str(records_file), "--bootstrap", "100", "--by", "method"]) == 0
        out = capsys.readouterr().out
        assert "RR-elig." in out and "S/P/F" in out and "…" not in out

    def test_seed_reproducible(self, records_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """Same seed, same intervals; another seed, other intervals."""
        runs = []
        for seed in ("1", "1", "2"):
            main(["report", str(records_file), "--format", "json", "--bootstrap", "200", "--seed", seed])
            runs.append(json.loads(capsys.readouterr().out)["cohorts"][1]["mean_fed"]["ci"])
        assert runs[0] == runs[1] != runs[2]

    def test_markdown_csv_and_output_file(self, records_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """--format markdown/csv; --output writes to a file."""
        assert main(["report", str(records_file), "--format", "markdown", "--bootstrap", "0"]) == 0
        assert capsys.readouterr().out.startswith("### Prefix executability")
        out = tmp_path / "r.csv"
        assert main(["report", str(records_file), "--format", "csv", "--bootstrap", "0", "-o", str(out)]) == 0
        with out.open(newline="") as f:
            rows = list(csv.DictReader(f))
        assert len(rows) == 2 and rows[0]["rr"] == ""
        assert "wrote" in capsys.readouterr().err

    def test_plot_review_and_annotations(self, records_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """--plot writes the figure, --review-sheet the sample; the filled sheet goes back in with --annotations."""
        plot, sheet = tmp_path / "pec.png", tmp_path / "review.csv"
        args = ["report", str(records_file), "--bootstrap", "0", "--format", "json"]
        assert main([*args, "--plot", str(plot), "--review-sheet", str(sheet)]) == 0
        err = capsys.readouterr().err
        assert plot.read_bytes()[:4] == b"\x89PNG" and str(plot) in err
        with sheet.open(newline="") as f:
            rows = list(csv.DictReader(f))
        assert sum(r["outcome"] == "failure" for r in rows) == 20
        for r in rows:
            r["attribution"] = "model" if r["outcome"] == "failure" else ""
        with sheet.open("w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
        assert main([*args, "--annotations", str(sheet)]) == 0
        react = json.loads(capsys.readouterr().out)["cohorts"][1]
        assert react["attribution"]["counts"]["model"] == 20

    def test_bad_line_reports_file_and_line(self, records_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """A bad record exits 1 naming file:line; --on-error skip reports it and continues."""
        bad = tmp_path / "bad.jsonl"
        lines = records_file.read_text().splitlines()
        d = json.loads(lines[2])
        d["fed"] = 0
        bad.write_text("\n".join([*lines[:2], json.dumps(d), *lines[3:]]) + "\n")
        assert main(["report", str(bad), "--bootstrap", "0"]) == 1
        err = capsys.readouterr().err
        assert f"{bad}:3: not a valid record: fed" in err
        assert main(["report", str(bad), "--bootstrap", "0", "--format", "json", "--on-error", "skip"]) == 0
        captured = capsys.readouterr()
        assert f"skipped {bad}:3" in captured.err
        doc = json.loads(captured.out)
        assert doc["skipped_lines"][0]["line"] == 3 and doc["episodes"] == 79

    def test_validate_uses_pydantic(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """--validate reads through read_records; the fast loader checks the actions too, with the same message."""
        path = tmp_path / "r.jsonl"
        rec = episode(1, "t", {"method": "x"}, 2, 3, Outcome.SUCCESS)
        d = json.loads(dumps_record(rec))
        d["actions"][0]["depth"] = 0
        path.write_text(json.dumps(d) + "\n")
        assert main(["report", str(path), "--bootstrap", "0", "--format", "json"]) == 1  # one reader, one answer
        fast = capsys.readouterr().err
        assert main(["report", str(path), "--bootstrap", "0", "--validate"]) == 1
        assert f"{path}:1: not a valid record" in capsys.readouterr().err
        assert f"{path}:1: not a valid record: actions" in fast

    def test_usage_errors(self, records_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """Missing file, unknown --by key, bad --compare: exit 1 with a one-line reason."""
        assert main(["report", str(tmp_path / "none.jsonl")]) == 1
        assert "no such file" in capsys.readouterr().err
        assert main(["report", str(records_file), "--by", "agent", "--bootstrap", "0"]) == 1
        assert "no episode has the label 'agent'" in capsys.readouterr().err
        assert main(["report", str(records_file), "--compare", "method=react", "--bootstrap", "0"]) == 1
        assert "two sides" in capsys.readouterr().err
        with pytest.raises(SystemExit) as exc:
            main(["report", str(records_file), "--checkpoints", "1,x"])
        assert exc.value.code == 2

    def test_duplicate_inputs_counted_once(self, records_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """The same file twice: a warning with the count from the report, 80 episodes, and the count in JSON."""
        assert main(["report", str(records_file), str(records_file), "--format", "json", "--bootstrap", "0"]) == 0
        out = capsys.readouterr()
        doc = json.loads(out.out)
        assert doc["episodes"] == 80 and [c["n"] for c in doc["cohorts"]] == [40, 40]
        assert doc["duplicate_episodes"] == 80
        assert "80 episode(s) read more than once" in out.err and "'ep-0'" in out.err

    def test_parser_lists_verbs(self) -> None:
        """The parser is built from the COMMANDS list; report is one of its verbs."""
        help_text = build_parser().format_help()
        assert "report" in help_text


@pytest.mark.skipif(PREFIXMON is None, reason="console script not installed")
class TestConsoleScript:
    """The installed ``prefixmon`` entry point, as a user runs it."""

    def test_report_csv(self, records_file: Path) -> None:
        """`prefixmon report FILE --format csv` exits 0 and prints CSV."""
        assert PREFIXMON is not None
        proc = subprocess.run(
            [PREFIXMON, "report", str(records_file), "--format", "csv", "--bootstrap", "200"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.startswith("row,dataset,model,method,n,")
        assert proc.stderr == ""  # no progress bar when stderr is not a terminal

    def test_progress_bar_on_a_terminal(self, records_file: Path) -> None:
        """With stderr on a real pseudo-terminal, a long bootstrap shows a progress bar there, not on stdout."""
        assert PREFIXMON is not None
        leader, follower = pty.openpty()
        try:
            proc = subprocess.Popen(
                [PREFIXMON, "report", str(records_file), "--format", "json", "--bootstrap", "125000"],
                stdout=subprocess.PIPE,
                stderr=follower,
                env={**os.environ, "COLUMNS": "100", "TERM": "xterm"},
            )
            os.close(follower)
            seen = b""
            while True:
                ready, _, _ = select.select([leader], [], [], 60)
                if not ready:
                    break
                try:
                    chunk = os.read(leader, 65536)
                except OSError:
                    break
                if not chunk:
                    break
                seen += chunk
            stdout, _ = proc.communicate(timeout=60)
        finally:
            os.close(leader)
        assert proc.returncode == 0
        assert b"bootstrap 125,000 resamples" in seen  # 40 tasks x 125,000 = PROGRESS_MIN_WORK
        assert json.loads(stdout)["bootstrap"]["resamples"] == 125000


class TestRunAsync:
    """``prefixmon.commands.run_async``: what verbs run their async work with."""

    def test_returns_the_result_without_formatting_it(self) -> None:
        """The result comes back as it was; asyncio's runner never turns it into text (it did, in full, on 3.11)."""
        formatted: list[int] = []

        class Big:
            def __repr__(self) -> str:
                formatted.append(1)
                return "big"

        result = Big()

        async def work() -> Big:
            return result

        assert run_async(work) is result
        assert not formatted

    def test_errors_propagate(self) -> None:
        """An exception of the work is raised to the caller as it is."""

        async def work() -> None:
            raise LookupError("nope")

        with pytest.raises(LookupError, match="nope"):
            run_async(work)
