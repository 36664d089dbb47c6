"""τ-bench v1 airline and retail: an executable sandbox, monitor toolsets and transcript replay."""

from .data import DOMAINS as DOMAINS
from .data import ENV_VAR as ENV_VAR
from .data import DataNotFoundError as DataNotFoundError
from .data import Domain as Domain
from .data import GoldAction as GoldAction
from .data import TauTask as TauTask
from .data import data_dir as data_dir
from .data import load_policy as load_policy
from .data import load_schemas as load_schemas
from .data import load_tables as load_tables
from .data import load_tasks as load_tasks
from .sandbox import WRITE_TOOLS as WRITE_TOOLS
from .sandbox import Sandbox as Sandbox
from .sandbox import is_error_result as is_error_result
from .sandbox import reward as reward

__all__ = (
    "DOMAINS",
    "ENV_VAR",
    "WRITE_TOOLS",
    "DataNotFoundError",
    "Domain",
    "GoldAction",
    "Sandbox",
    "TauTask",
    "data_dir",
    "is_error_result",
    "load_policy",
    "load_schemas",
    "load_tables",
    "load_tasks",
    "reward",
)
