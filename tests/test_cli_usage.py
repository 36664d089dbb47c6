"""`prefixmon report` and `prefixmon export` mistakes on the command line (issue 39): each names the
verb's own usage and writes nothing it would mislabel."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from prefixmon._cli import main
from prefixmon.records import ActionRecord, build_record, write_records

NOW = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.fixture
def records(tmp_path: Path) -> Path:
    """A record file of one executable episode."""
    path = tmp_path / "r.jsonl"
    record = build_record(
        episode_id="e-1",
        task_id="t",
        labels={"model": "m"},
        actions=[ActionRecord(depth=1, tool="t", executable=True)],
        outcome=None,
        started_at=NOW,
        ended_at=NOW,
    )
    write_records(path, [record])
    return path


def usage_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """stderr of a command that must stop with argparse's usage error (exit 2)."""
    with pytest.raises(SystemExit) as stopped:
        main(argv)
    assert stopped.value.code == 2
    return capsys.readouterr().err


class TestUnknownOptions:
    """An option a verb does not know is reported with that verb's usage, not the top-level one."""

    def test_report(self, records: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """`report --bogus` shows `usage: prefixmon report ...` and names the option."""
        err = usage_error(["report", "--bogus", str(records)], capsys)
        assert err.startswith("usage: prefixmon report ") and "RECORDS" in err
        assert "prefixmon report: error: unrecognized arguments: --bogus" in err
        assert "COMMAND ..." not in err  # the top-level usage

    def test_export(self, records: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """The same for `export`, wherever the unknown option stands."""
        err = usage_error(["export", str(records), "--out", str(tmp_path / "r.parquet"), "--bogus", "x"], capsys)
        assert err.startswith("usage: prefixmon export ")
        assert "prefixmon export: error: unrecognized arguments: --bogus x" in err

    def test_known_options_still_run(self, records: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """Nothing else changes: a correct command runs."""
        assert main(["report", str(records), "--bootstrap", "0", "--format", "csv"]) == 0
        assert capsys.readouterr().out.startswith("row,model,")


class TestExportOutputName:
    """`export` writes Parquet only, so its output must be named so."""

    @pytest.mark.parametrize("name", ["r.csv", "r.jsonl", "r", "r.parquet.csv"])
    def test_other_suffix_is_refused(self, records: Path, tmp_path: Path, name: str, capsys: pytest.CaptureFixture[str]) -> None:
        """`--out r.csv` used to write Parquet under a CSV name: now a usage error naming .parquet, and no file."""
        (tmp_path / "out").mkdir()
        out = tmp_path / "out" / name
        err = usage_error(["export", str(records), "--out", str(out)], capsys)
        assert err.startswith("usage: prefixmon export ")
        assert f"argument --out/-o: {out}: export writes Parquet (prefixmon.parquet/1) only" in err
        assert "must end in .parquet" in err and "prefixmon report RECORDS --format csv" in err
        assert not list((tmp_path / "out").iterdir())  # nothing written, not even a temporary file

    @pytest.mark.parametrize("name", ["r.parquet", "R.PARQUET"])
    def test_parquet_name_is_written(self, records: Path, tmp_path: Path, name: str) -> None:
        """A .parquet name (any case) is written as before."""
        pq = pytest.importorskip("pyarrow.parquet")
        out = tmp_path / name
        assert main(["export", str(records), "--out", str(out)]) == 0
        assert pq.read_table(out).column("episode_id").to_pylist() == ["e-1"]
