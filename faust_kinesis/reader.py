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

The reader is given what it needs (:class:`~faust_kinesis.settings.ReadSettings`, the
channel's schema, its live set of subscribers and its decode-error hook); it never sees the
channel itself.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Collection
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from faust.exceptions import DecodeError
from faust.types import TP, AppT, ChannelT, CodecArg, Message
from mode import Service
from mode.utils.queues import FlowControlEvent

from faust_kinesis.acks import Ledger, Outcome, decide
from faust_kinesis.faust_internals import kafka_consumer_enabled
from faust_kinesis.message import KinesisMessage
from faust_kinesis.partitions import shard_tp
from faust_kinesis.queues import KinesisQueue
from kinesis_core.checkpoint import SQLiteCheckpointStore
from kinesis_core.consumer import Consumer, ShardStatus
from kinesis_core.consumer.flusher import DEFAULT_CHECKPOINT_PATH
from kinesis_core.runtime.clock import SYSTEM_CLOCK, Clock, wait_event

if TYPE_CHECKING:
    from faust.types import SchemaT

    from faust_kinesis.settings import ReadSettings
    from kinesis_core.checkpoint import CheckpointStore
    from kinesis_core.records import KinesisRecord

logger = logging.getLogger(__name__)

CHECKPOINT_FILE = DEFAULT_CHECKPOINT_PATH
"""The default checkpoint store of a channel: this SQLite file (the core consumer's default
name) in the app's ``datadir``."""
_MONITOR_INTERVAL = 1.0
_UNSET = object()


class ConsumerRun:
    """One consumer, from its start to its close: what it delivered and how those ended."""

    __slots__ = ("consumer", "idle", "ledger", "pump", "reader", "stopping")

    def __init__(self, reader: Reader, consumer: Consumer) -> None:
        self.reader = reader
        self.consumer = consumer
        self.ledger = Ledger()
        self.idle = asyncio.Event()
        """Set whenever no event of this run is in flight (outcomes are events: not polled)."""
        self.pump: asyncio.Task[None] | None = None
        self.stopping: asyncio.Task[None] | None = None

    @property
    def stream_created_ms(self) -> int | None:
        facts = self.consumer.stream_facts
        return None if facts is None else facts.created_ms

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
        ledger = self.ledger
        if not ledger.settle(outcome):
            return
        if not ledger.in_flight:
            self.idle.set()
        if outcome is Outcome.ACKED:
            message.record_ack(message.record)
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

    def __init__(
        self,
        app: AppT,
        settings: ReadSettings,
        *,
        schema: SchemaT[Any, Any],
        subscribers: Collection[ChannelT[Any]],
        on_decode_error: Callable[[Exception, Message], Awaitable[None]],
        clock: Clock = SYSTEM_CLOCK,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.app = app
        self.clock = clock
        """The time of the consumer and of the drain at the end of a run."""
        self.settings = settings
        self.topic = str(settings.stream)
        """The stream as given (name or ARN): the topic of the events' messages."""
        self.schema = schema
        self.subscribers = subscribers
        """The channel's subscribers (live): each event goes into each one's queue."""
        self.on_decode_error = on_decode_error
        self.safe_acks = settings.safe_acks
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
        self.on_message_out = app.sensors.on_message_out
        self._on_message_in = app.sensors.on_message_in

    # -- life cycle -------------------------------------------------------------------------

    async def on_start(self) -> None:
        self.flow = self.app.flow_control
        if not kafka_consumer_enabled(self.app) and not self.flow.is_active():
            # Without a Kafka consumer no table recovery ever resumes flow control, and
            # every put into a channel queue would wait forever.
            self.flow.resume()
        self._supervisor = asyncio.create_task(self._supervise(), name=f"kinesis-{self}")

    async def on_stop(self) -> None:
        if self._supervisor is not None:
            self._supervisor.cancel()
            await asyncio.gather(self._supervisor, return_exceptions=True)
        run = self._run
        if run is not None:
            await self._end_run(run)
        if self._store is not None and self.settings.checkpoint_store is None:
            await self._store.close()
            self._store = None

    def __str__(self) -> str:
        return f"KinesisChannel({self.topic})"

    @property
    def label(self) -> str:
        return str(self)

    @property
    def shortlabel(self) -> str:
        return str(self)

    @property
    def subscriber_count(self) -> int:
        return len(self.subscribers)

    # -- signals from the channel and its queues -------------------------------------------

    def subscribed(self) -> None:
        self._queues = []  # look at the subscribers again before the next put
        self._subscribed.set()

    def redeliver(self) -> None:
        """End the current run and start a new consumer from the checkpoints."""
        if not (self.should_stop or self.app.should_stop):
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
        settings = self.settings
        if self._store is None:
            self._store = settings.checkpoint_store or self._default_store()
        conf = self.app.conf
        consumer = Consumer(
            settings.stream,
            consumer_config=settings.consumer_config_for(conf.id, conf.consumer_auto_offset_reset),
            client_config=settings.client_config,
            checkpoint_store=self._store,
            clock=self.clock,
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
        drain_timeout = self.settings.drain_timeout
        run.idle.clear()
        if run.ledger.in_flight:
            await wait_event(self.clock, run.idle, drain_timeout)
        if run.ledger.in_flight:
            logger.warning(
                "%s: %d events still in flight after %s s; they will be delivered again",
                self,
                run.ledger.in_flight,
                drain_timeout,
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
        """Turn each batch of records into events and put them into the subscribers' queues,
        as many at a time as every queue has room for; no coroutine per event."""
        app = self.app
        schema = self.schema
        make_event = cast(Any, app.conf.Event)
        serializers = app.serializers
        loads_key = decoder(
            serializers.loads_key,
            schema.key_type,
            schema.key_serializer,
            serializers.key_serializer,
        )
        loads_value = decoder(
            serializers.loads_value,
            schema.value_type,
            schema.value_serializer,
            serializers.value_serializer,
        )
        allow_empty = schema.allow_empty
        on_message_in = self._on_message_in
        ledger = run.ledger
        tps = self._tps
        async for batch in run.consumer.batches():
            records = batch.records
            ack = batch.ack_record
            tp = tps.get(batch.shard_id) or self._tp(batch.shard_id)
            sequence: object = _UNSET
            offset = 0
            timestamp = 0.0
            i, n = 0, len(batch)
            while i < n:
                queues, room = await self._room()
                # No await from here to the end of the chunk: every put sees the generation
                # stamped on its message.
                subscribers = len(queues)
                generation = app.consumer_generation_id
                failure: tuple[KinesisMessage, DecodeError] | None = None
                start = i
                for record in records[i : min(n, i + room)]:
                    if record.sequence_number is not sequence:
                        # The sub-records of an aggregate share its sequence number and
                        # arrival time: converted once per aggregate.
                        sequence = record.sequence_number
                        offset = record.position[0]
                        seconds = record.approximate_arrival_seconds
                        timestamp = time.time() if seconds is None else seconds
                    key = record.partition_key.encode()
                    message = KinesisMessage(
                        record, tp, key, timestamp, run, ack, offset, subscribers, generation
                    )
                    data = record.data
                    try:
                        k = key if loads_key is None else loads_key(key)
                        if allow_empty and not data:
                            v = None
                        else:
                            v = data if loads_value is None else loads_value(data)
                    except DecodeError as exc:
                        failure = (message, exc)
                        break
                    event = make_event(app, k, v, None, message)
                    for queue in queues:
                        queue.put_nowait(event)
                    on_message_in(tp, offset, message)
                    i += 1
                ledger.deliver(i - start)
                if failure is not None:
                    await self._skip(records[i], *failure)
                    i += 1
            await asyncio.sleep(0)

    async def _skip(self, record: KinesisRecord, message: KinesisMessage, exc: Exception) -> None:
        """A record the serializers cannot read is logged and acked: it never will be read."""
        self.decode_errors += 1
        logger.error("%s: cannot decode %s %s: %r", self, record.shard_id, record.position, exc)
        await self.on_decode_error(exc, message)
        record.ack()

    async def _room(self) -> tuple[list[KinesisQueue], int]:
        """The subscribers' queues once there is one, flow control is active and every queue
        has room; with how many events each of them can take now."""
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
                    if not queue.room:
                        await queue.wait_for_room()
                        break
                else:
                    return queues, min(queue.room for queue in queues)

    def _subscriber_queues(self) -> list[KinesisQueue]:
        subscribers = self.subscribers
        if len(subscribers) != len(self._queues):
            self._queues = [cast(KinesisQueue, s.queue) for s in list(subscribers)]
        return self._queues

    def _tp(self, shard_id: str) -> TP:
        tp = self._tps[shard_id] = shard_tp(self.topic, shard_id)
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
                    "position": position_text(status.position),
                    "checkpoint": position_text(status.checkpoint),
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

    @property
    def application_name(self) -> str:
        """The consumers' application name (their checkpoints' and leases' key)."""
        return self.settings.application_name or self.app.conf.id

    def status(self) -> list[ShardStatus]:
        run = self._run
        return run.consumer.status() if run is not None else []


def decoder(
    loads: Callable[..., Any], typ: Any, serializer: CodecArg, default: CodecArg
) -> Callable[[bytes], Any] | None:
    """One decode function for keys or values; None for raw bytes without a type, which pass
    as they are (what Faust's raw codec would return, without a call per record)."""
    codec = serializer or default
    if codec == "raw" and typ in (None, bytes):
        return None
    return lambda data: loads(typ, data, serializer=codec)


def position_text(value: object) -> str | None:
    """Sequence numbers as decimal text (JSON readers lose digits of 56-digit numbers)."""
    if value is None:
        return None
    if isinstance(value, tuple):
        return f"{value[0]}.{value[1]}"
    return str(value)
