"""Walking arguments and results: leaves with their paths, records with their ids, result shapes, numbers.

Everything here is bounded per call (depth, node and leaf limits), so the learner's cost per
call is O(the call's size) whatever the corpus.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Hashable, Iterator, Mapping
from typing import Any, Final

from .._internal.json_depth import loads

__all__ = (
    "ARG_LEAVES",
    "IDENT",
    "Shape",
    "argument_leaves",
    "as_data",
    "error_key",
    "error_like",
    "id_like",
    "key",
    "names_an_id",
    "opaque",
    "primary_id",
    "records",
    "result_leaves",
    "result_shapes",
    "short",
)

IDENT: Final = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SPACE: Final = re.compile(r"\s")
ARG_LEAVES: Final = 64
"""Argument leaves read per call at most."""
_MAX_DEPTH: Final = 6
_MAX_NODES: Final = 5_000
"""Result nodes visited per call at most."""
_ERROR_WORDS: Final = frozenset(
    {
        "error",
        "errors",
        "exception",
        "fail",
        "failed",
        "failure",
        "invalid",
        "denied",
        "forbidden",
        "unauthorized",
        "unknown",
        "cannot",
        "unable",
        "refused",
        "rejected",
    }
)
_ERROR_KEYS: Final = re.compile(r"(^|_)(error|errors|exception|fault|failure)($|_)", re.IGNORECASE)
_TEXT_PREFIX: Final = re.compile(r"^([A-Za-z][A-Za-z0-9_-]*(?: [A-Za-z][A-Za-z0-9_-]*){0,3}):(?:\s|$)")
_TWO_WORDS: Final = re.compile(r"^([A-Za-z]+ [A-Za-z]+)\b")

Shape = tuple[str, str, Any]
"""A result shape: ``("text", regex, None)``, ``("json", key, value_or_None)`` or ``("is_error", "", True)``."""


def key(value: Any) -> Hashable | None:
    """A hashable key for a scalar value (``None`` for booleans, ``None``, containers, NaN)."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (str, int)):
        return value
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return None
        return int(value) if value.is_integer() else value
    return None


def id_like(value: Any) -> bool:
    """A value that could be an id or handle: an integer, or a short string without spaces."""
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return True
    return isinstance(value, str) and 0 < len(value) <= 128 and _SPACE.search(value) is None


_ID_WORDS: Final = frozenset({"id", "ids", "number", "key", "token", "uuid", "handle"})
_DATE: Final = re.compile(r"^\d{4}-\d{2}-\d{2}([T ][\d:.+-]+Z?)?$")


