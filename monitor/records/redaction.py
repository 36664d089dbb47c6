"""Redaction: what opt-in content capture may record, and what record sinks may write.

Argument values and results are not recorded by default. With
``Telemetry(capture_content=True)`` each value goes through a ``redact=`` hook and is cut at
``max_content_chars``; this module has the hooks and the size cap:

- :func:`redact_keys` masks the values of named keys at any depth, in mappings, lists,
  tuples and named tuples, ``SimpleNamespace``, dataclasses, pydantic models, and JSON text
  or bytes (leading whitespace allowed). Key names match across spelling variants:
  ``apiKey``, ``api_key``, ``API-KEY`` and ``api.key`` are one key.
- :func:`content_text` turns a value into the text that is recorded, capping **while** it
  serialises: a 1M-item result costs what ``max_content_chars`` characters cost, not a full
  ``json.dumps``. With :func:`redact_keys`, keys are masked during that same bounded pass.
  Any other ``redact=`` hook receives a private mutable copy (:func:`thaw`), so a hook that
  edits its value in place changes only what is recorded, never what runs.
- :class:`RecordContent` is what ``Monitor(record_content=True)`` records of each call on its
  action record (``arguments`` and ``result``), with the same hooks and cap.
- :func:`record_redactor` builds a hook for :class:`~prefixmon.JsonlSink` (``redact=``) that
  masks patterns in, or drops, the free text of episode records (reasons, precondition
  messages, tool error text, plan deviations) before they are serialised.

See ``docs/security.md`` for what records and telemetry contain.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from json.encoder import encode_basestring
from types import SimpleNamespace
from typing import Any, Final, Literal

from pydantic import BaseModel

from .._internal.json_depth import MAX_JSON_DEPTH, cut_deep, deeper_than
from .._internal.readonly import thaw, unwrap
from .model import EpisodeRecord, FirstFailure, RecordRedactor

__all__ = (
    "MAX_DEPTH",
    "MAX_PARSED_CHARS",
    "MIN_QUOTED_SECRET",
    "NOT_SECRET_KEYS",
    "SECRET_KEYS",
    "SECRET_KEY_PARTS",
    "ContentKind",
    "KeyRedactor",
    "RecordContent",
    "RecordRedactor",
    "Redactor",
    "bounded_json",
    "content_text",
    "normalise_key",
    "record_redactor",
    "redact_keys",
    "redact_secrets",
    "redactor",
    "thaw",
)

ContentKind = Literal["arguments", "result", "reason", "error"]
Redactor = Callable[[ContentKind, Any], Any]
"""``(kind, value) -> value to record``; return ``None`` to record nothing."""

MAX_DEPTH: Final = 200
"""Content nested deeper than this is not recorded (``[not recorded: RecursionError]``)."""
MAX_PARSED_CHARS: Final = 1_000_000
"""JSON text longer than this is not parsed to mask keys inside it: it is recorded as a mask
instead (masking needs the parse; recording it unmasked could leak)."""

SECRET_KEYS: Final = ("auth", "pwd", "pin", "cvv", "cvc", "ssn")
"""Keys :func:`redact_secrets` masks when a key is exactly one of them (normalised)."""
SECRET_KEY_PARTS: Final = (
    "password", "passwd", "passphrase", "secret", "token", "apikey", "accesskey", "privatekey",
    "authorization", "cookie", "credential", "sessionid",
)  # fmt: skip
"""Keys :func:`redact_secrets` masks when a key contains one of them (normalised: ``db_password``, ``X-API-Key``)."""
NOT_SECRET_KEYS: Final = (
    "maxtokens", "maxoutputtokens", "maxcompletiontokens", "maxnewtokens", "prompttokens", "completiontokens",
    "totaltokens", "inputtokens", "outputtokens", "cachedtokens", "reasoningtokens", "numtokens", "tokencount",
    "tokensused", "tokenusage", "tokenlimit", "tokenizer",
)  # fmt: skip
"""Keys :func:`redact_secrets` keeps although they contain ``token``: the counts of LLM usage payloads."""
MIN_QUOTED_SECRET: Final = 4
"""A masked argument value shorter than this is not searched for in the call's texts (masking
every ``42`` in a reason would garble it and show where the value was)."""
MAX_QUOTED_SECRETS: Final = 64
"""At most this many masked argument values are searched for in a call's texts."""

