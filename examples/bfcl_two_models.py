"""Two models side by side on BFCL multi-turn: result files in, PEC report out.

Real leaderboard outputs cannot be downloaded offline (and ``bfcl-eval`` ships none), so the
two models are SIMULATED from BFCL's ground truth with the BFCL adapter's own perturbation
functions, at different error habits:

- ``sim-careful-FC`` (function-calling encoding, ``{name: json-args}``): rarely slips, but
  a slip (a dropped call, two calls swapped, an argument of the wrong type) is never repaired.
- ``sim-plan-first`` (prompting encoding, Python-call strings): often acts before it can,
  calling a held-out tool one turn early or trying an id it invented, reads the error and
  then makes the correct call, so it still often succeeds (a recovery pattern).

The script writes both models' result files in BFCL's own layout
(``<out>/result/<model>/multi_turn/BFCL_v4_multi_turn_<category>_result.json``, so the
replay infers model and category from the path), replays them with
``prefixmon replay --bfcl`` on the real environment classes, and prints
``prefixmon report --by model`` with a paired bootstrap, a JSON copy and the PEC plot.

Run: ``python examples/bfcl_two_models.py [--out DIR] [--limit N]`` (default: all 200 tasks
each of ``base`` and ``miss_func``, a few seconds). On real result files
the same two commands apply: ``prefixmon replay --bfcl result/*/multi_turn/*.json --out
records.jsonl`` then ``prefixmon report records.jsonl --by model``.
"""

from __future__ import annotations

import argparse
import json
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal

from prefixmon._cli import main as prefixmon

try:
    from prefixmon.adapters.bfcl import CATEGORIES, BfclCall, BfclTask, ground_truth_calls, load_tasks, perturb
except ImportError as e:  # the example's extra is missing: say exactly what to install
    raise SystemExit(
        f"{e}\nThis example needs the BFCL data (without its dependencies) and the analytics extra:\n"
        '  pip install --no-deps "bfcl-eval==2026.3.23" "mpmath==1.3.0"\n  pip install "prefixmon[analytics]"'
    ) from None

Encoding = Literal["fc", "prompt"]
Step = list[BfclCall]
Turn = list[tuple[BfclCall, bool]]
"""A turn's calls, each with whether the model stops after it to read the result."""

SLIPS: Final = ("drop", "swap", "corrupt_type")
"""Perturbation families a model does not recover from."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Habits:
    """A simulated model's error habits (chances per task)."""

    name: str
    """Model name, as BFCL names its result folder."""
    encoding: Encoding
    """``fc``: steps of ``{name: json-args}`` objects; ``prompt``: steps as Python-call strings."""
    slip: float
    """One unrecovered slip: a dropped call, a swap, or an argument of the wrong type."""
    early: float
    """``miss_func`` tasks: call the held-out tool one turn before it is offered (and again when it is)."""
    probe: float
    """Try an invented id first, then make the correct call."""


MODELS: Final = (
    Habits(name="sim-careful-FC", encoding="fc", slip=0.10, early=0.05, probe=0.0),
    Habits(name="sim-plan-first", encoding="prompt", slip=0.04, early=0.8, probe=0.6),
)


def _changed(before: Sequence[Sequence[BfclCall]], after: Sequence[Sequence[BfclCall]]) -> tuple[int, int] | None:
    """The first (turn, index) where two call sequences of equal shape differ."""
    for t, (a, b) in enumerate(zip(before, after, strict=True)):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            if x != y:
                return t, i
    return None


def simulate(task: BfclTask, habits: Habits, seed: int) -> list[Turn]:
    """One rollout of ``task`` by a model with ``habits`` (deterministic per seed, model and task)."""
    rng = random.Random(f"{seed}/{habits.name}/{task.id}")
    gt = ground_truth_calls(task)
    variants: dict[str, list[tuple[tuple[BfclCall, ...], ...]]] = {}
    for v in perturb(task, rng):
        variants.setdefault(v.family, []).append(v.turns)
    turns: list[Turn] = [[(c, False) for c in turn] for turn in gt]

    slips = [s for family in SLIPS for s in variants.get(family, [])]
    if slips and rng.random() < habits.slip:
        turns = [[(c, False) for c in turn] for turn in rng.choice(slips)]

    early = variants.get("early_tool", [])
    if early and rng.random() < habits.early:
        # perturb() appends the held-out call to the end of the turn before it is offered.
        (variant,) = early
        t = next(k for k, (a, b) in enumerate(zip(gt, variant, strict=True)) if len(a) != len(b))
        turns[t].append((variant[t][-1], True))

    invented = variants.get("invent_id", [])
    if invented and rng.random() < habits.probe:
        (variant,) = invented
        where = _changed(gt, variant)
        assert where is not None
        t, i = where
        correct = [k for k, (c, _) in enumerate(turns[t]) if c == gt[t][i]]
        if correct:
            turns[t].insert(correct[0], (variant[t][i], True))
    return turns


