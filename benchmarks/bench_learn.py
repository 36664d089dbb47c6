"""``prefixmon learn``: what it learns on BFCL and τ-bench, and how its time grows with the corpus (issue 15).

Run:  .venv/bin/python benchmarks/bench_learn.py accuracy [--seeds 5]
      .venv/bin/python benchmarks/bench_learn.py timing [--sizes 10000,30000,100000]

``accuracy`` builds the corpora by running them on their environments: BFCL's ground truth
(every multi-turn task, as BFCL result files, executed on BFCL's own classes by the
``bfcl`` reader), the same plus the bench's perturbations (drop, swap, wrong type, early
tool, invented id; two per family and task), and τ-bench's gold actions (with the reads
an agent makes before them) on the sandbox, as τ-bench results files. It prints

1. the learned references, invalidations, producers and write tools beside the
   hand-written toolsets (adapters/bfcl/specs.py + perturb.py, adapters/taubench/toolsets.py):
   agreed / learned / hand-written that the corpus exercised, precision and recall;
2. train on one half of the tasks (seeded), replay the other half with the learned spec
   (``Toolset.from_openai`` + ``apply_spec``, policy observe): calls the environment
   accepted that the spec refuses before they run, by cause, with the bare toolset as the
   baseline; rejected calls the spec catches before they run.

``timing`` learns from N transcripts (the real ones above, shuffled, cycled with fresh
episode ids, streamed), each size in its own process so its time and peak memory (VmHWM)
are its own, and prints the CPU time per transcript and the ratios between sizes: linear
time means the ratio of times equals the ratio of sizes, bounded memory means the peak
stays flat. CPU time, because on a shared machine wall time also counts waiting for a core.
"""

from __future__ import annotations

import argparse
import json
import pickle
import random
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from prefixmon import Toolset
from prefixmon.learn import Learner, Transcript, read_transcripts
from prefixmon.learn.evaluate import CheckReport, Comparison, check_spec, compare_rules

if TYPE_CHECKING:
    from prefixmon.adapters.taubench import Domain

HERE = Path(__file__).resolve().parent


# -- corpora --------------------------------------------------------------------------------------
def bfcl_files(folder: Path, *, perturbed: bool = False, probes: bool = False) -> list[Path]:
    """BFCL result files of the ground truth (and, if asked, perturbations or use-after-cancel probes)."""
    from prefixmon.adapters.bfcl import load_tasks, perturb
    from prefixmon.adapters.bfcl.replay import ground_truth_results

    tasks = load_tasks()
    gt = folder / "BFCL_ground_truth_result.json"
    gt.write_text("".join(json.dumps(e) + "\n" for e in ground_truth_results(tasks)))
    files = [gt]
    if perturbed:
        rng = random.Random(0)
        path = folder / "BFCL_perturbed_result.json"
        with path.open("w") as fh:
            for task in tasks:
                for variant in perturb(task, rng, per_family=2):
                    fh.write(json.dumps({"id": task.id, "result": [[[c.to_source() for c in t]] for t in variant.turns]}) + "\n")
        files.append(path)
    if probes:
        path = folder / "BFCL_use_after_cancel_result.json"
        with path.open("w") as fh:
            for entry in ground_truth_results(tasks):
                turns = []
                for turn in entry["result"]:
                    calls: list[str] = []
                    for call in turn[0]:
                        calls.append(call)
                        if call.startswith("cancel_booking("):
                            calls.append("retrieve_invoice(" + call[len("cancel_booking(") :])
                    turns.append([calls])
                if turns != entry["result"]:
                    fh.write(json.dumps({"id": entry["id"], "result": turns}) + "\n")
        files.append(path)
    return files


def tau_files(folder: Path, domain: Domain) -> list[Path]:
    """τ-bench results files of the gold runs of a domain's splits."""
    from prefixmon.adapters.taubench.replay import gold_rollouts

    splits = ["airline_test"] if domain == "airline" else ["retail_train", "retail_test", "retail_dev"]
    files = []
    for split in splits:
        path = folder / f"tau_{split}.json"
        path.write_text(json.dumps(gold_rollouts(split)))
        files.append(path)
    return files


