"""Observation-only spec rules: composite ids, ``at: 'x.*'``, ``fields``, ``sum``/``seen``/``zip``/``time``,
``constants.now``, ``last_seen`` and ``forgets``, and the rule classes of the shipped τ and τ² specs.

The excerpts are written here in the style of real τ-bench runs (a booking desk, an order desk),
not copied from any recorded file. A rule that cannot be decided from what was observed is
undetermined (the call runs), never a failure.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from prefixmon import Cause, Monitor, SpecError, Toolset
from prefixmon.rules.specfile import load_spec, parse_spec

pytest.importorskip("cel_expr_python")

ROOT = Path(__file__).resolve().parent.parent
STR = {"type": "string"}


def _error(result: object) -> str | None:
    return result if isinstance(result, str) and result.startswith("Error:") else None


def _fn(name: str, **props: Any) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "parameters": {"type": "object", "properties": props}}}


async def _verdicts(tools: Toolset, calls: list[tuple[str, dict[str, Any], Any]], user: str = "") -> list[Any]:
    """Judge each call before it runs, then give it its recorded result; the verdicts in order."""
    out = []
    async with Monitor(tools, policy="observe").episode(task_id="t") as ep:
        if user:
            ep.user(user)
        for name, args, result in calls:
            pending = await ep.begin(name, args)
            out.append(pending.verdict)
            pending.done(result if isinstance(result, str) else json.dumps(result))
        ep.finish("failure")
    return out


def _why(verdict: Any) -> str:
    """The reason and the failures' codes (a rule without a message is named by its code)."""
    return " ".join([verdict.reason or "", *(f.code for f in verdict.failures)])


# -- a small booking desk: each construct on its own ----------------------------------------------

DESK = [
    _fn("search_direct_flight", origin=STR, destination=STR, date=STR),
    _fn("search_onestop_flight", origin=STR, destination=STR, date=STR),
    _fn("get_user_details", user_id=STR),
    _fn("book", user_id=STR, cabin=STR, flights={"type": "array"}, passengers={"type": "array"}, payments={"type": "array"}),
    _fn("top_up", user_id=STR),
    _fn("spend", user_id=STR),
]
DESK_SPEC = """\
schema: prefixmon.spec/1
constants: {now: "2024-05-15T15:00:00"}
defaults: {errors: [{text: "^Error:"}]}
tools:
  search_direct_flight:
    access: read
    observes: [{object: flight, id: [flight_number, args.date]}]
  search_onestop_flight:
    access: read
    observes: [{object: flight, id: [flight_number, date]}]
  get_user_details:
    access: read
    observes: [{object: user, id: args.user_id}]
  spend: {access: write, stale: [user]}
  top_up: {access: write, forgets: [user]}
  book:
    access: write
    let: {user: "user[args.user_id]"}
    requires:
      - name: seats
        expr: args.flights.all(f, seen("flight", [f.flight_number, f.date]).available_seats[args.cabin] >= size(args.passengers))
      - name: total
        expr: >-
          double(sum(args.payments.map(p, p.amount))) == double(size(args.passengers))
          * double(sum(args.flights.map(f, seen("flight", [f.flight_number, f.date]).prices[args.cabin])))
      - name: not_flown
        expr: args.flights.all(f, time(f.date) + duration("24h") > time(constants.now))
      - name: methods
        expr: args.payments.all(p, p.payment_id in user.payment_methods)
        last_seen: true
      - name: balance
        expr: args.payments.all(p, user.payment_methods[p.payment_id].source != "gift_card"
          || user.payment_methods[p.payment_id].amount >= p.amount)
        last_seen: true
"""

