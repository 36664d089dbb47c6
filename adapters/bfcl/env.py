"""BFCL's own environment classes, driven without ``eval``.

A :class:`BfclEnv` holds one instance of each class a task involves, loaded from the task's
``initial_config`` through ``_load_scenario`` (on a deep copy, as BFCL does). Calls are
parsed from Python-call strings with :mod:`ast` (values through ``ast.literal_eval``; any
other expression is refused) and executed as ``getattr(instance, name)(**kwargs)``.
"""

from __future__ import annotations

import ast
import copy
import importlib
import inspect
import json
import types
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any, Final, Union, get_args, get_origin, get_type_hints

from prefixmon import SpecError
from prefixmon.records.jsonlines import too_deep

from .._json import copy_json
from .data import BfclTask, function_classes

__all__ = (
    "STATELESS_CLASSES",
    "BfclCall",
    "BfclEnv",
    "CallParseError",
    "argument_problem",
    "bfcl_error_text",
    "bfcl_result_text",
    "calls_from_object",
    "environment_class",
    "invoke",
    "parse_call",
    "parse_calls",
    "rejection",
    "signature",
)

_MODULES: Final[Mapping[str, str]] = {
    "GorillaFileSystem": "gorilla_file_system",
    "MathAPI": "math_api",
    "MessageAPI": "message_api",
    "TwitterAPI": "posting_api",
    "TicketAPI": "ticket_api",
    "TradingBot": "trading_bot",
    "TravelAPI": "travel_booking",
    "VehicleControlAPI": "vehicle_control",
}
_PACKAGE: Final = "bfcl_eval.eval_checker.multi_turn_eval.func_source_code"
STATELESS_CLASSES: Final = frozenset({"MathAPI"})
"""Classes BFCL never gives a scenario."""


class CallParseError(SpecError):
    """A call string is not a plain call with literal arguments."""


@dataclass(frozen=True, slots=True, kw_only=True)
class BfclCall:
    """One parsed call: a function name and its keyword arguments."""

    name: str
    args: Mapping[str, Any] | str = field(default_factory=dict)
    """Keyword arguments, or the raw JSON text when it does not parse (a schema failure)."""

    def to_source(self) -> str:
        """The call as a Python-call string (BFCL's ground-truth form)."""
        if isinstance(self.args, str):
            return f"{self.name}(<unparsable arguments {self.args[:40]!r}>)"
        return f"{self.name}({','.join(f'{k}={v!r}' for k, v in self.args.items())})"


@cache
def environment_class(name: str) -> type[Any]:
    """The BFCL class ``name`` (``GorillaFileSystem``, ``TradingBot``, ...)."""
    try:
        module = importlib.import_module(f"{_PACKAGE}.{_MODULES[name]}")
    except KeyError:
        raise SpecError(f"unknown BFCL environment class {name!r}") from None
    return getattr(module, name)  # type: ignore[no-any-return]


@cache
def signature(function: str) -> inspect.Signature | None:
    """The signature (without ``self``) of a multi-turn function, or ``None`` if unknown."""
    cls_name = function_classes().get(function)
    if cls_name is None:
        return None
    method = getattr(environment_class(cls_name), function)
    sig = inspect.signature(method)
    return sig.replace(parameters=list(sig.parameters.values())[1:])


def _literal(node: ast.expr, where: str) -> Any:
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        raise CallParseError(f"{where}: argument {ast.unparse(node)!r} is not a literal value") from None


def _call_name(func: ast.expr, where: str) -> str:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):  # e.g. GorillaFileSystem.cd(...)
        return func.attr
    raise CallParseError(f"{where}: {ast.unparse(func)!r} is not a function name")


def _from_node(node: ast.expr, where: str) -> BfclCall:
    if not isinstance(node, ast.Call):
        raise CallParseError(f"{where}: {ast.unparse(node)[:80]!r} is not a function call")
    name = _call_name(node.func, where)
    args: dict[str, Any] = {}
    if node.args:
        sig = signature(name)
        params = list(sig.parameters) if sig is not None else []
        for i, arg in enumerate(node.args):
            if isinstance(arg, ast.Starred):
                raise CallParseError(f"{where}: starred arguments are not supported")
            # Extra positional arguments keep a name no schema declares, so the call is
            # still judged (as a schema failure) instead of being dropped.
            key = params[i] if i < len(params) else f"<positional {i + 1}>"
            args[key] = _literal(arg, where)
    for kw in node.keywords:
        if kw.arg is None:
            raise CallParseError(f"{where}: '**' arguments are not supported")
        if kw.arg in args:
            raise CallParseError(f"{where}: argument {kw.arg!r} given twice")
        args[kw.arg] = _literal(kw.value, where)
    return BfclCall(name=name, args=args)


