"""The copy-on-write view of a tracked state that a plan is verified over.

Facts, bindings and information written by simulated steps stay in the view; reads fall
through to the parent state, which is never changed. A placeholder (:class:`PlanRef`) to
an earlier step's produced key is bound in the view as that step's reference, and is
seen information once the step passed its checks.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping, MutableMapping
from typing import Any, Final, cast

from ..order import OrderLog
from ..rules.grounding import GroundingMatch
from ..rules.observed import ObservedObjects
from ..rules.spec import Produce, ToolSpec
from ..state import Binding, TrackedState
from ..toolset import Toolset
from ..verdict import Location
from .model import Plan, PlanRef

__all__ = ("ArgsView", "PlanState", "Simulation")

_MISSING: Final = object()


class Simulation:
    """Per-verification bookkeeping shared by the view and the step checks."""

    __slots__ = (
        "base_depth",
        "changed_env",
        "current",
        "index",
        "lost_facts",
        "producers",
        "ran",
        "read_only",
        "samples",
        "specs",
        "steps",
    )

    def __init__(self, plan: Plan, toolset: Toolset, base_depth: int, read_only: frozenset[str]) -> None:
        self.steps = plan.steps
        self.index = {s.id: i for i, s in enumerate(plan.steps)}
        self.specs: list[ToolSpec | None] = [toolset.get(s.tool) for s in plan.steps]
        self.ran = [False] * len(plan.steps)
        self.current = 0
        self.base_depth = base_depth
        self.read_only = read_only
        self.changed_env: str | None = None
        """The first earlier step that may have changed the live environment."""
        self.lost_facts: str | None = None
        """The first earlier step whose effect on the facts could not be simulated."""
        self.samples: dict[tuple[str, Location], Any] = {}
        self.producers: dict[str, tuple[int, str]] = {}
        """``{kind: (index, key)}``: the first earlier step that passed its checks and produces the kind."""

    def passed(self, i: int, spec: ToolSpec) -> None:
        """Step ``i`` passed its checks: its output exists for later steps."""
        self.ran[i] = True
        for p in spec.produces:
            self.producers.setdefault(p.kind, (i, p.key))

    def earlier(self, step_id: str) -> int | None:
        """The index of an earlier step that passed its checks, or ``None``."""
        i = self.index.get(step_id)
        return i if i is not None and i < self.current and self.ran[i] else None

    def depth_of(self, i: int) -> int:
        return self.base_depth + i + 1


_SCALAR = (str, bytes, int, float, bool, type(None), PlanRef)


def _shared(value: Any) -> bool:
    """Whether ``value`` can be shared with the parent: nothing reachable from it can change in place."""
    if isinstance(value, _SCALAR):
        return True
    if isinstance(value, (tuple, frozenset)):
        try:
            return all(_shared(v) for v in value)
        except RecursionError:
            return False
    return False


def _private(local: dict[str, Any], key: str, value: Any) -> Any:
    """The view's own copy of a parent's fact, made when an effect first reads it (tuples are looked into)."""
    if not _shared(value):
        value = copy.deepcopy(value)  # effects may change it in place
    local[key] = value
    return value


class _Facts(MutableMapping[str, Any]):
    """Facts of the view: local writes and deletions over the parent's facts."""

    __slots__ = ("_deleted", "_local", "_owner", "_parent")

    def __init__(self, parent: Mapping[str, Any], owner: PlanState) -> None:
        self._parent = parent
        self._local: dict[str, Any] = {}
        self._deleted: set[str] = set()
        self._owner = owner

    def __getitem__(self, key: str) -> Any:
        owner = self._owner
        owner._read_facts = True
        local = self._local
        if key in local:
            value = local[key]
        elif key in self._deleted:
            raise KeyError(key)
        else:
            value = self._parent[key]
            if owner._writing and not isinstance(value, _SCALAR):
                value = _private(local, key, value)
        if type(value) is PlanRef:
            owner._symbols_read.append(value)
        return value

    def get(self, key: str, default: Any = None) -> Any:
        owner = self._owner
        owner._read_facts = True
        value = self._local.get(key, _MISSING)
        if value is _MISSING:
            if self._deleted and key in self._deleted:
                return default
            value = self._parent.get(key, _MISSING)
            if value is _MISSING:
                return default
            if owner._writing and not isinstance(value, _SCALAR):
                value = _private(self._local, key, value)
        elif type(value) is PlanRef:
            owner._symbols_read.append(value)
        return value

    def __contains__(self, key: object) -> bool:
        self._owner._read_facts = True
        return key in self._local or (key not in self._deleted and key in self._parent)

    def __setitem__(self, key: str, value: Any) -> None:
        self._local[key] = value
        if self._deleted:
            self._deleted.discard(key)

    def __delitem__(self, key: str) -> None:
        in_parent = key not in self._deleted and key in self._parent
        if key in self._local:
            del self._local[key]
        elif not in_parent:
            raise KeyError(key)
        if in_parent:
            self._deleted.add(key)

    def __iter__(self) -> Iterator[str]:
        self._owner._read_facts = True
        local, deleted = self._local, self._deleted
        yield from local
        for k in self._parent:
            if k not in local and k not in deleted:
                yield k

    def __len__(self) -> int:
        parent = self._parent
        return len(parent) - len(self._deleted) + sum(1 for k in self._local if k not in parent)

    def copy(self) -> dict[str, Any]:
        """A plain dict of the current facts."""
        return dict(self)

    def __repr__(self) -> str:
        return f"<plan facts: {len(self._local)} changed, {len(self._deleted)} deleted over {len(self._parent)}>"


