"""Bad input never crashes the monitor: a clear verdict or error, and bounded memory.

Malformed JSON arguments, unknown tools, 10 MB payloads, 10,000-deep nesting, non-UTF-8
bytes, NaN and infinity, and results of unexpected types (objects, bytes, generators, cyclic
and huge structures), through the public API (``Episode.check`` / ``Episode.call``), with
memory measured by tracemalloc.
"""

from __future__ import annotations

import enum
import json
import tracemalloc
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from prefixmon import Cause, Decision, Monitor, ToolBlocked, Toolset, Verdict, read_records
from prefixmon.records import dumps_record
from prefixmon.state import MAX_WALK_DEPTH, MAX_WALK_ITEMS
from prefixmon.telemetry import Telemetry

from .test_bounds import collections_watched

MB = 1_000_000


def build_tools() -> Toolset:
    """Tools over every argument style: a pydantic signature, a JSON Schema, an untyped argument."""
    tools = Toolset()

    @tools.tool
    def echo(text: str, times: int = 1) -> str:
        """Echo a text."""
        return text * times

    @tools.tool
    def measure(value: float) -> float:
        """Return a float."""
        return value

    @tools.tool
    def anything(data: Any = None) -> Any:
        """Accept and return anything."""
        return data

    tools.add_schema(
        "lookup",
        {"type": "object", "properties": {"key": {"type": "string"}, "n": {"type": "number"}}, "required": ["key"]},
        func=lambda key, n=0: {"key": key},
        grounded=["n"],
    )
    return tools


@pytest.fixture
def monitor() -> Monitor:
    return Monitor(build_tools(), policy="block")


class CountingList(list[Any]):
    """A list that counts the elements handed out by iteration (the work of walking it)."""

    def __init__(self, items: Iterable[Any] = (), *, counter: list[int] | None = None) -> None:
        super().__init__(items)
        self.counter = counter if counter is not None else [0]

    @property
    def handed_out(self) -> int:
        """Elements handed out so far, by every list sharing this counter."""
        return self.counter[0]

    def __iter__(self) -> Iterator[Any]:
        for item in super().__iter__():
            self.counter[0] += 1
            yield item


class CountingDict(dict[str, Any]):
    """A dict (seen as a general Mapping) that counts the items handed out by ``items()``."""

    def __init__(self, counter: list[int], **items: Any) -> None:
        super().__init__(items)
        self.counter = counter

    def items(self) -> Iterator[tuple[str, Any]]:  # type: ignore[override]
        for item in super().items():
            self.counter[0] += 1
            yield item


class Traced:
    """tracemalloc around a block: peak and retained bytes above the starting point."""

    def __init__(self) -> None:
        self.peak = 0
        self.retained = 0

    def __enter__(self) -> Traced:
        tracemalloc.start()
        tracemalloc.reset_peak()
        self._base = tracemalloc.get_traced_memory()[0]
        return self

    def __exit__(self, *exc: object) -> None:
        current, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        self.peak, self.retained = peak - self._base, current - self._base


