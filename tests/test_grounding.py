"""Grounding the way people write: normalised forms, derived values, per-argument matching.

Every check runs through a real monitor: user messages with ``episode.user``, tool results
through real tool calls (so they reach the pool the way a run does), then ``episode.check``
or ``episode.call`` on a tool whose argument is grounded.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator, Sequence
from decimal import Decimal
from typing import Annotated, Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from prefixmon import (
    Cause,
    Decision,
    Episode,
    Grounded,
    Monitor,
    Observer,
    Policy,
    SpecError,
    ToolBlocked,
    Toolset,
    ToolSpec,
    TrackedState,
    Verdict,
    verify_plan,
)
from prefixmon.rules.grounding import (
    MAX_RECENT_NUMBERS,
    FormIndex,
    InformedTexts,
    derivation,
    fold,
    parse_date,
    parse_number,
    value_forms,
)

PROPERTY = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def build_tools(match: str = "normalized", results: Sequence[Any] = ()) -> Toolset:
    """``read(i)`` returns ``results[i]``; ``use(v)`` has a grounded ``v`` matched as ``match``."""
    tools = Toolset()

    @tools.tool
    def read(i: int) -> Any:
        """Return one of the prepared results."""
        return results[i]

    tools.add_schema("use", {"type": "object", "properties": {"v": {}}}, grounded={"v": match}, func=lambda v: "ok")
    return tools


async def judge(
    value: Any, *, user: Sequence[str] = (), results: Sequence[Any] = (), informed: Sequence[str] = (), match: str = "normalized"
) -> Verdict:
    """The verdict on ``use(v=value)`` after the user said ``user`` and tools returned ``results``."""
    monitor = Monitor(build_tools(match, results), policy="observe")
    async with monitor.episode(task_id="grounding") as ep:
        for text in informed:
            ep.inform(text)
        for text in user:
            ep.user(text)
        for i in range(len(results)):
            await ep.call("read", {"i": i})
        return ep.check("use", {"v": value})


async def passes(value: Any, **seen: Any) -> bool:
    verdict = await judge(value, **seen)
    assert verdict.executable or verdict.cause is Cause.INFORMATION
    return verdict.executable


class TestParsers:
    """The normalisers on their own."""

    @pytest.mark.parametrize(
        ("text", "number"),
        [
            ("$1,234.50", 1234.5),
            ("1234.50", 1234.5),
            ("1,234", 1234),
            ("150.00", 150),
            ("-$5", -5),
            ("$ 20", 20),
            ("€7.5", 7.5),
            ("0.25", 0.25),
            ("12345678901234567890", 12345678901234567890),
        ],
    )
    def test_numbers(self, text: str, number: float) -> None:
        """Thousands separators, a currency symbol and trailing zeros are how a number is written, not what it is."""
        parsed = parse_number(text)
        assert parsed == number and type(parsed) is type(number)

    @pytest.mark.parametrize(
        "text", ["02139", "007", "1,2345", "12,34", "1.2.3", "$5$", "+-5", "five", "1e5", "0.1234567890123456"]
    )
    def test_not_numbers(self, text: str) -> None:
        """Leading zeros (zip codes, ids), odd groupings and over-precise decimals are not read as numbers."""
        assert parse_number(text) is None

    @pytest.mark.parametrize(
        "text", ["May 1st, 2024", "may 1 2024", "1 May 2024", "1st of May, 2024", "May. 1, 2024", "2024-05-01", "2024/5/1"]
    )
    def test_dates(self, text: str) -> None:
        """Written-out, ISO and year-first dates read as the ISO date."""
        assert parse_date(text)[0] == "2024-05-01"

    def test_numeric_dates_only_when_unambiguous(self) -> None:
        """05/13/2024 and 13.05.2024 are one day; 05/01/2024 could be two, so it is read as neither."""
        assert parse_date("05/13/2024")[0] == "2024-05-13"
        assert parse_date("13.05.2024")[0] == "2024-05-13"
        assert parse_date("05/05/2024")[0] == "2024-05-05"
        assert parse_date("05/01/2024") == ()
        assert parse_date("05/01/24") == ()

    def test_impossible_dates_have_no_form(self) -> None:
        """February 30 is not a day."""
        assert parse_date("February 30, 2024") == ()
        assert parse_date("2024-02-30") == ()
        assert parse_date("February 29, 2024")[0] == "2024-02-29"

    def test_date_times(self) -> None:
        """Offsets are compared in UTC; a midnight date-time also matches its date."""
        assert parse_date("2024-05-01T10:00:00+02:00") == ("2024-05-01T08:00:00Z",)
        assert parse_date("2024-05-01 08:00Z") == ("2024-05-01T08:00:00Z",)
        assert parse_date("2024-05-01T00:00:00")[:2] == ("2024-05-01T00:00:00", "2024-05-01")

    def test_fold(self) -> None:
        """Case and runs of whitespace."""
        assert fold("  Blue \n\t MUG ") == "blue mug"

    def test_value_forms(self) -> None:
        """A looked-up id drops its '#'; a number its decoration; nothing has forms it does not write."""
        assert "w123" in value_forms("#W123")
        assert 1234.5 in value_forms("$1,234.50")
        assert value_forms(True) == () and value_forms(None) == () and value_forms([1]) == ()


class TestDates:
    """A date the user wrote out is the ISO date the agent sends, and back."""

    @pytest.mark.parametrize(
        "said",
        [
            "I want to fly on May 1st, 2024.",
            "Departure: 1 May 2024",
            "on the 1st of May, 2024 please",
            "Wed, May 1 2024",
            "leaving 2024/05/01",
        ],
    )
    async def test_written_dates_ground_iso(self, said: str) -> None:
        """The ISO date passes after the user wrote it out; the next day does not."""
        assert await passes("2024-05-01", user=[said])
        assert not await passes("2024-05-02", user=[said])

    async def test_iso_in_a_result_grounds_a_written_date(self) -> None:
        """A date a tool returned in ISO form grounds the date written out."""
        results = [{"flight": "HAT039", "date": "2024-05-15"}]
        assert await passes("May 15, 2024", results=results)
        assert await passes("15 May 2024", results=results)
        assert not await passes("May 16, 2024", results=results)

    async def test_ambiguous_numeric_dates_ground_neither_reading(self) -> None:
        """05/01/2024 is May 1 in the US and 5 January elsewhere: neither ISO date passes."""
        assert not await passes("2024-05-01", results=[{"when": "05/01/2024"}])
        assert not await passes("2024-01-05", results=[{"when": "05/01/2024"}])
        assert await passes("2024-05-13", results=[{"when": "05/13/2024"}])

    async def test_a_date_without_a_year(self) -> None:
        """'May 24' grounds May 24 of any year (the year is context); a full date grounds only its year."""
        assert await passes("2024-05-24", user=["book it for May 24"])
        assert not await passes("2024-05-25", user=["book it for May 24"])
        assert not await passes("2023-05-24", user=["book it for May 24, 2024"])
        assert await passes("May 24", user=["book it for May 24, 2024"])

    async def test_date_times(self) -> None:
        """A date-time is the same instant in any offset, and makes its date seen."""
        results = [{"created_at": "2024-05-01T10:00:00+02:00"}]
        assert await passes("2024-05-01T08:00:00Z", results=results)
        assert await passes("2024-05-01", results=results)
        assert not await passes("2024-05-01T10:00:00Z", results=results)
        assert await passes("2024-05-01T00:00:00", user=["on May 1st, 2024"])
        assert not await passes("2024-05-01T09:30:00", user=["on May 1st, 2024"])

    async def test_date_objects(self) -> None:
        """A tool returning ``date`` objects, and an argument validated into one, match their ISO forms."""
        assert await passes("2024-05-01", results=[{"day": dt.date(2024, 5, 1)}])
        assert await passes("May 1, 2024", results=[[dt.datetime(2024, 5, 1, 9, 0)]])
        tools = Toolset()

        @tools.tool
        def book(day: Annotated[dt.date, Grounded()]) -> str:
            return "booked"

        async with Monitor(tools).episode(task_id="d") as ep:
            ep.user("I want to go on May 1st, 2024")
            assert ep.check("book", {"day": "2024-05-01"}).executable
            assert ep.check("book", {"day": "2024-05-02"}).cause is Cause.INFORMATION


class TestIds:
    """Decorated and case-changed ids."""

    async def test_hash_and_case(self) -> None:
        """'#W123' typed by the user grounds 'W123' and 'w123'; 'W124' stays ungrounded."""
        for value in ("W123", "w123", "#W123", "#w123"):
            assert await passes(value, results=[{"order_id": "#W123"}])
        assert not await passes("W124", results=[{"order_id": "#W123"}])

    async def test_agent_adds_the_hash(self) -> None:
        """An id returned without '#' grounds the agent's '#W123'."""
        assert await passes("#W123", results=[{"order_id": "W123"}])
        assert await passes("#w123", results=[{"order_id": "w123"}])

    async def test_case_insensitive_ids(self) -> None:
        """A reservation id returned in capitals grounds its lower-case spelling."""
        assert await passes("gxwcpn", results=[{"reservation_id": "GXWCPN"}])
        assert not await passes("gxwcpm", results=[{"reservation_id": "GXWCPN"}])

    async def test_ids_in_text(self) -> None:
        """An id inside a sentence of a result, with punctuation around it."""
        assert await passes("W2378156", results=["Your order #W2378156. was shipped"])


