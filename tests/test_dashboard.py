"""The Grafana dashboard (deploy/grafana/prefixmon.json) is current and in Grafana's dashboard format."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
FILE = ROOT / "deploy" / "grafana" / "prefixmon.json"
CORE_PANELS = {"barchart", "stat", "timeseries", "bargauge", "piechart", "heatmap", "table", "gauge"}


def _module() -> Any:
    spec = importlib.util.spec_from_file_location("prefixmon_dashboard", ROOT / "deploy" / "grafana" / "dashboard.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _lost(a: Any, b: Any, path: str = "") -> list[str]:
    """Fields of ``a`` that ``b`` dropped or changed."""
    if isinstance(a, dict) and isinstance(b, dict):
        return [p for k in a for p in (_lost(a[k], b[k], f"{path}/{k}") if k in b else [f"{path}/{k} dropped"])]
    if isinstance(a, list) and isinstance(b, list):
        return [p for i, (x, y) in enumerate(zip(a, b, strict=True)) for p in _lost(x, y, f"{path}[{i}]")]
    return [] if a == b else [f"{path}: {a!r} became {b!r}"]


class TestDashboard:
    """The dashboard JSON."""

    def test_current(self) -> None:
        """The file is what dashboard.py generates."""
        assert FILE.read_text() == _module().render()

    def test_loads_in_grafanas_model(self) -> None:
        """It loads into the Grafana Foundation SDK's dashboard model (generated from Grafana's schema)
        and comes back without a dropped or changed field."""
        pytest.importorskip("grafana_foundation_sdk", reason="grafana-foundation-sdk (test extra) is not installed")
        from grafana_foundation_sdk.cog.encoder import JSONEncoder
        from grafana_foundation_sdk.models.dashboard import Dashboard, Panel

        data = json.loads(FILE.read_text())
        model = Dashboard.from_json(data)
        assert model.panels is not None and all(isinstance(p, Panel) for p in model.panels)
        assert _lost(data, json.loads(json.dumps(model, cls=JSONEncoder))) == []

    def test_panels(self) -> None:
        """PEC curve, TER, FED histogram, causes and interventions are there, with core panel types,
        unique ids and no overlap on the grid."""
        data = json.loads(FILE.read_text())
        panels = data["panels"]
        titles = " ".join(p["title"] for p in panels)
        for needed in ("PEC(k)", "TER", "FED histogram", "causes", "Interventions", "AUC-PEC", "Recovery rate"):
            assert needed in titles
        assert {p["type"] for p in panels} <= CORE_PANELS
        assert len({p["id"] for p in panels}) == len(panels)
        cells = [
            (x, y)
            for p in panels
            for g in [p["gridPos"]]
            for x in range(g["x"], g["x"] + g["w"])
            for y in range(g["y"], g["y"] + g["h"])
        ]
        assert len(cells) == len(set(cells)) and all(0 <= x < 24 for x, _ in cells)
