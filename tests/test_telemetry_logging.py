"""structlog live events: first failure, interventions, episode end; quiet on success."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from typing import Any

import pytest
import structlog
from structlog.testing import capture_logs

from prefixmon import Approve, Monitor, ToolBlocked, ToolCall, Toolset, TrackedState, Verdict
from prefixmon.telemetry.logging import LiveLog, configure_json_logging

CANARY = "CANARY-51d0e2-secret"


@pytest.fixture
def json_lines() -> Iterator[io.StringIO]:
    """Real JSON Lines output from configure_json_logging, reset afterwards."""
    stream = io.StringIO()
    configure_json_logging(level="debug", stream=stream)
    yield stream
    structlog.reset_defaults()


def lines(stream: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


class TestLiveLog:
    """What an operator sees while agents run."""

    async def test_success_path_is_quiet(self, tools: Toolset) -> None:
        """Executable calls log nothing; only episode_finished appears."""
        monitor = Monitor(tools, observers=[LiveLog()])
        with capture_logs() as logs:
            async with monitor.episode(task_id="t", labels={"model": "m"}) as ep:
                await ep.call("search_contacts", {})
                await ep.call("set_cellular", {"on": True})
                ep.finish("success")
        assert [e["event"] for e in logs] == ["episode_finished"]
        end = logs[0]
        assert end["log_level"] == "info"
        assert (end["fed"], end["horizon"], end["executable"], end["outcome"]) == (3, 2, True, "success")
        assert end["labels"] == {"model": "m"} and end["status"] == "finished"

    async def test_first_failure_and_block(self, tools: Toolset) -> None:
        """The first failure is a warning with depth, tool, cause and code; a blocked call logs call_blocked."""
        monitor = Monitor(tools, policy="block", observers=[LiveLog()])
        with capture_logs() as logs:
            async with monitor.episode(task_id="t") as ep:
                await ep.call("search_contacts", {})
                for _ in range(2):
                    with pytest.raises(ToolBlocked):
                        await ep.call("send_message", {"person_id": "p-1", "text": "x"})
                ep.finish("failure")
        assert [(e["event"], e["log_level"]) for e in logs] == [
            ("first_failure", "warning"),
            ("call_blocked", "warning"),
            ("call_blocked", "warning"),
            ("episode_finished", "info"),
        ]
        first = logs[0]
        got = (first["depth"], first["tool"], first["cause"], first["code"])
        assert got == (2, "send_message", "precondition", "precondition:cellular_on")
        assert "reason" not in first
        assert logs[3]["fed"] == 2 and logs[3]["first_failure_cause"] == "precondition"

    async def test_replan_and_escalation_events(self, tools: Toolset) -> None:
        """Replanned calls log call_replanned (with the replacement); escalated calls call_escalated."""

        async def replan(verdict: Verdict, call: ToolCall, state: TrackedState) -> ToolCall:
            return ToolCall(name="search_contacts", args={})

        async def human(verdict: Verdict, call: ToolCall) -> Approve:
            return Approve()

        with capture_logs() as logs:
            async with Monitor(tools, policy="replan", replan=replan, observers=[LiveLog()]).episode(task_id="t") as ep:
                await ep.call("remove_contact", {"person_id": "p-9"})
            async with Monitor(tools, policy="escalate", escalate=human, observers=[LiveLog()]).episode(task_id="t") as ep:
                await ep.call("send_money", {"phone_number": "1", "amount": 1})
        events = [(e["event"], e.get("decision"), e.get("replacement")) for e in logs if e["event"].startswith("call")]
        assert events == [("call_replanned", "replan", "search_contacts"), ("call_escalated", "approve", None)]

    async def test_log_calls_and_reasons(self, tools: Toolset) -> None:
        """log_calls adds a debug line per call; include_reasons adds reasons and errors."""
        monitor = Monitor(tools, observers=[LiveLog(log_calls=True, include_reasons=True)])
        with capture_logs() as logs:
            async with monitor.episode(task_id="t") as ep:
                await ep.call("search_contacts", {})
                with pytest.raises(RuntimeError):
                    await ep.call("flaky", {"x": 1})
        assert logs[0]["event"] == "call" and logs[0]["log_level"] == "debug" and logs[0]["executable"] is True
        failure = next(e for e in logs if e["event"] == "first_failure")
        assert "backend unavailable" in failure["error"] and failure["reason"]

    async def test_canary_secret_in_no_log_line(self, tools: Toolset, json_lines: io.StringIO) -> None:
        """By default no log line carries argument values, even when reasons and errors quote them."""
        tools.add_schema(
            "login",
            {"type": "object", "properties": {"password": {"type": "string"}}},
            func=lambda password: (_ for _ in ()).throw(PermissionError(f"bad password {password}")),
        )
        monitor = Monitor(tools, policy="block", observers=[LiveLog()])
        async with monitor.episode(task_id="t") as ep:
            with pytest.raises(ToolBlocked):
                await ep.call("remove_contact", {"person_id": CANARY})
            with pytest.raises(PermissionError):
                await ep.call("login", {"password": CANARY})
        assert ep.record is not None and CANARY in str(ep.record)
        out = json_lines.getvalue()
        assert [e["event"] for e in lines(json_lines)] == ["first_failure", "call_blocked", "episode_finished"]
        assert CANARY not in out


class TestJsonLogging:
    """configure_json_logging: one JSON object per line, filtered by level, cached loggers."""

    def test_json_lines_with_level_and_timestamp(self, json_lines: io.StringIO) -> None:
        """Each event is a JSON line with level and an ISO UTC timestamp."""
        log = structlog.get_logger("prefixmon")
        log.warning("first_failure", depth=2)
        log.info("episode_finished", fed=2)
        (a, b) = lines(json_lines)
        assert a["event"] == "first_failure" and a["level"] == "warning" and a["depth"] == 2
        assert b["timestamp"].endswith("Z")

    def test_level_filter(self) -> None:
        """Below-level events are dropped by the bound logger itself."""
        stream = io.StringIO()
        try:
            configure_json_logging(level="warning", stream=stream)
            log = structlog.get_logger("prefixmon")
            log.info("episode_finished")
            log.warning("first_failure")
            assert [e["event"] for e in lines(stream)] == ["first_failure"]
            assert structlog.get_config()["cache_logger_on_first_use"] is True
        finally:
            structlog.reset_defaults()

    def test_unknown_level(self) -> None:
        """An unknown level name is a clear error."""
        with pytest.raises(ValueError, match="unknown log level 'loud'"):
            configure_json_logging(level="loud")


class TestStdlibFallback:
    """Without a structlog configuration, prefixmon logs through stdlib ``logging`` (logger ``prefixmon``)."""

    async def test_unconfigured_structlog_goes_to_stdlib_not_stdout(
        self, tools: Toolset, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A first failure is a warning record of the ``prefixmon`` logger, with its fields; stdout stays empty."""
        structlog.reset_defaults()
        assert not structlog.is_configured()
        caplog.set_level("INFO", logger="prefixmon")
        monitor = Monitor(tools, policy="block", observers=[LiveLog()])
        async with monitor.episode(task_id="t") as ep:
            with pytest.raises(ToolBlocked):
                await ep.call("remove_contact", {"person_id": "p-1"})
        records = [r for r in caplog.records if r.name == "prefixmon"]
        first = next(r for r in records if r.getMessage().startswith("first_failure"))
        assert first.levelname == "WARNING"
        assert first.prefixmon["event"] == "first_failure" and first.prefixmon["depth"] == 1  # type: ignore[attr-defined]
        assert any(r.getMessage().startswith("episode_finished") for r in records)
        assert capsys.readouterr().out == ""

    async def test_configured_structlog_is_used(self, tools: Toolset) -> None:
        """Once the application configures structlog, the same events go through it."""
        structlog.configure(processors=[structlog.processors.KeyValueRenderer()])
        try:
            with capture_logs() as logs:
                monitor = Monitor(tools, policy="block", observers=[LiveLog()])
                async with monitor.episode(task_id="t") as ep:
                    with pytest.raises(ToolBlocked):
                        await ep.call("remove_contact", {"person_id": "p-1"})
            assert any(e["event"] == "first_failure" for e in logs)
        finally:
            structlog.reset_defaults()
