"""Replay of hand-made BFCL result files on the real environments, through the monitor."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("bfcl_eval")

from prefixmon import Cause, Outcome, read_records
from prefixmon._cli import main
from prefixmon.adapters.bfcl import ground_truth_calls, replay_files, task_index
from prefixmon.adapters.bfcl import replay as bfcl_replay

pytestmark = pytest.mark.integration

BASE0 = "multi_turn_base_0"


def _write(path: Path, rows: list[Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), encoding="utf-8")
    return path


def _strings(task_id: str) -> list[list[list[str]]]:
    """Ground truth as Python-call strings, one step per turn."""
    return [[list(turn)] for turn in task_index()[task_id].ground_truth]


def _objects(task_id: str) -> list[list[list[dict[str, str]]]]:
    """Ground truth as {name: json-args} objects, one call per step."""
    return [[[{c.name: json.dumps(c.args)}] for c in turn] for turn in ground_truth_calls(task_index()[task_id])]


def _result_file(tmp_path: Path, rows: list[Any], model: str = "my-model") -> Path:
    return _write(tmp_path / "result" / model / "multi_turn" / "BFCL_v4_multi_turn_base_result.json", rows)


class TestMessagesOfSeveralCalls:
    """A step of several calls is one model message; BFCL runs its calls in order, and so does the replay."""

    async def test_counted_and_judged_call_by_call(self, tmp_path: Path) -> None:
        """In base_14's gold, send_message(receiver_id='USR005') sits beside the add_contact that returns USR005:
        one use of what a sibling returned, counted; BFCL runs it, so it is not refused."""
        task = task_index()["multi_turn_base_14"]
        summary = await replay_files([_result_file(tmp_path, [{"id": task.id, "result": _strings(task.id)}])])
        assert summary.multi_call_messages == sum(len(turn) > 1 for turn in ground_truth_calls(task))
        assert summary.sibling_uses == 1
        (record,) = summary.records
        assert record.executable


class TestEncodings:
    """Both call encodings replay to the same record."""

    async def test_strings_and_objects(self, tmp_path: Path) -> None:
        """Ground truth as strings and as objects: executable, BFCL success, labels from the path."""
        path = _result_file(
            tmp_path,
            [{"id": BASE0, "result": _strings(BASE0)}, {"id": "multi_turn_base_1", "result": _objects("multi_turn_base_1")}],
        )
        summary = await replay_files([path])
        assert not summary.problems
        assert [r.task_id for r in summary.records] == [BASE0, "multi_turn_base_1"]
        for record in summary.records:
            assert record.executable
            assert record.outcome is Outcome.SUCCESS
            assert record.labels["model"] == "my-model"
            assert record.labels["category"] == "base"
            assert record.labels["dataset"] == "bfcl"

    async def test_prompting_step_string(self, tmp_path: Path) -> None:
        """A step given as one bracketed string of calls decodes into its calls."""
        turns = [["[" + ", ".join(turn) + "]"] for turn in task_index()[BASE0].ground_truth]
        path = _result_file(tmp_path, [{"id": BASE0, "result": turns}])
        (record,) = (await replay_files([path])).records
        assert record.executable and record.horizon == sum(len(t) for t in task_index()[BASE0].ground_truth)

    async def test_labels_override(self, tmp_path: Path) -> None:
        """--label values override what the path suggests."""
        path = _result_file(tmp_path, [{"id": BASE0, "result": _strings(BASE0)}])
        (record,) = (await replay_files([path], labels={"model": "renamed", "method": "fc"})).records
        assert record.labels["model"] == "renamed" and record.labels["method"] == "fc"


class TestFailures:
    """Failing rollouts keep every prefix judged."""

    async def test_unknown_tool(self, tmp_path: Path) -> None:
        """An unknown tool is a schema failure at its depth; the rest of the rollout is still recorded."""
        turns = _strings(BASE0)
        turns[0][0] = ["frobnicate(x=1)", *turns[0][0]]
        path = _result_file(tmp_path, [{"id": BASE0, "result": turns}])
        (record,) = (await replay_files([path])).records
        assert record.fed == 1
        assert record.first_failure is not None and record.first_failure.cause is Cause.SCHEMA
        assert record.horizon == 1 + sum(len(t) for t in task_index()[BASE0].ground_truth)
        assert all(a.executable for a in record.actions[1:])

    async def test_empty_turn(self, tmp_path: Path) -> None:
        """An empty turn fails BFCL's checker; no action is recorded for it, later turns still run."""
        turns = _strings(BASE0)
        turns[1] = []
        path = _result_file(tmp_path, [{"id": BASE0, "result": turns}])
        (record,) = (await replay_files([path])).records
        assert record.outcome is Outcome.FAILURE
        assert [a.turn for a in record.actions] == [0, 0, 0, 2, 3, 3, 3, 3]
        # without turn 1's cd into temp, turn 2 sorts a file that is not in the current folder
        assert record.first_failure is not None and record.first_failure.tool == "sort"
        assert record.actions[record.fed - 1].turn == 2

    async def test_wrong_state_is_a_failure_outcome(self, tmp_path: Path) -> None:
        """Executable calls that reach a different state than the ground truth: outcome failure."""
        turns = _strings(BASE0)
        turns[0] = [["cd(folder='document')", "mkdir(dir_name='tmp2')"]]
        path = _result_file(tmp_path, [{"id": BASE0, "result": turns}])
        (record,) = (await replay_files([path])).records
        assert record.outcome is Outcome.FAILURE

    async def test_held_out_tool_called_early(self, tmp_path: Path) -> None:
        """miss_func: calling the held-out function before its turn is a schema (not exposed) failure."""
        task = task_index()["multi_turn_miss_func_0"]
        turns: list[list[list[str]]] = [[list(t)] for t in task.ground_truth]
        turns[0][0].append("sort(file_name='final_report.pdf')")
        path = _write(tmp_path / "BFCL_v4_multi_turn_miss_func_result.json", [{"id": task.id, "result": turns}])
        (record,) = (await replay_files([path])).records
        failure = record.first_failure
        assert failure is not None and failure.cause is Cause.SCHEMA and failure.tool == "sort"
        assert "not available" in failure.reason


