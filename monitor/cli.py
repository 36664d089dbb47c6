"""Deprecated: the command line lives in :mod:`prefixmon._cli` (run it as ``prefixmon``).

Importing this module warns; it will be removed in 0.3.0. ``prefixmon._cli.main`` is the
console script's entry point.
"""

from __future__ import annotations

import warnings

from ._cli import build_parser as build_parser
from ._cli import main as main

warnings.warn(
    "prefixmon.cli is deprecated and will be removed in 0.3.0; run the `prefixmon` command, "
    "or call prefixmon._cli.main(argv) from tests",
    DeprecationWarning,
    stacklevel=2,
)

__all__ = ("build_parser", "main")