def steps_of(turn: Turn, encoding: Encoding) -> list[Any]:
    """A turn as BFCL writes it: a list of steps, each the model's calls of one response."""
    steps: list[Step] = []
    current: Step = []
    for call, stop in turn:
        current.append(call)
        # A function-calling model makes one call per response here; a prompting model
        # writes every call it plans at once, and stops only to read an error it expects.
        if stop or encoding == "fc":
            steps.append(current)
            current = []
    if current:
        steps.append(current)
    if encoding == "fc":
        return [[{c.name: json.dumps(c.args)} for c in step] for step in steps]
    return ["[" + ", ".join(c.to_source() for c in step) + "]" for step in steps]


def write_result_files(out: Path, categories: Sequence[str], limit: int | None, seed: int) -> list[Path]:
    """Both models' result files, in BFCL's layout; returns their paths."""
    paths = []
    for category in categories:
        tasks = load_tasks([category])[:limit]
        for habits in MODELS:
            path = out / "result" / habits.name / "multi_turn" / f"BFCL_v4_multi_turn_{category}_result.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("w", encoding="utf-8") as f:
                for task in tasks:
                    result = [steps_of(turn, habits.encoding) for turn in simulate(task, habits, seed)]
                    zeros = [[0.0] * len(turn) for turn in result]
                    entry = {
                        "id": task.id,
                        "result": result,
                        "input_token_count": zeros,
                        "output_token_count": zeros,
                        "latency": zeros,
                    }
                    f.write(json.dumps(entry) + "\n")
            paths.append(path)
    return paths


def main(argv: Sequence[str] | None = None) -> int:
    """Write, replay and report; returns the exit code."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("bfcl-two-models"), help="output folder (default: %(default)s)")
    parser.add_argument("--limit", type=int, default=None, metavar="N", help="first N tasks per category (default: all)")
    parser.add_argument(
        "--categories", default="base,miss_func", help=f"comma-separated, of {', '.join(CATEGORIES)} (default: %(default)s)"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the simulated models and the bootstrap (default: 0)")
    parser.add_argument("--bootstrap", type=int, default=2000, metavar="N", help="bootstrap resamples (default: %(default)s)")
    args = parser.parse_args(argv)
    categories = [c.strip() for c in args.categories.split(",") if c.strip()]
    unknown = sorted(set(categories) - set(CATEGORIES))
    if args.limit is not None and args.limit < 1:
        parser.error(f"--limit must be at least 1, got {args.limit}")
    if unknown:
        parser.error(f"unknown categories {', '.join(unknown)}; known: {', '.join(CATEGORIES)}")

    files = write_result_files(args.out, categories, args.limit, args.seed)
    records = args.out / "records.jsonl"
    replay = ["replay", "--bfcl", *map(str, files), "--out", str(records)]
    print("$ prefixmon " + " ".join(replay))
    code = prefixmon(replay)
    if code != 0:
        return code

    a, b = (f"model={m.name}" for m in MODELS)
    report = [
        "report",
        str(records),
        "--by",
        "model",
        "--bootstrap",
        str(args.bootstrap),
        "--seed",
        str(args.seed),
        "--compare",
        f"{b},{a}",
    ]
    plot = args.out / "pec.png"
    print("\n$ prefixmon " + " ".join([*report, "--plot", str(plot)]))
    code = prefixmon([*report, "--plot", str(plot)])
    if code != 0:
        return code
    return prefixmon([*report, "--format", "json", "--output", str(args.out / "report.json")])


if __name__ == "__main__":
    raise SystemExit(main())
