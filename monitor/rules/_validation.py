"""Argument validators: pydantic models for Python tools, JSON Schema for schema-declared tools.

A validator is ``(args) -> args``: it returns the validated arguments or raises
:class:`~prefixmon.exceptions.ArgumentError` with every problem it found, located, so that
callers (the predicate, plan verification) read structure, never message text.

A JSON Schema validator models the *server's* validation, because under ``block`` a schema
verdict must refuse only what the server would refuse:

- the dialect is the schema's ``$schema`` (draft-04, -06, -07, 2019-09, 2020-12), 2020-12
  when absent (the MCP default);
- ``additionalProperties`` / ``unevaluatedProperties`` apply exactly as written; arguments
  the schema does not mention are accepted (``unknown="forbid"`` refuses them,
  ``unknown="allow"`` strips them first as zod does);
- ``format`` is an annotation unless ``assert_formats=True``;
- ``coercion`` says how the server reads values (:data:`Coercion`): ``"lax"`` as pydantic's
  lax mode (``"3"`` for an integer, ``1`` for a boolean, JSON text for a list argument as the
  Python MCP SDK pre-parses it, a naive ISO datetime for ``date-time``); ``"strict"`` JSON
  types as they are (ajv, ``jsonschema``); ``"zod"`` as strict, except what zod may coerce or
  strip; ``"unknown"`` as any common server may read them;
- what a mode only *may* accept (:data:`Reading`) is not refused until the server refuses
  such a value (:meth:`JsonSchemaValidator.learn` reads its answers): under ``"lax"``,
  ``null`` for an optional argument without a default (a schema rewritten without its
  ``null`` branch); under ``"zod"``, a number read with ``Number()`` and properties the
  schema forbids (``z.object`` strips them); under ``"unknown"``, pydantic's lax reading,
  ``Number()`` and the optional ``null``;
- ``pattern`` also matches as Python's ``re`` reads it (a Unicode digit for ``\\d``, as
  pydantic and the Python ``jsonschema`` do), except under ``"zod"`` (JavaScript's reading);
- only local ``$ref`` s (``#/...``, and ids inside the schema) are resolved. A remote or file
  reference is never fetched: the part it names accepts any value (the monitor cannot know
  what it says, so it refuses nothing because of it) and the reference is listed in
  :attr:`JsonSchemaValidator.ignored_refs` and logged once at declaration.

The arguments are passed on unchanged (a lax coercion only decides whether the server would
accept them; the server does its own coercion).
"""

from __future__ import annotations

import contextlib
import json
import math
import re
import urllib.parse
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import replace
from typing import Any, Final, Literal, TypeAlias, get_args

import jsonschema_rs
from pydantic import BaseModel, ValidationError
from pydantic_core import PydanticSerializationError, SchemaValidator, to_jsonable_python

from .._internal.log import get_logger
from ..exceptions import ArgumentError, SpecError
from ..verdict import ArgumentProblem, Location
from ._coercion import (
    LAX_FORMATS,
    MAX_DEPTH,
    Reading,
    Readings,
    Tolerance,
    coerce,
    json_type,
    object_nodes,
    optional_without_default,
    path_text,
    pre_parse,
    python_matches,
    schema_at,
)

__all__ = (
    "MAX_PROBLEMS",
    "Coercion",
    "JsonSchemaValidator",
    "Reading",
    "UnknownArguments",
    "Validator",
    "model_validator",
    "schema_validator",
)

Validator = Callable[[dict[str, Any]], dict[str, Any]]
"""Validates and normalises a dict of arguments; raises :class:`ArgumentError`."""

Coercion: TypeAlias = Literal["lax", "strict", "zod", "unknown"]
"""How the server reads argument values. ``lax``: what pydantic's lax mode accepts (Python MCP
SDK / FastMCP servers); ``strict``: JSON types as they are (ajv, ``jsonschema``: mcp 1.x's
low-level ``Server``); ``zod``: as strict, but a number may be read with JavaScript's
``Number()`` (``z.coerce.number()`` publishes a plain ``number``) and properties the schema
forbids may be stripped (``z.object`` publishes ``additionalProperties: false``); ``unknown``:
not known (a value pydantic's lax mode or ``Number()`` reads as fitting, or ``null`` for an
optional argument, is not refused until the server refuses one)."""

