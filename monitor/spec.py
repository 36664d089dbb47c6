"""Tool specs: what a tool accepts, needs, produces and changes.

A :class:`Toolset` holds :class:`ToolSpec` s. Python callables are declared with
``@toolset.tool`` (the signature gives a pydantic-validated argument schema); tools known only
by a JSON Schema (OpenAI function definitions, MCP ``inputSchema``) with
:meth:`Toolset.add_schema` (the validator is compiled once).
"""

from __future__ import annotations

import inspect
import json
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Annotated, Any, TypeVar, get_args, get_origin, get_type_hints, overload

from pydantic import BaseModel, ConfigDict, create_model

from ._validation import Validator, model_validator, schema_validator
from .exceptions import SpecError
from .grounding import MATCHES, GroundingMatch

__all__ = (
    "Effect",
    "ErrorResult",
    "Grounded",
    "Grounding",
    "Precondition",
    "PreconditionResult",
    "Produce",
    "Produces",
    "Ref",
    "SymbolicEffect",
    "ToolSpec",
    "Toolset",
    "callable_name",
    "plan_effect",
    "values_at",
)

F = TypeVar("F", bound=Callable[..., Any])

PreconditionResult = bool | str | None
"""``True`` or ``None``: holds. ``False``: fails with the precondition's message. ``str``: fails with it."""


@dataclass(frozen=True, slots=True)
class Ref:
    """Marks an argument as a reference of ``kind`` that an earlier result must have produced.

    ``Annotated[str, Ref("person_id")]``. With ``user=True`` a value that appeared in the
    user's messages is accepted as well (ids the user states, such as a user id).
    A list-valued argument is checked element by element.
    """

    kind: str
    user: bool = False


@dataclass(frozen=True, slots=True)
class Grounded:
    """Marks an argument whose value must be available information.

    The value must have appeared in the user's messages or in an earlier tool result (no
    invented phone numbers, amounts or ids): ``Annotated[str, Grounded()]``, or
    ``grounded={"amount": Grounded("derived")}`` in :meth:`Toolset.tool` and
    :meth:`Toolset.add_schema`. A list-valued argument is checked element by element.

    Matching (``match``; see :mod:`prefixmon.grounding` and docs/grounding.md):

    - ``"exact"``: the value as it is: equal to a value of a result, to a message or one of
      its words; text and numbers also as a case-insensitive substring of informed text.
    - ``"normalized"`` (default): ``exact``, or the same value in another written form: text
      with other case or whitespace (``Blue  Mug`` ↔ ``blue mug``), an id with or without a
      leading ``#`` (``#W123`` ↔ ``w123``), a number with thousands separators, a currency
      symbol or trailing zeros (``$1,234.50`` ↔ ``1234.5``), a date written out, in ISO or
      unambiguously in digits (``May 1st, 2024`` ↔ ``1 May 2024`` ↔ ``2024-05-01``; a date
      written without a year matches that day of any year), an ISO date-time with any
      offset (compared in UTC; a date-time's date counts as seen).
    - ``"derived"``: ``normalized``, or a number that is the sum, difference, product or
      quotient of two numbers seen recently (a refund of two item prices, ``150 = 3 * 50``);
      the verdict lists it in :attr:`~prefixmon.Verdict.derived`. Loose by nature (with small
      numbers seen, many values are derivable): meant for computed amounts.

    Raises:
        SpecError: ``match`` is not one of these.
    """

    match: GroundingMatch = "normalized"

    def __post_init__(self) -> None:
        if self.match not in MATCHES:
            raise SpecError(f"Grounded(match={self.match!r}): match must be one of {', '.join(map(repr, MATCHES))}")


Grounding = str | Iterable[str] | Mapping[str, Grounded | GroundingMatch] | None
"""Grounded arguments: a name (or path), several, or ``{name: Grounded(...) or a match}``."""


