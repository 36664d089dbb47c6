"""The JSON Schema check of schema-declared tools: it refuses only what the server would refuse.

Dialects by ``$schema``, unknown arguments as the schema says, ``format`` as an annotation
unless asserted, lax (pydantic) and strict (zod/ajv) coercion, located problem lists, and
``$ref`` s that are never fetched.
"""

from __future__ import annotations

import datetime as dt
import http.server
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema_rs
import pytest

from prefixmon import Cause, Monitor, SpecError, ToolBlocked, Toolset, Verdict
from prefixmon._internal.trusted import trusted_constructor
from prefixmon.exceptions import ArgumentError
from prefixmon.rules._validation import MAX_PROBLEMS, JsonSchemaValidator, schema_validator

from .test_bounds import collections_watched

INT = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 1, "maximum": 10}}, "required": ["n"]}


TUPLE_2020: dict[str, Any] = {
    "type": "object",
    "properties": {"p": {"type": "array", "prefixItems": [{"type": "integer"}], "items": False}},
}
OPEN: dict[str, Any] = {"type": "object", "properties": {"a": {"type": "string"}}}
CLOSED: dict[str, Any] = {**OPEN, "additionalProperties": False}
FORMATS: dict[str, Any] = {
    "type": "object",
    "properties": {"when": {"type": "string", "format": "date-time"}, "mail": {"format": "email"}},
}
PROBLEMS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "kind": {"enum": ["a", "b"]},
        "n": {"type": "integer", "minimum": 0},
        "items": {"type": "array", "items": {"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]}},
        "text": {"type": "string", "maxLength": 5},
    },
    "required": ["kind", "n"],
    "additionalProperties": False,
}


def problems(v: JsonSchemaValidator, args: dict[str, Any]) -> list[tuple[str, tuple[str | int, ...]]]:
    """(kind, location) of every problem ``v`` reports (empty when the arguments fit)."""
    try:
        v(args)
    except ArgumentError as e:
        return [(p.kind, p.location) for p in e.problems]
    return []


def error(v: JsonSchemaValidator, args: dict[str, Any]) -> ArgumentError:
    with pytest.raises(ArgumentError) as info:
        v(args)
    return info.value


class TestDialects:
    """``$schema`` picks the dialect; 2020-12 when absent (the MCP default)."""

    def test_absent_schema_is_2020_12(self) -> None:
        """prefixItems with items: false accepts the tuple and refuses only extra items."""
        v = schema_validator("t", TUPLE_2020)
        assert v.dialect == "2020-12"
        assert problems(v, {"p": [1]}) == [] and problems(v, {"p": []}) == []
        assert problems(v, {"p": [1, 2]}) == [("value", ("p", 1))]
        assert "no item is allowed at this position" in str(error(v, {"p": [1, 2]}))

    def test_draft_07_reads_items_as_a_tuple_and_ignores_2020_keywords(self) -> None:
        """In draft-07 an items array is a tuple and dependentRequired is not a keyword."""
        schema = {
            "$schema": "http://json-schema.org/draft-07/schema#",
            "type": "object",
            "properties": {"p": {"type": "array", "items": [{"type": "integer"}], "additionalItems": False}},
            "dependentRequired": {"p": ["q"]},
        }
        v = schema_validator("t", schema)
        assert v.dialect == "draft-07"
        assert problems(v, {"p": [1]}) == []  # q is not required in draft-07
        assert problems(v, {"p": ["x"]}) == [("value", ("p", 0))]
        assert problems(v, {"p": [1, 2]}) != []

    def test_draft_04_boolean_exclusive_maximum(self) -> None:
        """Draft-04's exclusiveMaximum is a flag on maximum."""
        schema = {
            "$schema": "http://json-schema.org/draft-04/schema#",
            "properties": {"n": {"maximum": 5, "exclusiveMaximum": True}},
        }
        v = schema_validator("t", schema)
        assert v.dialect == "draft-04" and problems(v, {"n": 4}) == [] and problems(v, {"n": 5}) == [("value", ("n",))]

    @pytest.mark.parametrize(
        ("uri", "dialect"),
        [
            ("https://json-schema.org/draft/2020-12/schema", "2020-12"),
            ("https://json-schema.org/draft/2019-09/schema", "2019-09"),
            ("http://json-schema.org/draft-06/schema#", "draft-06"),
            ("http://json-schema.org/draft-07/schema", "draft-07"),
            ("https://example.org/my-own-meta-schema", "2020-12"),
        ],
    )
    def test_declared_dialects(self, uri: str, dialect: str) -> None:
        """Each declared dialect is honoured; an unknown meta-schema is read as 2020-12 (and not fetched)."""
        v = schema_validator("t", {"$schema": uri, "type": "object"})
        assert v.dialect == dialect and v.ignored_refs == ()

    def test_unsupported_or_malformed_schema_is_a_spec_error(self) -> None:
        """Draft-03, a non-string $schema and a schema that is not valid in its dialect fail at declaration."""
        with pytest.raises(SpecError, match="draft-03"):
            schema_validator("t", {"$schema": "http://json-schema.org/draft-03/schema#"})
        with pytest.raises(SpecError, match=r"\$schema must be a string"):
            schema_validator("t", {"$schema": 7})
        with pytest.raises(SpecError, match=r"tool 't': its JSON Schema cannot be compiled"):
            schema_validator("t", {"type": "object", "properties": {"a": {"minimum": "x"}}})
        with pytest.raises(SpecError, match="cannot be compiled"):
            schema_validator("t", {"properties": {"a": {"$ref": "#/$defs/missing"}}})


