"""prefixmon learn on prefixmon's own output: episode records (JSON Lines, Parquet) and OTLP traces.

Records and traces are made by running real :class:`Monitor` episodes on the shop of
``learn_shop``: every result is what the shop answered (JSON text, or ``Error: ...`` text).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from prefixmon import JsonlSink, Monitor, Telemetry, Toolset
from prefixmon._cli import main
from prefixmon.learn import CorpusError, Problem, Transcript, detect_format, learn, read_transcripts, transcript_reader
from prefixmon.learn.records import NO_CONTENT
from prefixmon.telemetry.otel_setup import configure_otel

from .learn_shop import TOOLS, as_messages, shop_episode

SEEDS = 24


def shop_tools() -> Toolset:
    return Toolset.from_openai(TOOLS)


async def run_shop(monitor: Monitor, seeds: range, extras: bool = False, no_tool: bool = False) -> None:
    """Replay the scripted shop episodes through ``monitor``: every result as the shop returned it.

    ``extras``: the first episode also has a call refused before it ran and one that raised.
    ``no_tool``: one more episode that makes no tool call.
    """
    for seed in seeds:
        recorded = shop_episode(seed)
        async with monitor.episode(task_id=recorded.episode_id) as ep:
            for call in recorded.calls:
                pending = await ep.begin(call.tool, call.arguments)
                pending.done(call.result)  # an "Error: ..." text too: the environment answered with it
            if extras and seed == seeds[0]:
                (await ep.begin("get_order", {"order_id": "#W0"})).abandon("cancelled", started=False)
                (await ep.begin("get_user", {"user_id": "user_0"})).failed(RuntimeError("connection reset"))
    if no_tool:
        async with monitor.episode(task_id="chat", allows_no_tool=True):
            pass


def record_file(path: Path, *, no_tool: bool = False, content: bool = False, seeds: int = 3, **options: Any) -> Path:
    """Episode records as the monitor's JSON Lines sink writes them (``content``: with ``record_content=True``)."""
    sink = JsonlSink(path)
    monitor = Monitor(shop_tools(), sink=sink, record_content=content, **options)
    anyio.run(run_shop, monitor, range(seeds), content, no_tool)
    sink.close()
    return path


