"""Spark SQL as the engine of :mod:`.sql` (pyspark; local mode on one machine, or a cluster)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, Final

from .sql import Backend, Dialect, Rows

INSTALL_HINT: Final = 'pip install "prefixmon[spark]"'

SPARK: Final = Dialect(
    name="spark",
    explode=lambda array: f"explode({array})",
    series=lambda n: f"SELECT CAST(id AS BIGINT) AS k FROM range(1, {int(n) + 1})",
    hex_to_int=lambda text: f"CAST(conv({text}, 16, 10) AS BIGINT)",
    string="STRING",
)


class SparkBackend(Backend):
    """A SparkSession with the input files as the temporary view ``episodes``.

    Args:
        paths: Parquet files (``prefixmon.parquet/1``), local or any URI Spark reads.
        session: an existing SparkSession; default: ``local[*]`` created (and stopped by
            :meth:`close`) here.
    """

    dialect = SPARK

    def __init__(self, paths: Sequence[str | os.PathLike[str]], *, session: Any = None) -> None:
        try:
            from pyspark.sql import SparkSession
            from pyspark.sql import functions as F
        except ImportError as e:
            raise ImportError(INSTALL_HINT) from e
        self._own = session is None
        self.spark = session if session is not None else local_session(SparkSession)
        frames = []
        for i, p in enumerate(paths):
            df = self.spark.read.parquet(os.fspath(p))
            frames.append(df.select("*", F.lit(i).alias("_file"), F.col("_metadata.row_index").alias("_row")))
        union = frames[0]
        for df in frames[1:]:
            union = union.unionByName(df, allowMissingColumns=True)
        union.createOrReplaceTempView("episodes")
        self._cached: list[Any] = []

    def query(self, sql: str) -> Rows:
        """Rows as tuples."""
        return [tuple(r) for r in self.spark.sql(sql).collect()]

    def materialize(self, name: str, sql: str) -> None:
        """A cached temporary view."""
        df = self.spark.sql(sql).cache()
        self._cached.append(df)
        df.createOrReplaceTempView(name)

    def close(self) -> None:
        """Drop the cached views; stop the session if it was created here."""
        for df in self._cached:
            df.unpersist()
        self._cached.clear()
        if self._own:
            self.spark.stop()


def local_session(builder_cls: Any = None, *, cores: str = "*", driver_memory: str = "4g") -> Any:
    """A local SparkSession sized for one machine (few shuffle partitions, UTC, no UI).

    ``driver_memory`` is the JVM heap (local mode runs everything in the driver); it takes
    effect only when this call starts the JVM.
    """
    if builder_cls is None:
        try:
            from pyspark.sql import SparkSession as builder_cls
        except ImportError as e:
            raise ImportError(INSTALL_HINT) from e
    return (
        builder_cls.builder.master(f"local[{cores}]")
        .appName("prefixmon")
        .config("spark.driver.memory", driver_memory)
        .config("spark.sql.shuffle.partitions", "8")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.ansi.enabled", "false")
        .getOrCreate()
    )
