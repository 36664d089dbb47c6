"""The metric side of :class:`~prefixmon.telemetry.Telemetry`: its instruments and what it records on them.

Apart from the spans because it is a separate concern with its own state (the instruments, the
cache of built attribute sets) and its own timing: per-call counts are summed per episode (in
the episode's ``dict`` of :data:`_CallKey` counts, which the call hooks bump inline) and added
here when the episode ends; monitor-internal errors are counted at once. Names are in
:mod:`prefixmon.semconv` (``METRIC_*``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

from opentelemetry import metrics as otel_metrics
from opentelemetry.metrics import Meter, MeterProvider

from .. import semconv as sc
from .._version import VERSION as _VERSION
from ..vocabulary import Cause, Decision

if TYPE_CHECKING:
    from ..records.model import EpisodeRecord

_MAX_ATTRIBUTE_SETS: Final = 4096
"""Metric attribute sets kept built (see :meth:`_Metrics.attributes`)."""
_CallKey = tuple[bool, Decision, "Cause | None"]
"""``(executable, decision, cause)``: one distinct attribute set of the per-call counters."""
_PASS_KEY: Final[_CallKey] = (True, Decision.ALLOW, None)
_INTERVENTIONS: Final = frozenset(
    {Decision.BLOCK, Decision.REPLAN, Decision.APPROVE, Decision.EDIT, Decision.DENY, Decision.FAIL_CLOSED}
)

try:  # the API's stand-in for a provider the application has not set: it forwards nothing until then
    from opentelemetry.metrics._internal import _ProxyMeterProvider
except ImportError:  # pragma: no cover - another API version: measure always, as if an SDK were there
    _NO_METER_PROVIDERS: tuple[type, ...] = (otel_metrics.NoOpMeterProvider,)
else:
    _NO_METER_PROVIDERS = (otel_metrics.NoOpMeterProvider, _ProxyMeterProvider)


def _get_meter(provider: MeterProvider | None) -> Meter:
    return otel_metrics.get_meter("prefixmon", _VERSION, provider)


class _Metrics:
    """The instruments of one :class:`~prefixmon.telemetry.Telemetry`, and the attribute sets built for them."""

    __slots__ = (
        "_attribute_sets", "calls", "episodes", "errors", "fed", "first", "fraction", "horizon", "interventions", "labels",
    )  # fmt: skip

    def __init__(self, meter_provider: MeterProvider | None, max_depth: int, labels: Sequence[str]) -> None:
        self.labels = tuple(labels)
        """The episode labels copied onto metric attributes (``prefixmon.label.<key>``)."""
        self._attribute_sets: dict[tuple[tuple[str | None, ...], tuple[Any, ...]], Mapping[str, Any]] = {}
        """Metric attributes already built, by label values and attribute set (see :meth:`attributes`)."""
        meter = _get_meter(meter_provider)
        buckets = [float(d) for d in range(1, max_depth + 1)]
        self.episodes = meter.create_counter(sc.METRIC_EPISODES, "{episode}", "Finished episodes")
        self.fed = meter.create_histogram(
            sc.METRIC_FED,
            "{action}",
            "First-error depth (horizon + 1 when fully executable)",
            explicit_bucket_boundaries_advisory=buckets,
        )
        self.horizon = meter.create_histogram(
            sc.METRIC_HORIZON, "{action}", "Episode horizon T", explicit_bucket_boundaries_advisory=buckets
        )
        self.fraction = meter.create_histogram(
            sc.METRIC_EXECUTABLE_FRACTION,
            "1",
            "Executable share of the horizon, (FED - 1) / T; AUC-PEC = sum / count",
            explicit_bucket_boundaries_advisory=[0.0, 0.25, 0.5, 0.75, 1.0],
        )
        self.calls = meter.create_counter(sc.METRIC_CALLS, "{call}", "Checked tool calls")
        self.first = meter.create_counter(sc.METRIC_FIRST_FAILURES, "{episode}", "Primary cause at FED")
        self.interventions = meter.create_counter(sc.METRIC_INTERVENTIONS, "{call}", "Calls blocked, replanned or escalated")
        self.errors = meter.create_counter(sc.METRIC_INTERNAL_ERRORS, "{error}", "Errors caught inside the monitor")

    def episode_finished(self, record: EpisodeRecord, counts: dict[_CallKey, int], passes: int | None) -> None:
        """Add a measured episode's call counts and record the episode.

        ``passes`` is the traced episode's fast-path pass count; ``None`` when it was not traced:
        no per-call hooks ran, so its calls are counted here, from its record.
        """
        key = self.label_key(record.labels)
        if passes is None:
            for a in record.actions:
                if a.tool is not None:  # (the no-tool slot of an episode without calls is not a call)
                    call = (a.executable, a.decision, a.cause)
                    counts[call] = counts.get(call, 0) + 1
        elif passes:
            counts[_PASS_KEY] = counts.get(_PASS_KEY, 0) + passes
        if counts:
            self.add_call_counts(counts, key)
        self.record_episode(record, key)

    def record_episode(self, record: EpisodeRecord, key: tuple[str | None, ...]) -> None:
        base = self.attributes(key)
        outcome = record.outcome.value if record.outcome is not None else None
        self.episodes.add(1, self.attributes(key, ("episode", record.executable, record.status, outcome)))
        self.fed.record(record.fed, base)
        self.horizon.record(record.horizon, base)
        self.fraction.record((record.fed - 1) / record.horizon, base)
        if record.first_failure is not None:
            self.first.add(1, self.attributes(key, ("first", record.first_failure.cause.value)))

    def add_call_counts(self, counts: Mapping[_CallKey, int], key: tuple[str | None, ...]) -> None:
        """Add per-call counts (with the episode's metric labels), once per distinct attribute set."""
        for (executable, decision, cause), n in counts.items():
            attrs = self.attributes(key, ("call", executable, decision.value, cause.value if cause is not None else None))
            self.calls.add(n, attrs)
            if decision in _INTERVENTIONS:
                self.interventions.add(n, attrs)

    def internal_error(self, where: str, error: BaseException) -> None:
        """Count a monitor-internal error, by the first word of where it happened and its type."""
        self.errors.add(1, {sc.PREFIXMON_WHERE: where.split(" ", 1)[0], sc.ERROR_TYPE: type(error).__name__})

    def label_key(self, labels: Mapping[str, str]) -> tuple[str | None, ...]:
        """The values of the metric labels (``None`` where missing): what metric attributes depend on."""
        return tuple(labels.get(k) for k in self.labels)

    def attributes(self, key: tuple[str | None, ...], extra: tuple[Any, ...] = ()) -> Mapping[str, Any]:
        """Metric attributes for the label values ``key`` and one of the attribute sets below, built once.

        An episode records five to seven measurements; building their attribute dicts was most
        of the metrics' cost per episode. The sets are few (labels are low-cardinality by
        design), and the cache is cleared when it grows past :data:`_MAX_ATTRIBUTE_SETS`.
        """
        cached = self._attribute_sets.get((key, extra))
        if cached is not None:
            return cached
        attrs: dict[str, Any] = {sc.PREFIXMON_LABEL_PREFIX + k: v for k, v in zip(self.labels, key, strict=True) if v is not None}
        kind = extra[0] if extra else None
        if kind == "episode":
            _, executable, status, outcome = extra
            attrs[sc.PREFIXMON_EXECUTABLE] = executable
            attrs[sc.PREFIXMON_STATUS] = status
            if outcome is not None:
                attrs[sc.PREFIXMON_OUTCOME] = outcome
        elif kind == "first":
            attrs[sc.PREFIXMON_CAUSE] = extra[1]
        elif kind == "call":
            _, executable, decision, cause = extra
            attrs[sc.PREFIXMON_EXECUTABLE] = executable
            attrs[sc.PREFIXMON_DECISION] = decision
            if cause is not None:
                attrs[sc.PREFIXMON_CAUSE] = cause
        if len(self._attribute_sets) >= _MAX_ATTRIBUTE_SETS:
            self._attribute_sets.clear()
        self._attribute_sets[(key, extra)] = attrs
        return attrs
