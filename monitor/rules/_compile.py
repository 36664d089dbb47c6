"""Spec-file rules compiled into the predicate's vocabulary: references, preconditions, effects, recognisers, probes.

Nothing here is a second predicate: a spec file becomes ordinary :class:`~prefixmon.ToolSpec`
fields (``refs``, ``grounded``, ``produces``, ``invalidates``, ``requires``, ``effects``,
``error_result``, ``metadata``, ``probes``), which the predicate checks like hand-written
ones. Every problem a file can have is found here, when it is applied to a toolset, and
named with the file and line: among them every name a rule reads that nothing declares (an
argument the tool's schema lacks, a constant the file does not give, a ``let`` of a kind no
tool observes), which would otherwise leave the rule undetermined on every call.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import re
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping
from typing import Any, Final

from .._internal.json_depth import loads
from ..exceptions import ArgumentError, SpecError
from ..verdict import ArgumentProblem, Undetermined, quote
from ._cel import (
    Expression,
    ExpressionError,
    Node,
    NotObserved,
    Shape,
    UnknownField,
    check_reads,
    close_name,
    compile_expression,
    element_shape,
    field_shape,
    unknown_field,
)
from ._validation import Validator
from .provenance import Provenance, Trust
from .spec import MISSING, Grounded, Precondition, Probe, Produce, Ref, ToolSpec, resolve_path, values_at
from .specfile import LetRule, SpecFile, ToolRules

__all__ = ("check_kinds", "check_probes", "compile_tool", "observed_kinds")

_TEMPLATE: Final = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)\}")
_STRING: Final = re.compile(r"\"(?:[^\"\\]|\\.)*\"|'(?:[^'\\]|\\.)*'")


def check_probes(spec: SpecFile, lookup: Callable[[str], ToolSpec | None]) -> None:
    """Every probe calls a tool that exists and is declared read-only.

    Raises:
        SpecError: ``FILE:LINE: what``.
    """
    for name, rules in spec.tools.items():
        for i, probe in enumerate(rules.probes):
            target = lookup(probe.call)
            where = spec.where("tools", name, "probes", i)
            if target is None:
                raise SpecError(f"{where}: tools.{name}.probes.{i}: there is no tool named {probe.call!r} to probe with")
            if not target.metadata.get("read_only"):
                raise SpecError(
                    f"{where}: tools.{name}.probes.{i}: {probe.call} is not declared read-only (access: read); "
                    "the monitor only probes with tools that change nothing"
                )
            shape = _arguments(target)
            for key in probe.args:  # a misspelt argument of the probe's tool: the probe fails every time
                problem = unknown_field(shape, key)
                if problem:
                    raise SpecError(f"{where}: tools.{name}.probes.{i}: {problem}")


def observed_kinds(spec: SpecFile, tools: Iterable[ToolSpec]) -> frozenset[str]:
    """Object kinds something observes: the file's ``observes`` and those of spec rules already on ``tools``."""
    kinds = {rule.object for rules in spec.tools.values() for rule in rules.observes}
    for tool in tools:
        kinds.update(rule.object for step in _observations(tool) for rule in step.observes)
    return frozenset(kinds)


