"""Following a plan at runtime: each executed call is matched to the plan step it carries out.

An episode conditioned on a plan (``Monitor.episode(plan=...)``, ``Episode.follow(...)``)
notes in each recorded action the plan step it matched and how it deviated.
"""

from __future__ import annotations

import bisect
import contextlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from .._internal.json_depth import loads
from ..exceptions import PlanError
from ..toolset import Toolset
from ..verdict import Location, quote
from .model import LISTED, Plan, PlanLike, PlanRef, PlanStep, listed, loc_text, parse_plan
from .verify import PlanVerdict

__all__ = ("DeviationKind", "PlanFollower", "PlanMatch", "deviation_kind")

_SCAN: Final = 32
"""Planned steps of one tool a :class:`PlanFollower` compares a call with, at most, in each direction."""
_MISSING: Final = object()


DeviationKind = Literal["skipped", "repeated", "arguments_differ", "not_in_plan"]


def deviation_kind(deviation: str) -> DeviationKind:
    """The low-cardinality kind of a deviation text written by :class:`PlanFollower` (for telemetry)."""
    if deviation.startswith("arguments differ"):
        return "arguments_differ"
    if deviation.startswith("skipped"):
        return "skipped"
    if deviation.startswith("repeats"):
        return "repeated"
    return "not_in_plan"


# -- runtime conditioning ------------------------------------------------------------------
@dataclass(frozen=True, slots=True, kw_only=True)
class PlanMatch:
    """How one executed call relates to the plan (``ActionRecord.plan_step`` / ``deviation``)."""

    step: int | None
    """1-based index of the plan step the call matched, or ``None``."""
    deviation: str | None = None
    """How the call deviated from the plan; ``None`` when it followed it."""


