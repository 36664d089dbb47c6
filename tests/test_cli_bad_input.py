"""Inputs the CLI used to mishandle: pipes and FIFOs, a BOM, an unknown --format, bad report options."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from datetime import UTC, datetime
from pathlib import Path

import pytest

from prefixmon._cli import main
from prefixmon.analytics import load_columns
from prefixmon.analytics._parallel import read_in_parallel
from prefixmon.analytics.inputs import _read_records, _texts_again
from prefixmon.records import ActionRecord, BadLine, build_record, dumps_record, read_records
from prefixmon.vocabulary import Cause

NOW = datetime(2025, 1, 1, tzinfo=UTC)
BOM = b"\xef\xbb\xbf"
N = 60
"""Episodes in the test data: more than a pipe's first read (8 KB) holds."""


def record_line(episode_id: str, *, fail: bool = False) -> str:
    """One record as a JSON line; with ``fail`` its second action is not executable."""
    actions = [ActionRecord(depth=1, tool="t", executable=True)]
    if fail:
        actions.append(ActionRecord(depth=2, tool="u", executable=False, cause=Cause.SCHEMA, reason=f"why {episode_id}"))
    else:
        actions.append(ActionRecord(depth=2, tool="t", executable=True))
    record = build_record(
        episode_id=episode_id,
        task_id=f"task-{episode_id}",
        labels={"method": "m"},
        actions=actions,
        outcome=None,
        started_at=NOW,
        ended_at=NOW,
    )
    return dumps_record(record)


def data(n: int = N) -> bytes:
    """``n`` records as JSON Lines, every third one failing."""
    return "".join(record_line(f"e-{i}", fail=not i % 3) + "\n" for i in range(n)).encode()


def feed(target: int | str, payload: bytes) -> threading.Thread:
    """Write ``payload`` to a pipe's write descriptor or a FIFO's path from a thread, then close it."""

    def run() -> None:
        with os.fdopen(target, "wb") if isinstance(target, int) else open(target, "wb") as f:
            f.write(payload)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def episodes(report: Path) -> int:
    """Episodes counted by a JSON report."""
    return int(json.loads(report.read_text(encoding="utf-8"))["episodes"])


