"""Rules on call order: ``after``, ``before``, ``at_most`` and ``not_after``.

An application knows orders a schema cannot say: read the order before modifying it, pay at
most once, nothing after the handoff to a human. :meth:`Toolset.order
<prefixmon.Toolset.order>` and the spec file keys of the same names declare them:

- ``after=[A, B]`` on T: T needs one of A, B to have succeeded earlier in the episode;
  with ``same="order_id"`` (or ``{"order_id": "id"}``: T's argument, theirs) on the same value,
  matched as ids are (case, ``#`` and decorations aside);
- ``before=[B]`` on T: B needs T earlier (the same rule, declared on the tool that comes first);
- ``at_most=N``: T succeeds at most N times per episode;
- ``not_after=[B]``: T may not run once B has succeeded.

A violation is a ``precondition`` failure with code ``precondition:after`` (``at_most``,
``not_after``), blocking under a blocking policy like any precondition. In a batch
(:mod:`prefixmon.batch`) a sibling has not returned yet: an ``after`` tool that is only a
sibling fails with a reason saying to wait for it, earlier siblings of T count against
``at_most``, and a ``not_after`` tool among the siblings leaves the rule undetermined (the
framework decides which runs first). An ``after`` rule whose ``same`` argument the call does
not carry is undetermined too.

Each rule is compiled once; a check costs O(1) lookups (the number of tools it names), and
only the tools that rules name are counted, one dict update per accepted call.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping
from typing import Any, Final

from .exceptions import SpecError
from .rules.grounding import id_form
from .verdict import Undetermined

__all__ = ("AFTER", "AT_MOST", "NOT_AFTER", "After", "AtMost", "NotAfter", "OrderLog", "same_pairs")

AFTER: Final = "after"
AT_MOST: Final = "at_most"
NOT_AFTER: Final = "not_after"


def _form(value: Any) -> Hashable | None:
    """How a ``same`` value is compared: ids by :func:`~prefixmon.rules.grounding.id_form`, other scalars as they are."""
    if isinstance(value, str):
        return id_form(value)
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return value
    return None


class OrderLog:
    """What the order rules read: per tool, how often it succeeded and on which values.

    ``parent``: a log this one reads through to and never changes (plan verification's view).
    """

    __slots__ = ("_counts", "_parent", "_values")

    def __init__(self, parent: OrderLog | None = None) -> None:
        self._parent = parent
        self._counts: dict[str, int] = {}
        self._values: set[tuple[str, str, Hashable]] = set()

    def note(self, tool: str, args: Mapping[str, Any], logged: tuple[str, ...]) -> None:
        """``tool`` succeeded with ``args``; the values of its ``logged`` arguments are kept."""
        self._counts[tool] = self._counts.get(tool, 0) + 1
        for arg in logged:
            form = _form(args.get(arg))
            if form is not None:
                self._values.add((tool, arg, form))

    def count(self, tool: str) -> int:
        """How often ``tool`` succeeded."""
        own = self._counts.get(tool, 0)
        return own + self._parent.count(tool) if self._parent is not None else own

    def ran_on(self, tool: str, arg: str, form: Hashable) -> bool:
        """Whether ``tool`` succeeded with ``arg`` holding a value of that form."""
        if (tool, arg, form) in self._values:
            return True
        return self._parent is not None and self._parent.ran_on(tool, arg, form)

    def to_dict(self) -> dict[str, Any]:
        """The log as JSON data (for a snapshot); a view's log includes its parent's."""
        counts = dict(self._parent.to_dict()["counts"]) if self._parent is not None else {}
        for tool, n in self._counts.items():
            counts[tool] = counts.get(tool, 0) + n
        values = self._parent.to_dict()["values"] if self._parent is not None else []
        values = [*values, *([t, a, v] for t, a, v in sorted(self._values, key=repr))]
        return {"counts": counts, "values": values}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> OrderLog:
        """The log of a :meth:`to_dict` document."""
        log = cls()
        log._counts = {str(k): int(v) for k, v in dict(data.get("counts", {})).items()}
        log._values = {(str(t), str(a), v) for t, a, v in data.get("values", [])}
        return log


def same_pairs(same: str | Mapping[str, str] | Iterable[str] | None) -> tuple[tuple[str, str], ...]:
    """``same=`` as (this tool's argument, the other tool's argument) pairs."""
    if same is None:
        return ()
    if isinstance(same, str):
        return ((same, same),)
    if isinstance(same, Mapping):
        return tuple((str(k), str(v)) for k, v in same.items())
    return tuple((str(s), str(s)) for s in same)


def _listed(tools: tuple[str, ...]) -> str:
    return tools[0] if len(tools) == 1 else f"one of {', '.join(tools)}"


class After:
    """The precondition of an ``after`` rule: one of ``tools`` succeeded earlier (on the same values)."""

    __slots__ = ("name", "same", "tool", "tools")

    def __init__(self, tool: str, tools: tuple[str, ...], same: tuple[tuple[str, str], ...]) -> None:
        if not tools:
            raise SpecError(f"tool {tool!r}: an after rule names no tool")
        self.tool, self.tools, self.same, self.name = tool, tools, same, AFTER

    def __call__(self, state: Any, args: Mapping[str, Any]) -> bool | str | Undetermined:
        log: OrderLog | None = state.order_log
        forms: list[tuple[str, Hashable]] = []
        for mine, theirs in self.same:
            form = _form(args.get(mine))
            if form is None:
                return Undetermined(f"{self.tool} carries no {mine!r} to match against {_listed(self.tools)}")
            forms.append((theirs, form))
        if log is not None:
            for tool in self.tools:
                if all(log.ran_on(tool, arg, form) for arg, form in forms) if forms else log.count(tool):
                    return True
        on = ""
        if self.same:
            on = " on the same " + ", ".join(f"{mine} ({args.get(mine)!r})" for mine, _ in self.same)
        need = f"must come after {_listed(self.tools)}{on}, and that has not succeeded in this episode"
        batch = state.batch
        if batch is not None:
            for j, name in enumerate(batch.names):
                if j != batch.index and name in self.tools:
                    return f"{need}: {name} (call {j + 1} of this batch) has not returned; call {self.tool} after its result"
        return f"{need}: call {_listed(self.tools)} first"


class AtMost:
    """The precondition of an ``at_most`` rule: the tool succeeded fewer than ``limit`` times."""

    __slots__ = ("limit", "name", "tool")

    def __init__(self, tool: str, limit: int) -> None:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
            raise SpecError(f"tool {tool!r}: at_most must be a whole number >= 0, got {limit!r}")
        self.tool, self.limit, self.name = tool, limit, AT_MOST

    def __call__(self, state: Any, args: Mapping[str, Any]) -> bool | str:
        log: OrderLog | None = state.order_log
        done = log.count(self.tool) if log is not None else 0
        batch = state.batch
        siblings = sum(1 for j in range(batch.index) if batch.names[j] == self.tool) if batch is not None else 0
        if done + siblings < self.limit:
            return True
        times = "once" if self.limit == 1 else f"{self.limit} times"
        also = f" ({siblings} of them earlier in this batch)" if siblings else ""
        return f"may run at most {times} per episode; it has run {done + siblings}{also}"


class NotAfter:
    """The precondition of a ``not_after`` rule: none of ``tools`` has succeeded."""

    __slots__ = ("name", "tool", "tools")

    def __init__(self, tool: str, tools: tuple[str, ...]) -> None:
        if not tools:
            raise SpecError(f"tool {tool!r}: a not_after rule names no tool")
        self.tool, self.tools, self.name = tool, tools, NOT_AFTER

    def __call__(self, state: Any, args: Mapping[str, Any]) -> bool | str | Undetermined:
        log: OrderLog | None = state.order_log
        if log is not None:
            for tool in self.tools:
                if log.count(tool):
                    return f"may not run after {tool}, which has succeeded in this episode"
        batch = state.batch
        if batch is not None:
            for j, name in enumerate(batch.names):
                if j != batch.index and name in self.tools:
                    return Undetermined(f"{name} is in the same batch; which runs first is the framework's choice")
        return True
