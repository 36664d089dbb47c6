"""Review regressions: malformed replay input is reported with where it is, never a crash."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from prefixmon import read_records
from prefixmon._cli import main
from prefixmon.adapters.taubench import replay as tau_replay
from prefixmon.adapters.transcripts import ReplayInputError

from .test_bounds import collections_watched

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
        rc = main(["replay", str(path), "--out", str(tmp_path / "out.jsonl"), "--tools", str(tools)])
        err = capsys.readouterr().err
        assert rc == 1
        assert f"{path}:2" in err and "tool_calls" in err

    def test_unknown_outcome_reported_with_line(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """An outcome that is not success / partial / failure is reported with its line."""
        path, tools = _transcript(tmp_path, [{"messages": [{"role": "user", "content": "hi"}], "outcome": "passed"}])
        rc = main(["replay", str(path), "--out", str(tmp_path / "out.jsonl"), "--tools", str(tools)])
        err = capsys.readouterr().err
        assert rc == 1
        assert f"{path}:1" in err and "passed" in err

    def test_concatenated_conversations_are_all_replayed(self, tmp_path: Path) -> None:
        """A byte order mark mid-file and two conversations on one line (``cat`` of files): all four replayed, in order."""
        from prefixmon.adapters.transcripts import read_conversations

        lines = [json.dumps({"task_id": f"t{i}", "messages": [{"role": "user", "content": f"hi {i}"}]}) for i in range(4)]
        path, tools = _transcript(tmp_path, [])
        path.write_text(f"{lines[0]}\n\ufeff{lines[1]}\n{lines[2]} {lines[3]}\n", encoding="utf-8")
        assert [c.task_id for c in read_conversations(path)] == ["t0", "t1", "t2", "t3"]
        out = tmp_path / "out.jsonl"
        assert main(["replay", str(path), "--out", str(out), "--tools", str(tools)]) == 0
        assert [r.task_id for r in read_records(out)] == ["t0", "t1", "t2", "t3"]

    def test_one_bad_conversation_of_a_merged_line(self, tmp_path: Path) -> None:
        """Of two values on one line, the one that is not a conversation is named; the other is kept."""
        from prefixmon.adapters.transcripts import Problem, read_conversations

        path, _ = _transcript(tmp_path, [])
        path.write_text(json.dumps({"task_id": "t0", "messages": []}) + '{"messages": 3}\n', encoding="utf-8")
        problems: list[Problem] = []
        assert [c.task_id for c in read_conversations(path, problems)] == ["t0"]
        (problem,) = problems
        assert problem.line == 1 and "the 2nd of 2 JSON values on this line" in problem.message, problem.message

    def test_tau_rollout_malformed_tool_call(self, tmp_path: Path) -> None:
        """A τ-bench rollout with a non-object tool call is rejected at read time, naming the rollout."""
        path = tmp_path / "results.json"
        traj = [{"role": "user", "content": "hi"}, {"role": "assistant", "tool_calls": [{"id": "c1", "function": "f"}]}]
        path.write_text(
            json.dumps([{"task_id": 0, "reward": 1.0, "traj": [{"role": "user", "content": "x"}]}, {"task_id": 1, "traj": traj}])
        )
        with pytest.raises(ReplayInputError, match=r"rollout 1\.traj.*tool_calls\[0\]"):
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


def _cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """Run the real ``prefixmon`` entry point; (exit code, stderr)."""
    from prefixmon._cli import main

    rc = main(args)
    return rc, capsys.readouterr().err


DEEP = "[" * 100_000 + "]" * 100_000
"""Nesting far beyond Python's recursion limit."""


