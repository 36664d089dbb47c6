"""OTLP JSON read-back: exported traces become the same episode records as the JSONL sink's."""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.trace import TracerProvider

from prefixmon import (
    EpisodeRecord,
    JsonlSink,
    Monitor,
    RecordError,
    Replan,
    ToolBlocked,
    ToolCall,
    Toolset,
    TrackedState,
    Verdict,
    read_records,
)
from prefixmon import semconv as sc
from prefixmon.records import BadLine
from prefixmon.records.otlp import iter_otlp_spans, read_otlp_records, records_from_spans, spans_from_json
from prefixmon.telemetry import Telemetry
from prefixmon.telemetry.otel_setup import OtlpJsonFileSpanExporter, configure_otel

from .test_fuzz import TOOL_NAMES, raw_arguments
from .test_fuzz import build_tools as build_fuzz_tools


async def _replan(verdict: Verdict, call: ToolCall, state: TrackedState) -> Replan:
    return Replan(guidance="look the contact up first", call=ToolCall(name="search_contacts", args={"name": "Amara"}))


async def monitored_run(tools: Toolset, sink: Path, tracer_provider: TracerProvider, **telemetry: Any) -> None:
    """Five episodes: blocked, replanned, environment error, no-tool, cancelled, and a body error."""
    tel = Telemetry(tracer_provider=tracer_provider, metrics=False, **telemetry)
    block = Monitor(tools, policy="block", sink=sink, observers=[tel], labels={"model": "m1"})
    replan = Monitor(tools, policy="replan", replan=_replan, sink=sink, observers=[tel], labels={"model": "m1"})
    async with block.episode(task_id="t-1", labels={"method": "react"}) as ep:
        ep.user("text Amara: hi")
        await ep.call("search_contacts", {}, call_id="c1")
        with pytest.raises(ToolBlocked):
            await ep.call("send_message", {"person_id": "p-2", "text": "hi"}, call_id="c2")
        await ep.call("set_cellular", {"on": True}, call_id="c3")
        await ep.call("send_message", {"person_id": "p-2", "text": "hi"}, call_id="c4")
        with pytest.raises(RuntimeError):
            await ep.call("flaky", {"x": 1}, call_id="c5")
        ep.finish("partial")
    async with replan.episode(task_id="t-2") as ep:
        await ep.call("remove_contact", {"person_id": "p-1"})
        ep.next_turn()
        await ep.call("lookup_order", {"order_id": "#W9"})
        ep.finish("failure")
    async with block.episode(task_id="t-3", allows_no_tool=True) as ep:
        ep.finish("success")
    async with block.episode(task_id="t-4") as ep:  # no tool call although one was needed
        ep.finish("failure")
    with anyio.move_on_after(0.05):
        async with block.episode(task_id="t-5") as ep:
            await ep.call("search_contacts", {"name": "Fredrik"})
            await anyio.sleep_forever()
    with contextlib.suppress(LookupError):
        async with block.episode(task_id="t-6") as ep:
            await ep.call("search_contacts", {"name": "Amara"})
            raise LookupError("the agent crashed")


def without_content(record: EpisodeRecord) -> EpisodeRecord:
    """The record as spans without content capture carry it: no reasons, no error messages.

    The terminal no-tool slot has no span; the reader rebuilds it, reason included.
    """
    actions = [a if a.tool is None else dataclasses.replace(a, reason=None, error=None) for a in record.actions]
    ff = record.first_failure
    if ff is not None and ff.tool is not None:
        ff = dataclasses.replace(ff, reason="")
    return dataclasses.replace(record, actions=actions, first_failure=ff)


