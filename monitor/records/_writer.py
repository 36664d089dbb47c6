"""The long-lived writer behind :class:`prefixmon.JsonlSink`: one thread and one open file per sink.

Episodes hand finished lines to a bounded in-memory queue and go on; one daemon thread per
sink takes everything queued at once and appends it with a single ``os.write`` to a file
descriptor opened with ``O_APPEND`` and kept open. Policy, in the order things happen:

* **Hand-off**: ``put`` never blocks and never waits on the disk. A line that does not fit
  the queue bound (``max_queue_bytes``) or arrives after ``close`` is dropped and counted.
* **Write**: the writer wakes when a line is queued after a quiet spell and writes it at once;
  while lines keep coming it writes everything queued every 5 ms in one batch, so records
  reach the OS within a few milliseconds and a busy agent pays for one thread wake-up per
  batch, not per record (lines queued meanwhile do not wake it; a ``flush`` does). After the
  ``write`` returns the lines are in the operating system: a crash or SIGKILL of the
  process cannot lose them. ``fsync=True`` also syncs after every batch (survives power
  loss; costs one disk flush per batch, not per record).
* **Fresh lines**: before every batch the writer looks at the file's last byte; when a write
  was cut short (disk full, a file-size limit, a crash, also another process's), the next
  batch starts with a newline, so a fragment never swallows the next record. A write the
  writer itself cut short is completed in place when the file has not moved on.
* **Rotation**: before a batch the path's device and inode are compared with the open
  file's (one ``stat``, as ``logging.handlers.WatchedFileHandler`` does); a moved or
  deleted file is reopened (created) at the path.
* **Errors**: a failed open or write (read-only file system, disk full, ...) is counted
  and logged once per streak; the batch is kept and retried with backoff (10 ms doubling
  to 1 s), so nothing is lost while the disk recovers. Lines that arrive meanwhile queue up
  to the bound.
* **Drain**: ``close`` writes everything queued, waiting at most ``drain_timeout``
  seconds; a permanent error (read-only, permission, file too large) stops the drain at
  once. What could not be written is counted as lost and logged. Interpreter exit closes
  every writer. A sink garbage collected without ``close`` is released at the next sink's
  construction (or at exit): a finalizer can run anywhere, even while this writer holds its
  lock, so it only notes the sink.
* **Threads**: one per sink, started on the first line (and again after ``fork`` in the
  child; a multiprocessing child, which ends with ``os._exit``, flushes it in multiprocessing's
  exit hook). If a thread cannot be started (a pids limit), lines stay queued, starting is
  retried on later lines, and ``flush``/``close`` write them from the calling thread. The
  writer blocks the signals sent to the process, so they always reach the agent's threads.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import os
import stat
import sys
import threading
import time
import weakref
from collections import deque
from dataclasses import dataclass
from typing import Final

from .._internal.log import get_logger
from .._internal.signals import block_process_signals

__all__ = ["LineWriter", "SinkStats", "flush_writers"]

MAX_QUEUE_BYTES: Final = 64 * 2**20
"""Default bound of the lines waiting for the writer (64 MiB)."""
DRAIN_TIMEOUT: Final = 5.0
"""Default seconds ``close`` (and interpreter exit) waits for queued lines to be written."""
_BACKOFF: Final = (0.01, 1.0)
"""First and largest pause between retries of a failed write, in seconds."""
_LINGER: Final = 0.005
"""Seconds the writer gathers lines after a batch before it writes the next one (so records
reach the OS within a few milliseconds, and a busy agent pays for two GIL hand-backs per batch
of lines, not per line: benchmarks/bench_sink.py)."""
_CHECK_EVERY: Final = 255
"""Every 256th line queued behind others also checks that the writer thread is alive."""
_RESTART_EVERY: Final = 0.5
"""Seconds between attempts to start a writer thread after one could not be started."""
_PERMANENT: Final = frozenset(
    {errno.EROFS, errno.EACCES, errno.EPERM, errno.EISDIR, errno.ENOTDIR, errno.ENAMETOOLONG, errno.EFBIG, errno.EINVAL}
)
"""Errors that waiting does not cure: a closing writer gives up on them at once."""

_LIVE: Final[weakref.WeakValueDictionary[str, LineWriter]] = weakref.WeakValueDictionary()
"""Open writers of this process by real path: sinks of one file share one writer (so their
records keep their order), readers flush a file before reading it, and a forked child resets
what it inherited (``logging`` keeps its handlers the same way)."""
_LIVE_LOCK = threading.Lock()
_ABANDONED: Final[deque[LineWriter]] = deque()
"""Writers whose sinks were garbage collected without ``close``: each entry is one user to
release at the next safe point (a deque: appending takes no lock a finalizer could wait on)."""


@dataclass(slots=True, kw_only=True)
class SinkStats:
    """Counters of a :class:`~prefixmon.JsonlSink` over its lifetime."""

    accepted: int = 0
    """Records handed to the writer."""
    written: int = 0
    """Records in the file (handed to the operating system)."""
    dropped: int = 0
    """Records refused at the hand-off: the queue was full or the sink closed."""
    lost: int = 0
    """Accepted records that could not be written before the sink closed."""
    errors: int = 0
    """Failed opens, writes and syncs (each retry that fails counts once)."""
    batches: int = 0
    """Batches written: how often the writer took lines off the queue and wrote them (each
    costs the agent's thread one hand-back of the GIL or so; ``written / batches`` is the
    mean batch size)."""


class LineWriter:
    """Appends byte lines to one file from one long-lived thread (see the module docstring).

    Get one with :meth:`acquire`, which shares the writer of a file among its sinks, and give
    it back with :meth:`release`.
    """

    @classmethod
    def acquire(
        cls,
        path: str,
        *,
        fsync: bool = False,
        max_queue_bytes: int = MAX_QUEUE_BYTES,
        drain_timeout: float = DRAIN_TIMEOUT,
    ) -> LineWriter:
        """The open writer of ``path`` in this process, or a new one; counts one user."""
        key = os.path.realpath(path)
        _release_abandoned()
        with _LIVE_LOCK:
            writer = _LIVE.get(key)
            if writer is None or writer._closing or writer._pid != os.getpid():
                writer = cls(path, fsync=fsync, max_queue_bytes=max_queue_bytes, drain_timeout=drain_timeout)
                _LIVE[key] = writer
            else:
                writer.fsync = writer.fsync or fsync
                writer.max_queue_bytes = max(writer.max_queue_bytes, max_queue_bytes)
                writer.drain_timeout = max(writer.drain_timeout, drain_timeout)
            writer._users += 1
            return writer

    def release_later(self) -> None:
        """One user is gone without :meth:`release` (a finalizer): released at the next safe point.

        Takes no lock and never waits, so it is safe wherever a finalizer runs.
        """
        _ABANDONED.append(self)

    def release(self, timeout: float | None = None) -> bool:
        """One user is done; the last one closes the writer (see :meth:`close`). Returns :meth:`close`'s answer."""
        with _LIVE_LOCK:
            self._users -= 1
            last = self._users <= 0
        if not last:
            return self.flush(self.drain_timeout if timeout is None else timeout)
        return self.close(timeout)

    def __init__(
        self,
        path: str,
        *,
        fsync: bool = False,
        max_queue_bytes: int = MAX_QUEUE_BYTES,
        drain_timeout: float = DRAIN_TIMEOUT,
    ) -> None:
        self.path = path
        self.fsync = fsync
        self.max_queue_bytes = max_queue_bytes
        self.drain_timeout = drain_timeout
        self.stats = SinkStats()
        self.last_error: OSError | None = None
        self._log = get_logger()
        self._reset()
        self._fd: int | None = None
        self._identity: tuple[int, int] = (0, 0)
        self._clean = True
        """Our last write ended with a newline (the file's last byte is also checked before every batch)."""
        self._failing = False
        self._users = 0
        with contextlib.suppress(OSError):  # counted and logged by _open; the writer retries
            self._open()

    def _reset(self) -> None:
        """Fresh synchronisation state (at construction and in a forked child)."""
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._progress = threading.Condition(self._lock)
        self._queue: deque[bytes] = deque()
        self._queued_bytes = 0
        self._submitted = 0
        """Lines accepted so far (a sequence number)."""
        self._finished = 0
        """Lines written or given up, in order."""
        self._closing = False
        self._deadline = float("inf")
        self._waiting = False
        self._flushing = 0
        """Threads waiting in :meth:`flush`: the writer does not linger while anyone waits."""
        self._thread: threading.Thread | None = None
        self._start_failed_at = float("-inf")
        self._busy = False
        """A thread is writing a batch taken off the queue."""
        self._after_exit = False
        """Closed by the interpreter's exit: later lines are written by the caller, not dropped."""
        self._pid = os.getpid()

    @property
    def failing(self) -> bool:
        """Whether the last attempt to open or write the file failed (until a write succeeds)."""
        return self._failing

    # -- the hand-off (any thread, never blocks on I/O) ----------------------------------------
    def put(self, line: bytes) -> bool:
        """Queue one complete line (ending in a newline); ``False`` when it was dropped."""
        with self._lock:
            queue = self._queue
            if self._closing or (queue and self._queued_bytes + len(line) > self.max_queue_bytes):
                if not (self._closing and self._after_exit):
                    self.stats.dropped += 1
                    return False
                return self._put_late(line)
            queue.append(line)
            self._queued_bytes += len(line)
            self._submitted += 1
            self.stats.accepted += 1
            if self._waiting:  # the writer sleeps until a line comes
                self._wake.notify()
            elif len(queue) == 1 or not self._submitted & _CHECK_EVERY:
                # a new batch and nobody waiting for it (or a periodic look): is a writer there at
                # all? Not asked for every line: is_alive() was a fifth of the hand-off's cost
                thread = self._thread
                if thread is None or not thread.is_alive():
                    self._start()
        return True

    def _put_late(self, line: bytes) -> bool:
        """(Lock held.) A line after the interpreter's exit closed this writer (an episode whose
        coroutine is closed during shutdown): written here and now, as no thread can start."""
        self._queue.append(line)
        self._submitted += 1
        self.stats.accepted += 1
        self._lock.release()
        try:
            self._drain_here(time.monotonic() + self.drain_timeout)
        finally:
            self._lock.acquire()
        return True

    def _start(self) -> None:
        """Start the writer thread (lock held); a failure leaves the lines queued for a later try."""
        now = time.monotonic()
        if now - self._start_failed_at < _RESTART_EVERY:
            return
        thread = threading.Thread(target=self._run, name=f"prefixmon-sink {os.path.basename(self.path)}", daemon=True)
        try:
            thread.start()
        except RuntimeError as e:  # "can't start new thread": a pids limit, say
            self._start_failed_at = now
            self.stats.errors += 1
            self.last_error = OSError(errno.EAGAIN, f"cannot start the sink's writer thread: {e}")
            with contextlib.suppress(Exception):
                self._log.error("sink_thread_failed", path=self.path, error_type=type(e).__name__, queued=len(self._queue))
            return
        self._thread = thread

    # -- waiting for the file ------------------------------------------------------------------
    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every line accepted so far is written (or given up); ``False`` on timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            target = self._submitted
            self._flushing += 1
            self._wake.notify()  # a lingering writer writes now
            try:
                while self._finished < target:
                    thread = self._thread
                    if (thread is None or not thread.is_alive()) and not self._busy:
                        break  # nobody writes: do it here
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        return False
                    self._progress.wait(remaining)
                else:
                    return True
            finally:
                self._flushing -= 1
        self._drain_here(deadline)
        with self._lock:
            return self._finished >= target

    def close(self, timeout: float | None = None) -> bool:
        """Write what is queued (at most ``timeout`` seconds, default ``drain_timeout``), then close.

        Returns whether every accepted line was written. Idempotent.
        """
        limit = self.drain_timeout if timeout is None else timeout
        with self._lock:
            if os.getpid() != self._pid:  # a forked child that never wrote: nothing of its own
                return True
            self._closing = True
            self._deadline = time.monotonic() + limit
            thread = self._thread
            self._wake.notify_all()
        if thread is not None and thread.is_alive() and thread is not threading.current_thread():
            thread.join(max(0.0, self._deadline - time.monotonic()) + 0.5)
        if thread is None or not thread.is_alive():
            self._drain_here(self._deadline)
        with self._lock:
            left = len(self._queue)
            if left:  # the writer is stuck (a hung mount) or failing: give these up
                self._queue.clear()
                self._queued_bytes = 0
                self._finished += left
                self.stats.lost += left
                self._progress.notify_all()
            fd, self._fd = self._fd, None
            unfinished = self._finished < self._submitted  # a batch still inside a blocked write
        if left:
            with contextlib.suppress(Exception):
                self._log.error("sink_records_lost", path=self.path, lost=left, error_type=_etype(self.last_error))
        if fd is not None and (thread is None or not thread.is_alive()):
            with contextlib.suppress(OSError):
                os.close(fd)
        with _LIVE_LOCK:
            key = os.path.realpath(self.path)
            if _LIVE.get(key) is self:
                del _LIVE[key]
        return self.stats.lost == 0 and not unfinished

    # -- the writer ----------------------------------------------------------------------------
    def _run(self) -> None:
        block_process_signals()
        wrote = False
        while True:
            with self._lock:
                if wrote and not self._closing and not self._flushing:
                    # Gather what arrives in the next few milliseconds into the next batch. Lines
                    # queued meanwhile do not wake this thread: every time it takes the GIL back from
                    # a busy agent costs the agent a forced switch (about 0.1 ms on this machine kind),
                    # so a batch costs two of them (this wait and the write), not four.
                    self._wake.wait(_LINGER)
                while not self._queue and not self._closing:
                    self._waiting = True
                    self._wake.wait()
                    self._waiting = False
                if not self._queue:
                    return
                batch = list(self._queue)
                self._queue.clear()
                self._queued_bytes = 0
                self._busy = True
            try:
                self._write_batch(batch)
            finally:
                with self._lock:
                    self._busy = False
                    self._progress.notify_all()
            wrote = True

    def _drain_here(self, deadline: float | None) -> None:
        """Write the queue from the calling thread (no writer thread could run)."""
        while True:
            with self._lock:
                thread = self._thread
                if not self._queue or self._busy or (thread is not None and thread.is_alive()):
                    return
                if deadline is not None and time.monotonic() > deadline:
                    return
                batch = list(self._queue)
                self._queue.clear()
                self._queued_bytes = 0
                self._busy = True
                if deadline is not None:
                    self._deadline = min(self._deadline, deadline)
            try:
                self._write_batch(batch)
            finally:
                with self._lock:
                    self._busy = False
                    self._progress.notify_all()

    def _write_batch(self, lines: list[bytes]) -> None:
        """Write ``lines`` in order, retrying failures; give up only when closing runs out of time."""
        first = 0  # lines[:first] are in the file
        cut = 0  # bytes of lines[first] already in the file, which then ended at ``cut_at``
        cut_at: tuple[int, int, int] | None = None
        pause = _BACKOFF[0]
        while first < len(lines):
            head = b""
            prefix = b""
            try:
                fd = self._open()
                if cut and _where(fd) != cut_at:
                    cut = 0  # the file moved on (rotated, appended to): the fragment stays, the line starts afresh
                if not cut and not (self._clean and _ends_cleanly(fd)):
                    prefix = b"\n"  # a write was cut short (ours, or another process's): never append to its fragment
                head = prefix + lines[first][cut:]
                done, error = _write_all(fd, b"".join([head, *lines[first + 1 :]]))
            except OSError as e:
                done, error = 0, e
            if error is None:
                self._clean = True
                self.stats.batches += 1  # one batch is written at a time (``_busy``)
                if self.fsync:
                    try:
                        os.fsync(fd)
                    except OSError as e:  # the data is in the OS; writing it again would duplicate it
                        self._failed(e)
                self._wrote(len(lines) - first)
                if self._failing:
                    self._failing = False
                    with contextlib.suppress(Exception):
                        self._log.info("sink_write_recovered", path=self.path)
                return
            if head and done >= len(head):
                n, rest = 1, done - len(head)
                for line in lines[first + 1 :]:
                    if rest < len(line):
                        break
                    rest -= len(line)
                    n += 1
                self._wrote(n)
                first, cut = first + n, rest
            elif head and done > len(prefix):
                cut += done - len(prefix)
            if cut and self._fd is not None:
                with contextlib.suppress(OSError):
                    cut_at = _where(self._fd)
            if self._fd is not None:
                with contextlib.suppress(OSError):
                    self._clean = _ends_cleanly(self._fd)
            self._failed(error)
            if self._give_up(error):
                self._lose(len(lines) - first)
                return
            with self._lock:
                self._wake.wait(min(pause, max(0.0, self._deadline - time.monotonic())) if self._closing else pause)
            pause = min(pause * 2, _BACKOFF[1])

    def _give_up(self, error: OSError) -> bool:
        with self._lock:
            if not self._closing:
                return False
            return error.errno in _PERMANENT or time.monotonic() >= self._deadline

    def _wrote(self, n: int) -> None:
        with self._lock:
            self.stats.written += n
            self._finished += n
            self._progress.notify_all()

    def _lose(self, n: int) -> None:
        with self._lock:
            self.stats.lost += n
            self._finished += n
            self._progress.notify_all()
        with contextlib.suppress(Exception):
            self._log.error("sink_records_lost", path=self.path, lost=n, error_type=_etype(self.last_error))

    def _failed(self, error: OSError) -> None:
        with self._lock:
            self.stats.errors += 1
            self.last_error = error
            first = not self._failing
            self._failing = True
            if self._fd is not None and error.errno in (errno.EBADF, errno.ESTALE):
                self._fd = None
        if first:
            with contextlib.suppress(Exception):
                self._log.error(
                    "sink_write_failed",
                    path=self.path,
                    error_type=type(error).__name__,
                    errno=errno.errorcode.get(error.errno or 0),
                )

    def _open(self) -> int:
        """The descriptor to write to: reopened when the path now names another file (rotation)."""
        fd = self._fd
        if fd is not None:
            try:
                current = os.stat(self.path)
            except FileNotFoundError:
                current = None
            if current is None or (current.st_dev, current.st_ino) != self._identity:
                with contextlib.suppress(OSError):
                    os.close(fd)
                fd = self._fd = None
        if fd is None:
            try:
                parent = os.path.dirname(self.path)
                if parent:
                    os.makedirs(parent, exist_ok=True)
                flags = os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0)
                try:  # readable too, so that the last byte can be checked before a batch
                    fd = os.open(self.path, os.O_RDWR | flags, 0o666)
                except PermissionError:  # a write-only file: no check, plain appends
                    fd = os.open(self.path, os.O_WRONLY | flags, 0o666)
            except OSError as e:
                self._failed(e)
                raise
            st = os.fstat(fd)
            self._identity = (st.st_dev, st.st_ino)
            self._fd = fd
            self._clean = _ends_cleanly(fd)
        return fd

    def _after_fork(self) -> None:
        """In a forked child: the parent's queue is the parent's to write; start clean."""
        self._reset()
        self._fd = None


