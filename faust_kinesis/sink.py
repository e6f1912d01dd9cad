"""KinesisSink: what an agent yields is written to Kinesis; its source event is acked only
once Kinesis has the record.

Faust awaits a sink before the agent goes on, and the source event is acked when the agent
asks for the next one, so a sink that only returns after the write is confirmed keeps
at-least-once, but serializes one write round trip per event. The sink keeps it and stays
fast: it takes a reference on the source event's message (Faust's own refcount, as its topic
conductor does for each channel an event goes to) and releases it when the write succeeds.
The stream's ack then only drops its own reference; the final ack, which moves the source's
checkpoint or Kafka offset, comes with the last write. A write that fails for good never
releases it: the source is not checkpointed past the event, the failure is logged, and the
next call raises it in the agent.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from faust import current_event
from faust.types import AppT, EventT, RecordMetadata

from faust_kinesis.channel import KinesisChannel
from faust_kinesis.message import KinesisMessage

__all__ = ["KinesisSink"]

logger = logging.getLogger(__name__)


class KinesisSink:
    """``@app.agent(source, sink=[KinesisSink(app, "out")])``: write what the agent yields.

    ``key`` (a field name or a callable of the value) gives the record's key, hence its
    partition key; without it records spread at random. The other keyword arguments
    (serializers, ``client_config``, ``producer_config``, ...) are :class:`KinesisChannel`'s.

    ``wait=True`` returns only once the write is confirmed, instead of holding the source
    event: use it when the agent acks events itself in batches (``stream.take()`` acks the
    whole batch when the next one starts, not event by event).
    """

    def __init__(
        self,
        app: AppT,
        stream_name: str,
        *,
        key: str | Callable[[Any], object] | None = None,
        wait: bool = False,
        **channel_options: Any,
    ) -> None:
        self.channel = KinesisChannel(app, stream_name, default_key=key, **channel_options)
        self.wait = wait
        self.failures = 0
        self._error: BaseException | None = None

    async def __call__(self, value: Any) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        event = current_event()
        fut = await self.channel.send(value=value)
        if self.wait or event is None:
            await fut
            return
        event.message.incref()
        future = asyncio.ensure_future(fut)
        future.add_done_callback(lambda done: self._release(event, done))

    def _release(self, event: EventT[Any], done: asyncio.Future[RecordMetadata]) -> None:
        error = asyncio.CancelledError() if done.cancelled() else done.exception()
        if error is None:
            event.ack()
            return
        self.failures += 1
        self._error = error
        message = event.message
        logger.error(
            "write to %s failed; the source event %r stays unacked: %s",
            self.channel.stream_name,
            message,
            error,
        )
        if isinstance(message, KinesisMessage):
            message.fail()

    def __repr__(self) -> str:
        return f"KinesisSink({self.channel.stream_name!r})"
