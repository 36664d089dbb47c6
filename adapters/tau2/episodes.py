"""Driving monitored episodes on a real τ² environment: one call, a task's gold actions.

Every call is judged pre-call by the monitor, then run on the real environment (the
rollout goes on after a failure, as an observing monitor lets it). A call the user makes
on their own phone (telecom's dual control, ``requestor="user"``) is the user's action:
with ``user_actions="include"`` it is an action of the episode (its call id starts with
``user:``), with ``"exclude"`` it still runs and its result is information, but it is not
an action, so the metrics are the agent's alone. Episodes carry the label
``user_actions`` (``include`` / ``exclude``) so both can be reported side by side.

The calls of one message (:func:`steps`) are judged as one batch (``Episode.begin_batch``:
each against the state before the message, see docs/batches.md), then run on the
environment one after another in message order, unless the message is a *recorded
sequence* (a call uses a value only an earlier call of the same message returned: an agent
loop that recorded several rounds as one message), which is judged and run call by call.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Literal

from prefixmon import Episode, EpisodeRecord, Monitor, PendingCall, ToolBlocked, ToolCall, TrackedState
from prefixmon.records.jsonlines import too_deep

from ..taubench.gold import read_user_records
from ..transcripts import _recorded_sequence
from .env import Domain, Outcome, Requestor, Tau2Env
from .rules import refusal

if TYPE_CHECKING:
    from tau2.data_model.tasks import Task  # type: ignore[import-untyped]

__all__ = (
    "USER_ACTIONS",
    "GoldEpisode",
    "StepCall",
    "Steps",
    "UserActions",
    "context_reads",
    "instructions",
    "run_gold",
    "seed_context",
    "step",
    "steps",
)

UserActions = Literal["include", "exclude"]
USER_ACTIONS: Final[tuple[UserActions, ...]] = ("include", "exclude")


@dataclass(frozen=True, slots=True, kw_only=True)
class Step:
    """One call as it ran."""

    outcome: Outcome
    rejected: str | None
    """Why the environment rejected it (τ²'s error flag or a refusal text), else ``None``."""


def _ingest(state: TrackedState, ep: Episode, name: str, content: str) -> None:
    spec = ep.monitor.toolset.get(name)
    produce = {p.key: p.kind for p in spec.produces} if spec is not None else {}
    state.ingest(content, produce=produce, tool=name)


def _parsed(arguments: Mapping[str, Any] | str | None) -> Mapping[str, Any] | str | None:
    """The call's arguments as a mapping when they are JSON text (else as they are, or ``None``)."""
    if isinstance(arguments, str):
        try:  # text nested too deeply is no arguments, as text that does not parse (the monitor says why)
            return None if too_deep(arguments) else json.loads(arguments) if arguments.strip() else {}
        except ValueError:  # not JSON, or an integer past Python's digit limit
            return None
    return arguments


async def step(
    ep: Episode,
    env: Tau2Env,
    name: str,
    arguments: Mapping[str, Any] | str | None,
    *,
    requestor: Requestor | None = None,
    call_id: str | None = None,
    recorded: str | None = None,
    user_actions: UserActions = "include",
) -> Step:
    """Judge one call (unless it is the user's and excluded), run it on ``env``, apply the result.

    Args:
        recorded: the result a replayed transcript recorded; the episode is given that
            result, and the environment is still advanced by running the call.
    """
    side = requestor if requestor is not None else env.requestor(name)
    args = _parsed(arguments)
    if side == "user" and user_actions == "exclude":
        outcome = env.run(name, args if isinstance(args, Mapping) else {}, requestor="user", call_id=call_id or "")
        _ingest(ep.state, ep, name, recorded if recorded is not None else outcome.content)
        return Step(outcome=outcome, rejected=refusal(name, outcome.content, outcome.error))
    try:
        pending: PendingCall | ToolBlocked = await ep.begin(name, arguments, call_id=_action_id(side, call_id))
    except ToolBlocked as blocked:
        pending = blocked
    return _run(env, pending, name, args, side, call_id, recorded)


def _action_id(side: Requestor, call_id: str | None) -> str | None:
    return f"user:{call_id or ''}" if side == "user" else call_id


def _run(
    env: Tau2Env,
    pending: PendingCall | ToolBlocked,
    name: str,
    args: Mapping[str, Any] | str | None,
    side: Requestor,
    call_id: str | None,
    recorded: str | None,
) -> Step:
    """Run an admitted call on ``env`` (a refused one too: the recorded run went on) and apply its result."""
    run_args = pending.args if isinstance(pending, PendingCall) else args
    outcome = env.run(name, run_args if isinstance(run_args, Mapping) else {}, requestor=side, call_id=call_id or "")
    if isinstance(pending, PendingCall):
        pending.done(recorded if recorded is not None else outcome.content)
    return Step(outcome=outcome, rejected=refusal(name, outcome.content, outcome.error))


@dataclass(frozen=True, slots=True, kw_only=True)
class StepCall:
    """One call of a message, as :func:`steps` takes it."""

    name: str
    arguments: Mapping[str, Any] | str | None
    requestor: Requestor | None = None
    call_id: str | None = None
    recorded: str | None = None
    """The result a replayed transcript recorded (see :func:`step`)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Steps:
    """The calls of one message as they ran."""

    steps: tuple[Step, ...]
    batch: bool
    """Whether they were judged as one batch."""
    recorded_sequence: bool
    """Whether the message (of several calls) was a recorded sequence, judged call by call."""


async def steps(ep: Episode, env: Tau2Env, calls: Sequence[StepCall], *, user_actions: UserActions = "include") -> Steps:
    """Judge the calls of one message as one batch, then run them on ``env`` in message order.

    Judged call by call instead (:func:`step`): a single call, a message whose calls are not
    all judged (the user's, excluded) or come from both sides, and a recorded sequence: a
    call uses a value that only an earlier call of the message returned (by the recorded
    results), which a model emitting the calls together could not have seen.
    """
    sides = [c.requestor if c.requestor is not None else env.requestor(c.name) for c in calls]
    judged = len(calls) > 1 and len(set(sides)) == 1 and not (sides[0] == "user" and user_actions == "exclude")
    emitted = [(ToolCall(name=c.name, args=c.arguments, call_id=c.call_id), c.recorded) for c in calls] if judged else []
    sequence = judged and _recorded_sequence(ep, emitted)
    if not judged or sequence:
        done = [
            await step(
                ep, env, c.name, c.arguments, requestor=side, call_id=c.call_id, recorded=c.recorded, user_actions=user_actions
            )
            for c, side in zip(calls, sides, strict=True)
        ]
        return Steps(steps=tuple(done), batch=False, recorded_sequence=sequence)
    begun = await ep.begin_batch(
        [(c.name, c.arguments, _action_id(side, c.call_id)) for c, side in zip(calls, sides, strict=True)]
    )
    ran = tuple(
        _run(env, pending, c.name, _parsed(c.arguments), side, c.call_id, c.recorded)
        for c, side, pending in zip(calls, sides, begun, strict=True)
    )
    return Steps(steps=ran, batch=True, recorded_sequence=False)


def instructions(task: Task) -> str:
    """What the user knows: the task's user scenario as τ² gives it to its user simulator."""
    scenario = task.user_scenario
    return str(scenario) if scenario is not None else ""


_READS: Final[Mapping[Domain, tuple[str, ...]]] = {
    "airline": ("get_user_details", "get_reservation_details"),
    "retail": ("get_user_details", "get_order_details", "get_product_details"),
    "telecom": (),
}


def _task_users(twin: Tau2Env, actions: Sequence[Any]) -> set[str]:
    user_ids = {a.arguments["user_id"] for a in actions if "user_id" in a.arguments}
    for order_id in (a.arguments.get("order_id") for a in actions):
        order = None if order_id is None else dict.get(twin.db.orders, order_id)
        if order is not None:
            user_ids.add(order.user_id)
    for reservation_id in (a.arguments.get("reservation_id") for a in actions):
        airline = twin.domain == "airline" and reservation_id is not None
        reservation = dict.get(twin.db.reservations, reservation_id) if airline else None
        if reservation is not None:
            user_ids.add(reservation.user_id)
    return user_ids


def context_reads(env: Tau2Env, task: Task) -> list[tuple[str, dict[str, Any], str]]:
    """The reads an agent makes before the gold actions, with their results: (tool, arguments, result).

    τ²'s gold actions keep the writes and few of the reads: the user's details, their
    reservations or orders, those orders' products and a direct-flight search for every
    segment a gold booking or flight change uses (in retail, when no gold action looks the
    user up, first ``find_user_id_by_name_zip``); in telecom, the customer looked up by
    the phone number of the user's phone, their lines and bills. They run on a copy of
    ``env`` (in the task's initial state); reads the environment rejects are left out.
    """
    twin = env.fork()
    actions = list(task.evaluation_criteria.actions or ()) if task.evaluation_criteria is not None else []
    reads: list[tuple[str, dict[str, Any], str]] = []

    def read(name: str, **kwargs: Any) -> Any:
        outcome = twin.run(name, kwargs)
        if outcome.error:
            return None
        reads.append((name, kwargs, outcome.content))
        try:
            return json.loads(outcome.content)
        except json.JSONDecodeError:  # a bare id (find_user_id_by_*)
            return outcome.content

    if env.domain == "telecom":
        phone = twin.user_db.surroundings.phone_number if twin.user_db is not None else None
        customer = None if phone is None else read("get_customer_by_phone", phone_number=phone)
        for line_id in customer.get("line_ids", ()) if customer else ():
            read("get_details_by_id", id=line_id)
        if customer:
            read("get_bills_for_customer", customer_id=customer["customer_id"])
        return reads
    if env.domain == "airline":
        for action in actions:
            for segment in action.arguments.get("flights", ()) if isinstance(action.arguments.get("flights"), list) else ():
                flight = dict.get(twin.db.flights, segment.get("flight_number")) if isinstance(segment, dict) else None
                if flight is not None:
                    read("search_direct_flight", origin=flight.origin, destination=flight.destination, date=segment.get("date"))
    looked_up = any(a.name.startswith("find_user_id") for a in actions)
    for user_id in sorted(_task_users(twin, actions)):
        profile = dict.get(twin.db.users, user_id) if env.domain == "retail" and not looked_up else None
        if profile is not None:  # retail users are found by name and zip code before anything else
            name = profile.name
            read("find_user_id_by_name_zip", first_name=name.first_name, last_name=name.last_name, zip=profile.address.zip)
        user = read("get_user_details", user_id=user_id)
        if user is not None:
            read_user_records(read, env.domain, user)
    return reads


def seed_context(ep: Episode, env: Tau2Env, task: Task) -> None:
    """Give the episode what an agent reads before the gold actions (:func:`context_reads`), at depth 0."""
    if env.domain != "telecom":
        actions = list(task.evaluation_criteria.actions or ()) if task.evaluation_criteria is not None else []
        for user_id in sorted(_task_users(env, actions)):
            ep.state.bind("user_id", user_id, tool="task", depth=0)
    for name, _, content in context_reads(env, task):
        _ingest(ep.state, ep, name, content)


@dataclass(frozen=True, slots=True, kw_only=True)
class GoldEpisode:
    """One task's gold actions through the monitor on the real environment."""

    task_id: str
    record: EpisodeRecord
    rejected: tuple[tuple[int, str, str], ...]
    """(position in the gold sequence, tool, why) of each gold action the environment rejected."""
    depths: tuple[int, ...]
    """Episode depth of each gold action (0 when it was the user's and not an action)."""


async def run_gold(
    monitor: Monitor,
    domain: Domain,
    task: Task,
    *,
    user_actions: UserActions = "include",
    labels: Mapping[str, str] | None = None,
) -> GoldEpisode:
    """Run ``task``'s gold actions through ``monitor`` (policy observe) on a fresh environment."""
    env = Tau2Env.for_task(domain, task)
    actions: Sequence[Any] = (task.evaluation_criteria.actions or ()) if task.evaluation_criteria is not None else ()
    rejected: list[tuple[int, str, str]] = []
    depths: list[int] = []
    async with monitor.episode(
        task_id=f"tau2-{domain}/{task.id}",
        labels={"dataset": f"tau2-{domain}", "domain": f"tau2-{domain}", "method": "gold", "user_actions": user_actions}
        | dict(labels or {}),
        env=env,
        allows_no_tool=not any(a.requestor == "assistant" or user_actions == "include" for a in actions),
    ) as ep:
        ep.inform(env.environment.get_policy())
        ep.user(instructions(task))
        seed_context(ep, env, task)
        for position, action in enumerate(actions, start=1):
            before = ep.depth
            result = await step(
                ep,
                env,
                action.name,
                action.arguments,
                requestor=action.requestor,
                call_id=action.action_id,
                user_actions=user_actions,
            )
            depths.append(ep.depth if ep.depth != before else 0)
            if result.rejected is not None:
                rejected.append((position, action.name, result.rejected))
        ep.finish("success")
    assert ep.record is not None
    return GoldEpisode(task_id=task.id, record=ep.record, rejected=tuple(rejected), depths=tuple(depths))
