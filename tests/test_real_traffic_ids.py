"""Ids and values the way real runs write them: decorated, in another case, inside text, in mappings.

Recorded runs of real models (τ-bench retail, τ² airline and retail) had calls the
environment ran refused by the monitor:

- the user types ``W8855135`` and the agent sends ``#W8855135`` (or the reverse): an id the
  user stated must match with the normalisation grounding uses (``#``, case, surrounding
  punctuation and markdown), and so must an id a tool produced;
- a tool returns ``{"Bookshelf": "8600330539", ...}`` (the ids are the mapping's values), a
  mapping keyed by ids, a list of ids, or a sentence naming the id (``Certificate
  certificate_3221322 added to user ...``): producers cover them;
- a user types a date of birth with U+2011 hyphens or U+202F spaces: it grounds the ISO date.

The excerpts below are written for these tests in the style of those runs.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import pytest

from prefixmon import Cause, Monitor, Ref, Toolset, TrackedState
from prefixmon.predicate import check_dependencies, transition
from prefixmon.rules.grounding import fold

ORDER = Ref("order_id", user=True)
PRODUCT = Ref("product_id", user=True)
PAYMENT = Ref("payment_method_id", user=True)
ITEM = Ref("item_id", user=True)


def _tools() -> Toolset:
    tools = Toolset()
    obj = {"type": "object", "properties": {"order_id": {"type": "string"}}}
    tools.add_schema("get_order_details", obj, refs={"order_id": ORDER}, produces=[("order_id", "order_id")])
    tools.add_schema(
        "get_user_details",
        {"type": "object", "properties": {"user_id": {"type": "string"}}},
        produces=[("order_id", "orders"), ("payment_method_id", "id")],
    )
    tools.add_schema(
        "get_product_details",
        {"type": "object", "properties": {"product_id": {"type": "string"}}},
        refs={"product_id": PRODUCT},
        produces=[("product_id", "product_id"), ("item_id", "variants{}")],
    )
    tools.add_schema("buy_item", {"type": "object", "properties": {"item_id": {"type": "string"}}}, refs={"item_id": ITEM})
    tools.add_schema("list_all_product_types", None, produces=[("product_id", "*")])
    tools.add_schema(
        "send_certificate",
        {"type": "object", "properties": {"user_id": {"type": "string"}}},
        produces=[("payment_method_id", r"~certificate_\d+")],
    )
    tools.add_schema(
        "send_voucher",
        {"type": "object", "properties": {"user_id": {"type": "string"}}},
        produces=[("payment_method_id", "payment_method_id")],
    )
    tools.add_schema(
        "pay",
        {"type": "object", "properties": {"payment_id": {"type": "string"}}},
        refs={"payment_id": PAYMENT},
    )
    return tools


TOOLS = _tools()


def flight_booking() -> Toolset:
    """``book(flight_number)``, whose flight number must have been returned by a tool or said by the user."""
    tools = Toolset()
    tools.add_schema(
        "book",
        {"type": "object", "properties": {"flight_number": {"type": "string"}}},
        refs={"flight_number": Ref("flight_number", user=True)},
    )
    return tools


def _state(*, user: tuple[str, ...] = ()) -> TrackedState:
    state = TrackedState()
    for text in user:
        state.inform(text, user=True)
    return state


def _ran(state: TrackedState, name: str, args: dict[str, Any], result: Any) -> None:
    state.depth += 1
    assert not transition(state, TOOLS[name], args, result, accepted=True)


def _dependency(state: TrackedState, name: str, args: dict[str, Any]) -> str | None:
    failure = check_dependencies(TOOLS, state, TOOLS[name], args)
    if failure is None:
        return None
    assert failure.cause is Cause.DEPENDENCY
    return failure.reason


class TestUserStatedIds:
    """An id the user typed counts however the agent decorates it, and the reverse."""

    @pytest.mark.parametrize(
        ("said", "sent"),
        [
            ("The order ID is W8855135. I'd like to exchange the lamp.", "#W8855135"),
            ("my order number is #W8855135, thanks", "W8855135"),
            ("it's order w8855135", "#W8855135"),
            ("Order (#W8855135) arrived broken!", "w8855135"),
            ("charge it to my travel certificate **certificate_8045380**.", "certificate_8045380"),
            ("user ID:\u202faarav_ahmed_6699, order\u00a0#W8855135", "W8855135"),
            ("My order is W8855135\u2014can you pull it up?", "#W8855135"),
            ("three upcoming reservations\u2014IFOYYZ, NQNU5R--and M20IZO.", "IFOYYZ"),
            ("it's on order#W8855135's invoice", "W8855135"),
        ],
    )
    def test_decorated_forms_match(self, said: str, sent: str) -> None:
        state = _state(user=(said,))
        assert state.user_said(sent)
        assert _dependency(state, "get_order_details", {"order_id": sent}) is None

    def test_an_other_id_is_still_refused(self) -> None:
        """W8855136 is not W8855135, nor is a prefix of it."""
        state = _state(user=("The order ID is W8855135.",))
        for sent in ("#W8855136", "W885513", "8855135"):
            assert _dependency(state, "get_order_details", {"order_id": sent}) is not None

    def test_the_number_of_a_prefixed_id(self) -> None:
        """ "The order ID is 9502127." ... "I forgot the W at the beginning.": #W9502127 was stated."""
        state = _state(user=("The order ID is 9502127. I only want the vacuum.", "I forgot the W at the beginning."))
        assert _dependency(state, "get_order_details", {"order_id": "#W9502127"}) is None
        assert _dependency(state, "get_order_details", {"order_id": "#W9502128"}) is not None
        assert _dependency(state, "get_order_details", {"order_id": "#WXY9502127"}) is not None  # 1-2 letters only

    def test_user_said_is_an_index_lookup(self) -> None:
        """The lookup reads the id's forms, not the user's texts (a long conversation costs no more)."""
        state = _state(user=("order #W8855135",))
        state._user_texts.clear()  # the texts are not read for a one-word id
        assert state.user_said("W8855135")

    def test_refusal_says_which_forms_it_looked_for(self) -> None:
        state = _state(user=("The order ID is W1111111.",))
        reason = _dependency(state, "get_order_details", {"order_id": "W8855135"})
        assert reason is not None
        assert "looked for 'W8855135', '#W8855135'" in reason
        assert "among ids returned by tools and said by the user" in reason
        reason = _dependency(state, "get_order_details", {"order_id": "#W8855135"})
        assert reason is not None and "looked for '#W8855135', 'W8855135'" in reason


