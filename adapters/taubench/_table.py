"""Copy-on-write database tables shared by the sandbox tools."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

from .._json import copy_json

__all__ = (
    "Db",
    "Table",
    "dumps_row",
)

T = TypeVar("T")


class Table(Mapping[str, Any]):
    """One database table (id → record) as a copy-on-write overlay over shared base data.

    Reading gives the current record; callers must not mutate it. Writers call
    :meth:`for_write` (copies the record into the overlay once) or :meth:`insert`.
    """

    __slots__ = ("_base", "_deleted", "_derived", "_new", "_over")

    def __init__(self, base: Mapping[str, Any], *, derived: dict[str, Any] | None = None) -> None:
        self._base = base
        self._over: dict[str, Any] = {}
        self._new: list[str] = []
        self._deleted: set[str] = set()
        self._derived: dict[str, Any] = {} if derived is None else derived
        """Data derived from the base (see :meth:`derived`): shared by every table over the same base when given."""

    def __getitem__(self, key: str) -> Any:
        if key in self._over:
            return self._over[key]
        if key in self._deleted:
            raise KeyError(key)
        return self._base[key]

    def __contains__(self, key: object) -> bool:
        if key in self._over:
            return True
        return key not in self._deleted and key in self._base

    def __iter__(self) -> Iterator[str]:
        for key in self._base:
            if key not in self._deleted:
                yield key
        yield from self._new

    def __len__(self) -> int:
        return len(self._base) - len(self._deleted) + len(self._new)

    def for_write(self, key: str) -> Any:
        """The record under ``key``, copied into this table's overlay so it may be mutated."""
        if key in self._over:
            return self._over[key]
        if key in self._deleted:
            raise KeyError(key)
        record = copy_json(self._base[key])  # base data is read from JSON: nothing in it is shared
        self._over[key] = record
        return record

    def insert(self, key: str, record: Any) -> None:
        """Add or replace a record."""
        if key not in self:
            self._new.append(key)
        self._deleted.discard(key)
        self._over[key] = record

    def fork(self) -> Table:
        """An independent copy: shares the base, copies only the records written so far."""
        twin = Table(self._base)
        twin._over = copy.deepcopy(self._over)
        twin._new = list(self._new)
        twin._deleted = set(self._deleted)
        twin._derived = self._derived
        return twin

    def derived(self, name: str, build: Callable[[Mapping[str, Any]], T]) -> T:
        """Data derived from the shared base (an index), built once and shared with forks."""
        if name not in self._derived:
            self._derived[name] = build(self._base)
        value: T = self._derived[name]
        return value

    @property
    def base(self) -> Mapping[str, Any]:
        """The shared read-only base data."""
        return self._base

    @property
    def written(self) -> frozenset[str]:
        """Ids of the records this table copied, inserted or replaced."""
        return frozenset(self._over)


Db = Mapping[str, Table]
"""A domain database: table name → :class:`Table`."""


def dumps_row(table: Mapping[str, Any], key: str, missing: str) -> str:
    """The record under ``key`` as JSON text, or the environment's ``missing`` error string."""
    return json.dumps(table[key]) if key in table else missing