_SEPARATORS: Final = str.maketrans("", "", "_-. \t")
_SEEN_KEYS: Final = 4096
_JSON_START: Final = re.compile(r"\s*[\[{]")
_KEY: Final = re.compile(
    r"""(?<![\w.\-])(?P<q>\\?["']?)(?P<key>[A-Za-z_][\w.\-]{0,63}(?: [A-Za-z_][\w.\-]{0,63}){0,2})(?P=q)"""
    r"""[ \t]*(?P<sep>[:=])[ \t]*"""
)
"""The ``key:`` or ``key=`` of a pair in text: the key quoted, JSON-escaped (``\\"key\\"``) or
bare, of up to three words (``API Key``), never starting inside a word."""
_VALUE: Final = re.compile(
    r"""\\"(?s:(?!\\").)*(?:\\"|\Z)|"(?s:[^"\\]|\\.)*(?:"|\Z)|'(?s:[^'\\]|\\.)*(?:'|\Z)"""
    r"""|(?:(?i:bearer|basic|digest|token)[ \t]+)?[^\s"',;&}\])]+"""
)
"""The value after a key: quoted (to its closing quote, over lines, or to the end of a cut
text), JSON-escaped-quoted, or bare (with an ``Authorization`` scheme word before it)."""
_TOO_DEEP: Final = object()
_NOT_JSON: Final = object()


def normalise_key(key: object) -> str:
    """A key as :func:`redact_keys` compares it: casefolded, without ``_``, ``-``, ``.`` and spaces."""
    return (key if type(key) is str else str(key)).casefold().translate(_SEPARATORS)


def _parse_json_text(text: str) -> Any:
    """``text`` parsed when it is JSON (an object or array, leading whitespace allowed), else a marker."""
    if not _JSON_START.match(text):
        return _NOT_JSON
    if len(text) > MAX_PARSED_CHARS:
        return _TOO_DEEP
    if deeper_than(text, MAX_JSON_DEPTH):  # json would recurse near the limit: is it JSON once cut?
        try:
            json.loads(cut_deep(text, MAX_JSON_DEPTH) or text)
        except ValueError:
            return _NOT_JSON
        return _TOO_DEEP
    try:
        return json.loads(text)
    except ValueError:
        return _NOT_JSON
    except RecursionError:
        return _TOO_DEEP


def _decode(data: bytes | bytearray | memoryview) -> str:
    return bytes(data).decode("utf-8", "replace")


