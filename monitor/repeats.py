"""The generic rule that needs no spec: a call the environment just refused, sent again unchanged.

When the environment rejects a call (its result is an error the toolset recognises) and the
agent sends the same tool the same arguments again with no write in between, nothing the
call depends on can have changed, so the environment will refuse it again. Real models do
this often (a lookup of an email that does not exist, a booking whose payment does not add
up, retried as it was). The repeat is a ``precondition`` failure, code ``repeated_rejection``.

What counts as "no write in between": every call that ran since was declared read-only
(``access: read`` in a spec file, ``read_only`` metadata, an MCP ``readOnlyHint``). Any other
call that ran, the user's own tool calls included, forgets every remembered rejection, and
so does a call whose outcome is unknown (it raised, was abandoned). Rejections that read as
transient (rate limits, time-outs, "try again", HTTP 429/5xx) and raised errors are not
remembered: retrying those is how agents recover.

Cost: nothing while no call was rejected; then one dict lookup per call and an equality test
of the arguments of the same tool's remembered rejections (at most :data:`MAX_REMEMBERED`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from .verdict import Failure
from .vocabulary import Cause

__all__ = ("CODE", "MAX_REMEMBERED", "TRANSIENT", "RejectedCalls")

CODE: Final = "repeated_rejection"
"""The failure code of a repeat."""
MAX_REMEMBERED: Final = 8
"""Rejections remembered per tool (the oldest is forgotten first)."""
TRANSIENT: Final = re.compile(
    r"rate.?limit|too many requests|time[ds]?.?out|temporar|try (it )?again|overloaded|service unavailable"
    r"|connection (reset|refused|error)|\b(429|50[234])\b",
    re.IGNORECASE,
)
"""Rejection texts retrying may cure: never remembered."""
_QUOTE: Final = 160


@dataclass(frozen=True, slots=True)
class _Rejected:
    args: Mapping[str, Any]
    depth: int
    text: str


class RejectedCalls:
    """Rejected calls of one episode since its last write, by tool."""

    __slots__ = ("_by_tool",)

    def __init__(self) -> None:
        self._by_tool: dict[str, list[_Rejected]] = {}

    def __bool__(self) -> bool:
        return bool(self._by_tool)

    def remember(self, tool: str, args: Mapping[str, Any], depth: int, text: str) -> None:
        """Remember a rejection the environment gave (unless it reads as transient)."""
        if TRANSIENT.search(text):
            return
        kept = self._by_tool.setdefault(tool, [])
        if len(kept) >= MAX_REMEMBERED:
            del kept[0]
        kept.append(_Rejected(args, depth, text))

    def forget(self) -> None:
        """A write ran (or a call whose outcome is unknown): the environment may answer differently now."""
        self._by_tool.clear()

    def repeat(self, tool: str, args: Mapping[str, Any]) -> Failure | None:
        """The failure of ``tool(args)`` when the same call was rejected since the last write."""
        kept = self._by_tool.get(tool)
        if not kept:
            return None
        for earlier in reversed(kept):
            if earlier.args == args:
                text = " ".join(earlier.text.split())
                quoted = text if len(text) <= _QUOTE else text[: _QUOTE - 1] + "…"
                return Failure(
                    cause=Cause.PRECONDITION,
                    code=CODE,
                    reason=(
                        f"{tool} was refused at step {earlier.depth} with the same arguments and no write has run "
                        f"since, so it will be refused again: {quoted}"
                    ),
                )
        return None
