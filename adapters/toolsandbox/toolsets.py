"""Monitor toolsets from ToolSandbox's registered tools, with its state dependencies as preconditions.

Each registered tool (default backend, without the network search tools) is declared from
its own Python signature, in one of three modes: ``declared`` (the rules below, read from
the live execution context given to the episode as ``env``, a :class:`~.env.SandboxEnv`),
``dry_run`` (run the call on ToolSandbox's own snapshot of the context first) or ``none``.

Declared rules (from the tools' own code):

- ``send_message_with_phone_number`` needs cellular service on;
- ``search_holiday`` needs Wi-Fi on; ``get_current_location`` needs location service on;
- turning cellular, Wi-Fi or location service on needs low-battery mode off;
- a setting cannot be set to the value it already has;
- ``search_contacts`` / ``search_messages`` / ``search_reminder`` need at least one criterion;
- ``person_id`` and ``reminder_id`` arguments are references an earlier result produced
  (``search_contacts``, ``add_contact``, ``search_reminder``, ``add_reminder``).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from typing import Any, Final, Literal

from prefixmon import Precondition, Ref, Toolset, TrackedState, dry_run

from .env import SETTING_TOOLS, SandboxEnv, registered_tools

__all__ = ("MODES", "Mode", "toolset")

Mode = Literal["declared", "dry_run", "none"]
MODES: Final[tuple[Mode, ...]] = ("declared", "dry_run", "none")
Check = Callable[[TrackedState, Mapping[str, Any]], "bool | str | None"]


def _env(state: TrackedState) -> SandboxEnv | None:
    env = state.env
    return env if isinstance(env, SandboxEnv) else None


def _needs(setting: str, noun: str, enable_with: str) -> Precondition:
    def check(state: TrackedState, args: Mapping[str, Any]) -> bool | str:
        env = _env(state)
        if env is None or env.setting(setting):
            return True
        return f"{noun} is off; call {enable_with}(on=True) first"

    return Precondition(check=check, message=f"{noun} must be on", name=f"{setting}_on")


def _battery_allows(state: TrackedState, args: Mapping[str, Any]) -> bool | str:
    env = _env(state)
    if env is None or args.get("on") is not True or not env.setting("low_battery_mode"):
        return True
    return "low battery mode is on; it must be turned off (set_low_battery_mode_status(on=False)) first"


def _changes(setting: str) -> Precondition:
    def check(state: TrackedState, args: Mapping[str, Any]) -> bool | str:
        env = _env(state)
        if env is None or not isinstance(args.get("on"), bool) or bool(env.setting(setting)) != args["on"]:
            return True
        return f"{setting.replace('_', ' ')} is already {'on' if args['on'] else 'off'}"

    return Precondition(check=check, message="the setting must change", name=f"{setting}_changes")


def _some_criterion(state: TrackedState, args: Mapping[str, Any]) -> bool | str:
    return bool(args) or "give at least one search criterion"


LOW_BATTERY_OFF: Final = Precondition(
    check=_battery_allows, message="low battery mode must be off to turn this on", name="low_battery_mode_off"
)
CRITERION: Final = Precondition(check=_some_criterion, message="at least one search criterion", name="search_criterion")
PERSON = Ref("person_id")
REMINDER = Ref("reminder_id")


def _rules() -> dict[str, dict[str, Any]]:
    rules: dict[str, dict[str, Any]] = {
        "send_message_with_phone_number": {"requires": (_needs("cellular", "cellular service", "set_cellular_service_status"),)},
        "search_holiday": {"requires": (_needs("wifi", "Wi-Fi", "set_wifi_status"),)},
        "get_current_location": {"requires": (_needs("location_service", "location service", "set_location_service_status"),)},
        "search_contacts": {"requires": (CRITERION,), "produces": "person_id"},
        "search_messages": {"requires": (CRITERION,)},
        "search_reminder": {"requires": (CRITERION,), "produces": "reminder_id"},
        "add_contact": {"produces": "person_id"},
        "add_reminder": {"produces": "reminder_id"},
        "modify_contact": {"refs": {"person_id": PERSON}},
        "remove_contact": {"refs": {"person_id": PERSON}, "invalidates": "person_id"},
        "modify_reminder": {"refs": {"reminder_id": REMINDER}},
        "remove_reminder": {"refs": {"reminder_id": REMINDER}, "invalidates": "reminder_id"},
    }
    for setting, tool in SETTING_TOOLS.items():
        requires = (_changes(setting),) if setting == "low_battery_mode" else (_changes(setting), LOW_BATTERY_OFF)
        rules[tool] = {"requires": requires}
    return rules


def _dry_run(tool: str) -> Precondition:
    def run(clone: SandboxEnv, args: Mapping[str, Any]) -> str | None:
        return clone.run(tool, args).error

    def snapshot(env: Any) -> Any:
        return env.fork() if isinstance(env, SandboxEnv) else None

    inner = dry_run(run, snapshot=snapshot, error_result=lambda r: r if isinstance(r, str) else None, name=f"dry_run_{tool}")

    def judge(state: TrackedState, args: Mapping[str, Any]) -> str | None:
        if _env(state) is None:
            return None
        result = inner.check(state, args)
        return result if isinstance(result, str) else None

    return Precondition(check=judge, name="dry_run", message="a dry run on a snapshot of the execution context was rejected")


def toolset(mode: Mode = "declared") -> Toolset:
    """The monitor toolset of ToolSandbox's registered tools (see the module docstring)."""
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; expected one of {list(MODES)}")
    from pydantic.json_schema import PydanticJsonSchemaWarning

    rules = _rules()
    signatures = Toolset()
    tools = Toolset()
    for name, fn in registered_tools().items():
        rule = rules.get(name, {})
        with warnings.catch_warnings():
            # ToolSandbox's NOT_GIVEN default is not JSON: the schema leaves it out, as intended.
            warnings.simplefilter("ignore", PydanticJsonSchemaWarning)
            signatures.tool(name=name)(fn)
        declared = mode == "declared"
        tools.add_schema(
            name,
            signatures[name].parameters,
            description=signatures[name].description,
            coercion="strict",  # its execution context calls the Python function with the arguments as they are
            unknown="forbid",
            requires=rule.get("requires", ()) if declared else (_dry_run(name),) if mode == "dry_run" else (),
            produces=rule.get("produces") if declared else None,
            invalidates=rule.get("invalidates") if declared else None,
            refs=rule.get("refs") if declared else None,
            metadata={"visible_to": [str(v) for v in getattr(fn, "visible_to", ())], "module": getattr(fn, "__module__", "")},
        )
    return tools
