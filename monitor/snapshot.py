"""Approvals and snapshots: an escalation's answer is remembered, and an episode can be resumed.

An episode remembers every answer its escalation hook gave (approve, edit with the edited
arguments, deny with its reason), keyed by the tool, the canonical JSON of the arguments as
emitted and the call id. The same call escalated again in the episode gets the remembered
answer and the hook is not asked again; answers to different calls (the siblings of a batch)
are separate entries, so denying one never discards another's approval.

:meth:`Episode.snapshot <prefixmon.Episode.snapshot>` returns a :class:`Snapshot`: what is
needed to continue the episode (depth, turn, actions, approvals, facts, bindings, exposed
tools, order counts, the texts it was told). :meth:`Monitor.resume <prefixmon.Monitor.resume>`
opens an episode that continues it. A snapshot holds the application's own data (argument
values, facts, the user's texts): store it as any other checkpoint. It never goes to spans,
logs or records.

What a snapshot does not hold: the tool results seen before it (the information pool is
rebuilt from the told texts only, and marked incomplete, so a value seen only in an earlier
result is not an information failure after the resume), who said what before it (provenance:
a value seen only in an earlier result has no source after the resume, so a provenance rule
leaves it undetermined and it passes), observed objects (spec-file ``observes``), the calls
the environment refused since the last write (repeat detection), the plan tracker (pass
``plan=`` again) and the live environment (pass ``env=`` again).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, ValidationInfo, field_validator, model_validator

from ._call import ParsedCall, RawArgs, parse_call
from .exceptions import RecordError, SpecError
from .order import OrderLog
from .policies import Approve, Deny, Edit, FaultFn, Intervention, Judge, Policy, Resolution
from .records.model import ActionRecord, ProbeRecord
from .state import TrackedState
from .verdict import ToolCall, Verdict
from .vocabulary import Decision, Outcome

__all__ = (
    "SCHEMA",
    "Approval",
    "Approvals",
    "BoundValue",
    "OrderCounts",
    "Snapshot",
    "Told",
    "args_key",
    "escalation",
    "restore",
    "take",
)

SCHEMA: Final = "prefixmon.snapshot/1"
"""The snapshot format this version writes and reads."""

_HOW = Literal["user", "inform", "assistant"]

_ACTIONS: Final = TypeAdapter(list[ActionRecord])
_PROBES: Final = TypeAdapter(list[ProbeRecord])


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, validate_by_name=True, validate_by_alias=True)


class Approval(_Model):
    """One escalation answer the episode remembers."""

    tool: str
    args: str
    """Canonical JSON of the arguments as emitted (:func:`args_key`)."""
    call_id: str | None = None
    depth: int = Field(ge=1)
    """Depth of the call it answered first."""
    decision: Literal["approve", "edit", "deny"]
    edited: dict[str, Any] | None = None
    """The edited arguments (``edit`` only)."""
    reason: str | None = None
    """Why it was denied (``deny`` only)."""
    failures: list[str] = Field(default_factory=list)
    """What the human was shown: the codes of the call's failures (``ungrounded``, ``precondition:at_most``)
    and ``undetermined:<rule>`` for rules that could not be decided. An approval or edit is reused only for a
    call that fails no other way; a denial always is."""

    @model_validator(mode="after")
    def _consistent(self) -> Approval:
        if (self.decision == "edit") != (self.edited is not None):
            raise ValueError("edited: the edited arguments are given exactly when the decision is 'edit'")
        if self.decision != "deny" and self.reason is not None:
            raise ValueError("reason: only a 'deny' has a reason")
        return self

    def answer(self) -> Approve | Edit | Deny:
        """The hook's answer this entry remembers."""
        if self.decision == "approve":
            return Approve()
        if self.decision == "edit":
            assert self.edited is not None
            return Edit(args=dict(self.edited))
        return Deny() if self.reason is None else Deny(reason=self.reason)


class BoundValue(_Model):
    """One binding of the tracked state (:class:`~prefixmon.state.Binding`) and its value."""

    value: str | int | float
    kind: str
    depth: int = Field(ge=0)
    tool: str | None = None
    current: bool = True
    stale_depth: int | None = None
    stale_by: str | None = None


