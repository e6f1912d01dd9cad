"""The time of the drivers, injected: what "now" is and how a driver waits.

The sans-I/O machines take ``now`` as an argument; the drivers read it from a clock and wait
through it. One protocol in two flavours: :class:`Time` is what now is (seconds on a monotonic
clock); a :class:`Clock` adds an awaitable ``sleep`` (asyncio drivers), a
:class:`BlockingClock` a ``sleep`` that blocks the thread (synchronous drivers). A driver that
also takes a bare time function (``time.monotonic``, as the producer does) turns it into one
with :func:`time_of`. :data:`SYSTEM_CLOCK` is the event loop's own (``time.monotonic`` and
``asyncio.sleep``); a test gives a consumer a clock whose time only moves when every task
waits (tests/fakes/clock.py), so a test of minutes of timeouts runs in milliseconds and
asserts what happened, not how long it took.
"""

from __future__ import annotations

import asyncio
import math
import time
import weakref
from collections.abc import Awaitable, Callable
from typing import Protocol, cast

SHARED_TICK = 0.02
"""Seconds between the ticks of the loop's clock at which the long waits of
:class:`SystemClock` end together."""
SHARED_FROM = 0.5
"""Waits of at least this many seconds end on a shared tick: at most 4% later than asked (a
reader's wait after an empty answer, 1 s by default, is a little under a second by the time it
starts)."""

_Waiters = dict[int, list["asyncio.Future[None]"]]


class Time(Protocol):
    """Seconds on a monotonic clock: what both flavours of clock share."""

    def now(self) -> float: ...


class Clock(Time, Protocol):
    """Seconds on a monotonic clock, and a way to wait on it (asyncio)."""

    def sleep(self, seconds: float) -> Awaitable[object]: ...


class SystemClock:
    """``time.monotonic`` and ``asyncio.sleep`` (the event loop's clock).

    A wait of :data:`SHARED_FROM` seconds or more ends at the first tick of the loop's clock
    (every :data:`SHARED_TICK` seconds) at or after its end, together with every other wait
    that ends on that tick: one timer for them all, and one turn of the loop wakes them. An
    idle consumer's shard readers each wait a second between calls; at 1,000 shards that is
    1,000 timers a second in the loop's heap, each waking the loop on its own. Such a wait
    ends at most 20 ms later than asked, never earlier; shorter waits (a busy reader's 0.2 s
    between calls) are ``asyncio.sleep``.
    """

    def __init__(self) -> None:
        # Per event loop (one per thread at most): the waiters of each tick to come.
        self._ticks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Waiters] = (
            weakref.WeakKeyDictionary()
        )

    def now(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        if seconds < SHARED_FROM:
            await asyncio.sleep(seconds)
            return
        loop = asyncio.get_running_loop()
        try:
            ticks = self._ticks.get(loop)
            if ticks is None:
                ticks = self._ticks[loop] = {}
        except TypeError:  # a loop that takes no weak reference
            await asyncio.sleep(seconds)
            return
        tick = math.ceil((loop.time() + seconds) / SHARED_TICK)
        waiters = ticks.get(tick)
        if waiters is None:
            waiters = ticks[tick] = []
            loop.call_at(tick * SHARED_TICK, _wake, ticks, tick)
        waiter: asyncio.Future[None] = loop.create_future()
        waiters.append(waiter)
        await waiter


SYSTEM_CLOCK: Clock = SystemClock()


def _wake(ticks: _Waiters, tick: int) -> None:
    for waiter in ticks.pop(tick):
        if not waiter.done():  # a cancelled wait
            waiter.set_result(None)


class SleepingClock:
    """A given ``sleep`` and ``now`` (``time.monotonic`` unless given): the clock of a driver
    that takes a sleep function (and a time function)."""

    def __init__(
        self,
        sleep: Callable[[float], Awaitable[object]],
        now: Callable[[], float] = time.monotonic,
    ) -> None:
        self.sleep = sleep
        self.now = now


class BlockingClock(Time, Protocol):
    """The same for a synchronous driver: its waits block the thread."""

    def sleep(self, seconds: float) -> None: ...


class SystemBlockingClock:
    """``time.monotonic`` and ``time.sleep``."""

    def now(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


SYSTEM_BLOCKING_CLOCK: BlockingClock = SystemBlockingClock()

TimeSource = Time | Callable[[], float]
"""What a driver that predates :class:`Time` takes as its clock: either."""


def time_of(source: TimeSource) -> Callable[[], float]:
    """The time function of ``source``: a clock's ``now``, or ``source`` itself when it is a
    bare time function."""
    now = getattr(source, "now", None)
    if callable(now):
        return cast(Callable[[], float], now)
    if callable(source):
        return source
    raise TypeError(f"need a clock (with now()) or a time function, got {source!r}")


async def wait_event(clock: Clock, event: asyncio.Event, timeout: float) -> bool:
    """Wait until ``event`` is set or ``timeout`` seconds of ``clock`` have passed; whether it
    is set."""
    if event.is_set():
        return True
    waiter = asyncio.ensure_future(event.wait())
    sleeper = asyncio.ensure_future(clock.sleep(timeout))
    try:
        await asyncio.wait({waiter, sleeper}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiter.cancel()
        sleeper.cancel()
    return event.is_set()
