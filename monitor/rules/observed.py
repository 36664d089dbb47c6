"""Observed objects: what tool results have shown of the environment's records, by kind and id.

A middleware sees only the tool traffic, never the database; what it can know of "the order
the agent fetched" or "the gift card balance as last seen" is what a result returned. Rules
(spec-file preconditions, probes) read those objects in O(1) by ``(kind, id)``. An object is
indexed when a result arrives (O(its size)), kept current by later results and declared
effects, and becomes *stale* when a write that may have changed it succeeds without a
declared effect: a rule reading a stale or never-observed object is undetermined, never a
failure.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ("Observation", "ObservedObjects")


@dataclass(slots=True, kw_only=True)
class Observation:
    """One object as last seen."""

    kind: str
    id: Hashable
    fields: dict[str, Any]
    """The object's fields as the environment last returned them (and declared effects changed them)."""
    depth: int
    """Depth of the action whose result (or effect) produced this view of the object."""
    tool: str | None
    current: bool = True
    """``False`` after a write that may have changed the object and declared no effect on it."""
    forgotten: bool = False
    """``True`` when even what was last seen no longer bounds the object (it was deleted, or a
    write may have changed it in any direction, e.g. a refund raising a balance)."""
    stale_by: str | None = None
    stale_depth: int | None = None


class ObservedObjects:
    """Objects by ``(kind, id)``, optionally over a parent store (read through, written locally).

    Plan verification gives each plan its own store over the episode's, so simulated steps
    never change what the episode observed.
    """

    __slots__ = ("_by_id", "_kinds_forgotten", "_kinds_stale", "_objects", "_parent")

    def __init__(self, parent: ObservedObjects | None = None) -> None:
        self._objects: dict[tuple[str, Hashable], Observation] = {}
        self._by_id: dict[Hashable, set[str]] = {}
        """``{id: kinds}``: which kinds of object have this id (a write on an id makes them stale)."""
        self._kinds_stale: dict[str, tuple[int, str]] = {}
        """``{kind: (depth, tool)}``: every object of the kind seen before ``depth`` may have changed."""
        self._kinds_forgotten: dict[str, tuple[int, str]] = {}
        """``{kind: (depth, tool)}``: as ``_kinds_stale``, and not even what was last seen bounds them."""
        self._parent = parent

    def __len__(self) -> int:
        return len(self._objects) + (len(self._parent) if self._parent is not None else 0)

    def __iter__(self) -> Iterator[Observation]:
        yield from self._objects.values()
        if self._parent is not None:
            yield from (o for o in self._parent if (o.kind, o.id) not in self._objects)

    def get(self, kind: str, id: Hashable) -> Observation | None:
        """The object of ``kind`` with ``id`` as last observed (current or stale), or ``None``."""
        key = (kind, _key(id))
        found = self._objects.get(key)
        if found is None and self._parent is not None:
            found = self._parent.get(kind, id)
        if found is not None and not found.forgotten and self._kinds_forgotten:
            forgot = self._kinds_forgotten.get(kind)
            if forgot is not None and found.depth < forgot[0]:
                own = self._own(kind, key[1])
                if own is not None:
                    own.current, own.forgotten, own.stale_depth, own.stale_by = False, True, forgot[0], forgot[1]
                    return own
        if found is not None and found.current and self._kinds_stale:
            staled = self._kinds_stale.get(kind)
            if staled is not None and found.depth < staled[0]:
                own = self._own(kind, key[1])
                if own is not None:
                    own.current, own.stale_depth, own.stale_by = False, staled[0], staled[1]
                    return own
        return found

    def stale_kind(self, kind: str, *, by: str, depth: int, forget: bool = False) -> None:
        """A write may have changed any object of ``kind``: those seen before now no longer decide (O(1)).

        With ``forget``, not even rules that read what was last seen (``last_seen``) decide from them.
        """
        (self._kinds_forgotten if forget else self._kinds_stale)[kind] = (depth, by)

    def observe(self, kind: str, id: Any, fields: Mapping[str, Any], *, depth: int, tool: str | None) -> None:
        """A result showed the object: it is current with these fields (replacing what was seen)."""
        ident = _key(id)
        self._objects[(kind, ident)] = Observation(kind=kind, id=ident, fields=dict(fields), depth=depth, tool=tool)
        self._by_id.setdefault(ident, set()).add(kind)

    def update(self, kind: str, id: Any, changes: Mapping[str, Any], *, depth: int, tool: str | None) -> None:
        """A declared effect changed fields of an observed object (it stays current); unknown objects are left alone."""
        found = self._own(kind, _key(id))
        if found is not None:
            found.fields.update(changes)
            found.depth, found.tool = depth, tool

    def forget(self, kind: str, id: Any, *, depth: int, tool: str | None) -> None:
        """A declared effect deleted the object: what was seen of it no longer holds."""
        found = self._own(kind, _key(id))
        if found is not None:
            found.current, found.forgotten, found.stale_by, found.stale_depth = False, True, tool, depth

    def stale(self, id: Any, *, by: str, depth: int, keep: frozenset[str] = frozenset()) -> None:
        """A write that names ``id`` succeeded: every object with that id (but kinds in ``keep``) may have changed."""
        ident = _key(id)
        kinds = set(self._by_id.get(ident, ()))
        parent = self._parent
        while parent is not None:  # objects the parent holds are copied here before they change
            kinds |= parent._by_id.get(ident, set())
            parent = parent._parent
        for kind in kinds - keep:
            found = self._own(kind, ident)
            if found is not None and found.current:
                found.current, found.stale_by, found.stale_depth = False, by, depth

    def _own(self, kind: str, ident: Hashable) -> Observation | None:
        """The object in this store, copied from the parent first when only the parent has it."""
        key = (kind, ident)
        found = self._objects.get(key)
        if found is None and self._parent is not None:
            inherited = self._parent.get(kind, ident)
            if inherited is not None:
                found = Observation(
                    kind=kind,
                    id=ident,
                    fields=dict(inherited.fields),
                    depth=inherited.depth,
                    tool=inherited.tool,
                    current=inherited.current,
                    forgotten=inherited.forgotten,
                    stale_by=inherited.stale_by,
                    stale_depth=inherited.stale_depth,
                )
                self._objects[key] = found
                self._by_id.setdefault(ident, set()).add(kind)
        return found


def _key(id: Any) -> Hashable:
    """Ids compare as text: ``7`` in a result and ``"7"`` in arguments name the same object.

    A composite id (a flight on a date: ``("HAT041", "2024-05-20")``) is a tuple of texts.
    """
    if isinstance(id, str):
        return id
    if isinstance(id, (tuple, list)):
        return tuple(part if isinstance(part, str) else str(part) for part in id)
    return str(id)
