"""The Consumer: shard discovery, one reader task per shard, delivery, acks and checkpoints.

Everything that decides lives in the sans-I/O pieces (:mod:`.lineage`, :mod:`.frontier`,
:mod:`.reader`); this module only runs tasks and moves batches between them:

- discovery: ListShards (paginated) plus the stored checkpoints feed the lineage, which says
  which shards may start and from where (parents before children); at start, the stored
  checkpoints are first checked against the stream's creation time
  (:func:`~.checkpointer.settle_incarnation`: positions of a stream deleted and created
  again are never used);
- one reader task per started shard: batches go into one bounded queue (backpressure), and are
  registered in the shard's frontier before they are queued;
- the flusher: every ``checkpoint_interval`` the frontier's contiguous acked prefix goes to the
  store with compare-and-set, so an older position never overwrites a newer one;
- at a shard's end: wait until all its records are acked, write SHARD_END, then start the
  children;
- close: stop reading, forget what was never delivered, wait (up to ``close_timeout``) for the
  acks of what was delivered, write the final checkpoints.

With leases (``leases=LeaseConfig(...)``) several consumers share the stream: each one reads
only the shards whose leases it holds (:mod:`kinesis_core.lease`), every checkpoint write is
fenced by the lease's counter, a lost lease stops its shard at once (its queued records are
dropped, not delivered), and close hands the leases over (final checkpoints, then release).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, cast

from kinesis_core.aws import fastparse
from kinesis_core.aws.backoff import Jitter
from kinesis_core.aws.calls import DescribeStreamSummary, ListShards
from kinesis_core.aws.classify import ErrorKind
from kinesis_core.aws.client import ClientConfig, create_kinesis_client, error_kind
from kinesis_core.aws.executor import LISTING_MAX_AGE, AsyncExecutor
from kinesis_core.aws.overrides import with_overrides
from kinesis_core.aws.retry import RetryPolicy
from kinesis_core.checkpoint.base import (
    SHARD_END,
    Checkpoint,
    CheckpointStore,
    CheckpointTableGoneError,
    LeaseStore,
)
from kinesis_core.checkpoint.sqlite import SQLiteCheckpointStore
from kinesis_core.consumer.checkpointer import Checkpointer, settle_incarnation
from kinesis_core.consumer.config import ConsumerConfig, EnhancedFanOut
from kinesis_core.consumer.frontier import RecordBatch, ShardFrontier
from kinesis_core.consumer.incarnation import (
    StreamFacts,
    StreamRecreatedError,
    recreated_while_read,
)
from kinesis_core.consumer.lineage import Lineage, ShardNode, ShardState
from kinesis_core.consumer.links import async_link
from kinesis_core.consumer.polling import PollingRead
from kinesis_core.consumer.positions import InitialPosition
from kinesis_core.consumer.reading import run_shard_read
from kinesis_core.consumer.shard_consumer import Action, Event as ShardEvent, ShardConsumer
from kinesis_core.consumer.status import ShardStatus
from kinesis_core.consumer.subscription import SubscriptionRead
from kinesis_core.consumer.transport import ShardRead
from kinesis_core.errors import ConfigurationError, KinesisServiceError
from kinesis_core.lease import LeaseManager
from kinesis_core.lifecycle import Event, Lifecycle, State
from kinesis_core.records import KinesisRecord
from kinesis_core.runtime.clock import SYSTEM_CLOCK, Clock, wait_event
from kinesis_core.runtime.heap import freeze_start_up_heap
from kinesis_core.serde import RecordDeserializer
from kinesis_core.stream import StreamRef
from kinesis_core.telemetry.recorder import NO_RECORDER, ConsumerRecorder

logger = logging.getLogger(__name__)

DEFAULT_CHECKPOINT_PATH = "kinesis-checkpoints.sqlite3"
START_RETRY = RetryPolicy(
    base=0.2, cap=2.0, jitter=Jitter.EQUAL, attempts=None, unreachable_attempts=5
)
"""The first discovery at ``start``: retried until ``start_timeout`` (the policy's deadline),
but given up after five attempts that reached no endpoint at all (1.5 to 3 s in all)."""
_EMPTY_STREAM_WAIT = 1.0
"""At most this long between two listings of a stream that lists no shard yet."""
SHARD_END_RETRY = RetryPolicy(
    base=0.2, cap=10.0, jitter=Jitter.EQUAL, attempts=None, unknown=ErrorKind.TRANSIENT
)
"""Writing SHARD_END, which the children wait for: tried again until it is written, whatever
the store raised."""


@dataclass(eq=False)
class _ShardRun:
    node: ShardNode
    frontier: ShardFrontier
    machine: ShardRead
    task: asyncio.Task[None] | None = field(default=None, repr=False)
    children: tuple[str, ...] = ()
    """Known at the shard's end; written with SHARD_END."""
    shard: ShardConsumer = field(init=False)
    """The shard's life: what to do at its end, a hand-off, a loss, a close."""
    drained: asyncio.Event = field(init=False, default_factory=asyncio.Event)
    """Set by the frontier once every delivered record is acked (while someone waits)."""
    measured_at: float = 0.0
    """When the shard's throughput was last measured (or its run started)."""
    read_bytes: int = 0
    """Bytes read since then (throughput assignment only)."""

    def __post_init__(self) -> None:
        self.shard = ShardConsumer(self.node.shard_id)

    async def acks(self, clock: Clock, timeout: float | None = None) -> bool:
        """Wait for every delivered record to be acked (at most ``timeout`` seconds); True
        if they were."""
        self.drained.clear()
        self.frontier.when_drained(self.drained.set)
        if timeout is None:
            await self.drained.wait()
            return True
        return await wait_event(clock, self.drained, timeout)


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
        self._deserializer = deserializer
        config = with_overrides(consumer_config or ConsumerConfig(), options, "Consumer")
        self.config = config
        self._life = Lifecycle(f"Consumer({str(self.stream)!r})")
        self._polling_options = config.polling
        if client_config is not None:
            self.stream.check_endpoint(client_config.endpoint_url)
        self._client_config = client_config
        self._client = client
        self._clock = clock
        self._executor: AsyncExecutor | None = None
        self._owns_store = not isinstance(checkpoint_store, CheckpointStore)
        store = _checkpoint_store(checkpoint_store)
        self._recorder = self._make_recorder(config)
        self._store: CheckpointStore = self._recorder.store(store)
        self._checkpointer: Checkpointer | LeaseManager
        self._leases: LeaseManager | None = None
        self.worker_id: str | None = None
        self.consumer_arn: str | None = None
        """The stream consumer this one reads as, with enhanced fan-out (after ``start``)."""
        self.stream_facts: StreamFacts | None = None
        """What DescribeStreamSummary said at start (the creation time is the incarnation
        whose checkpoints this consumer reads and writes)."""
        lease_config = config.lease_config
        if lease_config is None:
            self._checkpointer = Checkpointer(
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
            self._leases = LeaseManager(
                cast(LeaseStore, self._store),
                config.application_name,
                self.stream.name,
                lease_config,
                eligible=self._leasable,
                on_acquired=lambda _: self._start_ready(),
                on_lost=self._revoke,
                on_scan=self._on_lease_scan,
                on_handoff=self._hand_off,
                throughput=(self._throughput if lease_config.assignment == "throughput" else None),
                on_failure=self._fail,
                clock=clock,
                recorder=self._recorder,
            )
            self._checkpointer = self._leases
            self.worker_id = self._leases.worker_id
        self._measures = (
            self._measured
            if lease_config is not None and lease_config.assignment == "throughput"
            else None
        )
        self._unknown_leases: set[str] = set()
        self._lineage = Lineage(config.initial_position)
        self._shards: dict[str, _ShardRun] = {}
        self._queue: asyncio.Queue[RecordBatch | None] = asyncio.Queue(config.max_queued_batches)
        self._exit = contextlib.AsyncExitStack()
        self._tasks: list[asyncio.Task[None]] = []
        self._refresh = asyncio.Event()
        self._failure: BaseException | None = None
        self._current: RecordBatch | None = None
        self._delivered = 0
        self._reading = False
        """Readers may start (after the checks at start, and the fan-out's registration)."""
        self._handed_at: float | None = None
        self._notify = {
            Action.NOTIFY_ENDED: on_shard_ended,
            Action.NOTIFY_HANDED_OVER: on_lease_handed_over,
            Action.NOTIFY_LOST: on_lease_lost,
        }
        self._handoffs: set[asyncio.Task[None]] = set()
        """Shards being handed over to other workers (their last acks, then the checkpoint)."""

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
            self._executor = AsyncExecutor(
                self._client,
                clock=self._clock,
                lean_get_records=self.config.lean_get_records,
                listing_max_age=LISTING_MAX_AGE if efo is None else efo.closed_check_interval / 2,
            )
            # The stored checkpoints are checked before a stream consumer is registered: a
            # start that fails on them leaves nothing behind (a consumer costs money).
            await self._first_discovery()
            if efo is not None:
                await self._start_fan_out(efo)
            self._reading = True
            freeze_start_up_heap()
            self._start_ready()
        except BaseException:
            self._life.handle(Event.START_FAILED)
            await self._exit.aclose()
            if self._owns_store:
                await self._store.close()
            raise
        if self._life.state is State.STARTING:  # not FAILED by a reader meanwhile
            self._life.handle(Event.STARTED)
        self._tasks.append(asyncio.create_task(self._discovery_loop(), name="kinesis-discovery"))
        self._tasks.append(asyncio.create_task(self._flush_loop(), name="kinesis-checkpoints"))
        if self._leases is not None:
            self._leases.start()
            self._tasks.append(
                asyncio.create_task(self._parent_poll_loop(), name="kinesis-parent-poll")
            )

    async def _start_fan_out(self, efo: EnhancedFanOut) -> None:
        """Register (or reuse, or check) the stream consumer and open the HTTP/2 client that
        every shard's subscription goes through."""
        from kinesis_core.fanout.consumers import open_fan_out

        executor = self._executor
        assert executor is not None
        executor.fanout, self.consumer_arn = await open_fan_out(
            self._exit,
            self._client_config or ClientConfig.from_env(),
            self.stream,
            efo,
            executor,
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
        if self._leases is not None:
            await self._leases.stop_taking()
        tasks = self._tasks + [run.task for run in self._shards.values() if run.task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._forget_undelivered()
        # With auto_ack no ack can come once the loop stopped asking for records.
        config = self.config
        clock = self._clock
        deadline = clock.now() + (0.0 if config.auto_ack else config.close_timeout)
        runs = list(self._shards.values())
        for run in runs:
            self._feed(run, ShardEvent.CLOSE)  # its reader was stopped above
        try:
            for run in runs:
                drained = await run.acks(clock, max(deadline - clock.now(), 0.0))
                actions = self._feed(run, ShardEvent.DRAINED if drained else ShardEvent.ACK_TIMEOUT)
                if {Action.WRITE_CHECKPOINT, Action.WRITE_SHARD_END} & set(actions):
                    await self._write(run)
                    self._feed(run, ShardEvent.CHECKPOINTED)
        finally:
            try:
                await asyncio.gather(*self._handoffs, return_exceptions=True)
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

    def _forget_undelivered(self) -> None:
        """Batches still queued never reached the user: they cannot be acked, so the frontier
        stops before them. Same for the unread tail of the batch being iterated."""
        while not self._queue.empty():
            batch = self._queue.get_nowait()
            if batch is not None:
                self._shards[batch.shard_id].frontier.discard(batch)
        current = self._current
        # A revoked shard's batch was cut when its lease was lost; its run is gone.
        if current is not None and current.shard_id in self._shards:
            self._shards[current.shard_id].frontier.truncate(current, self._delivered)
        self._queue.put_nowait(None)

    def _revoke(self, shard_id: str) -> None:
        """The shard's lease is lost: from now on none of its records reaches the user (the
        queued ones and the rest of the batch being iterated are dropped) and no checkpoint
        of it is written (the lease manager refuses). Synchronous, so nothing slips through."""
        run = self._shards.pop(shard_id, None)
        self._lineage.release(shard_id)
        if run is not None:
            self._feed(run, ShardEvent.LEASE_LOST)

    def _hand_off(self, shard_id: str) -> None:
        """Another worker asked for the shard's lease: stop delivering it now (as a lost
        lease), give what was delivered ``handoff_timeout`` (less a renewal interval) to be
        acked, write the final checkpoint and hand the lease over."""
        leases = self._leases
        assert leases is not None
        run = self._shards.pop(shard_id, None)
        self._lineage.release(shard_id)
        if run is None:
            leases.hand_over_soon(shard_id)
            return
        self._feed(run, ShardEvent.HANDOFF_ASKED)
        task = asyncio.create_task(self._finish_hand_off(run), name=f"kinesis-hand-off-{shard_id}")
        self._handoffs.add(task)
        task.add_done_callback(self._handoffs.discard)

    async def _finish_hand_off(self, run: _ShardRun) -> None:
        leases = self._leases
        assert leases is not None
        config = leases.config
        wait = max(config.handoff_every - config.renew_every, config.handoff_every / 2)
        drained = await run.acks(self._clock, wait)
        actions = self._feed(run, ShardEvent.DRAINED if drained else ShardEvent.ACK_TIMEOUT)
        if Action.HAND_OVER not in actions:
            return
        shard_id = run.node.shard_id
        try:
            handed = await leases.hand_over(shard_id, run.frontier.checkpoint, run.node.parents)
        except Exception:
            logger.warning(
                "handing the lease of %s over failed; the other worker takes it after the "
                "hand-off timeout",
                shard_id,
                exc_info=True,
            )
            handed = False
        self._feed(run, ShardEvent.CHECKPOINTED if handed else ShardEvent.LEASE_LOST)

    def _feed(self, run: _ShardRun, event: ShardEvent) -> tuple[Action, ...]:
        """One event to the shard's machine; the actions that are done at once (stopping the
        reader, the user's hooks) are done here, the writes are returned to the caller."""
        actions = run.shard.handle(event)
        for action in actions:
            if action is Action.STOP_READER:
                self._stop_delivery(run)
            elif action in self._notify:
                hook = self._notify[action]
                if hook is not None:
                    hook(run.node.shard_id)
        return actions

    def _stop_delivery(self, run: _ShardRun) -> None:
        """None of the shard's records reaches the user any more: its reader stops, its queued
        batches and the rest of the batch being iterated are dropped."""
        shard_id = run.node.shard_id
        if run.task is not None and run.task is not asyncio.current_task():
            run.task.cancel()
        kept = []
        while not self._queue.empty():
            batch = self._queue.get_nowait()
            if batch is not None and batch.shard_id == shard_id:
                run.frontier.discard(batch)
            else:
                kept.append(batch)
        for batch in kept:
            self._queue.put_nowait(batch)
        current = self._current
        if current is not None and current.shard_id == shard_id:
            run.frontier.truncate(current, self._delivered)

    def _fail(self, exc: BaseException) -> None:
        """A reader or the discovery hit an error no retry fixes: stop, and let the iterator
        raise it."""
        if self._failure is not None:
            return
        self._failure = exc
        self._life.handle(Event.FAIL)
        current = asyncio.current_task()
        for task in self._tasks + [r.task for r in self._shards.values() if r.task is not None]:
            if task is not current:
                task.cancel()
        self._forget_undelivered()

    # -- delivery ---------------------------------------------------------------------------

    def __aiter__(self) -> Consumer:
        return self

    async def __anext__(self) -> KinesisRecord:
        """The next record. The iteration state lives on the consumer, so breaking out of an
        ``async for`` and starting another one continues where the first stopped."""
        batch = self._current
        i = self._delivered
        if batch is not None:
            if self.config.auto_ack and i:
                batch.records[i - 1].ack()
            if i < len(batch):
                self._delivered = i + 1
                return batch.records[i]
        batch = await self._next_batch()
        if batch is None:
            raise StopAsyncIteration
        self._current = batch
        self._delivered = 1
        return batch.records[0]

    async def batches(self) -> AsyncIterator[RecordBatch]:
        """One :class:`RecordBatch` per GetRecords response: the fast path (ack with
        ``batch.ack()``)."""
        while (batch := await self._next_batch()) is not None:
            yield batch
            if self.config.auto_ack:
                batch.ack()

    async def _next_batch(self) -> RecordBatch | None:
        if self._life.state in (State.NEW, State.STARTING):
            self._life.require("read records")
        if self._recorder.enabled and self._handed_at is not None:
            self._recorder.processed(time.perf_counter() - self._handed_at)
        batch = await self._queue.get()
        if batch is not None and self._deserializer is not None:
            await self._deserializer.deserialize(batch)
        if batch is None:
            self._queue.put_nowait(None)
            if self._failure is not None:
                raise self._failure
        elif self._recorder.enabled:
            self._recorder.delivered(batch.shard_id, batch.records[: len(batch)], time.time())
            self._handed_at = time.perf_counter()
        return batch

    # -- discovery and readers --------------------------------------------------------------

    async def _discover(self, *, first: bool = False) -> None:
        config = self.config
        app, name = config.application_name, self.stream.name
        executor = self._executor
        assert executor is not None
        summary = await executor.execute(DescribeStreamSummary(self.stream))
        facts = StreamFacts.from_response(summary)
        known = self.stream_facts
        if known is not None and facts.created_ms != known.created_ms:
            # Deleted and created again since start (a server that still answers the old
            # iterators, as moto does, would let the readers skip its records).
            raise recreated_while_read(
                f"discovery of {self.stream}", str(self.stream), known.created_ms, facts.created_ms
            )
        rows = await self._store.list(app, name)
        shard_filter = config.initial_position.shard_filter() if first and not rows else None
        shards = await executor.execute(ListShards(self.stream, shard_filter))
        if first:
            rows = await settle_incarnation(
                self._store,
                app,
                name,
                rows,
                facts=facts,
                shards=shards,
                on_stream_recreated=config.on_stream_recreated,
                initial_position=config.initial_position,
            )
            self.stream_facts = facts
            self._checkpointer.stream_created_ms = facts.created_ms
        for row in rows:
            self._checkpointer.observe(row)
        leasable = self._leasable()
        self._lineage.update(
            [ShardNode.from_shard_info(info) for info in shards],
            {row.shard_id: row.value for row in rows},
        )
        await self._create_leases()
        if self._leases is not None and self._leasable() - leasable:
            # New shards (a reshard another worker saw first, whose leases its scan showed):
            # take them now, not a take interval later.
            self._leases.poke()
        self._start_ready()

    async def _first_discovery(self) -> None:
        """Discovery at start: describe the stream, check the stored checkpoints against it, list
        the shards. Errors that may pass (throttling, a 5xx, a stream still being created) are
        retried (:data:`START_RETRY`) for ``start_timeout`` seconds, an endpoint that does not
        answer at all for five attempts; the rest (no such stream, access denied, checkpoints
        of another incarnation) raise from ``start`` at once, naming the cause.

        An application with no checkpoints yet lists only the shards its initial position can
        read (the KCL's rule for an empty lease table). Every later listing is complete: a
        filtered one could hide a parent that must be read before its children.
        """
        executor = self._executor
        assert executor is not None
        what = f"starting to read {self.stream}"
        retry = dataclasses.replace(START_RETRY, deadline=self.config.start_timeout).begin(
            self._clock.now()
        )
        while True:
            try:
                await executor.attempt(lambda: self._discover(first=True), retry, what)
            except Exception as exc:
                if error_kind(exc) is None:
                    raise
                raise KinesisServiceError.wrap(exc, what) from exc
            if self._lineage.states():
                return
            # No shard at all: a stream still being created lists none (kinesis-mock).
            delay = retry.pause(self._clock.now())
            if delay is None:
                return
            logger.info("%s lists no shards yet; waiting for it", self.stream)
            await self._clock.sleep(min(delay, _EMPTY_STREAM_WAIT))

    async def _discovery_loop(self) -> None:
        while True:
            await wait_event(self._clock, self._refresh, self.config.shard_refresh_interval)
            self._refresh.clear()
            try:
                await self._discover()
            except (StreamRecreatedError, CheckpointTableGoneError, ConfigurationError) as exc:
                # The stream or the store is not the one this consumer started on.
                self._fail(exc)
                return
            except Exception as exc:
                if error_kind(exc) is ErrorKind.NOT_FOUND:
                    # The stream was deleted: no retry brings it back; the iterator raises.
                    wrapped = KinesisServiceError.wrap(exc, f"listing the shards of {self.stream}")
                    wrapped.__cause__ = exc
                    self._fail(wrapped)
                    return
                logger.warning("shard discovery of %s failed; retrying", self.stream, exc_info=True)

    def _start_ready(self) -> None:
        if self._life.stopping or not self._reading:
            return
        held = None
        if self._leases is not None:
            held = self._leases.held()
            for shard_id in held:
                if self._lineage.state(shard_id) in (ShardState.ENDED, ShardState.SKIPPED):
                    self._leases.release_soon(shard_id)
        for decision in self._lineage.take_ready(held):
            node, start = decision.node, decision.start
            frontier = ShardFrontier(
                node.shard_id, start if isinstance(start, tuple) else start.sentinel
            )
            efo = self.config.fan_out
            incarnation = self._checkpointer.stream_created_ms
            machine: ShardRead = (
                PollingRead(
                    node,
                    start,
                    self._polling_options,
                    incarnation=incarnation,
                    stream=str(self.stream),
                )
                if efo is None
                else SubscriptionRead(
                    node, start, efo.subscription, incarnation=incarnation, stream=str(self.stream)
                )
            )
            run = _ShardRun(node, frontier, machine, measured_at=self._clock.now())
            self._shards[node.shard_id] = run
            if Action.START_READER in self._feed(run, ShardEvent.PARENTS_FINISHED):
                run.task = asyncio.create_task(
                    self._read_shard(run), name=f"kinesis-reader-{node.shard_id}"
                )

    async def _read_shard(self, run: _ShardRun) -> None:
        shard_id = run.node.shard_id
        executor = self._executor
        assert executor is not None
        link = self._recorder.transport(
            async_link(executor, self.stream, shard_id, self.consumer_arn), shard_id
        )
        try:
            try:
                ended = await run_shard_read(
                    run.machine,
                    link,
                    run.frontier,
                    self._queue.put if self._measures is None else self._measures(run),
                    clock=self._clock,
                    where=str(self.stream),
                )
            finally:
                await link.aclose()
            if ended.gone:
                logger.warning(
                    "shard %s of %s is no longer listed (past the retention period); not "
                    "reading it",
                    shard_id,
                    self.stream,
                )
                self._lineage.shard_gone(shard_id)
            else:
                self._lineage.add_children(ended.children)
                # As the KCL: the children's leases exist before the parent says SHARD_END.
                await self._create_leases()
                self._lineage.reader_done(shard_id)
                run.children = tuple(child.shard_id for child in ended.children)
                run.frontier.end()
                self._feed(run, ShardEvent.READ_TO_END)
                await self._finish_shard(run)
            if self._leases is not None:
                await self._leases.release(shard_id)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._fail(exc)
            return
        self._start_ready()
        self._refresh.set()

    async def _finish_shard(self, run: _ShardRun) -> None:
        """SHARD_END goes to the store only after every record of the shard is acked; the
        children start only after it is stored. A lost lease ends this early: the shard is
        another worker's to finish."""
        await run.acks(self._clock)
        if Action.WRITE_SHARD_END not in self._feed(run, ShardEvent.DRAINED):
            return
        executor = self._executor
        assert executor is not None
        written = await executor.attempt(
            lambda: self._checkpointer.write(
                run.node.shard_id, SHARD_END, run.node.parents, run.children
            ),
            SHARD_END_RETRY,
            f"writing SHARD_END of {run.node.shard_id}",
        )
        if written:
            self._lineage.shard_ended(run.node.shard_id)
            self._feed(run, ShardEvent.CHECKPOINTED)

    # -- leases -----------------------------------------------------------------------------

    async def _create_leases(self) -> None:
        """Give every shard still to be read a lease row (unowned, at its start position),
        parents first. Every worker tries; the conditional create lets one of them win. A
        failure stops the round (keeping the order); the next discovery tries again."""
        leases = self._leases
        if leases is None:
            return
        created = False
        try:
            for decision in self._lineage.waiting():
                node, start = decision.node, decision.start
                if isinstance(start, InitialPosition) and not leases.has_row(node.shard_id):
                    created |= await leases.create(
                        node.shard_id, start.sentinel, node.parents, node.hash_range
                    )
        except Exception:
            logger.warning("creating leases of %s failed; retrying", self.stream, exc_info=True)
        if created:
            leases.poke()

    def _leasable(self) -> set[str]:
        """Shards a lease may be taken for: listed, and not finished."""
        return {
            shard_id
            for shard_id, state in self._lineage.states().items()
            if state in (ShardState.WAITING_FOR_PARENT, ShardState.READING, ShardState.ENDING)
        }

    def _on_lease_scan(self, rows: list[Checkpoint]) -> None:
        """A scan of the lease table: shards other workers finished unblock their children;
        leases of shards not listed yet (another worker saw a reshard first) ask for a
        listing."""
        self._lineage.observe({row.shard_id: row.value for row in rows})
        unknown = {row.shard_id for row in rows if self._lineage.state(row.shard_id) is None}
        if unknown - self._unknown_leases:
            self._refresh.set()
        self._unknown_leases = unknown
        self._start_ready()

    async def _parent_poll_loop(self) -> None:
        """Held shards waiting for parents that other workers read: look at those parents'
        rows now and then (the KCL's BlockOnParentShardTask)."""
        assert self._leases is not None
        while True:
            await self._clock.sleep(self._leases.config.parent_poll_interval)
            waiting = [
                node
                for shard_id in self._leases.held()
                if self._lineage.state(shard_id) is ShardState.WAITING_FOR_PARENT
                and (node := self._lineage.node(shard_id)) is not None
            ]
            parents = {
                parent
                for node in waiting
                for parent in node.parents
                if self._lineage.state(parent) is ShardState.WAITING_FOR_PARENT
            }
            try:
                app, name = self.config.application_name, self.stream.name
                rows = await asyncio.gather(*(self._store.get(app, name, p) for p in parents))
            except Exception:
                logger.warning("reading parent leases failed; retrying", exc_info=True)
                continue
            self._lineage.observe({row.shard_id: row.value for row in rows if row is not None})
            self._start_ready()

    # -- checkpoints ------------------------------------------------------------------------

    async def _flush_loop(self) -> None:
        while True:
            await self._clock.sleep(self.config.checkpoint_interval)
            try:
                await self._flush()
            except CheckpointTableGoneError as exc:
                self._fail(exc)
                return
            except Exception:
                logger.warning("checkpoint flush of %s failed", self.stream, exc_info=True)

    async def _flush(self) -> None:
        """Write every shard's contiguous acked prefix that moved since the last write."""
        for run in list(self._shards.values()):
            await self._write(run)

    async def _write(self, run: _ShardRun) -> None:
        value = run.frontier.checkpoint
        if value is not None:
            await self._checkpointer.write(run.node.shard_id, value, run.node.parents, run.children)

    async def checkpoint(self) -> None:
        """Write the checkpoints now instead of at the next ``checkpoint_interval``."""
        await self._flush()

    # -- status -----------------------------------------------------------------------------

    def status(self) -> list[ShardStatus]:
        """Per shard: state, newest position read, stored checkpoint, lag and unacked count.

        With leases: the shards this worker holds or has read, not those of other workers.
        """
        out = []
        for shard_id, state in sorted(self.shard_states().items()):
            node = self._lineage.node(shard_id)
            run = self._shards.get(shard_id)
            row = self._checkpointer.row(shard_id)
            out.append(
                ShardStatus(
                    shard_id=shard_id,
                    state=state,
                    parent_shard_ids=node.parents if node is not None else (),
                    position=run.frontier.last_position if run else None,
                    checkpoint=row.value if row else None,
                    millis_behind_latest=run.machine.millis_behind_latest if run else None,
                    pending_acks=run.frontier.pending if run else 0,
                    transport=run.machine.transport if run else None,
                    connects=run.machine.connects if run else 0,
                    bad_answers=run.machine.bad_answers if run else 0,
                )
            )
        return out

    def _lags(self) -> dict[str, int | None]:
        """MillisBehindLatest of the last read of each shard being read now."""
        return {
            shard_id: run.machine.millis_behind_latest
            for shard_id, run in list(self._shards.items())
            if run.task is not None and not run.task.done()
        }

    def _measured(self, run: _ShardRun) -> Callable[[RecordBatch], Awaitable[None]]:
        """The reader's emit, counting the bytes it reads (throughput assignment)."""

        async def emit(batch: RecordBatch) -> None:
            run.read_bytes += sum(len(record.data) for record in batch)
            await self._queue.put(batch)

        return emit

    def _throughput(self, shard_id: str) -> float | None:
        """KiB/s read from a shard since the last call (None: not being read)."""
        run = self._shards.get(shard_id)
        if run is None:
            return None
        now = self._clock.now()
        elapsed, run.measured_at = now - run.measured_at, now
        read, run.read_bytes = run.read_bytes, 0
        return read / 1024 / elapsed if elapsed > 0 else None

    def _leases_held(self) -> int:
        return 0 if self._leases is None else len(self._leases.coordinator.held)

    def leased_shards(self) -> list[str]:
        """The shards whose leases this worker holds (empty without leases)."""
        return [] if self._leases is None else sorted(self._leases.held())

    def shard_states(self) -> dict[str, ShardState]:
        """State per shard (with leases: the shards this worker holds or has read)."""
        states = self._lineage.states()
        if self._leases is None:
            return states
        mine = set(self._leases.held()) | set(self._shards)
        return {shard_id: state for shard_id, state in states.items() if shard_id in mine}


def _checkpoint_store(given: object) -> CheckpointStore:
    """The store a Consumer was given: a store, a path to a SQLite file, or None (the default
    file); anything else is refused, naming the argument."""
    if given is None:
        return SQLiteCheckpointStore(DEFAULT_CHECKPOINT_PATH)
    if isinstance(given, (str, os.PathLike)):
        return SQLiteCheckpointStore(given)
    if isinstance(given, CheckpointStore):
        return given
    raise ConfigurationError(
        "checkpoint_store",
        "must be a checkpoint store (SQLiteCheckpointStore, DynamoDBCheckpointStore, "
        f"MemoryCheckpointStore, ...) or the path of a SQLite file, got {type(given).__name__}",
    )
