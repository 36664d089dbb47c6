"""OpenTelemetry spans, events and metrics, checked with the SDK's in-memory exporter and reader."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import anyio
import pytest
from opentelemetry import trace
from opentelemetry.metrics import NoOpMeterProvider
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import HistogramDataPoint, InMemoryMetricReader, NumberDataPoint
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ALWAYS_ON, Sampler, SamplingResult
from opentelemetry.trace import SpanKind, StatusCode

from prefixmon import (
    Approve,
    Deny,
    Edit,
    Monitor,
    Replan,
    ToolBlocked,
    ToolCall,
    Toolset,
    TrackedState,
    Verdict,
)
from prefixmon import semconv as sc
from prefixmon.plan import PlanFollower
from prefixmon.telemetry import Telemetry, redact_keys

from .conftest import build_contacts


@dataclass
class Otel:
    """An SDK pipeline that keeps everything in memory."""

    spans: InMemorySpanExporter
    reader: InMemoryMetricReader
    tracer_provider: TracerProvider
    meter_provider: MeterProvider

    def telemetry(self, **kw: Any) -> Telemetry:
        return Telemetry(tracer_provider=self.tracer_provider, meter_provider=self.meter_provider, **kw)

    def finished(self) -> list[ReadableSpan]:
        return list(self.spans.get_finished_spans())

    def tool_spans(self) -> list[ReadableSpan]:
        return [
            s
            for s in self.finished()
            if (s.attributes or {}).get(sc.GEN_AI_OPERATION_NAME) in (sc.EXECUTE_TOOL, sc.APPLY_GUARDRAIL)
        ]

    def episode_spans(self) -> list[ReadableSpan]:
        return [s for s in self.finished() if s.name.startswith("invoke_agent")]

    def points(self, name: str) -> list[Any]:
        data = self.reader.get_metrics_data()
        assert data is not None
        return [
            p
            for rm in data.resource_metrics
            for sm in rm.scope_metrics
            for m in sm.metrics
            if m.name == name
            for p in m.data.data_points
        ]

    def counts(self, name: str) -> dict[frozenset[tuple[str, Any]], int]:
        out = {}
        for p in self.points(name):
            assert isinstance(p, NumberDataPoint)
            out[frozenset((p.attributes or {}).items())] = int(p.value)
        return out


@pytest.fixture
def otel() -> Iterator[Otel]:
    spans = InMemorySpanExporter()
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(spans))
    reader = InMemoryMetricReader()
    mp = MeterProvider(metric_readers=[reader])
    yield Otel(spans=spans, reader=reader, tracer_provider=tp, meter_provider=mp)
    tp.shutdown()
    mp.shutdown()


def attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def events(span: ReadableSpan, name: str) -> list[dict[str, Any]]:
    return [dict(e.attributes or {}) for e in span.events if e.name == name]


async def run_contacts(monitor: Monitor, **labels: str) -> Any:
    """search (ok), remove an invented id (dependency), remove p-1 (ok), send_message (precondition)."""
    async with monitor.episode(task_id="t-1", labels={"model": "m1", "method": "react", **labels}) as ep:
        ep.user("Remove Fredrik")
        await ep.call("search_contacts", {}, call_id="c1")
        with pytest.raises(ToolBlocked):
            await ep.call("remove_contact", {"person_id": "+1 555 0100"}, call_id="c2")
        await ep.call("remove_contact", {"person_id": "p-1"}, call_id="c3")
        with pytest.raises(ToolBlocked):
            await ep.call("send_message", {"person_id": "p-2", "text": "hi"}, call_id="c4")
        ep.finish("partial")
    return ep


class TestCallSpans:
    """One span per call: execute_tool when something ran, apply_guardrail when nothing did."""

    async def test_executable_call_span(self, otel: Otel, tools: Toolset) -> None:
        """An executable call gets an INTERNAL execute_tool span with the GenAI and prefixmon attributes."""
        await run_contacts(Monitor(tools, policy="block", observers=[otel.telemetry()]))
        first = otel.tool_spans()[0]
        assert first.name == "execute_tool search_contacts"
        assert first.kind is SpanKind.INTERNAL
        a = attrs(first)
        assert a[sc.GEN_AI_OPERATION_NAME] == "execute_tool"
        assert a[sc.GEN_AI_TOOL_NAME] == "search_contacts"
        assert a[sc.GEN_AI_TOOL_CALL_ID] == "c1"
        assert a[sc.PREFIXMON_DEPTH] == 1
        assert a[sc.PREFIXMON_EXECUTABLE] is True
        assert a[sc.PREFIXMON_DECISION] == "allow"
        assert a[sc.PREFIXMON_REACHED_ENVIRONMENT] is True
        assert sc.ERROR_TYPE not in a and sc.PREFIXMON_CAUSE not in a and sc.PREFIXMON_FED not in a
        assert first.status.status_code is StatusCode.UNSET

    async def test_blocked_call_has_a_span_with_error_type(self, otel: Otel, tools: Toolset) -> None:
        """A blocked call gets a span that does not claim an execution: ``apply_guardrail prefixmon``
        (operation apply_guardrail), with error.type=prefixmon.<cause>, code, decision, status ERROR."""
        await run_contacts(Monitor(tools, policy="block", observers=[otel.telemetry()]))
        spans = otel.tool_spans()
        assert [s.name for s in spans] == [
            "execute_tool search_contacts",
            "apply_guardrail prefixmon",
            "execute_tool remove_contact",
            "apply_guardrail prefixmon",
        ]
        assert [attrs(s)[sc.GEN_AI_OPERATION_NAME] for s in spans] == [
            "execute_tool",
            "apply_guardrail",
            "execute_tool",
            "apply_guardrail",
        ]
        assert attrs(spans[1])[sc.GEN_AI_TOOL_NAME] == "remove_contact"
        blocked = attrs(spans[1])
        assert blocked[sc.ERROR_TYPE] == "prefixmon.dependency"
        assert blocked[sc.PREFIXMON_CAUSE] == "dependency"
        assert blocked[sc.PREFIXMON_CODE] == "unbound_reference"
        assert blocked[sc.PREFIXMON_DECISION] == "block"
        assert blocked[sc.PREFIXMON_REACHED_ENVIRONMENT] is False
        assert blocked[sc.PREFIXMON_EXECUTABLE] is False
        assert spans[1].status.status_code is StatusCode.ERROR
        assert attrs(spans[3])[sc.ERROR_TYPE] == "prefixmon.precondition"

    async def test_every_cause_maps_to_error_type(self, otel: Otel, tools: Toolset) -> None:
        """schema, state_consistency and information failures carry their own error.type."""
        monitor = Monitor(tools, policy="observe", observers=[otel.telemetry()])
        async with monitor.episode(task_id="t") as ep:
            with pytest.raises(ToolBlocked):  # an unknown tool cannot run even when observed
                await ep.call("no_such_tool", {})
            with pytest.raises(RuntimeError):
                await ep.call("flaky", {"x": 1})
            await ep.call("send_money", {"phone_number": "+1 555 0000", "amount": 5.0})
        types = [attrs(s).get(sc.ERROR_TYPE) for s in otel.tool_spans()]
        assert types == ["prefixmon.schema", "prefixmon.state_consistency", "prefixmon.information"]
        observed = attrs(otel.tool_spans()[2])
        assert observed[sc.PREFIXMON_DECISION] == "observe"
        assert observed[sc.PREFIXMON_REACHED_ENVIRONMENT] is True

    async def test_fed_so_far_on_later_spans(self, otel: Otel, tools: Toolset) -> None:
        """prefixmon.fed appears from the first failure on, with the episode's FED so far."""
        await run_contacts(Monitor(tools, policy="block", observers=[otel.telemetry()]))
        assert [attrs(s).get(sc.PREFIXMON_FED) for s in otel.tool_spans()] == [None, 2, 2, 2]

    async def test_call_spans_are_children_of_the_episode_span(self, otel: Otel, tools: Toolset) -> None:
        """Every call span is in the episode's trace, parented to invoke_agent."""
        await run_contacts(Monitor(tools, policy="block", observers=[otel.telemetry()]))
        (root,) = otel.episode_spans()
        for span in otel.tool_spans():
            assert span.parent is not None and span.parent.span_id == root.context.span_id
            assert span.context.trace_id == root.context.trace_id
            assert attrs(span)[sc.PREFIXMON_EPISODE_ID] == attrs(root)[sc.PREFIXMON_EPISODE_ID]

    async def test_calls_that_never_ran_are_guardrail_spans(self, otel: Otel, tools: Toolset) -> None:
        """A replan with guidance only and an undeclared tool under observe ran nothing: no execute_tool span claims they did."""

        async def guidance(verdict: Verdict, call: ToolCall, state: TrackedState) -> Replan:
            return Replan(guidance="search first")

        monitor = Monitor(tools, policy="replan", replan=guidance, observers=[otel.telemetry()])
        async with monitor.episode(task_id="t") as ep:
            with pytest.raises(ToolBlocked):
                await ep.call("remove_contact", {"person_id": "p-9"})
        observed = Monitor(tools, policy="observe", observers=[otel.telemetry()])
        async with observed.episode(task_id="t") as ep:
            with pytest.raises(ToolBlocked):
                await ep.call("no_such_tool", {})
        spans = otel.tool_spans()
        guardrail = ("apply_guardrail prefixmon", "apply_guardrail")
        assert [(s.name, attrs(s)[sc.GEN_AI_OPERATION_NAME]) for s in spans] == [guardrail] * 2
        assert [attrs(s)[sc.PREFIXMON_DECISION] for s in spans] == ["replan", "observe"]
        assert [attrs(s)[sc.GEN_AI_TOOL_NAME] for s in spans] == ["remove_contact", "no_such_tool"]
        assert not any(attrs(s)[sc.PREFIXMON_REACHED_ENVIRONMENT] for s in spans)

    async def test_replacement_and_decisions(self, otel: Otel, tools: Toolset) -> None:
        """A replanned call records the replacement tool and decision replan."""

        async def replan(verdict: Verdict, call: ToolCall, state: TrackedState) -> Replan:
            return Replan(guidance="search first", call=ToolCall(name="search_contacts", args={"name": "Amara"}))

        monitor = Monitor(tools, policy="replan", replan=replan, observers=[otel.telemetry()])
        async with monitor.episode(task_id="t") as ep:
            await ep.call("remove_contact", {"person_id": "p-9"})
        a = attrs(otel.tool_spans()[0])
        assert a[sc.PREFIXMON_DECISION] == "replan"
        assert a[sc.PREFIXMON_REPLACEMENT] == "search_contacts"
        assert a[sc.ERROR_TYPE] == "prefixmon.dependency"