class TestProducedIds:
    """A produced id matches the same way; producers read mapping values and keys, lists and text."""

    def test_produced_with_hash_sent_without(self) -> None:
        state = _state()
        _ran(state, "get_user_details", {"user_id": "yusuf_rossi_9620"}, json.dumps({"orders": ["#W2378156", "#W4817420"]}))
        assert _dependency(state, "get_order_details", {"order_id": "W2378156"}) is None
        assert _dependency(state, "get_order_details", {"order_id": "#w4817420"}) is None
        assert state.is_bound("order_id", "w2378156")

    def test_produced_without_hash_sent_with(self) -> None:
        state = _state()
        _ran(state, "get_order_details", {"order_id": "W2378156"}, {"order_id": "W2378156", "status": "pending"})
        assert _dependency(state, "get_order_details", {"order_id": "#W2378156"}) is None

    def test_invalidation_reaches_every_form(self) -> None:
        state = _state()
        _ran(state, "get_user_details", {"user_id": "u"}, {"orders": ["#W2378156"]})
        state.invalidate("order_id", "W2378156", by="cancel_pending_order")
        b = state.binding("#W2378156", "order_id")
        assert b is not None and not b.current

    def test_mapping_values(self) -> None:
        """τ² list_all_product_types: {name: product id}; the ids are the values."""
        state = _state()
        _ran(state, "list_all_product_types", {}, json.dumps({"Bookshelf": "8600330539", "Desk Lamp": "6817146515"}))
        assert _dependency(state, "get_product_details", {"product_id": "6817146515"}) is None
        assert _dependency(state, "get_product_details", {"product_id": "Bookshelf"}) is not None

    def test_mapping_keys(self) -> None:
        """get_product_details: variants keyed by item id."""
        state = _state()
        result = {"product_id": "8600330539", "variants": {"1008292230": {"price": 10.0}, "2206116040": {"price": 12.5}}}
        _ran(state, "get_product_details", {"product_id": "8600330539"}, result)
        assert _dependency(state, "buy_item", {"item_id": "2206116040"}) is None
        assert _dependency(state, "buy_item", {"item_id": "price"}) is not None

    def test_regex_producer_in_text(self) -> None:
        """τ² send_certificate answers with a sentence; '~REGEX' binds what it matches."""
        state = _state()
        text = "Certificate certificate_3221322 added to user aarav_ahmed_6699 with amount 300."
        _ran(state, "send_certificate", {"user_id": "aarav_ahmed_6699"}, text)
        assert _dependency(state, "pay", {"payment_id": "certificate_3221322"}) is None
        assert _dependency(state, "pay", {"payment_id": "aarav_ahmed_6699"}) is not None

    def test_text_result_names_a_produced_kind(self) -> None:
        """By default, ids named in a text result count as the kinds the tool produces."""
        state = _state()
        text = "Voucher gift_card_7791 added to user mia_li_3668 with amount 150."
        _ran(state, "send_voucher", {"user_id": "mia_li_3668"}, text)
        assert _dependency(state, "pay", {"payment_id": "gift_card_7791"}) is None
        assert _dependency(state, "pay", {"payment_id": "150"}) is not None  # an amount is not an id
        assert _dependency(state, "pay", {"payment_id": "Voucher"}) is not None  # nor a word

    def test_a_refused_call_produces_nothing(self) -> None:
        state = _state()
        state.depth += 1
        transition(state, TOOLS["send_certificate"], {"user_id": "x"}, "Error: certificate_1 not sent", accepted=False)
        assert _dependency(state, "pay", {"payment_id": "certificate_1"}) is not None


