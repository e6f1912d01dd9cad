"""The reading half of a KinesisChannel: a service that runs the core Consumer for Faust.

Once an agent subscribes, it starts a :class:`~kinesis_core.consumer.Consumer`, turns every
record into a Faust event (the channel's key and value serializers) whose message is a
:class:`~faust_kinesis.message.KinesisMessage`, and puts it into the queue of every subscriber.
The message's final release acks the record, so the core's frontier moves each shard's
checkpoint only over contiguously acked records.

Faust may throw queued events away (a Kafka rebalance, ``flow_control.clear()``, a resume).
Then the run ends: the in-flight events get ``drain_timeout`` seconds to finish, the consumer
writes its final checkpoints and closes, and a new consumer starts from the checkpoints, which
delivers everything not acked again. Shutdown drains the same way.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from faust.exceptions import DecodeError
from faust.types import TP, AppT, CodecArg, EventT
from mode import Service
from mode.utils.queues import FlowControlEvent, ThrowableQueue

from faust_kinesis.acks import Ledger, Outcome, decide
from faust_kinesis.message import KinesisMessage
from faust_kinesis.sensor import kinesis_sensor
from kinesis_core.checkpoint import SQLiteCheckpointStore
from kinesis_core.consumer import LATEST, TRIM_HORIZON, Consumer, InitialPosition, ShardStatus
from kinesis_core.errors import ValidationError

if TYPE_CHECKING:
    from faust_kinesis.channel import KinesisChannel
    from kinesis_core.checkpoint import CheckpointStore
    from kinesis_core.records import KinesisRecord

logger = logging.getLogger(__name__)

CHECKPOINT_FILE = "kinesis-checkpoints.sqlite3"
_DRAIN_POLL = 0.02
_MONITOR_INTERVAL = 1.0


def shard_number(shard_id: str) -> int:
    """The number in ``shardId-000000000007`` (Faust partitions are ints)."""
    digits = shard_id.rpartition("-")[2]
    if not digits.isdigit():
        raise ValidationError("shard_id", f"not a Kinesis shard id: {shard_id!r}")
    return int(digits)


def kafka_consumer_enabled(app: AppT) -> bool:
    """Whether Faust runs its Kafka consumer, whose table recovery resumes flow control."""
    boot = app.boot_strategy
    if boot.enable_kafka_consumer is not None:
        return boot.enable_kafka_consumer
    return boot.enable_kafka


def _initial_position(app: AppT) -> InitialPosition:
    """Faust's own choice for a consumer group with no offsets: earliest or latest."""
    return LATEST if app.conf.consumer_auto_offset_reset == "latest" else TRIM_HORIZON


class KinesisQueue(ThrowableQueue[Any]):
    """A subscriber's queue that tells the reader when Faust empties it, and when it has room.

    The reader never blocks in ``put`` (Faust's ``clear()`` cancels blocked putters); it
    waits for room here and then uses ``put_nowait``.
    """

    def __init__(self, reader: Reader, maxsize: int, *, flow_control: FlowControlEvent) -> None:
        super().__init__(maxsize=maxsize, flow_control=flow_control, clear_on_resume=True)
        self._reader = reader
        self._room: asyncio.Future[None] | None = None

    def get_nowait(self) -> Any:
        item = super().get_nowait()
        self._wake()
        return item

    def clear(self) -> None:
        items: list[Any] = list(getattr(self, "_queue", ()))
        super().clear()
        self._wake()
        self._reader.on_cleared(items)

    async def wait_for_room(self) -> None:
        """Wait until the queue is down to half full: refilling in bulk costs one task
        switch per half queue instead of one per event."""
        while self.full():
            self._room = asyncio.get_running_loop().create_future()
            await self._room

    def _wake(self) -> None:
        room = self._room
        if room is not None and 2 * self.qsize() <= self.maxsize:
            self._room = None
            if not room.done():
                room.set_result(None)


