"""Blocking calls in daemon threads, awaited from any anyio backend.

anyio's worker threads are not daemons, so the interpreter waits for them when it exits: a
record sink that never returns would keep the process alive forever even though the
monitor stopped waiting for it. :class:`DaemonThreads` runs such calls in daemon threads
instead (reused while busy ones are left alone; idle ones exit after a while).
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

__all__ = ["DaemonThreads"]

_Job = tuple[Callable[[], Any], list[tuple[bool, Any]], Any, anyio.Event]
IDLE_TIMEOUT: Final = 10.0
"""Seconds an idle thread waits for work before it exits."""


class DaemonThreads:
    """A pool of daemon threads for blocking calls (one per call in flight)."""

    def __init__(self, name: str = "prefixmon", *, idle_timeout: float = IDLE_TIMEOUT) -> None:
        self.name = name
        self.idle_timeout = idle_timeout
        self._idle: list[queue.SimpleQueue[_Job]] = []
        self._lock = threading.Lock()

    async def run(self, func: Callable[[], Any]) -> Any:
        """Run ``func()`` in a daemon thread and return its result (or raise its exception).

        Cancelling the wait leaves the call running in its thread, which cannot keep the
        process alive.
        """
        done = anyio.Event()
        outcome: list[tuple[bool, Any]] = []
        job: _Job = (func, outcome, anyio.lowlevel.current_token(), done)
        with self._lock:
            inbox = self._idle.pop() if self._idle else None
        if inbox is None:
            inbox = queue.SimpleQueue()
            threading.Thread(target=self._serve, args=(inbox,), name=f"{self.name}-worker", daemon=True).start()
        inbox.put(job)
        await done.wait()
        ok, value = outcome[0]
        if ok:
            return value
        raise value

    def _serve(self, inbox: queue.SimpleQueue[_Job]) -> None:
        while True:
            try:
                func, outcome, token, done = inbox.get(timeout=self.idle_timeout)
            except queue.Empty:
                with self._lock:
                    if inbox in self._idle:  # else a caller took it and is handing over a job
                        self._idle.remove(inbox)
                        return
                continue
            try:
                outcome.append((True, func()))
            except BaseException as e:
                outcome.append((False, e))
            with self._lock:  # idle again before the caller wakes, so its next call reuses this thread
                self._idle.append(inbox)
            with contextlib.suppress(Exception):  # the event loop is gone: nobody waits any more
                anyio.from_thread.run_sync(done.set, token=token)
