"""Episode records as Parquet: the fleet-scale twin of the JSON Lines format.

``prefixmon export RECORDS... --out FILE.parquet`` writes this format; ``prefixmon report
FILE.parquet`` reads it (with DuckDB or Spark SQL, or in process), and so does
:func:`prefixmon.analytics.load_columns`. Needs the ``parquet`` extra (pyarrow).

Schema ``prefixmon.parquet/1`` (the file's key-value metadata ``prefixmon.schema`` says
which; ``prefixmon.record_schema`` is the record schema the rows follow,
``prefixmon.episode/1``). One row per episode:

=============================  =========================================  ==================================
column                         Arrow type                                 record field
=============================  =========================================  ==================================
``episode_id``                 string, not null                           ``episode_id``
``task_id``                    string, not null                           ``task_id``
``labels``                     map<string, string>, not null              ``labels`` (dataset, model, ...)
``horizon``                    int32, not null                            ``horizon`` (T)
``fed``                        int32, not null                            ``fed`` (T+1 when executable)
``executable``                 bool, not null                             ``executable``
``outcome``                    string (null: none recorded)               ``outcome``
``first_failure``              struct<depth int32, tool string,           ``first_failure`` (null when
                               cause string, reason string>               executable)
``actions``                    list<struct<depth int32, tool, call_id,    ``actions`` (may be empty)
                               executable bool, cause, reason, decision,
                               reached_environment bool, error,
                               turn int32, replacement, plan_step int32,
                               deviation, code, arguments, result>>
                               (``arguments`` / ``result``: content, only
                               with ``record_content``; absent from older
                               files, which read as null)
``started_at`` / ``ended_at``  timestamp[us, tz=UTC], not null            ``started_at`` / ``ended_at``
``status``                     string, not null                           ``status``
``error``                      string                                     ``error``
``invalid_reached_environment`` bool, not null                            ``invalid_reached_environment``
``allows_no_tool``             bool, not null                             ``allows_no_tool``
=============================  =========================================  ==================================

Labels are a **map** rather than one column per key: files from runs with different label
keys share one schema (a fleet unions them), and both DuckDB and Spark SQL read a key as
``labels['model']``. A reader accepts any later ``prefixmon.parquet/1`` file with extra
columns; a new major version changes the name.
"""

from __future__ import annotations

import itertools
import os
import stat
from collections.abc import Iterable, Iterator, Sequence
from datetime import UTC
from typing import TYPE_CHECKING, Any, Final, Literal

from pydantic import ValidationError

from ..exceptions import RecordError
from ._writer import flush_writers
from .model import RECORD_ADAPTER, SCHEMA, BadLine, EpisodeRecord, iter_records
from .otlp import is_trace_line, iter_otlp_spans, records_from_spans

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = (
    "INSTALL_HINT",
    "PARQUET_SCHEMA",
    "arrow_schema",
    "check_parquet",
    "export_records",
    "is_parquet",
    "iter_file_records",
    "iter_parquet_records",
    "read_parquet_records",
    "records_to_table",
    "write_parquet",
)

INSTALL_HINT: Final = 'pip install "prefixmon[parquet]"'
PARQUET_SCHEMA: Final = "prefixmon.parquet/1"
"""Name and version of the Parquet layout (file metadata key ``prefixmon.schema``)."""
MAGIC: Final = b"PAR1"
BATCH_ROWS: Final = 65_536
"""Rows per record batch when writing (bounds memory for any input size)."""


def _pa() -> Any:
    try:
        import pyarrow
    except ImportError as e:
        raise ImportError(INSTALL_HINT) from e
    return pyarrow


def arrow_schema() -> pa.Schema:
    """The Arrow schema of ``prefixmon.parquet/1`` with its file metadata."""
    pa = _pa()
    s = pa.string()
    action = pa.struct(
        [
            pa.field("depth", pa.int32(), nullable=False),
            pa.field("tool", s),
            pa.field("call_id", s),
            pa.field("executable", pa.bool_(), nullable=False),
            pa.field("cause", s),
            pa.field("reason", s),
            pa.field("decision", s, nullable=False),
            pa.field("reached_environment", pa.bool_(), nullable=False),
            pa.field("error", s),
            pa.field("turn", pa.int32(), nullable=False),
            pa.field("replacement", s),
            pa.field("plan_step", pa.int32()),
            pa.field("deviation", s),
            pa.field("code", s),
            pa.field("arguments", s),
            pa.field("result", s),
        ]
    )
    first_failure = pa.struct(
        [
            pa.field("depth", pa.int32(), nullable=False),
            pa.field("tool", s),
            pa.field("cause", s, nullable=False),
            pa.field("reason", s, nullable=False),
        ]
    )
    ts = pa.timestamp("us", tz="UTC")
    fields = [
        pa.field("episode_id", s, nullable=False),
        pa.field("task_id", s, nullable=False),
        pa.field("labels", pa.map_(s, s), nullable=False),
        pa.field("horizon", pa.int32(), nullable=False),
        pa.field("fed", pa.int32(), nullable=False),
        pa.field("executable", pa.bool_(), nullable=False),
        pa.field("outcome", s),
        pa.field("first_failure", first_failure),
        pa.field("actions", pa.list_(pa.field("element", action, nullable=False)), nullable=False),
        pa.field("started_at", ts, nullable=False),
        pa.field("ended_at", ts, nullable=False),
        pa.field("status", s, nullable=False),
        pa.field("error", s),
        pa.field("invalid_reached_environment", pa.bool_(), nullable=False),
        pa.field("allows_no_tool", pa.bool_(), nullable=False),
    ]
    return pa.schema(fields, metadata={b"prefixmon.schema": PARQUET_SCHEMA.encode(), b"prefixmon.record_schema": SCHEMA.encode()})


