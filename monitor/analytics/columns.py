"""Episodes as columns: the few fields the metrics read, one numpy array each.

Everything in :mod:`prefixmon.analytics` works on :class:`EpisodeColumns`. Build them from
validated :class:`~prefixmon.records.EpisodeRecord` objects (:func:`columns_from_records`)
or read them straight from record files with the fast loader in :mod:`.inputs`.
"""

from __future__ import annotations

import array
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final, Literal, overload

import numpy as np
import numpy.typing as npt

from ..records.model import EpisodeRecord
from ..vocabulary import Cause, Outcome

__all__ = (
    "CAUSES",
    "CAUSE_CODE",
    "DATASET",
    "OUTCOMES",
    "OUTCOME_CODE",
    "ColumnBuilder",
    "EpisodeColumns",
    "IntArray",
    "KeyArray",
    "OnError",
    "SmallArray",
    "TextColumn",
    "columns_from_records",
    "combined",
    "concat_columns",
    "count_codes",
    "distinct_episodes",
    "fits_table",
    "small_int",
    "task_units",
    "unique_codes",
    "unique_pairs",
)

OnError = Literal["raise", "skip"]
"""What a reader does with a bad line: stop (``raise``) or skip it and count it (``skip``)."""

OUTCOMES: Final[tuple[str, ...]] = (Outcome.SUCCESS.value, Outcome.PARTIAL.value, Outcome.FAILURE.value)
"""Outcome codes 0, 1, 2; an episode without an outcome has code -1."""
OUTCOME_CODE: Final[Mapping[str | None, int]] = {None: -1, **{o: i for i, o in enumerate(OUTCOMES)}}
CAUSES: Final[tuple[str, ...]] = tuple(c.value for c in Cause)
"""Cause codes 0..4 in tie-break order; a fully executable episode has code -1."""
CAUSE_CODE: Final[Mapping[str | None, int]] = {None: -1, **{c: i for i, c in enumerate(CAUSES)}}
DATASET: Final = "dataset"
"""Label key of the dataset: a task is a (dataset, task id) pair, the same id in two datasets is two tasks."""

IntArray = npt.NDArray[np.int32]
SmallArray = npt.NDArray[np.int8]
KeyArray = npt.NDArray[np.int64]

Texts = tuple[tuple[str, ...], tuple[str | None, ...], tuple[str | None, ...]]
"""Episode ids, failure tools and failure reasons, one each per episode."""


