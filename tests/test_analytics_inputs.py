"""The fast column loader, its errors, and the input-reader registry."""

from __future__ import annotations

import contextlib
import csv
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from prefixmon import Monitor, RecordError, ToolBlocked, Toolset
from prefixmon.analytics import build_report, columns_from_records, load_columns, register_reader
from prefixmon.analytics import inputs as inputs_module
from prefixmon.analytics.columns import ColumnBuilder, EpisodeColumns, TextColumn, distinct_episodes
from prefixmon.records import ActionRecord, BadLine, EpisodeRecord, build_record, dumps_record, read_records, write_records
from prefixmon.telemetry import Telemetry
from prefixmon.telemetry.otel_setup import configure_otel
from prefixmon.vocabulary import Cause, Outcome

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def records(n: int = 30, labels: dict[str, str] | None = None) -> list[EpisodeRecord]:
    """Real records with varied horizons, failures, causes and outcomes."""
    out = []
    causes = list(Cause)
    outcomes = [Outcome.SUCCESS, Outcome.PARTIAL, Outcome.FAILURE, None]
    for i in range(n):
        horizon = 1 + i % 5
        fed = 1 + (i * 7) % (horizon + 1)
        actions = [
            ActionRecord(
                depth=d,
                tool=f"tool_{d}",
                call_id=f"c{d}",
                executable=d != fed,
                cause=causes[i % 5] if d == fed else None,
                reason=f'"{causes[i % 5]}" failed, "actions": [] in reason' if d == fed else None,
            )
            for d in range(1, horizon + 1)
        ]
        out.append(
            build_record(
                episode_id=f"ep-{i}",
                task_id=f"task-{i % 11}",
                labels=labels or {"dataset": "d", "method": "m" if i % 2 else "n"},
                actions=actions,
                outcome=outcomes[i % 4],
                started_at=NOW,
                ended_at=NOW,
            )
        )
    return out


def assert_same(a: EpisodeColumns, b: EpisodeColumns) -> None:
    """Two column sets describe the same episodes."""
    for name in ("horizon", "fed", "outcome", "cause"):
        assert np.array_equal(getattr(a, name), getattr(b, name)), name
    assert [a.task_ids[i] for i in a.task] == [b.task_ids[i] for i in b.task]
    assert [a.label_sets[i] for i in a.label_set] == [b.label_sets[i] for i in b.label_set]
    assert a.episode_ids == b.episode_ids
    assert a.failure_tool == b.failure_tool and a.failure_reason == b.failure_reason


