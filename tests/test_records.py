"""Episode records: derivation, validation, the JSONL sink and the reader."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic_core import PydanticSerializationError

from prefixmon import (
    ActionRecord,
    BadLine,
    Cause,
    Decision,
    EpisodeRecord,
    JsonlSink,
    Outcome,
    RecordError,
    iter_records,
    read_records,
)
from prefixmon.records import RECORD_ADAPTER, build_record, dumps_record, loads_record, record_line

NOW = datetime(2026, 11, 30, tzinfo=UTC)


def make(actions: list[ActionRecord]) -> EpisodeRecord:
    return build_record(
        episode_id="e",
        task_id="t",
        labels={"model": "m"},
        actions=actions,
        outcome=Outcome.SUCCESS,
        started_at=NOW,
        ended_at=NOW,
    )


class TestBuild:
    def test_fed_and_first_failure(self) -> None:
        """FED is the first non-executable depth; later actions stay in the record."""
        rec = make(
            [
                ActionRecord(depth=1, tool="a", executable=True),
                ActionRecord(depth=2, tool="b", executable=False, cause=Cause.PRECONDITION, reason="r", decision=Decision.BLOCK),
                ActionRecord(depth=3, tool="c", executable=False, cause=Cause.SCHEMA, reason="s"),
            ]
        )
        assert (rec.horizon, rec.fed, rec.executable) == (3, 2, False)
        assert rec.first_failure is not None and rec.first_failure.cause is Cause.PRECONDITION

    def test_fully_executable(self) -> None:
        """A fully executable episode has FED = T + 1 and no first failure."""
        rec = make([ActionRecord(depth=1, tool="a", executable=True)])
        assert (rec.fed, rec.executable, rec.first_failure) == (2, True, None)

    def test_round_trip(self) -> None:
        """dumps/loads is lossless and carries the schema version."""
        rec = make([ActionRecord(depth=1, tool="a", executable=True, call_id="c1")])
        line = dumps_record(rec)
        assert '"schema":"prefixmon.episode/1"' in line
        assert loads_record(line) == rec

    @pytest.mark.parametrize(
        ("patch", "message"),
        [
            (('"fed":2', '"fed":5'), "fed 5 outside"),
            (('"schema":"prefixmon.episode/1"', '"schema":"prefixmon.episode/9"'), "schema"),
            (('"horizon":1', '"horizon":"many"'), "horizon"),
        ],
    )
    def test_invalid_records_are_rejected(self, patch: tuple[str, str], message: str) -> None:
        """Inconsistent or wrongly typed records fail validation with a pointed message."""
        line = dumps_record(make([ActionRecord(depth=1, tool="a", executable=True)])).replace(*patch)
        with pytest.raises(RecordError, match=message):
            loads_record(line)


class TestRecordLine:
    """The line a sink writes is the line pydantic writes, byte for byte, whichever encoder made it."""

    @given(
        tool=st.text(max_size=12),
        reason=st.text(max_size=40),
        label=st.text(max_size=12),
        micros=st.integers(0, 999_999),
        offset=st.integers(-14 * 60, 14 * 60),
        naive=st.booleans(),
        outcome=st.sampled_from([None, *Outcome]),
        cause=st.sampled_from(list(Cause)),
        decision=st.sampled_from(list(Decision)),
        turn=st.integers(0, 10**6),
    )
    @settings(max_examples=200, deadline=None)
    def test_same_bytes_as_pydantic(
        self,
        tool: str,
        reason: str,
        label: str,
        micros: int,
        offset: int,
        naive: bool,
        outcome: Outcome | None,
        cause: Cause,
        decision: Decision,
        turn: int,
    ) -> None:
        """Text (non-ASCII, control characters), datetimes (offsets, microseconds, naive), enums and nulls."""
        when = datetime(2026, 11, 30, 1, 2, 3, micros, tzinfo=None if naive else timezone(timedelta(minutes=offset)))
        actions = [
            ActionRecord(depth=1, tool=tool, call_id=label, executable=True, decision=decision, turn=turn),
            ActionRecord(depth=2, tool=None, executable=False, cause=cause, reason=reason, error=reason, plan_step=turn),
        ]
        rec = build_record(
            episode_id=label,
            task_id=tool,
            labels={label: reason, "m": tool},
            actions=actions,
            outcome=outcome,
            started_at=when,
            ended_at=when,
            error=reason or None,
        )
        try:
            # pydantic's bytes, without the content keys of actions that have none (records are written as before them)
            expected = (
                RECORD_ADAPTER.dump_json(rec, exclude_none=False).replace(b',"arguments":null,"result":null}', b"}") + b"\n"
            )
        except PydanticSerializationError:  # lone surrogates: escaped instead, by either path
            expected = None
        line = record_line(rec)
        if expected is not None:
            assert line == expected
        assert dumps_record(rec) == line[:-1].decode()
        assert loads_record(line) == rec or expected is None

    def test_lone_surrogates_are_escaped(self) -> None:
        """Text UTF-8 cannot encode is written with backslash escapes; the line is still a record."""
        rec = make([ActionRecord(depth=1, tool="a\ud800", executable=True)])
        line = record_line(rec)
        assert loads_record(line).actions[0].tool == "a\\ud800"  # the escape, as text


class TestReader:
    def test_bad_lines_name_file_and_line(self, tmp_path: Path) -> None:
        """The reader reports a bad line with file and line number, or skips it when asked."""
        good = dumps_record(make([ActionRecord(depth=1, tool="a", executable=True)]))
        path = tmp_path / "r.jsonl"
        path.write_text(f"{good}\n{{not json\n\n{good}\n")
        with pytest.raises(RecordError, match=r"r\.jsonl:2: not valid JSON"):
            read_records(path)
        errors: list[BadLine] = []
        assert len(read_records(path, on_error="skip", errors=errors)) == 2
        assert [(e.line, e.truncated) for e in errors] == [(2, False)]

    def test_truncated_last_line_is_reported_and_skipped(self, tmp_path: Path) -> None:
        """An unterminated last line (killed writer) stops a raising read; skipped, it is reported and the rest kept."""
        good = dumps_record(make([ActionRecord(depth=1, tool="a", executable=True)]))
        path = tmp_path / "r.jsonl"
        path.write_text(f"{good}\n{good[:40]}")
        errors: list[BadLine] = []
        assert len(list(iter_records(path, on_error="skip", errors=errors))) == 1
        assert errors[0].truncated and errors[0].line == 2
        with pytest.raises(RecordError, match=r"r\.jsonl:2: truncated last line"):
            read_records(path)

    def test_sigkill_loses_no_finished_episode(self, tmp_path: Path) -> None:
        """A process killed while writing records keeps every record its writer handed to the OS, in order."""
        path = tmp_path / "r.jsonl"
        script = textwrap.dedent(
            f"""
            import anyio, os, sys
            from prefixmon import Monitor, Toolset
            tools = Toolset()
            @tools.tool
            def ping(n: int) -> int:
                return n
            async def main():
                monitor = Monitor(tools, sink={str(path)!r})
                for i in range(10_000):
                    async with monitor.episode(task_id=str(i)) as ep:
                        await ep.call("ping", {{"n": i}})
                    if i == 50:
                        assert monitor.sink.flush(10)  # the first 51 are in the file: acknowledged
                        print("ready", flush=True)
            anyio.run(main)
            """
        )
        with subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True) as proc:
            assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
        errors: list[BadLine] = []
        records = list(iter_records(path, on_error="skip", errors=errors))
        assert len(records) >= 51
        assert [r.task_id for r in records] == [str(i) for i in range(len(records))]
        assert all(e.truncated for e in errors) and len(errors) <= 1

    def test_sink_appends_one_line_per_episode(self, tmp_path: Path) -> None:
        """JsonlSink appends complete lines."""
        sink = JsonlSink(tmp_path / "sub" / "r.jsonl")
        rec = make([ActionRecord(depth=1, tool="a", executable=True)])
        sink(rec)
        sink(rec)
        assert len(read_records(sink.path)) == 2
