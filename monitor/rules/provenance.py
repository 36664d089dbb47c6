"""Provenance: who said a value. The user, the application, a field of a tool's result, or free text a tool returned.

Grounding (check 5) asks whether a value was *seen*; an IBAN injected into an email was seen
too. Provenance asks *who said it*, which is what tells a prompt injection from the task:
``send_money(recipient=...)`` with a recipient that only ever appeared inside the body of an
email came from whoever wrote the email, not from the user.

Sources (:class:`Source`), by kind:

==========  ==============================================================  ========================
kind        what                                                            written
==========  ==============================================================  ========================
``user``    the user's messages (:meth:`Episode.user <prefixmon.Episode.user>`)  ``user``
``system``  what the application told the agent (:meth:`Episode.inform`)   ``system``
``field``   one value of a tool result (an id, a number, a date, an IBAN)  ``tool:get_iban.iban``
``text``    free text a tool returned (words, as a whole and one by one)    ``text:read_inbox.body``
==========  ==============================================================  ========================

A result's path joins its keys with ``.``; list levels are transparent (``transactions[].sender``
is ``transactions.sender``); the whole result is the tool itself (``tool:get_iban``). JSON text
inside a result is read as the object it holds, its fields under the field holding it. A value
derived from others (a sum, a difference, a product or quotient of two different recent numbers)
carries the sources of both, and a word of a text the sources of the text.

A rule (:class:`Provenance`) lists the sources an argument may come from (``from: [user,
tool:get_contacts.iban]``; ``trusted`` is any trusted source: the user, the application and
every result field, but not free text, unless :class:`Trust` says otherwise per tool or field;
``any`` is every source), and may name sources it may not carry unless the user said the value
too (``deny``, ``not_from`` in spec files: a profile's passport number in an email body).
A value is checked by its own forms (an id without its ``#``, case and whitespace aside, a
number in any written form); free text the agent wrote (a message body) is checked by the
distinctive tokens in it (ids, numbers, links and addresses). A value with at least one allowed
source passes: a value said by both the user and an email counts as the user's. A value nobody
said (the agent's own words) has no source and is **undetermined**, never a failure: that is
the information check's business.

Cost: a result is indexed on arrival, O(its size), and only in episodes whose toolset declares a
provenance rule; a check costs O(size of the argument). Values are kept as forms in a dict of
bit masks, one bit per distinct source: nothing copies the state.
"""

from __future__ import annotations

import re
from collections.abc import Hashable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Annotated, Final, Literal, TypeAlias

from pydantic import AfterValidator
from pydantic_core import from_json

from ..exceptions import SpecError
from .grounding import (
    MAX_DERIVED,
    STRIP,
    Number,
    fold,
    operands,
    parse_date,
    parse_number,
    stated_ids,
    text_date_forms,
    token_date_forms,
)

__all__ = (
    "MAX_PROVENANCE_KEYS",
    "MAX_SOURCES",
    "Provenance",
    "ProvenanceIndex",
    "Source",
    "SourceKind",
    "Sources",
    "Trust",
    "parse_pattern",
)

SourceKind: TypeAlias = Literal["user", "system", "field", "text"]
"""Who said a value (see the module's table)."""

MAX_PROVENANCE_KEYS: Final = 200_000
"""Forms one episode's index keeps at most; past it, new values get no source (so they are undetermined)."""
MAX_SOURCES: Final = 4096
"""Distinct sources (kind, tool, result path) one episode tells apart; past it, a new path counts as its tool
as a whole (results keyed by ids would otherwise make a source per id)."""
_MAX_ITEMS: Final = 50_000
"""Leaves and containers of one result indexed at most."""
_MAX_DEPTH: Final = 32
_MAX_JSON: Final = 1_000_000
"""JSON text inside a result longer than this is read as text, not parsed."""
_MAX_TEXT: Final = 200_000
"""Characters of one text indexed at most (the rest of a longer one is left out)."""
_MAX_PHRASE: Final = 64
"""Words of an argument value looked up as a phrase at most (a longer one is judged by its tokens)."""
_RECENT: Final = 256
"""Numbers kept (with their sources) as the operands of derived values."""


