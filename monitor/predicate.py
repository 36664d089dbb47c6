"""The executability predicate: six checks, read top to bottom in tie-break order.

1. schema            the tool exists and is exposed; the arguments parse and fit the schema
2. dependency        every reference argument is bound, current and of the declared kind
3. precondition      every explicit precondition holds in the current state
4. state_consistency the environment accepts the call (known only after it ran; see
                     :func:`acceptance`)
5. information       every grounded argument's value is available information
6. provenance        every value of an argument with a provenance rule came from a source it allows

A schema failure stops the check (the arguments are unusable); otherwise every check runs so
that the verdict lists every failure, and the primary cause is the first in this order.

This module is the only place where executability is decided. The runtime (``Episode``)
and plan verification (``prefixmon.plan``) both call :func:`check`; plan verification passes
a copy-on-write view of the state and a :class:`PreconditionWatch`, and adds only what plans
need (placeholders, *undetermined*). :func:`transition` is the state change a call makes,
for the runtime and for plan simulation alike.
"""

from __future__ import annotations

from collections.abc import Container, Mapping
from typing import Any, Final, Protocol

from ._call import ParsedCall, parse_arguments, parse_call
from ._internal.trusted import trusted_constructor
from .exceptions import ArgumentError
from .rules.grounding import id_variants
from .rules.provenance import Provenance, ProvenanceIndex
from .rules.spec import Precondition, Ref, SymbolicEffect, ToolSpec, callable_name, values_at
from .state import TrackedState
from .toolset import Toolset
from .verdict import Failure, Fault, ToolCall, Undetermined, Verdict, quote
from .vocabulary import Cause

__all__ = (
    "Failure",
    "Fault",
    "PreconditionWatch",
    "ToolCall",
    "Undetermined",
    "Verdict",
    "acceptance",
    "check",
    "check_call",
    "check_declared",
    "check_dependencies",
    "check_information",
    "check_parsed",
    "check_preconditions",
    "check_provenance",
    "check_schema",
    "judge",
    "judge_precondition",
    "parse_arguments",
    "quote",
    "reference_failure",
    "schema_failure",
    "transition",
)

MAX_LISTED_TOOLS: Final = 20
MAX_DETAIL_CHARS: Final = 2_000
"""Environment errors and precondition messages are cut to this many characters in reasons."""


_executable: Final = trusted_constructor(
    Verdict, ("tool", "call_id", "depth", "executable", "failures", "args", "faults", "undetermined", "derived")
)
"""Every executable call makes a verdict: built without the frozen ``__init__`` (a measurable
share of the per-call overhead)."""


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
    call = parse_call(name, raw, None)
    failure = _unavailable(spec, toolset, state, name) or _unparsed(call)
    if spec is None or failure is not None or call.args is None:
        return spec, None, failure
    try:
        return spec, spec.validate(call.args), None
    except (ArgumentError, RecursionError) as e:
        return spec, None, _invalid(name, e)


def _unavailable(spec: ToolSpec | None, toolset: Toolset, state: TrackedState, name: str) -> Failure | None:
    """Why the tool ``name`` (whose spec is ``spec``; ``None``: not declared) cannot be called now, or ``None``."""
    if spec is None:
        return Failure(
            cause=Cause.SCHEMA,
            code="unknown_tool",
            reason=f"there is no tool named {quote(name)}{_available(toolset, state)}",
        )
    if not state.is_exposed(name):
        return Failure(
            cause=Cause.SCHEMA,
            code="not_exposed",
            reason=f"{name} is not available at this point{_available(toolset, state)}",
        )
    return None


def _unparsed(call: ParsedCall) -> Failure | None:
    """The schema failure of arguments that do not parse, or ``None`` when they do.

    Raises:
        Exception: what reading them raised, for the caller to report as a monitor fault.
    """
    if call.args is not None:
        return None
    if call.fault is not None:
        raise call.fault
    return Failure(cause=Cause.SCHEMA, code="invalid_json", reason=f"{call.tool}: {call.error}")


def _invalid(name: str, error: ArgumentError | RecursionError) -> Failure:
    """The schema failure of arguments that did not validate."""
    if isinstance(error, ArgumentError):
        return schema_failure(name, error)
    return Failure(cause=Cause.SCHEMA, code="invalid_arguments", reason=f"{name}: arguments are nested too deeply")


def schema_failure(name: str, error: ArgumentError) -> Failure:
    """The schema failure of arguments that do not fit: the located problems and their text."""
    return Failure(cause=Cause.SCHEMA, code="invalid_arguments", reason=f"{name}: {error}", problems=error.problems)