class TestUnknownArguments:
    """Arguments the schema does not name: as the schema says, forbidden or stripped on request."""

    def test_silent_schema_allows_them(self) -> None:
        """The default: a schema without additionalProperties accepts unknown names (pydantic ignores, zod strips)."""
        assert problems(schema_validator("t", OPEN), {"a": "x", "b": 1}) == []

    def test_additional_properties_false_refuses_each_one(self) -> None:
        """One located unknown problem per name, nested ones included."""
        schema = {**CLOSED, "properties": {"a": {"type": "object", "properties": {}, "additionalProperties": False}}}
        v = schema_validator("t", schema)
        assert sorted(problems(v, {"a": {"z": 1}, "b": 1, "c": 2})) == [
            ("unknown", ("a", "z")),
            ("unknown", ("b",)),
            ("unknown", ("c",)),
        ]
        assert "unknown argument 'b'" in str(error(v, {"b": 1}))

    def test_unevaluated_properties_see_through_all_of(self) -> None:
        """2020-12 unevaluatedProperties: names declared in allOf members are evaluated, others refused."""
        schema = {"allOf": [{"properties": {"a": {"type": "string"}}}], "properties": {"b": {}}, "unevaluatedProperties": False}
        v = schema_validator("t", schema)
        assert problems(v, {"a": "x", "b": 1}) == [] and problems(v, {"a": "x", "c": 1}) == [("unknown", ("c",))]

    def test_forbid_is_opt_in_and_knows_composed_names(self) -> None:
        """unknown='forbid' refuses names no properties, allOf member or patternProperties declare."""
        schema = {
            "type": "object",
            "properties": {"a": {}},
            "allOf": [{"properties": {"b": {}}}],
            "patternProperties": {"^x-": {}},
        }
        v = schema_validator("t", schema, unknown="forbid")
        assert problems(v, {"a": 1, "b": 2, "x-trace": 3}) == []
        assert problems(v, {"a": 1, "c": 2, "d": 3}) == [("unknown", ("c",)), ("unknown", ("d",))]

    def test_forbid_defers_to_a_schema_that_decides(self) -> None:
        """A schema that says additionalProperties itself is followed, even under unknown='forbid'."""
        schema = {"type": "object", "properties": {"a": {}}, "additionalProperties": {"type": "integer"}}
        v = schema_validator("t", schema, unknown="forbid")
        assert problems(v, {"a": 1, "b": 2}) == [] and problems(v, {"b": "x"}) == [("value", ("b",))]

    def test_allow_strips_them_as_zod_does_and_leaves_the_arguments_as_sent(self) -> None:
        """unknown='allow' ignores names the schema forbids (at any depth); the caller's dict is untouched."""
        schema = {
            "type": "object",
            "properties": {"a": {"type": "object", "properties": {"k": {"type": "integer"}}, "additionalProperties": False}},
            "additionalProperties": False,
        }
        v = schema_validator("t", schema, unknown="allow")
        args = {"a": {"k": 1, "extra": True}, "b": 1}
        assert v(args) is args and args == {"a": {"k": 1, "extra": True}, "b": 1}
        assert problems(v, {"a": {"k": "x", "extra": True}, "b": 1}) == [("value", ("a", "k"))]