@dataclass(frozen=True, slots=True)
class Source:
    """One source of values: a kind, and for tool sources the tool and the result path."""

    kind: SourceKind
    tool: str = ""
    path: str = ""
    """Where in the result: keys joined by ``.``, list levels dropped; ``""`` the whole result."""

    def __str__(self) -> str:
        if self.kind in ("user", "system"):
            return self.kind
        where = f"{self.tool}.{self.path}" if self.path else self.tool
        return f"{'tool' if self.kind == 'field' else 'text'}:{where}"

    def describe(self) -> str:
        """The source for a person or a model, by kind, tool and field name, never by value: a path is shown up to
        its first part that is not a plain name (a result keyed by hotel names or ids has data in its keys)."""
        if self.kind == "user":
            return "you"
        if self.kind == "system":
            return "the application"
        of = f"the result of {self.tool}"
        named = []
        for part in self.path.split(".") if self.path else ():
            if _NAME(part) is None:
                break
            named.append(part)
        path = ".".join(named)
        if self.kind == "field":
            return f"the '{path}' field in {of}" if path else of
        return f"the text of the '{path}' field in {of}" if path else f"the text in {of}"


def _under(entry: str, tool: str, path: str) -> bool:
    """Whether ``entry`` (``tool`` or ``tool.path``) names ``tool``'s ``path`` or a path inside it."""
    if entry == tool or entry == "*":
        return True
    name, _, prefix = entry.partition(".")
    if name not in (tool, "*") or not prefix:
        return False
    return path == prefix or path.startswith(prefix + ".")


@dataclass(frozen=True, slots=True)
class Trust:
    """Which tool sources are trusted, per tool or per result field.

    By default a field of a result is trusted (a structured value a tool reported) and free
    text is not (content the outside world wrote: an email, a web page, a review). Entries
    are ``tool`` or ``tool.path``; the most specific entry that names a source decides:
    ``Trust(untrusted=["read_inbox"], trusted=["read_inbox.sender"])`` trusts only an email's
    sender.
    """

    trusted: frozenset[str] = frozenset()
    untrusted: frozenset[str] = frozenset()

    def __init__(self, trusted: Iterable[str] = (), untrusted: Iterable[str] = ()) -> None:
        object.__setattr__(self, "trusted", frozenset(trusted))
        object.__setattr__(self, "untrusted", frozenset(untrusted))
        both = self.trusted & self.untrusted
        if both:
            raise SpecError(f"trust: {', '.join(sorted(both))} is both trusted and untrusted")

    def trusts(self, source: Source) -> bool:
        """Whether ``source`` is trusted."""
        if source.kind in ("user", "system"):
            return True
        best, verdict = -1, source.kind == "field"
        for entries, trusted in ((self.trusted, True), (self.untrusted, False)):
            for entry in entries:
                if _under(entry, source.tool, source.path):
                    specificity = entry.count(".") + (entry.partition(".")[0] != "*")
                    if specificity > best:
                        best, verdict = specificity, trusted
        return verdict


_Pattern: TypeAlias = tuple[str, str]
"""A parsed ``from`` entry: ``(kind, what)``: ``("user", "")``, ``("trusted", "")``, ``("field", "get_iban.iban")``."""


def parse_pattern(text: str) -> _Pattern:
    """A source entry: ``user``, ``system``, ``trusted``, ``any``, ``tool:NAME[.PATH]`` or ``text:NAME[.PATH]`` (NAME: or ``*``).

    Raises:
        SpecError: anything else.
    """
    if text in ("user", "system", "trusted", "any"):
        return (text, "")
    kind, colon, what = text.partition(":")
    if colon and kind in ("tool", "text") and what and all(part for part in what.split(".")):
        return ("field" if kind == "tool" else "text", what)
    raise SpecError(f"provenance source {text!r}: expected user, system, trusted, any, tool:NAME[.PATH] or text:NAME[.PATH]")


def _checked(value: tuple[str, ...]) -> tuple[str, ...]:
    for entry in value:
        try:
            parse_pattern(entry)
        except SpecError as e:
            raise ValueError(str(e)) from None
    return value


Sources = Annotated[tuple[str, ...], AfterValidator(_checked)]
"""A spec file's list of sources (:func:`parse_pattern` entries), checked when the file loads."""


