"""Configure an OpenTelemetry SDK pipeline for examples, scripts and the CLI.

The library itself only uses the OpenTelemetry API; an application that already configures
the SDK needs nothing from here. For everything else::

    from prefixmon.otel_setup import configure_otel

    with configure_otel(otlp_endpoint="http://127.0.0.1:4318", otlp_file="traces.jsonl") as otel:
        monitor = Monitor(tools, observers=[Telemetry(tracer_provider=otel.tracer_provider,
                                                      meter_provider=otel.meter_provider)])
        ...
    # leaving the block flushes and shuts the pipeline down

Exporters: the console (human-readable JSON per span), OTLP over HTTP/protobuf to a
collector or backend (``pip install "prefixmon[otlp]"``), and an OTLP JSON Lines file in the
format of the OpenTelemetry file exporter, which :mod:`prefixmon.otlp` reads back.

The standard ``OTEL_*`` environment variables work as in any SDK setup, read by the SDK
itself: ``OTEL_SERVICE_NAME`` and ``OTEL_RESOURCE_ATTRIBUTES`` (the resource),
``OTEL_EXPORTER_OTLP_ENDPOINT`` / ``OTEL_EXPORTER_OTLP_{TRACES,METRICS,LOGS}_ENDPOINT``,
``..._HEADERS``, ``..._TIMEOUT``, ``..._COMPRESSION`` (the OTLP exporters, created without
arguments so they read them), ``OTEL_TRACES_EXPORTER`` / ``OTEL_METRICS_EXPORTER`` /
``OTEL_LOGS_EXPORTER`` (``otlp``, ``console``, ``none``; a comma-separated list),
``OTEL_METRIC_EXPORT_INTERVAL`` and ``OTEL_BSP_*``. Keyword arguments win over the
environment when given.
"""

from __future__ import annotations

import base64
import json
import os
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from opentelemetry import _logs as otel_logs
from opentelemetry import metrics as otel_metrics
from opentelemetry import trace
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import BatchLogRecordProcessor, ConsoleLogRecordExporter, LogRecordExporter
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    ConsoleMetricExporter,
    MetricExporter,
    MetricReader,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)

__all__ = ["OtelPipeline", "OtlpJsonFileSpanExporter", "configure_otel", "encode_otlp_json"]

_INSTALL_HINT = 'pip install "prefixmon[otlp]"'


def _hex_ids(obj: Any) -> Any:
    """Protobuf's JSON mapping writes bytes as base64; OTLP JSON wants hex trace/span ids."""
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            if k in ("traceId", "spanId", "parentSpanId") and isinstance(v, str):
                out[k] = base64.b64decode(v).hex()
            else:
                out[k] = _hex_ids(v)
        return out
    if isinstance(obj, list):
        return [_hex_ids(v) for v in obj]
    return obj


def _encoder() -> tuple[Any, Any]:
    try:
        from google.protobuf.json_format import MessageToDict  # type: ignore[import-untyped,unused-ignore]
        from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    except ImportError as e:
        raise ImportError(_INSTALL_HINT) from e
    return MessageToDict, encode_spans


def encode_otlp_json(spans: Sequence[ReadableSpan]) -> dict[str, Any]:
    """Encode finished SDK spans as one OTLP JSON ``TracesData`` object.

    Uses the OpenTelemetry protobuf encoder, then the OTLP JSON rules: lowerCamelCase
    keys, hex ids, enums as integers.

    Raises:
        ImportError: ``opentelemetry-exporter-otlp-proto-common`` is missing.
    """
    MessageToDict, encode_spans = _encoder()
    message = encode_spans(spans)
    data: dict[str, Any] = _hex_ids(MessageToDict(message, use_integers_for_enums=True))
    return data