@functools.lru_cache(maxsize=4096)
def names_an_id(name: str) -> bool:
    """Whether a key or argument name names an id: its last word is id, number, key, token (``order_id``, ``tweetId``)."""
    found = re.findall(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+", name)
    return bool(found) and found[-1].lower() in _ID_WORDS


def opaque(value: Any) -> bool:
    """A value shaped like an opaque handle: letters and digits (``credit_card_42``, ``#W2378156``) or a long number."""
    if not isinstance(value, str) or not id_like(value) or "@" in value or _DATE.match(value):
        return False
    digits = sum(c.isdigit() for c in value)
    if digits == len(value):
        return len(value) >= 8
    return digits > 0 and len(value) >= 4 and any(c.isalpha() for c in value)


def primary_id(at: str, record: Mapping[str, Any]) -> str | None:
    """The key of a record's own id: ``id``, else the one named after its list (``orders[]`` -> ``order_id``),
    else the first id key."""
    keys = [k for k in list(record)[:32] if isinstance(k, str) and names_an_id(k) and id_like(record[k])]
    if not keys:
        return None
    if "id" in keys:
        return "id"
    container = at.removesuffix("[]").rsplit(".", 1)[-1].lower()
    for k in keys:
        stem = k.lower().rsplit("_", 1)[0]
        if container and (container == stem or container == stem + "s"):
            return k
    return keys[0]


def short(value: Any, limit: int = 48) -> str:
    """A value for an evidence example: its ``repr``, cut."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def as_data(result: Any) -> Any:
    """A result as data: JSON text parsed (when it looks like an object or array), models dumped."""
    if isinstance(result, bytes):
        result = result.decode("utf-8", "replace")
    if isinstance(result, str):
        stripped = result.lstrip()
        if stripped[:1] in ("{", "["):
            try:
                return loads(stripped)
            except ValueError:
                return result
        return result
    if hasattr(result, "model_dump"):
        try:
            return result.model_dump(mode="json")
        except Exception:  # a model that cannot dump itself is read as it is
            return result
    return result


def argument_leaves(args: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """``(path, value)`` of every scalar in the arguments, with paths as spec files write them.

    A top-level list of scalars is one path (``item_ids``), as ``values_at`` reads it; lists
    deeper down are ``[]`` (``flights[].flight_number``, ``filters.tags[]``). Keys that are not
    identifiers cannot be written as paths and are skipped.
    """
    out: list[tuple[str, Any]] = []

    def walk(value: Any, path: str, depth: int) -> None:
        if len(out) >= ARG_LEAVES or depth > _MAX_DEPTH:
            return
        if isinstance(value, Mapping):
            for k, v in value.items():
                if isinstance(k, str) and IDENT.match(k):
                    walk(v, f"{path}.{k}" if path else k, depth + 1)
        elif isinstance(value, (list, tuple)):
            top = "." not in path and "[]" not in path
            for item in value:
                if isinstance(item, Mapping):
                    walk(item, f"{path}[]", depth + 1)
                elif not isinstance(item, (list, tuple)) and item is not None:
                    if len(out) >= ARG_LEAVES:
                        return
                    out.append((path if top else f"{path}[]", item))
        elif value is not None:
            out.append((path, value))

    for name, value in args.items():
        if isinstance(name, str) and IDENT.match(name):
            walk(value, name, 0)
    return out


def result_leaves(data: Any) -> list[tuple[str | None, Any, bool]]:
    """``(nearest key, value, top)`` of the scalars in a result, as the tracked state binds them.

    A value in a list takes the key of the list; a bare scalar result has no key (``None``).
    ``top`` says the value sits directly in a result object (what ``produces: {kind: "*"}``
    binds). At most a bounded number of nodes is visited.
    """
    out: list[tuple[str | None, Any, bool]] = []
    budget = _MAX_NODES
    top_level = 1 if isinstance(data, Mapping) else -1
    stack: list[tuple[Any, str | None, int]] = [(data, None, 0)]
    while stack and budget > 0:
        value, at, depth = stack.pop()
        budget -= 1
        t = type(value)
        if t is str or t is int or t is float:
            out.append((at, value, depth == top_level))
        elif t is dict or isinstance(value, Mapping):
            if depth < _MAX_DEPTH:
                for k, v in reversed(list(value.items())):
                    stack.append((v, k if type(k) is str else None, depth + 1))
        elif t is list or t is tuple:
            if depth < _MAX_DEPTH:
                for v in reversed(value):
                    stack.append((v, at, depth + 1))
        elif value is not None:
            out.append((at, value, depth == top_level))
    return out


def records(data: Any) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """``(at, record)`` of the objects a result shows, where a spec's ``observes.at`` can name them.

    The result itself (``''``: a mapping, or each mapping of a top-level list), a mapping under
    a top-level key (``'order'``), each mapping of a list under one (``'orders[]'``) and each
    mapping of a mapping of mappings under one (``'variants.*'``: records keyed by their ids).
    """
    if isinstance(data, Mapping):
        yield "", data
        for k, v in data.items():
            if not isinstance(k, str) or not IDENT.match(k):
                continue
            if isinstance(v, Mapping):
                yield k, v
                values = list(v.values())[:200]
                if values and all(isinstance(item, Mapping) for item in values):
                    yield from ((f"{k}.*", item) for item in values)
            elif isinstance(v, list):
                yield from ((f"{k}[]", item) for item in v[:200] if isinstance(item, Mapping))
    elif isinstance(data, list):
        yield from (("", item) for item in data[:200] if isinstance(item, Mapping))


def _words_error_like(text: str) -> bool:
    return any(word.casefold() in _ERROR_WORDS for word in re.split(r"[\s_-]+", text))


def result_shapes(result: Any, data: Any) -> list[tuple[Shape, bool]]:
    """The shapes of a result that an error recogniser could test, each with whether it reads as an error.

    Text results: the leading ``Words:`` (``Error:``, ``Database error:``), and the first two
    words when they read as an error (``Unknown action``). JSON objects: each top-level key
    (present), each boolean one with its value, and an ``isError`` flag.
    """
    out: list[tuple[Shape, bool]] = []
    if isinstance(data, Mapping):
        flag = data.get("isError")
        if isinstance(flag, bool):
            out.append((("is_error", "", flag), flag))
        for k, v in list(data.items())[:64]:
            if not isinstance(k, str) or not IDENT.match(k) or k == "isError":
                continue
            lexical = bool(_ERROR_KEYS.search(k))
            out.append((("json", k, None), lexical and bool(v)))
            if isinstance(v, bool):
                out.append((("json", k, v), False))
        return out
    if isinstance(result, str) and not isinstance(data, (Mapping, list)):
        text = result.lstrip()
        m = _TEXT_PREFIX.match(text)
        if m:
            out.append((("text", "^" + re.escape(m.group(1) + ":"), None), _words_error_like(m.group(1))))
        m2 = _TWO_WORDS.match(text)
        if m2 and _words_error_like(m2.group(1)) and (m is None or m.group(1) != m2.group(1)):
            out.append((("text", "^" + re.escape(m2.group(1)) + r"\b", None), True))
    return out


def error_key(name: str) -> bool:
    """Whether a JSON key names an error (``error``, ``errors``, ``error_message``, ``exception``)."""
    return bool(_ERROR_KEYS.search(name))


def error_like(shapes: list[tuple[Shape, bool]]) -> bool:
    """Whether a result with these shapes reads as an error (what an unmarked transcript's result is taken as)."""
    return any(lexical for _, lexical in shapes)
