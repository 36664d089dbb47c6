"""Declared rules for the τ² domains: references, preconditions and effects, tool by tool.

Each precondition states one error condition of the real tool (read from τ²'s own code)
over the live environment given to the episode as ``env`` (a :class:`~.env.Tau2Env`),
reading only the records the call names. Without an ``env`` they hold (undetermined is
not a failure). Messages are written for the model.

- **airline**: the user / reservation / flight exists; every new segment flies on its date,
  is available and has the seats; payment methods belong to the user, balances cover the
  amounts, a certificate pays once and never for a change; payments add up to the price;
  the passenger count stays; at most three new reservations and certificates per task.
- **retail**: the order / user / product exists; the order's status allows the change;
  items are in the order as many times as listed; new items are different, available
  variants of the same product; payment methods belong to the order's user and gift cards
  cover the difference; refunds go to the original method or a gift card; a user matches
  an email or a name and zip code.
- **telecom** (agent): the customer / line / bill exists and belongs to the customer; a
  line is active to be suspended, suspended to be resumed; one bill awaits payment at a
  time; refuels are positive. (user, on the device): Wi-Fi cannot change in airplane mode;
  a payment needs a payment request; app permissions need the app and a tracked
  permission; network modes are the listed ones.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from prefixmon import Precondition, Ref, TrackedState

# τ² derives airline and retail from τ-bench: the same reference kinds (v1 trajectories replay on τ²)
from ..taubench.toolsets import (
    CERTIFICATE_PRODUCES,
    FLIGHT,
    ITEM,
    ORDER,
    PAYMENT,
    PRODUCT,
    RESERVATION,
    RESERVATION_PRODUCES,
    USER,
)
from .env import Domain, Tau2Env

__all__ = ("RULES", "ToolRules", "refusal")

Check = Callable[[TrackedState, Mapping[str, Any]], "bool | str | None"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolRules:
    """What the monitor knows about one τ² tool beyond its schema."""

    refs: Mapping[str, Ref] = field(default_factory=dict)
    requires: tuple[Precondition, ...] = ()
    produces: tuple[tuple[str, str], ...] = ()
    invalidates: tuple[str, ...] = ()
    grounded: tuple[str, ...] = ()
    effects: tuple[Callable[[TrackedState, Mapping[str, Any], Any], None], ...] = ()


def _pre(name: str, message: str) -> Callable[[Check], Precondition]:
    def wrap(fn: Check) -> Precondition:
        return Precondition(check=fn, message=message, name=name)

    return wrap


def _db(state: TrackedState) -> Any:
    env = state.env
    return env.db if isinstance(env, Tau2Env) else None


def _user_db(state: TrackedState) -> Any:
    env = state.env
    return env.user_db if isinstance(env, Tau2Env) else None


def _get(table: Any, key: Any) -> Any:
    """``table[key]`` without copying (a lookup, not a write), or ``None``."""
    try:
        return dict.get(table, key) if isinstance(table, dict) else None
    except TypeError:
        return None


def _exists(table: str, arg: str, noun: str) -> Precondition:
    def check(state: TrackedState, args: Mapping[str, Any]) -> bool | str:
        db = _db(state)
        if db is None or _get(getattr(db, table), args[arg]) is not None:
            return True
        return f"there is no {noun} {args[arg]!r}"

    return Precondition(check=check, message=f"the {noun} must exist", name=f"{noun.replace(' ', '_')}_exists")


def _calculable(state: TrackedState, args: Mapping[str, Any]) -> bool | str:
    expression = args["expression"]
    bad = sorted({c for c in expression if c not in "0123456789+-*/(). "})
    if bad:
        return f"the expression may contain only digits, + - * / ( ) . and spaces, not {''.join(bad)!r}"
    try:
        float(eval(expression, {"__builtins__": None}, {}))
    except Exception as e:
        return f"the expression does not evaluate: {type(e).__name__}: {e}"
    return True


CALCULABLE: Final = Precondition(check=_calculable, message="the expression must be arithmetic that evaluates", name="arithmetic")

# -- airline ------------------------------------------------------------------------------------
NEW_RESERVATION_IDS: Final = ("HATHAT", "HATHAU", "HATHAV")
NEW_CERTIFICATE_IDS: Final = ("certificate_3221322", "certificate_3221323", "certificate_3221324")


def _segment_problem(db: Any, segment: Mapping[str, Any], cabin: Any, seats: int) -> str | None:
    number, date = segment.get("flight_number"), segment.get("date")
    flight = _get(db.flights, number)
    if flight is None:
        return f"there is no flight {number!r}"
    on_date = _get(flight.dates, date)
    if on_date is None:
        return f"flight {number} does not fly on {date}"
    if on_date.status != "available":
        return f"flight {number} on {date} cannot be booked (its status is {on_date.status!r})"
    left = on_date.available_seats.get(cabin)
    if left is None or left < seats:
        return f"flight {number} on {date} has {left} {cabin} seat(s) left, {seats} needed"
    return None


@_pre("flights_bookable", "every flight must fly on its date, be available and have the seats")
def _flights_bookable(state: TrackedState, args: Mapping[str, Any]) -> bool | str:
    db = _db(state)
    if db is None:
        return True
    for segment in args["flights"]:
        problem = _segment_problem(db, segment, args["cabin"], len(args["passengers"]))
        if problem:
            return problem
    return True


@_pre("reservation_id_free", "at most three new reservations per task")
def _reservation_id_free(state: TrackedState, args: Mapping[str, Any]) -> bool | str:
    db = _db(state)
    if db is None or any(_get(db.reservations, r) is None for r in NEW_RESERVATION_IDS):
        return True
    return "too many reservations: the three ids new bookings take are used"


def _payments(args: Mapping[str, Any]) -> list[Any] | None:
    """The payments as the tool reads them (``Payment(**item)``), or ``None`` when one is not
    a payment (a schema failure, judged before this rule)."""
    from tau2.domains.airline.data_model import Payment  # type: ignore[import-untyped]

    try:
        return [Payment(**item) for item in args["payment_methods"]]
    except (TypeError, ValueError):  # not a mapping, or pydantic's ValidationError
        return None


@_pre("booking_payments", "each payment method must belong to the user, cover its amount, and the total must add up")
def _booking_payments(state: TrackedState, args: Mapping[str, Any]) -> bool | str:
    db = _db(state)
    user = None if db is None else _get(db.users, args["user_id"])
    payments = _payments(args)
    if user is None or payments is None:
        return True
    methods = user.payment_methods
    certificates: set[str] = set()
    for payment in payments:
        payment_id, amount = payment.payment_id, payment.amount
        method = _get(methods, payment_id)
        if method is None:
            return f"payment method {payment_id!r} does not belong to user {args['user_id']!r}"
        if method.source in ("gift_card", "certificate") and method.amount < amount:
            return f"{payment_id} has a balance of {method.amount}, less than the {amount} charged to it"
        if method.source == "certificate":
            if payment_id in certificates:
                return f"certificate {payment_id} can be used only once"
            certificates.add(payment_id)
    if _flights_bookable(state, args) is not True:
        return True
    n = len(args["passengers"])
    total = sum(_get(db.flights, s["flight_number"]).dates[s["date"]].prices[args["cabin"]] * n for s in args["flights"])
    total += (30 * n if args["insurance"] == "yes" else 0) + 50 * args["nonfree_baggages"]
    paid = sum(p.amount for p in payments)
    if paid != total:
        return f"the payments add up to {paid}, but the total price is {total}"
    return True


def _reservation_user(db: Any, reservation_id: Any) -> tuple[Any, Any]:
    reservation = _get(db.reservations, reservation_id)
    return (None, None) if reservation is None else (reservation, _get(db.users, reservation.user_id))


def _update_payment_problem(user: Any, payment_id: Any, price: Any) -> str | None:
    method = _get(user.payment_methods, payment_id)
    if method is None:
        return f"payment method {payment_id!r} does not belong to the reservation's user"
    if method.source == "certificate":
        return "a certificate cannot pay for a change to a reservation"
    if method.source == "gift_card" and method.amount < price:
        return f"gift card {payment_id} has {method.amount}, less than the {price} due"
    return None


@_pre("baggage_payment", "the payment method must belong to the user and cover the new bags")
def _baggage_payment(state: TrackedState, args: Mapping[str, Any]) -> bool | str:
    db = _db(state)
    reservation, user = (None, None) if db is None else _reservation_user(db, args["reservation_id"])
    if reservation is None or user is None:
        return True
    price = 50 * max(0, args["nonfree_baggages"] - reservation.nonfree_baggages)
    return _update_payment_problem(user, args["payment_id"], price) or True


def _kept(reservation: Any, segment: Mapping[str, Any], cabin: Any) -> Any:
    if cabin != reservation.cabin:
        return None
    return next(
        (f for f in reservation.flights if f.flight_number == segment.get("flight_number") and f.date == segment.get("date")),
        None,
    )


@_pre("flight_change", "new flights must be bookable and the payment method must cover the fare difference")
def _flight_change(state: TrackedState, args: Mapping[str, Any]) -> bool | str:
    db = _db(state)
    reservation, user = (None, None) if db is None else _reservation_user(db, args["reservation_id"])
    if reservation is None or user is None:
        return True
    n = len(reservation.passengers)
    total: Any = 0
    for segment in args["flights"]:
        kept = _kept(reservation, segment, args["cabin"])
        if kept is not None:
            total += kept.price * n
            continue
        problem = _segment_problem(db, segment, args["cabin"], n)
        if problem:
            return problem
        total += _get(db.flights, segment["flight_number"]).dates[segment["date"]].prices[args["cabin"]] * n
    total -= sum(f.price for f in reservation.flights) * n
    return _update_payment_problem(user, args["payment_id"], total) or True


@_pre("same_passenger_count", "the number of passengers cannot change")
def _same_passenger_count(state: TrackedState, args: Mapping[str, Any]) -> bool | str:
    db = _db(state)
    reservation = None if db is None else _get(db.reservations, args["reservation_id"])
    if reservation is None or len(reservation.passengers) == len(args["passengers"]):
        return True
    return f"the reservation has {len(reservation.passengers)} passenger(s), but {len(args['passengers'])} were given"


@_pre("certificate_id_free", "at most three certificates per user")
def _certificate_free(state: TrackedState, args: Mapping[str, Any]) -> bool | str:
    db = _db(state)
    user = None if db is None else _get(db.users, args["user_id"])
    if user is None or any(_get(user.payment_methods, c) is None for c in NEW_CERTIFICATE_IDS):
        return True
    return "too many certificates: the user already holds the three a task can add"


@_pre("flight_on_date", "the flight must fly on that date")
def _flight_on_date(state: TrackedState, args: Mapping[str, Any]) -> bool | str:
    db = _db(state)
    flight = None if db is None else _get(db.flights, args["flight_number"])
    if db is None:
        return True
    if flight is None:
        return f"there is no flight {args['flight_number']!r}"
    return _get(flight.dates, args["date"]) is not None or f"flight {args['flight_number']} does not fly on {args['date']}"


def _airline() -> dict[str, ToolRules]:
    user = _exists("users", "user_id", "user")
    reservation = _exists("reservations", "reservation_id", "reservation")
    passengers = ("passengers[].first_name", "passengers[].last_name", "passengers[].dob")
    return {
        "book_reservation": ToolRules(
            refs={"user_id": USER, "flights[].flight_number": FLIGHT, "payment_methods[].payment_id": PAYMENT},
            requires=(user, _reservation_id_free, _flights_bookable, _booking_payments),
            produces=RESERVATION_PRODUCES,
            grounded=passengers,
        ),
        "calculate": ToolRules(requires=(CALCULABLE,)),
        "cancel_reservation": ToolRules(
            refs={"reservation_id": RESERVATION}, requires=(reservation,), produces=RESERVATION_PRODUCES
        ),
        "get_flight_status": ToolRules(refs={"flight_number": FLIGHT}, requires=(_flight_on_date,)),
        "get_reservation_details": ToolRules(
            refs={"reservation_id": RESERVATION}, requires=(reservation,), produces=RESERVATION_PRODUCES
        ),
        "get_user_details": ToolRules(
            refs={"user_id": USER},
            requires=(user,),
            produces=(("reservation_id", "reservations"), ("payment_method_id", "id")),
        ),
        "list_all_airports": ToolRules(),
        "search_direct_flight": ToolRules(produces=(("flight_number", "flight_number"),)),
        "search_onestop_flight": ToolRules(produces=(("flight_number", "flight_number"),)),
        "send_certificate": ToolRules(
            refs={"user_id": USER},
            requires=(user, _certificate_free),
            produces=CERTIFICATE_PRODUCES,
        ),
        "transfer_to_human_agents": ToolRules(),
        "update_reservation_baggages": ToolRules(
            refs={"reservation_id": RESERVATION, "payment_id": PAYMENT},
            requires=(reservation, _baggage_payment),
            produces=RESERVATION_PRODUCES,
        ),
        "update_reservation_flights": ToolRules(
            refs={"reservation_id": RESERVATION, "flights[].flight_number": FLIGHT, "payment_id": PAYMENT},
            requires=(reservation, _flight_change),
            produces=RESERVATION_PRODUCES,
        ),
        "update_reservation_passengers": ToolRules(
            refs={"reservation_id": RESERVATION},
            requires=(reservation, _same_passenger_count),
            produces=RESERVATION_PRODUCES,
            grounded=passengers,
        ),
    }


# -- retail -------------------------------------------------------------------------------------
CANCEL_REASONS: Final = frozenset({"no longer needed", "ordered by mistake"})
ORDER_PRODUCES: Final = (
    ("order_id", "order_id"),
    ("user_id", "user_id"),
    ("item_id", "item_id"),
    ("product_id", "product_id"),
    ("payment_method_id", "payment_method_id"),
)


def _order(state: TrackedState, args: Mapping[str, Any]) -> tuple[Any, Any]:
    db = _db(state)
    return db, None if db is None else _get(db.orders, args["order_id"])


def _status(name: str, test: Callable[[str], bool], wanted: str, verb: str) -> Precondition:
    def check(state: TrackedState, args: Mapping[str, Any]) -> bool | str:
        order = _order(state, args)[1]
        if order is None or test(order.status):
            return True
        return f"order {args['order_id']} is {order.status!r}; only {wanted} orders can be {verb}"

    return Precondition(check=check, message=f"the order must be {wanted}", name=name)


def _missing_item(order: Any, item_ids: Sequence[Any]) -> Any:
    held = [item.item_id for item in order.items]
    return next((i for i in item_ids if item_ids.count(i) > held.count(i)), None)


@_pre("items_in_order", "every item must be in the order (as many times as listed)")
def _items_in_order(state: TrackedState, args: Mapping[str, Any]) -> bool | str:
    order = _order(state, args)[1]
    missing = None if order is None else _missing_item(order, args["item_ids"])
    return True if missing is None else f"item {missing!r} is not in order {args['order_id']} (or not that many times)"


def _replacement_problem(db: Any, order: Any, args: Mapping[str, Any], *, different: bool) -> str | None:
    old, new = args["item_ids"], args["new_item_ids"]
    if len(old) != len(new):
        return f"{len(old)} item(s) to replace but {len(new)} new item(s)"
    for item_id, new_id in zip(old, new, strict=True):
        if different and item_id == new_id:
            return f"the new item {new_id} is the item it replaces"
        item = next((i for i in order.items if i.item_id == item_id), None)
        if item is None:
            return f"item {item_id!r} is not in order {args['order_id']}"
        product = _get(db.products, item.product_id)
        variant = None if product is None else _get(product.variants, new_id)
        if variant is None:
            return f"{new_id!r} is not a variant of {item.name} (product {item.product_id})"
        if not variant.available:
            return f"item {new_id} ({item.name}) is not available"
    return None


def _difference(db: Any, order: Any, args: Mapping[str, Any]) -> Any:
    total: Any = 0
    for item_id, new_id in zip(args["item_ids"], args["new_item_ids"], strict=True):
        item = next(i for i in order.items if i.item_id == item_id)
        total += db.products[item.product_id].variants[new_id].price - item.price
    return total


def _method(db: Any, user_id: Any, payment_method_id: Any) -> Any:
    user = _get(db.users, user_id)
    return None if user is None else _get(user.payment_methods, payment_method_id)


def _replacement(*, different: bool, rounded: bool) -> Precondition:
    def check(state: TrackedState, args: Mapping[str, Any]) -> bool | str:
        db, order = _order(state, args)
        if order is None or _missing_item(order, args["item_ids"]) is not None:
            return True
        problem = _replacement_problem(db, order, args, different=different)
        if problem:
            return problem
        method = _method(db, order.user_id, args["payment_method_id"])
        if method is None:
            return f"payment method {args['payment_method_id']!r} does not belong to the order's user"
        difference = _difference(db, order, args)
        if rounded:
            difference = round(difference, 2)
        if method.source == "gift_card" and method.balance < difference:
            return f"gift card {args['payment_method_id']} has {method.balance}, less than the {difference} due"
        return True

    return Precondition(
        check=check,
        message="new items must be available variants of the same products, paid by a method of the user",
        name="replacement_valid",
    )


@_pre("payment_change", "the order must have one payment, made with another method the new one can cover")
def _payment_change(state: TrackedState, args: Mapping[str, Any]) -> bool | str:
    db, order = _order(state, args)
    if order is None or "pending" not in order.status:
        return True
    method = _method(db, order.user_id, args["payment_method_id"])
    if method is None:
        return f"payment method {args['payment_method_id']!r} does not belong to the order's user"
    history = order.payment_history
    if len(history) != 1 or history[0].transaction_type != "payment":
        return f"order {args['order_id']} does not have exactly one payment, so its payment method cannot be changed"
    if history[0].payment_method_id == args["payment_method_id"]:
        return f"order {args['order_id']} is already paid with {args['payment_method_id']}"
    if method.source == "gift_card" and method.balance < history[0].amount:
        return f"gift card {args['payment_method_id']} has {method.balance}, less than the {history[0].amount} due"
    return True


@_pre("refund_method", "refunds go to the original payment method or a gift card of the user")
def _refund_method(state: TrackedState, args: Mapping[str, Any]) -> bool | str:
    db, order = _order(state, args)
    if order is None or order.status != "delivered":
        return True
    method = _method(db, order.user_id, args["payment_method_id"])
    if method is None:
        return f"payment method {args['payment_method_id']!r} does not belong to the order's user"
    original = order.payment_history[0].payment_method_id
    if method.source != "gift_card" and args["payment_method_id"] != original:
        return f"a refund must go to the original payment method ({original}) or a gift card"
    return True


@_pre("valid_reason", "the reason must be 'no longer needed' or 'ordered by mistake'")
def _valid_reason(state: TrackedState, args: Mapping[str, Any]) -> bool | str:
    return args["reason"] in CANCEL_REASONS


@_pre("email_known", "a user with this email must exist")
def _email_known(state: TrackedState, args: Mapping[str, Any]) -> bool | str:
    db = _db(state)
    email = args["email"].lower()
    if db is None or any(u.email.lower() == email for u in db.users.values()):
        return True
    return f"no user has the email {args['email']!r}"


@_pre("name_zip_known", "a user with this name and zip code must exist")
def _name_zip_known(state: TrackedState, args: Mapping[str, Any]) -> bool | str:
    db = _db(state)
    first, last, zip_code = args["first_name"].lower(), args["last_name"].lower(), args["zip"]
    if db is None or any(
        u.name.first_name.lower() == first and u.name.last_name.lower() == last and u.address.zip == zip_code
        for u in db.users.values()
    ):
        return True
    return f"no user named {args['first_name']} {args['last_name']} lives in zip code {zip_code}"


def _bind_user_id(state: TrackedState, args: Mapping[str, Any], result: Any) -> None:
    """``find_user_id_by_*`` answer with the bare id (not JSON): it is a ``user_id`` reference."""
    if isinstance(result, str) and result and not result.startswith("Error:"):
        state.bind("user_id", result.strip().strip('"'), tool=None)


def _retail() -> dict[str, ToolRules]:
    order = _exists("orders", "order_id", "order")
    user = _exists("users", "user_id", "user")
    pending = _status("order_pending", lambda s: s == "pending", "pending", "changed")
    pendingish = _status("order_pending", lambda s: "pending" in s, "pending", "changed")
    delivered = _status("order_delivered", lambda s: s == "delivered", "delivered", "returned or exchanged")
    items = {"order_id": ORDER, "item_ids": ITEM, "new_item_ids": ITEM, "payment_method_id": PAYMENT}
    address = ("address1", "city", "zip")
    return {
        "calculate": ToolRules(requires=(CALCULABLE,)),
        "cancel_pending_order": ToolRules(
            refs={"order_id": ORDER}, requires=(order, pending, _valid_reason), produces=ORDER_PRODUCES
        ),
        "exchange_delivered_order_items": ToolRules(
            refs=items,
            requires=(order, delivered, _items_in_order, _replacement(different=False, rounded=True)),
            produces=ORDER_PRODUCES,
        ),
        "find_user_id_by_email": ToolRules(requires=(_email_known,), grounded=("email",), effects=(_bind_user_id,)),
        "find_user_id_by_name_zip": ToolRules(
            requires=(_name_zip_known,), grounded=("first_name", "last_name", "zip"), effects=(_bind_user_id,)
        ),
        "get_order_details": ToolRules(refs={"order_id": ORDER}, requires=(order,), produces=ORDER_PRODUCES),
        "get_product_details": ToolRules(
            refs={"product_id": PRODUCT},
            requires=(_exists("products", "product_id", "product"),),
            produces=(("product_id", "product_id"), ("item_id", "item_id")),
        ),
        "get_user_details": ToolRules(
            refs={"user_id": USER}, requires=(user,), produces=(("order_id", "orders"), ("payment_method_id", "id"))
        ),
        "list_all_product_types": ToolRules(produces=(("product_id", "*"),)),  # {product name: product id}
        "modify_pending_order_address": ToolRules(
            refs={"order_id": ORDER}, requires=(order, pendingish), produces=ORDER_PRODUCES, grounded=address
        ),
        "modify_pending_order_items": ToolRules(
            refs=items,
            requires=(order, pending, _items_in_order, _replacement(different=True, rounded=False)),
            produces=ORDER_PRODUCES,
        ),
        "modify_pending_order_payment": ToolRules(
            refs={"order_id": ORDER, "payment_method_id": PAYMENT},
            requires=(order, pendingish, _payment_change),
            produces=ORDER_PRODUCES,
        ),
        "modify_user_address": ToolRules(refs={"user_id": USER}, requires=(user,), grounded=address),
        "return_delivered_order_items": ToolRules(
            refs={"order_id": ORDER, "item_ids": ITEM, "payment_method_id": PAYMENT},
            requires=(order, delivered, _refund_method, _items_in_order),
            produces=ORDER_PRODUCES,
        ),
        "transfer_to_human_agents": ToolRules(),
    }


# -- telecom ------------------------------------------------------------------------------------
CUSTOMER = Ref("customer_id", user=True)
LINE = Ref("line_id", user=True)
BILL = Ref("bill_id", user=True)
TELECOM_PRODUCES: Final = (
    ("customer_id", "customer_id"),
    ("line_id", "line_ids"),
    ("line_id", "line_id"),
    ("bill_id", "bill_ids"),
    ("bill_id", "bill_id"),
)


def _find(items: Sequence[Any], attr: str, value: Any) -> Any:
    return next((x for x in items if getattr(x, attr) == value), None)


@_pre("customer_exists", "the customer must exist")
def _customer_exists(state: TrackedState, args: Mapping[str, Any]) -> bool | str:
    db = _db(state)
    if db is None or _find(db.customers, "customer_id", args["customer_id"]) is not None:
        return True
    return f"there is no customer {args['customer_id']!r}"


@_pre("phone_known", "a customer or line must have this phone number")
def _phone_known(state: TrackedState, args: Mapping[str, Any]) -> bool | str:
    db = _db(state)
    phone = args["phone_number"]
    if db is None or _find(db.customers, "phone_number", phone) is not None or _find(db.lines, "phone_number", phone):
        return True
    return f"no customer or line has the phone number {phone!r}"


def _customer_line(state: TrackedState, args: Mapping[str, Any]) -> tuple[Any, Any, str | None]:
    db = _db(state)
    if db is None:
        return None, None, None
    customer = _find(db.customers, "customer_id", args["customer_id"])
    if customer is None:
        return None, None, None
    if args["line_id"] not in customer.line_ids:
        return customer, None, f"line {args['line_id']!r} does not belong to customer {args['customer_id']}"
    line = _find(db.lines, "line_id", args["line_id"])
    return customer, line, None if line is not None else f"there is no line {args['line_id']!r}"


def _line_status(name: str, allowed: tuple[str, ...], verb: str) -> Precondition:
    def check(state: TrackedState, args: Mapping[str, Any]) -> bool | str:
        _, line, problem = _customer_line(state, args)
        if problem:
            return problem
        if line is None or not allowed or str(line.status.value) in allowed:
            return True
        return f"line {args['line_id']} is {line.status.value!r}; it must be {' or '.join(allowed)} to be {verb}"

    return Precondition(
        check=check, message=f"the line must belong to the customer{' and be ' + allowed[0] if allowed else ''}", name=name
    )


@_pre("payment_request_possible", "the bill must be the customer's and no other bill may await payment")
def _payment_request(state: TrackedState, args: Mapping[str, Any]) -> bool | str:
    db = _db(state)
    customer = None if db is None else _find(db.customers, "customer_id", args["customer_id"])
    if customer is None:
        return True
    for bill_id in customer.bill_ids:
        bill = _find(db.bills, "bill_id", bill_id)
        if bill is not None and bill.status.value == "Awaiting Payment":
            return f"bill {bill_id} already awaits payment for customer {args['customer_id']}"
    if args["bill_id"] not in customer.bill_ids:
        return f"bill {args['bill_id']!r} does not belong to customer {args['customer_id']}"
    return True


@_pre("positive_amount", "the refuel amount must be positive")
def _positive(state: TrackedState, args: Mapping[str, Any]) -> bool | str:
    return args["gb_amount"] > 0 or f"the refuel amount {args['gb_amount']} GB is not positive"


@_pre("id_known", "the id must name an existing line, device, bill, customer or plan")
def _id_known(state: TrackedState, args: Mapping[str, Any]) -> bool | str:
    db = _db(state)
    if db is None:
        return True
    ident = args["id"]
    tables = {
        "L": ("lines", "line_id"),
        "D": ("devices", "device_id"),
        "B": ("bills", "bill_id"),
        "C": ("customers", "customer_id"),
    }
    tables["P"] = ("plans", "plan_id")
    entry = tables.get(ident[:1]) if isinstance(ident, str) else None
    if entry is None:
        return f"{ident!r} is not a line, device, bill, customer or plan id"
    return _find(getattr(db, entry[0]), entry[1], ident) is not None or f"there is no {entry[0][:-1]} {ident!r}"


@_pre("airplane_mode_off", "Wi-Fi settings cannot change while airplane mode is on")
def _airplane_off(state: TrackedState, args: Mapping[str, Any]) -> bool | str:
    user_db = _user_db(state)
    if user_db is None or not user_db.device.airplane_mode:
        return True
    return "airplane mode is on, so Wi-Fi cannot be toggled; turn airplane mode off first"


@_pre("payment_request_pending", "a payment needs a payment request from the agent")
def _payment_requested(state: TrackedState, args: Mapping[str, Any]) -> bool | str:
    user_db = _user_db(state)
    if user_db is None or user_db.surroundings.payment_request is not None:
        return True
    return "there is no payment request to pay; the agent must send one first"


def _app_installed(name: str) -> Precondition:
    def check(state: TrackedState, args: Mapping[str, Any]) -> bool | str:
        user_db = _user_db(state)
        if user_db is None:
            return True
        app = user_db.device.app_statuses.get(args["app_name"])
        if app is None:
            return f"app {args['app_name']!r} is not installed on the phone"
        if "permission" in args and args["permission"].lower() not in type(app.permissions).model_fields:
            return f"permission {args['permission']!r} is not tracked for app {args['app_name']!r}"
        return True

    return Precondition(check=check, message="the app must be installed (and the permission tracked)", name=name)


@_pre("network_mode_valid", "the network mode must be one of the listed options")
def _network_mode(state: TrackedState, args: Mapping[str, Any]) -> bool | str:
    from tau2.domains.telecom.user_data_model import NetworkModePreference  # type: ignore[import-untyped]

    valid = [m.value for m in NetworkModePreference]
    return args["mode"] in valid or f"{args['mode']!r} is not a network mode; use one of {', '.join(valid)}"


def _telecom() -> dict[str, ToolRules]:
    line = {"customer_id": CUSTOMER, "line_id": LINE}
    owned = _line_status("line_of_customer", (), "used")
    return {
        "get_customer_by_phone": ToolRules(requires=(_phone_known,), produces=TELECOM_PRODUCES, grounded=("phone_number",)),
        "get_customer_by_id": ToolRules(refs={"customer_id": CUSTOMER}, requires=(_customer_exists,), produces=TELECOM_PRODUCES),
        "get_customer_by_name": ToolRules(produces=TELECOM_PRODUCES, grounded=("full_name", "dob")),
        "get_details_by_id": ToolRules(requires=(_id_known,), produces=TELECOM_PRODUCES),
        "suspend_line": ToolRules(refs=line, requires=(_customer_exists, _line_status("line_active", ("Active",), "suspended"))),
        "resume_line": ToolRules(
            refs=line,
            requires=(_customer_exists, _line_status("line_suspended", ("Suspended", "Pending Activation"), "resumed")),
        ),
        "get_bills_for_customer": ToolRules(
            refs={"customer_id": CUSTOMER}, requires=(_customer_exists,), produces=TELECOM_PRODUCES
        ),
        "send_payment_request": ToolRules(
            refs={"customer_id": CUSTOMER, "bill_id": BILL}, requires=(_customer_exists, _payment_request)
        ),
        "get_data_usage": ToolRules(refs=line, requires=(_customer_exists, owned)),
        "enable_roaming": ToolRules(refs=line, requires=(_customer_exists, owned)),
        "disable_roaming": ToolRules(refs=line, requires=(_customer_exists, owned)),
        "refuel_data": ToolRules(refs=line, requires=(_customer_exists, owned, _positive)),
        "transfer_to_human_agents": ToolRules(),
        # The user's own tools, on their phone.
        "toggle_wifi": ToolRules(requires=(_airplane_off,)),
        "make_payment": ToolRules(requires=(_payment_requested,)),
        "grant_app_permission": ToolRules(requires=(_app_installed("app_permission_tracked"),)),
        "check_app_status": ToolRules(requires=(_app_installed("app_installed"),)),
        "check_app_permissions": ToolRules(requires=(_app_installed("app_installed"),)),
        "set_network_mode_preference": ToolRules(requires=(_network_mode,)),
    }


RULES: Final[Mapping[Domain, Callable[[], dict[str, ToolRules]]]] = {
    "airline": _airline,
    "retail": _retail,
    "telecom": _telecom,
}
"""Domain -> a function building its rules (tools it does not list get schema checks only)."""

_REFUSALS: Final[Mapping[str, tuple[str, ...]]] = {
    "toggle_wifi": ("Cannot change Wi-Fi settings while Airplane Mode is ON",),
    "make_payment": ("You do not have a payment request",),
    "grant_app_permission": ("Error. ",),
    "check_app_status": ("App '",),
    "check_app_permissions": ("App '",),
    "set_network_mode_preference": ("Failed to set network mode",),
}
"""User tools of telecom that refuse with a plain result instead of raising."""


def refusal(tool: str, content: str, error: bool) -> str | None:
    """Why the environment rejected a call, from its tool message; ``None`` when it ran.

    Rejections are τ²'s error flag (the tool raised) and, for the telecom user tools
    that answer with a refusal text instead of raising, that text.
    """
    if error:
        return content
    for prefix in _REFUSALS.get(tool, ()):
        if content.startswith(prefix) and (prefix != "App '" or "not found" in content.split("\n", 1)[0]):
            return content.split("\n", 1)[0]
    return None
