"""Preconditions learned from the environment's own error results (prefixmon.learn._mining).

Small hand-made transcripts, one per predicate form: the accepted calls satisfy it, the
rejected ones of an error class do not. Then the threshold that decides which are enabled,
a class whose evidence contradicts itself (nothing learned), and the learned rules at run
time on a real Monitor (refused when decided, undetermined when the object was not seen).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import anyio
import pytest

from prefixmon import Monitor, Toolset
from prefixmon.learn import Call, Thresholds, Transcript, learn
from prefixmon.learn._mining import error_class, shape
from prefixmon.rules.specfile import RequireRule, SpecFile


def _tools(**tools: dict[str, Any]) -> Toolset:
    return Toolset.from_openai(
        [
            {
                "type": "function",
                "function": {"name": name, "description": "", "parameters": {"type": "object", "properties": props}},
            }
            for name, props in tools.items()
        ]
    )


STR = {"type": "string"}
NUM = {"type": "number"}
LIST = {"type": "array", "items": {"type": "string"}}


def _episodes(calls: Sequence[Sequence[Call]]) -> list[Transcript]:
    return [Transcript(episode_id=f"e{i}", events=tuple(c)) for i, c in enumerate(calls)]


def _ok(tool: str, args: dict[str, Any], result: Any = "ok") -> Call:
    return Call(tool=tool, arguments=args, result=json.dumps(result) if not isinstance(result, str) else result)


def _err(tool: str, args: dict[str, Any], text: str) -> Call:
    return Call(tool=tool, arguments=args, result=f"Error: {text}")


def _learned(spec: SpecFile, tool: str) -> list[RequireRule]:
    return [r for r in spec.tools[tool].requires if r.suggested] if tool in spec.tools else []


def _order(order_id: str, status: str, payment: str = "credit_card_1") -> dict[str, Any]:
    return {"order_id": order_id, "status": status, "payment_history": [{"payment_method_id": payment, "amount": 10}]}


def _exchanges(first: int, statuses: Sequence[str]) -> list[list[Call]]:
    """Each order looked up, then exchanged: accepted when delivered, else the environment's error."""
    episodes = []
    for i, status in enumerate(statuses):
        oid = f"#W{first + i}"
        ex = {"order_id": oid, "payment_method_id": "credit_card_1"}
        done = (
            _ok("exchange_delivered_order", ex)
            if status == "delivered"
            else _err("exchange_delivered_order", ex, "non-delivered order cannot be exchanged")
        )
        episodes.append([_ok("get_order", {"order_id": oid}, _order(oid, status)), done])
    return episodes


ORDER_TOOLS = _tools(
    get_order={"order_id": STR},
    exchange_delivered_order={"order_id": STR, "payment_method_id": STR},
    swap_items={"item_ids": LIST, "new_item_ids": LIST},
    update_flights={"payment_id": STR},
)


class TestErrorClass:
    def test_masks_ids_numbers_and_quotes(self) -> None:
        """Errors of one kind share a class whatever ids, amounts and quoted names they carry."""
        a = error_class("Error: not enough balance in payment method gift_card_7 (paid 120.50) for 'Ann'")
        b = error_class("Error: not enough balance in payment method gift_card_19 (paid 3) for 'Bo'")
        assert a == b == "Error: not enough balance in payment method <id> (paid <id>) for '…'"
        assert error_class({"error": "Order #W123 not found", "code": 4}) == "Order <id> not found"

    def test_shape(self) -> None:
        assert shape("#W5199551") == r"\#W[0-9]+"
        assert shape("credit_card_42") == "[a-z]+_[a-z]+_[0-9]+"


