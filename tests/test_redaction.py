"""prefixmon.records.redaction: key masking that misses no spelling or container, and a size cap applied while serialising.

The masking tests go through ``prefixmon.telemetry.redact_keys`` (where users import it) and
through a real Telemetry observer with content capture; the cap is checked by counting how
much of a huge value is read, never by timing.
"""

from __future__ import annotations

import json
from collections import namedtuple
from collections.abc import Iterator
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, NamedTuple

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from prefixmon import Monitor, Observer, Toolset
from prefixmon import semconv as sc
from prefixmon.telemetry import Telemetry, redact_keys

SECRET = "sk-live-5ecr3t-key"
M = "[REDACTED]"


class Creds(NamedTuple):
    user: str
    api_key: str


class TestKeyMasking:
    """redact_keys masks every spelling of a key in every container a tool result comes in."""

    @pytest.mark.parametrize("spelling", ["api_key", "apiKey", "API-KEY", "Api.Key", "api key", "APIKEY"])
    @pytest.mark.parametrize("declared", ["api_key", "apiKey", "API-KEY"])
    def test_spelling_variants(self, declared: str, spelling: str) -> None:
        """apiKey, api_key, API-KEY (and dots, spaces, case) are one key."""
        redact = redact_keys(declared)
        assert redact("result", {spelling: SECRET, "user": "ada"}) == {spelling: M, "user": "ada"}

    @pytest.mark.parametrize("text", [' {"token": "%s"}', '\n\t{"token": "%s"}', '\r\n [{"token": "%s"}]'])
    def test_json_text_with_leading_whitespace(self, text: str) -> None:
        """JSON text that starts with whitespace is parsed and masked like any JSON text."""
        out = redact_keys("token")("result", text % SECRET)
        assert SECRET not in json.dumps(out)

    @pytest.mark.parametrize("wrap", [bytes, bytearray, memoryview], ids=lambda w: w.__name__)
    def test_json_bytes(self, wrap: Any) -> None:
        """JSON bytes (an HTTP body, an MCP blob) are decoded, parsed and masked."""
        raw = wrap(json.dumps({"token": SECRET, "n": 1}).encode())
        assert redact_keys("token")("result", raw) == {"token": M, "n": 1}

    def test_named_tuples_and_namespaces(self) -> None:
        """Named tuples and SimpleNamespace are masked by field name (they used to pass as plain tuples or text)."""
        redact = redact_keys("api_key", "password")
        assert redact("arguments", Creds("ada", SECRET)) == {"user": "ada", "api_key": M}
        legacy = namedtuple("legacy", ["password", "host"])
        assert redact("result", [legacy(SECRET, "h")]) == [{"password": M, "host": "h"}]
        assert redact("result", SimpleNamespace(apiKey=SECRET, ok=True)) == {"apiKey": M, "ok": True}
        assert redact("result", {"outer": (SimpleNamespace(inner=Creds("b", SECRET)),)}) == {
            "outer": [{"inner": {"user": "b", "api_key": M}}]
        }

    def test_json_too_deep_is_masked_whole(self) -> None:
        """JSON text too deeply nested to parse is masked whole, never recorded as it is."""
        deep = "[" * 100_000 + json.dumps({"token": SECRET}) + "]" * 100_000
        assert redact_keys("token")("result", deep) == M

    def test_what_is_not_json_stays_text(self) -> None:
        """Text that only looks like JSON is recorded as text (its ``key: value`` pairs masked, below)."""
        redact = redact_keys("token")
        assert redact("result", " {not json") == " {not json"
        assert redact("reason", {"token": SECRET}) == {"token": SECRET}  # a reason is text; anything else passes

    @pytest.mark.parametrize(
        ("text", "kept"),
        [
            ('{"a": 1}\n{"token": "%s", "n": 2}', '"n": 2'),  # JSON Lines: not one JSON value
            ("{'token': '%s', 'n': 2}", "'n': 2"),  # a Python repr
            ('{"n": 2, "token": "%s', '"n": 2'),  # truncated JSON
            ("token=%s&page=2", "page=2"),  # a query string
            ("Authorization: Bearer %s\nAccept: */*", "Accept: */*"),  # header lines
            ("login failed: token = '%s' (expired)", "(expired)"),
        ],
    )
    @pytest.mark.parametrize("kind", ["result", "reason", "error"])
    def test_key_value_pairs_in_text_are_masked(self, text: str, kept: str, kind: Any) -> None:
        """Text that is not one JSON value still says ``key: value`` or ``key=value``: the masked keys' values go."""
        out = redact_keys("token", "authorization")(kind, text % SECRET)
        assert SECRET not in out and M in out and kept in out

    def test_key_value_pairs_inside_values_and_through_the_encoder(self) -> None:
        """A string inside a result (a log line, a header) is masked the same way, on every serialisation path."""
        from prefixmon.records.redaction import content_text

        keys = redact_keys("api_key")
        value = {"log": f"call with api_key={SECRET} ok", "n": 1}
        assert keys("result", value) == {"log": f"call with api_key={M} ok", "n": 1}
        flat = json.loads(content_text("result", value, keys, 4096) or "")  # the small flat mapping path
        nested = json.loads(content_text("result", {"outer": [value]}, keys, 4096) or "")  # the encoder
        assert flat == {"log": f"call with api_key={M} ok", "n": 1} and nested == {"outer": [flat]}

    def test_header_pairs(self) -> None:
        """A list of ``(name, value)`` pairs (HTTP headers) masks the value of a masked name."""
        from prefixmon.records.redaction import content_text

        headers = [("Authorization", "Bearer " + SECRET), ("Accept", "application/json")]
        keys = redact_keys("authorization")
        assert keys("result", headers) == [["Authorization", M], ["Accept", "application/json"]]
        assert json.loads(content_text("result", {"headers": headers}, keys, 4096) or "") == {
            "headers": [["Authorization", M], ["Accept", "application/json"]]
        }

    def test_pydantic_fields_excluded_from_dumps_are_not_recorded(self) -> None:
        """``Field(exclude=True)`` keeps a value out of the model's own serialisation: out of what is recorded too."""
        from pydantic import BaseModel, Field

        from prefixmon.records.redaction import content_text

        class Session(BaseModel):
            user: str
            raw: str = Field(exclude=True)

        session = Session(user="ada", raw=SECRET)
        assert redact_keys("x")("result", session) == {"user": "ada"}
        assert SECRET not in (content_text("result", [session], None, 4096) or "")

    def test_argument_secrets_are_masked_wherever_they_are_quoted(self) -> None:
        """Values under masked argument keys are masked in the call's reason, error and text result; short ones are left."""
        from prefixmon.records.redaction import ContentKind, content_text

        keys = redact_keys("password", "pin")
        arguments = {"user": "ada", "password": SECRET, "pin": "42", "nested": {"password": ["p4ss-w0rd"]}}
        cases: list[tuple[ContentKind, str]] = [
            ("error", f"invalid password {SECRET!r} for ada"),
            ("reason", "'p4ss-w0rd' was never returned by any tool"),
            ("result", f"session for {SECRET}"),
        ]
        for kind, text in cases:
            out = content_text(kind, text, keys, 4096, arguments=arguments) or ""
            assert SECRET not in out and "p4ss-w0rd" not in out and M in out, (kind, out)
        for result in ({"message": f"session for {SECRET}"}, [{"log": [f"session for {SECRET}"]}]):  # both encoders
            out = content_text("result", result, keys, 4096, arguments=arguments) or ""
            assert SECRET not in out and M in out, out
        assert content_text("reason", "42 items for ada", keys, 4096, arguments=arguments) == "42 items for ada"
        long = "x" * 5000 + SECRET  # a secret quoted past the cap is not recorded either
        assert SECRET[:6] not in (content_text("error", "x" * 4090 + SECRET, keys, 4096, arguments=arguments) or "")
        assert SECRET not in (content_text("error", long, keys, 4096, arguments=arguments) or "")
        nested = content_text("result", [{"log": "x" * 4080 + SECRET}], keys, 4096, arguments=arguments) or ""
        assert SECRET[:6] not in nested  # inside a value, at the cut, too


