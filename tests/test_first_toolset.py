"""What a newcomer meets writing a first toolset: ids the user typed, grounding, unknown tools, deletes.

Each test locks a behaviour the README and docs/toolsets.md describe, on a small to-do tool layer.
"""

from __future__ import annotations

from typing import Annotated, Any

import pytest

from prefixmon import Cause, Decision, Grounded, Monitor, Ref, ToolBlocked, Toolset
from prefixmon.testing import RecordCapture


def todo_tools(todos: dict[str, dict[str, Any]]) -> Toolset:
    """A to-do list: list, complete, delete; ids come from list_todos."""
    tools = Toolset()

    @tools.tool(produces="todo_id")
    def list_todos() -> list[dict[str, Any]]:
        """Every to-do with its id."""
        return list(todos.values())

    @tools.tool
    def complete_todo(todo_id: Annotated[str, Ref("todo_id")]) -> dict[str, Any]:
        """Mark a to-do done."""
        todos[todo_id]["done"] = True
        return todos[todo_id]

    @tools.tool(invalidates="todo_id")
    def delete_todo(todo_id: Annotated[str, Ref("todo_id")]) -> dict[str, str]:
        """Delete a to-do; its id is stale afterwards."""
        del todos[todo_id]
        return {"deleted": todo_id}

    @tools.tool
    def rename_todo(todo_id: Annotated[str, Ref("todo_id", user=True)], title: Annotated[str, Grounded()]) -> dict[str, Any]:
        """Rename a to-do; the user may name its id, and the new title must come from the conversation."""
        todos[todo_id]["title"] = title
        return todos[todo_id]

    return tools


@pytest.fixture
def todos() -> dict[str, dict[str, Any]]:
    return {f"todo-{i}": {"todo_id": f"todo-{i}", "title": t, "done": False} for i, t in enumerate(("milk", "call mum", "taxes"))}


class TestIdsTheUserTyped:
    """An id that no tool returned is a dependency failure, unless it is bound or the Ref accepts the user's word."""

    async def test_a_typed_id_is_unbound(self, todos: dict[str, dict[str, Any]]) -> None:
        """ "complete todo-2" with no earlier list_todos: dependency, and the reason names the producer."""
        monitor = Monitor(todo_tools(todos), policy="block")
        async with monitor.episode(task_id="t") as ep:
            ep.user("complete todo-2")
            with pytest.raises(ToolBlocked) as blocked:
                await ep.call("complete_todo", {"todo_id": "todo-2"})
        assert blocked.value.verdict.cause is Cause.DEPENDENCY
        assert "list_todos produces them" in str(blocked.value) and "'todo-2' was never returned by any tool" in str(
            blocked.value
        )

    async def test_bindings_make_known_ids_current(self, todos: dict[str, dict[str, Any]]) -> None:
        """bindings={kind: ids} binds what the environment already holds, at depth 0."""
        monitor = Monitor(todo_tools(todos), policy="block")
        async with monitor.episode(task_id="t", bindings={"todo_id": list(todos)}) as ep:
            ep.user("complete todo-2")
            assert (await ep.call("complete_todo", {"todo_id": "todo-2"}))["done"] is True
            ep.finish("success")
        assert ep.record is not None and ep.record.executable and ep.record.outcome == "success"

    async def test_ref_user_true_accepts_an_id_the_user_said(self, todos: dict[str, dict[str, Any]]) -> None:
        """Ref(kind, user=True): a value that appeared in the user's messages is accepted; others are not."""
        monitor = Monitor(todo_tools(todos), policy="block")
        async with monitor.episode(task_id="t") as ep:
            ep.user("rename todo-1 to 'call dad'")
            assert (await ep.call("rename_todo", {"todo_id": "todo-1", "title": "call dad"}))["title"] == "call dad"
            with pytest.raises(ToolBlocked, match=r"returned by an earlier call .* or given by the user"):
                await ep.call("rename_todo", {"todo_id": "todo-0", "title": "call dad"})


