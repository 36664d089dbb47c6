"""The BFCL adapter's building blocks on BFCL's own data and environment classes."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("bfcl_eval")

from prefixmon import Cause, Monitor
from prefixmon.adapters.bfcl import (
    RULES,
    BfclCall,
    BfclEnv,
    CallParseError,
    build_toolset,
    ground_truth_calls,
    parse_calls,
    rejection,
    run_task,
    task_index,
)
from prefixmon.adapters.bfcl.data import function_classes
from prefixmon.adapters.bfcl.env import calls_from_object
from prefixmon.adapters.bfcl.rules import first_violation
from prefixmon.adapters.bfcl.specs import json_schema


def _task(task_id: str) -> Any:
    return task_index()[task_id]


class TestParsing:
    """Call strings and call objects, decoded without evaluating code."""

    def test_keywords_and_positionals(self) -> None:
        """Positional arguments are named after the environment method's signature."""
        calls = parse_calls("sort('final_report.pdf')")
        assert calls == [BfclCall(name="sort", args={"file_name": "final_report.pdf"})]

    def test_list_of_calls(self) -> None:
        """A bracketed list of calls (BFCL's prompting output) gives every call in order."""
        calls = parse_calls("[cd(folder='a'), ls(a=True)]")
        assert [c.name for c in calls] == ["cd", "ls"]
        assert calls[1].args == {"a": True}

    def test_code_fence_is_stripped_as_bfcl_does(self) -> None:
        """Prompting models often fence their calls; BFCL's decoder strips backticks, so does this one."""
        for text in ("```\n[cd(folder='a'), ls(a=True)]\n```", "`cd(folder='a'), ls(a=True)`"):
            assert [c.name for c in parse_calls(text)] == ["cd", "ls"]

    def test_code_is_refused(self) -> None:
        """Anything but literal values is refused, so nothing can run while parsing."""
        with pytest.raises(CallParseError, match="not a literal"):
            parse_calls("cd(folder=__import__('os').getcwd())")
        with pytest.raises(CallParseError, match="not a function call"):
            parse_calls("1 + 2")

    def test_extra_positional_is_kept(self) -> None:
        """A surplus positional argument keeps a name no schema declares (judged, not dropped)."""
        (call,) = parse_calls("pwd('x')")
        assert call.args == {"<positional 1>": "x"}

    def test_call_objects(self) -> None:
        """{name: json} objects decode; unparsable JSON text is kept raw for the monitor to judge."""
        calls = calls_from_object({"cd": '{"folder": "a"}', "ls": {"a": False}, "mv": "{bad"})
        assert calls[0] == BfclCall(name="cd", args={"folder": "a"})
        assert calls[1].args == {"a": False}
        assert calls[2].args == "{bad"
        too_long = '{"folder": ' + "7" * 5_000 + "}"  # past Python's digit limit: it ended the replay
        assert calls_from_object({"cd": too_long}) == [BfclCall(name="cd", args=too_long)]


class TestRejection:
    """Which results mean the environment refused the call."""

    def test_error_forms(self) -> None:
        """An error key, a one-item error list, a false login flag and a not-found sentinel are rejections."""
        assert rejection("cd", {"error": "no such dir"}) == "no such dir"
        assert rejection("get_user_tickets", [{"error": "log in"}]) == "log in"
        assert rejection("get_watchlist", ["Error: User not authenticated."]) is not None
        assert rejection("authenticate_twitter", {"authentication_status": False}) is not None
        assert rejection("get_symbol_by_name", {"symbol": "Stock not found"}) is not None

    def test_negative_answers_are_answers(self) -> None:
        """A query that answers no (cannot drive, verification failed) was accepted."""
        assert rejection("estimate_drive_feasibility_by_mileage", {"canDrive": False}) is None
        assert rejection("verify_traveler_information", {"verification_status": False}) is None
        assert rejection("message_get_login_status", {"login_status": False}) is None


