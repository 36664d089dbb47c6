"""prefixmon tool specs for every BFCL multi-turn function, and the driver of one task.

:func:`build_toolset` turns BFCL's function docs into JSON-Schema tools (BFCL type names
mapped: ``dict`` -> ``object``, ``float`` -> ``number``, ``tuple`` -> ``array``, ``any`` -> no
constraint; a ``None`` default, written ``"None"`` by BFCL, admits ``null``; defaults are not
copied, so nothing is filled in that the model did not send), with reference arguments (ids an earlier
result or the user must supply), the results that produce them, post-call acceptance from
the environment's error results, and preconditions in one of three modes:

- ``"declared"``: the rules of :mod:`.rules`, read over the live environment (``state.env``);
- ``"dry_run"``: run the call on a deep copy of its environment instance and accept only
  what the real one would accept (no reference checks: the copy decides);
- ``"none"``: schema, exposure and post-call acceptance only.

:func:`run_task` replays per-turn calls through a monitor episode on a task's environment:
per-turn exposure (``missed_function``), user messages into the information pool, every
call judged and executed (the policy decides what runs), the rollout kept after the first
failure.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache, partial
from typing import Any, Final, Literal

from prefixmon import Episode, Monitor, Precondition, Ref, SpecError, ToolBlocked, Toolset, ToolSpec, TrackedState, dry_run

from .data import BfclTask, function_docs, functions_of
from .env import BfclCall, BfclEnv, bfcl_error_text, bfcl_result_text, invoke, rejection
from .perturb import REFERENCE_ARGS
from .rules import RULES, Rule

__all__ = (
    "INVALIDATES",
    "MODES",
    "PRODUCES",
    "Mode",
    "TaskRun",
    "build_toolset",
    "dry_run_precondition",
    "exposed_at",
    "initial_references",
    "json_schema",
    "run_task",
)

Mode = Literal["declared", "dry_run", "none"]
MODES: Final = ("declared", "dry_run", "none")

_TYPES: Final[Mapping[str, str | None]] = {
    "dict": "object",
    "object": "object",
    "float": "number",
    "number": "number",
    "integer": "integer",
    "int": "integer",
    "string": "string",
    "str": "string",
    "boolean": "boolean",
    "bool": "boolean",
    "array": "array",
    "list": "array",
    "tuple": "array",
    "any": None,
}

PRODUCES: Final[Mapping[str, Sequence[tuple[str, str]]]] = {
    "post_tweet": (("tweet_id", "id"),),
    "get_tweet": (("tweet_id", "id"),),
    "get_user_tweets": (("tweet_id", "id"),),
    "search_tweets": (("tweet_id", "id"),),
    "create_ticket": (("ticket_id", "id"),),
    "get_ticket": (("ticket_id", "id"),),
    "get_user_tickets": (("ticket_id", "id"),),
    "place_order": (("order_id", "order_id"),),
    "get_order_history": (("order_id", "history"),),
    "book_flight": (("booking_id", "booking_id"),),
    "register_credit_card": (("card_id", "card_id"),),
    "authenticate_travel": (("access_token", "access_token"),),
    "get_user_id": (("user_id", "user_id"),),
    "add_contact": (("user_id", "user_id"),),
    "search_messages": (("user_id", "receiver_id"),),
    "delete_message": (("user_id", "receiver_id"),),
}
"""Function -> (reference kind, result key): values under the key become usable ids."""

_KEYED: Final[Mapping[str, tuple[str, str]]] = {
    "get_booking_history": ("booking_id", "booking_history"),
    "book_flight": ("booking_id", "booking_history"),
    "get_all_credit_cards": ("card_id", "credit_card_list"),
    "view_messages_sent": ("user_id", "messages"),
}
"""Function -> (kind, result key) where the ids are the keys of a mapping in the result."""

INVALIDATES: Final[Mapping[str, str]] = {"cancel_booking": "booking_id"}
"""Function -> the reference kind whose argument value is gone after success."""


class _ParamSchemaError(SpecError):
    pass


def json_schema(bfcl: Mapping[str, Any], *, where: str) -> dict[str, Any]:
    """A JSON Schema from a BFCL parameter schema (BFCL's type names mapped)."""
    out: dict[str, Any] = {}
    tname = bfcl.get("type")
    if tname is not None:
        if tname not in _TYPES:
            raise _ParamSchemaError(f"{where}: unknown BFCL type {tname!r}")
        mapped = _TYPES[tname]
        if mapped is not None:
            out["type"] = mapped
    if "description" in bfcl:
        out["description"] = bfcl["description"]
    if "enum" in bfcl:
        out["enum"] = list(bfcl["enum"])
    if "properties" in bfcl:
        out["properties"] = {k: json_schema(v, where=f"{where}.{k}") for k, v in bfcl["properties"].items()}
        if tname in ("dict", "object") and where.count(".") > 0:
            out["additionalProperties"] = True
    if "required" in bfcl:
        out["required"] = list(bfcl["required"])
    if "items" in bfcl:
        out["items"] = json_schema(bfcl["items"], where=f"{where}[]")
    # BFCL writes Python's None as the string "None". The default itself is left out:
    # a validator that fills defaults in would change what runs (find(name="None")).
    if "default" in bfcl and bfcl["default"] in (None, "None") and "type" in out:
        out["type"] = [out["type"], "null"]
    return out


def _declared(rule: Rule) -> Precondition:
    def check(state: TrackedState, args: Mapping[str, Any]) -> str | None:
        return None if state.env is None else rule(state.env, args)

    return Precondition(check=check, name=getattr(rule, "__name__", "rule"))


def dry_run_precondition(function: str) -> Precondition:
    """The core dry-run precondition, snapshotting only the class instance that owns ``function``.

    The copy, not the live environment, takes the call; the call is accepted only when the
    copy accepts it (no exception, no error result). Costs one ``deepcopy`` of one instance.
    """
    return dry_run(
        partial(invoke, function=function),
        snapshot=lambda env: copy.deepcopy(env.instance_of(function)),
        error_result=partial(rejection, function),
    )


def _bind_keys(kind: str, key: str) -> Callable[[Any, Mapping[str, Any], Any], None]:
    def bind_keys(state: Any, args: Mapping[str, Any], result: Any) -> None:
        mapping = result.get(key) if isinstance(result, Mapping) else None
        if isinstance(mapping, Mapping):
            for k in mapping:
                state.bind(kind, k)

    return bind_keys


def build_toolset(mode: Mode = "declared") -> Toolset:
    """Specs for every multi-turn function of the eight BFCL classes.

    Args:
        mode: ``"declared"``, ``"dry_run"`` or ``"none"`` (see the module docstring).

    Returns:
        a new toolset (the caller may extend it) of specs made once per process and mode.

    Raises:
        SpecError: an unknown mode.
    """
    if mode not in MODES:
        raise SpecError(f"unknown precondition mode {mode!r}; expected one of {', '.join(MODES)}")
    return Toolset(_specs(mode))


@cache
def _specs(mode: Mode) -> tuple[ToolSpec, ...]:
    """Every function's spec in ``mode``, its JSON Schema compiled once per process (specs are immutable)."""
    tools = Toolset()
    for cls_name, docs in function_docs().items():
        for doc in docs:
            name = doc["name"]
            params = json_schema(doc.get("parameters", {"type": "dict", "properties": {}}), where=f"{cls_name}.{name}")
            params["type"] = "object"
            requires: tuple[Precondition, ...] = ()
            refs: dict[str, Ref] = {}
            if mode == "declared":
                requires = tuple(_declared(r) for r in RULES.get(name, ()))
                refs = {arg: Ref(kind, user=True) for arg, kind in REFERENCE_ARGS.get(name, {}).items()}
            elif mode == "dry_run":
                requires = (dry_run_precondition(name),)
            keyed = _KEYED.get(name)
            tools.add_schema(
                name,
                params,
                description=doc.get("description", ""),
                requires=requires,
                refs=refs,
                produces=list(PRODUCES.get(name, ())),
                effects=(_bind_keys(*keyed),) if keyed else (),
                invalidates=INVALIDATES.get(name),
                error_result=partial(rejection, name),
                metadata={"bfcl_class": cls_name},
                # the environment calls a Python function with the arguments: no coercion, and an
                # unknown keyword raises TypeError
                coercion="strict",
                unknown="forbid",
            )
    return tuple(tools)


# -- one task through a monitor ------------------------------------------------------------


@dataclass(slots=True, kw_only=True)
class TaskRun:
    """What happened when one task's calls went through a monitor episode."""

    episode: Episode
    env: BfclEnv
    results: list[list[str]] = field(default_factory=list)
    """Per turn, every call's result as BFCL's checker records it."""


def initial_references(env: BfclEnv) -> Iterable[tuple[str, Any]]:
    """The ids the task's scenario already holds, as ``(kind, value)``.

    BFCL's ground truth uses them without looking them up (``USR003`` for Catherine, order
    12446, booking ``flight_001``): they are part of the world the agent is dropped into,
    so they count as given before the episode. Invented ids (in none of these records and
    never produced by a call) and ids an earlier call invalidated still fail.
    """
    msg, tb, tk, tw, tr = (env.get(c) for c in ("MessageAPI", "TradingBot", "TicketAPI", "TwitterAPI", "TravelAPI"))
    if msg is not None:
        yield from (("user_id", v) for v in msg.user_map.values())
    if tb is not None:
        yield from (("order_id", k) for k in tb.orders)
    if tk is not None:
        yield from (("ticket_id", t["id"]) for t in tk.ticket_queue if isinstance(t, dict) and "id" in t)
    if tw is not None:
        yield from (("tweet_id", k) for k in tw.tweets)
    if tr is not None:
        yield from (("booking_id", k) for k in tr.booking_record)
        yield from (("card_id", k) for k in tr.credit_card_list)
        if tr.access_token is not None:
            yield ("access_token", tr.access_token)


def exposed_at(task: BfclTask, turn: int) -> list[str]:
    """The functions offered at ``turn`` (the involved classes' minus those held out)."""
    held = task.held_out(turn)
    return [f for f in functions_of(task.involved_classes) if f not in held]


def _user_texts(turn: Iterable[Mapping[str, Any]]) -> Iterable[str]:
    for message in turn:
        content = message.get("content") if isinstance(message, Mapping) else None
        if isinstance(content, str) and message.get("role", "user") == "user":
            yield content


async def run_task(
    monitor: Monitor,
    task: BfclTask,
    turns: Sequence[Sequence[BfclCall]],
    *,
    labels: Mapping[str, str] | None = None,
    episode_id: str | None = None,
    on_call: Callable[[Episode, BfclCall, BfclEnv], None] | None = None,
    after_turn: Callable[[int, TaskRun], None] | None = None,
    finish: Callable[[TaskRun], str | None] | None = None,
) -> TaskRun:
    """Replay ``turns`` of calls for ``task`` through ``monitor`` on a fresh environment.

    Turns beyond the task's are played with the last turn's exposure; user messages of
    each turn are added to the information pool before its calls.

    Args:
        on_call: called before each call is emitted (e.g. to take a pre-call verdict).
        after_turn: called after each turn's calls with the turn index.
        finish: called after the last call, before the record is written; returns the
            outcome (``success`` / ``partial`` / ``failure``) or ``None``.
    """
    env = BfclEnv(task)
    known: dict[str, list[Any]] = {}
    for kind, value in initial_references(env):
        known.setdefault(kind, []).append(value)
    async with monitor.episode(
        task_id=task.id, labels=labels or {}, episode_id=episode_id, env=env, exposed=exposed_at(task, 0), bindings=known
    ) as ep:
        run = TaskRun(episode=ep, env=env)
        for t, calls in enumerate(turns):
            if t > 0:
                ep.next_turn(exposed=exposed_at(task, min(t, len(task.turns) - 1)))
            if t < len(task.turns):
                for text in _user_texts(task.turns[t]):
                    ep.user(text)
            turn_results: list[str] = []
            for call in calls:
                if on_call is not None:
                    on_call(ep, call, env)
                turn_results.append(await _emit(ep, env, call))
            run.results.append(turn_results)
            if after_turn is not None:
                after_turn(t, run)
        if finish is not None:
            outcome = finish(run)
            if outcome is not None:
                ep.finish(outcome)
    return run


async def _emit(ep: Episode, env: BfclEnv, call: BfclCall) -> str:
    name = call.name

    def execute(args: dict[str, Any]) -> Any:
        return env.run(name, args)

    try:
        args = call.args if isinstance(call.args, str) else dict(call.args)
        result = await ep.call(name, args, execute=execute)
    except ToolBlocked:
        return bfcl_error_text(NameError(f"name {name!r} is not defined"))
    except KeyError as e:  # a function of a class this task does not involve
        return bfcl_error_text(NameError(str(e)))
    except Exception as e:  # the environment raised; the episode has recorded it
        return bfcl_error_text(e)
    return bfcl_result_text(result)
