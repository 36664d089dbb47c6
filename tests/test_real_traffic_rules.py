"""What real models' recorded runs taught: information findings do not block by default, a refused
call sent again unchanged is refused again, and refusals are scored against the environment.

The excerpts are written here in the style of τ-bench runs (an order desk, a booking desk),
not copied from any recorded file.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any, ClassVar

import pytest

from prefixmon import Cause, Decision, Grounded, Monitor, Policy, SpecError, ToolBlocked, Toolset, read_records
from prefixmon.analytics.scoring import score_records
from prefixmon.records import write_records


def _error(result: object) -> str | None:
    return result if isinstance(result, str) and result.startswith("Error:") else None


def _fn(name: str, **props: Any) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "parameters": {"type": "object", "properties": props, "required": list(props)},
        },
    }


STR = {"type": "string"}
DESK = [
    _fn("find_user_id_by_email", email=STR),
    _fn("get_user_details", user_id=STR),
    _fn("cancel_pending_order", order_id=STR, reason=STR),
    _fn("book_passenger", first_name=STR, dob=STR),
]


def desk(**rules: Any) -> Toolset:
    read = {"metadata": {"read_only": True}}
    return Toolset.from_openai(
        DESK,
        rules={"find_user_id_by_email": read, "get_user_details": read, **rules},
        error_result=_error,
    )


async def _replay(monitor: Monitor, calls: list[tuple[str, dict[str, Any], str]], user: str = "") -> Any:
    """Judge each recorded call, then give it its recorded result (what ``prefixmon replay`` does)."""
    async with monitor.episode(task_id="t") as ep:
        if user:
            ep.user(user)
        for name, args, result in calls:
            pending = await ep.begin(name, args)
            pending.done(result)
        ep.finish("failure")
    assert ep.record is not None
    return ep.record


class TestRepeatedRejection:
    async def test_the_same_refused_call_again_is_refused_again(self) -> None:
        """A lookup the environment refused, sent again unchanged with only reads in between: a precondition failure."""
        record = await _replay(
            Monitor(desk()),
            [
                ("find_user_id_by_email", {"email": "noa.k@example.com"}, "Error: user not found"),
                ("get_user_details", {"user_id": "noa_kim_1"}, "Error: user not found"),
                ("find_user_id_by_email", {"email": "noa.k@example.com"}, "Error: user not found"),
            ],
        )
        third = record.actions[2]
        assert third.cause is Cause.PRECONDITION
        assert third.reason is not None and "refused at step 1 with the same arguments" in third.reason
        assert "user not found" in third.reason
        assert record.actions[1].cause is Cause.STATE_CONSISTENCY  # a different call: judged on its own

    async def test_changed_arguments_are_a_new_call(self) -> None:
        record = await _replay(
            Monitor(desk()),
            [
                ("find_user_id_by_email", {"email": "noa.k@example.com"}, "Error: user not found"),
                ("find_user_id_by_email", {"email": "noa.kim@example.com"}, '"noa_kim_1"'),
            ],
        )
        assert record.actions[1].cause is None

    async def test_a_write_in_between_forgets_the_rejection(self) -> None:
        """cancel_pending_order is not read-only: after it ran, the environment may answer differently."""
        record = await _replay(
            Monitor(desk()),
            [
                ("find_user_id_by_email", {"email": "noa.k@example.com"}, "Error: user not found"),
                ("cancel_pending_order", {"order_id": "#W100", "reason": "no longer needed"}, '{"status": "cancelled"}'),
                ("find_user_id_by_email", {"email": "noa.k@example.com"}, '"noa_kim_1"'),
            ],
        )
        assert record.actions[2].cause is None

    async def test_a_call_of_unknown_access_counts_as_a_write(self) -> None:
        tools = Toolset.from_openai(DESK, error_result=_error)  # nothing says which tools only read
        record = await _replay(
            Monitor(tools),
            [
                ("find_user_id_by_email", {"email": "noa.k@example.com"}, "Error: user not found"),
                ("get_user_details", {"user_id": "noa_kim_1"}, '{"name": "Noa"}'),
                ("find_user_id_by_email", {"email": "noa.k@example.com"}, '"noa_kim_1"'),
            ],
        )
        assert record.actions[2].cause is None

    async def test_transient_rejections_and_raised_errors_may_be_retried(self) -> None:
        monitor = Monitor(desk())
        async with monitor.episode(task_id="t") as ep:
            for _ in range(2):
                pending = await ep.begin("find_user_id_by_email", {"email": "a@example.com"})
                pending.done("Error: rate limit exceeded, try again in 2s")
            for _ in range(2):
                pending = await ep.begin("get_user_details", {"user_id": "u1"})
                pending.failed(TimeoutError("upstream did not answer"))
            ep.finish("failure")
        assert ep.record is not None
        assert [a.cause for a in ep.record.actions] == [Cause.STATE_CONSISTENCY] * 4

    async def test_a_blocking_policy_stops_the_repeat_before_it_runs(self) -> None:
        monitor = Monitor(desk(), policy="block")
        async with monitor.episode(task_id="t") as ep:
            pending = await ep.begin("find_user_id_by_email", {"email": "noa.k@example.com"})
            pending.done("Error: user not found")
            with pytest.raises(ToolBlocked, match="refused at step 1"):
                await ep.begin("find_user_id_by_email", {"email": "noa.k@example.com"})
            ep.finish("failure")

    async def test_an_error_message_the_adapter_reports_is_remembered(self) -> None:
        """``failed("...")`` (an MCP ``isError`` result, a framework's error text) is the environment's answer: remembered."""
        monitor = Monitor(desk(), policy="block")
        async with monitor.episode(task_id="t") as ep:
            pending = await ep.begin("get_user_details", {"user_id": "u9"})
            pending.failed("user u9 not found")
            with pytest.raises(ToolBlocked, match="refused at step 1"):
                await ep.begin("get_user_details", {"user_id": "u9"})
            ep.finish("failure")


class TestInformationDoesNotBlockByDefault:
    GROUNDED: ClassVar[dict[str, Any]] = {"book_passenger": {"grounded": ["first_name", "dob"]}}

    async def test_an_ungrounded_value_is_reported_and_the_call_runs(self) -> None:
        """The environment accepts a value nobody said: under block the finding is recorded, the call runs."""
        monitor = Monitor(desk(**self.GROUNDED), policy="block")
        record = await _replay(
            monitor, [("book_passenger", {"first_name": "Mia", "dob": "1990-01-01"}, '{"ok": true}')], user="I am Mia."
        )
        action = record.actions[0]
        assert action.cause is Cause.INFORMATION and action.reached_environment
        assert action.decision is not Decision.BLOCK
        assert "1990-01-01" in (action.reason or "")

    async def test_an_argument_opts_in_to_blocking(self) -> None:
        rules = {"book_passenger": {"grounded": {"first_name": Grounded(), "dob": Grounded(block=True)}}}
        monitor = Monitor(desk(**rules), policy="block")
        async with monitor.episode(task_id="t") as ep:
            ep.user("I am Mia.")
            with pytest.raises(ToolBlocked, match="dob"):
                await ep.begin("book_passenger", {"first_name": "Mia", "dob": "1990-01-01"})
            ep.finish("failure")

    async def test_a_policy_naming_the_cause_blocks_it(self) -> None:
        policy = Policy(default="block", causes={"information": "block"})
        monitor = Monitor(desk(**self.GROUNDED), policy=policy)
        async with monitor.episode(task_id="t") as ep:
            with pytest.raises(ToolBlocked):
                await ep.begin("book_passenger", {"first_name": "Mia", "dob": "1990-01-01"})
            ep.finish("failure")

    async def test_a_tool_rule_naming_the_cause_blocks_it(self) -> None:
        policy = Policy(default="observe", tools={"book_passenger": {"information": "block"}})
        monitor = Monitor(desk(**self.GROUNDED), policy=policy)
        async with monitor.episode(task_id="t") as ep:
            with pytest.raises(ToolBlocked):
                await ep.begin("book_passenger", {"first_name": "Mia", "dob": "1990-01-01"})
            ep.finish("failure")

    def test_block_in_a_spec_file_needs_a_grounded_argument(self, tmp_path: Path) -> None:
        spec = tmp_path / "desk.yaml"
        spec.write_text(
            "schema: prefixmon.spec/1\ntools:\n  book_passenger:\n    args:\n      dob: {block: true}\n", encoding="utf-8"
        )
        with pytest.raises(SpecError, match="block applies to a grounded argument"):
            Toolset.from_openai(DESK, spec=spec)

    async def test_block_in_a_spec_file_blocks(self, tmp_path: Path) -> None:
        spec = tmp_path / "desk.yaml"
        spec.write_text(
            "schema: prefixmon.spec/1\ntools:\n  book_passenger:\n    args:\n      dob: {grounded: true, block: true}\n",
            encoding="utf-8",
        )
        monitor = Monitor(Toolset.from_openai(DESK, spec=spec), policy="block")
        async with monitor.episode(task_id="t") as ep:
            with pytest.raises(ToolBlocked, match="dob"):
                await ep.begin("book_passenger", {"first_name": "Mia", "dob": "1990-01-01"})
            ep.finish("failure")


SPEC = """schema: prefixmon.spec/1
tools:
  cancel_pending_order:
    args: {order_id: {ref: order_id}}
"""


async def _scored_records(tmp_path: Path) -> Path:
    """Three calls: a refusal the environment agreed with, a refusal of a call it ran, an error nobody predicted."""
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC, encoding="utf-8")
    tools = Toolset.from_openai(DESK, error_result=_error, spec=spec)
    record = await _replay(
        Monitor(tools),
        [
            ("cancel_pending_order", {"order_id": "#W1", "reason": "x"}, "Error: order not found"),
            ("cancel_pending_order", {"order_id": "#W2", "reason": "x"}, '{"status": "cancelled"}'),
            ("get_user_details", {"user_id": "u9"}, "Error: user not found"),
            ("get_user_details", {"user_id": "u1"}, '{"name": "Ada"}'),
        ],
    )
    out = tmp_path / "records.jsonl"
    write_records(out, [record])
    return out


class TestScore:
    async def test_counts_against_the_environment(self, tmp_path: Path) -> None:
        score = score_records(read_records(await _scored_records(tmp_path)), input="x")
        assert (score.calls, score.env_errors, score.refusals) == (4, 2, 2)
        assert (score.confusion.tp, score.confusion.fp, score.confusion.fn, score.confusion.tn) == (1, 1, 1, 1)
        assert score.confusion.recall == 0.5 and score.confusion.precision == 0.5
        assert dict(score.refused_ok) == {"dependency": 1} and dict(score.caught) == {"dependency": 1}
        (example,) = score.examples["dependency"]
        assert example.tool == "cancel_pending_order" and example.depth == 2 and "#W2" in example.reason

    def test_rates_are_undefined_without_a_denominator(self) -> None:
        score = score_records([], input="empty")
        assert score.confusion.recall is None and score.confusion.precision is None
        assert score.as_dict()["recall"] is None

    async def test_the_score_verb(self, tmp_path: Path) -> None:
        records = await _scored_records(tmp_path)
        cli = [sys.executable, "-m", "prefixmon", "score", str(records)]
        text = subprocess.run(cli, capture_output=True, text=True, check=True).stdout
        assert "| 4 | 2 | 2 | 0.500 | 0.500 | dependency 1 |" in text
        assert "dependency: cancel_pending_order (task t, step 2)" in text
        done = subprocess.run([*cli, "--format", "json", "--fail-on-refusal"], capture_output=True, text=True)
        assert done.returncode == 3 and "1 refusal(s) of calls the environment ran" in done.stderr
        parsed = json.loads(done.stdout)
        assert parsed["total"]["refused_ok_by_cause"] == {"dependency": 1}
        assert parsed["total"]["examples"]["dependency"][0]["tool"] == "cancel_pending_order"

    async def test_bad_lines_are_named_and_the_rest_is_scored(self, tmp_path: Path) -> None:
        records = await _scored_records(tmp_path)
        with records.open("a", encoding="utf-8") as f:
            f.write('{"schema": "prefixmon.episode/1", "trunc\n')
        done = subprocess.run([sys.executable, "-m", "prefixmon", "score", str(records)], capture_output=True, text=True)
        assert done.returncode == 1
        assert f"{records}:2:" in done.stderr and "not scored" in done.stderr
        assert "| 4 | 2 | 2 |" in done.stdout

    async def test_otlp_traces_score_as_the_records_do(self, tmp_path: Path) -> None:
        """A live monitor's OTLP JSON traces (content captured) give the same score as its records."""
        from prefixmon.telemetry import Telemetry
        from prefixmon.telemetry.otel_setup import configure_otel

        spec = tmp_path / "spec.yaml"
        spec.write_text(SPEC, encoding="utf-8")
        traces = tmp_path / "traces.otlp.jsonl"
        otel = configure_otel(otlp_file=traces, batch=False)
        telemetry = Telemetry(tracer_provider=otel.tracer_provider, metrics=False, capture_content=True)
        tools = Toolset.from_openai(DESK, error_result=_error, spec=spec)
        record = await _replay(
            Monitor(tools, observers=[telemetry]),
            [
                ("cancel_pending_order", {"order_id": "#W1", "reason": "x"}, "Error: order not found"),
                ("cancel_pending_order", {"order_id": "#W2", "reason": "x"}, '{"status": "cancelled"}'),
            ],
        )
        otel.shutdown()
        done = subprocess.run(
            [sys.executable, "-m", "prefixmon", "score", str(traces), "--format", "json"], capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
        got = json.loads(done.stdout)["total"]
        expected = score_records([record]).as_dict()
        assert {k: got[k] for k in ("calls", "env_errors", "tp", "fp", "refused_ok_by_cause")} == {
            k: expected[k] for k in ("calls", "env_errors", "tp", "fp", "refused_ok_by_cause")
        }
        assert got["tp"] == 1 and got["fp"] == 1
