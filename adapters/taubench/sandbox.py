"""An executable τ-bench sandbox: our own implementation of the airline and retail tools.

A :class:`Sandbox` runs the 14 airline or 16 retail tools over its own copy of the
domain's database with the original τ-bench v1 behaviour: the same results, the same
``Error: ...`` strings, ``Unknown action <name>`` for a tool that does not exist, and any
exception a tool raises turned into ``Error: <exception>`` as the original environment
does. The copy is copy-on-write: tables share the read-only base data and a record is
deep-copied the first time a tool writes to it, so a fresh sandbox costs O(1), not
O(size of the database).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Mapping
from typing import Any

from . import _airline, _retail
from ._table import Db, Table
from .data import Domain, TauTask, data_dir, load_tables, shared_derived

__all__ = (
    "WRITE_TOOLS",
    "Sandbox",
    "ToolFn",
    "is_error_result",
    "reward",
)

ToolFn = Callable[..., Any]


_TOOLS: Mapping[Domain, Mapping[str, ToolFn]] = {
    "airline": _airline.TOOLS,
    "retail": _retail.TOOLS,
}

WRITE_TOOLS: Mapping[Domain, frozenset[str]] = {
    "airline": frozenset(
        {
            "book_reservation",
            "cancel_reservation",
            "send_certificate",
            "update_reservation_baggages",
            "update_reservation_flights",
            "update_reservation_passengers",
        }
    ),
    "retail": frozenset(
        {
            "cancel_pending_order",
            "exchange_delivered_order_items",
            "modify_pending_order_address",
            "modify_pending_order_items",
            "modify_pending_order_payment",
            "modify_user_address",
            "return_delivered_order_items",
        }
    ),
}
"""Tools that can change the database (the rest only read it)."""


def is_error_result(result: object) -> str | None:
    """The original environment's failure signal: ``Error: ...`` or ``Unknown action ...``.

    Returns:
        The error text when ``result`` is a failure, else ``None``.
    """
    if isinstance(result, str) and (result.startswith("Error:") or result.startswith("Unknown action ")):
        return result
    return None


class Sandbox:
    """A τ-bench domain environment over a private copy-on-write copy of its database.

    Args:
        domain: ``"airline"`` or ``"retail"``.
        data: the τ-bench data folder (see :func:`.data.data_dir`).
        replica: ``True`` when the sandbox only mirrors an environment that runs elsewhere
            (a replayed transcript, another executor): the monitor's effects then apply
            each accepted write to it. ``False`` (default) when the sandbox runs the calls.
    """

    __slots__ = ("db", "divergences", "domain", "replica", "tools")

    def __init__(self, domain: Domain, *, data: str | os.PathLike[str] | None = None, replica: bool = False) -> None:
        tables = load_tables(domain, data)
        root = data_dir(data)
        self.domain: Domain = domain
        # indexes over the base data (users by email, ...) are built once per process, not per sandbox
        self.db: Db = {name: Table(base, derived=shared_derived(domain, root, name)) for name, base in tables.items()}
        self.tools: Mapping[str, ToolFn] = _TOOLS[domain]
        self.replica = replica
        self.divergences: list[tuple[str, str]] = []
        """Writes the environment accepted but this replica rejected: (tool, error)."""

    def fork(self) -> Sandbox:
        """An independent sandbox in the same state (costs O(records written so far))."""
        twin = Sandbox.__new__(Sandbox)
        twin.domain = self.domain
        twin.db = {name: table.fork() for name, table in self.db.items()}
        twin.tools = self.tools
        twin.replica = self.replica
        twin.divergences = list(self.divergences)
        return twin

    def mirror(self, name: str, kwargs: Mapping[str, Any]) -> None:
        """Apply a write that the mirrored environment accepted (replicas only)."""
        if not self.replica:
            return
        result = self.invoke(name, kwargs)
        if is_error_result(result):
            self.divergences.append((name, result))

    def invoke(self, name: str, kwargs: Mapping[str, Any]) -> str:
        """Run one tool as the original environment's ``step`` does and return its observation."""
        tool = self.tools.get(name)
        if tool is None:
            return f"Unknown action {name}"
        try:
            result = tool(self.db, **kwargs)
        except Exception as e:
            return f"Error: {e}"
        return "" if result is None else str(result)

    def executor(self, name: str) -> Callable[[Mapping[str, Any]], Any]:
        """An async ``execute(args)`` for ``Episode.call`` that runs ``name`` in this sandbox."""

        async def execute(args: Mapping[str, Any]) -> str:
            return self.invoke(name, args)

        return execute

    def data_hash(self) -> str:
        """A hash of the whole database, equal to the original environment's ``get_data_hash``.

        This reads the whole database (O(size)); use it for rewards, never on a hot path.
        """
        data = {name: dict(table.items()) for name, table in self.db.items()}
        return hashlib.sha256(str(_hashable(data)).encode("utf-8")).hexdigest()

    def run_gold(self, task: TauTask) -> list[str]:
        """Run a task's gold actions in order; returns their observations."""
        return [self.invoke(action.name, action.kwargs) for action in task.actions]


def _hashable(item: Any) -> Any:
    if isinstance(item, dict):
        return tuple((key, _hashable(value)) for key, value in sorted(item.items()))
    if isinstance(item, list):
        return tuple(_hashable(element) for element in item)
    if isinstance(item, set):
        return tuple(sorted(_hashable(element) for element in item))
    return item


def reward(sandbox: Sandbox, task: TauTask, *, data: str | os.PathLike[str] | None = None) -> float:
    """The original action-based reward: 1.0 when the database equals the gold run's.

    Tasks whose reward also checks outputs in the agent's replies are judged on the
    database only here (the replies are not part of the sandbox).
    """
    gold = Sandbox(sandbox.domain, data=data)
    gold.run_gold(task)
    return 1.0 if gold.data_hash() == sandbox.data_hash() else 0.0
