"""Tracked state of one episode: facts, reference bindings and the information pool.

Every lookup is a dict or set access, so a check costs O(what it reads) whatever the size
of the state. Tool results are walked once, when they arrive, never per check.
"""

from __future__ import annotations

import json
import math
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass
from itertools import repeat
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final

from pydantic_core import from_json

from ._internal.json_depth import loads_refused
from .order import OrderLog
from .rules.grounding import TOKEN_START, FormIndex, GroundingMatch, InformedTexts, fold, id_form, stated_ids
from .rules.observed import ObservedObjects
from .rules.provenance import ProvenanceIndex
from .rules.spec import ProducePlan, produce_plan
from .verdict import quote

if TYPE_CHECKING:
    from .batch import Batch

__all__ = (
    "MAX_AGENT_IDS",
    "MAX_AGENT_TEXT",
    "MAX_POOL_BYTES",
    "MAX_TOKENISED_LENGTH",
    "MAX_WALK_DEPTH",
    "MAX_WALK_ITEMS",
    "Binding",
    "TrackedState",
)

MAX_WALK_DEPTH: Final = 64
"""Nesting below this depth in a tool result is not indexed."""
MAX_WALK_ITEMS: Final = 200_000
"""At most this many nodes (leaves and containers) of one tool result are visited."""
_NO_PRODUCE: Final[Mapping[str, str]] = MappingProxyType({})
MAX_TOKENISED_LENGTH: Final = 2_000
"""Strings up to this length are also indexed word by word; longer ones from tool results are
pooled as their length and hash only (an exact match still counts as seen)."""
MAX_AGENT_IDS: Final = 10_000
"""Ids the agent made up that an episode remembers (:meth:`TrackedState.agent_wrote`); past it, no more are noted."""
MAX_AGENT_TEXT: Final = 100_000
"""Characters of one agent message read for the ids it states (the rest is not)."""
MAX_POOL_BYTES: Final = 8 * 2**20
"""About how much memory one episode's information pool may hold verbatim: every pooled string
counts its length plus 80 bytes (what CPython spends on a small string and its set slot), every
number 80 bytes. Past the bound, strings are pooled as a length + hash key (128 bytes) only, so
an exact reuse still counts as seen, while their words and numbers are not pooled; past twice
the bound nothing new is. A pool that left anything out is no longer complete
(:attr:`TrackedState.pool_complete`)."""
_ENTRY: Final = 80
_KEY_COST: Final = 128

_STRIP = ".,;:!?()[]{}<>\"'`"


@dataclass(slots=True, kw_only=True)
class Binding:
    """A reference value produced by a tool result."""

    kind: str
    depth: int
    """Depth of the action whose result produced it (0: given before the episode)."""
    tool: str | None
    current: bool = True
    stale_depth: int | None = None
    stale_by: str | None = None


def _long(text: str) -> Hashable:
    """The pool's key for a string too long to keep: its length and hash, not its text."""
    return ("\x00long", len(text), hash(text))


def _id_like(word: str) -> bool:
    """Whether a word of a text answer may be an id: a digit and a letter or ``_`` in it
    (``certificate_3221322``, ``W2378156``), or six digits or more (``8600330539``); not an
    amount (``300``, ``$1,286.00``) or a date (``2024-05-01``)."""
    if len(word) < 2 or len(word) > 200:
        return False
    if word.isdigit():
        return len(word) >= 6 and word.isascii()
    has_digit = has_letter = False
    for c in word:
        if c.isdigit():
            has_digit = True
        elif c.isalpha() or c == "_":
            has_letter = True
        if has_digit and has_letter:
            return True
    return False


def _number_part(form: str) -> str | None:
    """The number of an id form of one or two letters before five digits or more (``w9502127`` -> ``9502127``)."""
    i = 0
    while i < len(form) and i < 3 and form[i].isascii() and form[i].isalpha():
        i += 1
    rest = form[i:]
    return rest if 1 <= i <= 2 and len(rest) >= 5 and rest.isascii() and rest.isdigit() else None


