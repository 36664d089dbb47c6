"""The toolset: a registry of tool specs, declared from Python functions, JSON Schemas, OpenAI
function definitions or spec files.

Python callables are declared with ``@toolset.tool`` (the signature gives a pydantic-validated
argument schema); tools known only by a JSON Schema (OpenAI function definitions, MCP
``inputSchema``) with :meth:`Toolset.add_schema` (the validator is compiled once); rules that
no schema carries come from spec files (:meth:`Toolset.apply_spec`).
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import os
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Annotated, Any, TypeVar, get_args, get_origin, get_type_hints, overload

from pydantic import BaseModel, ConfigDict, create_model

from ._internal.json_depth import MAX_JSON_DEPTH, deep_line, deeper_than
from ._internal.log import get_logger
from .exceptions import SpecError
from .order import AFTER, AT_MOST, NOT_AFTER, After, AtMost, NotAfter, same_pairs
from .rules import _compile
from .rules._validation import Coercion, UnknownArguments, model_validator, schema_validator
from .rules.grounding import MATCHES, GroundingMatch
from .rules.provenance import Provenance
from .rules.spec import (
    Effect,
    ErrorResult,
    Grounded,
    Precondition,
    PreconditionResult,
    Produce,
    Ref,
    SymbolicEffect,
    ToolSpec,
    _refuse_async,
    callable_name,
)
from .rules.specfile import SpecFile, ToolRules, _decode_json, load_spec, parse_spec

__all__ = ("Grounding", "Produces", "ProvenanceRules", "Toolset")

F = TypeVar("F", bound=Callable[..., Any])


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


Grounding = str | Iterable[str] | Mapping[str, Grounded | GroundingMatch] | None
"""Grounded arguments: a name (or path), several, or ``{name: Grounded(...) or a match}``."""


ProvenanceRules = Mapping[str, Provenance | str | Iterable[str]] | None
"""Provenance rules: ``{argument path: Provenance(...)}``, or the sources alone (``["user", "tool:get_iban"]``)."""


def _provenance(rules: ProvenanceRules, tool: str) -> dict[str, Provenance]:
    """The :class:`~prefixmon.rules.provenance.Provenance` of each argument path of a :data:`ProvenanceRules`."""
    out: dict[str, Provenance] = {}
    for path, rule in (rules or {}).items():
        if not isinstance(path, str):
            raise SpecError(f"tool {tool!r}: provenance argument names must be strings, got {type(path).__name__}")
        try:
            out[path] = rule if isinstance(rule, Provenance) else Provenance(rule)
        except (SpecError, TypeError) as e:
            raise SpecError(f"tool {tool!r}: provenance[{path!r}]: {e}") from None
    return out


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
        self._exposed: frozenset[str] | None = None
        """The names :meth:`exposed_names` returns, until a tool is added."""
        self._provenance: bool | None = None
        """What :meth:`tracks_provenance` returns, until a tool is added."""
        self._logged: dict[str, tuple[str, ...]] = {}
        """``{tool: arguments}`` of the tools order rules name (:attr:`ToolSpec.order_log`), kept when a tool is replaced."""
        for spec in specs:
            self.add(spec)

    # -- registry -------------------------------------------------------------------------
    def add(self, spec: ToolSpec, *, replace: bool = False) -> ToolSpec:
        """Register a spec; a second tool of the same name is an error unless ``replace``."""
        if spec.name in self._specs and not replace:
            raise SpecError(f"a tool named {spec.name!r} is already declared")
        logged = self._logged.get(spec.name)
        if logged is not None and spec.order_log != logged:
            spec = dataclasses.replace(spec, order_log=tuple(dict.fromkeys((*(spec.order_log or ()), *logged))))
        old = self._specs.get(spec.name)
        if old is not None:
            for p in old.produces:
                self._producers[p.kind].remove(old.name)
        self._specs[spec.name] = spec
        self._exposed = self._provenance = None
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

    def exposed_names(self) -> frozenset[str]:
        """Names of the tools exposed from the start of an episode (computed once until a tool is added)."""
        exposed = self._exposed
        if exposed is None:
            exposed = self._exposed = frozenset(s.name for s in self._specs.values() if s.exposed)
        return exposed

    def tracks_provenance(self) -> bool:
        """Whether a tool declares a provenance rule, so episodes index who said each value (cached until a tool is added)."""
        tracks = self._provenance
        if tracks is None:
            tracks = self._provenance = any(s.provenance for s in self._specs.values())
        return tracks

    @property
    def names(self) -> list[str]:
        """Tool names in declaration order."""
        return list(self._specs)

    def order(
        self,
        name: str,
        *,
        after: str | Iterable[str] = (),
        same: str | Mapping[str, str] | None = None,
        before: str | Iterable[str] = (),
        at_most: int | None = None,
        not_after: str | Iterable[str] = (),
    ) -> ToolSpec:
        """Rules on when ``name`` may run (:mod:`prefixmon.order`); returns its spec.

        Args:
            after: ``name`` needs one of these tools to have succeeded earlier in the episode.
            same: with ``after`` / ``before``, on the same value: an argument name both tools
                have, or ``{name's argument: the other tool's argument}``.
            before: these tools need ``name`` earlier (each gets an ``after`` rule).
            at_most: ``name`` succeeds at most this many times per episode.
            not_after: ``name`` may not run once one of these has succeeded.

        Raises:
            SpecError: an unknown tool or argument, a bad ``at_most``, ``same`` without
                ``after`` or ``before``. Nothing is changed then.
        """
        after_t, before_t, not_after_t = (_tool_names(v) for v in (after, before, not_after))
        pairs = same_pairs(same)
        spec = self._known(name, "order rules for")
        if pairs and not (after_t or before_t):
            raise SpecError(f"tool {name!r}: same= applies to after= or before= rules")
        rules: dict[str, list[Precondition]] = {name: []}
        logs: list[tuple[str, tuple[str, ...]]] = []
        for other in (*after_t, *before_t, *not_after_t):
            self._known(other, f"an order rule of {name!r} names")
        for mine, theirs in pairs:
            _has_argument(spec, mine)
            for other in (*after_t, *before_t):
                _has_argument(self._specs[other], theirs)
        if after_t:
            rules[name].append(Precondition(check=After(name, after_t, pairs), name=AFTER))
            logs += [(t, tuple(theirs for _, theirs in pairs)) for t in after_t]
        for other in before_t:
            swapped = tuple((theirs, mine) for mine, theirs in pairs)
            rules.setdefault(other, []).append(Precondition(check=After(other, (name,), swapped), name=AFTER))
            logs.append((name, tuple(mine for mine, _ in pairs)))
        if at_most is not None:
            rules[name].append(Precondition(check=AtMost(name, at_most), name=AT_MOST))
            logs.append((name, ()))
        if not_after_t:
            rules[name].append(Precondition(check=NotAfter(name, not_after_t), name=NOT_AFTER))
            logs += [(t, ()) for t in not_after_t]
        for tool, args in logs:
            self._logged[tool] = tuple(dict.fromkeys((*self._logged.get(tool, ()), *args)))
        for tool in {name, *rules, *(t for t, _ in logs)}:
            current = self._specs[tool]
            self.add(dataclasses.replace(current, requires=(*current.requires, *rules.get(tool, ()))), replace=True)
        return self._specs[name]

    def _known(self, name: str, what: str) -> ToolSpec:
        spec = self._specs.get(name)
        if spec is None:
            known = ", ".join(sorted(self._specs)[:20]) or "none"
            raise SpecError(f"{what} {name!r}, but there is no tool named {name!r} (known: {known})")
        return spec

    def producers_of(self, kind: str) -> list[str]:
        """Names of the tools whose results bind references of ``kind``."""
        return self._producers.get(kind, [])

    @classmethod
    def from_openai(
        cls,
        tools: Iterable[Mapping[str, Any]] | str | os.PathLike[str],
        *,
        functions: Mapping[str, Callable[..., Any]] | None = None,
        rules: Mapping[str, Mapping[str, Any]] | None = None,
        error_result: ErrorResult | None = None,
        toolset: Toolset | None = None,
        spec: SpecFile | str | os.PathLike[str] | Mapping[str, Any] | None = None,
    ) -> Toolset:
        """Declare every function tool of an OpenAI-style ``tools`` list (no SDK needed).

        Accepts chat completions tools (``{"type": "function", "function": {...}}``),
        Responses function tools (``{"type": "function", "name": ..., "parameters": ...}``)
        and bare function definitions. Built-in and custom tools are skipped.

        Args:
            tools: the ``tools`` list sent to the model (parsed JSON), or the path of a JSON
                file holding it (a ``--tools`` file).
            functions: ``{name: callable}``: implementations (sync or async), called with
                the arguments as keywords.
            rules: ``{name: options}``: extra :meth:`add_schema` options per tool, such as
                ``{"send_message": {"refs": {"person_id": "person_id"}}}``.
            error_result: the error-result recogniser of every tool without its own in ``rules``.
            toolset: add to this toolset instead of a new one.
            spec: a spec file (see :meth:`apply_spec`) merged onto the declared tools.

        Raises:
            SpecError: a definition is malformed (named by its index, ``tools[3]``, and the
                file when ``tools`` is a path), the file is not a UTF-8 JSON list, or
                ``functions`` / ``rules`` name a tool that is not in ``tools``.
        """
        if isinstance(tools, (str, os.PathLike)):
            path = os.fspath(tools)
            definitions = _read_tools_file(path)
            try:
                out = cls.from_openai(definitions, functions=functions, rules=rules, error_result=error_result, toolset=toolset)
            except SpecError as e:
                raise SpecError(f"{path}: {e}") from None
            return out.apply_spec(spec) if spec is not None else out
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
        return out.apply_spec(spec) if spec is not None else out

    # -- spec files -----------------------------------------------------------------------
    def apply_spec(self, spec: SpecFile | str | os.PathLike[str] | Mapping[str, Any]) -> Toolset:
        """Merge a spec file's rules onto the toolset; returns the toolset.

        Args:
            spec: a path (``.yaml``, ``.yml``, ``.json``), a mapping, or a loaded :class:`SpecFile`.
                Its tools must already be declared (from a schema, an OpenAI definition, an MCP
                listing) unless the file gives their ``parameters``.

        Raises:
            SpecError: the file is bad: ``FILE:LINE: what is wrong`` (an unknown tool, a bad path,
                an expression that does not compile, a name a rule reads that nothing declares,
                a ``let`` of a kind nothing observes, ...). Nothing is changed then.

        A ``ref`` kind no tool produces, that the user does not state (``user: true``) and the
        file does not declare ``given``, is logged as the warning ``spec_ref_never_produced``
        (every call with one is refused unless the episode is given it when it starts, which
        the file cannot show).
        """
        loaded = spec if isinstance(spec, SpecFile) else parse_spec(spec) if isinstance(spec, Mapping) else load_spec(spec)
        compiled: dict[str, ToolSpec] = {}
        observed = _compile.observed_kinds(loaded, self._specs.values())
        for name, rules in loaded.tools.items():
            base = self._specs.get(name)
            if base is None:
                if rules.parameters is None:
                    known = ", ".join(sorted(self._specs)[:20]) or "none"
                    raise SpecError(
                        f"{loaded.where('tools', name)}: tools.{name}: there is no tool named {name!r} (known: {known}); "
                        "give its parameters to declare it here"
                    )
                base = Toolset().add_schema(name, rules.parameters, description=rules.description or "")
            compiled[name] = _compile.compile_tool(loaded, name, rules, base, observed=observed)
        _compile.check_probes(loaded, lambda n: compiled.get(n) or self._specs.get(n))
        found = _compile.check_kinds(loaded, {**self._specs, **compiled}.values())
        # order rules are compiled on a trial toolset, so that a bad one changes nothing
        trial = Toolset(
            [*(compiled.get(n, t) for n, t in self._specs.items()), *(t for n, t in compiled.items() if n not in self._specs)]
        )
        trial._logged = dict(self._logged)
        for name, rules in loaded.tools.items():
            for key, options in _order_options(rules):
                try:
                    trial.order(name, **options)
                except SpecError as e:
                    raise SpecError(f"{loaded.where('tools', name, key)}: tools.{name}.{key}: {e}") from None
        for tool in trial:
            if tool is not self._specs.get(tool.name):
                self.add(tool, replace=True)
        self._logged = trial._logged
        for where, kind, message in found:
            get_logger().warning("spec_ref_never_produced", where=where, kind=kind, message=message)
        return self

    @classmethod
    def from_spec(cls, spec: SpecFile | str | os.PathLike[str] | Mapping[str, Any]) -> Toolset:
        """A toolset of the tools a spec file declares with ``parameters`` (and their rules)."""
        return cls().apply_spec(spec)

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
        provenance: ProvenanceRules = None,
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
        provenance: ProvenanceRules = None,
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
            provenance: the sources arguments' values may come from: ``{name: ["user",
                "tool:get_contacts.iban"]}`` or ``{name: Provenance(...)}`` (see
                :mod:`prefixmon.rules.provenance`).
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
                    provenance=_provenance(provenance, tool_name),
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
        provenance: ProvenanceRules = None,
        error_result: ErrorResult | None = None,
        exposed: bool = True,
        coercion: Coercion = "lax",
        unknown: UnknownArguments = "schema",
        assert_formats: bool = False,
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
            coercion: how the server reads argument values: ``"lax"`` (default; what
                pydantic's lax mode accepts, e.g. ``"3"`` for an integer: Python MCP SDK /
                FastMCP servers) or ``"strict"`` (JSON types as they are: zod / ajv servers).
            unknown: arguments the schema does not name: ``"schema"`` (default; refused only
                where ``additionalProperties`` / ``unevaluatedProperties`` say so),
                ``"forbid"`` (refused unless the schema allows extra properties itself) or
                ``"allow"`` (ignored even where the schema forbids them, as zod strips them).
            assert_formats: check ``format`` (``date-time``, ``email``, ...) instead of
                treating it as an annotation.
            replace: replace an existing tool of the same name.

        The other options are as for :meth:`tool`.
        """
        if isinstance(json_schema, str):
            if deeper_than(json_schema, MAX_JSON_DEPTH):
                raise SpecError(f"tool {name!r}: its schema is nested too deeply (more than {MAX_JSON_DEPTH} levels)")
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
                validate=schema_validator(name, schema, coercion=coercion, unknown=unknown, assert_formats=assert_formats),
                func=func,
                is_async=func is not None and inspect.iscoroutinefunction(func),
                requires=tuple(Precondition.wrap(p) for p in requires),
                effects=_sync_rules(name, effects, error_result),
                produces=_produce_tuple(produces),
                invalidates=frozenset(_names(invalidates)),
                refs=ref_pairs,
                grounded=grounded_paths,
                grounding=grounding,
                provenance=_provenance(provenance, name),
                error_result=error_result,
                exposed=exposed,
                metadata=dict(metadata or {}),
            ),
            replace=replace,
        )


