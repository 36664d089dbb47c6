"""Spec files: every kind of bad file fails at load time with its file, line and what is wrong."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from prefixmon import SpecError, Toolset
from prefixmon.rules.specfile import SCHEMA, load_spec, parse_spec, spec_json_schema

ROOT = Path(__file__).resolve().parent.parent


def orders_toolset() -> Toolset:
    """Two schema-declared tools, as an MCP listing or OpenAI definitions would give them."""
    tools = Toolset()
    tools.add_schema("get_order_details", {"type": "object", "properties": {"order_id": {"type": "string"}}})
    tools.add_schema(
        "cancel_pending_order",
        {"type": "object", "properties": {"order_id": {"type": "string"}, "reason": {"type": "string"}}},
    )
    return tools


GOOD = """\
schema: prefixmon.spec/1
tools:
  get_order_details:
    access: read
    produces: {order_id: order_id}
    observes: [{object: order, id: order_id}]
  cancel_pending_order:
    access: write
    args: {order_id: {ref: order_id, user: true}}
    let: {order: "order[args.order_id]"}
    requires:
      - expr: order.status == "pending"
        message: "{args.order_id} is {order.status}"
    probes: [{for: order, call: get_order_details, args: {order_id: args.order_id}}]
"""


def _apply(tmp_path: Path, text: str, name: str = "rules.yaml") -> None:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    orders_toolset().apply_spec(path)


class TestLoading:
    """What loads, and the published schema."""

    def test_a_good_file_loads_and_applies(self, tmp_path: Path) -> None:
        """The example spec applies to a toolset: references, preconditions, probes, read-only metadata."""
        path = tmp_path / "rules.yaml"
        path.write_text(GOOD, encoding="utf-8")
        tools = orders_toolset().apply_spec(path)
        cancel = tools["cancel_pending_order"]
        assert [(p, r.kind, r.user) for p, r in cancel.refs] == [("order_id", "order_id", True)]
        assert [p.name for p in cancel.requires] == ["rule_1"] and [p.call for p in cancel.probes] == ["get_order_details"]
        assert tools["get_order_details"].metadata["read_only"] is True
        assert tools.producers_of("order_id") == ["get_order_details"]

    def test_json_and_mappings_load_too(self, tmp_path: Path) -> None:
        """The same rules as JSON text, or as a mapping."""
        data: Any = parse_spec(GOOD).model_dump(by_alias=True, exclude_defaults=True)
        path = tmp_path / "rules.json"
        path.write_text(json.dumps(data), encoding="utf-8")
        assert load_spec(path).model_dump() == parse_spec(data).model_dump() == parse_spec(GOOD).model_dump()

    def test_published_schema_is_current(self) -> None:
        """docs/spec.schema.json is what spec_json_schema() publishes (regenerate it when the format changes)."""
        published = json.loads((ROOT / "docs" / "spec.schema.json").read_text(encoding="utf-8"))
        assert published == spec_json_schema()
        assert published["properties"]["schema"]["const"] == SCHEMA

    def test_shipped_specs_load(self) -> None:
        """Every spec file we ship loads and validates against the published schema's format."""
        shipped = sorted((ROOT / "examples" / "specs").glob("*.yaml"))
        assert shipped
        for path in shipped:
            load_spec(path)


BAD: list[tuple[str, str, str]] = [
    ("schema: prefixmon.spec/1\ntools:\n  a: [unclosed\n", "rules.yaml:4", "not YAML"),
    ("schema: prefixmon.spec/1\ntools:\n  a\0: {}\n", "rules.yaml:3", "not YAML (unacceptable character #x0000"),
    ("- just\n- a list\n", "rules.yaml:1", "a spec file is an object"),
    ("schema: prefixmon.spec/2\n", "rules.yaml:1", "schema: Input should be 'prefixmon.spec/1'"),
    ("tools: {}\n", "rules.yaml:1", "missing required field 'schema'"),
    ("schema: prefixmon.spec/1\ntools:\n  get_order_details:\n    acess: read\n", "rules.yaml:4", "unknown field 'acess'"),
    ("schema: prefixmon.spec/1\ntools:\n  get_order_details:\n    access: maybe\n", "rules.yaml:4", "access"),
    (
        "schema: prefixmon.spec/1\ntools:\n  get_order_details:\n    observes:\n      - {object: order, id: 'order id'}\n",
        "rules.yaml:5",
        "not a field name or a path",
    ),
    (
        "schema: prefixmon.spec/1\ntools:\n  cancel_pending_order:\n    let: {order: 'order(args.order_id)'}\n",
        "rules.yaml:4",
        "is not 'kind[path]'",
    ),
    (
        "schema: prefixmon.spec/1\ntools:\n  get_order_details:\n    errors:\n      - {text: '(unclosed'}\n",
        "rules.yaml:5",
        "not a regular expression",
    ),
    (
        "schema: prefixmon.spec/1\ntools:\n  get_order_details:\n    errors:\n      - {text: '^Error', is_error: true}\n",
        "rules.yaml:5",
        "exactly one of is_error, text or json",
    ),
    (
        "schema: prefixmon.spec/1\ntools:\n  get_order_details:\n    args: {'order id': {ref: x}}\n",
        "rules.yaml:4",
        "argument path",
    ),
    ("schema: prefixmon.spec/1\nprobe_budget: -1\n", "rules.yaml:2", "probe_budget"),
]
"""Format errors: (file text, where, what)."""

