"""The 14 airline tools of τ-bench v1, reimplemented over a :class:`~._table.Table` database.

Each function takes the database first and the tool's keyword arguments, and returns the
observation string. Behaviour, result layout and error strings follow the original
environment, including its quirks (no seat bookkeeping, the one-stop search's next-day
date written without zero padding); an exception escaping a tool becomes ``Error: <e>``
in :meth:`~.sandbox.Sandbox.invoke`. Each function's ``__qualname__`` is the original
class's ``invoke`` so that argument errors read exactly as there.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from ._calculator import calculate as evaluate_expression
from ._table import Db, dumps_row

__all__ = (
    "AIRPORTS",
    "BAG_PRICE",
    "CERTIFICATE_IDS",
    "INSURANCE_PER_PASSENGER",
    "NEW_RESERVATION_IDS",
    "TOOLS",
    "book_reservation",
    "calculate",
    "cancel_reservation",
    "get_reservation_details",
    "get_user_details",
    "list_all_airports",
    "new_reservation_id",
    "next_day",
    "search_direct_flight",
    "search_onestop_flight",
    "send_certificate",
    "think",
    "transfer_to_human_agents",
    "update_reservation_baggages",
    "update_reservation_flights",
    "update_reservation_passengers",
)

F = TypeVar("F", bound=Callable[..., Any])

TOOLS: dict[str, Callable[..., Any]] = {}

AIRPORTS: Mapping[str, str] = {
    "SFO": "San Francisco",
    "JFK": "New York",
    "LAX": "Los Angeles",
    "ORD": "Chicago",
    "DFW": "Dallas",
    "DEN": "Denver",
    "SEA": "Seattle",
    "ATL": "Atlanta",
    "MIA": "Miami",
    "BOS": "Boston",
    "PHX": "Phoenix",
    "IAH": "Houston",
    "LAS": "Las Vegas",
    "MCO": "Orlando",
    "EWR": "Newark",
    "CLT": "Charlotte",
    "MSP": "Minneapolis",
    "DTW": "Detroit",
    "PHL": "Philadelphia",
    "LGA": "LaGuardia",
}

NEW_RESERVATION_IDS = ("HATHAT", "HATHAU", "HATHAV")
"""Ids a new booking takes, in order (the original assumes at most three per task)."""

CERTIFICATE_IDS = ("certificate_3221322", "certificate_3221323", "certificate_3221324")
"""Ids a sent certificate takes, in order (at most three per user)."""

INSURANCE_PER_PASSENGER = 30
BAG_PRICE = 50


def _tool(name: str, original: str) -> Callable[[F], F]:
    def register(fn: F) -> F:
        fn.__qualname__ = f"{original}.invoke"
        TOOLS[name] = fn
        return fn

    return register


def new_reservation_id(reservations: Mapping[str, Any]) -> str:
    """The id the next booking gets (the third is taken even when it exists)."""
    if NEW_RESERVATION_IDS[0] not in reservations:
        return NEW_RESERVATION_IDS[0]
    if NEW_RESERVATION_IDS[1] not in reservations:
        return NEW_RESERVATION_IDS[1]
    return NEW_RESERVATION_IDS[2]


def _flight_on_date(db: Db, flight: Mapping[str, Any], cabin: str, seats_needed: int) -> Any:
    """Checks one requested segment; returns the flight record, or an error string."""
    number = flight["flight_number"]
    flights = db["flights"]
    if number not in flights:
        return f"Error: flight {number} not found"
    record = flights[number]
    if flight["date"] not in record["dates"]:
        return f"Error: flight {number} not found on date {flight['date']}"
    on_date = record["dates"][flight["date"]]
    if on_date["status"] != "available":
        return f"Error: flight {number} not available on date {flight['date']}"
    if on_date["available_seats"][cabin] < seats_needed:
        return f"Error: not enough seats on flight {number}"
    return record


@_tool("book_reservation", "BookReservation")
def book_reservation(
    data: Db,
    user_id: str,
    origin: str,
    destination: str,
    flight_type: str,
    cabin: str,
    flights: list[dict[str, Any]],
    passengers: list[dict[str, Any]],
    payment_methods: list[dict[str, Any]],
    total_baggages: int,
    nonfree_baggages: int,
    insurance: str,
) -> str:
    users, reservations = data["users"], data["reservations"]
    if user_id not in users:
        return "Error: user not found"
    user = users[user_id]
    reservation_id = new_reservation_id(reservations)
    reservation: dict[str, Any] = {
        "reservation_id": reservation_id,
        "user_id": user_id,
        "origin": origin,
        "destination": destination,
        "flight_type": flight_type,
        "cabin": cabin,
        "flights": copy.deepcopy(flights),
        "passengers": passengers,
        "payment_history": payment_methods,
        "created_at": "2024-05-15T15:00:00",
        "total_baggages": total_baggages,
        "nonfree_baggages": nonfree_baggages,
        "insurance": insurance,
    }
    total = 0
    for segment in reservation["flights"]:
        record = _flight_on_date(data, segment, cabin, len(passengers))
        if isinstance(record, str):
            return record
        segment["price"] = record["dates"][segment["date"]]["prices"][cabin]
        segment["origin"] = record["origin"]
        segment["destination"] = record["destination"]
        total += segment["price"] * len(passengers)
    if insurance == "yes":
        total += INSURANCE_PER_PASSENGER * len(passengers)
    total += BAG_PRICE * nonfree_baggages

    for payment in payment_methods:
        payment_id, amount = payment["payment_id"], payment["amount"]
        if payment_id not in user["payment_methods"]:
            return f"Error: payment method {payment_id} not found"
        method = user["payment_methods"][payment_id]
        if method["source"] in ("gift_card", "certificate") and method["amount"] < amount:
            return f"Error: not enough balance in payment method {payment_id}"
    paid = sum(payment["amount"] for payment in payment_methods)
    if paid != total:
        return f"Error: payment amount does not add up, total price is {total}, but paid {paid}"

    user = users.for_write(user_id)
    for payment in payment_methods:
        payment_id, amount = payment["payment_id"], payment["amount"]
        source = user["payment_methods"][payment_id]["source"]
        if source == "gift_card":
            user["payment_methods"][payment_id]["amount"] -= amount
        elif source == "certificate":
            del user["payment_methods"][payment_id]
    reservations.insert(reservation_id, reservation)
    user["reservations"].append(reservation_id)
    return json.dumps(reservation)


@_tool("calculate", "Calculate")
def calculate(data: Db, expression: str) -> str:
    return evaluate_expression(expression)


@_tool("cancel_reservation", "CancelReservation")
def cancel_reservation(data: Db, reservation_id: str) -> str:
    reservations = data["reservations"]
    if reservation_id not in reservations:
        return "Error: reservation not found"
    reservation = reservations.for_write(reservation_id)
    refunds = [{"payment_id": payment["payment_id"], "amount": -payment["amount"]} for payment in reservation["payment_history"]]
    reservation["payment_history"].extend(refunds)
    reservation["status"] = "cancelled"
    return json.dumps(reservation)


@_tool("get_reservation_details", "GetReservationDetails")
def get_reservation_details(data: Db, reservation_id: str) -> str:
    return dumps_row(data["reservations"], reservation_id, "Error: user not found")  # sic: the original says "user"


@_tool("get_user_details", "GetUserDetails")
def get_user_details(data: Db, user_id: str) -> str:
    return dumps_row(data["users"], user_id, "Error: user not found")


@_tool("list_all_airports", "ListAllAirports")
def list_all_airports(data: Db) -> str:
    return json.dumps(dict(AIRPORTS))


def _flight_view(record: Mapping[str, Any], on_date: Mapping[str, Any]) -> dict[str, Any]:
    view = {key: value for key, value in record.items() if key != "dates"}
    view.update(on_date)
    return view


@_tool("search_direct_flight", "SearchDirectFlight")
def search_direct_flight(data: Db, origin: str, destination: str, date: str) -> str:
    found = []
    for record in data["flights"].values():
        if record["origin"] != origin or record["destination"] != destination:
            continue
        dates = record["dates"]
        if date in dates and dates[date]["status"] == "available":
            found.append(_flight_view(record, dates[date]))
    return json.dumps(found)


def next_day(date: str, first_leg: Mapping[str, Any]) -> str:
    """The second leg's date as the original computes it (May only, no zero padding)."""
    if "+1" in first_leg["scheduled_arrival_time_est"]:
        return f"2024-05-{int(date[-2:]) + 1}"
    return date


