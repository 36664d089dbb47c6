"""Spec files that fail loudly: a name a rule reads that nothing declares is an error at its line, not a dead rule.

A misspelt argument (``args.qery`` where the tool takes ``query``), a constant the file does not
give, an id path into no argument, a ``let`` of a kind no tool observes: each would leave its
rule undetermined on every call, forever, without a word. They fail when the file is applied,
with ``FILE:LINE: what``. Fields of observed objects are not declared anywhere (results show
them), so ``order.statuss`` is not one of these: it stays undetermined at call time.

A ``ref`` kind no tool produces is a logged warning (``spec_ref_never_produced``), not an
error: values bound when the episode starts (``monitor.episode(bindings=...)``) are a legitimate
source the file cannot show (``prefixmon learn`` writes such refs from BFCL's scenarios);
``given: [kind]`` says so and silences it.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from prefixmon import Monitor, SpecError, Toolset
from prefixmon.rules.specfile import load_spec

pytest.importorskip("cel_expr_python")

ROOT = Path(__file__).resolve().parent.parent
STR = {"type": "string"}

ITEM = {"type": "object", "properties": {"item_id": STR, "qty": {"type": "integer"}}}
"""An element of ``order``'s ``items`` list."""


def _fn(name: str, properties: dict[str, Any] | None = None, **schema: Any) -> dict[str, Any]:
    params: dict[str, Any] = {"type": "object", **schema}
    if properties is not None:
        params["properties"] = properties
    return {"type": "function", "function": {"name": name, "parameters": params}}


TOOLS = [
    _fn("search", {"query": STR}),
    _fn("get_order", {"order_id": STR}),
    _fn(
        "order",
        {
            "order_id": STR,
            "items": {"type": "array", "items": ITEM},
            "payment": {"type": "object", "properties": {"method": STR, "card": {"$ref": "#/$defs/Card"}}},
        },
        **{"$defs": {"Card": {"type": "object", "properties": {"last4": STR}}}},
    ),
    _fn("anything"),  # declares no properties: any argument name may be read
    _fn("open_ended", {"query": STR}, additionalProperties=True),
]

HEAD = """\
schema: prefixmon.spec/1
constants: {now: "2024-05-15T15:00:00", limits: {max_qty: 5}}
tools:
  get_order:
    access: read
    produces: {order_id: order_id}
    observes: [{object: order, id: order_id}]
"""
"""A file prefix every case shares: the order kind is observed and produced, two constants are given."""


def _apply(tmp_path: Path, body: str, tools: list[dict[str, Any]] | None = None) -> tuple[Toolset, Path]:
    """The toolset after applying ``HEAD + body`` from a file (so errors have lines)."""
    path = tmp_path / "rules.yaml"
    path.write_text(HEAD + body, encoding="utf-8")
    toolset = Toolset.from_openai(TOOLS if tools is None else tools)
    return toolset.apply_spec(path), path