class TestEvents:
    """The verdict as gen_ai.guardrail.result, and prefixmon.first_failure once."""

    async def test_guardrail_result_on_every_call(self, otel: Otel, tools: Toolset) -> None:
        """With guardrail_events="all", each call span has one guardrail event with component, source, type, value and reason."""
        await run_contacts(Monitor(tools, policy="block", observers=[otel.telemetry(guardrail_events="all")]))
        got = [events(s, sc.GEN_AI_GUARDRAIL_RESULT) for s in otel.tool_spans()]
        assert all(len(e) == 1 for e in got)
        ok, blocked = got[0][0], got[1][0]
        # the convention: result.type names the guardrail's own result field, result.value is its
        # native value as a string (no generalised pass/deny), reason is low-cardinality
        assert ok == {
            sc.GEN_AI_GUARDRAIL_COMPONENT_NAME: "prefixmon",
            sc.GEN_AI_GUARDRAIL_SOURCE: "tool_input",
            sc.GEN_AI_GUARDRAIL_RESULT_TYPE: "decision",
            sc.GEN_AI_GUARDRAIL_RESULT_VALUE: "allow",
            sc.GEN_AI_GUARDRAIL_RESULT_REASON: "executable",
            sc.PREFIXMON_EXECUTABLE: True,
        }
        assert blocked[sc.GEN_AI_GUARDRAIL_RESULT_TYPE] == "decision"
        assert blocked[sc.GEN_AI_GUARDRAIL_RESULT_VALUE] == "block"
        assert blocked[sc.PREFIXMON_EXECUTABLE] is False
        assert blocked[sc.GEN_AI_GUARDRAIL_POLICY_RULE_ID] == "dependency"
        assert blocked[sc.GEN_AI_GUARDRAIL_RESULT_REASON] == "unbound_reference"
        assert got[3][0][sc.GEN_AI_GUARDRAIL_RESULT_REASON] == "precondition:cellular_on"

    async def test_first_failure_event_once(self, otel: Otel, tools: Toolset) -> None:
        """prefixmon.first_failure is on the first failing call span and the episode span, not on later failures."""
        await run_contacts(Monitor(tools, policy="block", observers=[otel.telemetry()]))
        per_call = [events(s, sc.PREFIXMON_FIRST_FAILURE) for s in otel.tool_spans()]
        assert [len(e) for e in per_call] == [0, 1, 0, 0]
        expected = {
            sc.PREFIXMON_DEPTH: 2,
            sc.GEN_AI_TOOL_NAME: "remove_contact",
            sc.PREFIXMON_CAUSE: "dependency",
            sc.PREFIXMON_CODE: "unbound_reference",
        }
        assert per_call[1][0] == expected
        assert events(otel.episode_spans()[0], sc.PREFIXMON_FIRST_FAILURE) == [expected]

    @pytest.mark.parametrize(
        ("answer", "operation", "decision"),
        [
            (Approve(), "execute_tool", "approve"),
            (Deny(), "apply_guardrail", "deny"),
            (Edit(args={"phone_number": "+1 555 0100", "amount": 5}), "execute_tool", "edit"),
        ],
    )
    async def test_escalation_result_types(
        self, otel: Otel, tools: Toolset, answer: Approve | Deny | Edit, operation: str, decision: str
    ) -> None:
        """Escalated calls report the human's answer as the guardrail result value and decision; a denied
        call never ran, so its span is the guardrail's, not a tool execution's."""

        async def human(verdict: Verdict, call: ToolCall) -> Approve | Deny | Edit:
            return answer

        monitor = Monitor(tools, policy="escalate", escalate=human, observers=[otel.telemetry()])
        async with monitor.episode(task_id="t") as ep:
            ep.user("send 5 dollars to +1 555 0100")
            with contextlib.suppress(ToolBlocked):
                await ep.call("send_money", {"phone_number": "+1 555 9999", "amount": 5})
        span = otel.tool_spans()[0]
        result = events(span, sc.GEN_AI_GUARDRAIL_RESULT)[0]
        assert result[sc.GEN_AI_GUARDRAIL_RESULT_TYPE] == "decision"
        assert result[sc.GEN_AI_GUARDRAIL_RESULT_VALUE] == decision
        assert attrs(span)[sc.PREFIXMON_DECISION] == decision
        assert attrs(span)[sc.GEN_AI_OPERATION_NAME] == operation