@dataclass(frozen=True, slots=True)
class Provenance:
    """The sources an argument's value may come from, and those it may not carry (see the module docs).

    ``Provenance(["user", "tool:get_contacts.iban"])``: the recipient is one the user gave or one
    of the user's contacts. ``Provenance(["any"], deny=["tool:get_user_information"])``: an email
    body may say anything but what the user's profile holds (a passport number), unless the user
    said it too. A value whose every source is another, or that came from a denied source, fails
    the provenance check (:attr:`~prefixmon.Cause.PROVENANCE`), which blocks the call under a
    blocking policy unless ``block=False``.

    Raises:
        SpecError: an entry is not a source pattern, no source is given, or ``deny`` names the user.
    """

    sources: tuple[str, ...] = ("trusted",)
    trust: Trust = field(default_factory=Trust)
    block: bool = True
    deny: tuple[str, ...] = ()
    patterns: tuple[_Pattern, ...] = field(init=False, repr=False, compare=False)
    denied: tuple[_Pattern, ...] = field(init=False, repr=False, compare=False)

    def __init__(
        self,
        sources: Iterable[str] | str = ("trusted",),
        *,
        trust: Trust | None = None,
        block: bool = True,
        deny: Iterable[str] = (),
    ) -> None:
        listed = (sources,) if isinstance(sources, str) else tuple(sources)
        if not listed:
            raise SpecError("provenance: give at least one source an argument may come from (any for every one)")
        denied = tuple(deny)
        object.__setattr__(self, "sources", listed)
        object.__setattr__(self, "trust", trust if trust is not None else Trust())
        object.__setattr__(self, "block", block)
        object.__setattr__(self, "deny", denied)
        object.__setattr__(self, "patterns", tuple(parse_pattern(s) for s in listed))
        object.__setattr__(self, "denied", tuple(parse_pattern(s) for s in denied))
        if any(kind in ("user", "any") for kind, _ in self.denied):
            raise SpecError("provenance: deny cannot name the user or every source (what the user said is theirs to send)")

    def allows(self, source: Source) -> bool:
        """Whether a value from ``source`` may be used (before :meth:`denies`)."""
        return self._matches(self.patterns, source)

    def denies(self, source: Source) -> bool:
        """Whether a value from ``source`` may not be carried, unless the user said it too."""
        return self._matches(self.denied, source)

    def _matches(self, patterns: tuple[_Pattern, ...], source: Source) -> bool:
        for kind, what in patterns:
            if kind == "any" or (kind == source.kind and not what):
                return True
            if kind == "trusted":
                if self.trust.trusts(source):
                    return True
            elif kind == source.kind and _under(what, source.tool, source.path):
                return True
        return False

    def describe(self) -> str:
        """The allowed sources, for a refusal: ``you or a trusted source``."""
        parts = []
        for kind, what in self.patterns:
            if kind == "user":
                parts.append("you")
            elif kind == "system":
                parts.append("the application")
            elif kind == "trusted":
                parts.append("a trusted source")
            elif kind == "any":
                parts.append("anyone")
            else:
                tool, _, path = what.partition(".")
                src = Source("field" if kind == "field" else "text", tool, path)
                parts.append(src.describe() if tool != "*" else ("a tool's result" if kind == "field" else "a tool's text"))
        return " or ".join(dict.fromkeys(parts))


# -- the index --------------------------------------------------------------------------------
_USER: Final = Source("user")
_ID_STRIP: Final = STRIP + "*~#"
_NUMBER_START: Final = frozenset("0123456789-+$€£¥")
_SEPARATOR: Final = re.compile(r"[/,;:()\[\]{}<>\"'`=|]").search
_PARTS: Final = re.compile(r"[^/,;:()\[\]{}<>\"'`=|*~#]+").findall
"""A word's parts between separators (what :func:`~prefixmon.rules.grounding.stated_ids` reads as ids too)."""
_NAME: Final = re.compile(r"[A-Za-z_]{1,64}").fullmatch
"""A part of a result path that is a field's name (letters and ``_``), not data used as a key."""
_DATE_HINT: Final = re.compile(r"\d[-/.]\d|\d{4}|jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec").search
"""Where a text may write a date (digits joined by ``-``, ``/`` or ``.``, a year, a month's name)."""
_MONTH_START: Final = frozenset("jfmasond")


