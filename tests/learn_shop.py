"""A small shop environment that runs for real, and scripted agents whose runs become transcripts.

The shop keeps users and orders in memory and answers like many tool servers do: JSON text
for results, ``Error: ...`` text for rejections. Episodes are scripted (seeded), so every
transcript is what the environment really answered.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Mapping
from typing import Any

from prefixmon.learn import Call, Message, Transcript


def _functions(rows: tuple[tuple[str, str, dict[str, Any]], ...]) -> list[dict[str, Any]]:
    """OpenAI function definitions of ``(name, description, properties)``, every property required."""
    return [
        {
            "type": "function",
            "function": {
                "name": name,
                "description": description,
                "parameters": {"type": "object", "properties": properties, "required": sorted(properties)},
            },
        }
        for name, description, properties in rows
    ]


TOOLS: list[dict[str, Any]] = _functions(
    (
        ("get_user", "Get a user's profile and order ids.", {"user_id": {"type": "string"}}),
        ("get_order", "Get the status and details of an order.", {"order_id": {"type": "string"}}),
        (
            "cancel_order",
            "Cancel a pending order.",
            {"order_id": {"type": "string"}, "reason": {"type": "string", "enum": ["no longer needed", "ordered by mistake"]}},
        ),
        ("refund_order", "Refund part of an order.", {"order_id": {"type": "string"}, "amount": {"type": "number"}}),
        ("delete_order", "Delete an order record.", {"order_id": {"type": "string"}}),
        ("ship_to", "Change where an order is shipped.", {"order_id": {"type": "string"}, "city": {"type": "string"}}),
    )
)

CATALOGUE_TOOLS: list[dict[str, Any]] = _functions(
    (
        ("find_user", "Find a user's id by email.", {"email": {"type": "string"}}),
        ("user_directory", "The shop's users by nickname.", {}),
        ("list_products", "Every product type and its product id.", {}),
        ("get_product", "Get a product.", {"product_id": {"type": "string"}}),
        ("add_item", "Add a product to a pending order.", {"order_id": {"type": "string"}, "product_id": {"type": "string"}}),
        ("order_total", "The total of an order.", {"order_id": {"type": "string"}}),
    )
)
"""Tools whose answers bind as a whole: a bare user id, mappings keyed by names, a bare number nobody reuses."""

PRODUCTS = (
    "Desk Lamp",
    "Office Chair",
    "T-Shirt",
    "Water Bottle",
    "Yoga Mat",
    "Wall Clock",
    "Tea Kettle",
    "Gaming Mouse",
    "E-Reader",
    "Pet Bed",
    "Sun Glasses",
    "Air Purifier",
)
NICKNAMES = (
    *("ana", "bo", "cy", "dee", "eli", "fay", "gus", "hal", "ivy", "jo", "kai", "lu", "mo", "ned", "oz"),
    *("pia", "quin", "rae", "sol", "tim", "uma", "vic", "wes", "xia", "yul", "zed", "abe", "bea", "cal", "dot"),
)
CITIES = ("Lisbon", "Nairobi", "Osaka", "Quito", "Tromso", "Hanoi", "Perth", "Lagos", "Porto", "Bogota", "Cusco", "Dakar")


class Shop:
    """Users and their orders; each method is a tool."""

    def __init__(self, rng: random.Random, n_users: int = 3, *, n_products: int = 12, lookup_json: bool = False) -> None:
        self.lookup_json = lookup_json
        self.users: dict[str, dict[str, Any]] = {}
        self.orders: dict[str, dict[str, Any]] = {}
        for u in range(n_users):
            user_id = f"user_{rng.randrange(1000, 9999)}_{u}"
            ids = []
            for _ in range(rng.randrange(1, 4)):
                order_id = f"#W{rng.randrange(1_000_000, 9_999_999)}"
                prices = [round(rng.uniform(5, 200), 2) for _ in range(rng.randrange(1, 4))]
                self.orders[order_id] = {
                    "order_id": order_id,
                    "user_id": user_id,
                    "status": rng.choice(("pending", "pending", "delivered")),
                    "items": [{"item_id": f"it{rng.randrange(10**9)}", "price": p} for p in prices],
                    "city": rng.choice(CITIES),
                }
                ids.append(order_id)
            self.users[user_id] = {"user_id": user_id, "name": f"Person {u}", "orders": ids}
        # a catalogue draws from its own generator, so the plain runs stay what they were
        extra = random.Random(f"{sorted(self.users)}")
        self.nicknames = dict(zip(extra.sample(NICKNAMES, n_users), self.users, strict=True))
        self.products = {name: str(extra.randrange(10**9, 10**10)) for name in PRODUCTS[:n_products]}

    def find_user(self, email: str) -> str:
        """The bare user id (a text answer), like τ-bench's find_user_id_by_email."""
        for user_id in self.users:
            if email == f"{user_id}@example.com":
                return json.dumps({"user_id": user_id, "email": email}) if self.lookup_json else user_id
        return "Error: user not found"

    def user_directory(self) -> str:
        return json.dumps({nick: user_id for nick, user_id in self.nicknames.items()})

    def list_products(self) -> str:
        return json.dumps(self.products)

    def get_product(self, product_id: str) -> str:
        for name, pid in self.products.items():
            if pid == product_id:
                return json.dumps({"product_id": pid, "name": name, "color": "red"})
        return "Error: product not found"

    def add_item(self, order_id: str, product_id: str) -> str:
        order = self.orders.get(order_id)
        if order is None or product_id not in self.products.values():
            return "Error: order or product not found"
        order["items"].append({"item_id": f"it{product_id}", "price": 10.0})
        return json.dumps(order)

    def order_total(self, order_id: str) -> str:
        order = self.orders.get(order_id)
        return f"{sum(i['price'] for i in order['items']):.2f}" if order else "Error: order not found"

    def get_user(self, user_id: str) -> str:
        user = self.users.get(user_id)
        return json.dumps(user) if user else "Error: user not found"

    def get_order(self, order_id: str) -> str:
        order = self.orders.get(order_id)
        return json.dumps(order) if order else "Error: order not found"

    def cancel_order(self, order_id: str, reason: str) -> str:
        order = self.orders.get(order_id)
        if order is None:
            return "Error: order not found"
        if order["status"] != "pending":
            return "Error: non-pending order cannot be cancelled"
        order["status"] = "cancelled"
        return json.dumps(order)

    def refund_order(self, order_id: str, amount: float) -> str:
        order = self.orders.get(order_id)
        if order is None:
            return "Error: order not found"
        if amount > sum(i["price"] for i in order["items"]) + 1e-9:
            return "Error: refund exceeds the order total"
        return json.dumps({"refunded": amount, "order_id": order_id})

    def delete_order(self, order_id: str) -> str:
        if self.orders.pop(order_id, None) is None:
            return "Error: order not found"
        return json.dumps({"deleted": True})

    def ship_to(self, order_id: str, city: str) -> str:
        order = self.orders.get(order_id)
        if order is None:
            return "Error: order not found"
        order["city"] = city
        return json.dumps(order)


