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

A sink only writes: it is a :class:`~faust_kinesis.writer.Writer` (a core Producer, one app
service) and a Faust schema for the values, with no reader and no channel.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from faust import current_event
from faust.types import AppT, EventT, FutureMessage, RecordMetadata
from faust.types.tuples import PendingMessage

from faust_kinesis.message import KinesisMessage
from faust_kinesis.sensor import kinesis_sensor
from faust_kinesis.writer import Writer
from kinesis_core.producer import Producer, ProducerConfig
from kinesis_core.producer.partitioning import key_from
from kinesis_core.stream import StreamRef

if TYPE_CHECKING:
    from faust.types import ChannelT, CodecArg, SchemaT
    from faust.types.core import OpenHeadersArg
    from faust.types.models import ModelArg

    from kinesis_core.aws.config import ClientConfig

__all__ = ["KinesisSink"]

logger = logging.getLogger(__name__)


class KinesisSink:
    """``@app.agent(source, sink=[KinesisSink(app, "out")])``: write what the agent yields.

    ``stream`` is the stream's name or ARN. ``partition_key`` (a field name or a callable of
    the value) gives the record's key, hence its partition key; without it records spread at
    random.
    Values (and keys) are serialized as on a Faust topic: ``value_serializer``,
    ``key_serializer``, ``value_type``, ``key_type`` or a ``schema``, else the app's defaults.
    ``client_config`` and ``producer_config`` configure the core Producer.

    ``wait=True`` returns only once the write is confirmed, instead of holding the source
    event: use it when the agent acks events itself in batches (``stream.take()`` acks the
    whole batch when the next one starts, not event by event).

    ``record_ids=True`` turns the producer's record ids on: what the agent yields while it
    handles an event of a :class:`~faust_kinesis.KinesisChannel` gets an id derived from that
    event's record and the output's index among the event's outputs
    (``KinesisMessage.next_record_id``), the same when the event is processed again after a
    crash, so a deduplicating reader drops the copy (docs/effectively-once.md); anything
    else gets an automatic id. Without ``partition_key``, the input record's part of a derived
    id is the record's partition key, so that a copy lands in the shard of the first, where
    the reader's window holds its id, and the outputs of one input aggregate make one range
    there.
    """

    def __init__(
        self,
        app: AppT,
        stream: str | StreamRef,
        *,
        partition_key: str | Callable[[Any], object] | None = None,
        wait: bool = False,
        record_ids: bool = False,
        client_config: ClientConfig | None = None,
        producer_config: ProducerConfig | None = None,
        schema: SchemaT[Any, Any] | None = None,
        key_type: ModelArg | None = None,
        value_type: ModelArg | None = None,
        key_serializer: CodecArg = None,
        value_serializer: CodecArg = None,
    ) -> None:
        ref = StreamRef.of(stream)
        self.app = app
        self.stream_name = str(ref)
        """The stream as given (name or ARN)."""
        self.partition_key = key_from(partition_key) if partition_key is not None else None
        self.wait = wait
        self.record_ids = record_ids
        if record_ids:
            producer_config = dataclasses.replace(
                producer_config if producer_config is not None else ProducerConfig(),
                record_ids=True,
            )
        self.failures = 0
        self._error: BaseException | None = None
        if schema is None:  # as a Faust channel makes its schema
            schema_class: Any = app.conf.Schema
            schema = cast("SchemaT[Any, Any]", schema_class())
        schema.update(
            key_type=key_type,
            value_type=value_type,
            key_serializer=key_serializer,
            value_serializer=value_serializer,
        )
        self.schema = schema
        self.writer = Writer(
            app,
            ref,
            client_config=client_config,
            producer_config=producer_config,
            owner=repr(self),
            beacon=app.beacon,
        )
        app.service(cast(Any, self.writer))
        kinesis_sensor(app).add_writer(self.writer)

    @property
    def producer(self) -> Producer | None:
        """The core Producer once started (its ``metrics()``)."""
        return self.writer.producer

    async def __call__(self, value: Any) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        event = current_event()
        record_id = None
        if self.record_ids and event is not None and isinstance(event.message, KinesisMessage):
            record_id = event.message.next_record_id()
        fut = await self.writer.publish(self.message(value), record_id)
        if self.wait or event is None:
            await fut
            return
        event.message.incref()
        future = asyncio.ensure_future(fut)
        future.add_done_callback(lambda done: self._release(event, done))

    def message(self, value: Any) -> FutureMessage:
        """``value`` (and its key) serialized, as the writer takes it. A sink is no channel:
        the message's ``channel`` is None, its ``topic`` the stream."""
        headers: OpenHeadersArg = {}
        key: Any = None
        if self.partition_key is not None:
            key, headers = self.schema.dumps_key(
                self.app, self.partition_key(value), headers=headers
            )
        data, headers = self.schema.dumps_value(self.app, value, headers=headers)
        return FutureMessage(
            PendingMessage(
                cast("ChannelT[Any]", None),
                key,
                data,
                partition=None,
                timestamp=None,
                headers=headers,
                key_serializer=None,
                value_serializer=None,
                callback=None,
                topic=self.stream_name,
            )
        )

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
            self.stream_name,
            message,
            error,
        )
        if isinstance(message, KinesisMessage):
            message.fail()

    def __repr__(self) -> str:
        return f"KinesisSink({self.stream_name!r})"
