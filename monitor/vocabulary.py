"""The words runtime and records share: causes, decisions and outcomes.

These are string enums so that they compare equal to their values, serialise as plain
strings, and read naturally in records, spans and logs.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = (
    "Cause",
    "Decision",
    "Outcome",
)


class Cause(StrEnum):
    """Why a call is not executable, in tie-break order (DESIGN §2).

    When several checks fail, the primary cause is the first member in this order.
    """

    SCHEMA = "schema"
    DEPENDENCY = "dependency"
    PRECONDITION = "precondition"
    STATE_CONSISTENCY = "state_consistency"
    INFORMATION = "information"
    PROVENANCE = "provenance"
    """A value came only from sources its argument may not take values from (:mod:`prefixmon.rules.provenance`):
    a policy on who said a value, not a prediction that the environment refuses the call, so last."""


class Outcome(StrEnum):
    """Task outcome, three-state: success (Y = 1), partial, failure."""

    SUCCESS = "success"
    PARTIAL = "partial"
    FAILURE = "failure"


class Decision(StrEnum):
    """What the monitor did with a call."""

    ALLOW = "allow"
    """Executable; it ran."""
    OBSERVE = "observe"
    """Not executable; it ran anyway (observe policy or fail-open)."""
    BLOCK = "block"
    """Not run; the agent got a model-readable error."""
    REPLAN = "replan"
    """Not run; a replan hook supplied guidance or a replacement call."""
    APPROVE = "approve"
    """Not executable; a human approved it and it ran."""
    EDIT = "edit"
    """Not executable; a human edited the arguments and the edited call ran."""
    DENY = "deny"
    """Not run; a human denied it or the escalation timed out."""
    FAIL_CLOSED = "fail_closed"
    """Not run; the monitor itself failed and is configured fail-closed."""