def _refused(tmp_path: Path, body: str) -> tuple[str, Path]:
    """The SpecError message of applying ``HEAD + body``."""
    with pytest.raises(SpecError) as caught:
        _apply(tmp_path, body)
    return str(caught.value), tmp_path / "rules.yaml"


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The messages of the ``spec_ref_never_produced`` warnings logged so far."""
    return [
        r.prefixmon["message"]  # type: ignore[attr-defined]  # the structured fields prefixmon's logger adds
        for r in caplog.records
        if r.levelno == logging.WARNING and getattr(r, "prefixmon", {}).get("event") == "spec_ref_never_produced"
    ]


def _line(path: Path, needle: str) -> int:
    """The 1-based line of the first line of ``path`` holding ``needle``."""
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if needle in line)


class TestUnknownArguments:
    """An argument name a rule reads that the tool's JSON Schema does not declare."""

    def test_the_issue_reproduction(self, tmp_path: Path) -> None:
        """``size(args.qery) > 2`` on a tool that takes ``query``: an error at the rule's line naming both."""
        message, path = _refused(tmp_path, "  search:\n    requires: [{expr: 'size(args.qery) > 2'}]\n")
        assert message.startswith(f"{path}:{_line(path, 'args.qery')}: tools.search.requires.0: "), message
        assert "args.qery" in message and "search has no argument 'qery'" in message
        assert "its arguments: query" in message and "did you mean 'query'" in message

    @pytest.mark.parametrize(
        "expr",
        [
            "has(args.qery)",
            'args["qery"] == "x"',
            'args.query == "x" || args.qery == "y"',
            "[1, 2].exists(n, n > 0 && args.qery != '')",
        ],
    )
    def test_every_form_of_reading_it(self, tmp_path: Path, expr: str) -> None:
        """``has()``, an index with a string literal, one side of ``||``, inside a macro: all the same error."""
        message, _ = _refused(tmp_path, f"  search:\n    requires: [{{expr: {expr!r}}}]\n")
        assert "search has no argument 'qery'" in message, message

    def test_nested_objects_and_local_refs(self, tmp_path: Path) -> None:
        """A field of an object argument, through a ``$ref`` into ``$defs`` too."""
        message, _ = _refused(tmp_path, "  order:\n    requires: [{expr: 'args.payment.methd != \"\"'}]\n")
        assert "args.payment has no field 'methd' (its fields: card, method" in message, message
        message, _ = _refused(tmp_path, "  order:\n    requires: [{expr: 'args.payment.card.last5 != \"\"'}]\n")
        assert "args.payment.card has no field 'last5' (its fields: last4" in message, message

    @pytest.mark.parametrize(
        ("expr", "shown"),
        [
            ("args.items.all(i, i.item_idd != '')", "i.item_idd: an element of args.items has no field 'item_idd'"),
            ("args.items[0].item_idd != ''", "args.items[0].item_idd: an element of args.items has no field 'item_idd'"),
            ("args.items.exists(i, i.qty > 0) && args.items.filter(j, j.qyt > 1).size() > 0", "j.qyt:"),
            ("args.items.map(i, i.qtty).all(q, q > 0)", "i.qtty:"),
        ],
    )
    def test_list_items_through_macros_and_indexes(self, tmp_path: Path, expr: str, shown: str) -> None:
        """A macro's loop variable stands for an element of the list it runs over; so does ``list[0]``."""
        message, _ = _refused(tmp_path, f"  order:\n    requires: [{{expr: {expr!r}}}]\n")
        assert shown in message, message

    @pytest.mark.parametrize(
        "expr",
        [
            "args.items.all(i, i.item_id != '' && i.qty <= constants.limits.max_qty)",
            "args.items.map(i, i.qty).all(q, q > 0)",  # q is a number, not an item
            "args.items.all(args, args.qty > 0)",  # a loop variable named args shadows the arguments
            "args.items.exists(i, i.qty > 0) || [{'x': 1}].all(m, m.x > 0)",  # a map literal has no schema
            "has(args.payment.card) && args.payment.card.last4.size() == 4",
            "size(args.items) > 0 && args.items[0].qty > 0",
            "seen('order', args.order_id).anything == 1",  # fields of observed objects are not declared
        ],
    )
    def test_what_is_declared_or_local_loads(self, tmp_path: Path, expr: str) -> None:
        """Declared names, loop variables (shadowing included), literals and observed objects' fields load."""
        _apply(tmp_path, f"  order:\n    requires: [{{expr: {expr!r}}}]\n")

    def test_schemas_that_declare_no_names_are_not_checked(self, tmp_path: Path) -> None:
        """No ``properties``, or ``additionalProperties: true``: any name may be an argument."""
        _apply(tmp_path, "  anything:\n    requires: [{expr: 'args.whatever > 1'}]\n")
        _apply(tmp_path, "  open_ended:\n    requires: [{expr: 'args.extra > 1'}]\n")

    def test_a_disabled_suggestion_is_not_compiled(self, tmp_path: Path) -> None:
        """``enabled: false`` (a learned suggestion nobody enabled) is checked when it is enabled."""
        _apply(tmp_path, "  search:\n    requires: [{expr: 'args.qery > 1', enabled: false, suggested: true}]\n")

    @pytest.mark.parametrize(
        ("body", "needle", "expected"),
        [
            (
                "  order:\n    let: {o: 'order[args.ordr_id]'}\n    requires: [{expr: 'o.status == \"x\"'}]\n",
                "args.ordr_id",
                "tools.order.let.o: args.ordr_id: order has no argument 'ordr_id'",
            ),
            (
                "  search:\n    requires: [{expr: 'args.query != \"\"', message: 'bad {args.qery}'}]\n",
                "args.qery",
                "tools.search.requires.0: the message reads {args.qery}: search has no argument 'qery'",
            ),
            (
                "  order:\n    access: write\n    effects: [{object: order, id: args.ordr_id, set: {status: x}}]\n",
                "args.ordr_id",
                "tools.order.effects.0: args.ordr_id: order has no argument 'ordr_id'",
            ),
            (
                "  search:\n    observes: [{object: order, id: args.qery}]\n",
                "args.qery",
                "tools.search.observes.0: args.qery: search has no argument 'qery'",
            ),
            (
                "  search:\n    observes: [{object: order, id: order_id, fields: {q: args.qery}}]\n",
                "args.qery",
                "tools.search.observes.0: args.qery: search has no argument 'qery'",
            ),
            (
                "  order:\n    access: write\n    let: {o: 'order[args.order_id]'}\n"
                "    requires: [{expr: 'o.status == \"x\"'}]\n"
                "    probes: [{for: o, call: get_order, args: {order_id: args.ordr_id}}]\n",
                "probes:",
                "tools.order.probes.0: args.ordr_id: order has no argument 'ordr_id'",
            ),
            (
                "  order:\n    access: write\n    let: {o: 'order[args.order_id]'}\n"
                "    requires: [{expr: 'o.status == \"x\"'}]\n"
                "    probes: [{for: o, call: get_order, args: {ordr_id: args.order_id}}]\n",
                "probes:",
                "tools.order.probes.0: get_order has no argument 'ordr_id'",
            ),
        ],
    )
    def test_paths_outside_expressions(self, tmp_path: Path, body: str, needle: str, expected: str) -> None:
        """Let ids, message fields, effect and observed ids, fields from the call, probe arguments."""
        message, path = _refused(tmp_path, body)
        assert expected in message, message
        assert message.startswith(f"{path}:{_line(path, needle)}:"), message