class TestFormats:
    """format is an annotation unless asserted; asserted, it is read as the coercion mode reads it."""

    def test_annotation_by_default(self) -> None:
        """Anything that is a string passes a format check nobody asked for."""
        assert problems(schema_validator("t", FORMATS), {"when": "next week", "mail": "nope"}) == []

    def test_asserted_strict_is_rfc_3339(self) -> None:
        """strict + assert_formats: a naive datetime lacks its offset, so it is refused."""
        v = schema_validator("t", FORMATS, coercion="strict", assert_formats=True)
        assert problems(v, {"when": "2024-01-15T14:30:25Z"}) == []
        assert problems(v, {"when": "2024-01-15T14:30:25"}) == [("value", ("when",))]
        assert problems(v, {"mail": "nope"}) == [("value", ("mail",))]

    def test_asserted_lax_is_pydantic(self) -> None:
        """lax + assert_formats: what pydantic's datetime parser takes (naive, date-only, unix time); not 'next week'."""
        v = schema_validator("t", FORMATS, assert_formats=True)
        for ok in ("2024-01-15T14:30:25", "2024-01-15", "2024-01-15T14:30:25+02:00", "1700000000"):
            assert problems(v, {"when": ok}) == [], ok
        assert problems(v, {"when": 1700000000}) == []  # a number, as pydantic reads a datetime
        e = error(v, {"when": "next week"})
        assert [p.location for p in e.problems] == [("when",)] and "must be a valid date-time" in str(e)


