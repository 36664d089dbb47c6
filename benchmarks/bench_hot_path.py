"""Hot-path benchmark of the runtime monitor (issue 8). Not part of pytest.

Run:  .venv/bin/python benchmarks/bench_hot_path.py [--calls 60000] [--quick] [--markdown FILE]

Every number is measured in this run, and every ratio compares two measurements taken
interleaved in the same process (rounds alternate between the two sides), so machine load
shifts both sides alike. Per-call times are taken with ``time.perf_counter_ns`` around each
single ``await``; the garbage collector is frozen after setup, disabled inside each timed
chunk and run between chunks (so a collection pause lands on neither side).

1. Overhead per checked call, telemetry off: ``await episode.call(name, args)`` against a
   bare ``await tool(**args)``, for a tool with no rules, for a tool with a reference, a
   precondition, a grounded argument and a produced reference, and for raw JSON arguments
   (bare side: ``await tool(**json.loads(text))``). Target: overhead <= 5 us at p50.
2. OpenTelemetry SDK on (BatchSpanProcessor into an exporter that drops spans, metrics to an
   in-memory reader): the monitor's total cost (checks, spans, events, metrics; guardrail
   events on non-passes, the default) against a bare ``execute_tool`` span with the same
   attributes (the GenAI ones, tool type and description included) and no checks.
   Target: <= 1.5x. Also: with ``guardrail_events="all"``, and the floors: the checks inside
   the cheapest span, and an observer that does only the span work (start it with the same
   attributes, make it current around the tool, end it) inside the monitor's call path.
3. Check cost against state size: 100,000 facts, 100,000 reference bindings and 100,000
   pooled values against 10 of each. Target: median ratio <= 1.2.
4. Throughput, telemetry off, one process: episodes of 20 calls one after another (records
   built; with and without a JSON Lines sink), and 1,000 concurrent episodes x 20 calls
   (the agent yields to the event loop between calls). Target: >= 50,000 checked calls/s.
5. A grounded argument (``episode.check``, interleaved): a value seen as it is, under the
   default ``normalized`` matching against ``exact`` (the lookup as it was before
   normalisation existed). Target: <= 1.1x. Also, in microseconds: a value seen only in
   another form (an id without its ``#``, a date written out), an amount derived from two of
   256 recent numbers (pair found last, and no pair at all), and a miss.

Sections 6 to 9 (issue 17) keep the garbage collector on (frozen after setup) and compare
medians of chunk means over interleaved rounds:

6. Short episodes, telemetry off, against a pydantic ``TypeAdapter`` validation of the same
   arguments (the tool's argument model): a checked call's overhead (target <= 6x), a
   5-call episode's overhead from open to close (<= 45x; open + close about 3 calls or
   less), and a 5-call episode with 500 declared tools against 4 (<= 1.05x).
7. ``Telemetry()`` with no SDK configured and with a sampled-out trace against no
   telemetry, per call and per 5-call episode (<= 1.05x), with the per-episode floors: the
   API's provider getters, and the SDK's sampling of the dropped episode span; and an
   episode left out by ``Telemetry(trace_ratio=...)``, prefixmon's own head sampling, with
   an SDK that would trace everything.
8. A checked call right after unrelated work (a JSON round trip of about 300 kB and a walk
   over a 4 MiB buffer) against the hot loop (<= 3x); a bare ``await`` for comparison.
9. LangChain's ``MonitorMiddleware``: a sync agent's ``wrap_tool_call`` against an async
   agent's ``awrap_tool_call``, overhead over the tool handler (<= 2x); ``anyio.run`` per
   call (what the sync path paid before) for comparison.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Final

import anyio
import anyio.to_thread
from opentelemetry import context as otel_context
from opentelemetry import metrics as otel_metrics
from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF
from opentelemetry.trace import Span, SpanKind, Tracer
from opentelemetry.util.types import AttributeValue
from pydantic import ConfigDict, TypeAdapter, create_model

from prefixmon import Decision, Episode, Grounded, Monitor, Observer, Ref, Toolset, TrackedState, Verdict, read_records
from prefixmon import semconv as sc
from prefixmon.telemetry import Telemetry

OVERHEAD_TARGET_US: Final = 5.0
OTEL_RATIO_TARGET: Final = 1.5
STATE_RATIO_TARGET: Final = 1.2
GROUNDED_RATIO_TARGET: Final = 1.1
THROUGHPUT_TARGET: Final = 50_000
CHUNK: Final = 500
"""Calls per timed chunk (one episode per chunk)."""


# -- the tool layer --------------------------------------------------------------------------
def in_stock(state: TrackedState, args: Any) -> bool:
    """the item is out of stock"""
    return bool(state.facts.get("in_stock", True))


def build_tools() -> Toolset:
    """A shop: a plain tool, a producing search, and an order tool with every kind of rule."""
    tools = Toolset()

    @tools.tool
    async def ping(n: int) -> int:
        """No rules: schema only."""
        return n

    @tools.tool(produces="item_id")
    async def find_item(name: str) -> dict[str, Any]:
        """Search; the ids in the result become references."""
        return {"item_id": "i-1", "name": name, "price": 12.5}

    @tools.tool(requires=[in_stock], produces="order_id", grounded=["quantity"])
    async def order(item_id: Annotated[str, Ref("item_id")], quantity: int, note: str = "") -> dict[str, Any]:
        """Reference + precondition + grounded argument + produced reference."""
        return {"order_id": "o-1", "status": "placed"}

    @tools.tool
    async def ping_yield(n: int) -> int:
        """Yields to the event loop once, like a tool doing I/O."""
        await anyio.sleep(0)
        return n

    return tools


ORDER_ARGS: Final = {"item_id": "i-1", "quantity": 2}
PING_ARGS: Final = {"n": 7}


async def prime(ep: Episode) -> None:
    """Bind the item id and make the quantity available information."""
    ep.user("please order 2 of the blue mug")
    await ep.call("find_item", {"name": "blue mug"})


# -- statistics ------------------------------------------------------------------------------
def pct(samples: Sequence[int], q: float) -> float:
    """The q-th percentile (nearest rank) of nanosecond samples, in microseconds."""
    s = sorted(samples)
    return s[min(len(s) - 1, int(q / 100 * len(s)))] / 1000


@dataclass
class Row:
    """One line of the result table."""

    name: str
    value: str
    target: str
    ok: bool | None
    detail: str = ""


ROWS: list[Row] = []


def add(name: str, value: str, target: str = "", ok: bool | None = None, detail: str = "") -> None:
    ROWS.append(Row(name, value, target, ok, detail))
    mark = "" if ok is None else ("  ok" if ok else "  MISSED")
    print(f"  {name:<58} {value:>16} {target:>10}{mark}   {detail}", flush=True)


class timed_chunk:
    """Disable GC inside a timed chunk; collect outside it."""

    def __enter__(self) -> None:
        gc.collect()
        gc.disable()

    def __exit__(self, *exc: object) -> None:
        gc.enable()


# -- 1. overhead, telemetry off --------------------------------------------------------------
async def overhead(tools: Toolset, calls: int) -> None:
    print("\n1. overhead per checked call, telemetry off (per-call perf_counter_ns)")
    monitor = Monitor(tools, policy="block")
    pc = time.perf_counter_ns
    rounds = max(1, calls // CHUNK)

    async def scenario(label: str, name: str, args: dict[str, Any], as_json: bool) -> None:
        func = tools[name].func
        assert func is not None
        text = json.dumps(args)
        bare: list[int] = []
        checked: list[int] = []
        open_close: list[int] = []
        for _ in range(rounds):
            with timed_chunk():
                if as_json:
                    for _ in range(CHUNK):
                        t0 = pc()
                        await func(**json.loads(text))
                        bare.append(pc() - t0)
                else:
                    for _ in range(CHUNK):
                        t0 = pc()
                        await func(**args)
                        bare.append(pc() - t0)
            with timed_chunk():
                t0 = pc()
                async with monitor.episode(task_id="bench") as ep:
                    await prime(ep)
                    open_close.append(pc() - t0)
                    raw: Any = text if as_json else args
                    for _ in range(CHUNK):
                        t0 = pc()
                        await ep.call(name, raw)
                        checked.append(pc() - t0)
                    t0 = pc()
                open_close[-1] += pc() - t0
                assert ep.record is not None and ep.record.executable and ep.record.horizon == CHUNK + 1
        b50, c50, b99, c99 = pct(bare, 50), pct(checked, 50), pct(bare, 99), pct(checked, 99)
        over50, over99 = c50 - b50, c99 - b99
        add(
            f"overhead p50, {label}",
            f"{over50:.2f} us",
            f"<= {OVERHEAD_TARGET_US:g} us",
            over50 <= OVERHEAD_TARGET_US,
            f"bare {b50:.2f} us, checked {c50:.2f} us",
        )
        add(f"overhead p99, {label}", f"{over99:.2f} us", "", None, f"bare {b99:.2f} us, checked {c99:.2f} us")
        per = statistics.median(open_close) / 1000
        add(
            f"episode open + close ({CHUNK + 1}-call record), {label}",
            f"{per:.0f} us",
            "",
            None,
            f"{per / (CHUNK + 1):.2f} us per call",
        )

    await scenario("no rules (ping)", "ping", PING_ARGS, False)
    await scenario("every rule (order)", "order", ORDER_ARGS, False)
    await scenario("every rule, JSON text args", "order", ORDER_ARGS, True)


# -- 2. OpenTelemetry SDK on -----------------------------------------------------------------
class DropExporter(SpanExporter):
    """Counts spans and drops them."""

    def __init__(self) -> None:
        self.count = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.count += len(spans)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


ORDER_DESCRIPTION: Final = "Reference + precondition + grounded argument + produced reference."
START_ATTRS: Final[dict[str, AttributeValue]] = {  # what the monitor's span of `order` starts with (GenAI conventions)
    sc.GEN_AI_OPERATION_NAME: sc.EXECUTE_TOOL,
    sc.GEN_AI_TOOL_NAME: "order",
    sc.GEN_AI_TOOL_TYPE: sc.TOOL_TYPE_FUNCTION,
    sc.GEN_AI_TOOL_DESCRIPTION: ORDER_DESCRIPTION,
    sc.PREFIXMON_EPISODE_ID: "bench",
}
END_ATTRS: Final[dict[str, AttributeValue]] = {
    sc.PREFIXMON_EXECUTABLE: True,
    sc.PREFIXMON_DECISION: "allow",
    sc.PREFIXMON_REACHED_ENVIRONMENT: True,
    sc.PREFIXMON_TURN: 0,
}
GUARDRAIL_EVENT: Final[dict[str, AttributeValue]] = {
    sc.GEN_AI_GUARDRAIL_COMPONENT_NAME: sc.GUARDRAIL_COMPONENT,
    sc.GEN_AI_GUARDRAIL_SOURCE: sc.GUARDRAIL_SOURCE_TOOL_INPUT,
    sc.GEN_AI_GUARDRAIL_RESULT_TYPE: "pass",
    sc.GEN_AI_GUARDRAIL_RESULT_VALUE: True,
    sc.GEN_AI_GUARDRAIL_RESULT_REASON: "executable",
}


class _SpanOnly:
    """Token of :class:`SpanWorkOnly`: the span, and the context manager that makes it current."""

    __slots__ = ("depth", "detach", "span")

    def __init__(self, depth: int) -> None:
        self.depth = depth
        self.span: Span | None = None
        self.detach: object = None

    def __enter__(self) -> None:
        assert self.span is not None
        self.detach = otel_context.attach(trace.set_span_in_context(self.span))

    def __exit__(self, *exc: object) -> None:
        otel_context.detach(self.detach)  # type: ignore[arg-type]


class SpanWorkOnly(Observer):
    """The floor: only the SDK work of a call span, through the monitor's observer hooks.

    Keeps an episode span current (so call spans are children, as the baseline's are),
    starts each call span with the baseline's attributes once the call is let through, makes
    it current while the tool runs and ends it when the call is recorded; no episode state
    lookups, no verdict attributes, no events, no metrics.
    """

    def __init__(self, tracer: Tracer) -> None:
        self.tracer = tracer
        self.episodes: dict[int, Span] = {}

    def episode_started(self, episode: Episode) -> None:
        self.episodes[id(episode)] = self.tracer.start_span(sc.INVOKE_AGENT, kind=SpanKind.INTERNAL)

    def episode_context(self, episode: Episode) -> Any:
        return trace.use_span(self.episodes[id(episode)], end_on_exit=False)

    def episode_finished(self, episode: Episode, record: Any) -> None:
        self.episodes.pop(id(episode)).end()

    def call_started(self, episode: Episode, tool: str, call_id: str | None, depth: int) -> _SpanOnly:
        return _SpanOnly(depth)

    def call_checked(self, episode: Episode, verdict: Verdict, decision: Decision, token: Any) -> None:
        token.span = self.tracer.start_span(
            f"{sc.EXECUTE_TOOL} {verdict.tool}",
            kind=SpanKind.INTERNAL,
            attributes={**START_ATTRS, sc.PREFIXMON_DEPTH: token.depth, **END_ATTRS},
        )

    def execution_context(self, episode: Episode, call: Any, token: Any) -> _SpanOnly:
        return token  # type: ignore[no-any-return]

    def call_finished(self, episode: Episode, action: Any, verdict: Verdict, token: Any) -> None:
        token.span.end()


async def with_otel(tools: Toolset, calls: int) -> None:
    print("\n2. OpenTelemetry SDK on (BatchSpanProcessor -> dropping exporter; in-memory metric reader)")
    exporter = DropExporter()
    tp = TracerProvider()
    tp.add_span_processor(BatchSpanProcessor(exporter, max_queue_size=1 << 16))
    reader = InMemoryMetricReader()
    mp = MeterProvider(metric_readers=[reader])
    tracer = tp.get_tracer("bench")
    monitors = {
        "monitor": Monitor(tools, policy="block", observers=[Telemetry(tracer_provider=tp, meter_provider=mp)]),
        "monitor, no metrics": Monitor(
            tools, policy="block", observers=[Telemetry(tracer_provider=tp, meter_provider=mp, metrics=False)]
        ),
        "monitor, every event": Monitor(
            tools,
            policy="block",
            observers=[Telemetry(tracer_provider=tp, meter_provider=mp, guardrail_events="all")],
        ),
        "span work only": Monitor(tools, policy="block", observers=[SpanWorkOnly(tracer)]),
        "checks only": Monitor(tools, policy="block"),
    }
    pc = time.perf_counter_ns
    rounds = max(1, calls // CHUNK)
    func = tools["order"].func
    assert func is not None
    args = ORDER_ARGS
    t: dict[str, list[int]] = {k: [] for k in ("bare", "span", "span + event", *monitors)}

    async def bare_spans(event: bool) -> None:
        # What a GenAI-instrumented agent pays anyway: an execute_tool span with the monitor's
        # attributes (start and end), current while the tool runs, under an agent span.
        samples = t["span + event" if event else "span"]
        with tracer.start_as_current_span(sc.INVOKE_AGENT, kind=SpanKind.INTERNAL):
            for depth in range(2, CHUNK + 2):
                t0 = pc()
                with tracer.start_as_current_span(
                    f"{sc.EXECUTE_TOOL} order", kind=SpanKind.INTERNAL, attributes={**START_ATTRS, sc.PREFIXMON_DEPTH: depth}
                ) as span:
                    await func(**args)
                    span.set_attributes(END_ATTRS)
                    if event:
                        span.add_event(sc.GEN_AI_GUARDRAIL_RESULT, GUARDRAIL_EVENT)
                samples.append(pc() - t0)

    checks_only = monitors["checks only"]
    t["floor"], t["floor + event"], t["cheapest span"] = [], [], []

    def start_cheapest(depth: int) -> tuple[Span, object]:
        """The call span made the cheapest way: one start_span with every attribute, made current."""
        span = tracer.start_span(
            f"{sc.EXECUTE_TOOL} order", kind=SpanKind.INTERNAL, attributes={**START_ATTRS, sc.PREFIXMON_DEPTH: depth, **END_ATTRS}
        )
        return span, otel_context.attach(trace.set_span_in_context(span))

    async def cheapest_spans() -> None:
        # The same span made the cheapest way: one start_span with every attribute, current
        # around the tool (attach/detach, no use_span generator), then end.
        with tracer.start_as_current_span(sc.INVOKE_AGENT, kind=SpanKind.INTERNAL):
            for depth in range(2, CHUNK + 2):
                t0 = pc()
                span, token = start_cheapest(depth)
                await func(**args)
                otel_context.detach(token)  # type: ignore[arg-type]
                span.end()
                t["cheapest span"].append(pc() - t0)

    async def floor(r: int, event: bool) -> None:
        # The least any checking monitor can cost with these spans: the checks (telemetry off)
        # inside the cheapest span with the same attributes (one start_span with all of them,
        # current while the call runs), plus the guardrail event if asked; no observer hooks,
        # no telemetry logic.
        samples = t["floor + event" if event else "floor"]
        with tracer.start_as_current_span(sc.INVOKE_AGENT, kind=SpanKind.INTERNAL):
            async with checks_only.episode(task_id=f"floor-{r}") as ep:
                await prime(ep)
                for depth in range(2, CHUNK + 2):
                    t0 = pc()
                    span, token = start_cheapest(depth)
                    await ep.call("order", args)
                    otel_context.detach(token)  # type: ignore[arg-type]
                    if event:
                        span.add_event(sc.GEN_AI_GUARDRAIL_RESULT, GUARDRAIL_EVENT)
                    span.end()
                    samples.append(pc() - t0)

    for r in range(rounds):
        with timed_chunk():
            for _ in range(CHUNK):
                t0 = pc()
                await func(**args)
                t["bare"].append(pc() - t0)
        for event in (False, True):
            with timed_chunk():
                await bare_spans(event)
            with timed_chunk():
                await floor(r, event)
        with timed_chunk():
            await cheapest_spans()
        for label, monitor in monitors.items():
            with timed_chunk():
                async with monitor.episode(task_id=f"otel-{r}") as ep:
                    await prime(ep)
                    for _ in range(CHUNK):
                        t0 = pc()
                        await ep.call("order", args)
                        t[label].append(pc() - t0)
    tp.force_flush()
    # per round: 5 x (chunk + agent span), 4 x (chunk + prime call + episode span)
    expected = rounds * (5 * (CHUNK + 1) + 4 * (CHUNK + 2))
    cost50 = {k: pct(v, 50) - pct(t["bare"], 50) for k, v in t.items()}
    cost99 = {k: pct(v, 99) - pct(t["bare"], 99) for k, v in t.items()}
    ratio50 = cost50["monitor"] / cost50["span"]
    add(
        "monitor total (default: guardrail events on non-passes) / bare execute_tool span (same attributes), p50",
        f"{ratio50:.2f}x",
        f"<= {OTEL_RATIO_TARGET:g}x",
        ratio50 <= OTEL_RATIO_TARGET,
        f"span {cost50['span']:.1f} us, monitor {cost50['monitor']:.1f} us",
    )
    add(
        "monitor total / bare execute_tool span (same attributes), p99",
        f"{cost99['monitor'] / cost99['span']:.2f}x",
        "",
        None,
        f"span {cost99['span']:.1f} us, monitor {cost99['monitor']:.1f} us",
    )
    add(
        'monitor with guardrail_events="all" / same span and guardrail event, p50',
        f"{cost50['monitor, every event'] / cost50['span + event']:.2f}x",
        "",
        None,
        f"monitor {cost50['monitor, every event']:.1f} us, span + event {cost50['span + event']:.1f} us",
    )
    add(
        'monitor with guardrail_events="all" / bare span, p50',
        f"{cost50['monitor, every event'] / cost50['span']:.2f}x",
        "",
        None,
        f"the per-call pass event costs {cost50['monitor, every event'] - cost50['monitor']:.1f} us more",
    )
    add(
        "span work only, through the observer hooks / bare span, p50",
        f"{cost50['span work only'] / cost50['span']:.2f}x",
        "",
        None,
        f"{cost50['span work only']:.1f} us: checks + the same SDK calls, no telemetry logic",
    )
    for key, what in (("floor", "no event"), ("floor + event", "with the guardrail event")):
        add(
            f"floor: checks inside the cheapest span, {what} / bare span, p50",
            f"{cost50[key] / cost50['span']:.2f}x",
            "",
            None,
            f"{cost50[key]:.1f} us: checks (telemetry off) inside the cheapest span; no observer",
        )
    add(
        "monitor total / floor (no event), p50",
        f"{cost50['monitor'] / cost50['floor']:.2f}x",
        "",
        None,
        "what the observer machinery and telemetry logic add on top of the floor",
    )
    add(
        "  the cheapest span alone (start_span with every attribute, current, end)",
        f"{cost50['cheapest span']:.1f} us",
        "",
        None,
        f"{cost50['cheapest span'] / cost50['span']:.2f}x the bare span",
    )
    slowdown = cost50["floor"] - cost50["cheapest span"] - cost50["checks only"]
    add(
        "  interleaving slowdown (floor - cheapest span - checks)",
        f"{slowdown:.1f} us",
        "",
        None,
        "the SDK's calls and the checks run slower interleaved than each alone",
    )
    add("  of which: checks and bookkeeping (telemetry off)", f"{cost50['checks only']:.1f} us")
    add("  of which: the guardrail event (span + event - span)", f"{cost50['span + event'] - cost50['span']:.1f} us")
    add(
        "  of which: per-call metrics (monitor - monitor without metrics)",
        f"{cost50['monitor'] - cost50['monitor, no metrics']:.1f} us",
    )
    add(
        "  of which: telemetry logic (monitor - span work only)",
        f"{cost50['monitor'] - cost50['span work only']:.1f} us",
    )
    add(
        "spans exported (every one reached the exporter)",
        f"{exporter.count:,}",
        "",
        exporter.count == expected,
        f"expected {expected:,}",
    )
    tp.shutdown()
    mp.shutdown()


# -- 3. state size ---------------------------------------------------------------------------
async def state_size(tools: Toolset, calls: int) -> None:
    print("\n3. check cost against state size (interleaved rounds)")
    monitor = Monitor(tools, policy="block")
    pc = time.perf_counter_ns
    rounds = max(1, calls // CHUNK)
    big_n = 100_000

    async def episode_of(n: int) -> Episode:
        ep = monitor.open_episode(task_id=f"state-{n}", facts={f"fact-{i}": i for i in range(n)})
        for i in range(n):
            ep.state.bind("item_id" if i % 2 else "order_id", f"id-{i}", tool="find_item")
        ep.state.ingest([{"sku": f"sku-{i}", "stock": i} for i in range(n)])
        await prime(ep)
        return ep

    small, big = await episode_of(10), await episode_of(big_n)
    assert big.state.binding_count >= big_n and len(big.state.facts) == big_n
    check_t: dict[int, list[int]] = {10: [], big_n: []}
    call_t: dict[int, list[int]] = {10: [], big_n: []}
    args = ORDER_ARGS
    for _ in range(rounds):
        for ep, n in ((small, 10), (big, big_n)):
            with timed_chunk():
                for _ in range(CHUNK):
                    t0 = pc()
                    v = ep.check("order", args)
                    check_t[n].append(pc() - t0)
                assert v.executable
                for _ in range(CHUNK):
                    t0 = pc()
                    await ep.call("order", args)
                    call_t[n].append(pc() - t0)
    for ep in (small, big):
        rec = await ep.aclose()
        assert rec.executable
    for label, t in (("pure check (episode.check)", check_t), ("checked call (episode.call)", call_t)):
        m_small, m_big = pct(t[10], 50), pct(t[big_n], 50)
        ratio = m_big / m_small
        add(
            f"{label}: 100,000 vs 10 facts/bindings, p50",
            f"{ratio:.2f}x",
            f"<= {STATE_RATIO_TARGET:g}x",
            ratio <= STATE_RATIO_TARGET,
            f"{m_small:.2f} us vs {m_big:.2f} us",
        )


# -- 4. throughput ---------------------------------------------------------------------------
CALLS_PER_EPISODE: Final = 20


async def agent(monitor: Monitor, i: int, tool: str, yield_between: bool) -> None:
    """One episode of 20 calls: a search, then orders and pings."""
    async with monitor.episode(task_id=f"t-{i}", labels={"model": "bench", "method": "react"}) as ep:
        await prime(ep)
        for k in range(CALLS_PER_EPISODE - 1):
            if yield_between:
                await anyio.sleep(0)
            if k % 2:
                await ep.call("order", ORDER_ARGS)
            else:
                await ep.call(tool, PING_ARGS)
        ep.finish("success")


async def bare_agent(tools: Toolset, tool: str, yield_between: bool) -> None:
    """The same 20 calls without a monitor."""
    find, order, ping = tools["find_item"].func, tools["order"].func, tools[tool].func
    assert find is not None and order is not None and ping is not None
    await find(name="blue mug")
    for k in range(CALLS_PER_EPISODE - 1):
        if yield_between:
            await anyio.sleep(0)
        if k % 2:
            await order(**ORDER_ARGS)
        else:
            await ping(**PING_ARGS)


async def throughput(tools: Toolset, episodes: int) -> None:
    print("\n4. throughput, telemetry off, one process (GC on)")
    calls = episodes * CALLS_PER_EPISODE

    async def sequential(monitor: Monitor | None) -> float:
        t0 = time.perf_counter()
        for i in range(episodes):
            if monitor is None:
                await bare_agent(tools, "ping", False)
            else:
                await agent(monitor, i, "ping", False)
        return calls / (time.perf_counter() - t0)

    bare_rate = await sequential(None)
    rate = await sequential(Monitor(tools, policy="block"))
    add(
        f"sequential episodes x {CALLS_PER_EPISODE} calls, records built, no sink",
        f"{rate:,.0f}/s",
        f">= {THROUGHPUT_TARGET:,}",
        rate >= THROUGHPUT_TARGET,
        f"bare tools {bare_rate:,.0f}/s",
    )
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "records.jsonl")
        rate_sink = await sequential(Monitor(tools, policy="block", sink=path))
        n = len(read_records(path))
        add(
            f"sequential episodes x {CALLS_PER_EPISODE} calls, JSON Lines sink",
            f"{rate_sink:,.0f}/s",
            f">= {THROUGHPUT_TARGET:,}",
            rate_sink >= THROUGHPUT_TARGET and n == episodes,
            f"{n:,} records written and read back",
        )

    async def concurrent(monitor: Monitor | None, n_eps: int) -> float:
        t0 = time.perf_counter()
        async with anyio.create_task_group() as tg:
            for i in range(n_eps):
                if monitor is None:
                    tg.start_soon(bare_agent, tools, "ping_yield", True)
                else:
                    tg.start_soon(agent, monitor, i, "ping_yield", True)
        return n_eps * CALLS_PER_EPISODE / (time.perf_counter() - t0)

    records: list[Any] = []

    async def keep(record: Any) -> None:
        records.append(record)

    bare_c = await concurrent(None, 1000)
    rate_c = await concurrent(Monitor(tools, policy="block", sink=keep), 1000)
    complete = len(records) == 1000 and all(r.horizon == CALLS_PER_EPISODE and r.executable for r in records)
    add(
        f"1,000 concurrent episodes x {CALLS_PER_EPISODE} calls (yielding tools)",
        f"{rate_c:,.0f}/s",
        f">= {THROUGHPUT_TARGET:,}",
        rate_c >= THROUGHPUT_TARGET and complete,
        f"bare {bare_c:,.0f}/s; {len(records):,} complete records",
    )


# -- 5. grounded arguments -------------------------------------------------------------------
def grounding_tools() -> Toolset:
    """``note_<match>(text)``: one grounded argument per matching mode."""
    tools = Toolset()
    for match in ("exact", "normalized", "derived"):
        tools.add_schema(f"note_{match}", {"type": "object", "properties": {"text": {}}}, grounded={"text": Grounded(match)})
    return tools


async def grounded(calls: int) -> None:
    print("\n5. a grounded argument: episode.check, interleaved (per-call perf_counter_ns)")
    monitor = Monitor(grounding_tools(), policy="block")
    pc = time.perf_counter_ns
    rounds = max(1, calls // CHUNK)
    ep = monitor.open_episode(task_id="grounded")
    ep.user("please send 2 of the blue mug, order #W123, on May 1st, 2024")
    ep.state.ingest({"name": "blue mug", "prices": [19.99, 30.01]})  # the pair a derived amount needs, oldest
    ep.state.ingest({"filler": [1_000_003 + 7 * i for i in range(254)]})  # 256 recent numbers in all
    cases: dict[str, tuple[str, Any]] = {
        "seen as is, exact": ("note_exact", "blue mug"),
        "seen as is, normalized": ("note_normalized", "blue mug"),
        "int in the user's words, exact": ("note_exact", 2),
        "int in the user's words, normalized": ("note_normalized", 2),
        "id without its '#'": ("note_normalized", "W123"),
        "date written out": ("note_normalized", "2024-05-01"),
        "derived (pair found last of 256)": ("note_derived", 50),
        "not derivable (all 256 tried)": ("note_derived", 51.5),
        "miss, exact": ("note_exact", "green cup"),
        "miss, normalized": ("note_normalized", "green cup"),
    }
    expect = {name: (name.startswith(("seen", "int", "id", "date", "derived"))) for name in cases}
    t: dict[str, list[int]] = {name: [] for name in cases}
    for _ in range(rounds):
        for name, (tool, value) in cases.items():
            args = {"text": value}
            samples = t[name]
            with timed_chunk():
                for _ in range(CHUNK):
                    t0 = pc()
                    v = ep.check(tool, args)
                    samples.append(pc() - t0)
            assert v.executable is expect[name], (name, v)
    await ep.aclose()
    for kind in ("seen as is", "int in the user's words"):
        exact, normalized = pct(t[f"{kind}, exact"], 50), pct(t[f"{kind}, normalized"], 50)
        ratio = normalized / exact
        add(
            f"grounded value {kind}: normalized / exact matching, p50",
            f"{ratio:.2f}x",
            f"<= {GROUNDED_RATIO_TARGET:g}x",
            ratio <= GROUNDED_RATIO_TARGET,
            f"{exact:.2f} us vs {normalized:.2f} us",
        )
    base = pct(t["seen as is, normalized"], 50)
    for name in ("id without its '#'", "date written out", "derived (pair found last of 256)", "not derivable (all 256 tried)"):
        add(
            f"grounded value, {name}, p50",
            f"{pct(t[name], 50):.2f} us",
            "",
            None,
            f"{pct(t[name], 50) / base:.2f}x a value seen as is",
        )
    miss_e, miss_n = pct(t["miss, exact"], 50), pct(t["miss, normalized"], 50)
    add(
        "ungrounded value (a failure): normalized / exact, p50",
        f"{miss_n / miss_e:.2f}x",
        "",
        None,
        f"{miss_e:.2f} us vs {miss_n:.2f} us",
    )


# -- shared: interleaved rounds, GC on -----------------------------------------------------
Side = Callable[[], Awaitable[float]]
"""One measurement: runs a chunk and returns nanoseconds per unit of it."""


async def rounds_of(sides: dict[str, Side], rounds: int) -> dict[str, float]:
    """Median nanoseconds per unit of each side over ``rounds`` interleaved rounds (GC on, as in production)."""
    samples: dict[str, list[float]] = {name: [] for name in sides}
    for _ in range(rounds):
        for name, side in sides.items():
            samples[name].append(await side())
    return {name: statistics.median(v) for name, v in samples.items()}


def ping_reference() -> TypeAdapter[Any]:
    """pydantic's TypeAdapter over the arguments model of ``ping(n: int)``, as the monitor declares it."""
    model = create_model("ping_args", __config__=ConfigDict(extra="forbid"), n=(int, ...))
    return TypeAdapter(model)


def with_many_tools(n: int) -> Toolset:
    """``ping`` among ``n`` tools (the others declared from JSON Schemas, exposed, never called)."""
    tools = build_tools()
    for i in range(n - len(tools)):
        tools.add_schema(f"lookup_{i}", {"type": "object", "properties": {"key": {"type": "string"}}})
    return tools


SHORT: Final = 5
"""Calls of a short episode."""


def episode_side(monitor: Monitor, calls: int, per: int, labels: dict[str, str] | None = None) -> Side:
    """``per`` episodes of ``calls`` pings each (open, calls, finish, close); ns per episode."""

    async def run() -> float:
        t0 = time.perf_counter_ns()
        for _ in range(per):
            async with monitor.episode(task_id="t", labels=labels or {}) as ep:
                for i in range(calls):
                    await ep.call("ping", {"n": i})
                ep.finish("success")
        return (time.perf_counter_ns() - t0) / per

    return run


def call_side(monitor: Monitor, per: int) -> Side:
    """``per`` pings in one episode; ns per call."""

    async def run() -> float:
        async with monitor.episode(task_id="t") as ep:
            t0 = time.perf_counter_ns()
            for i in range(per):
                await ep.call("ping", {"n": i})
            return (time.perf_counter_ns() - t0) / per

    return run


def bare_side(tools: Toolset, per: int, calls: int = 1) -> Side:
    """``per`` times ``calls`` bare ``await ping(n=i)``; ns per group of ``calls``."""
    func = tools["ping"].func
    assert func is not None

    async def run() -> float:
        t0 = time.perf_counter_ns()
        for _ in range(per):
            for i in range(calls):
                await func(n=i)
        return (time.perf_counter_ns() - t0) / per

    return run


# -- 6. short episodes, telemetry off ---------------------------------------------------------
CALL_RATIO_TARGET: Final = 6.0
EPISODE_RATIO_TARGET: Final = 45.0
OPEN_CLOSE_TARGET: Final = 3.0
TOOLS_RATIO_TARGET: Final = 1.05


async def short_episodes(rounds: int) -> None:
    print("\n6. short episodes, telemetry off, against a pydantic TypeAdapter validation of the same arguments (GC on)")
    tools = build_tools()
    monitor = Monitor(tools, policy="block")
    adapter = ping_reference()
    args = {"n": 7}

    async def validation() -> float:
        t0 = time.perf_counter_ns()
        for _ in range(CHUNK):
            adapter.validate_python(args)
        return (time.perf_counter_ns() - t0) / CHUNK

    many, few = Monitor(with_many_tools(500), policy="block"), Monitor(build_tools(), policy="block")
    per = CHUNK // 10
    m = await rounds_of(
        {
            "validation": validation,
            "bare": bare_side(tools, CHUNK),
            "call": call_side(monitor, CHUNK),
            "bare x5": bare_side(tools, per, SHORT),
            "episode x5": episode_side(monitor, SHORT, per),
            "episode x0": episode_side(monitor, 0, per),
            "500 tools": episode_side(many, SHORT, per),
            "4 tools": episode_side(few, SHORT, per),
        },
        rounds,
    )
    v = m["validation"]
    call = m["call"] - m["bare"]
    add(
        "checked call overhead / TypeAdapter validation of the same arguments",
        f"{call / v:.2f}x",
        f"<= {CALL_RATIO_TARGET:g}x",
        call / v <= CALL_RATIO_TARGET,
        f"overhead {call / 1000:.2f} us, validation {v / 1000:.2f} us (zero-rule ping, hot loop)",
    )
    episode = m["episode x5"] - m["bare x5"]
    add(
        f"{SHORT}-call episode overhead (open, calls, finish, close) / TypeAdapter validation",
        f"{episode / v:.1f}x",
        f"<= {EPISODE_RATIO_TARGET:g}x",
        episode / v <= EPISODE_RATIO_TARGET,
        f"{episode / 1000:.1f} us",
    )
    fixed = (episode - SHORT * call) / call
    add(
        "  open + close of that episode, in checked calls",
        f"{fixed:.2f}",
        f"<= about {OPEN_CLOSE_TARGET:g}",
        fixed <= OPEN_CLOSE_TARGET * 1.1,
        f"an empty episode: {m['episode x0'] / 1000:.1f} us = {m['episode x0'] / call:.2f} calls",
    )
    tools_ratio = m["500 tools"] / m["4 tools"]
    add(
        f"{SHORT}-call episode, 500 tools / 4 tools",
        f"{tools_ratio:.2f}x",
        f"<= {TOOLS_RATIO_TARGET:g}x",
        tools_ratio <= TOOLS_RATIO_TARGET,
        f"{m['500 tools'] / 1000:.1f} us vs {m['4 tools'] / 1000:.1f} us",
    )


# -- 7. telemetry without an SDK, and a sampled-out trace --------------------------------------
NO_SDK_TARGET: Final = 1.05


async def telemetry_off(rounds: int) -> None:
    print("\n7. Telemetry() with no SDK, with a sampled-out trace and left out by trace_ratio, against no telemetry (GC on)")
    tools = build_tools()
    sampled_out = TracerProvider(sampler=ALWAYS_OFF)
    sampling_all = TracerProvider()
    monitors = {
        "none": Monitor(tools, policy="block"),
        "no SDK": Monitor(tools, policy="block", observers=[Telemetry()]),  # the global API providers, never set here
        "sampled out": Monitor(tools, policy="block", observers=[Telemetry(tracer_provider=sampled_out, metrics=False)]),
        # prefixmon's own head sampling: an SDK that would trace everything, asked for nothing
        "left out by trace_ratio": Monitor(
            tools, policy="block", observers=[Telemetry(tracer_provider=sampling_all, metrics=False, trace_ratio=0.0)]
        ),
    }
    per = CHUNK // 10
    labels = {"dataset": "d", "model": "m", "method": "react"}
    sides: dict[str, Side] = {}
    for name, monitor in monitors.items():
        sides[f"{name}, call"] = call_side(monitor, CHUNK)
        sides[f"{name}, episode"] = episode_side(monitor, SHORT, per, labels)

    async def getters() -> float:  # what telemetry must ask per episode to see an SDK configured later
        t0 = time.perf_counter_ns()
        for _ in range(CHUNK):
            trace.get_tracer_provider()
            otel_metrics.get_meter_provider()
        return (time.perf_counter_ns() - t0) / CHUNK

    async def sampling() -> float:  # what the SDK's sampler costs per episode span it drops
        tracer = sampled_out.get_tracer("bench")
        t0 = time.perf_counter_ns()
        for _ in range(CHUNK):
            tracer.start_span(sc.INVOKE_AGENT, attributes=START_ATTRS).end()
        return (time.perf_counter_ns() - t0) / CHUNK

    sides["getters"], sides["sampling"] = getters, sampling
    m = await rounds_of(sides, rounds)
    for name, floor in (("no SDK", "getters"), ("sampled out", "sampling"), ("left out by trace_ratio", None)):
        for unit in ("call", "episode"):
            ratio = m[f"{name}, {unit}"] / m[f"none, {unit}"]
            what = "checked call" if unit == "call" else f"{SHORT}-call episode"
            detail = f"{m[f'{name}, {unit}'] / 1000:.2f} us vs {m[f'none, {unit}'] / 1000:.2f} us"
            if unit == "episode" and floor is not None:
                detail += f"; floor: {m[floor] / 1000:.2f} us per episode for " + (
                    "the API's provider getters" if floor == "getters" else "the SDK's sampling of the dropped episode span"
                )
            add(
                f"Telemetry(), {name} / no telemetry, {what}",
                f"{ratio:.3f}x",
                f"<= {NO_SDK_TARGET:g}x",
                ratio <= NO_SDK_TARGET,
                detail,
            )
    sampled_out.shutdown()
    sampling_all.shutdown()


# -- 8. a cold call ------------------------------------------------------------------------------
COLD_TARGET: Final = 3.0
_DOCUMENT: Final = json.dumps([{"id": i, "name": f"item {i}", "tags": ["a", "b"], "price": i * 1.5} for i in range(3000)])


def unrelated_work(buffer: bytearray) -> None:
    """What a framework does between two tool calls: a JSON round trip of a model response
    (about 300 kB) and a walk over a 4 MiB buffer (the L2 cache of this machine kind)."""
    json.dumps(json.loads(_DOCUMENT))
    for i in range(0, len(buffer), 64):
        buffer[i] ^= 1


async def cold_call(rounds: int) -> None:
    print("\n8. the first call after unrelated work (cold caches) against the hot loop")
    tools = build_tools()
    monitor = Monitor(tools, policy="block")
    func = tools["ping"].func
    assert func is not None
    buffer = bytearray(4 << 20)
    pc = time.perf_counter_ns
    hot: list[int] = []
    cold: list[int] = []
    bare_hot: list[int] = []
    bare_cold: list[int] = []
    async with monitor.episode(task_id="cold") as ep:
        for _ in range(rounds * 10):
            for _ in range(20):
                t0 = pc()
                await ep.call("ping", PING_ARGS)
                hot.append(pc() - t0)
                t0 = pc()
                await func(**PING_ARGS)
                bare_hot.append(pc() - t0)
            unrelated_work(buffer)
            t0 = pc()
            await ep.call("ping", PING_ARGS)
            cold.append(pc() - t0)
            unrelated_work(buffer)
            t0 = pc()
            await func(**PING_ARGS)
            bare_cold.append(pc() - t0)
    h, c = statistics.median(hot), statistics.median(cold)
    bare = statistics.median(bare_cold) / statistics.median(bare_hot)
    add(
        "checked call after unrelated work / in the hot loop, p50",
        f"{c / h:.2f}x",
        f"<= {COLD_TARGET:g}x",
        c / h <= COLD_TARGET,
        f"cold {c / 1000:.1f} us, hot {h / 1000:.2f} us; a bare await: {bare:.1f}x",
    )


# -- 9. LangChain's sync tool path --------------------------------------------------------------
SYNC_TARGET: Final = 2.0


async def langchain_sync(rounds: int) -> None:
    print("\n9. LangChain middleware: a sync agent's tool call against an async agent's (per call, hook to hook)")
    try:
        from langchain.agents.middleware import ToolCallRequest
        from langchain_core.messages import ToolMessage

        from prefixmon.adapters.langchain import MonitorMiddleware
    except ImportError:
        print('  skipped: pip install "prefixmon[langchain]"')
        return
    tools = Toolset()
    tools.add_schema("ping", {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]})
    middleware = MonitorMiddleware(Monitor(tools, policy="block"))
    state: dict[str, Any] = {"messages": []}
    state.update(middleware.before_agent(state, None) or {})  # type: ignore[arg-type]
    counter = iter(range(10**9))

    runtime: Any = None  # the tool path never reads it

    def request() -> Any:
        n = next(counter)
        call: Any = {"name": "ping", "args": {"n": n}, "id": f"c{n}", "type": "tool_call"}
        return ToolCallRequest(tool_call=call, tool=None, state=state, runtime=runtime)

    def handler(req: Any) -> Any:
        return ToolMessage(content=str(req.tool_call["args"]["n"]), tool_call_id=req.tool_call["id"], name="ping")

    async def ahandler(req: Any) -> Any:
        return handler(req)

    per = CHUNK // 5

    async def sync_side() -> float:
        reqs = [request() for _ in range(per)]
        t0 = time.perf_counter_ns()
        for req in reqs:
            middleware.wrap_tool_call(req, handler)
        return (time.perf_counter_ns() - t0) / per

    async def async_side() -> float:
        reqs = [request() for _ in range(per)]
        t0 = time.perf_counter_ns()
        for req in reqs:
            await middleware.awrap_tool_call(req, ahandler)
        return (time.perf_counter_ns() - t0) / per

    async def bare_side_() -> float:
        reqs = [request() for _ in range(per)]
        t0 = time.perf_counter_ns()
        for req in reqs:
            handler(req)
        return (time.perf_counter_ns() - t0) / per

    async def event_loop() -> float:  # what the sync path paid before: one event loop per call
        async def nothing() -> None:
            return None

        t0 = time.perf_counter_ns()
        for _ in range(10):
            await anyio.to_thread.run_sync(anyio.run, nothing)
        return (time.perf_counter_ns() - t0) / 10

    m = await rounds_of({"sync": sync_side, "async": async_side, "bare": bare_side_, "anyio.run": event_loop}, rounds)
    sync, async_ = m["sync"] - m["bare"], m["async"] - m["bare"]
    add(
        "MonitorMiddleware: sync wrap_tool_call / async awrap_tool_call overhead",
        f"{sync / async_:.2f}x",
        f"<= {SYNC_TARGET:g}x",
        sync / async_ <= SYNC_TARGET,
        f"sync {sync / 1000:.1f} us, async {async_ / 1000:.1f} us; anyio.run per call (before) {m['anyio.run'] / 1000:.0f} us",
    )
    middleware.after_agent(state, None)  # type: ignore[arg-type]


