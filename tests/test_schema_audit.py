"""Benchmark tool schemas as strict as the real tools and no stricter, judged by running the tools.

For each benchmark the schema check of the monitor's toolset is compared with what the tool
itself does with the call: a missing or unknown argument, a record without a field, a number
sent as text. The one place the check is deliberately stricter than a Python tool (a number
where text is declared, a value off a declared list: the tool compares or stores it as given
and runs) is pinned as such (see docs/benchmarks.md, "Schemas").
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from prefixmon import Toolset
from prefixmon.adapters.taubench import Sandbox, load_tasks
from prefixmon.adapters.taubench.sandbox import is_error_result
from prefixmon.adapters.taubench.toolsets import STORED_AS_GIVEN, toolset

from .test_tau2_signature_schemas import variants
from .test_taubench import BOOKING


def accepts(tools: Toolset, name: str, args: dict[str, Any]) -> bool:
    """Whether the schema check of ``name`` passes ``args``."""
    try:
        tools[name].validate(copy.deepcopy(args))
    except Exception:
        return False
    return True


# -- τ-bench v1 ---------------------------------------------------------------------------------
# mia_li_3668 books JFK -> ATL -> SEA on 2024-05-20 in economy: 152 + 103 = 255
V1_BOOKING: dict[str, Any] = {
    **BOOKING,
    "payment_methods": [{"payment_id": "credit_card_4421486", "amount": 255}],
    "total_baggages": 0,
}


def v1_booking(**changes: Any) -> dict[str, Any]:
    return {**V1_BOOKING, **changes}


def v1_runs(tool: str, args: dict[str, Any], domain: str = "airline") -> bool:
    """Whether τ-bench v1's tool (our faithful sandbox) answers the call without an error."""
    return is_error_result(Sandbox(domain).invoke(tool, copy.deepcopy(args))) is None  # type: ignore[arg-type]


class TestTauV1:
    """τ-bench v1 calls ``Tool.invoke(data, **kwargs)`` as it is: a missing or unknown keyword
    raises ``TypeError``; records are plain dicts, read by key only where the tool reads them."""

    @pytest.mark.parametrize(
        ("tool", "args"),
        [
            ("book_reservation", V1_BOOKING),
            ("book_reservation", v1_booking(passengers=[{"first_name": "Mia", "last_name": "Li"}])),
            ("book_reservation", v1_booking(passengers=[{"first_name": "Mia"}])),
            ("book_reservation", v1_booking(payment_methods=[{"payment_id": "credit_card_4421486", "amount": 255, "note": "x"}])),
            ("book_reservation", v1_booking(flights=[{**f, "price": 1} for f in V1_BOOKING["flights"]])),
            ("book_reservation", v1_booking(total_baggages="2")),
            ("book_reservation", v1_booking(payment_methods=[{"payment_id": "credit_card_4421486", "amount": 255.0}])),
            (
                "update_reservation_passengers",
                {
                    "reservation_id": "4WQ150",
                    "passengers": [{"first_name": "Chen"}, {"first_name": "Raj"}, {"first_name": "Ivan"}],
                },
            ),
            (
                "update_reservation_baggages",
                {"reservation_id": "4WQ150", "total_baggages": "2", "nonfree_baggages": 0, "payment_id": "gift_card_3576581"},
            ),
            ("send_certificate", {"user_id": "mia_li_3668", "amount": "50"}),
        ],
        ids=[
            "well-formed",
            "passenger-without-dob",
            "passenger-name-only",
            "payment-extra-key",
            "flight-extra-key",
            "bags-as-text",
            "amount-float",
            "passengers-names-only",
            "update-bags-as-text",
            "certificate-amount-as-text",
        ],
    )
    def test_what_the_tool_runs_passes(self, tool: str, args: dict[str, Any]) -> None:
        """Passengers are stored as given (no field is read), extra record keys are kept, and a
        number the tool only stores may come as text: the tool runs, the schema passes."""
        assert v1_runs(tool, args)
        assert accepts(toolset("airline"), tool, args)

    @pytest.mark.parametrize(
        ("tool", "args"),
        [
            ("book_reservation", v1_booking(payment_methods=[{"amount": 255}])),
            ("book_reservation", v1_booking(payment_methods=[{"payment_id": "credit_card_4421486"}])),
            ("book_reservation", v1_booking(flights=[{"flight_number": "HAT136"}])),
            ("book_reservation", v1_booking(nonfree_baggages="1")),
            ("book_reservation", v1_booking(payment_methods=[{"payment_id": "credit_card_4421486", "amount": "255"}])),
            ("book_reservation", v1_booking(seat="12A")),
            ("book_reservation", {k: v for k, v in V1_BOOKING.items() if k != "insurance"}),
            ("book_reservation", v1_booking(cabin="first")),
            (
                "update_reservation_baggages",
                {"reservation_id": "4WQ150", "total_baggages": 2, "nonfree_baggages": "1", "payment_id": "gift_card_3576581"},
            ),
        ],
        ids=[
            "payment-without-id",
            "payment-without-amount",
            "flight-without-date",
            "paid-bags-as-text",
            "amount-as-text",
            "unknown-argument",
            "missing-argument",
            "cabin-off-list",
            "update-paid-bags-as-text",
        ],
    )
    def test_what_the_tool_rejects_fails(self, tool: str, args: dict[str, Any]) -> None:
        """A field the tool reads by key, a number it computes with, an unknown or missing keyword."""
        assert not v1_runs(tool, args)
        assert not accepts(toolset("airline"), tool, args)

    @pytest.mark.parametrize(
        ("tool", "args"),
        [
            ("search_direct_flight", {"origin": 7, "destination": "SEA", "date": "2024-05-20"}),
            ("book_reservation", v1_booking(insurance="maybe")),
        ],
        ids=["number-for-text", "off-list"],
    )
    def test_stricter_by_design(self, tool: str, args: dict[str, Any]) -> None:
        """A number where text is declared, or a value off its list: the tool compares or stores it
        as given and runs, the schema refuses it (the declared value set is the contract)."""
        assert v1_runs(tool, args)
        assert not accepts(toolset("airline"), tool, args)

    @pytest.mark.parametrize("split", ["airline_test", "retail_test", "retail_dev"])
    def test_gold_calls_changed_in_form_agree_with_the_tool(self, split: str) -> None:
        """Every gold call, changed in form one way at a time, on the sandbox in the task's state:
        the schema refuses the change exactly when the tool errs."""
        domain = "airline" if split.startswith("airline") else "retail"
        tools = toolset(domain)  # type: ignore[arg-type]
        disagreements, compared = [], 0
        for task in load_tasks(split):
            sandbox = Sandbox(domain)  # type: ignore[arg-type]
            for action in task.actions:
                if is_error_result(sandbox.fork().invoke(action.name, action.kwargs)) is None:
                    for change, changed in variants(dict(action.kwargs)):
                        refused = not accepts(tools, action.name, changed)
                        errs = is_error_result(sandbox.fork().invoke(action.name, copy.deepcopy(changed))) is not None
                        compared += 1
                        if refused != errs:
                            disagreements.append((task.task_index, action.name, change, "refused" if refused else "accepted"))
                sandbox.invoke(action.name, action.kwargs)
        assert compared > 0
        assert disagreements == []

    def test_stored_as_given_names_real_arguments(self) -> None:
        """Every argument read laxly is one the tool declares."""
        for (tool, argument), domain in ((key, "airline") for key in STORED_AS_GIVEN):
            assert argument in toolset(domain)[tool].parameters["properties"]  # type: ignore[arg-type]


