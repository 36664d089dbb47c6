"""pytest fixtures for testing your own toolset the way prefixmon tests its own.

Installed with prefixmon and registered through the ``pytest11`` entry point, so the
fixtures are there in any test once prefixmon is installed (``-p no:prefixmon`` turns them
off)::

    async def test_a_typed_id_is_refused(prefixmon_monitor, prefixmon_records, prefixmon_verdicts):
        monitor = prefixmon_monitor(my_tools, policy="block")
        async with monitor.episode(task_id="t") as ep:
            with pytest.raises(ToolBlocked):
                await ep.call("complete_todo", {"todo_id": "todo-3"})
        assert prefixmon_records.one().fed == 1
        assert prefixmon_verdicts.causes() == [Cause.DEPENDENCY]

Every fixture is function-scoped: each test gets fresh captures and monitors.
"""

from __future__ import annotations

from typing import Any, Protocol

import pytest

from .monitor import Monitor
from .testing import RecordCapture, VerdictCapture
from .toolset import Toolset

__all__ = ("MonitorFactory", "prefixmon_monitor", "prefixmon_records", "prefixmon_verdicts")


class MonitorFactory(Protocol):
    """What the ``prefixmon_monitor`` fixture is: ``make(toolset, **Monitor options) -> Monitor``."""

    def __call__(self, toolset: Toolset, /, **options: Any) -> Monitor:
        """A monitor over ``toolset`` whose records and verdicts the capture fixtures keep.

        Args:
            toolset: the tools under test.
            **options: any :class:`~prefixmon.Monitor` keyword argument; ``observers`` are
                kept (the verdict capture is added to them) and an explicit ``sink``
                replaces the record capture.
        """
        ...


@pytest.fixture
def prefixmon_records() -> RecordCapture:
    """A :class:`~prefixmon.testing.RecordCapture`: every finished episode record, in memory."""
    return RecordCapture()


@pytest.fixture
def prefixmon_verdicts() -> VerdictCapture:
    """A :class:`~prefixmon.testing.VerdictCapture`: every recorded action with its verdict, in order."""
    return VerdictCapture()


@pytest.fixture
def prefixmon_monitor(prefixmon_records: RecordCapture, prefixmon_verdicts: VerdictCapture) -> MonitorFactory:
    """A factory of monitors wired to ``prefixmon_records`` and ``prefixmon_verdicts``."""

    def make(toolset: Toolset, /, **options: Any) -> Monitor:
        observers = [*options.pop("observers", ()), prefixmon_verdicts]
        sink = options.pop("sink", prefixmon_records)
        return Monitor(toolset, sink=sink, observers=observers, **options)

    return make
