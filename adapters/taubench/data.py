"""Loading the τ-bench v1 data: databases, tool schemas, policies and tasks.

The data ships inside the package (``prefixmon/adapters/taubench/tau_bench_v1``: the public
τ-bench v1 data files, MIT licensed, its ``LICENSE`` beside them), so an installed prefixmon
works from any directory. Another folder of the same layout can be named by an explicit
argument or the environment variable ``PREFIXMON_TAU_DATA``. Databases are read once per
process and shared read-only; sandboxes never write to them (they write to their own
copy-on-write overlay, see :mod:`.sandbox`).
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

__all__ = (
    "DOMAINS",
    "ENV_VAR",
    "SPLITS",
    "TABLES",
    "DataNotFoundError",
    "Domain",
    "GoldAction",
    "TauTask",
    "data_dir",
    "load_policy",
    "load_schemas",
    "load_tables",
    "load_tasks",
    "shared_derived",
    "split_domain",
)

ENV_VAR: Final = "PREFIXMON_TAU_DATA"
"""Environment variable that overrides where the τ-bench data folder is."""

PACKAGED: Final = Path(__file__).resolve().parent / "tau_bench_v1"
"""The τ-bench v1 data shipped with the package (used unless another folder is named)."""

Domain = Literal["airline", "retail"]
DOMAINS: Final[tuple[Domain, ...]] = ("airline", "retail")

TABLES: Final[Mapping[Domain, tuple[str, ...]]] = {
    "airline": ("flights", "reservations", "users"),
    "retail": ("orders", "products", "users"),
}
"""The database tables of each domain (file ``<domain>/<table>.json``)."""

SPLITS: Final[Mapping[str, Domain]] = {
    "airline_test": "airline",
    "retail_test": "retail",
    "retail_dev": "retail",
    "retail_train": "retail",
}
"""Task files and the domain each belongs to."""


class DataNotFoundError(FileNotFoundError):
    """The τ-bench data folder (or a file in it) is missing."""


class GoldAction(BaseModel):
    """One gold action of a task: a tool name and its keyword arguments."""

    model_config = ConfigDict(frozen=True)

    name: str
    kwargs: dict[str, Any]


class TauTask(BaseModel):
    """One τ-bench task: the user, their instruction and the gold action sequence."""

    model_config = ConfigDict(frozen=True)

    user_id: str
    instruction: str
    actions: list[GoldAction]
    outputs: list[str] = Field(default_factory=list)
    task_index: int
    annotator: str | int | None = None


_TASKS_ADAPTER: Final = TypeAdapter(list[TauTask])


def data_dir(path: str | os.PathLike[str] | None = None) -> Path:
    """Resolve the τ-bench data folder.

    Args:
        path: an explicit folder; otherwise ``$PREFIXMON_TAU_DATA``; otherwise the data
            shipped with the package (:data:`PACKAGED`).

    Raises:
        DataNotFoundError: the folder does not exist (the message says where it looked).
    """
    return _resolved(None if path is None else os.fspath(path), os.environ.get(ENV_VAR) or None)


@functools.lru_cache(maxsize=64)
def _resolved(path: str | None, env_value: str | None) -> Path:
    """The data folder for an explicit path and the environment variable's value, found once.

    Every sandbox asks (a fresh one per replayed rollout): the ``stat`` and ``realpath`` calls
    cost a sandbox more than its copy-on-write tables. A folder that does not exist is not
    cached (the error is raised again, and a folder created later is found).
    """
    if path is not None:
        candidates = [Path(path)]
    elif env_value:
        candidates = [Path(env_value)]
    else:
        candidates = [PACKAGED]
    for candidate in candidates:
        if (candidate / "tool_schemas").is_dir():
            return candidate.resolve()
    looked = ", ".join(str(c) for c in candidates)
    raise DataNotFoundError(f"τ-bench v1 data folder not found (looked in {looked}); pass a path or set {ENV_VAR}")


def _read_json(file: Path) -> Any:
    try:
        with file.open(encoding="utf-8") as fh:
            return json.load(fh)
    except FileNotFoundError as e:
        raise DataNotFoundError(f"τ-bench data file missing: {file}") from e
    except json.JSONDecodeError as e:
        raise ValueError(f"{file}: not valid JSON: {e}") from e


@functools.cache
def _tables(domain: Domain, root: Path) -> Mapping[str, Mapping[str, Any]]:
    return {name: _read_json(root / domain / f"{name}.json") for name in TABLES[domain]}


@functools.cache
def shared_derived(domain: Domain, root: Path, table: str) -> dict[str, Any]:
    """Indexes derived from one read-only base table, shared by every sandbox over it (see :meth:`.Table.derived`)."""
    return {}


def load_tables(domain: Domain, path: str | os.PathLike[str] | None = None) -> Mapping[str, Any]:
    """The domain's database tables, read once per process. Treat them as read-only."""
    _check_domain(domain)
    return _tables(domain, data_dir(path))


def load_schemas(domain: Domain, path: str | os.PathLike[str] | None = None) -> list[dict[str, Any]]:
    """The domain's tools as OpenAI function definitions (``{"type": "function", ...}``)."""
    _check_domain(domain)
    file = data_dir(path) / "tool_schemas" / f"{domain}_tools.json"
    schemas = _read_json(file)
    if not isinstance(schemas, list):
        raise ValueError(f"{file}: expected a list of tool definitions")
    return schemas


def load_policy(domain: Domain, path: str | os.PathLike[str] | None = None) -> str:
    """The policy text the agent is told to follow (``<domain>/policy_wiki.md``)."""
    _check_domain(domain)
    file = data_dir(path) / domain / "policy_wiki.md"
    try:
        return file.read_text(encoding="utf-8")
    except FileNotFoundError as e:
        raise DataNotFoundError(f"τ-bench data file missing: {file}") from e


def load_tasks(split: str, path: str | os.PathLike[str] | None = None) -> list[TauTask]:
    """The tasks of a split (``airline_test``, ``retail_test``, ``retail_dev``, ``retail_train``).

    Raises:
        ValueError: unknown split, or a task that does not fit the task format.
    """
    if split not in SPLITS:
        raise ValueError(f"unknown τ-bench split {split!r}; expected one of {sorted(SPLITS)}")
    file = data_dir(path) / "tasks" / f"{split}.json"
    try:
        return _TASKS_ADAPTER.validate_python(_read_json(file))
    except ValidationError as e:
        raise ValueError(f"{file}: not a τ-bench task list: {e}") from e


def split_domain(split: str) -> Domain:
    """The domain a task split belongs to."""
    try:
        return SPLITS[split]
    except KeyError:
        raise ValueError(f"unknown τ-bench split {split!r}; expected one of {sorted(SPLITS)}") from None


def _check_domain(domain: str) -> None:
    if domain not in TABLES:
        raise ValueError(f"unknown τ-bench domain {domain!r}; expected one of {list(DOMAINS)}")