class TextColumn(Sequence[Any]):
    """Per-episode text (episode ids, failure reasons) that is read only when something needs it.

    The metrics never read these columns, and at ten million episodes they would be the
    largest part of a report's memory (one Python string each). A reader that can read its
    file again hands a loader instead: the text is loaded the first time it is read (a
    review sheet, annotations, a duplicate id) and kept. ``len()`` never loads it.
    """

    __slots__ = ("_length", "_load", "_values")

    def __init__(self, length: int, load: Callable[[], Sequence[Any]]) -> None:
        self._length = length
        self._load: Callable[[], Sequence[Any]] | None = load
        self._values: Sequence[Any] | None = None

    @classmethod
    def of(cls, values: Sequence[Any]) -> TextColumn:
        """A column of values already in memory."""
        column = cls(len(values), lambda: values)
        column._values = values
        return column

    @property
    def loaded(self) -> bool:
        """Whether the text is in memory."""
        return self._values is not None

    def values(self) -> Sequence[Any]:
        """All the values (loading them once)."""
        values = self._values
        if values is None:
            assert self._load is not None
            values = self._values = tuple(self._load())
            self._load = None
            if len(values) != self._length:
                raise RuntimeError(f"a text column loaded {len(values)} values for {self._length} episodes")
        return values

    def __len__(self) -> int:
        return self._length

    @overload
    def __getitem__(self, index: int) -> Any: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[Any]: ...

    def __getitem__(self, index: int | slice) -> Any:
        return self.values()[index]

    def __iter__(self) -> Iterator[Any]:
        return iter(self.values())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, TextColumn):
            other = other.values()
        if not isinstance(other, Sequence) or isinstance(other, (str, bytes)):
            return NotImplemented
        return len(other) == self._length and tuple(self.values()) == tuple(other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        shown = repr(tuple(self._values[:3])) + ("..." if self._length > 3 else "") if self._values is not None else "not loaded"
        return f"TextColumn({self._length} values: {shown})"


def _text(values: Sequence[Any]) -> Sequence[Any]:
    """Values of a text column as a plain sequence (loading a lazy one)."""
    return values.values() if isinstance(values, TextColumn) else values


DENSE_LIMIT: Final = 1 << 26
"""Largest code range :func:`unique_codes` counts in a table (512 MiB of counts at most); beyond it, it sorts."""
_TABLE_PER_CODE: Final = 16
"""A table may have this many slots per code counted (beyond :data:`_TABLE_FLOOR`)."""
_TABLE_FLOOR: Final = 1 << 16


def fits_table(size: int, n: int) -> bool:
    """Whether ``n`` codes below ``size`` are counted in a table of ``size`` slots rather than sorted.

    The table must be small in itself (:data:`DENSE_LIMIT`) and next to the codes: 200
    episodes with horizons of 100,000 made (cohort, depth) tables of 20 million slots
    (160 MB) for 200 codes.
    """
    return size <= DENSE_LIMIT and size <= _TABLE_FLOOR + _TABLE_PER_CODE * n


def small_int(top: int) -> type[np.signedinteger[Any]]:
    """The narrowest signed integer type that holds ``0..top`` (codes are kept as small as they fit:
    a cohort or stratum code per episode is 10 MB in 8 bits at ten million episodes, 40 MB in 32)."""
    return np.int8 if top < 2**7 else np.int16 if top < 2**15 else np.int32 if top < 2**31 else np.int64


def combined(major: npt.NDArray[np.integer[Any]], size: int, minor: npt.NDArray[np.integer[Any]]) -> npt.NDArray[np.integer[Any]]:
    """``major * size + minor`` per episode, in the narrowest integers the codes fit (see :func:`small_int`)."""
    top = (int(major.max()) + 1) * size if major.size else 0
    out: npt.NDArray[np.integer[Any]] = major.astype(small_int(top))
    np.multiply(out, size, out=out)
    np.add(out, minor, out=out)
    return out


_COUNT_CHUNK: Final = 1 << 20
"""Codes counted (or looked up) at a time by :func:`count_codes` and :func:`unique_codes`."""


def count_codes(
    codes: npt.NDArray[np.integer[Any]], size: int, where: npt.NDArray[np.bool_] | None = None
) -> npt.NDArray[np.intp]:
    """``np.bincount(codes[where], minlength=size)`` for codes below ``size``, a million codes at a time.

    ``np.bincount`` first copies its input to 64-bit integers, and ``codes[where]`` is
    another copy: at ten million episodes 80 + 40 MB for every count a report makes, which
    set its peak (bench_report at 10M, with bench_report's own tiling of the 1M file:
    633 MB before the counts were chunked).
    """
    if len(codes) <= _COUNT_CHUNK:
        return np.bincount(codes if where is None else codes[where], minlength=size)
    out = np.zeros(size, dtype=np.intp)
    for a in range(0, len(codes), _COUNT_CHUNK):
        part = codes[a : a + _COUNT_CHUNK]
        out += np.bincount(part if where is None else part[where[a : a + _COUNT_CHUNK]], minlength=size)
    return out


def unique_codes(
    codes: npt.NDArray[np.integer[Any]], size: int, *, inverse: bool = True
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.integer[Any]]]:
    """``np.unique(codes, return_counts=True, return_inverse=True)`` of non-negative codes below ``size``.

    With a table of ``size`` counts when it is small enough (:data:`DENSE_LIMIT`): one pass,
    no sorted copy of the codes (at ten million episodes the sort's copies were most of a
    report's memory). Returns ``(values, counts, inverse)`` (``inverse`` empty when not asked for).
    """
    if fits_table(size, len(codes)):
        return _from_counts(count_codes(codes, size), len(codes), lambda s: codes[s], inverse)
    values, where, counts = np.unique(codes, return_inverse=True, return_counts=True)
    return values.astype(np.int64), counts.astype(np.int64), where.reshape(-1)


