"""prefixmon's own episode records, as seen by ``prefixmon learn`` (the ``records`` format).

Reads the JSON Lines files the monitor's :class:`~prefixmon.JsonlSink` writes (also what
``prefixmon replay --out records.jsonl`` writes) and the Parquet files ``prefixmon export``
writes, with the readers of :mod:`prefixmon.records` and :mod:`prefixmon.records.parquet`. Parquet
needs the ``parquet`` extra (pyarrow).

Episode records keep argument values and results only when the monitor was made with
``Monitor(record_content=True)`` (redacted and size-capped, ``docs/security.md``): each
action then has ``arguments`` (JSON text) and ``result`` (text). Each such action becomes a
:class:`Call`: its arguments parsed (the raw text when they are not a JSON object, e.g. cut
at ``max_content_chars``), its result text left unmarked (``error=None``: the learner reads
its shape, so ``Error: ...`` texts teach a recogniser) unless the monitor's own recogniser
rejected it; a call that raised has its ``error`` text as result, marked an error; a call
that did not run (refused, abandoned, replaced) has ``ran=False``. A record whose tool calls
carry no arguments at all (recorded without the option) is reported (file, line, episode
id) and skipped, with what to record instead; an episode that made no tool call becomes a
transcript without events.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

from .._internal.json_depth import loads
from ..exceptions import RecordError
from ..records._writer import flush_writers
from ..records.model import BOM, SCHEMA, ActionRecord, BadLine, EpisodeRecord, iter_records
from .transcript import SNIFF_BYTES, Call, CorpusError, Problem, Transcript

__all__ = ("NO_CONTENT", "READER", "RecordsTranscriptReader", "transcript_from_record")

_SCHEMA_PREFIX: Final = SCHEMA.rsplit("/", 1)[0] + "/"
"""``prefixmon.episode/``: what the ``schema`` of a record of any version starts with."""
_REQUIRED: Final = frozenset({"episode_id", "task_id", "horizon", "fed", "executable", "started_at", "ended_at"})
"""The keys every record has (a record may leave out ``schema``; the rest have defaults)."""
_SCHEMA_START: Final = re.compile(rb'^\{[^\n]{0,2048}?"schema"\s*:\s*"prefixmon\.episode/')
_PARQUET_MAGIC: Final = b"PAR1"
_PARQUET_HINT: Final = 'pip install "prefixmon[parquet]"'

NO_CONTENT: Final = (
    "record has no arguments: episode records keep argument values and results only with "
    "Monitor(record_content=True) (docs/security.md); record the runs with it, or trace them with "
    "Telemetry(capture_content=True) and learn from the traces (the otlp format)"
)
"""Why a record with tool calls but without content cannot be learned from."""


def _call(action: ActionRecord) -> Call:
    """One recorded action with content as a call (the rules of the module docstring)."""
    raw = action.arguments
    arguments: Any = raw if raw is not None else ""
    if raw is not None:
        try:
            arguments = loads(raw)
        except ValueError:
            arguments = raw  # cut at max_content_chars, or not JSON: a call without usable arguments
        if not isinstance(arguments, dict):
            arguments = raw
    abandoned = action.executable and action.error is not None
    ran = action.reached_environment and not abandoned
    result: Any = action.result
    mark: bool | None = True if action.error is not None else None
    if not ran:
        result, mark = None, None
    elif result is None:
        result, mark = action.error, action.error is not None
    return Call(tool=action.tool or "", arguments=arguments, call_id=action.call_id, result=result, error=mark, ran=ran)


def transcript_from_record(record: EpisodeRecord, source: str | None = None) -> Transcript | str:
    """A record as a transcript, or why it cannot be one.

    A record whose tool calls carry no ``arguments`` (recorded without
    ``Monitor(record_content=True)``) cannot be one (:data:`NO_CONTENT`).
    """
    if not record.actions:
        return f"record lists no actions (only their number, {record.horizon}): nothing to learn from"
    calls = [a for a in record.actions if a.tool is not None]
    if calls and all(a.arguments is None for a in calls):
        return NO_CONTENT
    return Transcript(
        episode_id=record.episode_id,
        events=tuple(_call(a) for a in calls),
        outcome=None if record.outcome is None else record.outcome.value,
        source=source,
        labels=dict(record.labels),
    )


def _looks_like_record(first: bytes, whole: bool) -> bool:
    """Whether one JSON line is an episode record (``whole``: the line ended within the head)."""
    if whole:
        try:
            data: Any = json.loads(first)
        except (ValueError, RecursionError):
            return False
        if not isinstance(data, dict):
            return False
        schema = data.get("schema")
        if schema is not None:
            return isinstance(schema, str) and schema.startswith(_SCHEMA_PREFIX)
        return data.keys() >= _REQUIRED
    return _SCHEMA_START.match(first) is not None  # longer than the head: told by its start


class RecordsTranscriptReader:
    """prefixmon episode records (JSON Lines or Parquet)."""

    help = "prefixmon episode records (JsonlSink, replay --out, export Parquet) made with Monitor(record_content=True)"

    def sniff(self, path: Path, head: bytes) -> bool:
        """The first non-empty line is an episode record; or the file is a ``prefixmon export`` Parquet file."""
        if head[:4] == _PARQUET_MAGIC:
            return self._parquet_is_ours(path)
        text = head.removeprefix(BOM).lstrip()
        first, newline, _ = text.partition(b"\n")
        return _looks_like_record(first.rstrip(), bool(newline) or len(head) < SNIFF_BYTES)

    @staticmethod
    def _parquet_is_ours(path: Path) -> bool:
        """A Parquet file with the records' columns (without pyarrow any Parquet file: reading says what is missing)."""
        try:
            import pyarrow.parquet as pq
        except ImportError:
            return True
        try:
            schema = pq.read_schema(path)
        except (OSError, ValueError):  # pyarrow's ArrowInvalid is a ValueError
            return False
        return "actions" in schema.names and "episode_id" in schema.names

    def read(self, path: Path, problems: list[Problem]) -> Iterator[Transcript]:
        """Every record; each that cannot be a transcript, and each malformed line or row, is reported.

        Raises:
            CorpusError: a Parquet file without the ``parquet`` extra installed.
            OSError: the file cannot be opened.
        """
        with path.open("rb") as fh:
            parquet = fh.read(4) == _PARQUET_MAGIC
        if parquet:
            yield from self._read_parquet(path, problems)
        else:
            yield from self._read_jsonl(path, problems)

    @staticmethod
    def _read_jsonl(path: Path, problems: list[Problem]) -> Iterator[Transcript]:
        name = str(path)
        bad: list[BadLine] = []
        line = 0

        def counted(fh: Any) -> Iterator[bytes]:
            nonlocal line
            for raw in fh:
                line += 1
                yield raw

        flush_writers(name)  # records this process queued for the file are in it
        with path.open("rb") as fh:
            for record in iter_records(name, on_error="skip", errors=bad, lines=counted(fh)):
                problems.extend(Problem(path=b.path, line=b.line, message=b.message) for b in bad)
                bad.clear()
                yield from _one(record, name, line, problems)
        problems.extend(Problem(path=b.path, line=b.line, message=b.message) for b in bad)

    @staticmethod
    def _read_parquet(path: Path, problems: list[Problem]) -> Iterator[Transcript]:
        try:
            import pyarrow  # noqa: F401  (only to say what is missing)
        except ImportError:
            raise CorpusError(f"{path}: reading Parquet episode records needs the parquet extra ({_PARQUET_HINT})") from None
        from ..records.parquet import iter_parquet_records

        name = str(path)
        row = 0
        try:
            for record in iter_parquet_records(name):
                row += 1
                yield from _one(record, name, row, problems)
        except RecordError as e:  # a bad row ends the file: a Parquet read cannot resume past it
            problems.append(Problem(path=name, line=row + 1 if e.line is None else e.line, message=_bare(e)))


def _one(record: EpisodeRecord, name: str, line: int, problems: list[Problem]) -> Iterator[Transcript]:
    found = transcript_from_record(record, f"{name}:{line}")
    if isinstance(found, str):
        problems.append(Problem(path=name, line=line, message=found, episode=record.episode_id))
    else:
        yield found


def _bare(error: RecordError) -> str:
    """The message of a :class:`RecordError` without the ``FILE:LINE:`` the problem says itself."""
    text = str(error)
    prefix = f"{error.path}:{error.line}: "
    return text.removeprefix(prefix) if error.path is not None and error.line is not None else text


READER: Final = RecordsTranscriptReader()
"""The ``records`` entry point of ``prefixmon.transcripts``."""
