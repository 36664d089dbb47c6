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

from opentelemetry import metrics as otel_metrics
from opentelemetry import trace
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

    def force_flush(self) -> None:
        """Export everything buffered now."""
        self.tracer_provider.force_flush()
        self.meter_provider.force_flush()

    def shutdown(self) -> None:
        """Flush and stop exporting."""
        self.tracer_provider.shutdown()
        self.meter_provider.shutdown()

    def __enter__(self) -> OtelPipeline:
        return self

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.shutdown()


def _otlp_url(endpoint: str, signal: str) -> str:
    base = endpoint.rstrip("/")
    return base if base.endswith(f"/v1/{signal}") else f"{base}/v1/{signal}"


def configure_otel(
    *,
    service_name: str = "prefixmon",
    resource_attributes: Mapping[str, str] | None = None,
    console: bool = False,
    otlp_endpoint: str | None = None,
    otlp_headers: Mapping[str, str] | None = None,
    otlp_metrics: bool = True,
    otlp_file: str | os.PathLike[str] | None = None,
    metric_readers: Sequence[MetricReader] = (),
    metric_interval_s: float = 10.0,
    batch: bool = True,
    set_global: bool = False,
) -> OtelPipeline:
    """Build tracer and meter providers with the chosen exporters.

    Args:
        service_name: the ``service.name`` resource attribute.
        resource_attributes: more resource attributes (e.g.
            ``{"openinference.project.name": "agents"}`` for Phoenix projects).
        console: print spans and metrics to stdout.
        otlp_endpoint: base URL of an OTLP/HTTP receiver (``http://host:4318``); spans go
            to ``/v1/traces``, metrics to ``/v1/metrics``.
        otlp_headers: extra HTTP headers (API keys).
        otlp_metrics: also send metrics to ``otlp_endpoint`` (turn off for trace-only
            backends).
        otlp_file: append spans to this OTLP JSON Lines file.
        metric_readers: additional metric readers (an in-memory reader in tests).
        metric_interval_s: export interval of the periodic metric readers.
        batch: batch span exports (off: export each span as it ends, for short scripts).
        set_global: also install the providers as the global ones (only an application
            should; a library never does).

    Raises:
        ImportError: OTLP/HTTP export was asked for without the ``otlp`` extra.
    """
    resource = Resource.create({"service.name": service_name, **(resource_attributes or {})})
    tracer_provider = TracerProvider(resource=resource)
    exporters: list[SpanExporter] = []
    metric_exporters: list[MetricExporter] = []
    if console:
        exporters.append(ConsoleSpanExporter())
        metric_exporters.append(ConsoleMetricExporter())
    if otlp_endpoint is not None:
        try:
            from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        except ImportError as e:
            raise ImportError(_INSTALL_HINT) from e
        headers = dict(otlp_headers or {})
        exporters.append(OTLPSpanExporter(endpoint=_otlp_url(otlp_endpoint, "traces"), headers=headers))
        if otlp_metrics:
            metric_exporters.append(OTLPMetricExporter(endpoint=_otlp_url(otlp_endpoint, "metrics"), headers=headers))
    if otlp_file is not None:
        exporters.append(OtlpJsonFileSpanExporter(otlp_file))
    for exporter in exporters:
        tracer_provider.add_span_processor(BatchSpanProcessor(exporter) if batch else SimpleSpanProcessor(exporter))
    readers: list[MetricReader] = [
        PeriodicExportingMetricReader(m, export_interval_millis=metric_interval_s * 1000) for m in metric_exporters
    ]
    readers.extend(metric_readers)
    meter_provider = MeterProvider(resource=resource, metric_readers=readers)
    if set_global:
        trace.set_tracer_provider(tracer_provider)
        otel_metrics.set_meter_provider(meter_provider)
    return OtelPipeline(tracer_provider=tracer_provider, meter_provider=meter_provider, readers=readers)
