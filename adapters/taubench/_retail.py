"""The 16 retail tools of τ-bench v1, reimplemented over a :class:`~._table.Table` database.

Same conventions as :mod:`._airline`: database first, the tool's keyword arguments, the
original's result layout and error strings, ``__qualname__`` of the original class.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, TypeVar

from ._calculator import calculate as evaluate_expression
from ._table import Db, dumps_row

__all__ = (
    "CANCEL_REASONS",
    "TOOLS",
    "calculate",
    "cancel_pending_order",
    "exchange_delivered_order_items",
    "find_user_id_by_email",
    "find_user_id_by_name_zip",
    "get_order_details",
    "get_product_details",
    "get_user_details",
    "list_all_product_types",
    "missing_item",
    "modify_pending_order_address",
    "modify_pending_order_items",
    "modify_pending_order_payment",
    "modify_user_address",
    "return_delivered_order_items",
    "think",
    "transfer_to_human_agents",
)

F = TypeVar("F", bound=Callable[..., Any])

TOOLS: dict[str, Callable[..., Any]] = {}

CANCEL_REASONS = ("no longer needed", "ordered by mistake")


def _tool(name: str, original: str) -> Callable[[F], F]:
    def register(fn: F) -> F:
        fn.__qualname__ = f"{original}.invoke"
        TOOLS[name] = fn
        return fn

    return register


def missing_item(order: Mapping[str, Any], item_ids: Sequence[str]) -> str | None:
    """The first id asked for more often than the order holds it, if any."""
    held = [item["item_id"] for item in order["items"]]
    for item_id in item_ids:
        if item_ids.count(item_id) > held.count(item_id):
            return item_id
    return None


def _price_difference(db: Db, order: Mapping[str, Any], item_ids: Sequence[str], new_item_ids: Sequence[str]) -> Any:
    """Checks each replacement variant; returns the price difference or an error string."""
    products = db["products"]
    difference: Any = 0
    for item_id, new_item_id in zip(item_ids, new_item_ids, strict=False):
        item = next(item for item in order["items"] if item["item_id"] == item_id)
        variants = products[item["product_id"]]["variants"]
        if not (new_item_id in variants and variants[new_item_id]["available"]):
            return f"Error: new item {new_item_id} not found or available"
        difference += variants[new_item_id]["price"] - item["price"]
    return difference


_REFUSALS: Final = {
    "delivered": "Error: non-delivered order cannot be exchanged",
    "pending": "Error: non-pending order cannot be modified",
}


def _item_change(
    data: Db, order_id: str, item_ids: Sequence[str], new_item_ids: Sequence[str], payment_method_id: str, *, status: str
) -> str | tuple[Mapping[str, Any], Any, Mapping[str, Any]]:
    """The checks exchanging and modifying items share, in the original's order.

    Returns:
        the environment's error string, or (order, price difference, payment method).
    """
    orders = data["orders"]
    if order_id not in orders:
        return "Error: order not found"
    order = orders[order_id]
    if order["status"] != status:
        return _REFUSALS[status]
    missing = missing_item(order, item_ids)
    if missing is not None:
        return f"Error: {missing} not found"
    if len(item_ids) != len(new_item_ids):
        return "Error: the number of items to be exchanged should match"
    difference = _price_difference(data, order, item_ids, new_item_ids)
    if isinstance(difference, str):
        return difference
    methods = data["users"][order["user_id"]]["payment_methods"]
    if payment_method_id not in methods:
        return "Error: payment method not found"
    return order, difference, methods[payment_method_id]


@_tool("calculate", "Calculate")
def calculate(data: Db, expression: str) -> str:
    return evaluate_expression(expression)


@_tool("cancel_pending_order", "CancelPendingOrder")
def cancel_pending_order(data: Db, order_id: str, reason: str) -> str:
    orders = data["orders"]
    if order_id not in orders:
        return "Error: order not found"
    if orders[order_id]["status"] != "pending":
        return "Error: non-pending order cannot be cancelled"
    if reason not in CANCEL_REASONS:
        return "Error: invalid reason"
    order = orders.for_write(order_id)
    refunds = []
    for payment in order["payment_history"]:
        payment_id = payment["payment_method_id"]
        refunds.append(
            {
                "transaction_type": "refund",
                "amount": payment["amount"],
                "payment_method_id": payment_id,
            }
        )
        if "gift_card" in payment_id:
            # Gift cards are refunded at once; other methods take days and are not tracked.
            method = data["users"].for_write(order["user_id"])["payment_methods"][payment_id]
            method["balance"] = round(method["balance"] + payment["amount"], 2)
    order["status"] = "cancelled"
    order["cancel_reason"] = reason
    order["payment_history"].extend(refunds)
    return json.dumps(order)


@_tool("exchange_delivered_order_items", "ExchangeDeliveredOrderItems")
def exchange_delivered_order_items(
    data: Db, order_id: str, item_ids: list[str], new_item_ids: list[str], payment_method_id: str
) -> str:
    checked = _item_change(data, order_id, item_ids, new_item_ids, payment_method_id, status="delivered")
    if isinstance(checked, str):
        return checked
    order, difference, method = checked
    difference = round(difference, 2)
    if method["source"] == "gift_card" and method["balance"] < difference:
        return "Error: insufficient gift card balance to pay for the price difference"
    order = data["orders"].for_write(order_id)
    order["status"] = "exchange requested"
    order["exchange_items"] = sorted(item_ids)
    order["exchange_new_items"] = sorted(new_item_ids)
    order["exchange_payment_method_id"] = payment_method_id
    order["exchange_price_difference"] = difference
    return json.dumps(order)


@_tool("find_user_id_by_email", "FindUserIdByEmail")
def find_user_id_by_email(data: Db, email: str) -> str:
    for user_id, profile in data["users"].items():
        if profile["email"].lower() == email.lower():
            return str(user_id)
    return "Error: user not found"


@_tool("find_user_id_by_name_zip", "FindUserIdByNameZip")
def find_user_id_by_name_zip(data: Db, first_name: str, last_name: str, zip: str) -> str:
    for user_id, profile in data["users"].items():
        if (
            profile["name"]["first_name"].lower() == first_name.lower()
            and profile["name"]["last_name"].lower() == last_name.lower()
            and profile["address"]["zip"] == zip
        ):
            return str(user_id)
    return "Error: user not found"


@_tool("get_order_details", "GetOrderDetails")
def get_order_details(data: Db, order_id: str) -> str:
    return dumps_row(data["orders"], order_id, "Error: order not found")


@_tool("get_product_details", "GetProductDetails")
def get_product_details(data: Db, product_id: str) -> str:
    return dumps_row(data["products"], product_id, "Error: product not found")


@_tool("get_user_details", "GetUserDetails")
def get_user_details(data: Db, user_id: str) -> str:
    return dumps_row(data["users"], user_id, "Error: user not found")


@_tool("list_all_product_types", "ListAllProductTypes")
def list_all_product_types(data: Db) -> str:
    names = {product["name"]: product["product_id"] for product in data["products"].values()}
    return json.dumps(dict(sorted(names.items())))


def _address(address1: str, address2: str, city: str, state: str, country: str, zip: str) -> dict[str, str]:
    return {
        "address1": address1,
        "address2": address2,
        "city": city,
        "state": state,
        "country": country,
        "zip": zip,
    }


@_tool("modify_pending_order_address", "ModifyPendingOrderAddress")
def modify_pending_order_address(
    data: Db,
    order_id: str,
    address1: str,
    address2: str,
    city: str,
    state: str,
    country: str,
    zip: str,
) -> str:
    orders = data["orders"]
    if order_id not in orders:
        return "Error: order not found"
    if orders[order_id]["status"] != "pending":
        return "Error: non-pending order cannot be modified"
    order = orders.for_write(order_id)
    order["address"] = _address(address1, address2, city, state, country, zip)
    return json.dumps(order)


@_tool("modify_pending_order_items", "ModifyPendingOrderItems")
def modify_pending_order_items(
    data: Db, order_id: str, item_ids: list[str], new_item_ids: list[str], payment_method_id: str
) -> str:
    products, orders, users = data["products"], data["orders"], data["users"]
    checked = _item_change(data, order_id, item_ids, new_item_ids, payment_method_id, status="pending")
    if isinstance(checked, str):
        return checked
    order, difference, method = checked
    if method["source"] == "gift_card" and method["balance"] < difference:
        return "Error: insufficient gift card balance to pay for the new item"

    order = orders.for_write(order_id)
    order["payment_history"].append(
        {
            "transaction_type": "payment" if difference > 0 else "refund",
            "amount": abs(difference),
            "payment_method_id": payment_method_id,
        }
    )
    if method["source"] == "gift_card":
        method = users.for_write(order["user_id"])["payment_methods"][payment_method_id]
        method["balance"] = round(method["balance"] - difference, 2)
    for item_id, new_item_id in zip(item_ids, new_item_ids, strict=False):
        item = next(item for item in order["items"] if item["item_id"] == item_id)
        variant = products[item["product_id"]]["variants"][new_item_id]
        item["item_id"] = new_item_id
        item["price"] = variant["price"]
        item["options"] = variant["options"]
    order["status"] = "pending (item modified)"
    return json.dumps(order)


@_tool("modify_pending_order_payment", "ModifyPendingOrderPayment")
def modify_pending_order_payment(data: Db, order_id: str, payment_method_id: str) -> str:
    orders, users = data["orders"], data["users"]
    if order_id not in orders:
        return "Error: order not found"
    order = orders[order_id]
    if order["status"] != "pending":
        return "Error: non-pending order cannot be modified"
    methods = users[order["user_id"]]["payment_methods"]
    if payment_method_id not in methods:
        return "Error: payment method not found"
    history = order["payment_history"]
    if len(history) > 1 or history[0]["transaction_type"] != "payment":
        return "Error: there should be exactly one payment for a pending order"
    old_method_id = history[0]["payment_method_id"]
    if old_method_id == payment_method_id:
        return "Error: the new payment method should be different from the current one"
    amount = history[0]["amount"]
    if methods[payment_method_id]["source"] == "gift_card" and (methods[payment_method_id]["balance"] < amount):
        return "Error: insufficient gift card balance to pay for the order"

    order = orders.for_write(order_id)
    order["payment_history"].extend(
        [
            {"transaction_type": "payment", "amount": amount, "payment_method_id": payment_method_id},
            {"transaction_type": "refund", "amount": amount, "payment_method_id": old_method_id},
        ]
    )
    if methods[payment_method_id]["source"] == "gift_card":
        method = users.for_write(order["user_id"])["payment_methods"][payment_method_id]
        method["balance"] = round(method["balance"] - amount, 2)
    if "gift_card" in old_method_id:
        old = users.for_write(order["user_id"])["payment_methods"][old_method_id]
        old["balance"] = round(old["balance"] + amount, 2)
    return json.dumps(order)


@_tool("modify_user_address", "ModifyUserAddress")
def modify_user_address(
    data: Db,
    user_id: str,
    address1: str,
    address2: str,
    city: str,
    state: str,
    country: str,
    zip: str,
) -> str:
    users = data["users"]
    if user_id not in users:
        return "Error: user not found"
    user = users.for_write(user_id)
    user["address"] = _address(address1, address2, city, state, country, zip)
    return json.dumps(user)


@_tool("return_delivered_order_items", "ReturnDeliveredOrderItems")
def return_delivered_order_items(data: Db, order_id: str, item_ids: list[str], payment_method_id: str) -> str:
    orders = data["orders"]
    if order_id not in orders:
        return "Error: order not found"
    order = orders[order_id]
    if order["status"] != "delivered":
        return "Error: non-delivered order cannot be returned"
    if payment_method_id not in data["users"][order["user_id"]]["payment_methods"]:
        return "Error: payment method not found"
    if "gift_card" not in payment_method_id and payment_method_id != order["payment_history"][0]["payment_method_id"]:
        return "Error: payment method should be either the original payment method or a gift card"
    if missing_item(order, item_ids) is not None:
        return "Error: some item not found"
    order = orders.for_write(order_id)
    order["status"] = "return requested"
    order["return_items"] = sorted(item_ids)
    order["return_payment_method_id"] = payment_method_id
    return json.dumps(order)


@_tool("think", "Think")
def think(data: Db, thought: str) -> str:
    return ""


@_tool("transfer_to_human_agents", "TransferToHumanAgents")
def transfer_to_human_agents(data: Db, summary: str) -> str:
    return "Transfer successful"
