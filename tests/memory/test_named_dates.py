"""Dates a query names: the periods read from its text, and a fused search on every store
preferring the memories said in them."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentkeep.memory import MemoryRecord, MemoryScope
from agentkeep.memory._dates import DATE_SLACK, named_periods
from agentkeep.memory._lexical import DATE_BOOST, blended, said_in
from agentkeep.memory.base import from_micros
from tests.memory.test_scope_summary import opened

ANA = MemoryScope("ana", tenant_id="t")


def _days(text: str, today: date | None = None) -> list[tuple[date, date]]:
    """The periods of ``text`` as their first and last day, slack included."""
    return [
        (from_micros(start).date(), (from_micros(end) - timedelta(microseconds=1)).date())
        for start, end in named_periods(text, today=today)
    ]


def _around(first: date, last: date) -> tuple[date, date]:
    return first - DATE_SLACK, last + DATE_SLACK


@pytest.mark.parametrize(
    "text",
    [
        "What did James do on March 16, 2022?",
        "on Mar 16th 2022",
        "on mar. 16 2022",
        "on 16 March 2022",
        "on the 16th of March, 2022",
        "on 2022-03-16",
        "at 2022-03-16T09:30:00Z",
        "on March 16 , 2022",
    ],
)
def test_a_named_day_is_that_day_and_a_week_either_side(text: str) -> None:
    assert _days(text) == [_around(date(2022, 3, 16), date(2022, 3, 16))]


@pytest.mark.parametrize(
    "text",
    [
        "in August 2023",
        "in mid-August 2023",
        "early Aug 2023",
        "in August, 2023",
        "August of 2023",
    ],
)
def test_a_named_month_is_the_month_and_a_week_either_side(text: str) -> None:
    assert _days(text) == [_around(date(2023, 8, 1), date(2023, 8, 31))]


def test_december_runs_to_the_new_year_and_dates_come_in_text_order() -> None:
    assert _days("between December 2023 and 2022-01-05") == [
        _around(date(2023, 12, 1), date(2023, 12, 31)),
        _around(date(2022, 1, 5), date(2022, 1, 5)),
    ]


def test_the_first_and_last_years_keep_their_periods_within_what_datetime_holds() -> None:
    assert _days("in January 0001") == [(date(1, 1, 1), date(1, 2, 7))]
    assert _days("on December 31, 9999") == [(date(9999, 12, 24), date(9999, 12, 31))]
    assert _days("in December 9999") == [(date(9999, 11, 24), date(9999, 12, 31))]


@pytest.mark.parametrize(
    "text",
    [
        "What did Ana do?",
        "in 2022",  # a year alone
        "on March 16",  # no year
        "last spring",
        "May I ask?",
        "on February 30, 2022",  # no such day
        "on 30 February 2022",  # nor its month
        "on 0 March 2022",
        "on 99 March 2022",
        "on 2022-13-01",
        "on 0000-01-01",
        "2023-08-11-12",
        "v2023-08-11",
        "in 2023-08",  # year-month: more often a season ("the 2011-12 season")
        "the 2011-12 season",
        "what may 2023 bring?",
        "in Apr\u0131l 2023",  # a dotless i: no ASCII month name
        "in Augu\u017ft 2023",  # a long s
        "March 162022",
        "maybe 12345 times",
    ],
)
def test_what_names_no_date_gives_no_period(text: str) -> None:
    assert named_periods(text) == ()


@given(st.dates(min_value=date(1900, 1, 1), max_value=date(2100, 12, 31)), st.integers(0, 2))
def test_any_day_in_any_form_gives_its_period(day: date, form: int) -> None:
    text = [f"{day:%B} {day.day}, {day.year}", f"{day.day} {day:%b} {day.year}", day.isoformat()][form]
    assert _days(f"What happened on {text}?") == [_around(day, day)]


WEDNESDAY = date(2024, 1, 17)


@pytest.mark.parametrize(
    ("text", "first", "last"),
    [
        ("What did I do today?", WEDNESDAY, WEDNESDAY),
        ("what did Ana cook yesterday", date(2024, 1, 16), date(2024, 1, 16)),
        ("3 days ago", date(2024, 1, 14), date(2024, 1, 14)),
        ("two weeks ago", date(2024, 1, 3), date(2024, 1, 3)),
        ("a month ago", date(2023, 12, 1), date(2023, 12, 31)),
        ("a year ago", date(2023, 1, 1), date(2023, 1, 31)),
        ("this week", date(2024, 1, 15), date(2024, 1, 21)),  # Monday to Sunday
        ("last week", date(2024, 1, 8), date(2024, 1, 14)),
        ("over the past week", date(2024, 1, 10), date(2024, 1, 16)),
        ("the past month", date(2023, 12, 18), date(2024, 1, 16)),
        ("this month", date(2024, 1, 1), date(2024, 1, 31)),
        ("last month", date(2023, 12, 1), date(2023, 12, 31)),
        ("last spring", date(2023, 3, 1), date(2023, 5, 31)),
        ("last winter", date(2022, 12, 1), date(2023, 2, 28)),  # this winter is not over
        ("this winter", date(2023, 12, 1), date(2024, 2, 29)),
        ("this summer", date(2024, 6, 1), date(2024, 8, 31)),  # this year's, to come
        ("in January", date(2024, 1, 1), date(2024, 1, 31)),  # this month
        ("last January", date(2023, 1, 1), date(2023, 1, 31)),
        ("in mid-March", date(2023, 3, 1), date(2023, 3, 31)),  # the last March there was
        ("on March 16", date(2023, 3, 16), date(2023, 3, 16)),
        ("the 16th of March", date(2023, 3, 16), date(2023, 3, 16)),
        ("on Feb 29", date(2020, 2, 29), date(2020, 2, 29)),  # the last one there was
        ("in the summer of 2023", date(2023, 6, 1), date(2023, 8, 31)),
        ("in May", date(2023, 5, 1), date(2023, 5, 31)),
    ],
)
def test_a_relative_date_counts_from_the_day_it_is_asked(text: str, first: date, last: date) -> None:
    assert _days(text, WEDNESDAY) == [_around(first, last)]
    if not any(char.isdigit() for char in text) or "ago" in text:
        assert named_periods(text) == ()  # and is no date without that day


def test_winter_with_a_year_is_its_winter_months() -> None:
    assert _days("in the winter of 2023") == [
        _around(date(2023, 1, 1), date(2023, 2, 28)),
        _around(date(2023, 12, 1), date(2023, 12, 31)),
    ]


@pytest.mark.parametrize(
    "text",
    [
        "March was fun",
        "May I ask?",
        "in may",
        "since December",
        "last year",
        "before the move",
        "in Marketing",
        "1.5 weeks ago",
    ],
)
def test_what_names_no_date_relative_to_today_either(text: str) -> None:
    assert named_periods(text, today=WEDNESDAY) == ()


def test_a_day_or_month_without_its_year_is_not_read_when_the_text_names_a_year() -> None:
    assert _days("What happened March 1-5, 2019?", WEDNESDAY) == []
    assert _days("on March 16 and 17, 2019", WEDNESDAY) == []
    assert _days("in March and April 2019", WEDNESDAY) == [_around(date(2019, 4, 1), date(2019, 4, 30))]


def test_this_month_name_is_this_years_and_may_with_a_day_is_the_month() -> None:
    assert _days("this March", WEDNESDAY) == [_around(date(2024, 3, 1), date(2024, 3, 31))]
    assert _days("on may 16", date(2024, 6, 1)) == [_around(date(2024, 5, 16), date(2024, 5, 16))]


def test_february_29_without_a_year_is_the_last_one_even_across_a_century() -> None:
    assert _days("on Feb 29", date(2101, 3, 1)) == [_around(date(2096, 2, 29), date(2096, 2, 29))]


_WORDS = st.sampled_from(
    [
        "in",
        "of",
        "the",
        "on",
        "last",
        "this",
        "past",
        "next",
        "ago",
        "today",
        "yesterday",
        "day",
        "days",
        "week",
        "weeks",
        "month",
        "months",
        "year",
        "years",
        "spring",
        "summer",
        "fall",
        "autumn",
        "winter",
        "March",
        "mar.",
        "MAY",
        "may",
        "Sep",
        "sept",
        "December",
        ",",
        "-",
        ".",
        "T",
        "0000",
        "0001",
        "9999",
        "10000",
        "2023",
        "16",
        "16th",
        "31",
        "29",
        "0",
        "1",
        "2",
        "99",
        "a",
        "an",
        "two",
        "twelve",
        "2023-08-11",
        "0000-01-01",
        "9999-12-31",
    ]
)


@given(
    st.lists(_WORDS | st.integers(0, 99999).map(str), max_size=12).map(" ".join),
    st.none() | st.dates(),
)
def test_any_text_on_any_day_reads_without_error_into_proper_periods(text: str, today: date | None) -> None:
    for start, end in named_periods(text, today=today):
        assert start < end


def test_a_year_datetime_cannot_hold_names_nothing() -> None:
    for text in ("in March 0000", "summer 0000", "winter of 0000", "Dec 0000"):
        assert named_periods(text) == ()
    assert named_periods("last month", today=date(1, 1, 15)) == ()
    assert named_periods("this winter", today=date(9999, 6, 1)) == ()


def test_said_in_is_half_open() -> None:
    periods = [(10, 20), (30, 40)]
    assert [t for t in range(45) if said_in(periods, t)] == [*range(10, 20), *range(30, 40)]
    assert not said_in([], 15)


def test_fusion_prefers_what_was_said_in_a_named_period() -> None:
    # by meaning alone, each cosine over the best: a 1, b .83, c .67
    cosines = {"a": 0.6, "b": 0.5, "c": 0.4}
    nearest = [("a", 0.6), ("b", 0.5), ("c", 0.4)]
    assert blended(nearest, [], cosines) == ["a", "b", "c"]
    assert blended(nearest, [], cosines, dated=["c"]) == ["c", "a", "b"]  # .67 + .5
    assert blended(nearest, [], cosines, named=["b"], dated=["c"]) == ["b", "c", "a"]  # .83 + .5
    assert blended(nearest, [], cosines, named=["c"], dated=["c"]) == ["c", "a", "b"]
    assert blended(nearest, [], cosines, dated=["c"], date_boost=0.0) == ["a", "b", "c"]
    # a preference, not a filter: a far better match said another day stays ahead
    assert blended([("a", 0.9), ("c", 0.1)], [], {"a": 0.9, "c": 0.1}, dated=["c"]) == ["a", "c"]
    # the boost is what a named speaker adds
    assert blended(nearest, [], cosines, named=["b"], dated=["c"], date_boost=DATE_BOOST + 0.2) == [
        "c",
        "b",
        "a",
    ]


DAY = datetime(2023, 3, 16, 20, tzinfo=UTC)


@pytest.mark.parametrize("backend", ["memory", "sqlite", "postgres"])
async def test_every_store_prefers_memories_said_in_a_named_period(backend: str) -> None:
    said = {
        "before": DAY - timedelta(days=40),
        "then": DAY + timedelta(days=1),  # told the day after
        "after": DAY + timedelta(days=90),
        "later": DAY + timedelta(days=200),
    }
    async with opened(backend, ttl=None) as store:
        for name, when in said.items():
            # the same vector and words for all: only when they were said tells them apart
            record = MemoryRecord(f"{name}: went bowling", embedding=[1.0, 0.0, 0.0, 0.0], created_at=when)
            await store.add(ANA, record)

        async def first(text: str, **options: object) -> str:
            hits = await store.search(ANA, [1.0, 0.2, 0.0, 0.0], text=text, k=4, **options)  # pyright: ignore[reportArgumentType]
            return hits[0].record.text.split(":")[0]

        assert await first("Where did Ana go bowling on March 16, 2023?") == "then"
        assert await first("Where did Ana go bowling on 2023-06-14?") == "after"
        assert await first("What did Ana do in October 2023?") == "later"  # no word matches
        assert await first("Where did Ana go bowling on Feb 4, 2023?") == "before"
        # the other modes rank as before: by meaning, or by words alone
        vector = await store.search(ANA, [1.0, 0.2, 0.0, 0.0], text="bowling on 2023-06-14", mode="vector")
        assert [h.record.created_at for h in vector] == [
            h.record.created_at for h in await store.search(ANA, [1.0, 0.2, 0.0, 0.0], mode="vector")
        ]
        lexical = await store.search(ANA, None, text="bowling on 2023-06-14", mode="lexical")
        assert {h.record.text for h in lexical} == {f"{name}: went bowling" for name in said}
        # a window still bounds what a named date can bring in
        window = {"since": said["after"] - timedelta(days=1)}
        assert await first("bowling on March 16, 2023", **window) in {"after", "later"}


@pytest.mark.parametrize("backend", ["memory", "sqlite", "postgres"])
async def test_every_store_reads_relative_dates_from_today(backend: str) -> None:
    now = datetime.now(UTC)
    async with opened(backend, ttl=None) as store:
        for name, days in (("long ago", 90), ("yesterday", 1), ("weeks ago", 60)):
            record = MemoryRecord(
                f"{name}: went bowling", embedding=[1.0, 0.0, 0.0, 0.0], created_at=now - timedelta(days=days)
            )
            await store.add(ANA, record)
        hits = await store.search(ANA, [1.0, 0.0, 0.0, 0.0], text="Did Ana go bowling yesterday?", k=3)
        assert hits[0].record.text.startswith("yesterday:")
        hits = await store.search(ANA, [1.0, 0.0, 0.0, 0.0], text="Did Ana go bowling two months ago?", k=3)
        assert hits[0].record.text.startswith("weeks ago:")  # 60 days back is always in or by that month
