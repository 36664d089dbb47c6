"""Layers point one way: the package's import graph has no cycle, and the core never imports upward.

The graph is built from the source with ``ast``, so it sees every import: at module level,
inside functions, under ``if TYPE_CHECKING:``, and ``importlib.import_module("...")`` with
a literal name.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import pytest

ROOT: Final = Path(__file__).resolve().parent.parent
FACADE: Final = "prefixmon"

BASE: Final = frozenset(
    {
        "vocabulary",
        "verdict",
        "exceptions",
        "deprecation",
        "_version",
        "_trusted",
        "_validation",
        "_coercion",
        "_log",
        "_cel",
        "_dispatch",
        "_readonly",
        "_daemon_threads",
        "_signals",
        "_writer",
        "_json_depth",
        "_quoting",
        "jsonlines",
        "semconv",
        "commands",
        "grounding",
    }
)
"""Leaf modules: plain data, helpers and vocabulary every layer may use."""
CORE: Final = frozenset(
    {
        "spec",
        "specfile",
        "_rules",
        "toolset",
        "observed",
        "state",
        "predicate",
        "records",
        "policies",
        "episode",
        "_probes",
        "observer",
        "monitor",
        "dry_run",
        "repeats",
        "batch",
        "order",
        "snapshot",
        "redaction",  # what records may hold of arguments and results (Monitor(record_content=True))
    }
)
"""DESIGN §1: core (spec, state, predicate, policies, episode, monitor, records)."""
DEPRECATED_UPWARD: Final = {
    ("prefixmon.episode", "prefixmon.plan"): "Episode.verify_plan and plans given to follow(): deprecated, removed in 0.3.0",
    ("prefixmon.monitor", "prefixmon.plan"): "Monitor.verify_plan: deprecated, removed in 0.3.0",
}
"""Upward edges kept for one release by deprecated shims; each names its removal."""


def _modules() -> dict[str, Path]:
    """Import name -> file, for the package as users import it (monitor/ is prefixmon, adapters/ is prefixmon.adapters)."""
    out: dict[str, Path] = {}
    for folder, prefix in ((ROOT / "monitor", FACADE), (ROOT / "adapters", f"{FACADE}.adapters")):
        for path in folder.rglob("*.py"):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join([prefix, *parts])] = path
    return out


MODULES: Final = _modules()


def _is_package(name: str) -> bool:
    return MODULES[name].name == "__init__.py"


def _resolve(module: str, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    package = module if _is_package(module) else module.rsplit(".", 1)[0]
    base = package.split(".")
    if node.level > 1:
        base = base[: -(node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def _imports(module: str) -> Iterator[str]:
    """Every prefixmon module ``module`` imports."""
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"), filename=str(MODULES[module]))
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            source = _resolve(module, node)
            for alias in node.names:
                sub = f"{source}.{alias.name}"
                targets.append(sub if sub in MODULES else source)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            targets = [node.args[0].value]
        for target in targets:
            while target and target not in MODULES:  # `import prefixmon.x.y` names a module inside
                target = target.rpartition(".")[0]
            if target and target != module:
                yield target


GRAPH: Final = {m: sorted(set(_imports(m))) for m in MODULES}


def _layer(module: str) -> str:
    if module.startswith(f"{FACADE}.adapters"):
        return "adapters"
    if module == FACADE or module == f"{FACADE}.__main__":
        return "facade"
    top = module.split(".")[1]
    if top in BASE:
        return "base"
    if top in CORE:
        return "core"
    return "upper"


class TestImportGraph:
    """The import graph of prefixmon and prefixmon.adapters."""

    def test_the_graph_sees_every_kind_of_import(self) -> None:
        """Function-level, TYPE_CHECKING and import_module imports are edges too (the test is not blind)."""
        assert "prefixmon.plan" in GRAPH["prefixmon.episode"]  # importlib.import_module in a deprecated shim
        assert "prefixmon.predicate" in GRAPH["prefixmon.episode"]  # `from . import predicate`
        assert any(m.startswith("prefixmon.analytics") for m in GRAPH["prefixmon._cli.report"])  # inside a function
        assert len(MODULES) > 60

    def test_no_cycles(self) -> None:
        """No module reaches itself through imports."""
        cycles: list[list[str]] = []
        state: dict[str, int] = {}  # 1 on the stack, 2 done
        stack: list[str] = []

        def visit(m: str) -> None:
            state[m] = 1
            stack.append(m)
            for n in GRAPH[m]:
                if state.get(n) == 1:
                    cycles.append([*stack[stack.index(n) :], n])
                elif n not in state:
                    visit(n)
            stack.pop()
            state[m] = 2

        for m in sorted(GRAPH):
            if m not in state:
                visit(m)
        assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)

    def test_the_core_never_imports_adapters(self) -> None:
        """Nothing under monitor/ imports prefixmon.adapters, not even inside a function."""
        bad = [(m, n) for m, deps in GRAPH.items() if _layer(m) != "adapters" for n in deps if _layer(n) == "adapters"]
        assert not bad, f"imports of adapters from the core: {bad}"

    def test_layers_point_one_way(self) -> None:
        """base <- core <- (telemetry, analytics, plan, CLI) <- adapters; deprecated shims are listed with their removal."""
        order = {"base": 0, "core": 1, "upper": 2, "adapters": 3}
        bad = []
        for m, deps in GRAPH.items():
            if _layer(m) == "facade":
                continue
            for n in deps:
                if _layer(n) == "facade":
                    if _layer(m) != "adapters":  # inside the package, import the defining module
                        bad.append((m, n))
                elif order[_layer(n)] > order[_layer(m)] and (m, n) not in DEPRECATED_UPWARD:
                    bad.append((m, n))
        assert not bad, f"imports that point up a layer: {bad}"

    def test_deprecated_edges_still_exist(self) -> None:
        """Each allowed upward edge is real; remove it from the list with its shim."""
        for m, n in DEPRECATED_UPWARD:
            assert n in GRAPH[m], f"{m} no longer imports {n}: drop it from DEPRECATED_UPWARD"

    def test_adapters_use_only_the_public_api(self) -> None:
        """Adapters import public prefixmon modules only (never prefixmon._private)."""
        bad = [
            (m, n)
            for m, deps in GRAPH.items()
            if _layer(m) == "adapters"
            for n in deps
            if _layer(n) != "adapters" and any(p.startswith("_") for p in n.split(".")[1:])
        ]
        assert not bad, f"adapters importing private modules: {bad}"

    def test_analytics_never_import_the_runtime(self) -> None:
        """Analytics read records; they never import the runtime (spec, state, predicate, episode, monitor, ...)."""
        runtime = {f"{FACADE}.{m}" for m in ("episode", "monitor", "predicate", "policies", "spec", "state", "observer")}
        bad = [(m, n) for m, deps in GRAPH.items() if m.startswith(f"{FACADE}.analytics") for n in deps if n in runtime]
        assert not bad, f"analytics importing the runtime: {bad}"


class TestModuleSize:
    """No giant modules: about 800 lines at most, unless a stated reason says why."""

    REASONS: Final = {
        "prefixmon.telemetry": "one concept (the OpenTelemetry observer): spans, events and metrics share its per-call state",
        "prefixmon.episode": "one concept (an episode and its pending calls): each call's path from emission to record, "
        "fast paths included, reads top to bottom in one file",
        "prefixmon.adapters.langchain": "one concept (the v1 middleware): a call's path through wrap_tool_call, "
        "interrupts, resumes and the batch of its message (sync and async, on adapters._batches) share the per-run state",
    }

    @pytest.mark.parametrize("module", sorted(MODULES))
    def test_size(self, module: str) -> None:
        """A module over 800 lines needs a reason in REASONS."""
        lines = len(MODULES[module].read_text(encoding="utf-8").splitlines())
        assert lines <= 800 or module in self.REASONS, f"{module} has {lines} lines"


class TestPackaging:
    """What the wheel holds."""

    def test_every_package_is_listed(self) -> None:
        """Every folder with an ``__init__.py`` is in pyproject's packages list (else the wheel silently lacks it)."""
        import tomllib

        listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]["packages"])
        packages = {m for m, path in MODULES.items() if path.name == "__init__.py"}
        assert packages - listed == set(), "add these to [tool.setuptools] packages"