class TestEpisodeSpan:
    """invoke_agent per episode, or the framework's span enriched."""

    async def test_episode_span_attributes_and_times(self, otel: Otel, tools: Toolset) -> None:
        """The episode span carries horizon, FED, outcome and labels, and spans the record's times."""
        ep = await run_contacts(Monitor(tools, policy="block", observers=[otel.telemetry()]), agent="support-bot")
        (span,) = otel.episode_spans()
        record = ep.record
        assert span.name == "invoke_agent support-bot"
        a = attrs(span)
        assert a[sc.GEN_AI_OPERATION_NAME] == "invoke_agent"
        assert a[sc.GEN_AI_AGENT_NAME] == "support-bot"
        assert a[sc.PREFIXMON_EPISODE_ID] == record.episode_id
        assert a[sc.PREFIXMON_TASK_ID] == "t-1"
        assert a[sc.PREFIXMON_HORIZON] == 4
        assert a[sc.PREFIXMON_FED] == 2
        assert a[sc.PREFIXMON_EXECUTABLE] is False
        assert a[sc.PREFIXMON_OUTCOME] == "partial"
        assert a[sc.PREFIXMON_STATUS] == "finished"
        assert a[sc.PREFIXMON_FIRST_FAILURE_CAUSE] == "dependency"
        assert a[sc.PREFIXMON_FIRST_FAILURE_TOOL] == "remove_contact"
        assert a["prefixmon.label.model"] == "m1" and a["prefixmon.label.method"] == "react"
        assert span.start_time == int(record.started_at.timestamp() * 1_000_000) * 1000
        assert span.end_time == int(record.ended_at.timestamp() * 1_000_000) * 1000

    async def test_episode_span_is_current_in_the_body(self, otel: Otel, tools: Toolset) -> None:
        """Spans the agent makes inside the episode nest under invoke_agent; the context is restored after."""
        tracer = otel.tracer_provider.get_tracer("agent")
        monitor = Monitor(tools, observers=[otel.telemetry(agent_name="a")])
        async with monitor.episode(task_id="t") as ep:
            with tracer.start_as_current_span("chat model"):
                pass
            await ep.call("search_contacts", {"name": "x"})
        assert not trace.get_current_span().get_span_context().is_valid
        (root,) = otel.episode_spans()
        chat = next(s for s in otel.finished() if s.name == "chat model")
        assert chat.parent is not None and chat.parent.span_id == root.context.span_id

    async def test_enrich_current_span(self, otel: Otel, tools: Toolset) -> None:
        """With enrich_current_span, the framework's agent span gets the episode attributes and no invoke_agent opens."""
        tracer = otel.tracer_provider.get_tracer("framework")
        monitor = Monitor(tools, policy="block", observers=[otel.telemetry(enrich_current_span=True)])
        with tracer.start_as_current_span("agent run") as framework_span:
            ep = await run_contacts(monitor)
        assert otel.episode_spans() == []
        agent = next(s for s in otel.finished() if s.name == "agent run")
        a = attrs(agent)
        assert a[sc.PREFIXMON_FED] == 2 and a[sc.PREFIXMON_HORIZON] == 4
        assert a[sc.PREFIXMON_EPISODE_ID] == ep.record.episode_id
        assert a[sc.PREFIXMON_STARTED_AT] == int(ep.record.started_at.timestamp() * 1_000_000) * 1000
        for span in otel.tool_spans():
            assert span.parent is not None and span.parent.span_id == framework_span.get_span_context().span_id

    async def test_enrich_keeps_the_frameworks_own_gen_ai_attributes(self, otel: Otel, tools: Toolset) -> None:
        """The framework's span keeps what it says it is (operation, provider, agent); ours are added, not overwritten."""
        tracer = otel.tracer_provider.get_tracer("framework")
        monitor = Monitor(tools, policy="block", observers=[otel.telemetry(enrich_current_span=True)])
        own = {sc.GEN_AI_OPERATION_NAME: "chat", sc.GEN_AI_PROVIDER_NAME: "openai"}
        with tracer.start_as_current_span("chat gpt", attributes=own):
            await run_contacts(monitor, agent="support-bot")
        a = attrs(next(s for s in otel.finished() if s.name == "chat gpt"))
        assert a[sc.GEN_AI_OPERATION_NAME] == "chat" and a[sc.GEN_AI_PROVIDER_NAME] == "openai"
        assert a[sc.GEN_AI_AGENT_NAME] == "support-bot"  # not set by the framework: ours
        assert a[sc.PREFIXMON_FED] == 2

    async def test_enrich_without_current_span_opens_one(self, otel: Otel, tools: Toolset) -> None:
        """enrich_current_span falls back to an invoke_agent span when no span is current."""
        monitor = Monitor(tools, observers=[otel.telemetry(enrich_current_span=True)])
        async with monitor.episode(task_id="t") as ep:
            await ep.call("search_contacts", {"name": "x"})
        assert [s.name for s in otel.episode_spans()] == ["invoke_agent"]

    async def test_body_error_sets_error_status(self, otel: Otel, tools: Toolset) -> None:
        """An exception in the agent body ends the episode span with status ERROR and error.type."""
        monitor = Monitor(tools, observers=[otel.telemetry()])
        with pytest.raises(KeyError):
            async with monitor.episode(task_id="t"):
                raise KeyError("boom")
        (span,) = otel.episode_spans()
        assert span.status.status_code is StatusCode.ERROR
        assert attrs(span)[sc.ERROR_TYPE] == "KeyError"
        assert attrs(span)[sc.PREFIXMON_STATUS] == "error"


class TestCancellation:
    """A cancelled call still ends its span and leaves a complete episode span."""

    async def test_cancelled_call(self, otel: Otel, tools: Toolset) -> None:
        """Cancelling mid-call ends the call span (error.type prefixmon.abandoned) and the episode span (cancelled)."""
        started = anyio.Event()

        async def hang(name: str) -> None:
            started.set()
            await anyio.sleep_forever()

        tools.add_schema("hang", {"type": "object", "properties": {"name": {"type": "string"}}}, func=hang)
        monitor = Monitor(tools, observers=[otel.telemetry()])
        with anyio.move_on_after(5) as outer:
            async with anyio.create_task_group() as tg:

                async def agent() -> None:
                    async with monitor.episode(task_id="t") as ep:
                        await ep.call("search_contacts", {"name": "x"})
                        await ep.call("hang", {"name": "y"})

                tg.start_soon(agent)
                await started.wait()
                tg.cancel_scope.cancel()
        assert not outer.cancelled_caught
        calls = otel.tool_spans()
        assert [s.name for s in calls] == ["execute_tool search_contacts", "execute_tool hang"]
        assert attrs(calls[1])[sc.ERROR_TYPE] == "prefixmon.abandoned"
        assert calls[1].status.status_code is StatusCode.ERROR
        (root,) = otel.episode_spans()
        assert attrs(root)[sc.PREFIXMON_STATUS] == "cancelled"
        assert attrs(root)[sc.PREFIXMON_HORIZON] == 2
        assert otel.counts(sc.METRIC_EPISODES) == {
            frozenset({(sc.PREFIXMON_EXECUTABLE, True), (sc.PREFIXMON_STATUS, "cancelled")}): 1
        }


