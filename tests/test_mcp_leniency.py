"""How lenient a server is, with no configuration: never refuse what it may accept, learn from its answers.

Issue 39's first finding, one test per cause: zod coercion behind a plain integer, schemas
rewritten without their ``null`` branch, a Unicode ``\\d``, mcp 1.x's low-level ``Server``
(strict ``jsonschema``), and text results that are Python literals.
"""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("mcp")

import mcp.types as mcp_types
from mcp import Client, MCPError
from mcp.server import Server
from mcp.types import CallToolRequestParams, CallToolResult, ListToolsResult, PaginatedRequestParams, TextContent, Tool

from prefixmon import Monitor, SpecError, Toolset
from prefixmon.adapters import mcp
from prefixmon.exceptions import ArgumentError

INTEGER = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 1}}, "required": ["n"]}
DRAFT7 = "http://json-schema.org/draft-07/schema#"
PYTHON_1X = {"experimental": {}, "tools": {"listChanged": False}}
"""What mcp 1.x's ``Server`` sends as its capabilities (``experimental`` always)."""
MCPSERVER_2X = {
    "prompts": {"listChanged": False},
    "resources": {"subscribe": False, "listChanged": False},
    "tools": {"listChanged": False},
}
TYPESCRIPT = {"tools": {"listChanged": True}}
OPTIONAL: dict[str, Any] = {
    "type": "object",
    "properties": {"sheet": {"type": "string"}, "count": {"type": "integer", "default": 1}, "path": {"type": "string"}},
    "required": ["path"],
}
STYLE = {"type": "object", "properties": {"style": {"type": "string", "pattern": r"^SlicerStyleLight\d$"}}}
ARABIC_INDIC_ONE = "\u0661"


def validator(schema: dict[str, Any], coercion: str) -> Any:
    tools = Toolset()
    return tools.add_schema("t", schema, coercion=coercion).validate  # type: ignore[arg-type]


def refusal(v: Any, args: dict[str, Any]) -> str | None:
    """The refusal text, or ``None`` when the arguments pass."""
    try:
        v(args)
    except ArgumentError as e:
        return str(e)
    return None


class TestAutoChoosesFromTheServer:
    """coercion_for reads the initialize result and the schema: pydantic, jsonschema, zod, or unknown."""

    def test_python_sdk_1x_low_level_server_is_strict(self) -> None:
        """mcp 1.x's Server (experimental capabilities, hand-written schema) validates with jsonschema."""
        assert mcp.coercion_for(INTEGER, {"name": "mcp-shell-server", "version": "1.30.0"}, PYTHON_1X) == "strict"

    def test_pydantic_written_schemas_are_lax(self) -> None:
        """FastMCP / MCPServer schemas are titled '<function>Arguments': pydantic reads them, on 1.x as on 2.x."""
        titled = {**INTEGER, "title": "get_timeArguments"}
        assert mcp.coercion_for(titled, None, PYTHON_1X) == "lax"
        assert mcp.coercion_for(titled) == "lax"

    def test_mcpserver_2x_capabilities_are_lax(self) -> None:
        """mcp 2.x's MCPServer sends prompts, resources and tools with listChanged false (its schemas may be rewritten)."""
        assert mcp.coercion_for(INTEGER, {"name": "excel-mcp-server"}, MCPSERVER_2X) == "lax"

    def test_draft_07_is_zod(self) -> None:
        """The TypeScript SDK's zod conversion declares draft-07: zod, which may coerce a number."""
        assert mcp.coercion_for({**INTEGER, "$schema": DRAFT7}, {"name": "sequential-thinking-server"}, TYPESCRIPT) == "zod"

    def test_nothing_known_is_unknown(self) -> None:
        """No fingerprint (a TypeScript low-level server, a bare schema): unknown."""
        assert mcp.coercion_for(INTEGER, {"name": "task-manager-server"}, {"tools": {}}) == "unknown"
        assert mcp.coercion_for(INTEGER) == "unknown"

    def test_implementation_info_naming_its_stack_wins(self) -> None:
        """serverInfo words still decide first."""
        assert mcp.coercion_for({**INTEGER, "$schema": DRAFT7}, {"name": "a FastMCP server"}) == "lax"
        assert mcp.coercion_for(INTEGER, {"name": "acme-typescript-server"}, PYTHON_1X) == "zod"

    def test_new_modes_are_accepted_and_misspelt_ones_refused(self) -> None:
        """declare_tools takes the modes; a typo is a SpecError naming them."""
        tools = Toolset()
        mcp.declare_tools(tools, [{"name": "z", "inputSchema": INTEGER}], coercion="zod")
        assert getattr(tools.get("z") and tools.get("z").validate, "coercion", None) == "zod"  # type: ignore[union-attr]
        with pytest.raises(SpecError, match="'zod' or 'unknown'"):
            mcp.declare_tools(tools, [], coercion="loose")  # type: ignore[arg-type]


