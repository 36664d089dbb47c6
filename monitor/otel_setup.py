"""Deprecated: moved to :mod:`prefixmon.telemetry.otel_setup`; this path is removed in 0.3.0."""

from .deprecation import moved_module
from .telemetry import otel_setup as _new
from .telemetry.otel_setup import *  # noqa: F403

__all__ = _new.__all__

moved_module(__name__, _new, removal="0.3.0")
