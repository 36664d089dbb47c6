"""CEL expressions for spec-file preconditions (Google's CEL runtime, ``cel-expr-python``).

An expression is compiled and type-checked once, when its spec file is loaded, against the
variables it may read (``args``, the objects its rule binds, ``constants``); an undeclared name
or a syntax error is a load-time error. :meth:`Expression.tree` gives its checked syntax tree,
from which :func:`check_reads` checks the fields it reads of values whose JSON Schema is known
(a spec's arguments and constants). It is evaluated with an activation that holds only
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

import difflib
import json
import re
from collections.abc import Callable, Iterable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

__all__ = (
    "Aggregate",
    "Call",
    "Comprehension",
    "Constant",
    "Expression",
    "ExpressionError",
    "Ident",
    "Node",
    "NotObserved",
    "Select",
    "Shape",
    "UnknownField",
    "check_reads",
    "close_name",
    "compile_expression",
    "element_shape",
    "field_shape",
    "unknown_field",
)

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

    def tree(self) -> Node | None:
        """The checked syntax tree (macros expanded into comprehensions), for the loader's name checks.

        ``None`` when the runtime's serialised form is not the ``cel.expr.CheckedExpr`` this
        reads (another runtime version): the expression still runs, unchecked beyond CEL's own.
        """
        try:
            return _checked_tree(self._compiled.serialize())
        except (ValueError, IndexError, KeyError, AttributeError, RuntimeError):
            return None

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


# -- the syntax tree ------------------------------------------------------------------------------
# cel-expr-python has no Python AST; its ``serialize()`` is a ``google.protobuf.Any`` holding a
# ``cel.expr.CheckedExpr`` (cel-spec's checked.proto / syntax.proto). The few fields the name checks
# read are decoded here from the wire format, so no generated proto module is needed.


@dataclass(frozen=True, slots=True)
class Ident:
    """A name: a variable, a macro's loop variable or accumulator."""

    name: str
    offset: int


@dataclass(frozen=True, slots=True)
class Select:
    """``operand.field``; ``test`` for ``has(operand.field)``."""

    operand: Node
    field: str
    test: bool
    offset: int


@dataclass(frozen=True, slots=True)
class Call:
    """A function or operator (``_[_]`` is indexing, ``_&&_`` a conjunction); ``target`` for ``x.f(...)``."""

    function: str
    target: Node | None
    args: tuple[Node, ...]
    offset: int


@dataclass(frozen=True, slots=True)
class Constant:
    """A literal; ``value`` holds strings and integers (other literals are ``None``)."""

    value: str | int | None
    offset: int


@dataclass(frozen=True, slots=True)
class Aggregate:
    """A list, map or message literal: the expressions in it (keys and values)."""

    items: tuple[Node, ...]
    offset: int


@dataclass(frozen=True, slots=True)
class Comprehension:
    """What ``all``, ``exists``, ``exists_one``, ``map`` and ``filter`` expand to.

    ``iter_var`` (and ``iter_var2``) are bound in ``condition`` and ``step`` to each element of
    ``range`` (a list's elements, a map's keys); ``accu_var`` in ``condition``, ``step`` and ``result``.
    """

    iter_var: str
    iter_var2: str
    range: Node
    accu_var: str
    init: Node
    condition: Node
    step: Node
    result: Node
    offset: int


Node = Ident | Select | Call | Constant | Aggregate | Comprehension
"""One node of an expression's syntax tree."""

_Fields = dict[int, list[int | bytes]]


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = buf[i]
        i += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, i


def _message(buf: bytes) -> _Fields:
    """A protobuf message's fields, ``{number: [values]}`` (varints as ints, the rest as bytes)."""
    out: _Fields = {}
    i = 0
    while i < len(buf):
        key, i = _varint(buf, i)
        wire = key & 7
        value: int | bytes
        if wire == 0:
            value, i = _varint(buf, i)
        elif wire == 2:
            size, i = _varint(buf, i)
            value, i = buf[i : i + size], i + size
        elif wire in (1, 5):
            width = 8 if wire == 1 else 4
            value, i = buf[i : i + width], i + width
        else:
            raise ValueError(f"protobuf wire type {wire}")
        out.setdefault(key >> 3, []).append(value)
    return out


def _one(fields: _Fields, number: int) -> bytes:
    values = fields.get(number)
    value = values[-1] if values else b""
    if not isinstance(value, bytes):
        raise ValueError(f"field {number} is not a message")
    return value


def _text(fields: _Fields, number: int) -> str:
    return _one(fields, number).decode("utf-8")


