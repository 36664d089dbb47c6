"""Monitor toolsets for the τ-bench airline and retail domains.

Each tool is declared from τ-bench's own OpenAI schema and says when it can execute:

- **references**: user, reservation, order, item, product, flight and payment-method ids must
  have been returned by an earlier result or said by the user (``Ref(kind, user=True)``);
- **preconditions**: every error condition of the original environment (the record exists,
  the flight is available on that date with enough seats, the payment method belongs to the
  user, gift-card and certificate balances, payment amounts add up, the order's status
  allows the change, the items belong to the order, ...), read from the live database of a
  :class:`~.sandbox.Sandbox` given to the episode as ``env`` — each check reads only the
  records it names;
- **effects**: an accepted write is applied to a replica sandbox (replayed transcripts), so
  later checks see the new state; ids in results are bound as references;
- **information**: names, dates of birth, emails, addresses, zip codes and certificate
  amounts must have appeared in the user's messages, the policy or an earlier result;
- failures are recognised from the original conventions (``Error: ...``, ``Unknown action``).

Without an ``env`` the database preconditions cannot be decided and hold.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from prefixmon import Grounded, Precondition, Ref, Toolset, ToolSpec, TrackedState

from . import _airline, _retail
from ._calculator import CALCULATOR_CHARS, evaluate
from ._table import Db, Table
from .data import Domain, data_dir, load_schemas
from .sandbox import WRITE_TOOLS, Sandbox, is_error_result

__all__ = (
    "CERTIFICATE_PRODUCES",
    "FLIGHT",
    "ITEM",
    "ORDER",
    "ORDER_PRODUCES",
    "PAYMENT",
    "PRODUCT",
    "RECORDS_STORED_AS_GIVEN",
    "RESERVATION",
    "RESERVATION_PRODUCES",
    "SPECS",
    "STORED_AS_GIVEN",
    "USER",
    "USER_PRODUCES",
    "Check",
    "Effect",
    "ToolRules",
    "airline_toolset",
    "retail_toolset",
    "spec_toolset",
    "toolset",
)

Check = Callable[[TrackedState, Mapping[str, Any]], "bool | str | None"]
Effect = Callable[[TrackedState, Mapping[str, Any], Any], None]

USER = Ref("user_id", user=True)
RESERVATION = Ref("reservation_id", user=True)
FLIGHT = Ref("flight_number", user=True)
PAYMENT = Ref("payment_method_id", user=True)
ORDER = Ref("order_id", user=True)
ITEM = Ref("item_id", user=True)
PRODUCT = Ref("product_id", user=True)

RESERVATION_PRODUCES: Final = (
    ("reservation_id", "reservation_id"),
    ("user_id", "user_id"),
    ("flight_number", "flight_number"),
    ("payment_method_id", "payment_id"),
)
ORDER_PRODUCES: Final = (
    ("order_id", "order_id"),
    ("user_id", "user_id"),
    ("item_id", "item_id"),
    ("item_id", "item_ids"),
    ("product_id", "product_id"),
    ("payment_method_id", "payment_method_id"),
)
USER_PRODUCES: Final = {
    "airline": (("reservation_id", "reservations"), ("payment_method_id", "id")),
    "retail": (("order_id", "orders"), ("payment_method_id", "id")),
}


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolRules:
    """What the monitor knows about one τ-bench tool beyond its schema."""

    refs: Mapping[str, Ref] = field(default_factory=dict)
    requires: tuple[Precondition, ...] = ()
    produces: tuple[tuple[str, str], ...] = ()
    effects: tuple[Effect, ...] = ()
    grounded: tuple[str, ...] | Mapping[str, Grounded] = ()


# -- reading the live database ------------------------------------------------------------------
def _db(state: TrackedState) -> Db | None:
    env = state.env
    return env.db if isinstance(env, Sandbox) else None


def _pre(name: str, message: str) -> Callable[[Check], Precondition]:
    def wrap(fn: Check) -> Precondition:
        return Precondition(check=fn, message=message, name=name)

    return wrap


def _record(db: Db, table: str, key: Any) -> Any:
    """The record under ``key``, or ``None`` (unhashable keys included)."""
    try:
        return db[table].get(key)
    except TypeError:
        return None


def _db_order(state: TrackedState, args: Mapping[str, Any]) -> tuple[Db | None, Any]:
    """The sandbox database and the record of ``args["order_id"]`` (``None`` for either when absent)."""
    db = _db(state)
    return db, None if db is None else _record(db, "orders", args["order_id"])


def _exists(table: str, arg: str, noun: str) -> Precondition:
    def check(state: TrackedState, args: Mapping[str, Any]) -> bool | str:
        db = _db(state)
        if db is None or _record(db, table, args[arg]) is not None:
            return True
        return f"there is no {noun} {args[arg]!r}"

    return Precondition(check=check, message=f"the {noun} must exist", name=f"{noun.replace(' ', '_')}_exists")


# -- airline ------------------------------------------------------------------------------------
def _segment_problem(db: Db, segment: Mapping[str, Any], cabin: str, seats: int) -> str | None:
    number, date = segment["flight_number"], segment["date"]
    record = _record(db, "flights", number)
    if record is None:
        return f"there is no flight {number!r}"
    on_date = record["dates"].get(date)
    if on_date is None:
        return f"flight {number} does not fly on {date}"
    if on_date["status"] != "available":
        return f"flight {number} on {date} cannot be booked (its status is {on_date['status']!r})"
    left = on_date["available_seats"][cabin]
    if left < seats:
        return f"flight {number} on {date} has {left} {cabin} seat(s) left, {seats} needed"
    return None


@_pre("flights_bookable", "every flight must exist and be bookable on its date with enough seats")
def _flights_bookable(state: TrackedState, args: Mapping[str, Any]) -> bool | str:
    db = _db(state)
    if db is None:
        return True
    for segment in args["flights"]:
        problem = _segment_problem(db, segment, args["cabin"], len(args["passengers"]))
        if problem is not None:
            return problem
    return True


def _booking_total(db: Db, args: Mapping[str, Any]) -> Any:
    total: Any = 0
    n = len(args["passengers"])
    for segment in args["flights"]:
        total += db["flights"][segment["flight_number"]]["dates"][segment["date"]]["prices"][args["cabin"]] * n
    if args["insurance"] == "yes":
        total += _airline.INSURANCE_PER_PASSENGER * n
    return total + _airline.BAG_PRICE * args["nonfree_baggages"]


@_pre("payment_methods_valid", "each payment method must belong to the user and cover its amount")
def _booking_payments(state: TrackedState, args: Mapping[str, Any]) -> bool | str:
    db = _db(state)
    user = None if db is None else _record(db, "users", args["user_id"])
    if user is None:
        return True
    methods = user["payment_methods"]
    certificates: set[str] = set()
    for payment in args["payment_methods"]:
        payment_id, amount = payment["payment_id"], payment["amount"]
        method = methods.get(payment_id)
        if method is None:
            return f"payment method {payment_id!r} does not belong to user {args['user_id']!r}"
        if method["source"] in ("gift_card", "certificate") and method["amount"] < amount:
            return f"{payment_id} has a balance of {method['amount']}, less than the {amount} charged to it"
    for payment in args["payment_methods"]:
        payment_id = payment["payment_id"]
        if methods[payment_id]["source"] == "certificate":
            if payment_id in certificates:
                return f"certificate {payment_id} can be used only once"
            certificates.add(payment_id)
    return True


@_pre("payment_adds_up", "the payments must add up to the reservation's total price")
def _booking_adds_up(state: TrackedState, args: Mapping[str, Any]) -> bool | str:
    db = _db(state)
    if db is None or _flights_bookable(state, args) is not True:
        return True
    total = _booking_total(db, args)
    paid = sum(payment["amount"] for payment in args["payment_methods"])
    if paid != total:
        return f"the payments add up to {paid}, but the total price is {total}"
    return True


def _reservation_user(db: Db, reservation_id: Any) -> tuple[Any, Any]:
    reservation = _record(db, "reservations", reservation_id)
    if reservation is None:
        return None, None
    return reservation, _record(db, "users", reservation["user_id"])


def _update_payment_problem(user: Mapping[str, Any], payment_id: str, price: Any) -> str | None:
    method = user["payment_methods"].get(payment_id)
    if method is None:
        return f"payment method {payment_id!r} does not belong to the reservation's user"
    if method["source"] == "certificate":
        return "a certificate cannot pay for a change to a reservation"
    if method["source"] == "gift_card" and method["amount"] < price:
        return f"gift card {payment_id} has {method['amount']}, less than the {price} due"
    return None


@_pre("baggage_payment_valid", "the payment method must belong to the user and cover the new bags")
def _baggage_payment(state: TrackedState, args: Mapping[str, Any]) -> bool | str:
    db = _db(state)
    reservation, user = (None, None) if db is None else _reservation_user(db, args["reservation_id"])
    if reservation is None or user is None:
        return True
    price = _airline.BAG_PRICE * max(0, args["nonfree_baggages"] - reservation["nonfree_baggages"])
    return _update_payment_problem(user, args["payment_id"], price) or True


def _kept_segment(reservation: Mapping[str, Any], segment: Mapping[str, Any], cabin: str) -> Any:
    if cabin != reservation["cabin"]:
        return None
    for old in reservation["flights"]:
        if old["flight_number"] == segment["flight_number"] and old["date"] == segment["date"]:
            return old
    return None


@_pre("new_flights_bookable", "every new flight must be bookable on its date with enough seats")
def _new_flights_bookable(state: TrackedState, args: Mapping[str, Any]) -> bool | str:
    db = _db(state)
    reservation = None if db is None else _record(db, "reservations", args["reservation_id"])
    if db is None or reservation is None:
        return True
    seats = len(reservation["passengers"])
    for segment in args["flights"]:
        if _kept_segment(reservation, segment, args["cabin"]) is None:
            problem = _segment_problem(db, segment, args["cabin"], seats)
            if problem is not None:
                return problem
    return True


@_pre("flight_change_payment_valid", "the payment method must belong to the user and cover the fare difference")
def _flight_change_payment(state: TrackedState, args: Mapping[str, Any]) -> bool | str:
    db = _db(state)
    reservation, user = (None, None) if db is None else _reservation_user(db, args["reservation_id"])
    if db is None or reservation is None or user is None:
        return True
    if _new_flights_bookable(state, args) is not True:
        return True
    n = len(reservation["passengers"])
    total: Any = 0
    for segment in args["flights"]:
        kept = _kept_segment(reservation, segment, args["cabin"])
        if kept is not None:
            total += kept["price"] * n
        else:
            prices = db["flights"][segment["flight_number"]]["dates"][segment["date"]]["prices"]
            total += prices[args["cabin"]] * n
    total -= sum(old["price"] for old in reservation["flights"]) * n
    return _update_payment_problem(user, args["payment_id"], total) or True


@_pre("same_passenger_count", "the number of passengers cannot change")
def _same_passenger_count(state: TrackedState, args: Mapping[str, Any]) -> bool | str:
    db = _db(state)
    reservation = None if db is None else _record(db, "reservations", args["reservation_id"])
    if reservation is None:
        return True
    have, given = len(reservation["passengers"]), len(args["passengers"])
    if have != given:
        return f"the reservation has {have} passenger(s), but {given} were given"
    return True


@_pre("arithmetic", "the expression must be arithmetic that evaluates")
def _arithmetic(state: TrackedState, args: Mapping[str, Any]) -> bool | str:
    expression = args["expression"]
    bad = sorted({c for c in expression if c not in CALCULATOR_CHARS})
    if bad:
        return f"the expression may contain only digits, + - * / ( ) . and spaces, not {''.join(bad)!r}"
    try:
        evaluate(expression)
    except Exception as e:
        return f"the expression does not evaluate: {e}"
    return True


# -- retail -------------------------------------------------------------------------------------
def _order_in_status(status: str, verb: str) -> Precondition:
    def check(state: TrackedState, args: Mapping[str, Any]) -> bool | str:
        order = _db_order(state, args)[1]
        if order is None or order["status"] == status:
            return True
        return f"order {args['order_id']} is {order['status']!r}; only {status} orders can be {verb}"

    return Precondition(check=check, message=f"the order must be {status}", name=f"order_{status}")


@_pre("items_in_order", "every item must be in the order (as many times as listed)")
def _items_in_order(state: TrackedState, args: Mapping[str, Any]) -> bool | str:
    order = _db_order(state, args)[1]
    if order is None:
        return True
    missing = _retail.missing_item(order, args["item_ids"])
    if missing is not None:
        return f"item {missing!r} is not in order {args['order_id']} (or not that many times)"
    return True


@_pre("replacements_valid", "each new item must be an available variant of the same product")
def _replacements_valid(state: TrackedState, args: Mapping[str, Any]) -> bool | str:
    db, order = _db_order(state, args)
    if db is None or order is None or _retail.missing_item(order, args["item_ids"]) is not None:
        return True
    old, new = args["item_ids"], args["new_item_ids"]
    if len(old) != len(new):
        return f"{len(old)} item(s) to replace but {len(new)} new item(s)"
    for item_id, new_item_id in zip(old, new, strict=True):
        item = next(i for i in order["items"] if i["item_id"] == item_id)
        variants = db["products"][item["product_id"]]["variants"]
        variant = variants.get(new_item_id) if isinstance(new_item_id, str) else None
        if variant is None:
            return f"{new_item_id!r} is not a variant of {item['name']} (product {item['product_id']})"
        if not variant["available"]:
            return f"item {new_item_id} ({item['name']}) is not available"
    return True


def _difference(db: Db, order: Mapping[str, Any], old: Sequence[str], new: Sequence[str]) -> Any:
    difference: Any = 0
    for item_id, new_item_id in zip(old, new, strict=True):
        item = next(i for i in order["items"] if i["item_id"] == item_id)
        difference += db["products"][item["product_id"]]["variants"][new_item_id]["price"] - item["price"]
    return difference


def _order_method(db: Db, order: Mapping[str, Any], payment_method_id: Any) -> Any:
    user = _record(db, "users", order["user_id"])
    if user is None:
        return None
    methods = user["payment_methods"]
    return methods.get(payment_method_id) if isinstance(payment_method_id, str) else None


def _items_payment(rounded: bool) -> Precondition:
    def check(state: TrackedState, args: Mapping[str, Any]) -> bool | str:
        db, order = _db_order(state, args)
        if db is None or order is None:
            return True
        method = _order_method(db, order, args["payment_method_id"])
        if method is None:
            return f"payment method {args['payment_method_id']!r} does not belong to the order's user"
        if method["source"] != "gift_card" or _replacements_valid(state, args) is not True:
            return True
        if _retail.missing_item(order, args["item_ids"]) is not None:
            return True
        difference = _difference(db, order, args["item_ids"], args["new_item_ids"])
        if rounded:
            difference = round(difference, 2)
        if method["balance"] < difference:
            return f"gift card {args['payment_method_id']} has {method['balance']}, less than the {difference} due"
        return True

    return Precondition(
        check=check,
        message="the payment method must belong to the user and cover the price difference",
        name="payment_method_valid",
    )


@_pre("payment_change_valid", "the order must have one payment, made with another method the new one can cover")
def _payment_change(state: TrackedState, args: Mapping[str, Any]) -> bool | str:
    db, order = _db_order(state, args)
    if db is None or order is None or order["status"] != "pending":
        return True
    method = _order_method(db, order, args["payment_method_id"])
    if method is None:
        return f"payment method {args['payment_method_id']!r} does not belong to the order's user"
    history = order["payment_history"]
    if len(history) > 1 or history[0]["transaction_type"] != "payment":
        return f"order {args['order_id']} has more than one payment, so its payment method cannot be changed"
    if history[0]["payment_method_id"] == args["payment_method_id"]:
        return f"order {args['order_id']} is already paid with {args['payment_method_id']}"
    if method["source"] == "gift_card" and method["balance"] < history[0]["amount"]:
        return f"gift card {args['payment_method_id']} has {method['balance']}, less than the {history[0]['amount']} due"
    return True


@_pre("refund_method_valid", "refunds go to the original payment method or a gift card of the user")
def _refund_method(state: TrackedState, args: Mapping[str, Any]) -> bool | str:
    db, order = _db_order(state, args)
    if db is None or order is None or order["status"] != "delivered":
        return True
    payment_method_id = args["payment_method_id"]
    if _order_method(db, order, payment_method_id) is None:
        return f"payment method {payment_method_id!r} does not belong to the order's user"
    original = order["payment_history"][0]["payment_method_id"]
    if "gift_card" not in payment_method_id and payment_method_id != original:
        return f"a refund must go to the original payment method ({original}) or a gift card"
    return True


@_pre("valid_reason", "the reason must be 'no longer needed' or 'ordered by mistake'")
def _valid_reason(state: TrackedState, args: Mapping[str, Any]) -> bool | str:
    return args["reason"] in _retail.CANCEL_REASONS


def _user_found(state: TrackedState, match: Callable[[Mapping[str, Any]], bool], key: tuple[str, ...]) -> bool:
    env = state.env
    if not isinstance(env, Sandbox):
        return True
    users: Table = env.db["users"]
    return any(match(users[uid]) for uid in (*users.derived("user_index", _user_index).get(key, ()), *users.written))


def _user_index(base: Mapping[str, Any]) -> dict[tuple[str, ...], list[str]]:
    """Base users by lower-cased email and by (first, last, zip)."""
    index: dict[tuple[str, ...], list[str]] = {}
    for uid, profile in base.items():
        index.setdefault((profile["email"].lower(),), []).append(uid)
        name = profile["name"]
        key = (name["first_name"].lower(), name["last_name"].lower(), profile["address"]["zip"])
        index.setdefault(key, []).append(uid)
    return index


@_pre("email_known", "a user with this email must exist")
def _email_known(state: TrackedState, args: Mapping[str, Any]) -> bool | str:
    email = args["email"].lower()
    if _user_found(state, lambda u: bool(u["email"].lower() == email), (email,)):
        return True
    return f"no user has the email {args['email']!r}"


@_pre("name_zip_known", "a user with this name and zip code must exist")
def _name_zip_known(state: TrackedState, args: Mapping[str, Any]) -> bool | str:
    first, last, zip_code = args["first_name"].lower(), args["last_name"].lower(), args["zip"]

    def match(u: Mapping[str, Any]) -> bool:
        return bool(
            u["name"]["first_name"].lower() == first
            and u["name"]["last_name"].lower() == last
            and u["address"]["zip"] == zip_code
        )

    if _user_found(state, match, (first, last, zip_code)):
        return True
    return f"no user named {args['first_name']} {args['last_name']} lives in zip code {zip_code}"


# -- effects ------------------------------------------------------------------------------------
def _mirror(name: str) -> Effect:
    """Applies an accepted write to a replica sandbox (a replayed or remote environment)."""

    def effect(state: TrackedState, args: Mapping[str, Any], result: Any) -> None:
        env = state.env
        if isinstance(env, Sandbox) and env.replica:
            env.mirror(name, args)

    effect.__name__ = f"mirror_{name}"
    return effect


CERTIFICATE_PRODUCES: Final = (("payment_method_id", r"~\bcertificate_\d+\b"),)
"""send_certificate answers "Certificate certificate_3221322 added to user ...": a payment method from then on."""


def _inform_number(state: TrackedState, args: Mapping[str, Any], result: Any) -> None:
    with contextlib.suppress(TypeError, ValueError):
        state.inform(float(result))


def _rules(domain: Domain) -> dict[str, ToolRules]:
    user_exists = _exists("users", "user_id", "user")
    if domain == "airline":
        reservation_exists = _exists("reservations", "reservation_id", "reservation")
        reservation = (("reservation_id", RESERVATION),)
        return {
            "book_reservation": ToolRules(
                refs={"user_id": USER, "flights[].flight_number": FLIGHT, "payment_methods[].payment_id": PAYMENT},
                requires=(user_exists, _flights_bookable, _booking_payments, _booking_adds_up),
                produces=RESERVATION_PRODUCES,
                # Amounts are computed, not copied: "payment_adds_up" checks them instead.
                grounded=("passengers[].first_name", "passengers[].last_name", "passengers[].dob"),
            ),
            "calculate": ToolRules(requires=(_arithmetic,), effects=(_inform_number,)),
            "cancel_reservation": ToolRules(
                refs=dict(reservation), requires=(reservation_exists,), produces=RESERVATION_PRODUCES
            ),
            "get_reservation_details": ToolRules(
                refs=dict(reservation), requires=(reservation_exists,), produces=RESERVATION_PRODUCES
            ),
            "get_user_details": ToolRules(refs={"user_id": USER}, requires=(user_exists,), produces=USER_PRODUCES["airline"]),
            "list_all_airports": ToolRules(),
            "search_direct_flight": ToolRules(produces=(("flight_number", "flight_number"),)),
            "search_onestop_flight": ToolRules(produces=(("flight_number", "flight_number"),)),
            "send_certificate": ToolRules(
                refs={"user_id": USER},
                requires=(user_exists,),
                produces=CERTIFICATE_PRODUCES,
                # The policy computes compensation (per passenger, per night): derived from seen numbers.
                grounded={"amount": Grounded("derived")},
            ),
            "think": ToolRules(),
            "transfer_to_human_agents": ToolRules(),
            "update_reservation_baggages": ToolRules(
                refs={"reservation_id": RESERVATION, "payment_id": PAYMENT},
                requires=(reservation_exists, _baggage_payment),
                produces=RESERVATION_PRODUCES,
            ),
            "update_reservation_flights": ToolRules(
                refs={"reservation_id": RESERVATION, "flights[].flight_number": FLIGHT, "payment_id": PAYMENT},
                requires=(reservation_exists, _new_flights_bookable, _flight_change_payment),
                produces=RESERVATION_PRODUCES,
            ),
            "update_reservation_passengers": ToolRules(
                refs=dict(reservation),
                requires=(reservation_exists, _same_passenger_count),
                produces=RESERVATION_PRODUCES,
                grounded=("passengers[].first_name", "passengers[].last_name", "passengers[].dob"),
            ),
        }
    order_exists = _exists("orders", "order_id", "order")
    pending, delivered = _order_in_status("pending", "changed"), _order_in_status("delivered", "returned or exchanged")
    items = {"order_id": ORDER, "item_ids": ITEM, "new_item_ids": ITEM, "payment_method_id": PAYMENT}
    # State and country are often normalised by the agent ("New York" -> "NY"); not grounded.
    address = ("address1", "city", "zip")
    return {
        "calculate": ToolRules(requires=(_arithmetic,), effects=(_inform_number,)),
        "cancel_pending_order": ToolRules(
            refs={"order_id": ORDER}, requires=(order_exists, pending, _valid_reason), produces=ORDER_PRODUCES
        ),
        "exchange_delivered_order_items": ToolRules(
            refs=items,
            requires=(order_exists, delivered, _items_in_order, _replacements_valid, _items_payment(rounded=True)),
            produces=ORDER_PRODUCES,
        ),
        "find_user_id_by_email": ToolRules(requires=(_email_known,), produces=(("user_id", "."),), grounded=("email",)),
        "find_user_id_by_name_zip": ToolRules(
            requires=(_name_zip_known,),
            produces=(("user_id", "."),),  # the answer is the user id
            grounded=("first_name", "last_name", "zip"),
        ),
        "get_order_details": ToolRules(refs={"order_id": ORDER}, requires=(order_exists,), produces=ORDER_PRODUCES),
        "get_product_details": ToolRules(
            refs={"product_id": PRODUCT},
            requires=(_exists("products", "product_id", "product"),),
            produces=(("product_id", "product_id"), ("item_id", "item_id")),
        ),
        "get_user_details": ToolRules(refs={"user_id": USER}, requires=(user_exists,), produces=USER_PRODUCES["retail"]),
        "list_all_product_types": ToolRules(produces=(("product_id", "*"),)),  # {product name: product id}
        "modify_pending_order_address": ToolRules(
            refs={"order_id": ORDER}, requires=(order_exists, pending), produces=ORDER_PRODUCES, grounded=address
        ),
        "modify_pending_order_items": ToolRules(
            refs=items,
            requires=(order_exists, pending, _items_in_order, _replacements_valid, _items_payment(rounded=False)),
            produces=ORDER_PRODUCES,
        ),
        "modify_pending_order_payment": ToolRules(
            refs={"order_id": ORDER, "payment_method_id": PAYMENT},
            requires=(order_exists, pending, _payment_change),
            produces=ORDER_PRODUCES,
        ),
        "modify_user_address": ToolRules(
            refs={"user_id": USER}, requires=(user_exists,), produces=USER_PRODUCES["retail"], grounded=address
        ),
        "return_delivered_order_items": ToolRules(
            refs={"order_id": ORDER, "item_ids": ITEM, "payment_method_id": PAYMENT},
            requires=(order_exists, delivered, _refund_method, _items_in_order),
            produces=ORDER_PRODUCES,
        ),
        "think": ToolRules(),
        "transfer_to_human_agents": ToolRules(),
    }


STORED_AS_GIVEN: Final[frozenset[tuple[str, str]]] = frozenset(
    {
        ("book_reservation", "total_baggages"),
        ("update_reservation_baggages", "total_baggages"),
        ("send_certificate", "amount"),
    }
)
"""``(tool, argument)`` numbers the airline tools only store, never compute with: ``"2"`` runs, so
they are read laxly (a number or its text); the other numbers meet arithmetic, where text raises."""

RECORDS_STORED_AS_GIVEN: Final[frozenset[tuple[str, str]]] = frozenset(
    {("book_reservation", "passengers"), ("update_reservation_passengers", "passengers")}
)
"""``(tool, argument)`` lists of records the airline tools store as given without reading a field:
the fields their schemas call required are not (a passenger without ``dob`` is booked)."""


def _as_the_tool_reads(name: str, parameters: Mapping[str, Any] | None) -> dict[str, Any]:
    """``parameters`` (τ-bench's ``get_info`` schema) without what the tool does not require.

    The tool reads a record by key only where it uses a field (``payment_methods[].payment_id``
    raises ``KeyError`` when absent; a passenger's fields are never read).
    """
    schema = copy.deepcopy(dict(parameters or {"type": "object", "properties": {}}))
    for tool, argument in RECORDS_STORED_AS_GIVEN:
        items = schema.get("properties", {}).get(argument, {}).get("items") if tool == name else None
        if isinstance(items, dict):
            items.pop("required", None)
    return schema


def _validator(name: str, schema: Mapping[str, Any]) -> Any:
    """JSON types checked strictly, and the :data:`STORED_AS_GIVEN` numbers laxly (``"2"`` passes)."""
    lax = {arg for tool, arg in STORED_AS_GIVEN if tool == name}
    if not lax:
        return None
    properties = schema.get("properties", {})
    probe = Toolset()
    strict = {**schema, "properties": {k: ({} if k in lax else v) for k, v in properties.items()}}
    loose = {"type": "object", "properties": {k: properties[k] for k in lax if k in properties}}
    check_strict = probe.add_schema("strict", strict, coercion="strict", unknown="forbid").validate
    check_lax = probe.add_schema("lax", loose, coercion="lax", unknown="allow").validate

    def validate(args: dict[str, Any]) -> dict[str, Any]:
        return check_lax(check_strict(args))

    return validate


def toolset(domain: Domain, *, data: str | os.PathLike[str] | None = None) -> Toolset:
    """The monitor toolset of a τ-bench domain, declared from its tool schemas.

    Run episodes with ``env=Sandbox(domain)`` (the sandbox runs the calls: pass
    ``execute=sandbox.executor(name)``) or ``env=Sandbox(domain, replica=True)`` (the calls
    run elsewhere; accepted writes are mirrored into the replica).

    The specs (their compiled schemas) are made once per process and data folder; each call
    returns a new toolset of them, which the caller may extend.

    Raises:
        ValueError: the schema file and the rules do not name the same tools.
    """
    return Toolset(_specs(domain, data_dir(data)))


@functools.cache
def _specs(domain: Domain, root: Path) -> tuple[ToolSpec, ...]:
    rules = _rules(domain)
    tools = Toolset()
    seen: list[str] = []
    for entry in load_schemas(domain, root):
        function = entry.get("function", entry)
        name = function["name"]
        if name not in rules:
            raise ValueError(f"τ-bench {domain} schema declares tool {name!r}, which the adapter does not know")
        rule = rules[name]
        effects: Iterable[Effect] = rule.effects
        if name in WRITE_TOOLS[domain]:
            effects = (*rule.effects, _mirror(name))
        schema = _as_the_tool_reads(name, function.get("parameters"))
        spec = tools.add_schema(
            name,
            schema,
            description=function.get("description", ""),
            requires=rule.requires,
            effects=effects,
            produces=list(rule.produces),
            refs=dict(rule.refs),
            grounded=rule.grounded,
            error_result=is_error_result,
            metadata={"domain": domain, "write": name in WRITE_TOOLS[domain]},
            # the environment calls a Python function with the arguments: no coercion, and an
            # unknown keyword raises TypeError
            coercion="strict",
            unknown="forbid",
        )
        validate = _validator(name, schema)
        if validate is not None:
            tools.add(dataclasses.replace(spec, validate=validate), replace=True)
        seen.append(name)
    missing = sorted(set(rules) - set(seen))
    if missing:
        raise ValueError(f"τ-bench {domain} schema lacks tools {missing}")
    return tuple(tools)


def airline_toolset(*, data: str | os.PathLike[str] | None = None) -> Toolset:
    """The airline domain's toolset (14 tools)."""
    return toolset("airline", data=data)


def retail_toolset(*, data: str | os.PathLike[str] | None = None) -> Toolset:
    """The retail domain's toolset (16 tools)."""
    return toolset("retail", data=data)


SPECS: Final = Path(__file__).resolve().parent / "specs"
"""The observation-only spec files we ship (``tau_airline.yaml``, ``tau_retail.yaml``)."""


def spec_toolset(
    domain: Domain,
    *,
    data: str | os.PathLike[str] | None = None,
    spec: bool = True,
    error_result: Callable[[object], str | None] | None = None,
) -> Toolset:
    """A toolset from the domain's tool schemas (strict: no coercion, no unknown arguments) and its
    observation-only spec file: no database access.

    What the rules know comes from the tools' results only (``examples/specs/tau_<domain>.yaml``),
    as for a tool layer nobody modelled. ``spec=False``: the schemas alone (what ``prefixmon learn``
    starts from); ``error_result``: how rejections read without the spec's recognisers.
    """
    definitions = load_schemas(domain, data)
    strict = {d.get("function", d)["name"]: {"coercion": "strict", "unknown": "forbid"} for d in definitions}
    return Toolset.from_openai(
        definitions, rules=strict, error_result=error_result, spec=SPECS / f"tau_{domain}.yaml" if spec else None
    )