# 2. dependency -----------------------------------------------------------------------------
def reference_failure(toolset: Toolset, state: TrackedState, spec: ToolSpec, arg: str, ref: Ref, value: Any) -> Failure | None:
    """Why ``value`` at ``arg`` is not a bound, current reference of ``ref.kind``, or ``None`` when it is."""
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
    if state.batch is not None and (sibling := state.batch.sibling_failure(toolset, spec, arg, ref.kind, value)) is not None:
        return sibling
    producers = toolset.producers_of(ref.kind)
    source = f" ({', '.join(producers)} {'produces' if len(producers) == 1 else 'produce'} them)" if producers else ""
    alt = " or given by the user" if ref.user else ""
    other = state.binding(value)
    if other is not None:
        detail = f"{quote(value)} is a {other.kind}, not a {ref.kind}"
        code = "wrong_kind"
    elif ref.user and state.agent_made_up(value):
        detail = (
            f"{quote(value)} was first written by the agent itself, not returned by a tool or said by the user "
            "(the user repeating it is no evidence that it exists)"
        )
        code = "unbound_reference"
    elif not state.user_said(value) and state.seen(value):  # seen in a result, but not bound as this kind
        detail = f"{quote(value)} was not returned as a {ref.kind} by any earlier call{_looked_for(value, ref)}"
        code = "unbound_reference"
    else:
        detail = f"{quote(value)} was never returned by any tool{_looked_for(value, ref)}"
        code = "unbound_reference"
    return Failure(
        cause=Cause.DEPENDENCY,
        code=code,
        reason=f"{spec.name} needs a {ref.kind}{_for(arg, ref)} returned by an earlier call{source}{alt}; {detail}",
    )


def _looked_for(value: Any, ref: Ref) -> str:
    """Which forms of an id the dependency check looked for, and where (for the refusal's reason)."""
    if not isinstance(value, str) or not value.strip() or len(value) > 200 or len(value.split()) > 1:
        return ""  # (a value of several words is no id to look for in other forms)
    forms = ", ".join(quote(v) for v in id_variants(value))
    where = "among ids returned by tools and said by the user" if ref.user else "among ids returned by tools"
    return f" (looked for {forms} in any case {where})"


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
            failure = reference_failure(toolset, state, spec, loc, ref, value)
            if failure is not None:
                return failure
    return None


# 3. precondition ---------------------------------------------------------------------------
class PreconditionWatch(Protocol):
    """Lets plan verification see what a precondition read (the runtime passes none)."""

    def before(self, pre: Precondition, args: Mapping[str, Any]) -> Mapping[str, Any]:
        """``pre`` is about to be evaluated; returns the arguments it sees (a view that notes reads)."""

    def after(self, pre: Precondition, outcome: Failure | Undetermined | None, error: Exception | None) -> str | None:
        """Why the outcome of ``pre`` cannot be decided here (it is then undetermined), or ``None``."""


def judge_precondition(spec: ToolSpec, pre: Precondition, result: Any) -> Failure | Undetermined | None:
    """What a precondition's result means: ``None`` it holds, an :class:`Undetermined`, or the failure.

    ``True``, ``None`` and truthy non-strings (``1``, ``[1]``, ``numpy.bool_(True)``) hold; a
    non-empty string fails with it as the message (cut to :data:`MAX_DETAIL_CHARS`); any other
    falsy value fails with the precondition's own message.
    """
    if result is True or result is None:
        return None
    if isinstance(result, Undetermined):
        return result
    if isinstance(result, str):
        message = _cap(result) if result else pre.message or f"precondition {pre.name} does not hold"
    elif result:
        return None
    else:
        message = pre.message or f"precondition {pre.name} does not hold"
    return Failure(cause=Cause.PRECONDITION, code=f"precondition:{pre.name}", reason=f"{spec.name}: {message}")


