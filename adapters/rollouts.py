"""``prefixmon bench rollouts``: verdicts on real models' recorded runs, scored by the environment.

Our other benches judge traffic we generate (gold actions and perturbations of them). This one
judges what real models did: public τ-bench v1 and τ²-bench result files, each holding every
call a model made and the environment's own answer to it. Every file is replayed twice:

- **database / real environment**: τ v1 files on the τ-bench sandbox (rules that read the
  database, the replica kept in step with the recorded writes); τ² files on the real τ²
  environment in the task's initial state (τ²'s own tools run every call);
- **observation-only**: the tool schemas plus the shipped spec file of the domain
  (``examples/specs/tau_<domain>.yaml`` for v1, ``tau2_<domain>.yaml`` for τ²), no database
  and no environment: what a middleware in front of an unmodelled tool layer knows.

``--rules learned`` replaces the hand-written spec by one ``prefixmon learn`` drafts: from the
first half of each file's episodes, replayed observation-only on the second half and on the
other files of the same domain (the learned tools and arguments those files declare), with the
precondition threshold ``--enable-above``.

Each replay is scored with :mod:`prefixmon.analytics.scoring` (recall and precision of
refusals against the environment's errors, refusals of calls that succeeded by cause). With
no file given, the files of ``../shared/data/rollouts`` (beside the repository) are used, or
``--data DIR``. ``--fail-on-refusal`` exits 3 when a database-backed replay refused a call
the environment ran.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal

from prefixmon import EpisodeRecord, Monitor, Toolset
from prefixmon.analytics.scoring import VerdictScore, render_scores, score_records
from prefixmon.commands import run_async
from prefixmon.learn import fit_spec

from .transcripts import ReplayInputError, error_text, load_json, replay_messages

__all__ = (
    "BENCH",
    "Rollouts",
    "bare_toolset",
    "conversations",
    "detect",
    "fit_spec",
    "learned_scores",
    "observed_tau2",
    "run_file",
)

Benchmark = Literal["tau", "tau2"]
Rules = Literal["database", "observed", "learned"]
DEFAULT_DATA: Final = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "rollouts"
"""Where a checkout's development corpus lives (``../shared/data/rollouts`` beside the repository)."""
_RETAIL_ONLY: Final = frozenset({"get_order_details", "get_product_details", "find_user_id_by_email"})
_AIRLINE_ONLY: Final = frozenset({"get_reservation_details", "search_direct_flight", "book_reservation"})


@dataclass(frozen=True, slots=True)
class Rollouts:
    """A result file, what wrote it, and its domain."""

    path: Path
    benchmark: Benchmark
    domain: str
    data: Any


def detect(path: Path) -> Rollouts:
    """Read a result file and tell its benchmark and domain from its content.

    Raises:
        ReplayInputError: not JSON, or neither a τ² results object nor a τ v1 rollout list
            whose domain the tool names tell.
    """
    data = load_json(path)
    if isinstance(data, dict) and "simulations" in data:
        domain = ((data.get("info") or {}).get("environment_info") or {}).get("domain_name")
        if domain not in ("airline", "retail", "telecom"):
            raise ReplayInputError(f"{path}: τ² results without a known info.environment_info.domain_name ({domain!r})")
        return Rollouts(path, "tau2", str(domain), data)
    if isinstance(data, list):
        names = {
            str((call.get("function") or {}).get("name"))
            for rollout in data
            if isinstance(rollout, dict)
            for message in rollout.get("traj") or ()
            if isinstance(message, dict)
            for call in message.get("tool_calls") or ()
            if isinstance(call, dict)
        }
        if names & _RETAIL_ONLY and not names & _AIRLINE_ONLY:
            return Rollouts(path, "tau", "retail", data)
        if names & _AIRLINE_ONLY and not names & _RETAIL_ONLY:
            return Rollouts(path, "tau", "airline", data)
    raise ReplayInputError(f"{path}: neither τ² results nor τ-bench v1 trajectories of one domain")


def spec_path(benchmark: Benchmark, domain: str) -> Path:
    """The shipped observation-only spec file of a domain."""
    from .taubench.toolsets import SPECS

    folder = SPECS if benchmark == "tau" else Path(__file__).resolve().parent / "tau2" / "specs"
    return folder / f"{benchmark}_{domain}.yaml"


