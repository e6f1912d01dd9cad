"""The library's event-loop thread: a blocking call that times out takes its coroutine with it."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading

import pytest

from kinesis_core.runtime.loop_thread import LoopThread


def test_run_returns_the_coroutines_result() -> None:
    async def answer() -> int:
        await asyncio.sleep(0)
        return 42

    assert LoopThread.get().run(answer()) == 42


def test_a_timed_out_run_cancels_its_coroutine() -> None:
    started = threading.Event()
    ended = threading.Event()
    outcome: list[str] = []

    async def slow() -> None:
        started.set()
        try:
            await asyncio.sleep(30)
            outcome.append("finished")
        except asyncio.CancelledError:
            outcome.append("cancelled")
            raise
        finally:
            ended.set()

    with pytest.raises(concurrent.futures.TimeoutError):
        LoopThread.get().run(slow(), timeout=0.2)
    assert started.is_set()
    assert ended.wait(5), "the coroutine kept running after the caller gave up"
    assert outcome == ["cancelled"]


def test_a_call_from_the_loop_thread_is_refused_and_closes_its_coroutine() -> None:
    loop_thread = LoopThread.get()

    async def inner() -> None:
        return None

    async def from_the_loop() -> str:
        coro = inner()
        try:
            loop_thread.run(coro)
        except RuntimeError as exc:
            return f"{exc} / closed={coro.cr_frame is None}"
        return "no error"

    said = loop_thread.run(from_the_loop())
    assert "cannot be made from the event-loop thread" in said
    assert said.endswith("closed=True")