def check_kinds(spec: SpecFile, tools: Iterable[ToolSpec]) -> list[tuple[str, str, str]]:
    """A ``let`` of a kind nothing observes is an error; a ``ref`` kind nothing produces is returned, to warn of.

    Returns:
        ``(FILE:LINE, kind, message)`` of each ``ref`` no tool produces.

    ``tools`` is the whole toolset after the merge (the file's tools compiled). A let nothing can
    ever bind leaves every rule that reads it undetermined. A ref nothing produces refuses every
    call with one, unless the user states it (``user: true``) or the episode is given it when it
    starts (``monitor.episode(bindings=...)``, declared with the file's ``given``), which the
    loader cannot see: so that one warns rather than fails.

    Raises:
        SpecError: ``FILE:LINE: what``.
    """
    tools = list(tools)
    observed = observed_kinds(spec, tools)
    producers: dict[str, set[str]] = {}
    for tool in tools:
        for produce in tool.produces:
            producers.setdefault(produce.kind, set()).add(tool.name)
        for step in _observations(tool):
            for kind, _ in step.binders:
                producers.setdefault(kind, set()).add(tool.name)
    found: list[tuple[str, str, str]] = []
    for name, rules in spec.tools.items():
        for var, let in rules.let.items():
            if let.object not in observed:
                kinds = ", ".join(sorted(observed)) or "none"
                raise SpecError(
                    f"{spec.where('tools', name, 'let', var)}: tools.{name}.let.{var}: no tool observes objects of kind "
                    f"{let.object!r} (observed kinds: {kinds}{close_name(let.object, observed)}), "
                    "so every rule that reads it is undetermined"
                )
        for path, arg in rules.args.items():
            if arg.ref is None or arg.user or arg.ref in producers or arg.ref in spec.given:
                continue
            near = difflib.get_close_matches(arg.ref, list(producers), n=1)
            hint = (
                f"; did you mean {near[0]!r} (produced by {', '.join(sorted(producers[near[0]]))})?"
                if near
                else f"; kinds tools produce: {_listed(producers)}"
            )
            where = spec.where("tools", name, "args", path)
            message = (
                f"{where}: tools.{name}.args.{path}: no tool produces references of kind {arg.ref!r}, so every call "
                f"with one is refused unless the episode is given them (monitor.episode(bindings=...); say so with "
                f"given: [{arg.ref}]){hint}"
            )
            found.append((where, arg.ref, message))
    return found


def _listed(producers: Mapping[str, set[str]]) -> str:
    """``order_id (get_order, list_orders), user_id (find_user)``, or ``none``."""
    return ", ".join(f"{kind} ({', '.join(sorted(tools))})" for kind, tools in sorted(producers.items())) or "none"