class TestTextMaskingEdges:
    """What review found the text masking let through: the cut, escaped quotes, headers, objects."""

    @pytest.mark.parametrize("wrap", [lambda t: t, lambda t: {"log": [t]}], ids=["text", "inside-a-value"])
    def test_a_masked_value_repeated_across_the_cut(self, wrap: Any) -> None:
        """Masks are shorter than what they replace: none of the value may slide into what the cut keeps."""
        from prefixmon.records.redaction import content_text, redact_secrets

        password = "".join(chr(ord("a") + i % 26) for i in range(100)).upper()
        text = ("x" * 37 + password) * 100
        out = content_text("result", wrap(text), redact_secrets(), 4096, arguments={"password": password}) or ""
        assert all(password[i : i + 6] not in out for i in range(95)), out[-200:]
        assert out.count("[REDACTED]") >= 20 and out.endswith("chars]")

    @pytest.mark.parametrize(
        "text",
        [
            'upstream said {"req": "{\\"password\\": \\"%s\\"}"}',  # JSON inside a JSON string
            "Cookie: theme=dark; sid=%s",  # a header line: all of its value
            "Authorization: Basic dXNlcg== %s",
            'password: "line1\n%s"',  # a quoted value over two lines
            'password:"abc\\\n%s"',  # an escaped newline in it
            "API Key: %s",  # a key of two words
            "note\n  X-Api-Key:   %s  \nnext",
        ],
    )
    def test_more_shapes_of_text(self, text: str) -> None:
        from prefixmon.records.redaction import redact_secrets

        out = redact_secrets()("error", text % SECRET)
        assert SECRET not in out and M in out, out

    def test_prose_with_colons_is_left_alone(self) -> None:
        from prefixmon.records.redaction import redact_secrets

        for text in ("Note: the meeting is at 10:30, see https://example.com/a?b=1", "order_id=o-1 status: shipped"):
            assert redact_secrets()("reason", text) == text

    def test_objects_written_as_text_and_keys_are_masked_too(self) -> None:
        """A value recorded by its ``str()`` (an exception, a response object) and a mapping's keys are text too."""
        from prefixmon.records.redaction import content_text, redact_secrets

        class Response:
            def __str__(self) -> str:
                return f"password={SECRET}"

        out = content_text("result", {"r": Response(), f"token={SECRET}": 1, "e": ValueError(f"api_key: {SECRET}")},
                           redact_secrets(), 4096) or ""  # fmt: skip
        assert SECRET not in out and out.count(M) >= 3, out
        assert redact_secrets()("reason", f"token={SECRET}".encode()) == f"token={M}"  # bytes are text

    def test_long_runs_cost_what_the_cap_reads(self) -> None:
        """A masked argument of 1 MB and results of 1 MB: masking reads about the cap, not the megabytes."""
        from prefixmon.records.redaction import content_text, redact_secrets

        class Counting(str):
            reads = 0

            def __getitem__(self, key: Any) -> Any:
                if isinstance(key, slice):
                    Counting.reads += len(range(*key.indices(len(self))))
                return str.__getitem__(self, key)

        out = content_text("result", Counting("ab:" * 400_000), redact_secrets(), 4096, arguments={"password": "p" * 5})
        assert out is not None and out.endswith("more chars]") and Counting.reads < 20_000