class TestMalformed:
    """Malformed entries are reported with file, line and task id, then skipped."""

    async def test_reported_and_skipped(self, tmp_path: Path) -> None:
        """Bad lines are skipped with a located message; good lines around them are replayed."""
        path = _result_file(
            tmp_path,
            [
                {"id": BASE0, "result": _strings(BASE0)},
                "{not json",
                {"result": []},
                {"id": "multi_turn_base_99999", "result": []},
                {"id": "multi_turn_base_1", "result": "Error during inference"},
                {"id": "multi_turn_base_2", "result": [[["cd(folder="]], [], [], [], []]},
                {"id": "multi_turn_base_3", "result": _strings("multi_turn_base_3")},
            ],
        )
        summary = await replay_files([path])
        assert [r.task_id for r in summary.records] == [BASE0, "multi_turn_base_2", "multi_turn_base_3"]
        skipped = [p for p in summary.problems if p.skipped]
        assert [(p.line, p.task_id) for p in skipped] == [
            (2, None),
            (3, None),
            (4, "multi_turn_base_99999"),
            (5, "multi_turn_base_1"),
        ]
        assert all(p.path == str(path) for p in skipped)
        assert "not JSON" in skipped[0].message and "unknown task id" in skipped[2].message
        note = next(p for p in summary.problems if not p.skipped)
        assert note.line == 6 and note.task_id == "multi_turn_base_2" and "step skipped" in note.message
        assert str(skipped[2]).startswith(f"{path}:4 [multi_turn_base_99999]")

    def test_cli(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """run(): records written, problems on stderr with their location, exit 1 when entries were skipped."""
        path = _result_file(tmp_path, [{"id": BASE0, "result": _strings(BASE0)}, "[]"])
        out = tmp_path / "records.jsonl"
        code = main(["replay", "--bfcl", str(path), "--out", str(out), "--label", "model=m2"])
        assert code == 1
        err = capsys.readouterr()
        assert f"{path}:2" in err.err and "replayed 1 task(s)" in err.out
        (record,) = read_records(out)
        assert record.task_id == BASE0 and record.labels["model"] == "m2"

    def test_cli_bad_label(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """A --label without '=' is refused with exit code 2."""
        path = _result_file(tmp_path, [{"id": BASE0, "result": _strings(BASE0)}])
        with pytest.raises(SystemExit) as exit_info:
            main(["replay", "--bfcl", str(path), "--out", str(tmp_path / "o.jsonl"), "--label", "oops"])
        assert exit_info.value.code == 2
        assert "KEY=VALUE" in capsys.readouterr().err


class TestLargeReplays:
    """What a replay costs does not grow with what it returns."""

    def test_cli_never_formats_the_summary(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """The summary holding every record is not turned into text when the event loop ends.

        asyncio's runner looks up the SIGINT handler after the main task is done, and on
        CPython 3.11 that formats the handler, the main task and the full repr of the task's
        result: a replay of N entries paid O(N) time and memory for a string nobody read.
        """
        formatted: list[int] = []

        def counted(self: object) -> str:
            formatted.append(1)
            return "summary"

        monkeypatch.setattr(bfcl_replay.ReplaySummary, "__repr__", counted)
        path = _result_file(tmp_path, [{"id": BASE0, "result": _strings(BASE0)}])
        assert main(["replay", "--bfcl", str(path), "--out", str(tmp_path / "records.jsonl")]) == 0
        assert not formatted