def _grounding(grounded: Grounding, tool: str) -> tuple[tuple[str, ...], dict[str, Grounded]]:
    """The grounded paths and the options of those given any, from a :data:`Grounding`."""
    if grounded is None:
        return (), {}
    if isinstance(grounded, str):
        return (grounded,), {}
    if isinstance(grounded, Mapping):
        options: dict[str, Grounded] = {}
        for path, option in grounded.items():
            if not isinstance(path, str):
                raise SpecError(f"tool {tool!r}: grounded argument names must be strings, got {type(path).__name__}")
            if isinstance(option, Grounded):
                options[path] = option
            elif isinstance(option, str):
                try:
                    options[path] = Grounded(option)  # type: ignore[arg-type]  # checked in Grounded
                except SpecError as e:
                    raise SpecError(f"tool {tool!r}: grounded[{path!r}]: {e}") from None
            else:
                raise SpecError(
                    f"tool {tool!r}: grounded[{path!r}] must be a Grounded or one of "
                    f"{', '.join(map(repr, MATCHES))}, got {type(option).__name__}"
                )
        return tuple(options), options
    paths = tuple(grounded)
    for path in paths:
        if not isinstance(path, str):
            raise SpecError(f"tool {tool!r}: grounded argument names must be strings, got {type(path).__name__}")
    return paths, {}


@dataclass(frozen=True, slots=True, kw_only=True)
class Precondition:
    """A named check over the tracked state and the call's arguments.

    Args:
        check: ``(state, args) -> bool | str | None``; see :data:`PreconditionResult`.
        message: the reason used when ``check`` returns ``False``.
        name: for diagnostics; defaults to the function's name.
    """

    check: Callable[[Any, Mapping[str, Any]], PreconditionResult]
    message: str = ""
    name: str = ""

    @classmethod
    def wrap(cls, obj: Precondition | Callable[..., PreconditionResult]) -> Precondition:
        """Accept a bare callable where a precondition is expected."""
        if isinstance(obj, Precondition):
            return obj
        if not callable(obj):
            raise SpecError(f"a precondition must be callable, got {type(obj).__name__}")
        name = callable_name(obj)
        doc = inspect.getdoc(obj) or ""
        message = doc.splitlines()[0] if doc else f"precondition {name} does not hold"
        return cls(check=obj, message=message, name=name)

    def __post_init__(self) -> None:
        _refuse_async(self.check, f"precondition {self.name or callable_name(self.check)}")

    def __call__(self, state: Any, args: Mapping[str, Any]) -> PreconditionResult:
        return self.check(state, args)


Effect = Callable[[Any, Mapping[str, Any], Any], None]
"""``(state, args, result) -> None``: updates the tracked state after a successful call."""

ErrorResult = Callable[[Any], "str | None"]
"""``(result) -> reason | None``: recognises a result that means the environment rejected the call."""


def callable_name(obj: object) -> str:
    """A user callable's name for messages: its ``__name__``, else its type's name — never its
    ``repr``, which may hold a secret (an API key bound in a ``functools.partial``)."""
    name = getattr(obj, "__name__", None)
    if isinstance(name, str) and name:
        return name
    func = getattr(obj, "func", None)  # functools.partial
    inner = getattr(func, "__name__", None)
    return inner if isinstance(inner, str) and inner else type(obj).__name__


def _refuse_async(obj: object, what: str) -> None:
    """Rules run synchronously inside the check: an ``async def`` one would be silently wrong."""
    if inspect.iscoroutinefunction(obj) or inspect.iscoroutinefunction(getattr(obj, "__call__", None)):  # noqa: B004
        raise SpecError(f"{what} is an async function; preconditions, effects and error_result must be plain functions")


@dataclass(frozen=True, slots=True)
class SymbolicEffect:
    """An effect with its own plan-time version.

    At runtime it runs ``effect``. In plan verification it runs ``simulate`` (same
    signature, with a placeholder standing for the result), or nothing when ``simulate`` is
    ``None``. Effects without a plan-time version run as they are, with the placeholder
    result: those that do not need the result (``state.facts["cellular"] = True``) just work.
    """

    effect: Effect
    simulate: Effect | None = None

    @property
    def __name__(self) -> str:  # used in fault messages
        return callable_name(self.effect)

    def __call__(self, state: Any, args: Mapping[str, Any], result: Any) -> None:
        self.effect(state, args, result)


def plan_effect(simulate: Effect | None) -> Callable[[Effect], SymbolicEffect]:
    """Decorator: give an effect a plan-time version (``None``: no plan-time change).

    Example::

        def _sim_login(state, args, result):
            state.facts["user"] = args["user_id"]

        @plan_effect(_sim_login)
        def login(state, args, result):
            state.facts["user"] = result["user"]["id"]
    """

    def wrap(effect: Effect) -> SymbolicEffect:
        return SymbolicEffect(effect, simulate)

    return wrap


