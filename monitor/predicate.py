"""The executability predicate: five checks, read top to bottom in tie-break order.

1. schema            the tool exists and is exposed; the arguments parse and fit the schema
2. dependency        every reference argument is bound, current and of the declared kind
3. precondition      every explicit precondition holds in the current state
4. state_consistency the environment accepts the call (known only after it ran; see
                     :func:`acceptance`)
5. information       every grounded argument's value is available information

A schema failure stops the check (the arguments are unusable); otherwise every check runs so
that the verdict lists every failure, and the primary cause is the first in this order.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import fields
from typing import Any, Final

from .exceptions import ArgumentError
from .spec import Precondition, Ref, Toolset, ToolSpec, values_at
from .state import TrackedState
from .verdict import Failure, Fault, ToolCall, Undetermined, Verdict
from .vocabulary import Cause

__all__ = (
    "Failure",
    "Fault",
    "ToolCall",
    "Undetermined",
    "Verdict",
    "acceptance",
    "check",
    "check_dependencies",
    "check_information",
    "check_preconditions",
    "check_schema",
    "parse_arguments",
)

MAX_VALUE_REPR: Final = 60
"""Values quoted in reasons are cut to this many characters."""
MAX_LISTED_TOOLS: Final = 20
MAX_DETAIL_CHARS: Final = 2_000
"""Environment errors and precondition messages are cut to this many characters in reasons."""


_VERDICT_FIELDS: Final = ("tool", "call_id", "depth", "executable", "failures", "args", "faults", "undetermined")
_VERDICT_SETTERS: Final = tuple(getattr(Verdict, f).__set__ for f in _VERDICT_FIELDS)
_FAST_VERDICT: Final = tuple(f.name for f in fields(Verdict)) == _VERDICT_FIELDS


def _executable(name: str, call_id: str | None, depth: int, args: Mapping[str, Any]) -> Verdict:
    """``Verdict(tool=name, call_id=call_id, depth=depth, executable=True, args=args)``, built faster.

    Every executable call makes one, and a frozen dataclass's ``__init__`` costs twice as much
    as setting its slots directly (a measurable share of the per-call overhead).
    """
    if not _FAST_VERDICT:  # the fields changed: the plain constructor is always right
        return Verdict(tool=name, call_id=call_id, depth=depth, executable=True, args=args)
    v: Verdict = object.__new__(Verdict)
    tool, cid, dep, exe, failures, arguments, faults, undetermined = _VERDICT_SETTERS
    tool(v, name)
    cid(v, call_id)
    dep(v, depth)
    exe(v, True)
    failures(v, ())
    arguments(v, args)
    faults(v, ())
    undetermined(v, ())
    return v


def quote(value: Any) -> str:
    """A short repr of a value for a reason."""
    text = repr(value)
    return text if len(text) <= MAX_VALUE_REPR else text[: MAX_VALUE_REPR - 3] + "..."


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


_DECODER: Final = json.JSONDecoder(parse_constant=_reject_constant)
"""One decoder for every call (``json.loads`` with an option builds a new one each time)."""


def parse_arguments(raw: Mapping[str, Any] | str | bytes | None) -> dict[str, Any] | str:
    """Parse raw arguments into a dict, or return a reason why they do not parse."""
    if raw is None:
        return {}
    if isinstance(raw, dict):
        return raw
    if type(raw) is not str:  # JSON text, the other common case, skips these checks
        if isinstance(raw, Mapping):
            return dict(raw)
        if isinstance(raw, (bytes, bytearray, memoryview)):
            raw = bytes(raw)
            try:
                raw = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                return f"arguments are not valid UTF-8 (byte 0x{raw[e.start]:02x} at position {e.start})"
        if not isinstance(raw, str):
            return f"arguments must be a JSON object, got {type(raw).__name__}"
    if not raw or raw.isspace():  # (no stripped copy of a large payload)
        return {}
    try:
        if raw.startswith("\ufeff"):  # as json.loads does
            raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", raw, 0)
        parsed = _DECODER.decode(raw)
    except json.JSONDecodeError as e:
        return f"arguments are not valid JSON: {e} ({len(raw)} characters in all)"
    except ValueError as e:
        return f"arguments are not valid JSON ({e})"
    except RecursionError:
        return "arguments are nested too deeply to parse"
    if not isinstance(parsed, dict):
        return f"arguments must be a JSON object, got {type(parsed).__name__}"
    return parsed


def _available(toolset: Toolset, state: TrackedState) -> str:
    names = sorted(state.exposed)
    if not names:
        return ""
    shown = ", ".join(names[:MAX_LISTED_TOOLS])
    more = f" and {len(names) - MAX_LISTED_TOOLS} more" if len(names) > MAX_LISTED_TOOLS else ""
    return f"; available tools: {shown}{more}"


# 1. schema ---------------------------------------------------------------------------------
def check_schema(
    toolset: Toolset, state: TrackedState, name: str, raw: Mapping[str, Any] | str | bytes | None
) -> tuple[ToolSpec | None, dict[str, Any] | None, Failure | None]:
    """Tool existence and exposure, argument parsing and schema fit."""
    spec = toolset.get(name)
    if spec is None:
        return (
            None,
            None,
            Failure(
                cause=Cause.SCHEMA,
                code="unknown_tool",
                reason=f"there is no tool named {quote(name)}{_available(toolset, state)}",
            ),
        )
    if name not in state.exposed:
        return (
            spec,
            None,
            Failure(
                cause=Cause.SCHEMA,
                code="not_exposed",
                reason=f"{name} is not available at this point{_available(toolset, state)}",
            ),
        )
    parsed = parse_arguments(raw)
    if isinstance(parsed, str):
        return spec, None, Failure(cause=Cause.SCHEMA, code="invalid_json", reason=f"{name}: {parsed}")
    try:
        args = spec.validate(parsed)
    except ArgumentError as e:
        return spec, None, Failure(cause=Cause.SCHEMA, code="invalid_arguments", reason=f"{name}: {e}", problems=e.problems)
    except RecursionError:
        return (
            spec,
            None,
            Failure(cause=Cause.SCHEMA, code="invalid_arguments", reason=f"{name}: arguments are nested too deeply"),
        )
    return spec, args, None


# 2. dependency -----------------------------------------------------------------------------
def _reference_failure(toolset: Toolset, state: TrackedState, spec: ToolSpec, arg: str, ref: Ref, value: Any) -> Failure | None:
    binding = state.binding(value, ref.kind)
    if binding is not None:
        if binding.current:
            return None
        by = f" by {binding.stale_by}" if binding.stale_by else ""
        return Failure(
            cause=Cause.DEPENDENCY,
            code="stale_reference",
            reason=(
                f"{spec.name} needs a current {ref.kind}{_for(arg, ref)}; {quote(value)} was returned by "
                f"{binding.tool or 'an earlier call'} but is no longer valid (invalidated{by} at step {binding.stale_depth})"
            ),
        )
    if ref.user and state.user_said(value):
        return None
    producers = toolset.producers_of(ref.kind)
    source = f" ({', '.join(producers)} {'produces' if len(producers) == 1 else 'produce'} them)" if producers else ""
    alt = " or given by the user" if ref.user else ""
    other = state.binding(value)
    if other is not None:
        detail = f"{quote(value)} is a {other.kind}, not a {ref.kind}"
        code = "wrong_kind"
    else:
        detail = f"{quote(value)} was never returned by any tool"
        code = "unbound_reference"
    return Failure(
        cause=Cause.DEPENDENCY,
        code=code,
        reason=f"{spec.name} needs a {ref.kind}{_for(arg, ref)} returned by an earlier call{source}{alt}; {detail}",
    )


def _for(arg: str, ref: Ref) -> str:
    return "" if arg == ref.kind else f" for '{arg}'"


def check_dependencies(toolset: Toolset, state: TrackedState, spec: ToolSpec, args: Mapping[str, Any]) -> Failure | None:
    """Every reference argument must be bound, current and of its kind."""
    for path, ref in spec.refs:
        value = args.get(path) if "." not in path and "[]" not in path else None
        if type(value) is str:  # fast path: a plain argument holding one current reference
            binding = state.binding(value, ref.kind)
            if binding is not None and binding.current:
                continue
        for loc, value in values_at(args, path):
            failure = _reference_failure(toolset, state, spec, loc, ref, value)
            if failure is not None:
                return failure
    return None


# 3. precondition ---------------------------------------------------------------------------
def check_preconditions(
    state: TrackedState, spec: ToolSpec, args: Mapping[str, Any], faults: list[Fault], undetermined: list[str]
) -> Failure | None:
    """Every explicit precondition must hold; an exception is a monitor fault, not a failure."""
    for pre in spec.requires:
        try:
            result = pre.check(state, args)
        except Exception as e:
            faults.append(Fault(where=f"precondition {pre.name} of {spec.name}", error=e))
            continue
        if result is True or result is None:
            continue
        if isinstance(result, Undetermined):
            undetermined.append(pre.name)
            continue
        if not isinstance(result, str) and result:  # truthy non-strings hold too (1, numpy.bool_(True))
            continue
        return Failure(cause=Cause.PRECONDITION, code=f"precondition:{pre.name}", reason=f"{spec.name}: {_message(pre, result)}")
    return None


def _message(pre: Precondition, result: Any) -> str:
    if isinstance(result, str) and result:
        return _cap(result)
    return pre.message or f"precondition {pre.name} does not hold"


def _cap(text: str) -> str:
    """Cut a message the monitor does not control (records and reasons stay bounded)."""
    if len(text) <= MAX_DETAIL_CHARS:
        return text
    return f"{text[:MAX_DETAIL_CHARS]}... [{len(text) - MAX_DETAIL_CHARS} more characters]"


def _describe(error: BaseException) -> str:
    try:
        text = str(error)
    except Exception:  # an exception whose __str__ raises is still a rejection
        text = "<unprintable message>"
    return f"{type(error).__name__}: {text}"


# 4. state consistency (after the call) -----------------------------------------------------
def acceptance(
    spec: ToolSpec | None, name: str, *, result: Any = None, error: BaseException | str | None = None
) -> Failure | None:
    """Whether the environment accepted a call that ran: no exception, no error result."""
    if error is not None:
        detail = _cap(error if isinstance(error, str) else _describe(error))
        return Failure(
            cause=Cause.STATE_CONSISTENCY, code="environment_error", reason=f"{name} was rejected by the environment: {detail}"
        )
    if spec is not None and spec.error_result is not None:
        reason = spec.error_result(result)
        if reason:
            return Failure(
                cause=Cause.STATE_CONSISTENCY,
                code="error_result",
                reason=f"{name} was rejected by the environment: {_cap(str(reason))}",
            )
    return None


# 5. information ----------------------------------------------------------------------------
def check_information(state: TrackedState, spec: ToolSpec, args: Mapping[str, Any]) -> Failure | None:
    """Every grounded argument's value must have appeared in what the agent has seen."""
    for path in spec.grounded:
        value = args.get(path) if "." not in path and "[]" not in path else None
        if value is not None and state.seen(value):  # fast path: a plain argument seen as is
            continue
        for loc, value in values_at(args, path):
            if isinstance(value, (Mapping, list, tuple)) or state.seen(value):
                continue
            return Failure(
                cause=Cause.INFORMATION,
                code="ungrounded",
                reason=(
                    f"{spec.name}: {quote(value)} for '{loc}' did not appear in the user's messages or any earlier tool result"
                ),
            )
    return None