def parse_calls(text: str, *, where: str = "call") -> list[BfclCall]:
    """Parse ``f(a=1)``, ``[f(a=1), g()]`` or ``f(a=1); g()`` into calls, never evaluating code.

    Positional arguments are named after the function's real signature.

    Raises:
        CallParseError: not a call (or list of calls) with literal arguments.
    """
    text = text.strip("`\n ")  # as BFCL's own decoder does: a code fence around the calls is fine
    if not text:
        return []
    try:
        tree = ast.parse(text, mode="exec")
    except SyntaxError as e:
        raise CallParseError(f"{where}: not a Python call: {e.msg}") from None
    calls: list[BfclCall] = []
    for stmt in tree.body:
        if not isinstance(stmt, ast.Expr):
            raise CallParseError(f"{where}: {ast.unparse(stmt)[:80]!r} is not a call expression")
        value = stmt.value
        items = value.elts if isinstance(value, (ast.List, ast.Tuple)) else [value]
        calls.extend(_from_node(item, where) for item in items)
    return calls


def parse_call(text: str, *, where: str = "call") -> BfclCall:
    """Parse exactly one call string (see :func:`parse_calls`)."""
    calls = parse_calls(text, where=where)
    if len(calls) != 1:
        raise CallParseError(f"{where}: expected one call, got {len(calls)}")
    return calls[0]


def calls_from_object(obj: Mapping[str, Any], *, where: str = "call") -> list[BfclCall]:
    """Calls from BFCL's function-calling encoding ``{name: arguments, ...}`` (one per key).

    ``arguments`` is a JSON object or JSON text of one. JSON text that does not parse (or
    nests too deeply to parse) is kept as it is, so the monitor judges it (malformed arguments
    are a schema failure).

    Raises:
        CallParseError: arguments that are neither an object nor text.
    """
    calls = []
    for name, raw in obj.items():
        if isinstance(raw, str):
            if too_deep(raw):  # kept as text, as what does not parse (json would recurse near the interpreter's limit)
                calls.append(BfclCall(name=str(name), args=raw))
                continue
            try:
                parsed = json.loads(raw) if raw.strip() else {}
            except ValueError:  # not JSON, or an integer past Python's digit limit
                calls.append(BfclCall(name=str(name), args=raw))
                continue
            raw = parsed
        if not isinstance(raw, Mapping):
            raise CallParseError(f"{where}: arguments of {name!r} must be an object, got {type(raw).__name__}")
        calls.append(BfclCall(name=str(name), args=dict(raw)))
    return calls


# -- environment rejections -----------------------------------------------------------------

_STATUS_FLAGS: Final[Mapping[str, str]] = {
    "authenticate_twitter": "authentication_status",
    "message_login": "login_status",
    "follow_user": "follow_status",
    "unfollow_user": "unfollow_status",
    "ticket_login": "success",
    "logout": "success",
}
"""Actions that report failure with a false status flag instead of an ``error`` key."""

_NOT_FOUND: Final[Mapping[str, tuple[str, str]]] = {
    "get_symbol_by_name": ("symbol", "Stock not found"),
    "get_nearest_airport_by_city": ("nearest_airport", "Unknown"),
}
"""Lookups that report an unknown key with a sentinel value."""


def rejection(function: str, result: Any) -> str | None:
    """Why the environment rejected a call, judging from its result; ``None`` if accepted.

    Rejections are: an ``error`` key (also as the only item of a list, BFCL's form for some
    unauthenticated reads), an ``Error:`` string, a false status flag of a login / follow
    action, and the not-found sentinels of two lookups. Query answers that happen to be
    negative (``canDrive: false``, ``verification_status: false``) are answers, not
    rejections.
    """
    if isinstance(result, dict):
        if "error" in result:
            return str(result["error"])
        flag = _STATUS_FLAGS.get(function)
        if flag is not None and result.get(flag) is False:
            return str(result.get("message") or f"{function} failed ({flag} is false)")
        sentinel = _NOT_FOUND.get(function)
        if sentinel is not None and result.get(sentinel[0]) == sentinel[1]:
            return f"{function}: {sentinel[1]}"
        return None
    if isinstance(result, list) and len(result) == 1:
        item = result[0]
        if isinstance(item, dict) and "error" in item:
            return str(item["error"])
        if isinstance(item, str) and item.startswith("Error:"):
            return item
    return None


def bfcl_result_text(result: Any) -> str:
    """A result as BFCL's checker records it (``str``, JSON for dicts when possible, else ``str()``)."""
    if type(result) is str:
        return result
    if type(result) is dict:
        try:
            return json.dumps(result)
        except (TypeError, ValueError):
            return str(result)
    return str(result)


def bfcl_error_text(exc: BaseException) -> str:
    """An exception as BFCL's checker records it."""
    return f"Error during execution: {exc}"


# -- argument types (the runtime's own view, from the classes' annotations) --------------


def _fits(value: Any, tp: Any) -> bool:
    if tp is Any or tp is inspect.Parameter.empty or tp is object:
        return True
    origin = get_origin(tp)
    if origin is Union or (isinstance(tp, types.UnionType)):
        return any(_fits(value, t) for t in get_args(tp))
    if tp is type(None):
        return value is None
    if tp is bool:
        return isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if tp is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if tp is str:
        return isinstance(value, str)
    if tp in (list, tuple) or origin in (list, tuple, Sequence):
        if not isinstance(value, (list, tuple)):
            return False
        inner = get_args(tp)
        return not inner or all(_fits(v, inner[0]) for v in value)
    if tp is dict or origin in (dict, Mapping):
        return isinstance(value, dict)
    return True