class TestFastLoader:
    """load_columns reads what read_records validates, much faster."""

    def test_same_columns_as_validated_path(self, tmp_path: Path) -> None:
        """Fast columns equal the columns of pydantic-validated records, for one file and for several."""
        path = tmp_path / "r.jsonl"
        write_records(path, records())
        assert_same(load_columns(path), columns_from_records(read_records(path)))
        other = tmp_path / "s.jsonl"
        write_records(other, records(7, {"dataset": "e", "method": "m"}))
        assert_same(load_columns(path, other), columns_from_records(read_records(path, other)))

    def test_field_order_and_nested_actions_key(self, tmp_path: Path) -> None:
        """A record written by another tool (keys reordered, a label named 'actions') reads the same."""
        path = tmp_path / "r.jsonl"
        recs = records(10, {"dataset": "d", "actions": "x"})
        with path.open("w") as f:
            for r in recs:
                d = json.loads(dumps_record(r))
                f.write(json.dumps(dict(reversed(list(d.items()))), separators=(",", ":")) + "\n")
        assert_same(load_columns(path), columns_from_records(recs))
        canonical = tmp_path / "c.jsonl"  # pydantic's order, with ',"actions":' inside the labels
        write_records(canonical, recs)
        assert b'"d","actions":"x"' in canonical.read_bytes()
        assert_same(load_columns(canonical), columns_from_records(recs))

    @pytest.mark.parametrize(
        ("edit", "message"),
        [
            (lambda d: d.update(fed=9), r"fed 9 outside 1\.\.horizon\+1"),
            (lambda d: d.update(horizon="3"), r"horizon: Input should be a valid integer"),
            (lambda d: d.update(schema="other/1"), r"schema: Input should be 'prefixmon\.episode/1'"),
            (lambda d: d.update(outcome="won"), r"outcome: Input should be 'success', 'partial' or 'failure'"),
            (lambda d: d.update(executable=not d["executable"]), r"executable: "),
            (lambda d: d.pop("task_id"), r"task_id: Field required"),
            (lambda d: d.update(labels={"model": 4}), r"labels\.model: Input should be a valid string"),
            (lambda d: d.update(outcome=["success"]), r"outcome: Input should be 'success', 'partial' or 'failure'"),
        ],
    )
    def test_bad_field_names_file_line_and_field(self, tmp_path: Path, edit: object, message: str) -> None:
        """A bad record stops the read with path:line and the field that is wrong, the same from both readers."""
        path = tmp_path / "bad.jsonl"
        lines = [json.loads(dumps_record(r)) for r in records(3)]
        edit(lines[1])  # type: ignore[operator]
        path.write_text("".join(json.dumps(d) + "\n" for d in lines))
        with pytest.raises(RecordError, match=rf"bad\.jsonl:2: not a valid record: {message}") as fast:
            load_columns(path)
        with pytest.raises(RecordError) as validated:
            read_records(path)
        assert str(fast.value) == str(validated.value)

    def test_bad_cause(self, tmp_path: Path) -> None:
        """An unknown primary cause is named."""
        path = tmp_path / "bad.jsonl"
        lines = [json.loads(dumps_record(r)) for r in records(3)]
        lines[2]["first_failure"]["cause"] = "bad luck"
        path.write_text("".join(json.dumps(d) + "\n" for d in lines))
        with pytest.raises(RecordError, match=r"bad\.jsonl:3: .*first_failure\.cause: Input should be 'schema'"):
            load_columns(path)

    def test_invalid_json_and_skip(self, tmp_path: Path) -> None:
        """Invalid JSON raises with file:line; with on_error='skip' the line is reported and the rest kept."""
        path = tmp_path / "bad.jsonl"
        good = [dumps_record(r) for r in records(4)]
        path.write_text(f"{good[0]}\n{{oops\n\n{good[1]}\n{good[2]}\n{good[3][:40]}")
        with pytest.raises(RecordError, match=r"bad\.jsonl:2: not valid JSON"):
            load_columns(path)
        errors: list[BadLine] = []
        columns = load_columns(path, on_error="skip", errors=errors)
        assert len(columns) == 3
        assert [(e.line, e.truncated) for e in errors] == [(2, False), (6, True)]
        assert "truncated last line" in errors[1].message

    def test_truncated_last_line_stops_a_raising_read(self, tmp_path: Path) -> None:
        """A writer killed mid-record leaves a partial last line: fatal under raise, reported under skip."""
        path = tmp_path / "r.jsonl"
        good = [dumps_record(r) for r in records(3)]
        path.write_text(f"{good[0]}\n{good[1]}\n{good[2][:-30]}")
        for read in (load_columns, read_records):
            with pytest.raises(RecordError, match=r"r\.jsonl:3: truncated last line"):
                read(path)
        errors: list[BadLine] = []
        assert len(load_columns(path, on_error="skip", errors=errors)) == 2
        assert errors and errors[0].truncated

    def test_last_line_without_newline_is_kept(self, tmp_path: Path) -> None:
        """A complete last record without a trailing newline is read."""
        path = tmp_path / "r.jsonl"
        good = [dumps_record(r) for r in records(3)]
        path.write_text("\n".join(good))
        assert len(load_columns(path)) == 3

    @pytest.mark.parametrize("read", [load_columns, read_records])
    @pytest.mark.parametrize(
        ("after_spaces", "bad_line"),
        [("\n", 3), ("", 2)],  # a 3 MiB blank line; 3 MiB of spaces before the first record, on its line
        ids=["blank line", "spaces before a record"],
    )
    def test_line_numbers_after_3_mib_of_spaces(self, tmp_path: Path, read: Any, after_spaces: str, bad_line: int) -> None:
        """Spaces longer than the 1 MiB sniffed are one line, not one per MiB (the fast loader said 6 and 5)."""
        path = tmp_path / "r.jsonl"
        good = [dumps_record(r) for r in records(2)]
        path.write_text(" " * (3 << 20) + f"{after_spaces}{good[0]}\n{{oops\n{good[1]}\n")
        errors: list[BadLine] = []
        assert len(read(path, on_error="skip", errors=errors)) == 2
        assert [e.line for e in errors] == [bad_line]

    @pytest.mark.parametrize(
        ("where", "extra", "bad"),
        [
            ("top", b'"note":' + b"9" * 4301, True),  # an integer of more digits than pydantic's parser takes
            ("top", b'"note":' + b"9" * 5000 + b".5", True),
            ("top", b'"note":"\xff"', True),  # not UTF-8 (msgspec skips an unknown value unread)
            ("top", b'"note":"\xed\xa0\x80"', True),  # a surrogate, encoded
            ("top", b'"\xc0\xaf":1', True),  # an overlong encoding, as a key
            ("top", b'"note":' + b"[" * 300 + b"]" * 300, True),  # deeper than pydantic's parser goes
            ("action", b'"note":"\xff"', True),
            ("first_failure", b'"note":' + b"9" * 4301, True),
            ("top", b'"note":{"a":[1,2.5,null,"x"]}', False),  # a field another writer added: ignored by both
            ("action", b'"note":1', False),
        ],
        ids=[
            "4301 digits",
            "5000-digit float",
            "not UTF-8",
            "encoded surrogate",
            "overlong key",
            "300 deep",
            "in an action",
            "in the first failure",
            "ignored",
            "ignored in an action",
        ],
    )
    def test_an_unknown_field_is_read_as_pydantic_reads_it(self, tmp_path: Path, where: str, extra: bytes, bad: bool) -> None:
        """A field the records do not declare is decided by pydantic: a line it refuses for what such a
        field holds is a bad line to the fast loader too (report and --validate count the same lines)."""
        lines = [dumps_record(r).encode() for r in records(3)]
        anchor = {"top": b'"task_id":', "action": b'"depth":1,', "first_failure": b'"first_failure":{'}[where]
        assert anchor in lines[1]
        inserted = anchor.replace(b"{", b"{" + extra + b",") if where == "first_failure" else extra + b"," + anchor
        lines[1] = lines[1].replace(anchor, inserted, 1)
        path = tmp_path / "r.jsonl"
        path.write_bytes(b"".join(line + b"\n" for line in lines))
        errors: list[BadLine] = []
        validated: list[BadLine] = []
        columns = load_columns(path, on_error="skip", errors=errors)
        assert_same(columns, columns_from_records(read_records(path, on_error="skip", errors=validated)))
        assert [(e.line, e.message) for e in errors] == [(e.line, e.message) for e in validated]
        assert len(columns) == (2 if bad else 3)
        assert [e.line for e in errors] == ([2] if bad else [])

    def test_missing_file(self, tmp_path: Path) -> None:
        """A missing file raises FileNotFoundError."""
        with pytest.raises(FileNotFoundError):
            load_columns(tmp_path / "nope.jsonl")