class ConsumerRun:
    """One consumer, from its start to its close: what it delivered and how those ended."""

    __slots__ = ("consumer", "ledger", "pump", "reader", "stopping")

    def __init__(self, reader: Reader, consumer: Consumer) -> None:
        self.reader = reader
        self.consumer = consumer
        self.ledger = Ledger()
        self.pump: asyncio.Task[None] | None = None
        self.stopping: asyncio.Task[None] | None = None

    def finish(self, message: KinesisMessage, exception_in_flight: bool) -> None:
        reader = self.reader
        outcome = decide(
            failed=message.failed,
            exception_in_flight=exception_in_flight,
            safe=reader.safe_acks,
            flow_active=reader.flow.is_active(),
            same_generation=message.generation_id == reader.app.consumer_generation_id,
        )
        self.settle(message, outcome)

    def settle(self, message: KinesisMessage, outcome: Outcome) -> None:
        if not self.ledger.settle(outcome):
            return
        if outcome is Outcome.ACKED:
            message.record.ack()
            self.reader.on_message_out(message.tp, message.offset, message)
        elif outcome is Outcome.FAILED:
            logger.warning(
                "%s %s %s: not acked, its processing did not finish; the shard's checkpoint "
                "stays before it",
                message.topic,
                message.shard_id,
                message.position,
            )
        else:
            self.reader.redeliver()


