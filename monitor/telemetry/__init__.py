"""Telemetry: what the monitor reports while it runs.

- :mod:`prefixmon.telemetry.spans`: the ``Telemetry`` observer, OpenTelemetry spans, events and metrics
  (re-exported here, so ``from prefixmon.telemetry import Telemetry`` keeps working); its private parts:
  ``_span_state`` (the per-episode and per-call span tokens), ``_span_attributes`` (what the spans say)
  and ``_metrics`` (the instruments and what is recorded on them).
- :mod:`prefixmon.telemetry.logging`: ``LiveLog``, one structured log line per call.
- :mod:`prefixmon.telemetry.otel_setup`: wiring an OTLP or Prometheus backend in one call.

Attribute names live in :mod:`prefixmon.semconv` (base layer: the OTLP record reader needs them too).
"""

from ..deprecation import forward_names
from . import spans
from .spans import *  # noqa: F403

__all__ = spans.__all__

__getattr__ = forward_names(__name__, spans)  # ``prefixmon.telemetry`` was one module before 0.2.0
