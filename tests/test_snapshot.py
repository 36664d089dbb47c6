"""Approvals and snapshots: an escalation's answer is remembered, and a resumed episode goes on where it stopped."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping
from typing import Annotated, Any

import anyio
import pytest

from prefixmon import (
    Approve,
    Decision,
    Deny,
    Edit,
    Grounded,
    Monitor,
    Policy,
    RecordError,
    Ref,
    Snapshot,
    SpecError,
    ToolBlocked,
    ToolCall,
    Toolset,
    Undetermined,
    Verdict,
)
from prefixmon.snapshot import SCHEMA, args_key


def build(*, at_most: bool = False) -> tuple[Toolset, list[str]]:
    """A shop: find an order (binds its id), pay for it (a grounded amount under 50), a note tool without rules."""
    ran: list[str] = []
    tools = Toolset()

    @tools.tool(produces="order_id")
    def find_order(name: str) -> dict[str, Any]:
        """Find a customer's order."""
        ran.append("find_order")
        return {"order_id": "W1", "name": name, "total": 40}

    def under_limit(state: Any, args: Any) -> bool | str:
        return args["amount"] < 50 or f"{args['amount']:g} is over the limit of 50"

    @tools.tool(requires=[under_limit])
    def pay(order_id: Annotated[str, Ref("order_id")], amount: Annotated[float, Grounded(block=True)]) -> dict[str, Any]:
        """Pay for an order."""
        ran.append(f"pay {order_id} {amount:g}")
        return {"paid": amount}

    @tools.tool
    def note(text: str) -> str:
        """Write a note."""
        ran.append("note")
        return "ok"

    if at_most:
        tools.order("pay", at_most=1)
    return tools, ran


class Hook:
    """An escalation hook that counts its calls and answers from a table (by amount), else approves."""

    def __init__(self, answers: dict[float, Any] | None = None) -> None:
        self.asked: list[dict[str, Any]] = []
        self.answers = answers or {}

    async def __call__(self, verdict: Verdict, call: ToolCall) -> Any:
        raw = call.args
        args: dict[str, Any] = dict(raw) if isinstance(raw, Mapping) else json.loads(raw or "{}")
        self.asked.append(args)
        return self.answers.get(float(args.get("amount", 0)), Approve())


def through_json(snapshot: Snapshot) -> Any:
    """The snapshot as a checkpoint store keeps it: JSON text, read back."""
    return json.loads(json.dumps(snapshot.model_dump(mode="json")))


async def first_part(hook: Hook, *, at_most: bool = False) -> tuple[Any, list[str], Any]:
    """Find the order, pay an amount nobody stated (escalated, answered by ``hook``): the JSON snapshot."""
    tools, ran = build(at_most=at_most)
    monitor = Monitor(tools, policy="escalate", escalate=hook)
    async with monitor.episode(task_id="shop", labels={"model": "m"}) as ep:
        ep.user("please pay order of Ann")
        await ep.call("find_order", {"name": "Ann"}, call_id="c1")
        with contextlib.suppress(ToolBlocked):  # a denial
            await ep.call("pay", {"order_id": "W1", "amount": 99}, call_id="c2")
        snap = ep.snapshot()
    return through_json(snap), ran, ep.record


