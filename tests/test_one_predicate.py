"""One predicate: a one-step plan is judged exactly as the runtime judges the same call.

Plan verification runs the runtime predicate over a copy-on-write view of the state; for a
plan of one literal step there is nothing a plan adds, so ``verify_plan`` must agree with
``Episode.check`` in executability, cause, code and reason, whatever the toolset, the state
and the preconditions return.
"""

from __future__ import annotations

from typing import Annotated, Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from prefixmon import Grounded, Monitor, Ref, Toolset, Undetermined, verify_plan

RESULTS: list[Any] = [
    True,
    False,
    None,
    0,
    1,
    -2.5,
    "",
    "the seat is taken",
    "x" * 5_000,
    [],
    [1],
    {},
    {"ok": True},
    (0,),
    Undetermined("known only when it runs"),
    ValueError("a buggy precondition"),
]
"""Every kind of precondition result: booleans, None, numbers, strings (empty, short, long), containers,
Undetermined, and an exception the precondition raises."""


def _precondition(index: int, result: Any) -> Any:
    def check(state: Any, args: Any) -> Any:
        if isinstance(result, Exception):
            raise result
        return result

    check.__name__ = f"rule_{index}"
    check.__doc__ = f"rule {index} does not hold"
    return check


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[Toolset, dict[str, Any], dict[str, list[str]], str | None]:
    """A tool with a reference, a grounded and a plain argument and up to three preconditions; a state; arguments."""
    results = draw(st.lists(st.sampled_from(range(len(RESULTS))), max_size=3))
    grounded = draw(st.booleans())
    tools = Toolset()
    requires = [_precondition(i, RESULTS[r]) for i, r in enumerate(results)]

    @tools.tool(produces="item_id")
    def find(name: str) -> list[dict[str, str]]:
        return [{"item_id": "i-1"}]

    if grounded:

        @tools.tool(requires=requires, invalidates="item_id")
        def act(item_id: Annotated[str, Ref("item_id")], note: Annotated[str, Grounded()], count: int = 1) -> str:
            return "ok"

    else:

        @tools.tool(requires=requires, invalidates="item_id")
        def act(item_id: Annotated[str, Ref("item_id")], note: str = "", count: int = 1) -> str:
            return "ok"

    args: dict[str, Any] = {}
    often = st.sampled_from([True, True, True, False])
    rarely = st.sampled_from([True, False, False, False, False, False])
    if draw(often):
        args["item_id"] = draw(st.sampled_from(["i-1", "i-1", "i-1", "i-2", "stale-1", "+1 555 0100", "i-9", 7]))
    if draw(often):
        args["note"] = draw(st.sampled_from(["hello there", "hello there", "invented", "i-1", "hello", 3]))
    if draw(rarely):
        args["count"] = draw(st.sampled_from([1, 2, "two", None]))
    if draw(rarely):
        args["unexpected"] = 1
    bindings = {"item_id": ["i-1", *draw(st.lists(st.sampled_from(["i-2", "stale-1"]), max_size=2, unique=True))]}
    user = draw(st.sampled_from([None, "please act on i-1 and say hello there", "+1 555 0100"]))
    return tools, args, bindings, user


class TestOnePredicate:
    """verify_plan of one step == Episode.check of the same call."""

    @settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(scenarios(), st.sampled_from(["act", "act", "act", "act", "find", "nope"]))
    def test_one_step_plan_equals_the_runtime_check(
        self, scenario: tuple[Toolset, dict[str, Any], dict[str, list[str]], str | None], tool: str
    ) -> None:
        """Executability, cause, code and reason agree for every generated toolset, state and precondition result."""
        tools, args, bindings, user = scenario
        monitor = Monitor(tools)
        episode = monitor.open_episode("t", bindings=bindings)
        if user is not None:
            episode.user(user)
        if "stale-1" in bindings["item_id"]:
            episode.state.invalidate("item_id", "stale-1", by="act")
        call_args = args if tool != "find" else {"name": "x", **{k: v for k, v in args.items() if k == "unexpected"}}
        runtime = episode.check(tool, call_args)
        event(f"{runtime.code or 'executable'}{' +undetermined' if runtime.undetermined else ''}")
        planned = verify_plan(tools, [{"tool": tool, "args": call_args}], state=episode.state).steps[0].verdict
        assert (planned.executable, planned.cause, planned.code, planned.reason) == (
            runtime.executable,
            runtime.cause,
            runtime.code,
            runtime.reason,
        )
        assert [f.code for f in planned.failures] == [f.code for f in runtime.failures]
        assert set(runtime.undetermined) <= set(planned.undetermined)  # a plan also counts a raising rule as undecided

    def test_truthy_results_hold_and_long_messages_are_capped_in_both(self) -> None:
        """The two divergences of old: ``1`` / ``[1]`` hold in both, and a 5,000-character message is capped in both."""
        tools = Toolset()

        @tools.tool(requires=[_precondition(0, 1), _precondition(1, [1]), _precondition(2, "y" * 5_000)])
        def go() -> str:
            return "ok"

        episode = Monitor(tools).open_episode("t")
        runtime = episode.check("go", {})
        planned = verify_plan(tools, [{"tool": "go"}]).steps[0].verdict
        assert runtime.code == planned.code == "precondition:rule_2"
        assert runtime.reason == planned.reason
        assert len(planned.reason) < 2_100 and planned.reason.endswith("[3000 more characters]")
