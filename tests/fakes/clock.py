"""A clock for the unit tests of asyncio drivers: time moves only when every task waits.

``FakeClock.run(main())`` runs ``main`` the way ``asyncio.run`` does, on an event loop whose
time is the fake clock's. Whenever no task can run and no socket is ready, the loop would sleep
until its next timer: instead the clock jumps to that timer. So a consumer given
``clock=fake`` (its checkpoint interval, backoffs, lease renewals and failover times) and the
test's own ``asyncio.sleep`` and ``asyncio.wait_for`` all run on one time that passes as fast as
the code runs, and the order of what happens is the order it would have on a real clock.

Only for code that waits on nothing outside the loop: a thread doing work in the background
would see time jump while it works.
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Coroutine
from typing import Any, TypeVar

_T = TypeVar("_T")


class FakeClock:
    """Seconds since the start of the run; :meth:`sleep` waits on them."""

    def __init__(self, start: float = 1000.0) -> None:
        self._now = start

    def now(self) -> float:
        return self._now

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    def run(self, main: Coroutine[Any, Any, _T]) -> _T:
        """``asyncio.run(main)`` on this clock's time."""
        loop = _Loop(self)
        try:
            asyncio.set_event_loop(loop)
            return loop.run_until_complete(main)
        finally:
            try:
                tasks = asyncio.all_tasks(loop)
                for task in tasks:
                    task.cancel()
                loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
                loop.run_until_complete(loop.shutdown_asyncgens())
            finally:
                asyncio.set_event_loop(None)
                loop.close()

    def _jump(self, seconds: float) -> None:
        self._now += seconds


class _Selector(selectors.DefaultSelector):  # type: ignore[misc, valid-type]
    """Waits for nothing: a select that would block until a timer jumps the clock there."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__()
        self._clock = clock

    def select(self, timeout: float | None = None) -> list[Any]:
        ready: list[Any] = super().select(0)
        if ready or (timeout is not None and timeout <= 0):
            return ready
        if timeout is None:  # no timer at all: only a socket or another thread can wake us
            return super().select(None)  # type: ignore[no-any-return]
        self._clock._jump(timeout)
        return []


class _Loop(asyncio.SelectorEventLoop):
    def __init__(self, clock: FakeClock) -> None:
        super().__init__(_Selector(clock))
        self._fake_clock = clock

    def time(self) -> float:
        return self._fake_clock.now()


class RecordingClock(FakeClock):
    """A :class:`FakeClock` that keeps every wait asked of it (``waits``, in seconds): a test
    sees which waits ran on the clock it injected."""

    def __init__(self, start: float = 1000.0) -> None:
        super().__init__(start)
        self.waits: list[float] = []

    async def sleep(self, seconds: float) -> None:
        self.waits.append(seconds)
        await super().sleep(seconds)
