"""Replay OpenAI-messages transcripts through the monitor: one episode record per conversation.

A transcript is **OpenAI-messages JSON Lines** for any toolset: one conversation per line,
either a list of messages or ``{"messages": [...], "task_id"?, "reward"? | "outcome"?,
"labels"?}``. Malformed lines (not UTF-8, not JSON, nested too deeply, not a conversation)
are reported with file, line and task id and skipped; the exit code is then 1. A ``--tools``
file is a JSON list of OpenAI tool definitions (``{"type": "function", "function": {...}}``
or the bare function object).

Every emitted call is judged before its recorded result is looked at (the pre-call
verdict, policy ``observe``), then the recorded result decides acceptance. Every call is
recorded, also after the first failure. Records keep file order; outcome is the line's
``outcome``, else ``success`` when ``reward`` is 1, else ``failure``.

Benchmark adapters (τ-bench) reuse the reader and :func:`replay_messages` with their own
toolsets and environments. CLI (registered as the ``transcripts`` replay source)::

    prefixmon replay --tools tools.json transcripts.jsonl --out records.jsonl --label model=gpt-4o
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic_core import from_json

from prefixmon import Episode, EpisodeRecord, Monitor, SpecError, ToolBlocked, ToolCall, Toolset
from prefixmon.commands import ReplayRequest, run_async
from prefixmon.learn import SNIFF_BYTES, Call, Message, Transcript
from prefixmon.learn import Problem as LearnProblem
from prefixmon.records.jsonlines import JsonLine, iter_json_lines, ordinal, too_deep
from prefixmon.records.model import write_records

__all__ = (
    "READER",
    "SOURCE",
    "Conversation",
    "OpenAITranscriptReader",
    "Problem",
    "ReplayInputError",
    "ReplayStats",
    "ReplaySummary",
    "check_tool_calls",
    "error_text",
    "first_error",
    "labelled_id",
    "load_json",
    "read_conversations",
    "read_tool_definitions",
    "replay_conversations",
    "replay_messages",
    "single_file",
    "transcript_from_messages",
)


def labelled_id(base: str, labels: Mapping[str, str]) -> str:
    """``base`` with a digest of an episode's labels: deterministic, and different for each label set.

    Replays that name episodes by their position in a file (``tau-retail-00000-task0-trial0``)
    would give two models' files the same ids, and a report reading both would take the
    second model's episodes for duplicates of the first. The same file replayed again with
    the same labels gives the same ids, so a file given twice still shows as duplicates.
    """
    digest = hashlib.sha256(json.dumps(sorted(labels.items())).encode()).hexdigest()[:10]
    return f"{base}-{digest}"


class ReplayInputError(ValueError):
    """A transcript file does not fit the expected format (the message says where)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Problem:
    """A malformed transcript line that was skipped, with where it was found."""

    path: str
    line: int
    task_id: str | None
    message: str

    def __str__(self) -> str:
        task = f" [{self.task_id}]" if self.task_id else ""
        return f"{self.path}:{self.line}{task}: {self.message}"


def _decode(file: Path, data: bytes) -> str:
    """UTF-8 text of a whole file (a byte order mark is allowed); the error names the line."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        column = e.start - (data.rfind(b"\n", 0, e.start) + 1) + 1
        raise ReplayInputError(f"{file}:{line}: not UTF-8 text (byte {column} of the line)") from e


def load_json(file: Path) -> Any:
    """Decode a whole JSON file; errors name the file and where in it."""
    text = _decode(file, file.read_bytes())
    with contextlib.suppress(ValueError):
        return from_json(text)  # pydantic's parser: what json.loads gives, about 2x as fast
    if too_deep(text):  # json would recurse near the interpreter's limit (or fail there)
        raise ReplayInputError(f"{file}: nested too deeply to decode")
    try:  # not JSON, or JSON it refuses (a lone surrogate): json decides and says where
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ReplayInputError(f"{file}: not JSON ({e.msg} at line {e.lineno} column {e.colno})") from e


def check_tool_calls(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
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


class Conversation(BaseModel):
    """One line of an OpenAI-messages JSON Lines transcript."""

    model_config = ConfigDict(extra="allow")

    messages: list[dict[str, Any]]
    task_id: str | int | None = None
    reward: float | None = None
    outcome: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)

    _tool_calls = field_validator("messages")(check_tool_calls)

    @field_validator("outcome")
    @classmethod
    def _known_outcome(cls, value: str | None) -> str | None:
        if value is not None and value not in ("success", "partial", "failure"):
            raise ValueError(f"outcome must be success, partial or failure, got {value!r}")
        return value


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplayStats:
    """What one conversation's replay saw besides the record."""

    calls: int
    missing_results: int
    """Calls with no recorded result (a truncated conversation)."""
    divergences: tuple[tuple[str, str], ...] = ()
    """Writes the recorded environment accepted but the replica sandbox rejected."""
    batches: int = 0
    """Messages of several calls judged as one batch (:meth:`Episode.begin_batch`)."""
    recorded_sequences: int = 0
    """Messages of several calls replayed one by one: a call used what an earlier one returned."""


