"""The time of the drivers, injected: what "now" is and how a driver waits.

The sans-I/O machines take ``now`` as an argument; the drivers read it from a :class:`Clock`
and wait through it. :data:`SYSTEM_CLOCK` is the event loop's own (``time.monotonic`` and
``asyncio.sleep``); a test gives a consumer a clock whose time only moves when every task
waits (tests/fakes/clock.py), so a test of minutes of timeouts runs in milliseconds and
asserts what happened, not how long it took.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Protocol


class Clock(Protocol):
    """Seconds on a monotonic clock, and a way to wait on it."""

    def now(self) -> float: ...

    def sleep(self, seconds: float) -> Awaitable[object]: ...


class SystemClock:
    """``time.monotonic`` and ``asyncio.sleep`` (the event loop's clock)."""

    def now(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


SYSTEM_CLOCK: Clock = SystemClock()


class SleepingClock:
    """``time.monotonic`` and a given ``sleep`` (a driver that takes a sleep function)."""

    def __init__(self, sleep: Callable[[float], Awaitable[object]]) -> None:
        self.sleep = sleep

    def now(self) -> float:
        return time.monotonic()


class BlockingClock(Protocol):
    """The same for a synchronous driver: its waits block the thread."""

    def now(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...


class SystemBlockingClock:
    """``time.monotonic`` and ``time.sleep``."""

    def now(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


SYSTEM_BLOCKING_CLOCK: BlockingClock = SystemBlockingClock()


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
