"""Names prefixmon uses in OpenTelemetry: span and event names, attribute keys, metrics.

The GenAI keys follow the OpenTelemetry GenAI semantic conventions (``gen_ai.*``,
``error.type``): where the ``opentelemetry-semantic-conventions`` package has a constant it
is used here; the guardrail keys (GenAI guardrail conventions, development status) are not in
the package yet and are spelled as published. Project keys live under ``prefixmon.*``. Query
backends with these constants instead of string literals. Keys marked *content* are only
written when content capture is enabled (they may quote argument values).
"""

from __future__ import annotations

from collections.abc import Container
from typing import Final

from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as _gen_ai
from opentelemetry.semconv.attributes import error_attributes as _error

__all__ = (
    "APPLY_GUARDRAIL",
    "ERROR_TYPE",
    "EXECUTE_TOOL",
    "GEN_AI_AGENT_NAME",
    "GEN_AI_GUARDRAIL_COMPONENT_NAME",
    "GEN_AI_GUARDRAIL_POLICY_RULE_ID",
    "GEN_AI_GUARDRAIL_RESULT",
    "GEN_AI_GUARDRAIL_RESULT_REASON",
    "GEN_AI_GUARDRAIL_RESULT_TYPE",
    "GEN_AI_GUARDRAIL_RESULT_VALUE",
    "GEN_AI_GUARDRAIL_SOURCE",
    "GEN_AI_OPERATION_NAME",
    "GEN_AI_PROVIDER_NAME",
    "GEN_AI_TOOL_CALL_ARGUMENTS",
    "GEN_AI_TOOL_CALL_ID",
    "GEN_AI_TOOL_CALL_RESULT",
    "GEN_AI_TOOL_DESCRIPTION",
    "GEN_AI_TOOL_NAME",
    "GEN_AI_TOOL_TYPE",
    "GUARDRAIL_COMPONENT",
    "GUARDRAIL_RESULT_DECISION",
    "GUARDRAIL_SOURCE_TOOL_INPUT",
    "INVOKE_AGENT",
    "MAX_UNKNOWN_TOOL_NAME",
    "METRIC_CALLS",
    "METRIC_EPISODES",
    "METRIC_EXECUTABLE_FRACTION",
    "METRIC_FED",
    "METRIC_FIRST_FAILURES",
    "METRIC_HORIZON",
    "METRIC_INTERNAL_ERRORS",
    "METRIC_INTERVENTIONS",
    "PREFIXMON_ALLOWS_NO_TOOL",
    "PREFIXMON_CAUSE",
    "PREFIXMON_CODE",
    "PREFIXMON_DECISION",
    "PREFIXMON_DEPTH",
    "PREFIXMON_DEVIATION",
    "PREFIXMON_DEVIATION_DETAIL",
    "PREFIXMON_ENDED_AT",
    "PREFIXMON_EPISODE_ERROR",
    "PREFIXMON_EPISODE_ID",
    "PREFIXMON_ERROR",
    "PREFIXMON_EXECUTABLE",
    "PREFIXMON_FED",
    "PREFIXMON_FIRST_FAILURE",
    "PREFIXMON_FIRST_FAILURE_CAUSE",
    "PREFIXMON_FIRST_FAILURE_DEPTH",
    "PREFIXMON_FIRST_FAILURE_TOOL",
    "PREFIXMON_HORIZON",
    "PREFIXMON_INTERNAL_ERROR",
    "PREFIXMON_INVALID_REACHED_ENVIRONMENT",
    "PREFIXMON_LABEL_PREFIX",
    "PREFIXMON_OUTCOME",
    "PREFIXMON_PLAN_STEP",
    "PREFIXMON_REACHED_ENVIRONMENT",
    "PREFIXMON_REASON",
    "PREFIXMON_REPLACEMENT",
    "PREFIXMON_STARTED_AT",
    "PREFIXMON_STATUS",
    "PREFIXMON_TASK_ID",
    "PREFIXMON_TURN",
    "PREFIXMON_WHERE",
    "PROVIDER_UNKNOWN",
    "TOOL_TYPE_FUNCTION",
    "UNKNOWN_TOOL",
    "tool_label",
)

# --- span names and operations -------------------------------------------------------

EXECUTE_TOOL: Final = "execute_tool"
"""``gen_ai.operation.name`` of a tool call span (span name ``execute_tool {tool}``)."""
UNKNOWN_TOOL: Final = "<unknown tool>"
"""``gen_ai.tool.name`` of a call to an undeclared tool whose name is too long to keep."""
MAX_UNKNOWN_TOOL_NAME: Final = 64
"""Longer names of undeclared tools are replaced by :data:`UNKNOWN_TOOL` (span names always drop them)."""


def tool_label(name: str, declared: Container[str]) -> str:
    """A tool name as telemetry and logs may carry it.

    Declared names stay; a name the model made up stays only when it is short (it may be
    anything, a secret included), else it becomes :data:`UNKNOWN_TOOL`.
    """
    return name if name in declared or len(name) <= MAX_UNKNOWN_TOOL_NAME else UNKNOWN_TOOL


