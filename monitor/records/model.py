"""Episode records: the versioned JSON Lines format that runtime, replay and analytics share.

One finished episode is one line. Records are frozen dataclasses in memory and are
validated by pydantic (one module-level ``TypeAdapter``) when read and written, so a file
that loads is a file the analytics can trust.
"""

from __future__ import annotations

import contextlib
import json
import os
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Final, Literal

from pydantic import ConfigDict, TypeAdapter, ValidationError
from pydantic_core import PydanticSerializationError

from .._internal.trusted import trusted_constructor
from ..exceptions import RecordError
from ..vocabulary import Cause, Decision, Outcome
from ._writer import DRAIN_TIMEOUT, MAX_QUEUE_BYTES, LineWriter, SinkStats, flush_writers
from .jsonlines import MAX_LINE_VALUES, ordinal, split_json_values

__all__ = (
    "MAX_HORIZON",
    "MAX_LINE_VALUES",
    "RECORD_ADAPTER",
    "SCHEMA",
    "TRUNCATED",
    "ActionRecord",
    "BadLine",
    "EpisodeRecord",
    "FirstFailure",
    "JsonlSink",
    "ProbeRecord",
    "RecordRedactor",
    "SinkStats",
    "Status",
    "bad_line",
    "build_record",
    "dumps_record",
    "iter_records",
    "loads_record",
    "merged_records",
    "read_records",
    "record_line",
    "trusted_action",
    "with_content",
    "write_records",
)


SCHEMA: Final = "prefixmon.episode/1"
"""The value of every record's ``schema`` field."""
_STRICT: Final = ConfigDict(strict=True)
"""Records are read strictly (no ``"3"`` for 3, no ``1`` for true): every reader, the fast
column loader included, accepts exactly the same lines."""