def compile_tool(
    spec: SpecFile, name: str, rules: ToolRules, base: ToolSpec, *, observed: frozenset[str] | None = None
) -> ToolSpec:
    """``base`` with the file's rules for it merged in (the tool's own rules come first).

    ``observed``: object kinds observed before this file (other files' rules on the toolset),
    which ``seen()`` may name besides the file's own.

    Raises:
        SpecError: a bad argument path, an unknown name in a ``let``, an expression that does
            not compile or reads an undeclared name (an argument the tool's schema does not
            declare, a constant the file does not give); ``FILE:LINE: what``.
    """
    where = spec.where
    roots: dict[str, Shape | None] = {"args": _arguments(base), "constants": _constants(spec), **dict.fromkeys(rules.let)}
    for path in rules.args:
        _check_arg_path(roots["args"], path, f"{where('tools', name, 'args', path)}: tools.{name}.args.{path}: ")
    for var, let in rules.let.items():
        for path in let.paths:
            root = path.split(".", 1)[0]
            if root != "args" and root not in rules.let:
                raise SpecError(f"{where('tools', name, 'let', var)}: tools.{name}.let.{var}: {path!r} starts with no known name")
            _check_path(roots, path, path, f"{where('tools', name, 'let', var)}: tools.{name}.let.{var}: ")
    for j, shows in enumerate(rules.observes):
        prefix = f"{where('tools', name, 'observes', j)}: tools.{name}.observes.{j}: "
        for path in ((shows.id,) if isinstance(shows.id, str) else shows.id) + tuple(shows.fields.values()):
            if path.startswith("args."):  # (else a field of the object)
                _check_path(roots, path, path, prefix)
    for j, effect in enumerate(rules.effects):
        _check_path(roots, effect.id, effect.id, f"{where('tools', name, 'effects', j)}: tools.{name}.effects.{j}: ")
    for j, probe in enumerate(rules.probes):
        for value in probe.args.values():
            if isinstance(value, str) and value.split(".", 1)[0] in roots:  # a path, as Probe.arguments reads it
                _check_path(roots, value, value, f"{where('tools', name, 'probes', j)}: tools.{name}.probes.{j}: ")
    refs = [*base.refs, *((path, Ref(arg.ref, user=arg.user)) for path, arg in rules.args.items() if arg.ref)]
    grounded = (*base.grounded, *(p for p, a in rules.args.items() if a.grounded and p not in base.grounded))
    grounding = {
        **base.grounding,
        **{
            p: Grounded("normalized" if a.grounded is True else a.grounded, block=a.block)
            for p, a in rules.args.items()
            if a.grounded
        },
    }
    provenance = _provenance(spec, name, rules, base, access=rules.access or spec.defaults.access)
    produces = (
        *base.produces,
        *(Produce(kind=k, key=v) for k, v in rules.produces.items() if v not in (".", "*") and v[0] != "~"),
    )
    binders = tuple((k, v) for k, v in rules.produces.items() if v in (".", "*") or v[0] == "~")
    requires = [*base.requires, *_preconditions(spec, name, rules, roots, observed or frozenset())]
    patterns = tuple((path, re.compile(arg.pattern)) for path, arg in rules.args.items() if arg.pattern is not None)
    access = rules.access or spec.defaults.access
    observe = base.observe
    if rules.observes or rules.effects or rules.stale or rules.forgets or binders or access != "read":
        observe = _Observe(name, rules, writes=access != "read", then=base.observe)
    recognisers = [*spec.defaults.errors, *rules.errors]
    error_result = base.error_result
    if recognisers:
        error_result = _Recognise(tuple(recognisers), error_result)
    metadata = dict(base.metadata)
    if rules.commutes:
        metadata["commutes"] = (*metadata.get("commutes", ()), *rules.commutes)
    if access is not None:
        metadata["access"] = access
        metadata["read_only"] = access == "read"
    probes = tuple(
        Probe(
            name=p.for_,
            object=(let := _let(spec, name, rules, p.for_, i)).object,
            id=let.paths[0],  # _let refuses a composite id here
            call=p.call,
            args=dict(p.args),
            budget=spec.probe_budget,
            timeout=spec.probe_timeout,
        )
        for i, p in enumerate(rules.probes)
    )
    return dataclasses.replace(
        base,
        description=rules.description if rules.description is not None else base.description,
        validate=_Patterned(base.validate, patterns) if patterns else base.validate,
        refs=tuple(refs),
        grounded=tuple(dict.fromkeys(grounded)),
        grounding=grounding,
        provenance=provenance,
        produces=produces,
        invalidates=base.invalidates | frozenset(rules.invalidates),
        requires=tuple(requires),
        observe=observe,
        error_result=error_result,
        metadata=metadata,
        probes=(*base.probes, *probes),
    )


def _provenance(spec: SpecFile, name: str, rules: ToolRules, base: ToolSpec, *, access: str | None) -> dict[str, Provenance]:
    """The tool's provenance rules: its own, the file's per argument (``from``), and for a write tool the file's ``writes``."""
    settings = spec.provenance
    trust = Trust(settings.trust.trusted, settings.trust.untrusted)
    out = dict(base.provenance)
    writes = settings.writes if access == "write" else None
    if writes:
        properties = base.parameters.get("properties") if isinstance(base.parameters, Mapping) else None
        for arg_name in properties if isinstance(properties, Mapping) else ():
            if isinstance(arg_name, str) and arg_name not in out:
                out[arg_name] = Provenance(writes, trust=trust)
    for path, arg in rules.args.items():
        if arg.from_ is None and not arg.not_from:
            continue
        sources: tuple[str, ...] = arg.from_ if arg.from_ is not None else writes or ()
        if not sources and arg.not_from:  # only what it may not carry: anything else goes
            sources = ("any",)
        try:
            if sources:
                out[path] = Provenance(sources, trust=trust, deny=arg.not_from)
            else:
                out.pop(path, None)
        except SpecError as e:
            raise SpecError(f"{spec.where('tools', name, 'args', path)}: tools.{name}.args.{path}: {e}") from None
    return out


# -- names a rule reads ----------------------------------------------------------------------------
def _arguments(tool: ToolSpec) -> Shape | None:
    """The shape of a tool's arguments: its parameters schema."""
    return Shape(tool.parameters, tool.parameters, tool.name, "argument") if isinstance(tool.parameters, Mapping) else None


