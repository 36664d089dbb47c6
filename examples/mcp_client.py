"""MCP client side: every ``call_tool`` is checked before it is sent to the server.

Run: ``python examples/mcp_client.py``. It starts ``examples/mcp_server.py`` as a real stdio
subprocess, wraps the ``ClientSession`` in a :class:`MonitorSession` and lets a scripted
model work: it texts the phone number the user gave as if it were a person id, gets an
``isError`` result that explains why (the server never sees that call), searches, and
sends the message with the id the search returned.

The server can protect itself too: ``python examples/mcp_server.py --guard`` (see there).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import anyio

try:
    from mcp import ClientSession, StdioServerParameters, stdio_client
    from mcp.types import CallToolResult, TextContent

    from prefixmon import EpisodeRecord, Outcome
    from prefixmon.adapters.mcp import MonitorSession, result_value
except ImportError as e:  # the example's extra is missing: say exactly what to install
    raise SystemExit(f'{e}\nThis example needs the mcp extra: pip install "prefixmon[mcp]"') from None

SERVER = Path(__file__).resolve().with_name("mcp_server.py")
RULES: dict[str, dict[str, Any]] = {
    "search_contacts": {"produces": "person_id"},
    "send_message": {"refs": {"person_id": "person_id"}},
}


def text(result: CallToolResult) -> str:
    return " ".join(b.text for b in result.content if isinstance(b, TextContent)).replace("\n", " ")


async def main() -> None:
    records: list[EpisodeRecord] = []
    params = StdioServerParameters(command=sys.executable, args=[str(SERVER)])
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        async with MonitorSession(session, policy="block", rules=RULES, sink=records.append) as guarded:
            print(f"tools: {', '.join(guarded.toolset.names)}")
            async with guarded.episode(task_id="text-fredrik", labels={"model": "scripted"}) as ep:
                guarded.user("Text Fredrik (+1 555 0100) that I am running late")

                async def call(name: str, args: dict[str, Any], call_id: str) -> CallToolResult:
                    result = await guarded.call_tool(name, args, call_id=call_id)
                    print(f"model   {name}({args})\n  -> {'ERROR ' if result.is_error else ''}{text(result)}")
                    return result

                first = await call("send_message", {"person_id": "+1 555 0100", "text": "running late"}, "call_1")
                if first.is_error and "search_contacts" in text(first):  # the model follows the hint
                    found = await call("search_contacts", {"name": "Fredrik"}, "call_2")
                    person_id = result_value(found)["contacts"][0]["person_id"]
                    sent = await call("send_message", {"person_id": person_id, "text": "running late"}, "call_3")
                    ep.finish(Outcome.SUCCESS if not sent.is_error else Outcome.FAILURE)
    record = records[0]
    failure = record.first_failure
    print(f"\nhorizon {record.horizon}, FED {record.fed}, cause {failure.cause if failure else None}, outcome {record.outcome}")
    print(f"reached the server: {[a.tool for a in record.actions if a.reached_environment]}")


if __name__ == "__main__":
    anyio.run(main)
