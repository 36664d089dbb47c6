"""Apple's ToolSandbox: its real execution context, its registered tools, its scenarios.

:class:`SandboxEnv` holds one ``tool_sandbox`` ``ExecutionContext`` (a scenario's starting
context, copied) and runs a call as ToolSandbox's execution environment does: the call is
added to the sandbox database as the agent's message to the execution environment, then
the registered tool runs with that context current; an exception the tool raises is the
environment's rejection. :meth:`~SandboxEnv.fork` is ToolSandbox's own snapshot
(``ExecutionContext.__deepcopy__``), so the dry run is exact.

Ground truth comes from the milestones that name tool calls, in milestone order: a
constraint on the sandbox database whose target row is the execution environment's
answer with a ``tool_trace`` (``{"tool_name", "arguments"}``), or the agent's message to
the execution environment written as Python source; and a constraint on the settings
database (``{"cellular": True}``) names the settings tool that makes it so
(``set_cellular_service_status(on=True)``). Scenarios whose milestones name no call (they
constrain only the agent's reply or other databases) have no ground-truth sequence;
scenarios that need the RapidAPI search tools (network) are left out.
"""

from __future__ import annotations

import ast
import copy
import functools
import json
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

__all__ = (
    "NETWORK_TOOLS",
    "SETTING_TOOLS",
    "GoldCall",
    "Outcome",
    "SandboxEnv",
    "gold_calls",
    "load_scenarios",
    "parse_call",
    "registered_tools",
)

NETWORK_TOOLS: Final = "rapid_api_search_tools"
"""The module of ToolSandbox's tools that call RapidAPI over the network (left out)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class GoldCall:
    """One tool call a milestone names."""

    name: str
    args: dict[str, Any]
    source: str
    """The call as the milestone writes it."""


def parse_call(source: str) -> GoldCall | None:
    """A single ``name(key=literal, ...)`` call written as Python source, or ``None``."""
    try:
        tree = ast.parse(source.strip(), mode="eval")
    except SyntaxError:
        return None
    call = tree.body
    if not isinstance(call, ast.Call) or not isinstance(call.func, ast.Name) or call.args:
        return None
    try:
        args = {kw.arg: ast.literal_eval(kw.value) for kw in call.keywords if kw.arg is not None}
    except ValueError:
        return None
    return GoldCall(name=call.func.id, args=args, source=source.strip())


def _import_tools() -> None:
    """Import ToolSandbox's tools; the pinned ``holidays`` warns about its versioning policy on import."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", module=r"holidays(\.|$)")
        import tool_sandbox.tools  # type: ignore[import-untyped]  # noqa: F401


@functools.cache
def registered_tools() -> Mapping[str, Callable[..., Any]]:
    """ToolSandbox's registered tools (default backend), without the network search tools."""
    _import_tools()
    from tool_sandbox.common.tool_discovery import ToolBackend, get_all_tools  # type: ignore[import-untyped]

    tools = get_all_tools(ToolBackend.DEFAULT)
    return {name: fn for name, fn in tools.items() if NETWORK_TOOLS not in (getattr(fn, "__module__", "") or "")}


@functools.cache
def load_scenarios(*, augmented: bool = False) -> Mapping[str, Any]:
    """ToolSandbox's named scenarios; by default only the base ones, without the augmentations.

    The augmentations (3 / 10 / all distraction tools, scrambled names, descriptions and
    argument types) share the base scenario's milestones and only change what the agent is
    shown; ``augmented=True`` gives all of them (``named_scenarios``).
    """
    _import_tools()
    from tool_sandbox.common.tool_discovery import ToolBackend
    from tool_sandbox.scenarios import (  # type: ignore[import-untyped]
        named_insufficient_information_scenarios,
        named_multiple_tool_call_scenarios,
        named_multiple_user_turn_scenarios,
        named_scenarios,
        named_single_tool_call_scenarios,
    )

    backend = ToolBackend.DEFAULT
    with warnings.catch_warnings():
        # networkx builds the milestone graphs and notes (ImportWarning) that pandas is absent.
        warnings.filterwarnings("ignore", category=ImportWarning, module=r"networkx(\.|$)")
        if augmented:
            return dict(named_scenarios(preferred_tool_backend=backend))
        scenarios: dict[str, Any] = {}
        for named in (
            named_single_tool_call_scenarios,
            named_multiple_tool_call_scenarios,
            named_multiple_user_turn_scenarios,
            named_insufficient_information_scenarios,
        ):
            scenarios.update(named(preferred_tool_backend=backend))
    return scenarios


SETTING_TOOLS: Final[Mapping[str, str]] = {
    "cellular": "set_cellular_service_status",
    "wifi": "set_wifi_status",
    "location_service": "set_location_service_status",
    "low_battery_mode": "set_low_battery_mode_status",
}
"""Settings column -> the tool that sets it."""