class KeyRedactor:
    """Masks the values of a set of keys (see :func:`redact_keys`)."""

    __slots__ = ("_seen", "keep", "keys", "mask", "parts")

    def __init__(self, keys: Iterable[str], mask: str, parts: Iterable[str] = (), keep: Iterable[str] = ()) -> None:
        self.keys: frozenset[str] = frozenset(normalise_key(k) for k in keys)
        """The keys, normalised (:func:`normalise_key`)."""
        self.parts: tuple[str, ...] = tuple(dict.fromkeys(normalise_key(p) for p in parts if p))
        """Normalised fragments: a key containing one is masked too."""
        self.keep: frozenset[str] = frozenset(normalise_key(k) for k in keep)
        """Keys a fragment would mask that are kept (``max_tokens``)."""
        self.mask = mask
        self._seen: dict[str, bool] = {}
        """Answers for keys met before (tools repeat their keys), at most :data:`_SEEN_KEYS` of them."""

    def masks(self, key: object) -> bool:
        """Whether the value under ``key`` is masked."""
        if type(key) is str:
            known = self._seen.get(key)
            if known is not None:
                return known
            answer = self._masks(normalise_key(key))
            if len(self._seen) < _SEEN_KEYS:
                self._seen[key] = answer
            return answer
        return self._masks(normalise_key(key))

    def _masks(self, normalised: str) -> bool:
        if normalised in self.keys:
            return True
        return normalised not in self.keep and any(part in normalised for part in self.parts)

    def __call__(self, kind: ContentKind, value: Any) -> Any:
        """``value`` with the keys masked: in arguments and results, and in text (``key: value``,
        ``key=value``) of any kind, reasons and errors included.

        This walks the whole value; telemetry does not call it but masks inside its bounded
        serialisation (:func:`content_text`), where the call's own masked argument values are
        masked in its texts too.
        """
        if kind in ("arguments", "result"):
            return self._walk(value, 0)
        if isinstance(value, (bytes, bytearray, memoryview)):
            value = _decode(value)
        return self.scrub(value) if isinstance(value, str) else value

    def scrub(self, text: str, quoted: Iterable[str] = ()) -> str:
        """``text`` with the values of masked keys in its ``key: value`` pairs masked, and each of ``quoted`` too."""
        for secret in quoted:
            text = text.replace(secret, self.mask)
        if ":" not in text and "=" not in text:
            return text
        out: list[str] = []
        pos = 0
        for m in _KEY.finditer(text):  # a key that is not masked consumes no value: its value may be a key
            if m.start() < pos or not self._masks_words(m["key"]):
                continue
            v = _VALUE.match(text, m.end())
            if v is None:
                continue
            value, end = v[0], v.end()
            q = value[:2] if value.startswith('\\"') else value[0] if value[0] in "'\"" else ""
            closed = bool(q) and len(value) > len(q) and value.endswith(q)
            if not q and m["sep"] == ":" and not text[text.rfind("\n", 0, m.start()) + 1 : m.start()].strip():
                end = len(text) if (eol := text.find("\n", m.end())) < 0 else eol  # a header line: all its value
            out += (text[pos : m.end()], q, self.mask, q if closed else "")
            pos = end
        if not out:
            return text
        out.append(text[pos:])
        return "".join(out)

    def _masks_words(self, key: str) -> bool:
        """Whether a key found in text is masked: the whole of it or its last words (``the API Key``)."""
        if self.masks(key):
            return True
        words = key.split(" ")
        return any(self.masks(" ".join(words[i:])) for i in range(1, len(words)))

    def quoted_in(self, arguments: Any) -> list[str]:
        """The texts of the values under masked keys in ``arguments``, longest first (what a call's texts may quote).

        At most :data:`MAX_QUOTED_SECRETS`, each at least :data:`MIN_QUOTED_SECRET` characters;
        the walk reads at most a few thousand items.
        """
        found: dict[str, None] = {}
        budget = [4096]
        self._collect(arguments, False, 0, found, budget)
        return sorted(found, key=len, reverse=True)

    def _collect(self, value: Any, masked: bool, depth: int, found: dict[str, None], budget: list[int]) -> None:
        budget[0] -= 1
        if budget[0] < 0 or depth > MAX_DEPTH or len(found) >= MAX_QUOTED_SECRETS:
            return
        value = unwrap(value)
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            text = str(value) if masked else ""
            if len(text) >= MIN_QUOTED_SECRET:
                found[text] = None
            return
        pairs = _pairs(value)
        if pairs is not None:
            for k, v in pairs:
                self._collect(v, masked or self.masks(k), depth + 1, found, budget)
        elif isinstance(value, (list, tuple)):
            for item in value:
                self._collect(item, masked, depth + 1, found, budget)

    def _walk(self, value: Any, depth: int) -> Any:
        if depth > MAX_DEPTH:
            return self.mask  # too deep to look inside: nothing of it is recorded
        value = unwrap(value)
        if isinstance(value, str):
            parsed = _parse_json_text(value)
            if parsed is _NOT_JSON:
                return self.scrub(value)
            return self.mask if parsed is _TOO_DEEP else self._walk(parsed, depth + 1)
        if isinstance(value, (bytes, bytearray, memoryview)):
            text = _decode(value)
            parsed = _parse_json_text(text)
            if parsed is _NOT_JSON:
                scrubbed = self.scrub(text)
                return value if scrubbed == text else scrubbed
            return self.mask if parsed is _TOO_DEEP else self._walk(parsed, depth + 1)
        pairs = _pairs(value)
        if pairs is not None:
            return {k: self.mask if self.masks(k) else self._walk(v, depth + 1) for k, v in pairs}
        if isinstance(value, (list, tuple, set, frozenset)):
            return [[v[0], self.mask] if self._masked_pair(v) else self._walk(v, depth + 1) for v in value]
        dump = getattr(value, "model_dump", None)
        if callable(dump) and not isinstance(value, type):
            return self._walk(dump(mode="json"), depth + 1)
        return value

    def _masked_pair(self, item: Any) -> bool:
        """Whether ``item`` is a ``(name, value)`` pair (a header) whose name is masked."""
        return type(item) in (tuple, list) and len(item) == 2 and type(item[0]) is str and self.masks(item[0])