def check(
    toolset: Toolset,
    state: TrackedState,
    name: str,
    raw_args: Mapping[str, Any] | str | bytes | None,
    *,
    depth: int,
    call_id: str | None = None,
) -> Verdict:
    """Judge one call before it runs (checks 1, 2, 3 and 5)."""
    spec, args, failure = check_schema(toolset, state, name, raw_args)
    if spec is None or args is None:
        assert failure is not None
        return Verdict(tool=name, call_id=call_id, depth=depth, executable=False, failures=(failure,))
    failures: list[Failure] = []
    faults: list[Fault] = []
    undetermined: list[str] = []
    if spec.refs and (failure := check_dependencies(toolset, state, spec, args)) is not None:
        failures.append(failure)
    if spec.requires and (failure := check_preconditions(state, spec, args, faults, undetermined)) is not None:
        failures.append(failure)
    if spec.grounded and (failure := check_information(state, spec, args)) is not None:
        failures.append(failure)
    if not failures and not faults and not undetermined:  # the common case
        return _executable(name, call_id, depth, args)
    return Verdict(
        tool=name,
        call_id=call_id,
        depth=depth,
        executable=not failures,
        failures=tuple(failures),
        args=args,
        faults=tuple(faults),
        undetermined=tuple(undetermined),
    )
