"""The Consumer: every shard of a stream, parents before children, with acks and checkpoints.

Three parts do the work, as the KCL 3.x separates them: the scheduler (:mod:`.scheduler`:
discovery, lineage, leases, one reader task per shard, each shard's life), the delivery
(:mod:`.delivery`: the bounded queue between the readers and the user's iteration) and the
checkpoint flusher (:mod:`.flusher`). This module wires them and runs the life cycle: start
(client, first discovery, the fan-out's registration) and close (stop reading, forget what was
never delivered, wait up to ``close_timeout`` for the acks of what was, write the final
checkpoints; with leases, then release them: a graceful hand-off).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Callable
from types import TracebackType
from typing import Any, cast

from kinesis_core.aws import fastparse
from kinesis_core.aws.client import create_kinesis_client
from kinesis_core.aws.config import ClientConfig
from kinesis_core.aws.executor import LISTING_MAX_AGE, AsyncExecutor
from kinesis_core.aws.overrides import with_overrides
from kinesis_core.checkpoint.base import CheckpointStore, LeaseStore
from kinesis_core.consumer.checkpointer import Checkpointer
from kinesis_core.consumer.config import ConsumerConfig, EnhancedFanOut
from kinesis_core.consumer.delivery import Delivery
from kinesis_core.consumer.flusher import DEFAULT_CHECKPOINT_PATH, checkpoint_store_of
from kinesis_core.consumer.frontier import RecordBatch
from kinesis_core.consumer.incarnation import StreamFacts
from kinesis_core.consumer.lineage import ShardState
from kinesis_core.consumer.scheduler import Scheduler
from kinesis_core.consumer.shard_consumer import Action, Event as ShardEvent
from kinesis_core.consumer.status import ShardStatus
from kinesis_core.errors import ConfigurationError
from kinesis_core.lease import LeaseManager
from kinesis_core.lifecycle import Event, Lifecycle, State
from kinesis_core.records import KinesisRecord
from kinesis_core.runtime.clock import SYSTEM_CLOCK, Clock
from kinesis_core.runtime.heap import freeze_start_up_heap
from kinesis_core.serde import RecordDeserializer
from kinesis_core.stream import StreamRef
from kinesis_core.telemetry.recorder import NO_RECORDER, ConsumerRecorder

__all__ = ["DEFAULT_CHECKPOINT_PATH", "Consumer"]


class Consumer:
    """Reads every shard of a stream, parents before children, with acks and checkpoints.

    ::

        async with Consumer("orders", client_config=config, initial_position=TRIM_HORIZON) as c:
            async for record in c:
                handle(record)
                record.ack()

    How it reads is a :class:`~kinesis_core.consumer.ConsumerConfig` (``consumer_config=``),
    whose fields can also be given as keyword arguments, which override it
    (``Consumer("orders", initial_position="TRIM_HORIZON", auto_ack=True)``).

    A record's checkpoint moves only once it and every record before it in its shard are
    acked. ``auto_ack=True`` acks a record (or a batch, with :meth:`batches`) when the next one
    is asked for, i.e. after the loop body ran; the last one before the loop stopped is not
    acked (it is read again after a restart). Checkpoints are keyed by
    (``application_name``, stream name, shard), so a stream named by its ARN or by its name
    shares them; the default store is a SQLite file, ``kinesis-checkpoints.sqlite3`` in the
    working directory, and ``checkpoint_store`` a path (``str`` or ``os.PathLike``) is a SQLite
    file there (the consumer closes the stores it made). Acks must come from the event loop's
    thread.

    ``leases`` (a :class:`~kinesis_core.lease.LeaseConfig`, or True for the KCL's defaults)
    lets several consumers with the same ``application_name`` share the stream, each reading
    the shards it holds leases for; the store must hold leases (DynamoDB across hosts, the
    SQLite file across the processes of one host, memory within one process).
    ``worker_id`` is then this consumer's name in the lease table.

    ``clock`` is the time every wait of the consumer, its readers and its leases runs on
    (:mod:`kinesis_core.runtime.clock`; tests give a fake one).

    The KCL's shard hooks, each called with the shard id on the event loop (keep them
    short): ``on_shard_ended`` once SHARD_END is checkpointed; with leases,
    ``on_lease_handed_over`` once this worker's final checkpoint of a shard another worker
    asked for is written, and ``on_lease_lost`` when a lease was taken without a hand-off
    (the shard's undelivered records are dropped; what was delivered and not acked is read
    again by the new owner).

    ``deserializer`` (:class:`~kinesis_core.serde.RecordDeserializer`, e.g.
    ``kinesis_schema_registry.GlueDeserializer``) decodes each batch before it is delivered.
    """

    def __init__(
        self,
        stream: str | StreamRef,
        *,
        consumer_config: ConsumerConfig | None = None,
        client_config: ClientConfig | None = None,
        client: Any = None,
        checkpoint_store: CheckpointStore | str | os.PathLike[str] | None = None,
        clock: Clock = SYSTEM_CLOCK,
        on_shard_ended: Callable[[str], None] | None = None,
        on_lease_handed_over: Callable[[str], None] | None = None,
        on_lease_lost: Callable[[str], None] | None = None,
        deserializer: RecordDeserializer | None = None,
        **options: Any,
    ) -> None:
        self.stream = StreamRef.of(stream)
        """The stream (a :class:`StreamRef`, as the producer's); checkpoints are kept under its
        name."""
        config = with_overrides(consumer_config or ConsumerConfig(), options, "Consumer")
        self.config = config
        self._life = Lifecycle(f"Consumer({str(self.stream)!r})")
        if client_config is not None:
            self.stream.check_endpoint(client_config.endpoint_url)
        self._client_config = client_config
        self._client = client
        self._clock = clock
        self._owns_store = not isinstance(checkpoint_store, CheckpointStore)
        store = checkpoint_store_of(checkpoint_store)
        self._recorder = self._make_recorder(config)
        self._store: CheckpointStore = self._recorder.store(store)
        self._leases: LeaseManager | None = None
        self.worker_id: str | None = None
        checkpointer: Checkpointer | LeaseManager
        lease_config = config.lease_config
        if lease_config is None:
            checkpointer = Checkpointer(
                self._store,
                config.application_name,
                self.stream.name,
                exclusive=True,
                recorder=self._recorder,
            )
        else:
            if not isinstance(store, LeaseStore):
                raise ConfigurationError(
                    "leases",
                    "need a checkpoint store that holds leases (update_lease); "
                    f"{type(store).__name__} does not",
                )
            checkpointer = self._leases = LeaseManager(
                cast(LeaseStore, self._store),
                config.application_name,
                self.stream.name,
                lease_config,
                eligible=lambda: self._scheduler.leasable(),
                graceful_handoff=True,
                throughput=(
                    (lambda shard_id: self._scheduler.throughput(shard_id))
                    if lease_config.assignment == "throughput"
                    else None
                ),
                clock=clock,
                recorder=self._recorder,
            )
            self.worker_id = self._leases.worker_id
        self._delivery = Delivery(
            config.max_queued_batches,
            auto_ack=config.auto_ack,
            deserializer=deserializer,
            recorder=self._recorder,
            life=self._life,
        )
        self._scheduler = Scheduler(
            self.stream,
            config,
            self._store,
            checkpointer,
            self._leases,
            self._delivery,
            self._life,
            clock,
            self._recorder,
            {
                Action.NOTIFY_ENDED: on_shard_ended,
                Action.NOTIFY_HANDED_OVER: on_lease_handed_over,
                Action.NOTIFY_LOST: on_lease_lost,
            },
        )
        self._flusher = self._scheduler.flusher
        self._exit = contextlib.AsyncExitStack()

    @property
    def consumer_arn(self) -> str | None:
        """The stream consumer this one reads as, with enhanced fan-out (after ``start``)."""
        return self._scheduler.consumer_arn

    @property
    def stream_facts(self) -> StreamFacts | None:
        """What DescribeStreamSummary said at start (the creation time is the incarnation
        whose checkpoints this consumer reads and writes)."""
        return self._scheduler.stream_facts

    def _make_recorder(self, config: ConsumerConfig) -> ConsumerRecorder:
        """What this consumer reports its metrics to (nothing, with telemetry off)."""
        if config.telemetry is None:
            return NO_RECORDER
        from kinesis_core.telemetry.otel import ConsumerTelemetry

        return ConsumerTelemetry(
            config.telemetry,
            self.stream.name,
            config.application_name,
            "GetRecords" if config.fan_out is None else "SubscribeToShard",
            lag_source=self._lags,
            leases_held=None if config.lease_config is None else self._leases_held,
        )

    # -- life cycle -------------------------------------------------------------------------

    async def __aenter__(self) -> Consumer:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def start(self) -> None:
        """Connect, list the shards and start the readers; errors (no such stream) raise here."""
        self._life.handle(Event.START, "start")
        scheduler = self._scheduler
        try:
            if self._client is None:
                # The readers retry on their own terms (rate, backoff, expired iterators):
                # botocore's retries would stack on top and spend the 5 calls/s.
                self._client = await self._exit.enter_async_context(
                    create_kinesis_client(
                        self._client_config or ClientConfig.from_env(), max_attempts=1
                    )
                )
            self._exit.callback(fastparse.install(self._client))
            efo = self.config.fan_out
            scheduler.executor = AsyncExecutor(
                self._client,
                clock=self._clock,
                lean_get_records=self.config.lean_get_records,
                listing_max_age=LISTING_MAX_AGE if efo is None else efo.closed_check_interval / 2,
            )
            # The stored checkpoints are checked before a stream consumer is registered: a
            # start that fails on them leaves nothing behind (a consumer costs money).
            await scheduler.first_discovery()
            if efo is not None:
                await self._start_fan_out(efo, scheduler.executor)
            scheduler.reading = True
            freeze_start_up_heap()
            scheduler.start_ready()
        except BaseException:
            self._life.handle(Event.START_FAILED)
            await self._exit.aclose()
            if self._owns_store:
                await self._store.close()
            raise
        if self._life.state is State.STARTING:  # not FAILED by a reader meanwhile
            self._life.handle(Event.STARTED)
        scheduler.start_tasks()

    async def _start_fan_out(self, efo: EnhancedFanOut, executor: AsyncExecutor) -> None:
        """Register (or reuse, or check) the stream consumer and open the HTTP/2 client that
        every shard's subscription goes through."""
        from kinesis_core.fanout.consumers import open_fan_out

        executor.fanout, self._scheduler.consumer_arn = await open_fan_out(
            self._exit, self._client_config or ClientConfig.from_env(), self.stream, efo, executor
        )

    async def close(self) -> None:
        """Stop reading, wait for the acks of delivered records, write the final checkpoints.

        With leases: no lease is taken any more, the held ones stay renewed while the acks
        come in, and are released after the final checkpoints (a graceful hand-off).
        """
        if self._life.state in (State.NEW, State.CLOSING, State.CLOSED):
            if self._life.state is State.NEW:
                self._life.handle(Event.CLOSE)
                self._recorder.close()
            return
        self._life.handle(Event.CLOSE)
        scheduler = self._scheduler
        if self._leases is not None:
            await self._leases.stop_taking()
        runs = scheduler.runs
        tasks = scheduler.tasks + [run.task for run in runs.values() if run.task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        scheduler.settle()
        scheduler.forget_undelivered()
        # With auto_ack no ack can come once the loop stopped asking for records.
        config, clock = self.config, self._clock
        deadline = clock.now() + (0.0 if config.auto_ack else config.close_timeout)
        closing = list(runs.values())
        for run in closing:
            scheduler.feed(run, ShardEvent.CLOSE)  # its reader was stopped above
        try:
            for run in closing:
                drained = await run.acks(clock, max(deadline - clock.now(), 0.0))
                # A shard read to its end whose last records were never delivered is not done.
                done = drained and not run.frontier.cut
                event = ShardEvent.DRAINED if done else ShardEvent.ACK_TIMEOUT
                if {Action.WRITE_CHECKPOINT, Action.WRITE_SHARD_END} & set(
                    scheduler.feed(run, event)
                ):
                    await self._flusher.write(run)
                    scheduler.feed(run, ShardEvent.CHECKPOINTED)
        finally:
            try:
                await asyncio.gather(*scheduler.handoffs, return_exceptions=True)
                if self._leases is not None:
                    await self._leases.close()
            finally:
                try:
                    await self._exit.aclose()
                    if self._owns_store:
                        await self._store.close()
                finally:
                    self._recorder.close()
                    self._life.handle(Event.CLOSED)

    # -- delivery ---------------------------------------------------------------------------

    def __aiter__(self) -> Consumer:
        return self

    async def __anext__(self) -> KinesisRecord:
        """The next record. The iteration state lives on the consumer, so breaking out of an
        ``async for`` and starting another one continues where the first stopped."""
        if self._leases is not None:
            self._scheduler.settle()
        record = self._delivery.next_in_batch()
        if record is None:
            record = await self._delivery.next_record()
            if record is None:
                raise StopAsyncIteration
        return record

    async def batches(self) -> AsyncIterator[RecordBatch]:
        """One :class:`RecordBatch` per GetRecords response: the fast path (ack with
        ``batch.ack()``)."""
        self._scheduler.settle()
        while (batch := await self._delivery.next_batch()) is not None:
            yield batch
            if self.config.auto_ack:
                batch.ack()
            self._scheduler.settle()

    async def checkpoint(self) -> None:
        """Write the checkpoints now instead of at the next ``checkpoint_interval``."""
        await self._flusher.flush()

    # -- status -----------------------------------------------------------------------------

    def status(self) -> list[ShardStatus]:
        """Per shard: state, newest position read, stored checkpoint, lag and unacked count.

        With leases: the shards this worker holds or has read, not those of other workers.
        """
        return self._scheduler.status(sorted(self.shard_states().items()))

    def _lags(self) -> dict[str, int | None]:
        """MillisBehindLatest of the last read of each shard being read now."""
        return {
            shard_id: run.machine.millis_behind_latest
            for shard_id, run in list(self._scheduler.runs.items())
            if run.task is not None and not run.task.done()
        }

    def _leases_held(self) -> int:
        return 0 if self._leases is None else len(self._leases.coordinator.held)

    def leased_shards(self) -> list[str]:
        """The shards whose leases this worker holds (empty without leases)."""
        return [] if self._leases is None else sorted(self._leases.held())

    def shard_states(self) -> dict[str, ShardState]:
        """State per shard (with leases: the shards this worker holds or has read)."""
        states = self._scheduler.lineage.states()
        if self._leases is None:
            return states
        mine = set(self._leases.held()) | set(self._scheduler.runs)
        return {shard_id: state for shard_id, state in states.items() if shard_id in mine}
