"""The retry policy of the calls an executor runs: which failures are tried again, how long to
wait before the next attempt and when to give up (sans-I/O).

Built from the error table (:mod:`kinesis_core.aws.classify`: a failure is retried when its kind is
one the policy retries) and the backoff schedule (:mod:`kinesis_core.aws.backoff`: the ceiling
doubles from ``base`` up to ``cap``, the jitter, full or equal, is chosen once per policy).
An operation gives up after ``attempts`` attempts, once ``deadline`` seconds have passed since
its first attempt, after ``unreachable_attempts`` attempts that reached no endpoint at all, or
when the policy's ``give_up`` says so, whichever comes first. A :class:`Retry` is one
operation's run under a policy: the executor (:mod:`kinesis_core.aws.executor`) feeds it each
failure and sleeps what it returns, or raises the last error with :meth:`Retry.history`
attached (its ``__notes__``).

The shard readers are not retried by a policy: their machines decide
(:mod:`kinesis_core.consumer.transport`), and an executor runs each of their calls once.
"""

from __future__ import annotations

import random
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass

from kinesis_core.aws.backoff import Jitter, ceiling, jittered
from kinesis_core.aws.classify import ErrorKind, error_details, error_message
from kinesis_core.errors import ConfigurationError

RETRYABLE = frozenset({ErrorKind.THROTTLED, ErrorKind.TRANSIENT, ErrorKind.IN_USE})
"""The kinds waiting and trying again can fix (:attr:`ErrorKind.retryable`)."""
KEEP_LAST = 5
"""Attempts kept at the end of a long history (the first one is always kept)."""


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How one kind of operation is retried; checked when made."""

    base: float = 0.2
    """Seconds: the ceiling of the first wait; it doubles with every failure in a row."""
    cap: float = 10.0
    """Seconds: the ceiling stops growing here."""
    jitter: Jitter = Jitter.FULL
    """Where below the ceiling each wait is drawn."""
    attempts: int | None = 5
    """Attempts of one request in a row, the first included (None: no limit); a success (a
    page of a listing) starts the count and the backoff again."""
    deadline: float | None = None
    """Seconds from the first attempt after which no attempt starts (None: no limit); the
    last wait is cut to end there."""
    unreachable_attempts: int | None = None
    """Attempts that reached no endpoint at all (nothing listens, the name does not resolve)
    after which it gives up, however many ``attempts`` are left (None: no such limit)."""
    retry_on: frozenset[ErrorKind] = RETRYABLE
    """The kinds of failure tried again; the others raise at once."""
    unknown: ErrorKind | Callable[[BaseException], ErrorKind | None] | None = None
    """The kind of a failure the error table has no answer for (not a service or transport
    error: a local store's I/O error, say), or a function of the failure that tells it; None:
    raise it at once, as a bug."""
    give_up: Callable[[BaseException, int], bool] | None = None
    """A function of a failure and the failed attempts so far (it included) that ends the
    operation's retries when it says True, whatever the failure's kind (None: no such rule)."""

    def __post_init__(self) -> None:
        if not 0 < self.base <= self.cap:
            raise ConfigurationError(
                "base", f"need 0 < base <= cap, got base={self.base!r}, cap={self.cap!r}"
            )
        for name in ("attempts", "unreachable_attempts"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                raise ConfigurationError(name, f"must be an int >= 1 or None, got {value!r}")
            if value is not None and value < 1:
                raise ConfigurationError(name, f"must be >= 1 or None, got {value!r}")
        if self.deadline is not None and not self.deadline >= 0:
            raise ConfigurationError(
                "deadline", f"must be >= 0 seconds or None, got {self.deadline!r}"
            )

    def begin(self, now: float, rng: Callable[[], float] = random.random) -> Retry:
        """The run of one operation whose first attempt starts at ``now``."""
        return Retry(self, now, rng)


class NotYet(Exception):
    """An answer that says "not yet" (a table still CREATING, a consumer still DELETING),
    raised by an operation that polls for a state; :func:`not_yet` makes a policy retry it."""


def not_yet(error: BaseException) -> ErrorKind | None:
    """A :attr:`RetryPolicy.unknown` that looks again after a :class:`NotYet` (as
    :attr:`ErrorKind.IN_USE`) and raises anything else the error table does not know."""
    return ErrorKind.IN_USE if isinstance(error, NotYet) else None


@dataclass(frozen=True, slots=True)
class Attempt:
    """One failed attempt: when (seconds after the first attempt started) and what failed."""

    number: int
    at: float
    kind: ErrorKind | None
    code: str | None
    message: str


class Retry:
    """One operation's failures under a :class:`RetryPolicy`."""

    __slots__ = (
        "_codes",
        "_first",
        "_last",
        "_total",
        "_unreachable",
        "failures",
        "policy",
        "rng",
        "started",
    )

    def __init__(
        self, policy: RetryPolicy, started: float, rng: Callable[[], float] = random.random
    ) -> None:
        self.policy = policy
        self.started = started
        self.rng = rng
        self.failures = 0
        """Failed attempts in a row (since the start, or the last success)."""
        self._total = 0
        self._unreachable = 0
        self._first: Attempt | None = None
        self._last: deque[Attempt] = deque(maxlen=KEEP_LAST)
        self._codes: Counter[str] = Counter()

    def failed(
        self,
        now: float,
        error: BaseException,
        kind: ErrorKind | None,
        *,
        unreachable: bool = False,
    ) -> float | None:
        """An attempt failed at ``now`` with ``error`` (of ``kind`` by the error table; None:
        not a service or transport error). The seconds to wait before the next attempt, or
        None: give up (raise ``error``)."""
        policy = self.policy
        self.failures += 1
        self._total += 1
        code, _ = error_details(error)
        attempt = Attempt(self._total, now - self.started, kind, code, error_message(error))
        if self._first is None:
            self._first = attempt
        else:
            self._last.append(attempt)
        self._codes[code or type(error).__name__] += 1
        self._unreachable += unreachable
        if kind is None:
            unknown = policy.unknown
            kind = unknown(error) if callable(unknown) else unknown
        if kind is None or kind not in policy.retry_on:
            return None
        if policy.give_up is not None and policy.give_up(error, self._total):
            return None
        if policy.attempts is not None and self.failures >= policy.attempts:
            return None
        if policy.unreachable_attempts is not None and (
            self._unreachable >= policy.unreachable_attempts
        ):
            return None
        return self._wait(now)

    def succeeded(self) -> None:
        """An attempt worked: the next failure starts the schedule again (the history stays)."""
        self.failures = 0

    def pause(self, now: float) -> float | None:
        """A wait that follows no failure (an answer that says "not yet": a stream that
        lists no shards while it is created): the next wait on the same schedule, or None
        once the deadline has passed."""
        self.failures += 1
        return self._wait(now)

    def _wait(self, now: float) -> float | None:
        policy = self.policy
        delay = jittered(ceiling(policy.base, policy.cap, self.failures), self.rng(), policy.jitter)
        if policy.deadline is not None:
            left = self.started + policy.deadline - now
            if left <= 0:
                return None
            delay = min(delay, left)
        return delay

    @property
    def attempts(self) -> tuple[Attempt, ...]:
        """The first failed attempt and the last ones (:data:`KEEP_LAST`) of a long run."""
        return (() if self._first is None else (self._first,)) + tuple(self._last)

    def history(self) -> str:
        """The failures in one line, for the error raised when the operation gives up."""
        kept = self.attempts
        if not kept:
            return "no attempt failed"
        codes = ", ".join(
            f"{code} x{count}" if count > 1 else code for code, count in self._codes.most_common()
        )
        last = kept[-1]
        plural = "s" if self._total > 1 else ""
        return (
            f"{self._total} failed attempt{plural} over {last.at:.1f} s ({codes}); "
            f"the last: {last.message}"
        )
