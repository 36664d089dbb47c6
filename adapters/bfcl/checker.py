"""Task outcome from BFCL's own multi-turn checkers, without ``eval``.

BFCL's ``multi_turn_checker`` executes calls with ``eval`` and keeps environment instances
in a module-global cache keyed by model and task (so a second run in one process continues
from the first one's state). Its sub-checkers are pure and run here unchanged:
``state_checker`` (the model's and the ground truth's instances have equal public
attributes after each turn) and ``response_checker`` (every ground-truth result of the turn
appears among the model's results so far). :class:`TurnChecker` drives them turn by turn the
way ``multi_turn_checker`` does, executing the ground truth with :class:`~.env.BfclEnv`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .data import BfclTask
from .env import BfclCall, BfclEnv, bfcl_error_text, bfcl_result_text, parse_calls

__all__ = (
    "TurnChecker",
    "bfcl_checkers",
)


def bfcl_checkers() -> tuple[Callable[..., dict[str, Any]], Callable[..., dict[str, Any]]] | None:
    """BFCL's ``state_checker`` and ``response_checker``, or ``None`` if they cannot be imported."""
    try:
        from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import (  # type: ignore[import-untyped]
            response_checker,
            state_checker,
        )
    except ImportError:
        return None
    return state_checker, response_checker


@dataclass(slots=True)
class TurnChecker:
    """BFCL's per-turn verdict for one model rollout (``valid`` until a check fails)."""

    task: BfclTask
    gt_env: BfclEnv
    all_results: list[str]
    valid: bool = True
    error_type: str | None = None
    error_message: str | None = None

    @classmethod
    def for_task(cls, task: BfclTask) -> TurnChecker:
        """A checker with a fresh ground-truth environment."""
        return cls(task=task, gt_env=BfclEnv(task), all_results=[])

    def _gt_turn(self, turn: int) -> tuple[list[str], bool]:
        texts = self.task.ground_truth[turn] if turn < len(self.task.ground_truth) else ()
        calls: list[BfclCall] = [c for text in texts for c in parse_calls(text, where=f"{self.task.id} ground truth")]
        results = []
        for call in calls:
            try:
                assert not isinstance(call.args, str)
                results.append(bfcl_result_text(self.gt_env.run(call.name, call.args)))
            except Exception as e:
                results.append(bfcl_error_text(e))
        return results, bool(texts)

    def turn(self, turn: int, model_env: BfclEnv, model_results: Sequence[str], model_calls: int) -> None:
        """Check one turn: ``model_results`` are the model's results of this turn."""
        gt_results, gt_nonempty = self._gt_turn(turn)
        self.all_results.extend(model_results)
        if not self.valid or not gt_nonempty:
            return
        checkers = bfcl_checkers()
        if checkers is None:  # pragma: no cover - only without bfcl-eval
            return
        state_checker, response_checker = checkers
        if model_calls == 0:
            self._fail("multi_turn:empty_turn_model_response", f"Model response list is empty for turn {turn}")
            return
        state = state_checker(model_env.instances, self.gt_env.instances)
        if not state["valid"]:
            self._fail(state["error_type"], state["error_message"])
            return
        response = response_checker(self.all_results, gt_results, turn)
        if not response["valid"]:
            self._fail(response["error_type"], response["error_message"])

    def force_terminated(self, turns: int) -> None:
        """The rollout has a different number of turns than the task."""
        if turns != len(self.task.ground_truth) and self.valid:
            self._fail(
                "multi_turn:force_terminated",
                f"the result has {turns} turns, the ground truth {len(self.task.ground_truth)}",
            )

    def _fail(self, error_type: str, message: str) -> None:
        self.valid = False
        self.error_type = error_type
        self.error_message = message