class TestCoercion:
    """lax accepts what pydantic's lax mode (and the Python MCP SDK) accepts; strict takes JSON types as they are."""

    @pytest.mark.parametrize("value", ["3", " 3 ", 3.0, True, "3.0"])
    def test_lax_integers(self, value: Any) -> None:
        """Strings of integers, integral floats and booleans are integers to pydantic."""
        assert problems(schema_validator("t", INT), {"n": value}) == []

    @pytest.mark.parametrize("value", ["three", 2.5, "2.5", None, [3], "1e3"])
    def test_lax_still_refuses_what_pydantic_refuses(self, value: Any) -> None:
        """Not every string is an integer: each refusal is located at the argument."""
        assert problems(schema_validator("t", INT), {"n": value}) == [("value", ("n",))]

    def test_lax_coerces_before_the_constraints(self) -> None:
        """'51' is the integer 51 to pydantic, which is then above the maximum."""
        e = error(schema_validator("t", INT), {"n": "51"})
        assert str(e) == "argument 'n': must be <= 10, got 51"

    def test_lax_booleans_numbers_and_unions(self) -> None:
        """'yes' and 1 are booleans, '2.5' a number, '3' an Optional[int]; nested values as well."""
        schema = {
            "type": "object",
            "properties": {
                "flag": {"type": "boolean"},
                "x": {"type": "number"},
                "o": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
                "rows": {"type": "array", "items": {"$ref": "#/$defs/row"}},
            },
            "$defs": {"row": {"type": "object", "properties": {"qty": {"type": "integer"}}}},
        }
        v = schema_validator("t", schema)
        assert problems(v, {"flag": "yes", "x": "2.5", "o": "3", "rows": [{"qty": "2"}, {"qty": 4}]}) == []
        assert problems(v, {"flag": 1, "o": None}) == []
        assert problems(v, {"flag": "maybe", "o": "x", "rows": [{"qty": "two"}]}) == [
            ("value", ("flag",)),
            ("value", ("o",)),
            ("value", ("rows", 0, "qty")),
        ]

    def test_lax_reads_top_level_json_text_as_the_mcp_sdk_does(self) -> None:
        """MCPServer parses a top-level string as JSON for a list parameter; nested strings are left alone."""
        schema = {
            "type": "object",
            "properties": {
                "files": {"type": "array", "items": {"type": "string"}, "minItems": 1},
                "nested": {"type": "object", "properties": {"ids": {"type": "array"}}},
            },
        }
        v = schema_validator("t", schema)
        assert problems(v, {"files": '["a", "b"]'}) == []
        assert problems(v, {"files": "[]"}) == [("value", ("files",))]  # parsed, then too short
        assert problems(v, {"nested": {"ids": "[1]"}}) == [("value", ("nested", "ids"))]

    def test_lax_json_text_nested_too_deeply_is_left_a_string(self) -> None:
        """Text nested past 400 levels is not parsed (json.loads would recurse near the interpreter's
        limit, where a finalizer fails); the string then does not fit the array it stands for."""
        v = schema_validator("t", {"type": "object", "properties": {"data": {"type": "array"}}})
        with collections_watched() as failures:
            found = problems(v, {"data": "[" * 5_000 + "]" * 5_000})
        assert failures == []
        assert found == [("value", ("data",))]
        assert problems(v, {"data": "[" * 300 + "]" * 300}) == []

    def test_lax_does_not_turn_numbers_into_strings(self) -> None:
        """pydantic's str refuses 3, so lax does too."""
        v = schema_validator("t", {"type": "object", "properties": {"s": {"type": "string"}}})
        assert problems(v, {"s": 3}) == [("value", ("s",))]

    @pytest.mark.parametrize("args", [{"n": "3"}, {"n": True}])
    def test_strict_takes_json_types_as_they_are(self, args: dict[str, Any]) -> None:
        """zod and ajv refuse '3' and true for an integer."""
        assert problems(schema_validator("t", INT, coercion="strict"), args) == [("value", ("n",))]

    def test_strict_refuses_json_text_for_a_list(self) -> None:
        """No pre-parsing outside the Python SDK."""
        schema = {"type": "object", "properties": {"files": {"type": "array"}}}
        assert problems(schema_validator("t", schema, coercion="strict"), {"files": "[1]"}) == [("value", ("files",))]

    def test_the_arguments_go_on_unchanged(self) -> None:
        """A lax pass decides only; the server receives what the agent sent."""
        args = {"n": "3"}
        out = schema_validator("t", INT)(args)
        assert out is args and out == {"n": "3"}