def bfcl_tools() -> Toolset:
    from prefixmon.adapters.bfcl.replay import tool_definitions

    return Toolset.from_openai(tool_definitions())


def tau_tools(domain: Domain) -> Toolset:
    from prefixmon.adapters.taubench import load_schemas
    from prefixmon.adapters.transcripts import error_text

    return Toolset.from_openai(load_schemas(domain), error_result=error_text)  # what `prefixmon replay --tools` builds


def bfcl_reference() -> Toolset:
    from prefixmon.adapters.bfcl import build_toolset

    return build_toolset("declared")


def tau_reference(domain: Domain) -> Toolset:
    from prefixmon.adapters.taubench.toolsets import toolset

    return toolset(domain)


# -- accuracy ---------------------------------------------------------------------------------------
def _cell(c: Comparison | None) -> str:
    if c is None:
        return "n/a (not declared)"
    hand = len(c.agreed) + len(c.missed)
    learned = len(c.agreed) + len(c.extra)
    p = "—" if c.precision is None else f"{c.precision:.2f}"
    r = "—" if c.recall is None else f"{c.recall:.2f}"
    return f"{len(c.agreed)}/{learned}/{hand} · P {p} · R {r}"


def compare_table(rows: Sequence[tuple[str, Learner, Toolset]]) -> str:
    lines = [
        "| corpus | episodes | references | invalidations | producers | write tools |",
        "|---|---:|---|---|---|---|",
    ]
    details = []
    for name, learner, reference in rows:
        spec = learner.spec()
        c = compare_rules(spec, reference, learner=learner)
        lines.append(
            f"| {name} | {learner.stats.episodes:,} | {_cell(c.references)} | {_cell(c.invalidations)} | "
            f"{_cell(c.producers)} | {_cell(c.writes)} |"
        )
        whole = sorted(
            f"{tool}: {{{kind}: {key!r}}}"
            for tool, rules in spec.tools.items()
            for kind, key in rules.produces.items()
            if key in (".", "*")
        )
        if whole:
            details.append(f"- {name}, whole-result producers ('.' the answer, '*' every value): {', '.join(whole)}")
        held = [n.split(": not written", 1)[0] for n in learner.stats.notes if ": not written as a reference" in n]
        if held:
            details.append(f"- {name}, references held back (produces cannot name where values came from): {', '.join(held)}")
        for what in (c.references, c.invalidations, c.writes):
            if what is None:
                continue
            if what.extra:
                details.append(
                    f"- {name}, {what.name} learned but not hand-written: {', '.join('.'.join(x) for x in what.extra)}"
                )
            if what.missed:
                details.append(
                    f"- {name}, {what.name} hand-written but not learned: {', '.join('.'.join(x) for x in what.missed)}"
                )
            if what.unobserved:
                never = ", ".join(".".join(x) for x in what.unobserved)
                details.append(f"- {name}, {what.name} hand-written, never exercised by the corpus: {never}")
    cells = "cells: agreed / learned / hand-written rules the corpus exercised"
    return "\n".join([*lines, "", cells, *details])


def _task_of(episode: str) -> str:
    """The task an episode belongs to (BFCL's four categories of a task share its ground truth)."""
    if "/multi_turn_" in episode:
        return episode.rsplit("_", 1)[-1]
    return episode.split("-task", 1)[-1].split("-", 1)[0] + episode.split("-", 1)[0]


