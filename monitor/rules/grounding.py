"""Grounding the way people write: normalised forms of values, and values derived from seen numbers.

The information check (DESIGN §2, check 5) asks whether a grounded argument's value was
available to the agent. People, tools and agents write one value in several ways, so besides
the value as it is (``exact``), ``normalized`` matching compares *forms*:

=========  ============================================================  ===========================
kind       rule                                                          example
=========  ============================================================  ===========================
text       casefolded; runs of whitespace are one space                  ``Blue  Mug`` ↔ ``blue mug``
id         a leading ``#`` is dropped; case is ignored                   ``#W123`` ↔ ``W123`` ↔ ``w123``
number     thousands separators, one currency symbol, trailing zeros     ``$1,234.50`` ↔ ``1234.5``
date       written-out, ISO and unambiguous numeric dates, as ISO        ``May 1st, 2024`` ↔ ``2024-05-01``
date-time  ISO date-times (``T`` or space, ``Z`` or offsets, as UTC)     ``…T10:00+02:00`` ↔ ``…T08:00Z``
=========  ============================================================  ===========================

Details that keep a form from passing a value nobody wrote:

- Numbers: a digit string with a leading zero (``02139``, ``007``) is not a number (zip codes,
  ids); ``1,234`` is read as 1234 only with groups of exactly three digits; decimals with
  more than 15 significant digits are not normalised (a float cannot tell them apart).
- Dates: ``05/01/2024`` is read only when it is unambiguous (a part above 12, or both parts
  equal); two-digit years and relative dates (``tomorrow``) are not read. A date written
  without a year (``May 24``) matches that day of any year: the year comes from context the
  monitor cannot see. A seen date-time also makes its date seen; a looked-up date-time at
  midnight matches its date.

``derived`` matching (for computed amounts) also accepts a number that is the sum,
difference, product or quotient of two of the :data:`MAX_RECENT_NUMBERS` numbers seen most
recently (``150 = 3 * 50``; the two may be the same number). It is loose by nature: with
small numbers seen, many values are derivable, so it is opt-in per argument.

Cost: forms of what arrives are computed once, on arrival (O(size of what arrived)); a
value is looked up by its own forms, O(1) each; a derivation costs O(:data:`MAX_RECENT_NUMBERS`)
integer operations and set lookups and runs only when every other lookup failed.
"""

from __future__ import annotations

import datetime as dt
import math
import re
import threading
from collections import deque
from collections.abc import Container, Hashable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Final, Literal, TypeAlias

__all__ = (
    "MATCHES",
    "MAX_DERIVED",
    "MAX_FORM_LENGTH",
    "MAX_RECENT_NUMBERS",
    "MAX_SEEN_ONCE",
    "MAX_SIGNIFICANT_DIGITS",
    "STRIP",
    "TOKEN_START",
    "FormIndex",
    "GroundingMatch",
    "InformedTexts",
    "KnownText",
    "Number",
    "derivation",
    "fold",
    "id_form",
    "id_variants",
    "operands",
    "parse_date",
    "parse_number",
    "stated_ids",
    "text_date_forms",
    "token_date_forms",
    "value_forms",
)

GroundingMatch: TypeAlias = Literal["exact", "normalized", "derived"]
"""How a grounded argument's value is matched against what the agent has seen."""
MATCHES: Final[tuple[GroundingMatch, ...]] = ("exact", "normalized", "derived")
MAX_RECENT_NUMBERS: Final = 256
"""Derivations use the numbers seen most recently: the last this many that arrived."""
MAX_DERIVED: Final = 10**15
"""Numbers this large or larger (ids rather than amounts) are neither derived nor operands."""
MAX_SIGNIFICANT_DIGITS: Final = 15
"""Decimals with more significant digits are not normalised (two such values may be one float)."""
MAX_FORM_LENGTH: Final = 2_000
"""Longer strings get no forms (as the pool keeps result strings this long only as a hash)."""