class TestMalformedArguments:
    """Arguments that do not parse are schema failures whose reason says what and where."""

    @pytest.mark.parametrize(
        ("raw", "expected"),
        [
            ('{"text": "hi"', "Expecting ',' delimiter"),
            ("{'text': 'hi'}", "Expecting property name enclosed in double quotes"),
            ('{"text": "hi"} trailing', "Extra data"),
            ('{"text": NaN}', "NaN is not valid JSON"),
            ('{"text": Infinity}', "Infinity is not valid JSON"),
            ('{"text": -Infinity}', "-Infinity is not valid JSON"),
            ('\ufeff{"text": "hi"}', "BOM"),
            ("[1, 2]", "must be a JSON object, got list"),
            ('"just text"', "must be a JSON object, got str"),
            ("null", "must be a JSON object, got NoneType"),
            ("1e400", "must be a JSON object, got float"),
            (b'{"text": "caf\xe9"}', "not valid UTF-8 (byte 0xe9 at position 13)"),
            (b"\xff\xfe{\x00}\x00", "not valid UTF-8 (byte 0xff at position 0)"),
            ([("text", "hi")], "must be a JSON object, got list"),
            (42, "must be a JSON object, got int"),
        ],
        ids=repr,
    )
    async def test_reason_names_tool_and_problem(self, monitor: Monitor, raw: Any, expected: str) -> None:
        """check() and call() agree: schema cause, invalid_json code, a pointed reason; the tool never runs."""
        async with monitor.episode(task_id="t") as ep:
            verdict = ep.check("echo", raw)
            assert (verdict.executable, verdict.cause, verdict.code) == (False, Cause.SCHEMA, "invalid_json")
            assert verdict.reason.startswith("echo: ") and expected in verdict.reason
            with pytest.raises(ToolBlocked) as info:
                await ep.call("echo", raw)
        assert expected in str(info.value)
        assert ep.record is not None and not ep.record.actions[0].reached_environment

    async def test_observe_cannot_run_unparseable_arguments(self) -> None:
        """Even the observe policy cannot run a call whose arguments do not parse: it is refused, not crashed."""
        monitor = Monitor(build_tools(), policy="observe")
        async with monitor.episode(task_id="t") as ep:
            with pytest.raises(ToolBlocked) as info:
                await ep.call("echo", "{not json")
            assert await ep.call("echo", {"text": "ok"}) == "ok"
        assert info.value.decision == "observe"
        assert ep.record is not None
        got = [(a.decision, a.reached_environment) for a in ep.record.actions]
        assert got == [(Decision.OBSERVE, False), (Decision.ALLOW, True)]

    @pytest.mark.parametrize("raw", ["", "   \n\t", None, b"", {}])
    async def test_empty_arguments_mean_no_arguments(self, monitor: Monitor, raw: Any) -> None:
        """Empty text, whitespace, None and empty bytes are an empty argument object (then schema-checked)."""
        async with monitor.episode(task_id="t") as ep:
            assert ep.check("anything", raw).executable
            missing = ep.check("echo", raw)
        assert missing.code == "invalid_arguments" and "missing required argument 'text'" in missing.reason

    async def test_wrong_types_and_unknown_arguments(self, monitor: Monitor) -> None:
        """Wrong types are reported per argument for both schema kinds; unknown names where the tool refuses them.

        A Python tool refuses an unknown keyword (calling it would raise); a JSON Schema tool
        accepts one unless its schema (or ``unknown="forbid"``) says otherwise.
        """
        async with monitor.episode(task_id="t") as ep:
            v1 = ep.check("echo", {"text": "x", "times": "many", "colour": "red"})
            v2 = ep.check("lookup", {"key": 5, "extra": True})
            v3 = ep.check("lookup", '{"key": "k", "n": "NaN"}')
        assert "argument 'times'" in v1.reason and "unknown argument 'colour'" in v1.reason
        assert "argument 'key'" in v2.reason and "extra" not in v2.reason
        assert v3.code == "invalid_arguments" and "n" in v3.reason

    @pytest.mark.parametrize("tool", ["echo", "lookup"])
    async def test_a_huge_argument_name_is_quoted_short(self, monitor: Monitor, tool: str) -> None:
        """An unknown argument named with 200,000 characters is quoted cut short, as values are (the reason is model-readable)."""
        name = "n" * 200_000
        async with monitor.episode(task_id="t") as ep:
            v = ep.check(tool, {"text": "x", name: 1} if tool == "echo" else {"key": 5, name: 1})
        assert v.code == "invalid_arguments" and len(v.reason) < 400, len(v.reason)
        assert ("unknown argument 'nnn" in v.reason) if tool == "echo" else ("argument 'key'" in v.reason)
        if tool == "echo":  # the located problem keeps the whole name
            assert [p.path for p in v.failures[0].problems if p.kind == "unknown"] == [name]

    async def test_duplicate_keys_take_the_last_value(self, monitor: Monitor) -> None:
        """Duplicate JSON keys are valid JSON; the last value wins, as in json.loads."""
        async with monitor.episode(task_id="t") as ep:
            assert await ep.call("echo", '{"text": "a", "text": "b"}') == "b"