INVOKE_AGENT: Final = "invoke_agent"
"""``gen_ai.operation.name`` of the episode span (span name ``invoke_agent {agent}``)."""
APPLY_GUARDRAIL: Final = "apply_guardrail"
"""``gen_ai.operation.name`` of the span of a call the monitor did not let run (blocked,
denied, failed closed): nothing executed, so it is not an ``execute_tool`` span; its span
name is ``apply_guardrail prefixmon``."""

# --- GenAI semantic-convention keys ---------------------------------------------------

GEN_AI_OPERATION_NAME: Final = _gen_ai.GEN_AI_OPERATION_NAME
GEN_AI_PROVIDER_NAME: Final = _gen_ai.GEN_AI_PROVIDER_NAME
"""On the episode span: the model provider (``Telemetry(provider_name=...)`` or the episode's
``provider`` label; ``_OTHER`` when unknown)."""
GEN_AI_AGENT_NAME: Final = _gen_ai.GEN_AI_AGENT_NAME
GEN_AI_TOOL_NAME: Final = _gen_ai.GEN_AI_TOOL_NAME
GEN_AI_TOOL_CALL_ID: Final = _gen_ai.GEN_AI_TOOL_CALL_ID
GEN_AI_TOOL_TYPE: Final = _gen_ai.GEN_AI_TOOL_TYPE
"""``function`` for every declared tool: the application runs it when the model asks."""
GEN_AI_TOOL_DESCRIPTION: Final = _gen_ai.GEN_AI_TOOL_DESCRIPTION
"""The declared tool's description, when it has one."""
GEN_AI_TOOL_CALL_ARGUMENTS: Final = _gen_ai.GEN_AI_TOOL_CALL_ARGUMENTS
"""*Content*: the call's arguments as JSON, redacted and size-capped."""
GEN_AI_TOOL_CALL_RESULT: Final = _gen_ai.GEN_AI_TOOL_CALL_RESULT
"""*Content*: the tool's result as JSON, redacted and size-capped."""
ERROR_TYPE: Final = _error.ERROR_TYPE
"""``prefixmon.<cause>`` on a non-executable call; the exception class on a monitor error."""
TOOL_TYPE_FUNCTION: Final = "function"
PROVIDER_UNKNOWN: Final = "_OTHER"

# --- the verdict as a guardrail event --------------------------------------------------

GEN_AI_GUARDRAIL_RESULT: Final = "gen_ai.guardrail.result"
"""Event name: the monitor's verdict on one call: a span event on that call's span, and a
log-based event (a log record with this event name) for every call that was not simply
executable and allowed."""
GEN_AI_GUARDRAIL_COMPONENT_NAME: Final = "gen_ai.guardrail.component.name"
"""Always ``"prefixmon"``."""
GEN_AI_GUARDRAIL_SOURCE: Final = "gen_ai.guardrail.source"
"""Always ``"tool_input"``: the check runs on the call before it executes."""
GEN_AI_GUARDRAIL_RESULT_TYPE: Final = "gen_ai.guardrail.result.type"
"""The provider-native name of the result field, as the convention asks (no generalized
allow/deny): always ``"decision"``, prefixmon's own result field."""
GEN_AI_GUARDRAIL_RESULT_VALUE: Final = "gen_ai.guardrail.result.value"
"""The native result value as a string: the decision (``allow``, ``observe``, ``block``,
``replan``, ``approve``, ``edit``, ``deny``, ``fail_closed``)."""
GEN_AI_GUARDRAIL_RESULT_REASON: Final = "gen_ai.guardrail.result.reason"
"""Low-cardinality reason, never content: the failure code (``unbound_reference``,
``precondition:x``) or ``executable``."""
GEN_AI_GUARDRAIL_POLICY_RULE_ID: Final = "gen_ai.guardrail.policy.rule.id"
"""The check that produced a non-executable verdict: the primary cause (``dependency``, ...)."""
GUARDRAIL_COMPONENT: Final = "prefixmon"
GUARDRAIL_SOURCE_TOOL_INPUT: Final = "tool_input"
GUARDRAIL_RESULT_DECISION: Final = "decision"

# --- prefixmon keys ---------------------------------------------------------------------

