"""The dates a query names ("on 16 March 2022", "in mid-August 2023", "last spring"), as the
periods a fused search prefers memories said in (see :func:`~._lexical.blended`).

A question that names a day or a month asks about what was said then: a memory's ``created_at``
is when its message was said, so the memories of that period are the likely answers. Each period
is widened by :data:`DATE_SLACK` on both sides, because people tell of a day a few days later
("yesterday I went bowling", "last week"). Understood, in English:

* a day as month-day-year ("March 16, 2022", "Mar 16th 2022"), day-month-year ("16 March 2022",
  "11 December, 2023", "the 5th of May 2021") or ISO ("2023-08-11", also as the start of a
  timestamp); a month as month-year ("August 2023", "mid-August 2023", "early Jan 2022"); a
  season with its year ("summer 2023", "the fall of 2022"; winter: the winter months of that
  year, January, February and December);
* given the day it is asked (``today``), relative to it: "today", "yesterday", "3 days ago",
  "two weeks ago" (that day), "a month ago", "a year ago" (that month), "this week" / "last
  week" (Monday to Sunday), "this month" / "last month", "the past week" / "the past month" (the
  7 or 30 days before today), "this summer" / "last spring" (the one we are in or of this year;
  the most recent one that has ended), and
  a day or month without its year ("on March 16", "16 March", "in March", "last March": the
  most recent one not after today, or with "last" before this month; "this March": this
  year's), unless the text names a year anywhere ("March 1-5, 2019", "in March and April
  2019": it could be that year's).

Seasons are the northern hemisphere's, by months (spring March to May, summer June to August,
fall or autumn September to November, winter December to February). Not dates here: a year
alone (too wide to prefer anything), "2011-12" (more often a season than December 2011), a
month without a year and without a word before it that makes it a time ("March" alone, "May I
ask"), a day that does not exist ("30 February 2022": not its month either), a lowercase "may"
without a day ("what may 2023 bring"), and times relative to an event ("before the move").
Only ASCII letters and digits are read: a month name written with a look-alike letter (a
dotless i, a long s) is no month.
"""

from __future__ import annotations

import calendar
import re
from collections.abc import Callable
from datetime import UTC, date, datetime, time, timedelta
from typing import Final

__all__ = ["DATE_SLACK", "named_periods"]

DATE_SLACK: Final = timedelta(days=7)
"""How far before and after a named day or month a memory still counts as said then."""

_MONTHS: Final = {
    name: number
    for number, names in enumerate(
        (
            ("january", "jan"),
            ("february", "feb"),
            ("march", "mar"),
            ("april", "apr"),
            ("may",),
            ("june", "jun"),
            ("july", "jul"),
            ("august", "aug"),
            ("september", "sep", "sept"),
            ("october", "oct"),
            ("november", "nov"),
            ("december", "dec"),
        ),
        start=1,
    )
    for name in names
}
_SEASONS: Final = {"spring": 3, "summer": 6, "fall": 9, "autumn": 9, "winter": 12}
"""Each season's first month (each lasts three)."""
_COUNTS: Final = {
    "a": 1,
    "an": 1,
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "eleven": 11,
    "twelve": 12,
}

_MONTH: Final = "(" + "|".join(sorted(_MONTHS, key=len, reverse=True)) + r")\.?"
_SEASON: Final = "(" + "|".join(_SEASONS) + ")"
_DAY: Final = r"(\d{1,2})(?:st|nd|rd|th)?"
_YEAR: Final = r"(\d{4})"
_BEFORE_YEAR: Final = r"(?:\s*,\s*|\s+)"  # "16, 2022", "16 , 2022", "16 2022"
_NO_YEAR: Final = rf"(?!{_BEFORE_YEAR}\d|\d)"
_FLAGS: Final = re.IGNORECASE | re.ASCII


def _compiled(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern, _FLAGS)


Days = tuple[date, date]
"""A period as its first and its last day."""

_Reader = Callable[[re.Match[str], date | None], list[Days] | None]


def _month(year: int, month: int) -> Days:
    return date(year, month, 1), date(year, month, calendar.monthrange(year, month)[1])


def _months(year: int, first: int, count: int) -> Days:
    """``count`` months from ``first`` of ``year`` (on into the next year)."""
    last_year, last_month = year + (first + count - 2) // 12, (first + count - 2) % 12 + 1
    return date(year, first, 1), _month(last_year, last_month)[1]