UnknownArguments: TypeAlias = Literal["schema", "forbid", "allow"]
"""Arguments the schema's ``properties`` do not name: ``schema`` as the schema says
(``additionalProperties`` / ``unevaluatedProperties``; allowed when it says nothing);
``forbid`` refused unless the schema itself allows extra properties; ``allow`` stripped
before validation, even where the schema forbids them (zod's default ``strip``)."""

MAX_PROBLEMS: Final = 20
"""Problems kept per failed validation (the rest are counted in ``ArgumentError.more``)."""

_MAX_COUNTED: Final = 10_000
"""Errors read from the validator at most per failed call (``more`` is counted up to it)."""

_DIALECTS: Final[tuple[tuple[str, type[jsonschema_rs.Validator], str], ...]] = (
    ("draft-04", jsonschema_rs.Draft4Validator, "draft-04"),
    ("draft-06", jsonschema_rs.Draft6Validator, "draft-06"),
    ("draft-07", jsonschema_rs.Draft7Validator, "draft-07"),
    ("2019-09", jsonschema_rs.Draft201909Validator, "2019-09"),
    ("2020-12", jsonschema_rs.Draft202012Validator, "2020-12"),
)


# -- pydantic models (Python tools) ---------------------------------------------------------
def _pydantic_problems(e: ValidationError) -> ArgumentError:
    problems = []
    for err in e.errors(include_url=False)[:MAX_PROBLEMS]:
        loc: Location = tuple(p if isinstance(p, int) else str(p) for p in err["loc"])
        kind = err["type"]
        if kind == "missing":
            problems.append(ArgumentProblem(kind="missing", location=loc, message=err["msg"]))
        elif kind == "extra_forbidden":
            problems.append(ArgumentProblem(kind="unknown", location=loc, message=err["msg"]))
        else:
            problems.append(ArgumentProblem(kind="value" if loc else "root", location=loc, message=err["msg"]))
    return ArgumentError(problems, more=max(0, e.error_count() - len(problems)))


def model_validator(model: type[BaseModel]) -> Validator:
    """A validator for a pydantic model of the arguments (every problem is reported)."""
    # The core validator directly (what model_validate calls), skipping its Python wrapper.
    core = model.__pydantic_validator__
    validate = core.validate_python if isinstance(core, SchemaValidator) else model.model_validate

    def run(args: dict[str, Any]) -> dict[str, Any]:
        try:
            return validate(args).__dict__
        except ValidationError as e:
            raise _pydantic_problems(e) from None

    return run


# -- JSON Schema (schema-declared tools) ----------------------------------------------------
def _dialect(name: str, schema: Mapping[str, Any]) -> tuple[type[jsonschema_rs.Validator], str]:
    """The validator class and dialect name the schema's ``$schema`` declares (2020-12 when absent)."""
    declared = schema.get("$schema")
    if declared is None:
        return jsonschema_rs.Draft202012Validator, "2020-12"
    if not isinstance(declared, str):
        raise SpecError(f"tool {name!r}: $schema must be a string, got {type(declared).__name__}")
    for marker, cls, dialect in _DIALECTS:
        if marker in declared:
            return cls, dialect
    if "draft-03" in declared or "draft-02" in declared or "draft-01" in declared:
        raise SpecError(f"tool {name!r}: JSON Schema {declared!r} is not supported (draft-04 or later)")
    # A dialect we do not know (a custom meta-schema): its URL is never fetched.
    return jsonschema_rs.Draft202012Validator, "2020-12"


def _preview(value: Any, limit: int = 40) -> str:
    if value is None or isinstance(value, bool):
        return "null" if value is None else ("true" if value else "false")
    if isinstance(value, int) or (isinstance(value, float) and math.isfinite(value)):
        text = str(value)
        return text if len(text) <= limit else text[: limit - 3] + "..."
    if isinstance(value, str) and len(value) > limit:
        value = value[:limit]  # the preview is cut below anyway: never encode a long string whole
    try:
        text = json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError, RecursionError):
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _got(value: Any) -> str:
    kind = json_type(value)
    if kind == "null":
        return "got null"
    if kind in ("array", "object"):
        return f"got an {kind}"
    return f"got {kind} {_preview(value)}"


