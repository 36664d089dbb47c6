"""Deprecated: moved to :mod:`prefixmon.rules.spec`; this path is removed in 0.3.0."""

from .deprecation import moved_module
from .rules import spec as _new
from .rules.spec import *  # noqa: F403

__all__ = _new.__all__

moved_module(__name__, _new, removal="0.3.0")