class TestProblems:
    """Every problem the validator finds, located, in short model-readable words."""

    def test_every_problem_is_located(self) -> None:
        """Missing, unknown and value problems together, each at its path."""
        e = error(schema_validator("t", PROBLEMS), {"kind": "c", "items": [{"id": "x"}, {}], "text": "toolong", "zz": 1})
        assert sorted((p.kind, p.location) for p in e.problems) == [
            ("missing", ("items", 1, "id")),
            ("missing", ("n",)),
            ("unknown", ("zz",)),
            ("value", ("kind",)),
            ("value", ("text",)),
        ]
        assert e.more == 0
        texts = {str(p) for p in e.problems}
        assert "missing required argument 'items[1].id'" in texts
        assert 'argument \'kind\': must be one of "a", "b", got string "c"' in texts
        assert "argument 'text': must be at most 5 characters long" in texts

    def test_problems_are_bounded_and_the_rest_counted(self) -> None:
        """MAX_PROBLEMS are kept; ``more`` counts the others."""
        schema = {"type": "object", "properties": {"xs": {"type": "array", "items": {"type": "integer"}}}}
        e = error(schema_validator("t", schema), {"xs": ["x"] * (MAX_PROBLEMS + 7)})
        assert len(e.problems) == MAX_PROBLEMS and e.more == 7
        assert str(e).endswith(f"(and {MAX_PROBLEMS + 7 - 3} more)")

    def test_long_values_are_previewed(self) -> None:
        """A 10,000-character value never floods the reason shown to the model."""
        e = error(schema_validator("t", PROBLEMS), {"kind": "a" * 10_000, "n": 1})
        assert len(str(e)) < 200 and "..." in str(e)

    def test_union_reasons_name_the_allowed_types(self) -> None:
        """anyOf of types reads 'must be integer or null'; other unions name the closest branch."""
        schema = {
            "type": "object",
            "properties": {
                "o": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
                "shape": {"oneOf": [{"properties": {"r": {"type": "number"}}, "required": ["r"]}, {"required": ["w", "h"]}]},
            },
        }
        v = schema_validator("t", schema, coercion="strict")
        assert str(error(v, {"o": "x"})) == "argument 'o': must be integer or null, got string \"x\""
        assert "matches none of the allowed forms (closest:" in str(error(v, {"shape": {"r": "big"}}))

    def test_root_problems(self) -> None:
        """A problem with the arguments as a whole has the empty location."""
        e = error(schema_validator("t", {"type": "object", "minProperties": 1}), {})
        assert [(p.kind, p.location) for p in e.problems] == [("root", ())]
        assert str(e) == "arguments must have at least 1 entries"

    def test_deep_problems_are_reported_at_a_bounded_ancestor(self) -> None:
        """A mismatch 10,000 levels down neither crashes nor writes a 60 KB path."""
        schema = {
            "$defs": {"n": {"type": "object", "properties": {"c": {"$ref": "#/$defs/n"}}}},
            "properties": {"c": {"$ref": "#/$defs/n"}},
        }
        bad: Any = {"c": 5}
        for _ in range(10_000):
            bad = {"c": bad}
        e = error(schema_validator("t", schema), bad)
        assert len(str(e)) < 300

    def test_values_json_cannot_carry_are_judged_as_sent(self) -> None:
        """A datetime object is judged as its ISO text; NaN and infinity as numbers."""
        schema = {"type": "object", "properties": {"when": {"type": "string"}, "x": {"type": "number"}}}
        v = schema_validator("t", schema, coercion="strict")
        assert problems(v, {"when": dt.datetime(2024, 1, 15, 14, 30)}) == []
        assert problems(v, {"x": float("inf")}) == [] and problems(v, {"x": float("nan")}) == []
        assert problems(v, {"x": "inf"}) == [("value", ("x",))]

    def test_bad_options_are_spec_errors(self) -> None:
        """A misspelt mode fails at declaration."""
        with pytest.raises(SpecError, match="coercion"):
            schema_validator("t", INT, coercion="loose")  # type: ignore[arg-type]
        with pytest.raises(SpecError, match="unknown"):
            schema_validator("t", INT, unknown="ignore")  # type: ignore[arg-type]


