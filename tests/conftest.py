"""Shared fixtures: a small contacts tool layer with every kind of rule."""

from __future__ import annotations

import os
from typing import Annotated, Any

import pytest
import structlog

from prefixmon import Grounded, Precondition, Ref, Toolset, TrackedState


@pytest.fixture(autouse=True)
def _structlog_as_found() -> Any:
    """structlog unconfigured after a test that found it so: ``capture_logs`` restores the processors
    but leaves structlog "configured", which would send later tests' events past the stdlib logger."""
    configured = structlog.is_configured()
    yield
    if not configured and structlog.is_configured():
        structlog.reset_defaults()


def cellular_on(state: TrackedState, args: Any) -> bool:
    """cellular service is off; turn it on first"""
    return bool(state.facts.get("cellular", False))


def build_contacts() -> tuple[Toolset, dict[str, dict[str, str]]]:
    """A contacts tool layer over an in-memory address book (fresh per call)."""
    book: dict[str, dict[str, str]] = {
        "p-1": {"person_id": "p-1", "name": "Fredrik Lind", "phone_number": "+1 555 0100"},
        "p-2": {"person_id": "p-2", "name": "Amara Osei", "phone_number": "+1 555 0199"},
    }
    tools = Toolset()

    @tools.tool(produces="person_id")
    def search_contacts(name: str | None = None, phone_number: str | None = None) -> list[dict[str, str]]:
        """Find contacts."""
        return [
            c
            for c in book.values()
            if (name is None or name.lower() in c["name"].lower()) and (phone_number is None or c["phone_number"] == phone_number)
        ]

    def exists(state: TrackedState, args: Any) -> bool | str:
        return args["person_id"] in book or f"no contact {args['person_id']!r}"

    @tools.tool(requires=[exists], invalidates="person_id")
    def remove_contact(person_id: Annotated[str, Ref("person_id")]) -> dict[str, str]:
        """Remove a contact."""
        del book[person_id]
        return {"removed": person_id}

    @tools.tool(requires=[Precondition.wrap(cellular_on)])
    async def send_message(person_id: Annotated[str, Ref("person_id")], text: str) -> dict[str, bool]:
        """Send a text message."""
        return {"sent": True}

    def turn_on(state: TrackedState, args: Any, result: Any) -> None:
        state.facts["cellular"] = True

    @tools.tool(effects=[turn_on])
    def set_cellular(on: bool) -> dict[str, bool]:
        """Turn cellular service on."""
        return {"cellular": on}

    @tools.tool
    def send_money(
        phone_number: Annotated[str, Grounded(block=True)], amount: Annotated[float, Grounded(block=True)]
    ) -> dict[str, str]:
        """Send money to a phone number."""
        return {"status": "sent"}

    @tools.tool(exposed=False)
    def admin_reset() -> str:
        """Reset everything (not available to the agent at first)."""
        return "reset"

    @tools.tool(error_result=lambda r: r if isinstance(r, str) and r.startswith("Error:") else None)
    def lookup_order(order_id: str) -> str | dict[str, str]:
        """Look up an order; the environment reports failure as an 'Error:' string."""
        return {"order_id": order_id, "status": "pending"} if order_id == "#W1" else "Error: order not found"

    @tools.tool
    def flaky(x: int) -> int:
        """Always raises (an environment crash)."""
        raise RuntimeError("backend unavailable")

    return tools, book


@pytest.fixture
def contacts() -> tuple[Toolset, dict[str, dict[str, str]]]:
    return build_contacts()


@pytest.fixture
def tools(contacts: tuple[Toolset, dict[str, dict[str, str]]]) -> Toolset:
    return contacts[0]


# -- CI installs every extra and backend: there, a skipped test is a failure -----------------
_FAIL_ON_SKIP = os.environ.get("PREFIXMON_FAIL_ON_SKIP") == "1"
_skipped: list[str] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Remember skipped tests (with ``PREFIXMON_FAIL_ON_SKIP=1``, as ``.ci/run`` sets it)."""
    if _FAIL_ON_SKIP and report.skipped and not hasattr(report, "wasxfail"):
        _skipped.append(report.nodeid)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fail the run when anything was skipped although everything it needs is installed."""
    if _skipped and exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Say which skipped tests failed the run."""
    if _skipped:
        terminalreporter.write_line(f"PREFIXMON_FAIL_ON_SKIP=1: {len(_skipped)} skipped test(s) fail the run", red=True)
        for nodeid in _skipped[:50]:
            terminalreporter.write_line(f"  {nodeid}")