def unique_pairs(
    major: npt.NDArray[np.integer[Any]], size: int, minor: npt.NDArray[np.integer[Any]], *, inverse: bool = True
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.integer[Any]]]:
    """:func:`unique_codes` of ``combined(major, size, minor)``, the combined codes made a million at a time.

    The combined code of every episode was a 40 MB array at ten million episodes, and
    the largest part of a report's peak with the inverse made from it.
    """
    top = (int(major.max()) + 1) * size if major.size else 0
    if len(major) <= _COUNT_CHUNK or not fits_table(top, len(major)):
        return unique_codes(combined(major, size, minor), max(top, 1), inverse=inverse)
    chunks = [slice(a, a + _COUNT_CHUNK) for a in range(0, len(major), _COUNT_CHUNK)]
    counts = np.zeros(top, dtype=np.intp)
    for s in chunks:
        counts += np.bincount(combined(major[s], size, minor[s]), minlength=top)
    return _from_counts(counts, len(major), lambda s: combined(major[s], size, minor[s]), inverse)


def _from_counts(
    counts: npt.NDArray[np.integer[Any]],
    n: int,
    codes_of: Callable[[slice], npt.NDArray[np.integer[Any]]],
    inverse: bool,
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.integer[Any]]]:
    """``(values, counts, inverse)`` from a table of counts per code; the inverse of the ``n``
    codes is looked up a chunk at a time (``codes_of(chunk)``: indexing copies its index to 64 bits)."""
    values = np.flatnonzero(counts)
    if not inverse:
        return values.astype(np.int64), counts[values].astype(np.int64), np.zeros(0, dtype=np.int32)
    table = np.zeros(len(counts), dtype=np.int32 if values.size < 2**31 else np.int64)
    table[values] = np.arange(values.size, dtype=table.dtype)
    where = np.empty(n, dtype=table.dtype)
    for a in range(0, n, _COUNT_CHUNK):
        chunk = slice(a, a + _COUNT_CHUNK)
        where[chunk] = table[codes_of(chunk)]
    return values.astype(np.int64), counts[values].astype(np.int64), where


def episode_keys(episode_ids: Iterable[str]) -> KeyArray:
    """A 64-bit key per episode id (``hash()``, this process only) for telling duplicates apart cheaply."""
    return np.fromiter((hash(e) for e in episode_ids), dtype=np.int64)