class TestNumbers:
    """Currency amounts and thousands separators."""

    @pytest.mark.parametrize("value", [1234.5, "1234.5", "1234.50", "$1,234.50", "1,234.5"])
    async def test_currency_said_by_the_user(self, value: Any) -> None:
        """'$1,234.50' in the user's message grounds every spelling of 1234.5."""
        assert await passes(value, user=["please refund $1,234.50 to my card"])

    async def test_a_result_number_grounds_its_written_forms(self) -> None:
        """A price returned as a number grounds the same amount written as money."""
        assert await passes("$1,234.50", results=[{"price": 1234.5}])
        assert await passes("1,234", results=[{"count": 1234}])
        assert await passes(1234, results=[{"count": "1,234"}])
        assert await passes(150.0, results=[{"amount": "$150.00"}])

    async def test_other_amounts_stay_ungrounded(self) -> None:
        """A different amount, or a leading-zero number, is not the seen one."""
        assert not await passes(1234.51, user=["please refund $1,234.50"])
        assert not await passes("12345", user=["please refund $1,234.50"])
        assert not await passes(2139, results=[{"zip": "02139"}])


class TestText:
    """Case and whitespace in free text."""

    async def test_case_and_whitespace_in_a_result(self) -> None:
        """'Blue  Mug' returned by a tool grounds 'blue mug' and 'BLUE MUG'."""
        for value in ("blue mug", "BLUE MUG", " Blue Mug "):
            assert await passes(value, results=[{"name": "Blue  Mug"}])
        assert not await passes("blue mugs", results=[{"name": "Blue  Mug"}])

    async def test_whitespace_inside_user_text(self) -> None:
        """A phrase of the user's message split over a line break is still found by the substring search."""
        assert await passes("New York", user=["I live in new\nyork, near the park"])
        assert not await passes("New Jersey", user=["I live in new\nyork, near the park"])

    async def test_exact_matching_keeps_todays_rules(self) -> None:
        """match='exact': only the value as it is (and the case-insensitive substring of informed text)."""
        assert not await passes("blue mug", results=[{"name": "Blue  Mug"}], match="exact")
        assert not await passes("W123", results=[{"order_id": "#W123"}], match="exact")
        assert not await passes("2024-05-01", user=["on May 1st, 2024"], match="exact")
        assert await passes("Blue  Mug", results=[{"name": "Blue  Mug"}], match="exact")
        assert await passes("W123", user=["it is order #W123"], match="exact")  # substring of the user's text

    @pytest.mark.parametrize("match", ["exact", "normalized", "derived"])
    async def test_blank_text_needs_no_grounding(self, match: str) -> None:
        """An empty or blank string states nothing (τ-bench's blank ``address2``): nothing to ground, never a failure."""
        for value in ("", "   ", "\n\t"):
            assert (await judge(value, user=["ship it to 12 Main St"], match=match)).executable
        assert not (await judge("Apt 4", user=["ship it to 12 Main St"], match=match)).executable


