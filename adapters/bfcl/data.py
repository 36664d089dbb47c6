"""BFCL multi-turn data: tasks, ground truth and function docs, read from ``bfcl_eval``.

The files ship with ``bfcl-eval`` (``bfcl_eval/data``): one JSON object per line for the
tasks (``BFCL_v4_multi_turn_<category>.json``), the ground truth
(``possible_answer/...``), and the function docs of each environment class
(``multi_turn_func_doc/<module>.json``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, Final

from prefixmon import SpecError

__all__ = (
    "CATEGORIES",
    "CLASS_DOC_FILES",
    "BfclTask",
    "category_of",
    "data_dir",
    "function_classes",
    "function_docs",
    "functions_of",
    "load_tasks",
    "task_index",
)

CATEGORIES: Final = ("base", "miss_func", "miss_param", "long_context")
"""The multi-turn categories this adapter runs."""

CLASS_DOC_FILES: Final[Mapping[str, str]] = {
    "GorillaFileSystem": "gorilla_file_system.json",
    "MathAPI": "math_api.json",
    "MessageAPI": "message_api.json",
    "TwitterAPI": "posting_api.json",
    "TicketAPI": "ticket_api.json",
    "TradingBot": "trading_bot.json",
    "TravelAPI": "travel_booking.json",
    "VehicleControlAPI": "vehicle_control.json",
}
"""Environment class -> its function-doc file (the eight multi-turn classes)."""

_INSTALL_HINT: Final = (
    'pip install --no-deps "bfcl-eval==2026.3.23" "mpmath==1.3.0"  (bfcl-eval must be installed without its dependencies)'
)


def data_dir() -> Path:
    """The ``bfcl_eval/data`` folder of the installed ``bfcl-eval``.

    Raises:
        ImportError: ``bfcl-eval`` is not installed.
    """
    try:
        import bfcl_eval  # type: ignore[import-untyped]
    except ImportError as e:  # pragma: no cover - exercised only without the package
        raise ImportError(_INSTALL_HINT) from e
    return Path(bfcl_eval.__file__).parent / "data"


@dataclass(frozen=True, slots=True, kw_only=True)
class BfclTask:
    """One multi-turn task with its ground truth."""

    id: str
    """BFCL's id, e.g. ``multi_turn_base_0``."""
    category: str
    """``base``, ``miss_func``, ``miss_param`` or ``long_context``."""
    turns: tuple[tuple[Mapping[str, Any], ...], ...]
    """User messages per turn (a held-out turn of ``miss_func`` has none)."""
    initial_config: Mapping[str, Any]
    """Per class, the scenario given to ``_load_scenario`` (deep-copied before use)."""
    involved_classes: tuple[str, ...]
    missed_function: Mapping[int, tuple[str, ...]] = field(default_factory=dict)
    """Turn -> functions held out until that turn (``miss_func``)."""
    ground_truth: tuple[tuple[str, ...], ...] = ()
    """Per turn, the ground-truth calls as Python-call strings."""

    @property
    def long_context(self) -> bool:
        """Whether environments load with BFCL's long-context extension."""
        return "long_context" in self.category or "composite" in self.category

    def held_out(self, turn: int) -> frozenset[str]:
        """Functions not yet available at ``turn``."""
        return frozenset(name for t, names in self.missed_function.items() if t > turn for name in names)


def category_of(task_id: str) -> str:
    """The category in a BFCL id: ``multi_turn_miss_func_12`` -> ``miss_func``."""
    stem = task_id.rsplit("_", 1)[0]
    return stem.removeprefix("multi_turn_")


def _read_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    with path.open(encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if line.strip():
                try:
                    yield json.loads(line)
                except json.JSONDecodeError as e:
                    raise SpecError(f"{path}:{n}: not JSON: {e}") from None


@cache
def _load_category(category: str) -> tuple[BfclTask, ...]:
    if category not in CATEGORIES:
        raise SpecError(f"unknown BFCL multi-turn category {category!r}; known: {', '.join(CATEGORIES)}")
    root = data_dir()
    name = f"BFCL_v4_multi_turn_{category}.json"
    truth = {row["id"]: row["ground_truth"] for row in _read_jsonl(root / "possible_answer" / name)}
    tasks = []
    for row in _read_jsonl(root / name):
        gt = truth.get(row["id"])
        if gt is None:
            raise SpecError(f"{root / 'possible_answer' / name}: no ground truth for {row['id']}")
        tasks.append(
            BfclTask(
                id=row["id"],
                category=category,
                turns=tuple(tuple(turn) for turn in row["question"]),
                initial_config=row.get("initial_config", {}),
                involved_classes=tuple(row["involved_classes"]),
                missed_function={int(k): tuple(v) for k, v in row.get("missed_function", {}).items()},
                ground_truth=tuple(tuple(turn) for turn in gt),
            )
        )
    return tuple(tasks)


def load_tasks(categories: Iterable[str] = CATEGORIES) -> list[BfclTask]:
    """Load the tasks of the given categories (cached per process).

    Raises:
        SpecError: an unknown category or a malformed data file.
        ImportError: ``bfcl-eval`` is not installed.
    """
    return [task for c in categories for task in _load_category(c)]


@cache
def task_index() -> Mapping[str, BfclTask]:
    """Every multi-turn task by id."""
    return {t.id: t for t in load_tasks()}


@cache
def function_docs() -> Mapping[str, tuple[Mapping[str, Any], ...]]:
    """Class -> its function docs (BFCL's own JSON: name, description, parameters, response)."""
    root = data_dir() / "multi_turn_func_doc"
    return {cls: tuple(_read_jsonl(root / file)) for cls, file in CLASS_DOC_FILES.items()}


@cache
def function_classes() -> Mapping[str, str]:
    """Function name -> the class that implements it (names are unique across classes)."""
    out: dict[str, str] = {}
    for cls, docs in function_docs().items():
        for doc in docs:
            if doc["name"] in out:  # pragma: no cover - guards a future data change
                raise SpecError(f"function {doc['name']!r} is declared by {out[doc['name']]} and {cls}")
            out[doc["name"]] = cls
    return out


def functions_of(classes: Sequence[str]) -> list[str]:
    """The functions of the given classes, in doc order."""
    docs = function_docs()
    return [d["name"] for cls in classes for d in docs[cls]]