class TestUnknownTools:
    """Calls to tools that do not exist get a clear schema verdict and a valid record."""

    async def test_unknown_tool_lists_what_exists(self, monitor: Monitor) -> None:
        """The reason names the missing tool and the available ones."""
        async with monitor.episode(task_id="t") as ep:
            v = ep.check("delete_everything", {})
        assert (v.cause, v.code) == (Cause.SCHEMA, "unknown_tool")
        assert v.reason == "there is no tool named 'delete_everything'; available tools: anything, echo, lookup, measure"

    async def test_many_tools_are_listed_with_a_cap(self) -> None:
        """With hundreds of tools the reason lists 20 and says how many more."""
        tools = Toolset()
        for i in range(300):
            tools.add_schema(f"tool_{i:03d}", None, func=lambda: None)
        async with Monitor(tools).episode(task_id="t") as ep:
            v = ep.check("nope", None)
        assert v.reason.endswith("tool_019 and 280 more") and len(v.reason) < 500

    @pytest.mark.parametrize(
        "name",
        ["", "x" * 1_000_000, "bad\udcffname", "line\nbreak\x00", "🙂" * 100],
        ids=["empty", "1MB", "surrogate", "control", "emoji"],
    )
    async def test_weird_names_give_bounded_reasons_and_writable_records(self, tmp_path: Path, name: str) -> None:
        """Any name, however long or unencodable, yields a short reason and a record that is written and read back."""
        path = tmp_path / "r.jsonl"
        monitor = Monitor(build_tools(), policy="block", sink=path)
        async with monitor.episode(task_id="t") as ep:
            with pytest.raises(ToolBlocked) as info:
                await ep.call(name, {"a": 1}, call_id=name[:50])
        assert len(info.value.verdict.reason) < 200
        assert monitor.stats.internal_errors == 0
        (rec,) = read_records(path)
        assert rec.actions[0].cause is Cause.SCHEMA and rec.fed == 1
        assert len(path.read_bytes()) < 2_200_000  # the name is stored once (twice as first failure), nothing more


class TestNumbers:
    """NaN and infinity never crash a check, a grounding lookup or a record."""

    @pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf"), 1e308, -0.0])
    async def test_special_floats_as_dict_arguments(self, monitor: Monitor, value: float) -> None:
        """A float argument accepts them (pydantic's default); a grounded one is never 'seen'."""
        async with monitor.episode(task_id="t") as ep:
            ep.user("n is 5")
            result = await ep.call("measure", {"value": value})
            assert result == value or (result != result and value != value)
            grounded = ep.check("lookup", {"key": "k", "n": value})
        assert grounded.cause is Cause.INFORMATION or value in (1e308, -0.0)
        assert ep.record is not None
        assert json.loads(dumps_record(ep.record))["horizon"] == 1

    async def test_special_floats_in_results_are_not_information(self, monitor: Monitor) -> None:
        """NaN/inf in a result are skipped by the information pool; finite values are kept."""
        async with monitor.episode(task_id="t") as ep:
            await ep.call("anything", {"data": [float("nan"), float("inf"), 7.0]})
            assert ep.check("lookup", {"key": "k", "n": 7}).executable
            assert not ep.check("lookup", {"key": "k", "n": float("inf")}).executable


