"""The installed distribution's version, read once from its metadata (never written twice)."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

__all__ = ("VERSION",)

try:
    VERSION: str = version("prefixmon")
except PackageNotFoundError:  # pragma: no cover - a source tree that was never installed
    VERSION = "0.0.0+unknown"
