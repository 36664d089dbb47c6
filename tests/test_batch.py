"""Several calls of one assistant message judged as one batch (:mod:`prefixmon.batch`)."""

from __future__ import annotations

import json
from typing import Any

from prefixmon import Cause, Decision, Monitor, PendingCall, Policy, ToolBlocked, ToolCall, Toolset
from prefixmon.adapters.transcripts import replay_messages
from prefixmon.analytics.scoring import score_records
from prefixmon.batch import CONFLICT, DUPLICATE, SIBLING


def _tools() -> Toolset:
    tools = Toolset()
    tools.add_schema("search", {"type": "object", "properties": {"name": {"type": "string"}}}, produces="person_id")
    tools.add_schema("lookup", {"type": "object", "properties": {"name": {"type": "string"}}}, metadata={"read_only": True})
    tools.add_schema(
        "remove",
        {"type": "object", "properties": {"person_id": {"type": "string"}}},
        refs={"person_id": "person_id"},
        invalidates="person_id",
    )
    tools.add_schema("pay", {"type": "object", "properties": {"to": {"type": "string"}, "amount": {"type": "integer"}}})
    return tools


FOUND = json.dumps({"person_id": "p-17", "name": "Fredrik"})


async def _batch(calls: list[Any], policy: Policy | str = "block", before: tuple[tuple[str, Any, str], ...] = ()) -> Any:
    async with Monitor(_tools(), policy=policy).episode(task_id="batch") as ep:
        for name, args, result in before:
            (await ep.begin(name, args)).done(result)
        begun = await ep.begin_batch(calls)
        for item in begun:
            if isinstance(item, PendingCall):
                item.done("ok")
        ep.finish("success")
    return begun, ep.record


class TestSiblingDependency:
    async def test_a_reference_only_a_sibling_produces_is_refused_and_names_it(self) -> None:
        begun, record = await _batch([("search", {"name": "Fredrik"}), ("remove", {"person_id": "p-17"})])
        assert isinstance(begun[0], PendingCall) and isinstance(begun[1], ToolBlocked)
        assert begun[1].verdict.failures[0].code == SIBLING
        assert "search (call 1 of this batch) produces them but has not returned" in str(begun[1])
        assert [(a.depth, a.tool, a.cause) for a in record.actions] == [(1, "search", None), (2, "remove", Cause.DEPENDENCY)]
        assert record.fed == 2

    async def test_a_reference_bound_before_the_batch_runs(self) -> None:
        """The state before the batch decides: p-17 was found earlier, so the removal runs beside a new search."""
        begun, record = await _batch(
            [("search", {"name": "Olsen"}), ("remove", {"person_id": "p-17"})], before=(("search", {"name": "Fredrik"}, FOUND),)
        )
        assert all(isinstance(b, PendingCall) for b in begun)
        assert record.executable

    async def test_no_sibling_producer_is_the_plain_dependency_failure(self) -> None:
        begun, _ = await _batch([("pay", {"to": "x", "amount": 1}), ("remove", {"person_id": "p-17"})])
        assert isinstance(begun[1], ToolBlocked) and begun[1].verdict.failures[0].code == "unbound_reference"

    async def test_a_batch_of_one_is_a_single_call(self) -> None:
        begun, record = await _batch([ToolCall(name="remove", args={"person_id": "p-17"}, call_id="r1")])
        assert isinstance(begun[0], ToolBlocked) and begun[0].verdict.failures[0].code == "unbound_reference"
        assert record.actions[0].call_id == "r1"


def _writers(**metadata: Any) -> Toolset:
    """Two writes to a reservation, and a read of it."""
    tools = Toolset()
    reservation = {"type": "object", "properties": {"reservation_id": {"type": "string"}, "n": {"type": "integer"}}}
    tools.add_schema("get_reservation", reservation, produces="reservation_id", metadata={"read_only": True})
    tools.add_schema("update_flights", reservation, refs={"reservation_id": "reservation_id"}, metadata=metadata)
    tools.add_schema("update_baggages", reservation, refs={"reservation_id": "reservation_id"})
    return tools