class TestRemembered:
    async def test_an_approval_is_not_asked_again_after_a_resume(self) -> None:
        """Approve, snapshot, JSON, resume in a new monitor, the same call again: it runs unasked, recorded as approve."""
        hook = Hook()
        data, ran, _ = await first_part(hook)
        assert len(hook.asked) == 1 and ran == ["find_order", "pay W1 99"]
        tools, ran2 = build()
        later = Hook({99: Deny("must not be asked")})
        async with Monitor(tools, policy="escalate", escalate=later).resume(data) as ep:
            assert await ep.call("pay", {"order_id": "W1", "amount": 99}, call_id="c2") == {"paid": 99}
        assert later.asked == [] and ran2 == ["pay W1 99"]
        assert ep.record is not None
        last = ep.record.actions[-1]
        assert (last.depth, last.decision, last.executable) == (3, Decision.APPROVE, False)
        assert [a.decision for a in ep.approvals] == ["approve"]

    async def test_a_denial_stays_denied_without_asking(self) -> None:
        """A denied call is denied again after the resume, with its reason, and the hook is not called."""
        hook = Hook({99: Deny("not that amount")})
        data, ran, _ = await first_part(hook)
        assert ran == ["find_order"]
        tools, ran2 = build()
        later = Hook()
        async with Monitor(tools, policy="escalate", escalate=later).resume(data) as ep:
            with pytest.raises(ToolBlocked) as info:
                await ep.call("pay", {"order_id": "W1", "amount": 99}, call_id="c9")  # a new id, the same call
        assert later.asked == [] and ran2 == []
        assert info.value.decision == "deny" and info.value.guidance == "not that amount"
        assert ep.record is not None and ep.record.actions[-1].decision is Decision.DENY

    async def test_same_call_again_in_one_episode_is_not_asked(self) -> None:
        """Without any resume, the same call escalated twice asks once (arguments compared as JSON, keys in any order)."""
        tools, _ = build()
        hook = Hook()
        async with Monitor(tools, policy="escalate", escalate=hook).episode() as ep:
            await ep.call("find_order", {"name": "Ann"})
            await ep.call("note", {"text": "x"})
            await ep.call("pay", {"order_id": "W1", "amount": 99})
            await ep.call("pay", '{"amount": 99, "order_id": "W1"}')  # JSON text, other key order
        assert len(hook.asked) == 1
        assert args_key({"b": 1, "a": [1, 2]}) == args_key('{"a": [1, 2], "b": 1}') == '{"a":[1,2],"b":1}'

    async def test_edit_is_remembered_with_its_arguments(self) -> None:
        """An edit is kept with the edited arguments; the resumed run gets the same edit, rechecked."""
        hook = Hook({99: Edit({"order_id": "W1", "amount": 40})})
        data, ran, _ = await first_part(hook)
        assert ran == ["find_order", "pay W1 40"]
        assert data["approvals"][0]["decision"] == "edit" and data["approvals"][0]["edited"] == {"order_id": "W1", "amount": 40}
        tools, ran2 = build()
        later = Hook()
        async with Monitor(tools, policy="escalate", escalate=later).resume(data) as ep:
            await ep.call("pay", {"order_id": "W1", "amount": 99})
        assert later.asked == [] and ran2 == ["pay W1 40"]
        assert ep.record is not None and ep.record.actions[-1].decision is Decision.EDIT

    async def test_batch_denial_keeps_the_sibling_approval(self) -> None:
        """A batch of two escalated calls, one approved and one denied: after the resume both answers hold, unasked."""
        tools, _ = build()
        hook = Hook({70: Deny("too much")})
        calls = [
            ToolCall(name="pay", args={"order_id": "W1", "amount": 60}, call_id="a"),
            ToolCall(name="pay", args={"order_id": "W1", "amount": 70}, call_id="b"),
        ]
        async with Monitor(tools, policy="escalate", escalate=hook).episode() as ep:
            await ep.call("find_order", {"name": "Ann"})
            first = await ep.begin_batch(calls)
            assert isinstance(first[1], ToolBlocked) and first[1].decision == "deny"
            pending = first[0]
            assert not isinstance(pending, ToolBlocked)
            pending.done(await pending.run())
            data = through_json(ep.snapshot())
        assert len(hook.asked) == 2
        assert sorted((a["call_id"], a["decision"]) for a in data["approvals"]) == [("a", "approve"), ("b", "deny")]
        tools2, ran2 = build()
        later = Hook()
        async with Monitor(tools2, policy="escalate", escalate=later).resume(data) as ep2:
            again = await ep2.begin_batch(calls)
            assert isinstance(again[1], ToolBlocked) and again[1].guidance == "too much"
            assert not isinstance(again[0], ToolBlocked) and again[0].decision is Decision.APPROVE
            again[0].done(await again[0].run())
        assert later.asked == [] and ran2 == ["pay W1 60"]

    async def test_an_approval_does_not_cover_a_new_failure(self) -> None:
        """An approved call that now also fails another way (a second payment past at_most) is asked about again."""
        tools, ran = build(at_most=True)
        hook = Hook()
        async with Monitor(tools, policy="escalate", escalate=hook).episode() as ep:
            await ep.call("find_order", {"name": "Ann"})
            await ep.call("pay", {"order_id": "W1", "amount": 45})  # nobody said 45: approved
            data = through_json(ep.snapshot())
        assert len(hook.asked) == 1 and ran[-1] == "pay W1 45"
        later = Hook({45: Deny("already paid")})
        async with Monitor(build(at_most=True)[0], policy="escalate", escalate=later).resume(data) as ep2:
            with pytest.raises(ToolBlocked) as info:
                await ep2.call("pay", {"order_id": "W1", "amount": 45})
        assert len(later.asked) == 1 and info.value.verdict.code == "precondition:at_most"

    async def test_a_call_id_naming_another_call_is_asked_again(self) -> None:
        """The same call id with other arguments is another call: the hook is asked."""
        hook = Hook()
        data, _, _ = await first_part(hook)
        tools, _ = build()
        later = Hook()
        async with Monitor(tools, policy="escalate", escalate=later).resume(data) as ep:
            await ep.call("pay", {"order_id": "W1", "amount": 98}, call_id="c2")
        assert len(later.asked) == 1

    async def test_an_undetermined_call_answer_is_remembered(self) -> None:
        """Policy(undetermined="escalate"): the answer for a call that could not be decided is kept too."""
        tools = Toolset()

        def stock_known(state: Any, args: Any) -> Any:
            return Undetermined("the stock level was not observed")

        @tools.tool(requires=[stock_known])
        def reserve(item: str) -> str:
            """Reserve an item."""
            return "reserved"

        hook = Hook()
        monitor = Monitor(tools, policy=Policy(undetermined="escalate"), escalate=hook)
        async with monitor.episode() as ep:
            assert await ep.call("reserve", {"item": "lamp"}) == "reserved"
            data = through_json(ep.snapshot())
        assert data["approvals"][0]["failures"] == ["undetermined:stock_known"]
        async with monitor.resume(data) as ep2:
            assert await ep2.call("reserve", {"item": "lamp"}) == "reserved"
        assert len(hook.asked) == 1
        assert ep2.record is not None and ep2.record.actions[-1].decision is Decision.APPROVE

    async def test_a_timeout_is_not_remembered(self) -> None:
        """An escalation nobody answered in time is denied, and the same call is asked about again."""
        tools, _ = build()
        calls = 0

        async def slow(verdict: Verdict, call: ToolCall) -> Any:
            nonlocal calls
            calls += 1
            if calls == 1:
                await anyio.sleep(5)
            return Approve()

        async with Monitor(tools, policy="escalate", escalate=slow, escalate_timeout=0.05).episode() as ep:
            await ep.call("find_order", {"name": "Ann"})
            with pytest.raises(ToolBlocked):
                await ep.call("pay", {"order_id": "W1", "amount": 99})
            assert ep.approvals == []
            await ep.call("pay", {"order_id": "W1", "amount": 99})
        assert calls == 2 and [a.decision for a in ep.approvals] == ["approve"]

    async def test_told_data_that_is_not_json_is_left_out(self) -> None:
        """A told value that is not JSON data is not in the snapshot; the resumed pool says it is incomplete."""
        tools, _ = build()
        async with Monitor(tools).episode() as ep:
            ep.user("hello")
            ep.inform({"when": {1, 2}})
            data = through_json(ep.snapshot())
        assert data["told"] == [{"how": "user", "value": "hello"}] and data["pool_complete"] is False