def cli(*argv: str, stdin: bytes | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``python -m prefixmon ARGV`` in a child process (its own stdin)."""
    return subprocess.run(
        [sys.executable, "-m", "prefixmon", *argv],
        input=None if stdin is None else stdin.decode(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


class TestPipes:
    """A pipe or FIFO is read once, from its first byte, by report and export; replay and learn say what they need."""

    def test_report_a_dev_fd_pipe(self, tmp_path: Path) -> None:
        """`report <(cat f)`: the Parquet check used to eat the pipe's first read."""
        out = tmp_path / "r.json"
        read_fd, write_fd = os.pipe()
        thread = feed(write_fd, data())
        try:
            code = main(["report", f"/dev/fd/{read_fd}", "--bootstrap", "0", "--format", "json", "-o", str(out)])
        finally:
            os.close(read_fd)
            thread.join(5)
        assert code == 0
        assert episodes(out) == N

    @pytest.mark.parametrize("validate", [False, True])
    def test_report_dev_stdin(self, tmp_path: Path, validate: bool) -> None:
        """`cat f | prefixmon report /dev/stdin --on-error skip`: every episode, no bad line."""
        out = tmp_path / "r.json"
        args = ["report", "/dev/stdin", "--bootstrap", "0", "--on-error", "skip", "--format", "json", "-o", str(out)]
        done = cli(*args, *(["--validate"] if validate else []), stdin=data())
        assert done.returncode == 0, done.stderr
        assert "skipped" not in done.stderr
        assert episodes(out) == N

    def test_report_a_fifo_with_a_live_writer(self, tmp_path: Path) -> None:
        """A named FIFO used to hang: opened twice, the writer was gone the second time."""
        fifo = tmp_path / "records.fifo"
        os.mkfifo(fifo)
        out = tmp_path / "r.json"
        thread = feed(str(fifo), data())
        done = cli("report", str(fifo), "--bootstrap", "0", "--format", "json", "-o", str(out), timeout=60)
        thread.join(5)
        assert done.returncode == 0, done.stderr
        assert episodes(out) == N

    def test_export_dev_stdin(self, tmp_path: Path) -> None:
        """`export /dev/stdin --on-error skip` used to drop the records of the first read silently."""
        pq = pytest.importorskip("pyarrow.parquet")
        out = tmp_path / "r.parquet"
        done = cli("export", "/dev/stdin", "--out", str(out), "--on-error", "skip", stdin=data())
        assert done.returncode == 0, done.stderr
        assert "skipped" not in done.stderr
        assert pq.read_table(out).num_rows == N

    def test_export_a_dev_fd_pipe(self, tmp_path: Path) -> None:
        """Without --on-error skip the export of a pipe used to fail on line 1."""
        pq = pytest.importorskip("pyarrow.parquet")
        out = tmp_path / "r.parquet"
        read_fd, write_fd = os.pipe()
        thread = feed(write_fd, data())
        try:
            code = main(["export", f"/dev/fd/{read_fd}", "--out", str(out)])
        finally:
            os.close(read_fd)
            thread.join(5)
        assert code == 0
        assert pq.read_table(out).num_rows == N

    @pytest.mark.parametrize("verb", ["replay", "learn"])
    def test_replay_and_learn_say_they_need_a_regular_file(
        self, verb: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """They used to say 'no such file' of a pipe that exists."""
        tools = tmp_path / "tools.json"
        tools.write_text(json.dumps([{"type": "function", "function": {"name": "t", "parameters": {}}}]), encoding="utf-8")
        read_fd, write_fd = os.pipe()
        os.close(write_fd)
        try:
            pipe = f"/dev/fd/{read_fd}"
            out = tmp_path / ("o.jsonl" if verb == "replay" else "o.yaml")
            code = main([verb, pipe, "--tools", str(tools), "--out", str(out)])
        finally:
            os.close(read_fd)
        err = capsys.readouterr().err
        assert code != 0
        assert f"{pipe} is not a regular file" in err
        assert "no such file" not in err
        assert "Traceback" not in err


class TestBom:
    """A UTF-8 BOM at the start of a records file is dropped by every reader; line numbers and offsets stay."""

    @pytest.fixture
    def bom_file(self, tmp_path: Path) -> Path:
        path = tmp_path / "bom.jsonl"
        path.write_bytes(BOM + data(6))
        return path

    def test_fast_loader_and_its_texts(self, bom_file: Path) -> None:
        """The first record was 'not valid JSON'; its id (read again from the file later) is the first one."""
        columns = load_columns(bom_file)
        assert len(columns) == 6
        assert list(columns.episode_ids) == [f"e-{i}" for i in range(6)]
        assert columns.failure_reason[0] == "why e-0"

    def test_pydantic_reader(self, bom_file: Path) -> None:
        assert [r.episode_id for r in read_records(bom_file)] == [f"e-{i}" for i in range(6)]

    def test_bad_line_numbers_do_not_shift(self, tmp_path: Path) -> None:
        """A bad second line is still line 2."""
        path = tmp_path / "bom.jsonl"
        lines = data(3).splitlines(keepends=True)
        path.write_bytes(BOM + lines[0] + b"{nope\n" + b"".join(lines[1:]))
        errors: list[BadLine] = []
        columns = load_columns(path, on_error="skip", errors=errors)
        assert len(columns) == 3
        assert [e.line for e in errors] == [2]
        assert list(columns.episode_ids) == ["e-0", "e-1", "e-2"]

    def test_parallel_reader_first_range(self, bom_file: Path) -> None:
        """The first of the parallel reader's ranges starts with the BOM."""
        size = bom_file.stat().st_size
        path = str(bom_file)
        columns = read_in_parallel(
            _read_records, path, size, 2, "raise", None, lambda skipped, keys: _texts_again(path, size, skipped, keys)
        )
        assert len(columns) == 6
        assert list(columns.episode_ids) == [f"e-{i}" for i in range(6)]

    def test_report_and_export(self, bom_file: Path, tmp_path: Path) -> None:
        out = tmp_path / "r.json"
        for extra in ([], ["--validate"]):
            assert main(["report", str(bom_file), "--bootstrap", "0", "--format", "json", "-o", str(out), *extra]) == 0
            assert episodes(out) == 6
        pq = pytest.importorskip("pyarrow.parquet")
        assert main(["export", str(bom_file), "--out", str(tmp_path / "r.parquet")]) == 0
        assert pq.read_table(tmp_path / "r.parquet").num_rows == 6


class TestReplayFormat:
    """An unknown --format is a usage error (exit 2) for every replay source, not ignored."""

    @pytest.mark.parametrize("source", [["--tools", "TOOLS"], ["--bfcl"], ["--domain", "tau-airline"]])
    def test_unknown_format(self, source: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        tools = tmp_path / "tools.json"
        tools.write_text(json.dumps([{"type": "function", "function": {"name": "t", "parameters": {}}}]), encoding="utf-8")
        runs = tmp_path / "runs.jsonl"
        runs.write_text('{"messages": []}\n', encoding="utf-8")
        source = [str(tools) if s == "TOOLS" else s for s in source]
        out = tmp_path / "o.jsonl"
        code = main(["replay", str(runs), *source, "--format", "xyz123", "--out", str(out)])
        err = capsys.readouterr().err
        assert code == 2
        assert "--format xyz123" in err
        assert not out.exists()


class TestReportOptions:
    """A bad option is refused before anything is read or printed, naming the option."""

    @pytest.mark.parametrize(
        ("options", "option"),
        [
            (["--review-fraction", "5", "--review-sheet", "SHEET"], "--review-fraction"),
            (["--review-fraction", "-0.1"], "--review-fraction"),
            (["--max-depth", "-1", "--plot", "PLOT"], "--max-depth"),
            (["--max-depth", "0"], "--max-depth"),
            (["--confidence", "1.5"], "--confidence"),
            (["--plot", "PLOT.xyz"], "--plot"),
        ],
    )
    def test_bad_option(self, options: list[str], option: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        records = tmp_path / "r.jsonl"
        records.write_bytes(data(6))
        names = {"SHEET": str(tmp_path / "rs.csv"), "PLOT": str(tmp_path / "p.png"), "PLOT.xyz": str(tmp_path / "p.xyz")}
        argv = ["report", str(records), "--bootstrap", "0", *(names.get(o, o) for o in options)]
        try:
            code = main(argv)
        except SystemExit as e:  # argparse: exit 2
            code = int(e.code or 0)
        captured = capsys.readouterr()
        assert code != 0
        assert captured.out == ""
        assert option in captured.err
        assert "Traceback" not in captured.err
        assert not (tmp_path / "rs.csv").exists()
        assert not (tmp_path / "p.png").exists()
