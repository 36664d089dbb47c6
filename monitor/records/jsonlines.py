"""JSON Lines of any content, read line by line without losing a value or a location.

What a JSON Lines file picks up on its way (``cat`` of files saved with a byte order mark,
a lost final newline that merges two lines, a writer killed mid-line) costs at most the
line it damaged, and every problem is said with its line and column. JSON nested deeper
than :data:`~prefixmon._internal.json_depth.MAX_JSON_DEPTH` levels is refused before ``json``'s
decoder recurses near the interpreter's limit.

The record readers (:mod:`prefixmon.records`) split merged lines with
:func:`split_json_values`; transcript readers for ``prefixmon learn`` and ``replay`` read
with :func:`iter_json_lines`.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Final

from .._internal.json_depth import MAX_JSON_DEPTH, deeper_than

__all__ = ["MAX_LINE_VALUES", "JsonLine", "iter_json_lines", "ordinal", "split_json_values", "too_deep"]

MAX_LINE_VALUES: Final = 1_000
"""The most JSON values one line is split into (records merged by lost newlines); a line of
more stays one bad line."""
_BETWEEN: Final = re.compile(r"[ \t\n\r]*(?:\ufeff[ \t\n\r]*)?")
"""JSON whitespace, with at most one byte order mark in it (``cat`` of a file saved with one)."""


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


_SPLITTER: Final = json.JSONDecoder(parse_constant=_no_constant)
"""Finds where a JSON value ends (``NaN`` and ``Infinity``, which pydantic refuses, end nothing)."""


@dataclass(frozen=True, slots=True)
class JsonLine:
    """One JSON value of a JSON Lines file, or why a line gave none."""

    line: int
    """The line's number, from 1."""
    value: Any = None
    """The decoded value (``None`` with a :attr:`problem`)."""
    problem: str | None = None
    """What is wrong with the line (``"not JSON (... at column 31)"``), or ``None``."""
    part: int = 0
    """0 for a line's only value; ``k`` for the ``k``-th of several values on one line."""
    parts: int = 1
    """How many values the line holds."""


def iter_json_lines(path: str | os.PathLike[str]) -> Iterator[JsonLine]:
    """Every value of a JSON Lines file in order, blank lines skipped; a line that is not
    JSON gives one :class:`JsonLine` with its problem, and reading goes on.

    A byte order mark before any line is dropped; a line of several whole values back to
    back (a lost newline) gives each of them.

    Raises:
        OSError: the file cannot be opened or read.
    """
    with open(path, "rb") as fh:
        for line_no, raw in enumerate(fh, start=1):
            if raw.strip():
                yield from json_line(raw, line_no)


def json_line(raw: bytes, line_no: int) -> list[JsonLine]:
    """The values of one line of a JSON Lines file (see :func:`iter_json_lines`)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        return [JsonLine(line_no, problem=f"not UTF-8 text (byte {e.start + 1} of the line)")]
    text = text.removeprefix("\ufeff").rstrip("\r\n")
    if deeper_than(text, MAX_JSON_DEPTH):
        return [JsonLine(line_no, problem=f"nested too deeply to decode (more than {MAX_JSON_DEPTH} levels)")]
    try:
        return [JsonLine(line_no, json.loads(text))]
    except json.JSONDecodeError as e:
        values = split_json_values(text) if e.msg == "Extra data" else None
        if values is None:
            return [JsonLine(line_no, problem=f"not JSON ({e.msg} at column {e.pos + 1})")]
        return [JsonLine(line_no, json.loads(v), part=k, parts=len(values)) for k, v in enumerate(values, 1)]
    except ValueError:  # Python's limit on the digits of an integer (4,300 by default)
        return [JsonLine(line_no, problem="not JSON (an integer too long to convert)")]


def split_json_values(line: str | bytes) -> list[str] | None:
    """The texts of the JSON values of a line that holds two or more back to back, or ``None``
    (one value, not JSON, nested too deeply, or more than :data:`MAX_LINE_VALUES` values)."""
    try:
        text = line.decode() if isinstance(line, bytes) else line
    except UnicodeDecodeError:
        return None
    text = text.removeprefix("\ufeff")
    if deeper_than(text, MAX_JSON_DEPTH):  # json's decoder would recurse near the interpreter's limit
        return None
    decode = _SPLITTER.raw_decode
    values: list[str] = []
    at, end = _past_space(text, 0), len(text)
    while at < end:
        if len(values) == MAX_LINE_VALUES:
            return None
        try:
            _, stop = decode(text, at)
        except (ValueError, RecursionError):
            return None
        values.append(text[at:stop])
        at = _past_space(text, stop)
    return values if len(values) > 1 else None


def too_deep(text: str | bytes) -> bool:
    """Whether JSON text nests deeper than :data:`~prefixmon._internal.json_depth.MAX_JSON_DEPTH` levels
    (by its brackets outside strings, without parsing it): ``json`` must not be given it, as
    it would recurse near the interpreter's limit. Bytes are read as UTF-8, bad bytes replaced."""
    if isinstance(text, bytes):
        if text.count(b"[") + text.count(b"{") <= MAX_JSON_DEPTH:  # (no decoded copy of shallow text)
            return False
        text = text.decode("utf-8", errors="replace")
    return deeper_than(text, MAX_JSON_DEPTH)


def _past_space(text: str, at: int) -> int:
    """Where the whitespace (and byte order mark) that starts at ``at`` ends."""
    space = _BETWEEN.match(text, at)
    return at if space is None else space.end()


def ordinal(n: int) -> str:
    """``1st``, ``2nd``, ``3rd``, ``11th``..."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"
