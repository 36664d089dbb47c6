"""Hostile spec and tools files: alias bombs, duplicate keys and huge integers fail fast as SpecError."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from prefixmon import SpecError, Toolset
from prefixmon.rules.specfile import load_spec

LAUGHS = "schema: prefixmon.spec/1\nconstants:\n" + "".join(
    "  a{0}: &a{0} [{1}]\n".format(n, ",".join([f"*a{n - 1}" if n else '"lol"'] * 10)) for n in range(9)
)
"""A billion laughs: nine levels of ten aliases each, 10**9 strings once expanded, in 700 bytes."""

LOADER = """\
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))  # a regression fails with MemoryError, not a dead machine
from prefixmon import SpecError, Toolset
try:
    Toolset().apply_spec(sys.argv[1])
except SpecError as e:
    print("SpecError:", e)
else:
    print("loaded")
"""


def _write(tmp_path: Path, text: str, name: str = "rules.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def _load_in_child(path: Path) -> str:
    """What loading the file in a fresh interpreter says (a hang fails the test after 30 s)."""
    done = subprocess.run([sys.executable, "-c", LOADER, str(path)], capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip()


class TestAliases:
    """Aliases cannot make a small file expand into a huge value."""

    @pytest.mark.skipif(sys.platform == "win32", reason="uses resource limits")
    def test_billion_laughs_fails_fast_with_the_line(self, tmp_path: Path) -> None:
        """The alias that pushes the expansion past the bound is named with its line."""
        path = _write(tmp_path, LAUGHS)
        out = _load_in_child(path)
        assert out.startswith(f"SpecError: {path}:"), out
        line = int(out.split(":")[2])
        assert 3 <= line <= 11 and "aliases repeat more than" in out, out

    @pytest.mark.skipif(sys.platform == "win32", reason="uses resource limits")
    def test_laughs_under_tool_parameters_fail_too(self, tmp_path: Path) -> None:
        """A bomb used as a tool's JSON Schema (an enum) fails the same way before anything compiles it."""
        text = LAUGHS + "tools:\n  newtool:\n    parameters: {type: object, properties: {p: {enum: *a8}}}\n"
        out = _load_in_child(_write(tmp_path, text))
        assert out.startswith("SpecError: ") and "aliases repeat more than" in out, out

    def test_an_alias_inside_its_own_anchor(self, tmp_path: Path) -> None:
        """A recursive value is not data a spec can hold."""
        with pytest.raises(SpecError, match=r"rules\.yaml:2: alias \*a refers to a value that contains it"):
            load_spec(_write(tmp_path, "schema: prefixmon.spec/1\nconstants: {x: &a [1, *a]}\n"))

    def test_modest_aliases_still_load(self, tmp_path: Path) -> None:
        """Sharing a rule between tools is what anchors are for; it loads, and lines point into the anchor."""
        text = textwrap.dedent("""\
            schema: prefixmon.spec/1
            constants:
              statuses: &s [pending, processed, delivered]
              again: *s
            defaults:
              errors: [{text: "^Error"}]
            tools:
              a:
                parameters: &p {type: object, properties: {x: {enum: *s}}}
              b:
                parameters: *p
            """)
        spec = load_spec(_write(tmp_path, text))
        assert spec.constants["again"] == ["pending", "processed", "delivered"]
        assert spec.tools["b"].parameters == spec.tools["a"].parameters
        assert spec.where("tools", "b") == f"{tmp_path / 'rules.yaml'}:10"


