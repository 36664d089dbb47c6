"""prefixmon.testing: capture records and verdicts in users' tests."""

from __future__ import annotations

import pytest

from prefixmon import Cause, Monitor, ToolBlocked, Toolset
from prefixmon.testing import RecordCapture, VerdictCapture


class TestCaptures:
    async def test_records_and_verdicts_are_captured(self, tools: Toolset) -> None:
        """RecordCapture keeps the finished record; VerdictCapture keeps each action with its verdict."""
        records, verdicts = RecordCapture(), VerdictCapture()
        monitor = Monitor(tools, policy="block", sink=records, observers=[verdicts])
        async with monitor.episode(task_id="t") as ep:
            with pytest.raises(ToolBlocked):
                await ep.call("remove_contact", {"person_id": "made-up"})
            await ep.call("search_contacts", {"name": "Amara"})
        record = records.one()
        assert (record.fed, record.horizon) == (1, 2)
        assert verdicts.causes() == [Cause.DEPENDENCY, None]
        assert "never returned by any tool" in verdicts.reasons()[0]
        assert verdicts.calls[0].verdict.code == "unbound_reference"

    def test_one_fails_loudly(self) -> None:
        """one() says how many records there were."""
        with pytest.raises(AssertionError, match="got 0"):
            RecordCapture().one()