class Recorder:
    """Runs calls on a shop and keeps the episode's events."""

    def __init__(self, shop: Shop) -> None:
        self.shop = shop
        self.events: list[Message | Call] = []

    def say(self, text: str) -> None:
        self.events.append(Message(text=text))

    def call(self, tool: str, **args: Any) -> Any:
        fn: Callable[..., str] = getattr(self.shop, tool)
        result = fn(**args)
        self.events.append(Call(tool=tool, arguments=dict(args), call_id=f"c{len(self.events)}", result=result))
        return json.loads(result) if result.startswith("{") else result


def shop_episode(
    seed: int,
    *,
    delete_then_use: bool = True,
    cancel_delivered: bool = True,
    catalogue: bool = False,
    n_products: int = 12,
    lookup_json: bool = False,
) -> Transcript:
    """One scripted support conversation on a fresh shop.

    With ``catalogue`` the user gives an email (even seeds: ``find_user`` answers with the bare
    id) or a nickname (odd seeds: looked up in ``user_directory``), and asks for a product by
    name (``list_products``, then ``get_product`` and ``add_item`` with its id) before the order
    flow; ``order_total`` answers with a bare number that no later call uses. ``lookup_json``:
    every fourth ``find_user`` answers with an object instead of the bare id.
    """
    rng = random.Random(seed)
    shop = Shop(rng, n_products=n_products, lookup_json=lookup_json and seed % 4 == 0)
    run = Recorder(shop)
    user_id = rng.choice(sorted(shop.users))
    city = CITIES[seed % len(CITIES)]
    if not catalogue:
        run.say(f"Hi, I'm {user_id}. Please ship my first order to {city}.")
    else:
        product = PRODUCTS[seed % n_products]
        if seed % 2 == 0:
            run.say(f"Hi, my email is {user_id}@example.com. Please add a {product} and ship my first order to {city}.")
            found = run.call("find_user", email=f"{user_id}@example.com")
            user_id = found["user_id"] if isinstance(found, dict) else found
        else:
            nick = next(n for n, u in shop.nicknames.items() if u == user_id)
            run.say(f"Hi, I'm {nick} here. Please add a {product} and ship my first order to {city}.")
            user_id = run.call("user_directory")[nick]
    user = run.call("get_user", user_id=user_id)
    if catalogue:
        products = run.call("list_products")
        details = run.call("get_product", product_id=products[PRODUCTS[seed % n_products]])
        run.call("add_item", order_id=user["orders"][0], product_id=details["product_id"])
        run.call("order_total", order_id=user["orders"][0])
    first, *rest = user["orders"]
    order = run.call("get_order", order_id=first)
    run.call("ship_to", order_id=first, city=city)
    if len(order["items"]) >= 2:
        amount = round(order["items"][0]["price"] + order["items"][1]["price"], 2)  # computed, never shown
        run.call("refund_order", order_id=first, amount=amount)
    target = rest[0] if rest else first
    target_order = run.call("get_order", order_id=target)
    if target_order["status"] == "pending" or cancel_delivered:
        run.call("cancel_order", order_id=target, reason="no longer needed")
        run.call("get_order", order_id=target)
    if delete_then_use:
        run.call("delete_order", order_id=first)
        run.call("get_order", order_id=first)  # rejected: the order is gone
    return Transcript(episode_id=f"shop-{seed}", events=tuple(run.events), outcome="success")


def as_messages(transcript: Transcript) -> list[dict[str, Any]]:
    """A transcript as OpenAI chat messages (what an agent log holds)."""
    out: list[dict[str, Any]] = []
    for event in transcript.events:
        if isinstance(event, Message):
            out.append({"role": "user" if event.user else "system", "content": event.text})
        else:
            arguments = event.arguments if isinstance(event.arguments, Mapping) else {}
            out.append(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": event.call_id,
                            "type": "function",
                            "function": {"name": event.tool, "arguments": json.dumps(arguments)},
                        }
                    ],
                }
            )
            out.append({"role": "tool", "tool_call_id": event.call_id, "content": event.result})
    return out