class TestZodMayCoerceNumbers:
    """server-sequential-thinking: z.coerce.number() behind a plain draft-07 integer."""

    @pytest.mark.parametrize("value", ["1", " 1 ", "5.0", "1e1", "+5", True, [2]])
    def test_what_number_reads_is_not_refused(self, value: Any) -> None:
        """Each value the finding saw the server run passes under zod (and unknown)."""
        for mode in ("zod", "unknown"):
            assert refusal(validator(INTEGER, mode), {"n": value}) is None, (mode, value)

    def test_what_number_cannot_read_is_still_refused(self) -> None:
        """NaN, a fraction for an integer, a value under the minimum once read: refused."""
        v = validator(INTEGER, "zod")
        for value in ("three", "1.5", "0", {"n": 1}, [1, 2]):
            assert refusal(v, {"n": value}) is not None, value

    def test_a_refusal_teaches_and_a_run_confirms(self) -> None:
        """The server refuses "1": strings for integers are refused from then on; one it ran is never ruled out."""
        strict_server = validator(INTEGER, "zod")
        assert strict_server.learn({"n": "1"}, refused=True, error="Expected number, received string at n") == (
            "number for integer",
        )
        text = refusal(strict_server, {"n": "2"})
        assert text is not None and "refused such a value for integer arguments earlier" in text
        coercing_server = validator(INTEGER, "zod")
        coercing_server.learn({"n": "1"}, refused=False)
        assert coercing_server.learn({"n": "2"}, refused=True, error="x") == ()
        assert refusal(coercing_server, {"n": "3"}) is None

    def test_with_several_readings_only_the_named_argument_is_blamed(self) -> None:
        """Two tolerated values and a message naming one: only that one's reading is ruled out."""
        schema = {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "boolean"}}}
        v = validator(schema, "unknown")
        assert v.learn({"a": "1", "b": "yes"}, refused=True, error="b: expected boolean") == ("lax for boolean",)
        assert refusal(v, {"a": "2"}) is None and refusal(v, {"b": "no"}) is not None

    def test_strict_refusal_names_the_coercion_option(self) -> None:
        """The finding: the refusal gave no hint that coercion='lax' exists."""
        text = refusal(validator(INTEGER, "strict"), {"n": "1"})
        assert (
            text == "argument 'n': must be integer, got string \"1\" (read with coercion='strict'; coercion='lax' reads it as 1)"
        )
        assert refusal(validator(INTEGER, "strict"), {"n": "x"}) == "argument 'n': must be integer, got string \"x\""

    def test_zod_may_strip_what_additional_properties_forbids(self) -> None:
        """z.object publishes additionalProperties: false and strips: not refused until the server refuses one."""
        schema = {**INTEGER, "additionalProperties": False}
        v = validator(schema, "zod")
        assert refusal(v, {"n": 1, "extra": 2}) is None
        v.learn({"n": 1, "extra": 2}, refused=True, error="Unrecognized key: extra")
        assert refusal(v, {"n": 1, "other": 2}) == "unknown argument 'other'"
        assert refusal(validator(schema, "unknown"), {"n": 1, "extra": 2}) == "unknown argument 'extra'"


class TestNullForAnOptionalArgument:
    """excel-mcp-server strips 'X or null' to X in its schemas but accepts null."""

    def test_lax_reads_null_as_absent_where_no_default_is_said(self) -> None:
        """null for 'sheet' passes; for 'count' (default 1: pydantic's X = 1 refuses None) and 'path' (required) it does not."""
        v = validator(OPTIONAL, "lax")
        assert refusal(v, {"path": "a", "sheet": None}) is None
        assert refusal(v, {"path": "a", "count": None}) == "argument 'count': must be integer, got null"
        assert refusal(v, {"path": None}) is not None
        assert refusal(validator(OPTIONAL, "strict"), {"path": "a", "sheet": None}) is not None

    def test_learnt_per_argument(self) -> None:
        """The server refuses null for one argument: only that argument's null is refused afterwards."""
        schema = {**OPTIONAL, "properties": {**OPTIONAL["properties"], "range": {"type": "string"}}}
        v = validator(schema, "lax")
        assert v.learn({"path": "a", "sheet": None}, refused=True, error="sheet: expected text; got null") == (
            "absent for sheet",
        )
        assert refusal(v, {"path": "a", "sheet": None}) is not None
        assert refusal(v, {"path": "a", "range": None}) is None


