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

import contextlib
import json
import os
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, Final

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator
from pydantic_core import from_json

from prefixmon import EpisodeRecord, Monitor
from prefixmon.commands import ReplayRequest, run_async
from prefixmon.deprecation import moved_names
from prefixmon.learn import Problem as LearnProblem
from prefixmon.learn import Transcript
from prefixmon.records.jsonlines import too_deep

from .. import transcripts as _t
from .data import Domain
from .sandbox import Sandbox
from .toolsets import toolset

__all__ = (
    "DOMAIN_LABELS",
    "TRANSCRIPT_READER",
    "TauReplaySource",
    "TauRollout",
    "TauTranscriptReader",
    "gold_rollouts",
    "read_tau_trajectories",
    "replay_tau",
    "tau_transcript",
)

_MOVED: Final = (
    "Problem", "ReplayInputError", "ReplayStats", "ReplaySummary", "check_tool_calls", "first_error", "load_json",
    "read_conversations", "replay_conversations", "replay_messages", "single_file", "transcript_from_messages",
)  # fmt: skip
__getattr__ = moved_names(__name__, {name: f"prefixmon.adapters.transcripts:{name}" for name in _MOVED}, removal="0.3.0")
"""The transcript readers this module used to re-export, now in :mod:`prefixmon.adapters.transcripts`."""

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

    _tool_calls = field_validator("traj")(_t.check_tool_calls)


_ROLLOUTS: Final = TypeAdapter(list[TauRollout])


def read_tau_trajectories(path: str | os.PathLike[str]) -> list[TauRollout]:
    """Read a τ-bench results file (a JSON list of rollouts).

    Raises:
        ReplayInputError: not UTF-8, not JSON, nested too deeply, not a list, or an entry
            that is not a rollout.
    """
    file = Path(path)
    return _rollouts(file, _t.load_json(file))


def _rollouts(file: Path, data: Any) -> list[TauRollout]:
    """The rollouts of a results file's decoded JSON."""
    if not isinstance(data, list):
        raise _t.ReplayInputError(f"{file}: expected a JSON list of rollouts, got {type(data).__name__}")
    try:
        return _ROLLOUTS.validate_python(data)
    except ValidationError as e:
        raise _t.ReplayInputError(f"{file}: rollout {_t.first_error(e)}") from e


async def replay_tau(
    rollouts: Iterable[TauRollout],
    domain: Domain,
    *,
    labels: Mapping[str, str] | None = None,
    data: str | os.PathLike[str] | None = None,
    on_record: Callable[[EpisodeRecord, _t.ReplayStats], None] | None = None,
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
            episode_id=_t.labelled_id(f"tau-{domain}-{index:05d}-task{rollout.task_id}-trial{trial}", episode_labels),
            env=Sandbox(domain, data=data, replica=True),
        ) as ep:
            stats = await _t.replay_messages(ep, rollout.traj)
            ep.finish("success" if rollout.reward >= 1.0 else "failure")
        assert ep.record is not None
        records.append(ep.record)
        if on_record is not None:
            on_record(ep.record, stats)
    return records


# -- CLI ----------------------------------------------------------------------------------------
def _detect(path: Path) -> tuple[str, Any]:
    """``tau`` when the file is one JSON list, else ``openai-jsonl`` (never raises on bad content).

    With ``tau``, also the file's decoded JSON when it is UTF-8 (the reader need not decode it
    again), else ``_UNREAD`` (the reader reports the bad bytes).
    """
    with path.open("rb") as fh:
        head = fh.read(4096).removeprefix(b"\xef\xbb\xbf").lstrip()
    if not head.startswith(b"["):
        return "openai-jsonl", _UNREAD
    raw = path.read_bytes()
    try:
        text, strict = raw.decode("utf-8-sig"), True
    except UnicodeDecodeError:
        text, strict = raw.decode("utf-8-sig", errors="replace"), False
    with contextlib.suppress(ValueError):
        data = from_json(text)  # pydantic's parser, about 2x as fast; what it refuses, json decides below
        return "tau", data if strict else _UNREAD
    if too_deep(text):  # json would recurse near the interpreter's limit: go by the name, and let the reader say where
        return ("tau" if path.suffix == ".json" else "openai-jsonl"), _UNREAD
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        return "openai-jsonl", _UNREAD
    return "tau", data if strict else _UNREAD


_UNREAD: Final = object()
"""The file was not decoded (or not as UTF-8): its reader reads it."""


