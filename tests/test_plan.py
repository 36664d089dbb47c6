"""Plan verification (the dual loop): parsing, the symbolic predicate, revising, following."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

import pytest
from pydantic import Field

from prefixmon import Cause, Monitor, PlanError, Ref, ToolBlocked, Toolset, ToolSpec, TrackedState, Undetermined
from prefixmon.plan import (
    DEFAULT_BUDGET,
    DUAL_LOOP,
    METHODS,
    PLAN_CONDITIONED_REACT,
    PROMPT_PLANNING,
    REACT,
    Plan,
    PlanFollower,
    PlanLike,
    PlanRef,
    PlanState,
    StepStatus,
    SymbolicValueError,
    describe_tools,
    deviation_kind,
    parse_plan,
    plan_effect,
    ref,
    revise_plan,
    summarize_state,
    verify_plan,
)

Contacts = tuple[Toolset, dict[str, dict[str, str]]]

FIND_THEN_REMOVE: list[dict[str, Any]] = [
    {"id": "find", "tool": "search_contacts", "args": {"phone_number": "+1 555 0100"}},
    {"tool": "remove_contact", "args": {"person_id": {"$ref": "find.person_id"}}},
]


def state_with(tools: Toolset, *, user: str | None = None, facts: dict[str, Any] | None = None) -> TrackedState:
    """A fresh tracked state exposing the toolset's exposed tools."""
    state = TrackedState(facts=facts, exposed=[s.name for s in tools if s.exposed])
    if user:
        state.inform(user)
    return state


def switch_toolset() -> Toolset:
    """Tools whose effects turn a switch on and off, and a tool that needs it on."""
    tools = Toolset()

    def set_switch(state: TrackedState, args: Any, result: Any) -> None:
        state.facts["switch"] = args["on"]

    @tools.tool(effects=[set_switch])
    def toggle(on: bool) -> dict[str, bool]:
        """Turn the switch on or off."""
        return {"on": on}

    def switch_on(state: TrackedState, args: Any) -> bool:
        """the switch is off; turn it on first"""
        return bool(state.facts.get("switch"))

    @tools.tool(requires=[switch_on])
    def use() -> str:
        """Use the machine."""
        return "used"

    return tools


class TestParse:
    def test_json_text_and_python_objects_give_the_same_plan(self) -> None:
        """A list, {"steps": [...]}, JSON text and a fenced JSON block parse alike."""
        text = json.dumps(FIND_THEN_REMOVE)
        plans = [
            parse_plan(FIND_THEN_REMOVE),
            parse_plan({"steps": FIND_THEN_REMOVE}),
            parse_plan(text),
            parse_plan(text.encode()),
            parse_plan(f"```json\n{text}\n```"),
        ]
        for plan in plans:
            assert [s.id for s in plan] == ["find", "step2"]
            assert plan.steps[1].args == {"person_id": PlanRef("find", ("person_id",))}
            assert plan.steps[1].refs == ((("person_id",), PlanRef("find", ("person_id",))),)
        assert parse_plan(plans[0]) is plans[0]

    def test_round_trip_and_nested_references(self) -> None:
        """References inside lists and objects are found with their location and survive to_data."""
        data = [
            {"tool": "a", "args": {}},
            {"tool": "b", "args": {"items": [{"id": {"$ref": "step1.items[0].id"}}, "x"]}, "note": "why"},
        ]
        plan = parse_plan(data)
        r = plan.steps[1].refs[0]
        assert r == (("items", 0, "id"), PlanRef("step1", ("items", "0", "id")))
        assert plan.steps[1].symbolic == {"items": (r[1],)}
        again = parse_plan(plan.to_json())
        assert again.to_data() == plan.to_data()
        assert again.steps[1].note == "why"

    def test_arguments_as_json_text(self) -> None:
        """A step's args may be JSON text (as models emit them); 'arguments' is accepted too."""
        plan = parse_plan([{"tool": "search_contacts", "arguments": '{"name": "Fredrik"}'}])
        assert plan.steps[0].args == {"name": "Fredrik"}

    def test_ref_helper_and_repr(self) -> None:
        """ref() parses the same syntax; a reference quotes itself as the $ref object."""
        r = ref("find.person_id")
        assert r == PlanRef("find", ("person_id",)) and str(r) == "find.person_id"
        assert repr(r) == '{"$ref": "find.person_id"}'
        assert r["x"] == PlanRef("find", ("person_id", "x"))

    def test_a_placeholder_cannot_be_used_as_a_concrete_value(self) -> None:
        """Truth, ordering, arithmetic and iteration of a placeholder raise SymbolicValueError."""
        r = ref("step1.amount")
        for use in (bool, len, iter, lambda v: v < 3, lambda v: v + 1, float):
            with pytest.raises(SymbolicValueError, match="known only after step 'step1' runs"):
                use(r)

    @pytest.mark.parametrize(
        ("plan", "message"),
        [
            ("[{", "the plan is not valid JSON: Expecting property name enclosed in double quotes at line 1 column 3"),
            ("42", "the plan's steps must be a list, got int"),
            ({"plan": []}, "must be a list of steps or an object with a 'steps' list"),
            ({"steps": [], "extra": 1}, "unknown field(s) 'extra'"),
            ([{"tool": "a"}, "b"], "plan step 2: a step must be an object with 'tool' and 'args', got str"),
            ([{"args": {}}], "plan step 1: field 'tool' must be a tool name; it is missing"),
            ([{"tool": 3}], "plan step 1: field 'tool' must be a tool name; got int 3"),
            ([{"tool": "a", "args": [1]}], "plan step 1 (a): field 'args' must be an object of argument values, got list"),
            ([{"tool": "a", "args": "{nope"}], "plan step 1 (a): field 'args' is not valid JSON"),
            ([{"tool": "a", "args": {}, "arguments": {}}], "plan step 1 (a): give 'args' or 'arguments', not both"),
            ([{"tool": "a", "id": "has space"}], "plan step 1 (a): field 'id' must be letters, digits, '_' or '-'"),
            ([{"tool": "a"}, {"tool": "b", "id": "step1"}], "plan step 2 (b): field 'id': 'step1' is already"),
            ([{"tool": "a", "why": "x"}], "plan step 1 (a): unknown field(s) 'why'"),
            ([{"tool": "a", "args": {"x": {"$ref": 3}}}], "plan step 1 (a): argument 'x': a $ref must be a string"),
            ([{"tool": "a", "args": {"x": {"$ref": "s1..id"}}}], "plan step 1 (a): argument 'x': $ref 's1..id': empty"),
            ([{"tool": "a", "args": {"x": {"$ref": ".id"}}}], "argument 'x': $ref '.id': it must start with a step id"),
            ([{"tool": "a", "args": {"y": [{"$ref": "s1.id", "k": 1}]}}], "argument 'y[0]': a $ref object must have only"),
        ],
    )
    def test_bad_plans_name_the_step_and_field(self, plan: Any, message: str) -> None:
        """Malformed plans raise PlanError naming the step and the field."""
        with pytest.raises(PlanError) as e:
            parse_plan(plan)
        assert message in str(e.value)


