"""Input readers: files of episodes in, :class:`~.columns.EpisodeColumns` out.

Two ways to read record files, one answer:

* :func:`prefixmon.read_records` validates every line with pydantic (about 10 µs per
  line); use it, and :func:`~.columns.columns_from_records`, when you want the full records.
* :func:`load_columns` is the fast column loader the CLI uses. Every line is read whole:
  msgspec decodes it into typed structs (strict types, as the records' pydantic schema is)
  and the record's invariants are checked in one pass. A line that does not pass is handed
  to pydantic, whose verdict and values are used, so both readers accept the same lines,
  give the same values and report the same message for a bad line (``path:line: what``).

A file is opened once: the first non-blank line decides its format (a named pipe or
``/dev/stdin`` is read as it comes, nothing is lost to the detection). Other formats plug
in through :func:`register_reader`: a sniffer looks at the path and that first line, a
reader gets the opened :class:`Source`. Record JSON Lines is the fallback. OTLP JSON
traces (the OpenTelemetry file exporter's JSON Lines) are registered here and read by
:mod:`prefixmon.records.otlp`.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import IO, Any, Final, Literal

from ..exceptions import RecordError
from ..records._writer import flush_writers
from ..records.model import MAX_HORIZON, SCHEMA, BadLine, EpisodeRecord, bad_line, loads_record, merged_records
from ..records.otlp import is_trace_line
from ..vocabulary import Cause, Decision, Outcome
from ._parallel import read_in_parallel, workers_for
from .columns import (
    CAUSE_CODE,
    OUTCOME_CODE,
    ColumnBuilder,
    EpisodeColumns,
    OnError,
    Texts,
    columns_from_records,
    concat_columns,
)

__all__ = (
    "OnError",
    "ReadFn",
    "Reader",
    "SniffFn",
    "Source",
    "input_formats",
    "load_columns",
    "open_source",
    "read_otlp_columns",
    "read_record_columns",
    "readers",
    "register_reader",
)

ReadFn = Callable[["Source", OnError, "list[BadLine] | None"], EpisodeColumns]
"""A reader: ``(source, on_error, errors) -> EpisodeColumns``."""
SniffFn = Callable[[str, bytes], bool]
"""A sniffer: ``(path, first non-blank line of the file) -> whether this reader wants the file``."""

_HEAD_LIMIT: Final = 1 << 20
"""At most this much of the first line is looked at to decide the format."""


@dataclass(slots=True, kw_only=True)
class Source:
    """One input file, opened once: its first line for sniffing, then every line in order.

    Readers that need a seekable file (Parquet) can open :attr:`path` again when
    :attr:`seekable` is true; a pipe can be read only once, through :meth:`lines`.
    """

    path: str
    """The path as given (named in every message)."""
    head: bytes
    """The first non-blank line (at most 1 MiB of it), ``b""`` for an empty file."""
    seekable: bool
    """Whether the path is a regular file (not a pipe or a terminal)."""
    file: IO[bytes]
    _consumed: list[bytes] = field(default_factory=list)
    _used: bool = False

    def lines(self) -> Iterator[bytes]:
        """Every line of the file from the first, each whole (the sniffed ones included); once."""
        if self._used:
            raise RuntimeError(f"{self.path} was read already")
        self._used = True
        line: list[bytes] = []  # the sniff read a long line in pieces: each line is yielded whole
        for piece in self._consumed:
            line.append(piece)
            if piece.endswith(b"\n"):
                yield b"".join(line)
                line = []
        if line:
            line.append(self.file.readline())
            yield b"".join(line)
        yield from self.file


@contextlib.contextmanager
def open_source(path: str | os.PathLike[str]) -> Iterator[Source]:
    """Open ``path`` once and read its first non-blank line.

    Raises:
        FileNotFoundError, IsADirectoryError, PermissionError: as ``open`` does.
    """
    name = os.fspath(path)
    flush_writers(name)  # records this process queued for the file are in it
    with open(name, "rb") as f:
        consumed: list[bytes] = []
        head = b""
        while True:
            chunk = f.readline(_HEAD_LIMIT)
            if not chunk:
                break
            consumed.append(chunk)
            if chunk.strip():
                head = chunk
                break
        try:
            seekable = f.seekable() and os.path.isfile(name)
        except OSError:
            seekable = False
        yield Source(path=name, head=head, seekable=seekable, file=f, _consumed=consumed)


@dataclass(frozen=True, slots=True, kw_only=True)
class Reader:
    """A registered input format."""

    name: str
    """Short name, shown in errors (``"records"``, ``"otlp"``)."""
    sniff: SniffFn
    """Decides from the path and the file's first non-blank line whether this reader applies."""
    read: ReadFn
    """Reads one opened file."""


