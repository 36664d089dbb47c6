"""Records merged on one line (a lost newline: ``cat a.jsonl b.jsonl`` when a.jsonl lacks its
final newline) are all read, in order, by every reader; a merged line with a piece that is
not a record is one bad line that says it holds several JSON values."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest

from prefixmon import RecordError, read_records
from prefixmon._cli import main
from prefixmon.analytics import columns_from_records, load_columns
from prefixmon.analytics._parallel import read_in_parallel
from prefixmon.analytics.columns import EpisodeColumns
from prefixmon.analytics.inputs import _read_records, _texts_again
from prefixmon.records.model import BOM, ActionRecord, BadLine, EpisodeRecord, build_record, iter_records, record_line
from prefixmon.vocabulary import Cause, Outcome

from .test_bounds import collections_watched

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def records(n: int) -> list[EpisodeRecord]:
    """Records with varied horizons, failures and outcomes (ids ``e-0`` ...)."""
    out = []
    for i in range(n):
        horizon = 1 + i % 4
        fed = 1 + (i * 3) % (horizon + 1)
        actions = [
            ActionRecord(
                depth=d,
                tool=f"tool_{d}",
                executable=d != fed,
                cause=Cause.PRECONDITION if d == fed else None,
                reason=f"why e-{i}" if d == fed else None,
            )
            for d in range(1, horizon + 1)
        ]
        out.append(
            build_record(
                episode_id=f"e-{i}",
                task_id=f"task-{i % 3}",
                labels={"model": "m" if i % 2 else "n"},
                actions=actions,
                outcome=Outcome.SUCCESS if i % 3 else Outcome.FAILURE,
                started_at=NOW,
                ended_at=NOW,
            )
        )
    return out


def line(r: EpisodeRecord) -> bytes:
    """A record's line without its newline."""
    return record_line(r)[:-1]


def merged_file(path: Path, n: int = 12) -> tuple[Path, list[EpisodeRecord], int]:
    """``n`` records on fewer lines, some merged (back to back, with spaces, with a BOM between),
    then a bad line and two more records. Returns the path, every record in order and the bad line's number."""
    rs = records(n)
    lines = [line(rs[0])]
    lines.append(line(rs[1]) + line(rs[2]))  # line 2: two merged, nothing between
    lines.append(line(rs[3]))
    lines.append(line(rs[4]) + b" \t " + line(rs[5]) + b"  " + line(rs[6]))  # line 4: three, spaces between
    lines.append(line(rs[7]) + BOM + line(rs[8]))  # line 5: the second file of a `cat` started with a BOM
    lines.append(b"{nope")  # line 6: a bad line
    lines.extend(line(r) for r in rs[9:])
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path, rs, 6


def validated_ids(path: Path, errors: list[BadLine]) -> list[str]:
    """The episode ids ``read_records`` (what --validate uses) reads, skipping bad lines."""
    return [r.episode_id for r in read_records(path, on_error="skip", errors=errors)]


def column_ids(path: Path, errors: list[BadLine]) -> list[str]:
    """The episode ids the column reader (what report uses) reads, skipping bad lines."""
    return list(load_columns(path, on_error="skip", errors=errors).episode_ids)


def assert_same(a: EpisodeColumns, b: EpisodeColumns) -> None:
    for name in ("horizon", "fed", "outcome", "cause"):
        assert np.array_equal(getattr(a, name), getattr(b, name)), name
    assert [a.task_ids[i] for i in a.task] == [b.task_ids[i] for i in b.task]
    assert [a.label_sets[i] for i in a.label_set] == [b.label_sets[i] for i in b.label_set]
    assert list(a.episode_ids) == list(b.episode_ids)
    assert list(a.failure_tool) == list(b.failure_tool) and list(a.failure_reason) == list(b.failure_reason)


