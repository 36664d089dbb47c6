"""``prefixmon score``: pre-call refusals in episode records scored against the environment's answers."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from ..records.model import BadLine, EpisodeRecord, iter_records
from .paths import check_input

if TYPE_CHECKING:  # imported by the verbs: prefixmon.analytics tries numpy on import
    from ..analytics.scoring import VerdictScore

FORMATS: tuple[str, ...] = ("text", "markdown", "json")


def add_score_options(parser: argparse.ArgumentParser, *, format_option: str) -> None:
    """``--fail-on-refusal`` and the score's format option (``replay`` names it ``--score-format``)."""
    parser.add_argument(format_option, dest="score_format", choices=FORMATS, default="text", help="how the score is printed")
    parser.add_argument(
        "--fail-on-refusal",
        action="store_true",
        help="exit 3 when a schema, dependency or precondition refusal hit a call the environment ran",
    )


def score_file(name: str, errors: list[BadLine]) -> VerdictScore:
    """The score of one record file; its bad lines are appended to ``errors`` and skipped."""
    from ..analytics.scoring import VerdictScore

    score = VerdictScore(input=name)
    if _is_traces(name):  # OTLP JSON traces: rejections are visible only when content was captured
        from ..records.otlp import iter_otlp_spans, records_from_spans

        spans = iter_otlp_spans(name, on_error="skip", errors=errors)
        records: Iterable[EpisodeRecord] = records_from_spans(spans, on_error="skip", bad=errors)
    else:
        records = iter_records(name, on_error="skip", errors=errors)
    for record in records:
        score.add(record)
    return score


def _is_traces(name: str) -> bool:
    from ..records.otlp import is_trace_line

    with open(name, "rb") as f:
        for line in f:
            if line.strip():
                return is_trace_line(line)
    return False


def report_scores(scores: Sequence[VerdictScore], fmt: str, fail_on_refusal: bool) -> int:
    """Print the scores; 3 under ``fail_on_refusal`` when a successful call was refused, else 0."""
    from ..analytics.scoring import render_scores, total

    print(render_scores(list(scores), fmt))
    refused_ok = sum(total(scores).refused_ok.values())
    if fail_on_refusal and refused_ok:
        print(f"prefixmon: {refused_ok} refusal(s) of calls the environment ran", file=sys.stderr)
        return 3
    return 0


class ScoreCommand:
    """``prefixmon score RECORDS.jsonl...``."""

    help = "score pre-call refusals in episode records against what the environment did"
    description = (
        "For every record file: calls, environment errors, refusals (schema, dependency, precondition), "
        "recall and precision of refusals against the environment's errors, refusals of calls the "
        "environment ran by cause with the first examples, and information findings. Records come "
        "from prefixmon replay (any source), a live monitor's JSON Lines sink, or OTLP JSON traces "
        "(exported with capture_content: without it, spans carry no error texts and rejections are not seen)."
    )

    def configure(self, parser: argparse.ArgumentParser) -> None:
        """The verb's arguments."""
        parser.add_argument("files", nargs="+", metavar="RECORDS.jsonl", help="episode record files")
        add_score_options(parser, format_option="--format")

    def run(self, args: argparse.Namespace) -> int:
        """Score each file; a bad record line fails with its file and line."""
        for name in args.files:
            check_input(name, jsonl=True, streams=False)
        errors: list[BadLine] = []
        scores = [score_file(name, errors) for name in args.files]
        code = report_scores(scores, args.score_format, args.fail_on_refusal)
        for bad in errors:  # the rest was scored; the bad lines are named, and the run fails
            print(f"prefixmon score: error: {bad.path}:{bad.line}: {bad.message} (not scored)", file=sys.stderr)
        return 1 if errors else code
