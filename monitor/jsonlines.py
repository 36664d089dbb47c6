"""Deprecated: moved to :mod:`prefixmon.records.jsonlines`; this path is removed in 0.3.0."""

from .deprecation import moved_module
from .records import jsonlines as _new
from .records.jsonlines import *  # noqa: F403

__all__ = _new.__all__

moved_module(__name__, _new, removal="0.3.0")
