"""Task completion as the task-completion chapter scores it (DESIGN §3, last item).

* Three-state outcome S / P / F and weighted completion (S + 0.5·P) / N (in the metrics).
* Unstable tasks: a task whose reruns in one cohort disagree, with mean ± spread of its
  score (S = 1, P = 0.5, F = 0).
* Failure attribution from a human annotation file: every non-success episode is put on
  the model, a tool, the environment or the task; only model failures enter cross-model
  comparison, so the report also gives completion with the other three excluded.
* A review sample (every F and P, a seeded 20% of S) written as a sheet with the
  five-item trajectory checklist; the filled-in sheet is itself an annotation file.
"""

from __future__ import annotations

import csv
import itertools
import json
import math
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, overload

import numpy as np
import numpy.typing as npt

from .._internal.json_depth import MAX_JSON_DEPTH, deeper_than
from ..exceptions import RecordError
from .columns import CAUSES, OUTCOMES, EpisodeColumns, IntArray, task_units, unique_pairs

__all__ = (
    "ATTRIBUTIONS",
    "CHECKLIST",
    "SCORE",
    "Annotation",
    "Attribution",
    "ReviewItem",
    "UnstableTask",
    "UnstableTasks",
    "attribute",
    "read_annotations",
    "review_sample",
    "unstable_tasks",
    "write_review_sheet",
)

ATTRIBUTIONS: Final[tuple[str, ...]] = ("model", "tool", "environment", "task")
"""Who a failure is put on, after a human read the trajectory."""
_ALIASES: Final[Mapping[str, str]] = {
    "env": "environment",
    "question": "task",
    "模型": "model",
    "工具": "tool",
    "环境": "environment",
    "题目": "task",
}
CHECKLIST: Final[tuple[tuple[str, str], ...]] = (
    ("goal_reachable", "Goal reachable: the environment holds everything the task needs"),
    ("steps_supported", "Steps supported: each decision follows from information seen before it"),
    ("tool_calls_correct", "Tool calls correct: arguments, timing and handling of results (errors above all)"),
    ("context_used", "Context used: nothing from the middle of a long task lost, nothing stale taken as new"),
    ("termination_reasonable", "Termination reasonable: stopped because done, not gave up early or looped"),
)
"""The five-item trajectory review checklist: (column, question)."""
SCORE: Final[Mapping[int, float]] = {0: 1.0, 1: 0.5, 2: 0.0, -1: 0.0}
"""Completion score per outcome code: success 1, partial 0.5, failure or none 0."""


@dataclass(frozen=True, slots=True, kw_only=True)
class UnstableTask:
    """A task whose reruns within one cohort ended differently."""

    task_id: str
    runs: int
    outcomes: Mapping[str, int]
    """Runs per outcome (``success``, ``partial``, ``failure``, ``none``)."""
    mean: float
    """Mean completion score (S = 1, P = 0.5, F = 0)."""
    spread: float
    """Sample standard deviation of the score over the runs."""
    dataset: str | None = None
    """The task's dataset (the same task id in two datasets is two tasks); ``None`` without the label."""


