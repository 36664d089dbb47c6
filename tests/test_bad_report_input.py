"""Bad files given to the record readers and to ``prefixmon report``: a clear error naming the
file and line (or episode), never a traceback, and nothing counted twice or blown up in memory."""

from __future__ import annotations

import importlib.util
import json
import os
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from prefixmon import Monitor, RecordError, Toolset, read_records
from prefixmon._cli import main
from prefixmon.analytics import load_columns
from prefixmon.analytics.completion import read_annotations
from prefixmon.records import MAX_HORIZON, ActionRecord, BadLine, build_record, dumps_record
from prefixmon.records.otlp import read_otlp_records

NOW = datetime(2026, 11, 30, tzinfo=UTC)


def record_line(episode_id: str = "e-1", **changes: Any) -> str:
    """A valid record of two executable actions, as one JSON line, with top-level fields changed."""
    actions = [ActionRecord(depth=d, tool="t", executable=True) for d in (1, 2)]
    record = build_record(
        episode_id=episode_id, task_id="task", labels={}, actions=actions, outcome=None, started_at=NOW, ended_at=NOW
    )
    data = json.loads(dumps_record(record))
    data.update(changes)
    return json.dumps(data)


def write(path: Path, *lines: str) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


class TestImplausibleRecords:
    """A record whose numbers no episode can have is refused with file and line."""

    def test_huge_horizon_without_its_actions_is_refused_by_both_readers(self, tmp_path: Path) -> None:
        """Without actions any horizon used to pass, and a report's curves grew with it."""
        huge = MAX_HORIZON + 1
        path = write(tmp_path / "r.jsonl", record_line(), record_line("e-2", horizon=huge, fed=huge + 1, actions=[]))
        with pytest.raises(RecordError, match=r"r\.jsonl:2: .*horizon.*must come with its actions"):
            read_records(path)
        with pytest.raises(RecordError, match=r"r\.jsonl:2: .*horizon.*must come with its actions"):
            load_columns(path)
        skipped: list[BadLine] = []
        assert len(load_columns(path, on_error="skip", errors=skipped)) == 1 and skipped[0].line == 2

    async def test_an_episode_longer_than_the_bare_limit_is_recorded_and_read(self, tmp_path: Path) -> None:
        """A real episode past MAX_HORIZON calls closes normally, and both readers take its record."""
        tools = Toolset()

        @tools.tool
        def ping(n: int) -> int:
            return n

        path = tmp_path / "long.jsonl"
        async with Monitor(tools, sink=path).episode("t") as ep:
            for _ in range(MAX_HORIZON + 1):
                await ep.call("ping", {"n": 1})
        (record,) = read_records(path)
        assert record.horizon == MAX_HORIZON + 1 and record.executable
        assert int(load_columns(path).horizon[0]) == MAX_HORIZON + 1

    @pytest.mark.parametrize(
        ("actions", "fed", "executable", "message"),
        [
            ([{"depth": 7, "tool": "t", "executable": True}] * 2, 3, True, "action 1 has depth 7"),
            ([{"depth": 1, "tool": "t", "executable": True}, {"depth": 2, "tool": "t", "executable": True}], 1, False, "fed 1"),
        ],
    )
    def test_actions_must_agree_with_the_episode(
        self, tmp_path: Path, actions: list[dict[str, Any]], fed: int, executable: bool, message: str
    ) -> None:
        """--validate (read_records) checks depths 1..T and that FED is the first non-executable action."""
        first = None if executable else {"depth": fed, "tool": "t", "cause": "schema", "reason": "r"}
        line = record_line(actions=actions, fed=fed, executable=executable, first_failure=first)
        path = write(tmp_path / "r.jsonl", line)
        with pytest.raises(RecordError, match=message):
            read_records(path)


