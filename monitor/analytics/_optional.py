"""The install hint for the ``analytics`` extra (numpy, rich, matplotlib)."""

from __future__ import annotations

from typing import Final

INSTALL_HINT: Final = 'pip install "prefixmon[analytics]"'
"""Message of the ImportError raised when numpy, rich or matplotlib is missing."""