class OtlpJsonFileSpanExporter(SpanExporter):
    """Appends spans to a JSON Lines file, one OTLP ``TracesData`` object per export.

    Each export is written with one ``write`` of a complete line and flushed, so a reader
    never sees half a batch from a live process (only, at worst, an unterminated last line
    from a killed one, which :func:`prefixmon.otlp.iter_otlp_spans` reports). A file moved
    or deleted by a log rotation is reopened at the path before the next export.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        """Open ``path`` for appending.

        Raises:
            ImportError: the ``otlp`` extra (the protobuf encoder) is missing; fails here,
                not at the first export.
        """
        _encoder()
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file: IO[str] | None = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - kept open
        self._lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        """Write one line for this batch."""
        if not spans:
            return SpanExportResult.SUCCESS
        line = json.dumps(encode_otlp_json(spans), separators=(",", ":"), ensure_ascii=False) + "\n"
        with self._lock:
            if self._file is None:
                return SpanExportResult.FAILURE
            try:
                self._reopen_if_rotated()
                self._file.write(line)
                self._file.flush()
            except OSError:
                return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS

    def _reopen_if_rotated(self) -> None:
        """Reopen the path when it names another file than the open one (moved or deleted by a
        log rotation), as ``logging.handlers.WatchedFileHandler`` does."""
        assert self._file is not None
        try:
            current = os.stat(self.path)
        except FileNotFoundError:
            current = None
        mine = os.fstat(self._file.fileno())
        if current is None or (current.st_dev, current.st_ino) != (mine.st_dev, mine.st_ino):
            self._file.close()
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - kept open

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Everything is flushed at each export already."""
        return True

    def shutdown(self) -> None:
        """Close the file."""
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None


@dataclass(slots=True, kw_only=True)
class OtelPipeline:
    """A configured SDK pipeline: its providers, and shutdown."""

    tracer_provider: TracerProvider
    meter_provider: MeterProvider
    readers: list[MetricReader] = field(default_factory=list)
    logger_provider: LoggerProvider | None = None
    """Where log-based events (``gen_ai.guardrail.result``) go, when a logs exporter is configured."""

    def force_flush(self) -> None:
        """Export everything buffered now."""
        self.tracer_provider.force_flush()
        self.meter_provider.force_flush()
        if self.logger_provider is not None:
            self.logger_provider.force_flush()

    def shutdown(self) -> None:
        """Flush and stop exporting."""
        self.tracer_provider.shutdown()
        self.meter_provider.shutdown()
        if self.logger_provider is not None:
            self.logger_provider.shutdown()

    def __enter__(self) -> OtelPipeline:
        return self

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.shutdown()


def _otlp_url(endpoint: str, signal: str) -> str:
    base = endpoint.rstrip("/")
    return base if base.endswith(f"/v1/{signal}") else f"{base}/v1/{signal}"


def _env_exporters(signal: str) -> set[str]:
    """``OTEL_<SIGNAL>_EXPORTER`` as a set of names (empty when unset)."""
    value = os.environ.get(f"OTEL_{signal}_EXPORTER", "")
    return {v.strip().lower() for v in value.split(",") if v.strip()}


def _env_otlp(signal: str) -> bool:
    """Whether the environment asks for OTLP export of ``signal`` (an endpoint or the exporter name)."""
    if "none" in _env_exporters(signal):
        return False
    return "otlp" in _env_exporters(signal) or bool(
        os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or os.environ.get(f"OTEL_EXPORTER_OTLP_{signal}_ENDPOINT")
    )


