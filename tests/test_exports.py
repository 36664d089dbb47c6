"""The public API is locked: adding, removing or moving a name is a deliberate change (see CHANGELOG.md)."""

from __future__ import annotations

import ast
import importlib
import warnings
from pathlib import Path

import pytest

import prefixmon

EXPECTED = (
    "ActionRecord", "Approve", "BadLine", "Cause", "Decision", "Deny", "Edit", "Episode", "EpisodeRecord",
    "Failure", "FirstFailure", "Grounded", "JsonlSink", "LiveLog", "Monitor", "MonitorStats", "Observer", "PendingCall",
    "Plan", "PlanError", "PlanVerdict", "Policy", "Precondition", "PrefixmonError", "RecordError", "Ref", "Replan",
    "Snapshot", "SpecError", "Telemetry", "ToolBlocked", "ToolCall", "ToolSpec", "Toolset", "TrackedState", "Undetermined",
    "Verdict", "__version__", "current_episode", "dry_run", "iter_records", "read_records", "revise_plan", "verify_plan",
)  # fmt: skip

MOVED = {
    "PlanFollower": "prefixmon.plan",
    "PlanStep": "prefixmon.plan",
    "StepStatus": "prefixmon.plan",
    "StepVerdict": "prefixmon.plan",
    "parse_plan": "prefixmon.plan",
    "plan_effect": "prefixmon.plan",
}
"""Names that left ``prefixmon.__all__`` in 0.2.0 and stay importable (with a warning) until 0.3.0."""

RENAMED = {
    ("prefixmon.adapters.langchain", "PrefixmonMiddleware"): "MonitorMiddleware",
    ("prefixmon.adapters.langchain", "PrefixmonState"): "MonitorState",
    ("prefixmon.adapters.pydantic_ai", "PrefixmonCapability"): "MonitorCapability",
    ("prefixmon.adapters.openai_agents", "AgentsMonitor"): "MonitorGuardrail",
    ("prefixmon.adapters.mcp", "MonitoredSession"): "MonitorSession",
}
"""Adapter classes renamed in 0.2.0 to one scheme (``Monitor`` + the framework's own concept)."""

MOVED_MODULES = {"prefixmon.cli": "prefixmon._cli", "prefixmon.demo": "prefixmon._cli.demo"}

ANALYTICS_EXPECTED = (
    "CHECKLIST", "DEFAULT_CHECKPOINTS", "INSTALL_HINT", "Annotation", "Attribution", "CohortReport", "Comparison",
    "Confusion", "Decomposition", "EpisodeColumns", "Estimate", "RecoveryRate", "Report", "ReviewItem", "UnstableTask",
    "build_report", "columns_from_records", "load_columns", "parse_compare", "percentile_interval", "plot_pec",
    "read_annotations", "register_reader", "render", "render_table", "resample_sums", "review_sample", "wilson_interval",
    "write_review_sheet",
)  # fmt: skip
"""``prefixmon.analytics``: ``Confusion`` joined in 0.2.0 (the benchmark verbs' agreement counts)."""

ROOT = Path(__file__).resolve().parent.parent


class TestExports:
    """The top-level names."""

    def test_all_is_locked(self) -> None:
        """__all__ lists exactly the public names, sorted."""
        assert list(prefixmon.__all__) == sorted(EXPECTED)

    def test_every_name_resolves(self) -> None:
        """Every exported name is importable."""
        for name in prefixmon.__all__:
            assert getattr(prefixmon, name) is not None

    def test_analytics_all_is_locked(self) -> None:
        """prefixmon.analytics.__all__ lists exactly its public names (in isort order) and each resolves."""
        import prefixmon.analytics as analytics

        assert tuple(analytics.__all__) == ANALYTICS_EXPECTED
        assert all(getattr(analytics, name) is not None for name in analytics.__all__)

    @pytest.mark.parametrize(("name", "module"), sorted(MOVED.items()))
    def test_moved_names_warn_and_still_work(self, name: str, module: str) -> None:
        """A name that moved is still importable from the top level, with a DeprecationWarning naming its new home."""
        with pytest.warns(DeprecationWarning, match=module.replace(".", r"\.")):
            old = getattr(prefixmon, name)
        assert old is getattr(importlib.import_module(module), name)

    def test_unknown_names_are_attribute_errors(self) -> None:
        """A name that never existed is an AttributeError, not a warning."""
        with pytest.raises(AttributeError, match="no attribute 'nope'"):
            prefixmon.nope  # noqa: B018

    @pytest.mark.parametrize(("where", "new"), sorted(RENAMED.items()))
    def test_renamed_adapter_classes_warn(self, where: tuple[str, str], new: str) -> None:
        """An adapter class's old name still works, with a DeprecationWarning naming the new one."""
        module_name, old = where
        module = importlib.import_module(module_name)
        with pytest.warns(DeprecationWarning, match=new):
            assert getattr(module, old) is getattr(module, new)

    @pytest.mark.parametrize("name", ["read_conversations", "replay_messages", "ReplayInputError", "load_json"])
    def test_transcript_names_of_the_tau_replay_module_warn(self, name: str) -> None:
        """The transcript readers ``taubench.replay`` used to re-export still work there, with a warning (CHANGELOG)."""
        from prefixmon.adapters import transcripts
        from prefixmon.adapters.taubench import replay

        with pytest.warns(DeprecationWarning, match=r"prefixmon\.adapters\.transcripts"):
            assert getattr(replay, name) is getattr(transcripts, name)

    @pytest.mark.parametrize(("old", "new"), sorted(MOVED_MODULES.items()))
    def test_moved_modules_warn(self, old: str, new: str) -> None:
        """A module that moved still imports, with a DeprecationWarning."""
        import sys

        sys.modules.pop(old, None)
        with pytest.warns(DeprecationWarning, match="deprecated"):
            module = importlib.import_module(old)
        assert module.main is importlib.import_module(new).main


def _public_modules() -> list[str]:
    out = []
    for folder, prefix in ((ROOT / "monitor", "prefixmon"), (ROOT / "adapters", "prefixmon.adapters")):
        for path in sorted(folder.rglob("*.py")):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            if any(p.startswith("_") for p in parts) or parts in (["cli"], ["demo"]):
                continue
            out.append(".".join([prefix, *parts]))
    return out


class TestModules:
    """Every public module says what it exports."""

    @pytest.mark.parametrize("module", _public_modules())
    def test_public_module_has_all(self, module: str) -> None:
        """A module users import by path declares ``__all__``, and every name in it exists."""
        folder, prefix = (
            (ROOT / "adapters", "prefixmon.adapters")
            if module.startswith("prefixmon.adapters")
            else (ROOT / "monitor", "prefixmon")
        )
        rel = module[len(prefix) :].lstrip(".").replace(".", "/")
        path = folder / (rel + ".py") if (folder / (rel + ".py")).exists() else folder / rel / "__init__.py"
        tree = ast.parse(path.read_text(encoding="utf-8"))
        names = [
            t.id
            for node in tree.body
            if isinstance(node, (ast.Assign, ast.AnnAssign))
            for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
            if isinstance(t, ast.Name)
        ]
        assert "__all__" in names, f"{module} has no __all__"
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                loaded = importlib.import_module(module)
        except ImportError as e:  # an optional extra that is not installed here
            pytest.skip(f"{module}: {e}")
        missing = [n for n in loaded.__all__ if not hasattr(loaded, n)]
        assert not missing, f"{module}.__all__ names missing attributes: {missing}"