class TestPatterns:
    """pydantic and Python's jsonschema read \\d as any Unicode digit; JavaScript does not."""

    def test_a_unicode_digit_matches_outside_zod(self) -> None:
        """An Arabic-Indic 1 runs on a pydantic server: not refused (lax, strict, unknown); zod refuses it."""
        style = "SlicerStyleLight" + ARABIC_INDIC_ONE
        for mode in ("lax", "strict", "unknown"):
            assert refusal(validator(STYLE, mode), {"style": style}) is None, mode
        assert refusal(validator(STYLE, "zod"), {"style": style}) is not None
        assert refusal(validator(STYLE, "lax"), {"style": "SlicerStyleDark1"}) is not None


class TestTextResults:
    """mcp-server-sqlite answers str(rows): Python-literal text feeds references and grounding."""

    def test_python_literal_text_is_read_as_data(self) -> None:
        """A list of dicts written by str() is read as one; other text stays text."""
        rows = CallToolResult(content=[TextContent(type="text", text="[{'name': 'products'}, {'name': 'orders'}]")])
        assert mcp.result_value(rows) == [{"name": "products"}, {"name": "orders"}]
        for text in ("Table created successfully", "[not python", "[__import__('os')]", "{'a': datetime.date(2024, 1, 1)}"):
            assert mcp.result_value(CallToolResult(content=[TextContent(type="text", text=text)])) == text

    async def test_a_table_listed_in_text_is_a_reference(self) -> None:
        """describe_table('products') right after list_tables returned it in text is not refused."""
        tools = Toolset()
        listed = [
            {"name": "list_tables", "inputSchema": {"type": "object", "properties": {}}},
            {"name": "describe_table", "inputSchema": {"type": "object", "properties": {"table_name": {"type": "string"}}}},
        ]
        rules = {"list_tables": {"produces": {"table": "name"}}, "describe_table": {"refs": {"table_name": "table"}}}
        mcp.declare_tools(tools, listed, rules=rules)
        async with Monitor(tools, policy="block").episode(task_id="sqlite") as ep:
            pending = await ep.begin("list_tables", {})
            pending.done(mcp.result_value(CallToolResult(content=[TextContent(type="text", text="[{'name': 'products'}]")])))
            assert ep.check("describe_table", {"table_name": "products"}).executable
            ghost = ep.check("describe_table", {"table_name": "ghost"})
            assert not ghost.executable and "'ghost' was never returned by any tool" in ghost.reason


def zod_like_server() -> Server[Any]:
    """A low-level server (no fingerprint: read as unknown) that refuses like zod: strings are not numbers."""
    tool = Tool(
        name="add",
        input_schema={"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}, "required": ["a"]},
    )

    async def list_tools(ctx: Any, params: PaginatedRequestParams | None) -> ListToolsResult:
        return ListToolsResult(tools=[tool])

    async def call_tool(ctx: Any, params: CallToolRequestParams) -> CallToolResult:
        for key, value in (params.arguments or {}).items():
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise MCPError(
                    code=mcp_types.INVALID_PARAMS,
                    message=f'Invalid arguments: [{{"code": "invalid_type", "expected": "number", "path": ["{key}"]}}]',
                )
        return CallToolResult(content=[TextContent(type="text", text=str(sum((params.arguments or {}).values())))])

    return Server("adder", on_list_tools=list_tools, on_call_tool=call_tool)


class TestLearningThroughTheSession:
    """MonitorSession learns from the server's own answers: the first doubtful value reaches it, later ones do not."""

    async def test_a_zod_refusal_switches_unknown_tools_and_teaches_the_reading(self) -> None:
        """'1' for a number reaches the unknown server, which refuses it as zod does; then '2' is refused."""
        async with Client(zod_like_server(), mode="legacy") as client, mcp.MonitorSession(client) as guarded:
            assert getattr(guarded.toolset.get("add").validate, "coercion", None) == "unknown"  # type: ignore[union-attr]
            async with guarded.episode(task_id="learn"):
                with pytest.raises(MCPError):
                    await guarded.call_tool("add", {"a": "1"})
                assert getattr(guarded.toolset.get("add").validate, "coercion", None) == "zod"  # type: ignore[union-attr]
                again = await guarded.call_tool("add", {"a": "2"})
                assert again.is_error and "was not run" in again.content[0].text  # type: ignore[union-attr]
                assert "refused such a value for number arguments earlier" in again.content[0].text  # type: ignore[union-attr]
                ok = await guarded.call_tool("add", {"a": 1, "b": 2})
                assert not ok.is_error