_READERS: list[Reader] = []


def register_reader(name: str, *, sniff: SniffFn, read: ReadFn) -> None:
    """Add an input format; later registrations are tried first. Replaces one of the same name."""
    _READERS[:] = [r for r in _READERS if r.name != name]
    _READERS.insert(0, Reader(name=name, sniff=sniff, read=read))


def readers() -> tuple[Reader, ...]:
    """The registered readers, in the order they are tried (record JSONL is the fallback)."""
    return tuple(_READERS)


def load_columns(
    *paths: str | os.PathLike[str],
    on_error: OnError = "raise",
    errors: list[BadLine] | None = None,
) -> EpisodeColumns:
    """Read episode files of any registered format into one set of columns.

    Args:
        paths: record JSON Lines files (or other registered formats); pipes work too.
        on_error: ``"raise"`` stops at the first bad line, a truncated last line included,
            with a :class:`RecordError` naming file and line; ``"skip"`` skips it and
            appends a :class:`BadLine` to ``errors``.
        errors: where skipped lines are reported.

    Raises:
        RecordError: a bad line (``on_error="raise"``) or a file in an unknown format.
        FileNotFoundError: a path does not exist.
    """
    parts = []
    for p in paths:
        with open_source(p) as source:
            parts.append(_reader_for(source).read(source, on_error, errors))
    if not parts:
        return ColumnBuilder().build()
    return concat_columns(parts)


def _reader_for(source: Source) -> Reader:
    for reader in _READERS:
        if reader.sniff(source.path, source.head):
            return reader
    return _RECORDS


# -- records: the fast path ----------------------------------------------------------------------
_CauseName: Any = Literal[tuple(c.value for c in Cause)]
_DecisionName: Any = Literal[tuple(d.value for d in Decision)]
_OutcomeName: Any = Literal[tuple(o.value for o in Outcome)]


try:  # the analytics extra installs msgspec; without it every line goes through pydantic
    import msgspec
except ImportError:  # pragma: no cover - depends on the environment
    msgspec = None  # type: ignore[assignment]

if msgspec is not None:
    # gc=False: these are never part of a cycle, and untracked structs decode about 5% faster.
    # forbid_unknown_fields: msgspec skips an undeclared field's value unread, where pydantic's
    # parser refuses some (past 4,300 digits, not UTF-8, too deep); such a line is pydantic's to decide
    class _Action(msgspec.Struct, gc=False, forbid_unknown_fields=True):
        depth: int
        tool: str | None
        executable: bool
        call_id: str | None = None
        cause: _CauseName | None = None
        reason: str | None = None
        decision: _DecisionName = "allow"
        reached_environment: bool = False
        error: str | None = None
        turn: int = 0
        replacement: str | None = None
        plan_step: int | None = None
        deviation: str | None = None
        code: str | None = None
        arguments: str | None = None
        result: str | None = None

    class _Failure(msgspec.Struct, gc=False, forbid_unknown_fields=True):
        depth: int
        tool: str | None
        cause: _CauseName
        reason: str

    class _Probe(msgspec.Struct, gc=False, forbid_unknown_fields=True):
        depth: int
        tool: str
        object: str
        ok: bool
        error: str | None = None

    class _Record(msgspec.Struct, gc=False, forbid_unknown_fields=True):
        """The fields pydantic checks, with the same strict types (``labels`` checked by :func:`_labels_of`)."""

        episode_id: str
        task_id: str
        horizon: int
        fed: int
        executable: bool
        started_at: datetime
        ended_at: datetime
        schema: Literal["prefixmon.episode/1"] = SCHEMA
        labels: msgspec.Raw = msgspec.Raw(b"{}")
        """Kept as JSON text: repeated label objects are looked up by their text, not decoded again."""
        outcome: _OutcomeName | None = None
        first_failure: _Failure | None = None
        actions: list[_Action] = []  # noqa: RUF012
        status: Literal["finished", "error", "cancelled"] = "finished"
        error: str | None = None
        invalid_reached_environment: bool = False
        allows_no_tool: bool = False
        probes: list[_Probe] = []  # noqa: RUF012
        """Read for their types only (a line with bad probes is a bad line, as pydantic says)."""

    _LABELS: Final = msgspec.json.Decoder(dict[str, str]).decode