class TestMetrics:
    """Metrics from which a backend computes fleet-wide PEC, TER and RR."""

    async def _fleet(self, otel: Otel, tools: Toolset, **kw: Any) -> list[Any]:
        """Five episodes with known FED / horizon / outcome."""
        monitor = Monitor(tools, policy="block", observers=[otel.telemetry(**kw)], labels={"model": "m1"})
        records = []
        plans: list[tuple[list[tuple[str, dict[str, Any]]], str]] = [
            ([("search_contacts", {"name": "A"})], "success"),  # T=1, FED=2
            ([("search_contacts", {"name": "A"}), ("set_cellular", {"on": True})], "success"),  # T=2, FED=3
            ([("remove_contact", {"person_id": "zz"}), ("search_contacts", {"name": "A"})], "success"),  # FED=1
            ([("search_contacts", {"name": "A"}), ("send_message", {"person_id": "p-2", "text": "x"})], "failure"),  # FED=2
            ([("nope", {})], "failure"),  # FED=1
        ]
        for calls, outcome in plans:
            async with monitor.episode(task_id="t", labels={"dataset": "d"}) as ep:
                for name, args in calls:
                    with contextlib.suppress(ToolBlocked):
                        await ep.call(name, args)
                ep.finish(outcome)
            records.append(ep.record)
        return records

    async def test_episode_counter_by_outcome_and_executable(self, otel: Otel, tools: Toolset) -> None:
        """prefixmon.episodes gives TER and RR: counts by executable and outcome with the chosen labels."""
        records = await self._fleet(otel, tools)
        base = {("prefixmon.label.model", "m1"), ("prefixmon.label.dataset", "d"), (sc.PREFIXMON_STATUS, "finished")}
        counts = otel.counts(sc.METRIC_EPISODES)
        assert counts == {
            frozenset(base | {(sc.PREFIXMON_EXECUTABLE, True), (sc.PREFIXMON_OUTCOME, "success")}): 2,
            frozenset(base | {(sc.PREFIXMON_EXECUTABLE, False), (sc.PREFIXMON_OUTCOME, "success")}): 1,
            frozenset(base | {(sc.PREFIXMON_EXECUTABLE, False), (sc.PREFIXMON_OUTCOME, "failure")}): 2,
        }
        n = len(records)
        ter = sum(v for k, v in counts.items() if (sc.PREFIXMON_EXECUTABLE, True) in k) / n
        assert ter == sum(r.executable for r in records) / n == 0.4
        failed = {k: v for k, v in counts.items() if (sc.PREFIXMON_EXECUTABLE, False) in k}
        rr = sum(v for k, v in failed.items() if (sc.PREFIXMON_OUTCOME, "success") in k) / sum(failed.values())
        assert rr == pytest.approx(1 / 3)

    async def test_fed_histogram_gives_pec(self, otel: Otel, tools: Toolset) -> None:
        """The FED histogram has one bucket per depth, so PEC(k) = share of FED > k exactly."""
        records = await self._fleet(otel, tools, max_depth=4)
        (fed,) = otel.points(sc.METRIC_FED)
        assert isinstance(fed, HistogramDataPoint)
        assert list(fed.explicit_bounds) == [1.0, 2.0, 3.0, 4.0]
        # bucket i counts FED == i+1 (bounds are inclusive upper limits); the last is overflow
        assert list(fed.bucket_counts) == [2, 2, 1, 0, 0]
        n = fed.count
        for k in range(1, 5):
            pec_metric = sum(fed.bucket_counts[k:]) / n
            assert pec_metric == sum(r.fed > k for r in records) / len(records)
        (horizon,) = otel.points(sc.METRIC_HORIZON)
        assert list(horizon.bucket_counts) == [2, 3, 0, 0, 0]

    async def test_default_max_depth_buckets(self, otel: Otel, tools: Toolset) -> None:
        """By default the histograms have one bucket per depth up to 32."""
        await self._fleet(otel, tools)
        (fed,) = otel.points(sc.METRIC_FED)
        assert list(fed.explicit_bounds) == [float(d) for d in range(1, 33)]

    async def test_first_failure_causes_calls_and_interventions(self, otel: Otel, tools: Toolset) -> None:
        """Per-cause counts of primary causes, calls by decision, and blocked calls as interventions;
        the call-level counters carry the cohort labels too."""
        await self._fleet(otel, tools)
        base = {("prefixmon.label.model", "m1"), ("prefixmon.label.dataset", "d")}
        assert otel.counts(sc.METRIC_FIRST_FAILURES) == {
            frozenset(base | {(sc.PREFIXMON_CAUSE, "dependency")}): 1,
            frozenset(base | {(sc.PREFIXMON_CAUSE, "precondition")}): 1,
            frozenset(base | {(sc.PREFIXMON_CAUSE, "schema")}): 1,
        }
        calls = otel.counts(sc.METRIC_CALLS)
        ok = frozenset(base | {(sc.PREFIXMON_EXECUTABLE, True), (sc.PREFIXMON_DECISION, "allow")})
        assert calls[ok] == 5
        assert sum(calls.values()) == 8
        interventions = otel.counts(sc.METRIC_INTERVENTIONS)
        assert sum(interventions.values()) == 3
        assert all((sc.PREFIXMON_DECISION, "block") in k and base <= k for k in interventions)

    async def test_internal_errors_counted(self, otel: Otel, tools: Toolset) -> None:
        """A precondition that raises is counted as a monitor-internal error and noted on the episode span."""

        def broken(state: TrackedState, args: Any) -> bool:
            raise ZeroDivisionError

        tools.add_schema("fragile", {"type": "object", "properties": {}}, func=lambda: "ok", requires=[broken])
        monitor = Monitor(tools, observers=[otel.telemetry()])
        async with monitor.episode(task_id="t") as ep:
            await ep.call("fragile", {})
        counts = otel.counts(sc.METRIC_INTERNAL_ERRORS)
        assert list(counts.values()) == [1]
        (key,) = counts
        assert dict(key)[sc.ERROR_TYPE] == "ZeroDivisionError"
        assert events(otel.episode_spans()[0], "prefixmon.internal_error")[0][sc.ERROR_TYPE] == "ZeroDivisionError"


CANARY = "CANARY-7f3a9c-secret"


