"""DuckDB as the engine of :mod:`.sql` (embedded; the default for Parquet)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, Final

from .sql import Backend, Dialect, Rows

INSTALL_HINT: Final = 'pip install "prefixmon[duckdb]"'

DUCKDB: Final = Dialect(
    name="duckdb",
    explode=lambda array: f"unnest({array})",
    series=lambda n: f"SELECT CAST(range AS BIGINT) AS k FROM range(1, {int(n) + 1})",
    hex_to_int=lambda text: f"CAST(('0x' || {text}) AS BIGINT)",
    string="VARCHAR",
)


class DuckDBBackend(Backend):
    """An in-memory DuckDB connection with the input files as the view ``episodes``."""

    dialect = DUCKDB

    def __init__(
        self, paths: Sequence[str | os.PathLike[str]], *, threads: int | None = None, memory_limit: str | None = None
    ) -> None:
        try:
            import duckdb
        except ImportError as e:
            raise ImportError(INSTALL_HINT) from e
        config: dict[str, Any] = {}
        if threads is not None:
            config["threads"] = threads
        if memory_limit is not None:
            config["memory_limit"] = memory_limit
        self._con = duckdb.connect(":memory:", config=config)
        parts = [
            f"SELECT *, {i} AS _file, file_row_number AS _row FROM read_parquet({_literal(os.fspath(p))}, file_row_number = true)"
            for i, p in enumerate(paths)
        ]
        self._con.execute("CREATE VIEW episodes AS " + " UNION ALL BY NAME ".join(parts))

    def query(self, sql: str) -> Rows:
        """Rows as tuples."""
        rows: Rows = self._con.execute(sql).fetchall()
        return rows

    def materialize(self, name: str, sql: str) -> None:
        """A temporary table."""
        self._con.execute(f"CREATE OR REPLACE TEMP TABLE {name} AS {sql}")

    def close(self) -> None:
        """Close the connection."""
        self._con.close()


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"