class TestNamesDeclaredNowhere:
    """Constants the file does not give, let kinds nothing observes, names CEL cannot resolve."""

    def test_a_constant_the_file_does_not_give(self, tmp_path: Path) -> None:
        """``constants.nw`` (the file gives ``now``) and a nested constant's missing key."""
        message, path = _refused(tmp_path, "  search:\n    requires: [{expr: 'time(constants.nw) > time(\"2024-01-01\")'}]\n")
        assert message.startswith(f"{path}:{_line(path, 'constants.nw')}:"), message
        assert "constants.nw: the file has no constant 'nw' (its constants: limits, now; did you mean 'now'?)" in message
        message, _ = _refused(tmp_path, "  search:\n    requires: [{expr: 'size(args.query) < constants.limits.max_qtty'}]\n")
        assert "constants.limits has no field 'max_qtty' (its fields: max_qty" in message, message

    def test_a_let_of_a_kind_no_tool_observes(self, tmp_path: Path) -> None:
        """``ordr[args.order_id]``: nothing would ever bind it, so every rule reading it is undetermined."""
        message, path = _refused(tmp_path, "  order:\n    let: {o: 'ordr[args.order_id]'}\n    requires: [{expr: 'o.x == 1'}]\n")
        assert message.startswith(f"{path}:{_line(path, 'ordr[')}: tools.order.let.o: "), message
        assert "no tool observes objects of kind 'ordr' (observed kinds: order; did you mean 'order'?)" in message

    def test_an_undefined_name(self, tmp_path: Path) -> None:
        """A let variable the tool does not define is CEL's undeclared reference, with the names it may read."""
        message, path = _refused(
            tmp_path, "  order:\n    let: {o: 'order[args.order_id]'}\n    requires: [{expr: 'ordr.x == 1'}]\n"
        )
        assert message.startswith(f"{path}:{_line(path, 'ordr.x')}: tools.order.requires.0: "), message
        assert "undeclared reference to 'ordr.x'" in message
        assert "(it may read args, constants, o)" in message, message

    def test_a_let_variable_a_tool_does_not_define(self, tmp_path: Path) -> None:
        """Another tool's let is not this tool's: ``o`` is undeclared in ``search``."""
        body = "  order:\n    let: {o: 'order[args.order_id]'}\n    requires: [{expr: 'o.x == 1'}]\n"
        body += "  search:\n    requires: [{expr: 'o.x == 1'}]\n"
        message, _ = _refused(tmp_path, body)
        assert "tools.search.requires.0" in message and "undeclared reference to 'o.x'" in message, message


