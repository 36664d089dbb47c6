"""Renderers (JSON contract of DESIGN §6, tables, Markdown, CSV) and the PEC plot."""

from __future__ import annotations

import csv
import io
import json
import math
import xml.etree.ElementTree as ET
from datetime import UTC, datetime
from pathlib import Path

import pytest
from rich.console import Console

from prefixmon.analytics import Report, build_report, load_columns, plot_pec, render, render_table
from prefixmon.analytics.curves import StepCurve
from prefixmon.records import ActionRecord, EpisodeRecord, build_record, write_records
from prefixmon.vocabulary import Cause, Outcome

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def episode(i: int, labels: dict[str, str], horizon: int, fed: int, outcome: Outcome, eid: str | None = None) -> EpisodeRecord:
    """A real record (id ``e<i>-<method>`` unless given)."""
    actions = [
        ActionRecord(
            depth=d,
            tool="t",
            executable=d != fed,
            cause=Cause.INFORMATION if d == fed else None,
            reason="value never seen" if d == fed else None,
        )
        for d in range(1, horizon + 1)
    ]
    return build_record(
        episode_id=eid or f"e{i}-{labels['method']}",
        task_id=f"t{i}",
        labels=labels,
        actions=actions,
        outcome=outcome,
        started_at=NOW,
        ended_at=NOW,
    )


def two_methods() -> list[EpisodeRecord]:
    """'careful' never fails (RR undefined); 'sloppy' fails often and recovers sometimes."""
    out = []
    for i in range(30):
        out.append(episode(i, {"dataset": "bfcl", "model": "m", "method": "careful"}, 3, 4, Outcome.SUCCESS))
        fed = 1 + i % 4
        ok = Outcome.SUCCESS if i % 3 == 0 else Outcome.FAILURE if i % 3 == 1 else Outcome.PARTIAL
        out.append(episode(i, {"dataset": "bfcl", "model": "m", "method": "sloppy"}, 3, fed, ok))
    return out


@pytest.fixture(scope="module")
def report() -> Report:
    """A report with bootstrap and one paired comparison."""
    return build_report(two_methods(), bootstrap=500, seed=3, compare=["method=careful,method=sloppy"])


class TestJson:
    """The ``--format json`` shape is a public contract (DESIGN §6)."""

    def test_contract_fields(self, report: Report) -> None:
        """Each cohort has key, n, value/ci objects, rr.eligible, pec/pec_elig/n_k curves (as steps) and causes."""
        doc = json.loads(render(report, "json"))
        assert doc["schema"] == "prefixmon.report/2"
        assert isinstance(doc["cohorts"], list) and len(doc["cohorts"]) == 2
        for c in doc["cohorts"]:
            assert set(c["key"]) == {"dataset", "model", "method"}
            assert isinstance(c["n"], int)
            for metric in ("ter", "mean_fed", "auc_pec", "rr", "success"):
                assert set(c[metric]) >= {"value", "ci"}
            assert isinstance(c["rr"]["eligible"], int)
            for name in ("pec", "pec_elig", "n_k"):
                curve = c[name]
                assert set(curve) == {"length", "depth", "value"} and curve["length"] == 3
                assert curve["depth"][0] == 1 and len(curve["depth"]) == len(curve["value"])
            assert set(c["causes"]) == {"schema", "dependency", "precondition", "state_consistency", "information", "provenance"}
        sloppy = next(c for c in doc["cohorts"] if c["key"]["method"] == "sloppy")
        # value[j] holds from depth[j] to the next change: PEC(1) = #{FED > 1} / N, and so on
        assert sloppy["pec"]["depth"] == [1, 2, 3]
        assert sloppy["pec"]["value"] == pytest.approx([sum(1 + i % 4 > k for i in range(30)) / 30 for k in (1, 2, 3)])
        assert sloppy["n_k"] == {"length": 3, "depth": [1], "value": [30]}  # every episode reaches depth 3
        assert StepCurve.from_dict(sloppy["pec"]) == report.cohort(method="sloppy").pec
        low, high = sloppy["ter"]["ci"]
        assert low <= sloppy["ter"]["value"] <= high
        assert sloppy["causes"]["information"] == sloppy["rr"]["eligible"]

    def test_undefined_rr_is_null(self, report: Report) -> None:
        """RR with no eligible episode is null (not 0), and so is its interval."""
        doc = json.loads(render(report, "json"))
        careful = next(c for c in doc["cohorts"] if c["key"]["method"] == "careful")
        assert careful["rr"] == {"value": None, "ci": None, "eligible": 0, "recovered": 0, "interval": "wilson"}
        diff = doc["comparisons"][0]["differences"]["rr"]
        assert diff == {"value": None, "ci": None}

    def test_no_bootstrap_gives_null_intervals(self) -> None:
        """--bootstrap 0: ci is null for bootstrapped metrics; RR keeps its Wilson interval."""
        doc = json.loads(render(build_report(two_methods(), bootstrap=0), "json"))
        sloppy = next(c for c in doc["cohorts"] if c["key"]["method"] == "sloppy")
        assert sloppy["ter"]["ci"] is None and sloppy["rr"]["ci"] is not None
        assert doc["bootstrap"]["resamples"] == 0

    def test_strict_json(self, report: Report) -> None:
        """No NaN or Infinity anywhere: strict parsers accept the output."""
        text = render(report, "json")
        json.loads(text, parse_constant=lambda c: pytest.fail(f"non-standard JSON constant {c}"))