def check_preconditions(
    state: TrackedState,
    spec: ToolSpec,
    args: Mapping[str, Any],
    faults: list[Fault],
    undetermined: list[str],
    watch: PreconditionWatch | None = None,
) -> Failure | None:
    """Every explicit precondition must hold; an exception is a monitor fault, not a failure.

    The first failure is returned; preconditions that could not be decided are appended to
    ``undetermined`` (their names) and exceptions to ``faults``.
    """
    for pre in spec.requires:
        seen = watch.before(pre, args) if watch is not None else args
        error: Exception | None = None
        outcome: Failure | Undetermined | None = None
        try:
            outcome = judge_precondition(spec, pre, pre.check(state, seen))
        except Exception as e:
            error = e
        if watch is not None and watch.after(pre, outcome, error) is not None:
            undetermined.append(pre.name)
            continue
        if error is not None:
            faults.append(Fault(where=f"precondition {pre.name or callable_name(pre.check)} of {spec.name}", error=error))
        elif isinstance(outcome, Undetermined):
            undetermined.append(pre.name)
        elif outcome is not None:
            return outcome
    return None


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
def check_information(
    state: TrackedState,
    spec: ToolSpec,
    args: Mapping[str, Any],
    derived: list[str] | None = None,
    sent: Container[str] | None = None,
) -> Failure | None:
    """Every grounded argument's value must have appeared in what the agent has seen.

    Each argument is matched as its :class:`~prefixmon.Grounded` says (``exact``,
    ``normalized``, ``derived``). Values that passed as derived are appended to ``derived``
    (``"amount: 150 = 3 * 50"``) when it is given.

    Args:
        sent: the argument names the call carried; a grounded argument it left out (filled in
            by its default) is not judged: the agent stated nothing. ``None``: every argument.
    """
    outcome = _information(state, spec, args, sent)
    if outcome is None or isinstance(outcome, Failure):
        return outcome
    if derived is not None:
        derived.extend(outcome)
    return None


def _information(
    state: TrackedState, spec: ToolSpec, args: Mapping[str, Any], sent: Container[str] | None
) -> Failure | tuple[str, ...] | None:
    """The information check: ``None`` every value was seen, the failure, or the derivations it accepted."""
    notes: tuple[str, ...] = ()
    for path, match in spec.grounded_match:
        if sent is not None and _top(path) not in sent:
            continue
        if "." not in path and "[]" not in path:
            value = args.get(path)
            if value is None or state.seen(value, match):  # fast path: a plain argument seen
                continue
            if not isinstance(value, (Mapping, list, tuple)):  # not seen: not looked up again
                outcome = _ungrounded(state, spec, path, value, match, path)
                if isinstance(outcome, Failure):
                    return outcome
                if outcome is not None:
                    notes += (outcome,)
                continue
        for loc, value in values_at(args, path):
            if isinstance(value, (Mapping, list, tuple)) or state.seen(value, match):
                continue
            outcome = _ungrounded(state, spec, loc, value, match, path)
            if isinstance(outcome, Failure):
                return outcome
            if outcome is not None:
                notes += (outcome,)
    return notes or None


def _ungrounded(state: TrackedState, spec: ToolSpec, loc: str, value: Any, match: str, path: str) -> Failure | str | None:
    """A value that was not seen: how it was derived (``"amount: 150 = 3 * 50"``), the failure, or ``None``
    when there is nothing to decide: a blank string states nothing, and a pool that had to leave values out
    cannot tell that this one was never seen."""
    if isinstance(value, str) and not value.strip():
        return None
    computed = ""
    if match == "derived":
        how = state.derivation(value)
        if how is not None:
            return f"{loc}: {how}"
        computed = ", nor computed from two numbers seen recently"
    if not state.pool_complete:
        return None
    return Failure(
        cause=Cause.INFORMATION,
        code="ungrounded",
        reason=(
            f"{spec.name}: {quote(value)} for '{loc}' did not appear in the user's messages or any earlier tool result{computed}"
        ),
        blocks=path in spec.grounded_blocking,
    )


# 6. provenance -----------------------------------------------------------------------------
MAX_NAMED_SOURCES: Final = 3
"""Sources a provenance refusal names at most."""


def check_provenance(
    state: TrackedState, spec: ToolSpec, args: Mapping[str, Any], sent: Container[str] | None = None
) -> Failure | None:
    """Every value of an argument with a :class:`~prefixmon.rules.provenance.Provenance` rule must come from a source it allows.

    A value no source said (the agent's own words) is not judged: whether it was seen is the
    information check's business. Free text the agent wrote is judged by its distinctive
    tokens (ids, numbers, links). O(size of the arguments).
    """
    index = state.provenance
    if index is None:
        return None
    for path, rule in spec.provenance.items():
        if "." not in path and "[]" not in path:  # a plain argument: no path walk
            if sent is not None and path not in sent:
                continue
            value = args.get(path)
            if value is not None and (failure := _provenance_of(index, spec, rule, path, value)) is not None:
                return failure
            continue
        if sent is not None and _top(path) not in sent:
            continue
        for loc, value in values_at(args, path):
            failure = _provenance_of(index, spec, rule, loc, value)
            if failure is not None:
                return failure
    return None