def _constants(spec: SpecFile) -> Shape:
    """The shape of ``constants``: every key the file gives, and no other."""
    schema = _value_schema(dict(spec.constants), 0)
    return Shape(schema, schema, "the file", "constant")


def _value_schema(value: Any, depth: int) -> dict[str, Any]:
    """A closed object schema of a mapping's keys (nested mappings too); other values have none."""
    if isinstance(value, Mapping) and depth < 32:
        properties = {str(k): _value_schema(v, depth + 1) for k, v in value.items()}
        return {"type": "object", "properties": properties, "additionalProperties": False}
    return {}


def _walk(tree: Node, roots: Mapping[str, Shape | None], prefix: str) -> None:
    """:func:`check_reads` of an expression, its problem a ``SpecError`` after ``prefix`` (``FILE:LINE: where: ``)."""
    try:
        check_reads(tree, roots)
    except UnknownField as e:
        raise SpecError(f"{prefix}{e}") from None


def _check_path(roots: Mapping[str, Shape | None], path: str, shown: str, prefix: str) -> None:
    """Every step of a dotted path (``args.payment.method``) is a field its value declares, where it declares them."""
    first, *rest = path.split(".")
    shape = roots.get(first)
    walked = first
    try:
        for part in rest:
            walked = f"{walked}.{part}"
            shape = field_shape(shape, part, shown if walked == path else walked)
    except UnknownField as e:
        raise SpecError(f"{prefix}{e}") from None


def declares_arg_path(tool: ToolSpec, path: str) -> bool:
    """Whether a spec may name the argument path (``items[].item_id``): every step declared where the schema closes them."""
    try:
        _check_arg_path(_arguments(tool), path, "")
    except SpecError:
        return False
    return True


def _check_arg_path(shape: Shape | None, path: str, prefix: str) -> None:
    """An argument path (``items[].item_id``, relative to the arguments): each name declared, ``[]`` into list items."""
    walked = "args"
    for part in path.split("."):
        name = part.removesuffix("[]")
        problem = unknown_field(shape, name)
        if problem:
            raise SpecError(f"{prefix}{problem}")
        walked = f"{walked}.{name}"
        shape = field_shape(shape, name, walked)
        if part.endswith("[]"):
            shape = element_shape(shape, walked)


def _observations(tool: ToolSpec) -> Iterator[_Observe]:
    """The spec rules observing a tool's results: its own, then those of earlier files (``then``)."""
    step = tool.observe
    while isinstance(step, _Observe):
        yield step
        step = step.then


class _Patterned:
    """``validate``, then every string at a patterned path must match its pattern in full."""

    __slots__ = ("patterns", "validate")

    def __init__(self, validate: Validator, patterns: tuple[tuple[str, re.Pattern[str]], ...]) -> None:
        self.validate = validate
        self.patterns = patterns

    def __call__(self, args: dict[str, Any]) -> dict[str, Any]:
        args = self.validate(args)
        problems = [
            ArgumentProblem(
                kind="value",
                location=(loc,),
                message=f"must be written as {quote(pattern.pattern)} (the spec's pattern), got {quote(value)}",
            )
            for path, pattern in self.patterns
            for loc, value in values_at(args, path)
            if type(value) is str and pattern.fullmatch(value) is None
        ]
        if problems:
            raise ArgumentError(problems)
        return args


def _let(spec: SpecFile, name: str, rules: ToolRules, var: str, i: int) -> LetRule:
    let = rules.let.get(var)
    if let is None:
        raise SpecError(
            f"{spec.where('tools', name, 'probes', i)}: tools.{name}.probes.{i}: 'for: {var}' names no let variable "
            f"(its let: {', '.join(rules.let) or 'none'})"
        )
    if not isinstance(let.id, str):
        raise SpecError(
            f"{spec.where('tools', name, 'probes', i)}: tools.{name}.probes.{i}: {var} has a composite id; "
            "probes fill variables looked up by one path"
        )
    return let


