"""prefixmon's own logger: structlog when the application configured it, else the stdlib logger ``prefixmon``.

Every layer logs through :func:`get_logger`, so prefixmon never writes to bare stdout
(structlog's unconfigured default). The choice is made at each event, so configuring
structlog after the monitor was built still takes effect.
"""

from __future__ import annotations

import contextlib
import logging as std_logging
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import Any

import structlog

__all__ = ("STDLIB_LOGGER", "get_logger", "listening")

Listener = Callable[[str, dict[str, Any]], bool]
_LISTENERS: ContextVar[tuple[Listener, ...]] = ContextVar("prefixmon_log_listeners", default=())
"""Who hears events besides the loggers, in this context (:func:`listening`)."""


@contextlib.contextmanager
def listening(listener: Listener) -> Iterator[None]:
    """While the block runs (in this context), ``listener(event, fields)`` hears every event logged,
    whichever route the event takes (structlog or stdlib, configured or not); a listener that
    returns ``True`` has handled it, and it is not logged. The CLI prints a spec's warnings so."""
    token = _LISTENERS.set((*_LISTENERS.get(), listener))
    try:
        yield
    finally:
        _LISTENERS.reset(token)


STDLIB_LOGGER = "prefixmon"
"""The stdlib logger prefixmon's events go to when structlog is not configured."""


class _Logger:
    """structlog's ``prefixmon`` logger when structlog is configured, else stdlib ``logging``.

    Events reach the stdlib logger as ``"event key=value ..."`` messages with the fields also
    in ``extra={"prefixmon": {...}}`` for structured handlers.
    """

    __slots__ = ("_std",)

    def __init__(self) -> None:
        self._std = std_logging.getLogger(STDLIB_LOGGER)

    def _emit(self, level: int, event: str, fields: dict[str, Any]) -> None:
        for listener in _LISTENERS.get():
            if listener(event, fields):
                return
        if structlog.is_configured():
            getattr(structlog.get_logger(STDLIB_LOGGER), std_logging.getLevelName(level).lower())(event, **fields)
            return
        std = self._std
        if std.isEnabledFor(level):
            text = " ".join([event, *(f"{k}={v!r}" for k, v in fields.items())])
            std.log(level, text, extra={"prefixmon": {"event": event, **fields}})

    def debug(self, event: str, **fields: Any) -> None:
        """Log at debug level."""
        self._emit(std_logging.DEBUG, event, fields)

    def info(self, event: str, **fields: Any) -> None:
        """Log at info level."""
        self._emit(std_logging.INFO, event, fields)

    def warning(self, event: str, **fields: Any) -> None:
        """Log at warning level."""
        self._emit(std_logging.WARNING, event, fields)

    def error(self, event: str, **fields: Any) -> None:
        """Log at error level."""
        self._emit(std_logging.ERROR, event, fields)

    def exception(self, event: str, **fields: Any) -> None:
        """Log at error level with the current exception."""
        if structlog.is_configured():
            structlog.get_logger(STDLIB_LOGGER).exception(event, **fields)
        elif self._std.isEnabledFor(std_logging.ERROR):
            self._std.error(" ".join([event, *(f"{k}={v!r}" for k, v in fields.items())]), exc_info=True)


def get_logger() -> Any:
    """prefixmon's logger: structlog when the application configured it, else stdlib ``prefixmon``."""
    return _Logger()
