"""Input readers: files of episodes in, :class:`~.columns.EpisodeColumns` out.

Two ways to read record files:

* :func:`prefixmon.read_records` validates every line with pydantic (about 10 µs per
  line); use it, and :func:`~.columns.columns_from_records`, when you want the full records.
* :func:`load_columns` is the fast column loader the CLI uses: it parses each line with
  orjson (stdlib ``json`` when orjson is missing), stops at the ``actions`` array (which
  the metrics never read), checks every field the metrics do read, and reports a bad line
  as ``path:line: what``. About 2 µs per line, so a million episodes load in seconds.

Other formats plug in through :func:`register_reader`: a reader gets a path and returns
columns; a sniffer looks at the first bytes of a file and says whether the reader wants
it. Record JSON Lines is the fallback. OTLP JSON traces (the OpenTelemetry file
exporter's JSON Lines) are registered here and read by :mod:`prefixmon.otlp`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from ..exceptions import RecordError
from ..records import MAX_HORIZON, SCHEMA, BadLine
from .columns import CAUSE_CODE, OUTCOME_CODE, ColumnBuilder, EpisodeColumns, columns_from_records, concat_columns

__all__ = (
    "OnError",
    "ReadFn",
    "Reader",
    "SniffFn",
    "input_formats",
    "load_columns",
    "read_otlp_columns",
    "read_record_columns",
    "readers",
    "register_reader",
)

_loads: Callable[[bytes], Any]
try:  # orjson parses about 3x faster than json; optional, the stdlib works too
    from orjson import loads as _loads
except ImportError:  # pragma: no cover - depends on the environment
    _loads = json.loads

OnError = Literal["raise", "skip"]
ReadFn = Callable[[str, OnError, "list[BadLine] | None"], EpisodeColumns]
"""A reader: ``(path, on_error, errors) -> EpisodeColumns``."""
SniffFn = Callable[[str, bytes], bool]
"""A sniffer: ``(path, first bytes of the file) -> whether this reader wants the file``."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Reader:
    """A registered input format."""

    name: str
    """Short name, shown in errors (``"records"``, ``"otlp"``)."""
    sniff: SniffFn
    """Decides from the path and the file's first bytes whether this reader applies."""
    read: ReadFn
    """Reads one file."""