def _number(fields: _Fields, number: int) -> int:
    values = fields.get(number)
    value = values[-1] if values else 0
    if not isinstance(value, int):
        raise ValueError(f"field {number} is not a number")
    return value - (1 << 64) if value >= 1 << 63 else value


def _checked_tree(serialized: bytes) -> Node:
    """The tree of a serialised ``Any(cel.expr.CheckedExpr)``, with source offsets from its source info."""
    wrapper = _message(serialized)
    if not _text(wrapper, 1).endswith("cel.expr.CheckedExpr"):
        raise ValueError("not a CheckedExpr")
    checked = _message(_one(wrapper, 2))
    positions: dict[int, int] = {}
    for entry in _message(_one(checked, 5)).get(4, []):  # SourceInfo.positions: map<int64, int32>
        if isinstance(entry, bytes):
            pair = _message(entry)
            positions[_number(pair, 1)] = _number(pair, 2)
    return _node(_one(checked, 4), positions, 0)


def _node(buf: bytes, positions: Mapping[int, int], depth: int) -> Node:
    """One ``cel.expr.Expr``: ``id`` 2, then one of const 3, ident 4, select 5, call 6, list 7, struct 8, comprehension 9."""
    if depth > 500:
        raise ValueError("nested too deeply")
    fields = _message(buf)
    offset = positions.get(_number(fields, 2), -1)

    def sub(body: _Fields, number: int) -> Node:
        return _node(_one(body, number), positions, depth + 1)

    if 4 in fields:
        return Ident(_text(_message(_one(fields, 4)), 1), offset)
    if 5 in fields:
        body = _message(_one(fields, 5))
        return Select(sub(body, 1), _text(body, 2), bool(_number(body, 3)), offset)
    if 6 in fields:
        body = _message(_one(fields, 6))
        target = sub(body, 1) if 1 in body else None
        args = tuple(_node(a, positions, depth + 1) for a in body.get(3, []) if isinstance(a, bytes))
        return Call(_text(body, 2), target, args, offset)
    if 7 in fields:
        body = _message(_one(fields, 7))
        return Aggregate(tuple(_node(e, positions, depth + 1) for e in body.get(1, []) if isinstance(e, bytes)), offset)
    if 8 in fields:
        items: list[Node] = []
        for entry in _message(_one(fields, 8)).get(2, []):  # CreateStruct.entries: map_key 3, value 4
            if isinstance(entry, bytes):
                body = _message(entry)
                items += [sub(body, n) for n in (3, 4) if n in body]
        return Aggregate(tuple(items), offset)
    if 9 in fields:
        body = _message(_one(fields, 9))
        return Comprehension(
            iter_var=_text(body, 1),
            iter_var2=_text(body, 8),
            range=sub(body, 2),
            accu_var=_text(body, 3),
            init=sub(body, 4),
            condition=sub(body, 5),
            step=sub(body, 6),
            result=sub(body, 7),
            offset=offset,
        )
    if 3 in fields:  # Constant: int64 3, string 6 (the values name checks use)
        body = _message(_one(fields, 3))
        value: str | int | None = _text(body, 6) if 6 in body else _number(body, 3) if 3 in body else None
        return Constant(value, offset)
    raise ValueError("an expression node of no known kind")


# -- fields an expression reads ---------------------------------------------------------------------
class UnknownField(ValueError):
    """An expression or path reads a field its value's schema does not declare; the message names both."""


@dataclass(frozen=True, slots=True)
class Shape:
    """What is known of a value's fields: a JSON Schema node (in its document, for local ``$ref``s) and its name.

    A spec's arguments have the tool's schema, its constants the file's values; observed objects
    and whatever an expression computes have none (``None``): results show their fields.
    """

    node: Any
    root: Any
    label: str
    """What has the fields, in a message: ``search``, ``args.payment``, ``an element of args.items``."""
    noun: str = "field"


def close_name(name: str, known: Iterable[str]) -> str:
    """``; did you mean 'query'?`` for a name one typo away from a known one, else nothing."""
    near = difflib.get_close_matches(name, list(known), n=1)
    return f"; did you mean {near[0]!r}?" if near else ""


