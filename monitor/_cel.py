"""CEL expressions for spec-file preconditions (Google's CEL runtime, ``cel-expr-python``).

An expression is compiled and type-checked once, when its spec file is loaded, against the
variables it may read (``args``, the objects its rule binds, ``constants``); an undeclared name
or a syntax error is a load-time error. It is evaluated with an activation that holds only
those variables, so its cost does not depend on the size of the state. A field the
expression reads that the observed object lacks is *not observed*, which the caller turns
into an undetermined precondition.

Beside CEL's standard library, expressions may call:

- ``sum(list)``: the sum of a list of numbers (``0`` for an empty list; a ``double`` when any
  element is one). CEL compares ints with doubles but does not add them: write
  ``double(sum(a)) - double(sum(b))`` where either may hold prices with cents;
- ``time(string)``: the timestamp of an ISO date or date-time (``"2024-05-20"`` is its
  midnight; ``"2024-05-15T15:00:00"``, ``"2024-05-15 15:00:00"``, with ``Z`` or an offset or
  without). A time without an offset is read in the policy's own clock zone (all naive times
  are compared in that one zone), so ``time(f.date) < time(constants.now)`` says "before
  the policy's current time" and ``time(constants.now) - time(r.created_at) <= duration("24h")``
  "booked within a day"; CEL's ``timestamp``/``duration`` arithmetic applies. A value that is
  not such a date makes the expression undetermined, not false;
- ``zip(a, b)``: the pairs ``[a[0], b[0]], [a[1], b[1]], ...`` (as long as the shorter list), for
  lists whose elements correspond by position: ``zip(args.item_ids, args.new_item_ids).all(p,
  p[0] != p[1])``;
- ``seen(kind, id)``: the observed object of ``kind`` with ``id`` (a value or a list, for a
  composite id such as ``[f.flight_number, f.date]``), looked up in O(1) while the expression
  runs; one never observed (or that may have changed since) makes the expression
  undetermined, unless CEL's logic decides without it (``true || ...``, a false element of
  ``all``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any, Final

__all__ = ("Expression", "ExpressionError", "NotObserved", "compile_expression")

INSTALL_HINT: Final = 'pip install "prefixmon[cel]"'

Lookup = Callable[[str, Any], Mapping[str, Any]]
"""``(kind, id) -> fields`` for ``seen()``: raises :class:`NotObserved` when the object does not decide."""

_LOOKUP: ContextVar[Lookup | None] = ContextVar("prefixmon_cel_lookup", default=None)
"""The lookup of the evaluation in progress (set around each evaluation: async- and thread-safe)."""

_UNSEEN: Final = "not observed"
_UNDECIDED: Final = "cannot decide"
"""Marks a helper's failure on a value it cannot read (a date that is not one): undetermined, not false."""
_ISO_TIME: Final = re.compile(r"^\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d{1,6})?)?)?(?:Z|[+-]\d{2}:\d{2})?$")
"""What ``time()`` reads: an ISO date, or date and time, with an optional ``Z`` or offset."""


class ExpressionError(Exception):
    """An expression could not be compiled (the message says where and why)."""


class NotObserved(Exception):
    """The expression read a field that the observed objects do not have."""


def _cel() -> Any:
    try:
        from cel_expr_python import cel  # type: ignore[import-untyped]
    except ImportError as e:  # the optional extra
        raise ImportError(INSTALL_HINT) from e
    return cel


class Expression:
    """A compiled CEL expression over a fixed set of variables."""

    __slots__ = ("_compiled", "source", "variables")

    def __init__(self, compiled: Any, source: str, variables: tuple[str, ...]) -> None:
        self._compiled = compiled
        self.source = source
        self.variables = variables

    def evaluate(self, activation: Mapping[str, Any], lookup: Lookup | None = None) -> Any:
        """The expression's value; ``lookup`` answers its ``seen()`` calls.

        Raises:
            NotObserved: it read a field or key that is absent.
            RuntimeError: any other evaluation error (a type mismatch, a division by zero).
        """
        token = _LOOKUP.set(lookup)
        try:
            value = self._compiled.eval(data=activation)
        finally:
            _LOOKUP.reset(token)
        result = value.value()
        if value.type().name() == "ERROR":
            text = str(result)
            if text.startswith("NOT_FOUND") or "no such key" in text.lower() or _UNSEEN in text or _UNDECIDED in text:
                raise NotObserved(text)
            raise RuntimeError(f"the expression {self.source!r} failed: {text}")
        return result