class UnstableTasks(Sequence[UnstableTask]):
    """One cohort's unstable tasks (sorted by task id, then dataset), each built when it is read.

    A cohort of many tasks with a few reruns each can hold hundreds of thousands of them
    (170,484 in ``benchmarks/bench_report.py`` at 1M episodes): building every
    :class:`UnstableTask` was 1.3 s of a 1.5 s ``build_report``, for a report that shows
    the first few and a count. Compares equal to the tuple of its tasks.
    """

    __slots__ = ("_counts", "_items", "_names", "_squares", "_totals", "_units")

    def __init__(
        self,
        names: Sequence[tuple[str | None, str]],
        units: npt.NDArray[np.int64],
        counts: npt.NDArray[np.int64],
        totals: npt.NDArray[np.float64],
        squares: npt.NDArray[np.float64],
    ) -> None:
        self._names = names
        self._units = units
        self._counts = counts
        self._totals = totals
        self._squares = squares
        self._items: tuple[UnstableTask, ...] | None = None

    def _build(self, start: int, stop: int) -> list[UnstableTask]:
        names = self._names
        out = []
        # Plain lists: indexing numpy scalars one by one is what would make this loop slow.
        for u, row, tot, sq in zip(
            self._units[start:stop].tolist(),
            self._counts[start:stop].tolist(),
            self._totals[start:stop].tolist(),
            self._squares[start:stop].tolist(),
            strict=True,
        ):
            r = sum(row)
            mean = tot / r
            dataset, task_id = names[u]
            out.append(
                UnstableTask(
                    task_id=task_id,
                    dataset=dataset,
                    runs=r,
                    outcomes={name: v for name, v in zip(_OUTCOME_NAMES, row, strict=True) if v},
                    mean=mean,
                    spread=math.sqrt(max(0.0, (sq - r * mean * mean) / (r - 1))),
                )
            )
        return out

    def __len__(self) -> int:
        return len(self._units)

    @overload
    def __getitem__(self, index: int) -> UnstableTask: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[UnstableTask, ...]: ...
    def __getitem__(self, index: int | slice) -> UnstableTask | tuple[UnstableTask, ...]:
        if self._items is not None:
            return self._items[index]
        if isinstance(index, slice):
            start, stop, step = index.indices(len(self))
            if step == 1:
                return tuple(self._build(start, max(start, stop)))
            return tuple(self)[index]
        i = index + len(self) if index < 0 else index
        if not 0 <= i < len(self):
            raise IndexError("unstable task index out of range")
        return self._build(i, i + 1)[0]

    def __iter__(self) -> Iterator[UnstableTask]:
        if self._items is None:
            self._items = tuple(self._build(0, len(self)))
        return iter(self._items)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (UnstableTasks, tuple, list)):
            return len(self) == len(other) and tuple(self) == tuple(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        return f"UnstableTasks({len(self)} tasks)"


_OUTCOME_NAMES: Final = (*OUTCOMES, "none")


def unstable_tasks(
    columns: EpisodeColumns,
    cohort: IntArray,
    n_cohorts: int,
    units: tuple[IntArray, Sequence[tuple[str | None, str]]] | None = None,
) -> tuple[list[UnstableTasks], list[int]]:
    """Tasks whose reruns disagree, per cohort.

    A task is a (dataset, task id) pair: runs of the same id in two datasets are not reruns.

    Args:
        columns: the episodes.
        cohort: cohort index per episode.
        n_cohorts: number of cohorts.
        units: :func:`~.columns.task_units` of ``columns`` when already computed.

    Returns:
        ``(unstable, rerun)``: per cohort the unstable tasks (sorted by task id, then
        dataset) and the number of tasks with two or more runs.
    """
    empty = np.zeros(0, dtype=np.int64)
    none = UnstableTasks((), empty, empty.reshape(0, 4), empty.astype(np.float64), empty.astype(np.float64))
    rerun = [0] * n_cohorts
    if not len(columns):
        return [none] * n_cohorts, rerun
    unit, names = task_units(columns) if units is None else units
    n_units = len(names)
    groups, _, inverse = unique_pairs(cohort, n_units, unit)
    code = np.where(columns.outcome < 0, 3, columns.outcome).astype(np.int8)
    flat = np.zeros(groups.size * 4, dtype=np.int64)
    found, found_counts, _ = unique_pairs(inverse, 4, code, inverse=False)
    flat[found] = found_counts
    counts = flat.reshape(groups.size, 4)
    runs = counts.sum(axis=1)
    score = np.array([SCORE[0], SCORE[1], SCORE[2], SCORE[-1]])
    group_cohort = groups // n_units
    for c, n in zip(*np.unique(group_cohort[runs >= 2], return_counts=True), strict=True):
        rerun[int(c)] = int(n)
    # reruns disagree when their S / P / F results do: no outcome counts as F (its score, 0)
    results = (counts[:, 0] > 0).astype(np.int8) + (counts[:, 1] > 0) + ((counts[:, 2] + counts[:, 3]) > 0)
    picked = np.flatnonzero((runs >= 2) & (results >= 2))
    if not picked.size:
        return [none] * n_cohorts, rerun
    picked_units = groups[picked] % n_units
    # Sorted by (cohort, task id, dataset missing, dataset): the units in use ranked once.
    used = np.unique(picked_units)
    ranked = sorted(used.tolist(), key=lambda u: (names[u][1], names[u][0] is None, names[u][0] or ""))
    rank = np.zeros(n_units, dtype=np.int64)
    rank[ranked] = np.arange(len(ranked))
    picked_cohort = group_cohort[picked]
    order = np.lexsort((rank[picked_units], picked_cohort))
    picked, picked_units, picked_cohort = picked[order], picked_units[order], picked_cohort[order]
    picked_counts = counts[picked]
    # sums over each task's runs from its outcome counts: no per-episode arrays of scores
    totals = picked_counts @ score
    squares = picked_counts @ (score * score)
    bounds = np.searchsorted(picked_cohort, np.arange(n_cohorts + 1))
    return [
        UnstableTasks(names, picked_units[a:b], picked_counts[a:b], totals[a:b], squares[a:b])
        for a, b in itertools.pairwise(bounds.tolist())
    ], rerun


@dataclass(frozen=True, slots=True, kw_only=True)
class Annotation:
    """One human attribution of a failure (or of every failure of a task)."""

    attribution: str
    """One of :data:`ATTRIBUTIONS`."""
    episode_id: str | None = None
    """The episode it is about; takes precedence over ``task_id``."""
    task_id: str | None = None
    """Every non-success episode of this task (restricted by ``labels``)."""
    labels: Mapping[str, str] = field(default_factory=dict)
    """Label filters for a task-level annotation (``label.<key>`` columns)."""
    note: str = ""
    where: str = ""
    """``file:line`` of the annotation."""


def read_annotations(path: str | os.PathLike[str]) -> list[Annotation]:
    """Read a human annotation file: CSV (``.csv``) or JSON Lines (anything else).

    Each row has ``attribution`` (model, tool, environment, task; empty rows are skipped,
    so a half-filled review sheet reads fine) and ``episode_id`` or ``task_id``; optional
    ``note`` and ``label.<key>`` filters for task-level rows.

    Raises:
        RecordError: a row with an unknown attribution or without episode_id / task_id,
            naming file and line.
    """
    name = os.fspath(path)
    rows: list[tuple[int, Mapping[str, Any]]] = []
    if name.endswith(".csv"):
        with open(name, encoding="utf-8", newline="") as f:
            reader = csv.DictReader(f)
            try:
                rows = [(reader.line_num, {k: _unescape(v) for k, v in r.items()}) for r in reader]
            except UnicodeDecodeError as e:
                raise RecordError(f"not UTF-8 text: {e.reason} at byte {e.start}", path=name, line=reader.line_num + 1) from None
    else:
        with open(name, "rb") as fb:
            for i, data in enumerate(fb, 1):
                if data.strip():
                    try:
                        text = data.decode("utf-8")
                        if deeper_than(text, MAX_JSON_DEPTH):  # json would recurse near the interpreter's limit
                            raise RecordError("not valid JSON: nested too deeply", path=name, line=i)
                        row = json.loads(text)
                    except UnicodeDecodeError as e:
                        raise RecordError(f"not UTF-8 text: {e.reason} at byte {e.start}", path=name, line=i) from None
                    except json.JSONDecodeError as e:
                        raise RecordError(f"not valid JSON: {e}", path=name, line=i) from None
                    except RecursionError:
                        raise RecordError("not valid JSON: nested too deeply", path=name, line=i) from None
                    if not isinstance(row, dict):
                        raise RecordError("expected a JSON object", path=name, line=i)
                    rows.append((i, row))
    out: list[Annotation] = []
    for line, row in rows:
        raw = str(row.get("attribution") or "").strip()
        if not raw:
            continue
        attribution = _ALIASES.get(raw, raw.lower())
        if attribution not in ATTRIBUTIONS:
            raise RecordError(f"attribution: expected one of {', '.join(ATTRIBUTIONS)}, got {raw!r}", path=name, line=line)
        episode_id = str(row.get("episode_id") or "").strip() or None
        task_id = str(row.get("task_id") or "").strip() or None
        if episode_id is None and task_id is None:
            raise RecordError("a row needs episode_id or task_id", path=name, line=line)
        labels = {k[len("label.") :]: str(v) for k, v in row.items() if k and k.startswith("label.") and v}
        out.append(
            Annotation(
                attribution=attribution,
                episode_id=episode_id,
                task_id=None if episode_id else task_id,
                labels={} if episode_id else labels,
                note=str(row.get("note") or ""),
                where=f"{name}:{line}",
            )
        )
    return out


@dataclass(frozen=True, slots=True, kw_only=True)
class Attribution:
    """Failure attribution of one cohort."""

    counts: Mapping[str, int]
    """Non-success episodes per attribution, plus ``unattributed``."""
    excluded: int
    """Non-success episodes put on the tool, the environment or the task."""
    model_only_completion: float | None
    """(S + 0.5·P) / (N - excluded): completion with infrastructure and task failures
    taken out, the figure to compare models on; ``None`` when nothing is left."""
    model_failure_rate: float | None
    """Model-attributed non-success episodes / (N - excluded)."""


def attribute(
    columns: EpisodeColumns,
    cohort: IntArray,
    n_cohorts: int,
    annotations: Sequence[Annotation],
) -> tuple[list[Attribution], list[Annotation]]:
    """Count attributions per cohort.

    Returns:
        ``(per_cohort, unmatched)``: the attribution of each cohort and the annotations
        that matched no non-success episode.
    """
    by_episode = {a.episode_id: a for a in annotations if a.episode_id is not None}
    by_task: dict[str, list[Annotation]] = {}
    for a in annotations:
        if a.episode_id is None and a.task_id is not None:
            by_task.setdefault(a.task_id, []).append(a)
    code = {a: i for i, a in enumerate(ATTRIBUTIONS)}
    counts = np.zeros((n_cohorts, len(ATTRIBUTIONS) + 1), dtype=np.int64)
    used: set[int] = set()
    completion = np.zeros(n_cohorts)
    excluded_score = np.zeros(n_cohorts)
    n = np.bincount(cohort, minlength=n_cohorts)
    score = np.array([SCORE[0], SCORE[1], SCORE[2], SCORE[-1]])
    outcome = np.where(columns.outcome < 0, 3, columns.outcome)
    completion += np.bincount(cohort, weights=score[outcome], minlength=n_cohorts)
    ids = columns.episode_ids
    for i in np.flatnonzero(columns.outcome != 0):
        c = int(cohort[i])
        found = by_episode.get(ids[int(i)])
        if found is None:
            labels = columns.label_sets[int(columns.label_set[i])]
            for a in by_task.get(columns.task_ids[int(columns.task[i])], ()):
                if all(labels.get(k) == v for k, v in a.labels.items()):
                    found = a
                    break
        if found is None:
            counts[c, -1] += 1
            continue
        used.add(id(found))
        counts[c, code[found.attribution]] += 1
        if found.attribution != "model":
            excluded_score[c] += score[int(outcome[i])]
    per_cohort = []
    for c in range(n_cohorts):
        excluded = int(counts[c, 1:4].sum())
        kept = int(n[c]) - excluded
        per_cohort.append(
            Attribution(
                counts={**{a: int(counts[c, j]) for j, a in enumerate(ATTRIBUTIONS)}, "unattributed": int(counts[c, -1])},
                excluded=excluded,
                model_only_completion=(float(completion[c] - excluded_score[c]) / kept) if kept else None,
                model_failure_rate=(int(counts[c, 0]) / kept) if kept else None,
            )
        )
    unmatched = [a for a in annotations if id(a) not in used]
    return per_cohort, unmatched


_WHY: Final[Mapping[int, str]] = {1: "partial", 2: "failure", -1: "no outcome"}


@dataclass(frozen=True, slots=True, kw_only=True)
class ReviewItem:
    """One episode picked for trajectory review."""

    episode_id: str
    task_id: str
    labels: Mapping[str, str]
    outcome: str | None
    horizon: int
    fed: int
    cause: str | None
    failure_tool: str | None
    failure_reason: str | None
    selected: str
    """Why it was picked: ``failure``, ``partial``, ``no outcome`` or ``sampled success``."""


def review_sample(
    columns: EpisodeColumns,
    *,
    fraction: float = 0.2,
    seed: int = 0,
    cohort: IntArray | None = None,
) -> list[ReviewItem]:
    """Every non-success episode plus a seeded ``fraction`` of the successes.

    The successes are sampled per cohort (when ``cohort`` is given), ``ceil(fraction·S)``
    of them, from the episodes sorted by id, so the sample does not depend on file order.
    """
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"fraction must be in [0, 1], got {fraction}")
    groups = np.zeros(len(columns), dtype=np.int32) if cohort is None else cohort
    rng = np.random.default_rng(seed)
    picked: list[tuple[int, str]] = []
    for c in np.unique(groups):
        members = np.flatnonzero(groups == c)
        ok = sorted((int(i) for i in members if columns.outcome[i] == 0), key=lambda i: columns.episode_ids[i])
        take = math.ceil(fraction * len(ok))
        chosen = sorted(rng.choice(len(ok), size=take, replace=False).tolist()) if take else []
        picked.extend((ok[j], "sampled success") for j in chosen)
        picked.extend((int(i), _WHY[int(columns.outcome[i])]) for i in members if columns.outcome[i] != 0)
    items = []
    for i, reason in picked:
        items.append(
            ReviewItem(
                episode_id=columns.episode_ids[i],
                task_id=columns.task_ids[int(columns.task[i])],
                labels=columns.label_sets[int(columns.label_set[i])],
                outcome=None if columns.outcome[i] < 0 else OUTCOMES[int(columns.outcome[i])],
                horizon=int(columns.horizon[i]),
                fed=int(columns.fed[i]),
                cause=None if columns.cause[i] < 0 else CAUSES[int(columns.cause[i])],
                failure_tool=columns.failure_tool[i],
                failure_reason=columns.failure_reason[i],
                selected=reason,
            )
        )
    order = {"failure": 0, "partial": 1, "no outcome": 2, "sampled success": 3}
    items.sort(key=lambda it: (tuple(sorted(it.labels.items())), order[it.selected], it.task_id, it.episode_id))
    return items