class _Counting(http.server.BaseHTTPRequestHandler):
    hits: list[str]

    def do_GET(self) -> None:
        self.hits.append(self.path)
        body = b'{"enum": ["from-the-network"]}'
        self.send_response(200)
        self.send_header("Content-Type", "application/schema+json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        return None


@pytest.fixture
def schema_host() -> Iterator[tuple[str, list[str]]]:
    """A real HTTP server on loopback serving a schema, and the paths requested from it."""
    hits: list[str] = []
    handler = type("Handler", (_Counting,), {"hits": hits})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", hits
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


class TestReferences:
    """Local $refs resolve; remote and file $refs are never fetched (issue 16 security item)."""

    def test_local_refs_resolve(self) -> None:
        """#/$defs pointers and $id-relative references inside the schema are followed."""
        schema = {
            "$id": "https://example.org/tool.json",
            "type": "object",
            "properties": {"a": {"$ref": "#/$defs/pos"}, "b": {"$ref": "item.json"}},
            "$defs": {"pos": {"type": "integer", "minimum": 1}, "item": {"$id": "item.json", "type": "string"}},
        }
        v = schema_validator("t", schema, coercion="strict")
        assert v.ignored_refs == ()
        assert problems(v, {"a": 1, "b": "x"}) == []
        assert problems(v, {"a": 0, "b": 2}) == [("value", ("a",)), ("value", ("b",))]

    def test_a_remote_ref_makes_no_request_and_constrains_nothing(self, schema_host: tuple[str, list[str]]) -> None:
        """The validator library would fetch it; ours does not, lists it, and accepts any value there."""
        base, hits = schema_host
        schema = {"type": "object", "properties": {"a": {"$ref": f"{base}/enum.json"}, "n": {"type": "integer"}}}
        jsonschema_rs.validator_for(schema)  # the library's default retriever: one real request
        assert hits == ["/enum.json"]
        v = schema_validator("t", schema, coercion="strict")
        assert v.ignored_refs == (f"{base}/enum.json",)
        assert problems(v, {"a": "anything", "n": 1}) == [] and problems(v, {"n": "x"}) == [("value", ("n",))]
        assert hits == ["/enum.json"]  # nothing more

    def test_the_log_names_a_remote_ref_without_its_credentials(self) -> None:
        """The warning about an ignored reference keeps scheme, host and path: no user, password or query."""
        from structlog.testing import capture_logs

        ref = "https://user:pw-CANARY@schemas.example:8443/enum.json?access_token=CANARY"
        with capture_logs() as logs:
            v = schema_validator("t", {"type": "object", "properties": {"a": {"$ref": ref}}}, coercion="strict")
        assert v.ignored_refs == (ref,)  # the attribute keeps what the schema says
        (entry,) = [e for e in logs if e["event"] == "schema_remote_ref_ignored"]
        assert entry["refs"] == ["https://schemas.example:8443/enum.json"] and "CANARY" not in repr(entry)

    def test_a_file_ref_is_not_read(self, tmp_path: Path) -> None:
        """A file:// reference (an enum the file holds would leak into reasons) is not read."""
        secret = tmp_path / "secret.json"
        secret.write_text(json.dumps({"enum": ["the-secret-value"]}), encoding="utf-8")
        schema = {"type": "object", "properties": {"a": {"$ref": secret.as_uri()}}}
        library = jsonschema_rs.validator_for(schema)  # the library's default reads the file
        assert "the-secret-value" in next(library.iter_errors({"a": "x"})).message
        v = schema_validator("t", schema, coercion="strict")
        assert v.ignored_refs == (secret.as_uri(),) and problems(v, {"a": "x"}) == []

    def test_a_remote_meta_schema_and_relative_refs_are_not_fetched(self, schema_host: tuple[str, list[str]]) -> None:
        """An unknown $schema URL, an embedded resource's $schema and a relative ref against a remote $id: no request."""
        base, hits = schema_host
        schema = {
            "$schema": f"{base}/meta",
            "$id": f"{base}/root.json",
            "type": "object",
            "properties": {
                "a": {"$ref": "other.json"},
                "b": {"$id": f"{base}/b.json", "$schema": f"{base}/meta2", "type": "string"},
            },
        }
        v = schema_validator("t", schema, coercion="strict")
        assert problems(v, {"a": 1, "b": "x"}) == [] and problems(v, {"b": 1}) == [("value", ("b",))]
        assert hits == [] and f"{base}/other.json" in v.ignored_refs


class TestToolsetOptions:
    """Toolset.add_schema passes the options through; a blocked call reads well."""

    async def test_defaults_and_options_reach_the_verdict(self) -> None:
        """Zero config: lax, unknown names as the schema says; each option changes what is refused."""
        tools = Toolset()
        tools.add_schema("lax", INT)
        tools.add_schema("strict", INT, coercion="strict", unknown="forbid")
        tools.add_schema("dated", {"properties": {"d": {"format": "date"}}}, assert_formats=True)
        monitor = Monitor(tools, policy="block")
        spec = tools.get("lax")
        assert spec is not None and isinstance(spec.validate, JsonSchemaValidator)
        assert (spec.validate.coercion, spec.validate.unknown, spec.validate.assert_formats) == ("lax", "schema", False)
        async with monitor.episode(task_id="t") as ep:
            assert ep.check("lax", {"n": "3", "note": "x"}).executable
            v = ep.check("strict", {"n": "3", "note": "x"})
            assert v.cause is Cause.SCHEMA and {p.kind for p in v.failures[0].problems} == {"unknown"}
            v = ep.check("strict", {"n": "3"})
            assert v.failures[0].problems[0].location == ("n",)
            assert not ep.check("dated", {"d": "someday"}).executable
            with pytest.raises(ToolBlocked) as blocked:
                await ep.call("strict", '{"n": 0}')
            assert str(blocked.value) == "Call to 'strict' was not run: strict: argument 'n': must be >= 1, got 0"


class TestAdapterChoices:
    """How the adapters choose a coercion mode."""

    def test_mcp_auto_reads_implementation_info_then_the_dialect(self) -> None:
        """Implementation info naming the stack wins; else draft-07 (the TypeScript SDK's zod) is
        "zod", a schema that says nothing "unknown" (nothing refused that a common server coerces)."""
        mcp = pytest.importorskip("prefixmon.adapters.mcp")
        draft7 = {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object"}
        assert mcp.coercion_for(draft7) == "zod"
        assert mcp.coercion_for({"type": "object"}) == "unknown"
        assert mcp.coercion_for({"$schema": "https://json-schema.org/draft/2020-12/schema"}) == "unknown"
        assert mcp.coercion_for({"type": "object", "title": "get_weatherArguments"}) == "lax"
        assert mcp.coercion_for(draft7, {"name": "weather", "description": "a FastMCP server"}) == "lax"
        assert mcp.coercion_for({"type": "object"}, {"name": "acme-typescript-server", "version": "1"}) == "zod"
        assert mcp.coercion_for({"type": "object"}, {"name": "mcp-servers/everything", "version": "2"}) == "unknown"

    def test_mcp_declare_tools_uses_it_and_rules_win(self) -> None:
        """declare_tools applies the chosen mode per tool; a rule's own coercion overrides it."""
        mcp = pytest.importorskip("prefixmon.adapters.mcp")
        tools = Toolset()
        listed = [
            {"name": "ts", "inputSchema": {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object"}},
            {"name": "py", "inputSchema": {"type": "object"}},
            {"name": "mine", "inputSchema": {"type": "object"}},
        ]
        mcp.declare_tools(tools, listed, rules={"mine": {"coercion": "strict"}})
        modes = {s.name: getattr(s.validate, "coercion", None) for s in tools}
        assert modes == {"ts": "zod", "py": "unknown", "mine": "strict"}
        with pytest.raises(SpecError, match="coercion"):
            mcp.declare_tools(Toolset(), listed, coercion="loose")

    def test_openai_toolsets_are_strict_unless_asked(self) -> None:
        """Your functions get the decoded JSON as it is: '3' is not coerced on the way, so strict is the default."""
        openai = pytest.importorskip("prefixmon.adapters.openai")
        definition = {"type": "function", "function": {"name": "f", "parameters": INT}}
        tools = openai.toolset_from_openai([definition])
        lax = openai.toolset_from_openai([definition], coercion="lax")
        ruled = openai.toolset_from_openai([definition], rules={"f": {"coercion": "lax"}})
        assert [getattr(t["f"].validate, "coercion", None) for t in (tools, lax, ruled)] == ["strict", "lax", "lax"]


def test_a_trusted_constructor_names_every_field() -> None:
    """A hot-path constructor that leaves out a field refuses to be made (it would drop the field silently)."""
    names = ("tool", "call_id", "depth", "executable", "failures", "args", "faults", "undetermined")
    with pytest.raises(TypeError, match="derived"):
        trusted_constructor(Verdict, names)
    build = trusted_constructor(Verdict, (*names, "derived"))
    v = build("t", None, 1, True, (), {}, (), (), ("v: 2 = 1 + 1",))
    assert v == Verdict(tool="t", depth=1, executable=True, args={}, derived=("v: 2 = 1 + 1",))
