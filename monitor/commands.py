"""Extending the ``prefixmon`` command line through entry points.

The core command line knows only its own verbs (``demo``, ``report``, ``replay``, ``learn``,
``bench`` and the others); benchmarks, transcript formats and third-party verbs plug in through
four entry-point groups, so the core never imports an adapter:

================================  ==================================================
group                             what each entry point names
================================  ==================================================
``prefixmon.commands``            a top-level verb, ``prefixmon NAME ...`` (a :class:`Command`)
``prefixmon.bench``               a benchmark, ``prefixmon bench NAME ...`` (a :class:`Command`)
``prefixmon.replay``              a transcript source, ``prefixmon replay --domain NAME``
                                  (a :class:`ReplaySource`); ``--bfcl`` is ``--domain bfcl``
                                  and ``--tools`` is ``--domain transcripts``
``prefixmon.transcripts``         a transcript format ``prefixmon learn`` reads,
                                  ``--format NAME`` (a
                                  :class:`prefixmon.learn.TranscriptReader`)
================================  ==================================================

A package registers its own in ``pyproject.toml``::

    [project.entry-points."prefixmon.bench"]
    mybench = "mypackage.cli:BENCH"

The object an entry point names is loaded when the parser is built, so keep its module
light: import heavy dependencies inside ``run`` / ``replay``. An entry point that fails to
load (a missing optional dependency) still appears as a verb that explains the failure.
"""

from __future__ import annotations

import argparse
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Protocol, TypeVar, runtime_checkable

import anyio

__all__ = (
    "BENCH_GROUP",
    "COMMANDS_GROUP",
    "REPLAY_GROUP",
    "TRANSCRIPTS_GROUP",
    "Command",
    "ReplayRequest",
    "ReplaySource",
    "run_async",
)

T = TypeVar("T")

COMMANDS_GROUP: Final = "prefixmon.commands"
"""Entry-point group of top-level verbs."""
BENCH_GROUP: Final = "prefixmon.bench"
"""Entry-point group of ``prefixmon bench`` benchmarks."""
REPLAY_GROUP: Final = "prefixmon.replay"
"""Entry-point group of ``prefixmon replay`` transcript sources."""
TRANSCRIPTS_GROUP: Final = "prefixmon.transcripts"
"""Entry-point group of transcript formats ``prefixmon learn`` reads (:class:`prefixmon.learn.TranscriptReader`)."""


@runtime_checkable
class Command(Protocol):
    """A verb: declares its arguments on its own sub-parser and runs with them."""

    help: str
    """One line for ``--help`` listings."""

    def configure(self, parser: argparse.ArgumentParser) -> None:
        """Add the verb's arguments to ``parser``."""

    def run(self, args: argparse.Namespace) -> int:
        """Do the work; returns the process exit code (0 success, 1 bad input, 2 usage)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplayRequest:
    """What ``prefixmon replay`` hands a transcript source: every option, already parsed."""

    source: str
    """The source's name (the ``--domain`` value)."""
    files: tuple[Path, ...]
    """Input files, in order."""
    out: Path
    """Where to write the episode records (JSON Lines)."""
    labels: Mapping[str, str] = field(default_factory=dict)
    """Labels set on every record (``--label KEY=VALUE``), overriding inferred ones."""
    mode: str = "declared"
    """How preconditions are decided: ``declared`` rules, ``dry_run`` on a copy of the
    environment, or ``none``; a source that supports only some says so."""
    tools: Path | None = None
    """``--tools``: OpenAI-style tool definitions (JSON list)."""
    specs: tuple[Path, ...] = ()
    """``--spec``: rule files merged onto the toolset, in order."""
    data: Path | None = None
    """``--data``: a data folder for sources that need one."""
    format: str = "auto"
    """``--format``: the transcript format, or ``auto`` to detect it."""


@runtime_checkable
class ReplaySource(Protocol):
    """Turns recorded runs of one benchmark or format into episode records."""

    help: str
    """One line for ``prefixmon replay --help``. A source whose inputs are folders (a benchmark's
    run folders) also sets ``folders = True``; otherwise the CLI refuses a folder as an input.
    A source that reads ``--format`` values besides ``auto`` lists them as ``formats``
    (a tuple of names); the CLI refuses any other value."""

    def replay(self, request: ReplayRequest) -> int:
        """Replay ``request.files`` into ``request.out``; returns the process exit code.

        Problems with the input are printed to stderr with file and line; exit 1 when any
        input was skipped, 2 for a request the source cannot serve.
        """


def run_async(func: Callable[[], Awaitable[T]]) -> T:
    """``anyio.run(func)`` without the event loop ever formatting what ``func`` returns (verbs and sync fallbacks).

    After the main task is done, asyncio's runner looks up the SIGINT handler it installed;
    on CPython 3.11 that formats the handler's repr, which holds the main task and so the
    full repr of its result. A replay summary or a bench report holding every record then
    cost time and memory in proportion to the records, for a string nobody reads. Here the
    main task returns nothing; the result is handed over beside it.
    """
    box: list[T] = []

    async def main() -> None:
        box.append(await func())

    anyio.run(main)
    return box[0]
