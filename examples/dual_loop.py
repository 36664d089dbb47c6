"""Dual loop: a planner proposes, the verifier rejects with feedback, the planner revises, and
only the approved plan is executed.

The planner first plans to remove Fredrik by his phone number. The verifier (the runtime
predicate, run symbolically over the episode's state; no tool runs) rejects the step: a
person id must come from an earlier result, and search_contacts produces them. The revised
plan searches first and removes the contact by ``{"$ref": "find.person_id"}``. The executor
then follows the approved plan, and the executed episode is fully executable: the planner's
mistake never reached the environment, and planning never counted as an action.

Run: ``python examples/dual_loop.py``.
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import anyio

from prefixmon import Monitor, ToolSpec
from prefixmon.plan import DUAL_LOOP, PlanFollower, PlanLike, revise_plan

sys.path.insert(0, str(Path(__file__).resolve().parent))
from contact_repair import CONTACTS, build_toolset  # the same tool layer as the contact repair example

GOAL = "Remove Fredrik from my contacts, his number is +1 555 0100"


async def scripted_planner(goal: str, tools: Sequence[ToolSpec], state: str, feedback: str | None) -> PlanLike:
    """Stands in for a language-model planner: a first plan, then a revision that follows the feedback."""
    print(f"planner sees {len(tools)} tools; state summary: {state.splitlines()[0]}")
    if feedback is None:
        return [{"tool": "remove_contact", "args": {"person_id": "+1 555 0100"}}]
    print(f"planner is told:\n  {feedback.replace(chr(10), chr(10) + '  ')}")
    if "search_contacts" in feedback:
        return """[
            {"id": "find", "tool": "search_contacts", "args": {"phone_number": "+1 555 0100"}},
            {"tool": "remove_contact", "args": {"person_id": {"$ref": "find.person_id"}}}
        ]"""
    raise RuntimeError("the scripted planner has no other revision")


async def main() -> None:
    records = Path(tempfile.mkdtemp(prefix="prefixmon-")) / "dual_loop.jsonl"
    tools = build_toolset()
    monitor = Monitor(tools, policy="block", sink=records)
    async with monitor.episode(task_id="remove-fredrik", labels={"model": "scripted", "method": DUAL_LOOP}, env=CONTACTS) as ep:
        ep.user(GOAL)

        # Outer loop: plan, verify, revise (method-side cost; nothing runs, depth stays 0).
        revision = await revise_plan(scripted_planner, GOAL, tools, state=ep.state)
        assert ep.depth == 0
        for attempt in revision.attempts:
            print(f"attempt {attempt.number}: {'approved' if attempt.approved else 'rejected'}")
        if revision.planner_error is not None:  # the planner itself failed: not a verdict on a plan
            raise revision.planner_error
        if revision.plan is None:
            raise SystemExit("no plan was approved within the budget")
        ep.labels.update(revision.labels())

        # Inner loop: the executor follows the approved plan; the monitor checks every call.
        # The episode follows the plan: each recorded action notes its plan step and any deviation.
        follower = PlanFollower(revision.plan, tools)
        ep.follow(follower)
        while (step := follower.next_step) is not None:
            args = follower.concrete_args(step)
            await ep.call(step.tool, args, call_id=f"call-{step.index}")
            action = ep.actions[-1]
            print(f"executed {step.label} with {args}: plan step {action.plan_step}, deviation: {action.deviation}")
        ep.finish("success" if "p-7f3a" not in CONTACTS else "failure")

    record = ep.record
    assert record is not None
    print(f"horizon: {record.horizon}")
    print(f"FED: {record.fed}")
    print(f"fully executable: {record.executable}")
    print(f"outcome: {record.outcome}")
    print(f"labels: {record.labels}")
    print(f"record: {records}")


if __name__ == "__main__":
    anyio.run(main)
