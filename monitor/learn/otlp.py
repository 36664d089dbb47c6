"""OTLP traces recorded with content, as transcripts for ``prefixmon learn`` (the ``otlp`` format).

Reads the JSON Lines files :mod:`prefixmon.records.otlp` reads (the OpenTelemetry file exporter's and
the Collector ``file`` exporter's). Each prefixmon episode span with its ``execute_tool``
call spans becomes one transcript: the tool name, call id, arguments
(``gen_ai.tool.call.arguments``) and result (``gen_ai.tool.call.result``) of every call, in
depth order. A call whose result was recorded is left unmarked (``error=None``): the result
text is what the environment said, so the learner reads its shape (an ``Error:`` prefix, an
``error`` field) and learns error recognisers from it, whatever the monitor concluded at the
time (without a recogniser in its spec it took ``Error: ...`` texts as accepted); only a
result the monitor's recogniser rejected (``prefixmon.error``) is marked an error. A call that
ran without a result (it raised) is marked an error with ``prefixmon.error`` as its text, or
accepted without one; a call refused or abandoned before it ran has ``ran=False``. Only traces
recorded with ``Telemetry(capture_content=True)`` carry arguments and results; an episode
without them is reported and skipped. Spans carry no user messages, so nothing can be
learned about grounding from traces alone.

Call spans are held until their episode span arrives (exporters write a parent after its
children), so memory grows with the episodes open at once, not with the file.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

from .. import semconv as sc
from .._internal.json_depth import loads
from ..records.model import BadLine
from ..records.otlp import OtlpSpan, is_trace_line, iter_otlp_spans
from .transcript import Call, Problem, Transcript

__all__ = ("READER", "OtlpTranscriptReader", "transcript_from_spans")

_OPERATIONS: Final = (sc.EXECUTE_TOOL, sc.APPLY_GUARDRAIL)


def transcript_from_spans(root: OtlpSpan, calls: list[OtlpSpan]) -> Transcript | str:
    """An episode span and its call spans as a transcript, or why they cannot be one."""
    a = root.attributes
    events: list[Call] = []
    for span in sorted(calls, key=lambda s: int(s.attributes.get(sc.PREFIXMON_DEPTH, 0))):
        c = span.attributes
        raw = c.get(sc.GEN_AI_TOOL_CALL_ARGUMENTS)
        if raw is None:
            return "recorded without content (Telemetry(capture_content=True) records arguments and results)"
        arguments: Any
        try:
            arguments = loads(raw) if isinstance(raw, str) else raw  # depth-safe: values past 400 levels are None
        except ValueError:
            arguments = str(raw)  # cut at max_content_chars, or not JSON: a call without usable arguments
        if not isinstance(arguments, dict):
            arguments = str(raw)
        reached = bool(c.get(sc.PREFIXMON_REACHED_ENVIRONMENT, False))
        error = c.get(sc.PREFIXMON_ERROR)
        abandoned = bool(c.get(sc.PREFIXMON_EXECUTABLE, True)) and error is not None
        ran = reached and not abandoned
        result = c.get(sc.GEN_AI_TOOL_CALL_RESULT)
        # with a result, what the environment said decides (read by its shape), unless the
        # monitor's own error recogniser already rejected it; without one (it raised, or
        # returned nothing), the monitor's word is all there is
        mark: bool | None = True if error is not None else None
        if not ran:
            result = None
        elif result is None:
            result, mark = error, error is not None
        events.append(
            Call(
                tool=str(c.get(sc.GEN_AI_TOOL_NAME, "")),
                arguments=arguments,
                call_id=None if c.get(sc.GEN_AI_TOOL_CALL_ID) is None else str(c[sc.GEN_AI_TOOL_CALL_ID]),
                result=result,
                error=mark if ran else None,
                ran=ran,
            )
        )
    labels = {k[len(sc.PREFIXMON_LABEL_PREFIX) :]: str(v) for k, v in a.items() if k.startswith(sc.PREFIXMON_LABEL_PREFIX)}
    outcome = a.get(sc.PREFIXMON_OUTCOME)
    return Transcript(
        episode_id=str(a[sc.PREFIXMON_EPISODE_ID]),
        events=tuple(events),
        outcome=None if outcome is None else str(outcome),
        source=f"{root.path}:{root.line}" if root.path else None,
        labels=labels,
    )


class OtlpTranscriptReader:
    """OTLP JSON Lines traces recorded with content."""

    help = "OTLP JSON Lines traces of prefixmon episodes recorded with Telemetry(capture_content=True)"

    def sniff(self, path: Path, head: bytes) -> bool:
        """The first line is OTLP trace data (see :func:`prefixmon.records.otlp.is_trace_line`)."""
        return is_trace_line(head.lstrip().split(b"\n", 1)[0])

    def read(self, path: Path, problems: list[Problem]) -> Iterator[Transcript]:
        """Every episode whose episode span is in the file; bad lines and incomplete episodes are reported."""
        name = str(path)
        bad: list[BadLine] = []
        calls: dict[str, list[OtlpSpan]] = {}
        roots: list[OtlpSpan] = []
        done: set[str] = set()
        line = 0
        for span in iter_otlp_spans(path, on_error="skip", errors=bad):
            if span.line != line:
                yield from self._finish(roots, calls, done, problems)
                line = span.line or 0
            for b in bad:
                problems.append(Problem(path=b.path, line=b.line, message=b.message))
            bad.clear()
            a = span.attributes
            episode = a.get(sc.PREFIXMON_EPISODE_ID)
            if episode is None:
                continue
            if sc.PREFIXMON_HORIZON in a:
                roots.append(span)
            elif sc.PREFIXMON_DEPTH in a and a.get(sc.GEN_AI_OPERATION_NAME) in _OPERATIONS:
                if str(episode) in done:
                    problems.append(
                        Problem(
                            path=name, line=span.line or 0, message="a call span after its episode span", episode=str(episode)
                        )
                    )
                    continue
                calls.setdefault(str(episode), []).append(span)
        yield from self._finish(roots, calls, done, problems)
        for b in bad:
            problems.append(Problem(path=b.path, line=b.line, message=b.message))
        for episode, spans in sorted(calls.items()):
            problems.append(
                Problem(
                    path=name,
                    line=spans[0].line or 0,
                    message="call spans but no episode span (not finished or not exported)",
                    episode=episode,
                )
            )

    @staticmethod
    def _finish(
        roots: list[OtlpSpan], calls: dict[str, list[OtlpSpan]], done: set[str], problems: list[Problem]
    ) -> Iterator[Transcript]:
        for root in roots:
            episode = str(root.attributes[sc.PREFIXMON_EPISODE_ID])
            done.add(episode)
            found = transcript_from_spans(root, calls.pop(episode, []))
            if isinstance(found, str):
                problems.append(Problem(path=root.path or "", line=root.line or 0, message=found, episode=episode))
            else:
                yield found
        roots.clear()


READER: Final = OtlpTranscriptReader()
"""The ``otlp`` entry point of ``prefixmon.transcripts``."""