ONE_LEG = [
    {
        "flight_number": "HAT301",
        "origin": "SEA",
        "destination": "BOS",
        "status": "available",
        "available_seats": {"economy": 3, "business": 0},
        "prices": {"economy": 140, "business": 420},
    }
]
PAIRS = [
    [
        {"flight_number": "HAT610", "date": "2024-05-21", "available_seats": {"economy": 5}, "prices": {"economy": 90}},
        {"flight_number": "HAT611", "date": "2024-05-22", "available_seats": {"economy": 1}, "prices": {"economy": 60}},
    ]
]
USER = {
    "user_id": "noa_berg_12",
    "payment_methods": {
        "gift_card_11": {"source": "gift_card", "id": "gift_card_11", "amount": 60},
        "credit_card_22": {"source": "credit_card", "id": "credit_card_22"},
    },
}
BOOKED = '{"reservation_id": "QX1ABC"}'
SEARCH = ("search_direct_flight", {"origin": "SEA", "destination": "BOS", "date": "2024-05-20"}, ONE_LEG)
LOOKUP = ("get_user_details", {"user_id": "noa_berg_12"}, USER)


def desk() -> Toolset:
    return Toolset.from_openai(DESK, error_result=_error).apply_spec(parse_spec(DESK_SPEC))


def booking(cabin: str = "economy", flights: Any = None, passengers: int = 1, payments: Any = None) -> dict[str, Any]:
    return {
        "user_id": "noa_berg_12",
        "cabin": cabin,
        "flights": flights if flights is not None else [{"flight_number": "HAT301", "date": "2024-05-20"}],
        "passengers": [{"first_name": f"P{i}"} for i in range(passengers)],
        "payments": payments if payments is not None else [{"payment_id": "credit_card_22", "amount": 140 * passengers}],
    }


class TestConstructs:
    async def test_composite_id_from_the_arguments_decides_seats(self) -> None:
        """flight[flight_number, args.date]: a cabin the search showed full cannot seat anyone."""
        v = await _verdicts(desk(), [SEARCH, ("book", booking("business", payments=[]), BOOKED)])
        assert v[1].cause is Cause.PRECONDITION and "seats" in _why(v[1])

    async def test_a_flight_on_another_date_is_undetermined(self) -> None:
        """The same flight number on a date nobody searched: not observed, so the call runs."""
        flights = [{"flight_number": "HAT301", "date": "2024-05-23"}]
        v = await _verdicts(desk(), [SEARCH, ("book", booking(flights=flights), BOOKED)])
        assert v[1].executable and {"seats", "total"} <= set(v[1].undetermined)

    async def test_sum_of_payments_against_fares(self) -> None:
        """Two passengers at 140 paid with 250: the total does not add up to the searched fares."""
        pay = [{"payment_id": "credit_card_22", "amount": 250}]
        v = await _verdicts(desk(), [SEARCH, ("book", booking(passengers=2, payments=pay), BOOKED)])
        assert v[1].cause is Cause.PRECONDITION and "total" in _why(v[1])
        ok = await _verdicts(desk(), [SEARCH, ("book", booking(passengers=2), BOOKED)])
        assert ok[1].executable and "total" not in ok[1].undetermined

    async def test_nested_pairs_are_flattened_with_their_own_dates(self) -> None:
        """One-stop results are pairs of legs, each with its date: the second leg has one seat."""
        legs = [{"flight_number": "HAT610", "date": "2024-05-21"}, {"flight_number": "HAT611", "date": "2024-05-22"}]
        onestop = ("search_onestop_flight", {"origin": "SEA", "destination": "MIA", "date": "2024-05-21"}, PAIRS)
        two = booking(flights=legs, passengers=2, payments=[{"payment_id": "credit_card_22", "amount": 300}])
        one = booking(flights=legs, passengers=1, payments=[{"payment_id": "credit_card_22", "amount": 150}])
        v = await _verdicts(desk(), [onestop, ("book", two, BOOKED), ("book", one, BOOKED)])
        assert v[1].cause is Cause.PRECONDITION and "seats" in _why(v[1])
        assert v[2].executable and "total" not in v[2].undetermined

    async def test_time_against_the_policy_clock(self) -> None:
        """A flight dated before constants.now has flown; one the same day is not decided by the date alone."""
        past = [{"flight_number": "HAT301", "date": "2024-05-14"}]
        today = [{"flight_number": "HAT301", "date": "2024-05-15"}]
        v = await _verdicts(desk(), [("book", booking(flights=past), BOOKED), ("book", booking(flights=today), BOOKED)])
        assert v[0].cause is Cause.PRECONDITION and "not_flown" in _why(v[0])
        assert v[1].executable

    async def test_a_date_that_is_not_one_is_undetermined(self) -> None:
        v = await _verdicts(desk(), [("book", booking(flights=[{"flight_number": "HAT301", "date": "May 20"}]), BOOKED)])
        assert v[0].executable and "not_flown" in v[0].undetermined

    async def test_membership_in_the_profile_as_last_seen(self) -> None:
        """A payment id not in the user's methods; after a write that only spends, still decided."""
        pay = [{"payment_id": "gift_card_99", "amount": 140}]
        spend = ("spend", {"user_id": "noa_berg_12"}, "ok")
        v = await _verdicts(desk(), [SEARCH, LOOKUP, spend, ("book", booking(payments=pay), BOOKED)])
        assert v[3].cause is Cause.PRECONDITION and "methods" in _why(v[3])

    async def test_balance_as_last_seen_and_forgotten(self) -> None:
        """A gift card of 60 cannot pay 140, after spending too; after a top-up nothing is known."""
        pay = [{"payment_id": "gift_card_11", "amount": 140}]
        spend = ("spend", {"user_id": "noa_berg_12"}, "ok")
        top_up = ("top_up", {"user_id": "noa_berg_12"}, "ok")
        v = await _verdicts(desk(), [SEARCH, LOOKUP, spend, ("book", booking(payments=pay), BOOKED)])
        assert v[3].cause is Cause.PRECONDITION and "balance" in _why(v[3])
        v = await _verdicts(desk(), [SEARCH, LOOKUP, top_up, ("book", booking(payments=pay), BOOKED)])
        assert v[3].executable and "balance" in v[3].undetermined

    def test_now_must_be_a_date_time(self) -> None:
        with pytest.raises(SpecError, match=r"now: .* is not an ISO date-time"):
            parse_spec({"schema": "prefixmon.spec/1", "constants": {"now": "tomorrow"}})

    def test_fields_are_paths_into_the_call(self) -> None:
        with pytest.raises(SpecError, match="not a path into the call"):
            parse_spec(
                {
                    "schema": "prefixmon.spec/1",
                    "tools": {"p": {"observes": [{"object": "item", "id": "item_id", "fields": {"product_id": "x"}}]}},
                }
            )


