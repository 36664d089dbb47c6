"""Rules without a replica: spec-file rules over observed objects, undetermined, probes, recognisers.

The tool layer here is a small order service seen only through its answers (JSON text, and
``Error: ...`` text for rejections), the way an MCP server written in another language is.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest

from prefixmon import Cause, Decision, Monitor, Policy, ToolBlocked, Toolset
from prefixmon.rules.specfile import SCHEMA

pytestmark = pytest.mark.anyio

ORDER = {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]}
CANCEL = {
    "type": "object",
    "properties": {"order_id": {"type": "string"}, "reason": {"type": "string"}},
    "required": ["order_id", "reason"],
}

RULES: dict[str, Any] = {
    "schema": SCHEMA,
    "constants": {"max_items": 2},
    "defaults": {"errors": [{"text": "^Error:"}]},
    "tools": {
        "get_order_details": {
            "access": "read",
            "produces": {"order_id": "order_id"},
            "observes": [{"object": "order", "id": "order_id"}],
        },
        "list_orders": {"access": "read", "observes": [{"object": "order", "id": "order_id", "at": "orders[]"}]},
        "cancel_pending_order": {
            "access": "write",
            "args": {"order_id": {"ref": "order_id", "user": True}},
            "let": {"order": "order[args.order_id]"},
            "requires": [
                {
                    "name": "pending",
                    "expr": 'order.status == "pending"',
                    "message": "only pending orders can be cancelled; {args.order_id} is {order.status}",
                },
                {"name": "small", "expr": "size(order.items) <= constants.max_items", "message": "too many items to cancel here"},
            ],
            "effects": [{"object": "order", "id": "args.order_id", "set": {"status": "cancelled"}}],
        },
        "modify_order": {"access": "write", "args": {"order_id": {"ref": "order_id", "user": True}}},
    },
}


class Shop:
    """The environment: orders in memory, answered as text (an MCP server in another language, say)."""

    def __init__(self) -> None:
        self.orders = {
            "#W1": {"order_id": "#W1", "status": "pending", "items": ["mug"]},
            "#W2": {"order_id": "#W2", "status": "delivered", "items": ["lamp"]},
            "#W3": {"order_id": "#W3", "status": "pending", "items": ["a", "b", "c"]},
        }
        self.reads = 0

    def get_order_details(self, order_id: str) -> str:
        self.reads += 1
        order = self.orders.get(order_id)
        return json.dumps(order) if order else f"Error: order {order_id} not found"

    def list_orders(self) -> str:
        return json.dumps({"orders": list(self.orders.values())})

    def cancel_pending_order(self, order_id: str, reason: str) -> str:
        order = self.orders[order_id]
        if order["status"] != "pending":
            return "Error: non-pending order cannot be cancelled"
        order["status"] = "cancelled"
        return json.dumps(order)

    def modify_order(self, order_id: str) -> str:
        self.orders[order_id]["status"] = "pending (modified)"
        return "ok"


def toolset(shop: Shop, rules: dict[str, Any] | None = None) -> Toolset:
    """Schema-declared tools (no Python rules), then the spec file."""
    tools = Toolset()
    tools.add_schema("get_order_details", ORDER, func=shop.get_order_details)
    tools.add_schema("list_orders", None, func=shop.list_orders)
    tools.add_schema("cancel_pending_order", CANCEL, func=shop.cancel_pending_order)
    tools.add_schema("modify_order", ORDER, func=shop.modify_order)
    return tools.apply_spec(rules or RULES)


class TestPreconditions:
    """CEL preconditions over what results showed."""

    async def test_blocks_what_the_environment_would_refuse_with_the_message(self) -> None:
        """The observed status decides before the call: a delivered order is not cancelled, with a readable message."""
        shop = Shop()
        async with Monitor(toolset(shop), policy="block").episode(task_id="t") as ep:
            ep.user("cancel #W2")
            await ep.call("get_order_details", {"order_id": "#W2"})
            with pytest.raises(ToolBlocked) as blocked:
                await ep.call("cancel_pending_order", {"order_id": "#W2", "reason": "no longer needed"})
        assert "only pending orders can be cancelled; #W2 is delivered" in str(blocked.value)
        assert blocked.value.verdict.code == "precondition:pending" and shop.orders["#W2"]["status"] == "delivered"

    async def test_constants_and_functions(self) -> None:
        """Expressions read named constants and CEL functions (size)."""
        shop = Shop()
        async with Monitor(toolset(shop), policy="block").episode(task_id="t") as ep:
            ep.user("cancel #W3")
            await ep.call("list_orders")
            verdict = ep.check("cancel_pending_order", {"order_id": "#W3", "reason": "x"})
        assert verdict.code == "precondition:small" and "too many items" in verdict.reason

    async def test_declared_effects_keep_the_object_current(self) -> None:
        """After a cancel, its declared effect says the order is cancelled: cancelling again is refused from what was seen."""
        shop = Shop()
        async with Monitor(toolset(shop), policy="block").episode(task_id="t") as ep:
            ep.user("cancel #W1")
            await ep.call("get_order_details", {"order_id": "#W1"})
            await ep.call("cancel_pending_order", {"order_id": "#W1", "reason": "x"})
            again = ep.check("cancel_pending_order", {"order_id": "#W1", "reason": "x"})
        assert again.code == "precondition:pending" and "#W1 is cancelled" in again.reason

    async def test_objects_at_a_path_of_the_result(self) -> None:
        """``at: orders[]`` observes every order a listing returns."""
        shop = Shop()
        async with Monitor(toolset(shop)).episode(task_id="t") as ep:
            await ep.call("list_orders")
            assert ep.state.objects.get("order", "#W2") is not None and len(ep.state.objects) == 3


class TestUndetermined:
    """What was never observed is undetermined: never a block, never a failure."""

    async def test_never_observed_is_undetermined_and_runs_under_block(self) -> None:
        """Without a result showing the order, the rule cannot be decided: the call runs, FED is untouched."""
        shop = Shop()
        async with Monitor(toolset(shop), policy="block").episode(task_id="t") as ep:
            ep.user("cancel #W2")
            verdict = ep.check("cancel_pending_order", {"order_id": "#W2", "reason": "x"})
            assert verdict.executable and verdict.undetermined == ("pending", "small")
            await ep.call("cancel_pending_order", {"order_id": "#W2", "reason": "x"})  # the environment refuses it
        record = ep.record
        assert record is not None and record.actions[0].cause is Cause.STATE_CONSISTENCY
        assert record.actions[0].reached_environment

    async def test_a_write_without_a_declared_effect_makes_the_object_stale(self) -> None:
        """After another write named the order, what was seen of it no longer decides anything."""
        shop = Shop()
        async with Monitor(toolset(shop), policy="block").episode(task_id="t") as ep:
            ep.user("#W2")
            await ep.call("get_order_details", {"order_id": "#W2"})
            await ep.call("modify_order", {"order_id": "#W2"})
            verdict = ep.check("cancel_pending_order", {"order_id": "#W2", "reason": "x"})
        assert verdict.executable and "pending" in verdict.undetermined
        assert ep.state.objects.get("order", "#W2").stale_by == "modify_order"  # type: ignore[union-attr]

    async def test_a_field_the_object_lacks_is_undetermined(self) -> None:
        """An expression reading a field the observed object does not have cannot be decided."""
        shop = Shop()
        rules: dict[str, Any] = json.loads(json.dumps(RULES))
        rules["tools"]["cancel_pending_order"]["requires"] = [{"name": "paid", "expr": "order.paid == true"}]
        async with Monitor(toolset(shop, rules), policy="block").episode(task_id="t") as ep:
            ep.user("#W1")
            await ep.call("get_order_details", {"order_id": "#W1"})
            verdict = ep.check("cancel_pending_order", {"order_id": "#W1", "reason": "x"})
        assert verdict.executable and verdict.undetermined == ("paid",)

    async def test_undetermined_can_escalate_by_policy(self) -> None:
        """Policy(undetermined="escalate") asks a human; a denial is not a failure (FED stays T+1)."""
        asked: list[tuple[str, ...]] = []

        async def human(verdict: Any, call: Any) -> Any:
            from prefixmon import Deny

            asked.append(verdict.undetermined)
            return Deny("not sure about this order")

        shop = Shop()
        monitor = Monitor(toolset(shop), policy=Policy(default="block", undetermined="escalate"), escalate=human)
        async with monitor.episode(task_id="t") as ep:
            ep.user("cancel #W2")
            with pytest.raises(ToolBlocked, match="could not be checked from what was observed"):
                await ep.call("cancel_pending_order", {"order_id": "#W2", "reason": "x"})
        record = ep.record
        assert record is not None and record.executable and record.actions[0].decision is Decision.DENY
        assert asked == [("pending", "small")] and shop.orders["#W2"]["status"] == "delivered"


class TestProbes:
    """The monitor reads what a write needs before it runs, when nobody observed it."""

    def probing(self) -> dict[str, Any]:
        """The rules, with a probe that reads the order before a cancel."""
        rules: dict[str, Any] = json.loads(json.dumps(RULES))
        rules["tools"]["cancel_pending_order"]["probes"] = [
            {"for": "order", "call": "get_order_details", "args": {"order_id": "args.order_id"}}
        ]
        return rules

    async def test_a_probe_observes_the_object_so_the_rule_decides(self) -> None:
        """Before cancelling #W2 the monitor reads it itself; the rule then blocks; the probe is no action."""
        shop = Shop()
        async with Monitor(toolset(shop, self.probing()), policy="block").episode(task_id="t") as ep:
            ep.user("cancel #W2")
            with pytest.raises(ToolBlocked, match="#W2 is delivered"):
                await ep.call("cancel_pending_order", {"order_id": "#W2", "reason": "x"})
        record = ep.record
        assert record is not None and record.horizon == 1 and shop.reads == 1
        assert [(p.tool, p.object, p.ok, p.depth) for p in record.probes] == [("get_order_details", "order", True, 1)]
        assert not ep.state.seen('{"order_id": "#W2"') and not ep.state.is_bound("order_id", "#W2")  # not information

    async def test_no_probe_when_the_object_was_observed(self) -> None:
        """An object seen current is not read again."""
        shop = Shop()
        async with Monitor(toolset(shop, self.probing())).episode(task_id="t") as ep:
            ep.user("cancel #W1")
            await ep.call("get_order_details", {"order_id": "#W1"})
            await ep.call("cancel_pending_order", {"order_id": "#W1", "reason": "x"})
        assert shop.reads == 1 and ep.record is not None and ep.record.probes == []

    async def test_a_failing_probe_fails_open(self) -> None:
        """A probe the environment rejects is recorded; the rule stays undetermined and the call runs."""
        shop = Shop()
        async with Monitor(toolset(shop, self.probing()), policy="block").episode(task_id="t") as ep:
            ep.user("cancel #W9")
            verdict_args = {"order_id": "#W9", "reason": "x"}
            with pytest.raises(KeyError):  # the environment itself fails on the unknown order: the call ran
                await ep.call("cancel_pending_order", verdict_args)
        record = ep.record
        assert record is not None and record.probes[0].ok is False and "not found" in (record.probes[0].error or "")
        assert record.actions[0].reached_environment

    async def test_budget_and_timeout(self) -> None:
        """Probes stop at the spec's budget; a probe that hangs is abandoned after its timeout."""
        rules = self.probing()
        rules["probe_budget"] = 1
        rules["probe_timeout"] = 0.05
        shop = Shop()
        tools = toolset(shop, rules)

        async def slow(tool: str, args: dict[str, Any]) -> Any:
            if args["order_id"] == "#W3":
                await anyio.sleep_forever()
            return shop.get_order_details(**args)

        async with Monitor(tools, probe=slow).episode(task_id="t") as ep:
            ep.user("#W1 #W3")
            await ep.call("cancel_pending_order", {"order_id": "#W1", "reason": "x"})
            await ep.call("cancel_pending_order", {"order_id": "#W3", "reason": "x"})
        assert ep.record is not None
        assert [(p.ok, p.error) for p in ep.record.probes] == [(True, None), (False, "no probe budget left")]
        rules["probe_budget"] = 5
        async with Monitor(toolset(Shop(), rules), probe=slow).episode(task_id="t") as ep:
            ep.user("#W3")
            await ep.call("cancel_pending_order", {"order_id": "#W3", "reason": "x"})
        assert ep.record is not None and ep.record.probes[0].error == "no answer within 0.05 s"

    async def test_no_executor_no_probe(self) -> None:
        """Without an implementation or a probe executor (a replay), probes are not made and not recorded."""
        tools = Toolset()
        tools.add_schema("get_order_details", ORDER)
        tools.add_schema("cancel_pending_order", CANCEL)
        tools.add_schema("list_orders", None)
        tools.add_schema("modify_order", ORDER)
        tools.apply_spec(self.probing())
        async with Monitor(tools).episode(task_id="t") as ep:
            ep.user("#W1")
            pending = await ep.begin("cancel_pending_order", {"order_id": "#W1", "reason": "x"})
            pending.done('{"order_id": "#W1", "status": "cancelled"}')
        assert ep.record is not None and ep.record.probes == [] and ep.record.actions[0].executable