_FORMULA_START: Final = ("=", "+", "-", "@", "\t", "\r")
"""What makes a spreadsheet read a CSV cell as a formula (OWASP's CSV injection list)."""


def _escape_cell(text: str) -> str:
    """A cell a spreadsheet shows as text: one starting a formula (or an apostrophe) gets a leading apostrophe."""
    return "'" + text if text[:1] in _FORMULA_START or text[:1] == "'" else text


def _unescape_cell(text: str) -> str:
    """The value :func:`_escape_cell` wrote (a reviewer's own leading apostrophe before other text stays)."""
    return text[1:] if text[:1] == "'" and (text[1:2] in _FORMULA_START or text[1:2] == "'") else text


def _unescape(value: Any) -> Any:
    return _unescape_cell(value) if isinstance(value, str) else value


def write_review_sheet(path: str | os.PathLike[str], items: Sequence[ReviewItem]) -> int:
    """Write the review sample as a CSV sheet with the checklist columns left blank.

    Reviewers fill each checklist column with yes/no, and ``attribution`` (model, tool,
    environment, task) for failures; the filled sheet is a valid annotation file for
    :func:`read_annotations`. Returns the number of rows.

    Tool names, reasons, ids and labels may be model-made: a cell that starts with ``=``,
    ``+``, ``-``, ``@``, a tab or a carriage return (or an apostrophe) is written with a
    leading apostrophe, so a spreadsheet shows it as text instead of running it as a formula;
    :func:`read_annotations` removes it again.
    """
    keys = sorted({k for it in items for k in it.labels})
    header = [
        "episode_id",
        "task_id",
        *(f"label.{k}" for k in keys),
        "outcome",
        "selected",
        "horizon",
        "fed",
        "first_failure_cause",
        "first_failure_tool",
        "first_failure_reason",
        *(c for c, _ in CHECKLIST),
        "attribution",
        "note",
    ]
    with open(path, "w", encoding="utf-8", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        for it in items:
            w.writerow(
                _escape_cell(c) if isinstance(c, str) else c
                for c in [
                    it.episode_id,
                    it.task_id,
                    *(it.labels.get(k, "") for k in keys),
                    it.outcome or "",
                    it.selected,
                    it.horizon,
                    it.fed,
                    it.cause or "",
                    it.failure_tool or "",
                    it.failure_reason or "",
                    *("" for _ in CHECKLIST),
                    "",
                    "",
                ]
            )
    return len(items)
