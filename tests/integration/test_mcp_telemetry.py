"""Telemetry under the MCP SDK's own server span: one span per ``tools/call``, never two.

mcp 2.x wraps every inbound request in a SERVER span (``tools/call {tool}``, with
``gen_ai.operation.name = execute_tool``). The server guard must enrich that span, not open a
second ``execute_tool`` span beside it; and a call it refused must not be left claiming an
execution. The SDK's tracer is the global one, so each scenario runs in its own interpreter
with a global ``TracerProvider`` and an in-memory exporter.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

from prefixmon import read_records
from prefixmon.records.otlp import read_otlp_records

pytestmark = pytest.mark.integration

SCRIPT = r"""
import json, sys
from typing import Any

import anyio
from mcp import Client
from mcp.server import Server
from mcp.types import CallToolRequestParams, CallToolResult, ListToolsResult, PaginatedRequestParams, TextContent, Tool
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from prefixmon import Telemetry
from prefixmon.adapters.mcp import MonitorMiddleware
from prefixmon.telemetry.otel_setup import OtlpJsonFileSpanExporter

exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
tool_spans, out = sys.argv[1], sys.argv[2]
provider.add_span_processor(SimpleSpanProcessor(OtlpJsonFileSpanExporter(out + "/spans.jsonl")))
trace.set_tracer_provider(provider)


async def main() -> None:
    async def list_tools(ctx: Any, params: PaginatedRequestParams | None) -> ListToolsResult:
        schema = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}
        return ListToolsResult(tools=[Tool(name="echo", input_schema=schema, description="Echo the text.")])

    async def call_tool(ctx: Any, params: CallToolRequestParams) -> CallToolResult:
        return CallToolResult(content=[TextContent(type="text", text=str((params.arguments or {}).get("text")))])

    options = {} if tool_spans == "default" else {"tool_spans": tool_spans}
    guard = MonitorMiddleware(observers=[Telemetry(capture_content=True, **options)], sink=out + "/records.jsonl")
    server: Server[Any] = Server("echo", on_list_tools=list_tools, on_call_tool=call_tool)
    server.middleware.append(guard)
    async with guard, Client(server, mode="legacy") as client:
        await client.call_tool("echo", {"text": "hi"})
        await client.call_tool("echo", {"txt": "hi"})  # refused: 'text' is missing


anyio.run(main)
provider.force_flush()
print(json.dumps([
    {"name": s.name, "kind": s.kind.name, "scope": s.instrumentation_scope.name, "attributes": dict(s.attributes or {})}
    for s in exporter.get_finished_spans()
]))
"""


def spans(tool_spans: str, out: Path | None = None) -> list[dict[str, Any]]:
    """The finished spans of one scenario: an accepted and a refused ``echo`` call through a guarded server.

    ``out`` receives the guard's records (``records.jsonl``) and the spans as OTLP JSON (``spans.jsonl``).
    """
    with tempfile.TemporaryDirectory() as tmp:
        return _run(tool_spans, out or Path(tmp))


def _run(tool_spans: str, out: Path) -> list[dict[str, Any]]:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, tool_spans, str(out)], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    found: list[dict[str, Any]] = json.loads(done.stdout.strip().splitlines()[-1])
    return found


def tool_call_spans(found: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [s for s in found if s["attributes"].get("gen_ai.tool.name") == "echo"]


class TestServerSpans:
    """The guard's attributes land on the SDK's span."""

    @pytest.mark.parametrize("tool_spans", ["default", "auto"])
    def test_one_span_per_call_the_sdks(self, tool_spans: str) -> None:
        """Each tools/call has exactly one span with the tool's name: the SDK's SERVER span, with the verdict on it."""
        calls = tool_call_spans(spans(tool_spans))
        assert [(s["name"], s["kind"], s["scope"]) for s in calls] == [("tools/call echo", "SERVER", "mcp-python-sdk")] * 2
        ran, refused = (s["attributes"] for s in calls)
        assert ran["gen_ai.operation.name"] == "execute_tool"
        assert ran["prefixmon.executable"] is True and ran["prefixmon.decision"] == "allow"
        assert ran["gen_ai.tool.type"] == "function" and ran["gen_ai.tool.description"] == "Echo the text."
        # nothing ran: the span no longer claims an execution
        assert refused["gen_ai.operation.name"] == "apply_guardrail"
        assert refused["prefixmon.executable"] is False and refused["prefixmon.decision"] == "block"
        assert refused["prefixmon.cause"] == "schema" and refused["prefixmon.code"]
        # the span is the SDK's: it sets its own error.type for the error result it sent, after ours
        assert refused["error.type"] == "tool_error"

    def test_own_spans_when_asked(self) -> None:
        """tool_spans="own" keeps prefixmon's own call spans, as children of the SDK's."""
        found = spans("own")
        ours = [s for s in found if s["scope"] == "prefixmon" and s["attributes"].get("gen_ai.tool.name") == "echo"]
        assert [s["name"] for s in ours] == ["execute_tool echo", "apply_guardrail prefixmon"]
        assert all(s["kind"] == "INTERNAL" for s in ours)

    @pytest.mark.parametrize("tool_spans", ["auto", "own"])
    def test_records_from_the_spans(self, tool_spans: str, tmp_path: Path) -> None:
        """The episode rebuilt from the trace (content captured) equals the guard's record, on the SDK's spans as on ours."""
        spans(tool_spans, tmp_path)
        (record,) = read_records(tmp_path / "records.jsonl")
        assert [a.executable for a in record.actions] == [True, False]
        assert read_otlp_records(tmp_path / "spans.jsonl") == [record]