class OrderCounts(_Model):
    """What order rules read (:meth:`prefixmon.order.OrderLog.to_dict`)."""

    counts: dict[str, int] = Field(default_factory=dict)
    values: list[tuple[str, str, str | int | float]] = Field(default_factory=list)


class Told(_Model):
    """A text or value the episode was told (``user``, ``inform``) or the agent wrote (``assistant``)."""

    how: _HOW
    value: Any


class Snapshot(_Model):
    """What is needed to continue an episode (:meth:`prefixmon.Monitor.resume`).

    JSON data: ``model_dump(mode="json")`` / ``Snapshot.model_validate(data)`` (or
    :meth:`load`, which turns bad input into a :class:`~prefixmon.RecordError`). It holds the
    application's own values (arguments, facts, the user's texts): store it like any checkpoint.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, validate_by_name=True, validate_by_alias=True, serialize_by_alias=True)

    schema_: Literal["prefixmon.snapshot/1"] = Field(default=SCHEMA, alias="schema")
    episode_id: str
    task_id: str
    labels: dict[str, str] = Field(default_factory=dict)
    allows_no_tool: bool = False
    started_at: datetime
    outcome: Outcome | None = None
    depth: int = Field(ge=0)
    turn: int = Field(default=0, ge=0)
    actions: list[ActionRecord] = Field(default_factory=list)
    probes: list[ProbeRecord] = Field(default_factory=list)
    approvals: list[Approval] = Field(default_factory=list)
    facts: dict[str, Any] = Field(default_factory=dict)
    bindings: list[BoundValue] = Field(default_factory=list)
    exposed: list[str] = Field(default_factory=list)
    order: OrderCounts | None = None
    told: list[Told] = Field(default_factory=list)
    pool_complete: bool = False
    """Whether :attr:`told` rebuilds the whole information pool (no tool result was seen, nothing was left out)."""

    @field_validator("actions", "probes", mode="before")
    @classmethod
    def _as_records(cls, value: Any, info: ValidationInfo) -> Any:
        """Actions and probes as records are read: strictly, from their JSON form."""
        if isinstance(value, list) and any(isinstance(v, Mapping) for v in value):
            adapter = _ACTIONS if info.field_name == "actions" else _PROBES
            return adapter.validate_json(json.dumps([_plain(v) for v in value]))
        return value

    @model_validator(mode="after")
    def _numbered(self) -> Snapshot:
        depths = [a.depth for a in self.actions]
        if depths != list(range(1, self.depth + 1)):
            raise ValueError(f"actions: the actions must be numbered 1..depth ({self.depth}), got depths {depths[:10]}")
        late = [a.depth for a in self.approvals if a.depth > self.depth]
        if late:
            raise ValueError(f"approvals: an approval at depth {late[0]} is past the snapshot's depth {self.depth}")
        return self

    @classmethod
    def load(cls, data: Snapshot | Mapping[str, Any] | str | bytes) -> Snapshot:
        """A snapshot from itself, its JSON data or its JSON text.

        Raises:
            RecordError: it is not a snapshot of this schema, or a field is malformed (the message names it).
        """
        if isinstance(data, Snapshot):
            return data
        if isinstance(data, (str, bytes)):
            try:
                data = json.loads(data)
            except ValueError as e:
                raise RecordError(f"a snapshot must be JSON text: {e}") from None
        if not isinstance(data, Mapping):
            raise RecordError(f"a snapshot must be a JSON object (a dict), got {type(data).__name__}")
        schema = data.get("schema")
        if schema != SCHEMA:
            raise RecordError(f"not a snapshot this version reads: schema is {schema!r}, expected {SCHEMA!r}")
        try:
            return cls.model_validate(data)
        except ValidationError as e:
            problems = "; ".join(f"{'.'.join(str(p) for p in err['loc']) or 'snapshot'}: {err['msg']}" for err in e.errors())
            raise RecordError(f"malformed snapshot: {problems}") from None


def _plain(value: Any) -> Any:
    """An action or probe given as data or as its record, as JSON data."""
    if isinstance(value, (ActionRecord, ProbeRecord)):
        return TypeAdapter(type(value)).dump_python(value, mode="json")
    return value


def args_key(raw: RawArgs) -> str | None:
    """Canonical JSON of a call's arguments as emitted (sorted keys; JSON text parsed first).

    ``None`` when they are not JSON data: such a call's answer is not remembered (it is asked again).
    """
    return call_key(parse_call("", raw, None))


def call_key(call: ParsedCall) -> str | None:
    """:func:`args_key` of a call parsed already: blank text, or text that is not a JSON object,
    is keyed by the text itself (``null`` for no arguments at all)."""
    raw = call.raw
    value: Any = call.args
    if call.fault is not None:
        return None
    if raw is None:
        return "null"
    if not value:
        if isinstance(raw, (str, bytes, bytearray, memoryview)):
            text = raw if isinstance(raw, str) else bytes(raw).decode("utf-8", "replace")
            if value is None or not text or text.isspace():
                value = text
        elif value is None:
            return None
    try:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        return None


def _json(value: Any) -> bool:
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        return False
    return True


class Approvals:
    """The escalation answers of one episode: by call id, and by tool and arguments."""

    __slots__ = ("_by_args", "_by_id", "_entries")

    def __init__(self, entries: Iterable[Approval] = ()) -> None:
        self._entries: dict[tuple[str | None, str, str], Approval] = {}
        self._by_id: dict[str, Approval] = {}
        self._by_args: dict[tuple[str, str], Approval] = {}
        for entry in entries:
            self.remember(entry)

    def __bool__(self) -> bool:
        return bool(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def entries(self) -> list[Approval]:
        """Every remembered answer, in the order given (a later answer to the same call replaces it)."""
        return list(self._entries.values())

    def remember(self, approval: Approval) -> None:
        """Keep an answer."""
        self._entries.pop((approval.call_id, approval.tool, approval.args), None)
        self._entries[(approval.call_id, approval.tool, approval.args)] = approval
        if approval.call_id is not None:
            self._by_id[approval.call_id] = approval
        self._by_args[(approval.tool, approval.args)] = approval

    def find(self, tool: str, key: str, call_id: str | None) -> Approval | None:
        """The answer to this call: the one given to its call id when it has one (and it is the same call),
        else the latest one given to the same tool and arguments."""
        if call_id is not None:
            known = self._by_id.get(call_id)
            if known is not None:
                return known if known.tool == tool and known.args == key else None  # the id names another call
        return self._by_args.get((tool, key))


async def escalation(
    intervention: Intervention,
    approvals: Approvals,
    verdict: Verdict,
    call: ParsedCall,
    state: Any,
    *,
    undetermined: bool,
    judge: Judge,
    fault: FaultFn,
) -> Resolution:
    """:meth:`Intervention.resolve` (or ``resolve_undetermined``) with the episode's remembered answers.

    A call the policy escalates and that was answered before in the episode gets that answer
    without asking the hook; a new answer (a denial, an approval or an edit that ran) is remembered.
    """
    asked = intervention.escalate
    if asked is None or (not undetermined and intervention.policy(verdict) != "escalate"):
        if undetermined:
            return await intervention.resolve_undetermined(verdict, call, judge=judge, fault=fault)
        return await intervention.resolve(verdict, call, state, judge=judge, fault=fault)
    key = call_key(call)
    remembered = approvals.find(verdict.tool, key, verdict.call_id) if key is not None else None
    if remembered is not None and remembered.decision != "deny" and not set(_shown(verdict)) <= set(remembered.failures):
        remembered = None  # it fails in a way the human did not approve (a second payment past at_most): asked again
    answers: list[Any] = []

    async def hook(v: Verdict, call: ToolCall) -> Any:
        if remembered is not None:
            return remembered.answer()
        answer = await asked(v, call)
        answers.append(answer)
        return answer

    one = Intervention(Policy(default="escalate"), escalate=hook, escalate_timeout=intervention.escalate_timeout)
    resolution = await one.resolve_undetermined(verdict, call, judge=judge, fault=fault)
    if remembered is None and key is not None and answers:
        entry = _entry(answers[-1], resolution, verdict, key)
        if entry is not None:
            approvals.remember(entry)
    return resolution


def _shown(verdict: Verdict) -> list[str]:
    """What a human deciding on ``verdict`` is asked about: its failures' codes and its undecided rules."""
    return sorted({*(f.code or f.cause.value for f in verdict.failures), *(f"undetermined:{u}" for u in verdict.undetermined)})