# -- reading ------------------------------------------------------------------------------------
def read_conversations(path: str | os.PathLike[str], problems: list[Problem] | None = None) -> Iterator[Conversation]:
    """Read an OpenAI-messages JSON Lines file, one conversation per non-empty line.

    Args:
        problems: if given, malformed lines are appended here and skipped instead of raised.

    Raises:
        ReplayInputError: (without ``problems``) a line that is not UTF-8, not JSON, nested
            too deeply or not a conversation, with its number.
    """
    file = Path(path)
    for item in iter_json_lines(file):
        problem, conversation = _conversation(file, item)
        if conversation is not None:
            yield conversation
        if problem is not None:
            if problems is None:
                raise ReplayInputError(str(problem))
            problems.append(problem)


def _conversation(file: Path, item: JsonLine) -> tuple[Problem | None, Conversation | None]:
    """A problem, or the conversation of one JSON value of a JSON Lines file."""

    def bad(message: str, task_id: Any = None) -> tuple[Problem, None]:
        task = None if task_id is None or isinstance(task_id, dict | list) else str(task_id)
        return Problem(path=str(file), line=item.line, task_id=task, message=message), None

    if item.problem is not None:
        return bad(item.problem)
    data = {"messages": item.value} if isinstance(item.value, list) else item.value
    try:
        return None, Conversation.model_validate(data)
    except ValidationError as e:
        which = f"the {ordinal(item.part)} of {item.parts} JSON values on this line is " if item.part else ""
        return bad(f"{which}not a conversation: {first_error(e)}", data.get("task_id") if isinstance(data, dict) else None)


def first_error(e: ValidationError) -> str:
    """One line for a validation error: where and what of the first problem, and how many more."""
    errors = e.errors(include_url=False)
    loc = ".".join(str(p) for p in errors[0]["loc"])
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{loc + ': ' if loc else ''}{errors[0]['msg']}{more}"


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


def _match_results(messages: Sequence[Mapping[str, Any]]) -> dict[tuple[int, int], int]:
    """``(message index, call index)`` of each tool call -> index of its ``role: tool`` result.

    A result takes the nearest preceding unmatched call with its ``tool_call_id`` (ids may
    repeat across turns), the first of them when one message holds several with that id.
    Results without an id, or with an id no earlier call has, are not matched here.
    """
    open_calls: dict[str, list[tuple[int, int]]] = {}
    matched: dict[tuple[int, int], int] = {}
    for i, message in enumerate(messages):
        role = message.get("role")
        if role == "assistant":
            for j, tool_call in enumerate(message.get("tool_calls") or ()):
                if tool_call.get("id") is not None:
                    open_calls.setdefault(str(tool_call["id"]), []).append((i, j))
        elif role == "tool" and message.get("tool_call_id") is not None:
            candidates = open_calls.get(str(message["tool_call_id"]))
            if candidates:
                latest = candidates[-1][0]
                k = next(k for k, (m, _) in enumerate(candidates) if m == latest)
                matched[candidates.pop(k)] = i
    return matched