class TestOtlpInput:
    """OTLP trace files with values the rebuild cannot take."""

    @staticmethod
    def traces(tmp_path: Path) -> Path:
        """Real OTLP JSON lines from a monitored episode."""
        from prefixmon.telemetry import Telemetry
        from prefixmon.telemetry.otel_setup import configure_otel

        path = tmp_path / "t.otlp.jsonl"
        otel = configure_otel(otlp_file=path, batch=False, service_name="bad-input")
        tools = Toolset()

        @tools.tool
        def ping(n: int) -> int:
            return n

        async def run() -> None:
            monitor = Monitor(tools, observers=[Telemetry(tracer_provider=otel.tracer_provider, metrics=False)])
            async with monitor.episode("t") as ep:
                await ep.call("ping", {"n": 1})
                ep.finish("success")

        import anyio

        anyio.run(run)
        otel.shutdown()
        return path

    def edit_episode_span(self, path: Path, key: str, value: Any) -> None:
        """Set an attribute (or, for a key without a dot, a field) of the episode span."""
        lines = path.read_text(encoding="utf-8").splitlines()
        out = []
        for line in lines:
            data = json.loads(line)
            for rs in data["resourceSpans"]:
                for ss in rs["scopeSpans"]:
                    for span in ss["spans"]:
                        attrs = span.get("attributes", [])
                        if not any(a["key"] == "prefixmon.horizon" for a in attrs):
                            continue
                        if "." not in key:
                            span[key] = value
                        for attr in attrs:
                            if attr["key"] == key:
                                attr["value"] = value
            out.append(json.dumps(data))
        path.write_text("\n".join(out) + "\n", encoding="utf-8")

    @pytest.mark.parametrize(
        ("key", "value", "message"),
        [
            ("prefixmon.outcome", {"stringValue": "great"}, "'great' is not a valid Outcome"),
            ("prefixmon.horizon", {"doubleValue": "Infinity"}, "episode"),
            ("prefixmon.horizon", {"intValue": str(10**9)}, "must come with its call spans"),
            ("startTimeUnixNano", str(10**30), "episode"),
        ],
    )
    def test_bad_values_are_reported_with_the_episode(self, tmp_path: Path, key: str, value: Any, message: str) -> None:
        path = self.traces(tmp_path)
        self.edit_episode_span(path, key, value)
        episode_id = read_records_id(path)
        with pytest.raises(RecordError, match=f"episode {episode_id!r}: .*{message}" if message != "episode" else "episode"):
            read_otlp_records(path)
        assert read_otlp_records(path, on_error="skip") == []

    def test_deeply_nested_line_is_a_bad_line(self, tmp_path: Path) -> None:
        path = self.traces(tmp_path)
        with path.open("a", encoding="utf-8") as f:
            f.write("[" * 100_000 + "\n")
        with pytest.raises(RecordError, match=r"t\.otlp\.jsonl:\d+: not OTLP JSON trace data: nested too deeply"):
            read_otlp_records(path)
        assert len(read_otlp_records(path, on_error="skip")) == 1


def read_records_id(path: Path) -> str:
    """The episode id on the episode span of an OTLP file."""
    for line in path.read_text(encoding="utf-8").splitlines():
        for rs in json.loads(line)["resourceSpans"]:
            for ss in rs["scopeSpans"]:
                for span in ss["spans"]:
                    attrs = {a["key"]: a["value"] for a in span.get("attributes", [])}
                    if "prefixmon.horizon" in attrs:
                        return str(attrs["prefixmon.episode.id"]["stringValue"])
    raise AssertionError("no episode span")


class TestAnnotations:
    """The attribution file of `report --annotations`."""

    def test_non_utf8_and_deep_lines_name_file_and_line(self, tmp_path: Path) -> None:
        path = tmp_path / "ann.jsonl"
        path.write_bytes(b'{"task_id": "t", "attribution": "planning"}\n{"task_id": "\xff"}\n')
        with pytest.raises(RecordError, match=r"ann\.jsonl:2: not UTF-8"):
            read_annotations(path)
        path.write_bytes(b"[" * 100_000 + b"\n")
        with pytest.raises(RecordError, match=r"ann\.jsonl:1: .*nested too deeply"):
            read_annotations(path)