SEMANTIC: list[tuple[str, str, str]] = [
    ("schema: prefixmon.spec/1\ntools:\n  nope:\n    access: read\n", "rules.yaml:3", "there is no tool named 'nope'"),
    (
        "schema: prefixmon.spec/1\ntools:\n  cancel_pending_order:\n    args: {order: {ref: order_id}}\n",
        "rules.yaml:4",
        "has no argument 'order'",
    ),
    (
        "schema: prefixmon.spec/1\ntools:\n  cancel_pending_order:\n    let: {order: 'order[user.id]'}\n",
        "rules.yaml:4",
        "starts with no known name",
    ),
    (
        "schema: prefixmon.spec/1\ntools:\n  cancel_pending_order:\n    requires:\n      - expr: 'args.order_id =='\n",
        "rules.yaml:5",
        "does not compile: 1:",
    ),
    (
        "schema: prefixmon.spec/1\ntools:\n  cancel_pending_order:\n    requires:\n      - expr: 'order.status == \"pending\"'\n",
        "rules.yaml:5",
        "undeclared reference to 'order.status'",
    ),
    (
        "schema: prefixmon.spec/1\ntools:\n  cancel_pending_order:\n    requires:\n"
        "      - {expr: 'true', message: 'bad {thing.x}'}\n",
        "rules.yaml:5",
        "reads {thing.x}, which names nothing",
    ),
    (
        "schema: prefixmon.spec/1\ntools:\n  cancel_pending_order:\n    let: {order: 'order[args.order_id]'}\n"
        "    probes: [{for: user, call: get_order_details}]\n",
        "rules.yaml:5",
        "'for: user' names no let variable",
    ),
    (
        "schema: prefixmon.spec/1\ntools:\n  cancel_pending_order:\n    let: {order: 'order[args.order_id]'}\n"
        "    probes: [{for: order, call: lookup}]\n",
        "rules.yaml:5",
        "no tool named 'lookup' to probe with",
    ),
    (
        "schema: prefixmon.spec/1\ntools:\n  cancel_pending_order:\n    let: {order: 'order[args.order_id]'}\n"
        "    probes: [{for: order, call: get_order_details}]\n",
        "rules.yaml:5",
        "is not declared read-only",
    ),
]
"""Errors found when the file is applied to a toolset: (file text, where, what)."""


class TestBadFiles:
    """A bad file fails when it is loaded: FILE:LINE: what is wrong; the toolset is not changed."""

    @pytest.mark.parametrize(("text", "where", "what"), BAD + SEMANTIC)
    def test_bad_file_names_file_line_and_problem(self, tmp_path: Path, text: str, where: str, what: str) -> None:
        """Every kind of bad file names where and what."""
        with pytest.raises(SpecError) as info:
            _apply(tmp_path, text)
        message = str(info.value)
        assert message.startswith(str(tmp_path / where) + ":"), message
        assert what in message, message

    def test_bad_json_names_its_line(self, tmp_path: Path) -> None:
        """A JSON spec that does not parse names its line and column."""
        with pytest.raises(SpecError, match=r"rules\.json:3: not JSON \(.*column"):
            _apply(tmp_path, '{\n  "schema": "prefixmon.spec/1",\n  "tools": {,}\n}\n', "rules.json")

    def test_unreadable_inputs(self, tmp_path: Path) -> None:
        """Missing files, directories and non-UTF-8 bytes are SpecErrors naming the file."""
        with pytest.raises(SpecError, match=r"missing\.yaml: cannot read it"):
            load_spec(tmp_path / "missing.yaml")
        with pytest.raises(SpecError, match="cannot read it"):
            load_spec(tmp_path)
        (tmp_path / "latin.yaml").write_bytes(b"schema: caf\xe9\n")
        with pytest.raises(SpecError, match=r"latin\.yaml: not UTF-8 text \(byte 11\)"):
            load_spec(tmp_path / "latin.yaml")

    def test_deep_nesting_is_an_error_not_a_crash(self, tmp_path: Path) -> None:
        """A file nested thousands deep is refused with a message, never a RecursionError."""
        with pytest.raises(SpecError, match=r"rules\.(yaml|json):1"):
            _apply(tmp_path, "[" * 50_000 + "]" * 50_000, "rules.json")

    def test_a_failed_apply_changes_nothing(self, tmp_path: Path) -> None:
        """When the second tool's rules are bad, the first tool's rules are not applied either."""
        tools = orders_toolset()
        before = tools["get_order_details"]
        path = tmp_path / "rules.yaml"
        path.write_text(
            "schema: prefixmon.spec/1\ntools:\n  get_order_details: {access: read}\n  nope: {access: read}\n", encoding="utf-8"
        )
        with pytest.raises(SpecError):
            tools.apply_spec(path)
        assert tools["get_order_details"] is before

    def test_a_disabled_suggestion_is_not_compiled(self) -> None:
        """A learned suggestion stays off until enabled, even if its expression would not compile here."""
        tools = orders_toolset().apply_spec(
            {
                "schema": SCHEMA,
                "tools": {"cancel_pending_order": {"requires": [{"expr": "nope ==", "enabled": False, "suggested": True}]}},
            }
        )
        assert tools["cancel_pending_order"].requires == ()