class TestForms:
    """Each predicate form the miner searches, learned from the calls that show it."""

    def test_observed_field_allowed(self) -> None:
        """exchange on an order whose status was not delivered: order.status == "delivered", its let and observes."""
        episodes = _exchanges(1000, ["delivered"] * 4 + ["pending"] * 2)
        spec = learn(_episodes(episodes), tools=ORDER_TOOLS)
        (rule,) = [r for r in _learned(spec, "exchange_delivered_order") if "status" in r.expr]
        assert rule.expr == 'order.status == "delivered"' and rule.enabled
        assert rule.evidence is not None and rule.evidence.predicts == ("Error: non-delivered order cannot be exchanged",)
        assert (rule.evidence.support, rule.evidence.counter_examples) == (4, 0)
        assert rule.message is not None and "non-delivered order cannot be exchanged" in rule.message
        tool = spec.tools["exchange_delivered_order"]
        assert tool.let["order"].object == "order" and tool.let["order"].id == "args.order_id"
        assert any(o.object == "order" for o in spec.tools["get_order"].observes)

    def test_banned_prefix(self) -> None:
        """A certificate the environment refuses where gift cards and credit cards pass: !startsWith("certificate_")."""
        episodes = [
            [_ok("update_flights", {"payment_id": p})] for p in ("gift_card_1", "credit_card_2", "gift_card_3", "credit_card_4")
        ]
        episodes += [[_err("update_flights", {"payment_id": "certificate_9"}, "certificate cannot be used to update")]]
        (rule,) = _learned(learn(_episodes(episodes), tools=ORDER_TOOLS), "update_flights")
        assert rule.expr == 'type(args.payment_id) != string || !(args.payment_id.startsWith("certificate_"))'
        assert rule.enabled  # the error text names the certificate: one rejection and the environment's word

    def test_allowed_shape(self) -> None:
        """Order ids the shop never writes that way (#123, W123) are refused by the shape of the ones it accepts."""
        episodes = [[_ok("get_order", {"order_id": f"#W{100 + i}"}, _order(f"#W{100 + i}", "pending"))] for i in range(6)]
        episodes += [[_err("get_order", {"order_id": bad}, "order not found")] for bad in ("#123", "W123")]
        (rule,) = _learned(learn(_episodes(episodes), tools=ORDER_TOOLS), "get_order")
        assert rule.expr in (
            r'type(args.order_id) != string || args.order_id.matches("^\\#W[0-9]+$")',
            r'type(args.order_id) != string || args.order_id.startsWith("#W")',
        )
        assert rule.enabled and rule.evidence is not None and rule.evidence.counter_examples == 0

    def test_relations_between_arguments(self) -> None:
        """Lists of unequal length and an item swapped for itself: size(a) == size(b), zip(a, b).all(p, p[0] != p[1])."""
        good = [_ok("swap_items", {"item_ids": ["1", "2"][:n], "new_item_ids": ["3", "4"][:n]}) for n in (1, 2, 1, 2)]
        bad_size = [_err("swap_items", {"item_ids": ["1", "2"], "new_item_ids": ["3"]}, "the number of items should match")] * 2
        same = [_err("swap_items", {"item_ids": ["1"], "new_item_ids": ["1"]}, "the new item id should be different")] * 2
        spec = learn(_episodes([good, bad_size, same]), tools=ORDER_TOOLS)
        exprs = {r.expr for r in _learned(spec, "swap_items")}
        assert "size(args.item_ids) == size(args.new_item_ids)" in exprs
        assert "zip(args.item_ids, args.new_item_ids).all(p, p[0] != p[1])" in exprs

    def test_membership_in_an_observed_list(self) -> None:
        """A refund to a method the order was not paid with: refused only for ids like those rejected (credit cards)."""
        episodes = []
        for i in range(6):
            oid = f"#W{200 + i}"
            paid = f"credit_card_{i}"
            used = paid if i < 4 else f"credit_card_{90 + i}"
            ex = {"order_id": oid, "payment_method_id": used}
            done = (
                _ok("exchange_delivered_order", ex)
                if used == paid
                else _err("exchange_delivered_order", ex, "payment method should be the original payment method")
            )
            episodes.append([_ok("get_order", {"order_id": oid}, _order(oid, "delivered", paid)), done])
        rules = _learned(learn(_episodes(episodes), tools=ORDER_TOOLS), "exchange_delivered_order")
        (rule,) = [r for r in rules if "payment_history" in r.expr]
        assert rule.expr == (
            "order.payment_history.exists(e, e.payment_method_id == args.payment_method_id)"
            ' || !(type(args.payment_method_id) == string && (args.payment_method_id.startsWith("credit_card_")))'
        )

    def test_a_number_covered_by_the_object_its_sibling_names(self) -> None:
        """Gift cards that do not cover their amount: each amount at most the balance of the card it names."""
        tools = _tools(
            get_user={"user_id": STR},
            book={
                "payment_methods": {
                    "type": "array",
                    "items": {"type": "object", "properties": {"payment_id": STR, "amount": NUM}},
                }
            },
        )
        user = {"user_id": "u1", "payment_methods": {"gift_card_1": {"id": "gift_card_1", "amount": 100}}}
        episodes = [
            [
                _ok("get_user", {"user_id": "u1"}, user),
                _ok("book", {"payment_methods": [{"payment_id": "gift_card_1", "amount": a}]}),
            ]
            for a in (10, 50, 99)
        ] + [
            [
                _ok("get_user", {"user_id": "u1"}, user),
                _err(
                    "book",
                    {"payment_methods": [{"payment_id": "gift_card_1", "amount": a}]},
                    "not enough balance in payment method gift_card_1",
                ),
            ]
            for a in (150, 300)
        ]
        spec = learn(_episodes(episodes), tools=tools)
        (rule,) = [r for r in _learned(spec, "book") if ">=" in r.expr]
        assert rule.expr == (
            'args.payment_methods.all(p, !has(seen("payment", p.payment_id).amount)'
            ' || seen("payment", p.payment_id).amount >= p.amount)'
        )
        assert rule.enabled
        assert any(o.object == "payment" and o.at == "payment_methods.*" for o in spec.tools["get_user"].observes)

    def test_named_by_the_tool(self) -> None:
        """No rejection seen, but the tool is named cancel_pending_order and every order it accepted was pending."""
        tools = _tools(get_order={"order_id": STR}, cancel_pending_order={"order_id": STR})
        episodes = [
            [
                _ok("get_order", {"order_id": f"#W{i}"}, _order(f"#W{i}", "pending")),
                _ok("cancel_pending_order", {"order_id": f"#W{i}"}),
            ]
            for i in range(4)
        ]
        (rule,) = _learned(learn(_episodes(episodes), tools=tools), "cancel_pending_order")
        assert rule.expr == 'order.status == "pending"' and rule.enabled
        assert rule.evidence is not None and rule.evidence.predicts == () and rule.evidence.confidence == 0.75