async def replay_messages(ep: Episode, messages: Sequence[Mapping[str, Any]]) -> ReplayStats:
    """Feed one conversation into an open episode.

    User messages enter the information pool; system and developer messages are
    information too; the assistant's text is noted (``ep.assistant``); each assistant tool call
    is judged pre-call (``ep.begin``; the calls of one message together, ``ep.begin_batch``,
    unless the message is a recorded sequence: see :func:`_recorded_sequence`), then its
    recorded ``role: tool`` result (matched by ``tool_call_id``, else the next unmatched
    tool message) is applied with ``pending.done``. A ``tool_call_id`` used again in a later
    turn matches each result to the nearest preceding unmatched call with that id.
    """
    matched = _match_results(messages)
    unmatched: list[int] = [i for i, m in enumerate(messages) if m.get("role") == "tool" and m.get("tool_call_id") is None]
    calls = missing = batches = sequences = 0
    for i, message in enumerate(messages):
        role = message.get("role")
        if role == "user":
            ep.user(_text(message.get("content")))
        elif role in ("system", "developer"):
            ep.inform(_text(message.get("content")))
        elif role == "assistant":
            if isinstance(text := message.get("content"), str) and text:
                ep.assistant(text)
            emitted: list[tuple[ToolCall, str | None]] = []
            for j, tool_call in enumerate(message.get("tool_calls") or ()):
                function = tool_call.get("function") or {}
                if (i, j) in matched:
                    result: str | None = _text(messages[matched[i, j]].get("content"))
                elif unmatched:
                    result = _text(messages[unmatched.pop(0)].get("content"))
                else:
                    result = None
                call = ToolCall(name=str(function.get("name", "")), args=function.get("arguments"), call_id=tool_call.get("id"))
                emitted.append((call, result))
            calls += len(emitted)
            if len(emitted) > 1 and not _recorded_sequence(ep, emitted):
                batches += 1
                begun = await ep.begin_batch([call for call, _ in emitted])
            else:
                sequences += len(emitted) > 1
                begun = None
            for k, (call, result) in enumerate(emitted):
                if begun is not None:
                    pending = begun[k]
                else:
                    try:
                        pending = await ep.begin(call.name, call.args, call_id=call.call_id)
                    except ToolBlocked as blocked:
                        pending = blocked
                if isinstance(pending, ToolBlocked):
                    continue  # recorded as not executable; nothing ran in the replayed state
                if result is None:
                    missing += 1
                    pending.abandon("the conversation has no result for this call")
                else:
                    pending.done(result)
    divergences = tuple(getattr(ep.state.env, "divergences", ()))
    return ReplayStats(
        calls=calls, missing_results=missing, divergences=divergences, batches=batches, recorded_sequences=sequences
    )


def _recorded_sequence(ep: Episode, emitted: Sequence[tuple[ToolCall, str | None]]) -> bool:
    """Whether a message's calls were recorded one after another, not emitted together.

    Some agent loops record several rounds of calls as one message (LangChain's, in τ²'s
    files). A call then uses a value that only an earlier call of the message returned, which
    a model emitting them together could not have seen: that message is replayed call by call.
    """
    results: list[str] = []
    for call, result in emitted:
        if results:
            for value in _strings(call.args):
                if len(value) >= 3 and not ep.state.seen(value) and any(value in r for r in results):
                    return True
        if result:
            results.append(result)
    return False


def _strings(value: Any, depth: int = 0) -> Iterator[str]:
    """The string leaves of a call's arguments (JSON text parsed; bounded depth)."""
    if isinstance(value, (str, bytes)) and depth == 0:
        try:
            value = json.loads(value)
        except ValueError:
            return
    if isinstance(value, str):
        yield value
    elif depth < 8 and isinstance(value, Mapping):
        for v in value.values():
            yield from _strings(v, depth + 1)
    elif depth < 8 and isinstance(value, list):
        for v in value:
            yield from _strings(v, depth + 1)


def _outcome(reward: float | None, outcome: str | None) -> str:
    if outcome is not None:
        return outcome
    return "success" if reward is not None and reward >= 1.0 else "failure"


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


def read_tool_definitions(path: str | os.PathLike[str]) -> Toolset:
    """Read a ``--tools`` file (a JSON list of OpenAI tool definitions) into a toolset.

    Results that start with ``Error:`` count as rejections (the convention of τ-bench and
    many function-calling environments). Argument values are read ``lax`` (add_schema's
    default): the environment that ran the recorded calls is unknown, and a replayed schema
    verdict must not refuse what it may have accepted (``"3"`` for an integer); unknown
    argument names are refused only where a definition's schema says so.

    Raises:
        ReplayInputError: the file is not UTF-8 JSON, not a list, or has a bad entry; the
            message names the file and the entry.
    """
    try:
        return Toolset.from_openai(path, error_result=error_text)
    except SpecError as e:
        raise ReplayInputError(str(e)) from e