class TestResume:
    async def test_depth_continues_and_the_record_holds_the_whole_episode(self) -> None:
        """The next call gets depth + 1; the final record has every action; FED is the whole episode's."""
        data, _, before = await first_part(Hook())
        assert before.horizon == 2 and before.fed == 2
        tools, _ = build()
        async with Monitor(tools, policy="escalate", escalate=Hook()).resume(data) as ep:
            assert ep.depth == 2 and not ep.executable and ep.fed == 2
            assert ep.check("note", {"text": "x"}).depth == 3
            await ep.call("note", {"text": "done"})
            ep.finish("success")
        rec = ep.record
        assert rec is not None
        assert [(a.depth, a.tool) for a in rec.actions] == [(1, "find_order"), (2, "pay"), (3, "note")]
        assert (rec.horizon, rec.fed, rec.executable) == (3, 2, False)
        assert rec.episode_id == before.episode_id and rec.task_id == "shop" and rec.labels["model"] == "m"
        assert rec.started_at == before.started_at
        assert ep.action_for("c1") is not None and ep.action_for("c1").tool == "find_order"  # type: ignore[union-attr]

    async def test_references_bound_before_still_satisfy_dependencies(self) -> None:
        """W1, bound by find_order before the snapshot, is a known order_id after it; W9 is still unbound."""
        tools, _ = build()
        async with Monitor(tools).episode() as ep:
            ep.user("pay 40 for Ann's order")
            await ep.call("find_order", {"name": "Ann"})
            data = through_json(ep.snapshot())
        assert {"value": "W1", "kind": "order_id"}.items() <= data["bindings"][0].items()
        tools2, _ = build()
        async with Monitor(tools2, policy="block").resume(data) as ep2:
            assert ep2.check("pay", {"order_id": "W1", "amount": 40}).executable
            assert ep2.check("pay", {"order_id": "W9", "amount": 40}).code == "unbound_reference"
            assert ep2.state.user_said("40")  # the user's text was told again

    async def test_values_seen_only_in_earlier_results_are_not_failures(self) -> None:
        """A value seen only in a tool result before the snapshot (the total, 40) is not an information failure after it."""
        tools, _ = build()
        async with Monitor(tools).episode() as ep:
            await ep.call("find_order", {"name": "Ann"})
            assert ep.check("pay", {"order_id": "W1", "amount": 40}).executable
            data = through_json(ep.snapshot())
        assert data["pool_complete"] is False
        async with Monitor(build()[0], policy="block").resume(data) as ep2:
            assert ep2.check("pay", {"order_id": "W1", "amount": 40}).executable
            assert not ep2.state.pool_complete

    async def test_order_rules_still_count(self) -> None:
        """pay ran once before the snapshot: at_most=1 refuses it after the resume."""
        tools, _ = build(at_most=True)
        async with Monitor(tools).episode() as ep:
            ep.user("pay 40")
            await ep.call("find_order", {"name": "Ann"})
            await ep.call("pay", {"order_id": "W1", "amount": 40})
            data = through_json(ep.snapshot())
        assert data["order"]["counts"] == {"pay": 1}
        async with Monitor(build(at_most=True)[0], policy="block").resume(data) as ep2:
            with pytest.raises(ToolBlocked) as info:
                await ep2.call("pay", {"order_id": "W1", "amount": 40})
        assert info.value.verdict.code == "precondition:at_most"

    async def test_state_facts_exposure_and_turn_are_restored(self) -> None:
        """Facts, the exposed tools and the turn come back as they were."""
        tools, _ = build()
        async with Monitor(tools).episode(facts={"tier": "gold"}, exposed=["find_order", "note"]) as ep:
            ep.next_turn()
            data = through_json(ep.snapshot())
        assert data["schema"] == SCHEMA and data["exposed"] == ["find_order", "note"]
        async with Monitor(build()[0]).resume(Snapshot.model_validate(data)) as ep2:
            assert ep2.state.facts == {"tier": "gold"} and ep2.state.turn == 1
            assert ep2.state.exposed == {"find_order", "note"} and ep2.depth == 0
        assert ep2.record is not None and ep2.record.horizon == 1  # no call yet: the no-tool slot

    async def test_json_text_is_accepted_and_a_snapshot_resumes_twice(self) -> None:
        """JSON text resumes too, and a resumed episode's snapshot resumes again with everything."""
        data, _, _ = await first_part(Hook())
        async with Monitor(build()[0], policy="escalate", escalate=Hook()).resume(json.dumps(data)) as ep:
            await ep.call("note", {"text": "x"})
            again = ep.snapshot()
        assert again.depth == 3 and len(again.approvals) == 1 and again.told == Snapshot.model_validate(data).told
        hook = Hook()
        async with Monitor(build()[0], policy="escalate", escalate=hook).resume(again) as ep2:
            await ep2.call("pay", {"order_id": "W1", "amount": 99}, call_id="c2")
        assert hook.asked == [] and ep2.record is not None and ep2.record.horizon == 4

    async def test_the_continuation_may_get_its_own_id(self) -> None:
        """episode_id= names the resumed episode (the first part's record keeps the snapshot's id)."""
        data, _, before = await first_part(Hook())
        async with Monitor(build()[0]).resume(data, episode_id="part-2") as ep:
            await ep.call("note", {"text": "x"})
        assert ep.record is not None and ep.record.episode_id == "part-2" != before.episode_id
        assert ep.record.horizon == 3