def redact_keys(*keys: str, contains: Iterable[str] = (), mask: str = "[REDACTED]") -> KeyRedactor:
    """A redaction hook that masks the values of the given keys at any nesting level.

    Keys match across case and separators (``apiKey`` = ``api_key`` = ``API-KEY``); a key that
    contains one of ``contains`` (normalised the same way) is masked too. It looks inside
    mappings, lists, tuples, named tuples, ``SimpleNamespace``, dataclasses, pydantic models
    (fields excluded from their dumps are left out), ``(name, value)`` pairs such as header
    lists, and text or bytes that parse as JSON (as MCP and OpenAI tool results often are,
    leading whitespace included); JSON too deeply nested or longer than
    :data:`MAX_PARSED_CHARS` to parse is masked whole. In other text, of any kind (results,
    reasons, error messages), the values of ``key: value`` and ``key=value`` pairs are masked;
    telemetry also masks a call's masked argument values wherever that call's texts quote
    them. Other objects are recorded as their text.
    """
    return KeyRedactor(keys, mask, contains)


def redactor(redact: Redactor | Literal["secrets"] | None) -> Redactor | None:
    """The hook a ``redact=`` option names: ``"secrets"`` is :func:`redact_secrets` (a new one), a hook or ``None`` itself.

    Raises:
        ValueError: another string.
    """
    if isinstance(redact, str):
        if redact != "secrets":
            raise ValueError(f"redact must be 'secrets', a hook or None, got {redact!r}")
        return redact_secrets()
    return redact


def redact_secrets(mask: str = "[REDACTED]") -> KeyRedactor:
    """:func:`redact_keys` of common credential keys: what ``capture_content=True`` masks by default.

    Masks keys equal to one of :data:`SECRET_KEYS` (``pin``, ``cvv``, ...) or containing one of
    :data:`SECRET_KEY_PARTS` (``password``, ``token``, ``api_key``, ``authorization``,
    ``cookie``, ...), in every spelling, but not the token counts of :data:`NOT_SECRET_KEYS`
    (``max_tokens``). Add your own with ``redact_keys("iban", *SECRET_KEYS, contains=SECRET_KEY_PARTS)``.
    """
    return KeyRedactor(SECRET_KEYS, mask, SECRET_KEY_PARTS, NOT_SECRET_KEYS)


def _pairs(value: Any) -> Iterable[tuple[Any, Any]] | None:
    """The ``(key, value)`` pairs of a value that has named fields, or ``None``."""
    if isinstance(value, Mapping):
        return value.items()
    if isinstance(value, tuple) and hasattr(type(value), "_fields"):  # a named tuple: its fields are keys
        fields: tuple[str, ...] = type(value)._fields  # type: ignore[attr-defined]
        return zip(fields, value, strict=False)
    if isinstance(value, SimpleNamespace):
        return vars(value).items()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return ((f.name, getattr(value, f.name)) for f in dataclasses.fields(value))
    if isinstance(value, BaseModel):  # as the model dumps itself: excluded fields are not recorded
        return ((name, getattr(value, name)) for name, info in type(value).model_fields.items() if not info.exclude)
    return None


# -- bounded serialisation ----------------------------------------------------------------------
class _Full(Exception):
    """The output reached its limit."""


