"""The machinery of the conformance suites: checks, their outcomes, and the assertions they use.

A check is an async function of a backend description that raises :class:`ConformanceFailure`
(an ``AssertionError``) when the backend breaks the contract, or :class:`NotApplicable` when the
backend does not declare what the check is about. The assertions here work without pytest and
under ``python -O``, and their messages show what was expected and what came back.
"""

from __future__ import annotations

import asyncio
import re
import traceback
from collections.abc import Awaitable, Callable, Generator, Iterable
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar

__all__ = [
    "CheckOutcome",
    "ConformanceCheck",
    "ConformanceFailure",
    "ConformanceReport",
    "NotApplicable",
    "Raised",
    "check_list",
    "expect",
    "expect_equal",
    "expect_raises",
    "run_checks",
]

B = TypeVar("B")


class ConformanceFailure(AssertionError):
    """A backend broke the contract a check is about (the message says how)."""


class NotApplicable(Exception):
    """A check is about a capability or hook the backend does not declare."""


def expect(condition: object, message: str) -> None:
    """Fail the check with ``message`` unless ``condition`` holds."""
    if not condition:
        raise ConformanceFailure(message)


def expect_equal(actual: Any, expected: Any, what: str) -> None:
    """Fail the check unless ``actual == expected``; the message names ``what`` and both values."""
    if actual != expected:
        raise ConformanceFailure(f"{what}: expected {expected!r}, got {actual!r}")


@dataclass(slots=True)
class Raised:
    """What :func:`expect_raises` caught (``error`` is set once the block raised)."""

    error: BaseException | None = None


@contextmanager
def expect_raises(
    kinds: type[BaseException] | tuple[type[BaseException], ...], what: str, *, match: str | None = None
) -> Generator[Raised]:
    """Fail the check unless the block raises one of ``kinds`` (whose text matches ``match``)."""
    raised = Raised()
    try:
        yield raised
    except kinds as exc:
        if match is not None and not re.search(match, str(exc)):
            raise ConformanceFailure(
                f"{what}: {type(exc).__name__} {str(exc)!r} does not match {match!r}"
            ) from exc
        raised.error = exc
        return
    names = kinds.__name__ if isinstance(kinds, type) else " or ".join(k.__name__ for k in kinds)
    raise ConformanceFailure(f"{what}: expected {names}, nothing was raised")


@dataclass(frozen=True, slots=True)
class ConformanceCheck(Generic[B]):
    """One rule of a contract, runnable against a backend.

    Attributes:
        name: The check's name (a test id).
        description: What the rule says.
        run: The check itself: raises :class:`ConformanceFailure` or :class:`NotApplicable`.
    """

    name: str
    description: str
    run: Callable[[B], Awaitable[None]]

    async def __call__(self, backend: B) -> None:
        """Run the check against ``backend``."""
        await self.run(backend)

    def __str__(self) -> str:
        return self.name


def check_list(
    checks: list[ConformanceCheck[B]],
) -> Callable[[Callable[[B], Awaitable[None]]], Callable[[B], Awaitable[None]]]:
    """A decorator that adds the decorated function to ``checks`` (named after it, described by its
    docstring's first line)."""

    def register(function: Callable[[B], Awaitable[None]]) -> Callable[[B], Awaitable[None]]:
        doc = (function.__doc__ or "").strip().splitlines()
        checks.append(ConformanceCheck(function.__name__, doc[0] if doc else "", function))
        return function

    return register


@dataclass(frozen=True, slots=True)
class CheckOutcome:
    """How one check went.

    Attributes:
        name: The check.
        status: ``"passed"``, ``"failed"`` or ``"not applicable"``.
        detail: Why it failed (with the traceback) or did not apply; empty when it passed.
    """

    name: str
    status: Literal["passed", "failed", "not applicable"]
    detail: str = ""


@dataclass(slots=True)
class ConformanceReport:
    """The outcomes of a suite run (:func:`run_checks`)."""

    outcomes: list[CheckOutcome] = field(default_factory=list[CheckOutcome])

    @property
    def failed(self) -> list[CheckOutcome]:
        """The checks that failed."""
        return [o for o in self.outcomes if o.status == "failed"]

    @property
    def passed(self) -> list[CheckOutcome]:
        """The checks that passed."""
        return [o for o in self.outcomes if o.status == "passed"]

    @property
    def not_applicable(self) -> list[CheckOutcome]:
        """The checks about capabilities the backend does not declare."""
        return [o for o in self.outcomes if o.status == "not applicable"]

    def raise_for_failures(self) -> None:
        """Raise :class:`ConformanceFailure` listing every failed check, if any failed."""
        if self.failed:
            details = "\n\n".join(f"{o.name}:\n{o.detail}" for o in self.failed)
            raise ConformanceFailure(f"{len(self.failed)} of {len(self.outcomes)} checks failed\n\n{details}")

    def __str__(self) -> str:
        lines = [
            f"{len(self.passed)} passed, {len(self.failed)} failed, {len(self.not_applicable)} not applicable"
        ]
        lines += [
            f"  {o.status:>14}  {o.name}" + (f": {o.detail.splitlines()[0]}" if o.detail else "")
            for o in self.outcomes
        ]
        return "\n".join(lines)


async def run_checks(
    checks: Iterable[ConformanceCheck[B]], backend: B, *, check_timeout: float = 60.0
) -> ConformanceReport:
    """Run every check against ``backend``, one after the other, each within ``check_timeout`` seconds.

    A check that raises anything but :class:`NotApplicable` (a broken contract, an unexpected
    error, the timeout) counts as failed; the report keeps the traceback.
    """
    report = ConformanceReport()
    for check in checks:
        try:
            async with asyncio.timeout(check_timeout):
                await check.run(backend)
        except NotApplicable as exc:
            report.outcomes.append(CheckOutcome(check.name, "not applicable", str(exc)))
        except Exception as exc:  # a conformance run reports every failure, whatever its kind
            detail = "".join(traceback.format_exception(exc)).rstrip()
            report.outcomes.append(CheckOutcome(check.name, "failed", detail))
        else:
            report.outcomes.append(CheckOutcome(check.name, "passed"))
    return report