class TestVerify:
    async def test_valid_plan_is_approved_without_running_anything(self, contacts: Contacts) -> None:
        """Search then remove by $ref is approved; no tool runs, the episode gains no action and its state is untouched."""
        tools, book = contacts
        async with Monitor(tools).episode(task_id="t") as ep:
            ep.user("Remove Fredrik, his number is +1 555 0100")
            await ep.call("search_contacts", {"name": "Amara"})
            before = (ep.depth, dict(ep.state.facts), ep.state.binding_count, ep.state.is_bound("person_id", "p-2"))
            verdict = verify_plan(
                tools, [*FIND_THEN_REMOVE, {"tool": "remove_contact", "args": {"person_id": "p-2"}}], state=ep.state
            )
            assert verdict.approved, verdict.feedback()
            assert [s.status for s in verdict.steps] == [StepStatus.EXECUTABLE, StepStatus.UNDETERMINED, StepStatus.EXECUTABLE]
            assert (ep.depth, dict(ep.state.facts), ep.state.binding_count, ep.state.is_bound("person_id", "p-2")) == before
        assert set(book) == {"p-1", "p-2"}
        assert ep.record is not None and ep.record.horizon == 1

    async def test_verdicts_agree_with_the_runtime(self, contacts: Contacts) -> None:
        """For a concrete plan, each step's verdict equals the runtime's verdict on the same call at the same depth."""
        tools, _ = contacts
        calls: list[tuple[str, dict[str, Any]]] = [
            ("send_message", {"person_id": "p-1", "text": "hi"}),
            ("set_cellular", {"on": True}),
            ("send_message", {"person_id": "p-1", "text": "hi"}),
            ("remove_contact", {"person_id": "p-1"}),
            ("send_message", {"person_id": "p-1", "text": "bye"}),
            ("send_money", {"phone_number": "+1 555 0100", "amount": 12.5}),
            ("admin_reset", {}),
            ("set_cellular", {"on": "maybe"}),
            ("teleport", {}),
        ]
        async with Monitor(tools).episode(task_id="t") as ep:
            ep.user("Text Fredrik then remove him; his number is +1 555 0100")
            await ep.call("search_contacts", {"name": "Fredrik"})
            verdict = verify_plan(tools, [{"tool": n, "args": a} for n, a in calls], state=ep.state)
            for name, args in calls:
                with contextlib.suppress(ToolBlocked, Exception):
                    await ep.call(name, args)
        assert ep.record is not None
        runtime = [(a.executable, a.cause, a.reason) for a in ep.record.actions[1:]]
        planned = [(s.executable, s.cause, s.reason or None) for s in verdict.steps]
        assert planned == runtime
        assert [s.verdict.depth for s in verdict.steps] == [a.depth for a in ep.record.actions[1:]]
        assert not verdict.approved

    async def test_each_cause_at_its_step(self, contacts: Contacts) -> None:
        """Schema, dependency, precondition and information failures land on the right step; the rest pass."""
        tools, _ = contacts
        state = state_with(tools, user="send 5 to +1 555 0100")
        verdict = verify_plan(
            tools,
            [
                {"tool": "search_contacts", "args": {"name": "Fredrik"}},
                {"tool": "no_such_tool", "args": {}},
                {"tool": "remove_contact", "args": {"person_id": "p-9"}},
                {"tool": "send_message", "args": {"person_id": {"$ref": "step1.person_id"}, "text": "hi"}},
                {"tool": "send_money", "args": {"phone_number": "+1 555 0100", "amount": 7}},
                {"tool": "send_money", "args": {"phone_number": "+1 555 0100", "amount": 5}},
            ],
            state=state,
        )
        assert [s.cause for s in verdict.steps] == [
            None,
            Cause.SCHEMA,
            Cause.DEPENDENCY,
            Cause.PRECONDITION,
            Cause.INFORMATION,
            None,
        ]
        assert verdict.first_failure is verdict.steps[1]
        assert "there is no tool named 'no_such_tool'" in verdict.steps[1].reason
        assert verdict.steps[3].reason == "send_message: cellular service is off; turn it on first"
        assert verdict.steps[3].hint is None
        assert 'use the output of an earlier step, e.g. {"$ref": "step1.person_id"}' in (verdict.steps[2].hint or "")
        assert [s.step.index for s in verdict.rejected] == [2, 3, 4, 5]

    def test_tie_break_lists_every_failure(self, contacts: Contacts) -> None:
        """A step failing dependency and precondition reports dependency first and both failures."""
        tools, _ = contacts
        verdict = verify_plan(tools, [{"tool": "send_message", "args": {"person_id": "+1 555", "text": "x"}}])
        step = verdict.steps[0]
        assert [f.cause for f in step.verdict.failures] == [Cause.DEPENDENCY, Cause.PRECONDITION]
        assert step.cause is Cause.DEPENDENCY
        text = verdict.feedback()
        assert "step1 (send_message) is not executable (dependency)" in text and "Also: send_message: cellular" in text

    def test_state_consistency_is_never_claimed_before_execution(self, contacts: Contacts) -> None:
        """A call the environment will reject (lookup of a missing order) cannot be known before it runs."""
        tools, _ = contacts
        verdict = verify_plan(tools, [{"tool": "lookup_order", "args": {"order_id": "#nope"}}])
        assert verdict.approved and verdict.steps[0].status is StepStatus.EXECUTABLE

    def test_schema_failures(self, contacts: Contacts) -> None:
        """Missing, wrong-typed and hidden tools are schema failures, as at runtime."""
        tools, _ = contacts
        verdict = verify_plan(
            tools,
            [
                {"tool": "set_cellular", "args": {}},
                {"tool": "set_cellular", "args": {"on": True, "volume": 3}},
                {"tool": "admin_reset"},
            ],
        )
        assert [s.verdict.code for s in verdict.steps] == ["invalid_arguments", "invalid_arguments", "not_exposed"]
        assert "missing required argument 'on'" in verdict.steps[0].reason