def _schema(node: Any, root: Any) -> Mapping[str, Any] | None:
    """``node`` with local ``$ref``s followed and a one-branch ``anyOf``/``oneOf``/``allOf`` (an optional value) opened."""
    for _ in range(32):
        if not isinstance(node, Mapping):
            return None
        ref = node.get("$ref")
        if isinstance(ref, str):
            if not ref.startswith("#"):
                return None
            target: Any = root
            for part in ref[1:].strip("/").split("/") if ref.strip("#/") else ():
                target = target.get(part.replace("~1", "/").replace("~0", "~")) if isinstance(target, Mapping) else None
            node = target
            continue
        if "properties" not in node and "items" not in node:
            branches = next((node[k] for k in ("anyOf", "oneOf", "allOf") if isinstance(node.get(k), list)), None)
            if branches is not None:
                kept = [b for b in branches if not (isinstance(b, Mapping) and b.get("type") == "null")]
                if len(kept) != 1:
                    return None
                node = kept[0]
                continue
        return node
    return None


def _declared(shape: Shape) -> Mapping[str, Any] | None:
    """The fields a shape declares when they are all it may have; ``None`` when any name may be one."""
    node = _schema(shape.node, shape.root)
    properties = node.get("properties") if node is not None else None
    if node is None or not isinstance(properties, Mapping):
        return None
    extra = node.get("additionalProperties")
    if extra is True or isinstance(extra, Mapping) or node.get("patternProperties"):
        return None
    return properties


def unknown_field(shape: Shape | None, field: str) -> str | None:
    """Why ``field`` is not one of ``shape``'s (``search has no argument 'qery' (...)``), or ``None``."""
    declared = _declared(shape) if shape is not None else None
    if shape is None or declared is None or field in declared:
        return None
    known = f"its {shape.noun}s: {', '.join(sorted(declared))}" if declared else f"it has no {shape.noun}s"
    return f"{shape.label} has no {shape.noun} {field!r} ({known}{close_name(field, declared)})"


def field_shape(shape: Shape | None, field: str, shown: str) -> Shape | None:
    """The shape of ``shape``'s ``field`` (written ``shown``).

    Raises:
        UnknownField: ``shape`` declares its fields and ``field`` is not one: ``shown: why``.
    """
    problem = unknown_field(shape, field)
    if problem:
        raise UnknownField(f"{shown}: {problem}")
    declared = _declared(shape) if shape is not None else None
    if shape is None or declared is None:
        return None
    return Shape(declared[field], shape.root, shown)


def element_shape(shape: Shape | None, shown: str) -> Shape | None:
    """The shape of an element of a list-valued ``shape`` (its ``items``), written ``an element of shown``."""
    node = _schema(shape.node, shape.root) if shape is not None else None
    items = node.get("items") if node is not None else None
    if shape is None or not isinstance(items, Mapping):
        return None
    return Shape(items, shape.root, f"an element of {shown}")


def check_reads(node: Node, scope: Mapping[str, Shape | None]) -> Shape | None:
    """Check every field an expression reads of a value with a shape; returns the node's own shape.

    A macro's loop variable stands for an element of the list it runs over (a map's keys have
    no shape) and shadows an outer name of the same spelling; its accumulator has no shape.

    Raises:
        UnknownField: the first field read that its value does not declare.
    """
    if isinstance(node, Ident):
        return scope.get(node.name)
    if isinstance(node, Select):
        return field_shape(check_reads(node.operand, scope), node.field, _written(node))
    if isinstance(node, Call):
        if node.target is not None:
            check_reads(node.target, scope)
        shapes = [check_reads(arg, scope) for arg in node.args]
        if node.function == "_[_]" and len(node.args) == 2:
            key = node.args[1]
            if isinstance(key, Constant) and isinstance(key.value, str):
                return field_shape(shapes[0], key.value, _written(node))
            return element_shape(shapes[0], _written(node.args[0]))
        return None
    if isinstance(node, Aggregate):
        for item in node.items:
            check_reads(item, scope)
        return None
    if isinstance(node, Comprehension):
        element = element_shape(check_reads(node.range, scope), _written(node.range))
        check_reads(node.init, scope)
        inner = {**scope, node.accu_var: None}
        if node.iter_var2:  # two variables: a list's index and element (a map's key and value)
            inner.update({node.iter_var: None, node.iter_var2: element})
        else:
            inner[node.iter_var] = element
        check_reads(node.condition, inner)
        check_reads(node.step, inner)
        check_reads(node.result, {**scope, node.accu_var: None})
    return None


def _written(node: Node) -> str:
    """How a node is written, for messages: ``args.items[0].qty``."""
    if isinstance(node, Ident):
        return node.name
    if isinstance(node, Select):
        return f"{_written(node.operand)}.{node.field}"
    if isinstance(node, Call) and node.function == "_[_]" and len(node.args) == 2:
        key = node.args[1]
        index = json.dumps(key.value) if isinstance(key, Constant) and key.value is not None else "..."
        return f"{_written(node.args[0])}[{index}]"
    return "(...)"


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
