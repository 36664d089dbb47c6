"""The real τ² environments (airline, retail, telecom) with exact, cheap copies of their databases.

:class:`Tau2Env` wraps one ``tau2.environment.environment.Environment`` built by the
domain's own ``get_environment`` and runs calls exactly as τ²'s orchestrator does
(``Environment.get_response``: the tool's exception becomes ``Error: <e>`` with the error
flag set; telecom then syncs the user's device with the network).

Copies are copy-on-write: the airline and retail databases are dictionaries of pydantic
records (2,000 reservations, 1,000 orders, ...); a fresh environment or a :meth:`~Tau2Env.fork`
shares every record and deep-copies one the first time a tool reads it by key, so a copy
costs O(number of records) pointer copies, not a parse or a deep copy of 7 MB of JSON. No
τ² tool mutates a record it reached by iterating a table (searches only read), so the copy
is exact. The telecom databases are small and are deep-copied.
"""

from __future__ import annotations

import copy
import functools
import importlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any, Final, Literal

from pydantic import BaseModel

if TYPE_CHECKING:
    from tau2.data_model.tasks import Task  # type: ignore[import-untyped]
    from tau2.environment.environment import Environment  # type: ignore[import-untyped]

__all__ = (
    "DOMAINS",
    "CopyOnRead",
    "Domain",
    "Outcome",
    "Requestor",
    "Tau2Env",
    "load_tasks",
    "silence_tau2_logs",
)

Domain = Literal["airline", "retail", "telecom"]
DOMAINS: Final[tuple[Domain, ...]] = ("airline", "retail", "telecom")
Requestor = Literal["assistant", "user"]


def silence_tau2_logs() -> None:
    """Turn off τ²'s loguru logging (its tools log every call at debug level).

    The CLI verbs and examples call this; a library user decides for their own process.
    """
    from loguru import logger

    logger.disable("tau2")


def _module(domain: str) -> ModuleType:
    if domain not in DOMAINS:
        raise ValueError(f"unknown τ² domain {domain!r}; expected one of {list(DOMAINS)}")
    return importlib.import_module(f"tau2.domains.{domain}.environment")