Status = Literal["finished", "error", "cancelled"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ActionRecord:
    """One action slot of an episode, as the agent emitted it."""

    __pydantic_config__ = _STRICT

    depth: int
    """1-based position in the episode."""
    tool: str | None
    """Tool name; ``None`` for the terminal no-tool slot of an episode without calls."""
    call_id: str | None = None
    """The framework's call id (``gen_ai.tool.call.id``)."""
    executable: bool
    """Whether the call was executable in the state induced by the earlier actions."""
    cause: Cause | None = None
    """Primary cause when not executable."""
    reason: str | None = None
    """Model-readable reason when not executable."""
    decision: Decision = Decision.ALLOW
    """What the monitor did with the call."""
    reached_environment: bool = False
    """Whether the call as emitted actually ran (``False`` when an edited or replacement call ran
    instead, see :attr:`replacement`), so that ``invalid_reached_environment`` means what it says."""
    error: str | None = None
    """The environment's error (exception or error result), if it rejected the call."""
    turn: int = 0
    """0-based turn index (multi-turn benchmarks, conversations)."""
    replacement: str | None = None
    """Name of the tool that ran instead (replan or edit), if any."""
    plan_step: int | None = None
    """Index of the approved-plan step this call matched, when the episode carries a plan."""
    deviation: str | None = None
    """How the call deviated from the approved plan, when it did."""
    code: str | None = None
    """The primary failure's code when not executable (``unbound_reference``, ``precondition:after``,
    ``duplicate_call``...): what tells a finding that does not block (a duplicate or conflict in a
    batch) from a refusal of the same cause."""
    arguments: str | None = None
    """The call's arguments as compact JSON text, redacted and size-capped: recorded only with
    ``Monitor(record_content=True)`` (else ``None``, and left out of the record's JSON)."""
    result: str | None = None
    """The tool's result as text, redacted and size-capped: recorded only with
    ``Monitor(record_content=True)``, for a call that returned (one that raised has its
    exception in :attr:`error`); else ``None``, and left out of the record's JSON."""

    def __post_init__(self) -> None:
        if self.depth < 1:
            raise ValueError(f"depth must be >= 1, got {self.depth}")
        if self.executable and self.cause is not None:
            raise ValueError(f"action at depth {self.depth} is executable but has cause {self.cause}")
        if not self.executable and self.cause is None:
            raise ValueError(f"action at depth {self.depth} is not executable but has no cause")


def with_content(action: ActionRecord, arguments: str | None, result: str | None) -> ActionRecord:
    """``action`` with its content (:attr:`ActionRecord.arguments` and ``result``), where there is some (internal)."""
    if arguments is not None:
        object.__setattr__(action, "arguments", arguments)
    if result is not None:
        object.__setattr__(action, "result", result)
    return action


trusted_action: Final = trusted_constructor(
    ActionRecord,
    (
        "depth", "tool", "call_id", "executable", "cause", "reason", "decision",
        "reached_environment", "error", "turn", "replacement", "plan_step", "deviation", "code",
        "arguments", "result",
    ),
    defaults={"plan_step": None, "deviation": None, "code": None, "arguments": None, "result": None},
)  # fmt: skip
"""An :class:`ActionRecord` from values the monitor derived itself (internal): without the
frozen ``__init__`` and ``__post_init__``, which cost about twice as much, once per call when
observers are on and once per action when an episode closes. The caller guarantees what
``__post_init__`` checks (depth >= 1, a cause exactly when not executable); records read
from outside are always validated."""


MAX_HORIZON: Final = 100_000
"""The largest horizon a record may claim without listing its actions: a bare number above
it is rejected as implausible (it would make every per-depth curve of a report that long,
from a line of a few bytes). Longer episodes are recorded and read with their actions."""


@dataclass(frozen=True, slots=True, kw_only=True)
class FirstFailure:
    """The first non-executable action of an episode."""

    __pydantic_config__ = _STRICT

    depth: int
    tool: str | None
    cause: Cause
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ProbeRecord:
    """A read-only lookup the monitor made itself before a call (never an agent action)."""

    __pydantic_config__ = _STRICT

    depth: int
    """Depth of the call the probe was made for."""
    tool: str
    """The read tool it called."""
    object: str
    """The kind of object it looked up."""
    ok: bool
    """Whether the environment answered (and the object could be observed)."""
    error: str | None = None
    """Why it did not: the environment's error, a timeout, no budget left."""


@dataclass(frozen=True, slots=True, kw_only=True)
class EpisodeRecord:
    """A finished episode (DESIGN §6). ``fed == horizon + 1`` iff fully executable."""

    __pydantic_config__ = _STRICT

    schema: Literal["prefixmon.episode/1"] = SCHEMA
    episode_id: str
    task_id: str
    labels: dict[str, str] = field(default_factory=dict)
    horizon: int
    fed: int
    executable: bool
    outcome: Outcome | None = None
    first_failure: FirstFailure | None = None
    actions: list[ActionRecord] = field(default_factory=list)
    started_at: datetime
    ended_at: datetime
    status: Status = "finished"
    """``finished`` normally, ``error`` when the agent body raised, ``cancelled`` when cancelled."""
    error: str | None = None
    """The agent body's exception, when ``status == "error"``."""
    invalid_reached_environment: bool = False
    """Whether any non-executable call actually ran against the environment."""
    allows_no_tool: bool = False
    """Whether the task may be finished without any tool call."""
    probes: list[ProbeRecord] = field(default_factory=list)
    """Lookups the monitor made itself (spec-file probes); they are not actions and never count in T or FED."""

    def __post_init__(self) -> None:
        where = f"(episode {self.episode_id!r})"
        if self.horizon < 1:
            raise ValueError(f"horizon: must be >= 1, got {self.horizon} {where}")
        if self.horizon > MAX_HORIZON and len(self.actions) != self.horizon:
            raise ValueError(f"horizon: above {MAX_HORIZON:,} ({self.horizon}) it must come with its actions {where}")
        if not 1 <= self.fed <= self.horizon + 1:
            raise ValueError(f"fed {self.fed} outside 1..horizon+1 ({self.horizon + 1}) {where}")
        if self.executable != (self.fed == self.horizon + 1):
            raise ValueError(f"executable: {self.executable} but fed={self.fed}, horizon={self.horizon} {where}")
        if self.executable != (self.first_failure is None):
            raise ValueError(f"first_failure: must be null exactly when executable {where}")
        if self.first_failure is not None and self.first_failure.depth != self.fed:
            raise ValueError(f"first_failure.depth: {self.first_failure.depth} != fed {self.fed} {where}")
        if self.actions:
            if len(self.actions) != self.horizon:
                raise ValueError(f"actions: {len(self.actions)} actions but horizon {self.horizon} {where}")
            depth = next((i for i, a in enumerate(self.actions, 1) if a.depth != i), None)
            if depth is not None:
                raise ValueError(f"actions: action {depth} has depth {self.actions[depth - 1].depth} {where}")
            first = next((a.depth for a in self.actions if not a.executable), self.horizon + 1)
            if first != self.fed:
                raise ValueError(f"fed {self.fed} but the first non-executable action is at depth {first} {where}")

    @property
    def success(self) -> bool:
        """Y: 1 only for outcome ``success``."""
        return self.outcome is Outcome.SUCCESS


RECORD_ADAPTER: Final[TypeAdapter[EpisodeRecord]] = TypeAdapter(EpisodeRecord)
"""Validates and serialises records; the one boundary between records and the outside."""


RecordRedactor = Callable[[EpisodeRecord], EpisodeRecord]
"""``(record) -> record``: what a sink writes instead of ``record`` (see ``JsonlSink(redact=...)``)."""


_RECORD_FIELDS: Final = (
    "schema", "episode_id", "task_id", "labels", "horizon", "fed", "executable", "outcome", "first_failure",
    "actions", "started_at", "ended_at", "status", "error", "invalid_reached_environment", "allows_no_tool", "probes",
)  # fmt: skip
_trusted_record: Final = trusted_constructor(EpisodeRecord, _RECORD_FIELDS)
"""An :class:`EpisodeRecord` whose derived fields :func:`build_record` computed itself (internal)."""
_trusted_failure: Final = trusted_constructor(FirstFailure, ("depth", "tool", "cause", "reason"))
_NO_TOOL_OK: Final = ActionRecord(depth=1, tool=None, executable=True)
_NO_TOOL_MISSING: Final = ActionRecord(
    depth=1,
    tool=None,
    executable=False,
    cause=Cause.PRECONDITION,
    reason="the episode ended without any tool call, but the task requires one",
)


def build_record(
    *,
    episode_id: str,
    task_id: str,
    labels: Mapping[str, str],
    actions: list[ActionRecord],
    outcome: Outcome | None,
    started_at: datetime,
    ended_at: datetime,
    status: Status = "finished",
    error: str | None = None,
    allows_no_tool: bool = False,
    probes: list[ProbeRecord] | None = None,
) -> EpisodeRecord:
    """Derive horizon, FED, executability and first failure from the actions.

    An empty action list becomes the terminal no-tool slot (T = 1), executable only when
    ``allows_no_tool``.

    The derived fields are consistent by construction, so when the actions are numbered
    1..T the record is built without re-checking them (every episode closes through here);
    otherwise the validating constructor reports what is wrong.
    """
    if not actions:
        actions = [_NO_TOOL_OK if allows_no_tool else _NO_TOOL_MISSING]
    first: ActionRecord | None = None
    reached_invalid = False
    in_order = True
    for depth, a in enumerate(actions, 1):
        if a.depth != depth:
            in_order = False
        if not a.executable:
            if first is None:
                first = a
            if a.reached_environment:
                reached_invalid = True
    horizon = len(actions)
    failure = (
        None if first is None else _trusted_failure(first.depth, first.tool, first.cause or Cause.SCHEMA, first.reason or "")
    )
    fed = horizon + 1 if first is None else first.depth
    build = _trusted_record if in_order else _record_checked
    return build(
        SCHEMA,
        episode_id,
        task_id,
        dict(labels),
        horizon,
        fed,
        first is None,
        outcome,
        failure,
        actions,
        started_at,
        ended_at,
        status,
        error,
        reached_invalid,
        allows_no_tool,
        list(probes) if probes else [],
    )


def _record_checked(*values: Any) -> EpisodeRecord:
    """:class:`EpisodeRecord` through its validating constructor (positional, as ``_trusted_record`` takes them)."""
    return EpisodeRecord(**dict(zip(_RECORD_FIELDS, values, strict=True)))


def dumps_record(record: EpisodeRecord) -> str:
    """One record as one JSON line (no trailing newline).

    Text that cannot be encoded as UTF-8 (lone surrogates in a tool name or an exception
    message, say) is written with backslash escapes, so that the record is still written.
    """
    return record_line(record)[:-1].decode()


try:  # the analytics extra installs msgspec: it writes the same bytes as pydantic, about 3.5x faster
    import msgspec as _msgspec
except ImportError:  # pragma: no cover - depends on the environment
    _fast_encode: Any = None
else:
    _fast_encode = _msgspec.json.Encoder().encode


def record_line(record: EpisodeRecord) -> bytes:
    """One record as one UTF-8 JSON line, newline included: what a JSON Lines sink writes.

    The bytes are those of ``RECORD_ADAPTER.dump_json`` without the ``arguments`` and ``result`` of
    actions that have none (tests/test_records.py checks they are equal); with msgspec installed
    they are made by its encoder, which every episode with a sink pays for: 1.5 µs against 5.5 µs
    for a one-call record (benchmarks/bench_sink.py).
    """
    if _fast_encode is not None:
        try:
            line: bytes = _fast_encode(record)
        except Exception:  # lone surrogates and the like: pydantic's path handles them below
            pass
        else:
            return _without_null_content(line, len(record.actions)) + b"\n"
    try:
        line = RECORD_ADAPTER.dump_json(record, exclude_none=False)
    except PydanticSerializationError:
        data = _scrub(RECORD_ADAPTER.dump_python(record, mode="json", exclude_none=False))
        line = json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode()
    return _without_null_content(line, len(record.actions)) + b"\n"


_NO_CONTENT: Final = b',"arguments":null,"result":null}'
_NO_RESULT: Final = b',"result":null}'
_NO_ARGUMENTS: Final = b',"arguments":null,'


def _without_null_content(line: bytes, actions: int) -> bytes:
    """A record line without the actions' ``arguments`` and ``result`` where they are ``null`` (the last two
    fields of an action, written compactly by every encoder here): a record without content is written as
    before they existed.

    Only an action object can hold these keys with ``null`` (labels hold text, and a quote inside a
    string is escaped), so the text is cut safely; the two rarer cuts are made only when some
    action has content.
    """
    cut = line.replace(_NO_CONTENT, b"}")
    if len(line) - len(cut) == actions * (len(_NO_CONTENT) - 1):
        return cut
    return cut.replace(_NO_RESULT, b"}").replace(_NO_ARGUMENTS, b",")


def _scrub(obj: Any) -> Any:
    """Replace what UTF-8 cannot encode by backslash escapes, throughout JSON-ready data."""
    if isinstance(obj, str):
        try:
            obj.encode("utf-8")
        except UnicodeEncodeError:
            return obj.encode("utf-8", "backslashreplace").decode("utf-8")
        return obj
    if isinstance(obj, dict):
        return {_scrub(k): _scrub(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_scrub(v) for v in obj]
    return obj


def loads_record(line: str | bytes, *, path: str | None = None, line_no: int | None = None) -> EpisodeRecord:
    """Parse and validate one JSON line; a UTF-8 byte order mark before it is dropped.

    Raises:
        RecordError: the line is not valid JSON or not a valid ``prefixmon.episode/1`` record.
    """
    # a BOM: an editor saved the file with one (or files with one were concatenated); every
    # reader hands such a line here, so all of them accept it, with line numbers unchanged
    line = line.removeprefix(BOM) if isinstance(line, bytes) else line.removeprefix("\ufeff")
    try:
        return RECORD_ADAPTER.validate_json(line)
    except ValidationError as e:
        first = e.errors(include_url=False)[0]
        loc = ".".join(str(p) for p in first["loc"])
        msg = first["msg"].removeprefix("Value error, ")  # the record's own checks name their field
        kind = _NOT_JSON if first["type"] == "json_invalid" else _NOT_RECORD
        where = f"{loc}: " if loc else ("" if first["type"] == "value_error" else "record: ")
        count = e.error_count()
        raise RecordError(
            f"{kind}: {where}{msg}" + (f" ({count} errors)" if count > 1 else ""), path=path, line=line_no
        ) from None


_NOT_JSON: Final = "not valid JSON"
_NOT_RECORD: Final = "not a valid record"


def merged_records(line: str | bytes, error: RecordError) -> list[EpisodeRecord]:
    """The records of a line :func:`loads_record` refused with ``error``, when the line is two
    or more whole records back to back (a lost newline: ``cat a.jsonl b.jsonl`` when
    ``a.jsonl`` lacks its final newline), in order.

    Only a line that is not valid JSON is looked at again, so a good line never gets here and
    a single bad record costs nothing more. A line is split into at most
    :data:`MAX_LINE_VALUES` values.

    Raises:
        RecordError: ``error`` itself when the line is not several whole JSON values; when it
            is but one of them is not a record, a message that says so (which one and why).
    """
    message = str(error)
    if error.path is not None and error.line is not None:
        message = message.removeprefix(f"{error.path}:{error.line}: ")
    values = split_json_values(line) if message.startswith(_NOT_JSON) else None
    if values is None:
        raise error
    records = []
    for k, value in enumerate(values, 1):
        try:
            records.append(loads_record(value))
        except RecordError as e:
            why = str(e).removeprefix(f"{_NOT_RECORD}: ")
            raise RecordError(
                f"{len(values)} JSON values on one line (a lost newline?); the {ordinal(k)} is not a record: {why}"
            ) from None
    return records


BOM: Final = b"\xef\xbb\xbf"
"""The UTF-8 byte order mark some editors put at the start of a file; dropped at the start of a record line."""
TRUNCATED: Final = "truncated last line (the writer stopped mid-record)"
"""The message of an unterminated last line that is not a whole record."""


@dataclass(frozen=True, slots=True, kw_only=True)
class BadLine:
    """A line the reader skipped, with where and why."""

    path: str
    line: int
    message: str
    truncated: bool = False
    """True for an unterminated last line (a writer was killed mid-write)."""


def iter_records(
    path: str | os.PathLike[str],
    *,
    on_error: Literal["raise", "skip"] = "raise",
    errors: list[BadLine] | None = None,
    lines: Iterable[bytes] | None = None,
) -> Iterator[EpisodeRecord]:
    """Yield the records of one JSON Lines file.

    Args:
        path: the file.
        on_error: ``"raise"`` stops at the first bad line with a :class:`RecordError`;
            ``"skip"`` skips it and appends a :class:`BadLine` to ``errors``.
        errors: where skipped lines are reported.
        lines: the file's lines when it is open already (a pipe can be read only once).

    A UTF-8 byte order mark at the start of the file is dropped (see :func:`loads_record`).
    A line of several whole records back to back (a lost newline) gives each of them, in
    order (see :func:`merged_records`); if one of them is not a record, the line is one bad line.

    An unterminated last line that is not a whole record (a writer killed mid-write) is a
    bad line like any other: it stops the read under ``"raise"`` and is reported as
    truncated under ``"skip"``; every finished line before it is kept.
    """
    name = os.fspath(path)
    with contextlib.ExitStack() as stack:
        if lines is None:
            flush_writers(name)  # records this process queued for the file are in it
            lines = stack.enter_context(open(name, "rb"))
        line_no = 0
        for raw in lines:
            line_no += 1
            if not raw.strip():
                continue
            try:
                record = loads_record(raw)
            except RecordError as e:
                try:
                    merged = merged_records(raw, e)
                except RecordError as bad:
                    bad_line(raw, bad, name, line_no, on_error, errors)
                    continue
                yield from merged
                continue
            yield record


def bad_line(raw: bytes, error: RecordError, path: str, line_no: int, on_error: str, errors: list[BadLine] | None) -> None:
    """A line that is not a record: raised (``on_error="raise"``) or appended to ``errors``.

    A line without its newline is reported as :data:`TRUNCATED` (a writer stopped mid-record).
    """
    truncated = not raw.endswith(b"\n")
    message = TRUNCATED if truncated else str(error)
    if on_error == "raise":
        raise RecordError(message, path=path, line=line_no) from None
    if errors is not None:
        errors.append(BadLine(path=path, line=line_no, message=message, truncated=truncated))


def read_records(
    *paths: str | os.PathLike[str],
    on_error: Literal["raise", "skip"] = "raise",
    errors: list[BadLine] | None = None,
) -> list[EpisodeRecord]:
    """Read every record of one or more JSON Lines files (see :func:`iter_records`)."""
    return [r for p in paths for r in iter_records(p, on_error=on_error, errors=errors)]


class JsonlSink:
    """Appends finished episodes to a JSON Lines file, one line each, from one writer thread.

    Calling the sink serialises the record and hands the line to a bounded queue; it never
    waits on the disk. One long-lived daemon thread per sink keeps the file open and appends
    whatever is queued in one write, usually within a millisecond; a crash or SIGKILL after
    that loses nothing. Every record starts on a fresh line even after a write was cut
    short, a rotated file is reopened, and failed writes are counted, logged and retried.
    Queued records are written when the sink is closed, at interpreter exit and before
    prefixmon's readers read the file in the same process. The full policy is in
    ``docs/reliability.md``.

    Args:
        path: the file (created with its folders; appended to when it exists).
        fsync: also ``fsync`` after every batch (survives power loss; one disk flush per
            batch, not per record).
        max_queue_bytes: bound of the lines waiting to be written; a record beyond it is
            dropped and counted (``stats.dropped``).
        drain_timeout: seconds :meth:`close` and interpreter exit wait for queued records.
        redact: ``(record) -> record`` applied before the record is serialised, in the
            episode's task (e.g. :func:`prefixmon.records.redaction.record_redactor`). A hook that
            raises or returns something else loses the record (counted and logged by the
            monitor); the unredacted record is never written.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        fsync: bool = False,
        max_queue_bytes: int = MAX_QUEUE_BYTES,
        drain_timeout: float = DRAIN_TIMEOUT,
        redact: RecordRedactor | None = None,
    ) -> None:
        if redact is not None and not callable(redact):
            raise TypeError(f"redact must be callable, got {type(redact).__name__}")
        self.path = Path(path)
        self.redact = redact
        self._writer = LineWriter.acquire(
            os.fspath(self.path), fsync=fsync, max_queue_bytes=max_queue_bytes, drain_timeout=drain_timeout
        )
        self._closer = weakref.finalize(self, self._writer.release_later)
        self._closer.atexit = False  # the writer module drains and closes every writer at exit

    def __call__(self, record: EpisodeRecord) -> None:
        """Queue ``record`` (see :meth:`submit`)."""
        self.submit(record)

    def submit(self, record: EpisodeRecord) -> bool:
        """Redact and serialise ``record`` and queue its line; ``False`` when it was dropped (queue full, closed).

        Raises:
            TypeError: the ``redact`` hook returned something other than an :class:`EpisodeRecord`.
            Exception: whatever the ``redact`` hook raised.
        """
        if self.redact is not None:
            redacted = self.redact(record)
            if not isinstance(redacted, EpisodeRecord):
                raise TypeError(f"the sink's redact hook returned {type(redacted).__name__}, not an EpisodeRecord")
            record = redacted
        return self._writer.put(record_line(record))

    def flush(self, timeout: float | None = None) -> bool:
        """Block until every record queued so far is in the file; ``False`` on timeout."""
        return self._writer.flush(timeout)

    def close(self, timeout: float | None = None) -> bool:
        """Write what is queued (at most ``timeout`` seconds, default ``drain_timeout``) and close the file.

        Returns whether every accepted record was written. Later records are dropped. Sinks
        of the same file in one process share one writer; the last one to close closes it.
        """
        if self._closer.detach() is None:  # closed before
            return self._writer.stats.lost == 0
        return self._writer.release(timeout)

    @property
    def failing(self) -> bool:
        """Whether the writer cannot write now (its last open or write failed, until one succeeds)."""
        return self._writer.failing

    @property
    def stats(self) -> SinkStats:
        """Records accepted, written, dropped and lost, and write errors."""
        return self._writer.stats

    @property
    def last_error(self) -> OSError | None:
        """The most recent failed open, write or sync."""
        return self._writer.last_error

    def __enter__(self) -> JsonlSink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"JsonlSink({str(self.path)!r})"


def write_records(path: str | os.PathLike[str], records: Iterable[EpisodeRecord]) -> int:
    """Write records to a new JSON Lines file; returns how many were written."""
    n = 0
    with open(path, "wb") as f:
        for r in records:
            f.write(record_line(r))
            n += 1
    return n
