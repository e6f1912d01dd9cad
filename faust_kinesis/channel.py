"""KinesisChannel: a Faust channel whose events are Kinesis records, and whose sends are writes.

Reading lives in :mod:`faust_kinesis.reader` (a service started with the app), writing in
:mod:`faust_kinesis.writer` (a service whose core Producer starts on the first send); this
module is the Faust channel that ties them to agents, clones and queues.
"""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, cast

from faust.channels import Channel, SerializedChannel
from faust.types import AppT, ChannelT, CodecArg, FutureMessage, RecordMetadata
from faust.types.tuples import MessageSentCallback
from mode.utils.queues import ThrowableQueue

from faust_kinesis.faust_internals import subscribers
from faust_kinesis.queues import KinesisQueue
from faust_kinesis.reader import Reader
from faust_kinesis.sensor import kinesis_sensor
from faust_kinesis.settings import ReadSettings
from faust_kinesis.writer import Writer
from kinesis_core.consumer import (
    ConsumerConfig,
    InitialPosition,
    ShardStatus,
    parse_initial_position,
)
from kinesis_core.errors import ConfigurationError
from kinesis_core.producer import Producer, ProducerConfig
from kinesis_core.producer.partitioning import KeyFn, key_from
from kinesis_core.stream import StreamRef

if TYPE_CHECKING:
    from datetime import datetime

    from faust.types import SchemaT
    from faust.types.core import HeadersArg
    from faust.types.models import ModelArg

    from kinesis_core.aws.config import ClientConfig
    from kinesis_core.checkpoint import CheckpointStore

__all__ = ["KinesisChannel"]

_FAUST_KEYWORDS = frozenset(inspect.signature(Channel.__init__).parameters) - {"self", "app"}
"""The keywords Faust's ``Channel`` takes that ``KinesisChannel`` passes on (``**kwargs``):
``is_iterator``, ``active_partitions``, ``loop`` (clones get them from ``_clone_args``)."""


def _refuse_unknown(keywords: Mapping[str, Any]) -> None:
    """ConfigurationError naming the first keyword neither KinesisChannel nor Faust's Channel
    takes (Faust would raise a TypeError from inside its own ``__init__``)."""
    unknown = sorted(set(keywords) - _FAUST_KEYWORDS)
    if not unknown:
        return
    known = sorted(
        (set(inspect.signature(KinesisChannel.__init__).parameters) | _FAUST_KEYWORDS)
        - {"self", "app", "stream", "kwargs"}
    )
    close = difflib.get_close_matches(unknown[0], known, n=1)
    hint = f" (did you mean {close[0]}?)" if close else ""
    raise ConfigurationError(
        unknown[0],
        f"KinesisChannel takes no such keyword{hint}; it takes {', '.join(known)}",
    )