Number: TypeAlias = int | float

STRIP: Final = ".,;:!?()[]{}<>\"'`"
"""Punctuation stripped from both ends of a word."""

_NUMBER: Final = re.compile(r"([-+]?)(?:([$€£¥])\s?)?([-+]?)(0|[1-9]\d{0,2}(?:,\d{3})+|[1-9]\d*)(?:\.(\d+))?([$€£¥]?)", re.ASCII)
_NUMBER_START: Final = frozenset("0123456789-+$€£¥")
TOKEN_START: Final = frozenset("#0123456789-+$€£¥")
"""A lower-case ASCII token that starts with none of these has no forms (callers may skip it)."""
_NUMBER_CHARS: Final = frozenset("0123456789-+$€£¥,. ")
_CURRENCY: Final = frozenset("$€£¥")
_HAS_DIGIT: Final = re.compile(r"\d").search
_CANDIDATE: Final = re.compile(r"[#0-9$€£¥+-]\S*")
"""Where an id, a number or a date may start; only these tokens of a text are looked at."""
_WORD_START: Final = frozenset(" " + ".,;:!?()[]{}<>\"'`")
_MONTH_NEAR: Final = re.compile("jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec")
_ASCII_SPACE: Final = "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f"
"""What ``str.split()`` splits ASCII text at, besides the space."""
_MONTH_START: Final = frozenset("jfmasond")

_MONTH = (
    r"(?:jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?"
    r"|sep(?:t(?:ember)?)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)"
)
_DATES: Final = re.compile(
    r"(?<![\w:.+-])(?:"
    # ISO date-time: 2024-05-01T10:00[:00[.123]][Z|+02:00]
    r"(?P<y>\d{4})-(?P<mo>\d{2})-(?P<d>\d{2})[t ](?P<h>\d{2}):(?P<mi>\d{2})"
    r"(?::(?P<s>\d{2})(?:\.(?P<f>\d{1,6})\d*)?)?(?P<tz>z|[+-]\d{2}:?\d{2})?(?![\w:])"
    # year first: 2024-05-01, 2024/5/1
    r"|(?P<y1>\d{4})(?P<s1>[-/.])(?P<m1>\d{1,2})(?P=s1)(?P<d1>\d{1,2})(?![\w:]|[-/.]\d)"
    # day or month first: 05/24/2024, 24.05.2024 (read only when unambiguous)
    r"|(?P<a2>\d{1,2})(?P<s2>[-/.])(?P<b2>\d{1,2})(?P=s2)(?P<y2>\d{4})(?![\w:]|[-/.]\d)"
    # month first: May 1st, 2024; May 1
    rf"|(?P<m3>{_MONTH})\.?\s+(?P<d3>\d{{1,2}})(?:st|nd|rd|th)?(?![\w:])(?:,?\s*(?P<y3>\d{{4}})(?!\d))?"
    # day first: 1 May 2024; 1st of May, 2024
    rf"|(?P<d4>\d{{1,2}})(?:st|nd|rd|th)?\s+(?:of\s+)?(?P<m4>{_MONTH})\.?(?!\w)(?:,?\s*(?P<y4>\d{{4}})(?!\d))?"
    r")",
)
_MONTHS: Final = {
    "jan": 1, "feb": 2, "mar": 3, "apr": 4, "may": 5, "jun": 6, "jul": 7, "aug": 8, "sep": 9, "oct": 10, "nov": 11, "dec": 12,
}  # fmt: skip

_UTC: Final = dt.UTC

_YEARLESS: Final = "md"
"""Tag of a month-day written without a year: ``("md", "--05-24")``."""
_DAY_OF_YEAR: Final = "md*"
"""Tag of the month-day of a full date that was seen, which only a looked-up date without a year matches."""