def _read_tools_file(path: str) -> list[Any]:
    """A JSON file holding a list of tool definitions; errors name the file (and the line).

    A key given twice in an object (``json.loads`` keeps the last silently) and an integer too
    long to convert are errors too.
    """
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise SpecError(f"{path}: cannot read the tools file ({e.strerror or e})") from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise SpecError(f"{path}: not UTF-8 text (byte {e.start})") from None
    if (deep := deep_line(text)) is not None:  # json would recurse near the interpreter's limit
        raise SpecError(f"{path}:{deep}: nested too deeply to decode (more than {MAX_JSON_DEPTH} levels)")
    try:
        definitions = _decode_json(text, path)
    except json.JSONDecodeError as e:
        raise SpecError(f"{path}:{e.lineno}: not JSON ({e.msg}, column {e.colno})") from None
    except RecursionError:
        raise SpecError(f"{path}: nested too deeply to decode") from None
    if not isinstance(definitions, list):
        raise SpecError(f"{path}: expected a JSON list of tool definitions, got {type(definitions).__name__}")
    return definitions


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


def _order_options(rules: ToolRules) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(key, Toolset.order options)`` of a spec file tool's order rules."""
    for key in ("after", "before"):
        step = getattr(rules, key)
        if step is not None:
            yield key, {key: step.tools, "same": step.same}
    if rules.at_most is not None:
        yield "at_most", {"at_most": rules.at_most}
    if rules.not_after:
        yield "not_after", {"not_after": rules.not_after}


def _tool_names(value: str | Iterable[str]) -> tuple[str, ...]:
    """A tool name or several, as a tuple."""
    return (value,) if isinstance(value, str) else tuple(value)


def _has_argument(spec: ToolSpec, arg: str) -> None:
    """``arg`` is an argument of ``spec`` (when its schema lists its properties)."""
    properties = spec.parameters.get("properties") if isinstance(spec.parameters, Mapping) else None
    if isinstance(properties, Mapping) and properties and arg not in properties:
        raise SpecError(
            f"tool {spec.name!r} has no argument {arg!r} to match in an order rule (its arguments: {', '.join(properties)})"
        )