class TestIdFormats:
    """``pattern``: an id written in a form the domain never uses fails before the call (schema)."""

    SPEC = """\
schema: prefixmon.spec/1
tools:
  get_user_details: {access: read, args: {user_id: {pattern: "[a-z]+_[a-z]+_[0-9]+"}}}
  book: {access: write, args: {"flights[].flight_number": {pattern: "HAT[0-9]{3}"}}}
"""

    def tools(self) -> Toolset:
        return Toolset.from_openai(DESK, error_result=_error).apply_spec(parse_spec(self.SPEC))

    async def test_a_name_for_a_user_id(self) -> None:
        """ "I'm Anya Garcia" and the agent sends the name as the user id."""
        v = await _verdicts(self.tools(), [("get_user_details", {"user_id": "Anya Garcia"}, "Error: user not found")])
        assert v[0].cause is Cause.SCHEMA and "'Anya Garcia'" in (v[0].reason or ""), v[0].reason
        v = await _verdicts(self.tools(), [("get_user_details", {"user_id": "anya_garcia_5901"}, "{}")])
        assert v[0].executable, v[0].reason

    async def test_inside_list_items(self) -> None:
        flights = [{"flight_number": "HAT233", "date": "2024-05-24"}, {"flight_number": "UA 233", "date": "2024-05-24"}]
        v = await _verdicts(self.tools(), [("book", {"flights": flights}, "Error: x")])
        assert v[0].cause is Cause.SCHEMA and "flights[1].flight_number" in (v[0].reason or ""), v[0].reason

    async def test_the_whole_value_must_match(self) -> None:
        """A pattern matches in full: a well-formed id inside other text is still another form."""
        v = await _verdicts(self.tools(), [("get_user_details", {"user_id": "id anya_garcia_5901"}, "Error: x")])
        assert v[0].cause is Cause.SCHEMA

    def test_a_bad_pattern_is_named_with_its_line(self, tmp_path: Path) -> None:
        spec = tmp_path / "bad.yaml"
        spec.write_text("schema: prefixmon.spec/1\ntools:\n  get_user_details:\n    args: {user_id: {pattern: '[a-z'}}\n")
        with pytest.raises(SpecError, match=r"bad\.yaml:4: .*not a regular expression"):
            load_spec(spec)


