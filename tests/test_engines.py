"""Parquet records and the SQL report engines (DuckDB, Spark) against the in-process report.

The records are real: the demo population, BFCL multi-turn ground truth and perturbations
through ``prefixmon bench bfcl --out`` (BFCL's own environment classes), and τ-bench
rollouts built from the gold sequences on the sandbox, replayed by ``prefixmon replay
--domain tau-airline|tau-retail``. Each set is exported with ``prefixmon export`` and
reported by every engine; the reports must be equal number for number.

Spark runs in local mode with one SparkSession for the whole test session; on a 2-core
machine its share of this file takes about a minute (JVM start about 10 s, then a few
seconds per report).
"""

from __future__ import annotations

import json
import math
import random
import re
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("pyarrow", reason="the parquet extra is not installed")
pytest.importorskip("duckdb", reason="the duckdb extra is not installed")

from prefixmon import Cause, Decision, Outcome
from prefixmon._cli import main
from prefixmon.analytics import build_report, columns_from_records, load_columns
from prefixmon.analytics.engines import engine_report
from prefixmon.exceptions import RecordError
from prefixmon.records import ActionRecord, EpisodeRecord, build_record, read_records, write_records
from prefixmon.records.parquet import PARQUET_SCHEMA, read_parquet_records, write_parquet

ENGINES = ("duckdb", "spark")


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """One local SparkSession for every Spark test (starting one costs about 10 s)."""
    pytest.importorskip("pyspark", reason="the spark extra is not installed")
    from prefixmon.analytics.engines._spark import local_session

    session = local_session(cores="2")
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


def report_of(path: Path, engine: str, spark: Any = None, **kw: Any) -> dict[str, Any]:
    if engine == "spark":
        return engine_report([path], engine="spark", spark_session=spark, **kw).to_dict()
    return engine_report([path], engine="duckdb", **kw).to_dict()


