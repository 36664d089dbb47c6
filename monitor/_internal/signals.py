"""Signal masks of prefixmon's own threads: signals sent to the process are the agent's.

The kernel hands a signal sent to the process to any thread that does not block it. Taken
by one of ours, a Python handler waits until the main thread next runs bytecode, which an
event loop with no wakeup fd (asyncio after ``signal.signal``) does only when its sleep ends:
the agent's SIGTERM would go unanswered.
"""

from __future__ import annotations

import signal
from typing import Final

__all__ = ["HANDLED", "block_process_signals", "restore_signals"]


def _named(*names: str) -> frozenset[int]:
    return frozenset(getattr(signal, name) for name in names if hasattr(signal, name))


_SYNCHRONOUS: Final = _named("SIGSEGV", "SIGBUS", "SIGFPE", "SIGILL", "SIGABRT", "SIGTRAP", "SIGSYS")
"""Signals a thread raises itself (a fault, ``abort``): kept, so faulthandler still reports them."""
_SENT: Final = frozenset(signal.valid_signals()) - _SYNCHRONOUS
"""Every signal but those: what a thread that runs none of the agent's code blocks."""
HANDLED: Final = _named("SIGHUP", "SIGINT", "SIGQUIT", "SIGTERM", "SIGUSR1", "SIGUSR2")
"""The signals programs handle to stop, reload or report. A thread that also runs the agent's
code blocks only these between calls: changing a mask of every signal costs about 50 µs (the
standard library turns each signal of the old mask into an enum member)."""

Mask = set[int] | None
"""A thread's signal mask; ``None`` where threads have none (Windows)."""


def block_process_signals(signals: frozenset[int] = _SENT) -> Mask:
    """Block ``signals`` in the calling thread (by default all but those it raises itself); return its old mask."""
    if not hasattr(signal, "pthread_sigmask"):
        return None
    old: set[int] = signal.pthread_sigmask(signal.SIG_BLOCK, signals)
    return old


def restore_signals(mask: Mask) -> None:
    """Give the calling thread ``mask`` again (what :func:`block_process_signals` returned)."""
    if mask is not None:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