class TestDerived:
    """Values computed from two numbers seen earlier."""

    async def test_observers_see_the_derivation(self) -> None:
        """The verdict an observer gets says how a value was derived, as the episode's own verdict does."""
        seen: list[Verdict] = []

        class Watch(Observer):
            def call_checked(self, episode: Episode, verdict: Verdict, decision: Decision, token: Any) -> None:
                seen.append(verdict)

        results = [{"balance": 100}, {"price": 35}]
        monitor = Monitor(build_tools("derived", results), policy="observe", observers=[Watch()])
        async with monitor.episode(task_id="grounding") as ep:
            for i in range(len(results)):
                await ep.call("read", {"i": i})
            expected = ep.check("use", {"v": 65})
            await ep.call("use", {"v": 65})
        assert expected.derived == ("v: 65 = 100 - 35",)
        assert seen[-1].derived == expected.derived and seen[-1].args == {"v": 65}

    async def test_sum(self) -> None:
        """A refund of two item prices."""
        v = await judge(80.49, results=[{"items": [{"price": 30.25}, {"price": 50.24}]}], match="derived")
        assert v.executable and v.derived == ("v: 80.49 = 50.24 + 30.25",)

    async def test_difference(self) -> None:
        """The balance left after a payment."""
        v = await judge(65, results=[{"balance": 100}, {"price": 35}], match="derived")
        assert v.executable and v.derived == ("v: 65 = 100 - 35",)

    async def test_product(self) -> None:
        """Compensation per passenger times the passengers: 150 = 3 * 50."""
        v = await judge(
            150, user=["there were 3 of us on the delayed flight"], informed=["we pay $50 per passenger"], match="derived"
        )
        assert v.executable and v.derived == ("v: 150 = 3 * 50",)

    async def test_quotient(self) -> None:
        """A total split evenly."""
        v = await judge("$30", results=[{"total": 90}, {"people": 3}], match="derived")
        assert v.executable and v.derived == ("v: 30 = 90 / 3",)

    async def test_rounding(self) -> None:
        """Sums of decimals compare as money does, not as floats do (0.1 + 0.2 is 0.3)."""
        v = await judge(0.3, results=[{"a": 0.1, "b": 0.2}], match="derived")
        assert v.executable and v.derived

    async def test_only_when_asked(self) -> None:
        """Under the default matching a computed amount is still ungrounded, and says why."""
        v = await judge(65, results=[{"balance": 100}, {"price": 35}])
        assert v.cause is Cause.INFORMATION and v.derived == ()
        v = await judge(66, results=[{"balance": 100}, {"price": 35}], match="derived")
        assert v.cause is Cause.INFORMATION and "nor computed from two numbers seen recently" in v.reason

    async def test_a_seen_value_is_not_derived(self) -> None:
        """A value seen as is passes without a derivation."""
        v = await judge(100, results=[{"balance": 100}, {"price": 35}], match="derived")
        assert v.executable and v.derived == ()

    async def test_text_is_not_derived(self) -> None:
        """Only numbers are derived."""
        v = await judge("hello", results=[{"a": 1, "b": 2}], match="derived")
        assert v.cause is Cause.INFORMATION

    async def test_the_bound(self) -> None:
        """Operands pushed out by MAX_RECENT_NUMBERS newer numbers no longer derive anything."""
        filler = [{"n": [1_000_000 + 7 * i for i in range(MAX_RECENT_NUMBERS)]}]
        early = [{"balance": 100}, {"price": 35}]
        assert (await judge(65, results=early, match="derived")).executable
        assert (await judge(65, results=[{"balance": 100}, *filler, {"price": 35}], match="derived")).cause is Cause.INFORMATION
        assert (await judge(65, results=[*early, *filler], match="derived")).cause is Cause.INFORMATION

    def test_recent_numbers(self) -> None:
        """A bounded window: the oldest number leaves first, and with it what it derived."""
        index = FormIndex(recent=3)
        for x in (100, 35, 7, 8):
            index.add_number(x)
        assert list(index.numbers) == [35, 7, 8]
        assert index.derive(43) == "43 = 8 + 35" and index.derive(65) is None

    def test_derivation_reads_each_number_once(self) -> None:
        """The search is O(n): every recent number is read once (then at most four set lookups each)."""
        reads = 0

        def numbers() -> Iterator[int]:
            nonlocal reads
            for i in range(100):
                reads += 1
                yield 10_000 + 13 * i

        assert derivation(7, numbers()) is None
        assert reads == 100

    def test_identities_and_tiny_quotients(self) -> None:
        """v = v + 0 or v * 1 is not a derivation, nor is a factor that rounds to 0; ids take no part."""
        assert derivation(5, [0, 1, 10**12]) is None
        assert derivation(True, [1, 1]) is None
        assert derivation(10**16, [10**16 - 1, 1, 2]) is None
        assert derivation(4, [2]) == "4 = 2 * 2"
        assert derivation("$7.50", [2.5, 3]) == "7.5 = 2.5 * 3"

    async def test_under_block_an_underivable_value_is_refused(self) -> None:
        """The derived check still refuses what no pair gives (information blocks when the policy says so)."""
        monitor = Monitor(
            build_tools("derived", [{"balance": 100}]), policy=Policy(default="block", causes={"information": "block"})
        )
        async with monitor.episode(task_id="b") as ep:
            await ep.call("read", {"i": 0})
            assert await ep.call("use", {"v": 200}) == "ok"  # 100 + 100
            with pytest.raises(ToolBlocked) as blocked:
                await ep.call("use", {"v": 201})
        assert blocked.value.verdict.cause is Cause.INFORMATION


