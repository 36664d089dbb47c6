"""Replay recorded conversations through the monitor and write one episode record each.

Two input formats:

- **τ-bench trajectories** (``--domain tau-airline|tau-retail``): the JSON list τ-bench
  writes, ``[{task_id, trial, reward, info, traj}, ...]``, where ``traj`` is OpenAI chat
  messages (assistant ``tool_calls``, ``role: tool`` results). The state is rebuilt from
  the conversation: what the user says enters the information pool, the policy (system
  message) is information, each recorded result is applied, and accepted writes are
  mirrored into a replica sandbox of the domain's database so later preconditions see the
  new state.
- **OpenAI-messages JSON Lines** for any toolset: one conversation per line, either a list
  of messages or ``{"messages": [...], "task_id"?, "reward"? | "outcome"?, "labels"?}``.

Every emitted call is judged before its recorded result is looked at (the pre-call
verdict, policy ``observe``), then the recorded result decides acceptance. Every call is
recorded, also after the first failure. Records keep file order; outcome is ``success``
when ``reward`` is 1, else ``failure``.

CLI (wired as ``prefixmon replay``)::

    prefixmon replay --domain tau-airline results.json --out records.jsonl --label model=gpt-4o
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import anyio
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator

from prefixmon import Episode, EpisodeRecord, Monitor, ToolBlocked, Toolset
from prefixmon.records import write_records

from .data import Domain
from .sandbox import Sandbox, is_error_result
from .toolsets import toolset

DOMAIN_LABELS: Final[Mapping[str, Domain]] = {"tau-airline": "airline", "tau-retail": "retail"}
"""``--domain`` values and the τ-bench domain each names."""


class ReplayInputError(ValueError):
    """A transcript file does not fit the expected format (the message says where)."""


def _check_tool_calls(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every assistant ``tool_calls`` entry is an object whose ``function`` is an object."""
    for i, message in enumerate(messages):
        calls = message.get("tool_calls")
        if calls is None:
            continue
        if not isinstance(calls, list):
            raise ValueError(f"message {i}: tool_calls must be a list, got {type(calls).__name__}")
        for j, call in enumerate(calls):
            if not isinstance(call, dict):
                raise ValueError(f"message {i}: tool_calls[{j}] must be an object, got {type(call).__name__}")
            function = call.get("function")
            if function is not None and not isinstance(function, dict):
                raise ValueError(f"message {i}: tool_calls[{j}].function must be an object, got {type(function).__name__}")
    return messages


class TauRollout(BaseModel):
    """One rollout as τ-bench writes it."""

    model_config = ConfigDict(extra="allow")

    task_id: int | str
    trial: int | str | None = None
    reward: float = 0.0
    info: dict[str, Any] = Field(default_factory=dict)
    traj: list[dict[str, Any]]

    _tool_calls = field_validator("traj")(_check_tool_calls)


class Conversation(BaseModel):
    """One line of an OpenAI-messages JSON Lines transcript."""

    model_config = ConfigDict(extra="allow")

    messages: list[dict[str, Any]]
    task_id: str | int | None = None
    reward: float | None = None
    outcome: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)

    _tool_calls = field_validator("messages")(_check_tool_calls)

    @field_validator("outcome")
    @classmethod
    def _known_outcome(cls, value: str | None) -> str | None:
        if value is not None and value not in ("success", "partial", "failure"):
            raise ValueError(f"outcome must be success, partial or failure, got {value!r}")
        return value


_ROLLOUTS: Final = TypeAdapter(list[TauRollout])


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplayStats:
    """What one conversation's replay saw besides the record."""

    calls: int
    missing_results: int
    """Calls with no recorded result (a truncated conversation)."""
    divergences: tuple[tuple[str, str], ...] = ()
    """Writes the recorded environment accepted but the replica sandbox rejected."""


# -- reading ------------------------------------------------------------------------------------
def read_tau_trajectories(path: str | os.PathLike[str]) -> list[TauRollout]:
    """Read a τ-bench results file (a JSON list of rollouts).

    Raises:
        ReplayInputError: not JSON, not a list, or an entry that is not a rollout.
    """
    file = Path(path)
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ReplayInputError(f"{file}: not JSON ({e.msg} at line {e.lineno} column {e.colno})") from e
    if not isinstance(data, list):
        raise ReplayInputError(f"{file}: expected a JSON list of rollouts, got {type(data).__name__}")
    try:
        return _ROLLOUTS.validate_python(data)
    except ValidationError as e:
        first = e.errors(include_url=False)[0]
        loc = ".".join(str(p) for p in first["loc"])
        raise ReplayInputError(f"{file}: rollout {loc}: {first['msg']}") from e


