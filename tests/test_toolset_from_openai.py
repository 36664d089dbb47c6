"""``Toolset.from_openai`` on a ``--tools`` file: the same toolset as from the parsed list, errors naming the file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from prefixmon import SpecError, Toolset

TOOLS = [
    {"type": "function", "function": {"name": "get_order", "parameters": {"type": "object", "properties": {"order_id": {}}}}},
    {"type": "function", "name": "cancel_order", "parameters": {"type": "object", "properties": {"order_id": {}}}},
]


def test_a_file_gives_the_same_toolset(tmp_path: Path) -> None:
    """A path (str or Path, with a BOM or without) reads as the list it holds; spec= still merges."""
    path = tmp_path / "tools.json"
    path.write_text("\ufeff" + json.dumps(TOOLS), encoding="utf-8")
    spec = {"schema": "prefixmon.spec/1", "tools": {"cancel_order": {"args": {"order_id": {"ref": "order_id"}}}}}
    for source in (path, str(path)):
        tools = Toolset.from_openai(source, spec=spec)
        assert tools.names == Toolset.from_openai(TOOLS).names == ["get_order", "cancel_order"]
        assert [(path, ref.kind) for path, ref in tools["cancel_order"].refs] == [("order_id", "order_id")]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b'[{"type": "function",\n "function": {', r"tools\.json:2: not JSON"),
        (b'[{"name": "\xff"}]', r"tools\.json: not UTF-8 text \(byte 11\)"),
        (b'{"get_order": {}}', r"tools\.json: expected a JSON list of tool definitions, got dict"),
        (b'[{"type": "function", "function": {"parameters": {}}}]', r"tools\.json: tools\[0\]"),
    ],
)
def test_bad_files_name_the_file(tmp_path: Path, content: bytes, message: str) -> None:
    """Not JSON (with its line), not UTF-8, not a list, a bad entry (with its index): SpecError naming the file."""
    path = tmp_path / "tools.json"
    path.write_bytes(content)
    with pytest.raises(SpecError, match=message):
        Toolset.from_openai(path)


def test_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match=r"nope\.json: cannot read the tools file"):
        Toolset.from_openai(tmp_path / "nope.json")