def _sync_rules(name: str, effects: Iterable[Effect], error_result: ErrorResult | None) -> tuple[Effect, ...]:
    """A tool's effects, after refusing any of them, or its error-result recogniser, that is ``async``."""
    out = tuple(effects)
    for effect in out:
        _refuse_async(
            effect.effect if isinstance(effect, SymbolicEffect) else effect, f"tool {name!r}: effect {callable_name(effect)}"
        )
    if error_result is not None:
        _refuse_async(error_result, f"tool {name!r}: error_result {callable_name(error_result)}")
    return out


@dataclass(frozen=True, slots=True, kw_only=True)
class Produce:
    """Values under ``key`` anywhere in a result are bound as references of ``kind``."""

    kind: str
    key: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolSpec:
    """Everything the predicate knows about one tool.

    Built by :meth:`Toolset.tool` and :meth:`Toolset.add_schema`; not usually constructed
    directly.
    """

    name: str
    """The tool's name as the agent calls it."""
    description: str = ""
    parameters: Mapping[str, Any]
    """JSON Schema of the arguments."""
    validate: Validator
    """Validates and normalises a dict of arguments; raises ``ArgumentError``."""
    func: Callable[..., Any] | None = None
    """The implementation, if the toolset runs it; ``None`` when a framework does."""
    is_async: bool = False
    requires: tuple[Precondition, ...] = ()
    effects: tuple[Effect, ...] = ()
    produces: tuple[Produce, ...] = ()
    invalidates: frozenset[str] = frozenset()
    """Reference kinds whose argument values become stale after a successful call."""
    refs: tuple[tuple[str, Ref], ...] = ()
    """(argument, Ref) pairs in declaration order."""
    grounded: tuple[str, ...] = ()
    """Paths of grounded arguments (see :class:`Grounded`)."""
    grounding: Mapping[str, Grounded] = field(default_factory=dict)
    """Options of grounded arguments given any; the others are matched as ``Grounded()``."""
    error_result: ErrorResult | None = None
    exposed: bool = True
    """Whether the tool is available from the start of an episode."""
    metadata: Mapping[str, Any] = field(default_factory=dict)
    produce_map: Mapping[str, str] = field(init=False, repr=False, compare=False)
    """``{result key: kind}`` of :attr:`produces`, derived once so no call rebuilds it."""
    grounded_match: tuple[tuple[str, GroundingMatch], ...] = field(init=False, repr=False, compare=False)
    """``(path, match)`` of every grounded argument, derived once for the information check."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "produce_map", MappingProxyType({p.key: p.kind for p in self.produces}))
        unknown = [path for path in self.grounding if path not in self.grounded]
        if unknown:
            raise SpecError(f"tool {self.name!r}: grounding options for arguments that are not grounded: {', '.join(unknown)}")
        options = self.grounding
        default = Grounded()
        object.__setattr__(self, "grounded_match", tuple((path, options.get(path, default).match) for path in self.grounded))


Produces = str | Sequence[str | tuple[str, str]] | Mapping[str, str] | None
"""A kind (bound from the key of the same name), several kinds or ``(kind, key)`` pairs, or
``{kind: key}``."""


def _produce_tuple(produces: Produces) -> tuple[Produce, ...]:
    if produces is None:
        return ()
    if isinstance(produces, str):
        return (Produce(kind=produces, key=produces),)
    if isinstance(produces, Mapping):
        return tuple(Produce(kind=k, key=v) for k, v in produces.items())
    return tuple(Produce(kind=p, key=p) if isinstance(p, str) else Produce(kind=p[0], key=p[1]) for p in produces)


def values_at(args: Mapping[str, Any], path: str) -> Iterator[tuple[str, Any]]:
    """Yield ``(location, value)`` for an argument path.

    A plain name is one argument; ``a.b`` descends into a dict key and ``a[]`` iterates a
    list, e.g. ``payment_methods[].payment_id``. A list-valued plain argument yields each
    element. Missing parts and ``None`` values yield nothing.
    """
    if "." not in path and "[]" not in path:
        value = args.get(path)
        if value is None:
            return
        if isinstance(value, (list, tuple)):
            for i, v in enumerate(value):
                if v is not None:
                    yield f"{path}[{i}]", v
        else:
            yield path, value
        return
    yield from _descend(args, path.split("."), "")


def _descend(obj: Any, parts: list[str], loc: str) -> Iterator[tuple[str, Any]]:
    if not parts:
        if obj is not None:
            yield loc, obj
        return
    head, rest = parts[0], parts[1:]
    many = head.endswith("[]")
    key = head[:-2] if many else head
    if not isinstance(obj, Mapping):
        return
    value = obj.get(key)
    where = f"{loc}.{key}" if loc else key
    if many:
        if isinstance(value, (list, tuple)):
            for i, item in enumerate(value):
                yield from _descend(item, rest, f"{where}[{i}]")
    else:
        yield from _descend(value, rest, where)


def _names(value: str | Iterable[str] | None) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    return tuple(value)


def _signature_model(
    func: Callable[..., Any], name: str, strict: bool
) -> tuple[type[BaseModel], tuple[tuple[str, Ref], ...], dict[str, Grounded]]:
    sig = inspect.signature(func)
    try:
        hints = get_type_hints(func, include_extras=True)
    except Exception as e:  # unresolved forward references and the like
        raise SpecError(f"tool {name!r}: cannot resolve its type hints: {e}") from e
    fields: dict[str, Any] = {}
    refs: list[tuple[str, Ref]] = []
    grounded: dict[str, Grounded] = {}
    for pname, param in sig.parameters.items():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise SpecError(f"tool {name!r}: *args/**kwargs cannot be described as tool arguments")
        if param.kind is param.POSITIONAL_ONLY:
            raise SpecError(f"tool {name!r}: positional-only parameter {pname!r} cannot be passed by name")
        annotation = hints.get(pname, Any)
        if get_origin(annotation) is Annotated:
            for meta in get_args(annotation)[1:]:
                if isinstance(meta, Ref):
                    refs.append((pname, meta))
                elif isinstance(meta, Grounded):
                    grounded[pname] = meta
                elif meta is Grounded:
                    grounded[pname] = Grounded()
        default = ... if param.default is inspect.Parameter.empty else param.default
        fields[pname] = (annotation, default)
    config = ConfigDict(extra="forbid", strict=strict, arbitrary_types_allowed=True)
    with warnings.catch_warnings():  # an argument named like a BaseModel attribute (schema, json) is fine here
        warnings.filterwarnings("ignore", message=r"Field name .* shadows an attribute in parent", category=UserWarning)
        model = create_model(f"{name}_args", __config__=config, **fields)
    return model, tuple(refs), grounded


class Toolset:
    """A registry of tool specs.

    Example::

        tools = Toolset()

        @tools.tool(produces="person_id")
        async def search_contacts(name: str) -> list[dict]: ...
    """

    def __init__(self, specs: Iterable[ToolSpec] = ()) -> None:
        self._specs: dict[str, ToolSpec] = {}
        self._producers: dict[str, list[str]] = {}
        for spec in specs:
            self.add(spec)

    # -- registry -------------------------------------------------------------------------
    def add(self, spec: ToolSpec, *, replace: bool = False) -> ToolSpec:
        """Register a spec; a second tool of the same name is an error unless ``replace``."""
        if spec.name in self._specs and not replace:
            raise SpecError(f"a tool named {spec.name!r} is already declared")
        old = self._specs.get(spec.name)
        if old is not None:
            for p in old.produces:
                self._producers[p.kind].remove(old.name)
        self._specs[spec.name] = spec
        for p in spec.produces:
            self._producers.setdefault(p.kind, []).append(spec.name)
        return spec

    def __getitem__(self, name: str) -> ToolSpec:
        return self._specs[name]

    def get(self, name: str) -> ToolSpec | None:
        """The spec of ``name``, or ``None``."""
        return self._specs.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._specs

    def __iter__(self) -> Iterator[ToolSpec]:
        return iter(self._specs.values())

    def __len__(self) -> int:
        return len(self._specs)

    @property
    def names(self) -> list[str]:
        """Tool names in declaration order."""
        return list(self._specs)

    def producers_of(self, kind: str) -> list[str]:
        """Names of the tools whose results bind references of ``kind``."""
        return self._producers.get(kind, [])

    @classmethod
    def from_openai(
        cls,
        tools: Iterable[Mapping[str, Any]],
        *,
        functions: Mapping[str, Callable[..., Any]] | None = None,
        rules: Mapping[str, Mapping[str, Any]] | None = None,
        error_result: ErrorResult | None = None,
        toolset: Toolset | None = None,
    ) -> Toolset:
        """Declare every function tool of an OpenAI-style ``tools`` list (no SDK needed).

        Accepts chat completions tools (``{"type": "function", "function": {...}}``),
        Responses function tools (``{"type": "function", "name": ..., "parameters": ...}``)
        and bare function definitions. Built-in and custom tools are skipped.

        Args:
            tools: the ``tools`` list sent to the model (parsed JSON).
            functions: ``{name: callable}``: implementations (sync or async), called with
                the arguments as keywords.
            rules: ``{name: options}``: extra :meth:`add_schema` options per tool, such as
                ``{"send_message": {"refs": {"person_id": "person_id"}}}``.
            error_result: the error-result recogniser of every tool without its own in ``rules``.
            toolset: add to this toolset instead of a new one.

        Raises:
            SpecError: a definition is malformed (named by its index, ``tools[3]``), or
                ``functions`` / ``rules`` name a tool that is not in ``tools``.
        """
        functions = functions or {}
        rules = rules or {}
        parsed = [(f"tools[{i}]", *d) for i, tool in enumerate(tools) if (d := _openai_definition(tool, f"tools[{i}]"))]
        declared = {name for _, name, _, _ in parsed}
        for what, names in (("functions", functions), ("rules", rules)):
            unknown = sorted(set(names) - declared)
            if unknown:
                raise SpecError(f"{what} name tools that are not in the tools list: {', '.join(unknown)}")
        out = toolset if toolset is not None else cls()
        for where, name, params, description in parsed:
            options = {"error_result": error_result, **rules.get(name, {})}
            try:
                out.add_schema(name, params, description=description, func=functions.get(name), **options)
            except TypeError as e:  # a misspelt option
                raise SpecError(f"rules[{name!r}]: {e}; options are those of Toolset.add_schema") from e
            except SpecError as e:
                raise SpecError(f"{where}: {e}") from e
        return out

    # -- declaration ----------------------------------------------------------------------
    @overload
    def tool(self, func: F, /) -> F: ...

    @overload
    def tool(
        self,
        func: None = None,
        /,
        *,
        name: str | None = None,
        description: str | None = None,
        requires: Iterable[Precondition | Callable[..., PreconditionResult]] = (),
        effects: Iterable[Effect] = (),
        produces: Produces = None,
        invalidates: str | Iterable[str] | None = None,
        grounded: Grounding = None,
        error_result: ErrorResult | None = None,
        exposed: bool = True,
        strict: bool = False,
    ) -> Callable[[F], F]: ...

    def tool(
        self,
        func: F | None = None,
        /,
        *,
        name: str | None = None,
        description: str | None = None,
        requires: Iterable[Precondition | Callable[..., PreconditionResult]] = (),
        effects: Iterable[Effect] = (),
        produces: Produces = None,
        invalidates: str | Iterable[str] | None = None,
        grounded: Grounding = None,
        error_result: ErrorResult | None = None,
        exposed: bool = True,
        strict: bool = False,
    ) -> F | Callable[[F], F]:
        """Declare a Python callable (sync or async) as a tool; usable bare or with options.

        Args:
            name: tool name (default: the function's name).
            description: default: the docstring's first paragraph.
            requires: preconditions, checked in order.
            effects: state updates run after a successful call.
            produces: reference kinds the result binds: a kind (the key of the same name),
                several kinds or ``(kind, key)`` pairs, or ``{kind: key}``.
            invalidates: reference kinds whose argument values are stale after success.
            grounded: arguments whose values must be available information: names, or
                ``{name: Grounded(match=...)}`` (also ``Annotated[..., Grounded()]``; an
                option given here wins).
            error_result: recognises results that mean the environment rejected the call.
            exposed: ``False`` declares a tool that is not available until exposed.
            strict: pydantic strict mode for the arguments (no coercion of ``"5"`` to 5).
        """

        def register(f: F) -> F:
            tool_name = name or getattr(f, "__name__", None)
            if not tool_name:
                raise SpecError(f"cannot name tool {f!r}; pass name=")
            model, refs, marks = _signature_model(f, tool_name, strict)
            paths, options = _grounding(grounded, tool_name)
            doc = inspect.getdoc(f) or ""
            self.add(
                ToolSpec(
                    name=tool_name,
                    description=description if description is not None else doc.split("\n\n")[0],
                    parameters=model.model_json_schema(),
                    validate=model_validator(model),
                    func=f,
                    is_async=inspect.iscoroutinefunction(f),
                    requires=tuple(Precondition.wrap(p) for p in requires),
                    effects=_sync_rules(tool_name, effects, error_result),
                    produces=_produce_tuple(produces),
                    invalidates=frozenset(_names(invalidates)),
                    refs=refs,
                    grounded=tuple(dict.fromkeys((*marks, *paths))),
                    grounding={**marks, **options},
                    error_result=error_result,
                    exposed=exposed,
                )
            )
            return f

        if func is not None:
            return register(func)
        return register

    def add_schema(
        self,
        name: str,
        json_schema: Mapping[str, Any] | str | None = None,
        *,
        description: str = "",
        func: Callable[..., Any] | None = None,
        requires: Iterable[Precondition | Callable[..., PreconditionResult]] = (),
        effects: Iterable[Effect] = (),
        produces: Produces = None,
        invalidates: str | Iterable[str] | None = None,
        refs: Mapping[str, str | Ref] | None = None,
        grounded: Grounding = None,
        error_result: ErrorResult | None = None,
        exposed: bool = True,
        forbid_unknown: bool = True,
        replace: bool = False,
        metadata: Mapping[str, Any] | None = None,
    ) -> ToolSpec:
        """Declare a tool from a JSON Schema of its arguments.

        Args:
            name: the tool's name.
            json_schema: the arguments' schema (an OpenAI function's ``parameters``, an MCP
                tool's ``inputSchema``), as a dict or JSON text; ``None`` for no arguments.
            func: an implementation called as ``func(**args)`` when the monitor runs the tool.
            refs: ``{argument: kind}`` (or ``Ref``) for reference arguments; the key may be
                a path into nested arguments (``payment_methods[].payment_id``, see
                :func:`values_at`). ``grounded`` names accept paths too, and so does
                ``{path: Grounded(match=...)}``.
            forbid_unknown: reject arguments the schema does not name, unless the schema
                says ``additionalProperties`` itself.
            replace: replace an existing tool of the same name.

        The other options are as for :meth:`tool`.
        """
        if isinstance(json_schema, str):
            try:
                json_schema = json.loads(json_schema)
            except json.JSONDecodeError as e:
                raise SpecError(f"tool {name!r}: its schema is not valid JSON: {e}") from e
        if json_schema is None:
            json_schema = {"type": "object", "properties": {}}
        if not isinstance(json_schema, Mapping):
            raise SpecError(f"tool {name!r}: the schema must be a JSON object, got {type(json_schema).__name__}")
        schema: Mapping[str, Any] = json_schema
        grounded_paths, grounding = _grounding(grounded, name)
        ref_pairs = tuple((arg, r if isinstance(r, Ref) else Ref(r)) for arg, r in (refs or {}).items())
        return self.add(
            ToolSpec(
                name=name,
                description=description,
                parameters=schema,
                validate=schema_validator(name, schema, forbid_unknown=forbid_unknown),
                func=func,
                is_async=func is not None and inspect.iscoroutinefunction(func),
                requires=tuple(Precondition.wrap(p) for p in requires),
                effects=_sync_rules(name, effects, error_result),
                produces=_produce_tuple(produces),
                invalidates=frozenset(_names(invalidates)),
                refs=ref_pairs,
                grounded=grounded_paths,
                grounding=grounding,
                error_result=error_result,
                exposed=exposed,
                metadata=dict(metadata or {}),
            ),
            replace=replace,
        )


def _openai_definition(tool: Any, where: str) -> tuple[str, Mapping[str, Any] | None, str] | None:
    """(name, parameters, description) of one function definition, or ``None`` for non-function tools."""
    if not isinstance(tool, Mapping):
        raise SpecError(f"{where}: a tool definition must be an object, got {type(tool).__name__}")
    if tool.get("type", "function") != "function":
        return None  # built-in tools (web search, custom grammars) never come back as function calls
    fn = tool.get("function", tool)
    if not isinstance(fn, Mapping):
        raise SpecError(f"{where}: 'function' must be an object, got {type(fn).__name__}")
    name = fn.get("name")
    if not isinstance(name, str) or not name:
        raise SpecError(f"{where}: a function definition needs a non-empty 'name'")
    params = fn.get("parameters")
    if params is not None and not isinstance(params, Mapping):
        raise SpecError(f"{where} ({name}): 'parameters' must be a JSON Schema object, got {type(params).__name__}")
    description = fn.get("description")
    return name, params, description if isinstance(description, str) else ""