SHOP = [
    _fn("get_product_details", product_id=STR),
    _fn("get_order_details", order_id=STR),
    _fn("swap", order_id=STR, item_ids={"type": "array"}, new_item_ids={"type": "array"}),
]
SHOP_SPEC = """\
schema: prefixmon.spec/1
tools:
  get_product_details:
    access: read
    observes: [{object: item, id: item_id, at: "variants.*", fields: {product_id: args.product_id}}]
  get_order_details:
    access: read
    observes: [{object: order, id: order_id}]
  swap:
    access: write
    let: {order: "order[args.order_id]"}
    requires:
      - name: same_product
        expr: >-
          zip(args.item_ids, args.new_item_ids).all(p, !order.items.exists(x, x.item_id == p[0])
          || seen("item", p[1]).product_id == order.items.filter(x, x.item_id == p[0])[0].product_id)
      - name: available
        expr: args.new_item_ids.all(i, seen("item", i).available == true)
      - name: differ
        expr: zip(args.item_ids, args.new_item_ids).all(p, p[0] != p[1])
"""
LAMP: dict[str, Any] = {
    "product_id": "6817146515",
    "variants": {
        "5320792178": {"item_id": "5320792178", "available": True, "price": 135.2},
        "8384507844": {"item_id": "8384507844", "available": False, "price": 137.9},
    },
}
ORDER = {"order_id": "#W1003", "status": "pending", "items": [{"item_id": "7624783998", "product_id": "6817146515"}]}


class TestVariants:
    def shop(self) -> Toolset:
        return Toolset.from_openai(SHOP, error_result=_error).apply_spec(parse_spec(SHOP_SPEC))

    async def test_each_value_of_a_mapping_is_observed_with_fields_from_the_call(self) -> None:
        reads = [
            ("get_product_details", {"product_id": "6817146515"}, LAMP),
            ("get_order_details", {"order_id": "#W1003"}, ORDER),
        ]
        swap = ("swap", {"order_id": "#W1003", "item_ids": ["7624783998"], "new_item_ids": ["8384507844"]}, "Error: x")
        good = ("swap", {"order_id": "#W1003", "item_ids": ["7624783998"], "new_item_ids": ["5320792178"]}, "{}")
        v = await _verdicts(self.shop(), [*reads, swap, good])
        assert v[2].cause is Cause.PRECONDITION and "available" in _why(v[2])
        assert v[3].executable and not v[3].undetermined

    async def test_a_variant_of_another_product_and_the_same_item(self) -> None:
        other = {**ORDER, "items": [{"item_id": "7624783998", "product_id": "1111111111"}]}
        reads = [
            ("get_product_details", {"product_id": "6817146515"}, LAMP),
            ("get_order_details", {"order_id": "#W1003"}, other),
        ]
        swap = ("swap", {"order_id": "#W1003", "item_ids": ["7624783998"], "new_item_ids": ["5320792178"]}, "Error: x")
        same = ("swap", {"order_id": "#W1003", "item_ids": ["7624783998"], "new_item_ids": ["7624783998"]}, "Error: x")
        v = await _verdicts(self.shop(), [*reads, swap, same])
        assert v[2].cause is Cause.PRECONDITION and "same_product" in _why(v[2])
        assert v[3].cause is Cause.PRECONDITION and "differ" in _why(v[3])


# -- the shipped specs: one excerpt per rule class ------------------------------------------------


def _v1(domain: str) -> Toolset:
    from prefixmon.adapters.taubench.toolsets import spec_toolset

    return spec_toolset(domain)  # type: ignore[arg-type]


def _tau2(domain: str) -> Toolset:
    pytest.importorskip("tau2")
    from prefixmon.adapters.rollouts import observed_tau2, spec_path

    return observed_tau2(domain, spec_path("tau2", domain))