@cache
def _hints(function: str) -> Mapping[str, Any]:
    cls_name = function_classes()[function]
    try:
        return get_type_hints(getattr(environment_class(cls_name), function))
    except Exception:  # pragma: no cover - unresolvable annotations: accept any type
        return {}


def argument_problem(function: str, args: Mapping[str, Any] | str) -> str | None:
    """Why ``args`` do not bind to the function's own Python signature and annotations.

    This is the runtime's view, independent of the function docs: missing or unknown
    arguments, and values whose type does not fit the class's annotation (an ``int`` fits
    ``float``; a ``bool`` fits neither).
    """
    sig = signature(function)
    if sig is None:
        return f"unknown function {function!r}"
    if isinstance(args, str):
        return "the arguments are not a JSON object"
    params = sig.parameters
    for key in args:
        if key not in params:
            return f"unknown argument {key!r}"
    hints = _hints(function)
    for pname, param in params.items():
        if pname not in args:
            if param.default is inspect.Parameter.empty:
                return f"missing argument {pname!r}"
            continue
        tp = hints.get(pname, Any)
        if not _fits(args[pname], tp):
            return f"argument {pname!r}: {type(args[pname]).__name__} does not fit {tp}"
    return None


# -- the environment ---------------------------------------------------------------------


class BfclEnv:
    """The live environment of one task: one instance per involved class.

    Attributes:
        instances: class name -> the loaded instance.
    """

    __slots__ = ("_methods", "instances", "long_context", "task_id")

    def __init__(self, task: BfclTask) -> None:
        self.task_id = task.id
        self.long_context = task.long_context
        self.instances: dict[str, Any] = {}
        for cls_name in task.involved_classes:
            instance = environment_class(cls_name)()
            if cls_name not in STATELESS_CLASSES:
                scenario = copy_json(dict(task.initial_config.get(cls_name, {})))  # BFCL's data: JSON
                instance._load_scenario(scenario, long_context=task.long_context)
            self.instances[cls_name] = instance
        classes = function_classes()
        self._methods: dict[str, str] = {name: cls for name, cls in classes.items() if cls in self.instances}

    def __contains__(self, function: object) -> bool:
        return function in self._methods

    @property
    def functions(self) -> list[str]:
        """Functions of the involved classes."""
        return list(self._methods)

    def instance_of(self, function: str) -> Any:
        """The instance implementing ``function`` (``KeyError`` if not involved)."""
        return self.instances[self._methods[function]]

    def get(self, cls_name: str) -> Any:
        """The instance of ``cls_name``, or ``None`` when the task does not involve it."""
        return self.instances.get(cls_name)

    def run(self, function: str, args: Mapping[str, Any] | str) -> Any:
        """Execute ``function(**args)`` on its instance; the environment's exceptions propagate.

        Mutable defaults (``tags=[]`` in ``post_tweet``) are passed as fresh copies, so one
        call cannot leak state into another task through a shared default list.

        Raises:
            KeyError: the function is not part of this task's classes.
            TypeError: ``args`` is unparsable argument text.
        """
        if isinstance(args, str):
            raise TypeError(f"{function}: arguments are not a JSON object: {args[:60]!r}")
        if function not in self._methods:
            raise KeyError(f"{function!r} is not a function of {', '.join(self.instances)}")
        instance = self.instances[self._methods[function]]
        return invoke(instance, args, function)

    def dry_run(self, function: str, args: Mapping[str, Any]) -> str | None:
        """Run the call on a deep copy of its instance; why it would be rejected, or ``None``.

        The real environment is not touched. Costs a copy of one class instance.
        """
        if function not in self._methods:
            return f"{function!r} is not a function of this environment"
        clone = copy.deepcopy(self.instances[self._methods[function]])
        try:
            result = invoke(clone, args, function)
        except Exception as e:
            return f"{type(e).__name__}: {e}"
        return rejection(function, result)

    def copy(self) -> BfclEnv:
        """A deep copy (the random generators included)."""
        return copy.deepcopy(self)

    def state(self) -> dict[str, dict[str, Any]]:
        """Public attributes per class (what BFCL's state checker compares)."""
        return {cls: {k: v for k, v in vars(inst).items() if not k.startswith("_")} for cls, inst in self.instances.items()}


@cache
def _mutable_defaults(function: str) -> tuple[tuple[str, Any], ...]:
    sig = signature(function)
    if sig is None:
        return ()
    return tuple((p.name, p.default) for p in sig.parameters.values() if isinstance(p.default, (list, dict, set)))


def invoke(instance: Any, args: Mapping[str, Any], function: str) -> Any:
    """Call ``function`` on ``instance`` with fresh copies of BFCL's mutable defaults."""
    kwargs = dict(args)
    for pname, default in _mutable_defaults(function):
        if pname not in kwargs:
            kwargs[pname] = copy.deepcopy(default)
    method: Callable[..., Any] = getattr(instance, function)
    return method(**kwargs)
