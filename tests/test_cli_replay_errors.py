"""``prefixmon replay`` with a bad spec, a missing extra or a repeated ``--tools``: the real error, once.

A source that fails before it replays anything (a spec typo, a rule that reads an argument the
tool does not have, the ``cel`` extra missing) has said why; the command must not add that the
transcripts held nothing it recognises. A transcripts file that truly holds no run still gets
that message.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from prefixmon._cli import main

pytest.importorskip("cel_expr_python")

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "search",
            "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "book",
            "parameters": {"type": "object", "properties": {"item_id": {"type": "string"}}, "required": ["item_id"]},
        },
    },
]

CONVERSATION = {
    "messages": [
        {"role": "user", "content": "find shoes, then book x1"},
        {
            "role": "assistant",
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "search", "arguments": '{"query": "shoes"}'}}],
        },
        {"role": "tool", "tool_call_id": "c1", "content": '[{"item_id": "x1"}]'},
    ]
}


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    """A tools file, a one-conversation transcript and an output path."""
    tools = tmp_path / "tools.json"
    tools.write_text(json.dumps(TOOLS), encoding="utf-8")
    transcript = tmp_path / "t.jsonl"
    transcript.write_text(json.dumps(CONVERSATION) + "\n", encoding="utf-8")
    return {"tools": tools, "transcript": transcript, "out": tmp_path / "o.jsonl"}


def _spec(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text("schema: prefixmon.spec/1\ntools:\n" + body, encoding="utf-8")
    return path


def _replay(files: dict[str, Path], *extra: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(["replay", "--tools", str(files["tools"]), str(files["transcript"]), "--out", str(files["out"]), *extra])
    return code, capsys.readouterr().err


class TestOneError:
    """The source's own error is the only one."""

    def test_a_misspelt_argument_in_an_expression(
        self, tmp_path: Path, files: dict[str, Path], capsys: pytest.CaptureFixture[str]
    ) -> None:
        """The issue's reproduction: ``args.qery`` is an error at the spec's line, and nothing else is said."""
        spec = _spec(tmp_path, "  search:\n    requires: [{expr: 'size(args.qery) > 2'}]\n")
        code, err = _replay(files, "--spec", str(spec), capsys=capsys)
        assert code == 1
        assert f"{spec}:4: tools.search.requires.0: args.qery: search has no argument 'qery'" in err, err
        assert "no episode was replayed" not in err and err.count("\n") == 1, err

    def test_a_spec_typo(self, tmp_path: Path, files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
        """An unknown field: the file and line, not 'nothing in t.jsonl is a run'."""
        spec = _spec(tmp_path, "  search:\n    requirs: []\n")
        code, err = _replay(files, "--spec", str(spec), capsys=capsys)
        assert code == 1
        assert f"{spec}:4: tools.search: unknown field 'requirs'" in err
        assert "no episode was replayed" not in err and err.count("\n") == 1, err

    def test_the_cel_extra_missing(
        self, tmp_path: Path, files: dict[str, Path], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A rule needs CEL and it is not installed: the install command, once."""
        monkeypatch.setitem(sys.modules, "cel_expr_python", None)  # import fails as if the extra were missing
        spec = _spec(tmp_path, "  search:\n    requires: [{expr: 'size(args.query) > 2'}]\n")
        code, err = _replay(files, "--spec", str(spec), capsys=capsys)
        assert code == 1
        assert 'pip install "prefixmon[cel]"' in err and f"{spec}:4:" in err, err
        assert "no episode was replayed" not in err and err.count("\n") == 1, err

    def test_a_stale_output_is_not_blamed_either(
        self, tmp_path: Path, files: dict[str, Path], capsys: pytest.CaptureFixture[str]
    ) -> None:
        """An empty output left by an earlier run is not taken for this run's empty result."""
        files["out"].write_text("", encoding="utf-8")
        spec = _spec(tmp_path, "  search:\n    requirs: []\n")
        code, err = _replay(files, "--spec", str(spec), capsys=capsys)
        assert code == 1 and "no episode was replayed" not in err, err

    def test_a_transcript_with_no_run_is_still_named(self, files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
        """The message this change must not lose: a file that holds nothing the source replays."""
        files["transcript"].write_text('{"note": "no messages here"}\n', encoding="utf-8")
        code, err = _replay(files, capsys=capsys)
        assert code == 1 and "no episode was replayed from" in err, err


class TestWarnings:
    """A ``ref`` kind no tool produces: one warning line in the command's own words, then the replay."""

    def test_a_kind_no_tool_produces(self, tmp_path: Path, files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
        spec = _spec(tmp_path, "  search:\n    produces: {item_id: item_id}\n  book:\n    args: {item_id: {ref: itemid}}\n")
        code, err = _replay(files, "--spec", str(spec), capsys=capsys)
        assert code == 0, err
        warning = [line for line in err.splitlines() if "warning" in line]
        assert warning == [
            f"prefixmon replay: warning: {spec}:6: tools.book.args.item_id: no tool produces references of kind "
            "'itemid', so every call with one is refused unless the episode is given them "
            "(monitor.episode(bindings=...); say so with given: [itemid]); did you mean 'item_id' (produced by search)?"
        ], err
        assert "spec_ref_never_produced" not in err, err  # once, in the command's words: not also as a log line


class TestToolsOnce:
    """``--tools`` names one file, as the usage says; a second one is an error, not silently the one used."""

    def test_a_second_tools_file_is_refused(
        self, tmp_path: Path, files: dict[str, Path], capsys: pytest.CaptureFixture[str]
    ) -> None:
        other = tmp_path / "more.json"
        other.write_text(json.dumps(TOOLS[:1]), encoding="utf-8")
        with pytest.raises(SystemExit) as caught:
            _replay(files, "--tools", str(other), capsys=capsys)
        assert caught.value.code == 2
        err = capsys.readouterr().err
        assert f"--tools given twice ({files['tools']}, then {other})" in err, err
        assert not files["out"].exists()

    def test_the_usage_says_one_file_for_tools(self, capsys: pytest.CaptureFixture[str]) -> None:
        """The usage shows ``--tools TOOLS.json ... FILE`` (one transcripts file), beside the several of other sources."""
        with pytest.raises(SystemExit):
            main(["replay", "--help"])
        out = capsys.readouterr().out
        assert "prefixmon replay --tools TOOLS.json --out RECORDS.jsonl [options] FILE\n" in out, out
        assert "prefixmon replay (--bfcl | --domain DOMAIN) --out RECORDS.jsonl [options] FILE [FILE ...]" in out, out