class TestGroundedMatching:
    """Grounded(): what counts as having appeared (docs/toolsets.md, "Grounded values")."""

    @pytest.mark.parametrize(
        ("title", "grounded"),
        [
            ("Buy oat milk", True),  # the user's words, exactly
            ("buy OAT milk", True),  # user text matches case-insensitively ...
            ("oat mi", True),  # ... anywhere inside a message (a substring)
            ("soy milk", False),
        ],
    )
    async def test_user_text_matches_by_substring(self, todos: dict[str, dict[str, Any]], title: str, grounded: bool) -> None:
        """Against the user's messages a value matches as a case-insensitive substring."""
        monitor = Monitor(todo_tools(todos))
        async with monitor.episode(task_id="t", bindings={"todo_id": list(todos)}) as ep:
            ep.user("Rename todo-0 to: Buy oat milk")
            assert ep.check("rename_todo", {"todo_id": "todo-0", "title": title}).executable is grounded

    @pytest.mark.parametrize(
        ("title", "grounded"),
        [
            ("call mum", True),  # a whole value of the result
            ("mum", True),  # one word of a value
            ("Call mum", True),  # in another case: Grounded() matches normalized forms (Grounded("exact") does not)
            ("all m", False),  # and never as a substring
        ],
    )
    async def test_result_values_match_whole_or_word_by_word(
        self, todos: dict[str, dict[str, Any]], title: str, grounded: bool
    ) -> None:
        """Against tool results a value matches a whole leaf value or one of its words (in any case or spacing), never a part."""
        monitor = Monitor(todo_tools(todos))
        async with monitor.episode(task_id="t") as ep:
            await ep.call("list_todos")
            assert ep.check("rename_todo", {"todo_id": "todo-0", "title": title}).executable is grounded

    async def test_numbers_optional_values_flags_and_paths(self) -> None:
        """Numbers match by value or text; None passes; a bool never counts as seen; list paths check each element."""
        tools = Toolset()

        @tools.tool(grounded=["items[].sku"])
        def pay(
            amount: Annotated[float, Grounded()],
            note: Annotated[str | None, Grounded()] = None,
            items: list[dict[str, str]] | None = None,
        ) -> dict[str, str]:
            return {}

        @tools.tool
        def toggle(on: Annotated[bool, Grounded()]) -> bool:
            return on

        async with Monitor(tools).episode(task_id="t") as ep:
            ep.user("Send 20 dollars for sku A-1")
            assert ep.check("pay", {"amount": 20}).executable and ep.check("pay", {"amount": 20.0}).executable
            assert ep.check("pay", {"amount": 2}).executable  # lenient: "2" is a substring of "20"
            assert not ep.check("pay", {"amount": 35}).executable
            assert ep.check("pay", {"amount": 20, "note": None}).executable
            assert ep.check("pay", {"amount": 20, "items": [{"sku": "A-1"}]}).executable
            verdict = ep.check("pay", {"amount": 20, "items": [{"sku": "A-1"}, {"sku": "Z-9"}]})
            assert not verdict.executable and "'Z-9' for 'items[1].sku'" in verdict.reason
            assert not ep.check("toggle", {"on": True}).executable

    async def test_result_words_match_without_punctuation(self, todos: dict[str, dict[str, Any]]) -> None:
        """A word of a result value matches with its surrounding punctuation stripped."""
        tools = Toolset()

        @tools.tool
        def note() -> dict[str, str]:
            return {"text": "paid in full, thanks"}

        @tools.tool
        def cite(word: Annotated[str, Grounded()]) -> str:
            return word

        async with Monitor(tools).episode(task_id="t") as ep:
            await ep.call("note")
            assert ep.check("cite", {"word": "full"}).executable and ep.check("cite", {"word": "full,"}).executable
            assert not ep.check("cite", {"word": "in full"}).executable