def _options(values: Iterable[Any], limit: int = 8) -> str:
    values = list(values)
    shown = ", ".join(_preview(v, 30) for v in values[:limit])
    return shown + (f", ... ({len(values)} in all)" if len(values) > limit else "")


_MAX_LOCATION: Final = 16
"""Location parts kept in a problem: a problem deeper down is reported at its ancestor."""


def _loc(path: Iterable[str | int]) -> Location:
    return tuple(p if isinstance(p, int) else str(p) for p in path)


def _closest(context: list[list[jsonschema_rs.ValidationError]], here: Location) -> str:
    """What the allowed forms of an ``anyOf``/``oneOf`` need, in one short clause."""
    branches = [errors for errors in context if errors]
    if not branches:
        return "matches none of the allowed forms"
    types: list[str] = []
    for errors in branches:
        if len(errors) != 1 or not isinstance(errors[0].kind, jsonschema_rs.ValidationErrorKind.Type):
            types = []
            break
        types.extend(t for t in errors[0].kind.types if t not in types)
    if types:
        return f"must be {' or '.join(types)}, {_got(branches[0][0].instance)}"
    best = min(branches, key=len)[0]
    inner = _describe(best)
    where = _loc(best.instance_path)
    if len(where) > len(here):
        inner = f"{ArgumentProblem(kind='value', location=where[len(here) :], message=inner)}"
    return f"matches none of the allowed forms (closest: {inner})"


def _describe(e: jsonschema_rs.ValidationError) -> str:
    """A short, model-readable description of one validation error (values are previewed, never dumped)."""
    k = e.kind
    K = jsonschema_rs.ValidationErrorKind
    v = e.instance
    if isinstance(k, K.Type):
        return f"must be {' or '.join(k.types)}, {_got(v)}"
    if isinstance(k, K.Enum):
        return f"must be one of {_options(k.options)}, {_got(v)}"
    if isinstance(k, K.Constant):
        return f"must be {_preview(k.expected_value)}, {_got(v)}"
    if isinstance(k, K.Minimum):
        return f"must be >= {k.limit}, got {_preview(v)}"
    if isinstance(k, K.Maximum):
        return f"must be <= {k.limit}, got {_preview(v)}"
    if isinstance(k, K.ExclusiveMinimum):
        return f"must be > {k.limit}, got {_preview(v)}"
    if isinstance(k, K.ExclusiveMaximum):
        return f"must be < {k.limit}, got {_preview(v)}"
    if isinstance(k, K.MultipleOf):
        return f"must be a multiple of {k.multiple_of}, got {_preview(v)}"
    if isinstance(k, K.MinLength):
        return f"must be at least {k.limit} characters long"
    if isinstance(k, K.MaxLength):
        return f"must be at most {k.limit} characters long"
    if isinstance(k, K.MinItems):
        return f"must have at least {k.limit} items"
    if isinstance(k, K.MaxItems):
        return f"must have at most {k.limit} items"
    if isinstance(k, K.MinProperties):
        return f"must have at least {k.limit} entries"
    if isinstance(k, K.MaxProperties):
        return f"must have at most {k.limit} entries"
    if isinstance(k, K.AdditionalItems):
        return f"must have at most {k.limit} items"
    if isinstance(k, K.UnevaluatedItems):
        return f"items at positions {', '.join(str(i) for i in k.unexpected[:8])} are not allowed"
    if isinstance(k, K.Pattern):
        return f"must match the pattern {_preview(k.pattern, 60)}, got {_preview(v)}"
    if isinstance(k, K.Format):
        return f"must be a valid {k.format}, got {_preview(v)}"
    if isinstance(k, K.UniqueItems):
        return "must not contain duplicate items"
    if isinstance(k, K.Contains):
        return "must contain a matching item"
    if isinstance(k, K.Not):
        return f"must not match {_preview(k.schema, 60)}"
    if isinstance(k, (K.AnyOf, K.OneOfNotValid)):
        return _closest(k.context, _loc(e.instance_path))
    if isinstance(k, K.OneOfMultipleValid):
        return "matches more than one of the allowed forms (exactly one is required)"
    if isinstance(k, K.FalseSchema):
        at_item = e.schema_path[-1:] in (["items"], ["additionalItems"])
        return "no item is allowed at this position" if at_item else "no value is allowed here"
    if isinstance(k, K.PropertyNames):
        return f"has an invalid key: {_describe(k.error)}"
    if isinstance(k, K.ContentEncoding):
        return f"must be {k.content_encoding}-encoded"
    if isinstance(k, K.ContentMediaType):
        return f"must be {k.content_media_type} content"
    if isinstance(k, K.Custom):
        return k.message
    message = e.message
    return message if len(message) <= 120 else message[:117] + "..."