def split(transcripts: Sequence[Transcript], seed: int) -> tuple[list[Transcript], list[Transcript]]:
    """Half of the tasks (seeded) to train on, the other half to test on."""
    tasks = sorted({_task_of(t.episode_id) for t in transcripts})
    random.Random(seed).shuffle(tasks)
    train_tasks = set(tasks[: len(tasks) // 2])
    train = [t for t in transcripts if _task_of(t.episode_id) in train_tasks]
    test = [t for t in transcripts if _task_of(t.episode_id) not in train_tasks]
    return train, test


def held_out(
    transcripts: Sequence[Transcript], tools: Callable[[], Toolset], seed: int
) -> tuple[CheckReport, CheckReport, Learner]:
    """(bare toolset, learned spec) replays of the test half, and the learner of the train half."""
    train, test = split(transcripts, seed)
    learner = Learner(tools()).add_all(train)
    spec = learner.spec()
    bare = anyio.run(check_spec, test, tools())
    learned = anyio.run(check_spec, test, tools().apply_spec(spec))
    return bare, learned, learner


def held_out_table(rows: Sequence[tuple[str, Sequence[Transcript], Callable[[], Toolset]]], seeds: int) -> str:
    lines = [
        "| corpus | seed | test episodes | accepted calls | refused: bare | refused: learned spec | by cause (learned) | "
        "rejected | caught before they ran |",
        "|---|---:|---:|---:|---:|---:|---|---:|---:|",
    ]
    notes = []
    for name, transcripts, tools in rows:
        for seed in range(seeds):
            bare, learned, learner = held_out(transcripts, tools, seed)
            added = _added(bare, learned)
            causes = Counter(r.cause for r in added)
            by_cause = ", ".join(f"{c} {n}" for c, n in sorted(causes.items())) or "—"
            lines.append(
                f"| {name} | {seed} | {learned.episodes} | {learned.accepted:,} | {len(bare.refused)} | {len(added)} | "
                f"{by_cause} | {learned.rejected} | {learned.caught} |"
            )
            for refusal in added[:6]:
                flagged = any(refusal.tool in n or n.split(" ", 1)[0] in refusal.reason for n in learner.stats.notes)
                notes.append(
                    f"- {name} seed {seed}: {refusal.episode} depth {refusal.depth} {refusal.tool} [{refusal.cause}] "
                    f"{refusal.reason}" + (" (a learner note names it)" if flagged else "")
                )
            if learned.false_errors:
                notes.append(f"- {name} seed {seed}: {len(learned.false_errors)} accepted result(s) read as errors")
    return "\n".join([*lines, "", "refused: accepted calls judged not executable before they ran", *notes])


def _added(bare: CheckReport, learned: CheckReport) -> list[Any]:
    """Refusals of the learned spec that the bare toolset does not make (its own schema refusals are the baseline)."""
    seen = {(r.episode, r.depth) for r in bare.refused}
    return [r for r in learned.refused if (r.episode, r.depth) not in seen]


def accuracy(seeds: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        gt_files = bfcl_files(folder, perturbed=True, probes=True)
        gt = list(read_transcripts(gt_files[:1]))
        perturbed = list(read_transcripts(gt_files[1:2]))
        probes = list(read_transcripts(gt_files[2:3]))
        airline = list(read_transcripts(tau_files(folder, "airline")))
        retail = list(read_transcripts(tau_files(folder, "retail")))
    print("## Learned rules beside the hand-written toolsets\n")
    print(
        compare_table(
            [
                ("BFCL ground truth", Learner(bfcl_tools()).add_all(gt), bfcl_reference()),
                ("BFCL ground truth + perturbations", Learner(bfcl_tools()).add_all([*gt, *perturbed]), bfcl_reference()),
                ("BFCL ground truth + use-after-cancel", Learner(bfcl_tools()).add_all([*gt, *probes]), bfcl_reference()),
                ("τ-bench airline gold", Learner(tau_tools("airline")).add_all(airline), tau_reference("airline")),
                ("τ-bench retail gold", Learner(tau_tools("retail")).add_all(retail), tau_reference("retail")),
            ]
        )
    )
    print("\n## Held-out replay (train on half of the tasks, replay the other half)\n")
    print(
        held_out_table(
            [
                ("BFCL ground truth", gt, bfcl_tools),
                ("τ-bench airline gold", airline, lambda: tau_tools("airline")),
                ("τ-bench retail gold", retail, lambda: tau_tools("retail")),
            ],
            seeds,
        )
    )
    train = [t for t in retail if "retail_train" in t.episode_id]
    test = [t for t in retail if "retail_train" not in t.episode_id]
    spec = Learner(tau_tools("retail")).add_all(train).spec()
    bare = anyio.run(check_spec, test, tau_tools("retail"))
    learned = anyio.run(check_spec, test, tau_tools("retail").apply_spec(spec))
    added = _added(bare, learned)
    print(
        f"\nτ-bench's own split (learn on retail_train, replay retail_test + retail_dev): {learned.accepted:,} accepted calls, "
        f"{len(added)} refused by the learned spec, {learned.caught} of {learned.rejected} rejected calls caught"
    )
    for r in added:
        print(f"- {r.episode} depth {r.depth} {r.tool} [{r.cause}] {r.reason}")


# -- timing -------------------------------------------------------------------------------------------
CHILD = """
import json, pickle, sys, time
from prefixmon.learn import Learner, Transcript
from prefixmon.adapters.bfcl.replay import tool_definitions
from prefixmon.adapters.taubench import load_schemas
from prefixmon import Toolset
base = pickle.load(open(sys.argv[1], "rb"))
n = int(sys.argv[2])
definitions = {d.get("function", d)["name"]: d for d in [*tool_definitions(), *load_schemas("airline"), *load_schemas("retail")]}
tools = Toolset.from_openai(list(definitions.values()))  # airline and retail share a few names
def stream():
    for i in range(n):
        t = base[i % len(base)]
        yield Transcript(episode_id=f"{t.episode_id}#{i}", events=t.events, given=t.given)
start, cpu = time.perf_counter(), time.process_time()
learner = Learner(tools).add_all(stream())
spec = learner.spec()
seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
hwm = int(open('/proc/self/status').read().split('VmHWM:')[1].split()[0]) / 1024
calls = learner.stats.calls
print(json.dumps({"seconds": seconds, "cpu": cpu, "peak_mb": hwm, "calls": calls, "tools": len(spec.tools)}))
"""


def _rollout_transcripts() -> list[Transcript]:
    """Real models' runs (../shared/data/rollouts) when the corpus is there: their rejected calls feed precondition mining."""
    from prefixmon.adapters.rollouts import DEFAULT_DATA, conversations, detect
    from prefixmon.adapters.transcripts import transcript_from_messages

    files = sorted(DEFAULT_DATA.rglob("*.json")) if DEFAULT_DATA.is_dir() else []
    return [
        transcript_from_messages(messages, episode_id=f"{path.stem}:{episode}")
        for path in files
        for episode, messages in conversations(detect(path))
    ]


def timing(sizes: Sequence[int]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        base = [
            *read_transcripts(bfcl_files(folder)),
            *read_transcripts(tau_files(folder, "airline")),
            *read_transcripts(tau_files(folder, "retail")),
            *_rollout_transcripts(),
        ]
        random.Random(0).shuffle(base)  # an even mix of both benchmarks at every size
        corpus = folder / "base.pickle"
        corpus.write_bytes(pickle.dumps(base))
        results = []
        for n in sizes:
            done = subprocess.run(
                [sys.executable, "-c", CHILD, str(corpus), str(n)], capture_output=True, text=True, cwd=HERE.parent
            )
            if done.returncode:
                raise SystemExit(f"the {n:,}-transcript run failed:\n{done.stderr}")
            results.append((n, json.loads(done.stdout.strip().splitlines()[-1])))
    print(f"base corpus: {len(base):,} real transcripts (BFCL ground truth, τ-bench gold, real models' runs), cycled\n")
    print("| transcripts | calls | CPU time | µs per transcript | CPU time ratio | size ratio | wall time | peak memory |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    n0, r0 = results[0]
    for n, r in results:
        print(
            f"| {n:,} | {r['calls']:,} | {r['cpu']:.1f} s | {1e6 * r['cpu'] / n:,.0f} | {r['cpu'] / r0['cpu']:.2f} | "
            f"{n / n0:.1f} | {r['seconds']:.1f} s | {r['peak_mb']:.0f} MB |"
        )
    print("\nCPU time of the learning process (the machine is shared: wall time includes waiting for a core)")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="what", required=True)
    acc = sub.add_parser("accuracy")
    acc.add_argument("--seeds", type=int, default=5)
    tim = sub.add_parser("timing")
    tim.add_argument("--sizes", default="10000,30000,100000")
    args = parser.parse_args(argv)
    if args.what == "accuracy":
        accuracy(args.seeds)
    else:
        timing([int(x) for x in args.sizes.split(",")])
    return 0


if __name__ == "__main__":
    sys.exit(main())