def read_conversations(path: str | os.PathLike[str]) -> Iterator[Conversation]:
    """Read an OpenAI-messages JSON Lines file, one conversation per non-empty line.

    Raises:
        ReplayInputError: a line that is not JSON or not a conversation (with its number).
    """
    file = Path(path)
    with file.open(encoding="utf-8") as fh:
        for line_no, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                data = json.loads(line)
                if isinstance(data, list):
                    data = {"messages": data}
                yield Conversation.model_validate(data)
            except (json.JSONDecodeError, ValidationError) as e:
                raise ReplayInputError(f"{file}:{line_no}: not a conversation: {e}") from e


# -- replaying ----------------------------------------------------------------------------------
def _text(content: Any) -> str:
    """Message content as text (OpenAI content parts are joined)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) if isinstance(p, Mapping) else str(p) for p in content)
    return json.dumps(content)


def _results_by_id(messages: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    return {
        str(m["tool_call_id"]): _text(m.get("content"))
        for m in messages
        if m.get("role") == "tool" and m.get("tool_call_id") is not None
    }


async def replay_messages(ep: Episode, messages: Sequence[Mapping[str, Any]]) -> ReplayStats:
    """Feed one conversation into an open episode.

    User messages enter the information pool; system and developer messages are
    information too; each assistant tool call is judged pre-call (``ep.begin``), then its
    recorded ``role: tool`` result (matched by ``tool_call_id``, else the next unmatched
    tool message) is applied with ``pending.done``.
    """
    by_id = _results_by_id(messages)
    unmatched: list[int] = [i for i, m in enumerate(messages) if m.get("role") == "tool" and m.get("tool_call_id") is None]
    calls = missing = 0
    for message in messages:
        role = message.get("role")
        if role == "user":
            ep.user(_text(message.get("content")))
        elif role in ("system", "developer"):
            ep.inform(_text(message.get("content")))
        elif role == "assistant":
            for tool_call in message.get("tool_calls") or ():
                function = tool_call.get("function") or {}
                name = str(function.get("name", ""))
                call_id = tool_call.get("id")
                calls += 1
                if call_id is not None and str(call_id) in by_id:
                    result: str | None = by_id[str(call_id)]
                elif unmatched:
                    result = _text(messages[unmatched.pop(0)].get("content"))
                else:
                    result = None
                try:
                    pending = await ep.begin(name, function.get("arguments"), call_id=call_id)
                except ToolBlocked:
                    continue  # recorded as not executable; nothing ran in the replayed state
                if result is None:
                    missing += 1
                    pending.abandon("the conversation has no result for this call")
                else:
                    pending.done(result)
    env = ep.state.env
    divergences = tuple(env.divergences) if isinstance(env, Sandbox) else ()
    return ReplayStats(calls=calls, missing_results=missing, divergences=divergences)


def _outcome(reward: float | None, outcome: str | None) -> str:
    if outcome is not None:
        return outcome
    return "success" if reward is not None and reward >= 1.0 else "failure"


async def replay_tau(
    rollouts: Iterable[TauRollout],
    domain: Domain,
    *,
    labels: Mapping[str, str] | None = None,
    data: str | os.PathLike[str] | None = None,
    on_record: Callable[[EpisodeRecord, ReplayStats], None] | None = None,
) -> list[EpisodeRecord]:
    """Replay τ-bench rollouts of one domain; returns one record per rollout, in order.

    Labels: ``dataset`` and ``domain`` (``tau-<domain>``), ``trial``, then ``labels``.
    """
    monitor = Monitor(toolset(domain, data=data), policy="observe")
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
            ep.finish(_outcome(rollout.reward, None))
        assert ep.record is not None
        records.append(ep.record)
        if on_record is not None:
            on_record(ep.record, stats)
    return records


async def replay_conversations(
    conversations: Iterable[Conversation],
    tools: Toolset,
    *,
    labels: Mapping[str, str] | None = None,
    env_factory: Callable[[], Any] | None = None,
    on_record: Callable[[EpisodeRecord, ReplayStats], None] | None = None,
) -> list[EpisodeRecord]:
    """Replay OpenAI-messages conversations against any toolset; one record each, in order."""
    monitor = Monitor(tools, policy="observe")
    records = []
    for index, conversation in enumerate(conversations):
        task_id = str(conversation.task_id) if conversation.task_id is not None else f"conversation-{index}"
        async with monitor.episode(
            task_id=task_id,
            labels={**(labels or {}), **conversation.labels},
            env=env_factory() if env_factory is not None else None,
        ) as ep:
            stats = await replay_messages(ep, conversation.messages)
            ep.finish(_outcome(conversation.reward, conversation.outcome))
        assert ep.record is not None
        records.append(ep.record)
        if on_record is not None:
            on_record(ep.record, stats)
    return records


def toolset_from_openai_tools(definitions: Iterable[Mapping[str, Any]]) -> Toolset:
    """A zero-configuration toolset from OpenAI tool definitions (schema checks and acceptance).

    Results starting with ``Error:`` count as rejections, as in τ-bench.
    """
    tools = Toolset()
    for entry in definitions:
        function = entry.get("function", entry)
        tools.add_schema(
            function["name"],
            function.get("parameters"),
            description=function.get("description", ""),
            error_result=is_error_result,
        )
    return tools


# -- CLI ----------------------------------------------------------------------------------------
def _label(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


def configure_parser(parser: argparse.ArgumentParser) -> None:
    """Add the ``replay`` verb's arguments to ``parser``."""
    parser.add_argument("file", metavar="FILE", help="τ-bench results JSON, or OpenAI-messages JSON Lines")
    parser.add_argument("--out", required=True, metavar="RECORDS.jsonl", help="episode records to write")
    parser.add_argument(
        "--domain",
        choices=sorted(DOMAIN_LABELS),
        help="τ-bench domain of the conversations (tools, policy and database)",
    )
    parser.add_argument(
        "--tools",
        metavar="TOOLS.json",
        help="OpenAI tool definitions for OpenAI-messages transcripts without --domain",
    )
    parser.add_argument(
        "--format",
        choices=("auto", "tau", "openai-jsonl"),
        default="auto",
        help="input format (auto: a JSON list is τ-bench, anything else JSON Lines)",
    )
    parser.add_argument("--label", action="append", type=_label, default=[], metavar="KEY=VALUE", help="label for every record")
    parser.add_argument("--data", help="τ-bench data folder (default: $PREFIXMON_TAU_DATA or ../shared/data)")