class Reader(Service):
    """Starts, re-delivers and stops the consumer of one KinesisChannel, with the app."""

    mundane_level = "debug"
    flow: FlowControlEvent
    """The app's flow control; looked up at start, not at import (it binds the loop)."""

    def __init__(self, channel: KinesisChannel, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.channel = channel
        self.app = channel.app
        self.safe_acks = channel.safe_acks
        self.redeliveries = 0
        self.decode_errors = 0
        self._totals = Ledger()
        self._run: ConsumerRun | None = None
        self._store: CheckpointStore | None = None
        self._supervisor: asyncio.Task[None] | None = None
        self._redeliver = asyncio.Event()
        self._subscribed = asyncio.Event()
        self._queues: list[KinesisQueue] = []
        self._tps: dict[str, TP] = {}
        self._committed: dict[TP, int] = {}
        self._stopping = False
        self.on_message_out = self.app.sensors.on_message_out
        self._on_message_in = self.app.sensors.on_message_in

    # -- life cycle -------------------------------------------------------------------------

    async def on_start(self) -> None:
        kinesis_sensor(self.app).add_channel(self.channel)
        self.flow = self.app.flow_control
        if not kafka_consumer_enabled(self.app) and not self.flow.is_active():
            # Without a Kafka consumer no table recovery ever resumes flow control, and
            # every put into a channel queue would wait forever.
            self.flow.resume()
        self._supervisor = asyncio.create_task(self._supervise(), name=f"kinesis-{self}")

    async def on_stop(self) -> None:
        self._stopping = True
        if self._supervisor is not None:
            self._supervisor.cancel()
            await asyncio.gather(self._supervisor, return_exceptions=True)
        run = self._run
        if run is not None:
            await self._end_run(run)
        await self.channel._close_writer()
        if self._store is not None and self.channel.checkpoint_store is None:
            await self._store.close()
            self._store = None

    def __str__(self) -> str:
        return f"KinesisChannel({self.channel.stream_name})"

    @property
    def label(self) -> str:
        return str(self)

    @property
    def shortlabel(self) -> str:
        return str(self)

    # -- signals from the channel and its queues -------------------------------------------

    def subscribed(self) -> None:
        self._queues = []  # look at the subscribers again before the next put
        self._subscribed.set()

    def redeliver(self) -> None:
        """End the current run and start a new consumer from the checkpoints."""
        if not (self._stopping or self.app.should_stop):
            self._redeliver.set()

    def on_cleared(self, items: list[Any]) -> None:
        for item in items:
            message = getattr(item, "message", None)
            if isinstance(message, KinesisMessage):
                message.drop()

    # -- the runs ---------------------------------------------------------------------------

    async def _supervise(self) -> None:
        try:
            while not self.app.should_stop:
                await self._subscribed.wait()
                self._redeliver.clear()
                run = self._run = await self._start_run()
                pump = run.pump
                assert pump is not None
                redeliver = asyncio.create_task(self._redeliver.wait())
                try:
                    while not (pump.done() or redeliver.done()):
                        await asyncio.wait(
                            {pump, redeliver},
                            timeout=_MONITOR_INTERVAL,
                            return_when=asyncio.FIRST_COMPLETED,
                        )
                        self._report_commits(run)
                finally:
                    redeliver.cancel()
                if pump.done() and not pump.cancelled() and pump.exception() is not None:
                    raise cast(BaseException, pump.exception())
                await self._end_run(run)
                self.redeliveries += 1
                logger.info("%s: delivering again from the checkpoints", self)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            logger.exception("%s: the consumer failed", self)
            await self.crash(exc)

    async def _start_run(self) -> ConsumerRun:
        channel = self.channel
        if self._store is None:
            self._store = channel.checkpoint_store or self._default_store()
        consumer = Consumer(
            channel.stream_name,
            client_config=channel.client_config,
            checkpoint_store=self._store,
            application_name=channel.application_name or self.app.conf.id,
            initial_position=channel.initial_position or _initial_position(self.app),
            auto_ack=False,
            # The channel waits for Faust's in-flight events itself: the consumer cannot
            # tell which of the records it handed over Faust has thrown away.
            close_timeout=0.0,
            **channel.consumer_options,
        )
        await consumer.start()
        run = ConsumerRun(self, consumer)
        run.pump = asyncio.create_task(self._pump(run), name=f"{self}-pump")
        return run

    def _default_store(self) -> SQLiteCheckpointStore:
        datadir = Path(self.app.conf.datadir)
        datadir.mkdir(parents=True, exist_ok=True)
        return SQLiteCheckpointStore(datadir / CHECKPOINT_FILE)

    async def _end_run(self, run: ConsumerRun) -> None:
        """Stop delivering, give the in-flight events ``drain_timeout`` seconds, close the
        consumer (final checkpoints). Safe to call twice; the second call waits for the first."""
        if run.stopping is None:
            run.stopping = asyncio.create_task(self._stop_run(run))
        await asyncio.shield(run.stopping)

    async def _stop_run(self, run: ConsumerRun) -> None:
        if run.pump is not None:
            run.pump.cancel()
            await asyncio.gather(run.pump, return_exceptions=True)
        # Queued events come again from the next consumer (or after a restart): processing
        # them now would only make duplicates, and out of order. Only those an agent holds
        # are waited for.
        for queue in self._subscriber_queues():
            queue.clear()
        deadline = time.monotonic() + self.channel.drain_timeout
        while run.ledger.in_flight and time.monotonic() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(_DRAIN_POLL)
        if run.ledger.in_flight:
            logger.warning(
                "%s: %d events still in flight after %s s; they will be delivered again",
                self,
                run.ledger.in_flight,
                self.channel.drain_timeout,
            )
        try:
            await run.consumer.close()
        finally:
            run.ledger.close()
            self._totals.add(run.ledger)
            self._report_commits(run)
            if self._run is run:
                self._run = None

    # -- delivery ---------------------------------------------------------------------------

    async def _pump(self, run: ConsumerRun) -> None:
        channel = self.channel
        app = self.app
        make_event = cast(Any, app.conf.Event)
        serializers = app.serializers
        loads_key = _loads(
            serializers.loads_key,
            channel.key_type,
            channel.key_serializer,
            serializers.key_serializer,
        )
        loads_value = _loads(
            serializers.loads_value,
            channel.value_type,
            channel.value_serializer,
            serializers.value_serializer,
        )
        allow_empty = channel.allow_empty
        tps = self._tps
        async for batch in run.consumer.batches():
            for record in batch:
                tp = tps.get(record.shard_id) or self._tp(record.shard_id)
                key = record.partition_key.encode()
                arrival = record.approximate_arrival_timestamp
                message = KinesisMessage(
                    record, tp, key, arrival.timestamp() if arrival else time.time(), run
                )
                try:
                    k = loads_key(key)
                    v = None if allow_empty and not record.data else loads_value(record.data)
                except DecodeError as exc:
                    await self._skip(record, message, exc)
                    continue
                await self._put(make_event(app, k, v, None, message), message, run)
            await asyncio.sleep(0)

    async def _skip(self, record: KinesisRecord, message: KinesisMessage, exc: Exception) -> None:
        """A record the serializers cannot read is logged and acked: it never will be read."""
        self.decode_errors += 1
        logger.error("%s: cannot decode %s %s: %r", self, record.shard_id, record.position, exc)
        await self.channel.on_decode_error(exc, message)
        record.ack()

    async def _put(self, event: EventT[Any], message: KinesisMessage, run: ConsumerRun) -> None:
        """Put one event into every subscriber's queue, waiting for flow control, for a
        subscriber and for room first: no await between stamping the generation and the put."""
        flow = self.flow
        while True:
            queues = self._subscriber_queues()
            if not queues:
                self._subscribed.clear()
                await self._subscribed.wait()
            elif not flow.is_active():
                await flow.acquire()
            else:
                for queue in queues:
                    if queue.full():
                        await queue.wait_for_room()
                        break
                else:
                    break
        message.deliver_to(len(queues), self.app.consumer_generation_id)
        for queue in queues:
            queue.put_nowait(event)
        run.ledger.deliver()
        self._on_message_in(message.tp, message.offset, message)

    def _subscriber_queues(self) -> list[KinesisQueue]:
        subscribers = self.channel._subscribers
        if len(subscribers) != len(self._queues):
            self._queues = [cast(KinesisQueue, s.queue) for s in list(subscribers)]
        return self._queues

    def _tp(self, shard_id: str) -> TP:
        tp = self._tps[shard_id] = TP(self.channel.stream_name, shard_number(shard_id))
        return tp

    # -- monitoring -------------------------------------------------------------------------

    def _report_commits(self, run: ConsumerRun) -> None:
        """Checkpoints that moved go to Faust's monitor as committed offsets."""
        moved: dict[TP, int] = {}
        for status in run.consumer.status():
            value = status.checkpoint
            if not isinstance(value, tuple):
                continue
            tp = self._tps.get(status.shard_id) or self._tp(status.shard_id)
            if self._committed.get(tp) != value[0]:
                moved[tp] = self._committed[tp] = value[0]
        if moved:
            self.app.monitor.on_tp_commit(moved)

    def stats(self) -> dict[str, Any]:
        """Counts of this channel's events and, per shard, position, checkpoint and lag."""
        run = self._run
        ledger = run.ledger if run is not None else Ledger()
        shards: dict[str, Any] = {}
        if run is not None:
            for status in run.consumer.status():
                shards[status.shard_id] = {
                    "state": status.state.value,
                    "position": _position_text(status.position),
                    "checkpoint": _position_text(status.checkpoint),
                    "millis_behind_latest": status.millis_behind_latest,
                    "pending_acks": status.pending_acks,
                }
        return {
            "events_delivered": self._totals.delivered + ledger.delivered,
            "events_acked": self._totals.acked + ledger.acked,
            "events_failed": self._totals.failed + ledger.failed,
            "events_dropped": self._totals.dropped + ledger.dropped,
            "events_in_flight": ledger.in_flight,
            "decode_errors": self.decode_errors,
            "redeliveries": self.redeliveries,
            "shards": shards,
        }

    def status(self) -> list[ShardStatus]:
        run = self._run
        return run.consumer.status() if run is not None else []


def _loads(
    loads: Callable[..., Any], typ: Any, serializer: CodecArg, default: CodecArg
) -> Callable[[bytes], Any]:
    """One decode function for keys or values; raw bytes without a type are passed as they
    are (what Faust's raw codec would return, minus its dispatch per record)."""
    codec = serializer or default
    if codec == "raw" and typ in (None, bytes):
        return _same
    return lambda data: loads(typ, data, serializer=codec)


def _same(data: bytes) -> bytes:
    return data


def _position_text(value: object) -> str | None:
    """Sequence numbers as decimal text (JSON readers lose digits of 56-digit numbers)."""
    if value is None:
        return None
    if isinstance(value, tuple):
        return f"{value[0]}.{value[1]}"
    return str(value)
