"""The queue of a KinesisChannel's subscriber: says what Faust threw away, and when it has room."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from mode.utils.queues import FlowControlEvent, ThrowableQueue

from faust_kinesis.faust_internals import queued_items

AHEAD = 256
"""The most events the reader keeps in a queue ahead of its agent (fewer if the queue is
smaller). Events that wait long are promoted by the garbage collector to its older
generations, whose collections walk the whole heap, as a full default-sized queue (4,096
events) makes them; 256, refilled at half, lets the events die young (in a quarter of the
collector's first threshold, 700 allocations)."""


class KinesisQueue(ThrowableQueue[Any]):
    """A subscriber's queue that reports the items Faust clears out of it, and wakes the
    reader when it has room.

    The reader never blocks in ``put`` (Faust's ``clear()`` cancels blocked putters); it
    waits for room here and then uses ``put_nowait``.
    """

    def __init__(
        self,
        on_cleared: Callable[[list[Any]], None],
        maxsize: int,
        *,
        flow_control: FlowControlEvent,
    ) -> None:
        super().__init__(maxsize=maxsize, flow_control=flow_control, clear_on_resume=True)
        self._on_cleared = on_cleared
        self._room: asyncio.Future[None] | None = None
        self.high = min(maxsize, AHEAD) if maxsize > 0 else AHEAD
        """How full the reader fills the queue: :data:`AHEAD`, or ``maxsize`` if smaller."""

    def get_nowait(self) -> Any:
        item = super().get_nowait()
        if self._room is not None and 2 * self.qsize() <= self.high:
            self._wake()
        return item

    def clear(self) -> None:
        items = queued_items(self)
        super().clear()
        self._wake()
        self._on_cleared(items)

    @property
    def room(self) -> int:
        """How many more events the reader puts now (up to :attr:`high`)."""
        return max(self.high - self.qsize(), 0)

    async def wait_for_room(self) -> None:
        """Wait until the queue is down to half of :attr:`high`: refilling in bulk costs one
        task switch per half instead of one per event."""
        while self.qsize() >= self.high:
            self._room = asyncio.get_running_loop().create_future()
            await self._room

    def _wake(self) -> None:
        room = self._room
        if room is not None:
            self._room = None
            if not room.done():
                room.set_result(None)
