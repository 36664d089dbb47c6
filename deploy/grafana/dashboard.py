"""The Grafana dashboard for live prefix executability, written once here.

``python deploy/grafana/dashboard.py`` writes ``prefixmon.json`` beside this file: PEC
curve (PEC(k) by depth, from the recording rules), TER, AUC-PEC, RR and RR-eligible,
the FED histogram, first-failure causes, interventions and call executability, each per
cohort (dataset x model x method, chosen with template variables). The test checks the file
is current and that it loads in Grafana's dashboard model (the Grafana Foundation SDK's
types, generated from Grafana's own schema) without losing a field.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Final

DATASOURCE: Final = {"type": "prometheus", "uid": "${datasource}"}
SELECT: Final = 'prefixmon_label_dataset=~"$dataset", prefixmon_label_model=~"$model", prefixmon_label_method=~"$method"'
LEGEND: Final = "{{prefixmon_label_dataset}} / {{prefixmon_label_model}} / {{prefixmon_label_method}}"


def _target(expr: str, legend: str = LEGEND, ref: str = "A", **extra: Any) -> dict[str, Any]:
    return {"refId": ref, "datasource": DATASOURCE, "expr": expr, "legendFormat": legend, **extra}


def _panel(
    pid: int, title: str, kind: str, grid: tuple[int, int, int, int], targets: list[dict[str, Any]], **extra: Any
) -> dict[str, Any]:
    x, y, w, h = grid
    return {
        "id": pid,
        "type": kind,
        "title": title,
        "datasource": DATASOURCE,
        "gridPos": {"x": x, "y": y, "w": w, "h": h},
        "targets": targets,
        **extra,
    }


def _variable(name: str, label: str) -> dict[str, Any]:
    return {
        "type": "query",
        "name": name,
        "label": label,
        "datasource": DATASOURCE,
        "query": f"label_values(prefixmon_episodes_total, prefixmon_label_{name})",
        "refresh": 2,
        "includeAll": True,
        "multi": True,
        "current": {"text": "All", "value": "$__all"},
    }


def dashboard() -> dict[str, Any]:
    """The dashboard model (schemaVersion 39)."""
    unit = {"fieldConfig": {"defaults": {"unit": "percentunit", "min": 0, "max": 1}, "overrides": []}}
    panels = [
        _panel(
            1,
            "PEC(k): share of episodes whose first k actions were all executable",
            "barchart",
            (0, 0, 16, 9),
            [_target(f"prefixmon:pec:ratio{{{SELECT}}}", format="table", instant=True)],
            description="Fixed cohort, no censoring (DESIGN §3). x: depth k (label depth), one series per cohort.",
            **unit,
        ),
        _panel(
            2, "TER (fully executable episodes)", "stat", (16, 0, 8, 4), [_target(f"prefixmon:ter:ratio{{{SELECT}}}")], **unit
        ),
        _panel(3, "AUC-PEC", "stat", (16, 4, 8, 5), [_target(f"prefixmon:auc_pec:ratio{{{SELECT}}}")], **unit),
        _panel(
            4,
            "Recovery rate (success after a prefix failure) and RR-eligible",
            "timeseries",
            (0, 9, 12, 8),
            [
                _target(f"prefixmon:rr:ratio{{{SELECT}}}", f"RR {LEGEND}"),
                _target(f"prefixmon:rr_eligible:sum{{{SELECT}}}", f"eligible {LEGEND}", ref="B"),
            ],
            description="RR is undefined (no sample) when nothing failed, never 0.",
        ),
        _panel(
            5,
            "FED histogram (episodes by first-error depth)",
            "bargauge",
            (12, 9, 12, 8),
            [
                _target(
                    f"sum by (le) (increase(prefixmon_episode_fed_bucket{{{SELECT}}}[$__range]))",
                    "{{le}}",
                    format="heatmap",
                )
            ],
            description='Buckets are depths (le="k.0"); the last finite bucket is Telemetry(max_depth).',
        ),
        _panel(
            6,
            "First-failure causes",
            "piechart",
            (0, 17, 8, 8),
            [_target(f"sum by (prefixmon_cause) (prefixmon:first_failures:sum{{{SELECT}}})", "{{prefixmon_cause}}")],
        ),
        _panel(
            7,
            "Interventions (blocked, replanned, escalated) per second",
            "timeseries",
            (8, 17, 8, 8),
            [
                _target(
                    f"sum by (prefixmon_decision) (rate(prefixmon_interventions_total{{{SELECT}}}[$__rate_interval]))",
                    "{{prefixmon_decision}}",
                )
            ],
        ),
        _panel(
            8,
            "Executable calls (share of checked calls)",
            "timeseries",
            (16, 17, 8, 8),
            [_target(f"prefixmon:calls_executable:ratio{{{SELECT}}}")],
            **unit,
        ),
    ]
    return {
        "uid": "prefixmon-pec",
        "title": "prefixmon: live prefix executability",
        "description": "PEC, TER, AUC-PEC, RR, FED and causes from prefixmon's OpenTelemetry metrics (deploy/prometheus/prefixmon.rules.yml).",  # noqa: E501
        "tags": ["prefixmon", "agents", "opentelemetry"],
        "editable": True,
        "graphTooltip": 1,
        "schemaVersion": 39,
        "time": {"from": "now-6h", "to": "now"},
        "refresh": "30s",
        "templating": {
            "list": [
                {"type": "datasource", "name": "datasource", "label": "Prometheus", "query": "prometheus"},
                _variable("dataset", "dataset"),
                _variable("model", "model"),
                _variable("method", "method"),
            ]
        },
        "annotations": {"list": []},
        "panels": panels,
    }


DASHBOARD_FILE: Final = Path(__file__).with_name("prefixmon.json")


def render() -> str:
    """The text of ``prefixmon.json``."""
    return json.dumps(dashboard(), indent=2) + "\n"


if __name__ == "__main__":
    DASHBOARD_FILE.write_text(render())
    print(f"wrote {DASHBOARD_FILE}", file=sys.stderr)