class TestDefaultSecrets:
    """``redact_secrets()``, what ``capture_content=True`` masks unless told otherwise."""

    @pytest.mark.parametrize(
        "key",
        ["password", "db_password", "Passwd", "x-api-key", "apiKey", "access_token", "refreshToken", "Authorization",
         "proxy-authorization", "cookie", "Set-Cookie", "client_secret", "privateKey", "credentials", "session_id", "pin",
         "cvv", "ssn"],
    )  # fmt: skip
    def test_credential_keys_are_masked(self, key: str) -> None:
        from prefixmon.records.redaction import redact_secrets

        assert redact_secrets()("arguments", {key: SECRET, "user": "ada"}) == {key: M, "user": "ada"}

    @pytest.mark.parametrize(
        "key",
        ["user", "amount", "query", "flight_id", "author", "keyword", "title", "max_tokens", "prompt_tokens",
         "completion_tokens", "total_tokens", "input_tokens", "output_tokens", "max_completion_tokens"],
    )  # fmt: skip
    def test_other_keys_are_kept(self, key: str) -> None:
        from prefixmon.records.redaction import redact_secrets

        assert redact_secrets()("arguments", {key: "v"}) == {key: "v"}


def _telemetry_spans(tools: Toolset, **options: Any) -> tuple[Monitor, InMemorySpanExporter, TracerProvider]:
    spans = InMemorySpanExporter()
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(spans))
    return Monitor(tools, observers=[Telemetry(tracer_provider=tp, capture_content=True, **options)]), spans, tp