def _entry(answer: Any, resolution: Resolution, verdict: Verdict, key: str) -> Approval | None:
    """What to remember of a hook's answer: a denial, or an approval or edit that the monitor let run."""
    common: dict[str, Any] = {
        "tool": verdict.tool,
        "args": key,
        "call_id": verdict.call_id,
        "depth": verdict.depth,
        "failures": _shown(verdict),
    }
    if isinstance(answer, Deny):
        return Approval(decision="deny", reason=answer.reason, **common)
    if isinstance(answer, Approve) and resolution.decision is Decision.APPROVE:
        return Approval(decision="approve", **common)
    if isinstance(answer, Edit) and resolution.decision is Decision.EDIT:
        edited = dict(answer.args)
        return Approval(decision="edit", edited=edited, **common) if _json(edited) else None
    return None  # a timeout, an edit that did not check, an answer of the wrong type: asked again


# -- taking and restoring ------------------------------------------------------------------------
def take(episode: Any) -> Snapshot:
    """The snapshot of an :class:`~prefixmon.Episode` (see :meth:`prefixmon.Episode.snapshot`)."""
    if episode._open or episode._hooked:
        raise SpecError(
            f"episode {episode.id!r} has calls that are open or waiting on a hook; "
            "report their outcome (done, failed or abandon) before taking a snapshot"
        )
    state: TrackedState = episode.state
    for name, value in state.facts.items():
        if not _json(value):
            raise RecordError(f"snapshot: fact {name!r} is not JSON data ({type(value).__name__}); facts must be JSON to resume")
    bindings = [
        BoundValue(
            value=value,
            kind=b.kind,
            depth=b.depth,
            tool=b.tool,
            current=b.current,
            stale_depth=b.stale_depth,
            stale_by=b.stale_by,
        )
        for value, kinds in state._bindings.items()
        if isinstance(value, (str, int, float)) and not isinstance(value, bool)
        for b in kinds.values()
    ]
    told: list[Told] = []
    complete = state.pool_complete and not episode.actions
    for how, value in episode._told:
        if isinstance(value, str) or _json(value):
            told.append(Told(how=how, value=value))
        else:
            complete = False  # data that is not JSON: left out
    log = state.order_log
    return Snapshot(
        episode_id=episode.id,
        task_id=episode.task_id,
        labels=dict(episode.labels),
        allows_no_tool=episode.allows_no_tool,
        started_at=episode.started_at,
        outcome=episode.outcome,
        depth=state.depth,
        turn=state.turn,
        actions=episode.actions,
        probes=list(episode.probes),
        approvals=episode.approvals,
        facts=json.loads(json.dumps(state.facts)),
        bindings=bindings,
        exposed=sorted(state.exposed),
        order=OrderCounts.model_validate(log.to_dict()) if log is not None else None,
        told=told,
        pool_complete=complete,
    )