def _all_telemetry_text(otel: Otel) -> str:
    parts = []
    for s in otel.finished():
        parts.append(s.name)
        parts.append(json.dumps(attrs(s), default=str))
        parts.append(s.status.description or "")
        for e in s.events:
            parts.append(e.name + json.dumps(dict(e.attributes or {}), default=str))
    data = otel.reader.get_metrics_data()
    assert data is not None
    parts.append(data.to_json())
    return "\n".join(parts)


class TestContent:
    """Argument and result values stay out of telemetry unless content capture is on."""

    async def test_canary_secret_appears_nowhere_by_default(self, otel: Otel, tools: Toolset) -> None:
        """A secret argument quoted in reasons and errors reaches no span, event or metric."""
        tools.add_schema(
            "login",
            {"type": "object", "properties": {"password": {"type": "string"}}, "required": ["password"]},
            func=lambda password: (_ for _ in ()).throw(PermissionError(f"bad password {password}")),
        )
        monitor = Monitor(tools, policy="block", observers=[otel.telemetry()])
        async with monitor.episode(task_id="t") as ep:
            with pytest.raises(ToolBlocked):
                await ep.call("remove_contact", {"person_id": CANARY})  # quoted in the reason
            with pytest.raises(ToolBlocked):
                await ep.call("send_money", {"phone_number": CANARY, "amount": 1.0})
            with pytest.raises(PermissionError):
                await ep.call("login", {"password": CANARY})  # quoted in the environment's error
        assert ep.record is not None
        assert CANARY in ep.record.actions[0].reason  # type: ignore[operator]
        assert CANARY in ep.record.actions[2].error  # type: ignore[operator]
        text = _all_telemetry_text(otel)
        assert "remove_contact" in text and "login" in text
        assert CANARY not in text

    async def test_opt_in_capture_records_arguments_reasons_errors(self, otel: Otel, tools: Toolset) -> None:
        """capture_content=True records gen_ai.tool.call.arguments, prefixmon.reason and prefixmon.error."""
        monitor = Monitor(tools, policy="block", observers=[otel.telemetry(capture_content=True)])
        async with monitor.episode(task_id="t") as ep:
            with pytest.raises(ToolBlocked):
                await ep.call("remove_contact", {"person_id": "x-1"})
            with pytest.raises(RuntimeError):
                await ep.call("flaky", {"x": 3})
        blocked, flaky = (attrs(s) for s in otel.tool_spans())
        assert ep.record is not None
        assert json.loads(blocked[sc.GEN_AI_TOOL_CALL_ARGUMENTS]) == {"person_id": "x-1"}
        assert blocked[sc.PREFIXMON_REASON] == ep.record.actions[0].reason
        assert json.loads(flaky[sc.GEN_AI_TOOL_CALL_ARGUMENTS]) == {"x": 3}
        assert flaky[sc.PREFIXMON_ERROR] == ep.record.actions[1].error
        assert "backend unavailable" in flaky[sc.PREFIXMON_ERROR]

    async def test_replaced_call_captures_emitted_arguments_and_the_replacement_result(self, otel: Otel, tools: Toolset) -> None:
        """The span describes the emitted call: its arguments, the replacement's name and what it returned."""

        async def replan(verdict: Verdict, call: ToolCall, state: TrackedState) -> Replan:
            return Replan(call=ToolCall(name="search_contacts", args={"name": "Amara"}))

        monitor = Monitor(tools, policy="replan", replan=replan, observers=[otel.telemetry(capture_content=True)])
        async with monitor.episode(task_id="t") as ep:
            result = await ep.call("remove_contact", {"person_id": "p-9"})
        (span,) = otel.tool_spans()
        a = attrs(span)
        assert span.name == "execute_tool remove_contact"
        assert json.loads(a[sc.GEN_AI_TOOL_CALL_ARGUMENTS]) == {"person_id": "p-9"}
        assert a[sc.PREFIXMON_REPLACEMENT] == "search_contacts"
        assert json.loads(a[sc.GEN_AI_TOOL_CALL_RESULT]) == result

    async def test_plan_deviation_kind_by_default_text_on_capture(self, otel: Otel, tools: Toolset) -> None:
        """prefixmon.deviation is the kind; the record's text goes to prefixmon.deviation.detail only on capture."""
        plan = [{"tool": "search_contacts", "args": {"name": "Fredrik"}}]
        for capture in (False, True):
            otel.spans.clear()
            monitor = Monitor(tools, observers=[otel.telemetry(capture_content=capture)])
            async with monitor.episode(task_id="t", plan=PlanFollower(plan, monitor.toolset)) as ep:
                await ep.call("search_contacts", {"name": "Amara"})
            assert ep.record is not None
            a = attrs(otel.tool_spans()[0])
            assert a[sc.PREFIXMON_DEVIATION] == "arguments_differ"
            assert a.get(sc.PREFIXMON_DEVIATION_DETAIL) == (ep.record.actions[0].deviation if capture else None)

    async def test_redaction_hook(self, otel: Otel, tools: Toolset) -> None:
        """redact_keys masks named keys at any depth; a hook returning None drops the value."""
        tools.add_schema(
            "pay",
            {
                "type": "object",
                "properties": {
                    "card": {"type": "object", "properties": {"number": {"type": "string"}}},
                    "amount": {"type": "number"},
                },
            },
            func=lambda card, amount: "ok",
        )
        monitor = Monitor(tools, observers=[otel.telemetry(capture_content=True, redact=redact_keys("Number"))])
        async with monitor.episode(task_id="t") as ep:
            await ep.call("pay", {"card": {"number": CANARY}, "amount": 3})
        a = attrs(otel.tool_spans()[0])
        assert json.loads(a[sc.GEN_AI_TOOL_CALL_ARGUMENTS]) == {"card": {"number": "[REDACTED]"}, "amount": 3}
        otel.spans.clear()

        def drop_all(kind: str, value: Any) -> Any:
            return None

        monitor = Monitor(tools, policy="block", observers=[otel.telemetry(capture_content=True, redact=drop_all)])
        async with monitor.episode(task_id="t") as ep:
            with pytest.raises(ToolBlocked):
                await ep.call("remove_contact", {"person_id": CANARY})
        assert CANARY not in _all_telemetry_text(otel)

    async def test_size_cap(self, otel: Otel, tools: Toolset) -> None:
        """Content longer than max_content_chars is cut while it is serialised, with a marker saying where."""
        monitor = Monitor(tools, observers=[otel.telemetry(capture_content=True, max_content_chars=50)])
        async with monitor.episode(task_id="t") as ep:
            await ep.call("search_contacts", {"name": "y" * 500})
        text = attrs(otel.tool_spans()[0])[sc.GEN_AI_TOOL_CALL_ARGUMENTS]
        full = json.dumps({"name": "y" * 500, "phone_number": None})  # validated args, defaults included
        assert text == full[:50] + "...[cut at 50 chars]"

    async def test_result_capture_and_execution_context(self, otel: Otel) -> None:
        """call_result records gen_ai.tool.call.result (capture only); execution_context makes the call span current."""
        tel = otel.telemetry(capture_content=True)
        quiet = otel.telemetry()
        tracer = otel.tracer_provider.get_tracer("tool")
        for telemetry in (tel, quiet):
            tools = Toolset()

            @tools.tool
            def echo(text: str) -> dict[str, str]:
                """Echo."""
                return {"echo": text}

            monitor = Monitor(tools, observers=[telemetry])
            async with monitor.episode(task_id="t") as ep:
                token = telemetry.call_started(ep, "echo", "c9", 99)
                context = telemetry.execution_context(ep, ToolCall(name="echo"), token)
                assert context is not None
                with context, tracer.start_as_current_span("http GET"):
                    pass
                telemetry.call_result(ep, 99, {"echo": CANARY}, token)
                assert token is not None
                token.end()
        spans = [s for s in otel.finished() if s.name == "execute_tool echo"]
        captured, default = (attrs(s) for s in spans)
        assert json.loads(captured[sc.GEN_AI_TOOL_CALL_RESULT]) == {"echo": CANARY}
        assert sc.GEN_AI_TOOL_CALL_RESULT not in default
        children = [s for s in otel.finished() if s.name == "http GET"]
        assert [c.parent.span_id for c in children if c.parent] == [s.context.span_id for s in spans]

    async def test_tool_spans_nest_under_the_call_span_end_to_end(self, otel: Otel) -> None:
        """Through Episode.call, spans the tool makes are children of its execute_tool span, and the result is captured."""
        telemetry = otel.telemetry(capture_content=True)
        tracer = otel.tracer_provider.get_tracer("tool")
        tools = Toolset()

        @tools.tool
        async def fetch(url: str) -> dict[str, str]:
            """Fetch a page."""
            with tracer.start_as_current_span("http GET"):
                await anyio.sleep(0)
            return {"body": "ok"}

        monitor = Monitor(tools, observers=[telemetry])
        async with monitor.episode(task_id="t") as ep:
            await ep.call("fetch", {"url": "https://example.invalid"})
        (call_span,) = [s for s in otel.finished() if s.name == "execute_tool fetch"]
        (child,) = [s for s in otel.finished() if s.name == "http GET"]
        assert child.parent is not None and child.parent.span_id == call_span.context.span_id
        assert json.loads(attrs(call_span)[sc.GEN_AI_TOOL_CALL_RESULT]) == {"body": "ok"}

    async def test_a_task_under_an_ancestor_span_still_nests_under_the_episode(self, otel: Otel) -> None:
        """A worker started under the application's span (before the episode) makes calls: they nest under the episode span."""
        tracer = otel.tracer_provider.get_tracer("app")
        tools = Toolset()

        @tools.tool
        def ping(n: int) -> int:
            """Ping."""
            return n

        monitor = Monitor(tools, observers=[otel.telemetry()])
        send, receive = anyio.create_memory_object_stream[int](4)
        with tracer.start_as_current_span("request"):
            async with anyio.create_task_group() as tg:

                async def worker() -> None:
                    async with receive:
                        async for n in receive:
                            await ep.call("ping", {"n": n})

                tg.start_soon(worker)
                async with monitor.episode(task_id="t") as ep:
                    await ep.call("ping", {"n": 0})
                    await send.send(1)
                    while ep.depth < 2:
                        await anyio.sleep(0.001)
                await send.aclose()
        (episode_span,) = otel.episode_spans()
        calls = otel.tool_spans()
        assert len(calls) == 2
        assert all(c.parent is not None and c.parent.span_id == episode_span.context.span_id for c in calls)

    async def test_open_episode_across_tasks_nests_and_detaches_cleanly(
        self, otel: Otel, caplog: pytest.LogCaptureFixture
    ) -> None:
        """An episode opened with open_episode and used from several tasks: call spans nest under it, nothing leaks."""
        telemetry = otel.telemetry()
        tools = Toolset()

        @tools.tool
        def ping(n: int) -> int:
            """Ping."""
            return n

        monitor = Monitor(tools, observers=[telemetry])
        ep = monitor.open_episode("t")

        async def one(n: int) -> None:
            await ep.call("ping", {"n": n})

        async with anyio.create_task_group() as tg:
            for n in range(3):
                tg.start_soon(one, n)
        async with anyio.create_task_group() as tg:
            tg.start_soon(ep.aclose)
        assert trace.get_current_span() is trace.INVALID_SPAN
        (episode_span,) = [s for s in otel.finished() if s.name.startswith("invoke_agent")]
        calls = [s for s in otel.finished() if s.name == "execute_tool ping"]
        assert len(calls) == 3
        assert all(c.parent is not None and c.parent.span_id == episode_span.context.span_id for c in calls)
        assert "Failed to detach context" not in caplog.text

    async def test_undeclared_tool_names_stay_out_of_span_names(self, otel: Otel, tools: Toolset) -> None:
        """A made-up tool name never becomes a span name; a very long one is not kept at all."""
        monitor = Monitor(tools, observers=[otel.telemetry()])
        async with monitor.episode(task_id="t") as ep:
            for name in ("delete_everything", "x" * 500):
                with contextlib.suppress(ToolBlocked):
                    await ep.call(name, {})
        spans = otel.tool_spans()
        assert [s.name for s in spans] == ["apply_guardrail prefixmon"] * 2  # refused: nothing ran
        assert [attrs(s)[sc.GEN_AI_TOOL_NAME] for s in spans] == ["delete_everything", sc.UNKNOWN_TOOL]