class PlanFollower:
    """Matches an episode's calls, in order, to the plan that conditions the executor.

    A call that is the next expected step follows the plan; one that matches a later step
    skips the steps between; one that repeats a completed step, calls the expected tool with
    other arguments, or is not in the plan is a deviation. A ``$ref`` argument is compared
    with what the referenced step's result actually held. A step is completed when a call
    matching it ran and the environment accepted it (a blocked call can be retried).
    Calls are matched as they finish: an episode that runs calls concurrently gets them
    matched in the order they finished, not the order they were emitted. A call is compared
    only with steps of its own tool, at most 32 after the expected step and 32 before it, so
    matching costs the same whatever the plan's length; a call that fits a step further
    ahead counts as other arguments for the next step of its tool.

    Args:
        plan: the plan (or a verdict on it).
        toolset: lets a ``$ref`` that names a produced kind find the result key it is bound from.
    """

    def __init__(self, plan: Plan | PlanVerdict | PlanLike, toolset: Toolset | None = None) -> None:
        self.plan = plan.plan if isinstance(plan, PlanVerdict) else parse_plan(plan)
        self._toolset = toolset
        self._results: dict[str, list[Any]] = {}
        self._done: set[int] = set()
        self._cursor = 0
        self._by_id = {s.id: s for s in self.plan.steps}
        self._by_tool: dict[str, list[int]] = {}
        """0-based positions of each tool's steps, in plan order: a call is compared only with its tool's steps."""
        for i, s in enumerate(self.plan.steps):
            self._by_tool.setdefault(s.tool, []).append(i)

    @property
    def next_step(self) -> PlanStep | None:
        """The step the executor is expected to run next."""
        steps = self.plan.steps
        return steps[self._cursor] if self._cursor < len(steps) else None

    @property
    def completed(self) -> tuple[PlanStep, ...]:
        """Steps that ran and were accepted, in plan order."""
        return tuple(s for s in self.plan.steps if s.index in self._done)

    @property
    def missed(self) -> tuple[PlanStep, ...]:
        """Steps that have not been completed."""
        return tuple(s for s in self.plan.steps if s.index not in self._done)

    def concrete_args(self, step: PlanStep) -> dict[str, Any]:
        """The step's arguments with each ``$ref`` replaced by the first value the result held.

        Raises:
            PlanError: a referenced step has not run, or its result holds no such value.
        """

        def fill(value: Any, loc: Location) -> Any:
            if isinstance(value, PlanRef):
                found = self.resolve(value)
                if not found:
                    state = "has not run" if value.step not in self._results else "returned no such value"
                    raise PlanError(f"plan step {step.index} ({step.tool}): argument '{loc_text(loc)}': {value.step} {state}")
                return found[0]
            if isinstance(value, Mapping):
                return {k: fill(v, (*loc, k)) for k, v in value.items()}
            if isinstance(value, list):
                return [fill(v, (*loc, i)) for i, v in enumerate(value)]
            return value

        return {k: fill(v, (k,)) for k, v in step.args.items()}

    def resolve(self, r: PlanRef) -> list[Any] | None:
        """Values the referenced step's results held at the reference's path, newest first.

        ``None`` when the step has not run. A step that ran more than once (a retry) offers
        the values of every run.
        """
        results = self._results.get(r.step)
        if results is None:
            return None
        found: list[Any] = []
        for result in reversed(results):
            if isinstance(result, (str, bytes)) and result[:1] in ("{", "[", b"{", b"["):
                with contextlib.suppress(ValueError):
                    result = loads(result)
            if not r.path:
                found.append(result)
                continue
            values = _descend(result, r.path)
            if not values:
                keys = {r.path[-1]}
                step = self._by_id.get(r.step)
                spec = self._toolset.get(step.tool) if self._toolset is not None and step is not None else None
                if spec is not None:
                    keys |= {p.key for p in spec.produces if p.kind == r.path[-1]}
                _collect(result, keys, values, 0)
            found.extend(values)
        return found

    def match(self, tool: str, args: Mapping[str, Any] | None, *, ran: bool = False, result: Any = None) -> PlanMatch:
        """Match one executed call to the plan and advance.

        Args:
            tool: the emitted call's tool.
            args: its arguments (validated, or parsed when they did not validate).
            ran: the call ran and the environment accepted it.
            result: its result, when it ran (later ``$ref`` arguments are compared with it).
        """
        steps = self.plan.steps
        args = args or {}
        cursor = self._cursor
        found: PlanStep | None = None
        deviation: str | None = None
        # Only steps of the same tool are compared, at most _SCAN of them each way: the cost of a
        # call does not grow with the plan.
        positions = self._by_tool.get(tool, ())
        at = bisect.bisect_right(positions, cursor)  # this tool's first step after the cursor
        if cursor < len(steps) and self._fits(steps[cursor], tool, args) is None:
            found = steps[cursor]
        else:
            later = next((steps[i] for i in positions[at : at + _SCAN] if self._fits(steps[i], tool, args) is None), None)
            if later is not None:
                found = later
                deviation = "skipped " + self._skipped(cursor, later.index - 1)
            else:
                before = bisect.bisect_left(positions, cursor)
                recent = positions[max(0, before - _SCAN) : before]
                earlier = next(
                    (steps[i] for i in reversed(recent) if i + 1 in self._done and self._fits(steps[i], tool, args) is None),
                    None,
                )
                if earlier is not None:
                    found, deviation = earlier, f"repeats {earlier.label}, which already ran"
                elif cursor < len(steps) and steps[cursor].tool == tool:
                    found = steps[cursor]
                    deviation = f"arguments differ from {found.label}: {self._fits(found, tool, args)}"
                elif at < len(positions):
                    same_tool = steps[positions[at]]
                    found = same_tool
                    deviation = (
                        f"arguments differ from {same_tool.label}: {self._fits(same_tool, tool, args)}; "
                        f"skipped {self._skipped(cursor, same_tool.index - 1)}"
                    )
                elif cursor >= len(steps):
                    deviation = f"{tool} is not in the plan (all {len(steps)} planned steps were already taken)"
                else:
                    deviation = f"{tool} is not in the plan (expected {steps[cursor].label})"
        if found is not None and ran:
            self._results.setdefault(found.id, []).append(result)
            self._done.add(found.index)
            if found.index - 1 >= self._cursor:
                self._cursor = found.index
        return PlanMatch(step=found.index if found is not None else None, deviation=deviation)

    def _skipped(self, start: int, stop: int) -> str:
        """Labels of the steps at positions ``start`` to ``stop - 1`` (the first few, and a count)."""
        steps = self.plan.steps
        return listed([s.label for s in steps[start : min(stop, start + LISTED)]], stop - start)

    def _fits(self, step: PlanStep, tool: str, args: Mapping[str, Any]) -> str | None:
        """``None`` when the call is the step, else how its arguments differ."""
        if step.tool != tool:
            return f"the tool is {tool}, not {step.tool}"
        diffs: list[str] = []
        for key, planned in step.args.items():
            self._compare(planned, args.get(key, _MISSING), key, diffs)
            if diffs:
                break
        return diffs[0] if diffs else None

    def _compare(self, planned: Any, actual: Any, loc: str, diffs: list[str]) -> None:
        if isinstance(planned, PlanRef):
            candidates = self.resolve(planned)
            if candidates is None or any(_same(c, actual) for c in candidates):
                return
            shown = ", ".join(quote(c) for c in candidates[:3]) or "nothing"
            got = "missing" if actual is _MISSING else quote(actual)
            diffs.append(f"'{loc}' is {got}, the plan has {planned!r} ({shown})")
        elif isinstance(planned, Mapping) and isinstance(actual, Mapping):
            for k, v in planned.items():
                self._compare(v, actual.get(k, _MISSING), f"{loc}.{k}", diffs)
        elif isinstance(planned, list) and isinstance(actual, (list, tuple)) and len(planned) == len(actual):
            for i, (p, a) in enumerate(zip(planned, actual, strict=True)):
                self._compare(p, a, f"{loc}[{i}]", diffs)
        elif not _same(planned, None if actual is _MISSING else actual):
            got = "missing" if actual is _MISSING else quote(actual)
            diffs.append(f"'{loc}' is {got}, the plan has {quote(planned)}")


def _same(a: Any, b: Any) -> bool:
    if a == b:
        return True
    scalar = (int, float, str)
    if isinstance(a, scalar) and isinstance(b, scalar) and not isinstance(a, bool) and not isinstance(b, bool):
        return str(a) == str(b)
    return False


def _descend(obj: Any, path: Sequence[str]) -> list[Any]:
    items = [obj]
    for part in path:
        nxt: list[Any] = []
        for item in items:
            if hasattr(item, "model_dump"):
                item = item.model_dump()
            if isinstance(item, Mapping):
                if part in item:
                    nxt.append(item[part])
            elif isinstance(item, (list, tuple)):
                if part.isdigit() and int(part) < len(item):
                    nxt.append(item[int(part)])
                else:
                    nxt.extend(x[part] for x in item if isinstance(x, Mapping) and part in x)
        items = nxt
    flat: list[Any] = []
    for item in items:
        if isinstance(item, (list, tuple)):
            flat.extend(item)
        else:
            flat.append(item)
    return flat


def _collect(obj: Any, keys: set[str], out: list[Any], level: int) -> None:
    if level > 64 or len(out) > 10_000:
        return
    if hasattr(obj, "model_dump"):
        obj = obj.model_dump()
    if isinstance(obj, Mapping):
        for k, v in obj.items():
            if k in keys and not isinstance(v, (Mapping, list, tuple)):
                out.append(v)
            else:
                _collect(v, keys, out, level + 1)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            _collect(v, keys, out, level + 1)
