"""How deep JSON text nests, told without parsing it.

Python's ``json`` recurses once per level: text nested nearly as deep as the interpreter's
recursion limit parses, but any finalizer that runs meanwhile (a garbage collection pass)
has no room left and fails. Text pydantic's parser refused as too deep is measured here
first, by its brackets outside strings, and cut or refused before ``json`` sees it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any, Final

from pydantic_core import from_json

__all__ = ["MAX_JSON_DEPTH", "cut_deep", "deeper_than", "json_goes_deeper", "loads", "loads_refused"]

MAX_JSON_DEPTH: Final = 400
"""Levels of nesting ``json`` is asked to parse: well below the recursion limit (1,000)."""

_STRUCTURE: Final = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*(?:"|\\?\Z)|[\[\]{}]')
"""A JSON string (skipped whole: brackets inside it are text) or a bracket. A string that never
closes runs to the end, as json reads it: its brackets are text too (and the scan stays linear:
a failed match at each escaped quote after it would rescan to the end)."""


def json_goes_deeper(why: str) -> bool:
    """Whether ``json`` may nest deeper than pydantic's parser did before it refused (``why``):
    it stopped for depth, or at an escape json takes (a lone surrogate)."""
    return "recursion" in why or "escape" in why


def _deep_spans(text: str, depth: int) -> Iterator[tuple[int, int]]:
    """``(start, end)`` of each outermost value nested deeper than ``depth``, by brackets outside strings."""
    if text.count("[") + text.count("{") <= depth:
        return
    level = 0
    start = -1
    for m in _STRUCTURE.finditer(text):
        c = text[m.start()]
        if c == '"':
            continue
        if c == "[" or c == "{":
            level += 1
            if level == depth + 1:
                start = m.start()
        else:
            if level == depth + 1 and start >= 0:
                yield start, m.end()
                start = -1
            level -= 1
    if start >= 0:  # still open at the end (not JSON): deep all the same
        yield start, len(text)


def deeper_than(text: str, depth: int) -> bool:
    """Whether brackets outside strings nest deeper than ``depth`` somewhere in ``text``."""
    return next(_deep_spans(text, depth), None) is not None


def deep_line(text: str, depth: int = MAX_JSON_DEPTH) -> int | None:
    """The line (from 1) where brackets outside strings first nest deeper than ``depth``, or None."""
    span = next(_deep_spans(text, depth), None)
    return None if span is None else text.count("\n", 0, span[0]) + 1


def cut_deep(text: str, depth: int) -> str | None:
    """``text`` with every value nested deeper than ``depth`` replaced by ``null`` (``None``
    when none is), by brackets outside strings alone: what is not JSON stays not JSON."""
    parts: list[str] = []
    last = 0
    for start, end in _deep_spans(text, depth):
        parts.append(text[last:start])
        parts.append("null")
        last = end
    if not parts:
        return None
    parts.append(text[last:])
    return "".join(parts)


def loads(text: str | bytes, depth: int = MAX_JSON_DEPTH) -> Any:
    """``text`` as ``json.loads`` parses it, values nested deeper than ``depth`` as ``None``.

    Raises:
        ValueError: not JSON.
    """
    try:
        return from_json(text)  # pydantic's parser: what json.loads gives, about 2x as fast
    except ValueError as e:
        return loads_refused(text, str(e), depth)[0]


def loads_refused(text: str | bytes, why: str, depth: int) -> tuple[Any, bool]:
    """JSON text pydantic's parser refused (``why``) as ``json.loads`` parses it, and whether
    values were cut off. Where json may go deeper than pydantic did (too deep for pydantic,
    or past an escape it refused: a lone surrogate), what is nested deeper than ``depth`` is
    replaced by ``None`` first.

    Raises:
        ValueError: not JSON (``json.loads`` refuses it too).
    """
    s = text.decode() if isinstance(text, bytes) else text
    cut = cut_deep(s, depth) if json_goes_deeper(why) else None
    try:
        return json.loads(s if cut is None else cut), cut is not None
    except RecursionError:  # pydantic's words changed: cut now (json went to the limit once)
        cut = None if cut is not None else cut_deep(s, depth)
        if cut is None:
            raise ValueError("nested too deeply to parse") from None
    return json.loads(cut), True
