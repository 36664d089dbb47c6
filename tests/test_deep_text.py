"""Every core parser of untrusted text refuses JSON nested past 400 levels before ``json``
recurses near the interpreter's limit, where a garbage collection's finalizers find no room
(CI saw a ``RecursionError`` in an event loop's ``__del__``). Each case parses 5,000-deep
text while garbage is collected at every allocation, 60 frames deep."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from prefixmon import PlanError, SpecError, Toolset
from prefixmon.analytics.completion import read_annotations
from prefixmon.exceptions import RecordError
from prefixmon.plan import parse_plan
from prefixmon.rules.specfile import load_spec, parse_spec
from prefixmon.telemetry import redact_keys

from .test_bounds import collections_watched

DEEP = "[" * 5_000 + "]" * 5_000


def _plan_text(tmp_path: Path) -> Any:
    return parse_plan(DEEP)


def _plan_step_arguments(tmp_path: Path) -> Any:
    return parse_plan([{"tool": "f", "args": '{"a": ' + DEEP + "}"}])


def _redacted_result(tmp_path: Path) -> Any:
    assert redact_keys("token")("result", '{"token": "s", "x": ' + DEEP + "}") == "[REDACTED]"


def _annotations(tmp_path: Path) -> Any:
    path = tmp_path / "annotations.jsonl"
    path.write_text('{"episode_id": "e", "x": ' + DEEP + "}\n")
    return read_annotations(path)


def _json_spec(tmp_path: Path) -> Any:
    path = tmp_path / "rules.json"
    path.write_text('{"schema": "prefixmon.spec/1", "tools": ' + DEEP + "}")
    return load_spec(path)


def _yaml_spec(tmp_path: Path) -> Any:
    path = tmp_path / "rules.yaml"
    path.write_text("schema: prefixmon.spec/1\ntools: " + DEEP + "\n")
    return load_spec(path)


def _block_yaml_spec(tmp_path: Path) -> Any:
    path = tmp_path / "rules.yaml"  # a list in a list, one level a line, as indentation nests them
    path.write_text("schema: prefixmon.spec/1\ntools:\n" + "".join(" " * i + "-\n" for i in range(1, 5_000)))
    return load_spec(path)


def _flow_yaml_spec_under_the_json_bound(tmp_path: Path) -> Any:
    path = tmp_path / "rules.yaml"  # 390 levels: under json's bound, over what PyYAML's recursion can compose
    path.write_text("schema: prefixmon.spec/1\ntools:\n  " + "[" * 390 + "]" * 390 + "\n")
    return load_spec(path)


def _schema_text(tmp_path: Path) -> Any:
    return Toolset().add_schema("f", '{"type": "object", "properties": {"a": ' + DEEP + "}}")


def _tools_file(tmp_path: Path) -> Any:
    path = tmp_path / "tools.json"
    path.write_text('[{"type": "function",\n "function": ' + DEEP + "}]")
    return Toolset.from_openai(path)


CASES: dict[str, tuple[Callable[[Path], Any], type[Exception] | None, str]] = {
    "plan text": (_plan_text, PlanError, "nested too deeply"),
    "plan step arguments": (_plan_step_arguments, PlanError, "nested too deeply"),
    "a captured result to redact": (_redacted_result, None, ""),
    "annotations": (_annotations, RecordError, r"annotations\.jsonl:1: .*nested too deeply"),
    "a JSON spec": (_json_spec, SpecError, r"rules\.json:1: nested too deeply"),
    "a YAML spec": (_yaml_spec, SpecError, r"rules\.yaml:2: nested too deeply"),
    "a block-style YAML spec": (_block_yaml_spec, SpecError, r"rules\.yaml:202: nested too deeply \(more than 200 levels\)"),
    "a flow-style YAML spec": (_flow_yaml_spec_under_the_json_bound, SpecError, r"rules\.yaml:3: nested too deeply \("),
    "a tool's JSON Schema as text": (_schema_text, SpecError, "nested too deeply"),
    "a tools file": (_tools_file, SpecError, r"tools\.json:2: nested too deeply"),
}


@pytest.mark.parametrize("case", CASES)
def test_deep_text_is_refused_with_room_left(case: str, tmp_path: Path) -> None:
    """The text is refused (or masked) with a message; no collection met a full stack."""
    parse, error, message = CASES[case]
    with collections_watched() as failures:
        if error is None:
            parse(tmp_path)
        else:
            with pytest.raises(error, match=message):
                parse(tmp_path)
    assert failures == [], f"{len(failures)} collections found no room"


def test_shallow_text_is_still_read(tmp_path: Path) -> None:
    """Just under the bound, everything parses as before."""
    nested = "[" * 390 + "]" * 390
    assert len(parse_plan([{"tool": "f", "args": '{"a": ' + nested + "}"}])) == 1
    path = tmp_path / "annotations.jsonl"
    path.write_text(json.dumps({"episode_id": "e", "label": "wrong_tool"})[:-1] + ', "x": ' + nested + "}\n")
    read_annotations(path)


class TestDeepSpecs:
    """Spec nesting past the YAML bound (200 levels): refused at its line in YAML, however it is
    built; in JSON (read by json, up to 400 levels) it costs no other location its line."""

    def test_aliases_cannot_nest_past_the_bound(self) -> None:
        """Anchors that nest each other build depth from little text (1,200 levels from 2.5 KB
        loaded, and json.dumps of the constants then raised RecursionError)."""
        lines = ["schema: prefixmon.spec/1", "tools: {}", "constants:", "  a0: &a0 " + "[" * 150 + "1" + "]" * 150]
        lines += [f"  a{k}: &a{k} " + "[" * 150 + f"*a{k - 1}" + "]" * 150 for k in range(1, 8)]
        with pytest.raises(SpecError, match=r"^s:5: nested too deeply \(more than 200 levels, through alias \*a0\)"):
            parse_spec("\n".join(lines) + "\n", source="s")

    def test_json_keeps_its_lines_past_the_yaml_bound(self) -> None:
        """An error elsewhere in a JSON spec holding a 250-deep value is still named at its line
        (the location lines come from PyYAML, which refused the deep value and lost them all)."""
        deep = "[" * 250 + "]" * 250
        text = '{"schema": "prefixmon.spec/1",\n "tools": {"f": {"bogus": 1}},\n "constants": {"x": ' + deep + "}}"
        with pytest.raises(SpecError, match=r"^s:2: tools\.f: unknown field 'bogus'"):
            parse_spec(text, source="s", json_only=True)
        twice = '{"schema": "prefixmon.spec/1",\n "tools": {},\n "constants": {"x": ' + deep + ',\n "x": 2}}'
        with pytest.raises(SpecError, match=r"^s:4: duplicate key 'x'"):
            parse_spec(twice, source="s", json_only=True)


class TestWhatIsNotJson:
    """Text that only looks deep is judged as json would read it."""

    def test_brackets_inside_an_unclosed_string_are_text(self) -> None:
        """After a quote that never closes, brackets are string content to json: not nesting (they
        counted, and each escaped quote after it restarted a scan to the end: quadratic time)."""
        from prefixmon.records.jsonlines import too_deep

        assert not too_deep('["' + '\\"' * 10 + "[" * 500)
        assert too_deep("[" * 401 + '"' + '\\"' * 10)  # what comes before the quote still nests

    def test_deep_text_that_is_not_json_is_scrubbed_not_masked(self) -> None:
        """Captured text that starts with 401 brackets but is not JSON stays text (it was masked whole)."""
        text = "[" * 401 + " partial output"
        assert redact_keys("token")("result", {"log": text}) == {"log": text}

    def test_plan_step_arguments_as_bytes_with_a_byte_order_mark(self) -> None:
        """Bytes are read as json.loads reads them (a BOM, UTF-16): the depth check changes nothing."""
        (step,) = parse_plan([{"tool": "f", "args": b'\xef\xbb\xbf{"x": 1}'}])
        assert step.args == {"x": 1}
        (step,) = parse_plan([{"tool": "f", "args": '{"x": 2}'.encode("utf-16")}])
        assert step.args == {"x": 2}
