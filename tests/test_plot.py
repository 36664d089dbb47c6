"""The PEC plot: step curves, bootstrap bands, where episodes end, no stray titles (read back from SVG)."""

from __future__ import annotations

import dataclasses
import itertools
import re
import xml.etree.ElementTree as ET
from datetime import UTC, datetime
from pathlib import Path

import pytest

from prefixmon import ActionRecord, Cause, EpisodeRecord, Outcome
from prefixmon._cli import main
from prefixmon.analytics import Report, build_report, plot_pec
from prefixmon.analytics.plot import line_styles, plot_depth
from prefixmon.records import build_record, write_records

SVG = "{http://www.w3.org/2000/svg}"
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def episode(i: int, method: str, horizon: int, fed: int) -> EpisodeRecord:
    """One real record of ``horizon`` calls whose first failure (if any) is at ``fed``."""
    actions = [
        ActionRecord(
            depth=d,
            tool="t",
            executable=d != fed,
            cause=Cause.DEPENDENCY if d == fed else None,
            reason="unbound" if d == fed else None,
        )
        for d in range(1, horizon + 1)
    ]
    return build_record(
        episode_id=f"{method}-{i}",
        task_id=f"task-{i}",
        labels={"method": method},
        actions=actions,
        outcome=Outcome.SUCCESS,
        started_at=NOW,
        ended_at=NOW,
    )


def cohorts() -> list[EpisodeRecord]:
    """`ends` is fully executable but its episodes end at depths 2..6; `fails` fails at depth 2 in half its episodes."""
    ends = [episode(i, "ends", 2 + i % 5, 3 + i % 5) for i in range(20)]
    fails = [episode(i, "fails", 6, 2 if i % 2 else 7) for i in range(20)]
    return ends + fails


def groups(path: str, prefix: str) -> dict[str, ET.Element]:
    """The SVG groups whose id starts with ``prefix``, by id."""
    root = ET.parse(path).getroot()
    return {g.get("id", ""): g for g in root.iter(f"{SVG}g") if g.get("id", "").startswith(prefix)}


def vertices(group: ET.Element) -> list[tuple[float, float]]:
    """The points of the first path in ``group``."""
    path = next(group.iter(f"{SVG}path"))
    numbers = [float(x) for x in re.findall(r"-?\d+(?:\.\d+)?", path.get("d", ""))]
    return list(zip(numbers[::2], numbers[1::2], strict=True))


@pytest.fixture
def report() -> Report:
    return build_report(cohorts(), by=["method"], bootstrap=200, seed=1, checkpoints=range(1, 8))


class TestPecPlot:
    """What the figure shows."""

    def test_curves_are_steps(self, report: Report, tmp_path: Path) -> None:
        """Each PEC curve moves only horizontally or vertically: it changes at whole depths."""
        path = plot_pec(report, tmp_path / "pec.svg")
        for curve in groups(path, "pec:").values():
            points = vertices(curve)
            assert len(points) > 4
            for (x0, y0), (x1, y1) in itertools.pairwise(points):
                assert x0 == pytest.approx(x1) or y0 == pytest.approx(y1)

    def test_bands_from_the_bootstrap(self, report: Report, tmp_path: Path) -> None:
        """With bootstrap intervals every cohort has a band; without, none."""
        path = plot_pec(report, tmp_path / "pec.svg")
        assert sorted(groups(path, "band:")) == ["band:ends", "band:fails"]
        bare = build_report(cohorts(), by=["method"], bootstrap=0)
        assert groups(plot_pec(bare, tmp_path / "bare.svg"), "band:") == {}

    def test_where_episodes_end_is_shown(self, report: Report, tmp_path: Path) -> None:
        """A reach panel (n_k / N) per cohort: the fully executable cohort's PEC falls only as its episodes end."""
        ends = report.cohort(method="ends")
        assert ends.ter.value == 1.0 and list(ends.pec) == [1.0, 1.0, 0.8, 0.6, 0.4, 0.2]  # falls with no failure at all
        assert [n / ends.n for n in ends.n_k] == list(ends.pec)  # exactly the share still running
        path = plot_pec(report, tmp_path / "pec.svg")
        assert sorted(groups(path, "reach:")) == ["reach:ends", "reach:fails"]
        assert "still running" in Path(path).read_text()
        assert groups(plot_pec(report, tmp_path / "lean.svg", reach=False), "reach:") == {}

    def test_no_stray_subtitle(self, report: Report, tmp_path: Path) -> None:
        """One panel (no strata key among the cohort keys): no 'PEC' panel title, only the figure title."""
        text = Path(plot_pec(report, tmp_path / "pec.svg")).read_text()
        assert "<!-- PEC -->" not in text and "Prefix executability" in text

    def test_default_depth_covers_the_longest_episode(self, report: Report) -> None:
        """The x axis runs to the longest episode (6 here), not to the last non-zero PEC."""
        assert plot_depth(report) == 6


