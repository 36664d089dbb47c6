"""Observer dispatch: which hooks run, in what order, with which token, and what an observer's failure costs."""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any

import pytest

from prefixmon import Decision, Episode, Monitor, Observer, ToolBlocked, ToolCall, Toolset, Verdict
from prefixmon.records import ActionRecord


class Recorder(Observer):
    """Records every per-call hook with the token it received."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.log: list[tuple[str, Any]] = []

    def call_started(self, episode: Episode, tool: str, call_id: str | None, depth: int) -> Any:
        token = f"{self.name}-{depth}"
        self.log.append(("call_started", token))
        return token

    def call_checked(self, episode: Episode, verdict: Verdict, decision: Decision, token: Any) -> None:
        self.log.append(("call_checked", (token, decision.value, verdict.executable)))

    def execution_context(self, episode: Episode, call: ToolCall, token: Any) -> AbstractContextManager[Any] | None:
        self.log.append(("execution_context", (token, call.name)))
        return Context(self, token)

    def call_result(self, episode: Episode, depth: int, result: Any, token: Any) -> None:
        self.log.append(("call_result", (token, result)))

    def call_finished(self, episode: Episode, action: ActionRecord, verdict: Verdict, token: Any) -> None:
        self.log.append(("call_finished", (token, action.decision.value)))


class Context:
    """An execution context that records its enter and exit (with the exception type, if any)."""

    def __init__(self, owner: Recorder, token: Any) -> None:
        self.owner = owner
        self.token = token

    def __enter__(self) -> None:
        self.owner.log.append(("enter", self.token))

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: Any) -> None:
        self.owner.log.append(("exit", (self.token, kind.__name__ if kind is not None else None)))


class FinishedOnly(Observer):
    """Overrides only call_finished: it gets no token, and the other hooks cost it nothing."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, Any]] = []

    def call_finished(self, episode: Episode, action: ActionRecord, verdict: Verdict, token: Any) -> None:
        self.seen.append((action.tool or "", token))


class Says(Recorder):
    """Returns ``said`` from ``episode_started``; counts how often ``episode_hooks`` is asked."""

    def __init__(self, said: Any) -> None:
        super().__init__("s")
        self.said = said
        self.asked = 0

    def episode_started(self, episode: Episode) -> Any:
        return self.said

    def episode_hooks(self, episode: Episode) -> frozenset[str]:
        self.asked += 1
        return super().episode_hooks(episode)


class TestEpisodeStartedSaysItsHooks:
    """``episode_started`` may answer what ``episode_hooks`` would: a frozenset is taken as said."""

    async def test_a_frozenset_is_the_hooks_and_episode_hooks_is_not_asked(self, tools: Toolset) -> None:
        obs = Says(frozenset({"call_finished"}))
        async with Monitor(tools, observers=[obs]).episode(task_id="t") as ep:
            await ep.call("set_cellular", {"on": True})
        assert obs.asked == 0
        assert obs.log == [("call_finished", (None, "allow"))]  # no call_started: no token

    async def test_an_empty_frozenset_takes_no_hook(self, tools: Toolset) -> None:
        obs = Says(frozenset())
        async with Monitor(tools, observers=[obs]).episode(task_id="t") as ep:
            await ep.call("set_cellular", {"on": True})
        assert obs.asked == 0 and obs.log == []

    @pytest.mark.parametrize("said", [None, {"call_finished"}, ["call_finished"], "call_finished"])
    async def test_anything_else_leaves_it_to_episode_hooks(self, tools: Toolset, said: Any) -> None:
        obs = Says(said)
        async with Monitor(tools, observers=[obs]).episode(task_id="t") as ep:
            await ep.call("set_cellular", {"on": True})
        assert obs.asked == 1
        assert [hook for hook, _ in obs.log] == [
            "call_started",
            "call_checked",
            "execution_context",
            "enter",
            "exit",
            "call_result",
            "call_finished",
        ]


