"""Reading one large record file in several processes, each its own byte range of whole lines.

Decoding every line whole is what makes the fast loader agree with ``--validate`` on every
line, and it is most of its time: one core decodes about 1.5 GB of records a minute. A
large regular file is therefore split into byte ranges, one per core; each range starts at
a line start and ends before the first line that starts in the next range. Forked workers
read their range with exactly the sequential reader's code (the same decoder, checks and
pydantic fallback) and write compact columns to a temporary folder; the parent puts them
together in file order, with global line numbers, task codes and label-set codes. The
workers keep nothing but those columns (a few bytes an episode), so their memory stays
near the interpreter's.

Only on Linux, for regular files of at least :data:`MIN_BYTES`, and when the process runs
no other thread (forking a threaded process is unsafe); everything else is read in order
by one process. ``PREFIXMON_READ_WORKERS=1`` turns it off.
"""

from __future__ import annotations

import io
import itertools
import os
import pickle
import shutil
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np

from ..exceptions import RecordError
from ..records.model import BadLine
from .columns import ColumnBuilder, EpisodeColumns, OnError, TextColumn, Texts

__all__ = ("MIN_BYTES", "WORKERS_VAR", "read_in_parallel", "workers_for")

MIN_BYTES: Final = 256 * 2**20
"""Files smaller than this are read by one process (a worker's start costs more than it saves)."""
WORKERS_VAR: Final = "PREFIXMON_READ_WORKERS"
"""Environment variable: the most worker processes a file is read with (``1``: none)."""

Reader = Callable[[Iterator[bytes], str, OnError, "list[BadLine] | None", "list[int]", ColumnBuilder], int]
"""The sequential reader of lines (``inputs._read_records``); returns the number of lines it read."""


