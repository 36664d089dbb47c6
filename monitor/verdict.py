"""What the predicate says about a call: verdicts, failures and argument problems.

Plain data, shared by every layer (the predicate builds it, policies and observers read it,
exceptions carry it), so this module imports nothing of prefixmon but its vocabulary.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal, TypeAlias

from .vocabulary import Cause

__all__ = (
    "MAX_VALUE_REPR",
    "ArgumentProblem",
    "Failure",
    "Fault",
    "Location",
    "ProblemKind",
    "ToolCall",
    "Undetermined",
    "Verdict",
    "quote",
)

MAX_VALUE_REPR: Final = 60
"""Values quoted in reasons are cut to this many characters."""


def quote(value: Any) -> str:
    """A short repr of a value for a reason."""
    text = repr(value)
    return text if len(text) <= MAX_VALUE_REPR else text[: MAX_VALUE_REPR - 3] + "..."


Location: TypeAlias = tuple[str | int, ...]
"""A path into the arguments: keys and list indices (``("order", "items", 0)``); ``()`` is the whole."""

ProblemKind: TypeAlias = Literal["missing", "unknown", "value", "root"]
"""``missing`` a required argument is absent; ``unknown`` an argument the schema does not
allow; ``value`` the value at the location does not fit; ``root`` the arguments as a whole."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ArgumentProblem:
    """One way the arguments do not fit the tool's schema, where, and what the validator said."""

    kind: ProblemKind
    location: Location
    message: str
    """The validator's message about the value (for ``value`` and ``root`` problems)."""

    @property
    def path(self) -> str:
        """The location written as ``order.items[0]``."""
        out = ""
        for part in self.location:
            out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else part)
        return out

    def __str__(self) -> str:
        path = self.path
        if len(path) > MAX_VALUE_REPR:  # a model-made name is quoted as short as a value
            path = path[: MAX_VALUE_REPR - 3] + "..."
        if self.kind == "missing":
            return f"missing required argument '{path}'"
        if self.kind == "unknown":
            return f"unknown argument '{path}'"
        if self.kind == "root" or not self.location:
            return self.message
        return f"argument '{path}': {self.message}"


class Undetermined:
    """Returned by a precondition when its answer depends on what was never observed.

    It never blocks and never counts as a failure: at runtime the call proceeds (or is
    escalated, by policy), and plan verification reports the step as undetermined.
    """

    __slots__ = ("why",)

    def __init__(self, why: str = "") -> None:
        self.why = why

    def __repr__(self) -> str:
        return f"Undetermined({self.why!r})"


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCall:
    """A tool call as the agent emitted it (or as a hook replaced it)."""

    name: str
    args: Mapping[str, Any] | str | bytes | None = None
    """A dict, raw JSON text, or ``None`` for no arguments."""
    call_id: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Failure:
    """One failed check."""

    cause: Cause
    reason: str
    """Model-readable; may quote argument values (never sent to telemetry by default)."""
    code: str
    """Low-cardinality machine code, e.g. ``unknown_tool``, ``stale_reference``,
    ``precondition:cellular_on``; safe for telemetry."""
    problems: tuple[ArgumentProblem, ...] = ()
    """For ``invalid_arguments``: every problem the validator reported, located."""
    blocks: bool = True
    """Whether a blocking policy blocks the call by default. Information findings do not
    (``False``) unless the argument opts in (``Grounded(block=True)``): they are a policy
    finding, reported while the call runs, not a prediction that the environment refuses it."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Fault:
    """An exception raised inside the monitor's own checking (a buggy precondition)."""

    where: str
    error: BaseException


@dataclass(frozen=True, slots=True, kw_only=True)
class Verdict:
    """The predicate's answer for one call."""

    tool: str
    call_id: str | None = None
    depth: int
    executable: bool
    failures: tuple[Failure, ...] = ()
    """Every failed check, in tie-break order."""
    args: Mapping[str, Any] | None = None
    """Validated arguments (``None`` when they did not parse or fit the schema)."""
    faults: tuple[Fault, ...] = ()
    """Monitor-internal errors met while checking."""
    undetermined: tuple[str, ...] = ()
    """Preconditions that could not be decided from what was observed."""
    derived: tuple[str, ...] = ()
    """Grounded values that were not seen but computed from two numbers that were, each as
    ``"amount: 150 = 3 * 50"`` (arguments declared ``Grounded(match="derived")``)."""

    @property
    def cause(self) -> Cause | None:
        """The primary cause, or ``None`` when executable."""
        return self.failures[0].cause if self.failures else None

    @property
    def reason(self) -> str:
        """The primary failure's model-readable reason (empty when executable)."""
        return self.failures[0].reason if self.failures else ""

    @property
    def code(self) -> str | None:
        """The primary failure's low-cardinality code."""
        return self.failures[0].code if self.failures else None
