"""τ-bench airline and retail: sandbox, toolsets, gold sequences, hand-made failures, replay."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest

from prefixmon import Cause, EpisodeRecord, Monitor, read_records
from prefixmon._cli import main
from prefixmon.adapters.taubench import DataNotFoundError, Sandbox, data_dir, load_tables, load_tasks, reward
from prefixmon.adapters.taubench._table import Table
from prefixmon.adapters.taubench.data import ENV_VAR, PACKAGED, Domain
from prefixmon.adapters.taubench.gold import monitor_gold, sandbox_failures, ter
from prefixmon.adapters.taubench.replay import TauRollout, read_tau_trajectories, replay_tau
from prefixmon.adapters.taubench.toolsets import toolset

from .test_bounds import collections_watched

USER = "mia_li_3668"  # airline user with two certificates and two credit cards
RETAIL_USER = "noah_brown_6181"


def conversation(domain: Domain, user_text: str, calls: Sequence[tuple[str, Mapping[str, Any]]]) -> list[dict[str, Any]]:
    """A τ-bench-shaped conversation whose tool results come from running the calls in a sandbox."""
    sandbox = Sandbox(domain)
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "policy"},
        {"role": "user", "content": user_text},
    ]
    for i, (name, args) in enumerate(calls):
        call_id = f"call_{i}"
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}],
            }
        )
        messages.append({"role": "tool", "tool_call_id": call_id, "name": name, "content": sandbox.invoke(name, args)})
    return messages


def replay_one(domain: Domain, messages: list[dict[str, Any]], reward_value: float = 0.0) -> EpisodeRecord:
    rollout = TauRollout(task_id=0, trial=0, reward=reward_value, info={}, traj=messages)
    records = anyio.run(lambda: replay_tau([rollout], domain))
    return records[0]


class TestData:
    """Finding and loading the τ-bench data."""

    def test_packaged_by_default(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Without an argument or the environment variable the data shipped in the package is used, license beside it."""
        monkeypatch.delenv(ENV_VAR, raising=False)
        assert data_dir() == PACKAGED
        assert "MIT License" in (PACKAGED / "LICENSE").read_text(encoding="utf-8")
        assert len(load_tables("airline")["flights"]) == 300

    def test_env_var_overrides(self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
        """A folder named by the environment variable that lacks the data is reported with its path."""
        monkeypatch.setenv(ENV_VAR, str(tmp_path))
        with pytest.raises(DataNotFoundError, match=str(tmp_path)):
            data_dir()

    def test_counts(self) -> None:
        """The splits hold the documented numbers of tasks and gold actions."""
        assert len(load_tasks("airline_test")) == 50
        assert sum(len(t.actions) for t in load_tasks("airline_test")) == 158
        assert len(load_tasks("retail_test")) == 115
        assert len(load_tasks("retail_dev")) == 20

    def test_unknown_split(self) -> None:
        """An unknown split names the valid ones."""
        with pytest.raises(ValueError, match="retail_dev"):
            load_tasks("retail_tset")


class TestSandbox:
    """The sandbox behaves as the original environment."""

    def test_airline_and_retail_gold_sequences_succeed(self) -> None:
        """Every gold action of airline_test and retail_dev is accepted."""
        assert sandbox_failures("airline_test") == []
        assert sandbox_failures("retail_dev") == []

    def test_retail_test_gold_failures_are_the_known_ones(self) -> None:
        """retail_test's gold sequences fail only where the task makes the user give wrong details."""
        failed = {f.task_index for f in sandbox_failures("retail_test")}
        assert failed == {2, 3, 4, 12, 13, 21, 35, 36, 37, 38, 39, 46, 47, 54, 55, 64, 67, 68, 106}

    def test_gold_run_earns_reward(self) -> None:
        """A sandbox that ran the gold actions has the gold database hash (reward 1.0); a fresh one does not."""
        task = load_tasks("airline_test")[0]
        done, fresh = Sandbox("airline"), Sandbox("airline")
        done.run_gold(task)
        assert reward(done, task) == 1.0
        assert reward(fresh, task) == 0.0

    def test_error_strings(self) -> None:
        """Errors read exactly as the original environment's."""
        air, shop = Sandbox("airline"), Sandbox("retail")
        assert air.invoke("cancel_reservation", {"reservation_id": "NOPE00"}) == "Error: reservation not found"
        assert air.invoke("get_reservation_details", {"reservation_id": "NOPE00"}) == "Error: user not found"
        assert air.invoke("refund", {}) == "Unknown action refund"
        assert air.invoke("get_user_details", {"user_id": USER, "x": 1}) == (
            "Error: GetUserDetails.invoke() got an unexpected keyword argument 'x'"
        )
        assert air.invoke("calculate", {"expression": "1/0"}) == "Error: division by zero"
        delivered = next(o for o in load_tables("retail")["orders"].values() if o["status"] == "delivered")
        assert shop.invoke("cancel_pending_order", {"order_id": delivered["order_id"], "reason": "no longer needed"}) == (
            "Error: non-pending order cannot be cancelled"
        )

    def test_copy_on_write(self) -> None:
        """Writes go to the sandbox's own copy; the shared data and other sandboxes are untouched."""
        base = load_tables("airline")
        reservation_id = base["users"][USER]["reservations"][0]
        before = json.dumps(base["reservations"][reservation_id])
        sandbox = Sandbox("airline")
        twin = sandbox.fork()
        sandbox.invoke("cancel_reservation", {"reservation_id": reservation_id})
        assert sandbox.db["reservations"][reservation_id]["status"] == "cancelled"
        assert json.dumps(base["reservations"][reservation_id]) == before
        assert "status" not in twin.db["reservations"][reservation_id] or (
            twin.db["reservations"][reservation_id]["status"] != "cancelled"
        )

    def test_a_written_record_shares_nothing_with_the_base(self) -> None:
        """for_write copies the whole record, nested parts and values JSON does not make included."""
        when = {"day": [1, 2]}
        record_1 = {"flights": [{"seat": "1A", "legs": [1, 2]}], "paid": 1.5, "ok": True, "note": None, "when": (when,)}
        base: dict[str, dict[str, Any]] = {"r1": record_1}
        table = Table(base)
        record = table.for_write("r1")
        assert record == base["r1"] and table.for_write("r1") is record
        record["flights"][0]["legs"].append(3)
        record["when"][0]["day"].append(3)
        assert base["r1"]["flights"][0]["legs"] == [1, 2] and when == {"day": [1, 2]}
        assert table["r1"]["flights"][0]["legs"] == [1, 2, 3]

    def test_booking_charges_and_ids(self) -> None:
        """A booking takes the next free id, consumes the certificate and adds the reservation to the user."""
        sandbox = Sandbox("airline")
        task = load_tasks("airline_test")[0]
        result = json.loads(sandbox.invoke(task.actions[0].name, task.actions[0].kwargs))
        assert result["reservation_id"] == "HATHAT"
        user = sandbox.db["users"][USER]
        assert "certificate_7504069" not in user["payment_methods"]
        assert user["reservations"][-1] == "HATHAT"


class TestToolsets:
    """The monitor toolsets and the gold sequences through them."""

    def test_tools(self) -> None:
        """Fourteen airline and sixteen retail tools, every one recognising error results."""
        air, shop = toolset("airline"), toolset("retail")
        assert len(air) == 14
        assert len(shop) == 16
        assert all(spec.error_result is not None for spec in (*air, *shop))

    def test_gold_through_monitor(self) -> None:
        """Gold sequences are fully executable except where they fail themselves or use unavailable data.

        Airline task 25 books a date of birth that appears nowhere; task 16's certificate
        amount (150) appears nowhere either, but is derived from seen numbers (50 * 3).
        """
        airline = anyio.run(lambda: monitor_gold("airline_test"))
        assert {e.task.task_index for e in airline if not e.record.executable} == {25}
        for e in airline:
            if not e.record.executable:
                assert e.record.first_failure is not None
                assert e.record.first_failure.cause == Cause.INFORMATION
        dev = anyio.run(lambda: monitor_gold("retail_dev"))
        assert ter(dev) == 1.0
        retail = anyio.run(lambda: monitor_gold("retail_test"))
        failing = {e.task.task_index: e for e in retail if not e.record.executable}
        assert set(failing) == {f.task_index for f in sandbox_failures("retail_test")}
        for e in failing.values():
            assert e.record.fed == e.sandbox_errors[0][0]


def _unavailable_date(flight_number: str) -> str:
    dates = load_tables("airline")["flights"][flight_number]["dates"]
    return str(next(d for d, v in dates.items() if v["status"] != "available"))


BOOKING: dict[str, Any] = {
    "user_id": USER,
    "origin": "JFK",
    "destination": "SEA",
    "flight_type": "one_way",
    "cabin": "economy",
    "flights": [{"flight_number": "HAT136", "date": "2024-05-20"}, {"flight_number": "HAT039", "date": "2024-05-20"}],
    "passengers": [{"first_name": "Mia", "last_name": "Li", "dob": "1990-04-05"}],
    "payment_methods": [
        {"payment_id": "certificate_7504069", "amount": 250},
        {"payment_id": "credit_card_4421486", "amount": 5},
    ],
    "total_baggages": 3,
    "nonfree_baggages": 0,
    "insurance": "no",
}
LOOKUPS: list[tuple[str, Mapping[str, Any]]] = [
    ("get_user_details", {"user_id": USER}),
    ("search_onestop_flight", {"origin": "JFK", "destination": "SEA", "date": "2024-05-20"}),
]
SAYS = f"Hi, my user id is {USER}. Book me JFK to Seattle on May 20, I'm Mia Li."


class TestFailureKinds:
    """Hand-made conversations, one per failure kind, with the expected FED and cause."""

    def test_correct_booking_is_executable(self) -> None:
        """The correct booking after the lookups is fully executable (FED = T + 1)."""
        record = replay_one("airline", conversation("airline", SAYS, [*LOOKUPS, ("book_reservation", BOOKING)]), 1.0)
        assert record.executable
        assert record.fed == 4
        assert record.outcome == "success"

    def test_payment_method_of_someone_else(self) -> None:
        """A payment id the user does not have and no tool returned is a dependency failure."""
        args = {**BOOKING, "payment_methods": [{"payment_id": "credit_card_9999999", "amount": 255}]}
        record = replay_one("airline", conversation("airline", SAYS, [*LOOKUPS, ("book_reservation", args)]))
        assert record.fed == 3
        assert record.first_failure is not None
        assert record.first_failure.cause == Cause.DEPENDENCY
        assert record.actions[2].error == (
            "book_reservation was rejected by the environment: Error: payment method credit_card_9999999 not found"
        )

    def test_certificate_for_a_change(self) -> None:
        """The user's own certificate cannot pay for a change: a precondition failure."""
        reservation_id = load_tables("airline")["users"][USER]["reservations"][0]
        calls: list[tuple[str, Mapping[str, Any]]] = [
            ("get_user_details", {"user_id": USER}),
            ("get_reservation_details", {"reservation_id": reservation_id}),
            (
                "update_reservation_baggages",
                {
                    "reservation_id": reservation_id,
                    "total_baggages": 5,
                    "nonfree_baggages": 5,
                    "payment_id": "certificate_4856383",
                },
            ),
        ]
        record = replay_one("airline", conversation("airline", SAYS, calls))
        assert record.fed == 3
        assert record.first_failure is not None
        assert record.first_failure.cause == Cause.PRECONDITION
        assert "certificate cannot pay" in record.first_failure.reason

    def test_unavailable_flight(self) -> None:
        """A flight found by a search, booked on a date it does not fly: a precondition failure."""
        date = _unavailable_date("HAT136")
        args = {**BOOKING, "flights": [{"flight_number": "HAT136", "date": date}, {"flight_number": "HAT039", "date": date}]}
        record = replay_one("airline", conversation("airline", SAYS, [*LOOKUPS, ("book_reservation", args)]))
        assert record.fed == 3
        assert record.first_failure is not None
        assert record.first_failure.cause == Cause.PRECONDITION
        assert f"flight HAT136 on {date} cannot be booked" in record.first_failure.reason

    def test_amount_mismatch(self) -> None:
        """Payments that do not add up to the total price: a precondition failure naming both sums."""
        args = {
            **BOOKING,
            "payment_methods": [
                {"payment_id": "certificate_7504069", "amount": 250},
                {"payment_id": "credit_card_4421486", "amount": 15},
            ],
        }
        record = replay_one("airline", conversation("airline", SAYS, [*LOOKUPS, ("book_reservation", args)]))
        assert record.fed == 3
        assert record.first_failure is not None
        assert record.first_failure.cause == Cause.PRECONDITION
        assert "add up to 265, but the total price is 255" in record.first_failure.reason

    def test_invented_id(self) -> None:
        """A reservation id nobody said and no tool returned: a dependency failure at depth 1."""
        record = replay_one("airline", conversation("airline", SAYS, [("get_reservation_details", {"reservation_id": "ABC123"})]))
        assert record.fed == 1
        assert record.first_failure is not None
        assert record.first_failure.cause == Cause.DEPENDENCY

    def test_unknown_tool(self) -> None:
        """A tool the domain does not have: a schema failure, and later calls are still recorded."""
        record = replay_one(
            "airline",
            conversation("airline", SAYS, [("get_user_details", {"user_id": USER}), ("refund_booking", {}), *LOOKUPS[1:]]),
        )
        assert record.fed == 2
        assert record.horizon == 3
        assert record.first_failure is not None
        assert record.first_failure.cause == Cause.SCHEMA
        assert record.actions[2].executable

    def test_non_pending_order(self) -> None:
        """Cancelling a delivered order after reading it: a precondition failure."""
        users = load_tables("retail")["users"]
        orders = load_tables("retail")["orders"]
        user_id, order_id = next(
            (uid, oid) for uid, u in users.items() for oid in u["orders"] if orders[oid]["status"] == "delivered"
        )
        email = users[user_id]["email"]
        calls: list[tuple[str, Mapping[str, Any]]] = [
            ("find_user_id_by_email", {"email": email}),
            ("get_user_details", {"user_id": user_id}),
            ("get_order_details", {"order_id": order_id}),
            ("cancel_pending_order", {"order_id": order_id, "reason": "no longer needed"}),
        ]
        record = replay_one("retail", conversation("retail", f"My email is {email}.", calls))
        assert record.fed == 4
        assert record.first_failure is not None
        assert record.first_failure.cause == Cause.PRECONDITION
        assert "only pending orders can be changed" in record.first_failure.reason

    def test_write_is_mirrored_for_later_checks(self) -> None:
        """After a replayed cancellation, the same order can no longer be changed (the replica saw it)."""
        users = load_tables("retail")["users"]
        orders = load_tables("retail")["orders"]
        user_id, order_id = next(
            (uid, oid) for uid, u in users.items() for oid in u["orders"] if orders[oid]["status"] == "pending"
        )
        address = {"address1": "1 Main St", "address2": "", "city": "Austin", "state": "TX", "country": "USA", "zip": "78701"}
        calls: list[tuple[str, Mapping[str, Any]]] = [
            ("get_user_details", {"user_id": user_id}),
            ("cancel_pending_order", {"order_id": order_id, "reason": "no longer needed"}),
            ("modify_pending_order_address", {"order_id": order_id, **address}),
        ]
        text = f"I am {user_id}; cancel it. Ship to 1 Main St, Austin, TX 78701."
        record = replay_one("retail", conversation("retail", text, calls))
        assert record.fed == 3
        assert record.first_failure is not None
        assert record.first_failure.cause == Cause.PRECONDITION


class TestReplay:
    """Transcript replay and the CLI verb."""

    def _results_file(self, tmp_path: Path) -> Path:
        rollouts = []
        for task in load_tasks("retail_dev")[:3]:
            for trial in range(2):
                sandbox_calls = [(a.name, a.kwargs) for a in task.actions]
                messages = conversation(
                    "retail", task.instruction, [("get_user_details", {"user_id": task.user_id}), *sandbox_calls]
                )
                if trial == 1:
                    messages = conversation("retail", task.instruction, [("lookup_everything", {}), *sandbox_calls])
                rollouts.append({"task_id": task.task_index, "trial": trial, "reward": 1.0 - trial, "info": {}, "traj": messages})
        path = tmp_path / "results.json"
        path.write_text(json.dumps(rollouts), encoding="utf-8")
        return path

    def test_cli_writes_records_in_file_order(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """One record per rollout, in file order, with task id, trial, domain and given labels, outcome from reward."""
        out = tmp_path / "records.jsonl"
        args = [str(self._results_file(tmp_path)), "--domain", "tau-retail", "--out", str(out), "--label", "model=m1"]
        assert main(["replay", *args]) == 0
        records = read_records(out)
        assert [(r.task_id, r.labels["trial"]) for r in records] == [(t, s) for t in ("0", "1", "2") for s in ("0", "1")]
        assert all(r.labels["model"] == "m1" and r.labels["domain"] == "tau-retail" for r in records)
        assert [r.outcome for r in records] == ["success", "failure"] * 3
        assert [r.fed for r in records[1::2]] == [1, 1, 1]
        assert all(r.first_failure and r.first_failure.cause == Cause.SCHEMA for r in records[1::2])
        assert "replayed 6 conversation(s)" in capsys.readouterr().out

    def test_two_models_files_reported_together_keep_both(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """Each model's file replayed on its own, then reported together: no episode is taken for another's duplicate.

        Episode ids are deterministic (replaying the same file again gives the same ids), and
        differ between label sets, so the second model's cohort is not dropped.
        """
        results = self._results_file(tmp_path)
        outs: list[Path] = []
        for model in ("m1", "m2", "m2"):  # m2 twice: the same input again is a duplicate
            outs.append(tmp_path / f"{model}-{len(outs)}.jsonl")
            args = [str(results), "--domain", "tau-retail", "--out", str(outs[-1]), "--label", f"model={model}"]
            assert main(["replay", *args]) == 0
        ids = [[r.episode_id for r in read_records(o)] for o in outs]
        assert ids[1] == ids[2]
        assert not set(ids[0]) & set(ids[1])
        capsys.readouterr()
        assert main(["report", *map(str, outs[:2]), "--format", "json", "--bootstrap", "0"]) == 0
        report = json.loads(capsys.readouterr().out)
        assert report["duplicate_episodes"] == 0
        assert sorted((c["key"]["model"], c["n"]) for c in report["cohorts"]) == [("m1", 6), ("m2", 6)]

    def test_bad_file_is_reported(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """A rollout without a trajectory is reported with its position, exit code 1."""
        bad = tmp_path / "bad.json"
        bad.write_text(json.dumps([{"task_id": 1, "reward": 0}]), encoding="utf-8")
        assert main(["replay", str(bad), "--domain", "tau-airline", "--out", str(tmp_path / "o.jsonl")]) == 1
        assert "rollout 0.traj" in capsys.readouterr().err
        with pytest.raises(ValueError, match="not JSON"):
            (tmp_path / "x.json").write_text("[", encoding="utf-8")
            read_tau_trajectories(tmp_path / "x.json")

    def test_generic_jsonl_with_tools(self, tmp_path: Path) -> None:
        """OpenAI-messages JSON Lines replay against plain OpenAI tool definitions."""
        tools = tmp_path / "tools.json"
        tools.write_text(
            json.dumps(
                [
                    {
                        "type": "function",
                        "function": {
                            "name": "echo",
                            "parameters": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
                        },
                    }
                ]
            ),
            encoding="utf-8",
        )
        lines = [
            {
                "task_id": "a",
                "reward": 1,
                "messages": [
                    {"role": "user", "content": "say hi"},
                    {
                        "role": "assistant",
                        "tool_calls": [{"id": "1", "function": {"name": "echo", "arguments": '{"text": "hi"}'}}],
                    },
                    {"role": "tool", "tool_call_id": "1", "content": "hi"},
                ],
            },
            {
                "task_id": "b",
                "messages": [
                    {"role": "assistant", "tool_calls": [{"id": "1", "function": {"name": "echo", "arguments": '{"text": 3'}}]},
                    {"role": "tool", "tool_call_id": "1", "content": "Error: bad"},
                ],
            },
        ]
        src = tmp_path / "conv.jsonl"
        src.write_text("\n".join(json.dumps(x) for x in lines) + "\n", encoding="utf-8")
        out = tmp_path / "r.jsonl"
        assert main(["replay", str(src), "--tools", str(tools), "--out", str(out)]) == 0
        first, second = read_records(out)
        assert first.executable and first.outcome == "success"
        assert second.fed == 1 and second.first_failure is not None and second.first_failure.cause == Cause.SCHEMA


class TestCalculator:
    """The shared calculate tool evaluates arithmetic from its syntax tree, never with eval."""

    @pytest.mark.parametrize(
        ("expression", "answer"),
        [
            ("1+2*3", "7.0"),
            ("(100 - 45.5) / 2", "27.25"),
            ("2**10", "1024.0"),
            ("1/0", "Error: division by zero"),
            ("1+", "Error: invalid syntax (<string>, line 1)"),
            ("9**9**9", "Error: exponent 3.8742e+08 is larger than 100"),
            ("__import__('os')", "Error: invalid characters in expression"),
        ],
    )
    def test_answers(self, expression: str, answer: str) -> None:
        """Ordinary arithmetic as the original answers it; runaway powers and code are refused."""
        from prefixmon.adapters.taubench._calculator import calculate

        assert calculate(expression) == answer


class TestDeeplyNestedResults:
    """A recorded result nested too deeply to parse binds nothing, and never recurses near the limit."""

    def test_a_deep_product_types_result_leaves_collections_room(self) -> None:
        """list_all_product_types' effect (binding the product ids) reads a 5,000-deep result as no mapping:
        no fault, and no collection meets a full stack; a shallow result still binds its ids."""
        monitor = Monitor(toolset("retail"), policy="observe")
        deep = '{"T-shirt": ' + "[" * 5_000 + "]" * 5_000 + "}"

        async def replay(result: str) -> bool:
            async with monitor.episode(env=Sandbox("retail", replica=True)) as ep:
                pending = await ep.begin("list_all_product_types", {})
                pending.done(result)
                return ep.state.is_bound("product_id", "9523456873")

        with collections_watched() as failures:
            bound = anyio.run(replay, deep)
        assert failures == []
        assert not bound and monitor.stats.internal_errors == 0
        assert anyio.run(replay, '{"T-shirt": "9523456873"}')
