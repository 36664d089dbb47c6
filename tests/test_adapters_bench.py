"""prefixmon.adapters._bench: what the benchmark verbs share, on verdicts of a real monitor."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import anyio
import pytest

from prefixmon import Cause, Grounded, Monitor, Toolset, TrackedState, Verdict
from prefixmon.adapters._bench import (
    auc_pec,
    fmt,
    kind_table,
    pec,
    prediction,
    prediction_header,
    prediction_row,
    predicts_rejection,
    ter,
)
from prefixmon.analytics import Confusion


@dataclass(frozen=True, slots=True, kw_only=True)
class Trial:
    """A judged trial as the τ² and ToolSandbox verbs keep them."""

    kind: str
    declared: Verdict
    dry_run: Verdict
    rejected: str | None


def _closed(state: TrackedState, args: object) -> str:
    return "the account is closed"


async def _judge() -> dict[str, Verdict]:
    tools = Toolset()

    @tools.tool
    def lookup(name: str) -> str:
        return name

    @tools.tool(requires=[_closed])
    def withdraw(amount: int) -> str:
        return "done"

    @tools.tool
    def wire(to: Annotated[str, Grounded()]) -> str:
        return to

    async with Monitor(tools, policy="observe").episode(task_id="t") as ep:
        return {
            "ok": ep.check("lookup", {"name": "a"}),
            "schema": ep.check("lookup", {}),
            "precondition": ep.check("withdraw", {"amount": 5}),
            "information": ep.check("wire", {"to": "+1 555 0100"}),
        }


@pytest.fixture(scope="module")
def verdicts() -> dict[str, Verdict]:
    """One verdict per outcome of a real monitor: executable, schema, precondition, information."""
    return anyio.run(_judge)


class TestPrediction:
    """Which verdicts predict a rejection, and how they are counted."""

    def test_the_verdicts_have_the_causes_the_tests_rely_on(self, verdicts: dict[str, Verdict]) -> None:
        """The fixture's verdicts fail for the cause they are named after."""
        assert verdicts["ok"].executable
        assert {name: v.cause for name, v in verdicts.items() if name != "ok"} == {
            "schema": Cause.SCHEMA,
            "precondition": Cause.PRECONDITION,
            "information": Cause.INFORMATION,
        }

    def test_information_findings_predict_no_rejection(self, verdicts: dict[str, Verdict]) -> None:
        """Schema and precondition failures predict a rejection; executable and information verdicts do not."""
        assert [predicts_rejection(verdicts[n]) for n in ("ok", "schema", "precondition", "information")] == [
            False,
            True,
            True,
            False,
        ]

    def test_prediction_counts_each_mode(self, verdicts: dict[str, Verdict]) -> None:
        """Declared and dry-run verdicts are counted against the same execution labels."""
        trials = [
            Trial(kind="gold", declared=verdicts["ok"], dry_run=verdicts["ok"], rejected=None),
            Trial(kind="invented_id", declared=verdicts["precondition"], dry_run=verdicts["precondition"], rejected="Error"),
            Trial(kind="invented_id", declared=verdicts["ok"], dry_run=verdicts["precondition"], rejected="Error"),
            Trial(kind="gold", declared=verdicts["schema"], dry_run=verdicts["ok"], rejected=None),
            Trial(kind="gold", declared=verdicts["information"], dry_run=verdicts["ok"], rejected=None),
        ]
        assert prediction(trials, "declared") == Confusion(tp=1, fp=1, fn=1, tn=2)
        assert prediction(trials, "dry_run") == Confusion(tp=2, fp=0, fn=0, tn=3)

    def test_kind_table(self, verdicts: dict[str, Verdict]) -> None:
        """Per kind, sorted: trials, rejections, and the share of executable flags that match execution."""
        trials = [
            Trial(kind="unknown_tool", declared=verdicts["schema"], dry_run=verdicts["schema"], rejected="Error"),
            Trial(kind="gold", declared=verdicts["ok"], dry_run=verdicts["ok"], rejected=None),
            Trial(kind="gold", declared=verdicts["information"], dry_run=verdicts["ok"], rejected=None),
        ]
        header, gold, unknown = kind_table(trials)
        assert header.split() == ["kind", "n", "rejected", "declared", "agree", "dry-run", "agree"]
        assert gold.split() == ["gold", "2", "0", "0.5000", "1.0000"]
        assert unknown.split() == ["unknown_tool", "1", "1", "1.0000", "1.0000"]


class TestTables:
    """Prefix metrics of (FED, horizon) pairs and the prediction rows."""

    def test_prefix_metrics(self) -> None:
        """TER, PEC(k) and AUC-PEC as DESIGN §3 defines them; undefined without episodes."""
        feds = [(4, 3), (2, 3), (1, 2)]  # fully executable, fails at 2, fails at 1
        assert ter(feds) == 1 / 3
        assert [pec(feds, k) for k in (1, 2, 3)] == [2 / 3, 1 / 3, 1 / 3]
        assert auc_pec(feds) == pytest.approx((1 + 1 / 3 + 0) / 3)
        assert all(x != x for x in (ter([]), pec([], 1), auc_pec([])))  # nan

    def test_prediction_rows_line_up_with_their_header(self) -> None:
        """Each column of a row ends where its header's does, at either width."""
        c = Confusion(tp=12, fp=0, fn=3, tn=29791)
        for widths in ((10, 7), (14, 8)):
            header, row = prediction_header(*widths), prediction_row("declared", c, *widths)
            assert len(header) == len(row)
            assert row.split() == ["declared", "1.000", "0.800", "12", "0", "3", "29791"]
        assert fmt(None) == "n/a" and fmt(2 / 3) == "0.667"
