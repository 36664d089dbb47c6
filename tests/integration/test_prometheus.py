"""Live PEC in a real Prometheus: each recording rule equals ``build_report`` on the same episodes.

A real Prometheus (Debian's ``prometheus`` package; ``.ci/run`` installs it) scrapes the
OpenTelemetry Prometheus exporter on 127.0.0.1 while a real monitor runs episodes with
``Telemetry``; the rule file is ``deploy/prometheus/prefixmon.rules.yml``. Takes about 10 s.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import pytest

pytest.importorskip("opentelemetry.exporter.prometheus", reason="the prometheus extra is not installed")
from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.sdk.metrics import MeterProvider
from prometheus_client import CollectorRegistry, start_http_server

from prefixmon import Monitor, Ref, Telemetry, ToolBlocked, Toolset
from prefixmon.analytics import Report, build_report
from prefixmon.testing import RecordCapture

pytestmark = pytest.mark.integration
PROMETHEUS = shutil.which("prometheus")
if PROMETHEUS is None:  # CI installs it (.ci/run); a developer machine may not have it
    pytest.skip("the prometheus binary is not installed (apt-get install prometheus)", allow_module_level=True)
ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "prefixmon.rules.yml"
COHORT = ("prefixmon_label_dataset", "prefixmon_label_model", "prefixmon_label_method")


def _rules_module() -> Any:
    spec = importlib.util.spec_from_file_location("prefixmon_rules", ROOT / "deploy" / "prometheus" / "rules.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _tools() -> Toolset:
    tools = Toolset()

    @tools.tool(produces="person_id")
    def search(name: str) -> dict[str, str]:
        return {"person_id": f"p-{name}"}

    @tools.tool
    def message(person_id: Annotated[str, Ref("person_id")], text: str) -> str:
        return "sent"

    return tools


async def _population(monitor: Monitor) -> None:
    """Three cohorts: one always executable, one never (FED 1), one mixed with recoveries."""
    plans: dict[str, list[tuple[list[str], str]]] = {
        "careful": [(["search", "message"], "success")] * 4 + [(["search", "message", "message"], "partial")],
        "sloppy": [(["message"], "failure"), (["message", "search", "message"], "success"), (["message", "message"], "failure")],
        "mixed": [
            (["search", "message"], "success"),
            (["message", "search", "message"], "success"),
            (["search", "message", "search", "message", "message"], "failure"),
            (["search"], "success"),
        ],
    }
    for method, episodes in plans.items():
        for i, (calls, outcome) in enumerate(episodes):
            labels = {"dataset": "contacts", "model": "m2" if method == "mixed" else "m1", "method": method}
            async with monitor.episode(task_id=f"task-{i}", labels=labels) as ep:
                found = False
                for name in calls:
                    with contextlib.suppress(ToolBlocked):
                        if name == "search":
                            await ep.call("search", {"name": "ann"})
                            found = True
                        else:
                            await ep.call("message", {"person_id": "p-ann" if found else "p-bob", "text": "hi"})
                ep.finish(outcome)


def _query(base: str, expr: str) -> list[dict[str, Any]]:
    url = f"{base}/api/v1/query?{urllib.parse.urlencode({'query': expr})}"
    with urllib.request.urlopen(url, timeout=5) as r:
        body = json.loads(r.read())
    assert body["status"] == "success", body
    result: list[dict[str, Any]] = body["data"]["result"]
    return result


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Report]]:
    """A Prometheus scraping a monitor's exporter after a population of episodes ran; and their report."""
    import anyio

    tmp = tmp_path_factory.mktemp("prometheus")
    registry = CollectorRegistry()
    provider = MeterProvider(metric_readers=[PrometheusMetricReader(registry=registry)])
    exporter_port = _port()
    server, thread = start_http_server(exporter_port, addr="127.0.0.1", registry=registry)
    sink = RecordCapture()
    monitor = Monitor(_tools(), policy="block", sink=sink, observers=[Telemetry(meter_provider=provider, tracing=False)])
    anyio.run(_population, monitor)
    prom_port = _port()
    config = tmp / "prometheus.yml"
    config.write_text(
        json.dumps(
            {
                "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                "rule_files": [str(RULES)],
                "scrape_configs": [{"job_name": "prefixmon", "static_configs": [{"targets": [f"127.0.0.1:{exporter_port}"]}]}],
            }
        )
    )
    assert PROMETHEUS is not None
    proc = subprocess.Popen(
        [
            PROMETHEUS,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp / 'data'}",
            f"--web.listen-address=127.0.0.1:{prom_port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{prom_port}"
    try:
        deadline = time.monotonic() + 60  # bounded: Prometheus is up and has evaluated the rules
        while True:
            try:
                if len(_query(base, "prefixmon:pec_elig:ratio")) and len(_query(base, "prefixmon:rr:ratio")) == 2:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, "Prometheus did not evaluate the rules within 60 s"
            assert proc.poll() is None, "Prometheus exited"
            time.sleep(0.5)
        yield base, build_report(sink.records, by=["dataset", "model", "method"], bootstrap=0)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
        provider.shutdown()


def _by_cohort(rows: list[dict[str, Any]], extra: str | None = None) -> dict[tuple[str, ...], float]:
    out = {}
    for row in rows:
        key = tuple(row["metric"].get(k, "") for k in COHORT)
        if extra is not None:
            key = (*key, row["metric"].get(extra, ""))
        out[key] = float(row["value"][1])
    return out


def _key(c: Any) -> tuple[str, ...]:
    return tuple(str(c.key[k]) for k in ("dataset", "model", "method"))


class TestRules:
    """Each documented query equals the offline report."""

    def test_rule_file_is_current_and_valid(self) -> None:
        """The rule file is what rules.py generates, and promtool accepts it."""
        assert RULES.read_text() == _rules_module().render()
        promtool = shutil.which("promtool")
        assert promtool is not None
        out = subprocess.run([promtool, "check", "rules", str(RULES)], capture_output=True, text=True, check=False)
        assert out.returncode == 0, out.stdout + out.stderr

    def test_ter_success_mean_fed_auc(self, live: tuple[str, Report]) -> None:
        """TER (0, not missing, for the cohort that never ran executable), success, mean FED, AUC-PEC."""
        base, report = live
        for rule, field in (
            ("prefixmon:ter:ratio", "ter"),
            ("prefixmon:success:ratio", "success"),
            ("prefixmon:mean_fed:ratio", "mean_fed"),
            ("prefixmon:auc_pec:ratio", "auc_pec"),
        ):
            got = _by_cohort(_query(base, rule))
            expected = {_key(c): getattr(c, field).value for c in report.cohorts}
            assert got.keys() == expected.keys(), rule
            for k, v in expected.items():
                assert got[k] == pytest.approx(v, abs=1e-12), (rule, k)
        assert _by_cohort(_query(base, "prefixmon:ter:ratio"))[("contacts", "m1", "sloppy")] == 0.0

    def test_rr_and_eligible(self, live: tuple[str, Report]) -> None:
        """RR with its eligible count; no RR sample (undefined) for the cohort where nothing failed."""
        base, report = live
        rr = _by_cohort(_query(base, "prefixmon:rr:ratio"))
        eligible = _by_cohort(_query(base, "prefixmon:rr_eligible:sum"))
        for c in report.cohorts:
            assert eligible[_key(c)] == c.rr.eligible
            if c.rr.value is None:
                assert _key(c) not in rr
            else:
                assert rr[_key(c)] == pytest.approx(c.rr.value, abs=1e-12)
        assert ("contacts", "m1", "careful") not in rr

    def test_pec_curves(self, live: tuple[str, Report]) -> None:
        """PEC(k), n_k and PEC_elig(k) at every depth of every cohort's curve (and PEC 0 past it)."""
        base, report = live
        curves = {
            name: _by_cohort(_query(base, f"prefixmon:{name}"), "depth") for name in ("pec:ratio", "n_k:sum", "pec_elig:ratio")
        }
        for c in report.cohorts:
            for k in range(1, 9):
                key = (*_key(c), str(k))
                pec = c.pec[k - 1] if k <= len(c.pec) else 0.0
                n_k = c.n_k[k - 1] if k <= len(c.n_k) else 0
                assert curves["pec:ratio"][key] == pytest.approx(pec, abs=1e-12), key
                assert curves["n_k:sum"][key] == n_k, key
                if n_k:
                    assert curves["pec_elig:ratio"][key] == pytest.approx(c.pec_elig[k - 1], abs=1e-12), key
                else:
                    assert key not in curves["pec_elig:ratio"]

    def test_causes_calls_interventions(self, live: tuple[str, Report]) -> None:
        """First-failure causes per cohort; call-level counters carry the cohort labels."""
        base, report = live
        causes = _by_cohort(_query(base, "prefixmon:first_failures:sum"), "prefixmon_cause")
        for c in report.cohorts:
            for cause, count in c.causes.items():
                assert causes.get((*_key(c), cause), 0.0) == count
        interventions = _by_cohort(_query(base, "prefixmon:interventions:sum"), "prefixmon_decision")
        blocked = {k[:3]: v for k, v in interventions.items() if k[3] == "block"}
        assert blocked[("contacts", "m1", "sloppy")] >= 3
        calls = _by_cohort(_query(base, "prefixmon:calls_executable:ratio"))
        assert calls[("contacts", "m1", "careful")] == 1.0


class TestDashboardQueries:
    """Every query of the Grafana dashboard runs on the real Prometheus and returns data."""

    def test_every_panel_query(self, live: tuple[str, Report]) -> None:
        """With the template variables at All, each target's PromQL is valid and gives samples."""
        base, _ = live
        dashboard = json.loads((ROOT / "deploy" / "grafana" / "prefixmon.json").read_text())
        for panel in dashboard["panels"]:
            for target in panel["targets"]:
                expr = target["expr"]
                for var in ("$dataset", "$model", "$method"):
                    expr = expr.replace(var, ".*")
                expr = expr.replace("$__range", "1h").replace("$__rate_interval", "1m")
                deadline = time.monotonic() + 15  # rate() needs two scrapes in its window
                while not _query(base, expr):
                    assert time.monotonic() < deadline, (panel["title"], expr)
                    time.sleep(0.5)