class TestReferences:
    @pytest.mark.parametrize(
        ("target", "code", "fragment"),
        [
            ("nowhere.person_id", "unknown_step", "but the plan has no step 'nowhere' (earlier steps: step1)"),
            ("step3.person_id", "forward_reference", "but 'step3' is step 3, which comes later"),
            ("step2.person_id", "forward_reference", "but 'step2' is this step itself"),
        ],
    )
    def test_references_to_missing_or_later_steps(self, contacts: Contacts, target: str, code: str, fragment: str) -> None:
        """A $ref must name an earlier step: a missing, later or self reference is a dependency failure."""
        tools, _ = contacts
        plan = [
            {"tool": "search_contacts", "args": {"name": "Fredrik"}},
            {"tool": "remove_contact", "args": {"person_id": {"$ref": target}}},
            {"tool": "search_contacts", "args": {"name": "Amara"}},
        ]
        step = verify_plan(tools, plan).steps[1]
        assert (step.status, step.cause, step.verdict.code) == (StepStatus.NOT_EXECUTABLE, Cause.DEPENDENCY, code)
        assert fragment in step.reason
        assert "remove_contact: argument 'person_id' refers to" in step.reason

    def test_reference_to_a_failed_step(self, contacts: Contacts) -> None:
        """A step that fails produces nothing: referring to it is a dependency failure naming it."""
        tools, _ = contacts
        verdict = verify_plan(
            tools,
            [
                {"tool": "search_contacts", "args": {"name": 3}},
                {"tool": "remove_contact", "args": {"person_id": {"$ref": "step1.person_id"}}},
            ],
        )
        assert verdict.steps[1].verdict.code == "failed_step"
        assert "step1 (search_contacts) is not executable, so its output will not exist" in verdict.steps[1].reason

    def test_reference_of_the_wrong_kind(self, contacts: Contacts) -> None:
        """A $ref to a field the step does not produce as the needed kind is a wrong-kind dependency failure."""
        tools, _ = contacts
        verdict = verify_plan(
            tools,
            [
                {"tool": "search_contacts", "args": {"name": "Fredrik"}},
                {"tool": "remove_contact", "args": {"person_id": {"$ref": "step1.name"}}},
            ],
        )
        step = verdict.steps[1]
        assert step.verdict.code == "unbound_reference"
        assert step.reason == (
            "remove_contact needs a person_id returned by an earlier call (search_contacts produces them); "
            '{"$ref": "step1.name"} was not returned as a person_id by any earlier call'
        )
        assert step.hint == 'use the output of an earlier step, e.g. {"$ref": "step1.person_id"}'

    def test_reference_in_a_plain_argument_must_still_exist(self, contacts: Contacts) -> None:
        """Even an argument without rules cannot refer to a step that does not exist."""
        tools, _ = contacts
        verdict = verify_plan(tools, [{"tool": "search_contacts", "args": {"name": {"$ref": "ghost.name"}}}])
        assert verdict.steps[0].verdict.code == "unknown_step"

    def test_outputs_of_earlier_steps_count_as_seen(self, contacts: Contacts) -> None:
        """A grounded argument taken from an earlier step's output is available information."""
        tools, _ = contacts
        verdict = verify_plan(
            tools,
            [
                {"tool": "search_contacts", "args": {"name": "Fredrik"}},
                {"tool": "send_money", "args": {"phone_number": {"$ref": "step1.phone_number"}, "amount": 5}},
            ],
            state=state_with(tools, user="send him 5"),
        )
        assert verdict.approved and verdict.steps[1].status is StepStatus.EXECUTABLE

    def test_placeholders_fit_typed_and_nested_schemas(self) -> None:
        """A $ref in an integer or a nested list argument is validated as a sample of the declared type."""
        tools = Toolset()
        tools.add_schema("count", None, produces={"n": "n", "seat_id": "seat_id"})
        tools.add_schema(
            "book",
            {
                "type": "object",
                "properties": {
                    "seats": {"type": "array", "items": {"type": "object", "properties": {"id": {"type": "integer"}}}},
                    "when": {"type": "string", "format": "date"},
                },
                "required": ["seats", "when"],
            },
            refs={"seats[].id": "seat_id"},
        )

        @tools.tool
        def repeat(times: int, word: str) -> str:
            """Repeat a word."""
            return word * times

        verdict = verify_plan(
            tools,
            [
                {"tool": "count", "args": {}},
                {"tool": "repeat", "args": {"times": {"$ref": "step1.n"}, "word": "x"}},
                {"tool": "book", "args": {"seats": [{"id": {"$ref": "step1.seat_id"}}], "when": "2026-01-01"}},
                {"tool": "book", "args": {"seats": [{"id": {"$ref": "step1.n"}}], "when": "2026-01-01"}},
                {"tool": "repeat", "args": {"times": {"$ref": "step1.n"}}},
            ],
        )
        assert [s.status for s in verdict.steps[:3]] == [StepStatus.EXECUTABLE] * 3
        assert verdict.steps[1].verdict.args == {"times": ref("step1.n"), "word": "x"}
        assert verdict.steps[3].verdict.code == "wrong_kind"
        assert verdict.steps[4].verdict.code == "invalid_arguments" and "word" in verdict.steps[4].reason


class TestEffects:
    def test_an_earlier_effect_makes_a_precondition_true(self, contacts: Contacts) -> None:
        """Turning cellular on in step 1 makes step 2's precondition hold; without it, it fails."""
        tools, _ = contacts
        send = {"tool": "send_message", "args": {"person_id": {"$ref": "step1.person_id"}, "text": "hi"}}
        search = {"tool": "search_contacts", "args": {"name": "Fredrik"}}
        on = {"tool": "set_cellular", "args": {"on": True}}
        without = verify_plan(tools, [search, send])
        assert without.steps[1].cause is Cause.PRECONDITION
        assert verify_plan(tools, [search, on, send]).approved

    def test_an_earlier_effect_makes_a_precondition_false(self) -> None:
        """Turning the switch off in step 2 makes step 3 fail although step 1 turned it on."""
        tools = switch_toolset()
        verdict = verify_plan(
            tools,
            [{"tool": "toggle", "args": {"on": True}}, {"tool": "toggle", "args": {"on": False}}, {"tool": "use"}],
        )
        assert [s.cause for s in verdict.steps] == [None, None, Cause.PRECONDITION]
        assert verdict.steps[2].reason == "use: the switch is off; turn it on first"

    def test_delete_then_reuse_an_id(self, contacts: Contacts) -> None:
        """Removing a contact makes its id stale for later steps, literal or $ref; the parent keeps it current."""
        tools, _ = contacts
        state = state_with(tools)
        state.ingest([{"person_id": "p-1"}], produce={"person_id": "person_id"}, tool="search_contacts")
        verdict = verify_plan(
            tools,
            [
                {"tool": "remove_contact", "args": {"person_id": "p-1"}},
                {"tool": "remove_contact", "args": {"person_id": "p-1"}},
                {"id": "again", "tool": "search_contacts", "args": {"name": "Amara"}},
                {"tool": "remove_contact", "args": {"person_id": {"$ref": "again.person_id"}}},
                {"tool": "set_cellular", "args": {"on": True}},
                {"tool": "send_message", "args": {"person_id": {"$ref": "again.person_id"}, "text": "x"}},
            ],
            state=state,
        )
        assert [s.verdict.code for s in verdict.steps] == [None, "stale_reference", None, None, None, "stale_reference"]
        assert verdict.steps[1].reason == (
            "remove_contact needs a current person_id; 'p-1' was returned by search_contacts but is no longer valid "
            "(invalidated by remove_contact at step 1)"
        )
        assert "invalidated by remove_contact at step 4" in verdict.steps[5].reason
        assert state.is_bound("person_id", "p-1")

    def test_effects_do_not_leak_into_the_parent(self) -> None:
        """An effect that changes a fact in place works on a private copy; the parent's facts stay as they were."""
        tools = Toolset()

        def remember(state: TrackedState, args: Any, result: Any) -> None:
            state.facts["log"].append(args["word"])
            state.facts["count"] = state.facts.get("count", 0) + 1
            state.facts.pop("stale", None)

        def logged(state: TrackedState, args: Any) -> bool | str:
            return len(state.facts["log"]) < 2 or f"log is full: {state.facts['log']}"

        @tools.tool(effects=[remember], requires=[logged])
        def say(word: str) -> str:
            """Say a word."""
            return word

        state = TrackedState(facts={"log": [], "stale": 1}, exposed=["say"])
        verdict = verify_plan(tools, [{"tool": "say", "args": {"word": w}} for w in "abc"], state=state)
        assert [s.cause for s in verdict.steps] == [None, None, Cause.PRECONDITION]
        assert verdict.steps[2].reason == "say: log is full: ['a', 'b']"
        assert state.facts == {"log": [], "stale": 1}
        assert "count" not in state.facts

    def test_effect_that_needs_the_result(self) -> None:
        """An effect reading the result sees a placeholder; one that cannot run leaves later fact checks undetermined."""
        tools = Toolset()

        def login_effect(state: TrackedState, args: Any, result: Any) -> None:
            state.facts["user"] = result["user_id"]

        def count_effect(state: TrackedState, args: Any, result: Any) -> None:
            state.facts["items"] = len(result)

        @tools.tool(effects=[login_effect])
        def login(name: str) -> dict[str, str]:
            """Log in."""
            return {"user_id": "u1"}

        @tools.tool(effects=[count_effect])
        def list_items() -> list[str]:
            """List items."""
            return []

        def logged_in(state: TrackedState, args: Any) -> bool:
            """log in first"""
            return state.facts.get("user") is not None

        def has_items(state: TrackedState, args: Any) -> bool:
            """there are no items"""
            return bool(state.facts.get("items"))

        @tools.tool(requires=[logged_in])
        def whoami() -> str:
            """Who am I."""
            return "me"

        @tools.tool(requires=[has_items])
        def checkout() -> str:
            """Check out."""
            return "ok"

        verdict = verify_plan(
            tools,
            [
                {"tool": "whoami"},
                {"tool": "login", "args": {"name": "a"}},
                {"tool": "whoami"},
                {"tool": "list_items"},
                {"tool": "checkout"},
            ],
        )
        statuses = [s.status for s in verdict.steps]
        assert statuses[:3] == [StepStatus.NOT_EXECUTABLE, StepStatus.EXECUTABLE, StepStatus.UNDETERMINED]
        assert 'reads {"$ref": "step2.user_id"}' in verdict.steps[2].why_undetermined[0]
        assert (
            verdict.steps[3].notes
            and "effect count_effect of list_items could not be simulated (SymbolicValueError" in verdict.steps[3].notes[0]
        )
        assert statuses[4] is StepStatus.UNDETERMINED
        assert "step4 (list_items) changes in a way known only when it runs" in verdict.steps[4].why_undetermined[0]

    def test_declared_symbolic_effects(self) -> None:
        """plan_effect gives an effect a plan-time version; plan_effect(None) declares it has none."""
        tools = Toolset()
        calls: list[str] = []

        def sim_open(state: TrackedState, args: Any, result: Any) -> None:
            state.facts["open"] = True

        @plan_effect(sim_open)
        def open_effect(state: TrackedState, args: Any, result: Any) -> None:
            calls.append("runtime")
            state.facts["open"] = bool(result["opened"])

        @plan_effect(None)
        def audit(state: TrackedState, args: Any, result: Any) -> None:
            calls.append("audit")
            raise AssertionError("never simulated")

        def is_open(state: TrackedState, args: Any) -> bool:
            """closed"""
            return bool(state.facts.get("open"))

        @tools.tool(effects=[open_effect, audit])
        def open_shop() -> dict[str, bool]:
            """Open the shop."""
            return {"opened": True}

        @tools.tool(requires=[is_open])
        def sell() -> str:
            """Sell something."""
            return "sold"

        verdict = verify_plan(tools, [{"tool": "open_shop"}, {"tool": "sell"}])
        assert verdict.approved and [s.status for s in verdict.steps] == [StepStatus.EXECUTABLE] * 2
        assert calls == []
        state = TrackedState()
        open_effect(state, {}, {"opened": True})
        assert state.facts == {"open": True} and calls == ["runtime"]


