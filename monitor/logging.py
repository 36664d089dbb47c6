"""Deprecated: moved to :mod:`prefixmon.telemetry.logging`; this path is removed in 0.3.0."""

from .deprecation import moved_module
from .telemetry import logging as _new
from .telemetry.logging import *  # noqa: F403

__all__ = _new.__all__

moved_module(__name__, _new, removal="0.3.0")