_SEEN: Final = re.compile(r"(?<![\w.])seen\s*\(\s*(\"(?:[^\"\\]|\\.)*\"|'(?:[^'\\]|\\.)*')?")


def _seen_kinds(spec: SpecFile, name: str, i: int, source: str, before: frozenset[str]) -> None:
    """Every ``seen(kind, ...)`` names, as a string literal, a kind some tool of the file (or ``before`` it) observes.

    Raises:
        SpecError: ``FILE:LINE: what`` (a typo would leave the rule undetermined forever).
    """
    observed = before | {rule.object for tool in spec.tools.values() for rule in tool.observes}
    where = spec.where("tools", name, "requires", i)
    for m in _SEEN.finditer(source):
        literal = m.group(1)
        if literal is None:
            raise SpecError(f'{where}: tools.{name}.requires.{i}: seen() takes the kind as a string literal: seen("flight", id)')
        kind = literal[1:-1]
        if kind not in observed:
            raise SpecError(
                f"{where}: tools.{name}.requires.{i}: seen({literal}, ...) names a kind no tool observes "
                f"(observed kinds: {', '.join(sorted(observed)) or 'none'})"
            )


def _preconditions(
    spec: SpecFile, name: str, rules: ToolRules, roots: Mapping[str, Shape | None], observed: frozenset[str]
) -> Iterator[Precondition]:
    variables = ("args", "constants", *rules.let)
    for i, rule in enumerate(rules.requires):
        if not rule.enabled:
            continue
        where = spec.where("tools", name, "requires", i)
        try:
            expression = compile_expression(rule.expr, variables)
        except ExpressionError as e:
            known = f" (it may read {', '.join(variables)})" if "undeclared reference" in str(e) else ""
            raise SpecError(f"{where}: tools.{name}.requires.{i}: the expression does not compile: {e}{known}") from None
        except ImportError as e:
            raise SpecError(f"{where}: tools.{name}.requires.{i}: CEL preconditions need the cel extra: {e}") from None
        _seen_kinds(spec, name, i, rule.expr, observed)
        tree = expression.tree()
        if tree is not None:
            _walk(tree, roots, f"{where}: tools.{name}.requires.{i}: ")
        reads = _reads(rule.expr, rules.let)
        for field in _TEMPLATE.findall(rule.message or ""):
            root = field.split(".", 1)[0]
            if root not in variables:
                raise SpecError(f"{where}: tools.{name}.requires.{i}: the message reads {{{field}}}, which names nothing")
            _check_path(roots, field, f"the message reads {{{field}}}", f"{where}: tools.{name}.requires.{i}: ")
        needed = _needed(reads, rules.let)
        projections = {var: _fields_read(rule.expr, rule.message or "", var, rules.let) for var in needed}
        check = _Expression(
            name=rule.name or f"rule_{i + 1}",
            expression=expression,
            lets=tuple((var, rules.let[var], projections[var]) for var in needed),
            constants=dict(spec.constants),
            message=rule.message,
            last_seen=rule.last_seen,
        )
        yield Precondition(check=check, message=rule.message or f"{name}: {rule.expr} does not hold", name=check.__name__)


def _reads(source: str, lets: Mapping[str, LetRule]) -> list[str]:
    """The let variables an expression names (outside string literals)."""
    code = _STRING.sub('""', source)
    return [var for var in lets if re.search(rf"(?<![\w.]){re.escape(var)}\b", code)]


def _fields_read(expr: str, message: str, var: str, lets: Mapping[str, LetRule]) -> frozenset[str] | None:
    """The fields of ``var`` an expression and its message read, when it reads only ``var.field``s; else ``None``.

    Binding just those fields keeps the activation as small as what the expression reads: a
    large observed object costs nothing beyond the fields a rule looks at.
    """
    fields: set[str] = set()
    code = _STRING.sub('""', expr) + " " + " ".join(_TEMPLATE.findall(message))
    code += " " + " ".join(path for let in lets.values() for path in let.paths)  # a later let's id may read this one
    for m in re.finditer(rf"(?<![\w.]){re.escape(var)}\b(\.([A-Za-z_][A-Za-z0-9_]*))?", code):
        if m.group(2) is None:
            return None  # used as a whole (indexed, passed to a function, compared)
        fields.add(m.group(2))
    return frozenset(fields)


