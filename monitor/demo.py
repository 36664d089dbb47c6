"""Deprecated: the demo lives in :mod:`prefixmon._cli.demo` (run it as ``prefixmon demo``).

Importing this module warns; it will be removed in 0.3.0.
"""

from __future__ import annotations

import warnings

from ._cli.demo import main as main

warnings.warn(
    "prefixmon.demo is deprecated and will be removed in 0.3.0; run `prefixmon demo`",
    DeprecationWarning,
    stacklevel=2,
)

__all__ = ("main",)