_UNICODE_FOLD: Final = str.maketrans(
    dict.fromkeys("\u2010\u2011\u2012\u2013\u2014\u2015\u2212\ufe58\ufe63\uff0d", "-")
    | dict.fromkeys("\u2018\u2019\u201a\u201b\u2032\uff07", "'")
    | dict.fromkeys("\u201c\u201d\u201e\u201f\u2033\uff02", '"')
    | dict.fromkeys("\u200b\u200c\u200d\u2060\ufeff\u00ad", None)
)
"""How text folds the way people type it: Unicode dashes and the minus sign as ``-``, curly
quotes as straight ones, zero-width characters and soft hyphens dropped. (Unicode spaces, such
as U+00A0, U+202F and U+2009, are whitespace, which :func:`fold` makes one space.)"""


def fold(text: str) -> str:
    """``text`` casefolded, with runs of whitespace as one space and none at the ends.

    Unicode dashes (U+2010..U+2015, U+2212) are ``-`` and curly quotes straight ones
    (:data:`_UNICODE_FOLD`): ``2001\u201104\u201112`` folds as ``2001-04-12``.
    """
    t = text.casefold()
    if not t.isascii():
        t = t.translate(_UNICODE_FOLD)
    if t.isprintable() and "  " not in t and t[:1] != " " and t[-1:] != " ":
        return t  # its only whitespace is single spaces (every other kind is not printable)
    if len(t) < 256 or not t.isascii():
        return " ".join(t.split())
    for c in _ASCII_SPACE:  # the same result, without a string per word (informed documents)
        if c in t:
            t = t.replace(c, " ")
    while "  " in t:
        t = t.replace("  ", " ")
    return t.strip(" ")


_ID_STRIP: Final = STRIP + "*~#"
_ID_TOKENS: Final = re.compile(r"[^\s/,;:()\[\]{}<>\"'`=|*~#]+")
"""Where a folded text is cut into the ids it may state (besides its whitespace-separated words)."""


def id_form(value: str) -> str:
    """The form an id is matched by: folded (:func:`fold`: case, Unicode dashes), without
    surrounding whitespace, punctuation or markdown and without a leading ``#``; O(len(value)).

    ``#W8855135``, ``w8855135`` and ``**(W8855135).**`` are all ``w8855135``.
    """
    f = value.casefold()
    if not f.isascii():
        f = f.translate(_UNICODE_FOLD)
    return f.strip().strip(_ID_STRIP)


def id_variants(value: str) -> tuple[str, str]:
    """``value`` and its other decoration (``W1`` and ``#W1``, ``#W1`` and ``W1``), as a refusal names them."""
    v = value.strip()
    return (v, v[1:].lstrip()) if v[:1] == "#" else (v, "#" + v)


_BETWEEN_WORDS: Final = str.maketrans(dict.fromkeys("\u2012\u2013\u2014\u2015", " "))
"""Dashes that stand between words (figure, en, em dash, bar), unlike hyphens inside one."""


def stated_ids(text: str) -> set[str]:
    """The id forms (:func:`id_form`) a text states: each word, and each part of a word between
    separators (``id:W1`` states ``id:w1``, ``id`` and ``w1``; ``ID is W1\u2014can`` states ``w1``);
    O(len(text))."""
    if not text.isascii():
        text = text.translate(_BETWEEN_WORDS)
    folded = fold(text.replace("--", " ") if "--" in text else text)
    strip = _ID_STRIP
    ids = {w.strip(strip) for w in folded.split()}  # (what id_form makes of a folded word)
    ids.update([t.strip(strip) for t in _ID_TOKENS.findall(folded)])
    ids.discard("")
    return ids


