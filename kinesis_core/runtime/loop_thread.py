"""The one event-loop thread a process runs for the library's synchronous callers.

A Beam DoFn or a script is not async; the core is. Rather than an event loop per caller, every
synchronous caller (blocking producers, the Beam source's fan-out subscriptions and checkpoint
writes) runs its coroutines on one daemon thread, started on first use and again in a forked
child (a loop does not survive a fork).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

THREAD_NAME = "kinesis-loop"


class LoopThread:
    """The process's event-loop thread, started on first use (and again after a fork).

    Synchronous callers (blocking producers, the Beam source's fan-out subscriptions and
    checkpoint writes) run their asyncio work here, so a process has one such loop.
    """

    _lock = threading.Lock()
    _instance: LoopThread | None = None

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self._run, name=THREAD_NAME, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    @classmethod
    def get(cls) -> LoopThread:
        with cls._lock:
            if cls._instance is None or cls._instance.pid != os.getpid():
                cls._instance = LoopThread()
            return cls._instance

    def check_caller(self) -> None:
        """Refuse calls from the loop thread itself: blocking there would deadlock it."""
        if threading.current_thread() is self.thread:
            raise RuntimeError(
                "this blocking call cannot be made from the event-loop thread it waits for "
                "(e.g. inside a result callback): use the asyncio API there"
            )

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``coro`` on the loop and block for its result (not from the loop's thread)."""
        try:
            self.check_caller()
        except RuntimeError:
            coro.close()
            raise
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            # The caller gives up: so does the coroutine, instead of finishing unseen (and
            # keeping what it opened).
            future.cancel()
            raise


def loop_thread_count() -> int:
    """Event-loop threads of this library running in this process (0 or 1)."""
    return sum(1 for t in threading.enumerate() if t.name == THREAD_NAME)
