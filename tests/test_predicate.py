"""The executability predicate: each cause, tie-break order, references, grounding, exposure."""

from __future__ import annotations

import contextlib
import json
from typing import Annotated, Any

import pytest

from prefixmon import Cause, Monitor, Ref, SpecError, ToolBlocked, Toolset, TrackedState


async def run_calls(tools: Toolset, calls: list[tuple[str, Any]], user: str | None = None, **episode: Any) -> Any:
    """Run calls under the observe policy, swallowing tool errors; return the record."""
    monitor = Monitor(tools)
    async with monitor.episode(task_id="t", **episode) as ep:
        if user:
            ep.user(user)
        for name, args in calls:
            with contextlib.suppress(ToolBlocked, Exception):
                await ep.call(name, args)
    assert ep.record is not None
    return ep.record


class TestSchema:
    async def test_unknown_tool(self, tools: Toolset) -> None:
        """An unknown tool is a schema failure naming the available tools."""
        rec = await run_calls(tools, [("delete_everything", {})])
        a = rec.actions[0]
        assert (a.executable, a.cause) == (False, Cause.SCHEMA)
        assert "no tool named 'delete_everything'" in a.reason and "search_contacts" in a.reason
        assert not a.reached_environment

    async def test_malformed_json_is_a_schema_failure(self, tools: Toolset) -> None:
        """Truncated JSON text becomes a readable schema failure, not a crash."""
        rec = await run_calls(tools, [("search_contacts", '{"name": "Fre')])
        a = rec.actions[0]
        assert a.cause is Cause.SCHEMA and "not valid JSON" in (a.reason or "")

    @pytest.mark.parametrize(
        ("args", "fragment"),
        [
            ({}, "missing required argument 'on'"),
            ({"on": True, "volume": 3}, "unknown argument 'volume'"),
            ({"on": "definitely"}, "argument 'on'"),
            ("[1, 2]", "must be a JSON object"),
            ('{"on": NaN}', "NaN is not valid JSON"),
            (b'{"on": "\xff"}', "not valid UTF-8"),
        ],
    )
    async def test_argument_errors(self, tools: Toolset, args: Any, fragment: str) -> None:
        """Missing, unknown, wrong-typed and unparsable arguments are schema failures."""
        rec = await run_calls(tools, [("set_cellular", args)])
        a = rec.actions[0]
        assert a.cause is Cause.SCHEMA
        assert fragment in (a.reason or ""), a.reason

    async def test_deep_nesting_is_rejected_cleanly(self, tools: Toolset) -> None:
        """10,000-deep JSON gets a verdict, not a RecursionError."""
        rec = await run_calls(tools, [("set_cellular", "[" * 10_000 + "]" * 10_000)])
        assert rec.actions[0].cause is Cause.SCHEMA

    async def test_hidden_tool_until_exposed(self, tools: Toolset) -> None:
        """A tool declared exposed=False is not available until the episode exposes it."""
        monitor = Monitor(tools)
        async with monitor.episode(task_id="t") as ep:
            assert ep.check("admin_reset").cause is Cause.SCHEMA
            assert "not available at this point" in ep.check("admin_reset").reason
            ep.expose("admin_reset")
            assert ep.check("admin_reset").executable

    async def test_per_turn_exposure(self, tools: Toolset) -> None:
        """next_turn(exposed=...) replaces the available tools; turns are recorded."""
        monitor = Monitor(tools)
        async with monitor.episode(task_id="t", exposed=["search_contacts"]) as ep:
            await ep.call("search_contacts", {"name": "Fredrik"})
            with pytest.raises(ToolBlocked):
                monitor_policy_block = Monitor(tools, policy="block")
                async with monitor_policy_block.episode(task_id="u", exposed=["search_contacts"]) as ep2:
                    await ep2.call("set_cellular", {"on": True})
            assert ep.check("set_cellular", {"on": True}).code == "not_exposed"
            ep.next_turn(exposed=["search_contacts", "set_cellular"])
            await ep.call("set_cellular", {"on": True})
        assert ep.record is not None
        assert [a.turn for a in ep.record.actions] == [0, 1]
        assert ep.record.executable

    def test_json_schema_tool(self) -> None:
        """add_schema validates with the compiled JSON Schema; strictness about types and unknown names is opt-in."""
        tools = Toolset()
        schema = {"type": "object", "properties": {"seat": {"type": "integer"}, "name": {"type": "string"}}, "required": ["seat"]}
        tools.add_schema("book", schema)
        tools.add_schema("book_strict", schema, coercion="strict", unknown="forbid")
        state = TrackedState(exposed=["book", "book_strict"])
        from prefixmon.predicate import check

        assert check(tools, state, "book", {"seat": 3}, depth=1).executable
        assert check(tools, state, "book", {"seat": "3"}, depth=1).executable  # lax, as pydantic reads it
        assert check(tools, state, "book", {"seat": 3, "x": 1}, depth=1).executable  # the schema says nothing about x
        v = check(tools, state, "book", {"seat": "three"}, depth=1)
        assert v.cause is Cause.SCHEMA and "seat" in v.reason
        v = check(tools, state, "book_strict", {"seat": "3"}, depth=1)
        assert v.cause is Cause.SCHEMA and "seat" in v.reason
        v = check(tools, state, "book_strict", {"seat": 3, "x": 1}, depth=1)
        assert "unknown argument 'x'" in v.reason
        v = check(tools, state, "book", json.dumps({"name": "a"}), depth=1)
        assert "seat" in v.reason

    def test_bad_schema_is_a_spec_error(self) -> None:
        """A schema that cannot compile fails at declaration, not at call time."""
        with pytest.raises(SpecError, match="cannot be compiled"):
            Toolset().add_schema("x", {"type": "object", "properties": {"a": {"type": "no-such-type"}}})
        with pytest.raises(SpecError, match=r"cannot be compiled \(5 is not of type \"object\""):
            Toolset().add_schema("y", {"properties": 5})

    def test_duplicate_tool_is_a_spec_error(self, tools: Toolset) -> None:
        """Declaring a tool name twice is a usage error."""
        with pytest.raises(SpecError, match="already declared"):
            tools.add_schema("search_contacts", None)