class ArgsView(Mapping[str, Any]):
    """Arguments as a precondition sees them; notes reads of symbolic values."""

    __slots__ = ("_args", "_owner", "_symbolic")

    def __init__(self, args: Mapping[str, Any], symbolic: Mapping[str, tuple[PlanRef, ...]], owner: PlanState) -> None:
        self._args = args
        self._symbolic = symbolic
        self._owner = owner

    def __getitem__(self, key: str) -> Any:
        value = self._args[key]
        refs = self._symbolic.get(key)
        if refs:
            self._owner._symbols_read.extend(refs)
        return value

    def __iter__(self) -> Iterator[str]:
        return iter(self._args)

    def __len__(self) -> int:
        return len(self._args)


class PlanState(TrackedState):
    """A copy-on-write view of a tracked state for plan verification.

    Facts, bindings and information written here stay here; reads fall through to the
    parent, which is never changed. Creating one costs O(number of exposed tools), a
    lookup O(what it reads), whatever the size of the parent.
    """

    __slots__ = (
        "_env_value",
        "_invalidated",
        "_parent",
        "_read_env",
        "_read_facts",
        "_sim",
        "_symbolic",
        "_symbols_read",
        "_writing",
    )

    def __init__(self, parent: TrackedState, sim: Simulation | None = None) -> None:
        self._read_env = False
        self._read_facts = False
        self._writing = False
        self._symbols_read: list[PlanRef] = []
        super().__init__(env=parent.env, exposed=parent.exposed)  # shares the exposed set: never written here
        self._parent = parent
        self._sim = sim
        self._symbolic: dict[PlanRef, dict[str, Binding]] = {}
        self._invalidated: dict[tuple[str, str], tuple[PlanRef, Binding]] = {}
        """``{(step id, kind): (reference, stale binding)}``: a step's output invalidated through one path."""
        self.facts = cast("dict[str, Any]", _Facts(parent.facts, self))
        self.objects = ObservedObjects(parent.objects)
        if parent.order_log is not None:  # read through, never changed
            self._order = OrderLog(parent.order_log)
        self.depth = parent.depth
        self.turn = parent.turn

    @property
    def env(self) -> Any:
        """The live environment (as it was before the plan: planned steps do not run)."""
        self._read_env = True
        return self._env_value

    @env.setter
    def env(self, value: Any) -> None:
        self._env_value = value

    def begin_effects(self) -> None:
        """Effects write next: facts they read from the parent become private copies."""
        self._writing = True

    def end_effects(self) -> None:
        """Effects are done."""
        self._writing = False

    @property
    def parent(self) -> TrackedState:
        """The state this view reads through to."""
        return self._parent

    # -- references -----------------------------------------------------------------------
    def bind(self, kind: str, value: Any, *, tool: str | None = None, depth: int | None = None) -> None:
        """Bind ``value`` as ``kind`` in the view (a :class:`PlanRef` too)."""
        if isinstance(value, PlanRef):
            b = Binding(kind=kind, depth=self.depth if depth is None else depth, tool=tool)
            self._symbolic.setdefault(value, {})[kind] = b
        else:
            super().bind(kind, value, tool=tool, depth=depth)

    def invalidate(self, kind: str, value: Any, *, by: str | None = None) -> None:
        """Mark a binding stale in the view; the parent's binding is left as it is."""
        if isinstance(value, PlanRef):
            b = self._symbolic_binding(value, kind)
            if b is not None and b.current:
                stale = Binding(kind=kind, depth=b.depth, tool=b.tool, current=False, stale_depth=self.depth, stale_by=by)
                self._symbolic[value][kind] = stale
                self._invalidated.setdefault((value.step, kind), (value, stale))
            return
        local = self._bindings.get(value) if type(value) is str else None
        if local is None or kind not in local:
            inherited = self._parent.binding(value, kind)
            if inherited is None or not inherited.current:
                return
            if type(value) is str:
                stale = Binding(
                    kind=kind, depth=inherited.depth, tool=inherited.tool, current=False, stale_depth=self.depth, stale_by=by
                )
                if local is None:
                    self._bindings[value] = {kind: stale}
                else:
                    local[kind] = stale
                return
            super().bind(kind, value, tool=inherited.tool, depth=inherited.depth)
        super().invalidate(kind, value, by=by)

    def binding(self, value: Any, kind: str | None = None) -> Binding | None:
        """The binding of ``value`` in the view: local, symbolic, or the parent's."""
        if type(value) is PlanRef:
            return self._symbolic_binding(value, kind)
        b = TrackedState.binding(self, value, kind) if self._bindings else None
        return b if b is not None else self._parent.binding(value, kind)

    def _symbolic_binding(self, r: PlanRef, kind: str | None) -> Binding | None:
        """Bound by an effect or invalidated in the view, else produced by an earlier step.

        A produced binding is cached: once a step is earlier and passed its checks, it stays so.
        """
        kinds = self._symbolic.get(r) if self._symbolic else None
        if kinds:
            b = kinds.get(kind) if kind is not None else next(iter(kinds.values()))
            if b is not None:
                return b
        produced = self._produced(r, kind)
        if produced is None:
            return None
        target, p = produced
        sim = self._sim
        assert sim is not None
        spec = sim.specs[target]
        b = Binding(kind=p.kind, depth=sim.depth_of(target), tool=spec.name if spec is not None else None)
        self._symbolic.setdefault(r, {})[p.kind] = b
        return b

    def _produced(self, r: PlanRef, kind: str | None) -> tuple[int, Produce] | None:
        """The earlier step and its produced key that bind ``r`` as ``kind``, if any."""
        sim = self._sim
        if sim is None or not r.path:
            return None
        target = sim.earlier(r.step)
        if target is None:
            return None
        spec = sim.specs[target]
        if spec is None:
            return None
        last = r.path[-1]
        for p in spec.produces:
            if (kind is None or p.kind == kind) and (last == p.key or last == p.kind):
                return target, p
        return None

    def _current_symbol(self, r: PlanRef, kind: str) -> bool:
        """Whether ``r`` is a current ``kind`` (without building a Binding)."""
        kinds = self._symbolic.get(r) if self._symbolic else None
        b = kinds.get(kind) if kinds else None
        if b is not None:
            return b.current
        return self._produced(r, kind) is not None

    @property
    def invalidated_any(self) -> bool:
        """Whether an earlier step invalidated some step's output (only then can two paths alias)."""
        return bool(self._invalidated)

    def aliased_stale(self, r: PlanRef, kind: str) -> tuple[PlanRef, Binding] | None:
        """Another path to the same step's output that was invalidated as ``kind``, if any.

        One result can hold several values of a kind (``f.person_id``, ``f.contacts[0].person_id``);
        whether two paths name the same value is known only when the step runs.
        """
        if not self._invalidated:
            return None
        other = self._invalidated.get((r.step, kind))
        return other if other is not None and other[0] != r else None

    @property
    def binding_count(self) -> int:
        """Bound values of the parent plus those bound in the view."""
        return self._parent.binding_count + len(self._bindings)

    # -- information pool -----------------------------------------------------------------
    def seen(self, value: Any, match: GroundingMatch = "exact") -> bool:
        """Seen in the parent, informed in the view, or an earlier step's output."""
        if type(value) is PlanRef:
            sim = self._sim
            return sim is not None and sim.earlier(value.step) is not None
        return self._parent.seen(value, match) or (
            (bool(self._pool) or bool(self._texts)) and TrackedState.seen(self, value, match)
        )

    def derivation(self, value: Any) -> str | None:
        """Derived from the parent's recent numbers, or from those informed in the view."""
        if type(value) is PlanRef:
            return None
        return self._parent.derivation(value) or TrackedState.derivation(self, value)

    @property
    def pool_complete(self) -> bool:
        """Whether the parent's pool and the view's kept everything they were given."""
        return self._parent.pool_complete and not self._pool_lossy

    def user_said(self, value: Any) -> bool:
        """Whether the user's messages (parent or view) contain ``value``."""
        if isinstance(value, PlanRef):
            return False
        return self._parent.user_said(value) or (bool(self._user_texts) and TrackedState.user_said(self, value))