class TestBadInput:
    async def test_another_schema_is_a_clear_error(self) -> None:
        data, _, _ = await first_part(Hook())
        monitor = Monitor(build()[0])
        with pytest.raises(RecordError, match=r"schema is 'prefixmon\.snapshot/2', expected 'prefixmon\.snapshot/1'"):
            monitor.resume({**data, "schema": "prefixmon.snapshot/2"})
        with pytest.raises(RecordError, match="schema is None"):
            monitor.resume({k: v for k, v in data.items() if k != "schema"})

    async def test_malformed_fields_are_named(self) -> None:
        data, _, _ = await first_part(Hook())
        monitor = Monitor(build()[0])
        with pytest.raises(RecordError, match=r"depth"):
            monitor.resume({**data, "depth": "two"})
        with pytest.raises(RecordError, match=r"actions: the actions must be numbered 1\.\.depth \(5\)"):
            monitor.resume({**data, "depth": 5})
        with pytest.raises(RecordError, match=r"approvals\.0\.decision"):
            monitor.resume({**data, "approvals": [{**data["approvals"][0], "decision": "maybe"}]})
        with pytest.raises(RecordError, match=r"actions\.0"):
            monitor.resume({**data, "actions": [{**data["actions"][0], "executable": "yes"}, data["actions"][1]]})
        with pytest.raises(RecordError, match=r"surprise: Extra inputs are not permitted"):
            monitor.resume({**data, "surprise": 1})
        with pytest.raises(RecordError, match="JSON text"):
            monitor.resume("{not json")
        with pytest.raises(RecordError, match="JSON object"):
            monitor.resume([1, 2])  # type: ignore[arg-type]

    async def test_a_tool_the_toolset_lacks_is_a_spec_error(self) -> None:
        data, _, _ = await first_part(Hook())
        with pytest.raises(SpecError, match="'admin'"):
            Monitor(build()[0]).resume({**data, "exposed": [*data["exposed"], "admin"]})

    async def test_snapshot_with_an_open_call_or_odd_fact_refuses(self) -> None:
        tools, _ = build()
        async with Monitor(tools).episode(facts={"when": {1, 2}}) as ep:
            pending = await ep.begin("note", {"text": "x"})
            with pytest.raises(SpecError, match="open or waiting"):
                ep.snapshot()
            pending.done("ok")
            with pytest.raises(RecordError, match="fact 'when' is not JSON data"):
                ep.snapshot()