def _id_key(folded: str) -> str:
    """The form an id is indexed and looked up by: folded, without surrounding punctuation, markdown or ``#``."""
    return folded.strip(_ID_STRIP) or folded


def _number_key(n: Number) -> Number:
    return int(n) if isinstance(n, float) and n.is_integer() else n


def value_keys(value: object) -> tuple[Hashable, ...]:
    """The forms a value is indexed and looked up by: an id's form (folded, undecorated) and its number."""
    if isinstance(value, bool) or value is None:
        return ()
    if isinstance(value, int):
        return (int(value),)
    if isinstance(value, float):
        return (_number_key(value),) if value - value == 0.0 else ()
    if isinstance(value, str):
        f = fold(value)
        key = _id_key(f)
        n = parse_number(f) if len(f) <= 64 else None
        return (key,) if n is None else (key, _number_key(n))
    return ()


def _is_text(s: str) -> bool:
    """Whether a string is free text (words someone wrote), not one value: it has whitespace, or it is long."""
    return len(s) > 64 or not s.isprintable() or " " in s


def _distinctive(token: str) -> bool:
    """Whether a token of free text the agent wrote says something specific: an id, a number, a link, an address."""
    if len(token) < 3:
        return any(c.isdigit() for c in token) and len(token) > 1
    if "@" in token or "://" in token or token.startswith("www."):
        return True
    return any(c.isdigit() for c in token) or ("." in token.strip(".") and token.count(".") >= 1 and "/" in token)