def _problems(e: jsonschema_rs.ValidationError) -> Iterator[ArgumentProblem]:
    """The located problems one validation error stands for (an ``additionalProperties``
    error names every unexpected key: one ``unknown`` problem each)."""
    K = jsonschema_rs.ValidationErrorKind
    k = e.kind
    loc = _loc(e.instance_path)
    if len(loc) >= _MAX_LOCATION:
        yield ArgumentProblem(
            kind="value", location=loc[:_MAX_LOCATION], message=f"{len(loc) - _MAX_LOCATION} levels down: {_describe(e)}"
        )
        return
    if isinstance(k, K.Required):
        yield ArgumentProblem(kind="missing", location=(*loc, k.property), message="is required")
    elif isinstance(k, (K.AdditionalProperties, K.UnevaluatedProperties)):
        for key in k.unexpected:
            yield ArgumentProblem(kind="unknown", location=(*loc, key), message="is not allowed")
    elif isinstance(k, K.FalseSchema) and len(e.schema_path) >= 2 and e.schema_path[-2] == "properties" and loc:
        yield ArgumentProblem(kind="unknown", location=loc, message="is not allowed")
    elif not loc:
        yield ArgumentProblem(kind="root", location=(), message=f"arguments {_describe(e)}")
    else:
        yield ArgumentProblem(kind="value", location=loc, message=_describe(e))


def _without_credentials(ref: str) -> str:
    """A reference as logged: scheme, host, port and path, without user, password, query or fragment (a token may be in them)."""
    try:
        parts = urllib.parse.urlsplit(ref)
        host = parts.hostname or ""
        host = f"[{host}]" if ":" in host else host  # an IPv6 address
        port = f":{parts.port}" if parts.port is not None else ""
    except ValueError:  # not a URL the parser reads (a bad port): nothing of it is logged but its scheme
        return ref.split(":", 1)[0] + ":<unreadable>" if ":" in ref else "<unreadable>"
    return urllib.parse.urlunsplit((parts.scheme, host + port, parts.path, "", ""))


def _ignoring_remote(seen: list[str]) -> Callable[[str], Any]:
    """A retriever that fetches nothing: every external resource is the schema ``true``."""

    def retrieve(uri: str) -> Any:
        seen.append(uri)
        return True

    return retrieve


