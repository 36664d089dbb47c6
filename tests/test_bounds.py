"""Resource bounds of one episode's tracked state (tracker issue 19): the information pool.

Every distinct string a tool result carried used to be kept, with each of its words, for the
rest of the episode (a 38 MB stream of results held 42 MB; random words, 375 MB). The pool is
now bounded by an estimate of the memory it holds (``MAX_POOL_BYTES``); beyond it whole strings
are kept as length + hash keys only, so an exact reuse still counts as seen, and past twice the
bound nothing new is kept. A pool that had to leave something out cannot say a value was never
seen, so the information check then passes what it does not find (undetermined is not a failure).
"""

from __future__ import annotations

import contextlib
import gc
import tracemalloc
from collections.abc import Iterator
from typing import Annotated, Any, Final

import pytest

from prefixmon import Cause, Grounded, Monitor, ToolBlocked, Toolset, TrackedState
from prefixmon.state import MAX_POOL_BYTES

BAD_ARGUMENT_VALUES: Final = pytest.mark.parametrize(
    ("value", "says"),
    [("[" * 5_000 + "]" * 5_000, "nested too deeply"), ("7" * 5_000, "")],  # the integer ended replays
    ids=["deep", "integer too long"],
)
"""Argument values a replay must turn into a schema failure of the call, with the reason it gives."""


@contextlib.contextmanager
def collections_watched(frames: int = 60) -> Iterator[list[BaseException]]:
    """Collect garbage at every allocation, each time calling Python ``frames`` deep, as a
    finalizer may: yields the errors those calls met (no room left on the stack)."""

    def nested(n: int) -> int:
        return n if n == 0 else nested(n - 1)

    failures: list[BaseException] = []

    def callback(phase: str, info: dict[str, int]) -> None:
        try:
            nested(frames)
        except RecursionError as e:
            failures.append(e)

    thresholds = gc.get_threshold()
    gc.callbacks.append(callback)
    gc.set_threshold(1, 1, 1)
    try:
        yield failures
    finally:
        gc.set_threshold(*thresholds)
        gc.callbacks.remove(callback)


def _result(i: int) -> dict[str, Any]:
    """A result with a distinct 1,000-character text of 100 distinct words, and a distinct id."""
    return {"id": f"row-{i}", "text": " ".join(f"w{i:07d}x{j:02d}" for j in range(100))}


def _fill(state: TrackedState, results: int, start: int = 0) -> None:
    for i in range(start, start + results):
        state.ingest(_result(i))


class TestInformationPoolBound:
    """The pool holds at most about twice MAX_POOL_BYTES, whatever the results."""

    def test_memory_is_bounded(self) -> None:
        """Six times the bound of distinct text: the pool holds less than three times the bound (it held all of it)."""
        per_result = 100 * (len("w0000000x00") + 80) + 1000 + 80  # what the pool spends on one result, verbatim
        results = 6 * MAX_POOL_BYTES // per_result
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            state = TrackedState()
            _fill(state, results)
            held = tracemalloc.get_traced_memory()[0] - before
        finally:
            tracemalloc.stop()
        assert held < 3 * MAX_POOL_BYTES, f"{held / 2**20:.1f} MiB held for {results} results"
        assert not state.pool_complete

    def test_exact_reuse_still_counts_as_seen(self) -> None:
        """A whole string that arrived past the bound is still seen; its words no longer are (they were not kept)."""
        per_result = 100 * (len("w0000000x00") + 80) + 1000 + 80
        state = TrackedState()
        over = MAX_POOL_BYTES // per_result + 10
        _fill(state, over)
        late = _result(over - 1)
        assert state.seen(late["text"]) and state.seen(_result(0)["text"]) and state.seen("w0000000x05")
        assert not state.seen(f"w{over - 1:07d}x05")  # a word of a late result: not kept
        assert state.pool_complete is False

    def test_small_episodes_keep_everything(self) -> None:
        """Below the bound nothing changes: every value and word is kept and the pool is complete."""
        state = TrackedState()
        _fill(state, 100)
        assert state.pool_complete and state.seen("w0000099x99") and state.seen("row-42")