class TestTelemetryOff:
    """No span work at all when no SDK is installed or tracing is off."""

    async def test_no_sdk_means_no_span_tokens(self, tools: Toolset) -> None:
        """With the API's no-op provider, call_started returns None and no episode state is kept."""
        telemetry = Telemetry(tracer_provider=trace.NoOpTracerProvider())
        monitor = Monitor(tools, observers=[telemetry])
        async with monitor.episode(task_id="t") as ep:
            assert telemetry.call_started(ep, "search_contacts", None, 1) is None
            assert telemetry._episodes == {}
            await ep.call("search_contacts", {"name": "x"})
        assert ep.record is not None and ep.record.horizon == 1

    async def test_tracing_false(self, otel: Otel, tools: Toolset) -> None:
        """tracing=False emits no spans but still records metrics."""
        monitor = Monitor(tools, observers=[otel.telemetry(tracing=False)])
        async with monitor.episode(task_id="t") as ep:
            await ep.call("search_contacts", {"name": "x"})
        assert otel.finished() == []
        assert sum(otel.counts(sc.METRIC_CALLS).values()) == 1

    def test_bad_settings(self) -> None:
        """max_depth and max_content_chars must be positive."""
        with pytest.raises(ValueError, match="max_depth"):
            Telemetry(max_depth=0)
        with pytest.raises(ValueError, match="max_content_chars"):
            Telemetry(max_content_chars=0)

    async def test_sampled_out_episode_does_no_call_span_work(self, tools: Toolset) -> None:
        """When the sampler drops the episode span, call spans are not even started."""
        from opentelemetry.sdk.trace.sampling import ALWAYS_OFF

        spans = InMemorySpanExporter()
        tp = TracerProvider(sampler=ALWAYS_OFF)
        tp.add_span_processor(SimpleSpanProcessor(spans))
        telemetry = Telemetry(tracer_provider=tp, metrics=False)
        monitor = Monitor(tools, observers=[telemetry])
        async with monitor.episode(task_id="t") as ep:
            assert telemetry.call_started(ep, "x", None, 1) is None
            await ep.call("search_contacts", {"name": "x"})
        assert spans.get_finished_spans() == ()


