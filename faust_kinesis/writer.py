"""Writing Faust messages to a stream: Faust's ``publish_message`` on the core Producer.

One :class:`Writer` per KinesisChannel (behind ``send()``) and per KinesisSink. It is a service
of the app: its producer starts on the first write, and is flushed and closed when the app
stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import TYPE_CHECKING, Any, cast

from faust.types import FutureMessage, RecordMetadata
from mode import Service
from mode.utils.futures import maybe_async

from faust_kinesis.partitions import shard_tp
from kinesis_core.errors import ValidationError
from kinesis_core.lifecycle import LifecycleError, State
from kinesis_core.producer import Producer, PutFailedError, RecordResult
from kinesis_core.producer.partitioning import random_partition_key
from kinesis_core.record_ids import derived_partition_key

if TYPE_CHECKING:
    from faust.types import AppT, ProducerT

    from kinesis_core.aws.config import ClientConfig
    from kinesis_core.producer import ProducerConfig
    from kinesis_core.stream import StreamRef


class Writer(Service):
    """Writes one stream for one app: a core Producer, started on the first write.

    A producer that fails to start is not kept: the next write tries again. Once the app
    stops, writes raise :class:`~kinesis_core.lifecycle.LifecycleError`.
    """

    mundane_level = "debug"

    def __init__(
        self,
        app: AppT,
        stream: StreamRef,
        *,
        client_config: ClientConfig | None = None,
        producer_config: ProducerConfig | None = None,
        owner: str,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.app = app
        self.stream = stream
        self.topic = str(stream)
        """The stream as given (name or ARN): the topic of its messages and metadata."""
        self.owner = owner
        self.client_config = client_config
        self.producer_config = producer_config
        self.producer: Producer | None = None
        self._starting: asyncio.Task[Producer] | None = None
        self._callbacks: set[asyncio.Future[Any]] = set()

    async def on_stop(self) -> None:
        if self._starting is not None:
            with contextlib.suppress(Exception):
                await self._starting
        if self.producer is not None:
            await self.producer.close()

    def __str__(self) -> str:
        return f"{self.owner} writer"

    @property
    def label(self) -> str:
        return str(self)

    @property
    def shortlabel(self) -> str:
        return str(self)

    async def running_producer(self) -> Producer:
        """The producer, started on the first call (once, however many calls wait)."""
        if self.producer is not None:
            return self.producer
        if self._starting is None:
            self._starting = asyncio.ensure_future(self._start_producer())
        return await asyncio.shield(self._starting)

    async def _start_producer(self) -> Producer:
        producer = Producer(
            self.topic, client_config=self.client_config, producer_config=self.producer_config
        )
        try:
            await producer.start()
        except BaseException:
            self._starting = None
            raise
        self.producer = producer
        return producer

    async def publish(self, fut: FutureMessage, record_id: str | None = None) -> FutureMessage:
        """Hand a serialized message to the producer; ``fut`` resolves with its
        ``RecordMetadata`` once Kinesis has it, or raises ``PutFailedError``. ``record_id``:
        the record's id (a producer with ``record_ids`` on), which makes its partition key when
        the message has no key (:func:`~kinesis_core.record_ids.derived_partition_key`), so
        that a copy goes to the shard of the first."""
        if self.should_stop:
            raise LifecycleError(str(self), State.CLOSED, "write")
        pending = fut.message
        if pending.headers:
            raise ValidationError("headers", "Kinesis records have no headers")
        if pending.partition is not None:
            raise ValidationError(
                "partition", "Kinesis routes records by key; give key= instead of partition="
            )
        data = _as_bytes(pending.value, "value") if pending.value is not None else b""
        if pending.key is None:
            # An id's copies must land in one shard, where a reader's window catches them.
            partition_key = (
                random_partition_key() if record_id is None else derived_partition_key(record_id)
            )
        else:
            key_bytes = _as_bytes(pending.key, "key")
            try:
                partition_key = key_bytes.decode("utf-8")
            except UnicodeDecodeError:
                raise ValidationError(
                    "key", "the serialized key is the partition key, so it must be UTF-8 text"
                ) from None
        producer = await self.running_producer()
        result = await producer.submit(data, partition_key, record_id=record_id)
        state = self.app.sensors.on_send_initiated(
            cast("ProducerT", producer), self.topic, pending, len(partition_key), len(data)
        )
        result.add_done_callback(lambda done: self._done(fut, state, done))
        return fut

    def _done(self, fut: FutureMessage, state: Any, done: asyncio.Future[RecordResult]) -> None:
        sensors = self.app.sensors
        faust_producer = cast("ProducerT", self.producer)
        error = asyncio.CancelledError() if done.cancelled() else done.exception()
        if error is None:
            result = done.result()
            if result.success:
                assert result.shard_id is not None
                assert result.sequence_number is not None
                tp = shard_tp(self.topic, result.shard_id)
                metadata = RecordMetadata(
                    topic=tp.topic,
                    partition=tp.partition,
                    topic_partition=tp,
                    offset=int(result.sequence_number),  # Faust's offsets are ints
                    timestamp=time.time(),
                    timestamp_type=0,
                )
                if not fut.done():
                    fut.set_result(metadata)
                sensors.on_send_completed(faust_producer, state, metadata)
            else:
                error = PutFailedError([(0, result)])
        if error is not None:
            if not fut.done():
                fut.set_exception(error)
            sensors.on_send_error(faust_producer, error, state)
        callback = fut.message.callback
        if callback is not None:
            outcome = callback(fut)
            if outcome is not None:
                task = asyncio.ensure_future(maybe_async(outcome))
                self._callbacks.add(task)
                task.add_done_callback(self._callbacks.discard)


def _as_bytes(value: object, field: str) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, str):
        return value.encode()
    raise ValidationError(
        field, f"must serialize to bytes, got {type(value).__name__}: pick a serializer"
    )