def _provenance_of(index: ProvenanceIndex, spec: ToolSpec, rule: Provenance, loc: str, value: Any) -> Failure | None:
    t = type(value)
    if t is str or t is int or t is float:  # the common values first
        mask = index.mask(value)
        if mask:
            return _judged(index, spec, rule, loc, mask, whole=True)
        return _tokens_of(index, spec, rule, loc, value) if t is str else None
    if isinstance(value, Mapping):
        for k, v in value.items():
            failure = _provenance_of(index, spec, rule, f"{loc}.{k}", v)
            if failure is not None:
                return failure
        return None
    if isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            failure = _provenance_of(index, spec, rule, f"{loc}[{i}]", v)
            if failure is not None:
                return failure
        return None
    mask = index.mask(value)
    if mask:
        return _judged(index, spec, rule, loc, mask, whole=True)
    return _tokens_of(index, spec, rule, loc, value) if isinstance(value, str) else None


def _tokens_of(index: ProvenanceIndex, spec: ToolSpec, rule: Provenance, loc: str, text: str) -> Failure | None:
    """Free text the agent wrote, by its distinctive tokens that a source said."""
    for m in index.token_masks(text):
        failure = _judged(index, spec, rule, loc, m, whole=False)
        if failure is not None:
            return failure
    return None


def _judged(index: ProvenanceIndex, spec: ToolSpec, rule: Provenance, loc: str, mask: int, *, whole: bool) -> Failure | None:
    """``None`` when a value said by the sources of ``mask`` may be used; else the failure, naming them."""
    allowed, denied = index.judge(rule)
    if mask & denied and not mask & index.user:
        return _untrusted(index, spec, loc, mask & denied, "which it may not carry", whole=whole, block=rule.block)
    if mask & allowed:
        return None
    return _untrusted(index, spec, loc, mask, f"not from {rule.describe()}", whole=whole, block=rule.block)


def _untrusted(index: ProvenanceIndex, spec: ToolSpec, loc: str, mask: int, why: str, *, whole: bool, block: bool) -> Failure:
    sources = index.sources(mask)
    named = ", ".join(s.describe() for s in sources[:MAX_NAMED_SOURCES])
    if len(sources) > MAX_NAMED_SOURCES:
        named += " and others"
    what = f"the value for '{loc}'" if whole else f"'{loc}' holds a value that"
    return Failure(
        cause=Cause.PROVENANCE,
        code="untrusted_source",
        reason=f"{spec.name}: {what} came from {named}, {why}",
        blocks=block,
    )


def _top(path: str) -> str:
    """The argument name a path starts with (``card.number`` and ``items[].id`` start with ``card`` and ``items``)."""
    end = len(path)
    for mark in (".", "["):
        at = path.find(mark)
        if at != -1 and at < end:
            end = at
    return path[:end]


def check(
    toolset: Toolset,
    state: TrackedState,
    name: str,
    raw_args: Mapping[str, Any] | str | bytes | None,
    *,
    depth: int,
    call_id: str | None = None,
) -> Verdict:
    """Judge one call before it runs (checks 1, 2, 3, 5 and 6)."""
    return check_declared(toolset.get(name), toolset, state, name, raw_args, depth, call_id)


def check_declared(
    spec: ToolSpec | None,
    toolset: Toolset,
    state: TrackedState,
    name: str,
    raw_args: Mapping[str, Any] | str | bytes | None,
    depth: int,
    call_id: str | None,
) -> Verdict:
    """:func:`check` of a tool whose spec the caller looked up already (``None``: not declared)."""
    if type(raw_args) is dict:  # nothing to parse: the common case
        return check_parsed(spec, toolset, state, name, raw_args, depth, call_id)
    return check_call(spec, toolset, state, parse_call(name, raw_args, call_id), depth)


def check_call(spec: ToolSpec | None, toolset: Toolset, state: TrackedState, call: ParsedCall, depth: int) -> Verdict:
    """:func:`check_declared` of a call whose arguments were parsed already (:func:`prefixmon._call.parse_call`)."""
    if call.args is not None:
        return check_parsed(spec, toolset, state, call.tool, call.args, depth, call.call_id)
    failure = _unavailable(spec, toolset, state, call.tool) or _unparsed(call)
    assert failure is not None  # (arguments that did not parse)
    return Verdict(tool=call.tool, call_id=call.call_id, depth=depth, executable=False, failures=(failure,))


