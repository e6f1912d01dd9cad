"""The writing half of a KinesisChannel: Faust's ``publish_message`` on the core Producer."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import TYPE_CHECKING, Any, cast

from faust.types import TP, FutureMessage, RecordMetadata
from mode.utils.futures import maybe_async

from faust_kinesis.reader import shard_number
from kinesis_core.errors import ValidationError
from kinesis_core.producer import Producer, PutFailedError, RecordResult
from kinesis_core.producer.partitioning import random_partition_key

if TYPE_CHECKING:
    from faust.types import ProducerT

    from faust_kinesis.channel import KinesisChannel


class Writer:
    """The producing half: one core Producer per channel, started on the first send."""

    def __init__(self, channel: KinesisChannel) -> None:
        self.channel = channel
        self.producer: Producer | None = None
        self._starting: asyncio.Task[Producer] | None = None
        self._callbacks: set[asyncio.Future[Any]] = set()

    async def started(self) -> Producer:
        if self.producer is not None:
            return self.producer
        if self._starting is None:
            self._starting = asyncio.ensure_future(self._start())
        return await asyncio.shield(self._starting)

    async def _start(self) -> Producer:
        channel = self.channel
        producer = Producer(
            channel.stream_name, client_config=channel.client_config, config=channel.producer_config
        )
        try:
            await producer.start()
        except BaseException:
            self._starting = None
            raise
        self.producer = producer
        return producer

    async def publish(self, fut: FutureMessage) -> FutureMessage:
        pending = fut.message
        if pending.headers:
            raise ValidationError("headers", "Kinesis records have no headers")
        if pending.partition is not None:
            raise ValidationError(
                "partition", "Kinesis routes records by key; give key= instead of partition="
            )
        data = _as_bytes(pending.value, "value") if pending.value is not None else b""
        if pending.key is None:
            partition_key = random_partition_key()
        else:
            key_bytes = _as_bytes(pending.key, "key")
            try:
                partition_key = key_bytes.decode("utf-8")
            except UnicodeDecodeError:
                raise ValidationError(
                    "key", "the serialized key is the partition key, so it must be UTF-8 text"
                ) from None
        producer = await self.started()
        result = await producer.submit(data, partition_key)
        state = self.channel.app.sensors.on_send_initiated(
            cast("ProducerT", producer),
            self.channel.stream_name,
            pending,
            len(partition_key),
            len(data),
        )
        result.add_done_callback(lambda done: self._done(fut, state, done))
        return fut

    def _done(self, fut: FutureMessage, state: Any, done: asyncio.Future[RecordResult]) -> None:
        sensors = self.channel.app.sensors
        faust_producer = cast("ProducerT", self.producer)
        error = asyncio.CancelledError() if done.cancelled() else done.exception()
        if error is None:
            result = done.result()
            if result.success:
                assert result.shard_id is not None
                assert result.sequence_number is not None
                tp = TP(self.channel.stream_name, shard_number(result.shard_id))
                metadata = RecordMetadata(
                    topic=tp.topic,
                    partition=tp.partition,
                    topic_partition=tp,
                    offset=result.sequence_number,
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

    async def close(self) -> None:
        if self._starting is not None:
            with contextlib.suppress(Exception):
                await self._starting
        if self.producer is not None:
            await self.producer.close()


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