class KinesisChannel(SerializedChannel[Any]):
    """A Faust channel backed by a Kinesis stream: agents read it, ``send()`` writes it.

    ::

        orders = KinesisChannel(app, "orders", value_type=Order)

        @app.agent(orders, concurrency=4)
        async def process(stream):
            async for order in stream:
                ...

    ``stream`` is the stream's name or ARN. Create the channel before the app starts (at
    module level, like a topic). Keys and values use Faust's serializers
    (``key_serializer``/``value_serializer``, ``key_type``/``value_type``, or a ``schema``);
    the key is the record's partition key.

    ``safe_acks`` (default True): an event is acked only if its processing finished. Faust
    acks the event an agent raised on (or was cancelled or stopped in) as well; with
    ``safe_acks`` that ack does not count, so the shard's checkpoint stays before the event
    and it is delivered again after a restart or :meth:`redeliver`.

    Checkpoints go to ``checkpoint_store`` (default: a SQLite file in the app's ``datadir``)
    under ``application_name`` (default: the app id). ``initial_position`` (``TRIM_HORIZON``,
    ``LATEST``, also as strings in any case, ``AtTimestamp(t)`` or a datetime) defaults to
    Faust's ``consumer_auto_offset_reset`` (earliest: TRIM_HORIZON). ``consumer_config`` (a
    core :class:`~kinesis_core.consumer.ConsumerConfig`) says how the consumer reads
    (``checkpoint_interval``, ``leases``, ...); the channel sets its ``application_name``,
    ``initial_position``, ``auto_ack`` and ``close_timeout`` itself. ``drain_timeout`` is how
    long shutdown and re-delivery wait for in-flight events. ``producer_config`` (a core
    :class:`~kinesis_core.producer.ProducerConfig`) configures the writes of ``send()``.
    ``partition_key`` (a field name or a callable) gives the key of a value sent without one
    (``send(key=...)`` keeps Faust's own name for a message's key);
    with neither, the partition key is random.
    """

    reader: Reader
    """The service that reads the stream for the agents (started with the app)."""
    writer: Writer
    """The service that writes what ``send()`` is given (its producer starts on first use)."""
    partition_key: KeyFn | None

    def __init__(
        self,
        app: AppT,
        stream: str | StreamRef,
        *,
        client_config: ClientConfig | None = None,
        checkpoint_store: CheckpointStore | None = None,
        application_name: str | None = None,
        initial_position: InitialPosition | str | datetime | None = None,
        safe_acks: bool = True,
        drain_timeout: float = 30.0,
        consumer_config: ConsumerConfig | None = None,
        producer_config: ProducerConfig | None = None,
        partition_key: str | Callable[[Any], object] | None = None,
        schema: SchemaT[Any, Any] | None = None,
        key_type: ModelArg | None = None,
        value_type: ModelArg | None = None,
        key_serializer: CodecArg = None,
        value_serializer: CodecArg = None,
        allow_empty: bool | None = None,
        maxsize: int | None = None,
        root: ChannelT[Any] | None = None,
        queue: ThrowableQueue[Any] | None = None,
        **kwargs: Any,
    ) -> None:
        _refuse_unknown(kwargs)
        ref = StreamRef.of(stream)
        self.stream_name = str(ref)
        """The stream as given (name or ARN): the topic of this channel's messages."""
        if root is not None:
            # A subscriber's clone: it shares the root's reader and writer, and has a queue
            # that tells the reader what Faust throws away.
            origin = cast(KinesisChannel, root)
            self.reader = origin.reader
            self.writer = origin.writer
            self.partition_key = origin.partition_key
            if queue is None:
                size = maxsize if maxsize is not None else app.conf.stream_buffer_maxsize
                queue = KinesisQueue(self.reader.on_cleared, size, flow_control=app.flow_control)
        super().__init__(
            app,
            schema=schema,
            key_type=key_type,
            value_type=value_type,
            key_serializer=key_serializer,
            value_serializer=value_serializer,
            allow_empty=allow_empty,
            maxsize=maxsize,
            root=root,
            queue=queue,
            **kwargs,
        )
        if root is not None:
            return
        settings = ReadSettings(
            stream=ref,
            client_config=client_config,
            checkpoint_store=checkpoint_store,
            consumer_config=consumer_config if consumer_config is not None else ConsumerConfig(),
            application_name=application_name,
            initial_position=(
                None if initial_position is None else parse_initial_position(initial_position)
            ),
            safe_acks=safe_acks,
            drain_timeout=drain_timeout,
        )
        self.partition_key = key_from(partition_key) if partition_key is not None else None
        owner = f"KinesisChannel({self.stream_name})"
        # The writer is registered first so that it stops last: a reader's drain may send.
        self.writer = Writer(
            app,
            ref,
            client_config=client_config,
            producer_config=producer_config,
            owner=owner,
            beacon=app.beacon,
        )
        self.reader = Reader(
            app,
            settings,
            schema=self.schema,
            subscribers=subscribers(self),
            on_decode_error=self.on_decode_error,
            beacon=app.beacon,
        )
        app.service(cast(Any, self.writer))
        app.service(cast(Any, self.reader))
        sensor = kinesis_sensor(app)
        sensor.add_reader(self.reader)
        sensor.add_writer(self.writer)

    @property
    def settings(self) -> ReadSettings:
        """How this channel reads (stream, checkpoints, consumer configuration, acks)."""
        return self.reader.settings

    # -- Faust channel plumbing ---------------------------------------------------------------

    def _clone_args(self) -> Mapping[str, Any]:
        # Faust's hook for what a clone is made from (faust.Topic extends it the same way).
        return {**super()._clone_args(), "stream": self.stream_name}

    def clone(self, *, is_iterator: bool | None = None, **kwargs: Any) -> ChannelT[Any]:
        subchannel = super().clone(is_iterator=is_iterator, **kwargs)
        if cast(SerializedChannel[Any], subchannel).is_iterator:
            self.reader.subscribed()
        return subchannel

    def get_topic_name(self) -> str:
        return self.stream_name

    def __str__(self) -> str:
        return f"kinesis:{self.stream_name}"

    # -- writing ------------------------------------------------------------------------------

    async def send(
        self,
        *,
        key: Any = None,
        value: Any = None,
        partition: int | None = None,
        timestamp: float | None = None,
        headers: HeadersArg | None = None,
        schema: SchemaT[Any, Any] | None = None,
        key_serializer: CodecArg = None,
        value_serializer: CodecArg = None,
        callback: MessageSentCallback | None = None,
        force: bool = False,
    ) -> Awaitable[RecordMetadata]:
        """Write one record; returns (once the producer accepted it) a future that resolves
        with its ``RecordMetadata`` (``offset`` = sequence number) when Kinesis has it, or
        raises :class:`~kinesis_core.producer.PutFailedError`."""
        if key is None and self.partition_key is not None:
            key = self.partition_key(value)
        fut = self.as_future_message(
            key,
            value,
            partition,
            timestamp,
            headers,
            schema,
            key_serializer,
            value_serializer,
            callback,
        )
        return await self.publish_message(fut, wait=False)

    async def publish_message(
        self, fut: FutureMessage, wait: bool = True
    ) -> Awaitable[RecordMetadata]:
        """Write a prepared message (Faust's interface); ``wait`` waits for Kinesis."""
        await self.writer.publish(fut)
        if wait:
            await fut
        return fut

    @property
    def producer(self) -> Producer | None:
        """The core Producer behind ``send()`` once started (its ``metrics()``)."""
        return self.writer.producer

    # -- reading ------------------------------------------------------------------------------

    def redeliver(self) -> None:
        """Deliver everything not acked again: the consumer restarts from the checkpoints
        (after the in-flight events finish). Events held back by ``safe_acks`` come again."""
        self.reader.redeliver()

    def stats(self) -> dict[str, Any]:
        """Event counts and, per shard, position, checkpoint, lag (ms) and pending acks."""
        return self.reader.stats()

    def status(self) -> list[ShardStatus]:
        """The core consumer's ``ShardStatus`` list (empty while no consumer runs)."""
        return self.reader.status()
