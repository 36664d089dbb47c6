"""Perturbations of BFCL ground truth, and their labels from actually executing them.

Five families, each a small edit of a task's ground-truth call sequence:

- ``drop``: remove one call;
- ``swap``: exchange two adjacent, different calls of one turn;
- ``corrupt_type``: give one argument a value of the wrong type;
- ``early_tool``: call a held-out function (``miss_func``) one turn before it is offered;
- ``invent_id``: replace a reference argument (tweet, ticket, order, booking, card, user id,
  access token) by a value no earlier result produced and the environment does not hold.

:func:`execute` labels any call sequence by running it on a fresh environment: a call fails
when the runtime would refuse it (the function is not offered at that turn, or its
arguments do not bind to the class's own signature and annotations) or when the
environment rejects it (an exception or an error result, see :func:`~.env.rejection`).
Every call is executed whatever happened before, so the rollout after a failure is the
one the agent would have produced.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from .data import BfclTask
from .env import BfclCall, BfclEnv, argument_problem, parse_calls, rejection
from .rules import first_violation

__all__ = (
    "FAMILIES",
    "REFERENCE_ARGS",
    "CallLabel",
    "Execution",
    "Variant",
    "execute",
    "ground_truth_calls",
    "offered",
    "perturb",
)

FAMILIES: Final = ("drop", "swap", "corrupt_type", "early_tool", "invent_id")
"""Perturbation families, in report order."""

REFERENCE_ARGS: Final[Mapping[str, Mapping[str, str]]] = {
    "retweet": {"tweet_id": "tweet_id"},
    "comment": {"tweet_id": "tweet_id"},
    "mention": {"tweet_id": "tweet_id"},
    "get_tweet": {"tweet_id": "tweet_id"},
    "get_tweet_comments": {"tweet_id": "tweet_id"},
    "get_ticket": {"ticket_id": "ticket_id"},
    "close_ticket": {"ticket_id": "ticket_id"},
    "resolve_ticket": {"ticket_id": "ticket_id"},
    "edit_ticket": {"ticket_id": "ticket_id"},
    "get_order_details": {"order_id": "order_id"},
    "cancel_order": {"order_id": "order_id"},
    "retrieve_invoice": {"access_token": "access_token", "booking_id": "booking_id"},
    "cancel_booking": {"access_token": "access_token", "booking_id": "booking_id"},
    "purchase_insurance": {"access_token": "access_token", "booking_id": "booking_id", "card_id": "card_id"},
    "contact_customer_support": {"booking_id": "booking_id"},
    "get_credit_card_balance": {"access_token": "access_token", "card_id": "card_id"},
    "book_flight": {"access_token": "access_token", "card_id": "card_id"},
    "register_credit_card": {"access_token": "access_token"},
    "get_booking_history": {"access_token": "access_token"},
    "set_budget_limit": {"access_token": "access_token"},
    "message_login": {"user_id": "user_id"},
    "send_message": {"receiver_id": "user_id"},
    "delete_message": {"receiver_id": "user_id"},
}
"""Function -> {argument: reference kind}: ids an earlier result (or the user) must supply."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Variant:
    """One call sequence to judge: the ground truth or a perturbation of it."""

    task: BfclTask
    family: str
    """``ground_truth`` or one of :data:`FAMILIES`."""
    note: str
    """What was changed, for reports."""
    turns: tuple[tuple[BfclCall, ...], ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class CallLabel:
    """What executing one call showed."""

    depth: int
    turn: int
    call: BfclCall
    refused: str | None
    """Why the runtime refused it (not offered, arguments do not bind), else ``None``."""
    rejected: str | None
    """Why the environment rejected it (exception or error result), else ``None``."""
    reached: bool
    """Whether the call reached the environment (offered, binding arguments)."""
    declared: str | None = None
    """Prediction of the declared rules before the call (only for calls that reached it)."""

    @property
    def failed(self) -> bool:
        """Whether the call is not executable by the execution label."""
        return self.refused is not None or self.rejected is not None


@dataclass(frozen=True, slots=True, kw_only=True)
class Execution:
    """The execution label of a whole variant."""

    calls: tuple[CallLabel, ...]
    final: BfclEnv = field(repr=False)

    @property
    def horizon(self) -> int:
        """Number of calls (T)."""
        return len(self.calls)

    @property
    def fed(self) -> int:
        """Depth of the first failing call, ``T + 1`` when every call executed."""
        return next((c.depth for c in self.calls if c.failed), len(self.calls) + 1)

    @property
    def first(self) -> CallLabel | None:
        """The first failing call, if any."""
        return next((c for c in self.calls if c.failed), None)


def ground_truth_calls(task: BfclTask) -> tuple[tuple[BfclCall, ...], ...]:
    """The task's ground truth, parsed (positional arguments named)."""
    return tuple(
        tuple(c for text in turn for c in parse_calls(text, where=f"{task.id} ground truth turn {t}"))
        for t, turn in enumerate(task.ground_truth)
    )


def offered(task: BfclTask, env: BfclEnv, name: str, turn: int) -> bool:
    """Whether ``name`` is among the functions the model is given at ``turn``."""
    return name in env and name not in task.held_out(turn)


def execute(task: BfclTask, turns: Sequence[Sequence[BfclCall]], *, predict: bool = False) -> Execution:
    """Run ``turns`` on a fresh environment and label every call.

    Args:
        predict: also record the declared rules' prediction before each call that reaches
            the environment.
    """
    env = BfclEnv(task)
    labels: list[CallLabel] = []
    depth = 0
    for t, turn in enumerate(turns):
        for call in turn:
            depth += 1
            refused: str | None = None
            if call.name not in env:
                refused = f"{call.name!r} is not a function of this task"
            elif call.name in task.held_out(t):
                offered_at = min(k for k, v in task.missed_function.items() if call.name in v)
                refused = f"{call.name!r} is not offered before turn {offered_at}"
            else:
                refused = argument_problem(call.name, call.args)
            declared = None
            rejected: str | None = None
            reached = call.name in env and refused is None
            if call.name in env:
                # Run whatever the runtime refused as well: a monitor that only observes lets
                # it through, and the rollout must be the same one.
                if predict and reached and not isinstance(call.args, str):
                    declared = first_violation(env, call.name, call.args)
                try:
                    rejected = rejection(call.name, env.run(call.name, call.args))
                except Exception as e:
                    rejected = f"{type(e).__name__}: {e}"
            labels.append(
                CallLabel(depth=depth, turn=t, call=call, refused=refused, rejected=rejected, reached=reached, declared=declared)
            )
    return Execution(calls=tuple(labels), final=env)


# -- perturbation families ---------------------------------------------------------------


def _args(call: BfclCall) -> dict[str, Any]:
    return {} if isinstance(call.args, str) else dict(call.args)


def _positions(turns: Sequence[Sequence[BfclCall]]) -> list[tuple[int, int]]:
    return [(t, i) for t, turn in enumerate(turns) for i in range(len(turn))]


def _replace(turns: Sequence[Sequence[BfclCall]], t: int, new_turn: Sequence[BfclCall]) -> tuple[tuple[BfclCall, ...], ...]:
    return tuple(tuple(new_turn) if k == t else tuple(turn) for k, turn in enumerate(turns))


def _wrong_type(value: Any, rng: random.Random) -> Any:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, str):
        return rng.choice([len(value) or 7, [value], {"value": value}])
    if isinstance(value, list):
        return ", ".join(map(str, value)) if value else 0
    if isinstance(value, dict):
        return list(value.items()) or "none"
    return 0 if value is None else None


