"""Blocking calls in a few daemon threads, awaited from any anyio backend.

anyio's worker threads are not daemons, so the interpreter waits for them when it exits: a
record sink that never returns would keep the process alive forever even though the
monitor stopped waiting for it. :class:`DaemonThreads` runs such calls in daemon threads
instead: at most ``max_threads`` of them share one job queue (idle ones exit after a
while), so a burst of finished episodes never starts a thread per record, and a thread
that cannot be started (a pids limit) leaves the job to the threads already running.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Callable
from typing import Any, Final

import anyio
import anyio.from_thread
import anyio.lowlevel

from .signals import HANDLED, block_process_signals, restore_signals

__all__ = ["DaemonThreads"]

IDLE_TIMEOUT: Final = 10.0
"""Seconds an idle thread waits for work before it exits."""
MAX_THREADS: Final = 8
"""Threads running blocking calls at once, per pool."""


Outcome = tuple[bool, Any]
"""``(True, result)`` or ``(False, exception)``."""


class _Job:
    __slots__ = ("abandoned", "done", "func", "late", "outcome", "started", "token")

    def __init__(self, func: Callable[[], Any], token: Any, done: anyio.Event) -> None:
        self.func = func
        self.token = token
        self.done = done
        self.outcome: Outcome | None = None
        self.abandoned = False
        """The caller stopped waiting: a job not started yet is skipped."""
        self.started = False
        self.late: Callable[[Outcome], object] | None = None
        """Told the outcome of a job that finishes after its caller stopped waiting."""


class DaemonThreads:
    """A bounded pool of daemon threads for blocking calls."""

    def __init__(self, name: str = "prefixmon", *, idle_timeout: float = IDLE_TIMEOUT, max_threads: int = MAX_THREADS) -> None:
        self.name = name
        self.idle_timeout = idle_timeout
        self.max_threads = max_threads
        self._jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads = 0
        self._idle = 0

    async def run(self, func: Callable[[], Any], *, late: Callable[[Outcome | None], object] | None = None) -> Any:
        """Run ``func()`` in a daemon thread and return its result (or raise its exception).

        Cancelling the wait leaves a started call running in its thread, which cannot keep
        the process alive; a call that had not started yet is skipped. ``late`` then learns
        what became of the call, exactly once: ``None`` (skipped) from the cancelled caller,
        or the outcome, from the call's thread when it finishes after the caller left.

        Raises:
            RuntimeError: no thread runs and none can be started.
        """
        job = _Job(func, anyio.lowlevel.current_token(), anyio.Event())
        with self._lock:  # queued under the lock, so an idle thread that times out sees it
            start = self._idle == 0 and self._threads < self.max_threads
            if start:
                self._threads += 1
            self._jobs.put(job)
        if start:
            try:
                threading.Thread(target=self._serve, name=f"{self.name}-worker", daemon=True).start()
            except RuntimeError:  # "can't start new thread": the running threads will take the job
                with self._lock:
                    self._threads -= 1
                    alone = self._threads == 0
                if alone:
                    job.abandoned = True
                    raise
        try:
            await job.done.wait()
        except BaseException:
            with self._lock:
                job.abandoned = True
                outcome = job.outcome
                running = job.started and outcome is None
                if running:
                    job.late = late
            if late is not None and not running:
                late(outcome)
            raise
        assert job.outcome is not None
        ok, value = job.outcome
        if ok:
            return value
        raise value

    def _serve(self) -> None:
        agents = block_process_signals(HANDLED)  # while idle; the calls run with the agent's mask
        with self._lock:
            self._idle += 1
        while True:
            try:
                job = self._jobs.get(timeout=self.idle_timeout)
            except queue.Empty:
                with self._lock:
                    if self._jobs.empty():
                        self._idle -= 1
                        self._threads -= 1
                        return
                continue
            with self._lock:
                if job.abandoned:
                    continue
                self._idle -= 1
                job.started = True
            outcome: Outcome
            restore_signals(agents)
            try:
                outcome = (True, job.func())
            except BaseException as e:
                outcome = (False, e)
            finally:
                block_process_signals(HANDLED)
            with self._lock:  # idle again before the caller wakes, so its next call reuses this thread
                self._idle += 1
                job.outcome = outcome
                late = job.late
            if late is not None:  # the caller left while the job ran
                with contextlib.suppress(Exception):
                    late(outcome)
            elif not job.abandoned:
                with contextlib.suppress(Exception):  # the event loop is gone: nobody waits any more
                    anyio.from_thread.run_sync(job.done.set, token=job.token)