_READERS: list[Reader] = []
_SNIFF_BYTES: Final = 4096
_ACTIONS: Final = b',"actions":'
_NEEDED: Final = frozenset(
    {"schema", "episode_id", "task_id", "labels", "horizon", "fed", "executable", "outcome", "first_failure"}
)
"""Keys that must be in the part of a line before ``actions`` for the fast path."""


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
        paths: record JSON Lines files (or other registered formats).
        on_error: ``"raise"`` stops at the first bad line with a :class:`RecordError`
            naming file and line; ``"skip"`` skips it and appends a :class:`BadLine`.
        errors: where skipped lines are reported.

    Raises:
        RecordError: a bad line (``on_error="raise"``) or a file in an unknown format.
        FileNotFoundError: a path does not exist.
    """
    parts = [_reader_for(os.fspath(p)).read(os.fspath(p), on_error, errors) for p in paths]
    if not parts:
        return ColumnBuilder().build()
    return concat_columns(parts)


def _reader_for(path: str) -> Reader:
    with open(path, "rb") as f:
        head = f.read(_SNIFF_BYTES)
    for reader in _READERS:
        if reader.sniff(path, head):
            return reader
    if b'"resourceSpans"' in head:
        raise RecordError(
            "looks like OTLP JSON traces, but no reader for traces is registered (it comes with prefixmon's telemetry module)",
            path=path,
            line=1,
        )
    return _RECORDS


class _Bad(Exception):
    """A line that is not a valid record; the message says which field and why."""


def _check(d: Any) -> tuple[str, str, dict[str, str], int, int, int, int, str | None, str | None]:
    """The fields the metrics read, checked. Raises _Bad with a field-level message."""
    if type(d) is not dict:
        raise _Bad("record: expected a JSON object")
    schema = d.get("schema")
    if schema != SCHEMA:
        raise _Bad(f"schema: expected {SCHEMA!r}, got {schema!r}")
    episode_id = d.get("episode_id")
    task_id = d.get("task_id")
    labels = d.get("labels", {})
    horizon = d.get("horizon")
    fed = d.get("fed")
    if type(episode_id) is not str:
        raise _Bad(f"episode_id: expected a string, got {episode_id!r}")
    if type(task_id) is not str:
        raise _Bad(f"task_id: expected a string, got {task_id!r}")
    if type(labels) is not dict or not all(type(v) is str for v in labels.values()):
        raise _Bad(f"labels: expected an object of strings, got {labels!r}")
    if type(horizon) is not int or horizon < 1:
        raise _Bad(f"horizon: expected an integer >= 1, got {horizon!r}")
    if horizon > MAX_HORIZON and len(d.get("actions") or ()) != horizon:
        raise _Bad(f"horizon: above {MAX_HORIZON:,} ({horizon}) it must come with its actions")
    if type(fed) is not int or not 1 <= fed <= horizon + 1:
        raise _Bad(f"fed: expected an integer in 1..horizon+1 ({horizon + 1}), got {fed!r}")
    executable = fed == horizon + 1
    if d.get("executable") is not executable:
        raise _Bad(f"executable: {d.get('executable')!r} but fed={fed}, horizon={horizon}")
    outcome = OUTCOME_CODE.get(d.get("outcome"), -2)
    if outcome == -2:
        raise _Bad(f"outcome: expected success, partial, failure or null, got {d.get('outcome')!r}")
    ff = d.get("first_failure")
    if executable:
        if ff is not None:
            raise _Bad("first_failure: must be null when the episode is fully executable")
        return episode_id, task_id, labels, horizon, fed, outcome, -1, None, None
    if type(ff) is not dict:
        raise _Bad(f"first_failure: expected an object when fed <= horizon, got {ff!r}")
    cause = CAUSE_CODE.get(ff.get("cause"), -2)
    if cause < 0:
        raise _Bad(f"first_failure.cause: expected one of {', '.join(c for c in CAUSE_CODE if c)}, got {ff.get('cause')!r}")
    if ff.get("depth") != fed:
        raise _Bad(f"first_failure.depth: {ff.get('depth')!r} != fed {fed}")
    tool = ff.get("tool")
    reason = ff.get("reason")
    return (
        episode_id,
        task_id,
        labels,
        horizon,
        fed,
        outcome,
        cause,
        tool if type(tool) is str else None,
        reason if type(reason) is str else None,
    )


def read_record_columns(path: str, on_error: OnError = "raise", errors: list[BadLine] | None = None) -> EpisodeColumns:
    """Fast column reader for one record JSON Lines file (see the module docstring).

    An unterminated last line (a writer killed mid-write) is reported as truncated and
    skipped, as :func:`prefixmon.records.iter_records` does.
    """
    builder = ColumnBuilder()
    add = builder.add
    loads = _loads
    with open(path, "rb") as f:
        line_no = 0
        for raw in f:
            line_no += 1
            if raw.isspace():
                continue
            truncated = not raw.endswith(b"\n")
            try:
                d: Any = None
                j = raw.find(_ACTIONS)
                if j > 0 and not truncated:
                    try:
                        d = loads(raw[:j] + b"}")
                    except ValueError:  # the cut was not at top level: parse the whole line
                        d = None
                    if d is not None and (not d.keys() >= _NEEDED or _big(d)):  # another key order; or check the actions
                        d = None
                if d is None:
                    d = loads(raw)
                eid, tid, labels, horizon, fed, outcome, cause, tool, reason = _check(d)
            except (_Bad, ValueError) as e:
                message = f"not a valid record: {e}" if isinstance(e, _Bad) else f"not valid JSON: {e}"
                if on_error == "raise" and not truncated:
                    raise RecordError(message, path=path, line=line_no) from None
                if errors is not None:
                    if truncated:
                        message = "truncated last line (the writer stopped mid-record)"
                    errors.append(BadLine(path=path, line=line_no, message=message, truncated=truncated))
                continue
            add(
                episode_id=eid,
                task_id=tid,
                labels=labels,
                horizon=horizon,
                fed=fed,
                outcome=outcome,
                cause=cause,
                failure_tool=tool,
                failure_reason=reason,
            )
    return builder.build()


def _big(d: dict[str, Any]) -> bool:
    """A horizon that must be checked against the actions (the head parse does not have them)."""
    horizon = d.get("horizon")
    return type(horizon) is int and horizon > MAX_HORIZON


def _sniff_records(path: str, head: bytes) -> bool:
    return head.lstrip()[:1] == b"{" and b'"resourceSpans"' not in head


_RECORDS: Final = Reader(name="records", sniff=_sniff_records, read=read_record_columns)


def _sniff_otlp(path: str, head: bytes) -> bool:
    return b'"resourceSpans"' in head or b'"resource_spans"' in head


def read_otlp_columns(path: str, on_error: OnError = "raise", errors: list[BadLine] | None = None) -> EpisodeColumns:
    """OTLP JSON Lines traces (file exporter format) rebuilt into records by :mod:`prefixmon.otlp`.

    An incomplete episode skipped with ``on_error="skip"`` is reported as a :class:`BadLine`
    at line 0 (it spans several lines).
    """
    from ..otlp import iter_otlp_spans, records_from_spans  # the records layer's trace reader

    skipped: list[str] = []
    spans = list(iter_otlp_spans(path, on_error=on_error, errors=errors))
    records = records_from_spans(spans, on_error=on_error, errors=skipped)
    if errors is not None:
        errors.extend(BadLine(path=path, line=0, message=m) for m in skipped)
    return columns_from_records(records)


register_reader("otlp", sniff=_sniff_otlp, read=read_otlp_columns)


def _read_parquet_columns(path: str, on_error: OnError = "raise", errors: list[BadLine] | None = None) -> EpisodeColumns:
    """``prefixmon.parquet/1`` files (pyarrow imported only when one is read)."""
    from .engines._columns import read_parquet_columns

    return read_parquet_columns(path, on_error, errors)


register_reader("parquet", sniff=lambda path, head: head[:4] == b"PAR1", read=_read_parquet_columns)


def input_formats() -> Sequence[str]:
    """Names of the formats :func:`load_columns` understands."""
    return (*(r.name for r in _READERS), _RECORDS.name)
