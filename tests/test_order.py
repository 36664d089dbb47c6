"""Rules on call order (:mod:`prefixmon.order`): after, before, at_most, not_after."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from prefixmon import Cause, Monitor, PendingCall, SpecError, ToolBlocked, Toolset
from prefixmon.order import OrderLog
from prefixmon.plan import verify_plan

ORDER = {"type": "object", "properties": {"order_id": {"type": "string"}}}


def _tools() -> Toolset:
    tools = Toolset()
    tools.add_schema("get_order", ORDER, metadata={"read_only": True})
    tools.add_schema("modify_order", ORDER)
    tools.add_schema("cancel_order", {"type": "object", "properties": {"id": {"type": "string"}}})
    tools.add_schema("pay", {"type": "object", "properties": {"amount": {"type": "number"}}})
    tools.add_schema("transfer_to_human", {"type": "object", "properties": {}})
    return tools


async def _run(tools: Toolset, calls: list[tuple[str, dict[str, Any], Any]], policy: str = "observe") -> list[Any]:
    """Each call's verdict, running every call the policy lets through (``None``: the environment rejected it)."""
    verdicts = []
    async with Monitor(tools, policy=policy).episode(task_id="order") as ep:
        for name, args, result in calls:
            try:
                pending = await ep.begin(name, args)
            except ToolBlocked as blocked:
                verdicts.append(blocked.verdict)
                continue
            verdicts.append(pending.verdict)
            if result is None:
                pending.failed(RuntimeError("rejected"))
            else:
                pending.done(result)
    return verdicts


def _codes(verdict: Any) -> list[str]:
    return [f.code for f in verdict.failures]


class TestAfter:
    async def test_needs_one_of_the_tools_to_have_succeeded_earlier(self) -> None:
        tools = _tools()
        tools.order("modify_order", after=["get_order", "cancel_order"])
        first, _, second = await _run(
            tools,
            [
                ("modify_order", {"order_id": "W1"}, "ok"),
                ("get_order", {"order_id": "W1"}, "{}"),
                ("modify_order", {"order_id": "W1"}, "ok"),
            ],
        )
        assert _codes(first) == ["precondition:after"]
        assert first.failures[0].cause is Cause.PRECONDITION
        assert first.failures[0].reason == (
            "modify_order: must come after one of get_order, cancel_order, and that has not succeeded in this episode: "
            "call one of get_order, cancel_order first"
        )
        assert second.executable

    async def test_a_rejected_call_does_not_count(self) -> None:
        tools = _tools()
        tools.order("modify_order", after="get_order")
        _, after = await _run(tools, [("get_order", {"order_id": "W1"}, None), ("modify_order", {"order_id": "W1"}, "ok")])
        assert _codes(after) == ["precondition:after"]

    async def test_on_the_same_value_matched_as_ids_are(self) -> None:
        """``#W1`` and ``w1`` are the order read; W2 is another order."""
        tools = _tools()
        tools.order("modify_order", after="get_order", same="order_id")
        _, same, other = await _run(
            tools,
            [
                ("get_order", {"order_id": "W1"}, "{}"),
                ("modify_order", {"order_id": "#w1"}, "ok"),
                ("modify_order", {"order_id": "W2"}, "ok"),
            ],
        )
        assert same.executable
        assert _codes(other) == ["precondition:after"]
        assert "on the same order_id ('W2')" in other.failures[0].reason

    async def test_same_across_argument_names(self) -> None:
        tools = _tools()
        tools.order("cancel_order", after="get_order", same={"id": "order_id"})
        _, ok = await _run(tools, [("get_order", {"order_id": "W1"}, "{}"), ("cancel_order", {"id": "W1"}, "ok")])
        assert ok.executable

    async def test_a_call_without_the_same_argument_is_undetermined_not_refused(self) -> None:
        tools = _tools()
        tools.order("modify_order", after="get_order", same="order_id")
        (verdict,) = await _run(tools, [("modify_order", {}, "ok")], policy="block")
        assert verdict.executable
        assert verdict.undetermined == ("after",)

    async def test_blocks_under_a_blocking_policy(self) -> None:
        tools = _tools()
        tools.order("modify_order", after="get_order")
        async with Monitor(tools, policy="block").episode(task_id="order") as ep:
            with pytest.raises(ToolBlocked, match="must come after get_order"):
                await ep.begin("modify_order", {"order_id": "W1"})


