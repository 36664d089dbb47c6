"""Report engines for fleet-scale inputs: the report's SQL run by DuckDB or Spark SQL.

:func:`engine_report` computes the same :class:`~prefixmon.analytics.Report` as
:func:`~prefixmon.analytics.build_report`, from ``prefixmon.parquet/1`` files
(:mod:`prefixmon.records.parquet`), where the data lives::

    from prefixmon.analytics.engines import engine_report

    report = engine_report(["fleet.parquet"], engine="duckdb", by=["model"], bootstrap=1000)

The SQL is in :mod:`.sql` (written once for both engines); intervals come from a Poisson
bootstrap paired by task id (see there). Needs the ``duckdb`` or the ``spark`` extra.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, Final, Literal

from ..report import DEFAULT_CHECKPOINTS, Report
from .sql import Backend, sql_report

__all__ = ("ENGINES", "Engine", "engine_report", "open_backend")

Engine = Literal["duckdb", "spark"]
ENGINES: Final[tuple[str, ...]] = ("duckdb", "spark")


def open_backend(paths: Sequence[str | os.PathLike[str]], engine: Engine, *, spark_session: Any = None) -> Backend:
    """A backend with ``paths`` registered as the view ``episodes``.

    Raises:
        ValueError: an unknown engine.
        ImportError: the engine's extra is missing.
    """
    if engine == "duckdb":
        from ._duckdb import DuckDBBackend

        return DuckDBBackend(paths)
    if engine == "spark":
        from ._spark import SparkBackend

        return SparkBackend(paths, session=spark_session)
    raise ValueError(f"unknown engine {engine!r} (choose from {', '.join(ENGINES)})")


def engine_report(
    paths: Sequence[str | os.PathLike[str]],
    *,
    engine: Engine = "duckdb",
    by: Sequence[str] | None = None,
    bootstrap: int = 0,
    seed: int = 0,
    confidence: float = 0.95,
    checkpoints: Sequence[int] = DEFAULT_CHECKPOINTS,
    strata: str | None = "dataset",
    spark_session: Any = None,
) -> Report:
    """The report of Parquet episode files, computed by ``engine`` (see :func:`.sql.sql_report`).

    Raises:
        RecordError: a file is not ``prefixmon.parquet/1``.
        ValueError: as :func:`~prefixmon.analytics.build_report`.
    """
    from ...records.parquet import check_parquet

    for p in paths:
        check_parquet(p)
    backend = open_backend(paths, engine, spark_session=spark_session)
    try:
        return sql_report(
            backend, by=by, bootstrap=bootstrap, seed=seed, confidence=confidence, checkpoints=checkpoints, strata=strata
        )
    finally:
        close = getattr(backend, "close", None)
        if close is not None:
            close()