class TestSpecs:
    """Specs built from BFCL's function docs."""

    def test_every_function_has_a_spec(self) -> None:
        """All 128 functions of the eight classes are declared, with acceptance from error results."""
        tools = build_toolset()
        assert set(tools.names) == set(function_classes())
        assert len(tools) == 128
        assert all(spec.error_result is not None for spec in tools)

    def test_type_names_mapped(self) -> None:
        """BFCL's dict/float become object/number; a "None" default admits null and is not copied."""
        schema = json_schema(
            {"type": "dict", "properties": {"x": {"type": "float"}, "n": {"type": "string", "default": "None"}}},
            where="t",
        )
        assert schema["type"] == "object"
        assert schema["properties"]["x"]["type"] == "number"
        assert schema["properties"]["n"]["type"] == ["string", "null"]
        assert "default" not in schema["properties"]["n"]

    def test_validation_does_not_fill_defaults(self) -> None:
        """find(path='.') runs as sent: no default 'None' name sneaks in (it would match nothing)."""
        args = build_toolset()["find"].validate({"path": "."})
        assert args == {"path": "."}

    def test_unknown_mode(self) -> None:
        """An unknown precondition mode is a clear error."""
        with pytest.raises(ValueError, match="unknown precondition mode"):
            build_toolset("sometimes")  # type: ignore[arg-type]


class TestRulesAgainstEnvironment:
    """Declared rules predict what the real environment classes refuse."""

    def test_engine_needs_locked_doors_and_brake(self) -> None:
        """startEngine with unlocked doors: the rule and the environment give the same refusal."""
        task = next(t for t in task_index().values() if "VehicleControlAPI" in t.involved_classes)
        env = BfclEnv(task)
        car = env.get("VehicleControlAPI")
        car.remainingUnlockedDoors = 2
        reason = first_violation(env, "startEngine", {"ignitionMode": "START"})
        assert reason is not None and "doors must be locked" in reason
        assert rejection("startEngine", env.run("startEngine", {"ignitionMode": "START"})) is not None

    def test_file_must_exist(self) -> None:
        """cat of a missing file: predicted by the rule, refused by the environment."""
        env = BfclEnv(_task("multi_turn_base_0"))
        assert first_violation(env, "cat", {"file_name": "nope.txt"}) is not None
        assert rejection("cat", env.run("cat", {"file_name": "nope.txt"})) is not None

    def test_rules_name_real_functions(self) -> None:
        """Every function a rule is declared for exists in the docs."""
        assert set(RULES) <= set(function_classes())

    def test_dry_run_leaves_the_environment_alone(self) -> None:
        """A dry run of mkdir reports acceptance and the live file system does not change."""
        env = BfclEnv(_task("multi_turn_base_0"))
        before = list(env.get("GorillaFileSystem")._current_dir.contents)
        assert env.dry_run("mkdir", {"dir_name": "fresh"}) is None
        assert env.dry_run("cd", {"folder": "missing"}) is not None
        assert list(env.get("GorillaFileSystem")._current_dir.contents) == before


class TestRunTask:
    """One task through a monitor episode."""

    async def test_ground_truth_is_executable(self) -> None:
        """The ground truth of a task replays with no failure in every precondition mode."""
        task = _task("multi_turn_base_0")
        for mode in ("declared", "dry_run", "none"):
            run = await run_task(Monitor(build_toolset(mode)), task, ground_truth_calls(task))
            record = run.episode.record
            assert record is not None and record.executable, mode
            assert record.horizon == sum(len(t) for t in task.ground_truth)

    async def test_invented_id_is_a_dependency_failure(self) -> None:
        """cancel_order with an id no call produced and the scenario lacks: dependency, before the env says so."""
        task = next(t for t in task_index().values() if "TradingBot" in t.involved_classes)
        run = await run_task(Monitor(build_toolset()), task, [[BfclCall(name="cancel_order", args={"order_id": 987654321})]])
        record = run.episode.record
        assert record is not None and record.first_failure is not None
        assert record.first_failure.cause is Cause.DEPENDENCY
        assert record.actions[0].error is not None  # it still ran (observe) and was refused