def run_file(rollouts: Rollouts, rules: Literal["database", "observed"]) -> list[EpisodeRecord]:
    """Replay one result file with the database-backed rules or the observation-only spec."""
    if rollouts.benchmark == "tau":
        from .taubench.replay import _rollouts, replay_tau
        from .taubench.toolsets import spec_toolset

        parsed = _rollouts(rollouts.path, rollouts.data)
        if rules == "database":
            return run_async(lambda: replay_tau(parsed, rollouts.domain))  # type: ignore[arg-type]
        tools = spec_toolset(rollouts.domain)  # type: ignore[arg-type]
        return run_async(lambda: _replay_observed(tools, [(str(r.task_id), r.traj) for r in parsed]))
    from .tau2.env import silence_tau2_logs
    from .tau2.replay import Tau2Results, _tasks, replay_simulations

    silence_tau2_logs()
    results = Tau2Results.model_validate(rollouts.data)
    domain: Any = rollouts.domain
    if rules == "database":
        tasks = _tasks(domain, results, rollouts.path)
        return run_async(lambda: replay_simulations(results, domain, tasks=tasks))
    tools = observed_tau2(domain, spec_path("tau2", rollouts.domain))
    conversations = [(s.task_id, openai_messages(s.messages)) for s in results.simulations]
    return run_async(lambda: _replay_observed(tools, conversations))


def conversations(rollouts: Rollouts) -> list[tuple[str, list[dict[str, Any]]]]:
    """Every episode of a result file as (episode id, OpenAI messages), in the file's order."""
    if rollouts.benchmark == "tau":
        from .taubench.replay import _rollouts

        return [(f"{r.task_id}-{r.trial}", r.traj) for r in _rollouts(rollouts.path, rollouts.data)]
    from .tau2.replay import Tau2Results

    results = Tau2Results.model_validate(rollouts.data)
    return [(f"{s.task_id}-{i}", openai_messages(s.messages)) for i, s in enumerate(results.simulations)]


def bare_toolset(rollouts: Rollouts) -> Toolset:
    """The file's tools with their schemas and no spec (``Error:`` results are rejections)."""
    if rollouts.benchmark == "tau2":
        return observed_tau2(rollouts.domain, None)
    from .taubench.toolsets import spec_toolset

    return spec_toolset(rollouts.domain, spec=False, error_result=error_text)  # type: ignore[arg-type]


def learned_scores(corpus: Sequence[Rollouts], thresholds: Any = None) -> list[VerdictScore]:
    """Learn a spec from the first half of each file; score it on the second half and on the domain's other files."""
    from prefixmon.learn import Learner

    from .transcripts import transcript_from_messages

    episodes = {r.path: conversations(r) for r in corpus}
    scores = []
    for r in corpus:
        half = len(episodes[r.path]) // 2
        learner = Learner(bare_toolset(r), thresholds=thresholds)
        for episode_id, messages in episodes[r.path][:half]:
            learner.add(transcript_from_messages(messages, episode_id=episode_id))
        spec = learner.spec()
        targets = [(r, episodes[r.path][half:], "second half")]
        targets += [(q, episodes[q.path], "all") for q in corpus if q.path != r.path and q.domain == r.domain]
        for target, test, part in targets:
            tools = fit_spec(bare_toolset(target), spec)
            records = run_async(lambda tools=tools, test=test: _replay_observed(tools, test))  # type: ignore[misc]
            scores.append(score_records(records, input=f"{r.path.name} (first half) -> {target.path.name} ({part})"))
    return scores


def observed_tau2(domain: Any, spec: Path | None) -> Toolset:
    """The τ² agent's tools as an unmodelled tool layer: their schemas and ``spec``, nothing that reads τ²'s database.

    The schemas are τ²'s own signatures (:func:`.tau2.toolsets.signature_schema`: nested
    records with their required fields), read laxly as a JSON-schema server would.
    """
    from .tau2.env import Tau2Env
    from .tau2.toolsets import signature_schema

    env = Tau2Env(domain)
    tools = env.environment.tools.get_tools()
    # what an MCP server's readOnlyHint says: which tools only read
    reads = {name: {"metadata": {"read_only": True}} for name in tools if env.tool_type(name) in ("read", "think", "generic")}
    definitions = [
        {"type": "function", "function": {**tool.openai_schema["function"], "parameters": signature_schema(tool)}}
        for tool in tools.values()
    ]
    return Toolset.from_openai(
        definitions, rules=reads, error_result=error_text, spec=spec if spec is not None and spec.is_file() else None
    )


