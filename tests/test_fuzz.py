"""Property-based fuzzing (hypothesis) of argument parsing, checking, result indexing and the record reader.

Properties: parsing any input returns a dict or a reason and never raises; every check returns
a consistent verdict; running any call under any policy either returns, raises ToolBlocked,
or raises the tool's own error, and always leaves a valid record; indexing any result never
raises; reading any bytes as a record file yields records and bad lines (or RecordError in
strict mode), never another exception, and never loses a good line.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from types import MappingProxyType
from typing import Annotated, Any

import anyio
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from prefixmon import (
    ActionRecord,
    BadLine,
    Cause,
    Decision,
    Grounded,
    Monitor,
    Outcome,
    RecordError,
    Ref,
    ToolBlocked,
    Toolset,
    TrackedState,
    iter_records,
)
from prefixmon._call import _parsed_by_json, parse_arguments
from prefixmon.analytics import columns_from_records, load_columns
from prefixmon.records import EpisodeRecord, build_record, dumps_record, loads_record, read_records
from prefixmon.state import MAX_POOL_BYTES, MAX_WALK_DEPTH

from .test_analytics_inputs import assert_same

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

json_scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)
result_scalars = json_scalars | st.sampled_from(
    ["#W123 and 2024-05-01", "$1,234.50", "007", "12", "4245201809", "a " * 1001, "#w123", "2024-05-01t08:00", "Mia"]
)
result_values = st.recursive(
    result_scalars,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.sampled_from(["id", "ids", "x"]) | st.text(max_size=4), inner, max_size=4)
    ),
    max_leaves=25,
)
"""Results with ids, numbers written as text, dates, long text, and keys that produce bindings."""
_PRODUCE = {"id": "id", "ids": "ids"}
arg_names = st.sampled_from(["text", "n", "person_id", "amount", "x", ""]) | st.text(max_size=6)
arg_dicts = st.dictionaries(arg_names, json_values, max_size=5)


def json_text(draw_value: Any) -> str:
    return json.dumps(draw_value, allow_nan=True)


raw_arguments = st.one_of(
    st.none(),
    arg_dicts,
    arg_dicts.map(json_text),
    json_values.map(json_text),  # valid JSON that may not be an object
    st.text(max_size=60),  # mostly invalid JSON
    st.binary(max_size=60),  # often invalid UTF-8
    arg_dicts.map(lambda d: json_text(d).encode("utf-8", "surrogatepass")),
    arg_dicts.map(json_text).map(lambda s: s[: len(s) // 2]),  # truncated JSON
)


def build_tools() -> Toolset:
    """Every rule kind, over both schema styles."""
    tools = Toolset()

    @tools.tool(produces="person_id")
    def search(text: str = "") -> list[dict[str, str]]:
        """Search."""
        return [{"person_id": "p-1", "name": text}]

    @tools.tool(requires=[lambda state, args: bool(state.facts.get("on")) or "service is off"], invalidates="person_id")
    def remove(person_id: Annotated[str, Ref("person_id")]) -> dict[str, str]:
        """Remove."""
        return {"removed": person_id}

    @tools.tool
    def pay(person_id: Annotated[str, Ref("person_id", user=True)], amount: Annotated[float, Grounded()]) -> str:
        """Pay."""
        return "paid"

    @tools.tool(effects=[lambda state, args, result: state.facts.__setitem__("on", True)])
    def switch_on() -> bool:
        """Turn the service on."""
        return True

    tools.add_schema(
        "schema_tool",
        {"type": "object", "properties": {"x": {"type": "integer", "minimum": 0}, "text": {"type": "string"}}, "required": ["x"]},
        func=lambda x, text="", **_extra: {"x": x},  # the schema allows other properties: so does the tool
        grounded=["text"],
    )

    @tools.tool
    def crash(n: int = 0) -> None:
        """The environment rejects everything."""
        raise RuntimeError(f"rejected {n}")

    return tools


TOOL_NAMES = ["search", "remove", "pay", "switch_on", "schema_tool", "crash", "missing", ""]


class TestParsing:
    """parse_arguments and the schema check on arbitrary input."""

    @FUZZ
    @given(raw=raw_arguments)
    def test_parse_returns_dict_or_reason(self, raw: Any) -> None:
        """Any input parses to a dict or to a non-empty reason string; nothing raises."""
        parsed = parse_arguments(raw)
        assert isinstance(parsed, (dict, str))
        if isinstance(parsed, str):
            assert parsed and len(parsed) < 300

    @FUZZ
    @given(value=json_values)
    def test_json_objects_round_trip(self, value: Any) -> None:
        """Valid JSON objects without NaN/inf parse to what json.loads gives."""
        assume(isinstance(value, dict))
        try:
            text = json.dumps(value, allow_nan=False)
        except ValueError:
            return
        assert parse_arguments(text) == json.loads(text)
        assert parse_arguments(text.encode()) == json.loads(text)

    @FUZZ
    @given(raw=raw_arguments.filter(lambda r: isinstance(r, str)) | json_values.map(lambda v: json.dumps({"a": v})))
    @example(raw='{"a": "\\ud800"}')  # a lone surrogate: json takes it, pydantic's parser does not
    @example(raw='{"a": NaN}')
    @example(raw="\ufeff{}")
    @example(raw="[" * 5000)
    def test_text_parses_as_json_parses_it(self, raw: str) -> None:
        """JSON text arguments (parsed by pydantic's parser) give what json gives, its reasons included."""
        expected = _parsed_by_json(raw) if raw and not raw.isspace() else {}
        assert parse_arguments(raw) == expected

    @FUZZ
    @given(name=st.sampled_from(TOOL_NAMES) | st.text(max_size=10), raw=raw_arguments, user=st.text(max_size=30))
    def test_every_check_gives_a_consistent_verdict(self, name: str, raw: Any, user: str) -> None:
        """Executable iff no failures; the primary cause is the first in tie-break order; args only when valid."""
        ep = Monitor(build_tools()).open_episode(task_id="fuzz")
        ep.user(user)
        v = ep.check(name, raw)
        assert v.executable == (not v.failures)
        if v.executable:
            assert isinstance(v.args, dict)
        else:
            causes = [f.cause for f in v.failures]
            assert causes == sorted(causes, key=list(Cause).index)
            assert v.cause is causes[0] and v.reason and v.code
            if v.cause is Cause.SCHEMA:
                assert v.args is None
        assert v.depth == 1 and v.tool == name


class TestCalls:
    """Whole episodes of arbitrary calls under every policy."""

    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(
        calls=st.lists(st.tuples(st.sampled_from(TOOL_NAMES), raw_arguments), min_size=0, max_size=8),
        policy=st.sampled_from(["observe", "block"]),
        failure_mode=st.sampled_from(["fail_open", "fail_closed"]),
    )
    def test_any_call_sequence_leaves_a_valid_record(self, calls: list[tuple[str, Any]], policy: str, failure_mode: Any) -> None:
        """Each call returns, is blocked, or re-raises the tool's error; the record is valid and consistent."""
        monitor = Monitor(build_tools(), policy=policy, failure_mode=failure_mode)
        outcomes: list[str] = []

        async def run() -> EpisodeRecord:
            async with monitor.episode(task_id="fuzz") as ep:
                ep.user("pay p-1 the 5 dollars")
                for name, raw in calls:
                    try:
                        await ep.call(name, raw)
                        outcomes.append("ran")
                    except ToolBlocked:
                        outcomes.append("blocked")
                    except RuntimeError as e:
                        assert "rejected" in str(e)
                        outcomes.append("rejected")
                    except TypeError:  # observe runs a call whose arguments do not fit the signature
                        assert policy == "observe"
                        outcomes.append("rejected")
            assert ep.record is not None
            return ep.record

        rec = anyio.run(run)
        assert loads_record(dumps_record(rec)) == rec
        assert rec.horizon == max(1, len(calls))
        if calls:
            assert [a.reached_environment for a in rec.actions] == [o != "blocked" for o in outcomes]
            for a, o in zip(rec.actions, outcomes, strict=True):
                if o == "rejected":
                    assert not a.executable
                if a.decision is Decision.BLOCK:
                    assert o == "blocked" and not a.executable
        assert monitor.stats.internal_errors == 0


class TestIndexing:
    """The information pool and reference bindings on arbitrary results."""

    @FUZZ
    @given(
        result=json_values | st.binary(max_size=30) | json_values.map(json_text),
        kinds=st.sampled_from([None, {"id": "id", "": "empty"}]),
    )
    def test_ingest_never_raises_and_finds_scalar_leaves(self, result: Any, kinds: Any) -> None:
        """Any result is indexed; every finite scalar string/int leaf is then 'seen'."""
        state = TrackedState()
        state.ingest(result, produce=kinds, tool="t")
        leaves: list[Any] = []

        def collect(obj: Any) -> None:
            if isinstance(obj, dict):
                for v in obj.values():
                    collect(v)
            elif isinstance(obj, list):
                for v in obj:
                    collect(v)
            elif isinstance(obj, (str, int)) and not isinstance(obj, bool):
                leaves.append(obj)

        shown = result
        if isinstance(result, (str, bytes)) and result[:1] in ("{", "[", b"{", b"["):
            with contextlib.suppress(ValueError):  # JSON text results are parsed and indexed as data
                shown = json.loads(result)
        collect(shown)
        for leaf in leaves:
            assert state.seen(leaf)

    @FUZZ
    @given(
        result=result_values,
        nesting=st.integers(0, 3) | st.integers(MAX_WALK_DEPTH - 3, MAX_WALK_DEPTH + 2),
        kinds=st.sampled_from([None, _PRODUCE]),
        room=st.none() | st.integers(0, 400),
        items=st.none() | st.integers(0, 40),
    )
    @example(
        result={"ids": ["a", 1, None, True, 2.5, ["b"]], "id": "c", "x": {"id": 3}},
        nesting=0,
        kinds=_PRODUCE,
        room=None,
        items=None,
    )
    @example(result={"ids": ["a", 1, None, True, 2.5, ["b"]]}, nesting=MAX_WALK_DEPTH - 1, kinds=_PRODUCE, room=None, items=None)
    @example(result={"ids": ["a", 1, 2, 3.5, "b c"], "n": 4}, nesting=0, kinds=_PRODUCE, room=170, items=None)
    @example(result={"x": [{"id": [1, {"id": 2}]}, 3], "id": "c"}, nesting=2, kinds=_PRODUCE, room=None, items=9)
    @example(
        result={"id": "#w123", "x": ["2024-05-01t08:00", "Mia", "mia", "a b", "x\ny"]},
        nesting=0,
        kinds=_PRODUCE,
        room=None,
        items=None,
    )
    @example(result="#W123 and 2024-05-01", nesting=0, kinds=_PRODUCE, room=None, items=None)  # a text answer's ids
    def test_json_shapes_are_indexed_as_any_mapping_or_sequence(
        self, result: Any, nesting: int, kinds: Any, room: int | None, items: int | None
    ) -> None:
        """The walk's inline paths for dicts, lists and JSON leaves index exactly what its general path does.

        The general path is the one every other Mapping, sequence and scalar takes; the same data
        as read-only mappings, list subclasses and str, int and float subclasses must leave the same pool, forms, recent numbers,
        bindings, memory estimate and completeness, at any depth up to and past MAX_WALK_DEPTH,
        when the pool reaches its memory bound on the way, and when the walk runs out of items
        (``items`` left of MAX_WALK_ITEMS, white-box: the walk's budget).
        """
        for _ in range(nesting):
            result = {"id": result, "n": 1.5, "ok": True} if nesting % 2 else [result, None, 7, "x"]
        fast, general = TrackedState(), TrackedState()
        if room is not None:  # a pool this close to its bound (white-box: its memory estimate)
            fast._pool_bytes = general._pool_bytes = MAX_POOL_BYTES - room
        if items is None:
            fast.ingest(result, produce=kinds, tool="t")
            general.ingest(_general(result), produce=kinds, tool="t")
            assert _indexed(fast) == _indexed(general)
        else:
            left, left_general = [items], [items]
            fast._walk(result, None, kinds or {}, "t", 0, left)
            general._walk(_general(result), None, kinds or {}, "t", 0, left_general)
            assert (_indexed(fast), left) == (_indexed(general), left_general)

    @FUZZ
    @given(result=result_values, kinds=st.sampled_from([None, _PRODUCE]))
    def test_json_text_is_indexed_as_the_data_it_holds(self, result: Any, kinds: Any) -> None:
        """A result given as JSON text is indexed as ``json.loads`` of it would be (pydantic's parser reads it)."""
        text = json.dumps({"result": result}, allow_nan=True)  # an object or array: JSON text is parsed
        parsed, data = TrackedState(), TrackedState()
        parsed.ingest(text, produce=kinds, tool="t")
        data.ingest(json.loads(text), produce=kinds, tool="t")
        assert _indexed(parsed) == _indexed(data)


class _List(list):  # type: ignore[type-arg]
    """A list the walk does not recognise by its exact type (nor its subclasses of str, int and float below)."""


class _Str(str):
    __slots__ = ()


class _Int(int):
    pass


class _Float(float):
    pass


def _general(value: Any) -> Any:
    """``value`` with every dict as a read-only mapping, every list, string and number as a subclass."""
    if isinstance(value, dict):
        return MappingProxyType({k: _general(v) for k, v in value.items()})
    if isinstance(value, list):
        return _List(_general(v) for v in value)
    t = type(value)
    return _Str(value) if t is str else _Int(value) if t is int else _Float(value) if t is float else value


def _indexed(state: TrackedState) -> tuple[Any, ...]:
    """Everything indexing a result changes in a state (white-box: the pool's private parts)."""
    bindings = {v: {k: (b.kind, b.depth, b.tool, b.current) for k, b in kinds.items()} for v, kinds in state._bindings.items()}
    forms = state._forms
    return (state._pool, forms.forms, list(forms.numbers), bindings, state._pool_bytes, state.pool_complete)


def record_strategy() -> st.SearchStrategy[EpisodeRecord]:
    """Consistent records built by build_record from arbitrary actions."""
    texts = st.text(max_size=12)

    @st.composite
    def make(draw: st.DrawFn) -> EpisodeRecord:
        n = draw(st.integers(min_value=0, max_value=5))
        actions = []
        for depth in range(1, n + 1):
            executable = draw(st.booleans())
            actions.append(
                ActionRecord(
                    depth=depth,
                    tool=draw(texts),
                    call_id=draw(st.none() | texts),
                    executable=executable,
                    cause=None if executable else draw(st.sampled_from(list(Cause))),
                    reason=None if executable else draw(texts),
                    decision=draw(st.sampled_from(list(Decision))),
                    reached_environment=draw(st.booleans()),
                    error=draw(st.none() | texts),
                    turn=draw(st.integers(0, 3)),
                )
            )
        start = datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=draw(st.integers(0, 10**6)))
        return build_record(
            episode_id=draw(texts),
            task_id=draw(texts),
            labels=draw(st.dictionaries(texts, texts, max_size=3)),
            actions=actions,
            outcome=draw(st.none() | st.sampled_from(list(Outcome))),
            started_at=start,
            ended_at=start + timedelta(seconds=1),
            allows_no_tool=draw(st.booleans()),
        )

    return make()