def _fast_decoder() -> Callable[[bytes], Any] | None:
    """msgspec's typed decoder of a record, or None without msgspec."""
    return None if msgspec is None else msgspec.json.Decoder(_Record).decode


def _labels_of(text: bytes) -> dict[str, str] | None:
    """A record's ``labels`` JSON as the strict ``dict[str, str]`` pydantic reads, or None to let pydantic decide."""
    try:
        labels: dict[str, str] = _LABELS(text)
    except Exception:  # msgspec.DecodeError / ValidationError: pydantic gives the message
        return None
    return labels


_Fields = tuple[str, str, dict[str, str], int, int, int, int, "str | None", "str | None"]


def _checked(decode: Callable[[bytes], Any], raw: bytes) -> Any:
    """The decoded record of a line that passes every check pydantic makes but its labels'
    (JSON text, see :func:`_labels_of`), or None to let pydantic decide.

    The checks are the record's ``__post_init__`` (records.py), written for speed: this runs
    once per line (about 0.6 µs of the 4 µs a line costs, the decode being the rest).
    """
    try:
        r = decode(raw)
    except Exception:  # msgspec.DecodeError / ValidationError: pydantic gives the message
        return None
    horizon, fed, ff = r.horizon, r.fed, r.first_failure
    if ff is None:  # executable: fed == horizon + 1
        if not r.executable or fed != horizon + 1 or horizon < 1:
            return None
    elif r.executable or ff.depth != fed or not 1 <= fed <= horizon:
        return None
    actions = r.actions
    if actions:
        if len(actions) != horizon:
            return None
        depth = first = 0  # first: depth of the first non-executable action (0: none)
        for a in actions:
            depth += 1
            if a.depth != depth:
                return None
            if a.cause is None:
                if not a.executable:
                    return None
            elif a.executable:
                return None
            elif not first:
                first = depth
        if (first or depth + 1) != fed:
            return None
    elif horizon > MAX_HORIZON:
        return None
    return r


def _fields(record: EpisodeRecord) -> _Fields:
    ff = record.first_failure
    outcome = OUTCOME_CODE[None if record.outcome is None else record.outcome.value]
    if ff is None:
        return record.episode_id, record.task_id, record.labels, record.horizon, record.fed, outcome, -1, None, None
    return (
        record.episode_id,
        record.task_id,
        record.labels,
        record.horizon,
        record.fed,
        outcome,
        CAUSE_CODE[ff.cause.value],
        ff.tool,
        ff.reason,
    )


