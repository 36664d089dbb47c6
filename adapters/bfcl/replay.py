"""Replay of BFCL multi-turn result files: ``prefixmon replay --bfcl RESULT_FILE...``.

A result file has one JSON object per line, ``{"id": ..., "result": [...], ...}``, where
``result`` is a list of turns, each a list of steps, each a list of calls given either as
``{name: arguments}`` objects (arguments as an object or as JSON text) or as Python-call
strings (a step may also be one string such as ``"[f(a=1), g()]"``). Each task's calls are
replayed turn by turn on the task's own environment through the monitor (policy
``observe``: every prefix judged, the rollout kept after the first failure), and one
episode record is written per task, ``task_id`` = BFCL's id, labelled with the dataset,
model and category (inferred from the path, overridable with ``--label``), ``outcome`` from
BFCL's own state and response checkers.

Malformed entries (not UTF-8, not JSON, nested too deeply to decode, no id, an unknown id,
a result that is not a list of turns of steps) are reported with file, line and task id
(where it can be read), and skipped. Steps that do not decode to calls are skipped as BFCL
does (the model answered in text), and reported as notes.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, cast

from prefixmon import Episode, EpisodeRecord, Monitor
from prefixmon.commands import ReplayRequest, run_async
from prefixmon.learn import Call, Message, Transcript
from prefixmon.learn import Problem as LearnProblem
from prefixmon.records.jsonlines import iter_json_lines
from prefixmon.records.model import write_records
from prefixmon.rules.spec import values_at

from .checker import TurnChecker
from .data import CATEGORIES, BfclTask, category_of, task_index
from .env import BfclCall, BfclEnv, CallParseError, bfcl_error_text, calls_from_object, parse_calls, rejection
from .specs import MODES, Mode, TaskRun, build_toolset, initial_references, run_task

__all__ = (
    "SOURCE",
    "TRANSCRIPT_READER",
    "BfclReplaySource",
    "BfclTranscriptReader",
    "Problem",
    "ReplaySummary",
    "ResultEntry",
    "execute_entry",
    "ground_truth_results",
    "infer_labels",
    "read_results",
    "replay_files",
    "tool_definitions",
)

_CATEGORY_RE: Final = re.compile(r"multi_turn_(" + "|".join(sorted(CATEGORIES, key=len, reverse=True)) + r")")
_NOT_MODEL_DIRS: Final = frozenset(
    {"multi_turn", "non_live", "live", "agentic", "result", "results", "score", "format_sensitivity"}
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Problem:
    """A malformed entry or a skipped step, with where it was found."""

    path: str
    line: int
    task_id: str | None
    message: str
    skipped: bool
    """``True``: the whole entry was skipped; ``False``: a note, the entry was replayed."""

    def __str__(self) -> str:
        task = f" [{self.task_id}]" if self.task_id else ""
        return f"{self.path}:{self.line}{task}: {self.message}"


@dataclass(frozen=True, slots=True, kw_only=True)
class ResultEntry:
    """One decoded line of a result file."""

    path: str
    line: int
    task: BfclTask
    turns: tuple[tuple[BfclCall, ...], ...]
    """Per turn, the decoded calls of all its steps, in order."""
    steps: tuple[tuple[int, ...], ...] = ()
    """Per turn, how many of those calls each step (one model message) decoded to."""


def infer_labels(path: str | Path) -> dict[str, str]:
    """``model`` and ``category`` from a result file's path, where they can be told.

    BFCL writes ``result/<model>/multi_turn/BFCL_v4_multi_turn_<category>_result.json``
    (older releases: ``result/<model>/BFCL_v3_multi_turn_<category>_result.json``).
    """
    p = Path(path)
    labels: dict[str, str] = {}
    m = _CATEGORY_RE.search(p.name)
    if m:
        labels["category"] = m.group(1)
    for parent in p.parents:
        name = parent.name
        if name and name not in _NOT_MODEL_DIRS and name not in (".", ".."):
            labels["model"] = name
            break
    return labels


def _decode_step(step: Any, where: str) -> list[BfclCall]:
    if isinstance(step, str):
        return parse_calls(step, where=where)
    if isinstance(step, Mapping):
        return calls_from_object(step, where=where)
    if isinstance(step, list):
        calls: list[BfclCall] = []
        for item in step:
            if isinstance(item, str):
                calls.extend(parse_calls(item, where=where))
            elif isinstance(item, Mapping):
                calls.extend(calls_from_object(item, where=where))
            else:
                raise CallParseError(f"{where}: a call must be an object or a string, got {type(item).__name__}")
        return calls
    raise CallParseError(f"{where}: a step must be a list of calls, got {type(step).__name__}")


def read_results(path: str | Path, problems: list[Problem]) -> Iterator[ResultEntry]:
    """Decode a result file; malformed entries and undecodable steps go to ``problems``."""
    name = str(path)
    tasks = task_index()
    for item in iter_json_lines(path):  # a BOM, merged lines, depth and digit limits as every reader has them
        n = item.line

        def bad(message: str, task_id: str | None = None, *, line: int = n) -> None:
            problems.append(Problem(path=name, line=line, task_id=task_id, message=message, skipped=True))

        if item.problem is not None:
            bad(item.problem)
            continue
        obj = item.value
        if not isinstance(obj, dict):
            bad(f"an entry must be a JSON object, got {type(obj).__name__}")
            continue
        task_id = obj.get("id")
        if not isinstance(task_id, str):
            bad("the entry has no string 'id'")
            continue
        task = tasks.get(task_id)
        if task is None:
            bad(f"unknown task id (not a BFCL multi-turn task of {', '.join(CATEGORIES)})", task_id)
            continue
        result = obj.get("result")
        if not isinstance(result, list) or not all(isinstance(t, list) for t in result):
            bad(
                "'result' must be a list of turns, each a list of steps"
                + (f" (got {str(result)[:60]!r})" if isinstance(result, str) else ""),
                task_id,
            )
            continue
        turns: list[tuple[BfclCall, ...]] = []
        steps: list[tuple[int, ...]] = []
        for t, turn in enumerate(result):
            calls: list[BfclCall] = []
            sizes: list[int] = []
            for s, step in enumerate(turn):
                where = f"turn {t} step {s}"
                try:
                    decoded = _decode_step(step, where)
                except (CallParseError, RecursionError) as e:
                    problems.append(
                        Problem(path=name, line=n, task_id=task_id, skipped=False, message=f"{e}; step skipped, as BFCL does")
                    )
                    continue
                calls.extend(decoded)
                sizes.append(len(decoded))
            turns.append(tuple(calls))
            steps.append(tuple(sizes))
        yield ResultEntry(path=name, line=n, task=task, turns=tuple(turns), steps=tuple(steps))


@dataclass(slots=True)
class ReplaySummary:
    """What a replay did."""

    records: list[EpisodeRecord] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    multi_call_messages: int = 0
    """Steps (model messages) of several calls. BFCL runs a message's calls in order, each seeing
    what the one before it did, so they are judged call by call, as BFCL runs them."""
    sibling_uses: int = 0
    """Calls of such a message with a reference argument only an earlier call of the same message
    returned: the model wrote it before that result existed (BFCL still runs it)."""


async def replay_files(
    paths: Sequence[str | Path],
    *,
    labels: Mapping[str, str] | None = None,
    mode: Mode = "declared",
) -> ReplaySummary:
    """Replay result files through a monitor; one record per task entry.

    Args:
        labels: override the inferred labels (``dataset=bfcl``, ``model``, ``category``).
        mode: precondition mode of the specs (``declared``, ``dry_run``, ``none``).
    """
    monitor = Monitor(build_toolset(mode))
    summary = ReplaySummary()
    for path in paths:
        inferred = infer_labels(path)
        for entry in read_results(path, summary.problems):
            entry_labels = {"dataset": "bfcl", "method": "replay", **inferred, "category": category_of(entry.task.id)}
            if "category" in inferred and inferred["category"] != entry_labels["category"]:
                entry_labels["category"] = category_of(entry.task.id)
            entry_labels.update(labels or {})
            checker = TurnChecker.for_task(entry.task)
            turns = entry.turns

            Turns = Sequence[Sequence[BfclCall]]

            def after_turn(t: int, run: TaskRun, checker: TurnChecker = checker, turns: Turns = turns) -> None:
                checker.turn(t, run.env, run.results[t], len(turns[t]))

            def finish(run: TaskRun, checker: TurnChecker = checker, turns: Turns = turns) -> str:
                checker.force_terminated(len(turns))
                return "success" if checker.valid else "failure"

            watch = _SiblingUses(entry.steps, summary)
            run = await run_task(
                monitor, entry.task, turns, labels=entry_labels, on_call=watch, after_turn=after_turn, finish=finish
            )
            assert run.episode.record is not None
            summary.records.append(run.episode.record)
    return summary


class _SiblingUses:
    """Counts, before each call, whether it uses a reference an earlier call of its own message returned."""

    def __init__(self, steps: Sequence[Sequence[int]], summary: ReplaySummary) -> None:
        self._starts: dict[int, int] = {}
        """``{position of a call in the episode: position of its message's first call}``, for messages of several calls."""
        position = 0
        for sizes in steps:
            for size in sizes:
                if size > 1:
                    summary.multi_call_messages += 1
                    for k in range(1, size):
                        self._starts[position + k] = position
                position += size
        self._summary = summary
        self._position = 0

    def __call__(self, ep: Episode, call: BfclCall, env: BfclEnv) -> None:
        position, self._position = self._position, self._position + 1
        start = self._starts.get(position)
        spec = ep.monitor.toolset.get(call.name)
        if start is None or spec is None or isinstance(call.args, str):
            return
        first_depth = ep.state.depth - (position - start) + 1  # the depth its message's first call took
        for path, ref in spec.refs:
            for _, value in values_at(call.args, path):
                binding = ep.state.binding(value, ref.kind)
                if binding is not None and binding.depth >= first_depth:
                    self._summary.sibling_uses += 1
                    return


class BfclReplaySource:
    """``prefixmon replay --bfcl FILE... --out RECORDS`` (the ``bfcl`` entry point of ``prefixmon.replay``)."""

    help = "BFCL multi-turn result files, replayed on the real environment classes"

    def replay(self, request: ReplayRequest) -> int:
        """Replay; print problems to stderr and a one-line summary. 0 if every entry replayed, 1 otherwise."""
        for path in request.files:
            if not path.is_file():
                print(f"prefixmon replay: {path}: no such file", file=sys.stderr)
                return 2
        if request.mode not in MODES:
            print(f"prefixmon replay: unknown --mode {request.mode!r}; use one of {', '.join(MODES)}", file=sys.stderr)
            return 2
        mode = cast(Mode, request.mode)
        summary = run_async(lambda: replay_files(request.files, labels=request.labels, mode=mode))
        write_records(request.out, summary.records)
        for problem in summary.problems:
            print(f"{'skipped' if problem.skipped else 'note'}: {problem}", file=sys.stderr)
        records = summary.records
        skipped = sum(p.skipped for p in summary.problems)
        n = len(records)
        ter = sum(r.executable for r in records) / n if n else 0.0
        success = sum(r.success for r in records) / n if n else 0.0
        print(
            f"replayed {n} task(s) to {request.out}; skipped {skipped} malformed entr{'y' if skipped == 1 else 'ies'}; "
            f"TER {ter:.3f}, BFCL success {success:.3f}; {summary.multi_call_messages} message(s) of several calls "
            f"(judged call by call, as BFCL runs them), {summary.sibling_uses} call(s) using what a sibling returned"
        )
        return 1 if skipped else 0


SOURCE: Final = BfclReplaySource()


# -- transcripts for prefixmon learn --------------------------------------------------------------
def execute_entry(entry: ResultEntry, *, episode_id: str | None = None) -> Transcript:
    """Run one result entry's calls on the task's real environment and return what happened as a transcript.

    The ids the task's scenario already holds are the transcript's ``given`` references (as
    :func:`~.specs.run_task` binds them). Each turn's user messages come first, then its calls in order. A call of a function the
    task does not offer at that turn never reaches the environment (``ran=False``); every
    other call runs, and its result is marked an error when the environment raised or
    rejected it (:func:`~.env.rejection`: an ``error`` key, a false status flag, ...).
    """
    task = entry.task
    env = BfclEnv(task)
    given: dict[str, list[Any]] = {}
    for kind, value in initial_references(env):
        given.setdefault(kind, []).append(value)
    events: list[Message | Call] = []
    for t, calls in enumerate(entry.turns):
        if t < len(task.turns):
            for message in task.turns[t]:
                content = message.get("content") if isinstance(message, Mapping) else None
                if isinstance(content, str):
                    events.append(Message(text=content, user=message.get("role", "user") == "user"))
        for call in calls:
            if call.name not in env or call.name in task.held_out(t):
                events.append(Call(tool=call.name, arguments=call.args, ran=False))
                continue
            try:
                result: Any = env.run(call.name, call.args)
            except Exception as e:  # the environment raised: BFCL records the error text
                events.append(Call(tool=call.name, arguments=call.args, result=bfcl_error_text(e), error=True))
                continue
            events.append(
                Call(tool=call.name, arguments=call.args, result=result, error=rejection(call.name, result) is not None)
            )
    return Transcript(
        episode_id=episode_id or task.id,
        events=tuple(events),
        source=f"{entry.path}:{entry.line}",
        labels={"dataset": "bfcl", "category": category_of(task.id)},
        given={kind: tuple(values) for kind, values in given.items()},
    )


class BfclTranscriptReader:
    """BFCL multi-turn result files for ``prefixmon learn``: each entry's calls run on the task's real environment."""

    help = "BFCL multi-turn result files (one {id, result} object per line), executed on BFCL's environment classes"

    def sniff(self, path: Path, head: bytes) -> bool:
        """The first line is an object with a multi-turn ``id`` and a ``result``."""
        first = head.lstrip().split(b"\n", 1)[0]
        return first.startswith(b"{") and b'"result"' in first and re.search(rb'"id"\s*:\s*"multi_turn_', first) is not None

    def read(self, path: Path, problems: list[LearnProblem]) -> Iterator[Transcript]:
        """Every entry, executed; malformed entries and undecodable steps are reported with their line."""
        found: list[Problem] = []
        for entry in read_results(path, found):
            _move(found, problems)
            yield execute_entry(entry, episode_id=f"{path.stem}/{entry.task.id}")
        _move(found, problems)


def _move(found: list[Problem], problems: list[LearnProblem]) -> None:
    for p in found:
        problems.append(LearnProblem(path=p.path, line=p.line, message=p.message, episode=p.task_id, skipped=p.skipped))
    found.clear()


TRANSCRIPT_READER: Final = BfclTranscriptReader()
"""The ``bfcl`` entry point of ``prefixmon.transcripts``."""


def ground_truth_results(tasks: Sequence[BfclTask]) -> list[dict[str, Any]]:
    """The tasks' ground truth as result-file entries (``{"id", "result"}``: one step of calls per turn)."""
    return [{"id": task.id, "result": [[list(turn)] for turn in task.ground_truth]} for task in tasks]


def tool_definitions() -> list[dict[str, Any]]:
    """Every multi-turn function as an OpenAI tool definition (the ``--tools`` file for ``prefixmon learn`` and ``replay``)."""
    return [
        {
            "type": "function",
            "function": {"name": spec.name, "description": spec.description, "parameters": dict(spec.parameters)},
        }
        for spec in build_toolset("none")
    ]