class TestConfiguration:
    """Per-argument options."""

    def test_annotated_and_mapping_options(self) -> None:
        """Grounded(match=...) in a signature and {name: match} in tool()/add_schema() give each argument its rule."""
        tools = Toolset()

        @tools.tool(grounded={"note": "exact"})
        def pay(amount: Annotated[float, Grounded("derived")], to: Annotated[str, Grounded()], note: str = "") -> str:
            return "paid"

        assert tools["pay"].grounded == ("amount", "to", "note")
        assert tools["pay"].grounded_match == (("amount", "derived"), ("to", "normalized"), ("note", "exact"))
        spec = tools.add_schema("wire", None, grounded={"items[].price": Grounded(match="derived"), "iban": "exact"})
        assert spec.grounded_match == (("items[].price", "derived"), ("iban", "exact"))
        assert tools.add_schema("plain", None, grounded=["a", "b"]).grounded_match == (("a", "normalized"), ("b", "normalized"))

    def test_bad_options(self) -> None:
        """Unknown matching modes and option types are errors that name the tool and argument."""
        with pytest.raises(SpecError, match="match must be one of 'exact', 'normalized', 'derived'"):
            Grounded("fuzzy")  # type: ignore[arg-type]
        tools = Toolset()
        with pytest.raises(SpecError, match=r"tool 'x': grounded\['amount'\]: .*'fuzzy'"):
            tools.add_schema("x", None, grounded={"amount": "fuzzy"})
        with pytest.raises(SpecError, match=r"grounded\['amount'\] must be a Grounded or one of"):
            tools.add_schema("x", None, grounded={"amount": 5})
        with pytest.raises(SpecError, match="grounded argument names must be strings"):
            tools.add_schema("x", None, grounded=[5])  # type: ignore[list-item]
        with pytest.raises(SpecError, match="not grounded: y"):
            ToolSpec(name="t", parameters={}, validate=lambda a: dict(a), grounded=("x",), grounding={"y": Grounded()})

    def test_from_openai_rules(self) -> None:
        """OpenAI-style tool lists take the same option through rules=."""
        tools = Toolset.from_openai(
            [{"type": "function", "function": {"name": "refund", "parameters": {"type": "object", "properties": {}}}}],
            rules={"refund": {"grounded": {"amount": "derived"}}},
        )
        assert tools["refund"].grounded_match == (("amount", "derived"),)

    async def test_plan_verification_uses_the_same_matching(self) -> None:
        """verify_plan judges a normalised or derived value like the runtime does."""
        monitor = Monitor(build_tools("derived", [{"balance": 100}, {"price": 35}]))
        async with monitor.episode(task_id="p") as ep:
            ep.user("my order is #W123")
            await ep.call("read", {"i": 0})
            await ep.call("read", {"i": 1})
            plan = [
                {"tool": "use", "args": {"v": 65}},
                {"tool": "use", "args": {"v": "W123"}},
                {"tool": "use", "args": {"v": 66}},
            ]
            verdict = verify_plan(monitor.toolset, plan, state=ep.state)
        statuses = [s.verdict.executable for s in verdict.steps]
        assert statuses == [True, True, False]
        assert verdict.steps[0].verdict.derived == ("v: 65 = 100 - 35",)