AIR_USER = {
    "name": {"first_name": "Lena", "last_name": "Ortiz"},
    "payment_methods": {
        "gift_card_5501": {"source": "gift_card", "amount": 80, "id": "gift_card_5501"},
        "certificate_7702": {"source": "certificate", "amount": 150, "id": "certificate_7702"},
        "credit_card_3303": {"source": "credit_card", "brand": "visa", "last_four": "1234", "id": "credit_card_3303"},
    },
    "membership": "silver",
    "reservations": ["K2L9QP"],
}
AIR_RESERVATION = {
    "reservation_id": "K2L9QP",
    "user_id": "lena_ortiz_4410",
    "cabin": "economy",
    "flights": [{"flight_number": "HAT120", "date": "2024-05-22", "price": 110, "origin": "DEN", "destination": "ORD"}],
    "passengers": [{"first_name": "Lena", "last_name": "Ortiz", "dob": "1988-02-11"}],
    "payment_history": [{"payment_id": "credit_card_3303", "amount": 110}],
    "created_at": "2024-05-02T10:00:00",
    "total_baggages": 0,
    "nonfree_baggages": 0,
    "insurance": "no",
}
AIR_SEARCH = [
    {
        "flight_number": "HAT233",
        "origin": "DEN",
        "destination": "ORD",
        "scheduled_departure_time_est": "09:00:00",
        "scheduled_arrival_time_est": "12:00:00",
        "status": "available",
        "available_seats": {"basic_economy": 0, "economy": 4, "business": 2},
        "prices": {"basic_economy": 70, "economy": 155, "business": 390},
    }
]
AIR_READS = [
    ("get_user_details", {"user_id": "lena_ortiz_4410"}, AIR_USER),
    ("get_reservation_details", {"reservation_id": "K2L9QP"}, AIR_RESERVATION),
    ("search_direct_flight", {"origin": "DEN", "destination": "ORD", "date": "2024-05-24"}, AIR_SEARCH),
]
AIR_SAYS = "I'm lena_ortiz_4410, reservation K2L9QP; Lena Ortiz, born 1988-02-11."


def air_booking(cabin: str = "economy", date: str = "2024-05-24", payments: Any = None) -> dict[str, Any]:
    return {
        "user_id": "lena_ortiz_4410",
        "origin": "DEN",
        "destination": "ORD",
        "flight_type": "one_way",
        "cabin": cabin,
        "flights": [{"flight_number": "HAT233", "date": date}],
        "passengers": [{"first_name": "Lena", "last_name": "Ortiz", "dob": "1988-02-11"}],
        "payment_methods": payments if payments is not None else [{"payment_id": "credit_card_3303", "amount": 155}],
        "total_baggages": 0,
        "nonfree_baggages": 0,
        "insurance": "no",
    }