def restore(episode: Any, snapshot: Snapshot) -> None:
    """Continue ``episode`` (just opened, with the snapshot's id, labels, facts and exposure) where ``snapshot`` left off."""
    state: TrackedState = episode.state
    for bound in snapshot.bindings:
        state.bind(bound.kind, bound.value, tool=bound.tool, depth=bound.depth)
        b = state._bindings[bound.value][bound.kind]
        b.current, b.stale_depth, b.stale_by = bound.current, bound.stale_depth, bound.stale_by
    if snapshot.order is not None:
        state._order = OrderLog.from_dict(snapshot.order.model_dump())
    for told in snapshot.told:
        if told.how == "assistant":
            state.agent_wrote(told.value)
        else:
            state.inform(told.value, user=told.how == "user")
    episode._told = [(t.how, t.value) for t in snapshot.told]
    if not snapshot.pool_complete:
        state._pool_lossy = True  # tool results seen before the snapshot are not in the pool
    state.depth = snapshot.depth
    state.turn = snapshot.turn
    episode._slots = list(snapshot.actions)
    episode._depth_of = {a.call_id: a.depth for a in snapshot.actions if a.call_id is not None}
    episode._fed = next((a.depth for a in snapshot.actions if not a.executable), None)
    episode._approvals = Approvals(snapshot.approvals)
    episode.started_at = snapshot.started_at
    episode.outcome = snapshot.outcome
    episode.probes = list(snapshot.probes)
