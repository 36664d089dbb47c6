"""prefixmon: a prefix-executability monitor for tool-using LLM agents.

Before every tool call the monitor decides whether the call can execute in the current
state, keeps the episode's first-error depth live, reports through observers (OpenTelemetry,
structlog), can block, replan or escalate, and writes episode records that the analytics
turn into prefix-executability metrics.
"""

from ._version import VERSION
from .deprecation import moved_names
from .dry_run import dry_run as dry_run
from .episode import Episode as Episode
from .episode import current_episode as current_episode
from .exceptions import PlanError as PlanError
from .exceptions import PrefixmonError as PrefixmonError
from .exceptions import RecordError as RecordError
from .exceptions import SpecError as SpecError
from .exceptions import ToolBlocked as ToolBlocked
from .monitor import Monitor as Monitor
from .monitor import MonitorStats as MonitorStats
from .observer import Observer as Observer
from .pending import PendingCall as PendingCall
from .plan import Plan as Plan
from .plan import PlanVerdict as PlanVerdict
from .plan import revise_plan as revise_plan
from .plan import verify_plan as verify_plan
from .policies import Approve as Approve
from .policies import Deny as Deny
from .policies import Edit as Edit
from .policies import Policy as Policy
from .policies import Replan as Replan
from .records.model import ActionRecord as ActionRecord
from .records.model import BadLine as BadLine
from .records.model import EpisodeRecord as EpisodeRecord
from .records.model import FirstFailure as FirstFailure
from .records.model import JsonlSink as JsonlSink
from .records.model import iter_records as iter_records
from .records.model import read_records as read_records
from .rules.spec import Grounded as Grounded
from .rules.spec import Precondition as Precondition
from .rules.spec import Ref as Ref
from .rules.spec import ToolSpec as ToolSpec
from .snapshot import Snapshot as Snapshot
from .state import TrackedState as TrackedState
from .telemetry.logging import LiveLog as LiveLog
from .telemetry.spans import Telemetry as Telemetry
from .toolset import Toolset as Toolset
from .verdict import Failure as Failure
from .verdict import ToolCall as ToolCall
from .verdict import Undetermined as Undetermined
from .verdict import Verdict as Verdict
from .vocabulary import Cause as Cause
from .vocabulary import Decision as Decision
from .vocabulary import Outcome as Outcome

__version__ = VERSION
__getattr__ = moved_names(
    __name__,
    {
        name: f"prefixmon.plan:{name}"
        for name in ("PlanFollower", "PlanStep", "StepStatus", "StepVerdict", "parse_plan", "plan_effect")
    },
    removal="0.3.0",
)
"""Names that left the top level in 0.2.0: still importable for one release, with a warning."""

__all__ = (
    "ActionRecord",
    "Approve",
    "BadLine",
    "Cause",
    "Decision",
    "Deny",
    "Edit",
    "Episode",
    "EpisodeRecord",
    "Failure",
    "FirstFailure",
    "Grounded",
    "JsonlSink",
    "LiveLog",
    "Monitor",
    "MonitorStats",
    "Observer",
    "PendingCall",
    "Plan",
    "PlanError",
    "PlanVerdict",
    "Policy",
    "Precondition",
    "PrefixmonError",
    "RecordError",
    "Ref",
    "Replan",
    "Snapshot",
    "SpecError",
    "Telemetry",
    "ToolBlocked",
    "ToolCall",
    "ToolSpec",
    "Toolset",
    "TrackedState",
    "Undetermined",
    "Verdict",
    "__version__",
    "current_episode",
    "dry_run",
    "iter_records",
    "read_records",
    "revise_plan",
    "verify_plan",
)
