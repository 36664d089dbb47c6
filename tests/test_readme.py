"""Every Python block of the README runs as written, and every link in it leads somewhere.

Each ```python block of README.md runs as its own script in a fresh folder (nothing from
earlier blocks is in scope, as for a reader who copies one); in docs/*.md only the blocks
with a directive run. A comment line just above a block says how:

    <!-- readme-test: run -->            (docs) run the block as a script
    <!-- readme-test: pytest -->         the block is a test file: run it with pytest
    <!-- readme-test: needs=EXTRA -->    skip (saying why) only when that extra is not installed

The expected output printed after the first-monitor block is compared with what it prints.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"

EXTRA_MODULES = {
    "analytics": ("numpy", "rich", "matplotlib"),
    "otlp": ("opentelemetry.exporter.otlp.proto.http",),
    "mcp": ("mcp",),
    "openai": ("openai",),
    "pydantic-ai": ("pydantic_ai",),
    "langchain": ("langchain", "langgraph"),
    "openai-agents": ("agents",),
}
"""The modules whose presence means an extra is installed."""

FENCE = re.compile(r"^```(\w*)\s*$")
MARKER = re.compile(r"^<!--\s*readme-test:\s*(.*?)\s*-->\s*$")


@dataclass(frozen=True, slots=True, kw_only=True)
class Block:
    """One fenced code block of the README."""

    file: str
    language: str
    line: int
    """1-based line of the opening fence."""
    code: str
    marker: str = ""
    """The ``readme-test:`` directive just above the block, if any."""

    @property
    def id(self) -> str:
        return f"{self.file}:{self.line}"


def blocks(text: str, file: str = "README.md") -> list[Block]:
    """Every fenced block, in order, with the directive above it."""
    found: list[Block] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if opening is None:
            i += 1
            continue
        start, body = i, []
        i += 1
        while i < len(lines) and not lines[i].startswith("```"):
            body.append(lines[i])
            i += 1
        above = MARKER.match(lines[start - 1]) if start > 0 else None
        marker = above.group(1) if above else ""
        found.append(Block(file=file, language=opening.group(1), line=start + 1, code="\n".join(body) + "\n", marker=marker))
        i += 1
    return found


ALL = blocks(README.read_text(encoding="utf-8"))
PYTHON = [b for b in ALL if b.language == "python"]
DOCS = [
    b
    for doc in sorted((ROOT / "docs").glob("*.md"))
    for b in blocks(doc.read_text(encoding="utf-8"), f"docs/{doc.name}")
    if b.language == "python" and b.marker
]


def missing_extra(block: Block) -> str | None:
    """The extra a ``needs=`` block wants and that is not installed, if any."""
    for part in block.marker.split():
        if part.startswith("needs="):
            extra = part.removeprefix("needs=")
            if extra not in EXTRA_MODULES:
                raise AssertionError(f"{block.id}: unknown extra {extra!r} in the readme-test directive")
            if any(importlib.util.find_spec(m.split(".")[0]) is None or _absent(m) for m in EXTRA_MODULES[extra]):
                return extra
    return None


def _absent(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is None
    except ModuleNotFoundError:
        return True


def run(block: Block, folder: Path) -> subprocess.CompletedProcess[str]:
    """Run ``block`` in ``folder`` as a script, or with pytest for a ``pytest`` block."""
    if "pytest" in block.marker.split():
        (folder / "test_readme_block.py").write_text(block.code, encoding="utf-8")
        argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-W", "error", "test_readme_block.py"]
    else:
        (folder / "block.py").write_text(block.code, encoding="utf-8")
        argv = [sys.executable, "-W", "error", "block.py"]
    # a hang guard only: every block finishes in seconds
    return subprocess.run(argv, cwd=folder, capture_output=True, text=True, timeout=600)


class TestReadme:
    """The README as a newcomer uses it."""

    def test_has_python_blocks(self) -> None:
        """The collector finds the blocks (a README without any would make the tests below vacuous)."""
        assert len(PYTHON) >= 4 and DOCS
        assert PYTHON[0].line < next(
            i for i, line in enumerate(README.read_text().splitlines(), 1) if line == "## Test your own toolset"
        )

    def test_opens_with_your_first_monitor(self) -> None:
        """The first section after Install is "Your first monitor", and its block is the first Python block."""
        headings = [line for line in README.read_text().splitlines() if line.startswith("## ")]
        assert headings[:2] == ["## Install", "## Your first monitor"]

    @pytest.mark.parametrize("block", PYTHON + DOCS, ids=[b.id for b in PYTHON + DOCS])
    def test_python_block_runs_as_written(self, block: Block, tmp_path: Path) -> None:
        """The block runs alone, with warnings as errors, and exits 0."""
        extra = missing_extra(block)
        if extra is not None:
            pytest.skip(f'{block.id} needs the {extra} extra: pip install "prefixmon[{extra}]"')
        done = run(block, tmp_path)
        assert done.returncode == 0, f"{block.id} failed:\n{done.stdout}\n{done.stderr}"

    def test_first_monitor_prints_what_the_readme_says(self, tmp_path: Path) -> None:
        """The output shown after the first block is its real output, and the records file has both episodes."""
        first = PYTHON[0]
        shown = ALL[ALL.index(first) + 1]
        assert shown.language == "", "the first Python block should be followed by its output"
        done = run(first, tmp_path)
        assert done.returncode == 0, done.stderr
        assert done.stdout == shown.code
        lines = (tmp_path / "records.jsonl").read_text().splitlines()
        assert len(lines) == 2 and all('"outcome":"success"' in line.replace(" ", "") for line in lines)

    def test_relative_links_exist(self) -> None:
        """Every relative Markdown link points at a file of the repository."""
        text = README.read_text(encoding="utf-8")
        targets = [t.split("#")[0] for t in re.findall(r"\]\(([^)\s]+)\)", text) if not re.match(r"[a-z]+:", t)]
        assert targets, "no relative links found"
        missing = [t for t in targets if t and not (ROOT / t).exists()]
        assert missing == []

    def test_docs_links_exist(self) -> None:
        """The docs' relative links too."""
        missing = []
        for doc in sorted((ROOT / "docs").glob("*.md")):
            for target in re.findall(r"\]\(([^)\s]+)\)", doc.read_text(encoding="utf-8")):
                path = target.split("#")[0]
                if path and not re.match(r"[a-z]+:", path) and not (doc.parent / path).exists():
                    missing.append(f"{doc.name}: {target}")
        assert missing == []