def _needed(reads: Iterable[str], lets: Mapping[str, LetRule]) -> list[str]:
    """``reads`` and the variables their ids read, in binding order (a let may read an earlier one)."""
    needed: set[str] = set()
    todo = list(reads)
    while todo:
        var = todo.pop()
        if var in needed:
            continue
        needed.add(var)
        for path in lets[var].paths:
            root = path.split(".", 1)[0]
            if root in lets:
                todo.append(root)
    return [var for var in lets if var in needed]


class _Expression:
    """A CEL precondition: binds exactly the objects it reads, by id, in O(1) each."""

    __slots__ = ("__name__", "constants", "expression", "last_seen", "lets", "message")

    def __init__(
        self,
        *,
        name: str,
        expression: Expression,
        lets: tuple[tuple[str, LetRule, frozenset[str] | None], ...],
        constants: dict[str, Any],
        message: str | None,
        last_seen: bool = False,
    ) -> None:
        self.__name__ = name
        self.expression = expression
        self.lets = lets
        self.constants = constants
        self.message = message
        self.last_seen = last_seen
        """Stale objects still decide (forgotten ones do not)."""

    def __call__(self, state: Any, args: Mapping[str, Any]) -> bool | str | Undetermined:
        values: dict[str, Any] = {"args": args, "constants": self.constants}
        objects = state.objects
        for var, let, fields in self.lets:
            ident = _ident(let.id, values)
            if ident is MISSING:
                return Undetermined(f"{_shown(let.id)} has no value, so the {let.object} is not known")
            seen = objects.get(let.object, ident)
            if seen is None:
                return Undetermined(f"{let.object} {quote(ident)} was not observed")
            if not self._decides(seen):
                return Undetermined(f"{let.object} {quote(ident)} may have changed since {seen.stale_by or 'a write'} ran")
            whole = seen.fields
            values[var] = whole if fields is None else {f: whole[f] for f in fields if f in whole}

        def lookup(kind: str, ident: Any) -> Mapping[str, Any]:
            seen = objects.get(kind, ident)
            if seen is None:
                raise NotObserved(f"{kind} {quote(ident)} was not observed")
            if not self._decides(seen):
                raise NotObserved(f"{kind} {quote(ident)} may have changed since {seen.stale_by or 'a write'} ran")
            return seen.fields  # type: ignore[no-any-return]

        try:
            result = self.expression.evaluate(values, lookup)
        except NotObserved as e:
            text = str(e)
            if "cannot decide" in text:  # a helper could not read a value (time() of what is not a date)
                return Undetermined(f"{self.expression.source} could not be decided ({text})")
            return Undetermined(f"{self.expression.source} reads a field that was not observed ({text})")
        if result is True:
            return True
        if result is False:
            return _fill(self.message, values) if self.message else False
        raise TypeError(f"the expression {self.expression.source!r} gave {type(result).__name__}, not a bool")

    def _decides(self, seen: Any) -> bool:
        """What was seen of the object may decide: it is current, or stale but bounded and the rule reads last-seen views."""
        return bool(seen.current or (self.last_seen and not seen.forgotten))


def _ident(paths: str | tuple[str, ...], values: Mapping[str, Any]) -> Any:
    """The id at a path, or the tuple of a composite id's parts; ``MISSING`` when a part has no scalar value."""
    parts = []
    for path in (paths,) if isinstance(paths, str) else paths:
        value = resolve_path(path, values)
        if value is MISSING or value is None or isinstance(value, (Mapping, list)):
            return MISSING
        parts.append(value)
    return parts[0] if isinstance(paths, str) else tuple(parts)


def _shown(paths: str | tuple[str, ...]) -> str:
    return paths if isinstance(paths, str) else "[" + ", ".join(paths) + "]"


