"""Deprecated: moved to :mod:`prefixmon.rules.observed`; this path is removed in 0.3.0."""

from .deprecation import moved_module
from .rules import observed as _new
from .rules.observed import *  # noqa: F403

__all__ = _new.__all__

moved_module(__name__, _new, removal="0.3.0")