class _Encoder:
    """JSON text of a value, produced piece by piece and stopped at ``room`` characters."""

    __slots__ = ("keys", "parts", "quoted", "room", "stack")

    def __init__(self, room: int, keys: KeyRedactor | None, quoted: Sequence[str] = ()) -> None:
        self.parts: list[str] = []
        self.room = room
        self.keys = keys
        self.quoted = quoted
        self.stack: set[int] = set()

    def emit(self, text: str) -> None:
        if len(text) > self.room:
            self.parts.append(text[: self.room])
            self.room = 0
            raise _Full
        self.parts.append(text)
        self.room -= len(text)

    def text(self, s: str) -> None:
        """A JSON string; a long one is escaped only as far as the room reaches."""
        self.emit(encode_basestring(s if len(s) <= self.room else s[: self.room + 1]))

    def string(self, s: str, depth: int) -> None:
        if self.keys is not None:  # JSON text inside a value: its keys are masked too
            parsed = _parse_json_text(s)
            if parsed is _TOO_DEEP:
                self.text(self.keys.mask)
                return
            if parsed is not _NOT_JSON:
                self.value(parsed, depth + 1)
                return
        self.plain(s)

    def plain(self, s: str) -> None:
        """Text that is not JSON to look inside: masked (with keys) as far as the room reaches."""
        keys = self.keys
        if keys is not None:
            s, cut = _masked_head(keys, s, self.room + 1, self.quoted)
            if cut:  # what was kept may end early (before a value at the cut): the output ends here
                self.text(s)
                raise _Full
        self.text(s)

    def value(self, v: Any, depth: int) -> None:
        t = type(v)
        if t is str:
            self.string(v, depth)
        elif v is None:
            self.emit("null")
        elif t is bool:
            self.emit("true" if v else "false")
        elif t is int:
            self.emit(int.__repr__(v))
        elif t is float:
            self.emit(_float(v))
        elif isinstance(v, str):
            self.string(str.__str__(v), depth)
        elif isinstance(v, int):
            self.emit(int.__repr__(v))
        elif isinstance(v, float):
            self.emit(_float(v))
        elif isinstance(v, (bytes, bytearray, memoryview)):
            self.string(_decode(v), depth)
        else:
            self.container(v, depth)

    def container(self, v: Any, depth: int) -> None:
        if depth >= MAX_DEPTH:
            raise RecursionError(f"nested more than {MAX_DEPTH} levels")
        v = unwrap(v)
        ident = id(v)
        if ident in self.stack:
            raise ValueError("Circular reference detected")
        self.stack.add(ident)
        try:
            pairs = _pairs(v)
            if pairs is not None:
                self.mapping(pairs, depth)
            elif isinstance(v, (list, tuple, set, frozenset)):
                self.emit("[")
                first = True
                keys = self.keys
                for item in v:
                    if not first:
                        self.emit(", ")
                    first = False
                    if keys is not None and keys._masked_pair(item):
                        self.value([item[0], keys.mask], depth + 1)
                    else:
                        self.value(item, depth + 1)
                self.emit("]")
            else:
                dump = getattr(v, "model_dump", None)
                if callable(dump) and not isinstance(v, type):
                    self.value(dump(mode="json"), depth + 1)
                else:
                    self.plain(str(v))  # as json.dumps(default=str) did
        finally:
            self.stack.discard(ident)

    def mapping(self, pairs: Iterable[tuple[Any, Any]], depth: int) -> None:
        keys = self.keys
        self.emit("{")
        first = True
        for k, item in pairs:
            if not first:
                self.emit(", ")
            first = False
            self.plain(k if type(k) is str else _key_text(k))
            self.emit(": ")
            if keys is not None and keys.masks(k):
                self.text(keys.mask)
            else:
                self.value(item, depth + 1)
        self.emit("}")


def _float(v: float) -> str:
    if math.isfinite(v):
        return float.__repr__(v)
    return "NaN" if math.isnan(v) else ("Infinity" if v > 0 else "-Infinity")


def _key_text(k: Any) -> str:
    if k is None or isinstance(k, bool):
        return "null" if k is None else ("true" if k else "false")
    if isinstance(k, float):
        return _float(k)
    return str(k)


