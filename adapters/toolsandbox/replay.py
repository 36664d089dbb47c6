"""Replay ToolSandbox trajectories on its real execution context.

``prefixmon replay --domain toolsandbox DIR_OR_FILE... --out RECORDS`` reads what
ToolSandbox's CLI writes for a run (``<run>/trajectories/<scenario>/conversation.json``,
OpenAI messages, and ``<run>/result_summary.json``). Give the run folder, a
``trajectories`` folder, or single ``conversation.json`` files. Each conversation is
replayed on a copy of its scenario's starting context (the scenario is the folder name,
augmented scenarios included): user messages enter the information pool, each tool call
is judged pre-call with the scenario's tools exposed, then run on the context so later
checks see the state it leaves; the episode is given the recorded result (a traceback is
a rejection). Outcome from ``result_summary.json`` when found: ``success`` when the
milestone similarity is 1, ``partial`` when above 0, else ``failure``.
"""

from __future__ import annotations

import json
import logging
import re
import sys
from collections.abc import Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any, Final

from prefixmon import Episode, EpisodeRecord, Monitor, PendingCall, ToolBlocked
from prefixmon.commands import ReplayRequest, run_async
from prefixmon.records.jsonlines import too_deep
from prefixmon.records.model import write_records

from ..transcripts import ReplayInputError, load_json
from .env import SandboxEnv, load_scenarios
from .toolsets import toolset

__all__ = (
    "SOURCE",
    "ToolSandboxReplaySource",
    "conversation_files",
    "record_conversation",
    "recorded_error",
    "replay_conversation",
    "write_run",
)

_EXCEPTION: Final = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception): ", re.MULTILINE)


def recorded_error(content: str) -> str | None:
    """The rejection a recorded tool message shows (a traceback or ``SomeError: ...`` line), else ``None``."""
    if content.startswith("Traceback (most recent call last)") or _EXCEPTION.match(content.splitlines()[-1] if content else ""):
        lines = content.strip().splitlines()
        return lines[-1] if lines else content
    return None


def conversation_files(path: Path) -> list[Path]:
    """The ``conversation.json`` files under a run folder, a ``trajectories`` folder, or the file itself."""
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise ReplayInputError(f"{path}: no such file or folder")
    files = sorted(path.glob("trajectories/*/conversation.json")) or sorted(path.glob("*/conversation.json"))
    if not files:
        raise ReplayInputError(f"{path}: no trajectories/<scenario>/conversation.json under it")
    return files


def _summary(conversation: Path) -> dict[str, float]:
    for folder in conversation.parents[:3]:
        summary = folder / "result_summary.json"
        if summary.is_file():
            data = load_json(summary)
            rows = data.get("per_scenario_results", []) if isinstance(data, dict) else []
            return {str(r["name"]): float(r.get("similarity", 0.0)) for r in rows if isinstance(r, dict) and "name" in r}
    return {}


def _outcome(similarity: float | None) -> str:
    if similarity is None or similarity <= 0:
        return "failure"
    return "success" if similarity >= 1.0 - 1e-9 else "partial"


def _scenario(name: str) -> Any:
    """A scenario by name: a base one, else an augmented one (building those takes seconds)."""
    base = load_scenarios()
    if name in base:
        return base[name]
    augmented = load_scenarios(augmented=True)
    if name not in augmented:
        raise ReplayInputError(f"unknown ToolSandbox scenario {name!r}")
    return augmented[name]


async def replay_conversation(
    monitor: Monitor, scenario_name: str, messages: Sequence[Mapping[str, Any]], *, outcome: str, labels: Mapping[str, str]
) -> EpisodeRecord:
    """Replay one conversation (OpenAI messages) of a scenario on a copy of its starting context."""
    env = SandboxEnv.for_scenario(_scenario(scenario_name))
    results: dict[str, list[str]] = {}
    for m in messages:
        if m.get("role") == "tool":
            results.setdefault(str(m.get("tool_call_id")), []).append(str(m.get("content") or ""))
    async with monitor.episode(
        task_id=scenario_name,
        labels={"dataset": "toolsandbox", **labels},
        env=env,
        exposed=[t for t in env.exposed if t in monitor.toolset],
    ) as ep:
        await _messages(ep, env, messages, results)
        ep.finish(outcome)
    assert ep.record is not None
    return ep.record