def _key(value: Any) -> Hashable | None:
    """A hashable lookup key for a scalar, or ``None`` for values that are not ids."""
    if type(value) is str:  # the common id
        return value
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (str, int)):
        return value
    if isinstance(value, float):
        return None if math.isnan(value) or math.isinf(value) else value
    return None


class TrackedState:
    """The state a predicate reads: facts, bindings, information, and a live environment.

    Attributes:
        facts: key/value facts, updated by tool effects.
        objects: observed objects, by kind and id (see :mod:`prefixmon.rules.observed`).
        env: the live environment object given to the episode, or ``None``.
        exposed: names of the tools available now. A ``frozenset`` given to the constructor is
            shared, not copied, until the exposure first changes (every episode of a monitor
            starts with the toolset's own set, so opening one costs nothing per tool).
        depth: number of actions emitted so far.
        turn: current turn (0-based).
    """

    __slots__ = (
        "_agent_ids",
        "_bindings",
        "_exposed",
        "_forms",
        "_id_forms",
        "_informed",
        "_objects",
        "_order",
        "_pool",
        "_pool_bytes",
        "_pool_lossy",
        "_shared_exposed",
        "_texts",
        "_user_ids",
        "_user_texts",
        "batch",
        "depth",
        "env",
        "facts",
        "provenance",
        "turn",
    )

    def __init__(
        self,
        *,
        facts: Mapping[str, Any] | None = None,
        env: Any = None,
        exposed: Iterable[str] | None = None,
        informed: InformedTexts | None = None,
        provenance: ProvenanceIndex | None = None,
    ) -> None:
        self.facts: dict[str, Any] = dict(facts) if facts else {}
        self.provenance = provenance
        """Who said each value seen, when the toolset declares provenance rules (:mod:`prefixmon.rules.provenance`)."""
        self.env = env
        self.depth = 0
        self.turn = 0
        self.batch: Batch | None = None
        """The batch of calls being judged together (:mod:`prefixmon.batch`), if any."""
        self._shared_exposed: frozenset[str] = exposed if type(exposed) is frozenset else frozenset()
        self._exposed: set[str] | None = None if type(exposed) is frozenset else set(exposed or ())
        self._bindings: dict[Hashable, dict[str, Binding]] = {}
        self._id_forms: dict[str, Hashable] = {}
        """``{id form: bound value}`` of bound values whose :func:`~prefixmon.rules.grounding.id_form` differs from
        the value (``w1``: ``#W1``): a value in another form finds its binding in O(len(value)) (the first value
        bound in a form keeps it)."""
        self._objects: ObservedObjects | None = None
        self._order: OrderLog | None = None
        self._pool: set[Hashable] = set()
        self._pool_bytes = 0
        """Estimated memory the pool holds (see :data:`MAX_POOL_BYTES`)."""
        self._pool_lossy = False
        """Whether the bound made the pool leave out a word, a number or a value."""
        self._texts: list[str] = []
        """Every text informed (casefolded, runs of whitespace as one space), searched by substring for :meth:`seen`."""
        self._user_texts: list[str] = []
        """The user's texts among them, for :meth:`user_said` of values of several words."""
        self._user_ids: set[str] = set()
        """The id forms the user's texts state (:func:`~prefixmon.rules.grounding.stated_ids`), for :meth:`user_said`."""
        self._agent_ids: set[str] = set()
        """Id forms the agent wrote before any tool returned them or the user said them (:meth:`agent_wrote`)."""
        self._forms = FormIndex()
        """Normalised forms of what is in the pool and the texts, and the recent numbers."""
        self._informed = informed
        """Where long informed texts are read once for every state that shares it (a monitor's episodes)."""

    @property
    def order_log(self) -> OrderLog | None:
        """What order rules read (:mod:`prefixmon.order`); ``None`` until a tool they name succeeded."""
        return self._order

    def log_order(self, tool: str, args: Mapping[str, Any], logged: tuple[str, ...]) -> None:
        """Note an accepted call of a tool that order rules name."""
        log = self._order
        if log is None:
            log = self._order = OrderLog()
        log.note(tool, args, logged)

    @property
    def objects(self) -> ObservedObjects:
        """What tool results showed of the environment's objects, by kind and id (spec-file rules read it).

        Made when first read: most episodes (tools without a spec file) never read it.
        """
        objects = self._objects
        if objects is None:
            objects = self._objects = ObservedObjects()
        return objects

    @objects.setter
    def objects(self, objects: ObservedObjects) -> None:
        self._objects = objects

    @property
    def exposed(self) -> set[str]:
        """Names of the tools available now (a set of this state's own; change it freely)."""
        exposed = self._exposed
        if exposed is None:
            exposed = self._exposed = set(self._shared_exposed)
        return exposed

    @exposed.setter
    def exposed(self, names: Iterable[str]) -> None:
        self._exposed = set(names)

    def is_exposed(self, name: str) -> bool:
        """Whether the tool ``name`` is available now (without copying a shared exposure)."""
        exposed = self._exposed
        return name in (self._shared_exposed if exposed is None else exposed)

    # -- references -----------------------------------------------------------------------
    def bind(self, kind: str, value: Any, *, tool: str | None = None, depth: int | None = None) -> None:
        """Bind ``value`` as a current reference of ``kind`` (re-binding makes it current again)."""
        key = value if type(value) is str else _key(value)  # (str inline: a frame less per id a result produces)
        if key is None:
            return
        kinds = self._bindings.get(key)
        if kinds is None:
            kinds = self._bindings[key] = {}
            form = id_form(key) if type(key) is str else str(key) if type(key) is int else None
            if form and form != key:  # found in another form too (W1 for #W1, "8600330539" for 8600330539)
                self._id_forms.setdefault(form, key)
        else:
            existing = kinds.get(kind)
            if existing is not None and existing.current:
                return  # still current: it keeps the depth and tool that first produced it
        kinds[kind] = Binding(kind=kind, depth=self.depth if depth is None else depth, tool=tool)

    def invalidate(self, kind: str, value: Any, *, by: str | None = None) -> None:
        """Mark the binding of ``value`` as ``kind`` stale (e.g. the record was deleted), in any of its forms."""
        key = _key(value)
        if key is None:
            return
        for kinds in (self._bindings.get(key), *self._form_kinds(key)):
            binding = kinds.get(kind) if kinds else None
            if binding is not None and binding.current:
                binding.current = False
                binding.stale_depth = self.depth
                binding.stale_by = by

    def binding(self, value: Any, kind: str | None = None) -> Binding | None:
        """The binding of ``value`` (as ``kind``, or as any kind), if one exists.

        ``value`` as it is first; else in its id form (:func:`~prefixmon.rules.grounding.id_form`:
        ``W1`` finds ``#W1``, ``#w1`` finds ``W1``), a current binding before a stale one.
        """
        key = value if type(value) is str else _key(value)
        kinds = self._bindings.get(key) if key is not None else None
        if kinds:
            b = kinds.get(kind) if kind is not None else next(iter(kinds.values()))
            if b is not None:
                return b
        if key is None:
            return None
        found = None
        for kinds in self._form_kinds(key):
            b = (kinds.get(kind) if kind is not None else next(iter(kinds.values()))) if kinds else None
            if b is not None:
                if b.current:
                    return b
                found = found or b
        return found

    def _form_kinds(self, key: Hashable) -> tuple[dict[str, Binding] | None, dict[str, Binding] | None]:
        """The bindings of ``key``'s id form: of the value bound as that form, and of the first bound in another
        form with it (``#W1`` for ``W1``); two dict lookups after O(len(key)) to find the form."""
        if type(key) is str:
            form: Hashable = id_form(key)
        elif type(key) is int:
            form = str(key)
        else:
            return (None, None)
        bindings = self._bindings
        other = self._id_forms.get(form) if type(form) is str else None
        return (
            bindings.get(form) if form != key else None,  # (the value itself is the exact lookup's business)
            bindings.get(other) if other is not None and other != key else None,
        )

    def is_bound(self, kind: str, value: Any) -> bool:
        """Whether ``value`` is a current reference of ``kind``."""
        b = self.binding(value, kind)
        return b is not None and b.current

    @property
    def binding_count(self) -> int:
        """Number of distinct bound values."""
        return len(self._bindings)

    def begin_effects(self) -> None:
        """Effects are about to write (a copy-on-write view makes what they read private)."""

    def end_effects(self) -> None:
        """Effects are done writing."""

    def summary(self, *, limit: int = 20) -> str:
        """A compact, model-readable summary (at most ``limit`` items per part), for a planner's prompt.

        Costs O(limit), whatever the size of the state.
        """
        lines = [f"actions so far: {self.depth}; turn: {self.turn}"]
        if self.exposed:
            names = sorted(self.exposed)
            more = f" and {len(names) - limit} more" if len(names) > limit else ""
            lines.append("available tools: " + ", ".join(names[:limit]) + more)
        facts = self.facts
        if facts:
            shown = [f"{k}={quote(facts[k])}" for k, _ in zip(facts, range(limit), strict=False)]
            more = f" and {len(facts) - len(shown)} more" if len(facts) > len(shown) else ""
            lines.append("facts: " + ", ".join(shown) + more)
        if self._bindings:
            listed = []
            for value, kinds in self._bindings.items():
                for kind, b in kinds.items():
                    listed.append(f"{kind} {quote(value)}" + ("" if b.current else " (no longer valid)"))
                if len(listed) >= limit:
                    break
            more = f" and {len(self._bindings) - limit} more values" if len(self._bindings) > limit else ""
            lines.append("references returned so far: " + ", ".join(listed[:limit]) + more)
        if self._texts:
            lines.append(f"user messages: {len(self._texts)}")
        return "\n".join(lines)

    # -- information pool -----------------------------------------------------------------
    def inform(self, value: Any, *, user: bool = False) -> None:
        """Add information the agent has seen: text (searched by substring) or data (indexed).

        Args:
            user: the user said it (text the user typed also satisfies ``Ref(kind, user=True)``).
        """
        if self.provenance is not None:
            self.provenance.add_told(value, user=user)
        if isinstance(value, str):
            if len(value) <= MAX_TOKENISED_LENGTH:
                folded = fold(value)
                self._add_words(value, folded)
            else:  # its words are found by substring search; its numbers and dates are not
                known = self._informed.get(value) if not user and self._informed is not None and type(value) is str else None
                if known is not None:  # told to every episode: read once for all of them
                    folded = known.folded
                    self._forms.add_known(known)
                else:
                    folded = fold(value)
                    self._forms.add_text(value, folded=folded, words=False)
            self._texts.append(folded)
            if user:
                self._user_texts.append(folded)
                stated = stated_ids(value)
                self._user_ids.update(stated - self._agent_ids if self._agent_ids else stated)
        else:
            self.ingest(value)

    def agent_wrote(self, text: str) -> None:
        """Note the ids the agent's own text states that it was not given: no tool returned them, the
        user did not say them and they are in nothing informed.

        The agent can make an id up (a flight number in a table it wrote, an order number it
        guessed); when the user then repeats it, that is no evidence the id exists, so such ids
        never count as said by the user (:meth:`user_said`). Not information either: what the
        agent wrote is not something it saw. O(len(text)).
        """
        if not isinstance(text, str) or not text or len(self._agent_ids) >= MAX_AGENT_IDS:
            return
        for form in stated_ids(text[:MAX_AGENT_TEXT]):
            if (
                _id_like(form)
                and form not in self._user_ids
                and self.binding(form) is None
                and not self._forms.find_folded(form, self._pool)  # seen in a result or the system prompt
            ):
                self._agent_ids.add(form)

    def agent_made_up(self, value: Any) -> bool:
        """Whether ``value`` (in any id form) is an id the agent wrote first (:meth:`agent_wrote`)."""
        return bool(self._agent_ids) and isinstance(value, str) and id_form(fold(value)) in self._agent_ids

    def ingest(self, result: Any, *, produce: Mapping[str, str] | ProducePlan | None = None, tool: str | None = None) -> None:
        """Index a tool result's leaves into the pool, binding the references ``produce`` says it holds.

        Args:
            result: the result (JSON text is parsed when it looks like an object or array).
            produce: ``{key: kind}`` (see :class:`~prefixmon.rules.spec.Produce` for the forms of
                ``key``: values under a result key, mapping values and keys, the result itself,
                pattern matches), or a tool's :attr:`~prefixmon.rules.spec.ToolSpec.produce_plan`.
            tool: the producing tool, for messages.
        """
        plan = None if not produce else produce if isinstance(produce, ProducePlan) else produce_plan(produce)
        raw = result
        t = type(result)
        if t is int:  # a count or an id: no walk
            if self.provenance is not None and tool is not None:
                self.provenance.add_result(tool, result)
            self._pool_number(result)
            if plan is not None and plan.special:
                self._bind_special(raw, result, plan, tool)
            return
        if isinstance(result, (str, bytes)) and result[:1] in ("{", "[", b"{", b"["):
            try:
                result = from_json(result)  # pydantic's parser: what json.loads gives, about 2x as fast
            except ValueError as e:  # a lone surrogate, deep nesting, or not JSON: json.loads decides
                result = self._parse_refused(result, str(e))
            t = type(result)
        if self.provenance is not None and tool is not None:  # parsed once, here (inform()'s data is add_told's)
            self.provenance.add_result(tool, result)
        if t is str or isinstance(result, str):  # plain text (an MCP server's usual answer): its leaf, no walk
            if result not in self._pool:
                self._pool_text(result)
            if plan is not None:
                if plan.keys:  # the ids a text answer names count as the kinds the tool produces
                    self._bind_named(result, plan.keys, tool)
                if plan.special:
                    self._bind_special(raw, result, plan, tool)
            return
        budget = [MAX_WALK_ITEMS]
        self._walk(result, None, plan.keys if plan is not None else _NO_PRODUCE, tool, 0, budget)
        if budget[0] <= 0:  # the rest of the result was not indexed
            self._pool_lossy = True
        if plan is not None and plan.special:
            self._bind_special(raw, result, plan, tool)

    def _bind_named(self, text: str, keys: Mapping[str, str], tool: str | None) -> None:
        """Bind the id-like words of a text answer (:func:`_id_like`) as each kind ``keys`` produces; O(len(text))."""
        if len(text) > MAX_TOKENISED_LENGTH:
            return
        kinds = dict.fromkeys(keys.values())
        for word in text.split():
            word = word.strip(_STRIP + "*~")
            if _id_like(word):
                for kind in kinds:
                    self.bind(kind, word, tool=tool)

    def _bind_special(self, raw: Any, data: Any, plan: ProducePlan, tool: str | None) -> None:
        """Bind what ``plan`` finds beyond result keys: the result itself, mapping values and keys, pattern matches."""
        if hasattr(data, "model_dump") and not isinstance(data, (Mapping, list, tuple)):
            data = data.model_dump()
        for how, kind in plan.whole:
            if how == ".":
                value = data.strip() if isinstance(data, str) else data
                if value != "":
                    self.bind(kind, value, tool=tool)
            elif isinstance(data, Mapping):
                for v in data.keys() if how == "{}" else data.values():
                    if how == "{}" or not isinstance(v, (list, tuple)):
                        self.bind(kind, v, tool=tool)
                    else:
                        for item in v:
                            self.bind(kind, item, tool=tool)
            elif how == "*" and isinstance(data, (list, tuple)):
                for item in data:
                    self.bind(kind, item, tool=tool)
        if plan.values or plan.mapping_keys:
            self._bind_under(data, dict(plan.values), dict(plan.mapping_keys), tool, 0, [MAX_WALK_ITEMS])
        if plan.patterns:
            text = raw if isinstance(raw, str) else raw.decode("utf-8", "replace") if isinstance(raw, bytes) else None
            if text is None:
                try:
                    text = json.dumps(data, default=str, ensure_ascii=False)
                except (TypeError, ValueError, RecursionError):
                    text = str(data)
            for pattern, kind in plan.patterns:
                for m in pattern.finditer(text):
                    found = m.group(1) if pattern.groups else m.group()
                    if found:
                        self.bind(kind, found, tool=tool)

    def _bind_under(
        self,
        obj: Any,
        values: Mapping[str, str],
        keys: Mapping[str, str],
        tool: str | None,
        level: int,
        budget: list[int],
    ) -> None:
        """Bind the values (``key.*``) and keys (``key{}``) of the mappings found under those keys."""
        if level > MAX_WALK_DEPTH or budget[0] <= 0:
            return
        budget[0] -= 1
        if isinstance(obj, Mapping):
            for k, v in obj.items():
                if isinstance(v, Mapping):
                    if k in values:
                        for item in v.values():
                            self.bind(values[k], item, tool=tool)
                    if k in keys:
                        for item in v:
                            self.bind(keys[k], item, tool=tool)
                if isinstance(v, (Mapping, list, tuple)):
                    self._bind_under(v, values, keys, tool, level + 1, budget)
        elif isinstance(obj, (list, tuple)):
            for v in obj:
                if isinstance(v, (Mapping, list, tuple)):
                    self._bind_under(v, values, keys, tool, level + 1, budget)

    def _parse_refused(self, text: str | bytes, why: str) -> Any:
        """JSON text pydantic's parser refused (``why``) as ``json.loads`` parses it (``text``
        itself when that refuses it too). Values nested deeper than the walk goes may be cut
        off (see :func:`~prefixmon._internal.json_depth.loads_refused`): the pool is then incomplete."""
        try:
            value, cut = loads_refused(text, why, MAX_WALK_DEPTH)
        except ValueError:
            return text
        if cut:
            self._pool_lossy = True
        return value

    def _walk(
        self, obj: Any, key: str | None, produce: Mapping[str, str], tool: str | None, level: int, budget: list[int]
    ) -> None:
        if level > MAX_WALK_DEPTH or budget[0] <= 0:
            if level > MAX_WALK_DEPTH:
                self._pool_lossy = True
            return
        t = type(obj)
        if t is str or t is int or t is float:  # the common leaves first: no ABC or attribute checks
            self._leaf(obj, key, produce, tool, budget)
            return
        items: Iterable[tuple[Any, Any]]
        general = False  # every child through _walk: other Mappings (the reference the inline paths agree with)
        if t is dict:
            items = obj.items()
        elif t is list or t is tuple:
            items = zip(repeat(key), obj)  # a sequence's items are found under its key
        elif isinstance(obj, Mapping):
            items, general = obj.items(), True
        elif isinstance(obj, (list, tuple, set, frozenset)):
            items = zip(repeat(key), obj)
        elif hasattr(obj, "model_dump"):
            self._walk(obj.model_dump(), key, produce, tool, level + 1, budget)
            return
        else:
            self._leaf(obj, key, produce, tool, budget)
            return
        budget[0] -= 1  # containers count too: a result sharing lists (a DAG, a cycle) stays bounded
        if general or level >= MAX_WALK_DEPTH:  # (children past the depth limit mark the pool lossy there)
            for k, v in items:
                if budget[0] <= 0:
                    return
                self._walk(v, k if isinstance(k, str) else None, produce, tool, level + 1, budget)
            return
        pool = self._pool
        forms = self._forms
        numbers = forms.numbers
        left = budget[0]  # the budget as a local in this loop, handed over around a nested walk
        for k, v in items:  # the common children inline, a frame less each
            if left <= 0:
                break
            tv = type(v)
            if tv is str:
                left -= 1
                if v not in pool:
                    if " " in v or "\n" in v or len(v) > MAX_TOKENISED_LENGTH or self._pool_bytes >= MAX_POOL_BYTES:
                        self._pool_text(v)
                    else:  # a new token (an id, a name, a date), pooled as _add_words pools it
                        pool.add(v)
                        self._pool_bytes += len(v) + _ENTRY
                        if not (v.isascii() and v.islower()) or v[:1] in TOKEN_START:  # else it has no forms
                            forms.add_token(v)
                if k in produce and isinstance(k, str):
                    self.bind(produce[k], v, tool=tool)
            elif (tv is int or (tv is float and v - v == 0.0)) and self._pool_bytes < MAX_POOL_BYTES:
                left -= 1  # a finite number, pooled as _pool_number pools it (inline: a frame less each)
                size = len(pool)
                pool.add(v)
                pool.add(str(v))
                self._pool_bytes += (len(pool) - size) * _ENTRY
                numbers.append(v)
                if k in produce and isinstance(k, str):
                    self.bind(produce[k], v, tool=tool)
            elif tv is bool or v is None:  # never pooled, never bound
                left -= 1
            else:
                budget[0] = left
                self._walk(v, k if isinstance(k, str) else None, produce, tool, level + 1, budget)
                left = budget[0]
        budget[0] = left

    def _leaf(self, obj: Any, key: str | None, produce: Mapping[str, str], tool: str | None, budget: list[int]) -> None:
        budget[0] -= 1
        pool = self._pool
        t = type(obj)
        if t is str:  # the common leaf, inlined: the value, and its words when it has several
            if obj not in pool:
                self._pool_text(obj)
        else:
            if t is int:
                k: Hashable | None = obj
            elif t is float:
                k = obj if obj - obj == 0.0 else None  # nan and infinities are not ids
            else:
                k = _key(obj)
            if k is None:
                if obj is not None and t is not bool:  # dates and decimals have forms
                    self._forms.add_object(obj)
                return
            if isinstance(obj, str):  # a str subclass
                if obj not in pool:
                    self._pool_text(obj)
            else:
                self._pool_number(obj)
        if key is not None and key in produce:
            self.bind(produce[key], obj, tool=tool)

    def _pool_number(self, n: Any) -> None:
        """Pool a finite number and its text (within :data:`MAX_POOL_BYTES`); it is a recent number too."""
        pool = self._pool
        if self._pool_bytes < MAX_POOL_BYTES:
            size = len(pool)
            pool.add(n)
            pool.add(str(n))
            self._pool_bytes += (len(pool) - size) * _ENTRY
            self._forms.numbers.append(n)
        elif n not in pool:
            self._pool_lossy = True

    def _pool_text(self, text: str) -> None:
        """Pool a string from a result (its words and forms too), within :data:`MAX_POOL_BYTES`."""
        if len(text) <= MAX_TOKENISED_LENGTH and self._pool_bytes < MAX_POOL_BYTES:
            self._add_words(text)
            return
        if len(text) <= MAX_TOKENISED_LENGTH:
            self._pool_lossy = True  # its words (or all of it) are left out
        if self._pool_bytes < 2 * MAX_POOL_BYTES:
            pool = self._pool
            size = len(pool)
            pool.add(_long(text))
            if len(pool) != size:
                self._pool_bytes += _KEY_COST

    def _add_words(self, text: str, folded: str | None = None) -> None:
        if len(text) > MAX_TOKENISED_LENGTH:
            return
        pool = self._pool
        size = len(pool)
        pool.add(text)
        if " " in text or "\n" in text:
            for word in text.split():
                pool.add(word)
                stripped = word.strip(_STRIP)
                if stripped:
                    pool.add(stripped)
            self._forms.add_text(text, folded=folded)
        elif not (text.isascii() and text.islower()) or text[:1] in TOKEN_START:  # else it has no forms
            self._forms.add_token(text)
        added = len(pool) - size
        if added:  # the words' characters are at most the text's
            self._pool_bytes += (2 * len(text) if added > 1 else len(text)) + added * _ENTRY

    def seen(self, value: Any, match: GroundingMatch = "exact") -> bool:
        """Whether ``value`` appeared in a user message or an earlier tool result.

        Args:
            value: the value to look up.
            match: ``"exact"``: as it is (an equal value or word, or, for text and numbers, a
                substring of informed text, ignoring case and runs of whitespace); ``"normalized"`` (and
                ``"derived"``, whose derivations :meth:`derivation` finds): also in any form
                :mod:`prefixmon.rules.grounding` normalises (``#W123`` for ``W123``, ``May 1st, 2024``
                for ``2024-05-01``, ``$1,234.50`` for ``1234.5``). Each form is one set lookup;
                only the substring search reads the informed text.
        """
        key = _key(value)
        if key is None:
            return match != "exact" and self._forms.find(value, self._pool)  # dates, decimals
        if isinstance(value, str) and len(value) > MAX_TOKENISED_LENGTH:
            key = _long(value)
        if key in self._pool:
            return True
        if self._pool_bytes >= MAX_POOL_BYTES and isinstance(value, str) and _long(value) in self._pool:
            return True  # pooled as a key once the pool was full
        if isinstance(value, str):
            needle = fold(value)  # the substring search ignores case and runs of whitespace
            if match != "exact" and len(value) <= MAX_TOKENISED_LENGTH and self._forms.find_folded(needle, self._pool):
                return True
            return bool(needle) and any(needle in text for text in self._texts)
        if match != "exact" and self._forms.find(value, self._pool):
            return True
        if type(value) is int:  # its only text form
            form = str(value)
            return form in self._pool or any(form in t for t in self._texts)
        if isinstance(value, float) and value.is_integer() and int(value) in self._pool:
            return True
        text_forms = {str(value)}
        if isinstance(value, float) and value.is_integer():
            text_forms.add(str(int(value)))
        return any(form in self._pool or any(form in t for t in self._texts) for form in text_forms)

    def derivation(self, value: Any) -> str | None:
        """How ``value`` is computed from two numbers seen recently (``"150 = 3 * 50"``), or ``None``.

        Sums, differences, products and quotients of two of the
        :data:`~prefixmon.rules.grounding.MAX_RECENT_NUMBERS` distinct numbers seen most recently;
        O(that many) set lookups. See :func:`prefixmon.rules.grounding.derivation`.
        """
        return self._forms.derive(value)

    @property
    def pool_complete(self) -> bool:
        """Whether the information pool kept everything it was given (see :data:`MAX_POOL_BYTES`;
        results longer than :data:`MAX_WALK_ITEMS` nodes or deeper than :data:`MAX_WALK_DEPTH`
        are indexed only that far).

        When it is not, a value it does not find may still have been seen, so the information
        check does not fail it.
        """
        return not self._pool_lossy

    def user_said(self, value: Any) -> bool:
        """Whether ``value`` appears in the user's messages (text given with ``inform(..., user=True)``).

        A value of one word is looked up by its id form (:func:`~prefixmon.rules.grounding.id_form`:
        case, a leading ``#``, surrounding punctuation and markdown, Unicode dashes), and an id of
        one or two letters before five digits or more also by its number (the user says "order
        9502127" of ``#W9502127``): set lookups, O(len(value)), whatever was said. A value of
        several words is searched in the user's texts (casefolded, runs of whitespace as one space).
        """
        if value is None or isinstance(value, bool):
            return False
        text = value if type(value) is str else str(value)
        needle = fold(text)
        if not needle:
            return False
        if " " not in needle:
            form = id_form(needle)
            if form in self._user_ids:
                return True
            number = _number_part(form)
            return number is not None and number in self._user_ids
        return any(needle in t for t in self._user_texts)
