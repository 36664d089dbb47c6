"""The public API is locked: adding or removing a name is a deliberate change."""

from __future__ import annotations

import ast
from pathlib import Path

import prefixmon

EXPECTED = {
    "ActionRecord", "Approve", "BadLine", "Cause", "Decision", "Deny", "Edit", "Episode", "EpisodeRecord",
    "Failure", "FirstFailure", "Grounded", "JsonlSink", "LiveLog", "Monitor", "MonitorStats", "Observer", "PendingCall",
    "PlanError", "Policy", "Precondition", "PrefixmonError", "RecordError", "Ref", "Replan", "SpecError", "Telemetry",
    "ToolBlocked", "ToolCall", "ToolSpec", "Toolset", "TrackedState", "Undetermined", "Verdict",
    "Plan", "PlanFollower", "PlanStep", "PlanVerdict", "StepStatus", "StepVerdict", "parse_plan", "plan_effect",
    "revise_plan", "verify_plan", "__version__", "current_episode", "dry_run", "iter_records", "read_records",
}  # fmt: skip


class TestExports:
    def test_all_is_locked(self) -> None:
        """__all__ lists exactly the public names, sorted."""
        assert set(prefixmon.__all__) >= EXPECTED
        assert list(prefixmon.__all__) == sorted(prefixmon.__all__)

    def test_every_name_resolves(self) -> None:
        """Every exported name is importable."""
        for name in prefixmon.__all__:
            assert getattr(prefixmon, name) is not None

    def test_adapters_use_only_the_public_api(self) -> None:
        """Adapters never import private prefixmon modules."""
        root = Path(__file__).parent.parent / "adapters"
        for path in root.rglob("*.py"):
            tree = ast.parse(path.read_text(), filename=str(path))
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("prefixmon."):
                    parts = node.module.split(".")
                    assert not any(p.startswith("_") for p in parts[1:]), f"{path}: imports {node.module}"

    def test_analytics_never_import_the_runtime(self) -> None:
        """Analytics read records; they never import the runtime modules."""
        runtime = {"episode", "monitor", "predicate", "policies", "spec", "state", "observer"}
        root = Path(prefixmon.__file__).parent / "analytics"
        for path in root.rglob("*.py"):
            tree = ast.parse(path.read_text(), filename=str(path))
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and node.module:
                    mod = node.module.split(".")
                    tail = mod[-1] if node.level else (mod[1] if len(mod) > 1 and mod[0] == "prefixmon" else "")
                    assert tail not in runtime, f"{path}: imports {node.module}"
