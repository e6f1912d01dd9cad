"""Exponential backoff with full jitter, per key: how long to wait after a failure, sans-I/O.

After the n-th failure in a row of one key (the endpoint, a shard), the next attempt waits a
uniformly random time in ``[0, min(cap, base * 2 ** (n - 1))]`` ("full jitter", the scheme the
AWS SDKs use: clients that failed together do not come back together). A success resets the
key. Nothing sleeps here: :meth:`Backoff.failed` returns the delay and remembers when the key
may be tried again; the caller decides what waits (a request, a shard's queue).
"""

from __future__ import annotations

import random as _random
from collections.abc import Callable, Hashable

from kinesis_core.errors import ConfigurationError

_MAX_EXPONENT = 64
"""``base * 2 ** 64`` is past any cap: stop doubling there (no float overflow)."""


def ceiling(base: float, cap: float, failures: int) -> float:
    """The longest wait after ``failures`` failures in a row (the jitter's upper bound)."""
    if failures < 1:
        return 0.0
    return min(cap, base * 2.0 ** min(failures - 1, _MAX_EXPONENT))


class Backoff:
    """Failures in a row and the earliest next attempt, per key."""

    def __init__(
        self, base: float, cap: float, *, random: Callable[[], float] = _random.random
    ) -> None:
        if not 0 < base <= cap:
            raise ConfigurationError(f"backoff: need 0 < base <= cap, got base={base}, cap={cap}")
        self.base = base
        self.cap = cap
        self._random = random
        self._failures: dict[Hashable, int] = {}
        self._until: dict[Hashable, float] = {}

    def failed(self, key: Hashable, now: float) -> float:
        """One more failure of ``key`` at ``now``; returns the delay before its next attempt."""
        failures = self._failures.get(key, 0) + 1
        self._failures[key] = failures
        delay = self._random() * ceiling(self.base, self.cap, failures)
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
