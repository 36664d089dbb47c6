"""Dry-run preconditions: execute the call on a snapshot of the environment first.

For environments that can be copied (benchmarks, sandboxes), the most faithful precondition
is the environment itself: run the call on a copy and accept only what the real
environment would accept. It costs one snapshot per check, so it is an opt-in mode for
evaluation, not the default on a production hot path.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any

from .rules.spec import ErrorResult, Precondition
from .state import TrackedState

__all__ = ("dry_run",)


def dry_run(
    run: Callable[[Any, Mapping[str, Any]], Any],
    *,
    snapshot: Callable[[Any], Any] = copy.deepcopy,
    error_result: ErrorResult | None = None,
    name: str = "dry_run",
) -> Precondition:
    """A precondition that runs the call on ``snapshot(state.env)``.

    Args:
        run: ``(env_copy, args) -> result``: performs the call on the copy.
        snapshot: copies the environment (default ``copy.deepcopy``); a cheaper one may copy
            only the part the call touches.
        error_result: recognises results that mean the environment rejected the call.
        name: the precondition's name in verdict codes.

    The call fails the precondition when the copy raises or returns an error result. An
    episode without an environment (``state.env is None``) passes.
    """

    def check(state: TrackedState, args: Mapping[str, Any]) -> str | None:
        if state.env is None:
            return None
        clone = snapshot(state.env)
        try:
            result = run(clone, args)
        except Exception as e:
            return f"a dry run on a copy of the environment was rejected: {type(e).__name__}: {e}"
        reason = error_result(result) if error_result is not None else None
        return f"a dry run on a copy of the environment was rejected: {reason}" if reason else None

    return Precondition(check=check, name=name, message="a dry run on a copy of the environment was rejected")