class TestDependency:
    async def test_reference_must_come_from_a_result(self, tools: Toolset) -> None:
        """An id the agent made up (here: a phone number) is a dependency failure naming the producer."""
        rec = await run_calls(tools, [("remove_contact", {"person_id": "+1 555 0100"})], user="his number is +1 555 0100")
        a = rec.actions[0]
        assert a.cause is Cause.DEPENDENCY
        assert a.reason == (
            "remove_contact needs a person_id returned by an earlier call (search_contacts produces them); "
            "'+1 555 0100' was never returned by any tool"
        )

    async def test_stale_reference_after_delete(self, tools: Toolset) -> None:
        """Deleting a record makes its id stale; reusing it is a dependency failure."""
        rec = await run_calls(
            tools,
            [
                ("search_contacts", {"name": "Fredrik"}),
                ("remove_contact", {"person_id": "p-1"}),
                ("remove_contact", {"person_id": "p-1"}),
            ],
        )
        assert [a.executable for a in rec.actions] == [True, True, False]
        third = rec.actions[2]
        assert third.cause is Cause.DEPENDENCY and "no longer valid" in (third.reason or "")
        assert rec.fed == 3

    async def test_wrong_kind(self) -> None:
        """A value bound as another kind is reported as that kind."""
        tools = Toolset()

        @tools.tool(produces="order_id")
        def list_orders() -> list[dict[str, str]]:
            return [{"order_id": "A1"}]

        @tools.tool
        def cancel_booking(booking_id: Annotated[str, Ref("booking_id")]) -> None:
            return None

        rec = await run_calls(tools, [("list_orders", None), ("cancel_booking", {"booking_id": "A1"})])
        assert "'A1' is a order_id, not a booking_id" in (rec.actions[1].reason or "")

    async def test_user_given_reference(self) -> None:
        """Ref(user=True) accepts a value the user stated."""
        tools = Toolset()

        @tools.tool
        def get_user(user_id: Annotated[str, Ref("user_id", user=True)]) -> dict[str, str]:
            return {"user_id": user_id}

        rec = await run_calls(
            tools, [("get_user", {"user_id": "mia_li_3668"}), ("get_user", {"user_id": "bob_9"})], user="I am mia_li_3668"
        )
        assert [a.executable for a in rec.actions] == [True, False]

    async def test_nested_reference_paths(self) -> None:
        """refs may name paths into nested arguments; the reason names the exact location."""
        tools = Toolset()
        tools.add_schema("get_methods", None, produces={"payment_id": "id"})
        tools.add_schema(
            "pay",
            {"type": "object", "properties": {"payment_methods": {"type": "array"}}},
            refs={"payment_methods[].payment_id": "payment_id"},
            grounded=["payment_methods[].amount"],
        )
        monitor = Monitor(tools)
        async with monitor.episode(task_id="t") as ep:
            pending = await ep.begin("get_methods", {})
            pending.done([{"id": "gift_1", "balance": 50}])
            v = ep.check(
                "pay", {"payment_methods": [{"payment_id": "gift_1", "amount": 50}, {"payment_id": "cc_9", "amount": 50}]}
            )
            assert v.cause is Cause.DEPENDENCY and "payment_methods[1].payment_id" in v.reason
            v = ep.check("pay", {"payment_methods": [{"payment_id": "gift_1", "amount": 77}]})
            assert v.cause is Cause.INFORMATION and "payment_methods[0].amount" in v.reason