def read_record_columns(source: Source, on_error: OnError = "raise", errors: list[BadLine] | None = None) -> EpisodeColumns:
    """Column reader for one record JSON Lines file (see the module docstring).

    Every line is read whole. A bad line is reported with file and line, as
    :func:`prefixmon.records.iter_records` reports it; so is an unterminated last line that
    is not a whole record (a writer killed mid-write).

    From a regular file, the episode ids and failure reasons are not kept: each episode keeps
    a 64-bit key of its id, and the text is read from the file again, the same way, when
    something needs it (a review sheet, annotations, an id seen twice). From a pipe they are
    kept in memory. A large file is read by one process per core, each a range of whole lines
    with this same code (see :mod:`._parallel`).
    """
    path = source.path
    if source.seekable:
        size = os.fstat(source.file.fileno()).st_size
        workers = workers_for(path, size)
        if workers > 1:
            return read_in_parallel(
                _read_records,
                path,
                size,
                workers,
                on_error,
                errors,
                lambda skipped, keys: _texts_again(path, size, skipped, keys),
            )
    skipped: list[int] = []
    first: dict[str, Any] = {}  # where the first read ended and the keys it kept: for reading the text again
    texts = (lambda: _texts_again(path, first["end"], skipped, first["keys"])) if source.seekable else None
    builder = ColumnBuilder(texts=texts)
    _read_records(source.lines(), path, on_error, errors, skipped, builder)
    columns = builder.build()
    if texts is not None:
        first["end"] = source.file.tell()
        first["keys"] = columns.keys
    return columns


def _read_records(
    lines: Iterable[bytes],
    path: str,
    on_error: OnError,
    errors: list[BadLine] | None,
    skipped: list[int],
    builder: ColumnBuilder,
) -> int:
    """Add every good line to ``builder`` (text only when it keeps text); note the bad lines' numbers in ``skipped``.

    Returns:
        The number of lines read (blank and bad ones included).
    """
    decode = _fast_decoder()
    keep_text = builder.keeps_text
    label_sets: dict[bytes, int] = {}
    """Labels JSON text seen so far and its label-set code (-1: pydantic must read such a line)."""
    tasks: dict[str, int] = {}
    sink, append = builder.row_sink, builder.append_codes
    outcome_code, cause_code = OUTCOME_CODE, CAUSE_CODE
    line_no = 0
    for line_no, raw in enumerate(lines, 1):
        if not line_no & 0xFFFF:
            builder.settle()  # see row_sink
        r = None if decode is None else _checked(decode, raw)
        if r is not None:
            text = bytes(r.labels)
            label_set = label_sets.get(text)
            if label_set is None:
                labels = _labels_of(text)
                label_set = label_sets[text] = -1 if labels is None else builder.label_code(labels)
            if label_set >= 0:
                tid = r.task_id
                task = tasks.get(tid)
                if task is None:
                    task = tasks[tid] = builder.task_code(tid)
                ff = r.first_failure
                if keep_text:
                    builder.add_text(r.episode_id, None if ff is None else ff.tool, None if ff is None else ff.reason)
                cause = -1 if ff is None else cause_code[ff.cause]
                sink((hash(r.episode_id), task, label_set, r.horizon, r.fed, outcome_code[r.outcome], cause))
                continue
        if raw.isspace():
            continue
        rows = _validated(raw, path, line_no, on_error, errors)
        if rows is None:
            skipped.append(line_no)
            continue
        for eid, tid, labels, horizon, fed, outcome, cause, tool, reason in rows:
            if keep_text:
                builder.add_text(eid, tool, reason)
            append(hash(eid), builder.task_code(tid), builder.label_code(labels), horizon, fed, outcome, cause)
    return line_no


def _validated(raw: bytes, path: str, line_no: int, on_error: OnError, errors: list[BadLine] | None) -> list[_Fields] | None:
    """The fields of the records of a line the fast decoder did not take, as pydantic reads it;
    ``None`` for a bad line (skipped)."""
    try:
        return _line_fields(raw)
    except RecordError as e:
        bad_line(raw, e, path, line_no, on_error, errors)
        return None


def _line_fields(raw: bytes) -> list[_Fields]:
    """The fields of the record of a line, as pydantic reads it, or of each record of a line of
    several back to back (a lost newline, see :func:`prefixmon.records.merged_records`).

    Raises:
        RecordError: the line is not a record, nor several.
    """
    try:
        return [_fields(loads_record(raw))]
    except RecordError as e:
        return [_fields(r) for r in merged_records(raw, e)]


