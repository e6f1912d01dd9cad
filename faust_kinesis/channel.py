"""KinesisChannel: a Faust channel whose events are Kinesis records, and whose sends are writes.

Reading lives in :mod:`faust_kinesis.reader` (a service started with the app), writing in
:mod:`faust_kinesis.writer` (a core Producer started on the first send); this module is the
Faust channel that ties them to agents, clones and queues.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, cast

from faust.channels import SerializedChannel
from faust.types import AppT, ChannelT, CodecArg, FutureMessage, RecordMetadata
from faust.types.tuples import MessageSentCallback
from mode.utils.queues import ThrowableQueue

from faust_kinesis.reader import KinesisQueue, Reader
from faust_kinesis.writer import Writer
from kinesis_core.checkpoint import MemoryCheckpointStore
from kinesis_core.consumer import Consumer, InitialPosition, ShardStatus
from kinesis_core.errors import ConfigurationError, ValidationError
from kinesis_core.producer import Producer, ProducerConfig
from kinesis_core.producer.partitioning import key_from

if TYPE_CHECKING:
    from faust.types import SchemaT
    from faust.types.core import HeadersArg
    from faust.types.models import ModelArg

    from kinesis_core.checkpoint import CheckpointStore
    from kinesis_core.client import ClientConfig

__all__ = ["KinesisChannel"]

_RESERVED_CONSUMER_OPTIONS = frozenset(
    {
        "stream",
        "client_config",
        "checkpoint_store",
        "application_name",
        "initial_position",
        "auto_ack",
        "close_timeout",
    }
)


class KinesisChannel(SerializedChannel[Any]):
    """A Faust channel backed by a Kinesis stream: agents read it, ``send()`` writes it.

    ::

        orders = KinesisChannel(app, "orders", value_type=Order)

        @app.agent(orders, concurrency=4)
        async def process(stream):
            async for order in stream:
                ...

    Create it before the app starts (at module level, like a topic). Keys and values use
    Faust's serializers (``key_serializer``/``value_serializer``, ``key_type``/``value_type``,
    or a ``schema``); the key is the record's partition key.

    ``safe_acks`` (default True): an event is acked only if its processing finished. Faust
    acks the event an agent raised on (or was cancelled or stopped in) as well; with
    ``safe_acks`` that ack does not count, so the shard's checkpoint stays before the event
    and it is delivered again after a restart or :meth:`redeliver`.

    Checkpoints go to ``checkpoint_store`` (default: a SQLite file in the app's ``datadir``)
    under ``application_name`` (default: the app id). ``initial_position`` defaults to
    Faust's ``consumer_auto_offset_reset`` (earliest: TRIM_HORIZON). ``consumer_options`` go
    to the core Consumer as they are (``checkpoint_interval``, lease settings, ...).
    ``drain_timeout`` is how long shutdown and re-delivery wait for in-flight events.
    ``default_key`` (a field name or a callable) gives the key of a value sent without one;
    with neither, the partition key is random.
    """

    def __init__(
        self,
        app: AppT,
        stream_name: str,
        *,
        client_config: ClientConfig | None = None,
        checkpoint_store: CheckpointStore | None = None,
        application_name: str | None = None,
        initial_position: InitialPosition | None = None,
        safe_acks: bool = True,
        drain_timeout: float = 30.0,
        consumer_options: Mapping[str, Any] | None = None,
        producer_config: ProducerConfig | None = None,
        default_key: str | Callable[[Any], object] | None = None,
        schema: SchemaT[Any, Any] | None = None,
        key_type: ModelArg | None = None,
        value_type: ModelArg | None = None,
        key_serializer: CodecArg = None,
        value_serializer: CodecArg = None,
        allow_empty: bool | None = None,
        maxsize: int | None = None,
        root: ChannelT[Any] | None = None,
        **kwargs: Any,
    ) -> None:
        if not stream_name:
            raise ValidationError("stream_name", "must be a stream name or ARN")
        self.stream_name = stream_name
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
            **kwargs,
        )
        if root is not None:
            return  # a subscriber's clone: everything else lives on the root channel
        if drain_timeout < 0:
            raise ValidationError("drain_timeout", f"must be >= 0 seconds, got {drain_timeout}")
        options = dict(consumer_options or {})
        reserved = sorted(_RESERVED_CONSUMER_OPTIONS & options.keys())
        if reserved:
            raise ConfigurationError(
                f"consumer_options: {', '.join(reserved)} are set by KinesisChannel; use its "
                "own arguments (drain_timeout instead of close_timeout)"
            )
        try:  # refuse bad consumer options now, not when the first agent subscribes
            Consumer(stream_name, checkpoint_store=MemoryCheckpointStore(), **options)
        except TypeError as exc:
            raise ConfigurationError(f"consumer_options: {exc}") from None
        self.client_config = client_config
        self.checkpoint_store = checkpoint_store
        self.application_name = application_name
        self.initial_position = initial_position
        self.safe_acks = safe_acks
        self.drain_timeout = drain_timeout
        self.consumer_options: dict[str, Any] = options
        self.producer_config = producer_config
        self.default_key = key_from(default_key) if default_key is not None else None
        self._writer = Writer(self)
        self._reader = Reader(self, beacon=app.beacon)
        app.service(cast(Any, self._reader))

    # -- Faust channel plumbing ---------------------------------------------------------------

    @property
    def _kinesis_root(self) -> KinesisChannel:
        return cast(KinesisChannel, self._root) if self._root is not None else self

    def _clone_args(self) -> Mapping[str, Any]:
        return {**super()._clone_args(), "stream_name": self.stream_name}

    def clone(self, *, is_iterator: bool | None = None, **kwargs: Any) -> ChannelT[Any]:
        subchannel = super().clone(is_iterator=is_iterator, **kwargs)
        if cast(SerializedChannel[Any], subchannel).is_iterator:
            self._kinesis_root._reader.subscribed()
        return subchannel

    @property
    def queue(self) -> ThrowableQueue[Any]:
        if self._queue is None:
            maxsize = self.maxsize
            if maxsize is None:
                maxsize = self.app.conf.stream_buffer_maxsize
            self._queue = KinesisQueue(
                self._kinesis_root._reader, maxsize, flow_control=self.app.flow_control
            )
        return self._queue

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
        root = self._kinesis_root
        if key is None and root.default_key is not None:
            key = root.default_key(value)
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
        await self._kinesis_root._writer.publish(fut)
        if wait:
            await fut
        return fut

    async def _close_writer(self) -> None:
        await self._writer.close()

    # -- reading ------------------------------------------------------------------------------

    def redeliver(self) -> None:
        """Deliver everything not acked again: the consumer restarts from the checkpoints
        (after the in-flight events finish). Events held back by ``safe_acks`` come again."""
        self._kinesis_root._reader.redeliver()

    def stats(self) -> dict[str, Any]:
        """Event counts and, per shard, position, checkpoint, lag (ms) and pending acks."""
        return self._kinesis_root._reader.stats()

    def status(self) -> list[ShardStatus]:
        """The core consumer's ``ShardStatus`` list (empty while no consumer runs)."""
        return self._kinesis_root._reader.status()

    @property
    def producer(self) -> Producer | None:
        """The core Producer behind ``send()`` once started (its ``metrics()``)."""
        return self._kinesis_root._writer.producer