@_tool("search_onestop_flight", "SearchOnestopFlight")
def search_onestop_flight(data: Db, origin: str, destination: str, date: str) -> str:
    flights = data["flights"]
    found = []
    for first in flights.values():
        if first["origin"] != origin:
            continue
        for second in flights.values():
            if second["destination"] != destination or first["destination"] != second["origin"]:
                continue
            date2 = next_day(date, first)
            if first["scheduled_arrival_time_est"] > second["scheduled_departure_time_est"]:
                continue
            if date not in first["dates"] or date2 not in second["dates"]:
                continue
            if first["dates"][date]["status"] != "available" or second["dates"][date2]["status"] != "available":
                continue
            leg1 = _flight_view(first, first["dates"][date])
            leg1["date"] = date
            # The original fills the second leg's details from the first leg's date.
            leg2 = _flight_view(second, second["dates"][date])
            leg2["date"] = date2
            found.append([leg1, leg2])
    return json.dumps(found)


@_tool("send_certificate", "SendCertificate")
def send_certificate(data: Db, user_id: str, amount: int) -> str | None:
    users = data["users"]
    if user_id not in users:
        return "Error: user not found"
    for payment_id in CERTIFICATE_IDS:
        if payment_id not in users[user_id]["payment_methods"]:
            user = users.for_write(user_id)
            user["payment_methods"][payment_id] = {
                "source": "certificate",
                "amount": amount,
                "id": payment_id,
            }
            return f"Certificate {payment_id} added to user {user_id} with amount {amount}."
    return None