class TestWrittenForms:
    """Information findings: a date of birth, a name or an amount typed with Unicode dashes and spaces."""

    @pytest.mark.parametrize(
        "said",
        [
            "add Kevin\u202fSmith (DOB\u202f2001\u201104\u201112)",
            "| Aarav | Aarav\u202fSilva | 2001\u201004\u201012 |",
            "born 2001\u201204\u201212",
            "born 2001\u201304\u201312",
            "born 2001\u221204\u221212",
            "born April\u00a012, 2001",
            "born April 12th,\u20092001",
            "born 2001/04/12",
            "born 12\u00a0April\u202f2001",
        ],
    )
    def test_date_of_birth(self, said: str) -> None:
        state = _state(user=(said,))
        assert state.seen("2001-04-12", "normalized")
        assert not state.seen("2001-04-13", "normalized")

    def test_fold_maps_dashes_and_spaces(self) -> None:
        assert fold("O\u2019Hare\u202f\u2013\u00a0one\u2011way \u22125") == "o'hare - one-way -5"

    def test_names_and_amounts(self) -> None:
        state = _state(user=("I'm Mohamed\u202fSilva from O\u2019Hare; the charge of\u202f$1,286 is fine, refund \u221272",))
        assert state.seen("Mohamed Silva", "normalized")
        assert state.seen("O'Hare", "normalized")
        assert state.seen(1286, "normalized")
        assert state.seen(-72, "normalized")


class TestThroughAMonitor:
    """The same through an episode, the way a replay feeds it."""

    async def test_user_said_without_hash(self) -> None:
        tools = Toolset()

        @tools.tool
        def get_order_details(order_id: Annotated[str, ORDER]) -> dict[str, str]:
            """The order."""
            return {"order_id": order_id}

        monitor = Monitor(tools)
        async with monitor.episode(task_id="t") as ep:
            ep.user("The order ID is W8855135.")
            verdict = ep.check("get_order_details", {"order_id": "#W8855135"})
        assert verdict.executable, verdict.reason


