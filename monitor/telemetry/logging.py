"""Live structlog events for monitored episodes.

:class:`LiveLog` is an :class:`~prefixmon.Observer` that logs what an operator wants to see
while agents run, and stays quiet on the per-call success path:

=====================  =========  ==========================================================
event                  level      when
=====================  =========  ==========================================================
``first_failure``      warning    an episode's first non-executable call (its FED is known)
``call_blocked``       warning    a call was not run (block, fail_closed)
``call_replanned``     info       a replan hook supplied guidance or a replacement
``call_escalated``     info       a human hook approved, edited or denied a call
``call``               debug      every other call (only with ``log_calls=True``)
``episode_finished``   info       FED, horizon, executable, outcome, status
=====================  =========  ==========================================================

Monitor-internal errors are logged by the monitor itself (``monitor_internal_error``, error
level) through the same ``prefixmon`` logger, so this observer does not repeat them.

Reasons and error messages may quote argument values; they are logged only with
``include_reasons=True``. :func:`configure_json_logging` sets up fast JSON Lines output
for applications and scripts (a library never configures logging).

Where the events go: when the application has configured structlog
(``structlog.is_configured()``), through structlog as configured; otherwise through the
stdlib logger ``prefixmon`` (:func:`get_logger`), whose handlers the application owns —
never to bare stdout (structlog's unconfigured default). The choice is made at each event,
so configuring structlog after the monitor was built still takes effect.
"""

from __future__ import annotations

import json
import logging as std_logging
import sys
from typing import TYPE_CHECKING, Any, Final, Literal, TextIO

import structlog

from .. import semconv as sc
from .._internal.log import STDLIB_LOGGER, get_logger
from ..observer import Observer
from ..records.redaction import Redactor, content_text, redactor
from ..vocabulary import Decision

if TYPE_CHECKING:
    from ..episode import Episode
    from ..records.model import ActionRecord, EpisodeRecord
    from ..verdict import Verdict

__all__ = ["STDLIB_LOGGER", "LiveLog", "configure_json_logging", "get_logger"]

_BLOCKED = frozenset({Decision.BLOCK, Decision.FAIL_CLOSED})
_ESCALATED = frozenset({Decision.APPROVE, Decision.EDIT, Decision.DENY})


MAX_REASON_CHARS: Final = 2000
""":class:`LiveLog` cuts the reasons and error texts it logs at this many characters."""


class LiveLog(Observer):
    """Logs first failures, interventions and episode ends through structlog.

    Args:
        logger: a structlog logger; default :func:`get_logger` (structlog when configured,
            else the stdlib logger ``prefixmon``).
        log_calls: also log every other call at debug level.
        include_reasons: add the model-readable reason and the tool's error text (they may
            quote argument values), redacted and cut at ``max_reason_chars``.
        redact: how those texts are redacted: ``"secrets"`` (default:
            :func:`~prefixmon.redaction.redact_secrets`), a hook such as
            :func:`~prefixmon.redaction.redact_keys` (its masked argument values are masked
            wherever the texts quote them), or ``None``.
        max_reason_chars: the texts are cut at this many characters (with a marker).
    """

    def __init__(
        self,
        logger: Any = None,
        *,
        log_calls: bool = False,
        include_reasons: bool = False,
        redact: Redactor | Literal["secrets"] | None = "secrets",
        max_reason_chars: int = MAX_REASON_CHARS,
    ) -> None:
        if max_reason_chars < 1:
            raise ValueError(f"max_reason_chars must be >= 1, got {max_reason_chars}")
        self._log = logger if logger is not None else get_logger()
        self.log_calls = log_calls
        self.include_reasons = include_reasons
        self.redact = redactor(redact)
        self.max_reason_chars = max_reason_chars

    def call_finished(self, episode: Episode, action: ActionRecord, verdict: Verdict, token: Any) -> None:
        """Log the call if it is worth a line."""
        decision = action.decision
        if action.executable and decision is Decision.ALLOW and action.error is None and not self.log_calls:
            return  # the per-call success path stays quiet
        fields: dict[str, Any] = {
            "episode_id": episode.id,
            "task_id": episode.task_id,
            "depth": action.depth,
            "tool": action.tool and sc.tool_label(action.tool, episode.monitor.toolset),
            "decision": decision.value,
        }
        if action.cause is not None:
            fields["cause"] = action.cause.value
            fields["code"] = verdict.code
        if action.replacement is not None:
            fields["replacement"] = action.replacement
        if self.include_reasons:
            for key, text in (("reason", action.reason), ("error", action.error)):
                if text is not None:
                    shown = content_text(key, text, self.redact, self.max_reason_chars, arguments=verdict.args)  # type: ignore[arg-type]
                    if shown is not None:
                        fields[key] = shown
        log = self._log
        if not action.executable and episode.fed == action.depth:
            log.warning("first_failure", **fields)
        if decision in _BLOCKED:
            log.warning("call_blocked", **fields)
        elif decision is Decision.REPLAN:
            log.info("call_replanned", **fields)
        elif decision in _ESCALATED:
            log.info("call_escalated", **fields)
        elif self.log_calls:
            log.debug("call", executable=action.executable, **fields)

    def episode_finished(self, episode: Episode, record: EpisodeRecord) -> None:
        """Log the episode's FED, horizon and outcome."""
        fields: dict[str, Any] = {
            "episode_id": record.episode_id,
            "task_id": record.task_id,
            "labels": record.labels,
            "fed": record.fed,
            "horizon": record.horizon,
            "executable": record.executable,
            "outcome": None if record.outcome is None else record.outcome.value,
            "status": record.status,
        }
        if record.first_failure is not None:
            fields["first_failure_cause"] = record.first_failure.cause.value
            tool = record.first_failure.tool
            fields["first_failure_tool"] = tool and sc.tool_label(tool, episode.monitor.toolset)
        if record.error is not None:
            fields["error_type"] = record.error
        self._log.info("episode_finished", **fields)


def configure_json_logging(*, level: int | str = "info", stream: TextIO | None = None) -> None:
    """Configure structlog for fast JSON Lines output (for applications, scripts, the CLI).

    Filtering happens in the bound logger class (below-level calls are no-ops), loggers are
    cached on first use, and each event is one JSON object per line with ``timestamp``
    (ISO 8601, UTC) and ``level``.

    Args:
        level: the minimum level, a name (``"warning"``) or a :mod:`logging` number.
        stream: where lines go; default ``sys.stderr``.
    """
    if isinstance(level, str):
        number = std_logging.getLevelName(level.upper())
        if not isinstance(number, int):
            raise ValueError(f"unknown log level {level!r}")
        level = number
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.dict_tracebacks,
            structlog.processors.JSONRenderer(serializer=_dumps),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.WriteLoggerFactory(file=stream if stream is not None else sys.stderr),
        cache_logger_on_first_use=True,
    )


def _dumps(obj: Any, **kw: Any) -> str:
    return json.dumps(obj, default=str, ensure_ascii=False, separators=(",", ":"))