def _write_all(fd: int, data: bytes) -> tuple[int, OSError | None]:
    """Write all of ``data``; returns the bytes written and the error that stopped it, if any."""
    view = memoryview(data)
    done = 0
    while done < len(data):
        try:
            n = os.write(fd, view[done:])
        except OSError as e:
            return done, e
        if n <= 0:
            return done, OSError(errno.EIO, "write returned 0 bytes")
        done += n
    return done, None


def _where(fd: int) -> tuple[int, int, int]:
    st = os.fstat(fd)
    return st.st_dev, st.st_ino, st.st_size


def _ends_cleanly(fd: int) -> bool:
    """Whether the file is empty or ends with a newline (non-regular files always do)."""
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_size == 0:
        return True
    try:
        return os.pread(fd, 1, st.st_size - 1) == b"\n"
    except OSError:  # opened write-only
        return True


def _etype(error: BaseException | None) -> str | None:
    return None if error is None else type(error).__name__


def flush_writers(path: str, timeout: float = DRAIN_TIMEOUT) -> None:
    """Flush every open writer of this process that appends to ``path`` (before reading it).

    Gives prefixmon's readers read-your-writes: a record whose episode has ended is in the
    file when the same process reads it.
    """
    _release_abandoned()
    if not _LIVE:
        return
    key = os.path.realpath(path)
    try:
        st = os.stat(path)
        target: tuple[int, int] | None = (st.st_dev, st.st_ino)
    except OSError:  # not there yet: a writer of that path may be about to create it
        target = None
    for name, w in list(_LIVE.items()):
        if name == key or (target is not None and w._identity == target):
            w.flush(timeout)


