"""The dates a query names ("on 16 March 2022", "in mid-August 2023", "2023-08-11"), as the
periods a fused search prefers memories said in (see :func:`~._lexical.blended`).

A question that names a day or a month asks about what was said then: a memory's ``created_at``
is when its message was said, so the memories of that period are the likely answers. Each period
is widened by :data:`DATE_SLACK` on both sides, because people tell of a day a few days later
("yesterday I went bowling", "last week"). Understood, in English: a day as month-day-year
("March 16, 2022", "Mar 16th 2022"), day-month-year ("16 March 2022", "11 December, 2023", "the
5th of May 2021") or ISO ("2023-08-11", also as the start of a timestamp); a month as month-year
("August 2023", "mid-August 2023", "early Jan 2022"). Not dates here: a year alone (too wide to
prefer anything), "2011-12" (more often a season than December 2011), a relative phrase ("last
spring": there is no "now" in a stored memory's search), a day or month without a year (any
year's), a day that does not exist ("30 February 2022": not its month either), and a lowercase
"may" before a year ("what may 2023 bring"). Only ASCII letters and digits are read: a month
name written with a look-alike letter (a dotless i, a long s) is no month.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
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
_MONTH: Final = "(" + "|".join(sorted(_MONTHS, key=len, reverse=True)) + r")\.?"
_DAY: Final = r"(\d{1,2})(?:st|nd|rd|th)?"
_YEAR: Final = r"(\d{4})"

_BEFORE_YEAR: Final = r"(?:\s*,\s*|\s+)"  # "16, 2022", "16 , 2022", "16 2022"
_FLAGS: Final = re.IGNORECASE | re.ASCII

_PATTERNS: Final = (
    # each: the pattern, and which groups hold the year, the month and the day (0: none)
    (re.compile(rf"\b{_MONTH}\s+{_DAY}{_BEFORE_YEAR}{_YEAR}\b", _FLAGS), (3, 1, 2)),
    (re.compile(rf"\b{_DAY}\s+(?:of\s+)?{_MONTH}{_BEFORE_YEAR}{_YEAR}\b", _FLAGS), (3, 2, 1)),
    (re.compile(r"(?<![\w-])(\d{4})-(\d{2})-(\d{2})(?![\d-])", re.ASCII), (1, 2, 3)),  # also 2023-08-11T09:30
    (re.compile(rf"\b{_MONTH}{_BEFORE_YEAR}(?:of\s+)?{_YEAR}\b", _FLAGS), (2, 1, 0)),
)

_MICROS: Final = timedelta(microseconds=1)
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)


def named_periods(text: str) -> tuple[tuple[int, int], ...]:
    """The periods the dates ``text`` names cover, widened by :data:`DATE_SLACK` (module docs):
    each as its first and its first-after microsecond since the epoch (UTC), in the order the
    dates appear; none when it names no date."""
    periods: list[tuple[int, tuple[int, int]]] = []
    taken: list[tuple[int, int]] = []
    for pattern, (year_at, month_at, day_at) in _PATTERNS:
        for match in pattern.finditer(text):
            if any(start < match.end() and match.start() < end for start, end in taken):
                continue  # part of a date read already ("16 March 2022" holds "March 2022")
            taken.append((match.start(), match.end()))  # a day that does not exist names nothing
            month_text = match[month_at]
            if not day_at and month_text == "may":
                continue  # "what may 2023 bring"
            month = int(month_text) if month_text.isdigit() else _MONTHS[month_text.lower()]
            span = _span(int(match[year_at]), month, int(match[day_at]) if day_at else None)
            if span is not None:
                periods.append((match.start(), span))
    return tuple(span for _, span in sorted(periods))


def _span(year: int, month: int, day: int | None) -> tuple[int, int] | None:
    """A day or a month, widened (within the years datetime can hold), in microseconds; ``None``
    for no such date."""
    try:
        first = datetime(year, month, 1 if day is None else day, tzinfo=UTC)
    except ValueError:
        return None
    start = _moved(first, -DATE_SLACK)
    if day is not None:
        end = _moved(first, timedelta(days=1) + DATE_SLACK)
    elif month == 12:
        end = _LAST if year == datetime.max.year else _moved(datetime(year + 1, 1, 1, tzinfo=UTC), DATE_SLACK)
    else:
        end = _moved(datetime(year, month + 1, 1, tzinfo=UTC), DATE_SLACK)
    return (start - _EPOCH) // _MICROS, (end - _EPOCH) // _MICROS


_FIRST: Final = datetime.min.replace(tzinfo=UTC)
_LAST: Final = datetime.max.replace(tzinfo=UTC)


def _moved(when: datetime, by: timedelta) -> datetime:
    """``when + by``, kept within the first and the last moment datetime can hold."""
    try:
        return when + by
    except OverflowError:
        return _FIRST if by < timedelta(0) else _LAST