class TestPrecondition:
    async def test_failing_precondition_uses_its_message(self, tools: Toolset) -> None:
        """A precondition returning False fails with its docstring message."""
        rec = await run_calls(
            tools, [("search_contacts", {"name": "Amara"}), ("send_message", {"person_id": "p-2", "text": "hi"})]
        )
        a = rec.actions[1]
        assert a.cause is Cause.PRECONDITION
        assert a.reason == "send_message: cellular service is off; turn it on first"

    async def test_effects_make_preconditions_true(self, tools: Toolset) -> None:
        """An effect of an earlier call changes what later preconditions see."""
        rec = await run_calls(
            tools,
            [
                ("search_contacts", {"name": "Amara"}),
                ("set_cellular", {"on": True}),
                ("send_message", {"person_id": "p-2", "text": "hi"}),
            ],
        )
        assert rec.executable and rec.fed == 4

    async def test_precondition_reads_live_environment(self, contacts: Any) -> None:
        """Preconditions may read the episode's live environment object."""
        tools, book = contacts
        monitor = Monitor(tools)
        async with monitor.episode(task_id="t", env=book) as ep:
            await ep.call("search_contacts", {"name": "Fredrik"})
            del book["p-1"]  # changed behind the agent's back
            v = ep.check("remove_contact", {"person_id": "p-1"})
        assert v.cause is Cause.PRECONDITION and "no contact 'p-1'" in v.reason


class TestStateConsistency:
    async def test_exception_is_a_rejection(self, tools: Toolset) -> None:
        """A tool that raises although the checks passed is a state_consistency failure; the error reaches the agent."""
        monitor = Monitor(tools)
        async with monitor.episode(task_id="t") as ep:
            with pytest.raises(RuntimeError, match="backend unavailable"):
                await ep.call("flaky", {"x": 1})
        assert ep.record is not None
        a = ep.record.actions[0]
        assert (a.executable, a.cause, a.reached_environment) == (False, Cause.STATE_CONSISTENCY, True)
        assert "RuntimeError: backend unavailable" in (a.error or "")

    async def test_error_result_is_a_rejection(self, tools: Toolset) -> None:
        """A result the spec recognises as an error is a state_consistency failure."""
        rec = await run_calls(tools, [("lookup_order", {"order_id": "#W1"}), ("lookup_order", {"order_id": "#W9"})])
        assert rec.actions[0].executable
        assert rec.actions[1].cause is Cause.STATE_CONSISTENCY and "order not found" in (rec.actions[1].error or "")


class TestInformation:
    async def test_grounded_values(self, tools: Toolset) -> None:
        """Grounded arguments must appear in user messages or earlier results."""
        rec = await run_calls(
            tools,
            [
                ("send_money", {"phone_number": "+1 555 0100", "amount": 20}),
                ("send_money", {"phone_number": "+1 555 0100", "amount": 2000}),
            ],
            user="Send $20 to +1 555 0100 please",
        )
        assert rec.actions[0].executable
        a = rec.actions[1]
        assert a.cause is Cause.INFORMATION and "2000" in (a.reason or "")

    async def test_values_from_results_are_grounded(self, tools: Toolset) -> None:
        """A phone number returned by a tool is available information."""
        rec = await run_calls(
            tools,
            [("search_contacts", {"name": "Amara"}), ("send_money", {"phone_number": "+1 555 0199", "amount": 5})],
            user="send 5 dollars to Amara",
        )
        assert rec.executable


class TestTieBreak:
    async def test_primary_cause_is_first_in_order(self, tools: Toolset) -> None:
        """Dependency beats precondition beats information when several fail; all are listed."""
        tools.add_schema(
            "wire",
            {"type": "object", "properties": {"person_id": {"type": "string"}, "amount": {"type": "number"}}},
            refs={"person_id": "person_id"},
            grounded=["amount"],
            requires=[lambda state, args: "the bank is closed"],
        )
        monitor = Monitor(tools)
        async with monitor.episode(task_id="t") as ep:
            v = ep.check("wire", {"person_id": "p-404", "amount": 1e6})
        assert [f.cause for f in v.failures] == [Cause.DEPENDENCY, Cause.PRECONDITION, Cause.INFORMATION]
        assert v.cause is Cause.DEPENDENCY

    async def test_schema_failure_stops_the_check(self, tools: Toolset) -> None:
        """With unusable arguments no later check runs."""
        monitor = Monitor(tools)
        async with monitor.episode(task_id="t") as ep:
            v = ep.check("send_message", {"person_id": 5})
        assert [f.cause for f in v.failures] == [Cause.SCHEMA]