class TestHugePayloads:
    """10 MB arguments and results: handled, with memory proportional to the payload."""

    async def test_10mb_dict_argument(self, monitor: Monitor) -> None:
        """A 10 MB string argument is validated without copying it."""
        big = "x" * (10 * MB)
        async with monitor.episode(task_id="t") as ep:
            with Traced() as mem:
                assert len(await ep.call("echo", {"text": big})) == 10 * MB
        assert mem.peak < 1 * MB, f"{mem.peak / MB:.1f} MB for a call whose argument the caller already holds"

    @pytest.mark.parametrize("as_bytes", [False, True])
    async def test_10mb_json_argument(self, monitor: Monitor, as_bytes: bool) -> None:
        """10 MB of JSON text is parsed once: peak memory about one (text) or two (bytes) payloads."""
        text = json.dumps({"text": "y" * (10 * MB)})
        raw: str | bytes = text.encode() if as_bytes else text
        async with monitor.episode(task_id="t") as ep:
            with Traced() as mem:
                assert len(await ep.call("echo", raw)) == 10 * MB
        assert mem.peak < (2.5 if as_bytes else 1.5) * 10 * MB

    async def test_10mb_malformed_json_reason_is_short(self, monitor: Monitor) -> None:
        """A 10 MB payload that fails to parse gives a short reason (position, size), not the payload."""
        raw = '{"text": "' + "z" * (10 * MB)
        async with monitor.episode(task_id="t") as ep:
            with Traced() as mem:
                v = ep.check("echo", raw)
        assert v.code == "invalid_json" and len(v.reason) < 300 and "10000010 characters" in v.reason
        assert mem.peak < 1 * MB

    async def test_10mb_result_and_error_message(self, tmp_path: Path) -> None:
        """A 10 MB result is indexed without copies; a 10 MB exception message is cut in the record."""
        tools = Toolset()

        @tools.tool
        def blob(n: int) -> str:
            return "r" * n

        @tools.tool
        def crash(n: int) -> None:
            raise RuntimeError("e" * n)

        path = tmp_path / "r.jsonl"
        monitor = Monitor(tools, sink=path)
        async with monitor.episode(task_id="t") as ep:
            with Traced() as mem:
                assert len(await ep.call("blob", {"n": 10 * MB})) == 10 * MB
            assert mem.peak < 10 * MB + 1 * MB  # the result itself, and no copy of it
            with pytest.raises(RuntimeError):
                await ep.call("crash", {"n": 10 * MB})
        (rec,) = read_records(path)
        error = rec.actions[1].error
        assert error is not None and error.endswith("more characters]") and len(error) < 2_200
        assert path.stat().st_size < 10_000

    async def test_huge_result_is_indexed_within_its_budget_and_bounded_memory(self, monitor: Monitor) -> None:
        """A result with 2,000,000 leaves: indexing stops at its node budget, whatever the machine's speed."""
        data = CountingList({"id": f"id-{i}", "n": i} for i in range(1_000_000))
        async with monitor.episode(task_id="t") as ep:
            with Traced() as mem:
                assert await ep.call("anything", {"data": data}) is data
            assert ep.check("lookup", {"key": "k", "n": 10}).executable  # early values are information
            # past the budget the value was not indexed: the pool cannot tell it was never seen, so it is not called invented
            assert not ep.state.pool_complete and ep.check("lookup", {"key": "k", "n": 999_999}).executable
        # Work is bounded by the node budget (each element is a container and two leaves), not by the input.
        assert 0 < data.handed_out <= MAX_WALK_ITEMS // 3 + 2
        assert mem.peak < 60 * MB

    async def test_many_large_calls_do_not_accumulate_copies(self, monitor: Monitor) -> None:
        """200 calls with 100 KB arguments each: retained memory stays far below what passed through."""
        async with monitor.episode(task_id="t") as ep:
            with Traced() as mem:
                for i in range(200):
                    await ep.call("echo", json.dumps({"text": str(i) * 100_000}))
        assert mem.peak < 60 * MB  # about 40 MB of argument text went through in all

    async def test_large_result_strings_are_not_kept_by_the_episode(self, monitor: Monitor) -> None:
        """30 results of 1 MB strings: the open episode keeps almost none of it; an exact reuse still counts as seen."""
        big = [f"{i}:" + "x" * MB for i in range(30)]
        async with monitor.episode(task_id="t") as ep:
            with Traced() as mem:
                for text in big:

                    def execute(args: dict[str, Any], text: str = text) -> dict[str, str]:
                        return {"body": text}

                    await ep.call("anything", {"data": None}, execute=execute)
            assert mem.retained < 1 * MB
            assert ep.state.seen(big[3]) and not ep.state.seen("3:" + "x" * (MB - 1))