class TestDuplicateKeys:
    """A key given twice in one mapping is an error, not a silently dropped rule."""

    def test_a_tool_declared_twice_in_yaml(self, tmp_path: Path) -> None:
        """The second block of a tool would replace the first."""
        text = "schema: prefixmon.spec/1\ntools:\n  get_order:\n    access: read\n  get_order:\n    access: write\n"
        with pytest.raises(SpecError, match=r"rules\.yaml:5: duplicate key 'get_order'$"):
            load_spec(_write(tmp_path, text))

    def test_a_field_given_twice_in_yaml(self, tmp_path: Path) -> None:
        """``access: read`` then ``access: write`` in one mapping."""
        text = "schema: prefixmon.spec/1\ntools:\n  get_order:\n    access: read\n    access: write\n"
        tools = Toolset()
        tools.add_schema("get_order", {"type": "object"})
        with pytest.raises(SpecError, match=r"rules\.yaml:5: duplicate key 'access'$"):
            tools.apply_spec(_write(tmp_path, text))

    def test_a_flow_mapping_in_yaml(self, tmp_path: Path) -> None:
        """Duplicates in a ``{...}`` mapping are caught too."""
        text = "schema: prefixmon.spec/1\nconstants: {x: 1,\n  x: 2}\n"
        with pytest.raises(SpecError, match=r"rules\.yaml:3: duplicate key 'x'$"):
            load_spec(_write(tmp_path, text))

    def test_a_merge_key_override_is_not_a_duplicate(self, tmp_path: Path) -> None:
        """``<<: *base`` then a key of the base overrides it, as YAML says."""
        text = "schema: prefixmon.spec/1\nconstants:\n  base: &b {x: 1, y: 2}\n  more: {<<: *b, x: 3}\n"
        assert load_spec(_write(tmp_path, text)).constants["more"] == {"x": 3, "y": 2}

    def test_a_json_spec(self, tmp_path: Path) -> None:
        """JSON objects keep the last duplicate too unless told not to."""
        text = '{\n  "schema": "prefixmon.spec/1",\n  "tools": {"a": {"access": "read",\n    "access": "write"}}\n}\n'
        with pytest.raises(SpecError, match=r"rules\.json:4: duplicate key 'access'$"):
            load_spec(_write(tmp_path, text, "rules.json"))

    def test_a_json_spec_whose_line_cannot_be_found(self, tmp_path: Path) -> None:
        """JSON that YAML cannot read (a tab before a key) still names the file and the key."""
        text = '{"schema": "prefixmon.spec/1",\t"schema": "prefixmon.spec/2"}'
        with pytest.raises(SpecError, match=r"rules\.json(:1)?: duplicate key 'schema'$"):
            load_spec(_write(tmp_path, text, "rules.json"))

    def test_a_tools_file(self, tmp_path: Path) -> None:
        """A tools file defining a key twice in one object."""
        text = '[\n  {"type": "function",\n   "function": {"name": "a",\n                "name": "b"}}\n]\n'
        with pytest.raises(SpecError, match=r"tools\.json:4: duplicate key 'name'$"):
            Toolset.from_openai(_write(tmp_path, text, "tools.json"))

    def test_the_same_key_in_different_objects_is_fine(self, tmp_path: Path) -> None:
        """Only a key repeated within one object is a duplicate."""
        tools = [{"type": "function", "function": {"name": n, "parameters": {"type": "object"}}} for n in ("a", "b")]
        assert Toolset.from_openai(_write(tmp_path, json.dumps(tools), "tools.json")).names == ["a", "b"]


HUGE = "9" * 5000


class TestHugeIntegers:
    """An integer too long for Python to convert is a SpecError with the file and line, not a ValueError."""

    def test_yaml_spec(self, tmp_path: Path) -> None:
        """``probe_budget: 999...``."""
        with pytest.raises(SpecError, match=r"rules\.yaml:2: an integer of 5000 digits is too long"):
            load_spec(_write(tmp_path, f"schema: prefixmon.spec/1\nprobe_budget: {HUGE}\n"))

    def test_yaml_key(self, tmp_path: Path) -> None:
        """As a mapping key, too (an explicit one: a plain key is at most 1024 characters)."""
        with pytest.raises(SpecError, match=r"rules\.yaml:3: an integer of 5000 digits is too long"):
            load_spec(_write(tmp_path, f"schema: prefixmon.spec/1\nconstants:\n  ? {HUGE}\n  : x\n"))

    def test_json_spec(self, tmp_path: Path) -> None:
        """The same number in a JSON spec."""
        text = f'{{"schema": "prefixmon.spec/1",\n "probe_budget": {HUGE}}}'
        with pytest.raises(SpecError, match=r"rules\.json:2: an integer of 5000 digits is too long"):
            Toolset().apply_spec(_write(tmp_path, text, "rules.json"))

    def test_tools_file(self, tmp_path: Path) -> None:
        """A ``--tools`` file with a huge ``maxLength``."""
        text = f'[{{"type": "function",\n  "function": {{"name": "a", "parameters": {{"maxLength": -{HUGE}}}}}}}]'
        with pytest.raises(SpecError, match=r"tools\.json:2: an integer of 5000 digits is too long"):
            Toolset.from_openai(_write(tmp_path, text, "tools.json"))