def _invented(kind: str, value: Any, rng: random.Random) -> Any:
    if isinstance(value, int) and not isinstance(value, bool):
        return 900_000_000 + rng.randrange(1_000_000)
    if kind == "user_id":
        return f"USR{rng.randrange(900, 1000)}"
    return f"{kind.removesuffix('_id')}-{rng.randrange(16**6):06x}"


def perturb(task: BfclTask, rng: random.Random, *, per_family: int = 1) -> Iterator[Variant]:
    """Up to ``per_family`` variants of each family for ``task`` (positions chosen by ``rng``)."""
    gt = ground_truth_calls(task)
    positions = _positions(gt)

    def pick(items: list[Any]) -> list[Any]:
        return rng.sample(items, min(per_family, len(items)))

    for t, i in pick(positions):
        turn = list(gt[t])
        dropped = turn.pop(i)
        yield Variant(task=task, family="drop", note=f"turn {t}: dropped {dropped.to_source()}", turns=_replace(gt, t, turn))

    swaps = [(t, i) for t, i in positions if i + 1 < len(gt[t]) and gt[t][i] != gt[t][i + 1]]
    for t, i in pick(swaps):
        turn = list(gt[t])
        turn[i], turn[i + 1] = turn[i + 1], turn[i]
        yield Variant(task=task, family="swap", note=f"turn {t}: swapped calls {i} and {i + 1}", turns=_replace(gt, t, turn))

    with_args = [(t, i) for t, i in positions if _args(gt[t][i])]
    for t, i in pick(with_args):
        call = gt[t][i]
        args = _args(call)
        key = rng.choice(sorted(args))
        args[key] = _wrong_type(args[key], rng)
        turn = list(gt[t])
        turn[i] = BfclCall(name=call.name, args=args)
        yield Variant(
            task=task, family="corrupt_type", note=f"turn {t}: {call.name}.{key} = {args[key]!r}", turns=_replace(gt, t, turn)
        )

    early = [
        (t, call)
        for t, names in sorted(task.missed_function.items())
        if t > 0
        for call in (gt[t] if t < len(gt) else ())
        if call.name in names
    ]
    for t, call in pick(early):
        before = [*gt[t - 1], call]
        yield Variant(
            task=task,
            family="early_tool",
            note=f"{call.name} called at turn {t - 1}, offered from turn {t}",
            turns=_replace(gt, t - 1, before),
        )

    refs = [(t, i, key) for t, i in positions for key in sorted(REFERENCE_ARGS.get(gt[t][i].name, {})) if key in _args(gt[t][i])]
    for t, i, key in pick(refs):
        call = gt[t][i]
        kind = REFERENCE_ARGS[call.name][key]
        args = _args(call)
        args[key] = _invented(kind, args[key], rng)
        turn = list(gt[t])
        turn[i] = BfclCall(name=call.name, args=args)
        yield Variant(
            task=task, family="invent_id", note=f"turn {t}: {call.name}.{key} = {args[key]!r}", turns=_replace(gt, t, turn)
        )