def workers_for(path: str, size: int) -> int:
    """How many processes should read the file at ``path`` (1: read it here, in order)."""
    if not sys.platform.startswith("linux") or size < MIN_BYTES or threading.active_count() > 1:
        return 1
    try:
        most = int(os.environ.get(WORKERS_VAR, "0") or 0)
    except ValueError:
        most = 0
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    workers = min(cores, 16) if most <= 0 else min(most, cores)
    return max(1, min(workers, size // max(1, MIN_BYTES // 4)))  # a quarter of MIN_BYTES at least per worker


@dataclass(slots=True)
class _Part:
    """What one worker read: its columns (in files) and what the parent needs to join them."""

    lines: int = 0
    """Lines in the range (blank and bad ones included)."""
    episodes: int = 0
    tasks: list[str] = field(default_factory=list)
    label_sets: list[tuple[tuple[str, str], ...]] = field(default_factory=list)
    skipped: list[int] = field(default_factory=list)
    """Range-local numbers of the lines skipped (bad lines)."""
    errors: list[BadLine] = field(default_factory=list)
    """Range-local line numbers."""
    error: tuple[str, int | None] | None = None
    """A bad line under ``on_error="raise"``: its message (without place) and range-local line."""
    failure: str | None = None
    """The worker itself failed (not a bad line): what happened."""


_COLUMNS: Final = (("task", np.int32), ("label_set", np.int32), ("horizon", np.int32), ("fed", np.int32),
                   ("outcome", np.int8), ("cause", np.int8), ("keys", np.int64))  # fmt: skip


def _ranges(path: str, size: int, n: int) -> list[tuple[int, int]]:
    """``n`` byte ranges of whole lines covering the file."""
    starts = [0]
    with open(path, "rb") as f:
        for k in range(1, n):
            f.seek(size * k // n)
            f.readline()  # the rest of a line that started before this offset
            starts.append(max(f.tell(), starts[-1]))
    starts.append(size)
    return [(a, b) for a, b in itertools.pairwise(starts) if a < b] or [(0, size)]


_BLOCK: Final = 1 << 20
"""A worker reads its range in blocks of about this many bytes (each extended to a whole line)."""
_FLUSH_BLOCKS: Final = 48
"""A worker writes its numbers out every this many blocks (about 35,000 records of 1.4 KB)."""


def _lines(path: str, start: int, end: int, after_block: Callable[[], None]) -> Iterator[bytes]:
    """The whole lines that start in ``[start, end)``, read a block at a time; ``after_block()`` after each.

    Blocks rather than ``for line in file`` with a position count: no Python code runs per
    line here (0.3 µs a line, 8% of a worker's time at 1M records in bench_report).
    """
    with open(path, "rb") as f:
        f.seek(start)
        pos = start
        while pos < end:
            block = f.read(min(_BLOCK, end - pos))
            if not block:
                return
            if not block.endswith(b"\n"):
                block += f.readline()  # the rest of a line that starts in the range
            pos += len(block)
            yield from io.BytesIO(block)  # splits at b"\n" only, as iterating the file does
            after_block()


def _work(read: Reader, path: str, start: int, end: int, on_error: OnError, out: str) -> None:
    """A worker: read one range with the sequential reader, write its columns and summary to ``out``."""
    part = _Part()
    builder = ColumnBuilder(texts=lambda: ((), (), ()))
    blocks = [0]

    def write_out() -> None:  # the numbers so far, appended to their files: the worker keeps none of them
        for name, numbers in builder.take_numbers().items():
            with open(os.path.join(out, name), "ab") as f:
                numbers.tofile(f)

    def after_block() -> None:
        blocks[0] += 1
        if not blocks[0] % _FLUSH_BLOCKS:
            write_out()

    errors: list[BadLine] = []
    try:
        part.lines = read(_lines(path, start, end, after_block), path, on_error, errors, part.skipped, builder)
    except RecordError as e:  # on_error="raise": the first bad line of this range
        place = f"{e.path}:{e.line}: " if e.path is not None and e.line is not None else ""
        part.error = (str(e).removeprefix(place), e.line)
    except BaseException as e:  # reported to the parent, which raises it
        part.failure = f"{type(e).__name__}: {e}"
    if part.error is None and part.failure is None:
        write_out()
        columns = builder.build()  # the lookup tables (its numbers are written out)
        part.episodes = os.path.getsize(os.path.join(out, "keys")) // 8
        part.tasks = list(columns.task_ids)
        part.label_sets = [tuple(ls.items()) for ls in columns.label_sets]
        part.errors = errors
    with open(os.path.join(out, "part.pickle"), "wb") as f:
        pickle.dump(part, f)


def read_in_parallel(
    read: Reader,
    path: str,
    size: int,
    workers: int,
    on_error: OnError,
    errors: list[BadLine] | None,
    texts: Callable[[list[int], Any], Texts],
) -> EpisodeColumns:
    """Read ``path`` in ``workers`` processes; the columns the sequential reader would give.

    Args:
        read: the sequential reader of lines.
        texts: ``(skipped line numbers, keys) -> texts``: reads the ids and reasons again later.

    Raises:
        RecordError: the first bad line of the file (``on_error="raise"``), as the sequential reader raises it.
    """
    import multiprocessing

    context = multiprocessing.get_context("fork")
    folder = tempfile.mkdtemp(prefix="prefixmon-read-")
    try:
        ranges = _ranges(path, size, workers)
        outs = [os.path.join(folder, str(k)) for k in range(len(ranges))]
        processes = []
        for (start, end), out in zip(ranges, outs, strict=True):
            os.mkdir(out)
            process = context.Process(target=_work, args=(read, path, start, end, on_error, out), daemon=True)
            process.start()
            processes.append(process)
        for process in processes:
            process.join()
        parts: list[_Part] = []
        for process, out in zip(processes, outs, strict=True):
            try:
                with open(os.path.join(out, "part.pickle"), "rb") as f:
                    parts.append(pickle.load(f))
            except OSError:
                raise RuntimeError(f"a process reading {path} ended without its result (exit code {process.exitcode})") from None
        return _join(parts, outs, path, errors, texts)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _join(
    parts: list[_Part], outs: list[str], path: str, errors: list[BadLine] | None, texts: Callable[[list[int], Any], Texts]
) -> EpisodeColumns:
    first_line = 0
    skipped: list[int] = []
    for part in parts:  # in file order: the first failure or bad line of the file is the one raised
        if part.failure is not None:
            raise RuntimeError(f"reading {path}: {part.failure}")
        if part.error is not None:
            message, line = part.error
            raise RecordError(message, path=path, line=None if line is None else first_line + line)
        skipped.extend(first_line + n for n in part.skipped)
        if errors is not None:
            errors.extend(
                BadLine(path=e.path, line=first_line + e.line, message=e.message, truncated=e.truncated) for e in part.errors
            )
        first_line += part.lines
    total = sum(p.episodes for p in parts)
    task_index: dict[str, int] = {}
    label_index: dict[tuple[tuple[str, str], ...], int] = {}
    columns: dict[str, Any] = {name: np.empty(total, dtype=dtype) for name, dtype in _COLUMNS}
    at = 0
    for part, out in zip(parts, outs, strict=True):
        n = part.episodes
        if not n:
            continue
        task_map = np.array([task_index.setdefault(t, len(task_index)) for t in part.tasks], dtype=np.int32)
        label_map = np.array([label_index.setdefault(ls, len(label_index)) for ls in part.label_sets], dtype=np.int32)
        for name, dtype in _COLUMNS:
            values = np.fromfile(os.path.join(out, name), dtype=dtype, count=n)
            if name == "task":
                values = task_map[values]
            elif name == "label_set":
                values = label_map[values]
            columns[name][at : at + n] = values
        at += n
    keys = columns["keys"]
    shared: list[Texts] = []

    def load() -> Texts:
        if not shared:
            shared.append(texts(skipped, keys))
        return shared[0]

    ids, tools, reasons = (TextColumn(total, lambda i=i: load()[i]) for i in range(3))  # type: ignore[misc]
    return EpisodeColumns(
        horizon=columns["horizon"],
        fed=columns["fed"],
        outcome=columns["outcome"],
        cause=columns["cause"],
        task=columns["task"],
        label_set=columns["label_set"],
        task_ids=tuple(task_index),
        label_sets=tuple(dict(ls) for ls in label_index),
        episode_ids=ids,
        failure_tool=tools,
        failure_reason=reasons,
        keys=keys,
    )
