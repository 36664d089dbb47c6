"""Apple's ToolSandbox on its real execution context.

ToolSandbox is on no package registry: install it from its repository without its
dependencies (LLM clients, transformers), plus the packages its tools and execution
context import (``scripts/test.sh`` lists them with their pins; docs/benchmarks.md)::

    pip install --no-deps ./ToolSandbox polars==0.20.31 ...

- :class:`SandboxEnv`: a scenario's execution context, calls run as its execution
  environment runs them, exact copies through its own snapshots;
- :func:`toolset`: monitor toolsets from its registered tools (declared state
  dependencies, dry run, or none);
- :func:`gold_calls`: the ground truth the milestones name;
- :mod:`.replay`: its trajectories to episode records (``prefixmon replay --domain toolsandbox``);
- :mod:`.bench`: ``prefixmon bench toolsandbox``.
"""

from __future__ import annotations

try:
    import tool_sandbox as _tool_sandbox  # type: ignore[import-untyped]  # noqa: F401
except ImportError as e:  # pragma: no cover - exercised only without the package
    raise ImportError("pip install --no-deps ToolSandbox from its repository (see docs/benchmarks.md)") from e

from .env import SETTING_TOOLS as SETTING_TOOLS
from .env import GoldCall as GoldCall
from .env import Outcome as Outcome
from .env import SandboxEnv as SandboxEnv
from .env import gold_calls as gold_calls
from .env import load_scenarios as load_scenarios
from .env import parse_call as parse_call
from .env import registered_tools as registered_tools
from .toolsets import MODES as MODES
from .toolsets import toolset as toolset

__all__ = (
    "MODES",
    "SETTING_TOOLS",
    "GoldCall",
    "Outcome",
    "SandboxEnv",
    "gold_calls",
    "load_scenarios",
    "parse_call",
    "registered_tools",
    "toolset",
)