def _row(record: EpisodeRecord) -> dict[str, Any]:
    """One record as a row of :func:`arrow_schema` (enums as their values)."""
    ff = record.first_failure
    return {
        "episode_id": record.episode_id,
        "task_id": record.task_id,
        "labels": list(record.labels.items()),
        "horizon": record.horizon,
        "fed": record.fed,
        "executable": record.executable,
        "outcome": None if record.outcome is None else record.outcome.value,
        "first_failure": None
        if ff is None
        else {"depth": ff.depth, "tool": ff.tool, "cause": ff.cause.value, "reason": ff.reason},
        "actions": [
            {
                "depth": a.depth,
                "tool": a.tool,
                "call_id": a.call_id,
                "executable": a.executable,
                "cause": None if a.cause is None else a.cause.value,
                "reason": a.reason,
                "decision": a.decision.value,
                "reached_environment": a.reached_environment,
                "error": a.error,
                "turn": a.turn,
                "replacement": a.replacement,
                "plan_step": a.plan_step,
                "deviation": a.deviation,
                "code": a.code,
                "arguments": a.arguments,
                "result": a.result,
            }
            for a in record.actions
        ],
        "started_at": record.started_at if record.started_at.tzinfo else record.started_at.replace(tzinfo=UTC),
        "ended_at": record.ended_at if record.ended_at.tzinfo else record.ended_at.replace(tzinfo=UTC),
        "status": record.status,
        "error": record.error,
        "invalid_reached_environment": record.invalid_reached_environment,
        "allows_no_tool": record.allows_no_tool,
    }


def records_to_table(records: Iterable[EpisodeRecord]) -> pa.Table:
    """An Arrow table of records in the ``prefixmon.parquet/1`` schema."""
    pa = _pa()
    return pa.Table.from_pylist([_row(r) for r in records], schema=arrow_schema())


def write_parquet(
    path: str | os.PathLike[str],
    records: Iterable[EpisodeRecord],
    *,
    compression: str = "zstd",
    batch_rows: int = BATCH_ROWS,
) -> int:
    """Write records to a new Parquet file, ``batch_rows`` at a time (memory stays bounded).

    Returns:
        The number of episodes written.

    Raises:
        ImportError: the ``parquet`` extra is missing.
    """
    pa = _pa()
    import pyarrow.parquet as pq

    schema = arrow_schema()
    n = 0
    batch: list[dict[str, Any]] = []
    with pq.ParquetWriter(os.fspath(path), schema, compression=compression) as writer:
        for record in records:
            batch.append(_row(record))
            if len(batch) >= batch_rows:
                writer.write_table(pa.Table.from_pylist(batch, schema=schema))
                n += len(batch)
                batch = []
        if batch or not n:
            writer.write_table(pa.Table.from_pylist(batch, schema=schema))
            n += len(batch)
    return n


def export_records(
    paths: Sequence[str | os.PathLike[str]],
    out: str | os.PathLike[str],
    *,
    on_error: Literal["raise", "skip"] = "raise",
    errors: list[BadLine] | None = None,
    **kw: Any,
) -> int:
    """Validate every record of ``paths`` and write them to the Parquet file ``out``.

    Inputs may be record JSON Lines, Parquet or OTLP JSON trace files. The file is written
    under a temporary name and renamed at the end, so a failed export leaves no partial file.

    Raises:
        RecordError: a bad line, naming file and line (with ``on_error="raise"``; nothing is
            written then).
    """
    tmp = f"{os.fspath(out)}.tmp-{os.getpid()}"
    try:
        n = write_parquet(tmp, iter_file_records(paths, on_error=on_error, errors=errors), **kw)
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return n