class TestTraceRatio:
    """``trace_ratio``: prefixmon's own head sampling of root episodes, decided before the SDK is asked."""

    @staticmethod
    async def _episodes(monitor: Monitor, n: int) -> None:
        for _ in range(n):
            async with monitor.episode(task_id="t") as ep:
                await ep.call("search_contacts", {"name": "x"})
                ep.finish("success")

    async def test_a_left_out_episode_asks_the_sdk_nothing_and_is_still_measured(self, otel: Otel, tools: Toolset) -> None:
        """At 0, no span is started at all (the SDK's sampler is not asked); every episode and call is counted."""
        asked: list[str] = []

        class Counting(Sampler):
            def should_sample(self, parent_context: Any, trace_id: int, name: str, *args: Any, **kw: Any) -> SamplingResult:
                asked.append(name)
                return ALWAYS_ON.should_sample(parent_context, trace_id, name, *args, **kw)

            def get_description(self) -> str:
                return "counting"

        provider = TracerProvider(sampler=Counting())
        provider.add_span_processor(SimpleSpanProcessor(otel.spans))
        telemetry = Telemetry(tracer_provider=provider, meter_provider=otel.meter_provider, trace_ratio=0.0)
        monitor = Monitor(tools, observers=[telemetry])
        await self._episodes(monitor, 3)
        assert asked == [] and otel.finished() == []
        await self._episodes(Monitor(tools, observers=[Telemetry(tracer_provider=provider, metrics=False)]), 1)
        assert asked == ["invoke_agent", "execute_tool search_contacts"]  # the same provider, traced: the sampler is asked
        otel.spans.clear()
        assert sum(otel.counts(sc.METRIC_EPISODES).values()) == 3
        assert sum(otel.counts(sc.METRIC_CALLS).values()) == 3
        assert telemetry._episodes == {} and telemetry._counts == {}

    async def test_a_share_of_root_episodes_is_traced(self, otel: Otel, tools: Toolset) -> None:
        """At 0.5, about half of 400 episodes have spans (each with its call span); at 1 (default) all do."""
        await self._episodes(Monitor(tools, observers=[otel.telemetry(trace_ratio=0.5)]), 400)
        traced = len(otel.episode_spans())
        assert 130 <= traced <= 270  # 400 draws at 0.5: 200 ± 10, so ± 7 sd
        assert len(otel.tool_spans()) == traced
        otel.spans.clear()
        await self._episodes(Monitor(tools, observers=[otel.telemetry()]), 5)
        assert len(otel.episode_spans()) == 5

    async def test_an_episode_inside_the_callers_trace_follows_it(self, otel: Otel, tools: Toolset) -> None:
        """Under a span of the application, the episode is traced whatever the ratio: its trace has no gap."""
        monitor = Monitor(tools, observers=[otel.telemetry(trace_ratio=0.0)])
        with otel.tracer_provider.get_tracer("app").start_as_current_span("request") as request:
            await self._episodes(monitor, 2)
        episodes = otel.episode_spans()
        assert len(episodes) == 2
        assert all(s.parent is not None and s.parent.span_id == request.get_span_context().span_id for s in episodes)
        assert len(otel.tool_spans()) == 2

    @pytest.mark.parametrize("ratio", [-0.1, 1.5, float("nan"), float("inf"), True, "0.5", None])
    def test_a_ratio_that_is_not_a_number_from_0_to_1_is_refused(self, ratio: Any) -> None:
        with pytest.raises(ValueError, match="trace_ratio must be a number from 0 to 1"):
            Telemetry(trace_ratio=ratio)

    @pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
    def test_forked_workers_draw_their_own_episodes(self) -> None:
        """Workers forked after the Telemetry was made do not sample the same episodes in step."""
        telemetry = Telemetry(trace_ratio=0.5)
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: its draws, then out
            os.write(write, json.dumps([telemetry._draw() for _ in range(5)]).encode())
            os._exit(0)
        os.close(write)
        os.waitpid(pid, 0)
        with os.fdopen(read) as f:
            child = json.loads(f.read())
        assert child != [telemetry._draw() for _ in range(5)]


