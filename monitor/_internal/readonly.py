"""Read-only views of arguments and results, for code that must look but not touch.

Observers and redaction hooks see the arguments a tool is about to run with and the result
the agent is about to get. Handing them the live objects lets an observer change what runs
(``verdict.args["amount"] = ...``) or what the agent reads. :func:`view` wraps a value in a
view that reads like it (indexing, iteration, ``len``, ``==``, ``dict()`` / ``list()``) and
refuses writes at any depth; it costs O(1) to make and O(1) per access, since nested dicts
and lists are wrapped only when they are read. :func:`thaw` makes a private mutable deep
copy, for a hook that edits its value in place.

Dicts, lists and other mutable mappings and sequences are protected; other objects (a
pydantic model, a dataclass instance, a set) are passed as they are.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, MutableMapping, MutableSequence, Sequence
from typing import Any

__all__ = ("MappingView", "SequenceView", "thaw", "unwrap", "view")


class MappingView(Mapping[Any, Any]):
    """A read-only view of a mapping; nested containers are viewed too."""

    __slots__ = ("_data",)

    def __init__(self, data: Mapping[Any, Any]) -> None:
        self._data = data

    def __getitem__(self, key: Any) -> Any:
        return view(self._data[key])

    def __iter__(self) -> Iterator[Any]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, key: object) -> bool:
        return key in self._data

    def __eq__(self, other: object) -> bool:
        if isinstance(other, MappingView):
            other = other._data
        return self._data == other if isinstance(other, Mapping) else NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return repr(self._data)

    def copy(self) -> dict[Any, Any]:
        """A private mutable deep copy (as :func:`thaw`)."""
        copied: dict[Any, Any] = thaw(self)
        return copied


class SequenceView(Sequence[Any]):
    """A read-only view of a list (or another mutable sequence); nested containers are viewed too."""

    __slots__ = ("_data",)

    def __init__(self, data: Sequence[Any]) -> None:
        self._data = data

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return SequenceView(self._data[index])
        return view(self._data[index])

    def __iter__(self) -> Iterator[Any]:
        for item in self._data:
            yield view(item)

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, item: object) -> bool:
        return item in self._data

    def __eq__(self, other: object) -> bool:
        if isinstance(other, SequenceView):
            other = other._data
        if isinstance(other, (list, tuple)) or (isinstance(other, Sequence) and not isinstance(other, (str, bytes))):
            return list(self._data) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return repr(self._data)

    def copy(self) -> list[Any]:
        """A private mutable deep copy (as :func:`thaw`)."""
        copied: list[Any] = thaw(self)
        return copied


def view(value: Any) -> Any:
    """``value`` as a read-only view when it is a mutable mapping or sequence, else ``value`` itself."""
    t = type(value)
    if t is dict:
        return MappingView(value)
    if t is list:
        return SequenceView(value)
    if t is str or t is int or t is float or t is bool or value is None or t is MappingView or t is SequenceView:
        return value
    if isinstance(value, MutableMapping):
        return MappingView(value)
    if isinstance(value, MutableSequence):
        return SequenceView(value)
    return value


def unwrap(value: Any) -> Any:
    """The value a view shows (``value`` itself when it is not a view); for trusted readers."""
    t = type(value)
    return value._data if t is MappingView or t is SequenceView else value


def thaw(value: Any) -> Any:
    """A mutable deep copy of ``value``'s dicts, lists, tuples and sets (views included); other objects are shared.

    Costs O(size of the containers): for a hook that edits its value in place.
    """
    if isinstance(value, (MappingView, SequenceView)):
        value = value._data
    if isinstance(value, Mapping):
        return {k: thaw(v) for k, v in value.items()}
    if isinstance(value, (list, MutableSequence)):
        return [thaw(v) for v in value]
    if type(value) is tuple:
        return tuple(thaw(v) for v in value)
    if isinstance(value, (set, frozenset)):
        return type(value)(value) if isinstance(value, frozenset) else set(value)
    return value
