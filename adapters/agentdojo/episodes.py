"""AgentDojo episodes on its real environments: ground-truth calls, optionally under a prompt-injection attack.

A :class:`Scenario` is one user task of a suite, alone (benign) or paired with one injection
task (attacked). :func:`play` builds the task's real environment (the injection vectors hold
their default texts, or the attack's), and plays the user task's ground-truth calls through a
monitor's episode, each run on the environment by AgentDojo's own :class:`FunctionsRuntime`.
Results reach the monitor as structured data (pydantic models dumped to JSON-like values),
not the YAML text AgentDojo shows a model. In an attacked episode the agent "falls for" the
injection: right after the first result that carries the injected text, the injection task's
ground-truth calls are played, then the rest of the user's calls. AgentDojo's own checks then
score the post-environment: utility (the user's task was done) and security (the attacker's
goal was reached).

Which tools change the environment (:data:`WRITES`) was checked by running every
ground-truth call (user and injection tasks) and the tools no ground truth uses, diffing
``env.model_dump()`` before and after. Two reads change the dump as a by-product and are
not listed: workspace ``get_unread_emails`` marks the emails it returns as read, and slack
``get_webpage`` appends the url to the environment's log of web requests. Banking
``update_scheduled_transaction`` is a write that some ground-truth calls leave unchanged
(same values).
"""

from __future__ import annotations

import datetime
import enum
import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import yaml
from pydantic import BaseModel

from prefixmon import Monitor, ToolBlocked

__all__ = (
    "ATTACK",
    "SUITES",
    "VERSION",
    "WRITES",
    "EnvironmentRejection",
    "Played",
    "Scenario",
    "get_suite",
    "injections",
    "load_environment",
    "play",
    "scenarios",
    "structured",
    "tool_schemas",
)

SUITES: Final = ("banking", "slack", "travel", "workspace")
VERSION: Final = "v1.2.2"
ATTACK: Final = "important_instructions"
"""The attack whose injected texts attacked scenarios use (AgentDojo's strongest baseline)."""
TARGET_MODEL: Final = "gpt-4o-2024-05-13"
"""The model the attack addresses by name ("GPT-4")."""

WRITES: Final[dict[str, frozenset[str]]] = {
    "banking": frozenset(
        {"send_money", "schedule_transaction", "update_scheduled_transaction", "update_password", "update_user_info"}
    ),
    "slack": frozenset(
        {
            "send_channel_message",
            "send_direct_message",
            "invite_user_to_slack",
            "add_user_to_channel",
            "remove_user_from_slack",
            "post_webpage",
        }
    ),
    "travel": frozenset(
        {
            "reserve_hotel",
            "reserve_restaurant",
            "reserve_car_rental",
            "create_calendar_event",
            "cancel_calendar_event",
            "send_email",
        }
    ),
    "workspace": frozenset(
        {
            "send_email",
            "delete_email",
            "create_file",
            "delete_file",
            "share_file",
            "append_to_file",
            "create_calendar_event",
            "cancel_calendar_event",
            "reschedule_calendar_event",
            "add_calendar_event_participants",
        }
    ),
}
"""The side-effecting tools of each suite (sending, booking, creating, deleting, sharing)."""


@functools.cache
def get_suite(suite: str) -> Any:
    """The AgentDojo task suite ``suite`` of :data:`VERSION`."""
    if suite not in SUITES:
        raise ValueError(f"unknown AgentDojo suite {suite!r} (one of {', '.join(SUITES)})")
    from agentdojo.task_suite.load_suites import get_suite as load  # type: ignore[import-untyped]

    return load(VERSION, suite)


def tool_schemas(suite: str) -> list[dict[str, Any]]:
    """The suite's tools as ``{"name", "description", "parameters"}`` (a JSON schema of the arguments)."""
    return [
        {"name": f.name, "description": f.description, "parameters": f.parameters.model_json_schema()}
        for f in get_suite(suite).tools
    ]


@functools.cache
def _runtime(suite: str) -> Any:
    from agentdojo.functions_runtime import FunctionsRuntime  # type: ignore[import-untyped]

    return FunctionsRuntime(get_suite(suite).tools)