@pytest.fixture(scope="module")
def content_records(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The shop episodes recorded with Monitor(record_content=True)."""
    return record_file(tmp_path_factory.mktemp("records") / "records.jsonl", content=True, seeds=SEEDS)


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """OTLP JSON Lines of the shop episodes, recorded with content through the file exporter."""
    path = tmp_path_factory.mktemp("otlp") / "shop.otlp.jsonl"
    otel = configure_otel(otlp_file=path)
    monitor = Monitor(shop_tools(), observers=[Telemetry(tracer_provider=otel.tracer_provider, capture_content=True)])
    anyio.run(run_shop, monitor, range(SEEDS), True)
    otel.shutdown()
    return path


class TestOtlpResultsDecide:
    """A recorded result is judged by its text: Error: texts teach an error recogniser."""

    def test_error_texts_teach_a_recogniser(self, traces: Path) -> None:
        """The monitor had no error recogniser, so it took the Error: texts as accepted; the learner still learns one."""
        spec = learn(read_transcripts([traces]), tools=shop_tools())
        (rule,) = spec.defaults.errors
        assert rule.text == "^Error:" and rule.evidence is not None and rule.evidence.support >= 3
        assert spec.tools["get_order"].args["order_id"].ref == "order_id"

    def test_marks(self, traces: Path) -> None:
        """A call with a result is unmarked; one that raised is an error; one refused before it ran did not run."""
        first = next(t for t in read_transcripts([traces]) if len(list(t.calls)) > 9)
        *ran, refused, raised = first.calls
        assert all(c.error is None and isinstance(c.result, str) for c in ran)
        assert any(c.result.startswith("Error:") for c in ran)
        assert refused.tool == "get_order" and refused.ran is False and refused.result is None
        assert raised.tool == "get_user" and raised.ran and raised.error is True and "connection reset" in raised.result


class TestRecordsWithContent:
    """Records made with Monitor(record_content=True) are learned from as the traces are."""

    def test_error_texts_teach_a_recogniser(self, content_records: Path) -> None:
        """The Error: recogniser and the order_id reference, from JSON Lines records."""
        assert detect_format(content_records) == "records"
        problems: list[Problem] = []
        spec = learn(read_transcripts([content_records], problems=problems), tools=shop_tools())
        assert problems == []
        (rule,) = spec.defaults.errors
        assert rule.text == "^Error:" and rule.evidence is not None and rule.evidence.support >= 3
        assert spec.tools["get_order"].args["order_id"].ref == "order_id"

    def test_marks(self, content_records: Path) -> None:
        """As from traces: results unmarked, a raise an error with its text, a refusal did not run."""
        first = next(t for t in read_transcripts([content_records]) if len(list(t.calls)) > 9)
        *ran, refused, raised = first.calls
        assert all(c.error is None and isinstance(c.result, str) and isinstance(c.arguments, dict) for c in ran)
        assert any(c.result.startswith("Error:") for c in ran)
        assert refused.tool == "get_order" and refused.ran is False and refused.result is None
        assert refused.arguments == {"order_id": "#W0"}
        assert raised.tool == "get_user" and raised.ran and raised.error is True and "connection reset" in raised.result

    def test_parquet(self, tmp_path: Path, content_records: Path) -> None:
        """prefixmon export keeps the content: the same rules from Parquet."""
        pytest.importorskip("pyarrow")
        from prefixmon.records import read_records
        from prefixmon.records.parquet import export_records, read_parquet_records

        out = tmp_path / "records.parquet"
        assert export_records([content_records], out) == SEEDS
        assert read_parquet_records(out) == read_records(content_records)
        spec = learn(read_transcripts([out]), tools=shop_tools())
        assert [r.text for r in spec.defaults.errors] == ["^Error:"]
        assert spec.tools["get_order"].args["order_id"].ref == "order_id"

    def test_redaction(self, tmp_path: Path) -> None:
        """A secret argument value under a key configured for redaction never reaches the file."""
        from prefixmon.records.redaction import redact_keys

        async def run(monitor: Monitor) -> None:
            async with monitor.episode(task_id="t") as ep:
                (await ep.begin("get_user", {"user_id": "user_1", "note": "hunter2-secret"})).done('{"note": "hunter2-secret"}')

        for redact in ("secrets", redact_keys("note")):
            path = tmp_path / "r.jsonl"
            sink = JsonlSink(path)
            anyio.run(run, Monitor(shop_tools(), sink=sink, record_content=True, content_redact=redact))
            sink.close()
            text = path.read_text()
            action = json.loads(text)["actions"][0]
            if redact == "secrets":  # note is no credential key: kept
                assert "hunter2-secret" in action["arguments"]
            else:
                assert "hunter2-secret" not in text and "[REDACTED]" in action["arguments"] and "[REDACTED]" in action["result"]
                assert json.loads(action["arguments"])["user_id"] == "user_1"
            path.unlink()

    def test_cap(self, tmp_path: Path) -> None:
        """A huge result is cut at max_content_chars, with a marker."""

        async def run(monitor: Monitor) -> None:
            async with monitor.episode(task_id="t") as ep:
                (await ep.begin("get_user", {"user_id": "user_1"})).done("x" * 1_000_000)

        path = tmp_path / "r.jsonl"
        sink = JsonlSink(path)
        anyio.run(run, Monitor(shop_tools(), sink=sink, record_content=True, max_content_chars=100))
        sink.close()
        (action,) = json.loads(path.read_text())["actions"]
        assert action["result"].startswith("x" * 100) and len(action["result"]) < 150
        assert json.loads(action["arguments"]) == {"user_id": "user_1"}
        with pytest.raises(ValueError, match="max_content_chars"):
            Monitor(shop_tools(), record_content=True, max_content_chars=0)

    def test_records_without_the_option_are_unchanged(self, tmp_path: Path, content_records: Path) -> None:
        """Off (the default), no action has the keys: the lines are those of records without the fields."""
        from prefixmon.records import RECORD_ADAPTER, record_line

        off = record_file(tmp_path / "off.jsonl", seeds=2)
        for line in off.read_text().splitlines():
            actions = json.loads(line)["actions"]
            assert actions and all("arguments" not in a and "result" not in a for a in actions)
            record = RECORD_ADAPTER.validate_json(line)
            assert record_line(record) == (line + "\n").encode()  # written back byte for byte
        on = [json.loads(line) for line in content_records.read_text().splitlines()]
        assert all("arguments" in a for r in on for a in r["actions"])


class TestRecords:
    """Episode records without content are recognised; they hold no arguments, so each is reported, not learned from."""

    def test_jsonl_records_are_recognised_and_reported(self, tmp_path: Path) -> None:
        """Every record with calls is a problem naming file, line, episode and what to record instead."""
        path = record_file(tmp_path / "records.jsonl", no_tool=True)
        ids = [json.loads(line)["episode_id"] for line in path.read_text().splitlines()]
        assert detect_format(path) == "records"
        problems: list[Problem] = []
        got = list(read_transcripts([path], problems=problems))
        assert [(p.line, p.episode, p.skipped) for p in problems] == [(n, ids[n - 1], True) for n in (1, 2, 3)]
        assert all(p.message == NO_CONTENT for p in problems)
        assert str(problems[0]).startswith(f"{path}:1 [{ids[0]}]: record has no arguments")
        assert "record_content=True" in NO_CONTENT and "otlp" in NO_CONTENT
        (chat,) = got  # the episode without tool calls
        assert isinstance(chat, Transcript) and chat.episode_id == ids[3] and chat.events == ()
        assert chat.source == f"{path}:4"

    def test_malformed_lines_are_reported_and_skipped(self, tmp_path: Path) -> None:
        """A bad line is a problem with its line; the records after it are still read (with their own lines)."""
        good = record_file(tmp_path / "good.jsonl").read_text().splitlines()
        path = tmp_path / "records.jsonl"
        path.write_text(f"{good[0]}\n\n{{not json\n{good[1]}\n" + good[2][:40])
        problems: list[Problem] = []
        assert list(read_transcripts([path], problems=problems)) == []
        lines = [(p.line, p.message.split(":")[0]) for p in problems]
        assert lines == [
            (1, "record has no arguments"),
            (3, "not valid JSON"),
            (4, "record has no arguments"),
            (5, "truncated last line (the writer stopped mid-record)"),
        ]

    def test_parquet_round_trip(self, tmp_path: Path) -> None:
        """prefixmon export's Parquet is the records format too: each row reported with its row number."""
        pytest.importorskip("pyarrow")
        from prefixmon.records.parquet import export_records

        jsonl = record_file(tmp_path / "records.jsonl", no_tool=True)
        out = tmp_path / "records.parquet"
        assert export_records([jsonl], out) == 4
        assert detect_format(out) == "records"
        problems: list[Problem] = []
        (chat,) = read_transcripts([out], problems=problems)
        ids = [json.loads(line)["episode_id"] for line in jsonl.read_text().splitlines()]
        assert [(p.line, p.episode, p.message) for p in problems] == [(n, ids[n - 1], NO_CONTENT) for n in (1, 2, 3)]
        assert chat.episode_id == ids[3] and chat.source == f"{out}:4"

    def test_other_parquet_is_not_records(self, tmp_path: Path) -> None:
        """A Parquet file without the records' columns is not claimed."""
        pa = pytest.importorskip("pyarrow")
        import pyarrow.parquet as pq

        path = tmp_path / "other.parquet"
        pq.write_table(pa.table({"x": [1, 2]}), path)
        with pytest.raises(CorpusError, match="cannot tell its transcript format"):
            detect_format(path)

    def test_parquet_without_pyarrow_names_the_extra(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """Without pyarrow a Parquet file is still claimed, and reading it says which extra to install."""
        pytest.importorskip("pyarrow")
        from prefixmon.records.parquet import export_records

        out = tmp_path / "records.parquet"
        export_records([record_file(tmp_path / "records.jsonl")], out)
        for name in [m for m in sys.modules if m == "pyarrow" or m.startswith("pyarrow.")]:
            monkeypatch.setitem(sys.modules, name, None)  # import pyarrow raises ImportError
        assert detect_format(out) == "records"
        with pytest.raises(CorpusError, match=r"prefixmon\[parquet\]"):
            list(read_transcripts([out]))

    def test_formats_do_not_claim_each_other(self, tmp_path: Path, traces: Path) -> None:
        """records, openai-jsonl and otlp each recognise only their own files."""
        records = record_file(tmp_path / "records.jsonl")
        runs = tmp_path / "runs.jsonl"
        runs.write_text(json.dumps({"messages": as_messages(shop_episode(0))}) + "\n")
        heads = {p: p.read_bytes()[:65_536] for p in (records, runs, traces)}
        claims = {
            name: [p.name for p, head in heads.items() if transcript_reader(name).sniff(p, head)]
            for name in ("records", "openai-jsonl", "otlp")
        }
        assert claims == {"records": ["records.jsonl"], "openai-jsonl": ["runs.jsonl"], "otlp": ["shop.otlp.jsonl"]}
        assert [detect_format(p) for p in (records, runs, traces)] == ["records", "openai-jsonl", "otlp"]

    def test_a_record_line_longer_than_the_head(self, tmp_path: Path) -> None:
        """A first line past the sniffed head is told by its start (the sink writes the schema first)."""
        line = record_file(tmp_path / "records.jsonl").read_text().splitlines()[0]
        record = json.loads(line)
        path = tmp_path / "long.jsonl"
        path.write_text(json.dumps({**record, "labels": {"note": "x" * 70_000}}, separators=(",", ":")) + "\n")
        assert detect_format(path) == "records"
        without = tmp_path / "without-schema.jsonl"
        without.write_text(json.dumps({k: v for k, v in reversed(record.items()) if k != "schema"}) + "\n")
        assert detect_format(without) == "records"  # no schema key (it is optional): told by the keys every record has
        problems: list[Problem] = []
        assert list(read_transcripts([path, without], problems=problems)) == []
        assert [(Path(p.path).name, p.line, p.message) for p in problems] == [
            ("long.jsonl", 1, NO_CONTENT),
            ("without-schema.jsonl", 1, NO_CONTENT),
        ]


class TestCli:
    """prefixmon learn on records and traces."""

    def test_learn_on_records_without_content_says_why(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """Not 'cannot tell its transcript format': each record is reported and the corpus is empty."""
        tools = tmp_path / "tools.json"
        tools.write_text(json.dumps(TOOLS))
        records = record_file(tmp_path / "records.jsonl")
        out = tmp_path / "x.yaml"
        assert main(["learn", "--tools", str(tools), str(records), "--out", str(out)]) == 1
        err = capsys.readouterr().err
        assert "cannot tell its transcript format" not in err
        assert err.count("record has no arguments") == 3 and "record_content=True" in err
        assert not out.exists()

    @pytest.mark.parametrize("source", ["content_records", "traces"])
    def test_learn_writes_the_recogniser(
        self, tmp_path: Path, source: str, request: pytest.FixtureRequest, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Records made with record_content=True, and the same runs traced with content: a spec with the Error: recogniser."""
        from prefixmon.rules.specfile import load_spec

        tools = tmp_path / "tools.json"
        tools.write_text(json.dumps(TOOLS))
        out = tmp_path / "x.yaml"
        assert main(["learn", "--tools", str(tools), str(request.getfixturevalue(source)), "--out", str(out)]) == 0
        assert [r.text for r in load_spec(out).defaults.errors] == ["^Error:"]
        assert f"wrote {out}" in capsys.readouterr().out


def test_a_result_the_monitor_rejected_stays_marked(tmp_path: Path) -> None:
    """With an error recogniser in the monitor's spec, a result it rejected is marked an error (its text kept)."""
    path = tmp_path / "recognised.otlp.jsonl"
    otel = configure_otel(otlp_file=path)
    tools = shop_tools().apply_spec({"schema": "prefixmon.spec/1", "tools": {"get_order": {"errors": [{"text": "^Error:"}]}}})
    monitor = Monitor(tools, observers=[Telemetry(tracer_provider=otel.tracer_provider, capture_content=True)])
    anyio.run(run_shop, monitor, range(1))
    otel.shutdown()
    (episode,) = read_transcripts([path])
    marks = {(c.result.startswith("Error:"), c.error) for c in episode.calls}
    assert marks == {(True, True), (False, None)}


def test_parquet_of_records_before_content_still_reads(tmp_path: Path) -> None:
    """A prefixmon.parquet/1 file written before actions had arguments and result reads, without content."""
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    from prefixmon.records import read_records
    from prefixmon.records.parquet import arrow_schema, iter_parquet_records, records_to_table

    records = read_records(record_file(tmp_path / "records.jsonl", content=True, seeds=1))
    table = records_to_table(records)
    schema = arrow_schema()
    action = schema.field("actions").type.value_type
    old_action = pa.struct([f for f in action if f.name not in ("arguments", "result")])
    old_schema = schema.set(
        schema.get_field_index("actions"),
        pa.field("actions", pa.list_(pa.field("element", old_action, nullable=False)), nullable=False),
    )
    rows = table.to_pylist()
    for row in rows:
        for a in row["actions"]:
            del a["arguments"], a["result"]
    path = tmp_path / "old.parquet"
    pq.write_table(pa.Table.from_pylist(rows, schema=old_schema), path)
    (back,) = iter_parquet_records(path)
    assert all(a.arguments is None and a.result is None for a in back.actions)
    assert back.actions[0].tool == records[0].actions[0].tool and back.episode_id == records[0].episode_id
    problems: list[Problem] = []
    assert list(read_transcripts([path], problems=problems)) == [] and [p.message for p in problems] == [NO_CONTENT]