class TestHookOrder:
    """Each observer gets each per-call hook it overrides, in order, with its own token."""

    async def test_a_call_that_runs(self, tools: Toolset) -> None:
        """started, checked, execution context entered and exited around the tool, result, finished."""
        rec = Recorder("a")
        async with Monitor(tools, observers=[rec]).episode(task_id="t") as ep:
            await ep.call("set_cellular", {"on": True})
        assert rec.log == [
            ("call_started", "a-1"),
            ("call_checked", ("a-1", "allow", True)),
            ("execution_context", ("a-1", "set_cellular")),
            ("enter", "a-1"),
            ("exit", ("a-1", None)),
            ("call_result", ("a-1", {"cellular": True})),
            ("call_finished", ("a-1", "allow")),
        ]

    async def test_a_blocked_call(self, tools: Toolset) -> None:
        """A call that does not run gets no call_checked and no execution context."""
        rec = Recorder("a")
        async with Monitor(tools, policy="block", observers=[rec]).episode(task_id="t") as ep:
            with pytest.raises(ToolBlocked):
                await ep.call("remove_contact", {"person_id": "p-9"})
        assert rec.log == [("call_started", "a-1"), ("call_finished", ("a-1", "block"))]

    async def test_observed_non_executable_call_is_checked_with_its_verdict(self, tools: Toolset) -> None:
        """Under observe, call_checked reports the non-executable verdict and the observe decision."""
        rec = Recorder("a")
        async with Monitor(tools, policy="observe", observers=[rec]).episode(task_id="t") as ep:
            await ep.call("send_message", {"person_id": "p-1", "text": "hi"}, call_id="c1")
        assert ("call_checked", ("a-1", "observe", False)) in rec.log

    async def test_the_tool_error_reaches_the_execution_context(self, tools: Toolset) -> None:
        """The context's __exit__ sees the tool's exception, which still reaches the agent."""
        rec = Recorder("a")
        async with Monitor(tools, observers=[rec]).episode(task_id="t") as ep:
            with pytest.raises(RuntimeError, match="backend unavailable"):
                await ep.call("flaky", {"x": 1})
        assert ("exit", ("a-1", "RuntimeError")) in rec.log
        assert rec.log[-1] == ("call_finished", ("a-1", "allow"))
        assert ("call_result", ("a-1", None)) in rec.log  # a failed call has no result

    async def test_two_observers_get_their_own_tokens_and_nest(self, tools: Toolset) -> None:
        """Tokens are per observer; contexts are entered in order and exited innermost first."""
        a, b, only = Recorder("a"), Recorder("b"), FinishedOnly()
        async with Monitor(tools, observers=[a, only, b]).episode(task_id="t") as ep:
            await ep.call("set_cellular", {"on": True})
        assert [e for e in a.log if e[0] == "call_finished"] == [("call_finished", ("a-1", "allow"))]
        assert [e for e in b.log if e[0] == "call_finished"] == [("call_finished", ("b-1", "allow"))]
        assert only.seen == [("set_cellular", None)]
        order = [(name, hook) for hook, name in _enter_exit(a.log) + _enter_exit(b.log)]
        assert sorted(order) == [("a-1", "enter"), ("a-1", "exit"), ("b-1", "enter"), ("b-1", "exit")]

    async def test_begin_and_done_without_run(self, tools: Toolset) -> None:
        """A framework that runs the tool itself: checked at begin, no execution context, result and finished at done."""
        rec = Recorder("a")
        ep = Monitor(tools, observers=[rec]).open_episode("t")
        pending = await ep.begin("set_cellular", {"on": True})
        assert rec.log[-1] == ("call_checked", ("a-1", "allow", True))
        pending.done({"cellular": True})
        await ep.aclose()
        assert [hook for hook, _ in rec.log] == ["call_started", "call_checked", "call_result", "call_finished"]


def _enter_exit(log: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    return [(hook, token if hook == "enter" else token[0]) for hook, token in log if hook in ("enter", "exit")]


class BrokenContext(Observer):
    """An execution context that raises on enter or on exit."""

    def __init__(self, where: str) -> None:
        self.where = where

    def call_started(self, episode: Episode, tool: str, call_id: str | None, depth: int) -> Any:
        return "token"

    def execution_context(self, episode: Episode, call: ToolCall, token: Any) -> AbstractContextManager[Any] | None:
        return self

    def __enter__(self) -> None:
        if self.where == "enter":
            raise RuntimeError("enter is broken")

    def __exit__(self, *exc: object) -> None:
        if self.where == "exit":
            raise RuntimeError("exit is broken")


class TestBrokenExecutionContexts:
    """An execution context that raises is counted; the call and the other observers are unaffected."""

    @pytest.mark.parametrize("where", ["enter", "exit"])
    async def test_raising_context(self, tools: Toolset, where: str) -> None:
        """The tool runs, its result comes back, the record is complete and the error is counted once."""
        rec = Recorder("a")
        monitor = Monitor(tools, observers=[BrokenContext(where), rec])
        async with monitor.episode(task_id="t") as ep:
            assert await ep.call("set_cellular", {"on": True}) == {"cellular": True}
        assert ep.record is not None and ep.record.horizon == 1 and ep.record.executable
        assert ep.internal_errors == 1 and monitor.stats.internal_errors == 1
        assert ("exit", ("a-1", None)) in rec.log and rec.log[-1] == ("call_finished", ("a-1", "allow"))

    async def test_raising_exit_does_not_replace_the_tool_error(self, tools: Toolset) -> None:
        """When the tool raises and the context's exit raises too, the agent sees the tool's exception."""
        monitor = Monitor(tools, observers=[BrokenContext("exit")])
        async with monitor.episode(task_id="t") as ep:
            with pytest.raises(RuntimeError, match="backend unavailable"):
                await ep.call("flaky", {"x": 1})
        assert monitor.stats.internal_errors == 1