class ProvenanceIndex:
    """Which sources said each value an episode's agent has seen, as a bit mask per form.

    A :class:`~prefixmon.TrackedState` holds one when its toolset declares a provenance rule.
    """

    __slots__ = ("_allowed", "_bits", "_keys", "_places", "_recent", "_sources", "complete")

    def __init__(self) -> None:
        self._keys: dict[Hashable, int] = {}
        self._sources: list[Source] = []
        self._bits: dict[Source, int] = {}
        self._places: dict[tuple[str, ...], int] = {}
        """``{(kind, tool, path): bit}``, and ``{(kind, tool, parent path, key): bit}``: a result's leaves find their
        source's bit without making a :class:`Source` or a path."""
        self._allowed: dict[int, tuple[Provenance, int, int, int]] = {}
        """``{id(rule): (rule, sources judged, mask allowed, mask denied)}``: each source is judged once per rule."""
        self._recent: dict[int, int] = {}
        """``{number in millionths: sources}`` of the last :data:`_RECENT` numbers seen (operands of derived values)."""
        self.complete = True
        """Whether everything given was indexed (past :data:`MAX_PROVENANCE_KEYS`, new values are left out)."""

    def bit(self, source: Source) -> int:
        """The mask bit of ``source`` (given one when first met)."""
        b = self._bits.get(source)
        if b is None:
            b = self._bits[source] = 1 << len(self._sources)
            self._sources.append(source)
        return b

    def _place(self, kind: SourceKind, tool: str, path: str) -> int:
        """:meth:`bit` of ``Source(kind, tool, path)``, by a tuple lookup (past :data:`MAX_SOURCES`, of the tool as a whole)."""
        b = self._places.get((kind, tool, path))
        if b is None:
            source = Source(kind, tool, path) if len(self._sources) < MAX_SOURCES else Source(kind, tool)
            b = self._places[kind, tool, path] = self.bit(source)
        return b

    def sources(self, mask: int) -> list[Source]:
        """The sources of a mask, first met first."""
        return [s for i, s in enumerate(self._sources) if mask >> i & 1]

    def judge(self, rule: Provenance) -> tuple[int, int]:
        """The masks of the sources met so far that ``rule`` allows and denies (each source judged once per rule)."""
        entry = self._allowed.get(id(rule))
        judged, allowed, denied = (entry[1], entry[2], entry[3]) if entry is not None and entry[0] is rule else (0, 0, 0)
        sources = self._sources
        if judged < len(sources):
            for i in range(judged, len(sources)):
                if rule.allows(sources[i]):
                    allowed |= 1 << i
                if rule.denied and rule.denies(sources[i]):
                    denied |= 1 << i
            self._allowed[id(rule)] = (rule, len(sources), allowed, denied)
        return allowed, denied

    @property
    def user(self) -> int:
        """The bit of what the user said (0 before the user said anything)."""
        return self._bits.get(_USER, 0)

    def _add(self, key: Hashable, bit: int) -> None:
        keys = self._keys
        old = keys.get(key)
        if old is None:
            if len(keys) >= MAX_PROVENANCE_KEYS:
                self.complete = False
                return
            keys[key] = bit
        elif not old & bit:
            keys[key] = old | bit

    def _add_number(self, n: Number, bit: int) -> None:
        n = _number_key(n)
        self._add(n, bit)
        if not -MAX_DERIVED < n < MAX_DERIVED:  # an id, not an operand
            return
        units = round(n * 1_000_000)
        recent = self._recent
        recent[units] = recent.pop(units, 0) | bit
        if len(recent) > _RECENT:
            del recent[next(iter(recent))]

    def _add_token(self, token: str, bit: int) -> None:
        """One value without whitespace (an id, a number, a date): its forms."""
        f = token if token.isascii() and token.islower() else fold(token)
        self._add(_id_key(f), bit)
        c = f[:1]
        if c in _NUMBER_START:
            n = parse_number(f) if len(f) <= 64 else None
            if n is not None:
                self._add_number(n, bit)
            elif len(f) >= 8 and c.isdigit():
                for form in token_date_forms(f):
                    self._add(form, bit)
        elif len(f) >= 5 and c in _MONTH_START:
            for form in token_date_forms(f):
                self._add(form, bit)

    def add_text(self, text: str, bit: int) -> None:
        """Free text: the whole by its forms, its dates, and each word, id, number and pair of words in it."""
        if len(text) > _MAX_TEXT:
            self.complete = False
            text = text[:_MAX_TEXT]
        keys = self._keys
        if len(keys) >= MAX_PROVENANCE_KEYS:
            self.complete = False
            return
        folded = fold(text)
        forms: list[Hashable] = [_id_key(folded)]
        if _DATE_HINT(folded) is not None:  # (the date expression only where a date may be)
            forms.extend(text_date_forms(folded))
        previous = ""
        for word in folded.split(" "):  # each word as an id reads it, its parts, pairs of words, numbers
            word = word.strip(_ID_STRIP)
            if word:
                forms.append(word)
                if not word.isalnum() and _SEPARATOR(word) is not None:  # id:W1, a/b: the parts too
                    forms.extend(p.strip(_ID_STRIP) for p in _PARTS(word))
                if previous:
                    forms.append(f"{previous} {word}")
                previous = word
                if word[0] in _NUMBER_START and (n := parse_number(word)) is not None:
                    self._add_number(n, bit)
        for key in forms:  # (inline _add: a text gives tens of forms)
            old = keys.get(key)
            if old is None:
                keys[key] = bit
            elif not old & bit:
                keys[key] = old | bit

    def add_told(self, value: object, *, user: bool) -> None:
        """What the user said (``user``) or the application told the agent: text or data; O(its size)."""
        bit = self.bit(Source("user" if user else "system"))
        self._walk("", value, "", 0, [_MAX_ITEMS], bit)

    def add_result(self, tool: str, result: object) -> None:
        """A tool's result: each leaf under its path; O(size of the result)."""
        budget = [_MAX_ITEMS]
        self._walk(tool, result, "", 0, budget)
        if budget[0] <= 0:
            self.complete = False

    def _walk(self, tool: str, obj: object, path: str, level: int, budget: list[int], fixed: int = 0) -> None:
        """Index ``obj`` found at ``path`` of ``tool``'s result (or, with ``fixed``, said by that source throughout)."""
        if budget[0] <= 0 or level > _MAX_DEPTH:
            if level > _MAX_DEPTH:
                self.complete = False
            return
        budget[0] -= 1
        t = type(obj)
        if t is dict:  # the common container: its scalar values inline, their bits by (kind, tool, path, key)
            places = self._places
            for k, v in obj.items():  # type: ignore[attr-defined]
                tv = type(v)
                if tv is str and not fixed:
                    if v[:1] in ("{", "["):  # JSON text, perhaps
                        self._walk(tool, v, f"{path}.{k}" if path else str(k), level + 1, budget)
                        continue
                    budget[0] -= 1
                    text = _is_text(v)
                    kind: SourceKind = "text" if text else "field"
                    bit = places.get((kind, tool, path, k))
                    if bit is None:
                        bit = places[kind, tool, path, k] = self._place(kind, tool, f"{path}.{k}" if path else str(k))
                    if text:
                        self.add_text(v, bit)
                    else:
                        self._add_token(v, bit)
                elif (tv is int or tv is float) and not fixed:
                    budget[0] -= 1
                    if v - v == 0.0:
                        bit = places.get(("field", tool, path, k))
                        if bit is None:
                            bit = places["field", tool, path, k] = self._place("field", tool, f"{path}.{k}" if path else str(k))
                        self._add_number(v, bit)
                elif tv is not bool and v is not None:
                    self._walk(tool, v, f"{path}.{k}" if path else str(k), level + 1, budget, fixed)
        elif t is str or isinstance(obj, str):
            s = str(obj)
            if s[:1] in ("{", "[") and len(s) <= _MAX_JSON:
                try:
                    parsed = from_json(s)
                except ValueError:
                    parsed = None
                if isinstance(parsed, (dict, list)):
                    self._walk(tool, parsed, path, level + 1, budget, fixed)
                    return
            if _is_text(s):
                self.add_text(s, fixed or self._place("text", tool, path))
            else:
                self._add_token(s, fixed or self._place("field", tool, path))
        elif isinstance(obj, Mapping):
            for k, v in obj.items():
                self._walk(tool, v, f"{path}.{k}" if path else str(k), level + 1, budget, fixed)
        elif t is list or t is tuple or isinstance(obj, (list, tuple)):
            for v in obj:  # type: ignore[attr-defined]
                self._walk(tool, v, path, level + 1, budget, fixed)
        elif (t is int or t is float or isinstance(obj, (int, float))) and not isinstance(obj, bool):
            if obj - obj == 0.0:  # type: ignore[operator]
                self._add_number(obj, fixed or self._place("field", tool, path))  # type: ignore[arg-type]
        elif hasattr(obj, "model_dump"):
            self._walk(tool, obj.model_dump(mode="json"), path, level + 1, budget, fixed)

    def mask(self, value: object) -> int:
        """The sources of ``value`` as a mask: by its forms (a date in any written form), a phrase by the pairs of
        words in it (the sources that said them all), a number by the two recent numbers it is computed from."""
        keys = self._keys
        m = 0
        for key in value_keys(value):
            m |= keys.get(key, 0)
        if m:
            return m
        if isinstance(value, str):
            for form in parse_date(value):
                m |= keys.get(form, 0)
            if m:
                return m
            words = [w for w in (w.strip(_ID_STRIP) for w in fold(value).split(" ")) if w]
            if 1 < len(words) <= _MAX_PHRASE:
                m = -1
                for a, b in pairwise(words):
                    m &= keys.get(f"{a} {b}", 0)
                    if not m:
                        break
                if m:
                    return m
                m = 0
        if self._recent:
            n = value if isinstance(value, (int, float)) and not isinstance(value, bool) else None
            if n is None and isinstance(value, str) and len(value) <= 64:
                n = parse_number(fold(value))
            if n is not None:
                pair = operands(n, self._recent)
                if pair is not None and pair[0] != pair[1]:  # not x / x, x + x: a guess from one number
                    m = self._recent[pair[0]] | self._recent[pair[1]]
        return m

    def token_masks(self, text: str) -> Iterator[int]:
        """The masks of the distinctive tokens of free text the agent wrote that a source said."""
        keys = self._keys
        for token in stated_ids(text):
            if _distinctive(token):
                m = keys.get(token, 0)
                if not m:
                    n = parse_number(token.strip(STRIP)) if token[:1].isdigit() else None
                    m = keys.get(_number_key(n), 0) if n is not None else 0
                if m:
                    yield m