@contextlib.contextmanager
def _file_of(data: bytes) -> Iterator[str]:
    """The path of a temporary JSON Lines file holding ``data``."""
    fd, name = tempfile.mkstemp(suffix=".jsonl")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        yield name
    finally:
        os.unlink(name)


def _read(data: bytes, on_error: Any) -> tuple[list[EpisodeRecord], list[BadLine]]:
    with _file_of(data) as name:
        errors: list[BadLine] = []
        return list(iter_records(name, on_error=on_error, errors=errors)), errors


class TestRecordReader:
    """iter_records on arbitrary and corrupted files."""

    @FUZZ
    @given(records=st.lists(record_strategy(), max_size=4))
    def test_round_trip(self, records: list[EpisodeRecord]) -> None:
        """Written records read back equal, in order."""
        data = "".join(dumps_record(r) + "\n" for r in records).encode()
        got, errors = _read(data, "raise")
        assert got == records and errors == []

    @FUZZ
    @given(data=st.binary(max_size=400))
    def test_arbitrary_bytes(self, data: bytes) -> None:
        """Random bytes: skip mode never raises; strict mode raises only RecordError."""
        got, errors = _read(data, "skip")
        assert all(isinstance(r, EpisodeRecord) for r in got)
        lines = [ln for ln in data.split(b"\n") if ln.strip()]
        assert len(got) + len(errors) == len(lines)
        try:
            _read(data, "raise")
        except RecordError as e:
            assert e.path is not None and e.line is not None

    @FUZZ
    @given(
        records=st.lists(record_strategy(), min_size=1, max_size=4),
        where=st.integers(min_value=0),
        garbage=st.binary(min_size=1, max_size=8),
        mode=st.sampled_from(["truncate", "insert", "replace"]),
    )
    def test_corrupted_file_keeps_every_intact_line(
        self, records: list[EpisodeRecord], where: int, garbage: bytes, mode: str
    ) -> None:
        """A corrupted byte range damages at most the lines it touches; every other record is kept."""
        lines = [(dumps_record(r) + "\n").encode() for r in records]
        data = b"".join(lines)
        pos = where % len(data)
        if mode == "truncate":
            bad = data[:pos]
        elif mode == "insert":
            bad = data[:pos] + garbage + data[pos:]
        else:
            bad = data[:pos] + garbage + data[pos + len(garbage) :]
        got, errors = _read(bad, "skip")
        intact = [r for r, ln in zip(records, lines, strict=True) if ln in bad.split(b"\n") or ln[:-1] in bad.split(b"\n")]
        for r in intact:
            assert r in got
        assert len(errors) <= max(1, len(garbage) + 1)
        tail = bad.rsplit(b"\n", 1)[-1]
        if mode == "truncate" and tail.strip() and tail + b"\n" not in lines:  # cut inside a record
            assert errors and errors[-1].truncated
            assert len(got) == bad.count(b"\n")  # every finished line before it is kept


