"""ToolSandbox on its real execution context: toolsets, state dependencies, exact dry run, bench, replay."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import anyio
import pytest

from prefixmon import Cause, Monitor, read_records
from prefixmon._cli import main

from ..test_bounds import BAD_ARGUMENT_VALUES, collections_watched

pytest.importorskip("tool_sandbox", reason="needs ToolSandbox installed from its source (scripts/test.sh installs it)")

from prefixmon.adapters.toolsandbox import SandboxEnv, gold_calls, load_scenarios, parse_call, toolset
from prefixmon.adapters.toolsandbox.bench import run_bench
from prefixmon.adapters.toolsandbox.replay import record_conversation, write_run

pytestmark = pytest.mark.integration
logging.getLogger("tool_sandbox").setLevel(logging.ERROR)


def scenario(name: str) -> Any:
    return load_scenarios()[name]


class TestEnvironment:
    """Calls run on the real execution context."""

    def test_cellular_dependency_predicted_and_real(self) -> None:
        """A message with cellular off is predicted not executable and the context raises ConnectionError."""
        env = SandboxEnv.for_scenario(scenario("send_message_with_contact_content_cellular_off"))
        assert env.setting("cellular") is False
        monitor = Monitor(toolset(), policy="observe")

        async def judge() -> tuple[bool, Cause | None, str | None]:
            async with monitor.episode(env=env) as ep:
                v = ep.check("send_message_with_phone_number", {"phone_number": "+12453344098", "content": "hi"})
                return v.executable, v.cause, v.reason

        executable, cause, reason = anyio.run(judge)
        assert not executable and cause is Cause.PRECONDITION and reason is not None and "set_cellular_service_status" in reason
        outcome = env.fork().run("send_message_with_phone_number", {"phone_number": "+12453344098", "content": "hi"})
        assert outcome.error == "ConnectionError: Cellular service is not enabled"

    def test_fork_is_isolated(self) -> None:
        """A write on a fork (ToolSandbox's own snapshot) leaves the original context unchanged."""
        env = SandboxEnv.for_scenario(scenario("send_message_with_contact_content_cellular_off"))
        twin = env.fork()
        assert twin.run("set_cellular_service_status", {"on": True}).error is None
        assert twin.setting("cellular") is True and env.setting("cellular") is False

    def test_toolset_from_registered_tools(self) -> None:
        """Every registered tool but the network search tools is declared from its signature, references included."""
        tools = toolset()
        assert "send_message_with_phone_number" in tools and "search_weather_around_lat_lon" not in tools
        assert dict(tools["remove_contact"].refs)["person_id"].kind == "person_id"
        assert tools["send_message_with_phone_number"].parameters["required"] == ["phone_number", "content"]

    def test_gold_from_milestones(self) -> None:
        """Milestones on the settings database and on tool traces give the calls, in order."""
        calls = gold_calls(scenario("send_message_with_contact_content_cellular_off"))
        assert calls is not None
        assert [c.name for c in calls][:2] == ["set_cellular_service_status", "search_contacts"]
        assert parse_call("set_wifi_status(on=True)") is not None and parse_call("x = 1") is None


class TestBench:
    """The bench over the base scenarios."""

    def test_dry_run_exact_declared_precise(self) -> None:
        """Dry run agrees with execution on every perturbed call; the declared rules miss nothing on a bounded subset."""
        report = anyio.run(lambda: run_bench(limit=30))
        dry, declared = report.prediction("dry_run"), report.prediction("declared")
        assert report.trials and dry.fp == 0 and dry.fn == 0
        assert declared.fn == 0 and declared.fp == 0
        assert {"next_too_early", "setting_unchanged", "gold"} <= {t.kind for t in report.trials}
        for g in report.gold:
            if not g.record.executable:
                assert g.record.fed == g.rejected[0][0], g.scenario  # the milestone's own call fails there

    def test_cli(self, capsys: pytest.CaptureFixture[str]) -> None:
        """prefixmon bench toolsandbox runs from its entry point."""
        assert main(["bench", "toolsandbox", "--limit", "5"]) == 0
        assert "(a) ground truth" in capsys.readouterr().out


def trajectory(run: Path, name: str, *, skip_first: bool) -> None:
    """A ToolSandbox run folder with one conversation of the milestones' calls plus the message.

    The message's milestone constrains the messaging database, not a call, so it is added;
    ``skip_first`` leaves out turning cellular service on.
    """
    send = ("send_message_with_phone_number", {"phone_number": "+12453344098", "content": "How is the album coming along?"})
    calls = [(c.name, c.args) for c in gold_calls(scenario(name)) or []]
    calls = [*(calls[1:] if skip_first else calls), send]
    messages, _ = record_conversation(name, "Send a message to Fredrik Thordendal", calls)
    write_run(run, {name: messages}, {name: 1.0})


class TestReplay:
    """Trajectories replay on the real execution context."""

    def test_run_folder(self, tmp_path: Path) -> None:
        """A message sent while cellular is off is a precondition failure there; outcome from the summary."""
        ok, broken = tmp_path / "ok", tmp_path / "broken"
        trajectory(ok, "send_message_with_contact_content_cellular_off", skip_first=False)
        trajectory(broken, "send_message_with_contact_content_cellular_off", skip_first=True)
        out = tmp_path / "r.jsonl"
        assert main(["replay", "--domain", "toolsandbox", str(ok), str(broken), "--out", str(out)]) == 0
        good, bad = read_records(out)
        assert good.executable and good.outcome == "success"
        assert not bad.executable and bad.first_failure is not None
        assert bad.first_failure.cause is Cause.PRECONDITION and bad.first_failure.tool == "send_message_with_phone_number"
        assert "ConnectionError: Cellular service is not enabled" in (bad.actions[bad.fed - 1].error or "")

    def test_missing_folder_is_reported(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """A folder without trajectories is skipped with its name; exit 1."""
        assert main(["replay", "--domain", "toolsandbox", str(tmp_path), "--out", str(tmp_path / "o.jsonl")]) == 1
        assert str(tmp_path) in capsys.readouterr().err

    @BAD_ARGUMENT_VALUES
    def test_deep_call_arguments_leave_collections_room(self, tmp_path: Path, value: str, says: str) -> None:
        """Arguments given as JSON text 5,000 levels deep (or with a 5,000-digit integer): a schema failure
        of that call, the replay goes on, and no collection meets a full stack."""
        name = "send_message_with_contact_content_cellular_off"
        calls = [(c.name, c.args) for c in gold_calls(scenario(name)) or []]
        messages, _ = record_conversation(name, "Send a message to Fredrik Thordendal", calls)
        deep = '{"phone_number": ' + value + "}"
        messages[-2]["tool_calls"][0]["function"]["arguments"] = deep  # the last call
        run = tmp_path / "run"
        write_run(run, {name: messages}, {name: 1.0})
        out = tmp_path / "r.jsonl"
        with collections_watched() as failures:
            rc = main(["replay", "--domain", "toolsandbox", str(run), "--out", str(out)])
        assert failures == []
        assert rc == 0
        (record,) = read_records(out)
        assert record.fed == record.horizon == len(calls)
        assert record.first_failure is not None and record.first_failure.cause is Cause.SCHEMA
        assert says in (record.first_failure.reason or "")
