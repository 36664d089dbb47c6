"""Contact repair: an agent removes a contact by phone number, is told why that cannot work,
looks the contact up, and removes it by id.

Run: ``python examples/contact_repair.py``. The episode is not fully executable (FED 1:
its first call needed a person id), yet it ends in success: a recovery.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Annotated, Any

import anyio

from prefixmon import Monitor, Ref, ToolBlocked, Toolset, TrackedState

CONTACTS: dict[str, dict[str, str]] = {
    "p-7f3a": {"person_id": "p-7f3a", "name": "Fredrik Lind", "phone_number": "+1 555 0100"},
    "p-21bc": {"person_id": "p-21bc", "name": "Amara Osei", "phone_number": "+1 555 0199"},
}


def contact_exists(state: TrackedState, args: Any) -> bool | str:
    """The contact must still be in the address book."""
    book: dict[str, Any] = state.env
    return args["person_id"] in book or f"no contact has person_id {args['person_id']!r}"


def build_toolset() -> Toolset:
    """The contacts tool layer, with its executability rules."""
    tools = Toolset()

    @tools.tool(produces="person_id")
    def search_contacts(name: str | None = None, phone_number: str | None = None) -> list[dict[str, str]]:
        """Find contacts by name or phone number."""
        return [
            c
            for c in CONTACTS.values()
            if (name is None or name.lower() in c["name"].lower()) and (phone_number is None or c["phone_number"] == phone_number)
        ]

    @tools.tool(requires=[contact_exists], invalidates="person_id")
    def remove_contact(person_id: Annotated[str, Ref("person_id")]) -> dict[str, str]:
        """Remove a contact from the address book."""
        removed = CONTACTS.pop(person_id)
        return {"removed": removed["person_id"]}

    return tools


async def main() -> None:
    records = Path(tempfile.mkdtemp(prefix="prefixmon-")) / "contact_repair.jsonl"
    monitor = Monitor(build_toolset(), policy="block", sink=records)
    async with monitor.episode(task_id="remove-fredrik", labels={"model": "scripted", "method": "react"}, env=CONTACTS) as ep:
        ep.user("Remove Fredrik from my contacts, his number is +1 555 0100")
        try:
            await ep.call("remove_contact", {"person_id": "+1 555 0100"}, call_id="call-1")
        except ToolBlocked as blocked:
            print(f"blocked, the model is told: {blocked}")
        found = await ep.call("search_contacts", {"phone_number": "+1 555 0100"}, call_id="call-2")
        await ep.call("remove_contact", {"person_id": found[0]["person_id"]}, call_id="call-3")
        ep.finish("success" if "p-7f3a" not in CONTACTS else "failure")
    record = ep.record
    assert record is not None
    failure = record.first_failure
    print(f"horizon: {record.horizon}")
    print(f"FED: {record.fed}")
    print(f"cause: {failure.cause if failure else None}")
    print(f"fully executable: {record.executable}")
    print(f"outcome: {record.outcome}")
    print(f"record: {records}")


if __name__ == "__main__":
    anyio.run(main)