def error_text(result: object) -> str | None:
    """``Error: ...`` and ``Unknown action ...`` results are rejections; returns the text."""
    if isinstance(result, str) and (result.startswith("Error:") or result.startswith("Unknown action ")):
        return result
    return None


# -- CLI ----------------------------------------------------------------------------------------
@dataclass(slots=True)
class ReplaySummary:
    """Totals of one ``prefixmon replay`` run, printed as its last line."""

    calls: int = 0
    missing: int = 0
    divergences: int = 0
    no_calls: int = 0

    def count(self, record: EpisodeRecord, stats: ReplayStats) -> None:
        """Add one conversation's statistics (an ``on_record`` callback)."""
        self.calls += stats.calls
        self.missing += stats.missing_results
        self.divergences += len(stats.divergences)
        self.no_calls += stats.calls == 0

    def finish(self, out: Path, records: Sequence[EpisodeRecord], problems: Sequence[Problem]) -> int:
        """Write the records, report problems and the summary line; returns the exit code."""
        write_records(out, records)
        for problem in problems:
            print(f"skipped: {problem}", file=sys.stderr)
        if self.no_calls:
            print(
                f"prefixmon replay: warning: {self.no_calls} conversation(s) have no tool call; calls written "
                "as text (τ-bench's ReAct / Act agents, 'Action: {...}') are not replayed, only `tool_calls`",
                file=sys.stderr,
            )
        n = len(records)
        executable = sum(1 for r in records if r.executable)
        mean_fed = sum(r.fed for r in records) / n if n else float("nan")
        print(
            f"replayed {n} conversation(s), {self.calls} call(s): TER {executable / n if n else float('nan'):.3f}, "
            f"mean FED {mean_fed:.2f}; wrote {out}"
            + (f"; {self.missing} call(s) without a recorded result" if self.missing else "")
            + (f"; {self.divergences} replica divergence(s)" if self.divergences else "")
            + (f"; skipped {len(problems)} malformed line(s)" if problems else "")
        )
        return 1 if problems else 0


def single_file(request: ReplayRequest) -> Path | None:
    """The request's one input file, or ``None`` after saying why it cannot be replayed."""
    if len(request.files) != 1:
        print("prefixmon replay: transcripts are replayed one file at a time", file=sys.stderr)
        return None
    path = request.files[0]
    if not path.is_file():
        print(f"prefixmon replay: {path}: no such file", file=sys.stderr)
        return None
    return path


class TranscriptSource:
    """``prefixmon replay --tools TOOLS.json FILE --out RECORDS``."""

    help = "OpenAI-messages JSON Lines transcripts over any OpenAI tool definitions"
    formats = ("openai-jsonl",)
    """The ``--format`` values it reads besides ``auto`` (the CLI refuses others)."""

    def replay(self, request: ReplayRequest) -> int:
        """Replay one JSON Lines file against the ``--tools`` definitions."""
        path = single_file(request)
        if path is None:
            return 2
        if request.tools is None:
            print("prefixmon replay: OpenAI-messages transcripts need --tools (or a --domain)", file=sys.stderr)
            return 2
        summary = ReplaySummary()
        problems: list[Problem] = []
        try:
            tools = read_tool_definitions(request.tools)
            for spec in request.specs:  # rules the tool definitions cannot carry (a bad file names its line)
                tools.apply_spec(spec)
            conversations = list(read_conversations(path, problems))
            records = run_async(
                lambda: replay_conversations(conversations, tools, labels=request.labels, on_record=summary.count)
            )
        except (ReplayInputError, OSError, ValueError) as e:
            print(f"prefixmon replay: {e}", file=sys.stderr)
            return 1
        return summary.finish(request.out, records, problems)


SOURCE = TranscriptSource()
"""The ``transcripts`` entry point of ``prefixmon.replay``."""


