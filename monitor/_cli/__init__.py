"""The ``prefixmon`` command line.

Core verbs are :class:`~prefixmon.commands.Command` objects listed in :func:`core_commands`;
benchmarks, transcript sources and third-party verbs come from entry points (see
:mod:`prefixmon.commands`), so the core never imports an adapter.

Heavy imports (numpy, rich, matplotlib) happen inside the verbs, so ``prefixmon --help``
works without the ``analytics`` extra.

Exit codes: 0 success, 1 bad input (a bad record line, a missing file, a missing extra),
2 usage error (argparse), 130 interrupted.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from .._version import VERSION as __version__
from ..commands import BENCH_GROUP, COMMANDS_GROUP, Command
from ..exceptions import PrefixmonError
from . import plugins
from .demo import DemoCommand
from .export import ExportCommand
from .learn import LearnCommand
from .replay import ReplayCommand
from .report import ReportCommand
from .score import ScoreCommand

__all__ = ("build_parser", "main")


class BenchCommand:
    """``prefixmon bench NAME``: one sub-verb per registered benchmark."""

    help = "check the monitor against benchmark environments"

    def configure(self, parser: argparse.ArgumentParser) -> None:
        """One sub-parser per entry point of ``prefixmon.bench``."""
        benches = parser.add_subparsers(dest="bench", metavar="BENCH", required=True)
        for name in plugins.names(BENCH_GROUP):
            _add(benches, name, plugins.load(BENCH_GROUP, name))

    def run(self, args: argparse.Namespace) -> int:  # pragma: no cover - the sub-verb's handler runs instead
        """Never called: each benchmark sets its own handler."""
        return 2


def core_commands() -> dict[str, Command]:
    """The verbs the core provides, in help order."""
    return {
        "demo": DemoCommand(),
        "report": ReportCommand(),
        "replay": ReplayCommand(),
        "score": ScoreCommand(),
        "learn": LearnCommand(),
        "export": ExportCommand(),
        "bench": BenchCommand(),
    }


def _add(subparsers: argparse._SubParsersAction[argparse.ArgumentParser], name: str, command: Any) -> None:
    help_text = getattr(command, "help", "")
    parser = subparsers.add_parser(name, help=help_text, description=getattr(command, "description", help_text))
    command.configure(parser)
    # the verb's own parser, so that an option it does not know is reported with its usage
    # (the innermost verb's default wins: ``bench NAME`` names the benchmark's parser)
    parser.set_defaults(handler=command.run, verb_parser=parser)


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser: the core verbs, then every registered verb."""
    parser = argparse.ArgumentParser(
        prog="prefixmon",
        description="Prefix-executability monitor and metrics for tool-using LLM agents.",
    )
    parser.add_argument("--version", action="version", version=f"prefixmon {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    core = core_commands()
    for name, command in core.items():
        _add(subparsers, name, command)
    for name in plugins.names(COMMANDS_GROUP):
        if name not in core:  # a plug-in cannot shadow a core verb
            _add(subparsers, name, plugins.load(COMMANDS_GROUP, name))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``prefixmon`` console script; returns the exit code."""
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # argparse would report them with the top-level usage, not the verb's
        verb: argparse.ArgumentParser = getattr(args, "verb_parser", parser)
        verb.error(f"unrecognized arguments: {' '.join(unknown)}")
    handler: Callable[[argparse.Namespace], int] = args.handler
    try:
        return handler(args)
    except KeyboardInterrupt:
        print(f"prefixmon {args.command}: interrupted", file=sys.stderr)
        return 130
    except (PrefixmonError, ValueError, OSError, ImportError) as e:
        print(f"prefixmon {args.command}: error: {_describe(e)}", file=sys.stderr)
        return 1
    except (RecursionError, MemoryError, OverflowError) as e:  # input past what a reader guards against
        what = "nested too deeply" if isinstance(e, RecursionError) else "too large"
        print(f"prefixmon {args.command}: error: the input is {what} to process ({type(e).__name__})", file=sys.stderr)
        return 1


def _describe(e: BaseException) -> str:
    if isinstance(e, OSError) and e.filename:  # name the file, in words, not as [Errno N]
        name = os.fspath(e.filename)
        if isinstance(e, FileNotFoundError):
            folder = os.path.dirname(name)
            missing = f" (the folder {folder} does not exist)" if folder and not os.path.isdir(folder) else ""
            return f"no such file: {name}{missing}"
        if isinstance(e, IsADirectoryError):
            return f"{name} is a folder, not a file"
        if isinstance(e, PermissionError):
            return f"permission denied: {name}"
        return f"{name}: {e.strerror or e}"
    if isinstance(e, ImportError):
        hint = str(e) if str(e).startswith("pip install") else 'pip install "prefixmon[analytics]"'
        return f"a package is missing; install it with: {hint}"
    return str(e)
