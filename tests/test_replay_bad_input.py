"""Review regressions: malformed replay input is reported with where it is, never a crash."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from prefixmon.adapters.taubench import replay as tau_replay

TOOLS = [
    {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {"x": {"type": "integer"}}}}}
]


def _transcript(tmp_path: Path, lines: list[Any]) -> tuple[Path, Path]:
    tools = tmp_path / "tools.json"
    tools.write_text(json.dumps(TOOLS), encoding="utf-8")
    path = tmp_path / "conversations.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path, tools


class TestTranscriptReplayBadInput:
    """OpenAI-messages and τ-bench transcripts with malformed calls or outcomes."""

    @pytest.mark.parametrize(
        "message",
        [
            {"role": "assistant", "tool_calls": ["f(x=1)"]},
            {"role": "assistant", "tool_calls": [{"id": "c1", "function": "f"}]},
            {"role": "assistant", "tool_calls": {"id": "c1"}},
        ],
    )
    def test_malformed_tool_call_reported_with_line(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str], message: dict[str, Any]
    ) -> None:
        """A tool call that is not an object is a replay error naming file and line, not a traceback."""
        good = {"messages": [{"role": "user", "content": "hi"}]}
        path, tools = _transcript(tmp_path, [good, {"messages": [{"role": "user", "content": "hi"}, message]}])
        rc = tau_replay.main([str(path), "--out", str(tmp_path / "out.jsonl"), "--tools", str(tools)])
        err = capsys.readouterr().err
        assert rc == 1
        assert f"{path}:2" in err and "tool_calls" in err

    def test_unknown_outcome_reported_with_line(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """An outcome that is not success / partial / failure is reported with its line."""
        path, tools = _transcript(tmp_path, [{"messages": [{"role": "user", "content": "hi"}], "outcome": "passed"}])
        rc = tau_replay.main([str(path), "--out", str(tmp_path / "out.jsonl"), "--tools", str(tools)])
        err = capsys.readouterr().err
        assert rc == 1
        assert f"{path}:1" in err and "passed" in err

    def test_tau_rollout_malformed_tool_call(self, tmp_path: Path) -> None:
        """A τ-bench rollout with a non-object tool call is rejected at read time, naming the rollout."""
        path = tmp_path / "results.json"
        traj = [{"role": "user", "content": "hi"}, {"role": "assistant", "tool_calls": [{"id": "c1", "function": "f"}]}]
        path.write_text(
            json.dumps([{"task_id": 0, "reward": 1.0, "traj": [{"role": "user", "content": "x"}]}, {"task_id": 1, "traj": traj}])
        )
        with pytest.raises(tau_replay.ReplayInputError, match=r"rollout 1\.traj.*tool_calls\[0\]"):
            tau_replay.read_tau_trajectories(path)


class TestBfclReplayBadBytes:
    """A BFCL result file with a line that is not UTF-8."""

    async def test_invalid_utf8_line_is_skipped_with_line(self, tmp_path: Path) -> None:
        """The bad line is a skipped problem with its line number; the other entries still replay."""
        pytest.importorskip("bfcl_eval")
        from prefixmon.adapters.bfcl import replay_files, task_index

        gt = task_index()["multi_turn_base_0"].ground_truth
        good = json.dumps({"id": "multi_turn_base_0", "result": [[list(turn)] for turn in gt]}).encode()
        path = tmp_path / "result" / "m" / "multi_turn" / "BFCL_v4_multi_turn_base_result.json"
        path.parent.mkdir(parents=True)
        path.write_bytes(b'{"id": "multi_turn_base_1", "result": "\xff"}\n' + good + b"\n")
        summary = await replay_files([path])
        assert [(p.line, p.skipped) for p in summary.problems] == [(1, True)]
        assert "UTF-8" in summary.problems[0].message
        assert [r.task_id for r in summary.records] == ["multi_turn_base_0"]
        assert summary.records[0].executable
