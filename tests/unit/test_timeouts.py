"""Deadlines that never swallow a cancellation (kinesis_core.runtime.timeouts): a task cancelled in
the same step as the answer it awaits arrives stops, where ``asyncio.wait_for`` on Python 3.10 and
3.11 returned the answer and let the task go on (CPython gh-86296). A shard reader's waits use
them, so a consumer closing at that moment no longer waits forever for it."""

from __future__ import annotations

import ast
import asyncio
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest

from kinesis_core.fanout.connection import _wait
from kinesis_core.runtime.timeouts import within

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("kinesis_core", "beam_kinesis", "faust_kinesis")


def _cancelled_as_the_event_is_set(
    waiting: Callable[[asyncio.Event], Coroutine[Any, Any, object]],
) -> object:
    """What a task awaiting ``waiting(event)`` ends with when it is cancelled in the same step
    as ``event`` is set."""

    async def main() -> object:
        event = asyncio.Event()
        task = asyncio.ensure_future(waiting(event))
        for _ in range(3):
            await asyncio.sleep(0)
        event.set()
        task.cancel()
        try:
            return await task
        except asyncio.CancelledError:
            return "cancelled"

    return asyncio.run(main())


def test_within_lets_a_cancellation_through_when_the_answer_arrives_in_the_same_step() -> None:
    async def waiting(event: asyncio.Event) -> str:
        async with within(5):
            await event.wait()
        return "went on"

    assert _cancelled_as_the_event_is_set(waiting) == "cancelled"


def test_within_still_expires() -> None:
    async def main() -> None:
        with pytest.raises(asyncio.TimeoutError):
            async with within(0.01):
                await asyncio.Event().wait()
        async with within(None):
            await asyncio.sleep(0)

    asyncio.run(main())


def test_a_fan_out_wait_cancelled_as_it_is_woken_stops() -> None:
    """The wait of a subscription for its answer: with ``asyncio.wait_for`` a reader cancelled
    then kept subscribing, and a test awaiting its end hung until pytest's timeout."""

    async def waiting(event: asyncio.Event) -> str:
        await _wait(event, event.is_set, 5)
        return "went on"

    assert _cancelled_as_the_event_is_set(waiting) == "cancelled"


def test_the_packages_use_no_asyncio_wait_for() -> None:
    """``asyncio.wait_for`` swallows such cancellations on the Pythons the project supports;
    ``kinesis_core.runtime.timeouts.within`` is the deadline to use."""
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if (
                    isinstance(node, ast.Attribute)
                    and node.attr == "wait_for"
                    and isinstance(node.value, ast.Name)
                    and node.value.id == "asyncio"
                ):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert found == []