def _texts_again(path: str, end: int, skipped: Sequence[int], keys: Any) -> Texts:
    """The episode ids, failure tools and reasons of a file read before, read again up to where it ended.

    The same lines are skipped; each id must match the key kept from the first read, so a
    file rewritten in between is noticed, never mixed in.
    """
    ids: list[str] = []
    tools: list[str | None] = []
    reasons: list[str | None] = []
    decode = _fast_decoder()
    bad = set(skipped)
    changed = "the file changed after it was read ({}); report it again"
    line_no = 0
    start = 0
    with open(path, "rb") as f:
        for line_no, raw in enumerate(f, 1):
            if start >= end:
                break
            start += len(raw)
            if raw.isspace() or line_no in bad:
                continue
            r = None if decode is None else _checked(decode, raw)
            if r is not None:
                ff = r.first_failure
                eid, tool, reason = r.episode_id, None if ff is None else ff.tool, None if ff is None else ff.reason
            else:  # as _read_records reads it: one record, or several merged on the line
                try:
                    rows = _line_fields(raw)
                except RecordError:
                    raise RecordError(changed.format("this line is no longer a record"), path=path, line=line_no) from None
                for eid, _, _, _, _, _, _, tool, reason in rows:
                    if len(ids) >= len(keys) or hash(eid) != keys[len(ids)]:
                        raise RecordError(changed.format("another episode id on this line"), path=path, line=line_no)
                    ids.append(eid)
                    tools.append(tool)
                    reasons.append(reason)
                continue
            if len(ids) >= len(keys) or hash(eid) != keys[len(ids)]:
                raise RecordError(changed.format("another episode id on this line"), path=path, line=line_no)
            ids.append(eid)
            tools.append(tool)
            reasons.append(reason)
    if len(ids) != len(keys):
        raise RecordError(changed.format(f"{len(ids)} episodes where there were {len(keys)}"), path=path, line=line_no)
    return tuple(ids), tuple(tools), tuple(reasons)


_RECORDS: Final = Reader(name="records", sniff=lambda path, head: True, read=read_record_columns)


def read_otlp_columns(source: Source, on_error: OnError = "raise", errors: list[BadLine] | None = None) -> EpisodeColumns:
    """OTLP JSON Lines traces (file exporter format) rebuilt into records by :mod:`prefixmon.records.otlp`.

    An incomplete episode skipped with ``on_error="skip"`` is reported as a :class:`BadLine`
    at the line of its episode span (0 when it has none).
    """
    from ..records.otlp import iter_otlp_spans, records_from_spans  # the records layer's trace reader

    skipped: list[BadLine] = []
    spans = list(iter_otlp_spans(source.path, on_error=on_error, errors=errors, lines=source.lines()))
    records = records_from_spans(spans, on_error=on_error, bad=skipped)
    if errors is not None:
        errors.extend(skipped)
    return columns_from_records(records)


register_reader("otlp", sniff=lambda path, head: is_trace_line(head), read=read_otlp_columns)


def _read_parquet_columns(source: Source, on_error: OnError = "raise", errors: list[BadLine] | None = None) -> EpisodeColumns:
    """``prefixmon.parquet/1`` files (pyarrow imported only when one is read)."""
    if not source.seekable:
        raise RecordError(f"{source.path}: a Parquet file must be read from a file, not a pipe")
    from .engines._columns import read_parquet_columns

    return read_parquet_columns(source.path, on_error, errors)


def _parquet(path: str, head: bytes) -> bool:
    """Parquet starts and ends with ``PAR1``; a file only starting so (JSON Lines with bytes in front) is not one."""
    if head[:4] != b"PAR1":
        return False
    try:
        with open(path, "rb") as f:
            f.seek(-4, os.SEEK_END)
            return f.read(4) == b"PAR1"
    except OSError:  # a pipe: what follows cannot be looked at, so the start decides
        return True


register_reader("parquet", sniff=_parquet, read=_read_parquet_columns)


def input_formats() -> Sequence[str]:
    """Names of the formats :func:`load_columns` understands."""
    return (*(r.name for r in _READERS), _RECORDS.name)