class TestInformationCheckOnAFullPool:
    """What the bound means for verdicts."""

    def _tools(self) -> Toolset:
        tools = Toolset()

        @tools.tool
        def fetch(i: int) -> dict[str, Any]:
            return _result(i)

        @tools.tool
        def cite(word: Annotated[str, Grounded(block=True)]) -> str:
            return word

        return tools

    async def test_an_unseen_value_passes_once_the_pool_left_something_out(self) -> None:
        """Before the bound an invented value fails; after it, a word the pool could not keep is not called invented."""
        per_result = 100 * (len("w0000000x00") + 80) + 1000 + 80
        monitor = Monitor(self._tools(), policy="block")
        async with monitor.episode(task_id="t") as ep:
            await ep.call("fetch", {"i": 0})
            assert await ep.call("cite", {"word": "w0000000x07"}) == "w0000000x07"
            with pytest.raises(ToolBlocked):
                await ep.call("cite", {"word": "invented"})
            _fill(ep.state, MAX_POOL_BYTES // per_result + 10, start=1)
            late = MAX_POOL_BYTES // per_result + 20
            await ep.call("fetch", {"i": late})
            assert await ep.call("cite", {"word": f"w{late:07d}x07"}) == f"w{late:07d}x07"
        assert ep.record is not None
        assert [a.cause for a in ep.record.actions] == [None, None, Cause.INFORMATION, None, None]

    def test_plan_verification_agrees_on_a_full_pool(self) -> None:
        """verify_plan over a state whose pool left values out passes them too (one predicate for plans and runtime)."""
        from prefixmon import verify_plan

        per_result = 100 * (len("w0000000x00") + 80) + 1000 + 80
        tools = self._tools()
        state = TrackedState(exposed=["fetch", "cite"])
        assert not verify_plan(tools, [{"tool": "cite", "args": {"word": "invented"}}], state=state).approved
        _fill(state, 2 * MAX_POOL_BYTES // per_result)
        assert verify_plan(tools, [{"tool": "cite", "args": {"word": "invented"}}], state=state).approved


class TestDeeplyNestedJsonText:
    """A JSON text result nested deeper than pydantic's parser goes (about 200 levels): what is
    within the pool's walk depth is indexed, the rest marks the pool incomplete, and nothing
    recurses near the interpreter's limit (a finalizer running there fails: CI saw
    ``RecursionError`` in an event loop's ``__del__``)."""

    @pytest.mark.parametrize("depth", [500, 10_000])
    @pytest.mark.parametrize("as_bytes", [False, True], ids=["str", "bytes"])
    def test_shallow_values_are_bound_and_the_pool_is_incomplete(self, depth: int, as_bytes: bool) -> None:
        text = '{"id": "ord-1", "note": "caf\\u00e9 ok", "data": ' + "[" * depth + "7" + "]" * depth + "}"
        state = TrackedState()
        state.ingest(text.encode() if as_bytes else text, produce={"id": "order"})
        assert state.is_bound("order", "ord-1")
        assert state.seen("café ok")
        assert not state.pool_complete

    def test_collections_meanwhile_have_room(self) -> None:
        """A garbage collection during the parse (here: at every allocation) can still run Python."""
        text = '{"id": "ord-1", "data": ' + "{" + '"a": {' * 5_000 + "}" * 5_001 + "}"
        state = TrackedState()
        with collections_watched() as failures:
            state.ingest(text, produce={"id": "order"})
        assert failures == []
        assert state.is_bound("order", "ord-1") and not state.pool_complete

    def test_strings_holding_brackets_are_not_nesting(self) -> None:
        """Brackets and escaped quotes inside strings do not count as depth."""
        text = '{"id": "ord-1", "s": "' + '[{\\"' * 300 + '", "data": ' + "[" * 300 + "]" * 300 + "}"
        state = TrackedState()
        state.ingest(text, produce={"id": "order"})
        assert state.is_bound("order", "ord-1") and state.seen('[{"' * 300)

    def test_a_lone_surrogate_before_deep_nesting(self) -> None:
        """pydantic stops at the lone surrogate, json.loads would go on down: cut there too."""
        text = '{"id": "ord-1", "s": "\\ud800", "data": ' + "[" * 10_000 + "]" * 10_000 + "}"
        state = TrackedState()
        state.ingest(text, produce={"id": "order"})
        assert state.is_bound("order", "ord-1") and not state.pool_complete

    def test_rules_and_plans_read_deep_results_with_room(self) -> None:
        """What learned rules and plan placeholders read of a result: parsed the same way (as
        json would, cut below 400 levels), with a collection meanwhile able to run."""
        from prefixmon._internal.json_depth import loads

        deep = '{"id": "ord-1", "data": ' + "[" * 10_000 + "]" * 10_000 + "}"
        with collections_watched() as failures:
            value = loads(deep)
            surrogate = loads('{"s": "\\ud800"}')
        assert failures == []
        assert value["id"] == "ord-1" and surrogate == {"s": "\ud800"}
        level, node = 1, value["data"]
        while isinstance(node, list):
            level, node = level + 1, node[0]
        assert (level, node) == (400, None)
        with pytest.raises(ValueError):
            loads("[1] trailing")

    def test_deep_text_refused_in_other_words_is_still_cut(self) -> None:
        """Were pydantic's parser to word its refusal otherwise, deep text would still be parsed (cut)."""
        from prefixmon._internal.json_depth import loads_refused

        deep = '{"id": "ord-1", "data": ' + "[" * 10_000 + "]" * 10_000 + "}"
        value, cut = loads_refused(deep, "some other words", 64)
        assert value["id"] == "ord-1" and cut