class TestHotPathShape:
    """What the cheap per-call path keeps: final attributes, one event choice, per-episode counts, no open spans."""

    async def test_guardrail_events_non_pass(self, otel: Otel, tools: Toolset) -> None:
        """With non_pass, executable allowed calls carry the verdict as attributes only; every other call keeps its event."""
        await run_contacts(Monitor(tools, policy="block", observers=[otel.telemetry(guardrail_events="non_pass")]))
        spans = otel.tool_spans()
        assert [len(events(s, sc.GEN_AI_GUARDRAIL_RESULT)) for s in spans] == [0, 1, 0, 1]
        assert all(attrs(s)[sc.PREFIXMON_DECISION] == "allow" for s in (spans[0], spans[2]))
        assert events(spans[1], sc.GEN_AI_GUARDRAIL_RESULT)[0][sc.GEN_AI_GUARDRAIL_RESULT_VALUE] == "block"
        with pytest.raises(ValueError, match="guardrail_events"):
            Telemetry(guardrail_events="some")  # type: ignore[arg-type]

    async def test_non_pass_is_the_default(self, otel: Otel, tools: Toolset) -> None:
        """By default a plain pass carries its verdict as span attributes only; every other call has its event."""
        assert Telemetry().guardrail_events == "non_pass"
        await run_contacts(Monitor(tools, policy="block", observers=[otel.telemetry()]))
        assert [len(events(s, sc.GEN_AI_GUARDRAIL_RESULT)) for s in otel.tool_spans()] == [0, 1, 0, 1]

    async def test_call_counts_are_added_when_the_episode_ends(self, otel: Otel, tools: Toolset) -> None:
        """prefixmon.calls and interventions are summed per episode and added at its end; internal errors at once."""

        def broken(state: TrackedState, args: Any) -> bool:
            raise RuntimeError("precondition bug")

        tools.tool(requires=[broken], name="fragile")(lambda: "ok")
        monitor = Monitor(tools, policy="block", observers=[otel.telemetry()])
        ep = monitor.open_episode("t")
        for _ in range(3):
            await ep.call("search_contacts", {})
        with pytest.raises(ToolBlocked):
            await ep.call("remove_contact", {"person_id": "zz"})
        await ep.call("fragile", {})
        assert otel.counts(sc.METRIC_CALLS) == {}
        assert sum(otel.counts(sc.METRIC_INTERNAL_ERRORS).values()) == 1
        await ep.aclose()
        calls = otel.counts(sc.METRIC_CALLS)
        ok = frozenset({(sc.PREFIXMON_EXECUTABLE, True), (sc.PREFIXMON_DECISION, "allow")})
        assert calls[ok] == 4 and sum(calls.values()) == 5
        assert sum(otel.counts(sc.METRIC_INTERVENTIONS).values()) == 1

    async def test_attributes_set_after_the_call_ran(self, otel: Otel, tools: Toolset) -> None:
        """A rejection, a plan step and a turn change after the call was let through all reach the span."""
        plan = [{"tool": "search_contacts", "args": {}}, {"tool": "lookup_order", "args": {"order_id": "#W2"}}]
        monitor = Monitor(tools, observers=[otel.telemetry()])
        async with monitor.episode(task_id="t", plan=PlanFollower(plan, monitor.toolset)) as ep:
            await ep.call("search_contacts", {})
            pending = await ep.begin("lookup_order", {"order_id": "#W2"})
            ep.next_turn()
            pending.done(await pending.run())
        first, second = (attrs(s) for s in otel.tool_spans())
        assert first[sc.PREFIXMON_PLAN_STEP] == 1 and first[sc.PREFIXMON_EXECUTABLE] is True
        assert second[sc.PREFIXMON_EXECUTABLE] is False
        assert second[sc.ERROR_TYPE] == "prefixmon.state_consistency"
        assert second[sc.PREFIXMON_FED] == 2 and second[sc.PREFIXMON_TURN] == 1
        assert second[sc.PREFIXMON_PLAN_STEP] == 2

    async def test_a_raising_redactor_leaves_no_span_open(self, otel: Otel, tools: Toolset) -> None:
        """Content capture whose hook raises on every value: each call still ends its span with the verdict."""

        def broken(kind: str, value: Any) -> Any:
            raise RuntimeError("redactor bug")

        telemetry = otel.telemetry(capture_content=True, redact=broken, guardrail_events="all")
        ep = await run_contacts(Monitor(tools, policy="block", observers=[telemetry]))
        spans = otel.tool_spans()
        assert len(spans) == 4 and all(s.end_time is not None for s in spans)
        assert [attrs(s)[sc.PREFIXMON_DECISION] for s in spans] == ["allow", "block", "allow", "block"]
        assert all(len(events(s, sc.GEN_AI_GUARDRAIL_RESULT)) == 1 for s in spans)
        assert ep.internal_errors >= 4
        assert not any(k in attrs(s) for s in spans for k in (sc.GEN_AI_TOOL_CALL_ARGUMENTS, sc.PREFIXMON_REASON))

    async def test_an_untraced_episode_takes_no_per_call_hook(self, otel: Otel, tools: Toolset) -> None:
        """A sampled-out episode (or one without an SDK) makes no span and skips every per-call hook; metrics stay whole."""
        sampled_out = TracerProvider(sampler=ALWAYS_OFF)
        sampled_out.add_span_processor(SimpleSpanProcessor(otel.spans))
        for provider in (sampled_out, trace.NoOpTracerProvider()):
            for meters, hooks in ((otel.meter_provider, {"episode_finished"}), (NoOpMeterProvider(), set())):
                telemetry = Telemetry(tracer_provider=provider, meter_provider=meters)
                ep = Monitor(tools).open_episode("t")
                said = telemetry.episode_started(ep)
                assert said == telemetry.episode_hooks(ep) == hooks  # measured only, or nothing at all
                telemetry.episode_finished(ep, await ep.aclose())
        traced = otel.telemetry()
        ep = Monitor(tools).open_episode("t")
        said = traced.episode_started(ep)
        assert said == traced.episode_hooks(ep) == traced.call_hooks() | {"episode_context", "episode_finished"}
        await ep.aclose()
        assert otel.tool_spans() == []

    async def test_untraced_episodes_count_calls_from_their_record(self, otel: Otel, tools: Toolset) -> None:
        """prefixmon.calls and interventions of sampled-out episodes equal those of traced ones, call for call."""
        await run_contacts(Monitor(tools, policy="block", observers=[otel.telemetry()]))
        traced = otel.counts(sc.METRIC_CALLS), otel.counts(sc.METRIC_INTERVENTIONS), otel.counts(sc.METRIC_EPISODES)
        assert sum(traced[0].values()) == 4 and sum(traced[1].values()) == 2
        reader = InMemoryMetricReader()
        mp = MeterProvider(metric_readers=[reader])
        untraced = Telemetry(tracer_provider=TracerProvider(sampler=ALWAYS_OFF), meter_provider=mp)
        await run_contacts(Monitor(build_contacts()[0], policy="block", observers=[untraced]))  # a fresh contact book
        again = Otel(spans=otel.spans, reader=reader, tracer_provider=otel.tracer_provider, meter_provider=mp)
        assert (again.counts(sc.METRIC_CALLS), again.counts(sc.METRIC_INTERVENTIONS), again.counts(sc.METRIC_EPISODES)) == traced
        mp.shutdown()

    async def test_an_episode_without_calls_counts_no_call(self, otel: Otel, tools: Toolset) -> None:
        """The no-tool slot of an episode without calls is not a call: no prefixmon.calls point, one episode."""
        untraced = Telemetry(tracer_provider=TracerProvider(sampler=ALWAYS_OFF), meter_provider=otel.meter_provider)
        async with Monitor(tools, observers=[untraced]).episode(task_id="t"):
            pass
        assert otel.counts(sc.METRIC_CALLS) == {} and sum(otel.counts(sc.METRIC_EPISODES).values()) == 1

    async def test_framework_runs_the_tool(self, otel: Otel, tools: Toolset) -> None:
        """begin/done without run(): the span starts when the call is emitted and ends when it is reported."""
        monitor = Monitor(tools, observers=[otel.telemetry()])
        ep = monitor.open_episode("t")
        pending = await ep.begin("set_cellular", {"on": True}, call_id="c1")
        await anyio.sleep(0.01)
        pending.done({"cellular": True})
        await ep.aclose()
        (span,) = otel.tool_spans()
        assert span.start_time is not None and span.end_time is not None
        assert span.end_time - span.start_time >= 10_000_000
        a = attrs(span)
        assert a[sc.GEN_AI_TOOL_CALL_ID] == "c1" and a[sc.PREFIXMON_EXECUTABLE] is True and a[sc.PREFIXMON_TURN] == 0


_LATE_SDK = """
import time, anyio
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prefixmon import Monitor, Telemetry, Toolset

tools = Toolset()

@tools.tool
async def ping(n: int) -> int:
    "Echo."
    return n

monitor = Monitor(tools, observers=[Telemetry()])  # made before any SDK is configured

async def episode(task):
    async with monitor.episode(task_id=task) as ep:
        await ep.call("ping", {"n": 1})

anyio.run(episode, "before")
spans = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(spans))
trace.set_tracer_provider(provider)
reader = InMemoryMetricReader()
metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
time.sleep(0.25)  # past the recheck interval
anyio.run(episode, "after")
tasks = sorted({s.attributes.get("prefixmon.task.id") for s in spans.get_finished_spans()} - {None})
calls = [m for rm in reader.get_metrics_data().resource_metrics for sm in rm.scope_metrics
         for m in sm.metrics if m.name == "prefixmon.calls"]
print(tasks, sum(p.value for m in calls for p in m.data.data_points))
"""


def test_sdk_configured_after_the_monitor_is_used() -> None:
    """Global SDK providers set after ``Telemetry()`` was made trace and measure the next episodes (not earlier ones)."""
    done = subprocess.run([sys.executable, "-c", _LATE_SDK], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["['after']", "1"]
