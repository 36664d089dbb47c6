"""``prefixmon bench tau``: gold sequences through the monitor, and perturbed-gold agreement with the sandbox."""

from __future__ import annotations

import argparse
import importlib.util
from typing import Final

from prefixmon.commands import run_async

from . import agreement, gold

__all__ = ("BENCH", "TauBench")


class TauBench:
    """``prefixmon bench tau`` (the ``tau`` entry point of ``prefixmon.bench``)."""

    help = "tau-bench airline and retail: gold sequences and perturbed-gold agreement with the sandbox"
    description = (__doc__ or "").split("\n\n")[0]

    def configure(self, parser: argparse.ArgumentParser) -> None:
        """The bench's arguments."""
        parser.add_argument("--split", action="append", help=f"task split (default: {', '.join(gold.DEFAULT_SPLITS)})")
        parser.add_argument("--seed", type=int, default=0, help="seed of the perturbations (default: 0)")
        parser.add_argument("--data", metavar="DIR", help="tau-bench data folder")
        parser.add_argument("--show", type=int, default=10, metavar="N", help="disagreements to list (default: 10)")

    def run(self, args: argparse.Namespace) -> int:
        """Print the gold report, then the agreement summary."""
        splits = args.split or list(gold.DEFAULT_SPLITS)
        print(gold.report(splits, data=args.data))
        print()
        summary = run_async(lambda: agreement.run_suite(splits, seed=args.seed, data=args.data))
        print(agreement.format_summary(summary, show=args.show))
        print()
        if importlib.util.find_spec("cel_expr_python") is None:  # a plain install: the database rules only
            print('observation-only spec files: not run (their CEL preconditions need: pip install "prefixmon[cel]")')
            print()
            print(_comparison({"rules over the database": summary}))
            return 0
        observed = run_async(lambda: agreement.run_suite(splits, seed=args.seed, data=args.data, rules="spec"))
        probed = run_async(lambda: agreement.run_suite(splits, seed=args.seed, data=args.data, rules="spec+probes"))
        print("observation-only spec files with their probes (examples/specs/tau_*.yaml: no database):")
        print(agreement.format_summary(probed, show=args.show))
        print()
        print(_comparison({"rules over the database": summary, "observation-only spec": observed, "  + probes": probed}))
        return 0


def _comparison(summaries: dict[str, agreement.Summary]) -> str:
    """Pre-call prediction of the sandbox's rejections, rule sets side by side."""
    lines = ["pre-call prediction of sandbox rejections  precision  recall  refused-but-accepted"]
    for name, summary in summaries.items():
        precision, recall = summary.prediction()
        flagged = summary.confusion()[(False, True)]
        p = "—" if precision is None else f"{precision:.4f}"
        r = "—" if recall is None else f"{recall:.4f}"
        lines.append(f"  {name:<40} {p:>9}  {r:>6}  {flagged:>20}")
    return "\n".join(lines)


BENCH: Final = TauBench()
