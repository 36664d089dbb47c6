"""Text for records: labels, odd tool names and call ids as text, and random episode ids.

Records, spans and logs hold text. What a caller hands an episode (a label value, a task id, a
framework's tool name) is turned into text here, by rules that never fall back to ``repr``:
an object's repr may carry anything (a client object's API key) into attributes and logs.
"""

from __future__ import annotations

import enum
import os
import random
import uuid
from collections.abc import Mapping
from typing import Any, Final

__all__ = ("as_text", "call_text", "random_id", "required_text", "text_labels")

_RANDOM_ID_MASK: Final = ~((0xF000 << 64) | (0xC000 << 48)) & ((1 << 128) - 1)
_UUID4_BITS: Final = (0x4000 << 64) | (0x8000 << 48)


_ids: Final = random.Random(os.urandom(32))
"""Where episode ids come from: seeded by the OS once per process, again in a forked child.

Not ``os.urandom`` per id: that call releases the GIL, and with a JSONL sink's writer thread
awake the episode then waited to get it back (17 µs of a one-call episode's 28 µs,
benchmarks/bench_sink.py). Episode ids identify records; they are not secrets."""
os.register_at_fork(after_in_child=lambda: _ids.seed(os.urandom(32)))


def as_text(value: object) -> str | None:
    """``value`` as records hold it, when its text is known: text, a number, a UUID, an enum member, ``None``.

    ``None`` for anything else: its ``str()`` is usually its repr, and that may carry anything
    (a client object's API key) into span names, attributes and logs.
    """
    if isinstance(value, str):
        return str.__str__(value)  # an enum of text: its value
    if value is None:  # a label read from an unset variable
        return "None"
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, int):
        return int.__repr__(value)  # an enum of ints: its value
    if isinstance(value, float):
        return float.__repr__(value)
    if isinstance(value, enum.Enum):
        return f"{type(value).__name__}.{value.name}"
    if isinstance(value, uuid.UUID):
        return uuid.UUID.__str__(value)
    return None


def required_text(value: object, what: str) -> str:
    """:func:`as_text` of ``value``.

    Raises:
        TypeError: ``value`` has no known text (the message names ``what`` and its type, never its repr).
    """
    text = as_text(value)
    if text is None:
        raise TypeError(f"{what} must be text, a number, a UUID or an enum member, got {type(value).__name__}")
    return text


def call_text(value: object) -> str:
    """A framework's odd tool name or call id as records hold it: its text, or ``<TypeName>``."""
    text = as_text(value)
    return f"<{type(value).__name__}>" if text is None else text


def text_labels(labels: Mapping[Any, Any], into: dict[str, str]) -> dict[str, str]:
    """``into`` updated with ``labels`` as text (records hold text; ints are common).

    Raises:
        TypeError: ``labels`` is not a mapping, or a name or value has no known text (:func:`as_text`).
    """
    try:
        items = labels.items()
    except AttributeError:
        raise TypeError(f"labels must be a mapping of names to values (a dict), got {type(labels).__name__}") from None
    for k, v in items:
        key = k if type(k) is str else required_text(k, "a label name")
        into[key] = v if type(v) is str else required_text(v, f"labels[{key!r}]")
    return into


def random_id() -> str:
    """A random UUID4 as 32 hex digits, as ``uuid.uuid4().hex`` but without building a ``UUID``.

    Every episode needs one; ``uuid4().hex`` cost 2.5 µs of an empty episode's 16 µs, this
    well under 1 µs (benchmarks/bench_hot_path.py, section 1). Same bits as a UUID4.
    """
    return "%032x" % (_ids.getrandbits(128) & _RANDOM_ID_MASK | _UUID4_BITS)