class JsonSchemaValidator:
    """A compiled JSON Schema validator of a tool's arguments (see the module docstring).

    Call it with the arguments; it returns them unchanged or raises :class:`ArgumentError`.

    Attributes:
        dialect: ``"2020-12"``, ``"2019-09"``, ``"draft-07"``, ``"draft-06"`` or ``"draft-04"``.
        coercion: the coercion mode.
        unknown: how arguments the schema does not name are treated.
        assert_formats: whether ``format`` is asserted.
        ignored_refs: remote or file references the schema makes, which were not fetched.
    """

    __slots__ = (
        "_is_valid",
        "_iter_errors",
        "_known",
        "_patterns",
        "_readings",
        "_root",
        "assert_formats",
        "coercion",
        "dialect",
        "ignored_refs",
        "name",
        "unknown",
    )

    def __init__(
        self,
        name: str,
        schema: Mapping[str, Any],
        *,
        coercion: Coercion = "lax",
        unknown: UnknownArguments = "schema",
        assert_formats: bool = False,
    ) -> None:
        if coercion not in get_args(Coercion):
            raise SpecError(f"tool {name!r}: coercion must be 'lax', 'strict', 'zod' or 'unknown', got {coercion!r}")
        if unknown not in get_args(UnknownArguments):
            raise SpecError(f"tool {name!r}: unknown must be 'schema', 'forbid' or 'allow', got {unknown!r}")
        self.name = name
        self.coercion: Coercion = coercion
        self.unknown: UnknownArguments = unknown
        self.assert_formats = assert_formats
        cls, self.dialect = _dialect(name, schema)
        # The root $schema picked the class; removing it keeps the validator from retrieving a
        # meta-schema it does not know.
        prepared = {k: v for k, v in schema.items() if k != "$schema"}
        self._root: Mapping[str, Any] = prepared
        seen: list[str] = []
        try:
            compiled = cls(
                prepared,
                formats=dict(LAX_FORMATS) if coercion == "lax" and assert_formats else None,
                validate_formats=assert_formats,
                ignore_unknown_formats=True,
                retriever=_ignoring_remote(seen),
            )
        except (jsonschema_rs.ValidationError, jsonschema_rs.ReferencingError, ValueError, TypeError, RecursionError) as e:
            what = "nested too deeply" if isinstance(e, RecursionError) else str(e).split("\n", 1)[0]
            raise SpecError(f"tool {name!r}: its JSON Schema cannot be compiled ({what})") from e
        self.ignored_refs: tuple[str, ...] = tuple(dict.fromkeys(seen))
        if self.ignored_refs:
            get_logger().warning(
                "schema_remote_ref_ignored",
                tool=name,
                refs=[_without_credentials(ref) for ref in self.ignored_refs[:5]],
                count=len(self.ignored_refs),
            )
        self._is_valid = compiled.is_valid
        self._iter_errors = compiled.iter_errors
        self._known: frozenset[str] | None = None
        self._patterns: tuple[re.Pattern[str], ...] = ()
        if unknown == "forbid" and not _says_extra(prepared):
            self._known, self._patterns = _known_names(prepared)
        self._readings = Readings(coercion, prepared)

    def __repr__(self) -> str:
        options = f"dialect={self.dialect!r}, coercion={self.coercion!r}, unknown={self.unknown!r}"
        return f"JsonSchemaValidator({self.name!r}, {options})"

    def __call__(self, args: dict[str, Any]) -> dict[str, Any]:
        if self._known is not None:
            self._forbid_unknown(args)
        try:
            if self._is_valid(args):
                return args
            instance: Any = args
        except ValueError:  # a value JSON cannot carry (a datetime object): judge it as it is sent
            instance = self._as_json(args)
            if self._is_valid(instance):
                return args
        errors, _ = self._judge(instance)
        if errors:
            raise _error(errors, lambda e: self._hint(e, instance))
        return args

    def _judge(self, instance: Any) -> tuple[list[jsonschema_rs.ValidationError], list[Tolerance]]:
        """The errors the server certainly refuses ``instance`` for, and what was tolerated on the way.

        First as the mode certainly reads values, then, where errors remain, as it only may
        (:data:`Reading`, less what :meth:`learn` ruled out).
        """
        errors = self._settled(instance, self._errors(instance))
        if not errors:
            return [], []
        repaired = self._repair(instance, errors)
        if repaired is not instance:
            errors = self._settled(repaired, self._errors(repaired))
            if not errors:
                return [], []
            instance = repaired
        if self._readings.may:
            tolerated, patched = self._tolerate(instance, errors)
            if tolerated and not self._settled(patched, self._errors(patched)):
                return [], tolerated
        return errors, []

    def _settled(self, instance: Any, errors: list[jsonschema_rs.ValidationError]) -> list[jsonschema_rs.ValidationError]:
        """``errors`` less the pattern mismatches Python's ``re`` matches (outside ``"zod"``)."""
        if self.coercion == "zod" or not errors:
            return errors
        K = jsonschema_rs.ValidationErrorKind
        out = []
        for e in errors:
            if isinstance(e.kind, K.Pattern) and isinstance(e.instance, str) and python_matches(e.kind.pattern, e.instance):
                continue
            out.append(e)
        return out

    def _tolerate(self, instance: Any, errors: list[jsonschema_rs.ValidationError]) -> tuple[list[Tolerance], Any]:
        """``instance`` as the server may read it where the errors are, and each reading applied."""
        K = jsonschema_rs.ValidationErrorKind
        readings = self._readings
        patch = _Patch(instance)
        out: list[Tolerance] = []
        for e in errors:
            k = e.kind
            path = list(e.instance_path)
            if isinstance(k, (K.AdditionalProperties, K.UnevaluatedProperties)):
                if readings.open("extra", "properties"):
                    patch.drop(path, k.unexpected)
                    out.append(Tolerance(location=_loc(path), readings=("extra",), key="properties"))
                continue
            if not path or not isinstance(k, (K.Type, K.AnyOf, K.OneOfNotValid, K.Enum, K.Constant)):
                continue
            found, value = _value_at(instance, path)
            if not found:
                continue
            node = schema_at(self._root, path)
            if value is None and optional_without_default(self._root, path, node):
                if readings.open("absent", where := path_text(path)):
                    patch.drop(path[:-1], (str(path[-1]),))
                    out.append(Tolerance(location=_loc(path), readings=("absent",), key=where))
                continue
            applied, new, key = readings.read(value, node, len(path))
            if applied:
                patch.set(path, new)
                out.append(Tolerance(location=_loc(path), readings=applied, key=key))
        return out, patch.root

    def _hint(self, e: jsonschema_rs.ValidationError, instance: Any) -> str:
        """What a refused type mismatch gets added when some server reads the value as fitting:
        that this server refused such values before, or the mode that refuses it."""
        path = list(e.instance_path)
        if not isinstance(e.kind, jsonschema_rs.ValidationErrorKind.Type) or not path:
            return ""
        fitting = []
        for reading, new, key in self._readings.candidates(e.instance, schema_at(self._root, path), len(path)):
            patch = _Patch(instance)
            patch.set(path, new)
            if not any(list(x.instance_path) == path for x in self._errors(patch.root)):
                fitting.append((reading, new, key))
        for reading, _, key in fitting:
            if self._readings.refused(reading, key):
                return f" (the server refused such a value for {key} arguments earlier in this session)"
        for reading, new, _ in fitting:
            if reading == "lax" and self.coercion != "lax":
                return f" (read with coercion={self.coercion!r}; coercion='lax' reads it as {_preview(new)})"
        return ""

    def tolerated(self, args: dict[str, Any]) -> tuple[str, ...]:
        """What ``args`` fit the schema only by (``"number at 'n'"``): the readings the server
        may or may not make; empty when they fit as the mode certainly reads them, or not at all."""
        return tuple(f"{', '.join(t.readings)} at {path_text(t.location) or 'the arguments'!r}" for t in self._tolerated(args))

    def learn(self, args: dict[str, Any], *, refused: bool, error: str = "") -> tuple[str, ...]:
        """Learn how the server reads values from its answer to a call whose ``args`` this validator passed.

        A call that fit only by readings the server may make (:meth:`tolerated`) tells which
        it makes: accepted, each reading is confirmed (and never ruled out later); refused as
        invalid (``refused``; ``error`` is the server's message), the reading is ruled out for
        values of that type (``null`` for that argument; stripped properties) and such values
        are refused from then on. When several readings applied, only those at an argument the
        message names (``"n"``, ``'n'``, ``at n`` or ``n:``) are ruled out.

        Returns:
            the readings ruled out, as ``"number for integer"`` (empty when nothing changed).
        """
        if not self._readings.may:
            return ()
        return self._readings.learn(self._tolerated(args), refused=refused, error=error)

    def _tolerated(self, args: dict[str, Any]) -> list[Tolerance]:
        """The readings ``args`` passed by (none when they fit as the mode certainly reads them, or do not fit)."""
        try:
            if self._is_valid(args):  # the common case: nothing to tolerate
                return []
            instance: Any = args
        except ValueError:
            instance = None
        try:
            return self._judge(self._as_json(args) if instance is None else instance)[1]
        except ArgumentError:
            return []

    def _repair(self, instance: Any, errors: list[jsonschema_rs.ValidationError]) -> Any:
        """``instance`` as the server would read it, changed only where an error is.

        NaN and infinity reach the validator as null: they are read as the numbers they are;
        ``unknown="allow"`` strips the names the schema refuses; lax coercion reads each value
        an error names as pydantic would. The same object when nothing changes.
        """
        K = jsonschema_rs.ValidationErrorKind
        patch = _Patch(instance)
        for e in errors:
            k = e.kind
            path = e.instance_path
            if isinstance(k, (K.AdditionalProperties, K.UnevaluatedProperties)):
                if self.unknown == "allow":
                    patch.drop(path, k.unexpected)
                continue
            if not path or not isinstance(k, (K.Type, K.AnyOf, K.OneOfNotValid, K.Enum, K.Constant)):
                continue
            found, value = _value_at(instance, path)
            if not found:
                continue
            new = _finite(value, 0)
            if self.coercion == "lax":
                node = schema_at(self._root, path)
                if node is not None:
                    if len(path) == 1 and isinstance(new, str):
                        new = pre_parse(new, node, self._root)
                    new = coerce(new, node, self._root, len(path))
            if new is not value:
                patch.set(path, new)
        return patch.root

    def _errors(self, instance: Any) -> list[jsonschema_rs.ValidationError]:
        out: list[jsonschema_rs.ValidationError] = []
        try:
            for e in self._iter_errors(instance):
                out.append(e)
                if len(out) >= _MAX_COUNTED:
                    break
        except (ValueError, RecursionError):  # the validator cannot describe a value this deep
            if not out:
                message = "arguments do not fit the schema (nested too deeply to say where)"
                raise ArgumentError([ArgumentProblem(kind="root", location=(), message=message)]) from None
        return out

    def _as_json(self, args: dict[str, Any]) -> Any:
        try:
            return to_jsonable_python(args)
        except (PydanticSerializationError, ValueError, TypeError, RecursionError) as e:
            raise ArgumentError(
                [ArgumentProblem(kind="root", location=(), message=f"arguments cannot be sent as JSON ({e})")]
            ) from None

    def _forbid_unknown(self, args: Mapping[str, Any]) -> None:
        known = self._known
        assert known is not None
        extra = [k for k in args if k not in known and not any(p.search(k) for p in self._patterns)]
        if extra:
            raise ArgumentError(
                [ArgumentProblem(kind="unknown", location=(k,), message="is not allowed") for k in extra[:MAX_PROBLEMS]],
                more=max(0, len(extra) - MAX_PROBLEMS),
            )