class TestReportCommand:
    """`prefixmon report` exits with a message, and counts each episode once."""

    def test_the_same_episode_read_twice_counts_once(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        path = write(tmp_path / "r.jsonl", record_line("e-1"), record_line("e-2"))
        assert main(["report", str(path), str(path), "--format", "json", "--bootstrap", "0"]) == 0
        out = capsys.readouterr()
        assert "2 episode(s) read more than once, each counted once (first: 'e-1')" in out.err
        assert json.loads(out.out)["cohorts"][0]["n"] == 2

    def test_strata_no_episode_has_is_an_error(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """A mistyped --strata names the labels present, as a mistyped --by does; the default (dataset) may be absent."""
        path = write(tmp_path / "r.jsonl", record_line("e-1", labels={"dataset": "d1", "model": "m"}))
        sql = importlib.util.find_spec("duckdb") is not None and importlib.util.find_spec("pyarrow") is not None
        for engine in ("python", "duckdb") if sql else ("python",):  # (the floor environment has no parquet extra)
            source = path
            if engine == "duckdb":
                source = tmp_path / "r.parquet"
                assert main(["export", str(path), "--out", str(source)]) == 0
                capsys.readouterr()
            assert main(["report", str(source), "--strata", "datset", "--engine", engine, "--bootstrap", "0"]) == 1
            assert "no episode has the label 'datset' (labels present: dataset, model)" in capsys.readouterr().err
        plain = write(tmp_path / "plain.jsonl", record_line("e-1"))
        assert main(["report", str(plain), "--strata", "dataset", "--bootstrap", "0"]) == 0

    def test_negative_seed_names_the_option(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        path = write(tmp_path / "r.jsonl", record_line())
        with pytest.raises(SystemExit) as e:
            main(["report", str(path), "--seed", "-1"])
        assert e.value.code == 2
        assert "--seed" in capsys.readouterr().err

    def test_input_too_deep_for_any_reader_is_an_error_message(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        path = write(tmp_path / "r.jsonl", record_line())
        ann = tmp_path / "ann.jsonl"
        ann.write_bytes(b"[" * 100_000 + b"\n")
        assert main(["report", str(path), "--annotations", str(ann), "--bootstrap", "0"]) == 1
        assert "nested too deeply" in capsys.readouterr().err


class TestArgumentBuffers:
    """bytearray and memoryview arguments are JSON text like bytes."""

    async def test_bytearray_and_memoryview(self) -> None:
        tools = Toolset()

        @tools.tool
        def echo(text: str) -> str:
            return text

        async with Monitor(tools).episode("t") as ep:
            for raw in (bytearray(b'{"text": "a"}'), memoryview(b'{"text": "a"}')):
                assert ep.check("echo", raw).executable  # type: ignore[arg-type]


class TestEveryLineWhole:
    """The fast loader reads each line to its end and agrees with --validate on every line (issues 19, 20)."""

    def test_a_line_cut_after_actions_is_bad(self, tmp_path: Path) -> None:
        """Cut after ',"actions":' the line used to count as a valid episode."""
        line = record_line()
        cut = line[: line.index('"actions":') + 20]
        path = write(tmp_path / "r.jsonl", record_line("e-0"), cut, record_line("e-2"))
        for read in (load_columns, read_records):
            with pytest.raises(RecordError, match=r"r\.jsonl:2: not valid JSON"):
                read(path)

    def test_half_line_running_into_the_next_record(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """A half-written line glued to the next record: exit 1 naming the line; under skip it is counted."""
        first, second = record_line("e-1"), record_line("e-2")
        glued = first[: first.index('"actions":') + 15] + second
        path = write(tmp_path / "r.jsonl", record_line("e-0"), glued, record_line("e-3"))
        assert main(["report", str(path), "--bootstrap", "0"]) == 1
        assert f"{path}:2: not valid JSON" in capsys.readouterr().err
        assert main(["report", str(path), "--bootstrap", "0", "--format", "json", "--on-error", "skip"]) == 0
        out = capsys.readouterr()
        doc = json.loads(out.out)
        assert doc["episodes"] == 2 and [s["line"] for s in doc["skipped_lines"]] == [2]
        assert f"skipped {path}:2" in out.err

    def test_truncated_last_line_exits_1(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """--on-error raise (the default) stops at a truncated last line, as --help says."""
        path = tmp_path / "r.jsonl"
        path.write_text(record_line("e-1") + "\n" + record_line("e-2")[:50], encoding="utf-8")
        assert main(["report", str(path), "--bootstrap", "0"]) == 1
        assert f"{path}:2: truncated last line" in capsys.readouterr().err

    @pytest.mark.parametrize(
        "line",
        [
            record_line()[:-1] + ',"fed":1}',  # a duplicate key after the actions: the last one counts
            record_line()[:-1] + ',"horizon":2,"fed":3}',
            record_line() + " garbage",  # garbage after a valid record
            record_line() + "}",
            record_line(outcome=["success"]),  # wrong type: a message, not a traceback
            record_line(outcome={"a": 1}),
            record_line(labels={"resourceSpans": "x"}),
            record_line(horizon=True),
            record_line(started_at="2026-02-30T00:00:00Z"),
            record_line(actions=[{"depth": 1, "tool": "t", "executable": True, "decision": "maybe"}] * 2),
            record_line(probes=[{"depth": "x"}]),  # the fast loader used to skip the probes unread
            record_line(probes=5),
            record_line(probes=None),
            record_line(probes=[{"depth": 1, "tool": "get_order", "object": "order", "ok": True}]),
        ],
    )
    def test_both_readers_give_one_answer(self, tmp_path: Path, line: str) -> None:
        """The lines the two readers used to disagree on: the same verdict, values and message."""
        path = write(tmp_path / "r.jsonl", line)
        fast: Any
        validated: Any
        try:
            fast = load_columns(path)
        except RecordError as e:
            fast = str(e)
        try:
            validated = read_records(path)
        except RecordError as e:
            validated = str(e)
        if isinstance(validated, str):
            assert fast == validated
        else:
            assert not isinstance(fast, str), fast
            assert int(fast.fed[0]) == validated[0].fed and int(fast.horizon[0]) == validated[0].horizon


def _mutations() -> list[str]:
    """A valid record with one field at a time made wrong (or null, or gone), top level, in an
    action, in the first failure and in a probe: the lines where a fast reader could differ."""
    base = json.loads(record_line())
    base["labels"] = {"dataset": "d", "model": "m"}
    base["probes"] = [{"depth": 1, "tool": "t", "object": "order", "ok": True, "error": None}]
    failing = json.loads(json.dumps(base))
    failing["fed"], failing["executable"], failing["outcome"] = 2, False, "failure"
    failing["actions"][1].update(executable=False, cause="schema", reason="bad 'x'")
    failing["first_failure"] = {"depth": 2, "tool": "t", "cause": "schema", "reason": "bad 'x'"}
    wrong: list[Any] = [None, True, 0, 2, -1, 1.0, "x", "", [], {}, [1], {"a": "b"}, 2**64, "2026-01-01T00:00:00Z"]
    lines = [json.dumps(base), json.dumps(failing)]

    def variants(record: dict[str, Any], where: list[Any]) -> None:
        target: Any = record
        for step in where:
            target = target[step]
        for key in list(target):
            for value in wrong:
                changed = json.loads(json.dumps(record))
                spot = changed
                for step in where:
                    spot = spot[step]
                spot[key] = value
                lines.append(json.dumps(changed))
            gone = json.loads(json.dumps(record))
            spot = gone
            for step in where:
                spot = spot[step]
            del spot[key]
            lines.append(json.dumps(gone))

    for record in (base, failing):
        variants(record, [])
        variants(record, ["actions", 1])
        variants(record, ["probes", 0])
        variants(record, ["labels"])
    variants(failing, ["first_failure"])
    return lines


class TestOneAnswerPerLine:
    """The fast loader and pydantic (``--validate``) give the same verdict, message and values on every line."""

    def test_every_field_made_wrong(self, tmp_path: Path) -> None:
        lines = _mutations()
        path = write(tmp_path / "r.jsonl", *(line.replace("e-1", f"e-{i}") for i, line in enumerate(lines)))
        fast_errors: list[BadLine] = []
        slow_errors: list[BadLine] = []
        columns = load_columns(path, on_error="skip", errors=fast_errors)
        records = read_records(path, on_error="skip", errors=slow_errors)
        assert [(e.line, e.message) for e in fast_errors] == [(e.line, e.message) for e in slow_errors]
        assert 0 < len(records) < len(lines)
        assert list(columns.episode_ids) == [r.episode_id for r in records]
        assert columns.fed.tolist() == [r.fed for r in records]
        assert columns.horizon.tolist() == [r.horizon for r in records]
        assert [columns.label_sets[i] for i in columns.label_set] == [r.labels for r in records]
        assert [columns.task_ids[i] for i in columns.task] == [r.task_id for r in records]
        assert list(columns.failure_reason) == [None if r.first_failure is None else r.first_failure.reason for r in records]


class TestPipes:
    """Records from a pipe or a named FIFO are read once, from their first byte."""

    @staticmethod
    def feed(fd_or_path: int | str, data: bytes) -> threading.Thread:
        def run() -> None:
            if isinstance(fd_or_path, int):
                with os.fdopen(fd_or_path, "wb") as f:
                    f.write(data)
            else:
                with open(fd_or_path, "wb") as f:
                    f.write(data)

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        return thread

    def test_dev_fd_pipe_loses_nothing(self) -> None:
        """`report <(zcat ...)`: the first 4 KB used to go to format detection."""
        data = "".join(record_line(f"e-{i}") + "\n" for i in range(200)).encode()
        assert len(data) > 16_384
        read_fd, write_fd = os.pipe()
        thread = self.feed(write_fd, data)
        try:
            columns = load_columns(f"/dev/fd/{read_fd}")
        finally:
            os.close(read_fd)
            thread.join(5)
        assert len(columns) == 200

    def test_named_fifo(self, tmp_path: Path) -> None:
        """A named FIFO used to hang (opened twice: the writer was gone the second time)."""
        fifo = tmp_path / "records.fifo"
        os.mkfifo(fifo)
        data = "".join(record_line(f"e-{i}") + "\n" for i in range(50)).encode()
        thread = self.feed(str(fifo), data)
        columns = load_columns(fifo)
        thread.join(5)
        assert len(columns) == 50


class TestOtlpErrorsNameTheFile:
    """An OTLP episode that cannot be rebuilt is reported with the file and line of its episode span."""

    def test_raise_and_skip(self, tmp_path: Path) -> None:
        path = TestOtlpInput.traces(tmp_path)
        TestOtlpInput().edit_episode_span(path, "prefixmon.outcome", {"stringValue": "great"})
        with pytest.raises(RecordError, match=rf"{path.name}:\d+: cannot rebuild the record"):
            read_otlp_records(path)
        skipped: list[BadLine] = []
        assert len(load_columns(path, on_error="skip", errors=skipped)) == 0
        assert skipped and skipped[0].path == str(path) and skipped[0].line >= 1


class TestPerDepthSizing:
    """Per-depth arrays are sized by what occurs, not by cohorts x the largest horizon (issue 19)."""

    def test_many_cohorts_with_long_bare_horizons(self, tmp_path: Path) -> None:
        """300 one-episode cohorts with bare horizons near the limit: a ~70 KB file, a report in bounded memory."""
        import subprocess
        import sys

        path = tmp_path / "r.jsonl"
        h = MAX_HORIZON
        lines = [
            record_line(
                f"e-{i}",
                labels={"model": f"m{i}"},
                horizon=h - i,
                fed=1 + i,
                executable=False,
                actions=[],
                first_failure={"depth": 1 + i, "tool": "t", "cause": "schema", "reason": "r"},
            )
            for i in range(300)
        ]
        write(path, *lines)
        script = (
            "from prefixmon._cli import main\n"
            f"code = main(['report', {str(path)!r}, '--by', 'model', '--bootstrap', '0', '--format', 'table'])\n"
            # VmHWM: this process's peak since exec (ru_maxrss would include the forking test runner)
            "hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM')][0].split()[1]\n"
            "print(code, int(hwm) // 1024)\n"
        )
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        code, peak_mb = (int(x) for x in done.stdout.strip().splitlines()[-1].split())
        assert code == 0
        assert peak_mb < 400, f"{peak_mb} MB"  # dense cohorts x horizon curves took gigabytes

    def test_curves_read_like_tuples(self, tmp_path: Path) -> None:
        """The step curves give the values a dense curve would, index by index."""
        from prefixmon.analytics import build_report

        path = write(
            tmp_path / "r.jsonl",
            record_line("e-1", horizon=50_000, fed=50_001, actions=[]),
            record_line(
                "e-2",
                horizon=3,
                fed=2,
                executable=False,
                actions=[],
                first_failure={"depth": 2, "tool": "t", "cause": "schema", "reason": "r"},
            ),
        )
        c = build_report(load_columns(path), bootstrap=0).cohorts[0]
        assert len(c.pec) == len(c.n_k) == len(c.pec_elig) == 50_000
        assert c.pec[:4] == (1.0, 0.5, 0.5, 0.5) and c.pec[-1] == 0.5
        assert c.n_k[:4] == (2, 2, 2, 1) and c.n_k[-1] == 1
        assert c.pec_elig[3] == 1.0
        assert list(c.pec)[49_999] == 0.5


def bare_horizon_cohorts(path: Path, cohorts: int = 200) -> Path:
    """Issue 39's input: ``cohorts`` one-episode cohorts, each a bare horizon of MAX_HORIZON (40 KB for 200).

    Every eighth episode fails, each at its own depth, so that the curves have steps to keep.
    """
    lines = []
    for i in range(cohorts):
        fails = i % 8 == 1
        fed = 1 + 400 * i if fails else MAX_HORIZON + 1
        record: dict[str, Any] = {
            "episode_id": f"e{i}",
            "task_id": f"t{i % 7}",
            "labels": {"model": f"m{i}"},
            "horizon": MAX_HORIZON,
            "fed": fed,
            "executable": not fails,
            "actions": [],
            "started_at": "2026-11-30T00:00:00Z",
            "ended_at": "2026-11-30T00:00:00Z",
        }
        if fails:
            record["first_failure"] = {"depth": fed, "tool": "t", "cause": "schema", "reason": "r"}
        lines.append(json.dumps(record, separators=(",", ":")))
    return write(path, *lines)


class TestOutputBoundedByInput:
    """A report's memory and output grow with what its input holds, not with its horizons (issue 39)."""

    @pytest.mark.parametrize("fmt", ["json", "table", "markdown", "csv"])
    def test_long_bare_horizons(self, tmp_path: Path, fmt: str) -> None:
        """200 cohorts of one 100,000-call bare horizon, default bootstrap: under 200 MB and under 5 MB written.

        One value per depth was 6.75 GB and 740 MB of JSON (a MemoryError under 1.5 GB), and
        every cohort's resampled sums at once 500 MB in any format.
        """
        import subprocess
        import sys

        path = bare_horizon_cohorts(tmp_path / "r.jsonl")
        assert path.stat().st_size < 45_000  # the file: 34 KB
        out = tmp_path / f"report.{fmt}"
        script = (
            "import resource\n"
            # a regression fails here in bounded memory and disk, not by filling the machine
            "resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))\n"
            "resource.setrlimit(resource.RLIMIT_FSIZE, (64 << 20, 64 << 20))\n"
            "from prefixmon._cli import main\n"
            f"code = main(['report', {str(path)!r}, '--format', {fmt!r}, '--output', {str(out)!r}])\n"
            # VmHWM: this process's peak since exec (ru_maxrss would include the forking test runner)
            "hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM')][0].split()[1]\n"
            "print(code, int(hwm) // 1024)\n"
        )
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        code, peak_mb = (int(x) for x in done.stdout.strip().splitlines()[-1].split())
        assert code == 0
        assert peak_mb < 200, f"{peak_mb} MB"
        assert out.stat().st_size < 5_000_000, f"{out.stat().st_size} bytes"

    def test_json_curves_are_the_report_curves(self, tmp_path: Path) -> None:
        """The JSON keeps each curve's steps only, and they give the value at every depth."""
        from prefixmon.analytics import build_report
        from prefixmon.analytics.curves import StepCurve

        report = build_report(load_columns(bare_horizon_cohorts(tmp_path / "r.jsonl")), by=["model"], bootstrap=0)
        doc = json.loads(json.dumps(report.to_dict()))
        for c, d in zip(report.cohorts, doc["cohorts"], strict=True):
            for name in ("pec", "pec_elig", "n_k"):
                assert d[name]["length"] == MAX_HORIZON and len(d[name]["depth"]) <= 2
                assert StepCurve.from_dict(d[name]) == getattr(c, name)
            assert d["n_k"] == {"length": MAX_HORIZON, "depth": [1], "value": [1]}
        failing = report.cohort(model="m9")  # FED 3601
        assert failing.pec[3599] == 1.0 and failing.pec[3600] == 0.0 and failing.pec[-1] == 0.0
        assert doc["cohorts"][report.cohorts.index(failing)]["pec"] == {
            "length": MAX_HORIZON,
            "depth": [1, 3601],
            "value": [1.0, 0.0],
        }

    def test_sql_engine_rows_follow_the_episodes(self, tmp_path: Path) -> None:
        """DuckDB: no query returns more than 3 rows per episode, and the report is the in-process one.

        The curves were a grid of every depth: 20 million rows for this input (7 GB and 740 MB of
        JSON from a 34 KB file). Each query is counted by the engine before its rows are fetched.
        """
        pytest.importorskip("duckdb", reason="the duckdb extra is not installed")
        pytest.importorskip("pyarrow", reason="the parquet extra is not installed")
        from prefixmon.analytics import build_report
        from prefixmon.analytics.engines import open_backend
        from prefixmon.analytics.engines.sql import Backend, Rows, sql_report

        records = bare_horizon_cohorts(tmp_path / "r.jsonl")
        parquet = tmp_path / "r.parquet"
        assert main(["export", str(records), "--out", str(parquet)]) == 0
        inner = open_backend([parquet], "duckdb")
        bound = 3 * 200

        class Counted(Backend):
            """The DuckDB backend, refusing a query whose answer would be larger than the bound."""

            dialect = inner.dialect

            def query(self, sql: str) -> Rows:
                (rows,) = inner.query(f"SELECT COUNT(*) FROM ({sql}) counted")[0]
                assert int(rows) <= bound, f"{rows} rows: {sql[:200]}"
                return inner.query(sql)

            def materialize(self, name: str, sql: str) -> None:
                inner.materialize(name, sql)

        try:
            got = sql_report(Counted(), bootstrap=0).to_dict()
        finally:
            getattr(inner, "close", lambda: None)()
        assert got == build_report(load_columns(records), bootstrap=0).to_dict()