@pytest.fixture
def clean_registry() -> Iterator[None]:
    """Restore the reader registry after a test."""
    saved = list(inputs_module._READERS)
    yield
    inputs_module._READERS[:] = saved


def read_episode_csv(source: inputs_module.Source, on_error: str, errors: list[BadLine] | None) -> EpisodeColumns:
    """A reader for a CSV of episodes (episode_id, task_id, model, horizon, fed, outcome)."""
    builder = ColumnBuilder()
    if True:
        for row in csv.DictReader(line.decode() for line in source.lines()):
            horizon, fed = int(row["horizon"]), int(row["fed"])
            builder.add(
                episode_id=row["episode_id"],
                task_id=row["task_id"],
                labels={"model": row["model"]},
                horizon=horizon,
                fed=fed,
                outcome={"success": 0, "partial": 1, "failure": 2}[row["outcome"]],
                cause=-1 if fed == horizon + 1 else 0,
                failure_tool=None,
                failure_reason=None,
            )
    return builder.build()


class TestTextColumns:
    """Episode ids and failure reasons of a file stay on disk until something reads them."""

    def test_a_report_reads_no_text(self, tmp_path: Path) -> None:
        """load_columns keeps a key per id; build_report never loads the ids or reasons."""
        path = tmp_path / "r.jsonl"
        write_records(path, records(40))
        columns = load_columns(path)
        assert isinstance(columns.episode_ids, TextColumn) and not columns.episode_ids.loaded
        assert columns.keys is not None and len(columns.keys) == len(columns) == 40
        build_report(columns, bootstrap=0)
        assert isinstance(columns.failure_reason, TextColumn)
        assert not columns.episode_ids.loaded and not columns.failure_reason.loaded
        assert list(columns.episode_ids) == [f"ep-{i}" for i in range(40)]  # read when asked, the same way
        assert_same(columns, columns_from_records(records(40)))

    def test_skipped_lines_stay_skipped(self, tmp_path: Path) -> None:
        """With on_error="skip", reading the text again skips the same bad lines, blank lines too."""
        path = tmp_path / "r.jsonl"
        lines = [dumps_record(r) for r in records(6)]
        path.write_text("\n".join([lines[0], "{oops", "", lines[1], *lines[2:]]) + "\n", encoding="utf-8")
        errors: list[BadLine] = []
        columns = load_columns(path, on_error="skip", errors=errors)
        assert [e.line for e in errors] == [2]
        assert list(columns.episode_ids) == [f"ep-{i}" for i in range(6)]
        assert list(columns.failure_reason) == [r.first_failure.reason if r.first_failure else None for r in records(6)]

    def test_a_rewritten_file_is_noticed(self, tmp_path: Path) -> None:
        """A file rewritten between the read and the text's read is an error naming the file, never mixed in."""
        path = tmp_path / "r.jsonl"
        write_records(path, records(5))
        columns = load_columns(path)
        write_records(path, records(5)[::-1])
        with pytest.raises(RecordError, match="changed after it was read") as caught:
            list(columns.episode_ids)
        assert str(path) in str(caught.value)

    def test_appended_lines_are_not_read(self, tmp_path: Path) -> None:
        """Records appended after the read (a live sink) are not part of the columns read before."""
        path = tmp_path / "r.jsonl"
        write_records(path, records(5))
        columns = load_columns(path)
        with path.open("a", encoding="utf-8") as f:
            f.write(dumps_record(records(7)[6]) + "\n")
        assert list(columns.episode_ids) == [f"ep-{i}" for i in range(5)]

    def test_duplicates_are_found_by_key_and_decided_by_id(self, tmp_path: Path) -> None:
        """The same episode in two files counts once; the ids are read only because a key repeats."""
        a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
        write_records(a, records(5))
        write_records(b, records(5)[3:])
        columns, again = distinct_episodes(load_columns(a, b))
        assert again == ["ep-3", "ep-4"] and len(columns) == 5
        once, none = distinct_episodes(load_columns(a))
        assert none == [] and isinstance(once.episode_ids, TextColumn) and not once.episode_ids.loaded

    def test_a_pipe_keeps_its_text(self, tmp_path: Path) -> None:
        """A source that cannot be read twice (a pipe) keeps the text in memory."""
        builder = ColumnBuilder()
        builder.add(
            episode_id="e", task_id="t", labels={}, horizon=1, fed=2, outcome=0, cause=-1, failure_tool=None, failure_reason=None
        )
        columns = builder.build()
        assert columns.episode_ids == ("e",) and columns.keys is not None