# -- transcripts for prefixmon learn ------------------------------------------------------------
def transcript_from_messages(
    messages: Sequence[Mapping[str, Any]],
    *,
    episode_id: str,
    outcome: str | None = None,
    source: str | None = None,
    labels: Mapping[str, str] | None = None,
) -> Transcript:
    """One OpenAI-messages conversation as a neutral transcript, in the order replay reads it.

    User messages are the user's text; system and developer messages are other
    information; each assistant tool call takes its ``role: tool`` result (matched as
    :func:`replay_messages` matches them). A tool message may mark its result with a boolean
    ``is_error`` or ``isError``; unmarked results are judged by their shape.
    """
    matched = _match_results(messages)
    unmatched: list[int] = [i for i, m in enumerate(messages) if m.get("role") == "tool" and m.get("tool_call_id") is None]
    events: list[Message | Call] = []
    for i, message in enumerate(messages):
        role = message.get("role")
        if role == "user":
            events.append(Message(text=_text(message.get("content")), user=True))
        elif role in ("system", "developer"):
            events.append(Message(text=_text(message.get("content")), user=False))
        elif role == "assistant":
            for j, tool_call in enumerate(message.get("tool_calls") or ()):
                function = tool_call.get("function") or {}
                index = matched.get((i, j))
                if index is None and unmatched:
                    index = unmatched.pop(0)
                result = messages[index] if index is not None else None
                mark = None
                if result is not None:
                    flag = result.get("is_error", result.get("isError"))
                    mark = flag if isinstance(flag, bool) else None
                raw = function.get("arguments")
                arguments: Mapping[str, Any] | str
                if isinstance(raw, Mapping):
                    arguments = raw
                elif raw is None or (isinstance(raw, str) and not raw.strip()):
                    arguments = {}
                else:
                    try:  # text nested too deeply stays text (json would recurse near the interpreter's limit)
                        parsed = json.loads(raw) if isinstance(raw, str) and not too_deep(raw) else raw
                    except (ValueError, RecursionError):
                        parsed = raw
                    arguments = parsed if isinstance(parsed, Mapping) else str(raw)
                events.append(
                    Call(
                        tool=str(function.get("name", "")),
                        arguments=arguments,
                        call_id=None if tool_call.get("id") is None else str(tool_call["id"]),
                        result=None if result is None else _text(result.get("content")),
                        error=mark,
                        ran=result is not None,
                    )
                )
    return Transcript(episode_id=episode_id, events=tuple(events), outcome=outcome, source=source, labels=dict(labels or {}))


class OpenAITranscriptReader:
    """OpenAI-messages JSON Lines (one conversation per line) for ``prefixmon learn``."""

    help = "OpenAI-messages JSON Lines: one conversation per line (a message list or {messages, task_id, ...})"

    def sniff(self, path: Path, head: bytes) -> bool:
        """The first non-empty line is an object with ``messages``, or a list of messages (told by
        its start when it goes past the head, or nests too deeply to parse)."""
        text = head.removeprefix(b"\xef\xbb\xbf").lstrip()
        first, newline, _ = text.partition(b"\n")
        if (newline or len(head) < SNIFF_BYTES) and not too_deep(first):
            try:
                data = json.loads(first)
            except (ValueError, RecursionError):
                return False
            if isinstance(data, dict):
                return isinstance(data.get("messages"), list)
            return isinstance(data, list) and bool(data) and isinstance(data[0], dict) and "role" in data[0]
        return re.match(rb'^\{[^\n]{0,2048}"messages"\s*:\s*\[|^\[\s*\{\s*"role"', first) is not None

    def read(self, path: Path, problems: list[LearnProblem]) -> Iterator[Transcript]:
        """Every conversation; a malformed line is reported with its number and skipped."""
        name = str(path)
        for item in iter_json_lines(path):
            problem, conversation = _conversation(path, item)
            if problem is not None:
                problems.append(LearnProblem(path=name, line=item.line, message=problem.message, episode=problem.task_id))
            if conversation is not None:
                episode = (
                    str(conversation.task_id)
                    if conversation.task_id is not None
                    else f"{path.stem}:{item.line}" + (f".{item.part}" if item.part else "")
                )
                yield transcript_from_messages(
                    conversation.messages,
                    episode_id=episode,
                    outcome=_outcome(conversation.reward, conversation.outcome)
                    if conversation.reward is not None or conversation.outcome is not None
                    else None,
                    source=f"{name}:{item.line}",
                    labels=conversation.labels,
                )


READER = OpenAITranscriptReader()
"""The ``openai-jsonl`` entry point of ``prefixmon.transcripts``."""