class TestIdsTheAgentMadeUp:
    """An id the agent wrote before it was given one, then repeated by the user, is not stated.

    A real τ² airline run: the agent writes a table of "available direct flights" (HAT900 to
    HAT904) that no search returned; the user picks "flight HAT902"; the booking fails with
    ``Flight HAT902 not found``. What the user repeats from the agent is no evidence the id exists.
    """

    MADE_UP = "Available direct flights:\n| May 27 | HAT902 | 07:00 | $500 |\n| May 28 | #W7777777 | ... |"

    def test_repeated_by_the_user_it_is_still_the_agents(self) -> None:
        state = TrackedState()
        state.agent_wrote(self.MADE_UP)
        state.inform("I'd like the May 28 one, #W7777777 please.", user=True)
        assert not state.user_said("#W7777777") and state.agent_made_up("W7777777")
        reason = _dependency(state, "get_order_details", {"order_id": "#W7777777"})
        assert reason is not None and "first written by the agent itself" in reason

    def test_ids_the_agent_was_given_are_not_its_own(self) -> None:
        """The user said it first, a tool returned it first, or a tool returns it later."""
        said_first = _state(user=("my order is W7777777",))
        said_first.agent_wrote("Looking up order #W7777777 now.")
        said_first.inform("yes, #W7777777", user=True)
        assert _dependency(said_first, "get_order_details", {"order_id": "#W7777777"}) is None

        returned_first = TrackedState()
        _ran(returned_first, "get_user_details", {"user_id": "u"}, json.dumps({"orders": ["#W7777777"]}))
        returned_first.agent_wrote("You have one order, #W7777777.")
        assert _dependency(returned_first, "get_order_details", {"order_id": "#W7777777"}) is None
        assert not returned_first.agent_made_up("#W7777777")

        returned_later = TrackedState()
        returned_later.agent_wrote(self.MADE_UP)
        _ran(returned_later, "get_user_details", {"user_id": "u"}, json.dumps({"orders": ["#W7777777"]}))
        assert _dependency(returned_later, "get_order_details", {"order_id": "#W7777777"}) is None

    def test_words_and_amounts_are_not_ids(self) -> None:
        state = TrackedState()
        state.agent_wrote("The total is $500 for 2 passengers, on 2024-05-27 at 07:00.")
        assert not state._agent_ids

    async def test_a_transcript_replay_reads_the_agents_text(self) -> None:
        """:func:`replay_messages` feeds assistant text, so the echoed id is refused."""
        from prefixmon.adapters.transcripts import replay_messages

        messages: list[dict[str, Any]] = [
            {"role": "user", "content": "Which orders do I have?"},
            {"role": "assistant", "content": "You have order #W7777777 (a lamp)."},
            {"role": "user", "content": "Right, cancel #W7777777."},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "get_order_details", "arguments": '{"order_id": "#W7777777"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "Error: order not found"},
        ]
        async with Monitor(TOOLS, policy="observe").episode(task_id="t") as ep:
            await replay_messages(ep, messages)
            ep.finish("failure")
        assert ep.record is not None
        action = ep.record.actions[0]
        assert action.cause is Cause.DEPENDENCY and "first written by the agent" in (action.reason or "")


def test_a_long_agent_message_and_the_bound() -> None:
    """A table longer than the pool's word limit is still read; past MAX_AGENT_IDS nothing more is noted."""
    from prefixmon.state import MAX_AGENT_IDS

    state = TrackedState()
    state.agent_wrote("| flight | date |\n" + "| HAT100 | May 2 |\n" * 200 + "| HAT902 | May 27 |")
    assert state.agent_made_up("HAT902")
    state._agent_ids.update(f"x{i}y" for i in range(MAX_AGENT_IDS))
    state.agent_wrote("and W1234567")
    assert not state.agent_made_up("W1234567")