_PARALLEL_READ = """
import json, os, sys
from prefixmon.analytics import _parallel, load_columns
from prefixmon.records import BadLine, RecordError
_parallel.MIN_BYTES = 1  # every file counts as large
path, on_error = sys.argv[1], sys.argv[2]
workers = _parallel.workers_for(path, 10**9)
errors = []
try:
    c = load_columns(path, on_error=on_error, errors=errors)
except RecordError as e:
    print(json.dumps({"workers": workers, "raised": [e.line, str(e)]}))
    raise SystemExit(0)
print(json.dumps({
    "workers": workers, "horizon": c.horizon.tolist(), "fed": c.fed.tolist(), "outcome": c.outcome.tolist(),
    "cause": c.cause.tolist(), "tasks": [c.task_ids[i] for i in c.task], "labels": [c.label_sets[i] for i in c.label_set],
    "ids": list(c.episode_ids), "reasons": list(c.failure_reason), "tools": list(c.failure_tool),
    "errors": [[e.line, e.truncated, e.message] for e in errors],
}))
"""


class TestParallelRead:
    """A large file read by several processes gives what one process gives, line numbers included.

    Run in a fresh process: the reader forks only a process without other threads, and this
    test process has the sink writers and exporters of other tests.
    """

    def read(self, path: Path, on_error: str = "skip") -> dict[str, Any]:
        env = {**os.environ, "PREFIXMON_READ_WORKERS": "3"}
        done = subprocess.run(
            [sys.executable, "-c", _PARALLEL_READ, str(path), on_error], capture_output=True, text=True, env=env, check=True
        )
        out: dict[str, Any] = json.loads(done.stdout)
        if out["workers"] < 2:
            pytest.skip("one core, or not Linux: every file is read by one process")
        return out

    def lines(self) -> list[str]:
        lines = [dumps_record(r) for r in records(40)]
        lines[25] = "{not json"
        lines.insert(10, "   ")
        return lines

    def test_same_columns_as_one_process(self, tmp_path: Path) -> None:
        """Columns, skipped lines (global numbers) and the text read again equal the sequential read's."""
        path = tmp_path / "r.jsonl"
        path.write_text("\n".join(self.lines()) + "\n", encoding="utf-8")
        got = self.read(path)
        errors: list[BadLine] = []
        one = load_columns(path, on_error="skip", errors=errors)  # this process: one reader
        assert [e[0] for e in got["errors"]] == [e.line for e in errors] == [27]  # (after the blank line 11)
        assert got["horizon"] == one.horizon.tolist() and got["fed"] == one.fed.tolist()
        assert got["outcome"] == one.outcome.tolist() and got["cause"] == one.cause.tolist()
        assert got["tasks"] == [one.task_ids[i] for i in one.task]
        assert got["labels"] == [one.label_sets[i] for i in one.label_set]
        assert got["ids"] == list(one.episode_ids) and got["reasons"] == list(one.failure_reason)
        assert got["tools"] == list(one.failure_tool) and len(got["ids"]) == 39

    def test_the_first_bad_line_of_the_file_is_raised(self, tmp_path: Path) -> None:
        """Under on_error="raise" the error names the file's first bad line, whichever process read it."""
        path = tmp_path / "r.jsonl"
        lines = self.lines()
        lines[38] = lines[38].replace('"fed":', '"fed":"x",  "_":')
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        line, message = self.read(path, "raise")["raised"]
        assert line == 27 and str(path) in message

    def test_a_truncated_last_line(self, tmp_path: Path) -> None:
        """An unterminated last line that is not a record is reported as truncated, at its global line."""
        path = tmp_path / "r.jsonl"
        good = [dumps_record(r) for r in records(30)]
        path.write_text("\n".join(good) + "\n" + good[0][:40], encoding="utf-8")
        got = self.read(path)
        assert len(got["ids"]) == 30 and [e[:2] for e in got["errors"]] == [[31, True]]