def check_parsed(
    spec: ToolSpec | None,
    toolset: Toolset,
    state: TrackedState,
    name: str,
    parsed: dict[str, Any],
    depth: int,
    call_id: str | None,
) -> Verdict:
    """:func:`check_declared` of arguments parsed already into ``parsed``."""
    if spec is None or not state.is_exposed(name):
        failure = _unavailable(spec, toolset, state, name)
        assert failure is not None
        return Verdict(tool=name, call_id=call_id, depth=depth, executable=False, failures=(failure,))
    try:
        args = spec.validate(parsed)
    except (ArgumentError, RecursionError) as e:
        return Verdict(tool=name, call_id=call_id, depth=depth, executable=False, failures=(_invalid(name, e),))
    if not spec.has_rules:  # judge() would say the same, one frame later
        return _executable(spec.name, call_id, depth, True, (), args, (), (), ())
    return judge(toolset, state, spec, args, depth=depth, call_id=call_id, sent=parsed)


def judge(
    toolset: Toolset,
    state: TrackedState,
    spec: ToolSpec,
    args: Mapping[str, Any],
    *,
    depth: int,
    call_id: str | None = None,
    watch: PreconditionWatch | None = None,
    dependency: Failure | None = None,
    sent: Container[str] | None = None,
) -> Verdict:
    """Checks 2, 3, 5 and 6 of arguments that passed check 1.

    Args:
        watch: lets plan verification decide which precondition outcomes are undetermined.
        dependency: a dependency failure the caller already found (a plan step's placeholder
            that names no earlier step); the reference arguments are then not checked again.
        sent: the argument names the call carried (its parsed arguments); grounded arguments
            it left out are not judged (see :func:`check_information`).
    """
    if dependency is None and not spec.has_rules:  # nothing to check
        return _executable(spec.name, call_id, depth, True, (), args, (), (), ())
    failures: list[Failure] = []
    faults: list[Fault] = []
    undetermined: list[str] = []
    if dependency is None and spec.refs:
        dependency = check_dependencies(toolset, state, spec, args)
    if dependency is not None:
        failures.append(dependency)
    if spec.requires and (failure := check_preconditions(state, spec, args, faults, undetermined, watch)) is not None:
        failures.append(failure)
    derived: tuple[str, ...] = ()
    if spec.grounded and (information := _information(state, spec, args, sent)) is not None:
        if isinstance(information, Failure):
            failures.append(information)
        else:
            derived = information
    if spec.provenance and (provenance := check_provenance(state, spec, args, sent)) is not None:
        failures.append(provenance)
    if not failures and not faults and not undetermined:  # the common case
        return _executable(spec.name, call_id, depth, True, (), args, (), (), derived)
    return Verdict(
        tool=spec.name,
        call_id=call_id,
        depth=depth,
        executable=not failures,
        failures=tuple(failures),
        args=args,
        faults=tuple(faults),
        undetermined=tuple(undetermined),
        derived=derived,
    )


# after the call: the state transition ------------------------------------------------------
def transition(
    state: TrackedState, spec: ToolSpec, args: Mapping[str, Any], result: Any, *, accepted: bool, simulate: bool = False
) -> list[Fault]:
    """The change a call that ran makes to the tracked state; returns the faults met.

    The result is indexed into the information pool (and, when the environment accepted the
    call, its produced references are bound); after an accepted call the references it
    invalidates become stale and its effects run. Plan verification calls it with
    ``simulate=True`` and a placeholder result, which is not indexed (the plan's view binds
    produced references symbolically), and an effect with a plan-time version
    (:func:`~prefixmon.rules.spec.plan_effect`) runs that version instead.
    """
    faults: list[Fault] = []
    try:
        if result is not None and not simulate:  # a placeholder result holds nothing to index
            state.ingest(result, produce=spec.produce_plan if accepted and spec.produces else None, tool=spec.name)
        if accepted and spec.invalidates:
            for path, ref in spec.refs:
                if ref.kind in spec.invalidates:
                    for _, value in values_at(args, path):
                        state.invalidate(ref.kind, value, by=spec.name)
    except Exception as e:
        faults.append(Fault(where=f"tracking the result of {spec.name}", error=e))
    if accepted and spec.observe is not None:
        try:
            spec.observe(state, args, result)
        except Exception as e:
            faults.append(Fault(where=f"observing the result of {spec.name}", error=e))
    if accepted and spec.order_log is not None:
        state.log_order(spec.name, args, spec.order_log)
    if accepted and spec.effects:
        state.begin_effects()
        try:
            for effect in spec.effects:
                run = effect.simulate if simulate and type(effect) is SymbolicEffect else effect
                if run is None:
                    continue
                try:
                    run(state, args, result)
                except Exception as e:
                    faults.append(Fault(where=f"effect {callable_name(effect)} of {spec.name}", error=e))
        finally:
            state.end_effects()
    return faults
