"""A real OTLP tracing backend: Arize Phoenix on 127.0.0.1 (started by scripts/phoenix.sh).

A monitored run is exported over OTLP/HTTP; its spans are read back over Phoenix's REST API
with their attributes and events, and rebuilt into the same records as the JSONL sink's.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest

from prefixmon import Monitor, ToolBlocked, Toolset, read_records
from prefixmon import semconv as sc
from prefixmon.records.otlp import OtlpSpan, records_from_spans, spans_from_json
from prefixmon.telemetry import Telemetry
from prefixmon.telemetry.otel_setup import configure_otel

pytestmark = pytest.mark.integration


def phoenix_url() -> str:
    """The running Phoenix's base URL: $PREFIXMON_PHOENIX_URL or the file scripts/phoenix.sh writes."""
    url = os.environ.get("PREFIXMON_PHOENIX_URL", "")
    state = Path(os.environ.get("PHOENIX_STATE_DIR", "/tmp/prefixmon-phoenix")) / "url"
    if not url and state.exists():
        url = state.read_text().strip()
    if not url:
        if os.environ.get("CI"):
            pytest.fail("Phoenix is not running: .ci/run must start it with `scripts/phoenix.sh start`")
        pytest.skip("Phoenix is not running (start it with `scripts/phoenix.sh start`)")
    return url


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.load(response)


def read_back(base: str, project: str, expected: int, timeout: float = 60.0) -> dict[str, Any]:
    """Poll Phoenix until the project has ``expected`` spans (ingestion is asynchronous)."""
    deadline = time.monotonic() + timeout
    seen = 0
    while time.monotonic() < deadline:
        try:
            body = get_json(f"{base}/v1/projects/{project}/spans/otlpv1?limit=1000")
        except urllib.error.HTTPError as e:
            if e.code != 404:  # 404: the project appears with its first span
                raise
        else:
            seen = len(body["data"])
            if seen >= expected:
                return dict(body)
        time.sleep(0.25)
    raise AssertionError(f"Phoenix had {seen} of {expected} spans for project {project!r} after {timeout:g} s")


def by_name(spans: list[OtlpSpan], name: str) -> list[OtlpSpan]:
    return [s for s in spans if s.name == name]


async def test_spans_round_trip_through_phoenix(tools: Toolset, tmp_path: Path) -> None:
    """Spans sent over OTLP come back from Phoenix with every prefixmon attribute and event, as the same records."""
    base = phoenix_url()
    assert get_json(f"{base}/readyz") == {}
    project = f"prefixmon-test-{uuid.uuid4().hex[:10]}"
    sink = tmp_path / "episodes.jsonl"
    otel = configure_otel(
        service_name="prefixmon-test",
        resource_attributes={"openinference.project.name": project},
        otlp_endpoint=base,
        otlp_metrics=False,  # Phoenix receives traces only
    )
    try:
        telemetry = Telemetry(tracer_provider=otel.tracer_provider, capture_content=True, metrics=False)
        monitor = Monitor(tools, policy="block", sink=sink, observers=[telemetry], labels={"model": "m1"})
        async with monitor.episode(task_id="t-1", labels={"agent": "support-bot"}) as ep:
            await ep.call("search_contacts", {}, call_id="c1")
            with pytest.raises(ToolBlocked):
                await ep.call("send_message", {"person_id": "p-2", "text": "hi"}, call_id="c2")
            await ep.call("set_cellular", {"on": True}, call_id="c3")
            await ep.call("send_message", {"person_id": "p-2", "text": "hi"}, call_id="c4")
            ep.finish("partial")
        async with monitor.episode(task_id="t-2") as ep:
            with pytest.raises(RuntimeError):
                await ep.call("flaky", {"x": 1})
            ep.finish("failure")
    finally:
        otel.shutdown()  # flushes the batch to Phoenix

    body = read_back(base, project, expected=7)
    spans = spans_from_json(body)
    (root,) = by_name(spans, "invoke_agent support-bot")
    assert root.attributes[sc.PREFIXMON_FED] == 2
    assert root.attributes[sc.PREFIXMON_HORIZON] == 4
    assert root.attributes[sc.PREFIXMON_OUTCOME] == "partial"
    assert root.attributes["prefixmon.label.model"] == "m1"

    # a refused call did not execute: its span is the guardrail's, naming the tool it refused
    (blocked,) = by_name(spans, "apply_guardrail prefixmon")
    assert blocked.parent_span_id == root.span_id and blocked.trace_id == root.trace_id
    a = blocked.attributes
    assert a[sc.GEN_AI_OPERATION_NAME] == "apply_guardrail"
    assert a[sc.GEN_AI_TOOL_NAME] == "send_message"
    assert a[sc.PREFIXMON_DEPTH] == 2
    assert a[sc.GEN_AI_TOOL_CALL_ID] == "c2"
    assert a[sc.ERROR_TYPE] == "prefixmon.precondition"
    assert a[sc.PREFIXMON_CODE] == "precondition:cellular_on"
    assert a[sc.PREFIXMON_DECISION] == "block"
    assert a[sc.PREFIXMON_EXECUTABLE] is False
    assert a[sc.PREFIXMON_FED] == 2
    assert blocked.status_code == 2  # ERROR
    (guardrail,) = [e for e in blocked.events if e.name == sc.GEN_AI_GUARDRAIL_RESULT]
    assert guardrail.attributes[sc.GEN_AI_GUARDRAIL_COMPONENT_NAME] == "prefixmon"
    assert guardrail.attributes[sc.GEN_AI_GUARDRAIL_SOURCE] == "tool_input"
    assert guardrail.attributes[sc.GEN_AI_GUARDRAIL_RESULT_TYPE] == "decision"
    assert guardrail.attributes[sc.GEN_AI_GUARDRAIL_RESULT_VALUE] == "block"
    assert guardrail.attributes[sc.PREFIXMON_EXECUTABLE] is False
    assert [e.name for e in blocked.events].count(sc.PREFIXMON_FIRST_FAILURE) == 1

    flaky = by_name(spans, "execute_tool flaky")[0]
    assert flaky.attributes[sc.ERROR_TYPE] == "prefixmon.state_consistency"

    assert records_from_spans(spans) == read_records(sink)