class TestOtlpTraces:
    """Reports read OTLP JSON traces (the file exporter's JSON Lines) like record files."""

    async def test_same_metrics_from_traces_and_records(self, tools: Toolset, tmp_path: Path) -> None:
        """A real monitored run exported both ways gives the same cohorts, curves and causes."""
        sink, traces = tmp_path / "episodes.jsonl", tmp_path / "traces.otlp.jsonl"
        otel = configure_otel(otlp_file=traces, batch=False)
        telemetry = Telemetry(tracer_provider=otel.tracer_provider, metrics=False)
        for method in ("careful", "hasty"):
            monitor = Monitor(tools, policy="block", sink=sink, observers=[telemetry], labels={"method": method})
            for t in range(4):
                async with monitor.episode(task_id=f"t-{t}") as ep:
                    ep.user("text Amara: hi")
                    if method == "careful" or t % 2:
                        await ep.call("search_contacts", {"name": "Amara"})
                        await ep.call("set_cellular", {"on": True})
                    with contextlib.suppress(ToolBlocked):
                        await ep.call("send_message", {"person_id": "p-2", "text": "hi"})
                    ep.finish("success" if t % 3 else "failure")
        otel.shutdown()
        from_records = build_report(load_columns(sink), by=["method"], bootstrap=0)
        from_traces = build_report(load_columns(traces), by=["method"], bootstrap=0)
        hasty = from_records.cohort(method="hasty")
        assert hasty.rr.eligible == 2 and hasty.causes["dependency"] == 2
        assert from_traces.to_dict()["cohorts"] == from_records.to_dict()["cohorts"]


class TestRegistry:
    """Other input formats plug in without touching the report."""

    def test_registered_reader_is_used(self, tmp_path: Path, clean_registry: None) -> None:
        """A sniffer claims its files; the report treats them like records."""
        path = tmp_path / "episodes.csv"
        path.write_text("episode_id,task_id,model,horizon,fed,outcome\ne1,t1,m,3,4,success\ne2,t2,m,2,1,failure\n")
        register_reader("episode-csv", sniff=lambda p, head: p.endswith(".csv"), read=read_episode_csv)
        report = build_report(load_columns(path), bootstrap=0)
        assert report.cohorts[0].ter.value == 0.5
        assert inputs_module.input_formats() == ("episode-csv", "parquet", "otlp", "records")

    def test_a_label_named_resource_spans_is_still_a_record(self, tmp_path: Path) -> None:
        """Only a top-level resourceSpans key makes a file OTLP; a label of that name does not."""
        path = tmp_path / "r.jsonl"
        write_records(path, records(4, {"resourceSpans": "x"}))
        assert len(load_columns(path)) == 4