class TestUndetermined:
    def test_precondition_reading_a_placeholder(self, contacts: Contacts) -> None:
        """A precondition that reads a $ref value is undetermined, with a reason naming the step."""
        tools, _ = contacts
        verdict = verify_plan(tools, FIND_THEN_REMOVE)
        step = verdict.steps[1]
        assert step.status is StepStatus.UNDETERMINED and step.verdict.undetermined == ("exists",)
        assert step.why_undetermined == (
            'precondition exists reads {"$ref": "find.person_id"}, known only after find (search_contacts) runs',
        )
        assert verdict.approved
        assert not verify_plan(tools, FIND_THEN_REMOVE, allow_undetermined=False).approved
        assert "can only be checked when it runs" in verdict.feedback()

    def test_precondition_returning_undetermined_or_raising(self) -> None:
        """Undetermined() and an exception are undetermined (the exception is also a fault), not failures."""
        tools = Toolset()

        def later(state: TrackedState, args: Any) -> Any:  # PreconditionResult does not name Undetermined yet
            return Undetermined("seat map loads at run time")

        def broken(state: TrackedState, args: Any) -> bool:
            raise KeyError("seats")

        @tools.tool(requires=[later, broken])
        def pick_seat(seat: str) -> str:
            """Pick a seat."""
            return seat

        step = verify_plan(tools, [{"tool": "pick_seat", "args": {"seat": "3A"}}]).steps[0]
        assert step.status is StepStatus.UNDETERMINED
        assert step.verdict.undetermined == ("later", "broken")
        assert step.why_undetermined[0] == "precondition later: seat map loads at run time"
        assert "precondition broken raised KeyError('seats')" in step.why_undetermined[1]
        assert [f.where for f in step.verdict.faults] == ["precondition broken of pick_seat"]

    def test_precondition_that_crashes_on_a_placeholder(self) -> None:
        """A precondition that uses a $ref concretely (and so raises) is undetermined, not a monitor fault."""
        tools = Toolset()
        tools.add_schema("quote", None, produces="price")

        def affordable(state: TrackedState, args: Any) -> bool:
            return bool(args["amount"] <= 100)

        @tools.tool(requires=[affordable])
        def pay(amount: float) -> str:
            """Pay."""
            return "paid"

        step = verify_plan(tools, [{"tool": "quote"}, {"tool": "pay", "args": {"amount": {"$ref": "step1.price"}}}]).steps[1]
        assert step.status is StepStatus.UNDETERMINED and not step.verdict.faults

    def test_environment_reads_after_a_changing_step(self) -> None:
        """A failing check of the live environment after a step that may change it is undetermined (unless read-only)."""
        tools = Toolset()
        env = {"door": "closed"}

        def door_open(state: TrackedState, args: Any) -> bool:
            """the door is closed"""
            return bool(state.env["door"] == "open")

        @tools.tool
        def open_door() -> str:
            """Open the door."""
            env["door"] = "open"
            return "opened"

        @tools.tool
        def look() -> str:
            """Look around."""
            return "a door"

        @tools.tool(requires=[door_open])
        def walk_through() -> str:
            """Walk through the door."""
            return "through"

        state = TrackedState(env=env, exposed=tools.names)
        first = verify_plan(tools, [{"tool": "walk_through"}], state=state)
        assert first.steps[0].cause is Cause.PRECONDITION
        after_open = verify_plan(tools, [{"tool": "open_door"}, {"tool": "walk_through"}], state=state)
        assert after_open.steps[1].status is StepStatus.UNDETERMINED
        assert "reads the environment, which step1 (open_door) may change" in after_open.steps[1].why_undetermined[0]
        after_look = verify_plan(tools, [{"tool": "look"}, {"tool": "walk_through"}], state=state, read_only=["look"])
        assert after_look.steps[1].cause is Cause.PRECONDITION
        assert env == {"door": "closed"}


