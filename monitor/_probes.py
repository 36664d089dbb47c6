"""Probes: read-only lookups the monitor makes itself before a call, for objects its rules read.

A spec file's ``probes:`` say which read tool observes the object a precondition needs (read the
order before cancelling it). Before the call is judged, each probe whose object was never
observed (or went stale) runs once, within the episode's budget and the probe's timeout, and
its result updates the observed objects only: it is not an action, adds nothing to the
information pool, and a probe that fails leaves the rule undetermined (fail open).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio

from . import predicate
from .records.model import ProbeRecord
from .rules.spec import MISSING, Probe, ToolSpec, resolve_path
from .state import TrackedState
from .toolset import Toolset

__all__ = ("probe",)

Run = Callable[[str, dict[str, Any]], Awaitable[Any]]
Fault = Callable[[str, BaseException], None]


async def probe(
    state: TrackedState,
    spec: ToolSpec,
    parsed: dict[str, Any],
    depth: int,
    *,
    run: Run,
    toolset: Toolset,
    records: list[ProbeRecord],
    fault: Fault,
) -> None:
    """Make the probes of ``spec`` for a call with the arguments ``parsed`` whose objects are
    missing; append what happened to ``records``."""
    objects = state.objects
    values: dict[str, Any] = {"args": parsed}
    """What later probes' paths may read: the arguments, and each object an earlier probe is for."""
    for p in spec.probes:
        ident = resolve_path(p.id, values)
        if ident is MISSING or ident is None or isinstance(ident, (dict, list)):
            continue
        seen = objects.get(p.object, ident)
        if seen is None or not seen.current:
            call_args = p.arguments(values)
            if call_args is None:
                continue
            if len(records) >= p.budget:
                records.append(ProbeRecord(depth=depth, tool=p.call, object=p.object, ok=False, error="no probe budget left"))
                return
            record = await _run(state, p, call_args, depth, run, toolset, fault)
            if record is not None:
                records.append(record)
            seen = objects.get(p.object, ident)
        if seen is not None and seen.current:
            values[p.name] = seen.fields


async def _run(
    state: TrackedState, p: Probe, args: dict[str, Any], depth: int, run: Run, toolset: Toolset, fault: Fault
) -> ProbeRecord | None:
    target = toolset.get(p.call)
    error: str | None = None
    try:
        with anyio.fail_after(p.timeout):
            result = await run(p.call, args)
    except LookupError:  # nothing can run it here (a replay without an environment): not attempted
        return None
    except TimeoutError:
        error = f"no answer within {p.timeout:g} s"
    except Exception as e:
        error = f"{type(e).__name__} raised"
        fault(f"probe {p.call}", e)
    else:
        rejection = predicate.acceptance(target, p.call, result=result)
        if rejection is not None:
            error = rejection.reason
        elif target is not None and target.observe is not None:
            try:
                target.observe(state, args, result)
            except Exception as e:
                error = f"{type(e).__name__} raised while observing the result"
                fault(f"observing the probe {p.call}", e)
    return ProbeRecord(depth=depth, tool=p.call, object=p.object, ok=error is None, error=error)