def compile_expression(source: str, variables: Iterable[str]) -> Expression:
    """Compile and type-check ``source`` against ``variables`` (each of dynamic type).

    Raises:
        ExpressionError: a syntax error or an undeclared reference, with the column.
        ImportError: the ``cel`` extra is not installed (the message is the install command).
    """
    cel = _cel()
    names = tuple(dict.fromkeys(variables))
    env = cel.NewEnv(variables={name: cel.Type.DYN for name in names}, functions=_functions(cel))
    try:
        compiled = env.compile(source)
    except RuntimeError as e:
        raise ExpressionError(_tidy(str(e))) from None
    return Expression(compiled, source, names)


def _sum(values: list[Any]) -> Any:
    total: Any = 0
    for value in values:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise LookupError(f"{_UNDECIDED}: sum() adds numbers, not {type(value).__name__}")
        total += value
    return total


def _zip(first: list[Any], second: list[Any]) -> list[list[Any]]:
    return [[a, b] for a, b in zip(first, second, strict=False)]


def _time(text: str) -> datetime:
    """An ISO date or date-time as an aware timestamp (naive ones in one fixed zone: the policy clock's)."""
    if not _ISO_TIME.match(text):
        raise LookupError(f"{_UNDECIDED}: {text[:40]!r} is not an ISO date or date-time")
    try:
        value = datetime.fromisoformat(text.replace(" ", "T", 1).replace("Z", "+00:00"))
    except ValueError:  # matches the pattern but is no date: 2024-02-30
        raise LookupError(f"{_UNDECIDED}: {text[:40]!r} is not a date") from None
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def _seen(kind: str, ident: Any) -> Any:
    lookup = _LOOKUP.get()
    if lookup is None:
        raise LookupError(f"{_UNSEEN}: no observed objects here")
    return dict(lookup(kind, ident))


def _seen_fields(kind: str, ident: Any) -> Any:
    try:
        return _seen(kind, ident)
    except NotObserved as e:
        raise LookupError(f"{_UNSEEN}: {e}") from None


def _functions(cel: Any) -> list[Any]:
    """Declarations (with implementations) of the functions expressions may call beside CEL's own."""
    dyn, listed = cel.Type.DYN, cel.Type.List(cel.Type.DYN)
    return [
        cel.FunctionDecl("sum", [cel.Overload("prefixmon_sum_list", dyn, [listed], impl=_sum)]),
        cel.FunctionDecl("zip", [cel.Overload("prefixmon_zip_lists", cel.Type.List(listed), [listed, listed], impl=_zip)]),
        cel.FunctionDecl("time", [cel.Overload("prefixmon_time_string", cel.Type.TIMESTAMP, [cel.Type.STRING], impl=_time)]),
        cel.FunctionDecl(
            "seen",
            [
                cel.Overload(f"prefixmon_seen_{name}", dyn, [cel.Type.STRING, type_], impl=_seen_fields)
                for name, type_ in (("list", listed), ("string", cel.Type.STRING), ("int", cel.Type.INT))
            ],
        ),
    ]


def _tidy(message: str) -> str:
    """The runtime's message without its status prefix and suffix, on one line."""
    text = message.removeprefix("INVALID_ARGUMENT: ").removesuffix(" [INVALID_ARGUMENT]")
    lines = [line for line in text.splitlines() if line.strip()]
    head = lines[0].removeprefix("ERROR: <input>:") if lines else text
    return head.strip()