def _trace_call(trace: Any) -> GoldCall | None:
    try:
        data = json.loads(trace) if isinstance(trace, str) else None
    except json.JSONDecodeError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("tool_name"), str):
        return None
    raw = data.get("arguments")
    args: dict[str, Any] = dict(raw) if isinstance(raw, dict) else {}
    name = data["tool_name"]
    return GoldCall(name=name, args=args, source=f"{name}({', '.join(f'{k}={v!r}' for k, v in args.items())})")


def gold_calls(scenario: Any) -> list[GoldCall] | None:
    """The tool calls the scenario's milestones name, in milestone order; ``None`` when none does."""
    _import_tools()
    from tool_sandbox.common.execution_context import DatabaseNamespace, RoleType  # type: ignore[import-untyped]

    calls: list[GoldCall] = []
    for milestone in scenario.evaluation.milestone_matcher.milestones:
        for constraint in milestone.snapshot_constraints:
            frame = constraint.target_dataframe
            if frame is None:
                continue
            for row in frame.to_dicts():
                found: GoldCall | None = None
                if constraint.database_namespace == DatabaseNamespace.SETTING:
                    for column, tool in SETTING_TOOLS.items():
                        if isinstance(row.get(column), bool):
                            found = GoldCall(name=tool, args={"on": row[column]}, source=f"{tool}(on={row[column]!r})")
                elif constraint.database_namespace != DatabaseNamespace.SANDBOX:
                    continue
                elif row.get("sender") == RoleType.EXECUTION_ENVIRONMENT and row.get("tool_trace") is not None:
                    found = _trace_call(row["tool_trace"])
                elif row.get("sender") == RoleType.AGENT and row.get("recipient") == RoleType.EXECUTION_ENVIRONMENT:
                    found = parse_call(str(row.get("content", "")))
                if found is not None:
                    calls.append(found)
    return calls or None


@dataclass(frozen=True, slots=True, kw_only=True)
class Outcome:
    """What the execution context answered to one call."""

    result: Any
    error: str | None
    """``ExceptionType: message`` when the tool raised, else ``None``."""

    @property
    def text(self) -> str:
        """The result as the agent reads it (JSON when it serialises), or the error."""
        if self.error is not None:
            return self.error
        try:
            return json.dumps(self.result, ensure_ascii=False)
        except (TypeError, ValueError):
            return str(self.result)


class SandboxEnv:
    """One ToolSandbox world: an ``ExecutionContext`` the calls run on.

    Args:
        context: the context to run on (not copied); see :meth:`for_scenario`.
    """

    __slots__ = ("context",)

    def __init__(self, context: Any) -> None:
        self.context = context

    @classmethod
    def for_scenario(cls, scenario: Any) -> SandboxEnv:
        """A private copy of the scenario's starting context."""
        return cls(copy.deepcopy(scenario.starting_context))

    @property
    def exposed(self) -> list[str]:
        """The tools the scenario offers the agent (its allow list, less its deny list)."""
        return sorted(self.context.get_available_tools(scrambling_allowed=False))

    def fork(self) -> SandboxEnv:
        """An exact copy through ToolSandbox's own snapshot (``ExecutionContext.__deepcopy__``)."""
        return SandboxEnv(copy.deepcopy(self.context))

    def setting(self, name: str) -> Any:
        """The current value of a device setting (``cellular``, ``wifi``, ``location_service``, ``low_battery_mode``)."""
        from tool_sandbox.common.execution_context import DatabaseNamespace

        return self.context.get_database(DatabaseNamespace.SETTING)[name][0]

    def run(self, name: str, args: Mapping[str, Any]) -> Outcome:
        """Run one call as ToolSandbox's execution environment does; an exception is a rejection."""
        from tool_sandbox.common.execution_context import DatabaseNamespace, RoleType, new_context

        source = f"{name}({', '.join(f'{k}={v!r}' for k, v in args.items())})"
        self.context.add_to_database(
            namespace=DatabaseNamespace.SANDBOX,
            rows=[
                {
                    "sender": RoleType.AGENT,
                    "recipient": RoleType.EXECUTION_ENVIRONMENT,
                    "content": source,
                    "visible_to": [RoleType.AGENT, RoleType.EXECUTION_ENVIRONMENT],
                }
            ],
        )
        tool = self.context.get_available_tools(scrambling_allowed=False).get(name)
        if tool is None:
            return Outcome(result=None, error=f"NameError: name '{name}' is not defined")
        with new_context(self.context):
            try:
                return Outcome(result=tool(**args), error=None)
            except Exception as e:
                return Outcome(result=None, error=f"{type(e).__name__}: {e}")