class TestConflicts:
    """Two writes naming the same object in one batch: reported (code batch_conflict), run, not a refusal."""

    async def _batch(self, tools: Toolset, calls: list[Any]) -> Any:
        async with Monitor(tools, policy="block").episode(task_id="conflict") as ep:
            (await ep.begin("get_reservation", {"reservation_id": "R1"})).done({"reservation_id": "R1"})
            (await ep.begin("get_reservation", {"reservation_id": "R2"})).done({"reservation_id": "R2"})
            begun = await ep.begin_batch(calls)
            for b in begun:
                if isinstance(b, PendingCall):
                    b.done("ok")
        return begun, ep.record

    async def test_two_writes_to_one_object_are_reported_and_run(self) -> None:
        begun, record = await self._batch(
            _writers(), [("update_flights", {"reservation_id": "R1"}), ("update_baggages", {"reservation_id": "#r1", "n": 2})]
        )
        assert all(isinstance(b, PendingCall) for b in begun)
        found = begun[1].verdict.failures[0]
        assert found.code == CONFLICT and not found.blocks
        assert found.reason == (
            "update_baggages: reservation_id '#r1' is also changed by update_flights (call 1 of this batch); "
            "which change the other meets is not known: call one, then the other"
        )
        assert record.actions[3].code == CONFLICT
        (score,) = [score_records([record])]
        assert score.refused_ok == {} and score.findings_ok == 1  # ran: a finding, never a refusal of a call that ran

    async def test_other_objects_reads_and_commuting_tools_are_no_conflict(self) -> None:
        _, other = await self._batch(
            _writers(), [("update_flights", {"reservation_id": "R1"}), ("update_baggages", {"reservation_id": "R2"})]
        )
        _, read = await self._batch(
            _writers(), [("update_flights", {"reservation_id": "R1"}), ("get_reservation", {"reservation_id": "R1"})]
        )
        _, commuting = await self._batch(
            _writers(commutes=["update_baggages"]),
            [("update_baggages", {"reservation_id": "R1"}), ("update_flights", {"reservation_id": "R1"})],
        )
        assert other.executable and read.executable and commuting.executable

    async def test_a_spec_file_says_they_commute(self) -> None:
        tools = _writers().apply_spec(
            {"schema": "prefixmon.spec/1", "tools": {"update_flights": {"commutes": ["update_baggages"]}}}
        )
        _, record = await self._batch(
            tools, [("update_flights", {"reservation_id": "R1"}), ("update_baggages", {"reservation_id": "R1"})]
        )
        assert record.executable


class TestDuplicates:
    async def test_the_same_write_twice_is_reported_and_runs(self) -> None:
        begun, record = await _batch([("pay", {"to": "x", "amount": 5}), ("pay", {"amount": 5, "to": "x"})])
        assert all(isinstance(b, PendingCall) for b in begun)  # not blocked by default
        second = record.actions[1]
        assert second.cause is Cause.PRECONDITION and second.decision is Decision.OBSERVE
        assert "call 1 of this batch" in (second.reason or "")
        assert begun[1].verdict.failures[0].code == DUPLICATE and not begun[1].verdict.failures[0].blocks
        assert second.code == DUPLICATE
        assert score_records([record]).refused_ok == {}  # a finding, not a refusal of a call that ran

    async def test_a_rule_naming_the_cause_blocks_it(self) -> None:
        begun, _ = await _batch(
            [("pay", {"to": "x", "amount": 5}), ("pay", {"to": "x", "amount": 5})],
            policy=Policy(default="block", tools={"pay": {"precondition": "block"}}),
        )
        assert isinstance(begun[0], PendingCall) and isinstance(begun[1], ToolBlocked)

    async def test_other_arguments_and_reads_are_no_duplicates(self) -> None:
        _, record = await _batch(
            [
                ("pay", {"to": "x", "amount": 5}),
                ("pay", {"to": "x", "amount": 6}),
                ("lookup", {"name": "a"}),
                ("lookup", {"name": "a"}),
            ]
        )
        assert record.executable

    async def test_the_next_message_is_a_new_batch(self) -> None:
        async with Monitor(_tools(), policy="block").episode(task_id="two") as ep:
            for _ in range(2):
                (begun,) = await ep.begin_batch([("pay", {"to": "x", "amount": 5})])
                assert isinstance(begun, PendingCall) and begun.verdict.executable
                begun.done("ok")


def _message(*calls: tuple[str, str, dict[str, Any]]) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": i, "type": "function", "function": {"name": n, "arguments": json.dumps(a)}} for i, n, a in calls],
    }


class TestReplay:
    """Transcripts: a message of several calls is a batch, unless it is a recorded sequence."""

    async def _replay(self, messages: list[dict[str, Any]]) -> Any:
        async with Monitor(_tools(), policy="observe").episode(task_id="replay") as ep:
            stats = await replay_messages(ep, messages)
            ep.finish("failure")
        return stats, ep.record

    async def test_a_message_of_parallel_calls_is_judged_as_a_batch(self) -> None:
        """The removal guessed the id its sibling search was about to return: the model could not have seen it."""
        messages = [
            {"role": "user", "content": "remove Fredrik"},
            _message(("c1", "search", {"name": "Fredrik"}), ("c2", "remove", {"person_id": "p-99"})),
            {"role": "tool", "tool_call_id": "c1", "content": json.dumps({"person_id": "p-17"})},
            {"role": "tool", "tool_call_id": "c2", "content": "Error: no contact p-99"},
        ]
        stats, record = await self._replay(messages)
        assert (stats.batches, stats.recorded_sequences) == (1, 0)
        assert record.actions[1].cause is Cause.DEPENDENCY and "call 1 of this batch" in (record.actions[1].reason or "")

    async def test_a_call_using_what_an_earlier_call_returned_is_a_recorded_sequence(self) -> None:
        """An agent loop that records two rounds as one message: replayed call by call, nothing refused."""
        messages = [
            {"role": "user", "content": "remove Fredrik"},
            _message(("c1", "search", {"name": "Fredrik"}), ("c2", "remove", {"person_id": "p-17"})),
            {"role": "tool", "tool_call_id": "c1", "content": FOUND},
            {"role": "tool", "tool_call_id": "c2", "content": "removed"},
        ]
        stats, record = await self._replay(messages)
        assert (stats.batches, stats.recorded_sequences) == (0, 1)
        assert record.executable