class TestRoundTrip:
    """Records rebuilt from OTLP JSON files equal the JSONL sink's records."""

    async def test_round_trip_with_content(self, tools: Toolset, tmp_path: Path) -> None:
        """With capture_content, records from the OTLP file equal the sink's records exactly."""
        sink, traces = tmp_path / "episodes.jsonl", tmp_path / "traces.otlp.jsonl"
        otel = configure_otel(otlp_file=traces)
        await monitored_run(tools, sink, otel.tracer_provider, capture_content=True)
        otel.shutdown()
        expected = read_records(sink)
        assert [r.status for r in expected] == ["finished", "finished", "finished", "finished", "cancelled", "error"]
        assert {a.decision.value for r in expected for a in r.actions} >= {"allow", "block", "replan"}
        got = read_otlp_records(traces)
        assert got == expected

    async def test_round_trip_default_drops_only_content(self, tools: Toolset, tmp_path: Path) -> None:
        """Without content capture, the rebuilt records differ only in reasons and error messages."""
        sink, traces = tmp_path / "episodes.jsonl", tmp_path / "traces.otlp.jsonl"
        otel = configure_otel(otlp_file=traces, batch=False)
        await monitored_run(tools, sink, otel.tracer_provider)
        otel.shutdown()
        expected = read_records(sink)
        got = read_otlp_records(traces)
        assert got != expected
        assert got == [without_content(r) for r in expected]

    async def test_enriched_framework_span_round_trip(self, tools: Toolset, tmp_path: Path) -> None:
        """When the framework's span is enriched, the record's times come from prefixmon attributes."""
        sink, traces = tmp_path / "episodes.jsonl", tmp_path / "traces.otlp.jsonl"
        otel = configure_otel(otlp_file=traces)
        tracer = otel.tracer_provider.get_tracer("framework")
        monitor = Monitor(
            tools,
            sink=sink,
            observers=[Telemetry(tracer_provider=otel.tracer_provider, enrich_current_span=True, capture_content=True)],
        )
        with tracer.start_as_current_span("agent run"):
            async with monitor.episode(task_id="t") as ep:
                await anyio.sleep(0.01)
                await ep.call("search_contacts", {"name": "x"})
            await anyio.sleep(0.01)
        otel.shutdown()
        assert read_otlp_records(traces) == read_records(sink)

    async def test_file_format_is_otlp_json(self, tools: Toolset, tmp_path: Path) -> None:
        """Each line is a TracesData object: camelCase keys, hex ids, string nanoseconds, integer kinds."""
        traces = tmp_path / "t.jsonl"
        otel = configure_otel(otlp_file=traces, batch=False)
        await monitored_run(tools, tmp_path / "e.jsonl", otel.tracer_provider)
        otel.shutdown()
        line = json.loads(traces.read_text().splitlines()[0])
        span = line["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
        assert line["resourceSpans"][0]["scopeSpans"][0]["scope"]["name"] == "prefixmon"
        assert len(span["traceId"]) == 32 and int(span["traceId"], 16) > 0
        assert len(span["spanId"]) == 16 and int(span["spanId"], 16) > 0
        assert isinstance(span["startTimeUnixNano"], str) and span["startTimeUnixNano"].isdigit()
        assert span["kind"] == 1  # SPAN_KIND_INTERNAL
        keys = {a["key"] for a in span["attributes"]}
        assert {sc.GEN_AI_TOOL_NAME, sc.PREFIXMON_DEPTH, sc.PREFIXMON_EPISODE_ID} <= keys


# A hand-written line in the OpenTelemetry file exporter's format (spec example style), with one
# prefixmon episode of two calls, plus an unrelated span; ints as strings, as protobuf JSON writes them.
def _export(path: Path, out: Path, errors: list[BadLine], through_a_pipe: bool) -> int:
    """``export_records`` of ``path`` under ``on_error="skip"``, from the file or from a pipe of its bytes."""
    from prefixmon.records.parquet import export_records

    if not through_a_pipe:
        return export_records([path], out, on_error="skip", errors=errors)
    read_fd, write_fd = os.pipe()
    os.write(write_fd, path.read_bytes())
    os.close(write_fd)
    try:
        return export_records([f"/dev/fd/{read_fd}"], out, on_error="skip", errors=errors)
    finally:
        os.close(read_fd)


def _kv(key: str, value: Any) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"key": key, "value": {"boolValue": value}}
    if isinstance(value, int):
        return {"key": key, "value": {"intValue": str(value)}}
    return {"key": key, "value": {"stringValue": value}}


