"""Exponential backoff with jitter: how long to wait after a failure, sans-I/O.

After the n-th failure in a row, the longest wait is ``min(cap, base * 2 ** (n - 1))``
(:func:`ceiling`); the jitter draws the wait below it (:func:`jittered`): "full" anywhere in
``[0, ceiling]`` (the scheme the AWS SDKs use: clients that failed together do not come back
together), "equal" in ``[ceiling / 2, ceiling]`` (a reader that failed never comes back at
once). :class:`Backoff` is the schedule (base, cap, jitter), a value that configs carry;
:class:`BackoffTracker` keeps one per key (the endpoint, a shard), where a success resets the
key. Nothing sleeps here: :meth:`BackoffTracker.failed` returns the delay and remembers when the
key may be tried again; the caller decides what waits (a request, a shard's queue).
:mod:`kinesis_core.aws.retry` builds the retry policy of every executed call on these.
"""

from __future__ import annotations

import enum
import random as _random
from collections.abc import Callable, Hashable
from dataclasses import dataclass

from kinesis_core.errors import ConfigurationError

_MAX_EXPONENT = 64
"""``base * 2 ** 64`` is past any cap: stop doubling there (no float overflow)."""


def ceiling(base: float, cap: float, failures: int) -> float:
    """The longest wait after ``failures`` failures in a row (the jitter's upper bound)."""
    if failures < 1:
        return 0.0
    return min(cap, base * 2.0 ** min(failures - 1, _MAX_EXPONENT))


class Jitter(enum.Enum):
    """Where below the ceiling a wait is drawn."""

    FULL = "full"
    """Uniformly in ``[0, ceiling]``."""
    EQUAL = "equal"
    """Uniformly in ``[ceiling / 2, ceiling]``: never much sooner than the ceiling."""


def jittered(longest: float, draw: float, jitter: Jitter) -> float:
    """The wait below ``longest`` (a :func:`ceiling`) for a ``draw`` in [0, 1)."""
    if jitter is Jitter.EQUAL:
        return longest * (0.5 + 0.5 * draw)
    return longest * draw


@dataclass(frozen=True, slots=True)
class Backoff:
    """The wait after the n-th failure in a row: drawn by ``jitter`` below a ceiling that
    doubles from ``base`` up to ``cap`` (seconds)."""

    base: float
    cap: float
    jitter: Jitter = Jitter.FULL

    def __post_init__(self) -> None:
        if not 0 < self.base <= self.cap:
            raise ConfigurationError(
                "backoff", f"need 0 < base <= cap, got base={self.base}, cap={self.cap}"
            )

    def delay(self, failures: int, draw: float) -> float:
        """Seconds to wait after the ``failures``-th failure in a row; ``draw`` in [0, 1)."""
        return jittered(ceiling(self.base, self.cap, failures), draw, self.jitter)


class BackoffTracker:
    """Failures in a row and the earliest next attempt, per key, on one :class:`Backoff`."""

    def __init__(self, backoff: Backoff, *, random: Callable[[], float] = _random.random) -> None:
        self.backoff = backoff
        self._random = random
        self._failures: dict[Hashable, int] = {}
        self._until: dict[Hashable, float] = {}

    def failed(self, key: Hashable, now: float) -> float:
        """One more failure of ``key`` at ``now``; returns the delay before its next attempt."""
        failures = self._failures.get(key, 0) + 1
        self._failures[key] = failures
        delay = self.backoff.delay(failures, self._random())
        self._until[key] = now + delay
        return delay

    def succeeded(self, key: Hashable) -> None:
        """``key`` worked: the next failure starts the schedule again."""
        self._failures.pop(key, None)
        self._until.pop(key, None)

    def failures(self, key: Hashable) -> int:
        """Failures of ``key`` in a row (0 after a success)."""
        return self._failures.get(key, 0)

    def until(self, key: Hashable) -> float:
        """When ``key`` may be tried again (-inf when it is not backing off)."""
        return self._until.get(key, float("-inf"))

    def waiting(self, key: Hashable, now: float) -> bool:
        """Whether ``key`` must still wait at ``now``."""
        return self._until.get(key, float("-inf")) > now
