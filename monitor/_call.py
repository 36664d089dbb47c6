"""A call as it arrived, parsed once at the door: :class:`ParsedCall`.

The episode parses a call's arguments when it admits the call (:func:`at_door`), and every
later step (its probes, the check, the policy's hooks, an approval's key, a fail-open verdict)
reads that one value; none parses the raw arguments again. Dict arguments need no parsing:
their value is made only when a step past the check needs it (:func:`made`). What the hooks
and observers are shown is still the raw value, as the agent emitted it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from pydantic_core import from_json

from ._internal.json_depth import MAX_JSON_DEPTH, deeper_than, json_goes_deeper
from ._internal.trusted import trusted_constructor

__all__ = ("ParsedCall", "RawArgs", "at_door", "made", "parse_arguments", "parse_call")

RawArgs = Mapping[str, Any] | str | bytes | None
"""Arguments as a framework hands them over: a mapping, JSON text (or its bytes), or nothing."""


@dataclass(frozen=True, slots=True)
class ParsedCall:
    """One emitted call: its tool, its arguments as emitted and as parsed, and its call id."""

    tool: str
    call_id: str | None
    raw: RawArgs
    """The arguments as emitted (what hooks and observers are shown)."""
    args: dict[str, Any] | None
    """The parsed arguments (the emitted dict itself when one was given); ``None`` when they do not parse."""
    error: str | None
    """Why the arguments do not parse (``None`` when they do)."""
    fault: Exception | None
    """What reading them raised (a framework's value that fails when read): the check raises it
    where it would have parsed them, so it is reported as a monitor fault."""


_parsed: Final = trusted_constructor(ParsedCall, ("tool", "call_id", "raw", "args", "error", "fault"))


def parse_call(tool: str, raw: RawArgs, call_id: str | None) -> ParsedCall:
    """Parse a call's arguments once (never raises an :class:`Exception`)."""
    if type(raw) is dict:  # the common case, without the call
        return _parsed(tool, call_id, raw, raw, None, None)
    try:
        parsed = parse_arguments(raw)
    except Exception as e:  # a framework's odd value (a str subclass whose methods raise, say)
        return _parsed(tool, call_id, raw, None, None, e)
    if type(parsed) is str:
        return _parsed(tool, call_id, raw, None, parsed, None)
    return _parsed(tool, call_id, raw, parsed, None, None)


def at_door(tool: str, raw: RawArgs, call_id: str | None) -> ParsedCall | None:
    """:func:`parse_call` of arguments that need parsing; ``None`` for a dict, which needs none.

    A checked call with dict arguments that is simply allowed (the hot path) never needs the
    whole value, and making one costs about 8% of such a call (``benchmarks/bench_instructions.py``),
    so it is made only when a later step needs it (:func:`made`).
    """
    return None if type(raw) is dict else parse_call(tool, raw, call_id)


def made(call: ParsedCall | None, tool: str, raw: RawArgs, call_id: str | None) -> ParsedCall:
    """``call`` as :func:`at_door` gave it, made now if it was a dict (which needs no parsing)."""
    return call if call is not None else parse_call(tool, raw, call_id)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


_DECODER: Final = json.JSONDecoder(parse_constant=_reject_constant)
"""One decoder for every call (``json.loads`` with an option builds a new one each time)."""


def parse_arguments(raw: Mapping[str, Any] | str | bytes | None) -> dict[str, Any] | str:
    """Parse raw arguments into a dict, or return a reason why they do not parse."""
    if raw is None:
        return {}
    if isinstance(raw, dict):
        return raw
    if type(raw) is not str:  # JSON text, the other common case, skips these checks
        if isinstance(raw, Mapping):
            try:
                return dict(raw)
            except Exception as e:  # a framework's mapping that raises when read: nothing can run with it
                return f"the arguments could not be read ({type(e).__name__})"
        if isinstance(raw, (bytes, bytearray, memoryview)):
            raw = bytes(raw)
            try:
                raw = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                return f"arguments are not valid UTF-8 (byte 0x{raw[e.start]:02x} at position {e.start})"
        if not isinstance(raw, str):
            return f"arguments must be a JSON object, got {type(raw).__name__}"
    if not raw or raw.isspace():  # (no stripped copy of a large payload)
        return {}
    try:
        parsed = from_json(raw, allow_inf_nan=False)  # pydantic's parser: what json gives, about 2x as fast
    except ValueError as e:  # not JSON, or JSON it refuses (a lone surrogate, deep nesting): json decides and says why
        if json_goes_deeper(str(e)) and deeper_than(raw, MAX_JSON_DEPTH):
            return _TOO_DEEP  # json would recurse near the interpreter's limit, or fail there
        return _parsed_by_json(raw)
    if not isinstance(parsed, dict):
        return f"arguments must be a JSON object, got {type(parsed).__name__}"
    return parsed


_TOO_DEEP: Final = f"arguments are nested too deeply to parse (more than {MAX_JSON_DEPTH} levels)"


def _parsed_by_json(raw: str) -> dict[str, Any] | str:
    """``raw`` as ``json.loads`` parses it (``NaN`` and ``Infinity`` refused), or why it does not parse."""
    try:
        if raw.startswith("\ufeff"):  # as json.loads does
            raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", raw, 0)
        parsed = _DECODER.decode(raw)
    except json.JSONDecodeError as e:
        return f"arguments are not valid JSON: {e} ({len(raw)} characters in all)"
    except ValueError as e:
        return f"arguments are not valid JSON ({e})"
    except RecursionError:
        return _TOO_DEEP
    if not isinstance(parsed, dict):
        return f"arguments must be a JSON object, got {type(parsed).__name__}"
    return parsed