def parse_number(text: str) -> Number | None:
    """The number ``text`` writes (``$1,234.50`` -> 1234.5, ``150.00`` -> 150), or ``None``.

    Integral values are ``int`` (exact at any length); others ``float``, only when they have
    at most :data:`MAX_SIGNIFICANT_DIGITS` significant digits.
    """
    if text.isdigit() and text.isascii():  # an id or a count, the common number in results
        return int(text) if text[0] != "0" or len(text) == 1 else None
    if not _NUMBER_CHARS.issuperset(text) or (" " in text and not _CURRENCY.intersection(text[:2])):
        return None  # most text fails here, before the regex (a space only follows a currency symbol)
    m = _NUMBER.fullmatch(text)
    if m is None:
        return None
    sign, before, sign2, whole, frac, after = m.groups()
    if (sign and sign2) or (before and after):
        return None
    negative = (sign or sign2) == "-"
    digits = whole.replace(",", "") if "," in whole else whole
    frac = frac.rstrip("0") if frac else ""
    if not frac:
        n = int(digits)
        return -n if negative else n
    if len(digits.lstrip("0")) + len(frac) > MAX_SIGNIFICANT_DIGITS:
        return None
    x = float(f"{digits}.{frac}")
    return -x if negative else x


def _number_of(value: object) -> Number | None:
    """A value's number (``bool`` is not one; text is parsed), or ``None``."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return int(value)
    if isinstance(value, (float, Decimal)):
        x = float(value)
        if not math.isfinite(x):
            return None
        return int(x) if x.is_integer() else x
    if isinstance(value, str) and len(value) <= 64:
        return parse_number(fold(value))
    return None


# -- dates --------------------------------------------------------------------------------------
def _date(y: int, m: int, d: int) -> str | None:
    try:
        return dt.date(y, m, d).isoformat()
    except ValueError:
        return None


def _md(iso: str) -> str:
    """``2024-05-01`` -> ``--05-01`` (ISO 8601's form of a date without a year)."""
    return "-" + iso[4:]


def _canonical(moment: dt.datetime) -> str:
    """An ISO date-time, converted to UTC (and marked ``Z``) when it has an offset."""
    if moment.tzinfo is None:
        return moment.isoformat()
    return moment.astimezone(_UTC).replace(tzinfo=None).isoformat() + "Z"


def _read(m: re.Match[str]) -> dt.datetime | str | tuple[str, str] | None:
    """What one match writes: a date-time, an ISO date, ``("md", "--05-24")`` (no year), or ``None``."""
    g = m.groupdict()
    if g["y"] is not None:
        tz = g["tz"]
        try:
            moment = dt.datetime(
                int(g["y"]), int(g["mo"]), int(g["d"]), int(g["h"]), int(g["mi"]), int(g["s"] or 0),
                int((g["f"] or "0").ljust(6, "0")),
            )  # fmt: skip
            if tz:
                offset = (
                    dt.timedelta(0) if tz == "z" else int(tz[0] + "1") * dt.timedelta(hours=int(tz[1:3]), minutes=int(tz[-2:]))
                )
                moment = moment.replace(tzinfo=dt.timezone(offset))
        except ValueError:
            return None
        return moment
    if g["y1"] is not None:
        return _date(int(g["y1"]), int(g["m1"]), int(g["d1"]))
    if g["y2"] is not None:
        a, b = int(g["a2"]), int(g["b2"])
        if a == b or (a > 12) != (b > 12):  # unambiguous: both parts equal, or exactly one above 12
            return _date(int(g["y2"]), b, a) if a > 12 else _date(int(g["y2"]), a, b)
        return None
    month, day, year = (g["m3"], g["d3"], g["y3"]) if g["m3"] is not None else (g["m4"], g["d4"], g["y4"])
    mo = _MONTHS[month[:3]]
    if year is not None:
        return _date(int(year), mo, int(day))
    iso = _date(2000, mo, int(day))  # a leap year: 29 February is a day
    return (_YEARLESS, _md(iso)) if iso is not None else None


def _iso_forms(f: str, forms: set[Hashable]) -> None:
    """Forms of an ISO date or date-time token (folded) into ``forms``, without a regex when it is plain."""
    if len(f) == 10:  # the date itself is the token, in the pool; a bad one gives a form no lookup makes
        forms.add((_DAY_OF_YEAR, "-" + f[4:]))
        return
    try:
        moment = dt.datetime.fromisoformat(f[:-1] + "+00:00" if f[-1:] == "z" else f)
    except ValueError:
        for m in _DATES.finditer(f):
            forms.update(_seen_date_forms(m))
        return
    day = moment.date().isoformat()
    forms.update((_canonical(moment), day, (_DAY_OF_YEAR, _md(day))))


def _seen_date_forms(m: re.Match[str]) -> tuple[Hashable, ...]:
    """Forms of one date or date-time found in arriving text."""
    what = _read(m)
    if isinstance(what, dt.datetime):
        day = what.date().isoformat()  # the date as written
        return (_canonical(what), day, (_DAY_OF_YEAR, _md(day)))
    if isinstance(what, str):
        return (what, (_DAY_OF_YEAR, _md(what)))
    return (what,) if what is not None else ()


def text_date_forms(folded: str) -> Iterator[Hashable]:
    """The forms of every date and date-time written in a folded text (as arriving text gives them); O(len(folded))."""
    if _HAS_DIGIT(folded) is None:
        return
    for m in _DATES.finditer(folded):
        yield from _seen_date_forms(m)


def token_date_forms(f: str) -> set[Hashable]:
    """The forms of a date or date-time written as one folded token (``2024-05-01``, ``2024-05-01t10:00z``), as
    :meth:`FormIndex.add_token` finds them: ISO tokens without a regular expression."""
    forms: set[Hashable] = set()
    if len(f) >= 10 and f[4] == "-" and f[7] == "-":  # (the token itself is the caller's to keep)
        _iso_forms(f, forms)
    else:
        forms.update(text_date_forms(f))
    return forms


def parse_date(text: str) -> tuple[Hashable, ...]:
    """The forms a value written as one date or date-time is looked up by (``()`` when it is not one).

    A date gives its ISO form and its month-day (which only a date seen without a year
    matches); a date without a year gives its month-day (which any date on that day
    matches); a date-time gives its canonical form (UTC when it has an offset) and, at
    midnight, its date's forms too.
    """
    return _folded_date(fold(text)) if 5 <= len(text) <= 64 else ()


def _folded_date(f: str) -> tuple[Hashable, ...]:
    """:func:`parse_date` of folded text."""
    m = _DATES.fullmatch(f) if 5 <= len(f) <= 64 else None
    if m is None:
        return ()
    what = _read(m)
    if isinstance(what, dt.datetime):
        canonical = _canonical(what)
        if what.time() != dt.time(0):
            return (canonical,)
        day = what.date().isoformat()
        return (canonical, day, (_YEARLESS, _md(day)))
    if isinstance(what, str):
        return (what, (_YEARLESS, _md(what)))
    if what is not None:
        return (what, (_DAY_OF_YEAR, what[1]))
    return ()


def _object_forms(value: dt.date) -> tuple[Hashable, ...]:
    """Forms of a ``date`` or ``datetime`` object looked up (an argument validated into one)."""
    if isinstance(value, dt.datetime):
        canonical = _canonical(value)
        if value.time() != dt.time(0):
            return (canonical,)
        day = value.date().isoformat()
        return (canonical, day, (_YEARLESS, _md(day)))
    iso = value.isoformat()
    return (iso, (_YEARLESS, _md(iso)))


# -- looking a value up -------------------------------------------------------------------------
def value_forms(value: object) -> tuple[Hashable, ...]:
    """Every normalised form a looked-up value is matched by."""
    if type(value) is str:
        return _folded_forms(fold(value)) if len(value) <= MAX_FORM_LENGTH else ()
    if value is None or isinstance(value, bool):
        return ()
    if isinstance(value, dt.date):
        return _object_forms(value)
    n = _number_of(value)
    if n is not None:
        return (n, str(n))
    if isinstance(value, str):  # a str subclass
        return value_forms(str(value))
    return ()


def _folded_forms(f: str) -> tuple[Hashable, ...]:
    """The forms of folded text ``f`` (``f`` first): an id without its ``#``, a number, a date."""
    c = f[:1]
    if c == "#":
        return (f, f[1:].lstrip())
    if c in _NUMBER_START:
        n = parse_number(f)
        if n is not None:
            return (f, n)
    if c.isdigit() or (c in _MONTH_START and _HAS_DIGIT(f) is not None):
        return (f, *_folded_date(f))
    return (f,)


# -- derived values -----------------------------------------------------------------------------
_SCALE: Final = 10**6
"""Derivations compare numbers in millionths, as integers: sums and products of amounts are exact."""


def _units(x: Number) -> int | None:
    """``x`` in millionths (``19.99`` -> ``19_990_000``), or ``None`` (not finite, or :data:`MAX_DERIVED` or more)."""
    if isinstance(x, int):
        return int(x) * _SCALE if -MAX_DERIVED < x < MAX_DERIVED else None
    if not -MAX_DERIVED < x < MAX_DERIVED:  # also NaN
        return None
    return round(x * _SCALE)


def _show(u: int) -> str:
    whole, rest = divmod(u, _SCALE)
    if not rest:
        return str(whole)
    return format(Decimal(u) / _SCALE, "f").rstrip("0")


def derivation(value: object, recent: Iterable[Number]) -> str | None:
    """How ``value`` is computed from two of the ``recent`` numbers (``"150 = 3 * 50"``), or ``None``.

    Checks, for each distinct recent number ``a`` (in the order given: newest first from
    :meth:`FormIndex.derive`), whether ``v / a`` or ``v * a`` is one too (products and
    quotients first: a coincidence is less likely there than in a sum with a small number),
    then ``v - a`` or ``v + a``: O(len(recent)) integer operations and set lookups. Numbers are
    compared in millionths (``0.1 + 0.2`` is ``0.3``). The two may be the same number.
    Identities (``v = v + 0``, ``v = v * 1``) are skipped: they would say only that ``v``
    itself was seen. Numbers of :data:`MAX_DERIVED` or more (ids) take no part.
    """
    n = _number_of(value)
    v = _units(n) if n is not None else None
    if v is None:
        return None
    keys: dict[int, None] = {}
    for x in recent:
        u = _units(x)
        if u is not None:
            keys[u] = None
    found = _computed(v, keys)
    if found is None:
        return None
    a, op, b = found
    return f"{_show(v)} = {_show(a)} {op} {_show(b)}"


def operands(value: Number, recent: Mapping[int, object]) -> tuple[int, int] | None:
    """The two of ``recent`` (numbers in millionths, newest last) ``value`` is computed from, as :func:`derivation` finds them."""
    v = _units(value)
    if v is None:
        return None
    found = _computed(v, dict.fromkeys(reversed(tuple(recent))))
    return None if found is None else (found[0], found[2])


def _computed(v: int, keys: dict[int, None]) -> tuple[int, str, int] | None:
    """``(a, op, b)`` with ``v = a op b`` for ``a`` and ``b`` in ``keys`` (millionths), products and quotients first."""
    scaled = v * _SCALE
    for a in keys:
        if a and a != _SCALE:
            if not scaled % a and (b := scaled // a) != v and b in keys:
                return (a, "*", b)
            product = v * a
            if not product % _SCALE and (b := product // _SCALE) != v and b in keys:
                return (b, "/", a)
    for a in keys:
        if a:
            if v - a in keys:
                return (a, "+", v - a)
            if v + a in keys:
                return (v + a, "-", a)
    return None


# -- the index of what arrived ------------------------------------------------------------------
class FormIndex:
    """The normalised forms of everything an episode's agent has seen, and its recent numbers.

    A :class:`~prefixmon.TrackedState` keeps one beside its exact pool: forms equal to the
    exact value are not stored again (a lookup checks both), so a lower-case id costs nothing
    here and a number one append to :attr:`numbers`.
    """

    __slots__ = ("forms", "numbers")

    def __init__(self, recent: int = MAX_RECENT_NUMBERS) -> None:
        self.forms: set[Hashable] = set()
        """Forms of what was seen that differ from its exact value."""
        self.numbers: deque[Number] = deque((), recent)  # noqa: RUF037 (maxlen= as a keyword costs 2.5x the deque itself)
        """The numbers seen most recently (occurrences), the operands of derivations."""

    def add_token(self, s: str) -> None:
        """Forms of one string without whitespace (a result field); O(len(s))."""
        forms = self.forms
        if s.isascii() and s.islower():  # nothing to fold (ids, words): no copy made
            f = s
        else:
            f = s.casefold()
            if not f.isascii():
                f = f.translate(_UNICODE_FOLD)
            if f != s:
                forms.add(f)
        c = f[:1]
        if c == "#":
            forms.add(f[1:])
        elif c in _NUMBER_START:
            if len(f) >= 10 and f[4] == "-" and f[7] == "-":  # ISO dates and date-times, the common ones
                _iso_forms(f, forms)
                return
            n = parse_number(f)
            if n is not None:
                forms.add(n)
                self.numbers.append(n)
            elif len(f) >= 8 and c.isdigit():
                for m in _DATES.finditer(f):
                    forms.update(_seen_date_forms(m))

    def add_text(self, text: str, *, folded: str | None = None, words: bool = True) -> None:
        """Forms of a text: the whole, its words (ids, numbers) and its dates; O(len(text)).

        Args:
            text: the text as it arrived.
            folded: ``fold(text)``, when the caller has it.
            words: also the casefolded whole and words (``False`` for long informed texts, which
                the substring search finds in any case).
        """
        forms = self.forms
        f = fold(text) if folded is None else folded
        if words:
            if f != text:
                forms.add(f)
            raw = text.split()
            low = f.split(" ") if f else []
            if len(raw) == len(low):  # casefolding never makes or removes whitespace
                for r, w in zip(raw, low, strict=True):
                    if r != w and (w := w.strip(STRIP)):
                        forms.add(w)
        numbers = self.numbers
        size = len(f)
        for m in _CANDIDATE.finditer(f):
            start = m.start()
            if start and f[start - 1] not in _WORD_START:  # inside a word: "hat039"
                continue
            token = m.group().rstrip(STRIP)
            if len(token) < 2 and not token.isdigit():  # a dash or a lone sign
                continue
            c = token[:1]
            if c == "#":
                forms.add(token[1:])
                continue
            n = parse_number(token)
            if n is not None:
                forms.add(n)
                numbers.append(n)
            if c.isdigit():  # a date starts here, or a written one is around this day number
                end = m.end()
                lo = max(0, start - 12) if _MONTH_NEAR.search(f, max(0, start - 12), end + 20) else start
                if lo < start or n is None:
                    for d in _DATES.finditer(f, lo, min(size, end + 32)):
                        forms.update(_seen_date_forms(d))

    def add_known(self, known: KnownText) -> None:
        """What :meth:`add_text` would add for a text :class:`InformedTexts` read before; O(its forms).

        (For an index keeping the default :data:`MAX_RECENT_NUMBERS` numbers, as every
        :class:`~prefixmon.TrackedState`'s does.)
        """
        self.forms.update(known.forms)
        self.numbers.extend(known.numbers)

    def add_number(self, x: Number) -> None:
        """A number leaf of a result (its exact form is in the pool already)."""
        self.numbers.append(x)

    def add_object(self, obj: object) -> None:
        """A leaf that is not a plain scalar: ``date``, ``datetime`` and ``Decimal`` values have forms."""
        if isinstance(obj, dt.datetime):
            day = obj.date().isoformat()
            self.forms.update((_canonical(obj), day, (_DAY_OF_YEAR, _md(day))))
        elif isinstance(obj, dt.date):
            iso = obj.isoformat()
            self.forms.update((iso, (_DAY_OF_YEAR, _md(iso))))
        elif isinstance(obj, Decimal):
            n = _number_of(obj)
            if n is not None:
                self.forms.add(n)
                self.numbers.append(n)

    def find(self, value: object, pool: Container[object]) -> bool:
        """Whether a normalised form of ``value`` is here or in the exact ``pool``; O(number of forms).

        (An ``int``'s text form in the pool is the exact lookup's business.)
        """
        forms = self.forms
        if type(value) is int:  # the common grounded number: no tuple of forms built
            return value in forms or str(value) in forms
        if type(value) is str:
            return len(value) <= MAX_FORM_LENGTH and self.find_folded(fold(value), pool)
        return any(f in forms or f in pool for f in value_forms(value))

    def find_folded(self, f: str, pool: Container[object]) -> bool:
        """:meth:`find` of text already folded (:func:`fold`)."""
        forms = self.forms
        if f in forms or f in pool:
            return True
        return any(g in forms or g in pool for g in _folded_forms(f)[1:])

    def derive(self, value: object) -> str | None:
        """How ``value`` is computed from two recent numbers, or ``None`` (see :func:`derivation`)."""
        numbers = self.numbers
        return derivation(value, reversed(numbers)) if numbers else None


# -- texts every episode is told ------------------------------------------------------------------
MAX_SEEN_ONCE: Final = 1024
"""Hashes of long texts told once that :class:`InformedTexts` remembers (to keep a text told again)."""


@dataclass(frozen=True, slots=True)
class KnownText:
    """A long text's forms as :meth:`FormIndex.add_text` finds them (``words=False``), found once."""

    folded: str
    """``fold(text)``."""
    forms: tuple[Hashable, ...]
    numbers: tuple[Number, ...]
    """Its last :data:`MAX_RECENT_NUMBERS` numbers, in order (the only ones a :class:`FormIndex` keeps)."""


class InformedTexts:
    """The forms of long texts told to several episodes, found once for all of them.

    Every episode of an agent is usually told the same system prompt or policy document, and
    finding a text's numbers and dates costs O(its length). A text told a second time is
    kept with what was found in it, up to ``max_chars`` characters in all (the text and its
    folded copy; oldest dropped first; a text over a quarter of that is never kept), so
    telling an episode such a text again costs a dict lookup and O(its forms). A text told
    once, such as a long tool reply, leaves only its hash behind (the last
    :data:`MAX_SEEN_ONCE`), never its content. Safe to share between threads.
    """

    __slots__ = ("_chars", "_entries", "_lock", "_seen", "max_chars")

    def __init__(self, max_chars: int = 2**22) -> None:
        self.max_chars = max_chars
        self._entries: dict[str, KnownText] = {}
        self._chars = 0
        self._seen: dict[int, None] = {}
        """Hashes of texts told once so far, oldest first."""
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, text: str) -> KnownText | None:
        """``text``'s forms when it is kept (found now if it is told the second time), else ``None``: read it yourself."""
        known = self._entries.get(text)
        if known is not None:
            return known
        if 2 * len(text) > self.max_chars // 4:  # a text too big to keep (with its folded copy) is read every time
            return None
        key = hash(text)
        with self._lock:
            seen = self._seen
            if key not in seen:  # told for the first time (as far as the hashes kept know)
                if len(seen) >= MAX_SEEN_ONCE:
                    del seen[next(iter(seen))]
                seen[key] = None
                return None
        folded = fold(text)
        size = len(text) + len(folded)
        index = FormIndex()
        index.add_text(text, folded=folded, words=False)
        known = KnownText(folded, tuple(index.forms), tuple(index.numbers))
        with self._lock:
            entries = self._entries
            if text not in entries:
                seen.pop(key, None)
                while entries and self._chars + size > self.max_chars:
                    oldest = next(iter(entries))
                    self._chars -= len(oldest) + len(entries.pop(oldest).folded)
                entries[text] = known
                self._chars += size
        return known