class TestNesting:
    """10,000-deep nesting in arguments and results."""

    @staticmethod
    def deep_dict(depth: int) -> Any:
        d: Any = "leaf"
        for _ in range(depth):
            d = {"a": d}
        return d

    @pytest.mark.parametrize("opener", ["[", '{"a":'])
    async def test_deep_json_text(self, monitor: Monitor, opener: str) -> None:
        """Deeply nested JSON text is a schema failure ('nested too deeply'), not a RecursionError."""
        closer = "]" if opener == "[" else "}"
        raw = '{"data": ' + opener * 10_000 + "1" + closer * 10_000 + "}"
        async with monitor.episode(task_id="t") as ep:
            v = ep.check("anything", raw)
        assert (v.cause, v.code) == (Cause.SCHEMA, "invalid_json") and "nested too deeply" in v.reason

    async def test_deep_json_text_leaves_collections_room(self, monitor: Monitor) -> None:
        """Parsing refuses what is too deep before recursing near the interpreter's limit, where a
        garbage collection's finalizers would fail; text a little deeper than pydantic's parser
        goes still parses."""
        too_deep = '{"data": ' + "[" * 10_000 + "1" + "]" * 10_000 + "}"
        deep = '{"data": ' + "[" * 300 + "1" + "]" * 300 + "}"
        async with monitor.episode(task_id="t") as ep:
            with collections_watched() as failures:
                refused = ep.check("anything", too_deep)
                parsed = ep.check("anything", deep)
        assert failures == []
        assert "nested too deeply to parse (more than 400 levels)" in (refused.reason or "")
        assert parsed.executable

    async def test_deep_dict_argument_and_result(self, monitor: Monitor) -> None:
        """A 10,000-deep structure passes through as an untyped argument and result; indexing is depth-capped."""
        deep = self.deep_dict(10_000)
        async with monitor.episode(task_id="t") as ep:
            assert await ep.call("anything", {"data": deep}) is deep
            ep.inform(deep)
        assert ep.record is not None and ep.record.executable

    async def test_deep_structure_against_a_typed_schema(self, monitor: Monitor) -> None:
        """A deep structure where a string is expected is an argument error with a short reason."""
        async with monitor.episode(task_id="t") as ep:
            v = ep.check("echo", {"text": self.deep_dict(10_000)})
            w = ep.check("lookup", {"key": self.deep_dict(10_000)})
        assert v.code == w.code == "invalid_arguments"
        assert len(v.reason) < 300 and len(w.reason) < 300

    async def test_recursive_json_schema(self) -> None:
        """A self-referencing JSON Schema on deep input is checked as written, never a crash."""
        tools = Toolset()
        tools.add_schema(
            "tree",
            {
                "type": "object",
                "properties": {"node": {"$ref": "#/definitions/node"}},
                "definitions": {"node": {"type": "object", "properties": {"child": {"$ref": "#/definitions/node"}}}},
            },
            func=lambda node=None: "ok",
        )
        node: Any = {}
        bad: Any = {"child": 5}
        for _ in range(10_000):
            node = {"child": node}
            bad = {"child": bad}
        async with Monitor(tools).episode(task_id="t") as ep:
            fits = ep.check("tree", {"node": node})  # 10,000 levels the schema allows
            v = ep.check("tree", {"node": bad})  # ... with a number where an object belongs
            assert ep.check("tree", {"node": {"child": {"child": {}}}}).executable
        assert fits.executable
        assert v.cause is Cause.SCHEMA and v.code == "invalid_arguments" and len(v.reason) < 300


