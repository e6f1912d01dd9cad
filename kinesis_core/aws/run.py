"""What an executor does next in the run of one call or operation (sans-I/O).

A :class:`Run` follows the pages of an :class:`~kinesis_core.aws.calls.ApiCall` (or the one
request of an operation) under a :class:`~kinesis_core.aws.retry.Retry`, and says at each turn
what comes next: :class:`Send` a request, :class:`Wait` some seconds before sending it again,
:class:`Done` with the answer, or :data:`GIVE_UP`: raise the failure, which then carries the
history of the attempts before it in its ``__notes__``. The executors
(:mod:`kinesis_core.aws.executor`) only carry these steps out, on an event loop or a thread.
"""

from __future__ import annotations

from collections.abc import Generator, Mapping
from dataclasses import dataclass
from typing import Any, Final

from kinesis_core.aws.classify import ErrorKind
from kinesis_core.aws.retry import Retry

__all__ = ["GIVE_UP", "Done", "GiveUp", "Run", "Send", "Wait"]

Pages = Generator[Mapping[str, Any], Any, Any]
"""An ApiCall's pages: yields each request's arguments, is sent each answer, returns the call's."""


@dataclass(frozen=True, slots=True)
class Send:
    """Send the next request, with these arguments (none for an operation)."""

    kwargs: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Wait:
    """Wait this many seconds, then send the request that failed again."""

    seconds: float


@dataclass(frozen=True, slots=True)
class Done:
    """The run's answer."""

    value: Any


class GiveUp:
    """Raise the failure: no retry comes."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "GIVE_UP"


GIVE_UP: Final = GiveUp()

_NO_ARGUMENTS: Mapping[str, Any] = {}


class Run:
    """The steps of one call's pages (``pages``), or of one operation (None), each request
    under ``retry`` (None: sent once)."""

    __slots__ = ("_kwargs", "_pages", "retry")

    def __init__(self, pages: Pages | None, retry: Retry | None) -> None:
        self._pages = pages
        self.retry = retry
        self._kwargs = _NO_ARGUMENTS

    def start(self) -> Send:
        """The first request."""
        if self._pages is not None:
            self._kwargs = next(self._pages)
        return Send(self._kwargs)

    def answered(self, response: Any) -> Send | Done:
        """The request was answered: the next page's request, or the answer."""
        if self.retry is not None:
            self.retry.succeeded()
        if self._pages is None:
            return Done(response)
        try:
            self._kwargs = self._pages.send(response)
        except StopIteration as done:
            return Done(done.value)
        return Send(self._kwargs)

    def failed(
        self, now: float, error: BaseException, kind: ErrorKind | None, *, unreachable: bool
    ) -> Wait | GiveUp:
        """The request failed at ``now`` with ``error`` (of ``kind`` by the error table;
        ``unreachable``: it reached no endpoint): wait, or give up with the history of the
        attempts before it in ``error.__notes__``."""
        retry = self.retry
        if retry is None:
            return GIVE_UP
        delay = retry.failed(now, error, kind, unreachable=unreachable)
        if delay is not None:
            return Wait(delay)
        if len(retry.attempts) > 1:
            notes = list(getattr(error, "__notes__", ()))
            error.__notes__ = [*notes, f"retried: {retry.history()}"]  # type: ignore[attr-defined]
        return GIVE_UP

    def waited(self) -> Send:
        """The wait is over: the request that failed, again."""
        return Send(self._kwargs)
