"""Parquet episode files as :class:`~prefixmon.analytics.EpisodeColumns` (the in-process engine).

Registered with :func:`~prefixmon.analytics.register_reader` as ``parquet``, so
:func:`~prefixmon.analytics.load_columns` and ``prefixmon report --engine python`` read
Parquet like record JSON Lines: only the columns the metrics read, each row checked as the
JSON Lines fast loader checks it, a bad row reported as ``path:row: what``.
"""

from __future__ import annotations

import os
from typing import Any, Final

from ...exceptions import RecordError
from ...records.model import BadLine
from ...records.parquet import _open
from ..columns import CAUSE_CODE, OUTCOME_CODE, ColumnBuilder, EpisodeColumns, OnError

_COLUMNS: Final = ("episode_id", "task_id", "labels", "horizon", "fed", "executable", "outcome", "first_failure")


def _check(row: dict[str, Any]) -> tuple[int, int, str | None, str | None]:
    """``(outcome code, cause code, failure tool, failure reason)``; raises ValueError naming the field."""
    horizon, fed = row["horizon"], row["fed"]
    if horizon is None or horizon < 1:
        raise ValueError(f"horizon: expected an integer >= 1, got {horizon!r}")
    if fed is None or not 1 <= fed <= horizon + 1:
        raise ValueError(f"fed: expected an integer in 1..horizon+1 ({horizon + 1}), got {fed!r}")
    executable = fed == horizon + 1
    if row["executable"] is not executable:
        raise ValueError(f"executable: {row['executable']!r} but fed={fed}, horizon={horizon}")
    outcome = OUTCOME_CODE.get(row["outcome"], -2)
    if outcome == -2:
        raise ValueError(f"outcome: expected success, partial, failure or null, got {row['outcome']!r}")
    ff = row["first_failure"]
    if executable:
        if ff is not None:
            raise ValueError("first_failure: must be null when the episode is fully executable")
        return outcome, -1, None, None
    if ff is None:
        raise ValueError("first_failure: expected a value when fed <= horizon")
    cause = CAUSE_CODE.get(ff["cause"], -2)
    if cause < 0:
        raise ValueError(f"first_failure.cause: expected one of {', '.join(c for c in CAUSE_CODE if c)}, got {ff['cause']!r}")
    if ff["depth"] != fed:
        raise ValueError(f"first_failure.depth: {ff['depth']!r} != fed {fed}")
    return outcome, cause, ff["tool"], ff["reason"]


def read_parquet_columns(path: str, on_error: OnError = "raise", errors: list[BadLine] | None = None) -> EpisodeColumns:
    """The metric columns of one ``prefixmon.parquet/1`` file (rows numbered from 1 as lines)."""
    pf = _open(path)
    builder = ColumnBuilder()
    row_no = 0
    for batch in pf.iter_batches(batch_size=65_536, columns=list(_COLUMNS)):
        for row in batch.to_pylist():
            row_no += 1
            try:
                if row["episode_id"] is None or row["task_id"] is None:
                    raise ValueError("episode_id and task_id must not be null")
                outcome, cause, tool, reason = _check(row)
            except ValueError as e:
                if on_error == "raise":
                    raise RecordError(f"not a valid record: {e}", path=os.fspath(path), line=row_no) from None
                if errors is not None:
                    errors.append(BadLine(path=os.fspath(path), line=row_no, message=f"not a valid record: {e}"))
                continue
            builder.add(
                episode_id=row["episode_id"],
                task_id=row["task_id"],
                labels=dict(row["labels"]),
                horizon=row["horizon"],
                fed=row["fed"],
                outcome=outcome,
                cause=cause,
                failure_tool=tool,
                failure_reason=reason,
            )
    return builder.build()