class TestRecognisersAndReferences:
    """Errors answered as text, and references declared in the file."""

    async def test_error_text_is_a_rejection(self) -> None:
        """``Error: ...`` text (defaults.errors) is the environment rejecting the call."""
        shop = Shop()
        async with Monitor(toolset(shop)).episode(task_id="t") as ep:
            ep.user("#W9")
            await ep.call("get_order_details", {"order_id": "#W9"})
        record = ep.record
        assert record is not None and record.first_failure is not None
        assert record.first_failure.cause is Cause.STATE_CONSISTENCY and "not found" in (record.actions[0].error or "")

    async def test_json_and_is_error_recognisers(self) -> None:
        """A JSON ``error`` field, and an MCP-style ``isError`` flag."""
        tools = Toolset()
        tools.add_schema("a", None, func=lambda: {"error": "nope"})
        tools.add_schema("b", None, func=lambda: {"isError": True, "content": [{"type": "text", "text": "bad input"}]})
        tools.apply_spec(
            {"schema": SCHEMA, "tools": {"a": {"errors": [{"json": "error"}]}, "b": {"errors": [{"is_error": True}]}}}
        )
        async with Monitor(tools).episode(task_id="t") as ep:
            await ep.call("a")
            await ep.call("b")
        assert ep.record is not None
        assert [a.error for a in ep.record.actions] == [
            "a was rejected by the environment: error: nope",
            "b was rejected by the environment: bad input",
        ]

    async def test_references_and_invalidation_from_the_file(self) -> None:
        """An id must come from a result (or the user); a delete-like tool makes it stale."""
        tools = Toolset()
        tools.add_schema(
            "create", {"type": "object", "properties": {"name": {"type": "string"}}}, func=lambda name: {"name": name}
        )
        tools.add_schema("delete", {"type": "object", "properties": {"name": {"type": "string"}}}, func=lambda name: "ok")
        tools.apply_spec(
            {
                "schema": SCHEMA,
                "tools": {
                    "create": {"access": "write", "produces": {"entity": "name"}},
                    "delete": {"access": "write", "args": {"name": {"ref": "entity"}}, "invalidates": ["entity"]},
                },
            }
        )
        async with Monitor(tools, policy="block").episode(task_id="t") as ep:
            with pytest.raises(ToolBlocked, match=r"needs an? entity"):
                await ep.call("delete", {"name": "Ada"})
            await ep.call("create", {"name": "Ada"})
            await ep.call("delete", {"name": "Ada"})
            with pytest.raises(ToolBlocked, match="invalidated by delete"):
                await ep.call("delete", {"name": "Ada"})