def _line(*, snake: bool = False) -> dict[str, Any]:
    def k(camel: str) -> str:
        if not snake:
            return camel
        return "".join("_" + c.lower() if c.isupper() else c for c in camel)

    def span(span_id: str, parent: str, name: str, start: int, end: int, attributes: dict[str, Any]) -> dict[str, Any]:
        attrs = [_kv(key, v) for key, v in attributes.items()]
        if snake:
            attrs = [{"key": a["key"], "value": {k(t): v for t, v in a["value"].items()}} for a in attrs]
        return {
            k("traceId"): "5b8efff798038103d269b633813fc60c",
            k("spanId"): span_id,
            k("parentSpanId"): parent,
            "name": name,
            "kind": "SPAN_KIND_INTERNAL" if snake else 1,
            k("startTimeUnixNano"): str(start),
            k("endTimeUnixNano"): str(end),
            "attributes": attrs,
            "status": {},
        }

    t0 = 1_700_000_000_123_456_000
    episode = {
        sc.GEN_AI_OPERATION_NAME: "invoke_agent",
        sc.PREFIXMON_EPISODE_ID: "ep-1",
        sc.PREFIXMON_TASK_ID: "task-9",
        "prefixmon.label.model": "m2",
        sc.PREFIXMON_HORIZON: 2,
        sc.PREFIXMON_FED: 2,
        sc.PREFIXMON_EXECUTABLE: False,
        sc.PREFIXMON_STATUS: "finished",
        sc.PREFIXMON_OUTCOME: "failure",
    }
    call = {sc.GEN_AI_OPERATION_NAME: "execute_tool", sc.PREFIXMON_EPISODE_ID: "ep-1"}
    spans = [
        span("eee1eee1eee1eee1", "", "invoke_agent", t0, t0 + 9_000_000, episode),
        span(
            "aaa1aaa1aaa1aaa1",
            "eee1eee1eee1eee1",
            "execute_tool search",
            t0 + 1000,
            t0 + 2000,
            {
                **call,
                sc.GEN_AI_TOOL_NAME: "search",
                sc.GEN_AI_TOOL_CALL_ID: "c1",
                sc.PREFIXMON_DEPTH: 1,
                sc.PREFIXMON_EXECUTABLE: True,
                sc.PREFIXMON_DECISION: "allow",
                sc.PREFIXMON_REACHED_ENVIRONMENT: True,
            },
        ),
        span(
            "aaa2aaa2aaa2aaa2",
            "eee1eee1eee1eee1",
            "execute_tool remove",
            t0 + 3000,
            t0 + 4000,
            {
                **call,
                sc.GEN_AI_TOOL_NAME: "remove",
                sc.PREFIXMON_DEPTH: 2,
                sc.PREFIXMON_EXECUTABLE: False,
                sc.PREFIXMON_CAUSE: "dependency",
                sc.PREFIXMON_DECISION: "block",
                sc.PREFIXMON_TURN: 1,
            },
        ),
        span("bbb1bbb1bbb1bbb1", "", "HTTP GET", t0, t0 + 1, {"http.method": "GET"}),
    ]
    return {
        k("resourceSpans"): [
            {
                "resource": {"attributes": [_kv("service.name", "agent")]},
                k("scopeSpans"): [{"scope": {"name": "prefixmon", "version": "0.1.0"}, "spans": spans}],
            }
        ]
    }


class TestAnyEpisode:
    """Whatever an agent calls, the records rebuilt from its OTLP traces equal the sink's."""

    @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(
        calls=st.lists(st.tuples(st.sampled_from(TOOL_NAMES), raw_arguments), min_size=0, max_size=6),
        policy=st.sampled_from(["observe", "block"]),
        agent=st.text(max_size=8),
    )
    def test_any_call_sequence(self, calls: list[tuple[str, Any]], policy: str, agent: str) -> None:
        """Arbitrary calls (unknown tools, arguments that are not JSON, tools that raise) under
        observe and block, with content captured: the traces give back every record exactly."""
        records: list[EpisodeRecord] = []
        with tempfile.TemporaryDirectory() as folder:
            traces = Path(folder) / "t.otlp.jsonl"
            otel = configure_otel(otlp_file=traces, batch=False)
            telemetry = Telemetry(
                tracer_provider=otel.tracer_provider, metrics=False, capture_content=True, max_content_chars=10**6
            )
            monitor = Monitor(
                build_fuzz_tools(), policy=policy, sink=records.append, observers=[telemetry], labels={"agent": agent}
            )

            async def run() -> None:
                async with monitor.episode(task_id="fuzz") as ep:
                    ep.user("pay p-1 the 5 dollars")
                    for name, raw in calls:
                        with contextlib.suppress(ToolBlocked, RuntimeError, TypeError):
                            await ep.call(name, raw)

            anyio.run(run)
            otel.shutdown()
            assert read_otlp_records(traces) == records