class TestTrackedState:
    """The pool's lookups, directly."""

    def test_seen_defaults_to_exact(self) -> None:
        """TrackedState.seen(value) keeps its meaning; normalised matching is asked for."""
        state = TrackedState()
        state.ingest({"order_id": "#W123"})
        assert not state.seen("W123")
        assert state.seen("W123", "normalized")

    def test_long_texts_give_numbers_and_dates(self) -> None:
        """A policy document over the tokenised length still gives its amounts and dates."""
        state = TrackedState()
        state.inform("x " * 2_000 + "Compensation is $1,250.00, paid by June 3rd, 2024.")
        assert state.seen(1250, "normalized") and state.seen("2024-06-03", "normalized")
        assert not state.seen(1250)

    def test_long_result_strings_are_not_tokenised(self) -> None:
        """Result strings over 2,000 characters stay a hash: nothing inside them is seen (as before)."""
        state = TrackedState()
        state.ingest({"doc": "y " * 1_500 + "#W999"})
        assert not state.seen("W999", "normalized")

    def test_a_monitors_episodes_read_a_long_text_once(self) -> None:
        """Every episode of a monitor is told the same policy: once it was told twice, its forms are found once and shared."""
        policy = "x " * 2_000 + "Compensation is $1,250.00, paid by June 3rd, 2024."
        monitor = Monitor(Toolset())
        first, second, third = (monitor.open_episode() for _ in range(3))
        texts = monitor.informed_texts
        assert texts is not None
        first.inform(policy)
        assert len(texts) == 0  # told once: only its hash is kept
        second.inform(" ".join(policy.split(" ")))  # an equal text, another object
        first.user("z " * 1_500 + "my card ends 4242")  # what a user says is not kept beyond its episode
        first.user("z " * 1_500 + "my card ends 4242")
        second.inform("w " * 1_500 + "a long tool reply")  # told once: not kept
        known = texts.get(policy)
        assert len(texts) == 1 and texts.get(policy) is known
        third.inform(policy)
        for ep in (first, second, third):
            assert ep.state.seen(1250, "normalized") and ep.state.seen("2024-06-03", "normalized")
            assert ep.state.seen("paid by june")

    def test_informed_texts_keep_at_most_their_bound(self) -> None:
        """Texts told twice are kept, oldest dropped past ``max_chars`` (text and folded copy); one over a quarter never."""
        texts = InformedTexts(max_chars=40_000)
        for i in range(10):
            for _ in range(2):
                texts.get(f"{i} " + "y " * 1_200)
        assert len(texts) == 8 and texts._chars <= 40_000
        assert set(texts._entries) == {f"{i} " + "y " * 1_200 for i in range(2, 10)}
        for _ in range(2):
            texts.get("z " * 5_100)
        assert len(texts) == 8 and "z " * 5_100 not in texts._entries
        assert texts._chars == sum(len(t) + len(k.folded) for t, k in texts._entries.items())

    @settings(PROPERTY, max_examples=80)
    @given(
        told=st.lists(
            st.tuples(
                st.lists(
                    st.sampled_from(
                        [
                            "#W123",
                            "$1,234.50",
                            "May 1st, 2024",
                            "2024-05-01T10:00+02:00",
                            "007",
                            "12",
                            "3.5",
                            "Blue  Mug",
                            "ÄÖ ß",
                            "\t-",
                        ]
                    ),
                    min_size=1,
                    max_size=12,
                ),
                st.integers(1, 150),
                st.booleans(),
            ),
            max_size=6,
        ),
        repeat=st.integers(0, 3),
        max_chars=st.sampled_from([2**22, 12_000]),
    )
    def test_shared_forms_index_what_reading_the_text_does(
        self, told: list[tuple[list[str], int, bool]], repeat: int, max_chars: int
    ) -> None:
        """States sharing InformedTexts end up as a state reading every text itself does, texts told again included."""
        shared = InformedTexts(max_chars=max_chars)
        texts = [(" ".join(words) + " ") * times for words, times, _ in told]
        order = [(t, user) for t, (_, _, user) in zip(texts, told, strict=True)]
        order += order[: repeat * 2]
        for _ in range(2):
            alone, sharing = TrackedState(), TrackedState(informed=shared)
            for text, user in order:
                alone.inform(text, user=user)
                sharing.inform(text, user=user)
                alone.ingest({"n": len(text)})
                sharing.ingest({"n": len(text)})
            seen = [(s._pool, s._forms.forms, list(s._forms.numbers), s._texts, s._user_texts) for s in (alone, sharing)]
            assert seen[0] == seen[1]

    def test_decimals(self) -> None:
        """Decimal results (pydantic models dumped in Python mode) have number forms."""
        state = TrackedState()
        state.ingest([{"price": Decimal("19.990")}])
        assert state.seen(19.99, "normalized") and state.seen("$19.99", "normalized")


