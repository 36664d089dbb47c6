"""``prefixmon replay``: recorded agent runs to episode records, through a registered source."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from pathlib import Path
from typing import Any

from .._internal.log import listening
from ..commands import REPLAY_GROUP, ReplayRequest
from ..records.model import BadLine
from . import plugins
from .args import key_value
from .paths import check_input, check_inputs, check_output, has_content
from .score import add_score_options, report_scores, score_file

BFCL: str = "bfcl"
"""The source ``--bfcl`` names."""
TRANSCRIPTS: str = "transcripts"
"""The source ``--tools`` names: OpenAI-messages transcripts over any tool definitions."""
USAGE: str = (
    "%(prog)s (--bfcl | --domain DOMAIN) --out RECORDS.jsonl [options] FILE [FILE ...]\n"
    "       %(prog)s --tools TOOLS.json --out RECORDS.jsonl [options] FILE"
)
"""Two forms: a transcripts file is replayed one at a time, against one tools file."""


class _Once(argparse.Action):
    """An option that may be given once: a second value is a usage error, not silently the one used."""

    def __call__(
        self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any, option: str | None = None
    ) -> None:
        earlier = getattr(namespace, self.dest, None)
        if earlier is not None:
            parser.error(
                f"{option} given twice ({earlier}, then {values}): give one file; "
                "to replay against the tools of several, merge their JSON lists into one"
            )
        setattr(namespace, self.dest, values)


class ReplayCommand:
    """``prefixmon replay``."""

    help = "judge recorded agent runs (BFCL result files, tau-bench or OpenAI-messages transcripts)"
    description = (
        "Replay recorded runs through the monitor and write one episode record per rollout. "
        "--bfcl for BFCL multi-turn result files (replayed on the real environment classes), "
        "--domain D for a registered benchmark domain (tau-airline, tau-retail, ...), "
        "--tools TOOLS.json for generic OpenAI-messages JSON Lines transcripts."
    )

    def configure(self, parser: argparse.ArgumentParser) -> None:
        """The verb's arguments; ``--domain`` lists every registered source."""
        domains = [n for n in plugins.names(REPLAY_GROUP) if n not in (BFCL, TRANSCRIPTS)]
        parser.usage = USAGE
        parser.add_argument(
            "files",
            nargs="+",
            metavar="FILE",
            help="result or transcript files; with --tools (and --domain tau-airline / tau-retail) one file",
        )
        source = parser.add_mutually_exclusive_group(required=True)
        source.add_argument("--bfcl", action="store_true", help="the files are BFCL multi-turn result files")
        source.add_argument("--domain", choices=domains, metavar="DOMAIN", help=f"benchmark domain: {', '.join(domains)}")
        source.add_argument(
            "--tools", action=_Once, metavar="TOOLS.json", help="OpenAI tool definitions (one JSON list) for generic transcripts"
        )
        parser.add_argument("--out", required=True, metavar="RECORDS.jsonl", help="episode records are written here")
        parser.add_argument(
            "--label", action="append", default=[], type=key_value, metavar="KEY=VALUE", help="label every record"
        )
        parser.add_argument(
            "--spec", action="append", default=[], metavar="SPEC", help="rule file merged onto the toolset (repeatable)"
        )
        parser.add_argument(
            "--mode",
            choices=("declared", "dry_run", "none"),
            default="declared",
            help="how preconditions are decided: declared rules, a dry run on a copy of the environment, or none",
        )
        parser.add_argument("--format", default="auto", metavar="FORMAT", help="transcript format (default: auto-detect)")
        parser.add_argument("--data", metavar="DIR", help="data folder, for sources that need one")
        parser.add_argument(
            "--score",
            action="store_true",
            help="then score the refusals against the environment's answers (what prefixmon score prints)",
        )
        add_score_options(parser, format_option="--score-format")

    def run(self, args: argparse.Namespace) -> int:
        """Check the files, hand the parsed request to its source, and refuse an empty result."""
        name = BFCL if args.bfcl else TRANSCRIPTS if args.tools else args.domain
        source = plugins.load(REPLAY_GROUP, name)
        formats: tuple[str, ...] = ("auto", *getattr(source, "formats", ()))
        if args.format not in formats:  # a source that reads one format must not ignore the option
            print(
                f"prefixmon replay: error: --format {args.format}: the {name} source reads {', '.join(formats)}",
                file=sys.stderr,
            )
            return 2
        check_inputs(args.files, folders=bool(getattr(source, "folders", False)), streams=False)
        if args.tools:
            check_input(args.tools, option="--tools")
        for spec in args.spec:
            check_input(spec, option="--spec")
        out = check_output(args.out, option="--out")
        request = ReplayRequest(
            source=name,
            files=tuple(Path(f) for f in args.files),
            out=Path(args.out),
            labels=dict(args.label),
            mode=args.mode,
            tools=Path(args.tools) if args.tools else None,
            specs=tuple(Path(s) for s in args.spec),
            data=Path(args.data) if args.data else None,
            format=args.format,
        )
        before = _stat(out)
        quiet = contextlib.redirect_stdout(sys.stderr) if args.score_format == "json" else contextlib.nullcontext()
        with quiet, listening(_print_spec_warning):
            code: int = source.replay(request)  # (a JSON score owns stdout: the source's summary goes to stderr)
        wrote = _stat(out) != before
        if code in (0, 1) and (wrote or code == 0) and not has_content(out):
            # a source that found nothing to replay must not look like success; one that failed before
            # writing anything (a bad spec, a missing extra) has said why, and the transcripts are not to blame
            files = ", ".join(args.files)
            print(
                f"prefixmon replay: error: no episode was replayed from {files}: nothing in it is a run the "
                f"{name} source recognises ({out} has no records)",
                file=sys.stderr,
            )
            return 1
        if code == 0 and (args.score or args.fail_on_refusal):
            errors: list[BadLine] = []
            score = score_file(str(out), errors)
            score.input = ", ".join(args.files)
            return report_scores([score], args.score_format, args.fail_on_refusal)
        return code


def _stat(path: Path) -> tuple[int, int, int] | None:
    """What tells whether a file was written: its inode, size and modification time (``None``: absent)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def _print_spec_warning(event: str, fields: dict[str, Any]) -> bool:
    """A spec's warning (``spec_ref_never_produced``) as the command's own line, instead of a log line."""
    if event != "spec_ref_never_produced":
        return False
    print(f"prefixmon replay: warning: {fields.get('message')}", file=sys.stderr)
    return True