class TestPlanLevel:
    def test_empty_plan(self, contacts: Contacts) -> None:
        """An empty plan is approved only when the task may finish without tools."""
        tools, _ = contacts
        assert not verify_plan(tools, []).approved
        assert "has no steps" in verify_plan(tools, []).feedback()
        assert verify_plan(tools, [], allows_no_tool=True).approved

    def test_targets(self, contacts: Contacts) -> None:
        """A Monitor or a Toolset gives a fresh state; anything else is a TypeError; bad plans raise PlanError."""
        tools, _ = contacts
        with pytest.warns(DeprecationWarning, match=r"verify_plan\(monitor.toolset, plan"):
            assert verify_plan(Monitor(tools), [{"tool": "search_contacts", "args": {}}]).approved  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="needs a Toolset"):
            verify_plan(object(), [])  # type: ignore[arg-type]
        with pytest.raises(PlanError):
            verify_plan(tools, "not json")

    def test_view_reads_through_and_never_writes_back(self, contacts: Contacts) -> None:
        """The copy-on-write view sees the parent's facts, bindings and information, and keeps its own changes."""
        tools, _ = contacts
        parent = state_with(tools, user="call +1 555 0100", facts={"a": 1})
        parent.bind("person_id", "p-1", tool="search_contacts")
        view = PlanState(parent)
        assert view.facts["a"] == 1 and view.is_bound("person_id", "p-1") and view.seen("+1 555 0100")
        view.facts["b"] = 2
        del view.facts["a"]
        view.invalidate("person_id", "p-1", by="remove_contact")
        view.inform("new words")
        assert dict(view.facts) == {"b": 2} and len(view.facts) == 1 and "a" not in view.facts
        assert not view.is_bound("person_id", "p-1") and view.seen("new words")
        assert parent.facts == {"a": 1} and parent.is_bound("person_id", "p-1") and not parent.seen("new words")
        assert view.parent is parent


class TestReviseLoop:
    async def test_converges_on_feedback(self, contacts: Contacts) -> None:
        """A scripted planner fixes its plan from the feedback; every attempt is recorded; no action is added."""
        tools, _ = contacts
        seen: list[tuple[str, list[str], str, str | None]] = []

        async def planner(goal: str, specs: Sequence[ToolSpec], summary: str, feedback: str | None) -> PlanLike:
            seen.append((goal, [s.name for s in specs], summary, feedback))
            if feedback is None:
                return [{"tool": "remove_contact", "args": {"person_id": "+1 555 0100"}}]
            assert "search_contacts" in feedback
            return json.dumps(FIND_THEN_REMOVE)

        async with Monitor(tools).episode(task_id="t", labels={"method": DUAL_LOOP}) as ep:
            ep.user("Remove Fredrik, +1 555 0100")
            revision = await revise_plan(planner, "Remove Fredrik", tools, state=ep.state)
            assert ep.depth == 0
        assert revision.approved and revision.plan is not None
        assert revision.plan.to_data() == parse_plan(FIND_THEN_REMOVE).to_data()
        assert [a.approved for a in revision.attempts] == [False, True]
        assert revision.attempts[0].feedback == seen[1][3]
        assert "admin_reset" not in seen[0][1] and "search_contacts" in seen[0][1]
        assert "user messages: 1" in seen[0][2]
        assert revision.labels() == {"plan_attempts": "2", "plan_approved": "true"}
        assert revision.verdict is not None and revision.verdict.approved
        assert revision.planner_seconds >= 0 and revision.verifier_seconds > 0

    async def test_stops_at_the_budget(self, contacts: Contacts) -> None:
        """A planner that never fixes its plan is stopped at the budget, and no plan is returned."""
        tools, _ = contacts
        calls = 0

        async def stubborn(goal: str, specs: Sequence[ToolSpec], summary: str, feedback: str | None) -> PlanLike:
            nonlocal calls
            calls += 1
            return [{"tool": "remove_contact", "args": {"person_id": "+1 555 0100"}}]

        revision = await revise_plan(stubborn, "Remove Fredrik", tools)
        assert (calls, len(revision.attempts), revision.plan, revision.approved) == (DEFAULT_BUDGET, 5, None, False)
        revision = await revise_plan(stubborn, "Remove Fredrik", tools, budget=2)
        assert len(revision.attempts) == 2 and revision.labels()["plan_approved"] == "false"
        with pytest.raises(ValueError, match="budget must be at least 1"):
            await revise_plan(stubborn, "x", tools, budget=0)

    async def test_unreadable_plan_is_an_attempt(self, contacts: Contacts) -> None:
        """A plan that does not parse is recorded, and the parse error is the feedback."""
        tools, _ = contacts
        answers = iter(["Sure! Here is my plan: step 1...", [{"tool": "search_contacts", "args": {"name": "F"}}]])

        async def chatty(goal: str, specs: Sequence[ToolSpec], summary: str, feedback: str | None) -> PlanLike:
            return next(answers)

        revision = await revise_plan(chatty, "find F", tools)
        first = revision.attempts[0]
        assert first.plan is None and first.error is not None and "not valid JSON" in first.error
        assert "The plan could not be read" in first.feedback and revision.approved