class TestReferencesNoToolProduces:
    """``ref: KIND`` with no producer: every call with it would be refused."""

    def test_a_kind_nothing_produces_is_a_warning_with_the_producers(
        self, tmp_path: Path, caplog: pytest.LogCaptureFixture
    ) -> None:
        """The warning names the kind, where it is required, a close kind and its producer; the file still loads."""
        _, path = _apply(tmp_path, "  order:\n    args: {order_id: {ref: orderid}}\n")
        (text,) = _warnings(caplog)
        assert text.startswith(f"{path}:{_line(path, 'orderid')}: tools.order.args.order_id: "), text
        assert "no tool produces references of kind 'orderid'" in text
        assert "did you mean 'order_id' (produced by get_order)?" in text, text
        assert "monitor.episode(bindings=...)" in text and "given: [orderid]" in text

    def test_without_a_close_kind_it_lists_what_tools_produce(self, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
        _apply(tmp_path, "  order:\n    args: {order_id: {ref: voucher}}\n")
        (text,) = _warnings(caplog)
        assert text.endswith("; kinds tools produce: order_id (get_order)"), text

    @pytest.mark.parametrize(
        "body",
        [
            "  order:\n    args: {order_id: {ref: order_id}}\n",  # produced by get_order
            "  order:\n    args: {order_id: {ref: account, user: true}}\n",  # the user states them
            "  search:\n    produces: {hit: '~H[0-9]+'}\n  order:\n    args: {order_id: {ref: hit}}\n",  # a text pattern
        ],
    )
    def test_produced_or_stated_kinds_load_quietly(self, tmp_path: Path, body: str, caplog: pytest.LogCaptureFixture) -> None:
        """A producer in the file (from a key or a pattern), or ``user: true``: no warning."""
        _apply(tmp_path, body)
        assert _warnings(caplog) == []

    def test_given_kinds_load_quietly(self, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
        """``given: [account]``: bound when the episode starts, so no producer is needed."""
        path = tmp_path / "rules.yaml"
        path.write_text("schema: prefixmon.spec/1\ngiven: [account]\ntools:\n  order:\n    args: {order_id: {ref: account}}\n")
        Toolset.from_openai(TOOLS).apply_spec(path)
        assert _warnings(caplog) == []

    def test_a_producer_from_python_counts(self, caplog: pytest.LogCaptureFixture) -> None:
        """Producers already in the toolset (a Python declaration, another spec file) count."""
        toolset = Toolset()

        @toolset.tool(produces="ticket_id")
        def open_ticket(title: str) -> dict[str, str]:
            return {"ticket_id": "T1"}

        @toolset.tool
        def close_ticket(ticket_id: str) -> str:
            return "ok"

        toolset.apply_spec(
            {"schema": "prefixmon.spec/1", "tools": {"close_ticket": {"args": {"ticket_id": {"ref": "ticket_id"}}}}}
        )
        assert _warnings(caplog) == []

    async def test_given_kinds_are_what_episode_bindings_supply(self, tmp_path: Path) -> None:
        """The documented legitimate case: the kind is bound when the episode starts, and the call runs."""
        path = tmp_path / "rules.yaml"
        path.write_text(
            "schema: prefixmon.spec/1\ngiven: [account]\ntools:\n  search:\n    args: {query: {ref: account}}\n",
            encoding="utf-8",
        )
        toolset = Toolset.from_openai(TOOLS).apply_spec(path)
        async with Monitor(toolset, policy="observe").episode(task_id="t", bindings={"account": ["A1"]}) as ep:
            assert ep.check("search", {"query": "A1"}).executable
            assert not ep.check("search", {"query": "A2"}).executable
            ep.finish("success")


SHIPPED = sorted(
    [*ROOT.glob("examples/specs/*.yaml"), *ROOT.glob("adapters/taubench/specs/*.yaml"), *ROOT.glob("adapters/tau2/specs/*.yaml")]
)


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: str(p.relative_to(ROOT)))
def test_shipped_specs_load_without_a_word(path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Every shipped spec passes the new checks, with neither an error nor a warning.

    The τ specs are applied onto their benchmark's own tool schemas elsewhere
    (tests/test_spec_observed_rules.py, tests/test_taubench.py); here each file's tools are
    declared with permissive schemas, so its let kinds, seen() kinds and producers are checked
    against the file alone.
    """
    tools = [_fn(name) for name in load_spec(path).tools]
    Toolset.from_openai(tools).apply_spec(path)
    assert _warnings(caplog) == []