json_texts = (
    json_values.map(json.dumps)
    | st.integers(4290, 4310).map(lambda n: "9" * n)
    | st.integers(250, 450).map(lambda n: "[" * n + "]" * n)
)
"""JSON text: any JSON value (``json.dumps`` writes NaN and Infinity as JavaScript does), integers
around the 4,300-digit parse limit and nesting around the parsers' depth limits."""


class TestReadersAgree:
    """The fast column loader (``report``) reads exactly the lines and values ``read_records`` (``--validate``) reads."""

    @staticmethod
    def _both(data: bytes) -> None:
        with _file_of(data) as name:
            fast: list[BadLine] = []
            slow: list[BadLine] = []
            columns = load_columns(name, on_error="skip", errors=fast)
            assert_same(columns, columns_from_records(read_records(name, on_error="skip", errors=slow)))
            assert [(e.line, e.message) for e in fast] == [(e.line, e.message) for e in slow]

    def test_a_jsonl_file_that_starts_like_parquet(self) -> None:
        """Found by test_corrupted_bytes: ``PAR1`` inserted at the start made the fast reader take the file for Parquet."""
        self._both(b'PAR1{"schema": "prefixmon.episode/1"}\n')

    @FUZZ
    @given(
        records=st.lists(record_strategy(), min_size=1, max_size=3),
        where=st.integers(min_value=0),
        garbage=st.binary(min_size=1, max_size=8),
        mode=st.sampled_from(["insert", "replace"]),
    )
    def test_corrupted_bytes(self, records: list[EpisodeRecord], where: int, garbage: bytes, mode: str) -> None:
        """Bytes inserted or overwritten anywhere: the same good lines, the same bad ones."""
        data = b"".join((dumps_record(r) + "\n").encode() for r in records)
        pos = where % len(data)
        end = pos if mode == "insert" else pos + len(garbage)
        self._both(data[:pos] + garbage + data[end:])

    @FUZZ
    @given(
        records=st.lists(record_strategy(), min_size=1, max_size=3),
        where=st.integers(min_value=0),
        key=st.text(max_size=6),
        value=json_texts,
    )
    def test_an_added_field(self, records: list[EpisodeRecord], where: int, key: str, value: str) -> None:
        """A field added at the start of any object of a line (the record, an action, the first failure, the labels)."""
        data = b"".join((dumps_record(r) + "\n").encode() for r in records)
        objects = [i for i in range(len(data)) if data[i : i + 1] == b"{" and data[i + 1 : i + 2] == b'"']
        assume(objects)
        pos = objects[where % len(objects)] + 1
        self._both(data[:pos] + (json.dumps(key) + ":" + value + ",").encode() + data[pos:])
