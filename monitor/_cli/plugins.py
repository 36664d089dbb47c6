"""Loading verbs, benchmarks and replay sources from entry points (see :mod:`prefixmon.commands`)."""

from __future__ import annotations

import argparse
import sys
from importlib.metadata import EntryPoint, entry_points
from typing import Any


def names(group: str) -> list[str]:
    """The entry-point names of ``group``, sorted, without loading any of them."""
    return sorted({ep.name for ep in entry_points(group=group)})


def load(group: str, name: str) -> Any:
    """The object the entry point ``name`` of ``group`` names, or an :class:`Unavailable` saying why not."""
    found: list[EntryPoint] = [ep for ep in entry_points(group=group) if ep.name == name]
    if not found:
        return Unavailable(group, name, LookupError(f"nothing is registered as {name!r} in the entry-point group {group!r}"))
    try:
        return found[0].load()
    except Exception as e:  # a missing optional dependency, usually: the verb says so when run
        return Unavailable(group, name, e)


class Unavailable:
    """Stands in for an entry point that failed to load; running it explains the failure."""

    def __init__(self, group: str, name: str, error: BaseException) -> None:
        self.group = group
        self.name = name
        self.error = error
        self.help = f"(unavailable: {type(error).__name__})"

    def configure(self, parser: argparse.ArgumentParser) -> None:
        """Accept any arguments: the verb only reports why it cannot run."""
        parser.add_argument("rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)

    def run(self, args: argparse.Namespace) -> int:
        """Print why the entry point could not be loaded; exit 1."""
        print(f"prefixmon: {self.name} is not available: {self.message}", file=sys.stderr)
        return 1

    def replay(self, request: Any) -> int:
        """As :meth:`run`, for a replay source."""
        return self.run(argparse.Namespace())

    @property
    def message(self) -> str:
        """The load error, with the install hint when the error carries one."""
        text = str(self.error)
        return f"install it with: {text}" if text.startswith("pip install") else f"{type(self.error).__name__}: {text}"