class TestBefore:
    async def test_is_an_after_rule_on_the_other_tool(self) -> None:
        tools = _tools()
        tools.order("get_order", before=["modify_order"], same="order_id")
        refused, _, ok = await _run(
            tools,
            [
                ("modify_order", {"order_id": "W1"}, "ok"),
                ("get_order", {"order_id": "W1"}, "{}"),
                ("modify_order", {"order_id": "W1"}, "ok"),
            ],
        )
        assert _codes(refused) == ["precondition:after"] and ok.executable
        assert [p.name for p in tools["modify_order"].requires] == ["after"]
        assert tools["get_order"].requires == ()


class TestAtMost:
    async def test_counts_successes(self) -> None:
        tools = _tools()
        tools.order("pay", at_most=2)
        verdicts = await _run(
            tools,
            [
                ("pay", {"amount": 1}, None),
                ("pay", {"amount": 1}, "ok"),
                ("pay", {"amount": 1}, "ok"),
                ("pay", {"amount": 1}, "ok"),
            ],
        )
        assert [v.executable for v in verdicts] == [True, True, True, False]
        assert verdicts[-1].failures[0].reason == "pay: may run at most 2 times per episode; it has run 2"

    async def test_zero_means_never(self) -> None:
        tools = _tools()
        tools.order("pay", at_most=0)
        (verdict,) = await _run(tools, [("pay", {"amount": 1}, "ok")])
        assert _codes(verdict) == ["precondition:at_most"]

    @pytest.mark.parametrize("bad", [-1, 1.5, True, "2"])
    def test_a_bad_limit_is_a_spec_error(self, bad: Any) -> None:
        with pytest.raises(SpecError, match="at_most must be a whole number"):
            _tools().order("pay", at_most=bad)


class TestNotAfter:
    async def test_refused_once_the_other_tool_succeeded(self) -> None:
        tools = _tools()
        tools.order("modify_order", not_after="transfer_to_human")
        before, _, after = await _run(
            tools,
            [
                ("modify_order", {"order_id": "W1"}, "ok"),
                ("transfer_to_human", {}, "ok"),
                ("modify_order", {"order_id": "W1"}, "ok"),
            ],
        )
        assert before.executable
        assert (
            after.failures[0].reason == "modify_order: may not run after transfer_to_human, which has succeeded in this episode"
        )


class TestBatches:
    async def _batch(self, tools: Toolset, calls: list[tuple[str, dict[str, Any]]]) -> list[PendingCall | ToolBlocked]:
        async with Monitor(tools, policy="block").episode(task_id="batch") as ep:
            begun = await ep.begin_batch(calls)
            for b in begun:
                if isinstance(b, PendingCall):
                    b.done("ok")
        return begun

    async def test_an_after_tool_only_a_sibling_calls_is_waited_for(self) -> None:
        tools = _tools()
        tools.order("modify_order", after="get_order")
        read, write = await self._batch(tools, [("get_order", {"order_id": "W1"}), ("modify_order", {"order_id": "W1"})])
        assert isinstance(read, PendingCall) and isinstance(write, ToolBlocked)
        assert "get_order (call 1 of this batch) has not returned; call modify_order after its result" in str(write)

    async def test_earlier_siblings_count_against_at_most(self) -> None:
        tools = _tools()
        tools.order("pay", at_most=1)
        first, second = await self._batch(tools, [("pay", {"amount": 1}), ("pay", {"amount": 2})])
        assert isinstance(first, PendingCall) and isinstance(second, ToolBlocked)
        assert "(1 of them earlier in this batch)" in str(second)

    async def test_a_not_after_sibling_leaves_it_undetermined(self) -> None:
        """Which of two concurrent calls runs first is the framework's choice: nothing to refuse."""
        tools = _tools()
        tools.order("modify_order", not_after="transfer_to_human")
        write, handoff = await self._batch(tools, [("modify_order", {"order_id": "W1"}), ("transfer_to_human", {})])
        assert isinstance(write, PendingCall) and isinstance(handoff, PendingCall)
        assert write.verdict.undetermined == ("not_after",)


