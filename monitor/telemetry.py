"""OpenTelemetry spans, events and metrics for monitored episodes (GenAI conventions).

:class:`Telemetry` is an :class:`~prefixmon.Observer`. Give it to a monitor and it reports
through the OpenTelemetry **API**; the application configures the SDK (or use
:func:`prefixmon.otel_setup.configure_otel` in examples and scripts)::

    monitor = Monitor(tools, observers=[Telemetry()])

What it emits (names in :mod:`prefixmon.semconv`):

- an ``invoke_agent {agent}`` span per episode (or, with ``enrich_current_span=True``, the
  episode's attributes on the framework's own agent span), current while the episode runs;
- an ``execute_tool {tool}`` span (kind INTERNAL) per call, blocked calls included, with
  ``prefixmon.depth / executable / cause / code / decision``, the episode's FED so far, and
  ``error.type = prefixmon.<cause>`` when the call is not executable;
- a ``gen_ai.guardrail.result`` event with the verdict on every call span, and a
  ``prefixmon.first_failure`` event on the first failure;
- metrics from which a backend computes fleet-wide PEC, TER and RR (see
  :mod:`prefixmon.semconv`, ``METRIC_*``).

Argument values, results, reasons and error messages are content: they are recorded only
with ``capture_content=True``, through the ``redact`` hook and capped at
``max_content_chars``. When no SDK is installed (or the episode span is not sampled) no span
work is done for the episode's calls at all.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime, timezone
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any, Final, Literal

from opentelemetry import metrics as otel_metrics
from opentelemetry import trace
from opentelemetry.metrics import Meter, MeterProvider
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, TracerProvider

from . import semconv as sc
from .observer import Observer
from .vocabulary import Decision

if TYPE_CHECKING:
    from .episode import Episode
    from .predicate import ToolCall, Verdict
    from .records import ActionRecord, EpisodeRecord

__all__ = ["ContentKind", "Redactor", "Telemetry", "redact_keys"]


def _package_version() -> str:
    try:
        return version("prefixmon")
    except PackageNotFoundError:  # pragma: no cover - a source tree without metadata
        return "0.0.0"


_VERSION: Final = _package_version()

ContentKind = Literal["arguments", "result", "reason", "error"]
Redactor = Callable[[ContentKind, Any], Any]
"""``(kind, value) -> value to record``; return ``None`` to record nothing."""

_EPOCH: Final = datetime(1970, 1, 1, tzinfo=timezone.utc)

_RESULT_TYPE: Final[Mapping[Decision, str]] = {
    Decision.ALLOW: "pass",
    Decision.OBSERVE: "observe",
    Decision.BLOCK: "block",
    Decision.DENY: "block",
    Decision.FAIL_CLOSED: "block",
    Decision.REPLAN: "modify",
    Decision.EDIT: "modify",
    Decision.APPROVE: "escalate",
}
_INTERVENTIONS: Final = frozenset(
    {Decision.BLOCK, Decision.REPLAN, Decision.APPROVE, Decision.EDIT, Decision.DENY, Decision.FAIL_CLOSED}
)


def _ns(dt: datetime) -> int:
    """A datetime as Unix nanoseconds, exactly (no float rounding)."""
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    delta = dt - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000_000 + delta.microseconds * 1000


def redact_keys(*keys: str, mask: str = "[REDACTED]") -> Redactor:
    """A redaction hook that masks the values of the given keys at any nesting level.

    Keys compare case-insensitively. Reasons and error messages pass unchanged.
    """
    wanted = frozenset(k.lower() for k in keys)

    def walk(value: Any) -> Any:
        if isinstance(value, Mapping):
            return {k: mask if str(k).lower() in wanted else walk(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [walk(v) for v in value]
        return value

    def redact(kind: ContentKind, value: Any) -> Any:
        return walk(value) if kind in ("arguments", "result") else value

    return redact


@dataclass(slots=True)
class _EpisodeSpan:
    """Per-episode telemetry state."""

    span: Span | None
    """The episode span (ours or the framework's), or ``None`` when not tracing."""
    own: bool
    first_failure: int | None = None
    """Depth of the first failure already reported."""


class Telemetry(Observer):
    """Reports episodes as OpenTelemetry spans, events and metrics.

    Args:
        tracer_provider: default: the global one.
        meter_provider: default: the global one.
        agent_name: ``gen_ai.agent.name`` and the episode span's name; default: the
            episode's ``agent`` label, if any.
        enrich_current_span: when a recording span is current as the episode opens (the
            framework's agent span), put the episode's attributes on it instead of opening
            an ``invoke_agent`` span of our own.
        capture_content: record argument values, results, reasons and error messages
            (``gen_ai.tool.call.arguments`` / ``gen_ai.tool.call.result``,
            ``prefixmon.reason`` / ``prefixmon.error``). Off by default.
        redact: called on each content value before it is recorded (see :func:`redact_keys`).
        max_content_chars: content values longer than this are cut (with a marker).
        max_depth: the FED and horizon histograms get one bucket per depth 1..max_depth.
        metric_labels: episode labels copied onto metric attributes as
            ``prefixmon.label.<key>`` (keep them low-cardinality: no task ids).
        tracing: emit spans and events.
        metrics: record metrics.
    """

    def __init__(
        self,
        *,
        tracer_provider: TracerProvider | None = None,
        meter_provider: MeterProvider | None = None,
        agent_name: str | None = None,
        enrich_current_span: bool = False,
        capture_content: bool = False,
        redact: Redactor | None = None,
        max_content_chars: int = 4096,
        max_depth: int = 32,
        metric_labels: Sequence[str] = ("dataset", "model", "method"),
        tracing: bool = True,
        metrics: bool = True,
    ) -> None:
        if max_depth < 1:
            raise ValueError(f"max_depth must be >= 1, got {max_depth}")
        if max_content_chars < 1:
            raise ValueError(f"max_content_chars must be >= 1, got {max_content_chars}")
        self.agent_name = agent_name
        self.enrich_current_span = enrich_current_span
        self.capture_content = capture_content
        self.redact = redact
        self.max_content_chars = max_content_chars
        self.max_depth = max_depth
        self.metric_labels = tuple(metric_labels)
        self.tracing = tracing
        self.metrics = metrics
        self._tracer = trace.get_tracer("prefixmon", _VERSION, tracer_provider)
        self._episodes: dict[int, _EpisodeSpan] = {}
        meter = _get_meter(meter_provider)
        buckets = [float(d) for d in range(1, max_depth + 1)]
        self._m_episodes = meter.create_counter(sc.METRIC_EPISODES, "{episode}", "Finished episodes")
        self._m_fed = meter.create_histogram(
            sc.METRIC_FED,
            "{action}",
            "First-error depth (horizon + 1 when fully executable)",
            explicit_bucket_boundaries_advisory=buckets,
        )
        self._m_horizon = meter.create_histogram(
            sc.METRIC_HORIZON, "{action}", "Episode horizon T", explicit_bucket_boundaries_advisory=buckets
        )
        self._m_calls = meter.create_counter(sc.METRIC_CALLS, "{call}", "Checked tool calls")
        self._m_first = meter.create_counter(sc.METRIC_FIRST_FAILURES, "{episode}", "Primary cause at FED")
        self._m_interventions = meter.create_counter(sc.METRIC_INTERVENTIONS, "{call}", "Calls blocked, replanned or escalated")
        self._m_errors = meter.create_counter(sc.METRIC_INTERNAL_ERRORS, "{error}", "Errors caught inside the monitor")

    # -- content ------------------------------------------------------------------------------
    def _content(self, kind: ContentKind, value: Any) -> str | None:
        if self.redact is not None:
            value = self.redact(kind, value)
        if value is None:
            return None
        text = value if isinstance(value, str) else json.dumps(value, default=str, ensure_ascii=False)
        cap = self.max_content_chars
        if len(text) > cap:
            text = f"{text[:cap]}...[{len(text) - cap} more chars]"
        return text

    # -- episodes -----------------------------------------------------------------------------
    def episode_started(self, episode: Episode) -> None:
        """Open the episode span (or adopt the current one) and make it current."""
        if not self.tracing:
            return
        if self.enrich_current_span:
            current = trace.get_current_span()
            if current.is_recording():
                current.set_attributes(self._episode_start_attributes(episode))
                self._episodes[id(episode)] = _EpisodeSpan(span=current, own=False)
                return
        agent = self.agent_name or episode.labels.get("agent")
        span = self._tracer.start_span(
            f"{sc.INVOKE_AGENT} {agent}" if agent else sc.INVOKE_AGENT,
            kind=SpanKind.INTERNAL,
            start_time=_ns(episode.started_at),
        )
        if not span.is_recording():
            return
        span.set_attributes(self._episode_start_attributes(episode))
        self._episodes[id(episode)] = _EpisodeSpan(span=span, own=True)

    def episode_context(self, episode: Episode) -> AbstractContextManager[Any] | None:
        """Make our episode span current while the episode is active in a task."""
        st = self._episodes.get(id(episode))
        if st is None or not st.own or st.span is None:
            return None
        return trace.use_span(st.span, end_on_exit=False, record_exception=False, set_status_on_exception=False)

    def _episode_start_attributes(self, episode: Episode) -> dict[str, Any]:
        attrs: dict[str, Any] = {
            sc.GEN_AI_OPERATION_NAME: sc.INVOKE_AGENT,
            sc.PREFIXMON_EPISODE_ID: episode.id,
            sc.PREFIXMON_TASK_ID: episode.task_id,
            sc.PREFIXMON_ALLOWS_NO_TOOL: episode.allows_no_tool,
        }
        agent = self.agent_name or episode.labels.get("agent")
        if agent:
            attrs[sc.GEN_AI_AGENT_NAME] = agent
        for key, value in episode.labels.items():
            attrs[sc.PREFIXMON_LABEL_PREFIX + key] = value
        return attrs

    def episode_finished(self, episode: Episode, record: EpisodeRecord) -> None:
        """Close the episode span with the episode's FED, horizon and outcome; record metrics."""
        st = self._episodes.pop(id(episode), None)
        if st is not None and st.span is not None:
            span = st.span
            if span.is_recording():
                span.set_attributes(self._episode_end_attributes(record, own=st.own))
                if record.status == "error":
                    span.set_status(Status(StatusCode.ERROR, record.error or "error"))
            if st.own:
                span.end(end_time=_ns(record.ended_at))
        if self.metrics:
            base = self._metric_base(record.labels)
            attrs = {**base, sc.PREFIXMON_EXECUTABLE: record.executable, sc.PREFIXMON_STATUS: record.status}
            if record.outcome is not None:
                attrs[sc.PREFIXMON_OUTCOME] = record.outcome.value
            self._m_episodes.add(1, attrs)
            self._m_fed.record(record.fed, base)
            self._m_horizon.record(record.horizon, base)
            if record.first_failure is not None:
                self._m_first.add(1, {**base, sc.PREFIXMON_CAUSE: record.first_failure.cause.value})

    def _episode_end_attributes(self, record: EpisodeRecord, *, own: bool) -> dict[str, Any]:
        attrs: dict[str, Any] = {
            sc.PREFIXMON_HORIZON: record.horizon,
            sc.PREFIXMON_FED: record.fed,
            sc.PREFIXMON_EXECUTABLE: record.executable,
            sc.PREFIXMON_STATUS: record.status,
            sc.PREFIXMON_INVALID_REACHED_ENVIRONMENT: record.invalid_reached_environment,
        }
        if record.outcome is not None:
            attrs[sc.PREFIXMON_OUTCOME] = record.outcome.value
        if record.error is not None:  # the agent body's exception type (no message)
            attrs[sc.PREFIXMON_EPISODE_ERROR] = record.error
            attrs[sc.ERROR_TYPE] = record.error
        ff = record.first_failure
        if ff is not None:
            attrs[sc.PREFIXMON_FIRST_FAILURE_DEPTH] = ff.depth
            attrs[sc.PREFIXMON_FIRST_FAILURE_CAUSE] = ff.cause.value
            if ff.tool is not None:
                attrs[sc.PREFIXMON_FIRST_FAILURE_TOOL] = ff.tool
        if not own:  # the framework's span has its own times
            attrs[sc.PREFIXMON_STARTED_AT] = _ns(record.started_at)
            attrs[sc.PREFIXMON_ENDED_AT] = _ns(record.ended_at)
        return attrs

    def _metric_base(self, labels: Mapping[str, str]) -> dict[str, Any]:
        return {sc.PREFIXMON_LABEL_PREFIX + k: labels[k] for k in self.metric_labels if k in labels}

    # -- calls --------------------------------------------------------------------------------
    def call_started(self, episode: Episode, tool: str, call_id: str | None, depth: int) -> Span | None:
        """Open the call's ``execute_tool`` span (nothing when the episode is not traced)."""
        st = self._episodes.get(id(episode))
        if st is None:
            return None
        attrs: dict[str, Any] = {
            sc.GEN_AI_OPERATION_NAME: sc.EXECUTE_TOOL,
            sc.GEN_AI_TOOL_NAME: tool,
            sc.PREFIXMON_EPISODE_ID: episode.id,
            sc.PREFIXMON_DEPTH: depth,
        }
        if call_id is not None:
            attrs[sc.GEN_AI_TOOL_CALL_ID] = call_id
        fed = episode.fed
        if fed is not None:
            attrs[sc.PREFIXMON_FED] = fed
        parent = None
        if st.span is not None and trace.get_current_span().get_span_context().trace_id != st.span.get_span_context().trace_id:
            parent = trace.set_span_in_context(st.span)  # called outside the episode's trace (another task): nest anyway
        return self._tracer.start_span(f"{sc.EXECUTE_TOOL} {tool}", context=parent, kind=SpanKind.INTERNAL, attributes=attrs)

    def execution_context(self, episode: Episode, call: ToolCall, token: Any) -> AbstractContextManager[Any] | None:
        """Make the call's span current while the tool runs, so the tool's own spans nest."""
        if isinstance(token, Span) and token.is_recording():
            return trace.use_span(token, end_on_exit=False, record_exception=False, set_status_on_exception=False)
        return None

    def call_result(self, episode: Episode, depth: int, result: Any, token: Any) -> None:
        """Record the tool's result as ``gen_ai.tool.call.result`` (content capture only)."""
        if self.capture_content and isinstance(token, Span) and token.is_recording():
            text = self._content("result", result)
            if text is not None:
                token.set_attribute(sc.GEN_AI_TOOL_CALL_RESULT, text)

    def call_finished(self, episode: Episode, action: ActionRecord, verdict: Verdict, token: Any) -> None:
        """Finish the call span with the verdict; count the call."""
        if isinstance(token, Span):
            if token.is_recording():
                self._finish_call_span(episode, token, action, verdict)
            token.end()
        if self.metrics:
            attrs: dict[str, Any] = {
                sc.PREFIXMON_EXECUTABLE: action.executable,
                sc.PREFIXMON_DECISION: action.decision.value,
            }
            if action.cause is not None:
                attrs[sc.PREFIXMON_CAUSE] = action.cause.value
            self._m_calls.add(1, attrs)
            if action.decision in _INTERVENTIONS:
                self._m_interventions.add(1, attrs)

    def _finish_call_span(self, episode: Episode, span: Span, action: ActionRecord, verdict: Verdict) -> None:
        code = verdict.code if not verdict.executable else None
        attrs: dict[str, Any] = {
            sc.PREFIXMON_EXECUTABLE: action.executable,
            sc.PREFIXMON_DECISION: action.decision.value,
            sc.PREFIXMON_REACHED_ENVIRONMENT: action.reached_environment,
            sc.PREFIXMON_TURN: action.turn,
        }
        fed = episode.fed
        if fed is not None:
            attrs[sc.PREFIXMON_FED] = fed
        if action.cause is not None:
            attrs[sc.PREFIXMON_CAUSE] = action.cause.value
            attrs[sc.ERROR_TYPE] = f"prefixmon.{action.cause.value}"
        elif action.error is not None:  # executable but its outcome never came: abandoned
            attrs[sc.ERROR_TYPE] = "prefixmon.abandoned"
        if code is not None:
            attrs[sc.PREFIXMON_CODE] = code
        if action.replacement is not None:
            attrs[sc.PREFIXMON_REPLACEMENT] = action.replacement
        if action.plan_step is not None:
            attrs[sc.PREFIXMON_PLAN_STEP] = action.plan_step
        if action.deviation is not None:
            attrs[sc.PREFIXMON_DEVIATION] = action.deviation
        if self.capture_content:
            for key, kind, value in (
                (sc.GEN_AI_TOOL_CALL_ARGUMENTS, "arguments", verdict.args),
                (sc.PREFIXMON_REASON, "reason", action.reason),
                (sc.PREFIXMON_ERROR, "error", action.error),
            ):
                if value is not None:
                    text = self._content(kind, value)  # type: ignore[arg-type]
                    if text is not None:
                        attrs[key] = text
        span.set_attributes(attrs)
        span.add_event(
            sc.GEN_AI_GUARDRAIL_RESULT,
            {
                sc.GEN_AI_GUARDRAIL_COMPONENT_NAME: sc.GUARDRAIL_COMPONENT,
                sc.GEN_AI_GUARDRAIL_SOURCE: sc.GUARDRAIL_SOURCE_TOOL_INPUT,
                sc.GEN_AI_GUARDRAIL_RESULT_TYPE: _RESULT_TYPE.get(action.decision, action.decision.value),
                sc.GEN_AI_GUARDRAIL_RESULT_VALUE: action.executable,
                sc.GEN_AI_GUARDRAIL_RESULT_REASON: code or "executable",
            },
        )
        if "error.type" in attrs:
            span.set_status(Status(StatusCode.ERROR, code or attrs[sc.ERROR_TYPE]))
        st = self._episodes.get(id(episode))
        if not action.executable and fed == action.depth and st is not None and st.first_failure != fed:
            st.first_failure = fed
            event: dict[str, Any] = {sc.PREFIXMON_DEPTH: action.depth, sc.GEN_AI_TOOL_NAME: action.tool or ""}
            if action.cause is not None:
                event[sc.PREFIXMON_CAUSE] = action.cause.value
            if code is not None:
                event[sc.PREFIXMON_CODE] = code
            span.add_event(sc.PREFIXMON_FIRST_FAILURE, event)
            if st.span is not None and st.span.is_recording():
                st.span.add_event(sc.PREFIXMON_FIRST_FAILURE, event)

    # -- monitor errors -----------------------------------------------------------------------
    def internal_error(self, episode: Episode | None, where: str, error: BaseException) -> None:
        """Count a monitor-internal error and note it on the episode span."""
        if self.metrics:
            self._m_errors.add(1, {sc.PREFIXMON_WHERE: where.split(" ", 1)[0], sc.ERROR_TYPE: type(error).__name__})
        st = self._episodes.get(id(episode)) if episode is not None else None
        if st is not None and st.span is not None and st.span.is_recording():
            st.span.add_event("prefixmon.internal_error", {sc.PREFIXMON_WHERE: where, sc.ERROR_TYPE: type(error).__name__})


def _get_meter(provider: MeterProvider | None) -> Meter:
    return otel_metrics.get_meter("prefixmon", _VERSION, provider)