# -- BFCL ---------------------------------------------------------------------------------------
JSON_TYPES: dict[str, type] = {"string": str, "integer": int, "number": float, "boolean": bool, "array": list, "object": dict}


def _annotated(hint: Any) -> set[Any]:
    import types
    import typing

    origin = typing.get_origin(hint) or hint
    if origin in (typing.Union, types.UnionType):
        return {typing.get_origin(a) or a for a in typing.get_args(hint)}
    return {origin}


def test_bfcl_schemas_are_the_methods_signatures() -> None:
    """BFCL calls ``instance.method(**args)``: every function doc's schema names the method's
    parameters, requires those without a default and types each as its annotation."""
    pytest.importorskip("bfcl_eval")
    import inspect

    from prefixmon.adapters.bfcl import env
    from prefixmon.adapters.bfcl.data import function_docs
    from prefixmon.adapters.bfcl.specs import json_schema

    problems: list[tuple[str, ...]] = []
    functions = 0
    for docs in function_docs().values():
        for doc in docs:
            name, functions = doc["name"], functions + 1
            schema = json_schema(doc.get("parameters", {"type": "dict", "properties": {}}), where=name)
            sig = env.signature(name)
            assert sig is not None, name
            params = sig.parameters
            if set(schema.get("properties", {})) != set(params):
                problems.append((name, "arguments", str(sorted(schema.get("properties", {}))), str(sorted(params))))
            if set(schema.get("required", [])) != {k for k, p in params.items() if p.default is inspect.Parameter.empty}:
                problems.append((name, "required", str(sorted(schema.get("required", [])))))
            hints = env._hints(name)
            for arg, prop in schema.get("properties", {}).items():
                declared = prop.get("type")
                for t in declared if isinstance(declared, list) else [declared]:
                    if t != "null" and JSON_TYPES.get(t) not in _annotated(hints.get(arg)):
                        problems.append((name, arg, str(t), str(hints.get(arg))))
    assert functions > 100
    assert problems == []