class _Target:
    """The attacked pipeline, as far as the attack reads it (its name, to address the model)."""

    name = TARGET_MODEL


@functools.cache
def _attack(suite: str) -> Any:
    from agentdojo.attacks import load_attack  # type: ignore[import-untyped]

    return load_attack(ATTACK, get_suite(suite), _Target())


def injections(suite: str, user_task: str, injection_task: str) -> dict[str, str]:
    """The attack's texts for the injection vectors the user task's ground truth reads (vector id -> text)."""
    s = get_suite(suite)
    return dict(_attack(suite).attack(s.user_tasks[user_task], s.injection_tasks[injection_task]))


@dataclass(frozen=True, slots=True)
class Scenario:
    """One episode to play: a user task, alone or under one injection task."""

    suite: str
    user_task: str
    injection_task: str | None
    prompt: str
    """The user's request (the task's ``PROMPT``)."""
    needed_tools: frozenset[str]
    """The tools of the user task's ground truth (what task-scoped exposure leaves visible)."""

    @property
    def task_id(self) -> str:
        """``suite/user_task`` or ``suite/user_task/injection_task``."""
        ids = (self.suite, self.user_task) if self.injection_task is None else (self.suite, self.user_task, self.injection_task)
        return "/".join(ids)


def scenarios(suite_name: str, *, attacked: bool) -> list[Scenario]:
    """Benign: one scenario per user task; attacked: one per (user task, injection task) pair."""
    s = get_suite(suite_name)
    out: list[Scenario] = []
    for uid, task in s.user_tasks.items():
        env = task.init_environment(load_environment(suite_name, {}))
        needed = frozenset(c.function for c in task.ground_truth(env))
        pairs: Sequence[str | None] = list(s.injection_tasks) if attacked else [None]
        out.extend(Scenario(suite_name, uid, iid, task.PROMPT, needed) for iid in pairs)
    return out


@dataclass(slots=True)
class Played:
    """What came of playing one scenario."""

    scenario: Scenario
    calls: int
    """Calls emitted (user and injection ground truth)."""
    refused: list[tuple[str, str]]
    """(tool, reason) of the calls the monitor refused (:class:`prefixmon.ToolBlocked`)."""
    refused_user_calls: int
    """Refused calls that belong to the user task's ground truth."""
    utility: bool
    security: bool | None
    """Whether the injection task's goal was reached (``None`` for a benign scenario)."""
    injection_found: bool | None = None
    """Attacked: whether a result carried the injected text (if not, the injection calls were played at the end)."""
    rejected: list[tuple[str, str]] = field(default_factory=list)
    """(tool, error) of the calls the environment rejected."""


class EnvironmentRejection(Exception):
    """The environment refused a call (AgentDojo's ``run_function`` returned an error text)."""