@pytest.mark.parametrize("tools", [lambda: _v1("airline"), lambda: _tau2("airline")], ids=["tau", "tau2"])
class TestAirlineSpecs:
    async def check(self, tools: Any, call: tuple[str, dict[str, Any], Any], rule: str, before: Any = (), says: str = "") -> Any:
        v = await _verdicts(tools(), [*AIR_READS, *before, call], user=f"{AIR_SAYS} {says}")
        assert v[-1].cause is Cause.PRECONDITION, v[-1]
        assert rule in (v[-1].reason or "") or rule == "", v[-1].reason
        return v

    async def test_a_correct_booking_runs(self, tools: Any) -> None:
        v = await _verdicts(
            tools(), [*AIR_READS, ("book_reservation", air_booking(), '{"reservation_id": "HATHAT"}')], user=AIR_SAYS
        )
        assert v[-1].executable, v[-1].reason

    async def test_ids_in_a_form_the_domain_never_uses(self, tools: Any) -> None:
        """A name or a reservation id sent as the user id; a reservation id in lower case."""
        for name, args in (
            ("get_user_details", {"user_id": "Lena Ortiz"}),
            ("get_user_details", {"user_id": "K2L9QP"}),
            ("get_reservation_details", {"reservation_id": "k2l9qp"}),
        ):
            v = await _verdicts(tools(), [(name, args, "Error: not found")], user=AIR_SAYS)
            assert v[0].cause is Cause.SCHEMA, (args, v[0])
        v = await _verdicts(tools(), AIR_READS[:2], user=AIR_SAYS)
        assert all(x.executable for x in v)

    async def test_total_does_not_add_up(self, tools: Any) -> None:
        pay = [{"payment_id": "credit_card_3303", "amount": 110}]  # the old reservation's price, not the fare searched
        await self.check(tools, ("book_reservation", air_booking(payments=pay), "Error: x"), "do not add up")

    async def test_seats_the_search_showed_unavailable(self, tools: Any) -> None:
        pay = [{"payment_id": "credit_card_3303", "amount": 70}]
        await self.check(tools, ("book_reservation", air_booking("basic_economy", payments=pay), "Error: x"), "seats")

    async def test_a_flight_before_the_current_time(self, tools: Any) -> None:
        await self.check(tools, ("book_reservation", air_booking(date="2024-05-13"), "Error: x"), "already departed")

    async def test_gift_card_balance_as_last_seen(self, tools: Any) -> None:
        pay = [{"payment_id": "gift_card_5501", "amount": 155}]
        await self.check(tools, ("book_reservation", air_booking(payments=pay), "Error: x"), "enough balance")

    async def test_payment_method_not_in_the_profile(self, tools: Any) -> None:
        pay = [{"payment_id": "credit_card_9999", "amount": 155}]
        await self.check(
            tools, ("book_reservation", air_booking(payments=pay), "Error: x"), "one of the user's", says="Use credit_card_9999."
        )

    async def test_a_certificate_cannot_pay_a_change(self, tools: Any) -> None:
        change = {"reservation_id": "K2L9QP", "cabin": "economy", "flights": [{"flight_number": "HAT233", "date": "2024-05-24"}]}
        await self.check(
            tools, ("update_reservation_flights", {**change, "payment_id": "certificate_7702"}, "Error: x"), "certificate"
        )

    async def test_gift_card_does_not_cover_the_fare_difference(self, tools: Any) -> None:
        """New fare 155 against 110 paid: 45 is due; 80 covers it, in business (390) it does not."""
        change = {
            "reservation_id": "K2L9QP",
            "flights": [{"flight_number": "HAT233", "date": "2024-05-24"}],
            "payment_id": "gift_card_5501",
        }
        ok = await _verdicts(
            tools(), [*AIR_READS, ("update_reservation_flights", {**change, "cabin": "economy"}, "{}")], user=AIR_SAYS
        )
        assert ok[-1].executable
        await self.check(tools, ("update_reservation_flights", {**change, "cabin": "business"}, "Error: x"), "fare difference")

    async def test_a_used_certificate_cannot_pay_again(self, tools: Any) -> None:
        pay = [{"payment_id": "certificate_7702", "amount": 150}, {"payment_id": "credit_card_3303", "amount": 5}]
        booked = {**AIR_RESERVATION, "reservation_id": "HATHAT", "payment_history": pay}
        first = ("book_reservation", air_booking(payments=pay), booked)
        await self.check(tools, ("book_reservation", air_booking(payments=pay), "Error: x"), "used up", before=[first])


RETAIL_USER = {
    "user_id": "omar_lind_7781",
    "payment_methods": {
        "gift_card_4410": {"source": "gift_card", "balance": 20.5, "id": "gift_card_4410"},
        "paypal_2210": {"source": "paypal", "id": "paypal_2210"},
        "credit_card_8830": {"source": "credit_card", "brand": "visa", "last_four": "4321", "id": "credit_card_8830"},
    },
    "orders": ["#W5550001", "#W5550002"],
}


def retail_order(order_id: str, status: str) -> dict[str, Any]:
    return {
        "order_id": order_id,
        "user_id": "omar_lind_7781",
        "items": [{"name": "Desk Lamp", "product_id": "6817146515", "item_id": "7624783998", "price": 120.0}],
        "status": status,
        "payment_history": [{"transaction_type": "payment", "amount": 120.0, "payment_method_id": "paypal_2210"}],
    }


RETAIL_READS = [
    ("get_user_details", {"user_id": "omar_lind_7781"}, RETAIL_USER),
    ("get_order_details", {"order_id": "#W5550001"}, retail_order("#W5550001", "pending")),
    ("get_order_details", {"order_id": "#W5550002"}, retail_order("#W5550002", "delivered")),
    ("get_product_details", {"product_id": "6817146515"}, {"name": "Desk Lamp", **LAMP}),
]