@dataclass(frozen=True, slots=True, kw_only=True)
class EpisodeColumns:
    """N episodes as parallel arrays (index i is one episode).

    Codes index into the lookup tables ``task_ids`` and ``label_sets`` so that strings are
    stored once, however many episodes share them.
    """

    horizon: IntArray
    """T_i, the number of action slots (>= 1)."""
    fed: IntArray
    """FED_i in 1..T_i + 1; T_i + 1 when fully executable."""
    outcome: SmallArray
    """0 success, 1 partial, 2 failure, -1 none (see :data:`OUTCOMES`)."""
    cause: SmallArray
    """Primary cause code of the first failure (see :data:`CAUSES`), -1 when executable."""
    task: IntArray
    """Index into ``task_ids``."""
    label_set: IntArray
    """Index into ``label_sets``."""
    task_ids: tuple[str, ...]
    """Distinct task ids."""
    label_sets: tuple[Mapping[str, str], ...]
    """Distinct label objects."""
    episode_ids: Sequence[str]
    """Episode ids, one per episode (a :class:`TextColumn` when read by the fast loader: loaded
    from the file again when first read)."""
    failure_tool: Sequence[str | None]
    """Tool of the first failure, one per episode (``None`` when executable)."""
    failure_reason: Sequence[str | None]
    """Reason of the first failure, one per episode (``None`` when executable)."""
    keys: KeyArray | None = None
    """A 64-bit key per episode id (see :func:`episode_keys`), so that duplicate ids are found
    without loading the ids; ``None``: computed from ``episode_ids`` when needed."""

    def __len__(self) -> int:
        return int(self.horizon.shape[0])

    def label(self, key: str) -> tuple[IntArray, tuple[str | None, ...]]:
        """One label as codes per episode plus the sorted distinct values (``None`` = missing).

        Returns:
            ``(codes, values)`` with ``values[codes[i]]`` the label of episode i.
        """
        per_set = [ls.get(key) for ls in self.label_sets]
        values = tuple(sorted(set(per_set), key=_value_order))
        index = {v: i for i, v in enumerate(values)}
        table = np.fromiter((index[v] for v in per_set), dtype=small_int(len(values)), count=len(per_set))
        return table[self.label_set], values

    def label_keys(self) -> tuple[str, ...]:
        """Every label key that occurs in at least one episode, sorted."""
        return tuple(sorted({k for ls in self.label_sets for k in ls}))

    def select(self, mask: npt.NDArray[np.bool_]) -> EpisodeColumns:
        """The episodes where ``mask`` is true (lookup tables are kept as they are)."""
        where = np.flatnonzero(mask)
        ids, tools, reasons = _text(self.episode_ids), _text(self.failure_tool), _text(self.failure_reason)
        return EpisodeColumns(
            horizon=self.horizon[where],
            fed=self.fed[where],
            outcome=self.outcome[where],
            cause=self.cause[where],
            task=self.task[where],
            label_set=self.label_set[where],
            task_ids=self.task_ids,
            label_sets=self.label_sets,
            episode_ids=tuple(ids[i] for i in where.tolist()),
            failure_tool=tuple(tools[i] for i in where.tolist()),
            failure_reason=tuple(reasons[i] for i in where.tolist()),
            keys=None if self.keys is None else self.keys[where],
        )


def _value_order(value: str | None) -> tuple[int, str]:
    """Sort key that puts missing labels last."""
    return (1, "") if value is None else (0, value)


_PENDING: Final = 7 * 65_536
"""A builder sorts its pending rows into its arrays once it holds this many numbers."""
_TYPECODE_DTYPE: Final[Mapping[str, type[np.generic]]] = {"b": np.int8, "i": np.int32, "q": np.int64}