def _month_of(match: re.Match[str], group: int) -> int:
    return _MONTHS[match[group].lower()]


# -- what names a date whatever the day it is asked -------------------------------------------------
def _day_month_year(year: int, month: int, day: int) -> list[Days] | None:
    try:
        named = date(year, month, day)
    except ValueError:
        return None  # no such day (its month is not meant either)
    return [(named, named)]


def _month_year(match: re.Match[str], _: date | None) -> list[Days] | None:
    if match[1] == "may":
        return None  # "what may 2023 bring"
    return [_month(int(match[2]), _month_of(match, 1))]


def _season_year(match: re.Match[str], _: date | None) -> list[Days] | None:
    first, year = _SEASONS[match[1].lower()], int(match[2])
    if first == 12:  # the winter months of that year
        return [_months(year, 1, 2), _month(year, 12)]
    return [_months(year, first, 3)]


# -- what names a date given the day it is asked ----------------------------------------------------
def _relative_day(match: re.Match[str], today: date | None) -> list[Days] | None:
    if today is None:
        return None
    named = today if match[1].lower() == "today" else _shifted(today, -timedelta(days=1))
    return None if named is None else [(named, named)]


def _ago(match: re.Match[str], today: date | None) -> list[Days] | None:
    if today is None:
        return None
    count = _COUNTS.get(match[1].lower()) or int(match[1])
    unit = match[2].lower()
    if unit in ("day", "week"):
        named = _shifted(today, -timedelta(days=count * (7 if unit == "week" else 1)))
        return None if named is None else [(named, named)]
    months = today.year * 12 + today.month - 1 - count * (12 if unit == "year" else 1)
    return [_month(months // 12, months % 12 + 1)] if months >= 12 else None  # from year 1 on


def _this_or_last(match: re.Match[str], today: date | None) -> list[Days] | None:
    if today is None:
        return None
    which, unit = match[1].lower(), match[2].lower()
    if which == "past":  # the last 7 or 30 days
        return [(today - timedelta(days=7 if unit == "week" else 30), today - timedelta(days=1))]
    if unit == "week":
        monday = today - timedelta(days=today.weekday() + (7 if which == "last" else 0))
        return [(monday, monday + timedelta(days=6))]
    months = today.year * 12 + today.month - 1 - (0 if which == "this" else 1)
    return [_month(months // 12, months % 12 + 1)]


def _season_around(match: re.Match[str], today: date | None) -> list[Days] | None:
    if today is None:
        return None
    which, first = match[1].lower(), _SEASONS[match[2].lower()]
    for year in range(today.year, today.year - 3, -1):  # this year's, or one of the two before
        days = _months(year, first, 3)
        if which == "this" and days[0] <= today <= days[1]:
            return [days]
        if which != "this" and days[1] < today:
            return [days]
    return [_months(today.year, first, 3)]  # "this": this year's, past or to come


def _month_no_year(match: re.Match[str], today: date | None) -> list[Days] | None:
    if today is None or match[2] == "may":
        return None
    month, which = _month_of(match, 2), match[1].lower()
    if which == "this":
        return [_month(today.year, month)]
    before = which == "last"
    year = today.year if month < today.month or (month == today.month and not before) else today.year - 1
    return [_month(year, month)]


def _day_no_year(month_at: int, day_at: int) -> _Reader:
    def read(match: re.Match[str], today: date | None) -> list[Days] | None:
        if today is None:
            return None
        month, day = _month_of(match, month_at), int(match[day_at])
        for year in range(today.year, max(today.year - 9, 0), -1):  # February 29: up to 8 years back
            try:
                named = date(year, month, day)
            except ValueError:
                continue  # February 29 of a year without one
            if named <= today:
                return [(named, named)]
        return None

    return read


_READERS: Final[tuple[tuple[re.Pattern[str], _Reader], ...]] = (
    (
        _compiled(rf"\b{_MONTH}\s+{_DAY}{_BEFORE_YEAR}{_YEAR}\b"),
        lambda m, _: _day_month_year(int(m[3]), _month_of(m, 1), int(m[2])),
    ),
    (
        _compiled(rf"\b{_DAY}\s+(?:of\s+)?{_MONTH}{_BEFORE_YEAR}{_YEAR}\b"),
        lambda m, _: _day_month_year(int(m[3]), _month_of(m, 2), int(m[1])),
    ),
    (  # also the start of a timestamp: 2023-08-11T09:30
        _compiled(r"(?<![\w-])(\d{4})-(\d{2})-(\d{2})(?![\d-])"),
        lambda m, _: _day_month_year(int(m[1]), int(m[2]), int(m[3])) if 1 <= int(m[2]) <= 12 else None,
    ),
    (_compiled(rf"\b{_MONTH}{_BEFORE_YEAR}(?:of\s+)?{_YEAR}\b"), _month_year),
    (_compiled(rf"\b{_SEASON}{_BEFORE_YEAR}(?:of\s+)?{_YEAR}\b"), _season_year),
    (_compiled(r"\b(today|yesterday)\b"), _relative_day),
    (_compiled(rf"(?<![\w.])(\d{{1,3}}|{'|'.join(_COUNTS)})\s+(day|week|month|year)s?\s+ago\b"), _ago),
    (_compiled(r"\b(this|last|past)\s+(week|month)\b"), _this_or_last),
    (_compiled(rf"\b(this|last|past)\s+{_SEASON}\b"), _season_around),
)
"""What names a date, each with how it reads a match (given the day it is asked, if known):
those with a year first, so a date read whole is not read again in part ("16 March 2022"
holds "March 2022")."""

_YEARLESS_READERS: Final[tuple[tuple[re.Pattern[str], _Reader], ...]] = (
    (_compiled(rf"\b{_MONTH}\s+{_DAY}\b{_NO_YEAR}"), _day_no_year(1, 2)),
    (_compiled(rf"\b{_DAY}\s+(?:of\s+)?{_MONTH}(?![\w.]){_NO_YEAR}"), _day_no_year(2, 1)),
    (
        _compiled(rf"\b(in|during|early|mid|late|last|this)[\s-]+{_MONTH}(?![\w.]){_NO_YEAR}"),
        _month_no_year,
    ),
)
"""What names a day or a month without its year (read after :data:`_READERS`, and only when the
text names no year anywhere)."""

_A_YEAR: Final = re.compile(r"(?<!\d)\d{4}(?!\d)")

_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_MICROS: Final = timedelta(microseconds=1)


def named_periods(text: str, *, today: date | None = None) -> tuple[tuple[int, int], ...]:
    """The periods the dates ``text`` names cover, widened by :data:`DATE_SLACK` (module docs):
    each as its first and its first-after microsecond since the epoch (UTC), in the order the
    dates appear; none when it names no date. Relative dates ("yesterday", "last spring", "in
    March") are read only with ``today``, the day the question is asked."""
    found: list[tuple[int, Days]] = []
    taken: list[tuple[int, int]] = []
    # a year anywhere ("March 1-5, 2019", "March and April 2019"): a day or month without one
    # could be of that year, so it is not read as the most recent
    yearless = _A_YEAR.search(text) is None
    for pattern, read in (*_READERS, *_YEARLESS_READERS) if yearless else _READERS:
        for match in pattern.finditer(text):
            if any(start < match.end() and match.start() < end for start, end in taken):
                continue  # part of a date read already
            taken.append((match.start(), match.end()))  # read, even when it names nothing
            try:
                days = read(match, today) or ()
            except (ValueError, OverflowError):  # before year 1 or after 9999
                days = ()
            found.extend((match.start(), period) for period in days)
    return tuple(_widened(days) for _, days in sorted(found))


def _widened(days: Days) -> tuple[int, int]:
    """A period's first and first-after microsecond, :data:`DATE_SLACK` wider on each side
    (within the days datetime can hold)."""
    first, last = days
    start = datetime.combine(_shifted(first, -DATE_SLACK) or date.min, time(), UTC)
    after = _shifted(last, timedelta(days=1) + DATE_SLACK)
    end = datetime.max.replace(tzinfo=UTC) if after is None else datetime.combine(after, time(), UTC)
    return (start - _EPOCH) // _MICROS, (end - _EPOCH) // _MICROS


def _shifted(day: date, by: timedelta) -> date | None:
    """``day + by``; ``None`` past the first or last day datetime can hold."""
    try:
        return day + by
    except OverflowError:
        return None