def _fill(template: str, values: Mapping[str, Any]) -> str:
    def field(m: re.Match[str]) -> str:
        value = resolve_path(m.group(1), values)
        return "?" if value is MISSING else str(value)

    return _TEMPLATE.sub(field, template)


class _Observe:
    """After an accepted call: what a write may have changed goes stale, results are observed, declared effects apply."""

    __slots__ = ("__name__", "binders", "forgets", "kinds", "observes", "then", "tool", "updates", "writes")

    def __init__(self, tool: str, rules: ToolRules, *, writes: bool, then: Any) -> None:
        self.__name__ = "observe"
        self.tool = tool
        self.writes = writes
        self.observes = rules.observes
        self.updates = rules.effects
        self.kinds = rules.stale
        self.forgets = rules.forgets
        self.binders = _binders(rules)
        """References bound from the whole result: ``(kind, "." | "*" | "~REGEX")``."""
        self.then = then
        """An earlier spec file's observation of the same tool, applied first."""

    def __call__(self, state: Any, args: Mapping[str, Any], result: Any) -> None:
        if self.then is not None:
            self.then(state, args, result)
        objects = state.objects
        depth = state.depth
        values = {"args": args}
        if self.writes:
            declared = {resolve_path(e.id, values) for e in self.updates if not e.delete}
            for value in _named_ids(args):
                kept = frozenset(e.object for e in self.updates if not e.delete and resolve_path(e.id, values) == value)
                objects.stale(value, by=self.tool, depth=depth, keep=kept if value in declared else frozenset())
        for kind in self.kinds:
            objects.stale_kind(kind, by=self.tool, depth=depth)
        for kind in self.forgets:
            objects.stale_kind(kind, by=self.tool, depth=depth, forget=True)
        if self.binders and result is not None:
            _bind_whole(state, self.tool, self.binders, result)
        if self.observes and result is not None:
            data = _as_data(result)
            for rule in self.observes:
                for found in _located(data, rule.at):
                    if isinstance(rule.id, str):
                        ident = _observed_id(rule.id, values, found)
                    else:
                        parts = tuple(_observed_id(path, values, found) for path in rule.id)
                        scalar = all(p is not MISSING and p is not None and not isinstance(p, (Mapping, list)) for p in parts)
                        ident = parts if scalar else MISSING
                    if ident is not MISSING and ident is not None and not isinstance(ident, (Mapping, list)):
                        if rule.fields:  # fields from the call: the product a variant was listed under
                            extra = {k: resolve_path(path, values) for k, path in rule.fields.items()}
                            found = {**found, **{k: v for k, v in extra.items() if v is not MISSING}}
                        objects.observe(rule.object, ident, found, depth=depth, tool=self.tool)
        for effect in self.updates:
            ident = resolve_path(effect.id, values)
            if ident is MISSING or ident is None:
                continue
            if effect.delete:
                objects.forget(effect.object, ident, depth=depth, tool=self.tool)
            else:
                objects.update(effect.object, ident, effect.set, depth=depth, tool=self.tool)


def _observed_id(path: str, values: Mapping[str, Any], found: Mapping[str, Any]) -> Any:
    """An object's id: a path into the call (``args.x``) or a field of the object."""
    return resolve_path(path, values) if path.startswith("args.") else found.get(path, MISSING)


def _binders(rules: ToolRules) -> tuple[tuple[str, str], ...]:
    """``produces`` entries that bind from the result as a whole (``.``, ``*``, ``~REGEX``), not from a key."""
    return tuple((k, v) for k, v in rules.produces.items() if v in (".", "*") or v.startswith("~"))


def _bind_whole(state: Any, tool: str, binders: tuple[tuple[str, str], ...], result: Any) -> None:
    """References a result holds as a whole: the answer itself, each value of an object, each pattern match."""
    for kind, how in binders:
        if how == ".":
            value = result.strip() if isinstance(result, str) else result
            if isinstance(value, (str, int)) and not isinstance(value, bool) and value != "":
                state.bind(kind, value, tool=tool)
        elif how == "*":
            data = _as_data(result)
            if isinstance(data, Mapping):
                for value in data.values():
                    if isinstance(value, (str, int)) and not isinstance(value, bool):
                        state.bind(kind, value, tool=tool)
        else:
            for found in re.findall(how[1:], _text(result)):
                if isinstance(found, str) and found:
                    state.bind(kind, found, tool=tool)


