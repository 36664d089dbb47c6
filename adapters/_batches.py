"""The calls of one model message admitted as one batch, for frameworks that hand them over one at a time.

LangChain's ToolNode, pydantic-ai and the Agents SDK run the calls of one model response
concurrently and show the monitor one call at a time. The first call to arrive admits the
whole message (:meth:`Episode.begin_batch <prefixmon.Episode.begin_batch>`); every call then
takes its own admission by its id, once. What no call took (the framework never ran it) is
recorded as not run, and a call that reaches the monitor changed (a middleware before it
rewrote it) gives its admission back and is checked on its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from prefixmon import PendingCall, ToolBlocked

__all__ = ("CHANGED", "Admissions")

CHANGED = "the call was changed before it ran"
"""Why an admitted call is recorded as not run when it reached the monitor changed."""


@dataclass(eq=False, kw_only=True)
class Admissions:
    """The admissions of one message's calls, by call id (the adapters' batches extend it)."""

    ids: tuple[str, ...]
    """The calls' ids, in message order."""
    started: bool = False
    """Whether a call has begun admitting the batch."""
    failed: bool = False
    """Whether the admission failed: the calls are checked one by one."""
    admitted: dict[str, PendingCall | ToolBlocked] = field(default_factory=dict)
    """Admissions not taken yet, by call id."""
    changed: set[str] = field(default_factory=set)
    """Ids of calls that reached the monitor changed: begun on their own."""

    def holds(self, call_id: str) -> bool:
        """Whether the call is one of the message's."""
        return call_id in self.ids

    def admit(self, begun: Sequence[PendingCall | ToolBlocked]) -> None:
        """What ``begin_batch`` gave, one per call in message order."""
        self.admitted = dict(zip(self.ids, begun, strict=True))

    def take(self, call_id: str, unchanged: bool) -> PendingCall | ToolBlocked | None:
        """This call's admission; ``None`` when taken already, or when the call is not the one admitted
        (``unchanged`` false: the admission is recorded as not run and the call is begun on its own)."""
        taken = self.admitted.pop(call_id, None)
        if taken is None:
            return None
        if not unchanged:
            if isinstance(taken, PendingCall):
                taken.abandon(CHANGED, started=False)
            self.changed.add(call_id)
            return None
        return taken

    def drop(self, why: str) -> frozenset[str]:
        """Record the admitted calls no one took as not run; their ids."""
        left, self.admitted = self.admitted, {}
        for taken in left.values():
            if isinstance(taken, PendingCall):
                taken.abandon(why, started=False)
        return frozenset(left)