def _cut_text(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return f"{text[:limit]}...[{len(text) - limit} more chars]"


def _masked_head(keys: KeyRedactor, text: str, limit: int, quoted: Sequence[str]) -> tuple[str, bool]:
    """``text`` cut at ``limit`` and masked (:meth:`KeyRedactor.scrub`), and whether it was cut.

    The cut comes first, so only ``limit`` characters are masked and a mask shorter than the
    value it replaces cannot bring more of the text in; a quoted value that straddles the cut
    is dropped whole (what is kept ends before it).
    """
    if len(text) <= limit:
        return keys.scrub(text, quoted), False
    cut, moved = limit, True
    while moved:  # each move goes left: a value before it may straddle the new cut
        moved = False
        for secret in quoted:
            start = text.find(secret, max(0, cut - len(secret) + 1), cut + len(secret) - 1)
            if 0 <= start < cut:
                cut, moved = start, True
    return keys.scrub(text[:cut], quoted)[:limit], True


def _scrubbed_cut(keys: KeyRedactor, text: str, limit: int, quoted: list[str]) -> str:
    """``text`` masked and cut at ``limit`` (with ``...[N more chars]``)."""
    head, cut = _masked_head(keys, text, limit, quoted)
    return f"{head}...[{len(text) - limit} more chars]" if cut else head


_FLAT_ITEMS: Final = 32


def _flat(value: Any, limit: int, keys: KeyRedactor | None, quoted: Sequence[str] = ()) -> dict[str, Any] | None:
    """``value`` (masked) when it is a dict of at most 32 plain scalars whose text fits ``limit``, else ``None``."""
    if type(value) is not dict or len(value) > _FLAT_ITEMS:
        return None
    size = 0
    for k, v in value.items():
        if type(k) is not str:
            return None
        t = type(v)
        if t is str:
            if keys is not None and _JSON_START.match(v):
                return None  # JSON text inside: masked by the encoder
            size += len(k) + len(v)
        elif v is None or t is bool or t is int or t is float:
            size += len(k) + 24
        else:
            return None
        if size > limit:
            return None
    if keys is None:
        return value
    return {k: keys.mask if keys.masks(k) else (keys.scrub(v, quoted) if type(v) is str else v) for k, v in value.items()}


def bounded_json(value: Any, limit: int, *, keys: KeyRedactor | None = None, quoted: Sequence[str] = ()) -> str:
    """``value`` as JSON text of at most ``limit`` characters (then ``...[cut at N chars]``).

    Serialisation stops once ``limit`` characters are written, so its cost is bounded by
    ``limit`` (and by what is skipped of masked keys), not by the size of ``value``. Mappings,
    named tuples, ``SimpleNamespace``, dataclasses and pydantic models become objects; lists,
    tuples and sets arrays; other objects their ``str()``. With ``keys``, masked keys' values
    are replaced while serialising, also inside JSON text.

    Raises:
        RecursionError: nested deeper than :data:`MAX_DEPTH`.
        ValueError: the value contains itself.
    """
    flat = _flat(value, limit, keys, quoted)
    if flat is not None:  # a small flat mapping (most arguments): the C encoder, bounded by construction
        text = json.dumps(flat, ensure_ascii=False)
        return text if len(text) <= limit else f"{text[:limit]}...[cut at {limit} chars]"
    encoder = _Encoder(limit, keys, quoted)
    try:
        encoder.value(value, 0)
    except _Full:
        return "".join(encoder.parts) + f"...[cut at {limit} chars]"
    return "".join(encoder.parts)


def content_text(kind: ContentKind, value: Any, redact: Redactor | None, limit: int, *, arguments: Any = None) -> str | None:
    """What opt-in capture records for ``value``: redacted, serialised and capped at ``limit`` characters.

    Text is recorded as it is (cut at ``limit``, with ``...[N more chars]``); anything else as
    bounded JSON (:func:`bounded_json`). A :class:`KeyRedactor` masks during serialisation, and
    in text masks the values of masked keys in ``arguments`` (the call's) wherever they are
    quoted; another hook gets a private mutable copy (:func:`thaw`) and its answer is recorded
    (``None``: nothing). A value that cannot be serialised is recorded as
    ``[not recorded: <error type>]``.

    Raises:
        Exception: whatever a ``redact`` hook raised (nothing is recorded then).
    """
    keys: KeyRedactor | None = None
    quoted: list[str] = []
    if isinstance(redact, KeyRedactor):
        keys = redact
        if arguments is not None and kind != "arguments":
            quoted = redact.quoted_in(arguments)
    elif redact is not None:
        value = redact(kind, thaw(value))
    value = unwrap(value)
    if value is None:
        return None
    if isinstance(value, (bytes, bytearray, memoryview)):
        value = _decode(value)
    if isinstance(value, str):
        if keys is None:
            return _cut_text(value, limit)
        parsed = _parse_json_text(value) if kind in ("arguments", "result") else _NOT_JSON
        if parsed is _NOT_JSON:
            return _scrubbed_cut(keys, value, limit, quoted)
        if parsed is _TOO_DEEP:
            return keys.mask
        value = parsed
    try:
        return bounded_json(value, limit, keys=keys, quoted=quoted)
    except Exception as e:  # too deep, circular, a __str__ or model_dump that raises
        return f"[not recorded: {type(e).__name__}]"


# -- records ------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True, slots=True)
class RecordContent:
    """What ``Monitor(record_content=True)`` puts on each action record: the call's arguments and
    the tool's result as :func:`content_text` makes them (redacted, then capped at ``limit``), the
    same text ``Telemetry(capture_content=True)`` puts on spans.

    Args:
        redact: ``"secrets"`` (:func:`redact_secrets`), a hook (:func:`redact_keys`, your own) or
            ``None`` (content as it is).
        limit: the most characters a value is recorded with (then a cut marker).
    """

    redact: Redactor | None
    limit: int

    @classmethod
    def make(cls, redact: Redactor | Literal["secrets"] | None = "secrets", limit: int = 4096) -> RecordContent:
        """Checked settings.

        Raises:
            ValueError: ``limit`` below 1.
        """
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ValueError(f"max_content_chars must be an int >= 1, got {limit!r}")
        return cls(redactor(redact), limit)

    def arguments(self, args: Any) -> str | None:
        """The arguments' text (``None``: nothing to record).

        Raises:
            Exception: whatever the redaction hook raised.
        """
        return None if args is None else content_text("arguments", args, self.redact, self.limit)

    def result(self, result: Any, args: Any) -> str | None:
        """The result's text, masked where it quotes masked ``args`` (``None``: nothing to record).

        Raises:
            Exception: whatever the redaction hook raised.
        """
        return None if result is None else content_text("result", result, self.redact, self.limit, arguments=args)


def record_redactor(*patterns: str | re.Pattern[str], mask: str = "[REDACTED]", drop_text: bool = False) -> RecordRedactor:
    """A :class:`~prefixmon.JsonlSink` ``redact=`` hook for the free text of episode records.

    Free text is what may quote argument values, results or secrets: each action's ``reason``
    (precondition messages and failure reasons), ``error`` (the environment's exception or
    error-result text), ``deviation``, ``arguments`` and ``result`` (content, recorded only with
    ``Monitor(record_content=True)``), and the first failure's ``reason``. Causes, codes,
    decisions, depths, tool names and labels are kept, so every metric is unchanged.

    Args:
        patterns: regular expressions whose matches are replaced by ``mask``.
        mask: the replacement text.
        drop_text: drop the free text altogether (reasons become ``null``, the first
            failure's reason an empty string).

    Raises:
        ValueError: neither ``patterns`` nor ``drop_text`` was given.
    """
    if not patterns and not drop_text:
        raise ValueError("record_redactor needs patterns to mask, or drop_text=True")
    compiled = tuple(p if isinstance(p, re.Pattern) else re.compile(p) for p in patterns)

    def text(value: str | None) -> str | None:
        if value is None or drop_text:
            return None
        for pattern in compiled:
            value = pattern.sub(mask, value)
        return value

    def redact(record: EpisodeRecord) -> EpisodeRecord:
        actions = [
            dataclasses.replace(
                a,
                reason=text(a.reason),
                error=text(a.error),
                deviation=text(a.deviation),
                arguments=text(a.arguments),
                result=text(a.result),
            )
            if a.reason is not None
            or a.error is not None
            or a.deviation is not None
            or a.arguments is not None
            or a.result is not None
            else a
            for a in record.actions
        ]
        ff = record.first_failure
        first: FirstFailure | None = None if ff is None else dataclasses.replace(ff, reason=text(ff.reason) or "")
        return dataclasses.replace(record, actions=actions, first_failure=first)

    return redact
