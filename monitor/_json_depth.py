"""How deep JSON text nests, told without parsing it.

Python's ``json`` recurses once per level: text nested nearly as deep as the interpreter's
recursion limit parses, but any finalizer that runs meanwhile (a garbage collection pass)
has no room left and fails. Text pydantic's parser refused as too deep is measured here
first, by its brackets outside strings, and cut or refused before ``json`` sees it.
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["MAX_JSON_DEPTH", "cut_deep", "deeper_than"]

MAX_JSON_DEPTH: Final = 400
"""Levels of nesting ``json`` is asked to parse: well below the recursion limit (1,000)."""

_STRUCTURE: Final = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]')
"""A JSON string (skipped whole: brackets inside it are text) or a bracket."""


def deeper_than(text: str, depth: int) -> bool:
    """Whether brackets outside strings nest deeper than ``depth`` somewhere in ``text``."""
    if text.count("[") + text.count("{") <= depth:
        return False
    level = 0
    for m in _STRUCTURE.finditer(text):
        c = text[m.start()]
        if c == "[" or c == "{":
            level += 1
            if level > depth:
                return True
        elif c != '"':
            level -= 1
    return False


def cut_deep(text: str, depth: int) -> str | None:
    """``text`` with every value nested deeper than ``depth`` replaced by ``null`` (``None``
    when none is), by brackets outside strings alone: what is not JSON stays not JSON."""
    if text.count("[") + text.count("{") <= depth:
        return None
    parts: list[str] = []
    level = last = 0
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
                parts.append(text[last:start])
                parts.append("null")
                last, start = m.end(), -1
            level -= 1
    if not parts:
        return None
    parts.append(text[last:])
    return "".join(parts)
