"""prefixmon: a prefix-executability monitor for tool-using LLM agents.

Before every tool call the monitor decides whether the call can execute in the current
state, keeps the episode's first-error depth live, reports through observers (OpenTelemetry,
structlog), can block, replan or escalate, and writes episode records that the analytics
turn into prefix-executability metrics.
"""

from importlib.metadata import PackageNotFoundError as _PackageNotFoundError
from importlib.metadata import version as _version

from .dry_run import dry_run as dry_run
from .episode import Episode as Episode
from .episode import PendingCall as PendingCall
from .episode import current_episode as current_episode
from .exceptions import PlanError as PlanError
from .exceptions import PrefixmonError as PrefixmonError
from .exceptions import RecordError as RecordError
from .exceptions import SpecError as SpecError
from .exceptions import ToolBlocked as ToolBlocked
from .logging import LiveLog as LiveLog
from .monitor import Monitor as Monitor
from .monitor import MonitorStats as MonitorStats
from .observer import Observer as Observer
from .plan import Plan as Plan
from .plan import PlanFollower as PlanFollower
from .plan import PlanStep as PlanStep
from .plan import PlanVerdict as PlanVerdict
from .plan import StepStatus as StepStatus
from .plan import StepVerdict as StepVerdict
from .plan import parse_plan as parse_plan
from .plan import plan_effect as plan_effect
from .plan import revise_plan as revise_plan
from .plan import verify_plan as verify_plan
from .policies import Approve as Approve
from .policies import Deny as Deny
from .policies import Edit as Edit
from .policies import Policy as Policy
from .policies import Replan as Replan
from .records import ActionRecord as ActionRecord
from .records import BadLine as BadLine
from .records import EpisodeRecord as EpisodeRecord
from .records import FirstFailure as FirstFailure
from .records import JsonlSink as JsonlSink
from .records import iter_records as iter_records
from .records import read_records as read_records
from .spec import Grounded as Grounded
from .spec import Precondition as Precondition
from .spec import Ref as Ref
from .spec import Toolset as Toolset
from .spec import ToolSpec as ToolSpec
from .state import TrackedState as TrackedState
from .telemetry import Telemetry as Telemetry
from .verdict import Failure as Failure
from .verdict import ToolCall as ToolCall
from .verdict import Undetermined as Undetermined
from .verdict import Verdict as Verdict
from .vocabulary import Cause as Cause
from .vocabulary import Decision as Decision
from .vocabulary import Outcome as Outcome

try:
    __version__: str = _version("prefixmon")
    """The installed distribution's version (one source of truth: pyproject.toml)."""
except _PackageNotFoundError:  # imported from a source tree that was never installed
    __version__ = "0+unknown"

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
    "PlanFollower",
    "PlanStep",
    "PlanVerdict",
    "Policy",
    "Precondition",
    "PrefixmonError",
    "RecordError",
    "Ref",
    "Replan",
    "SpecError",
    "StepStatus",
    "StepVerdict",
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
    "parse_plan",
    "plan_effect",
    "read_records",
    "revise_plan",
    "verify_plan",
)
