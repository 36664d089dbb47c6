"""The per-episode and per-call state behind :class:`~prefixmon.telemetry.Telemetry`'s spans.

Apart from the observer because these are the objects its hooks pass around, each with its
own lifecycle: :class:`_EpisodeSpan` lives while an episode is traced, :class:`_Call` is the
token of one traced call (its span, started once with every attribute) and :class:`_Current`
makes an episode span current while the episode is active in a task. Slotted: one is made
per call or per episode entry.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextvars import ContextVar, Token
from dataclasses import dataclass
from time import time_ns
from typing import Any, Final

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, SpanKind, Tracer

from ._metrics import _CallKey


@dataclass(slots=True)
class _EpisodeSpan:
    """Per-episode tracing state."""

    span: Span
    """The episode span (ours or the framework's)."""
    own: bool
    parent: Context
    """A context holding the episode span: the parent of call spans made outside its trace."""
    trace_id: int
    counts: dict[_CallKey, int] | None
    """The episode's per-call counts (``None`` without metrics), but for the passes below."""
    passes: int = 0
    """Calls that ran executable and allowed, on the fast path (counted apart: cheaper)."""
    first_failure: int | None = None
    """Depth of the first failure already reported."""


class _Call:
    """The token of one traced call: its ``execute_tool`` span, started once, with every attribute.

    The span starts when the call is let through (:meth:`Telemetry.call_checked`) or, for a
    call that never runs, when it is recorded, with the start time taken when the call was
    emitted: the verdict's attributes then go in with the others in one ``start_span``
    instead of a second ``set_attributes``. While the tool runs the token is the context
    manager that makes the span current.
    """

    __slots__ = (
        "adopted", "args", "attrs", "detach", "fed", "name", "parent", "passed", "span", "start", "state", "tracer", "turn",
    )  # fmt: skip

    def __init__(
        self,
        tracer: Tracer,
        state: _EpisodeSpan,
        name: str,
        attrs: dict[str, Any],
        parent: Context | None,
        fed: int | None,
    ) -> None:
        self.tracer = tracer
        self.state = state
        self.name = name
        self.attrs = attrs
        """Attributes for the span's start (start_span validates them once)."""
        self.parent = parent
        self.fed = fed
        """The episode's FED when the call was emitted (what the span says unless it changed)."""
        self.start = time_ns()
        self.span: Span | None = None
        self.passed = False
        """The span started with the common case's final attributes: nothing to add at the end."""
        self.turn = -1
        self.detach: object = None
        self.adopted = False
        """The span is the framework's (``tool_spans="enrich"``): attributes go on it, it is never ended here."""
        self.args: Mapping[str, Any] | None = None
        """The call's validated arguments, kept with content capture: its texts are masked with them."""

    def open(self) -> Span:
        """Start the span (once)."""
        span = self.span
        if span is None:
            span = self.span = self.tracer.start_span(
                self.name, context=self.parent, kind=SpanKind.INTERNAL, attributes=self.attrs, start_time=self.start
            )
        return span

    def end(self) -> None:
        """End the span (starting it first if the call never got that far)."""
        self.open().end()

    def __enter__(self) -> Span:
        span = self.open()
        self.detach = otel_context.attach(trace.set_span_in_context(span))
        return span

    def __exit__(self, *exc: object) -> None:
        detach, self.detach = self.detach, None
        if detach is not None:
            otel_context.detach(detach)  # type: ignore[arg-type]


_HOME: Final[ContextVar[None]] = ContextVar("prefixmon_episode_span_home")
"""Set while an episode span is current: tells whether an exit happens in the context that entered."""


class _Current:
    """Makes an episode span current while its episode is active in a task.

    An episode entered in one task may be exited in another (an exit stack closed by a
    framework's callback): that task's context never held the span, so nothing is detached
    there (OpenTelemetry would log a failed detach).
    """

    __slots__ = ("home", "span", "token")

    def __init__(self, span: Span) -> None:
        self.span = span
        self.token: object = None
        self.home: Token[None] | None = None

    def __enter__(self) -> Span:
        self.home = _HOME.set(None)
        self.token = otel_context.attach(trace.set_span_in_context(self.span))
        return self.span

    def __exit__(self, *exc: object) -> None:
        token, home = self.token, self.home
        self.token = self.home = None
        if token is None or home is None:
            return
        try:
            _HOME.reset(home)
        except ValueError:  # another task's context
            return
        otel_context.detach(token)  # type: ignore[arg-type]