class TestSpecFiles:
    def _apply(self, tmp_path: Path, body: str) -> Toolset:
        path = tmp_path / "rules.yaml"
        path.write_text("schema: prefixmon.spec/1\ntools:\n" + body, encoding="utf-8")
        return _tools().apply_spec(path)

    async def test_every_key(self, tmp_path: Path) -> None:
        tools = self._apply(
            tmp_path,
            "  modify_order:\n    after: {tools: [get_order], same: order_id}\n    not_after: [transfer_to_human]\n"
            "  pay:\n    at_most: 1\n    after: get_order\n  get_order:\n    before: [cancel_order]\n",
        )
        assert [p.name for p in tools["modify_order"].requires] == ["after", "not_after"]
        assert [p.name for p in tools["pay"].requires] == ["after", "at_most"]
        assert [p.name for p in tools["cancel_order"].requires] == ["after"]
        verdicts = await _run(
            tools,
            [
                ("get_order", {"order_id": "W1"}, "{}"),
                ("modify_order", {"order_id": "W1"}, "ok"),
                ("pay", {"amount": 3}, "ok"),
                ("pay", {"amount": 3}, "ok"),
            ],
        )
        assert [v.executable for v in verdicts] == [True, True, True, False]

    @pytest.mark.parametrize(
        ("body", "message"),
        [
            ("  pay:\n    not_after: [refund]\n", r"rules.yaml:4: tools.pay.not_after: .*no tool named 'refund'"),
            (
                "  pay:\n    after: {tools: [get_order], same: amount}\n",
                r"rules.yaml:4: tools.pay.after: .*'get_order' has no argument 'amount'",
            ),
            ("  pay:\n    at_most: -1\n", r"rules.yaml:4.*at_most"),
            ("  pay:\n    after: {tools: []}\n", r"rules.yaml:4.*tools"),
        ],
    )
    def test_a_bad_rule_says_where_and_changes_nothing(self, tmp_path: Path, body: str, message: str) -> None:
        tools = _tools()
        path = tmp_path / "rules.yaml"
        path.write_text("schema: prefixmon.spec/1\ntools:\n" + body, encoding="utf-8")
        with pytest.raises(SpecError, match=message):
            tools.apply_spec(path)
        assert all(t.requires == () and t.order_log is None for t in tools)

    def test_a_replaced_tool_keeps_being_counted(self) -> None:
        """Order rules name tools; declaring such a tool again (an MCP relisting) still counts its calls."""
        tools = _tools()
        tools.order("modify_order", after="get_order", same="order_id")
        tools.add_schema("get_order", ORDER, replace=True)
        assert tools["get_order"].order_log == ("order_id",)


class TestPlans:
    def test_a_plan_that_reads_first_is_approved_and_one_that_does_not_is_not(self) -> None:
        tools = _tools()
        tools.order("modify_order", after="get_order", same="order_id")
        good = verify_plan(
            tools, [{"tool": "get_order", "args": {"order_id": "W1"}}, {"tool": "modify_order", "args": {"order_id": "W1"}}]
        )
        bad = verify_plan(tools, [{"tool": "modify_order", "args": {"order_id": "W1"}}])
        assert good.approved and not bad.approved

    def test_a_plan_never_changes_the_episode_log(self) -> None:
        from prefixmon import TrackedState

        tools = _tools()
        tools.order("pay", at_most=1)
        state = TrackedState(exposed=tools.exposed_names())
        state.log_order("pay", {}, ())
        assert not verify_plan(tools, [{"tool": "pay", "args": {"amount": 1}}], state=state).approved
        assert state.order_log is not None and state.order_log.count("pay") == 1


def test_the_log_round_trips_as_json() -> None:
    log = OrderLog()
    log.note("get_order", {"order_id": "#W1", "n": 3}, ("order_id", "n"))
    log.note("get_order", {"order_id": "W2"}, ("order_id",))
    back = OrderLog.from_dict(log.to_dict())
    assert back.count("get_order") == 2 and back.ran_on("get_order", "order_id", "w1") and back.ran_on("get_order", "n", 3)
    child = OrderLog(back)
    child.note("pay", {}, ())
    assert child.to_dict()["counts"] == {"get_order": 2, "pay": 1}
