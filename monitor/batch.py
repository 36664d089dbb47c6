"""Several tool calls of one assistant message, judged as one batch.

Models emit several calls in one message and frameworks run them concurrently, so no call of
the batch can use what another one returns. :meth:`Episode.begin_batch
<prefixmon.Episode.begin_batch>` judges every call against the state as it stands before the
batch (nothing a call of the batch returns is applied until all of them were judged), and:

- a reference that only a sibling could produce fails the dependency check with code
  ``sibling_dependency``, and the reason names the sibling: the model is told to call it on
  its own and wait for its result;
- the same side-effecting call twice in one batch (same tool, same arguments; tools declared
  read-only are exempt) is a ``precondition`` finding on the second, code ``duplicate_call``.
  Like an information finding it does not block by default (:attr:`Failure.blocks
  <prefixmon.Failure.blocks>`): it is reported and runs, unless a policy rule names its cause
  for the tool (``Policy(tools={"pay": {"precondition": "block"}})``).

Depths: the calls take consecutive depths in message order, exactly as the same calls emitted
one by one; FED, PEC and TER are defined per call as before, and a batch of one is a single
call. Cost: one dict lookup per side-effecting call for duplicates (flat arguments hashed as
they are, nested ones serialised once), and the batch's tool names are read only when a
reference fails.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

from .verdict import Failure, quote
from .vocabulary import Cause

if TYPE_CHECKING:
    from .spec import ToolSpec
    from .toolset import Toolset

__all__ = ("DUPLICATE", "SIBLING", "Batch")

SIBLING: Final = "sibling_dependency"
"""The failure code of a reference only a sibling in the batch could produce."""
DUPLICATE: Final = "duplicate_call"
"""The failure code of a side-effecting call repeated in the same batch."""


class Batch:
    """The calls of one message while they are judged: what siblings produce, which writes were seen."""

    __slots__ = ("_writes", "index", "names", "repeated")

    def __init__(self, names: Sequence[str], toolset: Toolset) -> None:
        self.names = tuple(names)
        self.index = 0
        """The position of the call being judged."""
        once: set[str] = set()
        self.repeated: set[str] = set()
        """Side-effecting tools called more than once in the batch: only their calls can be duplicates."""
        for name in self.names:
            if name in once:
                spec = toolset.get(name)
                if spec is None or not spec.metadata.get("read_only"):
                    self.repeated.add(name)
            else:
                once.add(name)
        self._writes: dict[tuple[str, object], tuple[int, Mapping[str, Any]]] = {}

    def sibling_producing(self, toolset: Toolset, kind: str) -> tuple[int, str] | None:
        """The first other call of the batch whose tool produces references of ``kind``: (position, tool)."""
        producers = toolset.producers_of(kind)
        if not producers:
            return None
        for j, name in enumerate(self.names):
            if j != self.index and name in producers:
                return j, name
        return None

    def sibling_failure(self, toolset: Toolset, spec: ToolSpec, arg: str, kind: str, value: Any) -> Failure | None:
        """The dependency failure of ``value`` when a sibling is what would produce it, else ``None``."""
        sibling = self.sibling_producing(toolset, kind)
        if sibling is None:
            return None
        j, tool = sibling
        at = "" if arg == kind else f" for '{arg}'"
        return Failure(
            cause=Cause.DEPENDENCY,
            code=SIBLING,
            reason=(
                f"{spec.name} needs a {kind}{at} returned by an earlier call; {quote(value)} is not one yet, and "
                f"{tool} (call {j + 1} of this batch) produces them but has not returned: call {tool} on its own "
                "first and use its result"
            ),
        )

    def duplicate(self, name: str, args: Mapping[str, Any]) -> Failure | None:
        """The finding of a side-effecting call the batch already holds, else ``None`` (and the call is noted)."""
        if name not in self.repeated:
            return None
        try:
            key: tuple[str, object] = (name, frozenset(args.items()))  # flat arguments: hashed as they are
        except TypeError:  # a list or a dict among the values
            try:
                key = (name, json.dumps(args, sort_keys=True, default=repr))
            except (TypeError, ValueError, RecursionError):
                return None  # arguments that do not serialise are not compared
        first = self._writes.setdefault(key, (self.index, args))
        if first[0] == self.index or not _same(first[1], args):
            return None
        return Failure(
            cause=Cause.PRECONDITION,
            code=DUPLICATE,
            reason=f"{name}: the same call, with the same arguments, is call {first[0] + 1} of this batch; both would run",
            blocks=False,
        )


def _same(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Equal as JSON (``1`` and ``true`` hash alike but are other arguments)."""
    try:
        return json.dumps(a, sort_keys=True, default=repr) == json.dumps(b, sort_keys=True, default=repr)
    except (TypeError, ValueError, RecursionError):
        return False