class TauReplaySource:
    """``prefixmon replay --domain tau-airline|tau-retail FILE --out RECORDS``."""

    help = "τ-bench trajectories (or OpenAI-messages JSON Lines) of one domain, on its sandbox"
    formats = ("tau", "openai-jsonl")
    """The ``--format`` values it reads besides ``auto`` (the CLI refuses others)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.domain: Domain = DOMAIN_LABELS[name]

    def replay(self, request: ReplayRequest) -> int:
        """Replay one file of ``request`` on this domain."""
        path = _t.single_file(request)
        if path is None:
            return 2
        fmt, data_read = (request.format, _UNREAD) if request.format != "auto" else _detect(path)
        if fmt not in ("tau", "openai-jsonl"):
            print(f"prefixmon replay: unknown --format {fmt!r} for {self.name}; use tau or openai-jsonl", file=sys.stderr)
            return 2
        domain, data = self.domain, request.data
        labels = dict(request.labels)
        summary = _t.ReplaySummary()
        problems: list[_t.Problem] = []
        try:
            if fmt == "tau":
                rollouts = read_tau_trajectories(path) if data_read is _UNREAD else _rollouts(path, data_read)
                records = run_async(
                    lambda: replay_tau(rollouts, domain, labels=labels, data=data, on_record=summary.count, specs=request.specs)
                )
            else:

                def factory() -> Sandbox:
                    return Sandbox(domain, data=data, replica=True)

                tools = toolset(domain, data=data)
                for spec in request.specs:
                    tools.apply_spec(spec)
                labels = {"dataset": f"tau-{domain}", "domain": f"tau-{domain}", **labels}
                conversations = list(_t.read_conversations(path, problems))
                records = run_async(
                    lambda: _t.replay_conversations(
                        conversations, tools, labels=labels, env_factory=factory, on_record=summary.count
                    )
                )
        except (_t.ReplayInputError, OSError, ValueError) as e:
            print(f"prefixmon replay: {e}", file=sys.stderr)
            return 1
        return summary.finish(request.out, records, problems)


AIRLINE: Final = TauReplaySource("tau-airline")
"""The ``tau-airline`` entry point of ``prefixmon.replay``."""
RETAIL: Final = TauReplaySource("tau-retail")
"""The ``tau-retail`` entry point of ``prefixmon.replay``."""


# -- transcripts for prefixmon learn --------------------------------------------------------------
def _array_items(text: str) -> Iterator[tuple[int, Any]]:
    """``(line, element)`` of a JSON array document, decoded one element at a time.

    Raises:
        ValueError: the text is not a JSON array, or an element nests too deeply to decode
            (the message names the line).
    """
    decoder = json.JSONDecoder()
    i = len(text) - len(text.lstrip())
    if text[i : i + 1] != "[":
        raise ValueError(f"line {text.count(chr(10), 0, i) + 1}: expected a JSON list of rollouts")
    i += 1
    deep = _too_deep_at(text, i)
    head = text if deep is None else text[:deep]  # json decodes no element past the point it nests too deeply
    first = True
    while True:
        while i < len(text) and text[i] in " \t\r\n":
            i += 1
        if text[i : i + 1] == "]":
            return
        if not first:
            if text[i : i + 1] != ",":
                raise ValueError(f"line {text.count(chr(10), 0, i) + 1}: expected ',' or ']' between rollouts")
            i += 1
            while i < len(text) and text[i] in " \t\r\n":
                i += 1
        first = False
        line = text.count("\n", 0, i) + 1
        try:
            value, i = decoder.raw_decode(head, i)
        except json.JSONDecodeError as e:
            if deep is not None and e.pos == len(head):  # the element goes on past the cut: it nests too deeply
                raise ValueError(f"line {line}: nested too deeply to decode") from None
            raise ValueError(f"line {e.lineno}: not JSON ({e.msg}, column {e.colno})") from None
        yield line, value


def _too_deep_at(text: str, start: int) -> int | None:
    """Where (the bracket) the first element of the array whose elements start at ``start`` nests
    too deeply to decode, or ``None`` when none does. Only a text that nests too deeply costs more
    than one pass over its brackets (it is searched by halves)."""
    if not too_deep(text):  # (with the array's own level: no element is that deep)
        return None
    elements = text[start:]
    if not too_deep(elements):
        return None
    low, high = 0, len(elements)  # too_deep(elements[:high]) holds; a cut string is closed so its brackets stay text
    while low < high:
        mid = (low + high) // 2
        if too_deep(elements[:mid] + '""'):
            high = mid
        else:
            low = mid + 1
    return start + low - 1


def tau_transcript(rollout: TauRollout, *, episode_id: str, source: str | None = None) -> Transcript:
    """One τ-bench rollout as a neutral transcript (results unmarked: τ-bench writes ``Error: ...`` text)."""
    return _t.transcript_from_messages(
        rollout.traj,
        episode_id=episode_id,
        outcome="success" if rollout.reward >= 1.0 else "failure",
        source=source,
    )


class TauTranscriptReader:
    """τ-bench results files (``[{task_id, trial, reward, info, traj}, ...]``) for ``prefixmon learn``."""

    help = "τ-bench results files: a JSON list of rollouts with OpenAI-messages trajectories"

    def sniff(self, path: Path, head: bytes) -> bool:
        """A JSON list whose first rollout has a ``traj``."""
        text = head.removeprefix(b"\xef\xbb\xbf").lstrip()
        return text.startswith(b"[") and b'"traj"' in text and b'"task_id"' in text

    def read(self, path: Path, problems: list[LearnProblem]) -> Iterator[Transcript]:
        """Every rollout; a rollout that does not fit is reported with its line and skipped."""
        name = str(path)
        try:
            text = path.read_bytes().decode("utf-8-sig")
        except UnicodeDecodeError as e:
            problems.append(LearnProblem(path=name, line=1, message=f"not UTF-8 text (byte {e.start})"))
            return
        try:
            for index, (line, item) in enumerate(_array_items(text)):
                try:
                    rollout = TauRollout.model_validate(item)
                except ValidationError as e:
                    task = item.get("task_id") if isinstance(item, dict) else None
                    problems.append(
                        LearnProblem(
                            path=name,
                            line=line,
                            message=f"not a rollout: {_t.first_error(e)}",
                            episode=None if task is None else str(task),
                        )
                    )
                    continue
                trial = "0" if rollout.trial is None else str(rollout.trial)
                yield tau_transcript(
                    rollout, episode_id=f"{path.stem}-{index:05d}-task{rollout.task_id}-trial{trial}", source=f"{name}:{line}"
                )
        except ValueError as e:
            message = str(e)
            where, _, rest = message.partition(": ")
            number = int(where.removeprefix("line ")) if where.startswith("line ") and rest else 1
            problems.append(LearnProblem(path=name, line=number, message=(rest or message) + "; the rest of the file is skipped"))


TRANSCRIPT_READER: Final = TauTranscriptReader()
"""The ``tau`` entry point of ``prefixmon.transcripts``."""


def gold_rollouts(split: str, *, data: str | os.PathLike[str] | None = None, limit: int | None = None) -> list[dict[str, Any]]:
    """The gold runs of a task split, executed on the sandbox, as a τ-bench results file's rollouts.

    Each trajectory is what an agent that followed the gold would show: the policy (system),
    the task's instruction (user), then as assistant ``tool_calls`` with their ``role: tool``
    results: the user lookup the gold starts with, the reads the gold omits (the user's
    details, each reservation or order, the products in them, a direct-flight search for every
    booked segment), and the gold actions. Every call runs on one fresh sandbox per task, so
    the results, ``Error: ...`` texts included, are the environment's own.
    """
    from .data import load_policy, load_tasks, split_domain

    domain = split_domain(split)
    policy = load_policy(domain, data)
    out: list[dict[str, Any]] = []
    for task in load_tasks(split, data)[:limit]:
        run = _GoldRun(Sandbox(domain, data=data), policy, task.instruction)
        actions = list(task.actions)
        lookups = [a for a in actions[:1] if a.name.startswith("find_user_id")]
        for action in lookups:
            run.call(action.name, action.kwargs)
        user = _json_or_none(run.call("get_user_details", {"user_id": task.user_id}))
        if isinstance(user, dict) and domain == "airline":
            for reservation_id in user.get("reservations", ()):
                run.call("get_reservation_details", {"reservation_id": reservation_id})
            for action in actions:
                if not action.name.endswith(("_reservation", "_flights")):
                    continue
                for segment in action.kwargs.get("flights", ()):
                    flight = run.sandbox.db["flights"].get(segment.get("flight_number"))
                    if flight is not None:
                        run.call(
                            "search_direct_flight",
                            {"origin": flight["origin"], "destination": flight["destination"], "date": segment.get("date")},
                        )
        elif isinstance(user, dict):
            products: dict[str, None] = {}
            for order_id in user.get("orders", ()):
                order = _json_or_none(run.call("get_order_details", {"order_id": order_id}))
                for item in order.get("items", ()) if isinstance(order, dict) else ():
                    products.setdefault(item["product_id"], None)
            for product_id in products:
                run.call("get_product_details", {"product_id": product_id})
        for action in actions[len(lookups) :]:
            run.call(action.name, action.kwargs)
        reward = 1.0 if run.errors == 0 else 0.0
        out.append({"task_id": task.task_index, "trial": 0, "reward": reward, "info": {"split": split}, "traj": run.traj})
    return out


class _GoldRun:
    """One task's trajectory as it is written: each call runs on the sandbox and is appended with its result."""

    def __init__(self, sandbox: Sandbox, policy: str, instruction: str) -> None:
        self.sandbox = sandbox
        self.traj: list[dict[str, Any]] = [{"role": "system", "content": policy}, {"role": "user", "content": instruction}]
        self.errors = 0

    def call(self, name: str, kwargs: Mapping[str, Any]) -> str:
        from .sandbox import is_error_result

        call_id = f"call_{len(self.traj)}"
        function = {"name": name, "arguments": json.dumps(kwargs)}
        self.traj.append(
            {"role": "assistant", "content": None, "tool_calls": [{"id": call_id, "type": "function", "function": function}]}
        )
        result = self.sandbox.invoke(name, dict(kwargs))
        self.errors += is_error_result(result) is not None
        self.traj.append({"role": "tool", "tool_call_id": call_id, "name": name, "content": result})
        return result


def _json_or_none(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None