class TestMergedGoodRecords:
    """Every record of a merged line is read, in order; later line numbers do not move."""

    def test_iter_records(self, tmp_path: Path) -> None:
        path, rs, bad = merged_file(tmp_path / "r.jsonl")
        errors: list[BadLine] = []
        got = list(iter_records(path, on_error="skip", errors=errors))
        assert [r.episode_id for r in got] == [r.episode_id for r in rs]
        assert got == rs
        assert [e.line for e in errors] == [bad]

    def test_raise_is_not_raised_for_merged_good_records(self, tmp_path: Path) -> None:
        """Under on_error="raise" merged good records lose nothing: no error; the first bad line is still line 6."""
        path, rs, bad = merged_file(tmp_path / "r.jsonl")
        with pytest.raises(RecordError, match=rf"r\.jsonl:{bad}: not valid JSON"):
            read_records(path)
        with pytest.raises(RecordError, match=rf"r\.jsonl:{bad}: not valid JSON"):
            load_columns(path)
        good = tmp_path / "good.jsonl"
        good.write_bytes(b"".join(line(r) for r in rs[:3]) + b"\n" + record_line(rs[3]))
        assert [r.episode_id for r in read_records(good)] == ["e-0", "e-1", "e-2", "e-3"]
        assert list(load_columns(good).episode_ids) == ["e-0", "e-1", "e-2", "e-3"]

    def test_the_last_line_without_its_newline(self, tmp_path: Path) -> None:
        """Two whole records at the end of a file without its final newline are both read (not "truncated")."""
        rs = records(3)
        path = tmp_path / "r.jsonl"
        path.write_bytes(record_line(rs[0]) + line(rs[1]) + line(rs[2]))
        assert read_records(path) == rs
        assert list(load_columns(path).episode_ids) == ["e-0", "e-1", "e-2"]

    def test_load_columns(self, tmp_path: Path) -> None:
        """The column reader appends one row per record, and the ids read again from the file line up."""
        path, rs, bad = merged_file(tmp_path / "r.jsonl")
        errors: list[BadLine] = []
        columns = load_columns(path, on_error="skip", errors=errors)
        assert_same(columns, columns_from_records(rs))
        assert [e.line for e in errors] == [bad]

    @pytest.mark.skipif(not os.path.isdir("/dev/fd"), reason="no /dev/fd")
    def test_load_columns_from_a_pipe(self, tmp_path: Path) -> None:
        """A source read once keeps the text in memory: the same columns and bad line."""
        path, rs, bad = merged_file(tmp_path / "r.jsonl")
        read_fd, write_fd = os.pipe()
        try:
            os.write(write_fd, path.read_bytes())  # a few KB: fits in the pipe's buffer
            os.close(write_fd)
            errors: list[BadLine] = []
            columns = load_columns(f"/dev/fd/{read_fd}", on_error="skip", errors=errors)
        finally:
            os.close(read_fd)
        assert_same(columns, columns_from_records(rs))
        assert [e.line for e in errors] == [bad]

    @pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parallel reader forks (Linux only)")
    def test_parallel_reader(self, tmp_path: Path) -> None:
        """Several processes, merged lines in each range: the sequential reader's columns, errors and ids."""
        rs = records(60)
        lines: list[bytes] = []
        at = 0
        while at < len(rs):  # every third line holds two records
            if len(lines) % 3 == 1 and at + 1 < len(rs):
                lines.append(line(rs[at]) + line(rs[at + 1]))
                at += 2
            else:
                lines.append(line(rs[at]))
                at += 1
        lines.insert(30, b'{"a": 1}{"b": 2}')  # a bad merged line in a later range
        path = tmp_path / "r.jsonl"
        path.write_bytes(b"\n".join(lines) + b"\n")
        size = path.stat().st_size
        name = str(path)
        errors: list[BadLine] = []
        parallel = read_in_parallel(
            _read_records, name, size, 3, "skip", errors, lambda skipped, keys: _texts_again(name, size, skipped, keys)
        )
        one_errors: list[BadLine] = []
        one = load_columns(path, on_error="skip", errors=one_errors)
        assert_same(parallel, one)
        assert_same(parallel, columns_from_records(rs))
        assert [(e.line, e.message) for e in errors] == [(e.line, e.message) for e in one_errors]
        assert [e.line for e in errors] == [31]

    @pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parallel reader forks (Linux only)")
    def test_load_columns_in_parallel(self, tmp_path: Path) -> None:
        """load_columns of a "large" file (MIN_BYTES made 1) in a fresh process without threads:
        merged good records raise nothing and give the ids the sequential reader gives."""
        path, rs, bad = merged_file(tmp_path / "r.jsonl", n=40)
        lines = path.read_bytes().splitlines(keepends=True)
        path.write_bytes(b"".join(lines[: bad - 1] + lines[bad:]))  # no bad line: under "raise" nothing is raised
        script = (
            "import json, sys\n"
            "from prefixmon.analytics import _parallel, load_columns\n"
            "_parallel.MIN_BYTES = 1\n"
            "workers = _parallel.workers_for(sys.argv[1], 10**9)\n"
            "c = load_columns(sys.argv[1])\n"
            "print(json.dumps({'workers': workers, 'ids': list(c.episode_ids), 'fed': c.fed.tolist()}))\n"
        )
        env = {**os.environ, "PREFIXMON_READ_WORKERS": "3"}
        done = subprocess.run(
            [sys.executable, "-c", script, str(path)], capture_output=True, text=True, env=env, check=True, cwd=tmp_path
        )
        got = json.loads(done.stdout)
        if got["workers"] < 2:
            pytest.skip("one core: every file is read by one process")
        assert got["ids"] == [r.episode_id for r in rs]
        assert got["fed"] == [r.fed for r in rs]

    def test_report_and_validate_agree(self, tmp_path: Path) -> None:
        """`prefixmon report` and `--validate` count every merged record and skip the same line."""
        path, rs, bad = merged_file(tmp_path / "r.jsonl")
        out = tmp_path / "r.json"
        docs = []
        for extra in ([], ["--validate"]):
            args = ["report", str(path), "--bootstrap", "0", "--format", "json", "-o", str(out), "--on-error", "skip"]
            assert main([*args, *extra]) == 0
            doc = json.loads(out.read_text(encoding="utf-8"))
            assert doc["episodes"] == len(rs)
            assert [s["line"] for s in doc["skipped_lines"]] == [bad]
            docs.append(doc)
        assert docs[0] == docs[1]

    def test_export(self, tmp_path: Path) -> None:
        pq = pytest.importorskip("pyarrow.parquet")
        path, rs, _ = merged_file(tmp_path / "r.jsonl")
        out = tmp_path / "r.parquet"
        assert main(["export", str(path), "--out", str(out), "--on-error", "skip"]) == 0
        assert pq.read_table(out).column("episode_id").to_pylist() == [r.episode_id for r in rs]