async def _messages(ep: Episode, env: SandboxEnv, messages: Sequence[Mapping[str, Any]], results: dict[str, list[str]]) -> None:
    for message in messages:
        role, content = message.get("role"), message.get("content")
        if role == "user" and isinstance(content, str):
            ep.user(content)
        elif role == "system" and isinstance(content, str):
            ep.inform(content)
        for call in message.get("tool_calls") or ():
            function = call.get("function") if isinstance(call, Mapping) else None
            if not isinstance(function, Mapping):
                continue
            name, arguments, call_id = str(function.get("name", "")), function.get("arguments"), str(call.get("id", ""))
            queue = results.get(call_id)
            recorded = queue.pop(0) if queue else None
            try:
                pending: PendingCall | None = await ep.begin(name, arguments, call_id=call_id)
            except ToolBlocked:
                pending = None
            args = pending.args if pending is not None else None
            if not isinstance(args, Mapping):
                args = arguments
                if isinstance(arguments, str):
                    try:  # text nested too deeply is no arguments, as text that does not parse (the monitor says why)
                        args = None if too_deep(arguments) else json.loads(arguments)
                    except ValueError:  # not JSON, or an integer past Python's digit limit
                        args = None
            outcome = env.run(name, args if isinstance(args, Mapping) else {})
            if pending is None:
                continue
            error = recorded_error(recorded) if recorded is not None else outcome.error
            if recorded is None:
                pending.abandon("the conversation has no result for this call")
            elif error is not None:
                pending.failed(error)
            else:
                pending.done(recorded)


def record_conversation(
    scenario_name: str, user: str, calls: Sequence[tuple[str, Mapping[str, Any]]]
) -> tuple[list[dict[str, Any]], list[str | None]]:
    """A conversation in ToolSandbox's OpenAI-messages form, the calls run on its real context.

    Returns the messages (the user's message, then per call the assistant's tool call and
    the tool message: ``repr(result)``, or a traceback ending in the exception as its
    execution environment prints it) and each call's error (``None`` when it ran).
    """
    env = SandboxEnv.for_scenario(_scenario(scenario_name))
    messages: list[dict[str, Any]] = [{"role": "user", "content": user}]
    errors: list[str | None] = []
    for i, (name, args) in enumerate(calls):
        call_id = f"call_{i}"
        function = {"name": name, "arguments": json.dumps(dict(args))}
        messages.append(
            {"role": "assistant", "content": "", "tool_calls": [{"id": call_id, "type": "function", "function": function}]}
        )
        out = env.run(name, args)
        content = f"Traceback (most recent call last):\n{out.error}" if out.error else repr(out.result)
        messages.append({"role": "tool", "tool_call_id": call_id, "name": name, "content": content})
        errors.append(out.error)
    return messages, errors


def write_run(run: Path, conversations: Mapping[str, list[dict[str, Any]]], similarity: Mapping[str, float]) -> None:
    """A ToolSandbox run folder: ``trajectories/<scenario>/conversation.json`` and ``result_summary.json``."""
    for name, messages in conversations.items():
        folder = run / "trajectories" / name
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "conversation.json").write_text(json.dumps(messages, ensure_ascii=False), encoding="utf-8")
    rows = [{"name": name, "similarity": similarity.get(name, 0.0)} for name in conversations]
    (run / "result_summary.json").write_text(json.dumps({"per_scenario_results": rows}, indent=1), encoding="utf-8")


class ToolSandboxReplaySource:
    """``prefixmon replay --domain toolsandbox RUN_DIR... --out RECORDS``."""

    help = "ToolSandbox trajectories (trajectories/<scenario>/conversation.json) on its real execution context"
    folders = True
    """Its inputs are run folders."""

    def replay(self, request: ReplayRequest) -> int:
        """Replay every conversation under ``request.files``; exit 1 when one was skipped."""
        try:
            import tool_sandbox  # type: ignore[import-untyped]  # noqa: F401
        except ImportError:
            print("prefixmon replay: install ToolSandbox (see docs/benchmarks.md)", file=sys.stderr)
            return 2
        logging.getLogger("tool_sandbox").setLevel(logging.ERROR)
        monitor = Monitor(toolset("declared"), policy="observe")
        records: list[EpisodeRecord] = []
        bad = 0
        for path in request.files:
            try:
                files = conversation_files(path)
            except ReplayInputError as e:
                print(f"skipped: {e}", file=sys.stderr)
                bad += 1
                continue
            for file in files:
                try:
                    messages = load_json(file)
                    if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
                        raise ReplayInputError(f"{file}: expected a JSON list of messages")
                    name = file.parent.name
                    similarity = _summary(file).get(name)
                    run = partial(
                        replay_conversation, monitor, name, messages, outcome=_outcome(similarity), labels=dict(request.labels)
                    )
                    records.append(run_async(run))
                except (ReplayInputError, OSError) as e:
                    print(f"skipped: {file}: {e}" if str(file) not in str(e) else f"skipped: {e}", file=sys.stderr)
                    bad += 1
        write_records(request.out, records)
        n = len(records)
        ter = sum(r.executable for r in records) / n if n else float("nan")
        print(
            f"replayed {n} ToolSandbox trajectory(ies): TER {ter:.3f}; wrote {request.out}" + (f"; skipped {bad}" if bad else "")
        )
        return 1 if bad else 0


SOURCE: Final = ToolSandboxReplaySource()
"""The ``toolsandbox`` entry point of ``prefixmon.replay``."""
