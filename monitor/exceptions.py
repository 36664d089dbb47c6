"""Exceptions raised by prefixmon.

Hierarchy::

    Exception
    ├── PrefixmonError                 root of every error prefixmon raises on its own
    │   ├── SpecError (ValueError)     a tool, toolset or monitor was declared wrongly
    │   ├── RecordError (ValueError)   an episode record file has a bad line
    │   ├── PlanError (ValueError)     a plan cannot be parsed
    │   └── ArgumentError (ValueError) arguments do not fit a tool's schema (raised by a
    │                                  validator, turned into a schema verdict by the predicate)
    └── ToolBlocked                    a call was not run; a control-flow signal that must
                                       cross framework boundaries, so not a PrefixmonError
"""

from __future__ import annotations

from collections.abc import Sequence

from .verdict import ArgumentProblem, Verdict

__all__ = ("ArgumentError", "PlanError", "PrefixmonError", "RecordError", "SpecError", "ToolBlocked")

MAX_LISTED_PROBLEMS = 3
"""Argument problems spelt out in an :class:`ArgumentError` message; the rest are counted."""


class PrefixmonError(Exception):
    """Root of the errors prefixmon raises for misuse or bad input."""


class SpecError(PrefixmonError, ValueError):
    """A tool, toolset, policy or monitor was declared wrongly."""


class RecordError(PrefixmonError, ValueError):
    """An episode record could not be read or written.

    Attributes:
        path: the file, when known.
        line: the 1-based line number, when known.
    """

    def __init__(self, message: str, *, path: str | None = None, line: int | None = None) -> None:
        self.path = path
        self.line = line
        where = f"{path}:{line}: " if path is not None and line is not None else ""
        super().__init__(f"{where}{message}")


class PlanError(PrefixmonError, ValueError):
    """A plan could not be parsed; the message names the step and field."""


class ArgumentError(PrefixmonError, ValueError):
    """Arguments do not fit a tool's schema.

    Attributes:
        problems: every problem the validator reported (at least one), located.
        more: problems the validator found beyond ``problems`` (it reports a bounded number).
    """

    def __init__(self, problems: Sequence[ArgumentProblem], *, more: int = 0) -> None:
        self.problems = tuple(problems)
        self.more = more
        shown = "; ".join(str(p) for p in self.problems[:MAX_LISTED_PROBLEMS])
        hidden = len(self.problems) - MAX_LISTED_PROBLEMS + more
        super().__init__(shown + (f" (and {hidden} more)" if hidden > 0 else ""))


class ToolBlocked(Exception):
    """The monitor did not run a call.

    ``str()`` is a message written for the model: what was wrong and how to repair it.

    Attributes:
        verdict: the verdict of the call that was not run.
        decision: the policy decision (``"block"``, ``"deny"``, ``"replan"``, ``"fail_closed"``;
            ``"observe"`` when an undeclared tool has nothing to run it under ``observe``).
        guidance: extra text from a replan or escalation hook, if any.
    """

    def __init__(self, verdict: Verdict, *, decision: str = "block", guidance: str | None = None) -> None:
        self.verdict = verdict
        self.decision = decision
        self.guidance = guidance
        reason = verdict.reason or (
            f"{verdict.tool} could not be checked from what was observed ({', '.join(verdict.undetermined)})"
            if verdict.undetermined
            else "the monitor did not let it run"
        )
        message = f"Call to {verdict.tool!r} was not run: {reason}"
        if guidance:
            message = f"{message}\nGuidance: {guidance}"
        super().__init__(message)