def _error(
    errors: list[jsonschema_rs.ValidationError], hint: Callable[[jsonschema_rs.ValidationError], str] | None = None
) -> ArgumentError:
    problems: list[ArgumentProblem] = []
    total = 0
    for e in errors:
        extra = hint(e) if hint is not None else ""
        for p in _problems(e):
            total += 1
            if len(problems) < MAX_PROBLEMS:
                problems.append(replace(p, message=p.message + extra) if extra else p)
    if not problems:  # the validator refused without saying why (should not happen)
        problems.append(ArgumentProblem(kind="root", location=(), message="arguments do not fit the schema"))
        total = 1
    return ArgumentError(problems, more=total - len(problems))


def _says_extra(schema: Mapping[str, Any]) -> bool:
    """Whether the schema itself decides about properties it does not name."""
    return any(k in schema for k in ("additionalProperties", "unevaluatedProperties"))


def _known_names(schema: Mapping[str, Any]) -> tuple[frozenset[str], tuple[re.Pattern[str], ...]]:
    """Top-level argument names the schema declares (its own ``properties`` and those of its
    ``allOf``/``anyOf``/``oneOf`` members and local ``$ref``), and its property-name patterns."""
    names: set[str] = set()
    patterns: list[re.Pattern[str]] = []
    for node in object_nodes(schema, schema):
        props = node.get("properties")
        if isinstance(props, Mapping):
            names.update(str(k) for k in props)
        pattern_props = node.get("patternProperties")
        if isinstance(pattern_props, Mapping):
            for p in pattern_props:
                try:
                    patterns.append(re.compile(str(p)))
                except re.error:
                    patterns.append(re.compile(""))  # a pattern Python cannot read: allow every name
    return frozenset(names), tuple(patterns)