def _after_fork_in_child() -> None:
    global _LIVE_LOCK
    _LIVE_LOCK = threading.Lock()  # another thread may have held it at the fork
    for w in list(_LIVE.values()):
        w._after_fork()
    util = sys.modules.get("multiprocessing.util")
    if util is not None and _LIVE:  # perhaps a multiprocessing worker: it ends with os._exit, no atexit
        util.register_after_fork(_EXIT_HOOK, _flush_when_the_worker_ends)


class _Hook:
    """(An object multiprocessing's after-fork registry can hold a weak reference to.)"""


_EXIT_HOOK: Final = _Hook()


def _flush_when_the_worker_ends(_: object) -> None:
    """In a multiprocessing child, after it cleared the finalizers inherited from the parent:
    flush every writer when the child ends (its ``_exit_function`` runs finalizers, then
    ``os._exit``), so that the records a worker queued last are in the file."""
    util = sys.modules.get("multiprocessing.util")
    if util is not None:
        util.Finalize(None, _flush_live, exitpriority=0)


def _flush_live() -> None:
    for w in list(_LIVE.values()):
        w.flush(w.drain_timeout)


def _release_abandoned() -> None:
    while _ABANDONED:
        try:
            writer = _ABANDONED.popleft()
        except IndexError:  # another thread took the last one
            return
        writer.release()


def _close_at_exit() -> None:
    """Drain and close every writer of this process (sinks still open, sinks collected without close)."""
    _release_abandoned()
    for w in list(_LIVE.values()):
        w._after_exit = True
        w.close()


atexit.register(_close_at_exit)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