class ColumnBuilder:
    """Accumulates episodes one at a time and interns repeated strings.

    Used by every reader; :meth:`add` takes already-checked plain values. Numbers go into
    compact arrays (4 bytes an episode, not a Python object each).

    Args:
        texts: loads the episode ids, failure tools and failure reasons again (a reader that
            can read its file twice); the builder then keeps only a 64-bit key per id and
            :meth:`add` takes no text. Default: the text is kept in memory.
    """

    __slots__ = (
        "_cause",
        "_episode",
        "_fed",
        "_horizon",
        "_keys",
        "_label_index",
        "_labels",
        "_outcome",
        "_reason",
        "_rows",
        "_task",
        "_task_index",
        "_texts",
        "_tool",
    )

    def __init__(self, *, texts: Callable[[], Texts] | None = None) -> None:
        self._horizon = array.array("i")
        self._fed = array.array("i")
        self._outcome = array.array("b")
        self._cause = array.array("b")
        self._task = array.array("i")
        self._labels = array.array("i")
        self._keys = array.array("q")
        self._rows: list[int] = []
        """Episodes appended but not yet sorted into the arrays above: 7 numbers each (see :meth:`row_sink`)."""
        self._episode: list[str] = []
        self._tool: list[str | None] = []
        self._reason: list[str | None] = []
        self._task_index: dict[str, int] = {}
        self._label_index: dict[tuple[tuple[str, str], ...], int] = {}
        self._texts = texts

    def add(
        self,
        *,
        episode_id: str,
        task_id: str,
        labels: Mapping[str, str],
        horizon: int,
        fed: int,
        outcome: int,
        cause: int,
        failure_tool: str | None,
        failure_reason: str | None,
    ) -> None:
        """Append one episode (codes as in :data:`OUTCOME_CODE` and :data:`CAUSE_CODE`)."""
        if self._texts is None:
            self.add_text(episode_id, failure_tool, failure_reason)
        self.append_codes(hash(episode_id), self.task_code(task_id), self.label_code(labels), horizon, fed, outcome, cause)

    @property
    def keeps_text(self) -> bool:
        """Whether the text is kept in memory (no loader was given)."""
        return self._texts is None

    def task_code(self, task_id: str) -> int:
        """The code of a task id (a new one for a new id)."""
        tasks = self._task_index
        code = tasks.get(task_id)
        if code is None:
            code = tasks[task_id] = len(tasks)
        return code

    def label_code(self, labels: Mapping[str, str]) -> int:
        """The code of a label set (the same labels in the same order share one)."""
        key = tuple(labels.items())
        sets = self._label_index
        code = sets.get(key)
        if code is None:
            code = sets[key] = len(sets)
        return code

    def add_text(self, episode_id: str, failure_tool: str | None, failure_reason: str | None) -> None:
        """Keep one episode's text (a builder without a text loader)."""
        self._episode.append(episode_id)
        self._tool.append(failure_tool)
        self._reason.append(failure_reason)

    def take_numbers(self) -> dict[str, array.array[int]]:
        """The numbers appended so far (``task``, ``label_set``, ``horizon``, ``fed``, ``outcome``,
        ``cause``, ``keys``), handed over and cleared: a reader that writes them out as it goes."""
        self.settle()
        taken = {
            "task": self._task,
            "label_set": self._labels,
            "horizon": self._horizon,
            "fed": self._fed,
            "outcome": self._outcome,
            "cause": self._cause,
            "keys": self._keys,
        }
        self._task, self._labels, self._horizon, self._fed = (array.array("i") for _ in range(4))
        self._outcome, self._cause, self._keys = array.array("b"), array.array("b"), array.array("q")
        return taken

    def append_codes(self, key: int, task: int, label_set: int, horizon: int, fed: int, outcome: int, cause: int) -> None:
        """Append one episode's numbers, its task and label set already coded."""
        self._rows.extend((key, task, label_set, horizon, fed, outcome, cause))
        if len(self._rows) >= _PENDING:
            self.settle()

    @property
    def row_sink(self) -> Callable[[tuple[int, int, int, int, int, int, int]], None]:
        """:meth:`append_codes` for a reader's inner loop: ``sink((key, task, label_set, horizon, fed, outcome, cause))``.

        One ``list.extend`` a line instead of seven ``array.append`` calls, each of which
        parses its argument (cachegrind on bench_report's records: the seven appends were 5,000
        machine instructions a line, the decode 34,000). A reader using it calls
        :meth:`settle` every few ten thousand lines, so that the pending rows stay small.
        """
        return self._rows.extend

    def settle(self) -> None:
        """Sort the pending rows into the columns' arrays."""
        if not self._rows:
            return
        rows = np.array(self._rows, dtype=np.int64).reshape(-1, 7)
        self._rows.clear()
        # In range by construction: codes < 2**31, horizon <= MAX_HORIZON without actions (and
        # never above memory with them), outcome and cause codes -1..4.
        targets = (self._keys, self._task, self._labels, self._horizon, self._fed, self._outcome, self._cause)
        for column, target in enumerate(targets):
            target.frombytes(rows[:, column].astype(_TYPECODE_DTYPE[target.typecode]).tobytes())

    def build(self) -> EpisodeColumns:
        """The columns of everything added so far."""
        self.settle()
        n = len(self._horizon)
        if self._texts is None:
            ids: Sequence[str] = tuple(self._episode)
            tools: Sequence[str | None] = tuple(self._tool)
            reasons: Sequence[str | None] = tuple(self._reason)
        else:
            shared = _SharedTexts(self._texts)
            ids, tools, reasons = (TextColumn(n, lambda i=i: shared.get()[i]) for i in range(3))  # type: ignore[misc]
        return EpisodeColumns(
            horizon=np.frombuffer(self._horizon, dtype=np.int32).copy() if n else np.zeros(0, dtype=np.int32),
            fed=np.frombuffer(self._fed, dtype=np.int32).copy() if n else np.zeros(0, dtype=np.int32),
            outcome=np.frombuffer(self._outcome, dtype=np.int8).copy() if n else np.zeros(0, dtype=np.int8),
            cause=np.frombuffer(self._cause, dtype=np.int8).copy() if n else np.zeros(0, dtype=np.int8),
            task=np.frombuffer(self._task, dtype=np.int32).copy() if n else np.zeros(0, dtype=np.int32),
            label_set=np.frombuffer(self._labels, dtype=np.int32).copy() if n else np.zeros(0, dtype=np.int32),
            task_ids=tuple(self._task_index),
            label_sets=tuple(dict(k) for k in self._label_index),
            episode_ids=ids,
            failure_tool=tools,
            failure_reason=reasons,
            keys=np.frombuffer(self._keys, dtype=np.int64).copy() if n else np.zeros(0, dtype=np.int64),
        )


