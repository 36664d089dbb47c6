"""Checks of the files a verb is given, before any work: say what is wrong and where.

A directory, a missing file, an empty file, a pretty-printed JSON document where JSON Lines
are expected, or an output whose folder does not exist each get one message naming the
path (and the option it came from), instead of an operating-system error about a file the
user never named or a result computed and then lost.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Final

SNIFF_BYTES: Final = 4096
"""How much of an input is read to recognise what kind of file it is."""
REPORT_SCHEMA: Final = re.compile(rb'"(prefixmon\.report/[0-9]+)"')
"""A ``prefixmon report --format json`` document, any version."""


class InputProblem(ValueError):
    """A file given on the command line cannot be used; the message names it."""


def check_input(
    path: str | os.PathLike[str],
    *,
    option: str | None = None,
    jsonl: bool = False,
    folders: bool = False,
    streams: bool = True,
    empty: bool = False,
) -> Path:
    """The path of an input file that exists, is a file and is not empty.

    Args:
        path: as given on the command line.
        option: the option it was given with (``--tools``), for the message; ``None`` for a positional.
        jsonl: the file must be JSON Lines: a pretty-printed JSON document (a report, a
            list) is refused with what it looks like.
        folders: a folder is an input too (a benchmark's run folders); it is returned as it is.
        streams: a pipe or FIFO is an input too (the verb reads it once); else it is refused.
        empty: an empty or blank file is an input too (one shard of several that holds nothing).

    Raises:
        InputProblem: what is wrong with the file, naming it.
    """
    file = Path(path)
    where = f"{option} {file}" if option else str(file)
    if not file.exists():
        raise InputProblem(f"{where}: no such file")
    if file.is_dir():
        if folders:
            return file
        inside = sorted(p.name for p in file.glob("*.jsonl"))[:3]
        hint = f" (it holds {', '.join(inside)}{', ...' if len(inside) == 3 else ''})" if inside else ""
        raise InputProblem(f"{where} is a folder; give the files in it{hint}")
    if not file.is_file():  # a pipe or FIFO (`report <(zcat ...)`): reading ahead would lose what the reader needs
        if not streams:
            raise InputProblem(not_regular(where))
        return file
    try:
        with file.open("rb") as fh:
            head = fh.read(SNIFF_BYTES)
    except OSError as e:
        raise InputProblem(f"{where}: cannot be read: {e.strerror or e}") from e
    if not empty and not head.strip() and not (len(head) == SNIFF_BYTES and has_content(file)):  # blank past the sniffed head too
        raise InputProblem(f"{where} is empty" if not head else f"{where} holds only blank lines")
    if jsonl:
        _check_json_lines(where, head)
    return file


def check_inputs(
    paths: Iterable[str | os.PathLike[str]],
    *,
    jsonl: bool = False,
    folders: bool = False,
    streams: bool = True,
    empty: bool = False,
) -> list[Path]:
    """:func:`check_input` on every positional input, in order."""
    return [check_input(p, jsonl=jsonl, folders=folders, streams=streams, empty=empty) for p in paths]


def not_regular(where: str) -> str:
    """The message for a pipe or FIFO given to a verb that reads its inputs more than once."""
    return (
        f"{where} is not a regular file but a pipe or FIFO, which this verb cannot read (it reads an input "
        "more than once); save it to a file first"
    )


def _check_json_lines(where: str, head: bytes) -> None:
    text = head.removeprefix(b"\xef\xbb\xbf").lstrip()
    first_line = text.split(b"\n", 1)[0].strip()
    if found := REPORT_SCHEMA.search(text[:400]):
        raise InputProblem(
            f"{where} is a prefixmon report ({found.group(1).decode()}), not episode records; "
            "pass the records file (JSON Lines) the report was built from"
        )
    if first_line in (b"{", b"["):
        raise InputProblem(
            f"{where}:1: a JSON document spread over several lines, not JSON Lines; "
            "records are one JSON object per line (as the sink and `prefixmon replay --out` write them)"
        )


def check_output(path: str | os.PathLike[str], *, option: str) -> Path:
    """The path of an output file whose folder exists and which is not itself a folder.

    Raises:
        InputProblem: the folder is missing, or the path is a folder; names the option.
    """
    file = Path(path)
    if file.is_dir():
        raise InputProblem(f"{option} {file} is a folder; give a file name, e.g. {file / 'out'}")
    folder = file.parent
    if not folder.exists():
        raise InputProblem(f"{option} {file}: the folder {folder} does not exist; create it first (mkdir -p {folder})")
    if not folder.is_dir():
        raise InputProblem(f"{option} {file}: {folder} is a file, not a folder")
    return file


def has_content(path: Path) -> bool:
    """Whether ``path`` exists and holds a non-blank line (read until the first one)."""
    try:
        with path.open("rb") as fh:
            for line in fh:
                if line.strip():
                    return True
    except OSError:
        return False
    return False