class TestThreshold:
    """Which learned preconditions are enabled: those whose confidence reaches Thresholds.enable_above."""

    @staticmethod
    def _one_unnamed_rejection() -> list[Transcript]:
        episodes = [[_ok("update_flights", {"payment_id": p})] for p in ("gift_card_1", "credit_card_2", "gift_card_3")]
        return _episodes([*episodes, [_err("update_flights", {"payment_id": "voucher_1"}, "request failed")]])

    def test_one_rejection_the_text_does_not_explain_stays_a_suggestion(self) -> None:
        (rule,) = _learned(learn(self._one_unnamed_rejection(), tools=ORDER_TOOLS), "update_flights")
        assert not rule.enabled and rule.evidence is not None and rule.evidence.confidence == pytest.approx(2 / 3, abs=1e-3)

    def test_a_lower_threshold_enables_it_and_one_disables_everything(self) -> None:
        (rule,) = _learned(
            learn(self._one_unnamed_rejection(), tools=ORDER_TOOLS, thresholds=Thresholds(enable_above=0.6)), "update_flights"
        )
        assert rule.enabled
        spec = learn(self._one_unnamed_rejection(), tools=ORDER_TOOLS, thresholds=Thresholds(enable_above=1.0))
        assert not any(r.enabled for r in _learned(spec, "update_flights"))

    def test_threshold_out_of_range(self) -> None:
        from prefixmon.exceptions import SpecError

        with pytest.raises(SpecError, match="enable_above"):
            Thresholds(enable_above=1.5)


