"""The neutral transcript model the learner reads, and how transcript formats plug in.

Every format ``prefixmon learn`` reads (OpenAI-messages JSON Lines, τ-bench results, BFCL
result files, OTLP traces recorded with content) becomes the same thing: a
:class:`Transcript`, one episode as ordered events — text the agent was given
(:class:`Message`: the user's words, or other information such as a system prompt) and
tool calls (:class:`Call`: name, arguments, call id, the result, and whether the
environment marked it an error).

Formats are :class:`TranscriptReader` objects registered in the entry-point group
``prefixmon.transcripts`` (:data:`~prefixmon.commands.TRANSCRIPTS_GROUP`), so the core
never imports an adapter::

    [project.entry-points."prefixmon.transcripts"]
    myformat = "mypackage.learn:READER"

A reader streams episodes and reports each malformed line or entry as a :class:`Problem`
(file and line) instead of raising, so one bad line loses only itself.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, Final, Protocol, runtime_checkable

from ..commands import TRANSCRIPTS_GROUP
from ..exceptions import PrefixmonError

__all__ = (
    "SNIFF_BYTES",
    "TRANSCRIPTS_GROUP",
    "Call",
    "CorpusError",
    "Event",
    "Message",
    "Problem",
    "Transcript",
    "TranscriptReader",
    "detect_format",
    "read_transcripts",
    "reader_names",
    "transcript_reader",
)

SNIFF_BYTES: Final = 65_536
"""How much of a file's start readers get to tell whether it is theirs."""


class CorpusError(PrefixmonError, ValueError):
    """The transcripts cannot be learned from: none could be read, none has a tool call, or the format is unknown."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Message:
    """Text the agent was given."""

    text: str
    user: bool = True
    """``True``: the user said it; ``False``: other information (a system prompt, a policy, a document)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Call:
    """One tool call the agent made, with what came back."""

    tool: str
    arguments: Mapping[str, Any] | str
    """The arguments, or the raw text when they are not a JSON object (a schema failure)."""
    call_id: str | None = None
    result: Any = None
    """The result as text or data (``None`` when the tool returned nothing or did not run)."""
    error: bool | None = None
    """``True``: the environment or transcript marked the result an error (``isError``, an
    exception); ``False``: marked accepted; ``None``: not marked (the learner then reads the
    result's shape)."""
    ran: bool = True
    """``False`` when the call never reached the environment or its result is missing."""


Event = Message | Call
"""One event of a transcript."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Transcript:
    """One recorded episode."""

    episode_id: str
    events: tuple[Event, ...]
    outcome: str | None = None
    """``success``, ``partial``, ``failure``, or ``None`` when unknown."""
    source: str | None = None
    """Where it was read (``FILE:LINE``), for evidence and messages."""
    labels: Mapping[str, str] = field(default_factory=dict)
    given: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)
    """References the episode held before it started, ``{kind: values}`` (what
    ``Monitor.episode(bindings=...)`` gives: ids the scenario already holds, as BFCL's)."""

    @property
    def calls(self) -> Iterator[Call]:
        """The tool calls, in order."""
        return (e for e in self.events if isinstance(e, Call))


@dataclass(frozen=True, slots=True, kw_only=True)
class Problem:
    """A malformed line or entry that was skipped (or, with ``skipped=False``, a note about one that was read)."""

    path: str
    line: int
    message: str
    episode: str | None = None
    skipped: bool = True

    def __str__(self) -> str:
        episode = f" [{self.episode}]" if self.episode else ""
        return f"{self.path}:{self.line}{episode}: {self.message}"


@runtime_checkable
class TranscriptReader(Protocol):
    """Reads one transcript format into :class:`Transcript` objects."""

    help: str
    """One line for ``prefixmon learn --help``."""

    def sniff(self, path: Path, head: bytes) -> bool:
        """Whether the file looks like this format (``head`` is its first :data:`SNIFF_BYTES` bytes)."""

    def read(self, path: Path, problems: list[Problem]) -> Iterator[Transcript]:
        """Stream the file's episodes; append each malformed line or entry to ``problems`` and go on.

        Raises:
            OSError: the file cannot be opened.
        """


def reader_names() -> list[str]:
    """The registered formats, sorted."""
    return sorted({ep.name for ep in entry_points(group=TRANSCRIPTS_GROUP)})


def transcript_reader(name: str) -> TranscriptReader:
    """The reader registered as ``name``.

    Raises:
        CorpusError: nothing is registered under the name, or it fails to load (a missing extra).
    """
    found = [ep for ep in entry_points(group=TRANSCRIPTS_GROUP) if ep.name == name]
    if not found:
        known = ", ".join(reader_names()) or "none"
        raise CorpusError(f"unknown transcript format {name!r} (known: {known})")
    try:
        reader = found[0].load()
    except Exception as e:  # a missing optional dependency, usually
        hint = str(e) if str(e).startswith("pip install") else f"{type(e).__name__}: {e}"
        raise CorpusError(f"the {name} transcript reader cannot be loaded ({hint})") from e
    if not isinstance(reader, TranscriptReader):
        raise CorpusError(f"the entry point {name!r} of {TRANSCRIPTS_GROUP} is not a TranscriptReader")
    return reader


def detect_format(path: str | os.PathLike[str]) -> str:
    """The format of a file: the one registered reader that recognises its start.

    Readers are asked in name order; the first that says yes wins, so formats should
    recognise only what is unmistakably theirs.

    Raises:
        CorpusError: no reader recognises the file.
        OSError: the file cannot be read.
    """
    file = Path(path)
    with file.open("rb") as fh:
        head = fh.read(SNIFF_BYTES)
    for name in reader_names():
        try:
            reader = transcript_reader(name)
        except CorpusError:
            continue  # an unavailable reader cannot claim files
        if reader.sniff(file, head):
            return name
    expected = []
    for name in reader_names():
        try:
            expected.append(f"  {name}: {transcript_reader(name).help}")
        except CorpusError as e:
            expected.append(f"  {name}: unavailable ({e})")
    start = head[:60].decode("utf-8", "replace").splitlines()[0] if head.strip() else "(empty)"
    raise CorpusError(
        f"{file}: cannot tell its transcript format (it starts {start!r}); give --format, one of:\n" + "\n".join(expected)
    )


def read_transcripts(
    paths: Iterable[str | os.PathLike[str]], *, format: str = "auto", problems: list[Problem] | None = None
) -> Iterator[Transcript]:
    """Stream the transcripts of several files, each read by its format's reader.

    Args:
        format: a registered format name, or ``auto`` to detect each file's.
        problems: malformed lines and entries are appended here and skipped (without it they
            are dropped silently; pass a list to report them).

    Raises:
        CorpusError: a file's format cannot be told or is unknown.
        OSError: a file cannot be opened.
    """
    sink: list[Problem] = problems if problems is not None else []
    for path in paths:
        file = Path(path)
        if file.is_dir():
            raise IsADirectoryError(21, "a folder; give the files in it", str(file))
        if not file.is_file():
            raise FileNotFoundError(2, "no such file", str(file))
        reader = transcript_reader(detect_format(file) if format == "auto" else format)
        yield from reader.read(file, sink)