class Opaque:
    """An object the monitor knows nothing about."""

    def __repr__(self) -> str:
        raise RuntimeError("repr is broken too")


class BadModel:
    """Looks like a pydantic model, but dumping it fails."""

    def model_dump(self) -> Any:
        raise ValueError("cannot dump")


class TestResultTypes:
    """Whatever a tool returns, the agent gets it back unchanged and the monitor goes on."""

    @staticmethod
    def shared_dag(depth: int) -> list[Any]:
        node: list[Any] = []
        for _ in range(depth):
            node = [node, node]  # 2**depth paths, depth + 1 objects
        return node

    @staticmethod
    def cycle() -> dict[str, Any]:
        d: dict[str, Any] = {"id": "c-1"}
        d["self"] = d
        d["list"] = [d, d]
        return d

    @pytest.mark.parametrize(
        "make",
        [
            Opaque,
            BadModel,
            lambda: b"\xff\xfe raw bytes",
            lambda: b'{"id": "\xff"}',
            lambda: bytearray(b"x" * 100),
            lambda: {1, 2, 3},
            lambda: {("tuple", "key"): 1, 7: "int key", None: "none key"},
            lambda: Exception("an exception object returned, not raised"),
            lambda: '{"truncated json',
            lambda: "[" * 10_000,
            cycle.__func__,  # type: ignore[attr-defined]
            lambda: TestResultTypes.shared_dag(60),
        ],
        ids=[
            "object",
            "bad-model",
            "bytes",
            "json-bytes-bad-utf8",
            "bytearray",
            "set",
            "odd-keys",
            "exception",
            "bad-json-text",
            "deep-json-text",
            "cycle",
            "dag-2**60",
        ],
    )
    async def test_odd_results_come_back_unchanged(self, make: Any) -> None:
        """The result object is returned as is; at most a counted fault; the record is complete."""
        tools = Toolset()
        value = make()

        @tools.tool(produces="id")
        def odd(x: int) -> Any:
            return value

        monitor = Monitor(tools)
        async with monitor.episode(task_id="t") as ep:
            assert await ep.call("odd", {"x": 1}) is value
        assert ep.record is not None and ep.record.executable and ep.record.horizon == 1
        assert monitor.stats.internal_errors <= 1

    @pytest.mark.parametrize("shape", ["dag-2**60", "cycle"])
    async def test_shared_and_cyclic_results_are_walked_within_the_node_budget(self, shape: str) -> None:
        """A DAG with 2**60 paths, or a cycle, costs at most the node budget: counted, not timed."""
        visits = [0]
        value: Any
        if shape == "cycle":
            value = CountingDict(visits, id="c-1")
            value["self"] = value
        else:
            value = CountingList(counter=visits)
            for _ in range(60):
                value = CountingList([value, value], counter=visits)
        tools = Toolset()

        @tools.tool(produces="id")
        def odd(x: int) -> Any:
            return value

        monitor = Monitor(tools)
        async with monitor.episode(task_id="t") as ep:
            assert await ep.call("odd", {"x": 1}) is value
        assert 0 < visits[0] <= MAX_WALK_ITEMS + MAX_WALK_DEPTH  # at most one element past the budget per open level
        assert ep.record is not None and ep.record.executable

    async def test_generator_result_is_not_consumed(self) -> None:
        """A generator (or iterator) result reaches the agent unconsumed."""
        tools = Toolset()

        @tools.tool
        def stream(n: int) -> Iterator[int]:
            return (i * i for i in range(n))

        async with Monitor(tools).episode(task_id="t") as ep:
            gen = await ep.call("stream", {"n": 4})
        assert list(gen) == [0, 1, 4, 9]

    async def test_error_result_hook_on_odd_results(self) -> None:
        """An error_result hook that cannot handle the result type is a counted fault, not a crash."""
        tools = Toolset()

        @tools.tool(error_result=lambda r: r.get("error"))
        def odd(x: int) -> Any:
            return [1, 2, 3]

        monitor = Monitor(tools)
        async with monitor.episode(task_id="t") as ep:
            assert await ep.call("odd", {"x": 1}) == [1, 2, 3]
        assert monitor.stats.internal_errors == 1

    async def test_exception_with_unprintable_message_is_still_a_rejection(self) -> None:
        """A tool raising an exception whose __str__ raises is still recorded as rejected by the environment."""

        class Unprintable(Exception):
            def __str__(self) -> str:
                raise RuntimeError("no")

        tools = Toolset()

        @tools.tool
        def crash(x: int) -> None:
            raise Unprintable

        async with Monitor(tools).episode(task_id="t") as ep:
            with pytest.raises(Unprintable):
                await ep.call("crash", {"x": 1})
        assert ep.record is not None
        a = ep.record.actions[0]
        assert a.cause is Cause.STATE_CONSISTENCY
        assert a.error == "crash was rejected by the environment: Unprintable: <unprintable message>"