# -- properties: normalisation never grounds a value no form of which was seen ------------------
MONTHS = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
]


def _ordinal(d: int) -> str:
    return f"{d}{'th' if 11 <= d % 100 <= 13 else {1: 'st', 2: 'nd', 3: 'rd'}.get(d % 10, 'th')}"


def render_date(day: dt.date, style: int) -> str:
    """One of the ways people write a date (numeric ones only when they are unambiguous)."""
    m, d, y = day.month, day.day, day.year
    month = MONTHS[m - 1]
    styles = [
        day.isoformat(),
        f"{month} {_ordinal(d)}, {y}",
        f"{d} {month} {y}",
        f"{_ordinal(d)} of {month[:3]}, {y}",
        f"{month[:3]}. {d} {y}",
        f"{y}/{m}/{d}",
        f"{m:02d}/{d:02d}/{y}" if d > 12 else day.isoformat(),
        f"{d:02d}.{m:02d}.{y}" if d > 12 else f"{month} {d}, {y}",
    ]
    return styles[style % len(styles)]


dates = st.dates(min_value=dt.date(1990, 1, 1), max_value=dt.date(2030, 12, 31))


class TestProperties:
    """Forms are readings of what was written: a value passes exactly when a form of it was seen."""

    @PROPERTY
    @given(seen=st.lists(st.tuples(dates, st.integers(0, 7)), min_size=1, max_size=4), data=st.data(), style=st.integers(0, 7))
    def test_dates(self, seen: list[tuple[dt.date, int]], data: st.DataObject, style: int) -> None:
        """A date passes iff that day was written, in any of the forms, in a tool's text."""
        value = data.draw(dates | st.sampled_from([day for day, _ in seen]))
        state = TrackedState()
        for day, s in seen:
            state.ingest({"note": f"You travel on {render_date(day, s)} if possible"})
        days = {day for day, _ in seen}
        assert state.seen(render_date(value, style), "normalized") == (value in days)

    @PROPERTY
    @given(seen=st.lists(st.tuples(dates, st.integers(0, 7)), min_size=1, max_size=4), data=st.data(), style=st.integers(0, 7))
    def test_dates_in_user_text(self, seen: list[tuple[dt.date, int]], data: st.DataObject, style: int) -> None:
        """In the user's text too, but for today's substring rule (``1 May`` is inside ``11 May``), which exact shares."""
        value = data.draw(dates | st.sampled_from([day for day, _ in seen]))
        state = TrackedState()
        for day, s in seen:
            state.inform(f"I travel on {render_date(day, s)} if possible", user=True)
        written = render_date(value, style)
        normalized = state.seen(written, "normalized")
        if value in {day for day, _ in seen}:
            assert normalized
        else:
            assert not normalized or state.seen(written)

    @PROPERTY
    @given(seen=st.lists(st.tuples(dates, st.sampled_from(["/", "-", "."])), min_size=1, max_size=4), data=st.data())
    def test_ambiguous_numeric_dates(self, seen: list[tuple[dt.date, str]], data: st.DataObject) -> None:
        """Numeric dates whose day and month could swap ground no day at all (nor the swapped day)."""
        swapped = [dt.date(d.year, d.day, d.month) for d, _ in seen if d.day <= 12]
        value = data.draw(dates | st.sampled_from([day for day, _ in seen] + swapped))
        state = TrackedState()
        written = {day for day, _ in seen if day.day > 12 or day.day == day.month}
        for day, sep in seen:
            state.ingest({"when": f"{day.month:02d}{sep}{day.day:02d}{sep}{day.year}"})
        assert state.seen(value.isoformat(), "normalized") == (value in written)

    amounts = st.decimals(min_value=0, max_value=10**7, places=2, allow_nan=False, allow_infinity=False)

    @staticmethod
    def render_amount(x: Decimal, style: int) -> Any:
        styles: list[Any] = [
            f"{x:.2f}",
            f"${x:,.2f}",
            f"{x:,.2f}",
            float(x),
            str(int(x)) if x == x.to_integral() else f"{x:.2f}",
            int(x) if x == x.to_integral() else float(x),
            f"€{float(x)!r}",
        ]
        return styles[style % len(styles)]

    @PROPERTY
    @given(seen=st.lists(st.tuples(amounts, st.integers(0, 6)), min_size=1, max_size=5), data=st.data(), style=st.integers(0, 6))
    def test_amounts(self, seen: list[tuple[Decimal, int]], data: st.DataObject, style: int) -> None:
        """An amount passes iff a tool returned the same amount, however either was written."""
        value = data.draw(self.amounts | st.sampled_from([x for x, _ in seen]))
        state = TrackedState()
        state.ingest({"prices": [self.render_amount(x, s) for x, s in seen]})
        assert state.seen(self.render_amount(value, style), "normalized") == (value in {x for x, _ in seen})

    cores = st.text(alphabet="abcdefghkmnpqrstuvwxyz0123456789", min_size=1, max_size=8)

    @staticmethod
    def decorate(core: str, style: int) -> str:
        return [core, core.upper(), f"#{core}", f"#{core.upper()}", core.capitalize()][style % 5]

    @PROPERTY
    @given(seen=st.lists(st.tuples(cores, st.integers(0, 4)), min_size=1, max_size=5), data=st.data(), style=st.integers(0, 4))
    def test_ids(self, seen: list[tuple[str, int]], data: st.DataObject, style: int) -> None:
        """An id passes iff a tool returned it, with or without '#', in any case."""
        value = data.draw(self.cores | st.sampled_from([core for core, _ in seen]))
        state = TrackedState()
        state.ingest([{"id": self.decorate(core, s)} for core, s in seen])
        assert state.seen(self.decorate(value, style), "normalized") == (value in {core for core, _ in seen})

    @PROPERTY
    @given(seen=st.lists(st.text(max_size=30), max_size=5), value=st.text(max_size=12) | st.integers() | st.floats())
    def test_normalized_never_refuses_what_exact_accepts(self, seen: list[str], value: Any) -> None:
        """Normalised matching only adds: whatever passes exactly still passes (no new refusals)."""
        state = TrackedState()
        for i, text in enumerate(seen):
            if i % 2:
                state.inform(text, user=True)
            else:
                state.ingest({"text": text})
        if state.seen(value):
            assert state.seen(value, "normalized")
