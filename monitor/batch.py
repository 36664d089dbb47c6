"""Several tool calls of one assistant message, judged as one batch.

Models emit several calls in one message and frameworks run them concurrently, so no call of
the batch can use what another one returns. :meth:`Episode.begin_batch
<prefixmon.Episode.begin_batch>` judges every call against the state as it stands before the
batch (nothing a call of the batch returns is applied until all of them were judged), and:

- a reference that only a sibling could produce fails the dependency check with code
  ``sibling_dependency``, and the reason names the sibling: the model is told to call it on
  its own and wait for its result;
- the same side-effecting call twice in one batch (same tool, same arguments; tools declared
  read-only are exempt) is a ``precondition`` finding on the second, code ``duplicate_call``;
- two side-effecting calls naming the same object (a reference argument of the same kind and
  id: ``modify_order`` and ``cancel_order`` of order W1) are a ``precondition`` finding on the
  second, code ``batch_conflict``: which one the other meets is the framework's choice. Tools
  that commute say so (``metadata={"commutes": ["add_item"]}``, ``commutes: [add_item]`` in a
  spec file; either side's declaration is enough).

Both findings do not block by default, like information findings (:attr:`Failure.blocks
<prefixmon.Failure.blocks>`): they are reported and run, unless a policy rule names their
cause for the tool (``Policy(tools={"pay": {"precondition": "block"}})``).

Depths: the calls take consecutive depths in message order, exactly as the same calls emitted
one by one; FED, PEC and TER are defined per call as before, and a batch of one is a single
call. Cost: nothing for a batch with fewer than two side-effecting calls; else one dict
lookup per side-effecting call for duplicates (flat arguments hashed as they are, nested ones
serialised once) and one per reference argument for conflicts; the batch's tool names are read
only when a reference fails.
"""

from __future__ import annotations

import json
from collections.abc import Hashable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

from .rules.grounding import id_form
from .rules.spec import values_at
from .verdict import Failure, quote
from .vocabulary import Cause

if TYPE_CHECKING:
    from .rules.spec import ToolSpec
    from .toolset import Toolset

__all__ = ("CONFLICT", "DUPLICATE", "SIBLING", "Batch")

SIBLING: Final = "sibling_dependency"
"""The failure code of a reference only a sibling in the batch could produce."""
DUPLICATE: Final = "duplicate_call"
"""The failure code of a side-effecting call repeated in the same batch."""
CONFLICT: Final = "batch_conflict"
"""The failure code of a side-effecting call naming an object another one of the batch writes."""


class Batch:
    """The calls of one message while they are judged: what siblings produce, which writes were seen."""

    __slots__ = ("_objects", "_writes", "index", "names", "repeated", "writers")

    def __init__(self, names: Sequence[str], toolset: Toolset) -> None:
        self.names = tuple(names)
        self.index = 0
        """The position of the call being judged."""
        once: set[str] = set()
        self.repeated: set[str] = set()
        """Side-effecting tools called more than once in the batch: only their calls can be duplicates."""
        self.writers = 0
        """How many calls of the batch may change something: with fewer than two, nothing to compare."""
        for name in self.names:
            spec = toolset.get(name)
            writes = spec is None or not spec.metadata.get("read_only")
            self.writers += writes
            if name in once:
                if writes:
                    self.repeated.add(name)
            else:
                once.add(name)
        self._writes: dict[tuple[str, object], tuple[int, Mapping[str, Any]]] = {}
        self._objects: dict[tuple[str, Hashable], tuple[int, ToolSpec]] = {}

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

    def finding(self, spec: ToolSpec, args: Mapping[str, Any]) -> Failure | None:
        """The duplicate or conflict finding of a call of the batch, else ``None`` (and the call is noted)."""
        if self.writers < 2 or spec.metadata.get("read_only"):
            return None
        if spec.name in self.repeated and (twice := self.duplicate(spec.name, args)) is not None:
            return twice
        return self.conflict(spec, args) if spec.refs else None

    def conflict(self, spec: ToolSpec, args: Mapping[str, Any]) -> Failure | None:
        """The finding of a write naming an object an earlier write of the batch names, unless they commute."""
        found: Failure | None = None
        for path, ref in spec.refs:
            for _, value in values_at(args, path):
                if not isinstance(value, (str, int)) or isinstance(value, bool):
                    continue
                key = (ref.kind, id_form(value) if isinstance(value, str) else value)
                first = self._objects.setdefault(key, (self.index, spec))
                if found is None and first[0] != self.index and not _commute(spec, first[1]):
                    found = Failure(
                        cause=Cause.PRECONDITION,
                        code=CONFLICT,
                        reason=(
                            f"{spec.name}: {ref.kind} {quote(value)} is also changed by {first[1].name} (call {first[0] + 1} of "
                            "this batch); which change the other meets is not known: call one, then the other"
                        ),
                        blocks=False,
                    )
        return found

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


def _commute(a: ToolSpec, b: ToolSpec) -> bool:
    """Whether either tool declares that it commutes with the other (``metadata["commutes"]``)."""
    return b.name in a.metadata.get("commutes", ()) or a.name in b.metadata.get("commutes", ())


def _same(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Equal as JSON (``1`` and ``true`` hash alike but are other arguments)."""
    try:
        return json.dumps(a, sort_keys=True, default=repr) == json.dumps(b, sort_keys=True, default=repr)
    except (TypeError, ValueError, RecursionError):
        return False