def _named_ids(args: Mapping[str, Any]) -> Iterator[Hashable]:
    """Scalar argument values (and those in top-level lists): the ids a write may touch."""
    for value in args.values():
        if isinstance(value, (str, int)) and not isinstance(value, bool):
            yield value
        elif isinstance(value, (list, tuple)):
            yield from (v for v in value if isinstance(v, (str, int)) and not isinstance(v, bool))


def _as_data(result: Any) -> Any:
    """A result as JSON data: parsed JSON text, a pydantic model's dump, MCP structured content."""
    if isinstance(result, (str, bytes)) and result[:1] in ("{", "[", b"{", b"["):
        try:
            return loads(result)
        except ValueError:
            return result
    structured = getattr(result, "structuredContent", None)
    if isinstance(structured, Mapping):
        return structured
    if hasattr(result, "model_dump"):
        return result.model_dump()
    return result


def _located(data: Any, at: str) -> Iterator[Mapping[str, Any]]:
    """The objects at a result path (``''`` the result itself; ``items[]`` each element)."""
    if not at or at == "[]":
        yield from _flat(data)
        return
    if ".*" in at:  # each value of the mapping(s) at the path before it
        head, _, rest = at.partition(".*")
        for holder in _located(data, head):
            for value in holder.values():
                if rest:
                    yield from _located(value, rest.removeprefix("."))
                elif isinstance(value, Mapping):
                    yield value
        return
    holder = data if isinstance(data, Mapping) else {"": data}
    for _, value in values_at(holder, at):
        if isinstance(value, Mapping):
            yield value


def _flat(data: Any, depth: int = 0) -> Iterator[Mapping[str, Any]]:
    """A mapping, or the mappings in a list (nested lists flattened: one-stop flights come in pairs)."""
    if isinstance(data, Mapping):
        yield data
    elif isinstance(data, list) and depth < 4:
        for item in data:
            yield from _flat(item, depth + 1)


class _Recognise:
    """Error-result recognisers of a tool, tried in order; the tool's own recogniser first."""

    __slots__ = ("__name__", "first", "rules")

    def __init__(self, rules: tuple[Any, ...], first: Any) -> None:
        self.__name__ = "errors"
        self.rules = rules
        self.first = first

    def __call__(self, result: Any) -> str | None:
        if self.first is not None:
            found = self.first(result)
            if found:
                return str(found)
        text: str | None = None
        for rule in self.rules:
            if rule.is_error is not None:
                flag = result.get("isError") if isinstance(result, Mapping) else getattr(result, "isError", None)
                if bool(flag) == rule.is_error and flag is not None:
                    return _text(result) or "the tool reported an error"
            elif rule.text is not None:
                text = _text(result) if text is None else text
                if re.search(rule.text, text):
                    return text
            else:
                data = _as_data(result)
                value = resolve_path(rule.json_path, data) if isinstance(data, Mapping) else MISSING
                if value is not MISSING and (rule.equals is None or value == rule.equals):
                    return f"{rule.json_path}: {value}" if rule.equals is None else _text(result)
        return None


def _text(result: Any) -> str:
    """The text of a result: a string, MCP text content, or its JSON."""
    if isinstance(result, str):
        return result
    if isinstance(result, bytes):
        return result.decode("utf-8", "replace")
    content = result.get("content") if isinstance(result, Mapping) else getattr(result, "content", None)
    if isinstance(content, list):
        parts = [p.get("text") if isinstance(p, Mapping) else getattr(p, "text", None) for p in content]
        return "\n".join(p for p in parts if isinstance(p, str))
    try:
        return json.dumps(result, default=str)
    except (TypeError, ValueError, RecursionError):
        return ""