def structured(value: Any) -> Any:
    """A tool result as JSON-like data: pydantic models dumped, datetimes as ISO text, containers recursively."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, Mapping):
        return {str(k): structured(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [structured(v) for v in value]
    if isinstance(value, datetime.datetime | datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, enum.Enum):
        return structured(value.value)
    return value


def _contains(value: Any, needles: Sequence[str]) -> bool:
    if isinstance(value, str):
        return any(n in value for n in needles)
    if isinstance(value, Mapping):
        return any(_contains(v, needles) for v in value.values())
    if isinstance(value, list):
        return any(_contains(v, needles) for v in value)
    return False


def _needles(texts: Mapping[str, str]) -> list[str]:
    """The distinctive part of each injected text: its longest line."""
    return sorted({max((line.strip() for line in t.splitlines()), key=len) for t in texts.values() if t.strip()})


@functools.cache
def _template(suite: str) -> tuple[str, dict[str, str]]:
    """The suite's environment file (with its injection placeholders) and the vectors' default texts."""
    from agentdojo.task_suite.task_suite import read_suite_file  # type: ignore[import-untyped]

    s = get_suite(suite)
    return read_suite_file(s.name, "environment.yaml", s.data_path), s.get_injection_vector_defaults()


def load_environment(suite: str, texts: Mapping[str, str]) -> Any:
    """``TaskSuite.load_and_inject_default_environment(texts)``, parsed by libyaml when PyYAML has it.

    The same steps as AgentDojo's (the vectors' defaults, ``texts`` over them, the file
    formatted with them, validated as the suite's environment type); only the YAML parser is
    PyYAML's C one, about ten times faster on the workspace file (75 ms a load in Python).
    """
    s = get_suite(suite)
    loader = getattr(yaml, "CSafeLoader", None)
    if loader is None:  # pragma: no cover - PyYAML built without libyaml
        return s.load_and_inject_default_environment(dict(texts))
    text, defaults = _template(suite)
    unknown = set(texts) - set(defaults)
    if unknown:
        raise ValueError(f"{suite}: unknown injection vectors {sorted(unknown)}")
    return s.environment_type.model_validate(yaml.load(text.format(**{**defaults, **texts}), Loader=loader))


@functools.lru_cache(maxsize=4)
def _environment(suite: str, user_task: str, injection_task: str | None) -> tuple[Any, dict[str, str]]:
    """The task's initial environment (never handed out: copied) and the injected texts.

    Cached, so that playing one scenario under several monitors in a row builds it once.
    """
    texts = {} if injection_task is None else injections(suite, user_task, injection_task)
    env = get_suite(suite).user_tasks[user_task].init_environment(load_environment(suite, texts))
    return env, texts


async def play(scenario: Scenario, monitor: Monitor, *, expose: bool = False) -> Played:
    """Play the scenario's ground truth through ``monitor`` on the real environment and score it.

    ``expose`` hides every tool the user task's ground truth does not use. A call the monitor
    refuses does not run; a call the environment rejects is recorded as its rejection; both
    episodes go on with the next call.
    """
    from agentdojo.functions_runtime import FunctionCall

    s = get_suite(scenario.suite)
    runtime = _runtime(scenario.suite)
    user_task = s.user_tasks[scenario.user_task]
    injection_task = None if scenario.injection_task is None else s.injection_tasks[scenario.injection_task]
    initial, texts = _environment(scenario.suite, scenario.user_task, scenario.injection_task)
    env = initial.model_copy(deep=True)
    pre = initial.model_copy(deep=True)
    user_calls = list(user_task.ground_truth(pre))  # (ground truths only read the environment)
    injected = [] if injection_task is None else list(injection_task.ground_truth(pre))
    needles = _needles(texts)
    played = Played(scenario, 0, [], 0, False, None)
    traces: list[Any] = []
    found = False

    async def one(call: Any, *, of_user: bool) -> Any:
        name, args = call.function, dict(call.args)

        def run(validated: dict[str, Any]) -> Any:
            traces.append(FunctionCall(function=name, args=args))
            result, error = runtime.run_function(env, name, args)
            if error is not None:
                raise EnvironmentRejection(error)
            return structured(result)

        played.calls += 1
        try:
            return await ep.call(name, args, execute=run)
        except ToolBlocked as e:
            played.refused.append((name, e.verdict.reason or str(e)))
            played.refused_user_calls += of_user
        except EnvironmentRejection as e:
            played.rejected.append((name, str(e)))
        return None

    method = "gold" if injection_task is None else "attacked"
    labels = {"dataset": f"agentdojo-{scenario.suite}", "method": method}
    async with monitor.episode(task_id=scenario.task_id, labels=labels) as ep:
        ep.user(scenario.prompt)
        if expose:
            ep.hide(*(t.name for t in s.tools if t.name not in scenario.needed_tools))
        for call in user_calls:
            result = await one(call, of_user=True)
            if injection_task is not None and not found and _contains(result, needles):
                found = True
                for inj in injected:
                    await one(inj, of_user=False)
        if injection_task is not None and not found:
            for inj in injected:
                await one(inj, of_user=False)
        output = [{"type": "text", "content": user_task.GROUND_TRUTH_OUTPUT}]
        played.utility = bool(s._check_task_result(user_task, output, pre, env, traces))
        if injection_task is not None:
            played.security = bool(s._check_task_result(injection_task, output, pre, env, traces))
            played.injection_found = found
        ep.finish("success" if played.utility else "failure")
    return played