def openai_messages(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """τ² messages as OpenAI chat messages; the user's own calls (telecom) are left out, their results too.

    A τ² tool message flagged ``error`` whose text does not say so is given an ``Error:`` prefix,
    the convention the spec files' error recognisers read.
    """
    out: list[dict[str, Any]] = []
    user_calls: set[str] = set()
    for m in messages:
        role = m.get("role")
        calls = [c for c in m.get("tool_calls") or () if isinstance(c, Mapping)]
        if role == "user" or any(c.get("requestor") == "user" for c in calls):
            user_calls.update(str(c.get("id", "")) for c in calls)
            if isinstance(m.get("content"), str) and m.get("content"):
                out.append({"role": "user", "content": m["content"]})
            continue
        if role == "assistant":
            out.append(
                {
                    "role": "assistant",
                    "content": m.get("content"),
                    "tool_calls": [
                        {"id": str(c.get("id", "")), "function": {"name": c.get("name"), "arguments": c.get("arguments")}}
                        for c in calls
                    ],
                }
            )
        elif role == "tool":
            for tm in m.get("tool_messages") or [m]:
                cid = str(tm.get("id", ""))
                if cid in user_calls:
                    continue
                content = str(tm.get("content") or "")
                if tm.get("error") and not content.startswith("Error:"):
                    content = f"Error: {content}"
                out.append({"role": "tool", "tool_call_id": cid, "content": content})
        elif role == "system" and isinstance(m.get("content"), str):
            out.append({"role": "system", "content": m["content"]})
    return out


async def _replay_observed(
    tools: Toolset, conversations: Sequence[tuple[str, Sequence[Mapping[str, Any]]]]
) -> list[EpisodeRecord]:
    monitor = Monitor(tools, policy="observe")
    records = []
    for task_id, messages in conversations:
        async with monitor.episode(task_id=task_id) as ep:
            await replay_messages(ep, messages)
            ep.finish("failure")
        assert ep.record is not None
        records.append(ep.record)
    return records


def _files(given: Sequence[str], data: str | None) -> list[Path]:
    if given:
        return [Path(f) for f in given]
    folder = Path(data) if data else Path(os.environ.get("PREFIXMON_ROLLOUTS", DEFAULT_DATA))
    files = sorted(p for p in folder.rglob("*.json") if p.is_file())
    if not files:
        raise ReplayInputError(f"{folder}: no result files (give files, --data DIR or PREFIXMON_ROLLOUTS)")
    return files


class RolloutsBench:
    """``prefixmon bench rollouts [FILE...]``."""

    help = "verdicts on real models' recorded τ-bench and τ²-bench runs, scored by the environment's answers"
    description = __doc__

    def configure(self, parser: argparse.ArgumentParser) -> None:
        """The verb's arguments."""
        parser.formatter_class = argparse.RawDescriptionHelpFormatter
        parser.add_argument("files", nargs="*", metavar="FILE", help="τ v1 or τ² result files (default: the corpus)")
        parser.add_argument("--data", metavar="DIR", help="a folder of result files (default: ../shared/data/rollouts)")
        parser.add_argument(
            "--rules",
            choices=("database", "observed", "both", "learned"),
            default="both",
            help="both: database and observed; learned: a spec learned from each file's first half (not in both)",
        )
        parser.add_argument(
            "--enable-above",
            type=float,
            default=None,
            metavar="CONF",
            help="with --rules learned: the confidence from which learned preconditions are enabled (default: learn's)",
        )
        parser.add_argument("--format", choices=("text", "markdown", "json"), default="text")
        parser.add_argument(
            "--fail-on-refusal",
            action="store_true",
            help="exit 3 when a database-backed (or learned) replay refused a call that ran",
        )

    def run(self, args: argparse.Namespace) -> int:
        """Replay and score every file; 1 for a file that is not a result file."""
        try:
            corpus = [detect(p) for p in _files(args.files, args.data)]
        except (ReplayInputError, OSError) as e:
            print(f"prefixmon bench rollouts: error: {e}", file=sys.stderr)
            return 1
        kinds: list[Rules] = ["database", "observed"] if args.rules == "both" else [args.rules]
        tables: dict[str, list[VerdictScore]] = {}
        if args.rules == "learned":
            from prefixmon.learn import Thresholds

            thresholds = Thresholds() if args.enable_above is None else Thresholds(enable_above=args.enable_above)
            tables["learned"] = learned_scores(corpus, thresholds)
        for rules in kinds:
            if rules == "learned":
                continue
            for r in corpus:
                name = f"{r.benchmark} {r.domain}: {r.path.name}"
                tables.setdefault(rules, []).append(score_records(run_file(r, rules), input=name))
        if args.format == "json":
            print(json.dumps({k: json.loads(render_scores(v, "json")) for k, v in tables.items()}, indent=2))
        else:
            for kind, scores in tables.items():
                what = {
                    "database": "database-backed rules / the real τ² environment",
                    "observed": "observation-only spec files",
                    "learned": "specs learned from each file's first half (observation-only)",
                }[kind]
                print(f"\n{what}:")
                print(render_scores(scores, args.format))
        refused = sum(sum(s.refused_ok.values()) for kind in ("database", "learned") for s in tables.get(kind, ()))
        if args.fail_on_refusal and refused:
            print(f"prefixmon bench rollouts: {refused} refusal(s) of calls the environment ran", file=sys.stderr)
            return 3
        return 0


BENCH: Final = RolloutsBench()
"""The ``rollouts`` entry point of ``prefixmon.bench``."""
