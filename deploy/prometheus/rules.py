"""The Prometheus recording rules for live prefix executability, written once here.

``python deploy/prometheus/rules.py`` writes ``prefixmon.rules.yml`` beside this file (the
test checks the file is current, and that each rule equals ``build_report`` on the same
episodes through a real Prometheus). Metric names are those of the OpenTelemetry
Prometheus exporter for prefixmon's instruments (``prefixmon.episodes`` becomes
``prefixmon_episodes_total``, the attribute ``prefixmon.label.model`` the label
``prefixmon_label_model``); the cohort is dataset x model x method.

Pitfalls handled here:

* Histogram bucket labels render as ``le="2.0"``, not ``le="2"``: every depth is written
  with its ``.0``.
* A cohort with no executable episode has no ``prefixmon_executable="true"`` series, so a
  plain ratio would drop the cohort instead of giving 0: numerators are completed with
  ``or 0 * <denominator>``.
* RR is undefined when nothing failed: its rule has no sample for such a cohort (the
  denominator is filtered with ``> 0``), never a 0.
* These rules read the cumulative counters, exact for long-lived exporters (a server, a
  fleet of workers scraped all their life). For windows and restarts use the ``increase``
  forms in docs/fleet.md, and mind that ``increase()`` cannot see a process that lived less
  than one scrape interval: such jobs must push (OTLP to a Collector) or be scraped at exit.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Final

COHORT: Final = "prefixmon_label_dataset, prefixmon_label_model, prefixmon_label_method"
MAX_DEPTH: Final = 32
"""The histograms' last bucket (``Telemetry(max_depth=32)``); deeper curves need a larger one."""


def _depth(k: int) -> str:
    return f"{float(k)!r}"  # "2.0": the exporter's rendering of the bucket boundary


def rules(max_depth: int = MAX_DEPTH) -> list[dict[str, Any]]:
    """Every recording rule, in evaluation order (later rules read earlier ones)."""
    c = COHORT
    n = "prefixmon:episodes:sum"
    out: list[dict[str, Any]] = [
        {"record": n, "expr": f"sum by ({c}) (prefixmon_episodes_total)"},
        {
            "record": "prefixmon:ter:ratio",
            "expr": f'(sum by ({c}) (prefixmon_episodes_total{{prefixmon_executable="true"}}) or 0 * {n}) / {n}',
        },
        {
            "record": "prefixmon:success:ratio",
            "expr": f'(sum by ({c}) (prefixmon_episodes_total{{prefixmon_outcome="success"}}) or 0 * {n}) / {n}',
        },
        {
            "record": "prefixmon:mean_fed:ratio",
            "expr": f"sum by ({c}) (prefixmon_episode_fed_sum) / sum by ({c}) (prefixmon_episode_fed_count)",
        },
        {
            "record": "prefixmon:auc_pec:ratio",
            "expr": f"sum by ({c}) (prefixmon_episode_executable_fraction_sum) / sum by ({c}) (prefixmon_episode_executable_fraction_count)",  # noqa: E501
        },
        {
            "record": "prefixmon:rr_eligible:sum",
            "expr": f'sum by ({c}) (prefixmon_episodes_total{{prefixmon_executable="false"}}) or 0 * {n}',
        },
        {
            "record": "prefixmon:rr:ratio",
            "expr": (
                f'(sum by ({c}) (prefixmon_episodes_total{{prefixmon_executable="false", prefixmon_outcome="success"}}) '
                f"or 0 * prefixmon:rr_eligible:sum) / (prefixmon:rr_eligible:sum > 0)"
            ),
        },
        {"record": "prefixmon:first_failures:sum", "expr": f"sum by ({c}, prefixmon_cause) (prefixmon_first_failures_total)"},
        {
            "record": "prefixmon:calls_executable:ratio",
            "expr": (
                f'(sum by ({c}) (prefixmon_calls_total{{prefixmon_executable="true"}}) or 0 * sum by ({c}) (prefixmon_calls_total)) '  # noqa: E501
                f"/ sum by ({c}) (prefixmon_calls_total)"
            ),
        },
        {"record": "prefixmon:interventions:sum", "expr": f"sum by ({c}, prefixmon_decision) (prefixmon_interventions_total)"},
    ]
    for k in range(1, max_depth + 1):
        labels = {"depth": str(k)}
        survivors = f'({n} - sum by ({c}) (prefixmon_episode_fed_bucket{{le="{_depth(k)}"}}))'
        reach = (
            f"sum by ({c}) (prefixmon_episode_horizon_count)"
            if k == 1
            else f'(sum by ({c}) (prefixmon_episode_horizon_count) - sum by ({c}) (prefixmon_episode_horizon_bucket{{le="{_depth(k - 1)}"}}))'  # noqa: E501
        )
        out.append({"record": "prefixmon:pec:ratio", "expr": f"{survivors} / {n}", "labels": labels})
        out.append({"record": "prefixmon:n_k:sum", "expr": reach, "labels": labels})
        out.append({"record": "prefixmon:pec_elig:ratio", "expr": f"{survivors} / ({reach} > 0)", "labels": labels})
    return out


def document(max_depth: int = MAX_DEPTH) -> dict[str, Any]:
    """The rule file (JSON is YAML, so Prometheus and promtool read it as is)."""
    return {"groups": [{"name": "prefixmon", "rules": rules(max_depth)}]}


RULES_FILE: Final = Path(__file__).with_name("prefixmon.rules.yml")


def render(max_depth: int = MAX_DEPTH) -> str:
    """The text of ``prefixmon.rules.yml``."""
    head = "# Generated by deploy/prometheus/rules.py; edit that file, then run it.\n"
    return head + json.dumps(document(max_depth), indent=2) + "\n"


if __name__ == "__main__":
    RULES_FILE.write_text(render())
    print(f"wrote {RULES_FILE}", file=sys.stderr)