@pytest.mark.parametrize("tools", [lambda: _v1("retail"), lambda: _tau2("retail")], ids=["tau", "tau2"])
class TestRetailSpecs:
    async def check(self, tools: Any, call: tuple[str, dict[str, Any], Any], rule: str) -> None:
        v = await _verdicts(tools(), [*RETAIL_READS, call], user="I'm omar_lind_7781.")
        assert v[-1].cause is Cause.PRECONDITION, v[-1]
        assert rule in (v[-1].reason or ""), v[-1].reason

    async def test_an_order_id_without_its_w(self, tools: Any) -> None:
        """The user says "order 9502127": ``#9502127`` is no order id, ``#W9502127`` is the one meant."""
        says = "My order number is 9502127."
        v = await _verdicts(tools(), [("get_order_details", {"order_id": "#9502127"}, "Error: order not found")], user=says)
        assert v[0].cause is Cause.SCHEMA and "#W[0-9]{7}" in (v[0].reason or ""), v[0].reason
        v = await _verdicts(tools(), [("get_order_details", {"order_id": "#W9502127"}, "{}")], user=says)
        assert v[0].executable, v[0].reason

    async def test_exchange_of_a_pending_order(self, tools: Any) -> None:
        args = {
            "order_id": "#W5550001",
            "item_ids": ["7624783998"],
            "new_item_ids": ["5320792178"],
            "payment_method_id": "paypal_2210",
        }
        await self.check(tools, ("exchange_delivered_order_items", args, "Error: x"), "only delivered")

    async def test_cancel_of_a_delivered_order(self, tools: Any) -> None:
        await self.check(
            tools, ("cancel_pending_order", {"order_id": "#W5550002", "reason": "no longer needed"}, "Error: x"), "pending"
        )

    async def test_return_to_another_card(self, tools: Any) -> None:
        args = {"order_id": "#W5550002", "item_ids": ["7624783998"], "payment_method_id": "credit_card_8830"}
        await self.check(tools, ("return_delivered_order_items", args, "Error: x"), "original payment method")

    async def test_unavailable_new_item(self, tools: Any) -> None:
        args = {
            "order_id": "#W5550001",
            "item_ids": ["7624783998"],
            "new_item_ids": ["8384507844"],
            "payment_method_id": "paypal_2210",
        }
        await self.check(tools, ("modify_pending_order_items", args, "Error: x"), "not available")

    async def test_gift_card_does_not_cover_the_difference(self, tools: Any) -> None:
        """135.2 - 120 = 15.2 is due; the card holds 20.5: runs. Against a dearer variant it would not."""
        args = {
            "order_id": "#W5550002",
            "item_ids": ["7624783998"],
            "new_item_ids": ["5320792178"],
            "payment_method_id": "gift_card_4410",
        }
        v = await _verdicts(tools(), [*RETAIL_READS, ("exchange_delivered_order_items", args, "{}")], user="I'm omar_lind_7781.")
        assert v[-1].executable, v[-1].reason
        dear = {
            **LAMP,
            "variants": {**LAMP["variants"], "5320792178": {"item_id": "5320792178", "available": True, "price": 150.0}},
        }
        reads = [*RETAIL_READS[:3], ("get_product_details", {"product_id": "6817146515"}, dear)]
        v = await _verdicts(tools(), [*reads, ("exchange_delivered_order_items", args, "Error: x")], user="I'm omar_lind_7781.")
        assert v[-1].cause is Cause.PRECONDITION and "does not cover" in (v[-1].reason or "")


def test_shipped_copies_are_identical() -> None:
    """examples/specs/tau*_*.yaml are the adapters' spec files (the benches read the adapters' copies)."""
    pairs = [
        (ROOT / "examples/specs" / f"{name}.yaml", ROOT / "adapters" / folder / "specs" / f"{name}.yaml")
        for folder, names in (("taubench", ("tau_airline", "tau_retail")), ("tau2", ("tau2_airline", "tau2_retail")))
        for name in names
    ]
    for example, shipped in pairs:
        assert example.read_bytes() == shipped.read_bytes(), example