def _close(a: Any, b: Any) -> bool:
    """Equal, but floats within 1e-12 (two engines' percentile interpolation may round differently)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-15)
    return bool(a == b)


def assert_same_intervals(expected: dict[str, Any], got: dict[str, Any]) -> None:
    """Equal reports up to the last bits of the bootstrap interval ends."""
    for ce, cg in zip(expected["cohorts"], got["cohorts"], strict=True):
        for field in ce:
            assert _close(cg[field], ce[field]), f"cohort {ce['key']}: {field}"


def assert_same(expected: dict[str, Any], got: dict[str, Any]) -> None:
    """Equal reports; the message names the first field that differs."""
    assert got.keys() == expected.keys()
    for key in expected:
        if key == "cohorts":
            continue
        assert got[key] == expected[key], key
    assert [c["key"] for c in got["cohorts"]] == [c["key"] for c in expected["cohorts"]]
    for ce, cg in zip(expected["cohorts"], got["cohorts"], strict=True):
        for field in ce:
            assert cg[field] == ce[field], f"cohort {ce['key']}: {field}"


# -- record sets ---------------------------------------------------------------------------------
def synthetic(n: int = 400, seed: int = 3) -> list[EpisodeRecord]:
    """Episodes with every edge the reports have: missing labels, no outcome, reruns that
    disagree, the same task id in two datasets, long and one-slot horizons, every cause."""
    rng = random.Random(seed)
    start = datetime(2026, 1, 1, tzinfo=UTC)
    causes = list(Cause)
    out = []
    for i in range(n):
        horizon = rng.choice([1, 1, 2, 3, 5, 8, 13])
        fed = rng.randint(1, horizon + 1) if rng.random() < 0.6 else horizon + 1
        actions = [
            ActionRecord(
                depth=d,
                tool=f"t{d % 3}",
                executable=d != fed,
                cause=None if d != fed else rng.choice(causes),
                reason=None if d != fed else "why",
                decision=Decision.ALLOW if d != fed else Decision.BLOCK,
            )
            for d in range(1, horizon + 1)
        ]
        labels = {"dataset": rng.choice(["d1", "d2"]), "model": rng.choice(["m1", "m2", "m3"])}
        if rng.random() < 0.9:
            labels["method"] = rng.choice(["react", "dual_loop"])
        outcome = rng.choice([Outcome.SUCCESS, Outcome.SUCCESS, Outcome.PARTIAL, Outcome.FAILURE, None])
        out.append(
            build_record(
                episode_id=f"e{i}",
                task_id=f"task-{rng.randint(0, 40)}",
                labels=labels,
                actions=actions,
                outcome=outcome,
                started_at=start + timedelta(seconds=i),
                ended_at=start + timedelta(seconds=i, milliseconds=5),
            )
        )
    return out


@pytest.fixture(scope="module")
def sets(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[list[EpisodeRecord], Path]]:
    """name -> (records, Parquet file written by ``prefixmon export``)."""
    root = tmp_path_factory.mktemp("engines")
    jsonl: dict[str, Path] = {}
    demo = root / "demo"
    assert main(["demo", "--out", str(demo), "--tasks", "12", "--trials", "2", "--bootstrap", "0", "--quiet"]) == 0
    jsonl["demo"] = demo / "records.jsonl"
    jsonl["synthetic"] = root / "synthetic.jsonl"
    write_records(jsonl["synthetic"], synthetic())
    jsonl["tau"] = _tau_replays(root)
    bfcl = _bfcl_records(root)
    if bfcl is not None:
        jsonl["bfcl"] = bfcl
    out = {}
    for name, path in jsonl.items():
        parquet = root / f"{name}.parquet"
        assert main(["export", str(path), "--out", str(parquet)]) == 0
        out[name] = (read_records(path), parquet)
    return out


def _bfcl_records(root: Path) -> Path | None:
    try:
        import bfcl_eval  # type: ignore[import-untyped]  # noqa: F401
    except ImportError:  # CI installs it (scripts/test.sh); a bare checkout may not
        return None
    path = root / "bfcl.jsonl"
    assert main(["bench", "bfcl", "--limit", "6", "--per-family", "1", "--out", str(path), "--format", "json"]) == 0
    return path


def _tau_replays(root: Path) -> Path:
    """τ-bench rollouts (two trials of 15 airline and 15 retail tasks) from the gold sequences
    run on the sandbox, one of each pair with a perturbed first call; then replayed."""
    from prefixmon.adapters.taubench import Domain, Sandbox
    from prefixmon.adapters.taubench.data import load_tasks

    out = root / "tau.jsonl"
    parts = []
    domains: tuple[tuple[Domain, str], ...] = (("airline", "airline_test"), ("retail", "retail_test"))
    for domain, split in domains:
        rollouts: list[dict[str, Any]] = []
        for task in load_tasks(split)[:15]:
            for trial in (0, 1):
                sandbox = Sandbox(domain)
                messages: list[dict[str, Any]] = [
                    {"role": "system", "content": "policy"},
                    {"role": "user", "content": task.instruction},
                ]
                for i, action in enumerate(task.actions):
                    args = dict(action.kwargs)
                    if trial == 1 and i == 0 and args:  # an invented value in the first call
                        key = next(iter(args))
                        args[key] = "invented-9999"
                    call_id = f"call_{i}"
                    messages.append(
                        {
                            "role": "assistant",
                            "content": None,
                            "tool_calls": [
                                {
                                    "id": call_id,
                                    "type": "function",
                                    "function": {"name": action.name, "arguments": json.dumps(args)},
                                }
                            ],
                        }
                    )
                    messages.append(
                        {
                            "role": "tool",
                            "tool_call_id": call_id,
                            "name": action.name,
                            "content": sandbox.invoke(action.name, args),
                        }
                    )
                rollouts.append(
                    {
                        "task_id": task.task_index,
                        "trial": trial,
                        "reward": 1.0 if trial == 0 else 0.0,
                        "info": {},
                        "traj": messages,
                    }
                )
        src = root / f"tau-{domain}.json"
        src.write_text(json.dumps(rollouts))
        part = root / f"tau-{domain}.jsonl"
        assert main(["replay", "--domain", f"tau-{domain}", str(src), "--out", str(part)]) == 0
        parts.append(part)
    out.write_text("".join(p.read_text() for p in parts))
    return out


# -- tests -----------------------------------------------------------------------------------------
class TestParquet:
    """The Parquet format: lossless, versioned, validated."""

    @pytest.mark.parametrize("name", ["demo", "synthetic", "tau", "bfcl"])
    def test_round_trip(self, sets: dict[str, tuple[list[EpisodeRecord], Path]], name: str) -> None:
        """Every record comes back from Parquet exactly as it went in, actions included."""
        if name not in sets:
            pytest.skip("bfcl-eval is not installed")
        records, parquet = sets[name]
        assert read_parquet_records(parquet) == records

    def test_load_columns_reads_parquet(self, sets: dict[str, tuple[list[EpisodeRecord], Path]]) -> None:
        """load_columns (the in-process engine's reader) gives the same columns from Parquet as from records."""
        records, parquet = sets["synthetic"]
        a, b = load_columns(parquet), columns_from_records(records)
        assert a.episode_ids == b.episode_ids and a.label_sets == b.label_sets and a.task_ids == b.task_ids
        assert (a.horizon == b.horizon).all() and (a.fed == b.fed).all() and (a.cause == b.cause).all()

    def test_schema_metadata(self, sets: dict[str, tuple[list[EpisodeRecord], Path]]) -> None:
        """The file says its schema version; labels are a map, actions a nested list."""
        import pyarrow.parquet as pq

        schema = pq.read_schema(sets["demo"][1])
        assert (schema.metadata or {})[b"prefixmon.schema"].decode() == PARQUET_SCHEMA
        assert str(schema.field("labels").type).startswith("map<string, string")
        assert str(schema.field("actions").type).startswith("list<element: struct<depth: int32")

    def test_not_ours(self, tmp_path: Path) -> None:
        """A Parquet file of another schema is refused with its path."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        path = tmp_path / "other.parquet"
        pq.write_table(pa.table({"x": [1]}), path)
        with pytest.raises(RecordError, match=r"other\.parquet.*prefixmon\.parquet/1"):
            read_parquet_records(path)
        assert main(["report", str(path)]) == 1

    def test_bad_row_named(self, tmp_path: Path) -> None:
        """A row that is not a valid record is reported with file and row number."""
        import pyarrow.parquet as pq

        path = tmp_path / "r.parquet"
        write_parquet(path, synthetic(5))
        table = pq.read_table(path)
        fed = table.column("fed").to_pylist()
        fed[3] = 99
        table = table.set_column(table.schema.get_field_index("fed"), "fed", __import__("pyarrow").array(fed, "int32"))
        pq.write_table(table.replace_schema_metadata(pq.read_schema(path).metadata), path)
        with pytest.raises(RecordError, match=r"r\.parquet:4: .*fed"):
            read_parquet_records(path)
        with pytest.raises(RecordError, match=r"r\.parquet:4: .*fed"):
            load_columns(path)

    def test_export_bad_line_writes_nothing(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """A bad record line stops the export with file and line, and no file is left."""
        src = tmp_path / "r.jsonl"
        write_records(src, synthetic(3))
        with open(src, "a", encoding="utf-8") as f:
            f.write('{"schema": "prefixmon.episode/1", "episode_id": 1}\n')
        out = tmp_path / "out.parquet"
        assert main(["export", str(src), "--out", str(out)]) == 1
        assert "r.jsonl:4" in capsys.readouterr().err
        assert not out.exists() and not list(tmp_path.glob("out.parquet.tmp*"))
        assert main(["export", str(src), "--out", str(out), "--on-error", "skip"]) == 0
        assert len(read_parquet_records(out)) == 3


class TestEngines:
    """DuckDB and Spark SQL give the in-process report number for number."""

    @pytest.mark.parametrize("engine", ENGINES)
    @pytest.mark.parametrize("name", ["demo", "synthetic", "tau", "bfcl"])
    def test_equal_to_in_process(
        self, sets: dict[str, tuple[list[EpisodeRecord], Path]], spark: Any, engine: str, name: str
    ) -> None:
        """Every cohort's N, tasks, TER, mean FED, AUC-PEC, RR and RR-eligible, success and its
        decomposition, completion, S/P/F, causes, PEC / PEC_elig / n_k curves, checkpoints and
        unstable tasks equal build_report's."""
        if name not in sets:
            pytest.skip("bfcl-eval is not installed")
        records, parquet = sets[name]
        assert_same(build_report(records, bootstrap=0).to_dict(), report_of(parquet, engine, spark))

    @pytest.mark.parametrize("engine", ENGINES)
    def test_other_groupings(self, sets: dict[str, tuple[list[EpisodeRecord], Path]], spark: Any, engine: str) -> None:
        """Cohorts by a label some episodes lack (their key is null), by one key, and one cohort of all."""
        records, parquet = sets["synthetic"]
        for by in (["method"], ["model", "method"], []):
            expected = build_report(records, by=by, bootstrap=0, checkpoints=(1, 5, 20)).to_dict()
            assert_same(expected, report_of(parquet, engine, spark, by=by, checkpoints=(1, 5, 20)))

    def test_duplicates_counted_once(self, sets: dict[str, tuple[list[EpisodeRecord], Path]]) -> None:
        """The same file given twice: every episode counts once, and the repeats are listed."""
        records, parquet = sets["demo"]
        report = engine_report([parquet, parquet], engine="duckdb")
        expected = build_report([*records, *records], bootstrap=0)
        assert report.duplicates == expected.duplicates and len(report.duplicates) == len(records)
        assert_same(expected.to_dict(), report.to_dict())

    def test_unknown_label(self, sets: dict[str, tuple[list[EpisodeRecord], Path]]) -> None:
        """An unknown --by key is the same error as in process."""
        with pytest.raises(ValueError, match="no episode has the label 'nope'"):
            engine_report([sets["demo"][1]], by=["nope"])


class TestSmallPopulations:
    """DuckDB and the in-process report agree on small random populations, where the edges are
    common: cohorts of one episode or one task, cohorts where nothing failed (RR undefined),
    reruns that disagree, labels some episodes lack."""

    @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(n=st.integers(1, 25), seed=st.integers(0, 2**32), by=st.sampled_from([None, ["method"], ["model", "method"], []]))
    def test_equal_to_in_process(self, n: int, seed: int, by: list[str] | None) -> None:
        records = synthetic(n, seed)
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / "r.parquet"
            write_parquet(path, records)
            kw: dict[str, Any] = {} if by is None else {"by": by}
            try:
                expected = build_report(records, bootstrap=0, **kw).to_dict()
            except ValueError as e:  # a --by key no episode has: the same error from the engine
                with pytest.raises(ValueError, match=re.escape(str(e))):
                    report_of(path, "duckdb", **kw)
                return
            assert_same(expected, report_of(path, "duckdb", **kw))


class TestPoissonBootstrap:
    """The SQL engines' intervals: paired Poisson bootstrap, identical across engines."""

    def test_spark_equals_duckdb_and_close_to_in_process(
        self, sets: dict[str, tuple[list[EpisodeRecord], Path]], spark: Any
    ) -> None:
        """Both SQL engines hash the same strings, so their intervals are the same (to the last bits of
        the percentile interpolation); they estimate
        what the in-process multinomial bootstrap estimates (within 0.06 for cohorts of 30 or more
        episodes, 2,000 resamples)."""
        records, parquet = sets["synthetic"]
        duck = report_of(parquet, "duckdb", bootstrap=300, seed=5)
        assert_same_intervals(duck, report_of(parquet, "spark", spark, bootstrap=300, seed=5))
        duck = report_of(parquet, "duckdb", bootstrap=2000, seed=5)
        ours = build_report(records, bootstrap=2000, seed=5).to_dict()
        compared = 0
        for cd, co in zip(duck["cohorts"], ours["cohorts"], strict=True):
            if cd["n"] < 30:
                continue
            compared += 1
            for metric in ("ter", "mean_fed", "auc_pec", "success", "completion"):
                (lo, hi), (lo2, hi2) = cd[metric]["ci"], co[metric]["ci"]
                assert lo <= cd[metric]["value"] <= hi
                scale = 1.0 if metric != "mean_fed" else max(1.0, co[metric]["value"])
                assert math.isclose(lo, lo2, abs_tol=0.06 * scale) and math.isclose(hi, hi2, abs_tol=0.06 * scale), (
                    cd["key"],
                    metric,
                )
        assert compared >= 4

    def test_seeded(self, sets: dict[str, tuple[list[EpisodeRecord], Path]]) -> None:
        """The same seed gives the same intervals; another seed other ones."""
        parquet = sets["synthetic"][1]
        a = report_of(parquet, "duckdb", bootstrap=200, seed=1)
        assert a == report_of(parquet, "duckdb", bootstrap=200, seed=1)
        b = report_of(parquet, "duckdb", bootstrap=200, seed=2)
        assert [c["ter"]["ci"] for c in a["cohorts"]] != [c["ter"]["ci"] for c in b["cohorts"]]


class TestCli:
    """``prefixmon report FILE.parquet --engine ...``."""

    def test_default_engine_for_parquet(
        self, sets: dict[str, tuple[list[EpisodeRecord], Path]], capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Parquet input is reported by DuckDB by default, with the --format json schema of today."""
        records, parquet = sets["demo"]
        assert main(["report", str(parquet), "--format", "json", "--bootstrap", "0"]) == 0
        got = json.loads(capsys.readouterr().out)
        assert_same(build_report(records, bootstrap=0).to_dict(), got)
        assert main(["report", str(parquet), "--engine", "python", "--format", "json", "--bootstrap", "0"]) == 0
        assert_same(got, json.loads(capsys.readouterr().out))

    def test_sql_engine_needs_parquet(
        self, sets: dict[str, tuple[list[EpisodeRecord], Path]], capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A JSON Lines input to --engine duckdb says how to convert it."""
        demo = sets["demo"][1].parent / "demo" / "records.jsonl"
        assert main(["report", str(demo), "--engine", "duckdb"]) == 1
        assert "prefixmon export" in capsys.readouterr().err

    def test_in_process_only_options(
        self, sets: dict[str, tuple[list[EpisodeRecord], Path]], capsys: pytest.CaptureFixture[str]
    ) -> None:
        """--compare with a SQL engine is refused, naming the engine that does it."""
        parquet = sets["demo"][1]
        assert main(["report", str(parquet), "--engine", "duckdb", "--compare", "method=careful,method=sloppy"]) == 1
        assert "--engine python" in capsys.readouterr().err