class _Patch:
    """Copy-on-write changes to a JSON value: containers on a changed path are copied, so the
    caller's arguments stay as sent."""

    __slots__ = ("_copied", "root")

    def __init__(self, root: Any) -> None:
        self.root = root
        self._copied: set[int] = set()

    def _container(self, path: list[str | int]) -> Any:
        """The (copied) container at ``path``, or ``None`` when the path does not lead to one."""
        if id(self.root) not in self._copied:
            self.root = _shallow(self.root)
            self._copied.add(id(self.root))
        node: Any = self.root
        for part in path:
            try:
                child = node[part]
            except (KeyError, IndexError, TypeError):
                return None
            if not isinstance(child, (Mapping, list, tuple)):
                return None
            if id(child) not in self._copied:
                child = _shallow(child)
                self._copied.add(id(child))
                node[part] = child
            node = child
        return node

    def set(self, path: list[str | int], value: Any) -> None:
        parent = self._container(path[:-1])
        if parent is not None:
            with contextlib.suppress(IndexError, TypeError):
                parent[path[-1]] = value

    def drop(self, path: list[str | int], keys: Iterable[str]) -> None:
        node = self._container(path)
        if isinstance(node, dict):
            for key in keys:
                node.pop(key, None)


def _value_at(value: Any, path: list[str | int]) -> tuple[bool, Any]:
    for part in path:
        try:
            value = value[part]
        except (KeyError, IndexError, TypeError):
            return False, None
    return True, value


