"""A small contacts MCP server (stdio), optionally protected by prefixmon on the server side.

Run it as an MCP stdio server::

    python examples/mcp_server.py                 # unprotected
    python examples/mcp_server.py --guard --records runs/server.jsonl

or see the protection work in one command: ``python examples/mcp_server.py --demo`` starts
the guarded server as a subprocess and sends it calls from a plain, unprotected client.

With ``--guard`` every ``tools/call`` from any client is checked before the tool runs: a
message to a ``person_id`` that no earlier ``search_contacts`` returned is refused with an
``isError`` result that tells the model why, and each client connection is one episode,
written to ``--records`` when the connection closes (with ``mcp.Client``'s default, stateless
2026-07-28 protocol, the requests share one episode, written when the server stops). ``examples/mcp_client.py`` and
``tests/integration/test_mcp.py`` drive this server as a real subprocess.
"""

from __future__ import annotations

import argparse
from typing import Any

try:
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError
except ImportError as e:  # the example's extra is missing: say exactly what to install
    raise SystemExit(f'{e}\nThis example needs the mcp extra: pip install "prefixmon[mcp]"') from None

CONTACTS: dict[str, dict[str, str]] = {
    "p-17": {"person_id": "p-17", "name": "Fredrik Olsen", "phone": "+1 555 0100"},
    "p-23": {"person_id": "p-23", "name": "Amara Diallo", "phone": "+1 555 0199"},
}

RULES: dict[str, dict[str, Any]] = {
    "search_contacts": {"produces": "person_id"},
    "send_message": {"refs": {"person_id": "person_id"}},
    "remove_contact": {"refs": {"person_id": "person_id"}, "invalidates": "person_id"},
}
"""What the server knows about its own tools: ids come from search_contacts, and a removed id is stale."""


def build_server(*, guard: bool = False, records: str | None = None) -> MCPServer:
    """The contacts server; with ``guard`` it checks every tool call with prefixmon."""
    contacts = {k: dict(v) for k, v in CONTACTS.items()}
    sent: list[dict[str, str]] = []
    if guard:
        from prefixmon.adapters.mcp import MonitorMiddleware

        monitor = MonitorMiddleware(policy="block", rules=RULES, sink=records, task_id="contacts-server")
        # lifespan: the episode still open when the server stops is written then (the
        # stateless 2026-07-28 protocol has no connection whose close would end it)
        server = MCPServer("contacts", middleware=[monitor], lifespan=monitor.lifespan(), log_level="WARNING")
    else:
        server = MCPServer("contacts", log_level="WARNING")

    @server.tool()
    def search_contacts(name: str) -> dict[str, Any]:
        """Find contacts whose name contains ``name``; returns their person_id values."""
        hits = [c for c in contacts.values() if name.casefold() in c["name"].casefold()]
        return {"contacts": hits}

    @server.tool()
    def send_message(person_id: str, text: str) -> dict[str, Any]:
        """Send a text message to a contact, by the person_id search_contacts returned."""
        if person_id not in contacts:
            raise ToolError(f"no contact with person_id {person_id!r}")
        sent.append({"person_id": person_id, "text": text})
        return {"status": "sent", "to": contacts[person_id]["phone"], "count": len(sent)}

    @server.tool()
    def remove_contact(person_id: str) -> dict[str, Any]:
        """Delete a contact by person_id."""
        if contacts.pop(person_id, None) is None:
            raise ToolError(f"no contact with person_id {person_id!r}")
        return {"status": "removed", "person_id": person_id}

    return server


async def demo() -> None:
    """A plain MCP client against the guarded server (as a subprocess); prints what it gets."""
    import sys
    import tempfile
    from pathlib import Path

    from mcp import ClientSession, StdioServerParameters, stdio_client
    from mcp.types import TextContent

    from prefixmon import read_records

    path = Path(tempfile.mkdtemp()) / "server.jsonl"
    params = StdioServerParameters(command=sys.executable, args=[__file__, "--guard", "--records", str(path)])
    calls: list[tuple[str, dict[str, Any]]] = [
        ("send_message", {"person_id": "+1 555 0100", "text": "running late"}),
        ("search_contacts", {"name": "Fredrik"}),
        ("send_message", {"person_id": "p-17", "text": "running late"}),
        ("remove_contact", {"person_id": "p-17"}),
        ("send_message", {"person_id": "p-17", "text": "are you there?"}),
    ]
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        for name, arguments in calls:
            result = await session.call_tool(name, arguments)
            text = " ".join(b.text for b in result.content if isinstance(b, TextContent)).replace("\n", " ")
            print(f"client  {name}({arguments})\n  -> {'ERROR ' if result.is_error else ''}{' '.join(text.split())}")
    [record] = read_records(path)  # the server wrote it when the connection closed
    print(f"\nserver episode: horizon {record.horizon}, FED {record.fed}")
    for a in record.actions:
        print(f"  depth {a.depth} {a.tool:<16} {a.decision!s:<6} cause={a.cause}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--guard", action="store_true", help="check every tool call with prefixmon")
    parser.add_argument("--records", default=None, help="JSON Lines file for episode records (with --guard)")
    parser.add_argument("--demo", action="store_true", help="run a plain client against the guarded server")
    args = parser.parse_args()
    if args.demo:
        import anyio

        anyio.run(demo)
        return
    build_server(guard=args.guard, records=args.records).run("stdio")


if __name__ == "__main__":
    main()
