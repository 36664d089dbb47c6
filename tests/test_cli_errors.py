"""Command-line mistakes a newcomer makes: each says what is wrong and where, and exits non-zero."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from prefixmon import JsonlSink, Monitor, Toolset
from prefixmon._cli import main
from prefixmon.analytics.report import SCHEMA


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """Exit code and stderr of ``prefixmon ARGV``."""
    code = main(argv)
    return code, capsys.readouterr().err


@pytest.fixture
async def records(tmp_path: Path) -> Path:
    """A small real records file (three episodes through a monitor)."""
    tools = Toolset()

    @tools.tool
    def ping(n: int) -> int:
        return n

    path = tmp_path / "records.jsonl"
    monitor = Monitor(tools, sink=path, labels={"method": "m"})
    for i in range(3):
        async with monitor.episode(task_id=f"t{i}") as ep:
            await ep.call("ping", {"n": i})
            ep.finish("success")
    assert isinstance(monitor.sink, JsonlSink)
    monitor.sink.close()  # the lines are in the file for tests that read it as bytes, not through a reader
    return path


class TestReportInputs:
    """`prefixmon report` with inputs that are not record files."""

    async def test_a_folder(self, records: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """A folder is named as a folder, with the record files it holds; not [Errno 21]."""
        code, err = run(["report", str(records.parent), "--bootstrap", "0"], capsys)
        assert code == 1
        assert f"{records.parent} is a folder; give the files in it (it holds records.jsonl)" in err
        assert "Errno" not in err

    async def test_a_report_json_instead_of_records(
        self, records: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """The JSON report passed back as input is recognised as a report, not 'unexpected end of data'."""
        report = tmp_path / "report.json"
        assert main(["report", str(records), "--format", "json", "--bootstrap", "0", "--output", str(report)]) == 0
        code, err = run(["report", str(report)], capsys)
        assert code == 1
        assert f"{report} is a prefixmon report ({SCHEMA}), not episode records" in err
        assert "unexpected end of data" not in err

    def test_a_pretty_printed_json_document(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """A JSON list over several lines is named as such, with file and line."""
        path = tmp_path / "list.json"
        path.write_text(json.dumps([{"schema": "prefixmon.episode/1"}], indent=2))
        code, err = run(["report", str(path)], capsys)
        assert code == 1 and f"{path}:1: a JSON document spread over several lines, not JSON Lines" in err

    @pytest.mark.parametrize(("content", "says"), [("", "is empty"), ("\n\n", "holds only blank lines")])
    def test_an_empty_input_is_named(self, tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, says: str) -> None:
        """An empty file: the message names it (not just 'no episodes to report on')."""
        path = tmp_path / "empty.jsonl"
        path.write_text(content)
        code, err = run(["report", str(path)], capsys)
        assert code == 1 and f"{path} {says}" in err

    async def test_records_after_a_long_blank_head_are_read(
        self, records: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """5,000 blank lines (more than the 4 KiB sniffed) before the records: not 'holds only blank lines'."""
        path = tmp_path / "padded.jsonl"
        path.write_text("\n" * 5_000 + records.read_text())
        code, err = run(["report", str(path), "--bootstrap", "0"], capsys)
        assert code == 0, err

    async def test_export_checks_its_output_before_reading(
        self, records: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """export names --out as given (not a temporary file) when its folder is missing or it is a folder."""
        missing = tmp_path / "nowhere" / "o.parquet"
        code, err = run(["export", str(records), "-o", str(missing)], capsys)
        assert code == 1 and f"--out {missing}: the folder {missing.parent} does not exist" in err and ".tmp-" not in err
        code, err = run(["export", str(records), "-o", str(tmp_path)], capsys)
        assert code == 1 and f"--out {tmp_path} is a folder" in err and ".tmp-" not in err
        code, err = run(["export", str(tmp_path / "none.jsonl"), "-o", str(tmp_path / "o.parquet")], capsys)
        assert code == 1 and "none.jsonl: no such file" in err

    def test_only_bad_lines_skipped_names_the_file(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """--on-error skip with nothing valid left: the file and how many lines were skipped."""
        path = tmp_path / "junk.jsonl"
        path.write_text('{"x": 1}\n{"y": 2}\n')
        code, err = run(["report", str(path), "--on-error", "skip", "--bootstrap", "0"], capsys)
        assert code == 1 and f"no episodes to report on ({path}: 2 bad line(s) skipped)" in err

    async def test_a_missing_annotations_file(self, records: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """--annotations that does not exist names the option."""
        code, err = run(["report", str(records), "--annotations", str(tmp_path / "none.csv")], capsys)
        assert code == 1 and f"--annotations {tmp_path / 'none.csv'}: no such file" in err


class TestReportOutputs:
    """Outputs whose folder is missing are refused before the report is computed."""

    @pytest.mark.parametrize("option", ["--output", "--plot", "--review-sheet"])
    async def test_missing_output_folder(
        self, records: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], option: str
    ) -> None:
        """The message names the option and the missing folder, not 'no such file' for the file."""
        target = tmp_path / "nowhere" / "out.png"
        code, err = run(["report", str(records), "--bootstrap", "0", option, str(target)], capsys)
        assert code == 1
        assert f"{option} {target}: the folder {target.parent} does not exist" in err
        assert not (tmp_path / "nowhere").exists()

    async def test_output_is_a_folder(self, records: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """--output naming a folder asks for a file name."""
        code, err = run(["report", str(records), "--bootstrap", "0", "--output", str(tmp_path)], capsys)
        assert code == 1 and f"--output {tmp_path} is a folder; give a file name" in err


class TestReplay:
    """`prefixmon replay` with nothing to replay."""

    def test_empty_file_is_an_error_not_ter_nan(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """An empty transcript file: exit 1 naming it; no 'TER nan' summary, no records file."""
        path = tmp_path / "empty.jsonl"
        path.write_text("")
        out = tmp_path / "r.jsonl"
        code = main(["replay", "--domain", "tau-airline", str(path), "--out", str(out)])
        captured = capsys.readouterr()
        assert code == 1 and f"{path} is empty" in captured.err
        assert "nan" not in captured.out + captured.err and not out.exists()

    def test_nothing_recognised_is_an_error(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """A file whose lines are no conversations: exit 1 and the reason, even though the source ran."""
        path = tmp_path / "odd.jsonl"
        path.write_text('{"foo": 1}\n')
        out = tmp_path / "r.jsonl"
        code, err = run(["replay", "--domain", "tau-airline", str(path), "--out", str(out)], capsys)
        assert code == 1 and f"no episode was replayed from {path}" in err

    def test_missing_out_folder(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """--out in a folder that does not exist is refused before replaying."""
        path = tmp_path / "t.jsonl"
        path.write_text('{"messages": []}\n')
        target = tmp_path / "nowhere" / "r.jsonl"
        code, err = run(["replay", "--domain", "tau-airline", str(path), "--out", str(target)], capsys)
        assert code == 1 and f"--out {target}: the folder {target.parent} does not exist" in err

    def test_a_folder_as_input(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """A folder as the transcript file says so."""
        code, err = run(["replay", "--bfcl", str(tmp_path), "--out", str(tmp_path / "r.jsonl")], capsys)
        assert code == 1 and f"{tmp_path} is a folder" in err

    def test_missing_tools_file(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """--tools that does not exist names the option."""
        path = tmp_path / "t.jsonl"
        path.write_text('{"messages": []}\n')
        code, err = run(
            ["replay", str(path), "--tools", str(tmp_path / "tools.json"), "--out", str(tmp_path / "r.jsonl")], capsys
        )
        assert code == 1 and f"--tools {tmp_path / 'tools.json'}: no such file" in err


class TestDemo:
    """`prefixmon demo` with counts that cannot make a demo."""

    @pytest.mark.parametrize(("option", "value"), [("--tasks", "0"), ("--trials", "0"), ("--tasks", "-3"), ("--bootstrap", "-1")])
    def test_counts_are_usage_errors(self, tmp_path: Path, capsys: pytest.CaptureFixture[str], option: str, value: str) -> None:
        """--tasks 0 is a usage error (exit 2) naming the option, not a missing records file."""
        with pytest.raises(SystemExit) as exc:
            main(["demo", "--out", str(tmp_path / "d"), option, value])
        assert exc.value.code == 2
        err = capsys.readouterr().err
        assert f"argument {option}: expected a whole number" in err and "records.jsonl" not in err

    def test_out_is_a_file(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """--out naming a file is refused with what the demo needs."""
        target = tmp_path / "x.jsonl"
        target.write_text("keep me\n")
        code, err = run(["demo", "--out", str(target), "--tasks", "1"], capsys)
        assert code == 1 and f"--out {target} is a file" in err
        assert target.read_text() == "keep me\n"


class TestGoodInputPasses:
    """The checks never refuse what the report reads."""

    async def test_records_report_cleanly(self, records: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """A real records file passes every check."""
        assert main(["report", str(records), "--bootstrap", "0", "--format", "json"]) == 0
        assert json.loads(capsys.readouterr().out)["episodes"] == 3