# -- main ------------------------------------------------------------------------------------
def markdown() -> str:
    lines = [
        "| measurement | result | target | met | detail |",
        "|---|---:|---:|:---:|---|",
    ]
    for r in ROWS:
        met = "" if r.ok is None else ("yes" if r.ok else "**no**")
        lines.append(f"| {r.name} | {r.value} | {r.target} | {met} | {r.detail} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=60_000, help="timed calls per side and scenario")
    parser.add_argument("--episodes", type=int, default=5_000, help="sequential episodes in the throughput run")
    parser.add_argument("--quick", action="store_true", help="a short run (10,000 calls, 1,000 episodes)")
    parser.add_argument("--markdown", metavar="FILE", help="also write the table as markdown")
    parser.add_argument("--rounds", type=int, default=200, help="interleaved rounds of sections 6-9")
    parser.add_argument("--only", default="123456789", help="sections to run, e.g. 13 (default: all)")
    ns = parser.parse_args(argv)
    calls, episodes = (10_000, 1_000) if ns.quick else (ns.calls, ns.episodes)
    rounds = 40 if ns.quick else ns.rounds
    print(f"prefixmon hot path: python {sys.version.split()[0]}, {os.cpu_count()} cores, {calls:,} calls per side")
    tools = build_tools()

    async def run() -> None:
        gc.collect()
        gc.freeze()
        sections: list[Callable[[], Awaitable[None]]] = [
            lambda: overhead(tools, calls),
            lambda: with_otel(tools, calls),
            lambda: state_size(tools, calls),
            lambda: throughput(tools, episodes),
            lambda: grounded(calls),
            lambda: short_episodes(rounds),
            lambda: telemetry_off(rounds),
            lambda: cold_call(rounds),
            lambda: langchain_sync(rounds),
        ]
        for number, section in enumerate(sections, 1):
            if str(number) in ns.only:
                await section()

    anyio.run(run)
    table = markdown()
    print("\n" + table)
    if ns.markdown:
        with open(ns.markdown, "w", encoding="utf-8") as f:
            f.write(table + "\n")
    missed = [r.name for r in ROWS if r.ok is False]
    if missed:
        print(f"\nMISSED: {', '.join(missed)}", file=sys.stderr)
        return 1
    print("\nevery target met")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