class TestDeeplyNestedInput:
    """Inputs nested far deeper than the JSON decoder can recurse."""

    @pytest.mark.parametrize(
        ("entry", "says"),
        [
            ('{"id": "multi_turn_base_1", "result": ' + DEEP + "}", "nested too deeply"),
            # it ended the replay with a ValueError
            ('{"id": "multi_turn_base_1", "n": ' + "7" * 5_000 + "}", "not JSON (an integer too long to convert)"),
        ],
        ids=["deep", "integer too long"],
    )
    def test_bfcl_bad_entry_skipped_others_kept(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str], entry: str, says: str
    ) -> None:
        """The bad entry is skipped with file and line; the entries around it are replayed and written."""
        pytest.importorskip("bfcl_eval")
        from prefixmon.adapters.bfcl import task_index

        gt = task_index()["multi_turn_base_0"].ground_truth
        good = json.dumps({"id": "multi_turn_base_0", "result": [[list(turn)] for turn in gt]})
        path = tmp_path / "result" / "m" / "multi_turn" / "BFCL_v4_multi_turn_base_result.json"
        path.parent.mkdir(parents=True)
        path.write_text(good + "\n" + entry + "\n" + good + "\n")
        out = tmp_path / "records.jsonl"
        rc, err = _cli(["replay", "--bfcl", str(path), "--out", str(out)], capsys)
        assert rc == 1
        assert f"{path}:2: {says}" in err
        assert [r.task_id for r in read_records(out)] == ["multi_turn_base_0", "multi_turn_base_0"]

    def test_jsonl_deep_line_skipped_others_kept(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """A deep transcript line is reported with file and line and skipped; the other lines are written."""
        good = {"task_id": "ok", "messages": [{"role": "user", "content": "hi"}]}
        path, tools = _transcript(tmp_path, [good, good])
        lines = path.read_text().splitlines()
        deep = '{"task_id": "t-deep", "messages": ' + DEEP + "}"
        path.write_text("\n".join([lines[0], deep, lines[1]]) + "\n")
        out = tmp_path / "records.jsonl"
        rc, err = _cli(["replay", str(path), "--tools", str(tools), "--out", str(out)], capsys)
        assert rc == 1
        assert f"{path}:2: nested too deeply" in err
        assert [r.task_id for r in read_records(out)] == ["ok", "ok"]

    def test_jsonl_integer_too_long_skipped_others_kept(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """A 5,000-digit integer (past Python's conversion limit) is one bad line with file and line, not the end of the run."""
        good = {"task_id": "ok", "messages": [{"role": "user", "content": "hi"}]}
        path, tools = _transcript(tmp_path, [good, good])
        lines = path.read_text().splitlines()
        path.write_text("\n".join([lines[0], '{"task_id": "t", "n": ' + "9" * 5_000 + "}", lines[1]]) + "\n")
        out = tmp_path / "records.jsonl"
        rc, err = _cli(["replay", str(path), "--tools", str(tools), "--out", str(out)], capsys)
        assert rc == 1
        assert f"{path}:2: not JSON (an integer too long to convert" in err
        assert [r.task_id for r in read_records(out)] == ["ok", "ok"]

    def test_tau_json_deep_document(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """A τ-bench results file nested too deeply is an error naming the file, not a traceback."""
        path = tmp_path / "results.json"
        path.write_text("[\n" + DEEP + "\n]\n")
        rc, err = _cli(["replay", str(path), "--domain", "tau-airline", "--out", str(tmp_path / "o.jsonl")], capsys)
        assert rc == 1
        assert f"{path}: nested too deeply" in err

    @pytest.mark.parametrize("fmt", ["auto", "tau"])
    def test_tau_json_deep_document_leaves_collections_room(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str], fmt: str
    ) -> None:
        """Detected or named, a τ-bench results file nested too deeply is refused before json recurses near the limit."""
        path = tmp_path / "results.json"
        path.write_text("[\n" + DEEP + "\n]\n")
        out = tmp_path / "o.jsonl"
        with collections_watched() as failures:
            rc, err = _cli(["replay", str(path), "--domain", "tau-airline", "--format", fmt, "--out", str(out)], capsys)
        assert failures == []
        assert rc == 1 and f"{path}: nested too deeply" in err

    def test_bfcl_deep_entry_and_deep_arguments_leave_collections_room(self, tmp_path: Path) -> None:
        """A deep entry is one bad line; arguments given as deep JSON text are kept as text (a schema
        failure for the monitor, as arguments that do not parse are); json never recurses near the limit."""
        pytest.importorskip("bfcl_eval")
        from prefixmon.adapters.bfcl.replay import read_results

        arguments = '{"folder": ' + DEEP + "}"
        path = tmp_path / "result" / "m" / "multi_turn" / "BFCL_v4_multi_turn_base_result.json"
        path.parent.mkdir(parents=True)
        deep_entry = '{"id": "multi_turn_base_1", "result": ' + DEEP + "}"
        path.write_text(deep_entry + "\n" + json.dumps({"id": "multi_turn_base_0", "result": [[[{"cd": arguments}]]]}) + "\n")
        problems: list[Any] = []
        with collections_watched() as failures:
            entries = list(read_results(path, problems))
        assert failures == []
        assert [(p.line, p.skipped, "nested too deeply" in p.message) for p in problems] == [(1, True, True)]
        (entry,) = entries
        ((call,),) = entry.turns[:1]
        assert (call.name, call.args) == ("cd", arguments)

    def test_deep_call_arguments_of_a_transcript_for_learn(self, tmp_path: Path) -> None:
        """Call arguments given as JSON text nested too deeply are a call with arguments it cannot use, read with room left."""
        from prefixmon.learn import Call, read_transcripts

        arguments = '{"x": ' + DEEP + "}"
        call = {"id": "c1", "function": {"name": "f", "arguments": arguments}}
        messages = [{"role": "user", "content": "go"}, {"role": "assistant", "tool_calls": [call]}]
        path, _ = _transcript(tmp_path, [{"messages": messages}])
        with collections_watched() as failures:
            (transcript,) = read_transcripts([path], format="openai-jsonl")
        assert failures == []
        (event,) = [e for e in transcript.events if isinstance(e, Call)]
        assert (event.tool, event.arguments) == ("f", arguments)

    def test_a_deep_first_line_is_still_known_as_a_transcript(self, tmp_path: Path) -> None:
        """A first line nested too deeply is told OpenAI-messages JSON Lines by its start (not refused as an
        unknown format after json recursed to the limit), and is one bad line."""
        from prefixmon.learn import Problem as LearnProblem
        from prefixmon.learn import read_transcripts

        path, _ = _transcript(tmp_path, [{"messages": [{"role": "user", "content": "hi"}]}])
        nested = "[" * 5_000 + "]" * 5_000  # the whole line within the head the formats are told by
        path.write_text('{"messages": [' + nested + "]}\n" + path.read_text())
        problems: list[LearnProblem] = []
        with collections_watched() as failures:
            got = list(read_transcripts([path], problems=problems))
        assert failures == []
        assert len(got) == 1 and [(p.line, "nested too deeply" in p.message) for p in problems] == [(1, True)]

    def test_a_deep_tau_rollout_for_learn(self, tmp_path: Path) -> None:
        """Of a τ-bench results file, the rollouts before one nested too deeply are read, and the deep one is
        named by its line, without json recursing near the limit; a rollout 400 levels deep is read."""
        from prefixmon.learn import Problem as LearnProblem
        from prefixmon.learn import read_transcripts

        traj = [{"role": "user", "content": "hi"}]
        at_limit = {"task_id": 1, "traj": traj, "info": {"x": json.loads("[" * 398 + "]" * 398)}}  # 400 levels in all
        path = tmp_path / "tau.json"
        rollouts = [json.dumps({"task_id": 0, "traj": traj}), json.dumps(at_limit), '{"task_id": 2, "traj": ' + DEEP + "}"]
        path.write_text("[\n" + ",\n".join(rollouts) + "\n]\n")
        problems: list[LearnProblem] = []
        with collections_watched() as failures:
            got = list(read_transcripts([path], format="tau", problems=problems))
        assert failures == []
        assert len(got) == 2
        (problem,) = problems
        assert problem.line == 4 and "nested too deeply" in problem.message and "rest of the file" in problem.message

    def test_deep_but_decodable_content_replays(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """Content and arguments just under MAX_JSON_DEPTH (400 levels) are replayed without a RecursionError."""
        nested = "[" * 390 + "]" * 390
        line = (
            '{"task_id": "d", "messages": [{"role": "user", "content": {"a": ' + nested + "}}, "
            '{"role": "assistant", "tool_calls": [{"id": "c1", "function": {"name": "f", "arguments": {"x": ' + nested + "}}}]}, "
            '{"role": "tool", "tool_call_id": "c1", "content": ' + nested + "}]}"
        )
        path, tools = _transcript(tmp_path, [])
        path.write_text(line + "\n")
        out = tmp_path / "records.jsonl"
        rc, err = _cli(["replay", str(path), "--tools", str(tools), "--out", str(out)], capsys)
        assert rc == 0, err
        (record,) = read_records(out)
        assert not record.executable and record.first_failure is not None


class TestRepeatedToolCallIds:
    """Tool call ids that repeat across turns (some providers number calls per turn)."""

    def test_results_go_to_their_own_call(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """Each result matches the nearest preceding unmatched call with its id, so the second call gets the error."""

        def call(name: str, x: int = 1) -> dict[str, Any]:
            return {
                "role": "assistant",
                "tool_calls": [{"id": "call_0", "function": {"name": name, "arguments": f'{{"x": {x}}}'}}],
            }

        messages = [
            {"role": "user", "content": "go"},
            call("f"),
            {"role": "tool", "tool_call_id": "call_0", "content": "ok 1"},
            call("f"),
            {"role": "tool", "tool_call_id": "call_0", "content": "Error: second failed"},
            call("f", 2),  # no result of its own: must not take another call's result (not a repeat of the rejected one)
        ]
        path, tools = _transcript(tmp_path, [{"task_id": "dup", "messages": messages}])
        out = tmp_path / "records.jsonl"
        rc, err = _cli(["replay", str(path), "--tools", str(tools), "--out", str(out)], capsys)
        assert rc == 0, err
        (record,) = read_records(out)
        assert [a.executable for a in record.actions] == [True, False, True]  # the third: outcome unknown
        assert record.fed == 2  # the second call (depths count from 1)
        assert "second failed" in (record.actions[1].reason or "")
        assert "no result" in (record.actions[2].error or "")

    def test_parallel_calls_with_one_id_match_in_order(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """Two calls of one message sharing an id take their results in order."""
        calls = [{"id": "c", "function": {"name": "f", "arguments": f'{{"x": {x}}}'}} for x in (1, 2)]
        messages = [
            {"role": "user", "content": "go"},
            {"role": "assistant", "tool_calls": calls},
            {"role": "tool", "tool_call_id": "c", "content": "ok"},
            {"role": "tool", "tool_call_id": "c", "content": "Error: the second failed"},
        ]
        path, tools = _transcript(tmp_path, [{"messages": messages}])
        out = tmp_path / "records.jsonl"
        rc, err = _cli(["replay", str(path), "--tools", str(tools), "--out", str(out)], capsys)
        assert rc == 0, err
        (record,) = read_records(out)
        assert [a.executable for a in record.actions] == [True, False]
        assert "the second failed" in (record.actions[1].reason or "")


class TestToolDefinitionsFile:
    """A malformed ``--tools`` file."""

    @pytest.mark.parametrize(
        ("content", "expected"),
        [
            ([{"type": "function", "function": {"parameters": {}}}], "tools[0]: a function definition needs a non-empty 'name'"),
            ([{"name": "f"}, {"function": {"name": 5}}], "tools[1]: a function definition needs a non-empty 'name'"),
            ({"get": {}}, "expected a JSON list of tool definitions, got dict"),
            ([{"name": "f"}, "g"], "tools[1]: a tool definition must be an object, got str"),
            ([{"function": "f"}], "tools[0]: 'function' must be an object, got str"),
            ([{"name": "f", "parameters": 5}], "tools[0] (f): 'parameters' must be a JSON Schema object, got int"),
            ([{"name": "f"}, {"name": "f"}], "tools[1]: a tool named 'f' is already declared"),
            ([{"name": "f", "parameters": {"properties": 5}}], "tools[0]: tool 'f': its JSON Schema cannot be compiled"),
        ],
    )
    def test_malformed_tools_file(self, tmp_path: Path, capsys: pytest.CaptureFixture[str], content: Any, expected: str) -> None:
        """The error names the tools file and the entry."""
        path, tools = _transcript(tmp_path, [{"messages": [{"role": "user", "content": "hi"}]}])
        tools.write_text(json.dumps(content))
        rc, err = _cli(["replay", str(path), "--tools", str(tools), "--out", str(tmp_path / "o.jsonl")], capsys)
        assert rc == 1
        assert f"{tools}: {expected}" in err

    @pytest.mark.parametrize(
        ("raw", "expected"),
        [(b"[{", "not JSON"), (b'[{"name": "\xff"}]', "not UTF-8"), (DEEP.encode(), "nested too deeply")],
    )
    def test_unreadable_tools_file(self, tmp_path: Path, capsys: pytest.CaptureFixture[str], raw: bytes, expected: str) -> None:
        """A tools file that is not JSON, not UTF-8 or too deep is an error naming the file."""
        path, tools = _transcript(tmp_path, [{"messages": [{"role": "user", "content": "hi"}]}])
        tools.write_bytes(raw)
        rc, err = _cli(["replay", str(path), "--tools", str(tools), "--out", str(tmp_path / "o.jsonl")], capsys)
        assert rc == 1
        assert f"{tools}" in err and expected in err


class TestNonUtf8Transcripts:
    """Transcript files with bytes that are not UTF-8."""

    def test_jsonl_bad_line_skipped_with_line(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """The bad line is reported with file and line and skipped; the other lines are written."""
        good = json.dumps({"messages": [{"role": "user", "content": "hi"}]}).encode()
        path, tools = _transcript(tmp_path, [])
        path.write_bytes(good + b"\n" + b'{"messages": [{"role": "user", "content": "\xff"}]}\n' + good + b"\n")
        out = tmp_path / "records.jsonl"
        rc, err = _cli(["replay", str(path), "--tools", str(tools), "--out", str(out)], capsys)
        assert rc == 1
        assert f"{path}:2: not UTF-8" in err
        assert [r.task_id for r in read_records(out)] == ["conversation-0", "conversation-1"]

    def test_jsonl_first_line_bad(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """A bad byte in the first 4 KiB (where the format is detected) is still reported per line."""
        good = json.dumps({"messages": [{"role": "user", "content": "hi"}]}).encode()
        path, tools = _transcript(tmp_path, [])
        path.write_bytes(b'[{"role": "user", "content": "\xff"}]\n' + good + b"\n")
        out = tmp_path / "records.jsonl"
        rc, err = _cli(["replay", str(path), "--tools", str(tools), "--out", str(out)], capsys)
        assert rc == 1
        assert f"{path}:1: not UTF-8" in err
        assert len(read_records(out)) == 1

    def test_jsonl_byte_order_mark(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """A UTF-8 byte order mark at the start of the file is not an error."""
        path, tools = _transcript(tmp_path, [{"messages": [{"role": "user", "content": "hi"}]}])
        path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
        out = tmp_path / "records.jsonl"
        rc, err = _cli(["replay", str(path), "--tools", str(tools), "--out", str(out)], capsys)
        assert rc == 0, err
        assert len(read_records(out)) == 1

    def test_tau_json_not_utf8(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """A τ-bench results file with a bad byte names the file and the line."""
        path = tmp_path / "results.json"
        path.write_bytes(b'[\n{"task_id": 0,\n "traj": [{"role": "user", "content": "\xff"}]}\n]\n')
        rc, err = _cli(["replay", str(path), "--domain", "tau-airline", "--out", str(tmp_path / "o.jsonl")], capsys)
        assert rc == 1
        assert f"{path}:3: not UTF-8" in err


class TestTextFormatAgents:
    """τ-bench's ReAct / Act agents write calls as text, which the replay does not read."""

    def test_conversations_without_tool_calls_are_flagged(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """A trajectory whose calls are 'Action: {...}' text replays with a warning, not silently."""
        action = {"name": "find_user_id_by_email", "arguments": {"email": "a@b.com"}}
        rollout = {
            "task_id": 3,
            "trial": 0,
            "reward": 0.0,
            "info": {},
            "traj": [
                {"role": "user", "content": "Hi, cancel my order, email a@b.com"},
                {"role": "assistant", "content": "Thought: find user\nAction:\n" + json.dumps(action)},
                {"role": "user", "content": "API output: Error: user not found"},
            ],
        }
        path = tmp_path / "results.json"
        path.write_text(json.dumps([rollout]))
        rc, err = _cli(["replay", str(path), "--domain", "tau-retail", "--out", str(tmp_path / "o.jsonl")], capsys)
        assert rc == 0
        assert "1 conversation(s) have no tool call" in err and "ReAct" in err