class TestCaptureThroughTelemetry:
    """The variants above, end to end: what a span records."""

    @pytest.mark.parametrize(
        "result",
        [
            b'  {"apiKey": "%s"}' % SECRET.encode(),
            Creds("ada", SECRET),
            SimpleNamespace(API_KEY=SECRET),
            [{"nested": '\n{"api-key": "' + SECRET + '"}'}],
        ],
        ids=["json-bytes", "namedtuple", "namespace", "nested-json-text"],
    )
    async def test_results_are_masked(self, result: Any) -> None:
        """None of these results reaches the span unmasked."""
        tools = Toolset()

        @tools.tool
        def fetch() -> Any:
            return result

        monitor, spans, tp = _telemetry_spans(tools, redact=redact_keys("api_key"))
        async with monitor.episode(task_id="t") as ep:
            await ep.call("fetch")
        (span,) = [s for s in spans.get_finished_spans() if s.name == "execute_tool fetch"]
        text = str(dict(span.attributes or {})[sc.GEN_AI_TOOL_CALL_RESULT])
        assert SECRET not in text and M in text
        tp.shutdown()


class Counted:
    """A leaf that counts how often it is turned into text."""

    reads = 0

    def __str__(self) -> str:
        Counted.reads += 1
        return "item"


class CountingDict(dict[str, Any]):
    """A dict that counts how many of its items are read."""

    def __init__(self, n: int) -> None:
        super().__init__((f"k{i}", i) for i in range(n))
        self.read = 0

    def items(self) -> Iterator[tuple[str, Any]]:  # type: ignore[override]
        for pair in super().items():
            self.read += 1
            yield pair


