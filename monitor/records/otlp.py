"""Read exported OTLP JSON traces back into episode records.

Reads the JSON Lines format of the OpenTelemetry file exporter and of the Collector's
``file`` exporter: one ``TracesData`` (``ExportTraceServiceRequest``) object per line,
encoded per the OTLP JSON mapping (lowerCamelCase keys, hex trace and span ids, 64-bit
integers as strings). The protobuf field names (``trace_id``, ``string_value``) are
accepted too, as the JSON mapping requires of readers, and so are bare span objects as
some backends return them.

Only the prefixmon spans matter: episode spans (those carrying ``prefixmon.horizon``) and
call spans (``execute_tool``, ``apply_guardrail``, or a framework's own span that
prefixmon enriched) carrying ``prefixmon.depth``, matched on
``prefixmon.episode.id``. Everything else in the file is ignored.

Without content capture, spans carry no reasons or error messages (they may quote
argument values), so the records read back have ``reason`` and ``error`` empty; with
``capture_content=True`` the records read back equal the JSONL sink's records.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import dataclasses
import json
import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Final, Literal, cast

from .. import semconv as sc
from .._internal.json_depth import MAX_JSON_DEPTH, deeper_than
from .._internal.quoting import brief, quoted
from ..exceptions import RecordError
from ..vocabulary import Cause, Decision, Outcome
from .model import MAX_HORIZON, ActionRecord, BadLine, EpisodeRecord, build_record

__all__ = [
    "OtlpEvent",
    "OtlpSpan",
    "is_trace_line",
    "iter_otlp_spans",
    "read_otlp_records",
    "records_from_spans",
    "span_from_json",
    "spans_from_json",
]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_TRACE_KEYS: Final = frozenset({"resourceSpans", "resource_spans"})


@dataclass(frozen=True, slots=True, kw_only=True)
class OtlpEvent:
    """A span event, decoded."""

    name: str
    time_unix_nano: int = 0
    attributes: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class OtlpSpan:
    """A span, decoded from OTLP JSON: ids as lowercase hex, attributes as plain values."""

    trace_id: str
    span_id: str
    parent_span_id: str | None = None
    name: str
    kind: int = 0
    """OTLP ``SpanKind`` number (1 = INTERNAL)."""
    start_time_unix_nano: int = 0
    end_time_unix_nano: int = 0
    attributes: dict[str, Any] = field(default_factory=dict)
    events: tuple[OtlpEvent, ...] = ()
    status_code: int = 0
    """0 = UNSET, 1 = OK, 2 = ERROR."""
    status_message: str = ""
    resource: dict[str, Any] = field(default_factory=dict)
    scope: str = ""
    path: str | None = None
    """The file the span was read from, when read from one (named in errors)."""
    line: int | None = None
    """Its line in that file."""


_KINDS = {
    "SPAN_KIND_UNSPECIFIED": 0,
    "SPAN_KIND_INTERNAL": 1,
    "SPAN_KIND_SERVER": 2,
    "SPAN_KIND_CLIENT": 3,
    "SPAN_KIND_PRODUCER": 4,
    "SPAN_KIND_CONSUMER": 5,
}
_STATUS = {"STATUS_CODE_UNSET": 0, "STATUS_CODE_OK": 1, "STATUS_CODE_ERROR": 2, "UNSET": 0, "OK": 1, "ERROR": 2}


def _get(obj: Mapping[str, Any], camel: str, snake: str) -> Any:
    value = obj.get(camel)
    return obj.get(snake) if value is None else value


def _hex_id(value: Any, what: str) -> str:
    """OTLP JSON ids are hex; accept base64 (the plain protobuf JSON mapping) too."""
    if not value:
        return ""
    if not isinstance(value, str):
        raise ValueError(f"{what} must be a string, got {type(value).__name__}")
    text = value.lower()
    if len(text) in (16, 32) and all(c in "0123456789abcdef" for c in text):
        return text
    try:
        return base64.b64decode(value, validate=True).hex()
    except (binascii.Error, ValueError):
        raise ValueError(f"{what} {quoted(value)} is neither hex nor base64") from None


def _int(value: Any, what: str) -> int:
    if value is None or value == "":
        return 0
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ValueError(f"{what} must be an integer or a decimal string, got {quoted(value)}")
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"{what} must be an integer or a decimal string, got {quoted(value)}") from None


def _any_value(value: Any, key: str) -> Any:
    """Decode an OTLP ``AnyValue`` object into a plain Python value."""
    if not isinstance(value, Mapping):
        raise ValueError(f"attribute {quoted(key)}: value must be an object, got {quoted(value)}")
    if (v := _get(value, "stringValue", "string_value")) is not None:
        return v
    if (v := _get(value, "boolValue", "bool_value")) is not None:
        return bool(v)
    if (v := _get(value, "intValue", "int_value")) is not None:
        return _int(v, f"attribute {quoted(key)}")
    if (v := _get(value, "doubleValue", "double_value")) is not None:
        return float(v)
    if (v := _get(value, "arrayValue", "array_value")) is not None:
        return [_any_value(x, key) for x in v.get("values") or ()]
    if (v := _get(value, "kvlistValue", "kvlist_value")) is not None:
        return _attributes(v.get("values") or (), key)
    if (v := _get(value, "bytesValue", "bytes_value")) is not None:
        return base64.b64decode(v)
    return None


def _attributes(items: Any, where: str) -> dict[str, Any]:
    if items is None:
        return {}
    if isinstance(items, Mapping):  # some backends return attributes as a flat object
        return dict(items)
    out: dict[str, Any] = {}
    for kv in items:
        key = kv.get("key")
        if not isinstance(key, str):
            raise ValueError(f"{where}: attribute without a string key: {quoted(kv)}")
        out[key] = _any_value(kv.get("value") or {}, key)
    return out


def _enum(value: Any, table: Mapping[str, int], what: str) -> int:
    if value is None:
        return 0
    if isinstance(value, str) and not value.isdigit():
        if value not in table:
            raise ValueError(f"unknown {what} {quoted(value)}")
        return table[value]
    return _int(value, what)


def span_from_json(obj: Mapping[str, Any], *, resource: Mapping[str, Any] | None = None, scope: str = "") -> OtlpSpan:
    """Decode one OTLP JSON ``Span`` object.

    Raises:
        ValueError: a field has the wrong shape (the message names it).
    """
    name = obj.get("name")
    if not isinstance(name, str):
        raise ValueError(f"span without a name: {quoted(obj)}")
    status = obj.get("status") or {}
    events = tuple(
        OtlpEvent(
            name=str(e.get("name", "")),
            time_unix_nano=_int(_get(e, "timeUnixNano", "time_unix_nano"), "event time"),
            attributes=_attributes(e.get("attributes"), f"span {quoted(name)} event {quoted(e.get('name'))}"),
        )
        for e in obj.get("events") or ()
    )
    parent = _hex_id(_get(obj, "parentSpanId", "parent_span_id"), "parentSpanId")
    return OtlpSpan(
        trace_id=_hex_id(_get(obj, "traceId", "trace_id"), "traceId"),
        span_id=_hex_id(_get(obj, "spanId", "span_id"), "spanId"),
        parent_span_id=parent or None,
        name=name,
        kind=_enum(obj.get("kind"), _KINDS, "span kind"),
        start_time_unix_nano=_int(_get(obj, "startTimeUnixNano", "start_time_unix_nano"), "startTimeUnixNano"),
        end_time_unix_nano=_int(_get(obj, "endTimeUnixNano", "end_time_unix_nano"), "endTimeUnixNano"),
        attributes=_attributes(obj.get("attributes"), f"span {quoted(name)}"),
        events=events,
        status_code=_enum(status.get("code"), _STATUS, "status code"),
        status_message=str(status.get("message") or ""),
        resource=dict(resource or {}),
        scope=scope,
    )


def spans_from_json(obj: Mapping[str, Any]) -> list[OtlpSpan]:
    """Decode one ``TracesData`` / ``ExportTraceServiceRequest`` object into its spans.

    Also accepts ``{"data": [span, ...]}`` and ``{"spans": [...]}`` (span lists as tracing
    backends' REST APIs return them).

    Raises:
        ValueError: the object is not OTLP trace data (the message says what is wrong).
    """
    if not isinstance(obj, Mapping):
        raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
    resource_spans = _get(obj, "resourceSpans", "resource_spans")
    if resource_spans is None:
        bare = obj.get("data", obj.get("spans"))
        if isinstance(bare, list):
            return [span_from_json(s) for s in bare]
        keys = ", ".join(sorted(obj)) or "none"
        raise ValueError(f"not OTLP trace data: no resourceSpans (keys: {keys})")
    out: list[OtlpSpan] = []
    for rs in resource_spans:
        resource = _attributes((rs.get("resource") or {}).get("attributes"), "resource")
        scopes = _get(rs, "scopeSpans", "scope_spans")
        if scopes is None:  # OTLP before 0.15
            scopes = _get(rs, "instrumentationLibrarySpans", "instrumentation_library_spans") or ()
        for ss in scopes:
            scope_obj = ss.get("scope") or _get(ss, "instrumentationLibrary", "instrumentation_library") or {}
            scope = str(scope_obj.get("name") or "")
            out.extend(span_from_json(s, resource=resource, scope=scope) for s in ss.get("spans") or ())
    return out


def _loads(raw: bytes) -> Any:
    """A line's JSON; past :data:`MAX_JSON_DEPTH` levels it is refused before json recurses
    near the interpreter's limit (where a garbage collection's finalizers find no room)."""
    text = raw.decode("utf-8").removeprefix("\ufeff")
    if deeper_than(text, MAX_JSON_DEPTH):
        raise ValueError(f"nested too deeply (more than {MAX_JSON_DEPTH} levels)")
    return json.loads(text)


def is_trace_line(line: bytes) -> bool:
    """Whether a file whose first non-blank line is ``line`` holds OTLP JSON traces.

    It does when ``resourceSpans`` is a key at the top of the line's object, and ``schema``
    is not (a record may have a label, a tool or a value of that name). A line that is not
    JSON (cut short, damaged) is judged by how it starts.
    """
    try:
        obj = _loads(line)
    except (ValueError, RecursionError):
        start = line.removeprefix(b"\xef\xbb\xbf").lstrip()[:20]
        return start.startswith((b'{"resourceSpans"', b'{"resource_spans"'))
    return isinstance(obj, dict) and not obj.keys().isdisjoint(_TRACE_KEYS) and "schema" not in obj


def iter_otlp_spans(
    path: str | os.PathLike[str],
    *,
    on_error: Literal["raise", "skip"] = "raise",
    errors: list[BadLine] | None = None,
    lines: Iterable[bytes] | None = None,
) -> Iterator[OtlpSpan]:
    """Yield every span of an OTLP JSON Lines trace file.

    Args:
        path: the file (one ``TracesData`` object per line).
        on_error: ``"raise"`` stops at the first bad line with a :class:`RecordError`, a
            truncated last line included; ``"skip"`` skips it and appends a
            :class:`BadLine` to ``errors``.
        errors: where skipped lines are reported.
        lines: the file's lines when it is open already (a pipe can be read only once).
    """
    name = os.fspath(path)
    with contextlib.ExitStack() as stack:
        if lines is None:
            lines = stack.enter_context(open(name, "rb"))
        for line_no, raw in enumerate(lines, 1):
            if not raw.strip():
                continue
            truncated = not raw.endswith(b"\n")
            try:
                spans = spans_from_json(_loads(raw))
            except (ValueError, TypeError, AttributeError, RecursionError) as e:
                problem = "nested too deeply" if isinstance(e, RecursionError) else brief(str(e))
                msg = "truncated last line" if truncated else f"not OTLP JSON trace data: {problem}"
                if on_error == "raise":
                    raise RecordError(msg, path=name, line=line_no) from None
                if errors is not None:
                    errors.append(BadLine(path=name, line=line_no, message=msg, truncated=truncated))
                continue
            for span in spans:
                yield dataclasses.replace(span, path=name, line=line_no)


def _datetime(ns: int, what: str) -> datetime:
    """Nanoseconds since the epoch (``what`` names the field), rounded to the microsecond:
    some backends pass timestamps through a float."""
    try:
        return _EPOCH + timedelta(microseconds=(ns + 500) // 1000)
    except OverflowError:
        raise ValueError(f"{what} {quoted(ns)} is out of range (not a time a date can hold)") from None


def _opt_str(attrs: Mapping[str, Any], key: str) -> str | None:
    value = attrs.get(key)
    return None if value is None else str(value)


def _action(span: OtlpSpan) -> ActionRecord:
    a = span.attributes
    executable = bool(a.get(sc.PREFIXMON_EXECUTABLE, True))
    cause = a.get(sc.PREFIXMON_CAUSE)
    plan_step = a.get(sc.PREFIXMON_PLAN_STEP)
    return ActionRecord(
        depth=int(a[sc.PREFIXMON_DEPTH]),
        tool=_opt_str(a, sc.GEN_AI_TOOL_NAME),
        call_id=_opt_str(a, sc.GEN_AI_TOOL_CALL_ID),
        executable=executable,
        cause=None if cause is None else Cause(cause),
        reason=_opt_str(a, sc.PREFIXMON_REASON),
        decision=Decision(a.get(sc.PREFIXMON_DECISION, Decision.ALLOW.value)),
        reached_environment=bool(a.get(sc.PREFIXMON_REACHED_ENVIRONMENT, False)),
        error=_opt_str(a, sc.PREFIXMON_ERROR),
        turn=int(a.get(sc.PREFIXMON_TURN, 0)),
        replacement=_opt_str(a, sc.PREFIXMON_REPLACEMENT),
        plan_step=None if plan_step is None else int(plan_step),
        deviation=_opt_str(a, sc.PREFIXMON_DEVIATION_DETAIL) or _opt_str(a, sc.PREFIXMON_DEVIATION),
        code=_opt_str(a, sc.PREFIXMON_CODE) if not executable else None,
    )


def _episode(root: OtlpSpan, calls: list[OtlpSpan]) -> EpisodeRecord:
    a = root.attributes
    episode_id = str(a[sc.PREFIXMON_EPISODE_ID])
    episode = f"episode {quoted(episode_id)}"
    labels = {k[len(sc.PREFIXMON_LABEL_PREFIX) :]: str(v) for k, v in a.items() if k.startswith(sc.PREFIXMON_LABEL_PREFIX)}
    by_depth: dict[int, ActionRecord] = {}
    for span in calls:
        action = _action(span)
        by_depth[action.depth] = action  # a re-exported duplicate span carries the same data
    actions = [by_depth[d] for d in sorted(by_depth)]
    horizon = int(a[sc.PREFIXMON_HORIZON])
    if horizon > MAX_HORIZON and len(actions) != horizon:
        raise ValueError(f"{episode}: a horizon above {MAX_HORIZON:,} ({horizon}) must come with its call spans")
    allows_no_tool = bool(a.get(sc.PREFIXMON_ALLOWS_NO_TOOL, False))
    if actions and (len(actions) != horizon or actions[-1].depth != horizon or actions[0].depth != 1):
        missing = sorted(set(range(1, min(horizon, MAX_HORIZON) + 1)) - set(by_depth))[:20]
        raise ValueError(
            f"{episode}: horizon {horizon} but call spans for depths "
            f"{sorted(by_depth)} (missing {missing}: dropped or sampled out)"
        )
    outcome = a.get(sc.PREFIXMON_OUTCOME)
    started = sc.PREFIXMON_STARTED_AT if sc.PREFIXMON_STARTED_AT in a else "startTimeUnixNano"
    ended = sc.PREFIXMON_ENDED_AT if sc.PREFIXMON_ENDED_AT in a else "endTimeUnixNano"
    start_ns = int(a.get(sc.PREFIXMON_STARTED_AT, root.start_time_unix_nano))
    end_ns = int(a.get(sc.PREFIXMON_ENDED_AT, root.end_time_unix_nano))
    status = str(a.get(sc.PREFIXMON_STATUS, "finished"))
    if status not in ("finished", "error", "cancelled"):
        raise ValueError(f"{episode}: unknown status {quoted(status)}")
    record = build_record(
        episode_id=episode_id,
        task_id=str(a.get(sc.PREFIXMON_TASK_ID, "")),
        labels=labels,
        actions=actions,
        outcome=None if outcome is None else Outcome(outcome),
        started_at=_datetime(start_ns, started),
        ended_at=_datetime(end_ns, ended),
        status=cast(Literal["finished", "error", "cancelled"], status),
        error=_opt_str(a, sc.PREFIXMON_EPISODE_ERROR),
        allows_no_tool=allows_no_tool,
    )
    fed = a.get(sc.PREFIXMON_FED)
    if record.horizon != horizon or (fed is not None and record.fed != int(fed)):
        raise ValueError(
            f"{episode}: the episode span says horizon {horizon}, fed {fed}, but its "
            f"call spans give horizon {record.horizon}, fed {record.fed}"
        )
    return record


def records_from_spans(
    spans: Iterable[OtlpSpan],
    *,
    on_error: Literal["raise", "skip"] = "raise",
    errors: list[str] | None = None,
    bad: list[BadLine] | None = None,
) -> list[EpisodeRecord]:
    """Rebuild the episode records of every prefixmon episode among ``spans``.

    Episodes come back in order of their start time.

    Args:
        spans: decoded spans, in any order, possibly mixed with unrelated spans.
        on_error: ``"raise"`` stops at the first incomplete episode with a
            :class:`RecordError` naming the file and line of its episode span (when read
            from a file); ``"skip"`` leaves it out and appends a message to ``errors``.
        errors: where skipped episodes are reported (messages).
        bad: where skipped episodes are reported as :class:`BadLine`, with file and line.
    """
    roots: dict[str, OtlpSpan] = {}
    calls: dict[str, list[OtlpSpan]] = {}
    for span in spans:
        a = span.attributes
        episode_id = a.get(sc.PREFIXMON_EPISODE_ID)
        if episode_id is None:
            continue
        if sc.PREFIXMON_HORIZON in a:
            roots[str(episode_id)] = span
        elif sc.PREFIXMON_DEPTH in a and a.get(sc.GEN_AI_OPERATION_NAME) in (sc.EXECUTE_TOOL, sc.APPLY_GUARDRAIL):
            calls.setdefault(str(episode_id), []).append(span)
    out: list[EpisodeRecord] = []
    for episode_id, root in sorted(roots.items(), key=lambda kv: (kv[1].start_time_unix_nano, kv[0])):
        try:
            out.append(_episode(root, calls.get(episode_id, [])))
        except (ValueError, KeyError, TypeError, OverflowError) as e:
            text = brief(f"missing attribute {e}" if isinstance(e, KeyError) else str(e))
            msg = text if text.startswith("episode ") else f"episode {quoted(episode_id)}: {text}"
            if on_error == "raise":
                raise RecordError(f"cannot rebuild the record: {msg}", path=root.path, line=root.line) from None
            if errors is not None:
                errors.append(msg)
            if bad is not None:
                bad.append(BadLine(path=root.path or "", line=root.line or 0, message=msg))
    orphans = sorted(set(calls) - set(roots))
    for orphan in orphans:
        msg = f"episode {quoted(orphan)}: call spans but no episode span (not finished or not exported)"
        if errors is not None:
            errors.append(msg)
        if bad is not None:
            span = calls[orphan][0]
            bad.append(BadLine(path=span.path or "", line=span.line or 0, message=msg))
    return out


def read_otlp_records(
    *paths: str | os.PathLike[str],
    on_error: Literal["raise", "skip"] = "raise",
) -> list[EpisodeRecord]:
    """Read OTLP JSON Lines trace files and rebuild their episode records.

    Raises:
        RecordError: a line is not OTLP trace data, or an episode's spans are incomplete
            (with ``on_error="raise"``).
    """
    spans = [s for p in paths for s in iter_otlp_spans(p, on_error=on_error)]
    return records_from_spans(spans, on_error=on_error)