class TestTextFormats:
    """Tables, Markdown and CSV."""

    def test_table(self, report: Report) -> None:
        """The rich table shows every cohort, intervals, '—' for undefined RR, the checkpoint and difference tables."""
        buf = io.StringIO()
        render_table(report, Console(file=buf, width=200, color_system=None))
        text = buf.getvalue()
        assert "careful" in text and "sloppy" in text
        assert "—" in text
        assert "PEC@4" in text and "ΔTER" in text and "careful - sloppy" in text
        assert "500 resamples" in text
        assert render(report, "table", width=200) == text

    def test_markdown(self, report: Report) -> None:
        """Pipe tables with a dash for undefined RR."""
        text = render(report, "markdown")
        assert "### Prefix executability" in text
        row = next(line for line in text.splitlines() if line.startswith("| bfcl | m | careful |"))
        assert "| — |" in row
        assert "### PEC checkpoints" in text

    def test_csv(self, report: Report) -> None:
        """One row per cohort then per difference; an undefined value is an empty cell."""
        rows = list(csv.DictReader(io.StringIO(render(report, "csv"))))
        assert [r["row"] for r in rows] == ["cohort", "cohort", "difference"]
        careful = rows[0]
        assert careful["method"] == "careful" and careful["rr"] == "" and careful["rr_eligible"] == "0"
        assert float(careful["ter"]) == 1.0
        assert rows[2]["method"] == "careful - sloppy"
        assert float(rows[2]["ter"]) == pytest.approx(1.0 - float(rows[1]["ter"]))
        assert not any(math.isnan(float(v)) for r in rows for v in r.values() if v and v[0].isdigit())

    def test_comparisons_over_different_keys(self) -> None:
        """Two --compare specs over different keys: each row keeps its own shared keys and shows its compared one."""
        records = []
        for m in ("m1", "m2"):
            for meth in ("x", "y"):
                for t in range(6):
                    fed = 4 if (t + (m == "m2") + (meth == "y")) % 2 else 2
                    labels = {"dataset": "d", "model": m, "method": meth}
                    records.append(episode(t, labels, 3, fed, Outcome.SUCCESS, f"{m}-{meth}-{t}"))
        rep = build_report(records, bootstrap=100, compare=["method=x,method=y", "model=m1,model=m2"])
        assert len(rep.comparisons) == 4
        text = render(rep, "markdown")
        section = text.split("### Paired differences (a - b)")[1].split("###")[0]
        assert "| dataset | model | method | tasks |" in section
        rows = [line for line in section.splitlines() if line.startswith("| d |")]
        assert [row.split(" | ")[1:3] for row in rows] == [["m1", "x - y"], ["m2", "x - y"], ["m1 - m2", "x"], ["m1 - m2", "y"]]
        # model m1 vs m2 with method x: TER 3/6 vs 3/6 (alternating), so +0.00
        assert all(" 6 | +0.00" in row for row in rows)
        buf = io.StringIO()
        render_table(rep, Console(file=buf, width=250, color_system=None))
        table = buf.getvalue()
        assert "m1 - m2" in table and "x - y" in table

    def test_task_sets_that_differ_are_named(self) -> None:
        """A comparison on part of the tasks says how many it used; one without a shared task says so."""
        records = two_methods()
        records += [episode(i, {"dataset": "bfcl", "model": "m", "method": "few"}, 3, 4, Outcome.SUCCESS) for i in range(10)]
        records += [
            episode(i, {"dataset": "bfcl", "model": "m", "method": "other"}, 3, 1, Outcome.FAILURE) for i in range(40, 45)
        ]
        rep = build_report(
            records,
            bootstrap=100,
            compare=["method=few,method=sloppy", "method=careful,method=sloppy", "method=few,method=other"],
        )
        text = render(rep, "markdown")
        assert "paired on 10 shared tasks" in text
        assert "no shared task" in text
        rows = list(csv.DictReader(io.StringIO(render(rep, "csv"))))
        diffs = {r["method"]: r for r in rows if r["row"] == "difference"}
        assert diffs["few - sloppy"]["tasks"] == "10" and diffs["careful - sloppy"]["tasks"] == "30"
        assert diffs["few - other"]["tasks"] == "0" and diffs["few - other"]["ter"] == ""
        doc = json.loads(render(rep, "json"))
        few = doc["comparisons"][0]
        assert (few["shared_tasks"], few["tasks_a"], few["tasks_b"], few["paired"]) == (10, 10, 30, True)

    def test_duplicate_episodes_counted_once(self, tmp_path: Path) -> None:
        """The same file twice, through the public API: each episode id counted once, the repeats listed."""
        path = tmp_path / "r.jsonl"
        write_records(path, two_methods())
        once = build_report(two_methods(), bootstrap=0)
        for source in (load_columns(path, path), [*two_methods(), *two_methods()[:3]]):
            rep = build_report(source, bootstrap=0)
            assert rep.episodes == 60
            assert [c.n for c in rep.cohorts] == [30, 30]
            assert rep.cohorts[1].rr.eligible == once.cohorts[1].rr.eligible
            assert rep.cohorts[1].rr.ci == once.cohorts[1].rr.ci
        assert rep.duplicates == ("e0-careful", "e0-sloppy", "e1-careful")
        assert rep.to_dict()["duplicate_episodes"] == 3
        assert once.duplicates == () and once.to_dict()["duplicate_episodes"] == 0
        # A repeat under other labels is still the same episode: it makes no (empty) cohort of its own.
        ghost = episode(0, {"dataset": "bfcl", "model": "m", "method": "ghost"}, 3, 4, Outcome.SUCCESS, "e0-careful")
        rep = build_report([*two_methods(), ghost], bootstrap=50)
        assert [c.key["method"] for c in rep.cohorts] == ["careful", "sloppy"] and rep.duplicates == ("e0-careful",)

    def test_build_from_a_path(self, tmp_path: Path) -> None:
        """build_report also takes the path of a records file."""
        path = tmp_path / "r.jsonl"
        write_records(path, two_methods())
        assert build_report(path, bootstrap=0).to_dict() == build_report(two_methods(), bootstrap=0).to_dict()

    def test_unknown_format(self, report: Report) -> None:
        """An unknown format is a ValueError listing the formats."""
        with pytest.raises(ValueError, match="table, json, markdown, csv"):
            render(report, "html")


class TestPlot:
    """PEC curves, one line per cohort."""

    def test_png(self, report: Report, tmp_path: Path) -> None:
        """A PNG file is written."""
        path = plot_pec(report, tmp_path / "pec.png")
        data = Path(path).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000

    def test_svg_has_one_line_per_cohort(self, tmp_path: Path) -> None:
        """The SVG has one labelled curve per cohort, panels per dataset."""
        records = two_methods() + [
            episode(i, {"dataset": "toolsandbox", "model": "m", "method": "careful"}, 2, 1 + i % 3, Outcome.SUCCESS, f"ts{i}")
            for i in range(10)
        ]
        rep = build_report(records, bootstrap=0)
        path = plot_pec(rep, tmp_path / "pec.svg", max_depth=5)
        root = ET.parse(path).getroot()
        ns = "{http://www.w3.org/2000/svg}"
        curves = sorted(g.get("id", "") for g in root.iter(f"{ns}g") if g.get("id", "").startswith("pec:"))
        assert curves == sorted(f"pec:{c.label}" for c in rep.cohorts)
        assert len(curves) == 3
        text = Path(path).read_text()
        assert "bfcl" in text and "toolsandbox" in text
