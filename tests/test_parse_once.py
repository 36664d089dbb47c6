"""A call's arguments are parsed once, at the door (issue 37).

Every step after admission (probes, the check, the policy's hooks, an approval's key, a
fail-open verdict) reads the episode's one :class:`prefixmon._call.ParsedCall`. The count is
taken where JSON text is parsed, ``prefixmon._call.from_json``: any step that parsed the raw
arguments again, through whatever import, would go through it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from pydantic_core import from_json

from prefixmon import Approve, Decision, Monitor, Policy, ToolBlocked, ToolCall
from prefixmon.snapshot import args_key

from .test_rules import RULES, Shop, toolset

pytestmark = pytest.mark.anyio


@pytest.fixture
def parsed(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The texts parsed as arguments, in order."""
    texts: list[str] = []

    def counting(text: str, **options: Any) -> Any:
        texts.append(text)
        return from_json(text, **options)

    monkeypatch.setattr("prefixmon._call.from_json", counting)
    yield texts


def text(**args: Any) -> str:
    return json.dumps(args)


class TestOneParsePerCall:
    async def test_a_plain_call(self, parsed: list[str]) -> None:
        raw = text(order_id="#W1")
        async with Monitor(toolset(Shop())).episode(task_id="t") as ep:
            await ep.call("get_order_details", raw)
        assert parsed == [raw]

    async def test_an_observed_call_that_does_not_fit_its_schema(self, parsed: list[str]) -> None:
        """The check parses; the observe policy runs the call with the same parsed arguments."""
        raw = text(order_id=7)
        async with Monitor(toolset(Shop()), policy="observe").episode(task_id="t") as ep:
            await ep.call("get_order_details", raw)
        assert parsed == [raw]
        assert ep.record is not None and ep.record.actions[0].decision is Decision.OBSERVE

    async def test_an_escalated_call_approved_and_remembered(self, parsed: list[str]) -> None:
        """The approval's key is the parsed arguments: the second, identical call is one parse and no question."""
        asked: list[str] = []

        async def human(verdict: Any, call: ToolCall) -> Approve:
            asked.append(verdict.code)
            return Approve()

        monitor = Monitor(toolset(Shop()), policy="escalate", escalate=human)
        async with monitor.episode(task_id="t") as ep:  # #W1 was never returned nor said: a dependency failure
            await ep.call("modify_order", text(order_id="#W1"))
            await ep.call("modify_order", text(order_id="#W1"))
        assert parsed == [text(order_id="#W1")] * 2 and asked == ["unbound_reference"]
        assert ep.record is not None and [a.decision for a in ep.record.actions] == [Decision.APPROVE] * 2

    async def test_an_undetermined_call_a_human_approves(self, parsed: list[str]) -> None:
        async def human(verdict: Any, call: ToolCall) -> Approve:
            assert call.args == raw  # the hook is shown the call as emitted
            return Approve()

        raw = text(order_id="#W1", reason="x")
        monitor = Monitor(toolset(Shop()), policy=Policy(default="block", undetermined="escalate"), escalate=human)
        async with monitor.episode(task_id="t") as ep:
            ep.user("cancel #W1")
            await ep.call("cancel_pending_order", raw)
        assert parsed == [raw]

    async def test_a_call_whose_spec_probes(self, parsed: list[str]) -> None:
        """The probe reads the parsed arguments; the check reads them again without parsing."""
        rules: dict[str, Any] = json.loads(json.dumps(RULES))
        rules["tools"]["cancel_pending_order"]["probes"] = [
            {"for": "order", "call": "get_order_details", "args": {"order_id": "args.order_id"}}
        ]
        shop = Shop()
        raw = text(order_id="#W2", reason="x")
        async with Monitor(toolset(shop, rules), policy="block").episode(task_id="t") as ep:
            ep.user("cancel #W2")
            with pytest.raises(ToolBlocked, match="#W2 is delivered"):
                await ep.call("cancel_pending_order", raw)
        assert parsed == [raw] and shop.reads == 1

    async def test_a_batch(self, parsed: list[str]) -> None:
        first, second = text(order_id="#W1"), text(order_id="#W2")
        async with Monitor(toolset(Shop())).episode(task_id="t") as ep:
            pending = await ep.begin_batch([("get_order_details", first), ("get_order_details", second)])
            for call in pending:
                assert not isinstance(call, ToolBlocked)
                call.done(await call.run())
        assert parsed == [first, second]

    async def test_an_unchecked_call_that_fails_open(self, parsed: list[str]) -> None:
        raw = text(order_id="#W1")
        async with Monitor(toolset(Shop())).episode(task_id="t") as ep:
            pending = await ep.begin_unchecked("get_order_details", raw, error=RuntimeError("no listing"))
            assert pending.args == {"order_id": "#W1"}
            pending.done(await pending.run())
        assert parsed == [raw] and ep.internal_errors == 1

    async def test_a_replacement_is_a_new_call(self, parsed: list[str]) -> None:
        """A replan's replacement brings arguments of its own: they are parsed, once."""
        replacement = text(order_id="#W1")

        async def replan(verdict: Any, call: ToolCall, state: Any) -> ToolCall:
            return ToolCall(name="get_order_details", args=replacement)

        raw = text(order_id="#W1", reason="x")
        async with Monitor(toolset(Shop()), policy="replan", replan=replan).episode(task_id="t") as ep:
            await ep.call("cancel_pending_order", raw)  # #W1 unbound: replaced by the read
        assert parsed == [raw, replacement]


class TestApprovalKeys:
    """Keys of remembered answers are what they were when the key parsed the text itself."""

    def test_no_arguments_and_blank_text(self) -> None:
        assert args_key(None) == "null"
        assert args_key("") == '""' and args_key("  ") == '"  "'
        assert args_key("{}") == args_key({}) == "{}"

    def test_text_bytes_and_mappings_agree(self) -> None:
        key = '{"a":[1,2],"b":1}'
        assert args_key('{"b": 1, "a": [1, 2]}') == args_key(b'{"b":1,"a":[1,2]}') == args_key({"b": 1, "a": [1, 2]}) == key

    def test_text_that_is_no_object_is_keyed_by_itself(self) -> None:
        assert args_key("not json") == '"not json"'
        assert args_key(b"\xff") == '"\ufffd"'  # (not UTF-8: the text as decoded with replacements)