class TestFollower:
    async def test_executed_plan_is_followed(self, contacts: Contacts) -> None:
        """Running the approved plan step by step matches every call, with $ref values checked against results."""
        tools, book = contacts
        follower = PlanFollower(verify_plan(tools, FIND_THEN_REMOVE), tools)
        matches = []
        async with Monitor(tools, policy="block").episode(task_id="t", labels={"method": DUAL_LOOP}) as ep:
            while (step := follower.next_step) is not None:
                args = follower.concrete_args(step)
                result = await ep.call(step.tool, args)
                matches.append(follower.match(step.tool, args, ran=True, result=result))
        assert [(m.step, m.deviation) for m in matches] == [(1, None), (2, None)]
        assert "p-1" not in book and follower.missed == () and len(follower.completed) == 2
        assert ep.record is not None and ep.record.executable

    def test_deviations(self, contacts: Contacts) -> None:
        """Skips, repeats, other arguments and calls outside the plan are deviations; a blocked call can be retried."""
        tools, _ = contacts
        plan = [
            {"id": "find", "tool": "search_contacts", "args": {"name": "Fredrik"}},
            {"tool": "set_cellular", "args": {"on": True}},
            {"tool": "send_message", "args": {"person_id": {"$ref": "find.person_id"}, "text": "hi"}},
        ]
        f = PlanFollower(plan, tools)
        assert f.match("search_contacts", {"name": "Fredrik"}, ran=False) == f.match("search_contacts", {"name": "Fredrik"})
        m = f.match("search_contacts", {"name": "Fredrik"}, ran=True, result=[{"person_id": "p-1", "name": "Fredrik"}])
        assert (m.step, m.deviation) == (1, None)
        m = f.match("search_contacts", {"name": "Fredrik"}, ran=True, result=[])
        assert (m.step, m.deviation) == (1, "repeats find (search_contacts), which already ran")
        m = f.match("send_message", {"person_id": "p-1", "text": "hi"}, ran=True)
        assert (m.step, m.deviation) == (3, "skipped step2 (set_cellular)")
        m = f.match("send_message", {"person_id": "p-2", "text": "hi"})
        assert (m.step, m.deviation) == (None, "send_message is not in the plan (all 3 planned steps were already taken)")
        m = f.match("teleport", {})
        assert (m.step, m.deviation) == (None, "teleport is not in the plan (all 3 planned steps were already taken)")
        assert [s.index for s in f.missed] == [2]

    def test_deviation_kinds(self, contacts: Contacts) -> None:
        """Every deviation text maps to one low-cardinality kind (what telemetry records by default)."""
        tools, _ = contacts
        steps = [{"tool": "search_contacts", "args": {}}, {"tool": "set_cellular", "args": {"on": True}}]
        texts = [
            PlanFollower(steps, tools).match("set_cellular", {"on": False}, ran=True).deviation,
            PlanFollower(steps, tools).match("teleport", {}).deviation,
            PlanFollower(steps, tools).match("set_cellular", {"on": True}, ran=True).deviation,
        ]
        f = PlanFollower(steps, tools)
        f.match("search_contacts", {}, ran=True, result=[])
        texts.append(f.match("search_contacts", {}, ran=True, result=[]).deviation)
        assert [deviation_kind(t) for t in texts if t is not None] == ["arguments_differ", "not_in_plan", "skipped", "repeated"]

    def test_other_arguments(self, contacts: Contacts) -> None:
        """Calling the expected tool with other arguments matches the step with a deviation saying what differs."""
        tools, _ = contacts
        f = PlanFollower(
            [
                {"id": "find", "tool": "search_contacts", "args": {"name": "Fredrik"}},
                {"tool": "remove_contact", "args": {"person_id": {"$ref": "find.person_id"}}},
            ],
            tools,
        )
        m = f.match("search_contacts", {"name": "Fred"}, ran=True, result=[{"person_id": "p-1"}])
        assert (m.step, m.deviation) == (
            1,
            "arguments differ from find (search_contacts): 'name' is 'Fred', the plan has 'Fredrik'",
        )
        m = f.match("remove_contact", {"person_id": "+1 555 0100"})
        assert m.step == 2
        assert m.deviation == (
            "arguments differ from step2 (remove_contact): "
            """'person_id' is '+1 555 0100', the plan has {"$ref": "find.person_id"} ('p-1')"""
        )
        m = f.match("lookup_order", {"order_id": "#W1"})
        assert (m.step, m.deviation) == (None, "lookup_order is not in the plan (expected step2 (remove_contact))")

    def test_concrete_args(self, contacts: Contacts) -> None:
        """concrete_args fills $refs from recorded results, and says which step has not run yet."""
        tools, _ = contacts
        f = PlanFollower(FIND_THEN_REMOVE, tools)
        with pytest.raises(PlanError, match=r"plan step 2 \(remove_contact\): argument 'person_id': find has not run"):
            f.concrete_args(f.plan.steps[1])
        f.match("search_contacts", {"phone_number": "+1 555 0100"}, ran=True, result='[{"person_id": "p-1"}]')
        assert f.concrete_args(f.plan.steps[1]) == {"person_id": "p-1"}
        assert f.resolve(ref("find")) == [[{"person_id": "p-1"}]]

    def test_kind_reference_resolves_through_the_produced_key(self) -> None:
        """A $ref naming a produced kind finds the value under the key it is bound from."""
        tools = Toolset()
        tools.add_schema("create", None, produces={"order_id": "id"})
        f = PlanFollower([{"tool": "create"}, {"tool": "show", "args": {"o": {"$ref": "step1.order_id"}}}], tools)
        f.match("create", {}, ran=True, result={"order": {"id": "o-9"}})
        assert f.resolve(ref("step1.order_id")) == ["o-9"]


class TestPlannerSupport:
    def test_describe_tools(self, contacts: Contacts) -> None:
        """The tool catalogue names produced kinds, reference arguments, rules and grounded arguments."""
        tools, _ = contacts
        catalogue = {t["name"]: t for t in describe_tools(tools)}
        assert catalogue["search_contacts"]["produces"] == {"person_id": "person_id"}
        assert catalogue["remove_contact"]["references"] == {"person_id": "person_id"}
        assert catalogue["remove_contact"]["invalidates"] == ["person_id"]
        assert catalogue["send_message"]["requires"] == ["cellular service is off; turn it on first"]
        assert catalogue["send_money"]["grounded"] == ["phone_number", "amount"]
        json.dumps(list(catalogue.values()))

    def test_state_summary_is_bounded(self) -> None:
        """The state summary lists a bounded number of facts and references, whatever the state's size."""
        state = TrackedState(facts={f"k{i}": i for i in range(1000)}, exposed=["a"])
        state.ingest([{"person_id": f"p-{i}"} for i in range(1000)], produce={"person_id": "person_id"})
        text = summarize_state(state, limit=5)
        assert "facts: k0=0, k1=1, k2=2, k3=3, k4=4 and 995 more" in text
        assert "references returned so far: person_id 'p-0'" in text and "and 995 more values" in text
        assert len(text) < 600


class TestMethods:
    def test_the_four_variants(self) -> None:
        """The paper's four variants are label values, in ladder order."""
        assert METHODS == (REACT, PROMPT_PLANNING, PLAN_CONDITIONED_REACT, DUAL_LOOP)
        assert METHODS == ("react", "prompt_planning", "plan_conditioned_react", "dual_loop")


def test_plan_type_is_a_sequence_of_steps(contacts: Contacts) -> None:
    """A Plan iterates its steps, has a length, and finds a step by id."""
    plan: Plan = parse_plan(FIND_THEN_REMOVE)
    assert len(plan) == 2 and [s.tool for s in plan] == ["search_contacts", "remove_contact"]
    step = plan.step("find")
    assert step is not None and step.label == "find (search_contacts)" and plan.step("zzz") is None


def test_ref_annotation_kind_is_reused(contacts: Contacts) -> None:
    """Tools declared with Annotated[..., Ref(kind)] are verified through the same reference rules."""
    tools = Toolset()
    tools.add_schema("make", None, produces="token")

    @tools.tool
    def spend(token: Annotated[str, Ref("token")]) -> str:
        """Spend a token."""
        return token

    assert verify_plan(tools, [{"tool": "make"}, {"tool": "spend", "args": {"token": {"$ref": "step1.token"}}}]).approved


def test_dual_loop_example_runs() -> None:
    """examples/dual_loop.py: the first plan is rejected, the revised plan runs, the episode is fully executable."""
    script = Path(__file__).resolve().parent.parent / "examples" / "dual_loop.py"
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, check=True).stdout
    assert "attempt 1: rejected\nattempt 2: approved" in out
    assert "search_contacts produces them" in out
    assert "FED: 3\nfully executable: True\noutcome: success" in out