def _detect(path: Path) -> str:
    with path.open(encoding="utf-8") as fh:
        head = fh.read(4096).lstrip()
    if head.startswith("["):
        try:
            json.loads(path.read_text(encoding="utf-8"))
            return "tau"
        except json.JSONDecodeError:
            return "openai-jsonl"
    return "openai-jsonl"


def run(args: argparse.Namespace) -> int:
    """Run the ``replay`` verb; returns the process exit code."""
    path = Path(args.file)
    if not path.is_file():
        print(f"prefixmon replay: {path}: no such file", file=sys.stderr)
        return 2
    labels = dict(args.label)
    domain = DOMAIN_LABELS.get(args.domain) if args.domain else None
    fmt = args.format if args.format != "auto" else _detect(path)
    totals = {"calls": 0, "missing": 0, "divergences": 0}

    def count(record: EpisodeRecord, stats: ReplayStats) -> None:
        totals["calls"] += stats.calls
        totals["missing"] += stats.missing_results
        totals["divergences"] += len(stats.divergences)

    try:
        if fmt == "tau":
            if domain is None:
                print("prefixmon replay: τ-bench trajectories need --domain tau-airline|tau-retail", file=sys.stderr)
                return 2
            rollouts = read_tau_trajectories(path)
            records = anyio.run(lambda: replay_tau(rollouts, domain, labels=labels, data=args.data, on_record=count))
        else:
            conversations = list(read_conversations(path))
            if domain is not None:
                tools = toolset(domain, data=args.data)
                d: Domain = domain

                def factory() -> Sandbox:
                    return Sandbox(d, data=args.data, replica=True)

                env_factory: Callable[[], Any] | None = factory
                labels = {"dataset": f"tau-{domain}", "domain": f"tau-{domain}", **labels}
            elif args.tools:
                definitions = json.loads(Path(args.tools).read_text(encoding="utf-8"))
                tools = toolset_from_openai_tools(definitions)
                env_factory = None
            else:
                print("prefixmon replay: OpenAI-messages transcripts need --domain or --tools", file=sys.stderr)
                return 2
            records = anyio.run(
                lambda: replay_conversations(conversations, tools, labels=labels, env_factory=env_factory, on_record=count)
            )
    except (ReplayInputError, OSError, ValueError) as e:
        print(f"prefixmon replay: {e}", file=sys.stderr)
        return 1
    write_records(args.out, records)
    n = len(records)
    executable = sum(1 for r in records if r.executable)
    mean_fed = sum(r.fed for r in records) / n if n else float("nan")
    print(
        f"replayed {n} conversation(s), {totals['calls']} call(s): TER {executable / n if n else float('nan'):.3f}, "
        f"mean FED {mean_fed:.2f}; wrote {args.out}"
        + (f"; {totals['missing']} call(s) without a recorded result" if totals["missing"] else "")
        + (f"; {totals['divergences']} replica divergence(s)" if totals["divergences"] else "")
    )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m prefixmon.adapters.taubench.replay ...`` (same as ``prefixmon replay``)."""
    parser = argparse.ArgumentParser(prog="prefixmon replay", description=__doc__.split("\n\n")[0])
    configure_parser(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