def configure_otel(
    *,
    service_name: str | None = None,
    resource_attributes: Mapping[str, str] | None = None,
    console: bool = False,
    otlp_endpoint: str | None = None,
    otlp_headers: Mapping[str, str] | None = None,
    otlp_metrics: bool = True,
    otlp_file: str | os.PathLike[str] | None = None,
    metric_readers: Sequence[MetricReader] = (),
    metric_interval_s: float | None = None,
    batch: bool = True,
    set_global: bool = False,
    logs: bool | None = None,
) -> OtelPipeline:
    """Build tracer and meter providers with the chosen exporters.

    Args:
        service_name: the ``service.name`` resource attribute; default ``OTEL_SERVICE_NAME``,
            else ``prefixmon``.
        resource_attributes: more resource attributes (e.g.
            ``{"openinference.project.name": "agents"}`` for Phoenix projects).
        console: print spans and metrics to stdout.
        otlp_endpoint: base URL of an OTLP/HTTP receiver (``http://host:4318``); spans go
            to ``/v1/traces``, metrics to ``/v1/metrics``. Default: the ``OTEL_EXPORTER_OTLP_*``
            environment, when it names an endpoint or ``OTEL_*_EXPORTER=otlp``.
        otlp_headers: extra HTTP headers (API keys); default ``OTEL_EXPORTER_OTLP_HEADERS``.
        otlp_metrics: also send metrics to ``otlp_endpoint`` (turn off for trace-only
            backends).
        otlp_file: append spans to this OTLP JSON Lines file.
        metric_readers: additional metric readers (an in-memory reader in tests).
        metric_interval_s: export interval of the periodic metric readers; default
            ``OTEL_METRIC_EXPORT_INTERVAL``, else 60 s.
        batch: batch span exports (off: export each span as it ends, for short scripts).
        set_global: also install the providers as the global ones (only an application
            should; a library never does).
        logs: build a logger provider for log-based events. ``True``: OTLP wherever traces
            go (and the console with ``console=True``); default: when ``OTEL_LOGS_EXPORTER``
            names ``otlp`` (sent to ``otlp_endpoint`` when given, else the environment's
            endpoint) or ``console``; ``False``: never, whatever the environment says.

    Raises:
        ImportError: OTLP/HTTP export was asked for without the ``otlp`` extra.
    """
    attributes = dict(resource_attributes or {})
    name = service_name or os.environ.get("OTEL_SERVICE_NAME")
    attributes.setdefault("service.name", name or "prefixmon")  # the SDK adds OTEL_RESOURCE_ATTRIBUTES
    resource = Resource.create(attributes)
    tracer_provider = TracerProvider(resource=resource)
    exporters: list[SpanExporter] = []
    metric_exporters: list[MetricExporter] = []
    log_exporters: list[LogRecordExporter] = []
    if console or "console" in _env_exporters("TRACES"):
        exporters.append(ConsoleSpanExporter())
    if console or "console" in _env_exporters("METRICS"):
        metric_exporters.append(ConsoleMetricExporter())
    if logs is not False and (console or "console" in _env_exporters("LOGS")):
        log_exporters.append(ConsoleLogRecordExporter())
    want_traces = otlp_endpoint is not None or _env_otlp("TRACES")
    want_metrics = otlp_metrics and (otlp_endpoint is not None or _env_otlp("METRICS"))
    # logs=True: wherever traces go; by default only when OTEL_LOGS_EXPORTER names otlp
    asked = "otlp" in _env_exporters("LOGS") and "none" not in _env_exporters("LOGS")
    reachable = otlp_endpoint is not None or _env_otlp("LOGS")
    want_logs = logs is not False and reachable and (logs is True or asked)
    if want_traces or want_metrics or want_logs:
        try:
            from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
            from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        except ImportError as e:
            raise ImportError(_INSTALL_HINT) from e
        headers = dict(otlp_headers) if otlp_headers is not None else None  # None: the SDK reads the environment

        def where(signal: str) -> str | None:
            return None if otlp_endpoint is None else _otlp_url(otlp_endpoint, signal)

        if want_traces:
            exporters.append(OTLPSpanExporter(endpoint=where("traces"), headers=headers))
        if want_metrics:
            metric_exporters.append(OTLPMetricExporter(endpoint=where("metrics"), headers=headers))
        if want_logs:
            log_exporters.append(OTLPLogExporter(endpoint=where("logs"), headers=headers))
    if otlp_file is not None:
        exporters.append(OtlpJsonFileSpanExporter(otlp_file))
    for exporter in exporters:
        tracer_provider.add_span_processor(BatchSpanProcessor(exporter) if batch else SimpleSpanProcessor(exporter))
    interval = None if metric_interval_s is None else metric_interval_s * 1000  # None: OTEL_METRIC_EXPORT_INTERVAL
    readers: list[MetricReader] = [PeriodicExportingMetricReader(m, export_interval_millis=interval) for m in metric_exporters]
    readers.extend(metric_readers)
    meter_provider = MeterProvider(resource=resource, metric_readers=readers)
    logger_provider: LoggerProvider | None = None
    if log_exporters:
        logger_provider = LoggerProvider(resource=resource)
        for log_exporter in log_exporters:
            logger_provider.add_log_record_processor(BatchLogRecordProcessor(log_exporter))
    if set_global:
        trace.set_tracer_provider(tracer_provider)
        otel_metrics.set_meter_provider(meter_provider)
        if logger_provider is not None:
            otel_logs.set_logger_provider(logger_provider)
    return OtelPipeline(
        tracer_provider=tracer_provider, meter_provider=meter_provider, readers=readers, logger_provider=logger_provider
    )
