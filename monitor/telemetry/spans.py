"""OpenTelemetry spans, events and metrics for monitored episodes (GenAI conventions).

:class:`Telemetry` is an :class:`~prefixmon.Observer`. Give it to a monitor and it reports
through the OpenTelemetry **API**; the application configures the SDK (or use
:func:`prefixmon.otel_setup.configure_otel` in examples and scripts)::

    monitor = Monitor(tools, observers=[Telemetry()])

What it emits (names in :mod:`prefixmon.semconv`):

- an ``invoke_agent {agent}`` span per episode (or, with ``enrich_current_span=True``, the
  episode's attributes on the framework's own agent span), current while the episode runs;
- a span (kind INTERNAL) per call: ``execute_tool {tool}`` when something ran,
  ``apply_guardrail prefixmon`` when prefixmon's decision left nothing to run (blocked,
  denied, guidance only); or, with ``tool_spans="auto"``, the framework's own ``execute_tool``
  span of the call (the MCP SDK's). Each carries ``prefixmon.depth / executable / cause /
  code / decision``, the episode's FED so far, and ``error.type = prefixmon.<cause>`` when
  the call is not executable;
- a ``gen_ai.guardrail.result`` event with the verdict on every call that was not simply
  executable and allowed (with ``guardrail_events="all"``, on every call span), and a
  ``prefixmon.first_failure`` event on the first failure;
- metrics from which a backend computes fleet-wide PEC, TER and RR (see
  :mod:`prefixmon.semconv`, ``METRIC_*``); per-call counts are summed per episode and
  added when it ends, monitor-internal errors at once.

A call span is started once, with all its attributes, when the call is let through (or, for
a call that does not run, when it is recorded), timed from the moment the call was emitted;
the common case (executable, allowed, accepted) then only ends it. Every hook ends the
spans it is responsible for even when something inside it raises.

Argument values, results, reasons and error messages are content: they are recorded only
with ``capture_content=True``, through the ``redact`` hook and capped at
``max_content_chars``. When no SDK is installed (or the episode span is not sampled) no span
work is done for the episode's calls at all.

The observer's parts live beside it: the span tokens in :mod:`._span_state`, the attribute
sets the spans carry in :mod:`._span_attributes`, the instruments in :mod:`._metrics`.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from contextlib import AbstractContextManager
from time import monotonic
from typing import TYPE_CHECKING, Any, Final, Literal

from opentelemetry import _logs as otel_logs
from opentelemetry import metrics as otel_metrics
from opentelemetry import trace
from opentelemetry.metrics import MeterProvider
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, TracerProvider

from .. import semconv as sc
from .._version import VERSION as _VERSION
from ..episode import current_episode
from ..observer import Observer
from ..records.redaction import ContentKind, Redactor, content_text, redact_keys, redact_secrets, redactor
from ..vocabulary import Decision
from ._metrics import _NO_METER_PROVIDERS, _CallKey, _Metrics
from ._span_attributes import (
    _GUARDRAIL_SPAN,
    _NOT_RUN,
    _PASS_ATTRS,
    _PASS_EVENT,
    _call_end_attributes,
    _episode_end_attributes,
    _inside_a_trace,
    _is_tool_span,
    _not_overwriting,
    _ns,
    _ran_nothing,
    _tool_attributes,
)
from ._span_state import _Call, _Current, _EpisodeSpan

if TYPE_CHECKING:
    from ..episode import Episode
    from ..records.model import ActionRecord, EpisodeRecord
    from ..verdict import ToolCall, Verdict

__all__ = ["ContentKind", "GuardrailEvents", "Redactor", "Telemetry", "ToolSpans", "redact_keys", "redact_secrets"]


GuardrailEvents = Literal["all", "non_pass"]
ToolSpans = Literal["auto", "own", "enrich"]
"""``auto``: enrich a framework's own tool span when one is current as the call starts (a
recording span whose ``gen_ai.operation.name`` is ``execute_tool`` for the same tool, as the MCP
SDK's ``tools/call`` server span is), else an ``execute_tool`` span of our own; ``own``: always
our own span; ``enrich``: the call's attributes always go on the span current when the call
starts. One execution never gets two tool spans."""
_NO_CAPTURE_IDLE: Final = frozenset({"call_result"})
_EPISODE_HOOKS: Final = frozenset({"episode_context", "episode_finished"})
_FINISHED_ONLY: Final = frozenset({"episode_finished"})
_NO_HOOKS: Final[frozenset[str]] = frozenset()
_RECHECK: Final = 0.1
"""Seconds a "no SDK configured" answer stands: an SDK set up later is used from the next
episode that starts after it (at most this much later)."""


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
        redact: how content is redacted before it is recorded: ``"secrets"`` (default:
            :func:`~prefixmon.redaction.redact_secrets`, common credential keys such as
            ``password``, ``token``, ``api_key``, ``authorization``), a hook such as
            :func:`redact_keys`, or ``None`` to record content as it is.
        max_content_chars: content values longer than this are cut (with a marker).
        max_depth: the FED and horizon histograms get one bucket per depth 1..max_depth.
        metric_labels: episode labels copied onto metric attributes as
            ``prefixmon.label.<key>`` (keep them low-cardinality: no task ids).
        guardrail_events: ``"non_pass"`` (default): a ``gen_ai.guardrail.result`` event on
            every call that was not simply executable and allowed, where the verdict says
            something (the pass verdict is on every span anyway, as ``prefixmon.executable``
            and ``prefixmon.decision``, and the log-based event is emitted for the same calls);
            ``"all"``: also on every pass (4 to 10 µs a call with the Python SDK,
            docs/performance.md).
        tracing: emit spans and events.
        metrics: record metrics. Per-call counts (``prefixmon.calls``,
            ``prefixmon.interventions``, with the ``metric_labels``) are summed per episode
            and added when it ends.
        provider_name: ``gen_ai.provider.name`` of the episode span (the model provider,
            e.g. ``openai``); default: the episode's ``provider`` label, else ``_OTHER``.
        tool_spans: ``"auto"`` (default: the framework's own tool span when one is current,
            like the MCP SDK's ``tools/call`` span under the server guard, else our own),
            ``"own"`` (always an ``execute_tool`` span of ours) or ``"enrich"`` (always the
            span current when the call starts). See :data:`ToolSpans`.
        logger_provider: where the log-based ``gen_ai.guardrail.result`` events go;
            default: the global one (a no-op until the application configures logs).
        log_events: emit the log-based guardrail event for every call that was not simply
            executable and allowed (the pass verdict stays in span attributes, so the
            common path does no log work).
        trace_ratio: the share of episodes traced among those that start outside any span of
            the application (head sampling by prefixmon, decided before the SDK is asked: an
            episode it leaves out costs what one without telemetry costs, where one the SDK's
            sampler drops still pays for the SDK building and sampling its span). An episode
            that starts inside a span context of the application is the SDK sampler's to decide,
            so a trace never has a gap. Metrics count every episode either way.
    """

    def __init__(
        self,
        *,
        tracer_provider: TracerProvider | None = None,
        meter_provider: MeterProvider | None = None,
        agent_name: str | None = None,
        enrich_current_span: bool = False,
        capture_content: bool = False,
        redact: Redactor | Literal["secrets"] | None = "secrets",
        max_content_chars: int = 4096,
        max_depth: int = 32,
        metric_labels: Sequence[str] = ("dataset", "model", "method"),
        guardrail_events: GuardrailEvents = "non_pass",
        tracing: bool = True,
        metrics: bool = True,
        provider_name: str | None = None,
        tool_spans: ToolSpans = "auto",
        logger_provider: otel_logs.LoggerProvider | None = None,
        log_events: bool = True,
        trace_ratio: float = 1.0,
    ) -> None:
        if max_depth < 1:
            raise ValueError(f"max_depth must be >= 1, got {max_depth}")
        if max_content_chars < 1:
            raise ValueError(f"max_content_chars must be >= 1, got {max_content_chars}")
        if isinstance(trace_ratio, bool) or not isinstance(trace_ratio, (int, float)) or not 0.0 <= trace_ratio <= 1.0:
            raise ValueError(f"trace_ratio must be a number from 0 to 1, got {trace_ratio!r}")
        if guardrail_events not in ("all", "non_pass"):
            raise ValueError(f"guardrail_events must be 'all' or 'non_pass', got {guardrail_events!r}")
        self.agent_name = agent_name
        self.enrich_current_span = enrich_current_span
        self.capture_content = capture_content
        self.redact = redactor(redact)
        self.max_content_chars = max_content_chars
        self.max_depth = max_depth
        self.metric_labels = tuple(metric_labels)
        self.guardrail_events: GuardrailEvents = guardrail_events
        self.tracing = tracing
        self.metrics = metrics
        if tool_spans not in ("auto", "own", "enrich"):
            raise ValueError(f"tool_spans must be 'auto', 'own' or 'enrich', got {tool_spans!r}")
        self.provider_name = provider_name
        self.tool_spans: ToolSpans = tool_spans
        self.log_events = log_events
        self.trace_ratio = trace_ratio
        self._draw = random.random
        """The draws for ``trace_ratio``: the random module's generator, which a forked process reseeds."""
        self._tracer = trace.get_tracer("prefixmon", _VERSION, tracer_provider)
        self._tracer_provider = tracer_provider
        self._meter_provider = meter_provider
        self._traces_live = False
        """An SDK tracer provider was seen (see :meth:`_look_for_sdk`)."""
        self._measures_live = False
        """An SDK meter provider was seen (see :meth:`_look_for_sdk`)."""
        self._recheck_at = float("-inf")
        """Until when "no SDK provider" stands without asking the API again."""
        self._all_live = False
        """Whatever is enabled (spans, measurements) has its SDK provider: nothing more to look for."""
        self._logger = otel_logs.get_logger("prefixmon", _VERSION, logger_provider=logger_provider)
        self._static: dict[int, tuple[Any, str, dict[str, Any]]] = {}
        """Per declared tool (by spec identity): its span name and the attributes every call span of it starts with."""
        self._episodes: dict[int, _EpisodeSpan] = {}
        self._counts: dict[int, dict[_CallKey, int]] = {}
        """Per-call counts of each open episode, added to the counters when it ends."""
        self._metrics = _Metrics(meter_provider, max_depth, self.metric_labels)
        """The instruments and the metric attribute sets built for them."""

    def call_hooks(self) -> frozenset[str]:
        """Without content capture, raw results are not needed: ``call_result`` is skipped."""
        hooks = super().call_hooks()
        return hooks if self.capture_content else hooks - _NO_CAPTURE_IDLE

    def episode_hooks(self, episode: Episode) -> frozenset[str]:
        """Every hook for a traced episode; for one it does not trace (no SDK, a sampled-out trace,
        ``tracing=False``) only ``episode_finished`` when it is measured, else none.

        An untraced episode's calls then cost what calls without telemetry cost; its call counts
        come from its record when it ends.
        """
        key = id(episode)
        if key in self._episodes:
            return self._traced_hooks()
        return _FINISHED_ONLY if key in self._counts else _NO_HOOKS

    def _traced_hooks(self) -> frozenset[str]:
        """The hooks of a traced episode: every per-call hook it needs, and the episode hooks."""
        return self.call_hooks() | _EPISODE_HOOKS

    # -- content ------------------------------------------------------------------------------
    def _content(self, kind: ContentKind, value: Any, arguments: Any = None) -> str | None:
        """``value`` redacted (masked where it quotes the call's masked ``arguments``), as size-capped
        text, or a marker when JSON cannot encode it.

        Raises:
            Exception: whatever the redaction hook raised (an observer fault: nothing is recorded).
        """
        return content_text(kind, value, self.redact, self.max_content_chars, arguments=arguments)

    # -- episodes -----------------------------------------------------------------------------
    def _look_for_sdk(self) -> None:
        """Ask the API whether SDK providers are configured (callers ask once ``_recheck_at`` passed).

        Spans and measurements are recorded only with an SDK (not through the API's no-op or
        stand-in providers). A provider, once set, stays (the API refuses to replace it), so a
        live answer is kept; "not yet" stands until the next recheck (the API's getters read
        the environment each time they are asked before a provider is set: 1 to 2 µs).
        """
        self._recheck_at = monotonic() + _RECHECK
        if not self._traces_live:
            provider = self._tracer_provider or trace.get_tracer_provider()
            self._traces_live = not isinstance(provider, (trace.ProxyTracerProvider, trace.NoOpTracerProvider))
        if not self._measures_live:
            meters = self._meter_provider or otel_metrics.get_meter_provider()
            self._measures_live = not isinstance(meters, _NO_METER_PROVIDERS)
        self._all_live = (self._traces_live or not self.tracing) and (self._measures_live or not self.metrics)

    def episode_started(self, episode: Episode) -> frozenset[str]:
        """Open the episode span (or adopt the current one) and make it current; returns the
        hooks this observer takes part in for the episode (see :meth:`episode_hooks`).

        Asked again for every episode, so an SDK configured after the monitor was made is used
        from the next episode on; until then nothing is built for spans or measurements.
        """
        if not self._all_live and monotonic() >= self._recheck_at:
            self._look_for_sdk()
        counts: dict[_CallKey, int] | None = None
        if self.metrics and self._measures_live:
            counts = self._counts[id(episode)] = {}
        untraced = _NO_HOOKS if counts is None else _FINISHED_ONLY
        if not self.tracing or not self._traces_live:
            return untraced
        if self.trace_ratio < 1.0 and self._draw() >= self.trace_ratio and not _inside_a_trace():
            return untraced
        if self.enrich_current_span:
            current = trace.get_current_span()
            if current.is_recording():
                current.set_attributes(_not_overwriting(current, self._episode_start_attributes(episode)))
                return self._track(episode, current, counts, own=False)
        agent = self.agent_name or episode.labels.get("agent")
        span = self._tracer.start_span(
            f"{sc.INVOKE_AGENT} {agent}" if agent else sc.INVOKE_AGENT,
            kind=SpanKind.INTERNAL,
            attributes=self._episode_start_attributes(episode),
            start_time=_ns(episode.started_at),
        )
        return self._track(episode, span, counts, own=True) if span.is_recording() else untraced

    def _track(self, episode: Episode, span: Span, counts: dict[_CallKey, int] | None, *, own: bool) -> frozenset[str]:
        """Trace ``episode`` under ``span``; returns the hooks of a traced episode."""
        self._episodes[id(episode)] = _EpisodeSpan(
            span=span, own=own, parent=trace.set_span_in_context(span), trace_id=span.get_span_context().trace_id, counts=counts
        )
        return self._traced_hooks()

    def episode_context(self, episode: Episode) -> AbstractContextManager[Any] | None:
        """Make our episode span current while the episode is active in a task."""
        st = self._episodes.get(id(episode))
        if st is None or not st.own:
            return None
        return _Current(st.span)

    def _episode_start_attributes(self, episode: Episode) -> dict[str, Any]:
        attrs: dict[str, Any] = {
            sc.GEN_AI_OPERATION_NAME: sc.INVOKE_AGENT,
            sc.GEN_AI_PROVIDER_NAME: self.provider_name or episode.labels.get("provider") or sc.PROVIDER_UNKNOWN,
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
        counts = self._counts.pop(id(episode), None)
        try:
            if st is not None:
                span = st.span
                try:
                    if span.is_recording():
                        span.set_attributes(_episode_end_attributes(record, episode.monitor.toolset, own=st.own))
                        if record.status == "error":
                            span.set_status(Status(StatusCode.ERROR, record.error or "error"))
                finally:
                    if st.own:
                        span.end(end_time=_ns(record.ended_at))
        finally:
            if counts is not None:  # measured: an SDK was configured when the episode started
                self._metrics.episode_finished(record, counts, st.passes if st is not None else None)

    # -- calls --------------------------------------------------------------------------------
    def call_started(self, episode: Episode, tool: str, call_id: str | None, depth: int) -> _Call | None:
        """Take the call's start time and start attributes (nothing when the episode is not traced)."""
        st = self._episodes.get(id(episode))
        if st is None:
            return None
        spec = episode.monitor.toolset.get(tool)
        if spec is None:  # a name the model made up: keep span names low-cardinality
            name = sc.EXECUTE_TOOL
            attrs: dict[str, Any] = {
                sc.GEN_AI_OPERATION_NAME: sc.EXECUTE_TOOL,
                sc.GEN_AI_TOOL_NAME: sc.tool_label(tool, ()),
            }
        else:
            static = self._static.get(id(spec))
            if static is None or static[0] is not spec:
                static = self._static[id(spec)] = (spec, f"{sc.EXECUTE_TOOL} {tool}", _tool_attributes(spec))
            name = static[1]
            attrs = static[2].copy()
        attrs[sc.PREFIXMON_EPISODE_ID] = episode.id
        attrs[sc.PREFIXMON_DEPTH] = depth
        if call_id is not None:
            attrs[sc.GEN_AI_TOOL_CALL_ID] = call_id
        fed = episode.fed
        if fed is not None:
            attrs[sc.PREFIXMON_FED] = fed
        # Nest under the current span only when it is the episode span or was made inside the
        # episode (the episode is active here, same trace); called from elsewhere (another task,
        # under an ancestor of the episode span), nest under the episode span anyway.
        current = trace.get_current_span()
        if (
            current is not st.span
            and self.tool_spans != "own"
            and current.is_recording()
            and (self.tool_spans == "enrich" or _is_tool_span(current, tool))
        ):
            call = _Call(self._tracer, st, name, attrs, None, fed)
            call.span = current
            call.adopted = True
            return call
        inside = current is st.span or (current_episode() is episode and current.get_span_context().trace_id == st.trace_id)
        parent = None if inside else st.parent
        return _Call(self._tracer, st, name, attrs, parent, fed)

    def call_checked(self, episode: Episode, verdict: Verdict, decision: Decision, token: Any) -> None:
        """Start the call's span with the verdict's attributes, before the tool runs."""
        if type(token) is not _Call:
            return
        if token.span is not None:
            if token.adopted:  # the framework's span: our start attributes go onto it now
                token.turn = episode.state.turn
                token.span.set_attributes({**token.attrs, sc.PREFIXMON_TURN: token.turn})
            return
        attrs = token.attrs
        turn = token.turn = episode.state.turn
        passed = verdict.executable and decision is Decision.ALLOW
        if passed:
            attrs.update(_PASS_ATTRS)
        else:
            attrs[sc.PREFIXMON_EXECUTABLE] = verdict.executable
            attrs[sc.PREFIXMON_DECISION] = decision.value
            if decision in _NOT_RUN:  # nothing executes: the guardrail's span, not a tool execution's
                token.name = _GUARDRAIL_SPAN
                attrs[sc.GEN_AI_OPERATION_NAME] = sc.APPLY_GUARDRAIL
        attrs[sc.PREFIXMON_TURN] = turn
        if not self.capture_content:
            token.span = self._tracer.start_span(
                token.name, context=token.parent, kind=SpanKind.INTERNAL, attributes=attrs, start_time=token.start
            )
            token.passed = passed
            return
        token.args = verdict.args
        try:
            if verdict.args is not None:
                text = self._content("arguments", verdict.args)
                if text is not None:
                    attrs[sc.GEN_AI_TOOL_CALL_ARGUMENTS] = text
        finally:  # the span starts even when a redaction hook fails
            token.open()

    def execution_context(self, episode: Episode, call: ToolCall, token: Any) -> AbstractContextManager[Any] | None:
        """Make the call's span current while the tool runs, so the tool's own spans nest."""
        if type(token) is _Call and not token.adopted and (token.span or token.open()).is_recording():
            return token
        return None

    def call_result(self, episode: Episode, depth: int, result: Any, token: Any) -> None:
        """Record the tool's result as ``gen_ai.tool.call.result`` (content capture only)."""
        if self.capture_content and type(token) is _Call:
            text = self._content("result", result, token.args)
            if text is None:
                return
            if token.span is None:
                token.attrs[sc.GEN_AI_TOOL_CALL_RESULT] = text
            elif token.span.is_recording():
                token.span.set_attribute(sc.GEN_AI_TOOL_CALL_RESULT, text)

    def call_finished(self, episode: Episode, action: ActionRecord, verdict: Verdict, token: Any) -> None:
        """Count the call; finish its span with the verdict."""
        call = token if type(token) is _Call else None
        if (
            call is not None
            and call.passed  # its span started with the final attributes of an executable, allowed call
            and action.executable  # and the environment did not reject it
            and action.error is None
            and action.turn == call.turn
            and action.plan_step is None
            and action.deviation is None
            and episode.fed == call.fed
        ):  # the common case: the span already says everything
            call.state.passes += 1
            span = call.span
            try:
                if self.guardrail_events == "all":
                    span.add_event(sc.GEN_AI_GUARDRAIL_RESULT, _PASS_EVENT)  # type: ignore[union-attr]
            finally:
                span.end()  # type: ignore[union-attr]
            return
        counts = call.state.counts if call is not None else self._counts.get(id(episode))
        key = (action.executable, action.decision, action.cause)
        if counts is not None:
            counts[key] = counts.get(key, 0) + 1
        elif self.metrics:  # an episode this observer never saw start
            if not self._measures_live and monotonic() >= self._recheck_at:
                self._look_for_sdk()
            if self._measures_live:
                self._metrics.add_call_counts({key: 1}, self._metrics.label_key(episode.labels))
        if call is not None:
            self._finish_call_span(episode, call, action, verdict)

    def _finish_call_span(self, episode: Episode, call: _Call, action: ActionRecord, verdict: Verdict) -> None:
        passed = action.executable and action.decision is Decision.ALLOW
        fed = episode.fed
        span = call.span
        try:
            code = verdict.code if not verdict.executable else None
            attrs = _call_end_attributes(action, code, fed)
            refused = _ran_nothing(action)
            if span is None:
                if refused:
                    call.name = _GUARDRAIL_SPAN
                    call.attrs[sc.GEN_AI_OPERATION_NAME] = sc.APPLY_GUARDRAIL
                span = call.span = self._tracer.start_span(
                    call.name,
                    context=call.parent,
                    kind=SpanKind.INTERNAL,
                    attributes={**call.attrs, **attrs},
                    start_time=call.start,
                )
            elif span.is_recording():
                if call.adopted:  # the framework's span: a refused call never got our start attributes
                    attrs = {**call.attrs, **attrs}
                if refused:  # let through, then nothing ran (guidance only, no such tool): not an execution
                    attrs[sc.GEN_AI_OPERATION_NAME] = sc.APPLY_GUARDRAIL
                    if not call.adopted:
                        span.update_name(_GUARDRAIL_SPAN)
                span.set_attributes(attrs)
            if not span.is_recording():
                return
            if sc.ERROR_TYPE in attrs:
                span.set_status(Status(StatusCode.ERROR, code or attrs[sc.ERROR_TYPE]))
            if not passed or self.guardrail_events == "all":
                result: dict[str, Any] = {
                    sc.GEN_AI_GUARDRAIL_COMPONENT_NAME: sc.GUARDRAIL_COMPONENT,
                    sc.GEN_AI_GUARDRAIL_SOURCE: sc.GUARDRAIL_SOURCE_TOOL_INPUT,
                    sc.GEN_AI_GUARDRAIL_RESULT_TYPE: sc.GUARDRAIL_RESULT_DECISION,
                    sc.GEN_AI_GUARDRAIL_RESULT_VALUE: action.decision.value,
                    sc.GEN_AI_GUARDRAIL_RESULT_REASON: code or "executable",
                    sc.PREFIXMON_EXECUTABLE: action.executable,
                }
                if action.cause is not None:
                    result[sc.GEN_AI_GUARDRAIL_POLICY_RULE_ID] = action.cause.value
                span.add_event(sc.GEN_AI_GUARDRAIL_RESULT, result)
                if not passed and self.log_events:
                    self._logger.emit(
                        otel_logs.LogRecord(
                            event_name=sc.GEN_AI_GUARDRAIL_RESULT,
                            context=trace.set_span_in_context(span),
                            severity_number=otel_logs.SeverityNumber.INFO,
                            attributes={
                                **result,
                                sc.GEN_AI_TOOL_NAME: call.attrs.get(sc.GEN_AI_TOOL_NAME, ""),
                                sc.PREFIXMON_DEPTH: action.depth,
                            },
                        )
                    )
            st = call.state
            if not action.executable and fed == action.depth and st.first_failure != fed:
                st.first_failure = fed
                event: dict[str, Any] = {
                    sc.PREFIXMON_DEPTH: action.depth,
                    sc.GEN_AI_TOOL_NAME: sc.tool_label(action.tool or "", episode.monitor.toolset),
                }
                if action.cause is not None:
                    event[sc.PREFIXMON_CAUSE] = action.cause.value
                if code is not None:
                    event[sc.PREFIXMON_CODE] = code
                span.add_event(sc.PREFIXMON_FIRST_FAILURE, event)
                if st.span.is_recording():
                    st.span.add_event(sc.PREFIXMON_FIRST_FAILURE, event)
            if self.capture_content:  # last: a failing redaction hook loses only the content
                content = self._call_content(call, action, verdict)
                if content:
                    span.set_attributes(content)
        finally:
            if span is not None and span.is_recording() and not call.adopted:
                span.end()

    def _call_content(self, call: _Call, action: ActionRecord, verdict: Verdict) -> dict[str, str]:
        """Captured arguments (unless already on the span), reason and error message."""
        out: dict[str, str] = {}
        items: list[tuple[str, ContentKind, Any]] = [
            (sc.PREFIXMON_REASON, "reason", action.reason),
            (sc.PREFIXMON_ERROR, "error", action.error),
            (sc.PREFIXMON_DEVIATION_DETAIL, "reason", action.deviation),
        ]
        if sc.GEN_AI_TOOL_CALL_ARGUMENTS not in call.attrs:
            items.insert(0, (sc.GEN_AI_TOOL_CALL_ARGUMENTS, "arguments", verdict.args))
        for key, kind, value in items:
            if value is not None:
                text = self._content(kind, value, verdict.args)
                if text is not None:
                    out[key] = text
        return out

    # -- monitor errors -----------------------------------------------------------------------
    def internal_error(self, episode: Episode | None, where: str, error: BaseException) -> None:
        """Count a monitor-internal error (at once) and note it on the episode span."""
        if self.metrics:
            self._metrics.internal_error(where, error)
        st = self._episodes.get(id(episode)) if episode is not None else None
        if st is not None and st.span.is_recording():
            st.span.add_event(sc.PREFIXMON_INTERNAL_ERROR, {sc.PREFIXMON_WHERE: where, sc.ERROR_TYPE: type(error).__name__})
