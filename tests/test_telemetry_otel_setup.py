"""``configure_otel`` honours the standard OTEL_* environment through the SDK's own configuration."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

pytest.importorskip("opentelemetry.exporter.otlp.proto.http", reason="the otlp extra is not installed")

from prefixmon.telemetry.otel_setup import configure_otel


@pytest.fixture
def collector() -> Iterator[tuple[str, list[tuple[str, dict[str, str]]]]]:
    """A local HTTP endpoint on 127.0.0.1 that records each OTLP POST's path and headers."""
    seen: list[tuple[str, dict[str, str]]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            seen.append((self.path, {k.lower(): v for k, v in self.headers.items()}))
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


class TestEnvironment:
    """Service name, resource attributes, endpoints, headers and exporters from OTEL_*."""

    def test_resource_from_env(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES shape the resource; a keyword wins over them."""
        monkeypatch.setenv("OTEL_SERVICE_NAME", "agents-prod")
        monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "team=eval,region=eu")
        with configure_otel() as otel:
            attrs = dict(otel.tracer_provider.resource.attributes)
        assert attrs["service.name"] == "agents-prod" and attrs["team"] == "eval" and attrs["region"] == "eu"
        with configure_otel(service_name="explicit") as otel:
            assert otel.tracer_provider.resource.attributes["service.name"] == "explicit"

    def test_endpoint_and_headers_from_env(
        self, monkeypatch: pytest.MonkeyPatch, collector: tuple[str, list[tuple[str, dict[str, str]]]]
    ) -> None:
        """With only OTEL_EXPORTER_OTLP_ENDPOINT and _HEADERS set, spans and metrics reach that endpoint
        with those headers; logs go there too when OTEL_LOGS_EXPORTER=otlp."""
        url, seen = collector
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", url)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-api-key=s3cret")
        monkeypatch.setenv("OTEL_LOGS_EXPORTER", "otlp")
        otel = configure_otel(batch=False)
        otel.tracer_provider.get_tracer("t").start_span("s").end()
        otel.meter_provider.get_meter("t").create_counter("c").add(1)
        assert otel.logger_provider is not None
        from opentelemetry._logs import LogRecord

        otel.logger_provider.get_logger("t").emit(LogRecord(event_name="gen_ai.guardrail.result", attributes={"a": 1}))
        otel.shutdown()
        paths = {p for p, _ in seen}
        assert {"/v1/traces", "/v1/metrics", "/v1/logs"} <= paths
        assert all(h.get("x-api-key") == "s3cret" for _, h in seen)

    def test_exporter_none(
        self, monkeypatch: pytest.MonkeyPatch, collector: tuple[str, list[tuple[str, dict[str, str]]]]
    ) -> None:
        """OTEL_TRACES_EXPORTER=none turns trace export off even with an endpoint in the environment."""
        url, seen = collector
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", url)
        monkeypatch.setenv("OTEL_TRACES_EXPORTER", "none")
        monkeypatch.setenv("OTEL_METRICS_EXPORTER", "none")
        otel = configure_otel(batch=False)
        otel.tracer_provider.get_tracer("t").start_span("s").end()
        otel.shutdown()
        assert seen == []


class TestLogs:
    """Which log exporters ``logs=`` and OTEL_LOGS_EXPORTER give."""

    def test_env_otlp_logs_go_to_the_given_endpoint(
        self, monkeypatch: pytest.MonkeyPatch, collector: tuple[str, list[tuple[str, dict[str, str]]]]
    ) -> None:
        """OTEL_LOGS_EXPORTER=otlp with otlp_endpoint= passed: the logs go to that endpoint (none were exported)."""
        url, seen = collector
        monkeypatch.setenv("OTEL_LOGS_EXPORTER", "otlp")
        otel = configure_otel(otlp_endpoint=url, otlp_metrics=False, batch=False)
        assert otel.logger_provider is not None
        from opentelemetry._logs import LogRecord

        otel.logger_provider.get_logger("t").emit(LogRecord(event_name="gen_ai.guardrail.result", attributes={"a": 1}))
        otel.shutdown()
        assert "/v1/logs" in {p for p, _ in seen}

    def test_logs_false_wins_over_the_environment(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """logs=False builds no logger provider, whatever OTEL_LOGS_EXPORTER says (console was still built)."""
        monkeypatch.setenv("OTEL_LOGS_EXPORTER", "console,otlp")
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
        otel = configure_otel(logs=False, batch=False)
        try:
            assert otel.logger_provider is None
        finally:
            otel.shutdown()