class TestReader:
    """The reader accepts the OTLP JSON mapping and says what is wrong with bad input."""

    @pytest.mark.parametrize("snake", [False, True])
    def test_hand_written_line(self, tmp_path: Path, snake: bool) -> None:
        """A file exporter line (camelCase, or protobuf field names) rebuilds the episode; other spans are ignored."""
        path = tmp_path / "t.jsonl"
        path.write_text(json.dumps(_line(snake=snake)) + "\n")
        (record,) = read_otlp_records(path)
        assert record.episode_id == "ep-1" and record.task_id == "task-9"
        assert record.labels == {"model": "m2"}
        assert (record.horizon, record.fed, record.executable) == (2, 2, False)
        assert record.outcome is not None and record.outcome.value == "failure"
        assert record.first_failure is not None and record.first_failure.tool == "remove"
        assert [a.tool for a in record.actions] == ["search", "remove"]
        assert record.actions[1].turn == 1 and record.actions[0].call_id == "c1"
        assert record.started_at.isoformat() == "2023-11-14T22:13:20.123456+00:00"
        spans = list(iter_otlp_spans(path))
        assert len(spans) == 4 and spans[0].resource == {"service.name": "agent"}
        assert spans[1].parent_span_id == "eee1eee1eee1eee1" and spans[1].kind == 1

    def test_base64_ids_accepted(self) -> None:
        """Ids written with protobuf's default base64 bytes mapping are turned into hex."""
        line = _line()
        spans = line["resourceSpans"][0]["scopeSpans"][0]["spans"]
        spans[0]["spanId"] = base64.b64encode(bytes.fromhex("0123456789abcdef")).decode()
        (decoded, *_) = spans_from_json(line)
        assert decoded.span_id == "0123456789abcdef"

    def test_bad_line_names_file_and_line(self, tmp_path: Path) -> None:
        """A line that is not trace data raises a RecordError naming the file and line."""
        path = tmp_path / "t.jsonl"
        path.write_text(json.dumps(_line()) + "\n" + '{"resourceMetrics": []}\n')
        with pytest.raises(RecordError, match=r"t\.jsonl.*2|no resourceSpans"):
            read_otlp_records(path)

    def test_skip_mode_and_truncated_last_line(self, tmp_path: Path) -> None:
        """on_error='skip' reports bad lines; an unterminated last line is skipped as truncated."""
        path = tmp_path / "t.jsonl"
        good = json.dumps(_line())
        path.write_text("not json\n" + good + "\n" + good[:50])
        errors: list[BadLine] = []
        spans = list(iter_otlp_spans(path, on_error="skip", errors=errors))
        assert len(spans) == 4
        assert [(e.line, e.truncated) for e in errors] == [(1, False), (3, True)]
        assert len(records_from_spans(spans)) == 1

    def test_missing_call_span(self, tmp_path: Path) -> None:
        """An episode whose call spans were dropped is reported, not silently shortened."""
        line = _line()
        del line["resourceSpans"][0]["scopeSpans"][0]["spans"][1]
        spans = spans_from_json(line)
        with pytest.raises(RecordError, match=r"missing \[1\]"):
            records_from_spans(spans)
        errors: list[str] = []
        assert records_from_spans(spans, on_error="skip", errors=errors) == []
        assert "ep-1" in errors[0]

    @pytest.mark.parametrize("through_a_pipe", [False, True])
    def test_export_reports_what_it_skipped(self, tmp_path: Path, through_a_pipe: bool) -> None:
        """``export --on-error skip`` of OTLP traces names every line and episode it left out, from a file or a pipe."""
        pytest.importorskip("pyarrow")
        incomplete = _line()
        del incomplete["resourceSpans"][0]["scopeSpans"][0]["spans"][1]  # a call span dropped
        other = json.dumps(incomplete).replace("ep-1", "ep-2").replace("eee1eee1", "eee2eee2")  # another episode
        text = json.dumps(_line()) + "\nnot json\n" + other + "\n"
        path = tmp_path / "t.jsonl"
        path.write_text(text)
        errors: list[BadLine] = []
        written = _export(path, tmp_path / "out.parquet", errors, through_a_pipe)
        assert written == 1
        assert [e.line for e in errors][:1] == [2] and len(errors) == 2, errors
        assert "ep-2" in errors[1].message and "missing" in errors[1].message

    def test_wrong_shapes(self) -> None:
        """Non-OTLP objects and malformed fields get messages that say what is wrong."""
        with pytest.raises(ValueError, match="no resourceSpans"):
            spans_from_json({"foo": 1})
        line = _line()
        line["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["startTimeUnixNano"] = "soon"
        with pytest.raises(ValueError, match="startTimeUnixNano"):
            spans_from_json(line)
        line = _line()
        line["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["traceId"] = "zz!"
        with pytest.raises(ValueError, match="traceId"):
            spans_from_json(line)

    def test_exporter_after_shutdown_fails(self, tmp_path: Path) -> None:
        """The file exporter refuses to export after shutdown instead of writing to a closed file."""
        from opentelemetry.sdk.trace.export import SpanExportResult

        tp = TracerProvider()
        exporter = OtlpJsonFileSpanExporter(tmp_path / "x.jsonl")
        with tp.get_tracer("t").start_as_current_span("s") as s:
            pass
        exporter.shutdown()
        assert exporter.export([s]) is SpanExportResult.FAILURE  # type: ignore[list-item]


def _first_span(line: dict[str, Any]) -> dict[str, Any]:
    span: dict[str, Any] = line["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    return span


class TestBadValues:
    """Values no exporter writes: each is one bad line or episode, said briefly and by field."""

    @pytest.mark.parametrize(
        ("field", "value", "named"),
        [
            ("traceId", "z!" * 500_000, "traceId"),
            ("startTimeUnixNano", "9" * 5_000, "startTimeUnixNano"),
            ("kind", "K" * 1_000_000, "span kind"),
            ("attributes", [{"key": "k" * 1_000_000, "value": "v" * 1_000_000}], "value must be an object"),
            ("attributes", [{"key": 7, "value": {"stringValue": "v" * 1_000_000}}], "attribute without a string key"),
        ],
    )
    def test_messages_quote_a_huge_value_cut(self, tmp_path: Path, field: str, value: Any, named: str) -> None:
        """A megabyte-long value is quoted in at most a few hundred characters (it was quoted whole)."""
        line = _line()
        _first_span(line)[field] = value
        with pytest.raises(ValueError, match=named) as caught:
            spans_from_json(line)
        assert len(str(caught.value)) < 300, len(str(caught.value))
        path = tmp_path / "t.jsonl"
        path.write_text(json.dumps(line) + "\n")
        errors: list[BadLine] = []
        assert list(iter_otlp_spans(path, on_error="skip", errors=errors)) == []
        assert [e.line for e in errors] == [1] and len(errors[0].message) < 300

    def test_a_huge_episode_id_is_cut(self) -> None:
        """An episode that cannot be rebuilt is named by its id, cut."""
        line = _line()
        for span in line["resourceSpans"][0]["scopeSpans"][0]["spans"]:
            for kv in span["attributes"]:
                if kv["key"] == sc.PREFIXMON_EPISODE_ID:
                    kv["value"] = {"stringValue": "e" * 1_000_000}
        del line["resourceSpans"][0]["scopeSpans"][0]["spans"][1]  # a call span missing
        errors: list[str] = []
        assert records_from_spans(spans_from_json(line), on_error="skip", errors=errors) == []
        assert len(errors) == 1 and "missing" in errors[0] and len(errors[0]) < 300

    def test_missing_depths_are_listed_whole(self) -> None:
        """The depths an episode has and lacks are the reader's own numbers: listed whole (cut at 6 they hid 8 and 9)."""
        line = _line()
        spans = line["resourceSpans"][0]["scopeSpans"][0]["spans"]
        for kv in spans[0]["attributes"]:
            if kv["key"] in (sc.PREFIXMON_HORIZON, sc.PREFIXMON_FED):
                kv["value"] = {"intValue": "10"}
        for depth in (3, 4, 5, 6, 8, 9):
            span = json.loads(json.dumps(spans[1]))
            span["spanId"] = f"{100 + depth:016x}"
            span["attributes"] = [
                {"key": sc.PREFIXMON_DEPTH, "value": {"intValue": str(depth)}} if kv["key"] == sc.PREFIXMON_DEPTH else kv
                for kv in span["attributes"]
            ]
            spans.append(span)
        with pytest.raises(RecordError, match=re.escape("call spans for depths [1, 2, 3, 4, 5, 6, 8, 9] (missing [7, 10]")):
            records_from_spans(spans_from_json(line))

    @pytest.mark.parametrize("value", ["9" * 30, "-" + "9" * 30])
    def test_out_of_range_timestamp_names_the_field(self, tmp_path: Path, value: str) -> None:
        """A timestamp no date can hold names the field (it said 'Python int too large to convert to C int')."""
        line = _line()
        _first_span(line)["startTimeUnixNano"] = value
        path = tmp_path / "t.jsonl"
        path.write_text(json.dumps(line) + "\n")
        with pytest.raises(RecordError, match=r"t\.jsonl:1: .*episode 'ep-1': startTimeUnixNano .* is out of range"):
            read_otlp_records(path)

    def test_a_deeply_nested_line_leaves_collections_room(self, tmp_path: Path) -> None:
        """A 5,000-deep attribute is one bad line, read without json recursing near the interpreter's limit."""
        from .test_bounds import collections_watched

        deep = _line()
        _first_span(deep)["attributes"].append({"key": "deep", "value": "DEEP"})
        nested = '{"arrayValue": {"values": [' * 1_700 + '{"stringValue": "x"}' + "]}}" * 1_700  # 5,100 levels
        path = tmp_path / "t.jsonl"
        path.write_text(json.dumps(_line()) + "\n" + json.dumps(deep).replace('"DEEP"', nested) + "\n")
        errors: list[BadLine] = []
        with collections_watched() as failures:
            spans = list(iter_otlp_spans(path, on_error="skip", errors=errors))
        assert failures == []
        assert len(spans) == 4 and [e.line for e in errors] == [2], errors


class TestFormatsToldApart:
    """The verbs that read several formats tell OTLP traces from records the same way."""

    def test_report_validate_reads_traces(self, tmp_path: Path) -> None:
        """``report --validate`` rebuilds the episodes of a trace file as ``report`` does (it read every line as a bad record)."""
        from prefixmon._cli import main

        path = tmp_path / "t.jsonl"
        path.write_text(json.dumps(_line()) + "\n")
        reports = []
        for extra in ([], ["--validate"]):
            out = tmp_path / f"report{len(extra)}.json"
            assert main(["report", str(path), "--bootstrap", "0", "--format", "json", "--output", str(out), *extra]) == 0
            reports.append(json.loads(out.read_text()))
        assert reports[0]["episodes"] == 1 and reports[1] == reports[0]

    @pytest.mark.parametrize("through_a_pipe", [False, True])
    async def test_export_reads_records_naming_resource_spans(self, tools: Toolset, tmp_path: Path, through_a_pipe: bool) -> None:
        """A record whose label is called ``resourceSpans`` is a record (export read the file as traces and lost it)."""
        pytest.importorskip("pyarrow")
        from prefixmon.records.parquet import iter_parquet_records

        path = tmp_path / "episodes.jsonl"
        monitor = Monitor(tools, sink=path, labels={"resourceSpans": "x"})
        for i in range(2):
            async with monitor.episode(task_id=f"t{i}") as ep:
                await ep.call("search_contacts", {"name": "Amara"})
                ep.finish("success")
        assert isinstance(monitor.sink, JsonlSink)
        monitor.sink.close()
        errors: list[BadLine] = []
        written = _export(path, tmp_path / "out.parquet", errors, through_a_pipe)
        assert (written, errors) == (2, [])
        assert list(iter_parquet_records(tmp_path / "out.parquet")) == read_records(path)