class TestMergedBadPiece:
    """A merged line with a piece that is not a record stays one bad line, with a message that says so."""

    def bad_file(self, tmp_path: Path, second: bytes) -> tuple[Path, list[EpisodeRecord]]:
        rs = records(4)
        path = tmp_path / "r.jsonl"
        path.write_bytes(record_line(rs[0]) + line(rs[1]) + second + b"\n" + record_line(rs[2]) + record_line(rs[3]))
        return path, rs

    @pytest.mark.parametrize(
        ("second", "message"),
        [
            (b'{"schema": "prefixmon.episode/1"}', r"the 2nd is not a record: episode_id: Field required \(7 errors\)"),
            (b"[1, 2]", r"the 2nd is not a record: record: Input should be"),
        ],
    )
    def test_one_bad_line_with_a_clear_message(self, tmp_path: Path, second: bytes, message: str) -> None:
        path, _ = self.bad_file(tmp_path, second)
        expected = rf"^{re.escape(str(path))}:2: 2 JSON values on one line \(a lost newline\?\); {message}"
        for read in (read_records, load_columns):
            with pytest.raises(RecordError, match=expected) as raised:
                read(path)
            assert raised.value.line == 2
        for read_skip in (validated_ids, column_ids):
            errors: list[BadLine] = []
            assert read_skip(path, errors) == ["e-0", "e-2", "e-3"]
            assert [e.line for e in errors] == [2] and "2 JSON values on one line" in errors[0].message

    def test_the_first_piece_bad_and_ordinals(self, tmp_path: Path) -> None:
        """The message names which piece is bad: here the 1st of 3."""
        rs = records(3)
        path = tmp_path / "r.jsonl"
        path.write_bytes(b"{}" + line(rs[0]) + line(rs[1]) + b"\n")
        fast = validated = ""
        try:
            load_columns(path)
        except RecordError as e:
            fast = str(e)
        try:
            read_records(path)
        except RecordError as e:
            validated = str(e)
        assert fast == validated
        assert fast.startswith(f"{path}:1: 3 JSON values on one line (a lost newline?); the 1st is not a record: ")

    def test_a_half_record_before_a_record_is_still_not_valid_json(self, tmp_path: Path) -> None:
        """A half-written line glued to the next record is not several whole values: the message is as before."""
        rs = records(2)
        path = tmp_path / "r.jsonl"
        first = line(rs[0])
        path.write_bytes(first[: first.index(b'"actions":') + 15] + record_line(rs[1]))
        for read in (read_records, load_columns):
            with pytest.raises(RecordError, match=r"r\.jsonl:1: not valid JSON"):
                read(path)

    def test_thousands_of_tiny_values_are_bounded(self, tmp_path: Path) -> None:
        """5,000 values on one line are not split (at most 1,000 pieces): one bad line, no blow-up."""
        rs = records(2)
        path = tmp_path / "r.jsonl"
        path.write_bytes(record_line(rs[0]) + b"{}" * 5000 + b"\n" + record_line(rs[1]))
        for read_skip in (validated_ids, column_ids):
            errors: list[BadLine] = []
            assert read_skip(path, errors) == ["e-0", "e-1"]
            assert [e.line for e in errors] == [2] and "not valid JSON" in errors[0].message

    @pytest.mark.parametrize("piece", [b"[" * 5_000 + b"]" * 5_000, b'{"a": ' * 5_000 + b"1" + b"}" * 5_000])
    def test_a_deeply_nested_piece_leaves_collections_room(self, tmp_path: Path, piece: bytes) -> None:
        """A merged line with a piece nested 5,000 deep is one bad line, and the splitter never
        recurses near the interpreter's limit (a finalizer running there would fail)."""
        rs = records(2)
        path = tmp_path / "r.jsonl"
        path.write_bytes(record_line(rs[0]) + line(rs[1]) + piece + b"\n")
        for read_skip in (validated_ids, column_ids):
            errors: list[BadLine] = []
            with collections_watched() as failures:
                assert read_skip(path, errors) == ["e-0"]
            assert failures == []
            assert [e.line for e in errors] == [2]

    def test_the_bound_is_a_thousand_values(self, tmp_path: Path) -> None:
        """1,000 values are split (and judged piece by piece); 1,001 are not."""
        path = tmp_path / "r.jsonl"
        for n, message in ((1000, "1000 JSON values on one line"), (1001, "not valid JSON")):
            path.write_bytes(b"{}" * n + b"\n")
            for read in (read_records, load_columns):
                with pytest.raises(RecordError, match=rf"r\.jsonl:1: {message}"):
                    read(path)