class TestContradictions:
    def test_a_class_with_contradicting_evidence_gives_no_predicate(self) -> None:
        """The same arguments and the same observed order were accepted and rejected: nothing separates them."""
        episodes = []
        for i in range(6):
            ex = {"order_id": "#W1", "payment_method_id": "credit_card_1"}
            done = _ok("exchange_delivered_order", ex) if i % 2 else _err("exchange_delivered_order", ex, "try later")
            episodes.append([_ok("get_order", {"order_id": "#W1"}, _order("#W1", "shipped")), done])
        assert _learned(learn(_episodes(episodes), tools=ORDER_TOOLS), "exchange_delivered_order") == []

    def test_an_accepted_counter_example_removes_the_rule(self) -> None:
        """One accepted certificate: "certificate" no longer separates the rejected one."""
        episodes = [[_ok("update_flights", {"payment_id": p})] for p in ("gift_card_1", "certificate_2", "gift_card_3")]
        episodes += [[_err("update_flights", {"payment_id": "certificate_9"}, "certificate cannot be used")]]
        rules = _learned(learn(_episodes(episodes), tools=ORDER_TOOLS), "update_flights")
        assert not any("certificate" in r.expr for r in rules)

    def test_one_value_every_accepted_call_passed_is_no_evidence(self) -> None:
        """Every accepted login used the corpus's one user name; logins rejected for another reason used others.
        "username == john" would refuse the next corpus's users (BFCL: a held-out task logs in as dr_smith)."""
        tools = _tools(login={"username": STR, "password": STR})
        episodes = [[_ok("login", {"username": "john", "password": f"pw{i}"})] for i in range(6)]
        episodes += [
            [Call(tool="login", arguments={"username": u, "password": "x"}, result='{"ok": false}', error=True)]
            for u in ("ann", "bo")
        ]
        assert [r.expr for r in _learned(learn(_episodes(episodes), tools=tools), "login") if "username" in r.expr] == []

    def test_an_error_about_an_amount_gets_no_value_rule(self) -> None:
        """Gift cards rejected for their balance, never accepted in these runs: "not a gift card" would refuse the
        next gift card that covers the amount (τ retail's held-out runs have such payments)."""
        episodes = [
            [_ok("update_flights", {"payment_id": p})] for p in ("credit_card_1", "paypal_2", "credit_card_3", "paypal_4")
        ]
        episodes += [
            [_err("update_flights", {"payment_id": f"gift_card_{i}"}, "insufficient gift card balance to pay")] for i in range(3)
        ]
        assert _learned(learn(_episodes(episodes), tools=ORDER_TOOLS), "update_flights") == []

    def test_a_field_of_unseen_values_is_not_memorised(self) -> None:
        """Every accepted order had another total: banning the rejected totals would memorise, not generalise."""
        episodes = []
        for i in range(8):
            oid = f"#W{300 + i}"
            record = {**_order(oid, "delivered"), "total": 10.5 + i}
            ex = {"order_id": oid, "payment_method_id": "credit_card_1"}
            done = _ok("exchange_delivered_order", ex) if i < 6 else _err("exchange_delivered_order", ex, "out of stock")
            episodes.append([_ok("get_order", {"order_id": oid}, record), done])
        rules = _learned(learn(_episodes(episodes), tools=ORDER_TOOLS), "exchange_delivered_order")
        assert not any(r.enabled for r in rules if "total" in r.expr)


