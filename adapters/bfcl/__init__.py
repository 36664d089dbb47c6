"""BFCL multi-turn (v3/v4) on its real environment classes.

Needs ``bfcl-eval`` installed without its dependencies::

    pip install --no-deps "bfcl-eval==2026.3.23" "mpmath==1.3.0"

- :func:`build_toolset`: specs for every multi-turn function (declared preconditions over
  the live environment, dry-run, or none), references for ids earlier calls produce;
- :func:`run_task`: one task's calls through a monitor episode, turn by turn;
- :func:`replay_files`: BFCL result files of any model to episode records
  (``prefixmon replay --bfcl``);
- :func:`run_bench`: ground truth and perturbations against execution labels
  (``prefixmon bench bfcl``).
"""

from __future__ import annotations

try:
    import bfcl_eval as _bfcl_eval  # type: ignore[import-untyped]  # noqa: F401
except ImportError as e:  # pragma: no cover - exercised only without the package
    raise ImportError('pip install --no-deps "bfcl-eval==2026.3.23" "mpmath==1.3.0"') from e

from .bench import BenchReport as BenchReport
from .bench import format_report as format_report
from .bench import run_bench as run_bench
from .checker import TurnChecker as TurnChecker
from .data import CATEGORIES as CATEGORIES
from .data import BfclTask as BfclTask
from .data import load_tasks as load_tasks
from .data import task_index as task_index
from .env import BfclCall as BfclCall
from .env import BfclEnv as BfclEnv
from .env import CallParseError as CallParseError
from .env import parse_calls as parse_calls
from .env import rejection as rejection
from .perturb import FAMILIES as FAMILIES
from .perturb import execute as execute
from .perturb import ground_truth_calls as ground_truth_calls
from .perturb import perturb as perturb
from .replay import replay_files as replay_files
from .rules import RULES as RULES
from .specs import build_toolset as build_toolset
from .specs import run_task as run_task

__all__ = (
    "CATEGORIES",
    "FAMILIES",
    "RULES",
    "BenchReport",
    "BfclCall",
    "BfclEnv",
    "BfclTask",
    "CallParseError",
    "TurnChecker",
    "build_toolset",
    "execute",
    "format_report",
    "ground_truth_calls",
    "load_tasks",
    "parse_calls",
    "perturb",
    "rejection",
    "replay_files",
    "run_bench",
    "run_task",
    "task_index",
)
