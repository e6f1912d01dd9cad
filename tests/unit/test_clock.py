"""kinesis_core.runtime.clock.SystemClock: long waits end together on a shared tick of the loop's
clock (one timer for all of them), never before they are due; a cancelled wait leaves the
others of its tick alone; short waits are asyncio.sleep."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from kinesis_core.aws.calls import Wait
from kinesis_core.runtime import clock
from kinesis_core.runtime.clock import SystemClock


@pytest.fixture(autouse=True)
def _short_waits_share(monkeypatch: pytest.MonkeyPatch) -> None:
    """Waits of 50 ms and more share ticks here: the tests take milliseconds, not seconds."""
    monkeypatch.setattr(clock, "SHARED_FROM", 0.05)


def _count_timers(loop: asyncio.AbstractEventLoop) -> list[float]:
    timers: list[float] = []
    call_at = loop.call_at

    def counted(when: float, callback: Any, *args: Any, **kwargs: Any) -> asyncio.TimerHandle:
        timers.append(when)
        return call_at(when, callback, *args, **kwargs)

    loop.call_at = counted  # type: ignore[method-assign,assignment]
    return timers


def test_waits_ending_on_one_tick_share_one_timer_and_none_ends_early() -> None:
    system = SystemClock()

    async def main() -> tuple[list[float], list[tuple[float, float]]]:
        loop = asyncio.get_running_loop()
        timers = _count_timers(loop)
        start = loop.time()

        async def wait(seconds: float) -> tuple[float, float]:
            await system.sleep(seconds)
            return start + seconds, loop.time()

        ends = await asyncio.gather(*(wait(0.1 + i * 1e-4) for i in range(40)))
        return timers, ends

    timers, ends = asyncio.run(main())
    assert len(timers) <= 2, timers  # 40 waits within 4 ms: one tick, or two at a border
    assert all(woke >= due for due, woke in ends), ends


def test_a_cancelled_wait_leaves_the_others_of_its_tick_alone() -> None:
    system = SystemClock()

    async def main() -> list[Any]:
        waits = [asyncio.ensure_future(system.sleep(0.08)) for _ in range(3)]
        await asyncio.sleep(0)
        waits[1].cancel()
        return await asyncio.gather(*waits, return_exceptions=True)

    first, cancelled, last = asyncio.run(main())
    assert first is None
    assert last is None
    assert isinstance(cancelled, asyncio.CancelledError)


def test_short_waits_are_the_loops_own_and_one_clock_serves_loop_after_loop() -> None:
    system = SystemClock()

    async def main() -> int:
        timers = _count_timers(asyncio.get_running_loop())
        await system.sleep(0.0)
        await system.sleep(0.01)  # under SHARED_FROM: a timer of its own
        await system.sleep(0.06)
        return len(timers)

    assert asyncio.run(main()) == 2
    assert asyncio.run(main()) == 2


def test_a_readers_default_idle_wait_is_long_enough_to_share_a_tick(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The wait after an empty answer at the tip (1 s by default) starts a little after the
    answer was taken: it must still be one the clock shares."""
    from kinesis_core.consumer import TRIM_HORIZON
    from kinesis_core.consumer.lineage import ShardNode
    from kinesis_core.consumer.polling import PollingRead
    from kinesis_core.shards.hashing import MAX_HASH_KEY

    monkeypatch.undo()  # the clock's own threshold
    machine = PollingRead(ShardNode("shard-1", (), (0, MAX_HASH_KEY), True), TRIM_HORIZON)
    machine.next_action(0.0)
    machine.on_iterator("it-0")
    machine.next_action(1.0)
    machine.on_records(1.01, {"Records": [], "MillisBehindLatest": 0, "NextShardIterator": "n"})
    wait = machine.next_action(1.05)  # the driver asks after its own work
    assert isinstance(wait, Wait)
    assert wait.until - 1.05 >= clock.SHARED_FROM


class _Ticking:
    """A clock of the Clock flavour: its own time and its own waits."""

    def __init__(self) -> None:
        self.t = 5.0
        self.slept: list[float] = []

    def now(self) -> float:
        return self.t

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.t += seconds


def test_both_flavours_are_one_protocol_of_time() -> None:
    async_flavour: clock.Clock = _Ticking()
    blocking: clock.BlockingClock = clock.SYSTEM_BLOCKING_CLOCK
    for flavour in (async_flavour, blocking, clock.SYSTEM_CLOCK):
        time: clock.Time = flavour
        assert isinstance(time.now(), float)


def test_time_of_takes_a_clock_or_a_bare_time_function() -> None:
    ticking = _Ticking()
    assert clock.time_of(ticking)() == 5.0
    assert clock.time_of(clock.SYSTEM_BLOCKING_CLOCK) == clock.SYSTEM_BLOCKING_CLOCK.now
    assert clock.time_of(lambda: 7.0)() == 7.0
    with pytest.raises(TypeError, match="need a clock"):
        clock.time_of(3.0)  # type: ignore[arg-type]


def test_a_sleeping_clock_takes_its_time_function_too() -> None:
    async def nap(seconds: float) -> None:
        pass

    assert clock.SleepingClock(nap, lambda: 42.0).now() == 42.0
    assert clock.SleepingClock(nap).sleep is nap