class _SharedTexts:
    """One load of the three text columns of a file, shared by them."""

    __slots__ = ("_load", "_texts")

    def __init__(self, load: Callable[[], Texts]) -> None:
        self._load: Callable[[], Texts] | None = load
        self._texts: Texts | None = None

    def get(self) -> Texts:
        if self._texts is None:
            assert self._load is not None
            self._texts = self._load()
            self._load = None
        return self._texts


def columns_from_records(records: Iterable[EpisodeRecord]) -> EpisodeColumns:
    """Columns of validated records (``prefixmon.read_records`` output, ``episode.record``)."""
    builder = ColumnBuilder()
    for r in records:
        ff = r.first_failure
        builder.add(
            episode_id=r.episode_id,
            task_id=r.task_id,
            labels=r.labels,
            horizon=r.horizon,
            fed=r.fed,
            outcome=OUTCOME_CODE[None if r.outcome is None else r.outcome.value],
            cause=-1 if ff is None else CAUSE_CODE[ff.cause.value],
            failure_tool=None if ff is None else ff.tool,
            failure_reason=None if ff is None else ff.reason,
        )
    return builder.build()


def concat_columns(parts: Sequence[EpisodeColumns]) -> EpisodeColumns:
    """One set of columns from several (e.g. one per input file), lookup tables merged."""
    if len(parts) == 1:
        return parts[0]
    task_index: dict[str, int] = {}
    label_index: dict[tuple[tuple[str, str], ...], int] = {}
    tasks: list[IntArray] = []
    labels: list[IntArray] = []
    for p in parts:
        tmap = np.array([task_index.setdefault(t, len(task_index)) for t in p.task_ids], dtype=np.int32)
        lmap = np.array(
            [label_index.setdefault(tuple(ls.items()), len(label_index)) for ls in p.label_sets],
            dtype=np.int32,
        )
        tasks.append(tmap[p.task] if len(p) else p.task)
        labels.append(lmap[p.label_set] if len(p) else p.label_set)
    return EpisodeColumns(
        horizon=np.concatenate([p.horizon for p in parts]),
        fed=np.concatenate([p.fed for p in parts]),
        outcome=np.concatenate([p.outcome for p in parts]),
        cause=np.concatenate([p.cause for p in parts]),
        task=np.concatenate(tasks),
        label_set=np.concatenate(labels),
        task_ids=tuple(task_index),
        label_sets=tuple(dict(k) for k in label_index),
        episode_ids=_chain([p.episode_ids for p in parts]),
        failure_tool=_chain([p.failure_tool for p in parts]),
        failure_reason=_chain([p.failure_reason for p in parts]),
        keys=np.concatenate([_keys(p) for p in parts]) if all(p.keys is not None for p in parts) else None,
    )


