"""prefixmon's pytest fixtures, registered through the ``pytest11`` entry point.

A top-level module, outside the ``prefixmon`` package (as hypothesis ships
``_hypothesis_pytestplugin``): pytest imports every installed plugin when it starts, before
pytest-cov measures anything, and importing prefixmon takes about 0.3 s. Here the package is
imported by the first prefixmon fixture a test asks for, so a test run that uses none pays
nothing. ``prefixmon.pytest_plugin`` re-exports everything; ``-p no:prefixmon`` turns the
fixtures off.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import pytest

if TYPE_CHECKING:
    from prefixmon import Monitor, Toolset
    from prefixmon.testing import RecordCapture, VerdictCapture

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
    from prefixmon.testing import RecordCapture

    return RecordCapture()


@pytest.fixture
def prefixmon_verdicts() -> VerdictCapture:
    """A :class:`~prefixmon.testing.VerdictCapture`: every recorded action with its verdict, in order."""
    from prefixmon.testing import VerdictCapture

    return VerdictCapture()


@pytest.fixture
def prefixmon_monitor(prefixmon_records: RecordCapture, prefixmon_verdicts: VerdictCapture) -> MonitorFactory:
    """A factory of monitors wired to ``prefixmon_records`` and ``prefixmon_verdicts``."""
    from prefixmon import Monitor

    def make(toolset: Toolset, /, **options: Any) -> Monitor:
        observers = [*options.pop("observers", ()), prefixmon_verdicts]
        sink = options.pop("sink", prefixmon_records)
        return Monitor(toolset, sink=sink, observers=observers, **options)

    return make