class TestAtRunTime:
    """The learned rule in a real Monitor: refuses what it decides, undetermined on what was not observed."""

    def test_refused_allowed_and_undetermined(self) -> None:
        pytest.importorskip("cel_expr_python", reason="CEL preconditions need the cel extra")
        episodes = _exchanges(400, ["delivered"] * 4 + ["pending"] * 2)
        spec = learn(_episodes(episodes), tools=ORDER_TOOLS)

        async def run() -> list[str]:
            monitor = Monitor(ORDER_TOOLS.apply_spec(spec))
            out = []
            async with monitor.episode(task_id="t") as ep:
                for oid, status in (("#W9001", "pending"), ("#W9002", "delivered")):
                    seen = await ep.begin("get_order", {"order_id": oid})
                    seen.done(json.dumps(_order(oid, status)))
                    call = await ep.begin("exchange_delivered_order", {"order_id": oid, "payment_method_id": "credit_card_1"})
                    out.append(call.verdict.failures[0].cause.value if call.verdict.failures else "executable")
                    call.done("ok")
                ep.user("My other order is #W9003.")  # a reference the user states: the order itself was never seen
                unseen = await ep.begin("exchange_delivered_order", {"order_id": "#W9003", "payment_method_id": "credit_card_1"})
                out.append("undetermined" if unseen.verdict.executable and unseen.verdict.undetermined else "decided")
                unseen.done("ok")
            return out

        assert anyio.run(run) == ["precondition", "executable", "undetermined"]


class TestSchemaPaths:
    def test_a_field_the_schema_lacks_gets_no_rule_and_the_spec_loads(self) -> None:
        """A model that sends flights[].fare_id, which the closed schema does not have: no rule names it (the spec used
        to fail to load on the very toolset it was learned from: 'an element of args.flights has no field fare_id')."""
        flight = {"type": "object", "properties": {"flight_number": STR}, "additionalProperties": False}
        tools = _tools(
            search={"origin": STR},
            update={"flights": {"type": "array", "items": flight}},
        )
        episodes = [
            [
                _ok("search", {"origin": "JFK"}, {"flights": [{"flight_number": f"HAT{i}", "fare_id": f"fare_{7000 + i}"}]}),
                _ok("update", {"flights": [{"flight_number": f"HAT{i}", "fare_id": f"fare_{7000 + i}"}]}),
            ]
            for i in range(12)
        ]
        spec = learn(_episodes(episodes), tools=tools)
        assert "flights[].fare_id" not in spec.tools["update"].args
        assert "flights[].flight_number" in spec.tools["update"].args
        tools.apply_spec(spec)  # raised SpecError before


class TestBounds:
    def test_counts_stay_bounded_whatever_the_corpus_holds(self) -> None:
        """Thousands of error texts, field names and values: at most 16 classes (+ other), 256 features and
        relations per side, 16 values per feature."""
        from prefixmon.learn import Learner
        from prefixmon.learn._mining import MAX_CLASSES, MAX_FEATURES, MAX_VALUES

        tools = _tools(get={"thing_id": STR}, act={"thing_id": STR, "other_id": STR})
        learner = Learner(tools)
        for i in range(600):
            record = {"thing_id": f"T{i}X", **{f"f{i}_{j}": f"val{i}x" for j in range(8)}, "many{i}": [{"k_id": f"KEY{i}Y"}]}
            learner.add(
                Transcript(
                    episode_id=f"e{i}",
                    events=(
                        _ok("get", {"thing_id": f"T{i}X"}, record),
                        _err("act", {"thing_id": f"T{i}X", "other_id": f"O{i}Z"}, f"failure kind{'x' * (i % 50)}"),
                        _ok("act", {"thing_id": f"T{i}X", "other_id": f"KEY{i}Y"}),
                    ),
                )
            )
        mining = learner.miner.tools["act"]
        assert len(mining.classes) <= MAX_CLASSES + 1
        for side in (mining.accepted, *mining.classes.values()):
            assert len(side.values) <= MAX_FEATURES and len(side.decided) <= MAX_FEATURES
            assert all(len(c) <= MAX_VALUES for c in side.values.values())
        learner.spec()  # and the build stays within them