PREFIXMON_EPISODE_ID: Final = "prefixmon.episode.id"
PREFIXMON_TASK_ID: Final = "prefixmon.task.id"
PREFIXMON_LABEL_PREFIX: Final = "prefixmon.label."
"""One attribute per episode label: ``prefixmon.label.model = "m"``."""
PREFIXMON_DEPTH: Final = "prefixmon.depth"
"""1-based position of the call in its episode."""
PREFIXMON_TURN: Final = "prefixmon.turn"
PREFIXMON_EXECUTABLE: Final = "prefixmon.executable"
PREFIXMON_CAUSE: Final = "prefixmon.cause"
"""Primary cause when not executable (``schema`` ... ``information``)."""
PREFIXMON_CODE: Final = "prefixmon.code"
"""Low-cardinality failure code of the primary cause."""
PREFIXMON_DECISION: Final = "prefixmon.decision"
PREFIXMON_REACHED_ENVIRONMENT: Final = "prefixmon.reached_environment"
PREFIXMON_REPLACEMENT: Final = "prefixmon.replacement"
PREFIXMON_PLAN_STEP: Final = "prefixmon.plan_step"
PREFIXMON_DEVIATION: Final = "prefixmon.deviation"
"""How a call departs from the plan it follows: ``skipped``, ``repeated``, ``arguments_differ``
or ``not_in_plan`` (the full text is content: ``prefixmon.deviation.detail``)."""
PREFIXMON_DEVIATION_DETAIL: Final = "prefixmon.deviation.detail"
"""*Content*: the deviation as the record has it (may quote argument and result values)."""
PREFIXMON_FED: Final = "prefixmon.fed"
"""First-error depth: on the episode span the final FED (T+1 when fully executable); on a
call span the episode's FED so far, present from the first failure on."""
PREFIXMON_HORIZON: Final = "prefixmon.horizon"
PREFIXMON_OUTCOME: Final = "prefixmon.outcome"
PREFIXMON_STATUS: Final = "prefixmon.status"
"""``finished``, ``error`` or ``cancelled``."""
PREFIXMON_ALLOWS_NO_TOOL: Final = "prefixmon.allows_no_tool"
PREFIXMON_INVALID_REACHED_ENVIRONMENT: Final = "prefixmon.invalid_reached_environment"
PREFIXMON_FIRST_FAILURE_DEPTH: Final = "prefixmon.first_failure.depth"
PREFIXMON_FIRST_FAILURE_TOOL: Final = "prefixmon.first_failure.tool"
PREFIXMON_FIRST_FAILURE_CAUSE: Final = "prefixmon.first_failure.cause"
PREFIXMON_STARTED_AT: Final = "prefixmon.started_at"
"""Episode start as Unix nanoseconds; written only when enriching a framework's span
(whose own start time is not the episode's)."""
PREFIXMON_ENDED_AT: Final = "prefixmon.ended_at"
PREFIXMON_REASON: Final = "prefixmon.reason"
"""*Content*: the model-readable reason (may quote argument values)."""
PREFIXMON_ERROR: Final = "prefixmon.error"
"""*Content*: the environment's error message for a call."""
PREFIXMON_EPISODE_ERROR: Final = "prefixmon.episode.error"
"""The type name of the agent body's exception, when the episode ended with an error (no message: not content)."""
PREFIXMON_WHERE: Final = "prefixmon.where"
"""Where in the monitor an internal error happened."""

PREFIXMON_INTERNAL_ERROR: Final = "prefixmon.internal_error"
"""Event name: an error the monitor caught in itself during the episode (on the episode span;
attributes ``prefixmon.where`` and ``error.type``)."""
PREFIXMON_FIRST_FAILURE: Final = "prefixmon.first_failure"
"""Event name: the episode's first non-executable call (on that call's span and on the
episode span)."""

# --- metrics ----------------------------------------------------------------------------

METRIC_EPISODES: Final = "prefixmon.episodes"
"""Counter of finished episodes by outcome, executable, status and the chosen labels.
TER = episodes{executable=true} / episodes; RR = episodes{executable=false,
outcome=success} / episodes{executable=false}."""
METRIC_FED: Final = "prefixmon.episode.fed"
"""Histogram of first-error depth, one bucket per depth 1..max_depth (then overflow).
PEC(k) = share of observations above bucket k."""
METRIC_HORIZON: Final = "prefixmon.episode.horizon"
"""Histogram of horizons T, same buckets; n_k = observations at or above k."""
METRIC_EXECUTABLE_FRACTION: Final = "prefixmon.episode.executable_fraction"
"""Histogram of (FED - 1) / T per episode, the executable share of its horizon;
AUC-PEC = its sum / its count (the FED and horizon histograms cannot give it: it needs each
episode's FED and T together)."""
METRIC_CALLS: Final = "prefixmon.calls"
"""Counter of checked calls by executable, cause, decision and the chosen labels."""
METRIC_FIRST_FAILURES: Final = "prefixmon.first_failures"
"""Counter of episodes' primary causes (the cause at FED)."""
METRIC_INTERVENTIONS: Final = "prefixmon.interventions"
"""Counter of calls the monitor did not simply let through: block, replan, approve, edit,
deny, fail_closed (attributes ``prefixmon.decision``, ``prefixmon.executable``,
``prefixmon.cause`` when not executable, and the chosen labels)."""
METRIC_INTERNAL_ERRORS: Final = "prefixmon.internal_errors"
"""Counter of errors caught inside the monitor (attributes ``prefixmon.where``,
``error.type``)."""