class TestEpisodeConditioning:
    """An episode carrying the approved plan notes, per recorded action, the step it matched."""

    async def test_actions_note_plan_steps_and_deviations(self) -> None:
        """Followed steps get their index; an unplanned call is a deviation and an invalid call is still a prefix failure."""
        from prefixmon import Monitor, ToolBlocked

        from .conftest import build_contacts

        tools, book = build_contacts()
        plan = [
            {"id": "find", "tool": "search_contacts", "args": {"name": "Fredrik"}},
            {"tool": "remove_contact", "args": {"person_id": {"$ref": "find.person_id"}}},
        ]
        monitor = Monitor(tools, policy="block")
        verdict = verify_plan(monitor.toolset, plan)
        assert verdict.approved
        async with monitor.episode("t", plan=PlanFollower(verdict, monitor.toolset), env=book) as ep:
            await ep.call("search_contacts", {"name": "Fredrik"})
            await ep.call("set_cellular", {"on": True})  # not in the plan
            with pytest.raises(ToolBlocked):
                await ep.call("remove_contact", {"person_id": "made-up"})
            await ep.call("remove_contact", {"person_id": "p-1"})
        rec = ep.record
        assert rec is not None
        assert next(a.plan_step for a in rec.actions) == 1 and rec.actions[3].plan_step == 2
        assert rec.actions[1].deviation is not None and rec.actions[0].deviation is None
        assert rec.fed == 3  # a verified plan followed by an invalid executor call is an ordinary prefix failure


# -- review fixes ---------------------------------------------------------------------------
def _ref_tools() -> Toolset:
    """A producer, an invalidator and reference arguments with ordinary JSON-Schema constraints."""
    tools = Toolset()

    def obj(props: dict[str, Any], required: Sequence[str] = ()) -> dict[str, Any]:
        # closed objects: an unknown argument name is a schema failure only where the schema says so
        return {"type": "object", "properties": props, "required": list(required), "additionalProperties": False}

    tools.add_schema("search", obj({"name": {"type": "string"}}), produces="person_id")
    tools.add_schema("remove", obj({"person_id": {"type": "string"}}), refs={"person_id": "person_id"}, invalidates="person_id")
    tools.add_schema(
        "send",
        obj({"person_id": {"type": "string", "pattern": "^p-[0-9]+$"}, "count": {"type": "integer"}}, ["person_id"]),
        refs={"person_id": "person_id"},
    )
    tools.add_schema(
        "plain_send", obj({"person_id": {"type": "string"}, "count": {"type": "integer"}}), refs={"person_id": "person_id"}
    )
    tools.add_schema("find_order", obj({"q": {"type": "string"}}), produces=[("order_id", "order_id")])
    for name, prop in {
        "pattern": {"type": "string", "pattern": "^ord_[a-z0-9]+$"},
        "exclusive_minimum": {"type": "integer", "exclusiveMinimum": 0},
        "multiple_of": {"type": "integer", "minimum": 1, "multipleOf": 5},
        "nested_pattern": None,
    }.items():
        if prop is None:
            schema = obj(
                {
                    "order": obj({"id": {"type": "string", "pattern": "^ord_[a-z0-9]+$"}, "qty": {"type": "integer"}}),
                    "note": {"type": "string"},
                }
            )
            tools.add_schema("use_" + name, schema, refs={"order.id": "order_id"})
        else:
            tools.add_schema(
                "use_" + name, obj({"order_id": prop, "note": {"type": "string"}}, ["order_id"]), refs={"order_id": "order_id"}
            )

    @tools.tool
    def pay(account: Annotated[str, Field(pattern=r"^acc-[0-9]+$")], amount: int) -> str:
        """Pay."""
        return "ok"

    return tools


FIND_ORDER: dict[str, Any] = {"id": "f", "tool": "find_order", "args": {"q": "x"}}
FRED: dict[str, Any] = {"id": "f", "tool": "search", "args": {"name": "Fred"}}


class TestReferenceArgumentsAndTheSchema:
    """A $ref argument is never rejected by the schema because of the verifier's own placeholder."""

    @pytest.mark.parametrize(
        ("tool", "args"),
        [
            ("use_pattern", {"order_id": {"$ref": "f.order_id"}}),
            ("use_exclusive_minimum", {"order_id": {"$ref": "f.order_id"}}),
            ("use_multiple_of", {"order_id": {"$ref": "f.order_id"}}),
            ("use_nested_pattern", {"order": {"id": {"$ref": "f.order_id"}, "qty": 2}}),
            ("pay", {"account": {"$ref": "f.order_id"}, "amount": 5}),
            ("pay", {"account": {"$ref": "f.order_id"}, "amount": "5"}),  # pydantic's lax coercion still applies
        ],
    )
    def test_constrained_reference_argument_is_executable_or_undetermined(self, tool: str, args: dict[str, Any]) -> None:
        """pattern, exclusiveMinimum and multipleOf on a $ref argument never make the step not executable."""
        tools = _ref_tools()
        verdict = verify_plan(tools, [FIND_ORDER, {"tool": tool, "args": args}], state=state_with(tools))
        step = verdict.steps[1]
        assert verdict.approved and step.executable, step.reason
        if step.status is StepStatus.UNDETERMINED:
            assert any("depends on" in why and "f.order_id" in why for why in step.why_undetermined)

    def test_samples_honour_numeric_bounds(self) -> None:
        """exclusiveMinimum and multipleOf are met by the placeholder sample, so those steps are fully decided."""
        tools = _ref_tools()
        for tool in ("use_exclusive_minimum", "use_multiple_of"):
            verdict = verify_plan(tools, [FIND_ORDER, {"tool": tool, "args": {"order_id": {"$ref": "f.order_id"}}}])
            assert verdict.steps[1].status is StepStatus.EXECUTABLE

    @pytest.mark.parametrize(
        ("plan", "code"),
        [
            ([{"tool": "send", "args": {"person_id": {"$ref": "f.person_id"}}}, FRED], "forward_reference"),
            ([{"id": "me", "tool": "send", "args": {"person_id": {"$ref": "me.person_id"}}}], "forward_reference"),
            ([FRED, {"tool": "send", "args": {"person_id": {"$ref": "g.person_id"}}}], "unknown_step"),
            (
                [
                    {"id": "f", "tool": "search", "args": {"nm": "x"}},
                    {"tool": "send", "args": {"person_id": {"$ref": "f.person_id"}}},
                ],
                "failed_step",
            ),
            (
                [
                    FRED,
                    {"tool": "remove", "args": {"person_id": {"$ref": "f.person_id"}}},
                    {"tool": "send", "args": {"person_id": {"$ref": "f.person_id"}}},
                ],
                "stale_reference",
            ),
        ],
    )
    def test_reference_problems_keep_their_codes(self, plan: list[dict[str, Any]], code: str) -> None:
        """With a pattern on the argument, forward, self, unknown, failed and stale references keep their own codes."""
        tools = _ref_tools()
        verdict = verify_plan(tools, plan, state=state_with(tools))
        assert verdict.steps[-1 if code != "forward_reference" else 0].verdict.code == code

    @pytest.mark.parametrize(
        ("tool", "args", "fragment"),
        [
            (
                "send",
                {"person_id": {"$ref": "f.person_id"}, "count": "many"},
                "count",
            ),
            ("plain_send", {"person_id": {"$ref": "f.person_id"}, "count": "many"}, "count"),
            ("send", {"person_id": {"$ref": "f.person_id"}, "bogus": 1}, "bogus"),
            ("pay", {"account": {"$ref": "f.person_id"}, "amount": "lots"}, "amount"),
            (
                "use_nested_pattern",
                {"order": {"id": {"$ref": "f.person_id"}, "qty": "two"}},
                "qty",
            ),
            (
                "use_pattern",
                {"order_id": {"$ref": "f.person_id"}, "note": 7},
                "note",
            ),
        ],
    )
    def test_literal_arguments_beside_a_reference_are_still_validated(
        self, tool: str, args: dict[str, Any], fragment: str
    ) -> None:
        """A literal argument that fails the schema makes the step not executable, whatever the $ref next to it."""
        tools = _ref_tools()
        tools.add_schema("producer", None, produces=["person_id", "order_id"], replace=False)
        plan = [{"id": "f", "tool": "producer", "args": {}}, {"tool": tool, "args": args}]
        step = verify_plan(tools, plan, state=state_with(tools)).steps[1]
        assert step.status is StepStatus.NOT_EXECUTABLE and step.verdict.code == "invalid_arguments"
        assert fragment in step.reason
        assert "match pattern" not in step.reason and "acc-" not in step.reason  # not the placeholder's own failure


