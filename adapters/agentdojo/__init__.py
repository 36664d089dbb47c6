"""AgentDojo (banking, slack, travel, workspace) on its real environments, benign and under prompt injection.

Needs ``pip install agentdojo`` (0.1.35 is what this was built against).

- :mod:`.episodes`: scenarios (user tasks, alone or paired with injection tasks) played as
  ground-truth calls through a monitor on AgentDojo's real environments, scored by
  AgentDojo's own utility and security checks;
- :mod:`.bench`: ``prefixmon bench agentdojo``.
"""

from __future__ import annotations

from .episodes import SUITES as SUITES
from .episodes import VERSION as VERSION
from .episodes import WRITES as WRITES
from .episodes import Played as Played
from .episodes import Scenario as Scenario
from .episodes import play as play
from .episodes import scenarios as scenarios
from .episodes import tool_schemas as tool_schemas

__all__ = ("SUITES", "VERSION", "WRITES", "Played", "Scenario", "play", "scenarios", "tool_schemas")
