"""What :class:`~prefixmon.telemetry.Telemetry`'s spans say: the attribute sets and span names it
builds, and the checks on spans it did not make.

Apart from the observer because these are pure functions and constants of the GenAI
conventions (names in :mod:`prefixmon.semconv`), which the hooks only call: the start
attributes of a declared tool's call spans, the end attributes of a call and of an episode,
the attributes and event of the common case (executable, allowed), and how a framework's
span is recognised and enriched without overwriting what it says.
"""

from __future__ import annotations

from collections.abc import Container, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span

from .. import semconv as sc
from ..plan import deviation_kind
from ..vocabulary import Decision

if TYPE_CHECKING:
    from ..records.model import ActionRecord, EpisodeRecord


_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)


_NOT_RUN: Final = frozenset({Decision.BLOCK, Decision.DENY, Decision.FAIL_CLOSED})
"""Decisions after which nothing ran: the call's span is ``apply_guardrail``, not ``execute_tool``."""
_GUARDRAIL_SPAN: Final = f"{sc.APPLY_GUARDRAIL} {sc.GUARDRAIL_COMPONENT}"


def _not_overwriting(span: Span, attrs: dict[str, Any]) -> dict[str, Any]:
    """``attrs`` without the ``gen_ai.*`` ones a framework's span already has (it says what it is);
    when its attributes cannot be read, without any ``gen_ai.*`` (ours may not describe it)."""
    present = getattr(span, "attributes", None)
    if not isinstance(present, Mapping):
        return {k: v for k, v in attrs.items() if not k.startswith("gen_ai.")}
    return {k: v for k, v in attrs.items() if not (k.startswith("gen_ai.") and k in present)}


def _inside_a_trace() -> bool:
    """Whether a valid span context is current (an empty OpenTelemetry context, the common case, holds none)."""
    return bool(otel_context.get_current()) and trace.get_current_span().get_span_context().is_valid


def _ran_nothing(action: ActionRecord) -> bool:
    """Whether prefixmon's decision left nothing to run: refused, or intervened without a replacement call."""
    return not action.reached_environment and action.decision is not Decision.ALLOW and action.replacement is None


def _ns(dt: datetime) -> int:
    """A datetime as Unix nanoseconds, exactly (no float rounding)."""
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    delta = dt - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000_000 + delta.microseconds * 1000


_PASS_ATTRS: Final[Mapping[str, Any]] = {
    sc.PREFIXMON_EXECUTABLE: True,
    sc.PREFIXMON_DECISION: Decision.ALLOW.value,
    sc.PREFIXMON_REACHED_ENVIRONMENT: True,
}
"""What a call span says at the end of the common case, known as soon as the call is let through."""
_PASS_EVENT: Final[Mapping[str, Any]] = {
    sc.GEN_AI_GUARDRAIL_COMPONENT_NAME: sc.GUARDRAIL_COMPONENT,
    sc.GEN_AI_GUARDRAIL_SOURCE: sc.GUARDRAIL_SOURCE_TOOL_INPUT,
    sc.GEN_AI_GUARDRAIL_RESULT_TYPE: sc.GUARDRAIL_RESULT_DECISION,
    sc.GEN_AI_GUARDRAIL_RESULT_VALUE: Decision.ALLOW.value,
    sc.GEN_AI_GUARDRAIL_RESULT_REASON: "executable",
    sc.PREFIXMON_EXECUTABLE: True,
}


def _is_tool_span(span: Span, tool: str) -> bool:
    """Whether ``span`` is a framework's own span of executing ``tool`` (the SDK's spans show their attributes)."""
    attrs = getattr(span, "attributes", None)
    return (
        isinstance(attrs, Mapping)
        and attrs.get(sc.GEN_AI_OPERATION_NAME) == sc.EXECUTE_TOOL
        and attrs.get(sc.GEN_AI_TOOL_NAME) == tool
    )


def _tool_attributes(spec: Any) -> dict[str, Any]:
    """The attributes every call span of a declared tool starts with."""
    attrs: dict[str, Any] = {
        sc.GEN_AI_OPERATION_NAME: sc.EXECUTE_TOOL,
        sc.GEN_AI_TOOL_NAME: spec.name,
        sc.GEN_AI_TOOL_TYPE: sc.TOOL_TYPE_FUNCTION,
    }
    if spec.description:
        attrs[sc.GEN_AI_TOOL_DESCRIPTION] = spec.description
    return attrs


def _call_end_attributes(action: ActionRecord, code: str | None, fed: int | None) -> dict[str, Any]:
    """What a call span says when the call is recorded (``code``: the verdict's, when not executable)."""
    attrs: dict[str, Any] = {
        sc.PREFIXMON_EXECUTABLE: action.executable,
        sc.PREFIXMON_DECISION: action.decision.value,
        sc.PREFIXMON_REACHED_ENVIRONMENT: action.reached_environment,
        sc.PREFIXMON_TURN: action.turn,
    }
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
    if action.deviation is not None:  # the kind; the text may quote values (content)
        attrs[sc.PREFIXMON_DEVIATION] = deviation_kind(action.deviation)
    return attrs


def _episode_end_attributes(record: EpisodeRecord, declared: Container[str], *, own: bool) -> dict[str, Any]:
    """What the episode span says when the episode ends (``own``: the span is ours, not the framework's)."""
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
            attrs[sc.PREFIXMON_FIRST_FAILURE_TOOL] = sc.tool_label(ff.tool, declared)
    if not own:  # the framework's span has its own times
        attrs[sc.PREFIXMON_STARTED_AT] = _ns(record.started_at)
        attrs[sc.PREFIXMON_ENDED_AT] = _ns(record.ended_at)
    return attrs
