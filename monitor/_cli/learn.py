"""``prefixmon learn``: draft a spec file from recorded runs, with the evidence for every rule."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from .paths import check_inputs

if TYPE_CHECKING:
    from ..toolset import Toolset


_THRESHOLDS: tuple[tuple[str, type, str, str], ...] = (
    ("min_support", int, "N", "observations a rule needs"),
    ("min_confidence", float, "F", "share of observations that must agree, 0.5 to 1"),
    ("min_rejected", int, "N", "rejected calls a learned precondition must separate"),
    ("enable_above", float, "CONF", "confidence from which a learned precondition is enabled, 0 to 1 (1: none)"),
    ("examples", int, "N", "examples quoted per rule, 0 for none"),
    ("min_distinct", int, "N", "distinct values a grounded argument needs"),
    ("max_producers", int, "N", "producers named per reference"),
)
"""The ``--min-support``-style flags: a :class:`~prefixmon.learn.Thresholds` field each (type, metavar, help)."""


class LearnCommand:
    """``prefixmon learn --tools TOOLS.json FILE... --out SPEC``."""

    help = "draft a spec file (references, grounding, invalidations, errors, read/write, preconditions) from transcripts"
    description = (
        "Read recorded runs (OpenAI-messages JSON Lines, tau-bench results, BFCL result files, OTLP traces "
        "recorded with content, or any format registered in prefixmon.transcripts) and write a spec file: "
        "reference arguments and the tools that produce them, grounded and derived arguments, invalidations, "
        "error-result recognisers, read/write tools, and candidate preconditions (disabled until enabled). "
        "Every rule carries its evidence. --merge keeps every hand-written rule of an existing spec; "
        "--diff shows what would change and writes nothing."
    )

    def configure(self, parser: argparse.ArgumentParser) -> None:
        """The verb's arguments."""
        from ..learn.learner import Thresholds

        d = Thresholds()
        parser.add_argument("files", nargs="+", metavar="FILE", help="transcript files")
        parser.add_argument("--tools", required=True, metavar="TOOLS.json", help="OpenAI tool definitions (a JSON list)")
        parser.add_argument("--out", metavar="SPEC", help="the spec file to write (.yaml, .yml or .json)")
        parser.add_argument(
            "--format",
            default="auto",
            metavar="FORMAT",
            help="transcript format, e.g. openai-jsonl, tau, bfcl, otlp (default: detect)",
        )
        parser.add_argument("--merge", metavar="EXISTING", help="merge into this spec; its hand-written rules are never changed")
        parser.add_argument("--diff", action="store_true", help="print what would change (a unified diff) and write nothing")
        for field, kind, metavar, what in _THRESHOLDS:
            default = getattr(d, field)
            parser.add_argument(
                "--" + field.replace("_", "-"),
                type=kind,
                default=default,
                metavar=metavar,
                help=f"{what} (default: {default:g})",
            )

    def run(self, args: argparse.Namespace) -> int:
        """Learn, then write the spec (or print the diff); exit 1 when input lines were skipped."""
        from ..learn.learner import Learner, Thresholds
        from ..learn.output import count_rules, diff_spec, format_of, merge_spec, write_spec
        from ..learn.transcript import Problem, read_transcripts
        from ..rules.specfile import load_spec

        if args.out is None and not args.diff:
            print("prefixmon learn: give --out SPEC (or --diff to see what would change)", file=sys.stderr)
            return 2
        if args.out is not None:
            format_of(args.out)  # a bad extension fails before any work
        check_inputs(args.files, streams=False, empty=True)  # formats are detected from a first read, then read again
        thresholds = Thresholds(**{field: getattr(args, field) for field, *_ in _THRESHOLDS})
        tools = _tools(Path(args.tools))
        base_path = args.merge or (args.out if args.diff and args.out and Path(args.out).is_file() else None)
        base = load_spec(base_path) if base_path else None
        problems: list[Problem] = []
        learner = Learner(tools, thresholds=thresholds)
        learner.add_all(read_transcripts(args.files, format=args.format, problems=problems))
        for problem in problems:
            print(f"{'skipped' if problem.skipped else 'note'}: {problem}", file=sys.stderr)
        learned = learner.spec()
        kept: tuple[str, ...] = ()
        result = learned
        if base is not None:
            merged = merge_spec(base, learned)
            result, kept = merged.spec, merged.kept
        for note in learner.stats.notes:
            print(f"note: {note}", file=sys.stderr)
        for line in kept:
            print(f"kept: {line}", file=sys.stderr)
        undeclared = learner.stats.undeclared
        if undeclared:
            names = ", ".join(f"{n} ({c})" for n, c in undeclared.most_common(5))
            print(f"prefixmon learn: calls of tools not in {args.tools} were not learned from: {names}", file=sys.stderr)
        counted = count_rules(learned)
        if counted["enabled"]:
            print(
                f"note: {counted['enabled']} learned precondition(s) are enabled (confidence at least "
                f"{thresholds.enable_above:g}): review them before the spec blocks calls, or --enable-above 1 to leave "
                "every one disabled",
                file=sys.stderr,
            )
        counts = ", ".join(f"{n} {what}" for what, n in counted.items() if n)
        summary = f"learned {counts or 'no rules'} from {learner.stats.episodes} episode(s), {learner.stats.calls} call(s)"
        if args.diff:
            text = diff_spec(base, result, old_name=base_path or "(no spec)", new_name=args.out or "learned")
            sys.stdout.write(text or "no change\n")
            print(f"{summary}; nothing written (--diff)", file=sys.stderr)
        else:
            write_spec(result, args.out)
            print(f"{summary}; wrote {args.out}" + (f" (merged into {args.merge})" if args.merge else ""))
        skipped = sum(p.skipped for p in problems)
        if skipped:
            print(f"prefixmon learn: skipped {skipped} malformed line(s) or entr(ies)", file=sys.stderr)
        return 1 if skipped else 0


def _tools(path: Path) -> Toolset:
    """The ``--tools`` file as a toolset; errors name the file (and the entry)."""
    from ..exceptions import SpecError
    from ..toolset import Toolset

    try:
        return Toolset.from_openai(path)
    except SpecError as e:
        raise ValueError(str(e)) from None