class TestBoundedSerialisation:
    """A huge result costs what max_content_chars characters cost: serialisation stops at the cap."""

    @pytest.mark.parametrize("redact", [None, redact_keys("token")], ids=["no-redaction", "redact_keys"])
    async def test_a_million_items_are_not_all_read(self, redact: Any) -> None:
        """Of a 1,000,000-item result, at most about cap items are turned into text (all were, before)."""
        tools = Toolset()
        huge = [Counted() for _ in range(1_000_000)]

        @tools.tool
        def dump() -> list[Counted]:
            return huge

        Counted.reads = 0
        monitor, spans, tp = _telemetry_spans(tools, max_content_chars=4096, redact=redact)
        async with monitor.episode(task_id="t") as ep:
            assert await ep.call("dump") is huge
        assert Counted.reads <= 4096 // len('"item", ') + 2
        (span,) = [s for s in spans.get_finished_spans() if s.name == "execute_tool dump"]
        text = str(dict(span.attributes or {})[sc.GEN_AI_TOOL_CALL_RESULT])
        assert text.startswith('["item", "item"') and text.endswith("...[cut at 4096 chars]")
        tp.shutdown()

    async def test_a_huge_mapping_with_masking(self) -> None:
        """Masking keys happens in the same bounded pass: a 200,000-key result is read only as far as the cap."""
        tools = Toolset()
        huge = CountingDict(200_000)

        @tools.tool
        def dump() -> dict[str, Any]:
            return huge

        class Reset(Observer):  # runs before Telemetry: what the state's indexing read is not counted
            def call_started(self, episode: Any, tool: str, call_id: str | None, depth: int) -> Any:
                return "token"

            def call_result(self, episode: Any, depth: int, result: Any, token: Any) -> None:
                huge.read = 0

        monitor, spans, tp = _telemetry_spans(tools, max_content_chars=1000, redact=redact_keys("k3"))
        monitor = Monitor(tools, observers=[Reset(), *monitor.observers])
        async with monitor.episode(task_id="t") as ep:
            await ep.call("dump")
        assert 0 < huge.read <= 1000 // len('"k1": 1, ') + 2
        (span,) = [s for s in spans.get_finished_spans() if s.name == "execute_tool dump"]
        text = str(dict(span.attributes or {})[sc.GEN_AI_TOOL_CALL_RESULT])
        assert text.startswith('{"k0": 0, "k1": 1, "k2": 2, "k3": "[REDACTED]", "k4": 4')
        tp.shutdown()

    def test_long_strings_are_escaped_only_as_far_as_the_cap(self) -> None:
        """A 50 MB string inside a value yields cap characters (its escaping is not done whole)."""
        from prefixmon.records.redaction import content_text

        text = content_text("result", {"blob": "\u00e9\n" * 25_000_000}, None, 64)
        assert text is not None and len(text) == 64 + len("...[cut at 64 chars]")
        assert text.startswith('{"blob": "\u00e9\\n')

    def test_json_text_too_long_to_parse_is_masked_not_leaked(self) -> None:
        """With redact_keys, JSON text longer than MAX_PARSED_CHARS is masked whole (masking needs the parse)."""
        from prefixmon.records.redaction import MAX_PARSED_CHARS, content_text

        big = json.dumps({"token": SECRET, "pad": "x" * MAX_PARSED_CHARS})
        assert content_text("result", big, redact_keys("token"), 100) == M
        assert content_text("result", big, None, 20) == big[:20] + f"...[{len(big) - 20} more chars]"


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=8), children, max_size=5),
    max_leaves=30,
)


class TestSameTextAsJson:
    """Below the cap the text is exactly ``json.dumps``; above it, a prefix of it."""

    @settings(max_examples=300, deadline=None)
    @given(value=JSON_VALUES, cap=st.integers(min_value=1, max_value=400))
    def test_prefix_of_json_dumps(self, value: Any, cap: int) -> None:
        """Uncut output equals json.dumps(value, ensure_ascii=False); cut output is its first cap characters."""
        from prefixmon.records.redaction import content_text

        if value is None or isinstance(value, str):
            return  # nothing is recorded for None; text is recorded as it is, not as JSON
        full = json.dumps(value, ensure_ascii=False)
        text = content_text("arguments", value, None, cap)
        assert text == (full if len(full) <= cap else full[:cap] + f"...[cut at {cap} chars]")

    def test_other_values(self) -> None:
        """Dataclasses become objects; NaN and infinities as json writes them; unknown objects their str()."""
        from prefixmon.records.redaction import content_text

        @dataclass
        class Point:
            x: float
            y: float

        assert content_text("result", [Point(1.0, float("nan")), float("-inf")], None, 100) == '[{"x": 1.0, "y": NaN}, -Infinity]'
        assert content_text("result", {1: object}, None, 100) == '{"1": "<class \'object\'>"}'
        loop: list[Any] = []
        loop.append(loop)
        assert content_text("result", loop, None, 100) == "[not recorded: ValueError]"
        deep: list[Any] = []
        for _ in range(500):
            deep = [deep]
        assert content_text("result", deep, None, 10_000) == "[not recorded: RecursionError]"