@_tool("think", "Think")
def think(data: Db, thought: str) -> str:
    return ""


@_tool("transfer_to_human_agents", "TransferToHumanAgents")
def transfer_to_human_agents(data: Db, summary: str) -> str:
    return "Transfer successful"


def _payment_for_update(user: Mapping[str, Any], payment_id: str, price: Any) -> str | None:
    """The update tools' payment check; returns the error string, if any."""
    if payment_id not in user["payment_methods"]:
        return "Error: payment method not found"
    method = user["payment_methods"][payment_id]
    if method["source"] == "certificate":
        return "Error: certificate cannot be used to update reservation"
    if method["source"] == "gift_card" and method["amount"] < price:
        return "Error: gift card balance is not enough"
    return None


@_tool("update_reservation_baggages", "UpdateReservationBaggages")
def update_reservation_baggages(
    data: Db, reservation_id: str, total_baggages: int, nonfree_baggages: int, payment_id: str
) -> str:
    users, reservations = data["users"], data["reservations"]
    if reservation_id not in reservations:
        return "Error: reservation not found"
    reservation = reservations[reservation_id]
    price = BAG_PRICE * max(0, nonfree_baggages - reservation["nonfree_baggages"])
    error = _payment_for_update(users[reservation["user_id"]], payment_id, price)
    if error is not None:
        return error
    reservation = reservations.for_write(reservation_id)
    reservation["total_baggages"] = total_baggages
    reservation["nonfree_baggages"] = nonfree_baggages
    if users[reservation["user_id"]]["payment_methods"][payment_id]["source"] == "gift_card":
        users.for_write(reservation["user_id"])["payment_methods"][payment_id]["amount"] -= price
    if price != 0:
        reservation["payment_history"].append({"payment_id": payment_id, "amount": price})
    return json.dumps(reservation)


@_tool("update_reservation_flights", "UpdateReservationFlights")
def update_reservation_flights(data: Db, reservation_id: str, cabin: str, flights: list[dict[str, Any]], payment_id: str) -> str:
    users, reservations = data["users"], data["reservations"]
    if reservation_id not in reservations:
        return "Error: reservation not found"
    reservation = reservations[reservation_id]
    n_passengers = len(reservation["passengers"])
    total = 0
    flights = copy.deepcopy(flights)
    for segment in flights:
        kept = [
            old
            for old in reservation["flights"]
            if old["flight_number"] == segment["flight_number"]
            and old["date"] == segment["date"]
            and cabin == reservation["cabin"]
        ]
        if kept:
            # An unchanged segment keeps the price it was bought at.
            segment["price"] = kept[0]["price"]
            segment["origin"] = kept[0]["origin"]
            segment["destination"] = kept[0]["destination"]
            total += kept[0]["price"] * n_passengers
            continue
        record = _flight_on_date(data, segment, cabin, n_passengers)
        if isinstance(record, str):
            return record
        segment["price"] = record["dates"][segment["date"]]["prices"][cabin]
        segment["origin"] = record["origin"]
        segment["destination"] = record["destination"]
        total += segment["price"] * n_passengers
    total -= sum(old["price"] for old in reservation["flights"]) * n_passengers

    error = _payment_for_update(users[reservation["user_id"]], payment_id, total)
    if error is not None:
        return error
    if users[reservation["user_id"]]["payment_methods"][payment_id]["source"] == "gift_card":
        users.for_write(reservation["user_id"])["payment_methods"][payment_id]["amount"] -= total
    reservation = reservations.for_write(reservation_id)
    reservation["flights"] = flights
    if total != 0:
        reservation["payment_history"].append({"payment_id": payment_id, "amount": total})
    # As in the original, the flights table is not updated (seats are not bookkept).
    return json.dumps(reservation)


@_tool("update_reservation_passengers", "UpdateReservationPassengers")
def update_reservation_passengers(data: Db, reservation_id: str, passengers: list[dict[str, Any]]) -> str:
    reservations = data["reservations"]
    if reservation_id not in reservations:
        return "Error: reservation not found"
    if len(passengers) != len(reservations[reservation_id]["passengers"]):
        return "Error: number of passengers does not match"
    reservation = reservations.for_write(reservation_id)
    reservation["passengers"] = passengers
    return json.dumps(reservation)