def _regular(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a regular file (not a pipe, FIFO or terminal), which can be read twice."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return True  # let the reader's open say what is wrong


def iter_file_records(
    paths: Iterable[str | os.PathLike[str]],
    *,
    on_error: Literal["raise", "skip"] = "raise",
    errors: list[BadLine] | None = None,
) -> Iterator[EpisodeRecord]:
    """Every record of ``paths``, validated: record JSON Lines, Parquet or OTLP JSON traces.

    Parquet is told by its magic bytes; OTLP by the first non-blank line (see
    :func:`prefixmon.records.otlp.is_trace_line`). A pipe or FIFO is read once, as it comes.

    Raises:
        RecordError: a bad line, naming file and line (with ``on_error="raise"``).
    """
    for path in paths:
        name = os.fspath(path)
        if is_parquet(name):
            yield from iter_parquet_records(name)
            continue
        flush_writers(name)  # records this process queued for the file are in it
        with open(name, "rb") as f:
            consumed: list[bytes] = []
            for line in f:
                consumed.append(line)
                if line.strip():
                    break
            head = consumed[-1] if consumed else b""
            if head[:4] == MAGIC:  # only a pipe gets here with Parquet
                raise RecordError("a Parquet file must be read from a file, not a pipe", path=name, line=0)
            lines = itertools.chain(consumed, f)
            if is_trace_line(head):
                yield from _otlp_records(name, on_error, errors, lines)
            else:
                yield from iter_records(name, on_error=on_error, errors=errors, lines=lines)


def _otlp_records(
    name: str, on_error: Literal["raise", "skip"], errors: list[BadLine] | None, lines: Iterable[bytes] | None = None
) -> list[EpisodeRecord]:
    """The episodes of OTLP traces; under ``skip``, bad lines and incomplete episodes go to ``errors``."""
    spans = list(iter_otlp_spans(name, on_error=on_error, errors=errors, lines=lines))
    bad: list[BadLine] = []
    records = records_from_spans(spans, on_error=on_error, bad=bad)
    if errors is not None:
        errors.extend(bad)
    return records


def is_parquet(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a regular file that starts with Parquet's magic bytes.

    A pipe or FIFO is never opened here (reading its first bytes would lose them for the
    reader); Parquet cannot be read from one anyway.
    """
    if not _regular(path):
        return False
    with open(path, "rb") as f:
        return f.read(4) == MAGIC


def check_parquet(path: str | os.PathLike[str]) -> None:
    """Raise a :class:`RecordError` unless ``path`` is a readable ``prefixmon.parquet/1`` file."""
    _open(path)


def _open(path: str | os.PathLike[str]) -> Any:
    """The Parquet file, checked to be of our schema.

    Raises:
        RecordError: not Parquet, or not a ``prefixmon.parquet/1`` file.
    """
    _pa()
    import pyarrow.parquet as pq

    name = os.fspath(path)
    try:
        pf = pq.ParquetFile(name)
    except (OSError, ValueError) as e:  # pyarrow's ArrowInvalid is a ValueError
        raise RecordError(f"not a readable Parquet file: {e}", path=name, line=0) from None
    meta = pf.schema_arrow.metadata or {}
    found = meta.get(b"prefixmon.schema", b"").decode() or None
    if found != PARQUET_SCHEMA:
        raise RecordError(f"Parquet schema: expected {PARQUET_SCHEMA!r} in the file metadata, got {found!r}", path=name, line=0)
    missing = [f.name for f in arrow_schema() if f.name not in pf.schema_arrow.names]
    if missing:
        raise RecordError(f"Parquet columns missing: {', '.join(missing)}", path=name, line=0)
    return pf


def iter_parquet_records(path: str | os.PathLike[str], *, columns: Sequence[str] | None = None) -> Iterator[EpisodeRecord]:
    """Yield the records of a ``prefixmon.parquet/1`` file, each validated by pydantic.

    A row that is not a valid record raises a :class:`RecordError` naming the file and the
    row (1-based, as ``line``).
    """
    pf = _open(path)
    name = os.fspath(path)
    row_no = 0
    wanted = list(columns) if columns is not None else [f.name for f in arrow_schema()]
    for batch in pf.iter_batches(batch_size=BATCH_ROWS, columns=wanted):
        for row in batch.to_pylist():
            row_no += 1
            row["schema"] = SCHEMA
            row["labels"] = dict(row["labels"])
            try:
                yield RECORD_ADAPTER.validate_python(row, strict=False)  # typed columns: nothing left to coerce
            except ValidationError as e:
                first = e.errors()[0]
                loc = ".".join(str(x) for x in first["loc"]) or "record"
                raise RecordError(f"not a valid record: {loc}: {first['msg']}", path=name, line=row_no) from None
            except ValueError as e:
                raise RecordError(f"not a valid record: {e}", path=name, line=row_no) from None


def read_parquet_records(*paths: str | os.PathLike[str]) -> list[EpisodeRecord]:
    """Every record of one or more Parquet files (see :func:`iter_parquet_records`)."""
    return [r for p in paths for r in iter_parquet_records(p)]