class TestAliasedInvalidation:
    """Invalidating a step's output through one $ref path leaves another path to the same output undecided."""

    def test_other_path_to_an_invalidated_output_is_undetermined(self) -> None:
        """remove(f.contacts[0].person_id) then send(f.person_id): only execution tells whether it is the same id."""
        tools = _ref_tools()
        for removed, used in (("f.contacts[0].person_id", "f.person_id"), ("f.person_id", "f.contacts[0].person_id")):
            plan = [
                FRED,
                {"tool": "remove", "args": {"person_id": {"$ref": removed}}},
                {"tool": "plain_send", "args": {"person_id": {"$ref": used}}},
            ]
            verdict = verify_plan(tools, plan, state=state_with(tools))
            step = verdict.steps[2]
            assert step.status is StepStatus.UNDETERMINED, step.reason
            assert any("remove" in why and "person_id" in why for why in step.why_undetermined)
            assert not verify_plan(tools, plan, state=state_with(tools), allow_undetermined=False).approved

    def test_outputs_of_another_step_are_not_aliased(self) -> None:
        """Invalidating one step's output says nothing about another step's, and the same path is still stale."""
        tools = _ref_tools()
        plan = [
            FRED,
            {"id": "g", "tool": "search", "args": {"name": "Ann"}},
            {"tool": "remove", "args": {"person_id": {"$ref": "f.person_id"}}},
            {"tool": "plain_send", "args": {"person_id": {"$ref": "g.person_id"}}},
            {"tool": "plain_send", "args": {"person_id": {"$ref": "f.person_id"}}},
        ]
        steps = verify_plan(tools, plan, state=state_with(tools)).steps
        assert steps[3].status is StepStatus.EXECUTABLE and steps[4].verdict.code == "stale_reference"


class TestBoundedCost:
    """Feedback and plan following stay proportional to the plan, not to its square."""

    def test_unknown_step_reasons_are_bounded(self) -> None:
        """Each unknown_step reason names at most 10 earlier steps and counts the rest."""
        tools = _ref_tools()
        n = 400
        plan = [{"id": f"s{i}", "tool": "search", "args": {"name": "x"}} for i in range(n)]
        plan += [{"tool": "plain_send", "args": {"person_id": {"$ref": "zz.person_id"}}}] * n
        verdict = verify_plan(tools, plan, state=state_with(tools))
        reasons = [s.reason for s in verdict.rejected]
        assert len(reasons) == n and all(r and len(r) < 300 for r in reasons)
        assert "s0, s1" in reasons[0] and f"and {n - 10} more" in reasons[0]
        assert len(verdict.feedback()) < 1000 * n

    def test_follower_work_per_call_does_not_grow_with_the_plan(self) -> None:
        """Calls outside the plan, and calls of a planned tool with other arguments, compare a bounded number of steps."""

        class Counting(PlanFollower):
            compared = 0

            def _fits(self, step: Any, tool: str, args: Any) -> str | None:
                Counting.compared += 1
                return super()._fits(step, tool, args)

        tools = _ref_tools()
        per_call = []
        for n in (200, 3200):
            f = Counting([{"tool": "search", "args": {"name": str(i)}} for i in range(n)], tools)
            Counting.compared = 0
            for _ in range(20):
                assert f.match("plain_send", {"person_id": "x"}, ran=True).step is None
                m = f.match("search", {"name": "nobody"}, ran=True)
                assert m.step is not None and m.deviation is not None and m.deviation.startswith("arguments differ")
            per_call.append(Counting.compared)
        assert per_call[0] == per_call[1] and per_call[1] <= 20 * 70
        plain = PlanFollower([{"tool": "search", "args": {"name": str(i)}} for i in range(500)], tools)
        m = plain.match("search", {"name": "20"}, ran=True)
        skipped = ", ".join(f"step{i} (search)" for i in range(1, 11))
        assert (m.step, m.deviation) == (21, f"skipped {skipped} and 10 more")
        m = plain.match("search", {"name": "400"})  # beyond the look-ahead: the expected step, with other arguments
        assert m.step == 22 and m.deviation is not None and m.deviation.startswith("arguments differ from step22")


class TestCopyOnWriteInsideContainers:
    """Verification never changes the real state, even through mutable values held in tuples."""

    def test_effect_mutating_inside_a_tuple_does_not_leak(self) -> None:
        """An effect that bumps a counter in a dict held by a tuple fact changes only the view."""
        tools = Toolset()

        def bump(state: TrackedState, args: Any, result: Any) -> None:
            state.facts["meta"][1]["count"] += 1
            state.facts["deep"][0][0].append("x")

        def bumped_once(state: TrackedState, args: Any) -> bool:
            """the counter must have been bumped"""
            return bool(state.facts["meta"][1]["count"] == 1)

        @tools.tool(effects=[bump])
        def buy(item: str) -> str:
            """Buy."""
            return "ok"

        @tools.tool(requires=[bumped_once])
        def check() -> str:
            """Check."""
            return "ok"

        parent = state_with(tools, facts={"meta": ("m", {"count": 0}), "deep": (([],),), "flat": ("a", 1)})
        verdict = verify_plan(tools, [{"tool": "buy", "args": {"item": "b"}}, {"tool": "check", "args": {}}], state=parent)
        assert [s.status for s in verdict.steps] == [StepStatus.EXECUTABLE] * 2  # the view sees its own change
        assert parent.facts == {"meta": ("m", {"count": 0}), "deep": (([],),), "flat": ("a", 1)}


class TestPlannerFailure:
    """A planner that raises ends the loop without losing the attempts already made."""

    async def test_attempts_survive_a_planner_error(self) -> None:
        """The revision records the earlier attempts, the failed call and the planner's exception."""
        tools = _ref_tools()
        calls: list[str | None] = []
        error = TimeoutError("LLM API timed out")

        async def planner(goal: str, specs: Sequence[ToolSpec], summary: str, feedback: str | None) -> PlanLike:
            calls.append(feedback)
            if len(calls) == 3:
                raise error
            return [{"tool": "nope", "args": {}}] if len(calls) == 1 else "not json"

        revision = await revise_plan(planner, "g", tools, budget=5)
        assert len(calls) == 3 and not revision.approved and revision.plan is None
        assert [a.number for a in revision.attempts] == [1, 2, 3]
        assert revision.attempts[0].verdict is not None and revision.attempts[1].error is not None
        last = revision.attempts[2]
        assert last.plan is None and last.verdict is None and last.error == "the planner raised TimeoutError: LLM API timed out"
        assert revision.planner_error is error
        assert revision.labels() == {"plan_attempts": "3", "plan_approved": "false"}
        assert revision.planner_seconds >= 0 and revision.verifier_seconds > 0
