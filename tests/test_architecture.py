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
    {"vocabulary", "verdict", "exceptions", "deprecation", "_version", "_dispatch", "semconv", "commands", "_internal"}
)
"""Leaf modules and private helpers (``_internal/``): plain data, names and helpers every layer may use."""
RULES: Final = frozenset({"rules"})
"""The rule language (``rules/``): spec model, spec files, CEL, argument validation, grounding, observed state."""
RECORDS: Final = frozenset({"records"})
"""What an episode leaves behind (``records/``): the record model, its writer and every format it is read from."""
CORE: Final = frozenset(
    {
        "toolset",
        "state",
        "predicate",
        "_call",
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
        "pending",
        "_recording",
        "_verdicts",
        "_labels",
    }
)
"""DESIGN §1: the runtime at the package's top (toolset, state, predicate, policies, episode, monitor)."""
UPPER: Final = frozenset({"telemetry", "analytics", "plan", "learn", "_cli", "testing", "pytest_plugin", "cli", "demo"})
"""What reads the core: telemetry, analytics, the plan verifier, the learner, the command line, test helpers."""
SHIMS: Final = frozenset(
    {"spec", "specfile", "grounding", "observed", "jsonlines", "parquet", "otlp", "redaction", "otel_setup", "logging"}
)
"""Old paths of public modules that moved into a subpackage in 0.2.0; each only forwards, and is removed in 0.3.0."""
MAX_LINES: Final = 800
LONG_MODULES: Final = {
    "prefixmon.adapters.langchain": "LangChain's AgentMiddleware has a sync and an async twin of every hook it wraps "
    "(agent, model call, tool call): one extension point, one class",
}
"""Modules allowed over MAX_LINES, each with its written reason."""
LAYERS: Final = {"base": 0, "rules": 1, "records": 1, "core": 2, "upper": 3, "adapters": 4}
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
    for layer, tops in (
        ("base", BASE),
        ("rules", RULES),
        ("records", RECORDS),
        ("core", CORE),
        ("upper", UPPER),
        ("shim", SHIMS),
    ):
        if top in tops:
            return layer
    raise AssertionError(f"{module}: a module of no layer; add it to one in tests/test_architecture.py and CONTRIBUTING.md")


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
        """base <- (rules, records) <- core <- (telemetry, analytics, plan, learn, CLI) <- adapters; shims listed."""
        bad = []
        for m, deps in GRAPH.items():
            if _layer(m) in ("facade", "shim"):
                continue
            for n in deps:
                if _layer(n) == "shim":
                    bad.append((m, n))  # a deprecated path: import the module's new home
                elif _layer(n) == "facade":
                    if _layer(m) != "adapters":  # inside the package, import the defining module
                        bad.append((m, n))
                elif LAYERS[_layer(n)] > LAYERS[_layer(m)] and (m, n) not in DEPRECATED_UPWARD:
                    bad.append((m, n))
        assert not bad, f"imports that point up a layer: {bad}"

    def test_rules_and_records_do_not_know_each_other(self) -> None:
        """The rule language and the record formats are peers on the base layer: neither imports the other."""
        bad = [(m, n) for m, deps in GRAPH.items() for n in deps if {_layer(m), _layer(n)} == {"rules", "records"}]
        assert not bad, f"imports between rules/ and records/: {bad}"

    def test_every_module_has_a_layer(self) -> None:
        """Each module's folder (or top-level name) is in exactly one layer, and every listed name exists."""
        tops = {m.split(".")[1] for m in MODULES if m.count(".") and not m.startswith(f"{FACADE}.adapters")} - {"__main__"}
        listed = [*BASE, *RULES, *RECORDS, *CORE, *UPPER, *SHIMS]
        assert len(listed) == len(set(listed)), "a name in two layers"
        assert tops == set(listed), f"unlisted: {sorted(tops - set(listed))}, gone: {sorted(set(listed) - tops)}"

    @pytest.mark.parametrize("shim", sorted(SHIMS))
    def test_a_shim_only_forwards(self, shim: str) -> None:
        """A deprecated module path imports its new home and the deprecation helper, nothing else."""
        deps = GRAPH[f"{FACADE}.{shim}"]
        assert f"{FACADE}.deprecation" in deps
        homes = [d for d in deps if d != f"{FACADE}.deprecation"]
        assert len(homes) == 1 and homes[0].rsplit(".", 1)[1] == shim and _layer(homes[0]) != "shim", deps


class TestModuleSize:
    """One concept per module: none is over MAX_LINES lines without a written reason."""

    def test_no_module_over_the_limit(self) -> None:
        long = {m: n for m, p in MODULES.items() if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
        assert set(long) <= set(LONG_MODULES), f"over {MAX_LINES} lines: {long}"

    def test_every_written_reason_is_still_needed(self) -> None:
        for m in LONG_MODULES:
            assert len(MODULES[m].read_text(encoding="utf-8").splitlines()) > MAX_LINES, f"{m} is short now: drop its reason"