def _chain(columns: Sequence[Sequence[Any]]) -> Sequence[Any]:
    """One text column of several, loaded (part by part) only when read."""
    if all(not isinstance(c, TextColumn) or c.loaded for c in columns):
        return tuple(v for c in columns for v in _text(c))
    return TextColumn(sum(len(c) for c in columns), lambda: tuple(v for c in columns for v in _text(c)))


def _keys(columns: EpisodeColumns) -> KeyArray:
    return columns.keys if columns.keys is not None else episode_keys(_text(columns.episode_ids))


def distinct_episodes(columns: EpisodeColumns) -> tuple[EpisodeColumns, list[str]]:
    """The columns with each episode id once (its first occurrence), and the ids seen again.

    The same episode read twice (two copies of a file, records and the traces of the same
    run, a sink that retried) would otherwise count twice and narrow every interval. The
    lookup tables keep only the task ids and label sets of the episodes kept.
    """
    if not _repeated_key(_keys(columns)):  # the usual case: no id twice, none read to know it
        return columns, []
    seen: set[str] = set()  # a key seen twice: a duplicate, or (rarely) two ids with one key; the ids decide
    again: list[str] = []
    keep = np.ones(len(columns), dtype=np.bool_)
    for i, episode_id in enumerate(_text(columns.episode_ids)):
        if episode_id in seen:
            keep[i] = False
            again.append(episode_id)
        else:
            seen.add(episode_id)
    return (_compact(columns.select(keep)) if again else columns), again


_KEY_PARTS: Final = 16
"""Keys are checked for repeats in this many parts (by their low bits), each sorted on its own."""


def _repeated_key(keys: KeyArray) -> bool:
    """Whether some key occurs twice.

    A sorted copy of every key was 80 MB at ten million episodes; a part (the keys with the
    same low bits: equal keys fall in the same part) is a sixteenth of that.
    """
    if len(keys) <= _COUNT_CHUNK:
        ordered = np.sort(keys)
        return bool((ordered[1:] == ordered[:-1]).any())
    part = np.empty(len(keys), dtype=np.int8)
    np.bitwise_and(keys, _KEY_PARTS - 1, out=part, casting="unsafe")
    for p in range(_KEY_PARTS):
        ordered = np.sort(keys[part == p])
        if bool((ordered[1:] == ordered[:-1]).any()):
            return True
    return False


def _compact(columns: EpisodeColumns) -> EpisodeColumns:
    """The same episodes with lookup tables cut down to the codes in use."""
    tasks, task = np.unique(columns.task, return_inverse=True)
    sets, label_set = np.unique(columns.label_set, return_inverse=True)
    return replace(
        columns,
        task=task.reshape(-1).astype(np.int32),
        label_set=label_set.reshape(-1).astype(np.int32),
        task_ids=tuple(columns.task_ids[i] for i in tasks.tolist()),
        label_sets=tuple(columns.label_sets[i] for i in sets.tolist()),
    )


def task_units(columns: EpisodeColumns) -> tuple[IntArray, tuple[tuple[str | None, str], ...]]:
    """Each episode's task as a (dataset label, task id) pair, coded.

    The same task id in two datasets names two different tasks; every count of tasks,
    rerun and bootstrap unit goes through these codes.

    Returns:
        ``(codes, units)``: ``units[codes[i]]`` is the (dataset, task id) of episode i
        (dataset ``None`` when the label is missing); units are ordered by dataset value
        (missing last), then by first appearance of the task id.
    """
    if not len(columns):
        return np.zeros(0, dtype=np.int32), ()
    if not any(DATASET in ls for ls in columns.label_sets):
        return columns.task, tuple((None, t) for t in columns.task_ids)
    datasets, values = columns.label(DATASET)
    n_tasks = len(columns.task_ids)
    keys, _, codes = unique_pairs(datasets, n_tasks, columns.task)
    units = tuple((values[k // n_tasks], columns.task_ids[k % n_tasks]) for k in keys.tolist())
    return codes.astype(np.int32, copy=False), units
