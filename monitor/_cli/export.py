"""``prefixmon export``: episode records to one Parquet file (``prefixmon.parquet/1``)."""

from __future__ import annotations

import argparse
import os
import sys

from .paths import check_inputs, check_output


def parquet_name(text: str) -> str:
    """An argparse type: an output file name ending in ``.parquet`` (any case).

    Export writes Parquet only; a file named ``r.csv`` or ``r.jsonl`` holding Parquet would
    mislead whoever opens it.
    """
    if not text.lower().endswith(".parquet") and not os.path.isdir(text):  # a folder: check_output says so
        raise argparse.ArgumentTypeError(
            f"{text}: export writes Parquet (prefixmon.parquet/1) only, so the name must end in .parquet "
            f"(e.g. {_suggest(text)}); for the metrics as CSV use `prefixmon report RECORDS --format csv`"
        )
    return text


def _suggest(text: str) -> str:
    root, _ = os.path.splitext(text)
    return (root if os.path.basename(root) else os.path.join(root, "episodes")) + ".parquet"


class ExportCommand:
    """``prefixmon export RECORDS... --out FILE.parquet``."""

    help = "write episode records (JSON Lines, OTLP traces or Parquet) to one Parquet file"
    description = (
        "Validate every episode record of the inputs (record JSON Lines, OTLP JSON trace files or "
        "Parquet) and write them to one Parquet file in the versioned prefixmon.parquet/1 schema "
        "(labels as a map, actions as a nested list; see docs/fleet.md), for `prefixmon report "
        "FILE.parquet --engine duckdb|spark` and any SQL engine. Needs the parquet extra."
    )

    def configure(self, parser: argparse.ArgumentParser) -> None:
        """The verb's arguments."""
        parser.add_argument("records", nargs="+", metavar="RECORDS", help="episode record files")
        parser.add_argument(
            "--out", "-o", required=True, type=parquet_name, metavar="FILE.parquet", help="the Parquet file to write (.parquet)"
        )
        parser.add_argument(
            "--compression", default="zstd", choices=("zstd", "snappy", "gzip", "none"), help="column compression (default: zstd)"
        )
        parser.add_argument(
            "--on-error",
            choices=("raise", "skip"),
            default="raise",
            help="a bad record line stops the export and writes nothing (raise, default) or is skipped and reported (skip)",
        )

    def run(self, args: argparse.Namespace) -> int:
        """Export and say how many episodes were written."""
        check_inputs(args.records, jsonl=True)  # before any work, and naming --out, not a temporary file
        check_output(args.out, option="--out")
        from ..records.model import BadLine
        from ..records.parquet import export_records

        skipped: list[BadLine] = []
        n = export_records(args.records, args.out, on_error=args.on_error, errors=skipped, compression=args.compression)
        for bad in skipped[:5]:
            print(f"prefixmon export: skipped {bad.path}:{bad.line}: {bad.message}", file=sys.stderr)
        if len(skipped) > 5:
            print(f"prefixmon export: ... {len(skipped)} bad lines skipped in all", file=sys.stderr)
        print(f"prefixmon export: wrote {n:,} episodes to {args.out}", file=sys.stderr)
        return 0
