"""Values read from a file, quoted in an error message at a bounded length.

A message names the field and shows enough of the value to find it; a megabyte-long id
or a 5,000-digit number must not make a megabyte-long message (it reaches stderr, logs
and a report's ``skipped_lines``).
"""

from __future__ import annotations

import reprlib
from typing import Any, Final

MESSAGE_LIMIT: Final = 240
"""Characters of a message built around values from a file, at most."""


def _repr() -> reprlib.Repr:
    r = reprlib.Repr()
    r.maxstring = r.maxother = r.maxlong = 60
    r.maxlist = r.maxdict = r.maxtuple = r.maxset = 6
    r.maxlevel = 3
    return r


_REPR: Final = _repr()


def quoted(value: Any) -> str:
    """``repr(value)``, cut to about 60 characters (strings and numbers are never repr'd whole first)."""
    try:
        return _REPR.repr(value)
    except ValueError:  # an int past the interpreter's digit limit for str()
        return f"<{type(value).__name__} too long to show>"


def brief(text: str, limit: int = MESSAGE_LIMIT) -> str:
    """``text`` cut in the middle to ``limit`` characters, keeping how it starts and ends."""
    if len(text) <= limit:
        return text
    keep = (limit - 5) // 2
    return f"{text[:keep]} ... {text[-keep:]}"