class TestUnknownToolsUnderObserve:
    """observe never blocks what the environment would run; a call nothing can run is still not run."""

    async def test_a_framework_run_call_goes_through_and_is_recorded(self, todos: dict[str, dict[str, Any]]) -> None:
        """call(..., execute=) for an undeclared tool: the framework's own call runs; the record keeps the schema failure."""
        records = RecordCapture()
        monitor = Monitor(todo_tools(todos), sink=records)
        ran: list[dict[str, Any]] = []

        def framework_dispatch(args: dict[str, Any]) -> str:
            ran.append(args)
            return "Error: no tool archive_todo"  # what the framework answers for a tool it does not have

        async with monitor.episode(task_id="t") as ep:
            assert await ep.call("archive_todo", {"todo_id": "x"}, execute=framework_dispatch) == "Error: no tool archive_todo"
        assert ran == [{"todo_id": "x"}]
        (action,) = records.one().actions
        assert (action.cause, action.decision, action.reached_environment) == (Cause.SCHEMA, Decision.OBSERVE, True)

    async def test_begin_hands_the_call_to_the_framework(self, todos: dict[str, dict[str, Any]]) -> None:
        """begin() under observe returns the pending call; the framework reports what its tool layer answered."""
        monitor = Monitor(todo_tools(todos))
        async with monitor.episode(task_id="t") as ep:
            pending = await ep.begin("archive_todo", '{"todo_id": "x"}')
            assert pending.spec is None and pending.args == {"todo_id": "x"} and pending.decision is Decision.OBSERVE
            pending.failed("unknown tool archive_todo")
        assert ep.record is not None and ep.record.fed == 1 and ep.record.actions[0].reached_environment

    async def test_a_call_the_monitor_would_have_to_run_is_not_run(self, todos: dict[str, dict[str, Any]]) -> None:
        """call() without execute= for an undeclared tool: there is nothing to run, so ToolBlocked (decision observe)."""
        monitor = Monitor(todo_tools(todos))
        async with monitor.episode(task_id="t") as ep:
            with pytest.raises(ToolBlocked, match="there is no tool named 'archive_todo'") as blocked:
                await ep.call("archive_todo", {"todo_id": "x"})
            assert (await ep.call("list_todos"))[0]["todo_id"] == "todo-0"  # the episode goes on
        assert blocked.value.decision == "observe"
        assert ep.record is not None
        first = ep.record.actions[0]
        assert (first.cause, first.decision, first.reached_environment) == (Cause.SCHEMA, Decision.OBSERVE, False)

    async def test_block_still_blocks_unknown_tools(self, todos: dict[str, dict[str, Any]]) -> None:
        """Under block nothing undeclared runs, execute= or not."""
        monitor = Monitor(todo_tools(todos), policy="block")
        async with monitor.episode(task_id="t") as ep:
            with pytest.raises(ToolBlocked):
                await ep.call("archive_todo", {"todo_id": "x"}, execute=lambda args: pytest.fail("ran"))

    async def test_openai_tool_calls_answer_an_unrunnable_call_with_the_reason(self, todos: dict[str, dict[str, Any]]) -> None:
        """The OpenAI adapter without execute=: the tool message is the model-readable reason, as for a blocked call."""
        openai_adapter = pytest.importorskip(
            "prefixmon.adapters.openai", reason='needs the extra: pip install "prefixmon[openai]"'
        )
        monitor = Monitor(todo_tools(todos))
        call = {"id": "c1", "type": "function", "function": {"name": "archive_todo", "arguments": "{}"}}
        async with monitor.episode(task_id="t") as ep:
            (reply,) = await openai_adapter.run_tool_calls(ep, {"role": "assistant", "tool_calls": [call]})
        assert reply["content"].startswith("Call to 'archive_todo' was not run: there is no tool named 'archive_todo'")


class TestStaleAfterDelete:
    """A reference used after the call that invalidated it says so in plain words."""

    async def test_reason_says_invalidated_by_the_deleting_call(self, todos: dict[str, dict[str, Any]]) -> None:
        """complete_todo after delete_todo of the same id: 'invalidated by delete_todo at step 2', not 'changed'."""
        monitor = Monitor(todo_tools(todos), policy="block")
        async with monitor.episode(task_id="t") as ep:
            await ep.call("list_todos")
            await ep.call("delete_todo", {"todo_id": "todo-1"})
            with pytest.raises(ToolBlocked) as blocked:
                await ep.call("complete_todo", {"todo_id": "todo-1"})
        verdict = blocked.value.verdict
        assert (verdict.cause, verdict.code) == (Cause.DEPENDENCY, "stale_reference")
        assert "no longer valid (invalidated by delete_todo at step 2)" in verdict.reason
        assert "changed" not in verdict.reason

    async def test_a_new_result_makes_the_id_current_again(self, todos: dict[str, dict[str, Any]]) -> None:
        """The id returned again by a later result is current again."""
        monitor = Monitor(todo_tools(todos), policy="block")
        async with monitor.episode(task_id="t") as ep:
            await ep.call("list_todos")
            await ep.call("delete_todo", {"todo_id": "todo-1"})
            todos["todo-1"] = {"todo_id": "todo-1", "title": "call mum", "done": False}  # re-created
            await ep.call("list_todos")
            assert (await ep.call("complete_todo", {"todo_id": "todo-1"}))["done"] is True