_BIG: Final = 1.7976931348623157e308


def _finite(value: Any, depth: int) -> Any:
    """``value`` with NaN read as 0.0 and infinities as the largest floats (the same object when it has none)."""
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        return 0.0 if math.isnan(value) else math.copysign(_BIG, value)
    if depth > MAX_DEPTH:
        return value
    if isinstance(value, Mapping):
        out: dict[str, Any] | None = None
        for k, v in value.items():
            new = _finite(v, depth + 1)
            if new is not v:
                out = dict(value) if out is None else out
                out[k] = new
        return value if out is None else out
    if isinstance(value, (list, tuple)):
        items: list[Any] | None = None
        for i, v in enumerate(value):
            new = _finite(v, depth + 1)
            if new is not v:
                items = list(value) if items is None else items
                items[i] = new
        return value if items is None else items
    return value


def _shallow(value: Any) -> Any:
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, (list, tuple)):
        return list(value)
    return value


def schema_validator(
    name: str,
    schema: Mapping[str, Any],
    *,
    coercion: Coercion = "lax",
    unknown: UnknownArguments = "schema",
    assert_formats: bool = False,
) -> JsonSchemaValidator:
    """A validator for a JSON Schema of the arguments, compiled once.

    Args:
        name: the tool, for error messages.
        schema: the arguments' schema; its ``$schema`` names the dialect (2020-12 when absent).
        coercion: how the server reads values (:data:`Coercion`): ``"lax"`` (pydantic-based
            servers), ``"strict"`` (ajv, ``jsonschema``), ``"zod"`` or ``"unknown"``.
        unknown: arguments the schema does not name: ``"schema"`` (as the schema says),
            ``"forbid"`` or ``"allow"`` (see :data:`UnknownArguments`).
        assert_formats: assert ``format`` (as the coercion mode reads it) instead of treating
            it as an annotation.

    Raises:
        SpecError: the schema cannot be compiled, or an option is not one of its values.
    """
    return JsonSchemaValidator(name, schema, coercion=coercion, unknown=unknown, assert_formats=assert_formats)