class CopyOnRead(dict[str, Any]):
    """A table that deep-copies a shared record the first time it is read by key.

    Records reached by key (``table[key]``, ``get``, ``pop``, ``setdefault``) are private
    copies; records only iterated (``values()``, ``items()``) are the shared originals,
    which τ²'s tools only read.
    """

    __slots__ = ("_own",)

    def __init__(self, shared: Mapping[str, Any]) -> None:
        super().__init__(shared)
        self._own: set[str] = set()

    def __getitem__(self, key: str) -> Any:
        value = dict.__getitem__(self, key)
        if key not in self._own:
            value = copy.deepcopy(value)
            dict.__setitem__(self, key, value)
            self._own.add(key)
        return value

    def get(self, key: str, default: Any = None) -> Any:
        if key in self:
            return self[key]
        return default

    def pop(self, key: str, *default: Any) -> Any:
        if key in self:
            value = self[key]
            dict.__delitem__(self, key)
            self._own.discard(key)
            return value
        if default:
            return default[0]
        raise KeyError(key)

    def setdefault(self, key: str, default: Any = None) -> Any:
        if key not in self:
            self[key] = default
        return self[key]

    def __setitem__(self, key: str, value: Any) -> None:
        dict.__setitem__(self, key, value)
        self._own.add(key)

    def share(self) -> CopyOnRead:
        """A copy-on-read twin; afterwards both copy a record again before changing it."""
        self._own.clear()
        return CopyOnRead(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> dict[str, Any]:
        return {k: copy.deepcopy(dict.__getitem__(self, k), memo) for k in dict.keys(self)}


def _cow_db(db: BaseModel) -> BaseModel:
    """A copy of a τ² database whose dictionary tables are :class:`CopyOnRead`."""
    values: dict[str, Any] = {}
    for name in type(db).model_fields:
        value = getattr(db, name)
        if isinstance(value, CopyOnRead):
            values[name] = value.share()
        elif isinstance(value, dict):
            values[name] = CopyOnRead(value)
        else:
            values[name] = copy.deepcopy(value)
    return type(db).model_construct(**values)


@functools.cache
def _base_dbs(domain: Domain) -> tuple[BaseModel, BaseModel | None]:
    """The domain's databases as τ² loads them, parsed once per process and never changed."""
    env = _module(domain).get_environment()
    user_db = env.user_tools.db if env.user_tools is not None else None
    return env.tools.db, user_db


@functools.cache
def load_tasks(domain: Domain, split: str | None = "base") -> tuple[Task, ...]:
    """The domain's tasks of one split (τ²'s ``get_tasks``), read once per process."""
    return tuple(_module(domain).get_tasks(split))


@dataclass(frozen=True, slots=True, kw_only=True)
class Outcome:
    """What the environment answered to one call."""

    content: str
    """The tool message's content (JSON text of the result, or ``Error: ...``)."""
    error: bool
    """Whether the tool raised (τ²'s ``ToolMessage.error``)."""


class Tau2Env:
    """One τ² domain environment over a private copy-on-write copy of its databases.

    Args:
        domain: ``airline``, ``retail`` or ``telecom``.
        environment: a τ² ``Environment``; by default a fresh one in the initial state.
    """

    __slots__ = ("_types", "domain", "environment")

    def __init__(self, domain: Domain, environment: Environment | None = None) -> None:
        self.domain: Domain = domain
        if environment is None:
            db, user_db = _base_dbs(domain)
            environment = self._build(_cow_db(db), None if user_db is None else copy.deepcopy(user_db))
        self.environment = environment
        self._types: dict[str, tuple[Requestor, str]] = {}
        sides: tuple[tuple[Requestor, Any], ...] = (("assistant", environment.tools), ("user", environment.user_tools))
        for requestor, kit in sides:
            if kit is not None:
                for name in kit.tools:
                    self._types[name] = (requestor, str(kit.tool_type(name).value))

    def _build(self, db: BaseModel, user_db: BaseModel | None) -> Environment:
        module = _module(self.domain)
        if self.domain == "telecom":
            env: Environment = module.get_environment(db=db, user_db=user_db)
        else:
            env = module.get_environment(db=db)
        return env

    @classmethod
    def for_task(cls, domain: Domain, task: Task, *, history: bool = True) -> Tau2Env:
        """A fresh environment in the task's initial state.

        Args:
            history: also replay the task's initial message history (leave it out when a
                simulation's own messages, which include it, are replayed next).
        """
        env = cls(domain)
        state = task.initial_state
        if state is not None:
            env.environment.set_state(
                initialization_data=state.initialization_data,
                initialization_actions=state.initialization_actions,
                message_history=list(state.message_history or ()) if history else [],
            )
        return env

    @property
    def db(self) -> Any:
        """The agent-side database (a τ² ``DB`` pydantic model)."""
        return self.environment.tools.db

    @property
    def user_db(self) -> Any:
        """The user-side database (telecom's device and surroundings), or ``None``."""
        kit = self.environment.user_tools
        return None if kit is None else kit.db

    def requestor(self, name: str) -> Requestor:
        """Who may call ``name``: ``user`` for the user's own tools (telecom), else ``assistant``."""
        entry = self._types.get(name)
        return "assistant" if entry is None else entry[0]

    def tool_type(self, name: str) -> str | None:
        """τ²'s type tag of a tool (``read``, ``write``, ``think``, ``generic``), ``None`` if unknown."""
        entry = self._types.get(name)
        return None if entry is None else entry[1]

    def tool_names(self, requestor: Requestor) -> Iterable[str]:
        """The tools of one side, in τ²'s order."""
        return [name for name, (side, _) in self._types.items() if side == requestor]

    def fork(self) -> Tau2Env:
        """An exact, independent copy of the environment in its current state."""
        user_db = self.user_db
        twin = Tau2Env.__new__(Tau2Env)
        twin.domain = self.domain
        twin.environment = self._build(_cow_db(self.db), None if user_db is None else copy.deepcopy(user_db))
        twin._types = self._types
        return twin

    def run(self, name: str, arguments: Mapping[str, Any], *, requestor: Requestor | None = None, call_id: str = "") -> Outcome:
        """Run one call as τ²'s orchestrator does (``Environment.get_response``)."""
        from tau2.data_model.message import ToolCall  # type: ignore[import-untyped]

        side = requestor if requestor is not None else self.requestor(name)
        call = ToolCall(id=call_id, name=name, arguments=dict(arguments), requestor=side)
        message = self.environment.get_response(call)
        return Outcome(content=message.content or "", error=bool(message.error))

    def db_hash(self) -> tuple[str | None, str | None]:
        """τ²'s hashes of the agent and user databases (what its reward compares)."""
        return self.environment.get_db_hash(), self.environment.get_user_db_hash()