class TestContentCaptureOnOddValues:
    """Opt-in content capture must not break on values JSON cannot encode."""

    async def test_deep_value_with_capture_keeps_every_span(self) -> None:
        """With capture_content, a 10,000-deep argument still yields one finished span per call and no fault."""
        spans = InMemorySpanExporter()
        tp = TracerProvider()
        tp.add_span_processor(SimpleSpanProcessor(spans))
        monitor = Monitor(build_tools(), observers=[Telemetry(tracer_provider=tp, capture_content=True)])
        async with monitor.episode(task_id="t") as ep:
            await ep.call("anything", {"data": TestNesting.deep_dict(10_000)})
            await ep.call("anything", {"data": "fine"})
        names = [s.name for s in spans.get_finished_spans()]
        tp.shutdown()
        assert names.count("execute_tool anything") == 2
        assert monitor.stats.internal_errors == 0

    async def test_odd_values_with_capture_never_reach_the_agent(self) -> None:
        """Whatever capture does with odd values, the calls complete and the record is right."""
        spans = InMemorySpanExporter()
        tp = TracerProvider()
        tp.add_span_processor(SimpleSpanProcessor(spans))
        monitor = Monitor(build_tools(), observers=[Telemetry(tracer_provider=tp, capture_content=True)])
        values: list[Any] = [TestNesting.deep_dict(10_000), float("nan"), b"\xff", Opaque(), "bad\udcff"]
        async with monitor.episode(task_id="t") as ep:
            for v in values:
                assert await ep.call("anything", {"data": v}) is v
        tp.shutdown()
        assert ep.record is not None and ep.record.horizon == len(values) and ep.record.executable


def test_verdict_for_every_bad_input_is_a_verdict() -> None:
    """parse-level helpers return a Verdict object for every case above (no exception type leaks)."""
    tools = build_tools()
    monitor = Monitor(tools)
    ep = monitor.open_episode(task_id="t")
    for raw in ["{", b"\xff", "[]", None, 3.5, object(), '{"a": NaN}', "{" * 100_000]:
        assert isinstance(ep.check("anything", raw), Verdict)  # type: ignore[arg-type]


class _Mode(enum.Enum):
    FAST = object()


class _Kind(enum.StrEnum):
    A = "a"


class _Client:
    """An object a user might pass as a label by mistake: its repr carries a credential."""

    def __init__(self, key: str) -> None:
        self.key = key

    def __repr__(self) -> str:
        return f"_Client(api_key={self.key!r})"


