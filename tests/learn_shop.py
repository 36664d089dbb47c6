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

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": properties, "required": sorted(properties)},
        },
    }
    for name, description, properties in (
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
]

CITIES = ("Lisbon", "Nairobi", "Osaka", "Quito", "Tromso", "Hanoi", "Perth", "Lagos", "Porto", "Bogota", "Cusco", "Dakar")


class Shop:
    """Users and their orders; each method is a tool."""

    def __init__(self, rng: random.Random, n_users: int = 3) -> None:
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
        return json.loads(result) if result.startswith("{") else None


def shop_episode(seed: int, *, delete_then_use: bool = True, cancel_delivered: bool = True) -> Transcript:
    """One scripted support conversation on a fresh shop."""
    rng = random.Random(seed)
    shop = Shop(rng)
    run = Recorder(shop)
    user_id = rng.choice(sorted(shop.users))
    city = CITIES[seed % len(CITIES)]
    run.say(f"Hi, I'm {user_id}. Please ship my first order to {city}.")
    user = run.call("get_user", user_id=user_id)
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