class TestPlotFromTheCli:
    """`prefixmon report --plot` asks for intervals at every plotted depth, and changes nothing else."""

    def test_bands_without_gaps_and_same_output(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """The band covers depths 1..6 although the table's checkpoints skip 5; the JSON is the same with or without --plot."""
        records = tmp_path / "r.jsonl"
        write_records(records, cohorts())
        base = ["report", str(records), "--by", "method", "--format", "json", "--bootstrap", "200"]
        assert main(base) == 0
        without = capsys.readouterr().out
        assert main([*base, "--plot", str(tmp_path / "pec.svg")]) == 0
        assert capsys.readouterr().out == without
        band = groups(str(tmp_path / "pec.svg"), "band:fails")["band:fails"]
        assert all("nan" not in (p.get("d") or "").lower() for p in band.iter(f"{SVG}path"))
        assert len(list(band.iter(f"{SVG}path"))) == 1  # one unbroken band: an interval at every depth


def stroke(element: ET.Element) -> tuple[str, str]:
    """(colour, dash pattern) of the first path in ``element``; ``solid`` when it has no dashes."""
    path = next(element.iter(f"{SVG}path"))
    style = dict(part.split(": ", 1) for part in (path.get("style") or "").split("; ") if ": " in part)
    return style["stroke"], style.get("stroke-dasharray", "solid")


def legend_entries(path: str) -> list[tuple[str, tuple[str, str]]]:
    """Each legend entry of the first panel: its text and its sample line's (colour, dash pattern)."""
    root = ET.parse(path, parser=ET.XMLParser(target=ET.TreeBuilder(insert_comments=True))).getroot()
    legend = next(g for g in root.iter(f"{SVG}g") if g.get("id") == "legend_1")
    entries: list[tuple[str, tuple[str, str]]] = []
    sample: tuple[str, str] | None = None
    for child in legend:
        gid = child.get("id", "")
        if gid.startswith("line2d_") and any(True for _ in child.iter(f"{SVG}path")):
            sample = stroke(child)
        elif gid.startswith("text_") and sample is not None:
            comment = next(c for c in child.iter() if not isinstance(c.tag, str))  # a comment's tag is ET.Comment
            entries.append(((comment.text or "").strip(), sample))
            sample = None
    return entries


def shared_method(models: int) -> Report:
    """``models`` cohorts that share the method label (cohort keys model, method), each with its own curve."""
    records = [
        dataclasses.replace(
            episode(i, "react", 3 + i % 3, 2 + (i + m) % 4), episode_id=f"m{m}-{i}", labels={"model": f"m{m}", "method": "react"}
        )
        for m in range(models)
        for i in range(4)
    ]
    return build_report(records, by=["model", "method"], bootstrap=0)


class TestOneLookPerCohort:
    """Cohorts that share a label still get their own (colour, line style), and the legend shows each (issue 39)."""

    def test_cohorts_sharing_a_label_are_told_apart(self, tmp_path: Path) -> None:
        """Six models with one method: colour follows the shared method, so the line styles (four) used to repeat."""
        report = shared_method(6)
        path = plot_pec(report, tmp_path / "pec.svg")
        curves = {gid.removeprefix("pec:"): stroke(g) for gid, g in groups(path, "pec:").items()}
        assert sorted(curves) == [f"m{m} / react" for m in range(6)]
        assert len(set(curves.values())) == 6, curves  # no two curves drawn alike
        entries = legend_entries(path)
        assert [text.split("  ")[0] for text, _ in entries] == [f"m{m} / react" for m in range(6)]
        for text, look in entries:  # each legend entry looks like its own curve, and like no other
            assert look == curves[text.split("  ")[0]], text

    def test_reach_panel_uses_the_same_looks(self, tmp_path: Path) -> None:
        """The n_k / N curve of a cohort is drawn in its PEC curve's colour and dashes."""
        path = plot_pec(shared_method(6), tmp_path / "pec.svg")
        pec = {gid.removeprefix("pec:"): stroke(g)[0] for gid, g in groups(path, "pec:").items()}
        reach = {gid.removeprefix("reach:"): stroke(g)[0] for gid, g in groups(path, "reach:").items()}
        assert pec == reach

    @pytest.mark.parametrize("cohorts", [30, 200])
    def test_more_cohorts_than_colours_and_styles(self, cohorts: int) -> None:
        """Past the palette (and past every colour x style pair) each cohort still has a look of its own."""
        records = [
            dataclasses.replace(episode(i, "react", 2, 3), episode_id=f"e{i}", labels={"model": f"m{i:03d}"})
            for i in range(cohorts)
        ]
        looks = line_styles(build_report(records, by=["model"], bootstrap=0))
        assert len(looks) == cohorts
        assert len({(look.colour, look.linestyle) for look in looks.values()}) == cohorts