class TestLabels:
    """Labels are a mapping of names to values; anything else is a TypeError that says so."""

    @pytest.mark.parametrize("labels", [["dataset"], "dataset=x", 3])
    async def test_episode_labels_that_are_not_a_mapping(self, monitor: Monitor, labels: Any) -> None:
        with pytest.raises(TypeError, match=r"labels must be a mapping of names to values \(a dict\), got "):
            async with monitor.episode(task_id="t", labels=labels):
                pass

    def test_monitor_labels_that_are_not_a_mapping(self) -> None:
        with pytest.raises(TypeError, match=r"labels must be a mapping of names to values \(a dict\), got list"):
            Monitor(build_tools(), labels=["dataset"])  # type: ignore[arg-type]

    async def test_labels_become_text(self, monitor: Monitor) -> None:
        """Numbers, bools, None, enum members and UUIDs are written as text; an enum of text as its value."""
        labels = {
            "run": 3,
            "temp": 0.5,
            "cached": True,
            "mode": _Mode.FAST,
            "kind": _Kind.A,
            "id": uuid.UUID(int=1),
            7: "x",
            "unset": None,
        }
        async with monitor.episode(task_id=_Kind.A, labels=labels) as ep:  # type: ignore[arg-type]
            pass
        assert ep.record is not None and ep.record.task_id == "a"
        assert ep.record.labels == {
            "run": "3",
            "temp": "0.5",
            "cached": "True",
            "mode": "_Mode.FAST",
            "kind": "a",
            "id": "00000000-0000-0000-0000-000000000001",
            "7": "x",
            "unset": "None",
        }

    @pytest.mark.parametrize("where", ["label", "label name", "monitor label", "task_id", "episode_id"])
    async def test_objects_are_refused_not_written_as_their_repr(self, monitor: Monitor, where: str) -> None:
        """A user object given as a label, task id or episode id is a TypeError naming where and its type:
        its str() is usually its repr, and that could carry anything (a client's API key) into spans and logs."""
        leaky = _Client("sk-live-SECRET")
        by_where: dict[str, dict[str, Any]] = {
            "label": {"labels": {"agent": leaky}},
            "label name": {"labels": {leaky: "x"}},
            "task_id": {"task_id": leaky},
            "episode_id": {"episode_id": leaky},
        }
        options = by_where.get(where, {})
        with pytest.raises(TypeError) as raised:
            if where == "monitor label":
                Monitor(build_tools(), labels={"agent": leaky})  # type: ignore[dict-item]
            else:
                async with monitor.episode(**{"task_id": "t", **options}):
                    pass
        message = str(raised.value)
        assert "_Client" in message and "SECRET" not in message
        assert {"label": "labels['agent']", "label name": "a label name", "monitor label": "labels['agent']"}.get(
            where, where
        ) in message

    async def test_odd_tool_names_and_call_ids_are_named_by_type(self) -> None:
        """A framework's odd tool name or call id is recorded as <TypeName>, never as its repr; numbers stay."""
        spans = InMemorySpanExporter()
        tp = TracerProvider()
        tp.add_span_processor(SimpleSpanProcessor(spans))
        monitor = Monitor(build_tools(), observers=[Telemetry(tracer_provider=tp)])
        async with monitor.episode(task_id="t") as ep:
            await ep.call("echo", {"text": "a"}, call_id=_Client("sk-live-SECRET"))  # type: ignore[arg-type]
            await ep.call("echo", {"text": "a"}, call_id=12)  # type: ignore[arg-type]
            with pytest.raises(ToolBlocked):
                await ep.call(_Client("sk-live-SECRET"), {})  # type: ignore[arg-type]
        tp.shutdown()
        assert ep.record is not None
        assert [(a.tool, a.call_id) for a in ep.record.actions] == [("echo", "<_Client>"), ("echo", "12"), ("<_Client>", None)]
        exported = repr(
            [(s.name, dict(s.attributes or {}), [dict(e.attributes or {}) for e in s.events]) for s in spans.get_finished_spans()]
        )
        assert "<_Client>" in exported and "SECRET" not in exported
