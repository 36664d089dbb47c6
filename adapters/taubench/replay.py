"""Replay τ-bench trajectories through the monitor and write one episode record each.

Two input formats (``prefixmon replay --domain tau-airline|tau-retail FILE``):

- **τ-bench trajectories**: the JSON list τ-bench writes, ``[{task_id, trial, reward, info,
  traj}, ...]``, where ``traj`` is OpenAI chat messages (assistant ``tool_calls``, ``role:
  tool`` results). The state is rebuilt from the conversation: what the user says enters
  the information pool, the policy (system message) is information, each recorded result is
  applied, and accepted writes are mirrored into a replica sandbox of the domain's database
  so later preconditions see the new state.
- **OpenAI-messages JSON Lines** (:mod:`prefixmon.adapters.transcripts`) over the domain's
  toolset and sandbox.

A τ-bench results file is one JSON document: if it is malformed, nothing is replayed and the
error names the file and where in it. Every emitted call is judged before its recorded
result is looked at; outcome is ``success`` when ``reward`` is 1, else ``failure``.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Final

import anyio
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator

from prefixmon import EpisodeRecord, Monitor
from prefixmon.commands import ReplayRequest

from ..transcripts import (
    Problem,
    ReplayInputError,
    ReplayStats,
    ReplaySummary,
    check_tool_calls,
    first_error,
    load_json,
    read_conversations,
    replay_conversations,
    replay_messages,
    single_file,
)
from .data import Domain
from .sandbox import Sandbox
from .toolsets import toolset

__all__ = ("DOMAIN_LABELS", "TauReplaySource", "TauRollout", "read_tau_trajectories", "replay_tau")

DOMAIN_LABELS: Final[Mapping[str, Domain]] = {"tau-airline": "airline", "tau-retail": "retail"}
"""``--domain`` values and the τ-bench domain each names."""


class TauRollout(BaseModel):
    """One rollout as τ-bench writes it."""

    model_config = ConfigDict(extra="allow")

    task_id: int | str
    trial: int | str | None = None
    reward: float = 0.0
    info: dict[str, Any] = Field(default_factory=dict)
    traj: list[dict[str, Any]]

    _tool_calls = field_validator("traj")(check_tool_calls)


_ROLLOUTS: Final = TypeAdapter(list[TauRollout])


def read_tau_trajectories(path: str | os.PathLike[str]) -> list[TauRollout]:
    """Read a τ-bench results file (a JSON list of rollouts).

    Raises:
        ReplayInputError: not UTF-8, not JSON, nested too deeply, not a list, or an entry
            that is not a rollout.
    """
    file = Path(path)
    data = load_json(file)
    if not isinstance(data, list):
        raise ReplayInputError(f"{file}: expected a JSON list of rollouts, got {type(data).__name__}")
    try:
        return _ROLLOUTS.validate_python(data)
    except ValidationError as e:
        raise ReplayInputError(f"{file}: rollout {first_error(e)}") from e


async def replay_tau(
    rollouts: Iterable[TauRollout],
    domain: Domain,
    *,
    labels: Mapping[str, str] | None = None,
    data: str | os.PathLike[str] | None = None,
    on_record: Callable[[EpisodeRecord, ReplayStats], None] | None = None,
    specs: Iterable[str | os.PathLike[str]] = (),
) -> list[EpisodeRecord]:
    """Replay τ-bench rollouts of one domain; returns one record per rollout, in order.

    Labels: ``dataset`` and ``domain`` (``tau-<domain>``), ``trial``, then ``labels``.
    """
    tools = toolset(domain, data=data)
    for spec in specs:
        tools.apply_spec(spec)
    monitor = Monitor(tools, policy="observe")
    records = []
    for index, rollout in enumerate(rollouts):
        trial = "0" if rollout.trial is None else str(rollout.trial)
        episode_labels = {"dataset": f"tau-{domain}", "domain": f"tau-{domain}", "trial": trial, **(labels or {})}
        async with monitor.episode(
            task_id=str(rollout.task_id),
            labels=episode_labels,
            episode_id=f"tau-{domain}-{index:05d}-task{rollout.task_id}-trial{trial}",
            env=Sandbox(domain, data=data, replica=True),
        ) as ep:
            stats = await replay_messages(ep, rollout.traj)
            ep.finish("success" if rollout.reward >= 1.0 else "failure")
        assert ep.record is not None
        records.append(ep.record)
        if on_record is not None:
            on_record(ep.record, stats)
    return records


# -- CLI ----------------------------------------------------------------------------------------
def _detect(path: Path) -> str:
    """``tau`` when the file is one JSON list, else ``openai-jsonl`` (never raises on bad content)."""
    with path.open("rb") as fh:
        head = fh.read(4096).removeprefix(b"\xef\xbb\xbf").lstrip()
    if not head.startswith(b"["):
        return "openai-jsonl"
    text = path.read_bytes().decode("utf-8-sig", errors="replace")  # the reader reports bad bytes
    try:
        json.loads(text)
    except json.JSONDecodeError:
        return "openai-jsonl"
    except RecursionError:  # undecodable either way: go by the name, and let the reader say where
        return "tau" if path.suffix == ".json" else "openai-jsonl"
    return "tau"


class TauReplaySource:
    """``prefixmon replay --domain tau-airline|tau-retail FILE --out RECORDS``."""

    help = "τ-bench trajectories (or OpenAI-messages JSON Lines) of one domain, on its sandbox"

    def __init__(self, name: str) -> None:
        self.name = name
        self.domain: Domain = DOMAIN_LABELS[name]

    def replay(self, request: ReplayRequest) -> int:
        """Replay one file of ``request`` on this domain."""
        path = single_file(request)
        if path is None:
            return 2
        fmt = request.format if request.format != "auto" else _detect(path)
        if fmt not in ("tau", "openai-jsonl"):
            print(f"prefixmon replay: unknown --format {fmt!r} for {self.name}; use tau or openai-jsonl", file=sys.stderr)
            return 2
        domain, data = self.domain, request.data
        labels = dict(request.labels)
        summary = ReplaySummary()
        problems: list[Problem] = []
        try:
            if fmt == "tau":
                rollouts = read_tau_trajectories(path)
                records = anyio.run(
                    lambda: replay_tau(rollouts, domain, labels=labels, data=data, on_record=summary.count, specs=request.specs)
                )
            else:

                def factory() -> Sandbox:
                    return Sandbox(domain, data=data, replica=True)

                tools = toolset(domain, data=data)
                for spec in request.specs:
                    tools.apply_spec(spec)
                labels = {"dataset": f"tau-{domain}", "domain": f"tau-{domain}", **labels}
                conversations = list(read_conversations(path, problems))
                records = anyio.run(
                    lambda: replay_conversations(
                        conversations, tools, labels=labels, env_factory=factory, on_record=summary.count
                    )
                )
        except (ReplayInputError, OSError, ValueError) as e:
            print(f"prefixmon replay: {e}", file=sys.stderr)
            return 1
        return summary.finish(request.out, records, problems)


AIRLINE: Final = TauReplaySource("tau-airline")
"""The ``tau-airline`` entry point of ``prefixmon.replay``."""
RETAIL: Final = TauReplaySource("tau-retail")
"""The ``tau-retail`` entry point of ``prefixmon.replay``."""
