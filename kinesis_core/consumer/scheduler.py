"""The Consumer's scheduler: which shards are read, by whom, and when (the KCL's Scheduler).

- discovery: DescribeStreamSummary and ListShards (paginated) plus the stored checkpoints feed
  the lineage, which says which shards may start and from where (parents before children); at
  start the stored checkpoints are first checked against the stream's creation time
  (:func:`~.checkpointer.settle_incarnation`: positions of a stream deleted and created again
  are never used);
- one reader task per started shard (:func:`~.reading.run_shard_read`), its batches handed to
  the :class:`~.delivery.Delivery`;
- each shard's life is its :class:`~.shard_consumer.ShardConsumer`: the scheduler feeds it
  events (read to the end, acks drained, a lease lost or asked for, close) and does what it
  answers; at a shard's end SHARD_END is written once all its records are acked, then the
  children start;
- with leases, the events of the :class:`~kinesis_core.lease.LeaseManager`
  (:mod:`kinesis_core.lease.events`) are taken as they come and before every record delivered
  (:meth:`Scheduler.settle`), so a lost lease stops its shard before another of its records
  reaches the user.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable, Mapping

from kinesis_core.aws.backoff import Jitter
from kinesis_core.aws.calls import DescribeStreamSummary, ListShards
from kinesis_core.aws.classify import ErrorKind
from kinesis_core.aws.exceptions import error_kind
from kinesis_core.aws.executor import AsyncExecutor
from kinesis_core.aws.retry import RetryPolicy
from kinesis_core.checkpoint.base import Checkpoint, CheckpointStore, CheckpointTableGoneError
from kinesis_core.consumer.checkpointer import Checkpointer, settle_incarnation
from kinesis_core.consumer.config import ConsumerConfig
from kinesis_core.consumer.delivery import Delivery
from kinesis_core.consumer.flusher import SHARD_END_RETRY, CheckpointFlusher
from kinesis_core.consumer.frontier import ShardFrontier
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
from kinesis_core.consumer.rounds import rounds
from kinesis_core.consumer.shard_consumer import Action, Event as ShardEvent
from kinesis_core.consumer.shard_dedup import Deduplicate, ShardDedup
from kinesis_core.consumer.shard_run import ShardRun
from kinesis_core.consumer.status import ShardStatus
from kinesis_core.consumer.subscription import SubscriptionRead
from kinesis_core.consumer.transport import ShardRead
from kinesis_core.errors import ConfigurationError, KinesisServiceError
from kinesis_core.lease.events import (
    HandOffAsked,
    LeaseAcquired,
    LeaseEvent,
    LeaseLost,
    LeasesFailed,
    TableScanned,
)
from kinesis_core.lease.manager import LeaseManager
from kinesis_core.lifecycle import Event, Lifecycle
from kinesis_core.records import KinesisRecord
from kinesis_core.runtime.clock import Clock, wait_event
from kinesis_core.stream import StreamRef
from kinesis_core.telemetry.recorder import ConsumerRecorder

logger = logging.getLogger(__name__)

START_RETRY = RetryPolicy(
    base=0.2, cap=2.0, jitter=Jitter.EQUAL, attempts=None, unreachable_attempts=5
)
"""The first discovery at ``start``: retried until ``start_timeout`` (the policy's deadline),
but given up after five attempts that reached no endpoint at all (1.5 to 3 s in all)."""
EMPTY_STREAM_RETRY = RetryPolicy(
    base=0.2, cap=1.0, jitter=Jitter.EQUAL, attempts=None, retry_on=frozenset({ErrorKind.IN_USE})
)
"""A stream that lists no shard yet (one still being created): listed again, at most a second
apart, until ``start_timeout``; then the consumer starts with none."""


class _NoShardsYet(Exception):
    """A stream still being created lists no shard (kinesis-mock): waited for as the service's
    ResourceInUseException for a stream being created is."""

    def __init__(self, stream: StreamRef) -> None:
        super().__init__(f"{stream} lists no shards yet")
        self.response = {"Error": {"Code": "ResourceInUseException", "Message": str(self)}}


class Scheduler:
    """Shards, lineage and leases of one Consumer; its tasks read, discover and take leases."""

    def __init__(
        self,
        stream: StreamRef,
        config: ConsumerConfig,
        store: CheckpointStore,
        checkpointer: Checkpointer | LeaseManager,
        leases: LeaseManager | None,
        delivery: Delivery,
        life: Lifecycle,
        clock: Clock,
        recorder: ConsumerRecorder,
        notify: Mapping[Action, Callable[[str], None] | None],
    ) -> None:
        self.stream = stream
        self.config = config
        self.leases = leases
        self.runs: dict[str, ShardRun] = {}
        """The shards started on this worker and not revoked."""
        self.flusher = CheckpointFlusher(
            checkpointer, self.runs, clock, config.checkpoint_interval, str(stream)
        )
        self.lineage = Lineage(config.initial_position)
        self.executor: AsyncExecutor | None = None
        self.consumer_arn: str | None = None
        self.stream_facts: StreamFacts | None = None
        self.reading = False
        """Readers may start (after the checks at start, and the fan-out's registration)."""
        self.tasks: list[asyncio.Task[None]] = []
        self.handoffs: set[asyncio.Task[None]] = set()
        """Shards being handed over to other workers (their last acks, then the checkpoint)."""
        self._store = store
        self._delivery = delivery
        self._life = life
        self._clock = clock
        self._recorder = recorder
        self._notify = notify
        self._refresh = asyncio.Event()
        self._unknown_leases: set[str] = set()
        lease_config = None if leases is None else leases.config
        self._measures = lease_config is not None and lease_config.assignment == "throughput"

    def start_tasks(self) -> None:
        """The background work: discovery, checkpoints, and with leases the lease manager,
        its events and the look at other workers' parents."""
        spawn = asyncio.create_task
        self.tasks.append(spawn(self._discovery_loop(), name="kinesis-discovery"))
        self.tasks.append(spawn(self.flusher.run(self.fail), name="kinesis-checkpoints"))
        if self.leases is not None:
            self.leases.start()
            self.tasks.append(spawn(self._lease_event_loop(), name="kinesis-lease-events"))
            self.tasks.append(spawn(self._parent_poll_loop(), name="kinesis-parent-poll"))

    def fail(self, exc: BaseException) -> None:
        """A reader, the discovery, the store or the leases hit an error no retry fixes: stop,
        and let the iterator raise it."""
        if self._delivery.failure is not None:
            return
        self._delivery.failure = exc
        self._life.handle(Event.FAIL)
        current = asyncio.current_task()
        for task in self.tasks + [r.task for r in self.runs.values() if r.task is not None]:
            if task is not current:
                task.cancel()
        self.forget_undelivered()

    def forget_undelivered(self) -> None:
        self._delivery.forget_undelivered({s: run.frontier for s, run in self.runs.items()})

    def feed(self, run: ShardRun, event: ShardEvent) -> tuple[Action, ...]:
        """One event to the shard's machine; the actions that are done at once (stopping the
        reader, the user's hooks) are done here, the writes are returned to the caller."""
        actions = run.shard.handle(event)
        for action in actions:
            if action is Action.STOP_READER:
                if run.task is not None and run.task is not asyncio.current_task():
                    run.task.cancel()
                self._delivery.drop_shard(run.shard_id, run.frontier)
            elif (hook := self._notify.get(action)) is not None:
                hook(run.shard_id)
        return actions

    # -- discovery --------------------------------------------------------------------------

    async def first_discovery(self) -> None:
        """Discovery at start: describe the stream, check the stored checkpoints against it, list
        the shards. Errors that may pass (throttling, a 5xx, a stream still being created) are
        retried (:data:`START_RETRY`) for ``start_timeout`` seconds, an endpoint that does not
        answer at all for five attempts; the rest (no such stream, access denied, checkpoints
        of another incarnation) raise from ``start`` at once, naming the cause.

        An application with no checkpoints yet lists only the shards its initial position can
        read (the KCL's rule for an empty lease table). Every later listing is complete: a
        filtered one could hide a parent that must be read before its children.
        """
        executor = self.executor
        assert executor is not None
        what = f"starting to read {self.stream}"
        timeout = self.config.start_timeout
        # One run for every listing: the deadline counts from the first.
        start_retry = dataclasses.replace(START_RETRY, deadline=timeout).begin(self._clock.now())

        async def listed() -> None:
            await executor.attempt(lambda: self.discover(first=True), start_retry, what)
            if not self.lineage.states():
                raise _NoShardsYet(self.stream)

        try:
            await executor.attempt(
                listed, dataclasses.replace(EMPTY_STREAM_RETRY, deadline=timeout), what
            )
        except _NoShardsYet:
            return
        except Exception as exc:
            if error_kind(exc) is None:
                raise
            raise KinesisServiceError.wrap(exc, what) from exc

    async def discover(self, *, first: bool = False) -> None:
        config = self.config
        app, name = config.application_name, self.stream.name
        executor = self.executor
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
        # A worker whose leases a leader assigns reads the table once; later listings read
        # only the rows of new shards (reads that grow with the shards, not the table).
        partial = not first and self.leases is not None and self.leases.assigned
        rows = [] if partial else await self._store.list(app, name)
        shard_filter = config.initial_position.shard_filter() if first and not rows else None
        shards = await executor.execute(ListShards(self.stream, shard_filter))
        if partial:
            new = [info.shard_id for info in shards if self.lineage.state(info.shard_id) is None]
            found = await asyncio.gather(*(self._store.get(app, name, s) for s in new))
            rows = [row for row in found if row is not None]
        checkpointer = self.flusher.checkpointer
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
            checkpointer.stream_created_ms = facts.created_ms
        for row in rows:
            checkpointer.observe(row)
        leasable = self.leasable()
        self.lineage.update(
            [ShardNode.from_shard_info(info) for info in shards],
            {row.shard_id: row.value for row in rows},
        )
        await self._create_leases()
        if self.leases is not None and self.leasable() - leasable:
            # New shards (a reshard another worker saw first, whose leases its scan showed):
            # take them now, not a take interval later.
            self.leases.poke()
        self.start_ready()

    async def _discovery_loop(self) -> None:
        """A listing every ``shard_refresh_interval`` (or when a shard ended, or a scan showed
        a lease of a shard not listed yet); a failed one is logged and the next one comes."""

        async def refresh() -> None:
            await wait_event(self._clock, self._refresh, self.config.shard_refresh_interval)
            self._refresh.clear()

        await rounds(
            refresh,
            self.discover,
            f"shard discovery of {self.stream}",
            fatal=self._discovery_fatal,
            fail=self.fail,
        )

    def _discovery_fatal(self, exc: Exception) -> BaseException | None:
        """The error a failed discovery stops the consumer with, if no later one can help."""
        if isinstance(exc, (StreamRecreatedError, CheckpointTableGoneError, ConfigurationError)):
            return exc  # the stream or the store is not the one this consumer started on
        if error_kind(exc) is ErrorKind.NOT_FOUND:
            # The stream was deleted: no retry brings it back; the iterator raises.
            wrapped = KinesisServiceError.wrap(exc, f"listing the shards of {self.stream}")
            wrapped.__cause__ = exc
            return wrapped
        return None

    # -- readers ----------------------------------------------------------------------------

    def start_ready(self) -> None:
        if self._life.stopping or not self.reading:
            return
        held = None
        if self.leases is not None:
            held = self.leases.held()
            for shard_id in held:
                if self.lineage.state(shard_id) in (ShardState.ENDED, ShardState.SKIPPED):
                    self.leases.release_soon(shard_id)
        for decision in self.lineage.take_ready(held):
            node, start = decision.node, decision.start
            frontier = ShardFrontier(
                node.shard_id, start if isinstance(start, tuple) else start.sentinel
            )
            efo = self.config.fan_out
            incarnation = self.flusher.checkpointer.stream_created_ms
            stream = str(self.stream)
            machine: ShardRead = (
                PollingRead(
                    node, start, self.config.polling, incarnation=incarnation, stream=stream
                )
                if efo is None
                else SubscriptionRead(
                    node, start, efo.subscription, incarnation=incarnation, stream=stream
                )
            )
            run = ShardRun(node, frontier, machine, measured_at=self._clock.now())
            self.runs[node.shard_id] = run
            if Action.START_READER in self.feed(run, ShardEvent.PARENTS_FINISHED):
                run.task = asyncio.create_task(
                    self._read_shard(run), name=f"kinesis-reader-{node.shard_id}"
                )

    async def _read_shard(self, run: ShardRun) -> None:
        shard_id = run.shard_id
        executor = self.executor
        assert executor is not None
        link = self._recorder.transport(
            async_link(executor, self.stream, shard_id, self.consumer_arn), shard_id
        )
        emit = self._delivery.measured(run.count) if self._measures else self._delivery.put
        try:
            dedup = self.config.dedup
            admit = None if dedup is None else await self._admit(run, dedup)
            try:
                ended = await run_shard_read(
                    run.machine,
                    link,
                    run.frontier,
                    emit,
                    clock=self._clock,
                    where=str(self.stream),
                    admit=admit,
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
                self.lineage.shard_gone(shard_id)
            else:
                self.lineage.add_children(ended.children)
                # As the KCL: the children's leases exist before the parent says SHARD_END.
                await self._create_leases()
                self.lineage.reader_done(shard_id)
                run.children = tuple(child.shard_id for child in ended.children)
                run.frontier.end()
                self.feed(run, ShardEvent.READ_TO_END)
                await self._finish_shard(run)
            if self.leases is not None:
                await self.leases.release(shard_id)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self.fail(exc)
            return
        self.start_ready()
        self._refresh.set()

    async def _admit(
        self, run: ShardRun, config: Deduplicate
    ) -> Callable[[list[KinesisRecord]], list[KinesisRecord]]:
        """Start the shard's deduplication with its stored window, else its parents' final
        ones (read from the store, retried until they are); what drops its duplicates."""
        shard_id = run.shard_id
        own = self.flusher.checkpointer.row(shard_id)
        stored = None if own is None else own.dedup_window
        parents: list[str] = []
        if stored is None and run.node.parents:
            app, name = self.config.application_name, self.stream.name
            executor = self.executor
            assert executor is not None
            rows = await executor.attempt(
                lambda: asyncio.gather(*(self._store.get(app, name, p) for p in run.node.parents)),
                SHARD_END_RETRY,
                f"reading the dedup windows of the parents of {shard_id}",
            )
            parents = [row.dedup_window for row in rows if row is not None and row.dedup_window]
        try:
            window = config.start(stored, parents)
        except ValueError as exc:
            logger.warning(
                "the stored dedup window of %s is unreadable (%s): it starts empty, so "
                "duplicates of records delivered before it may be delivered",
                shard_id,
                exc,
            )
            window = config.window()
        dedup = run.dedup = ShardDedup(window)
        recorder = self._recorder

        def admit(records: list[KinesisRecord]) -> list[KinesisRecord]:
            kept = dedup.admit(records)
            if kept is not records:
                recorder.duplicates(shard_id, len(records) - len(kept))
            return kept

        return admit

    async def _finish_shard(self, run: ShardRun) -> None:
        """SHARD_END goes to the store only after every record of the shard is acked; the
        children start only after it is stored. A lost lease ends this early: the shard is
        another worker's to finish."""
        await run.acks(self._clock)
        if Action.WRITE_SHARD_END not in self.feed(run, ShardEvent.DRAINED):
            return
        executor = self.executor
        assert executor is not None
        if await self.flusher.write_shard_end(run, executor):
            self.lineage.shard_ended(run.shard_id)
            self.feed(run, ShardEvent.CHECKPOINTED)

    def status(self, states: list[tuple[str, ShardState]]) -> list[ShardStatus]:
        """The status of these shards (in this order)."""
        out = []
        for shard_id, state in states:
            node = self.lineage.node(shard_id)
            run = self.runs.get(shard_id)
            row = self.flusher.checkpointer.row(shard_id)
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
                    duplicates=run.dedup.dropped if run and run.dedup else 0,
                )
            )
        return out

    def throughput(self, shard_id: str) -> float | None:
        """KiB/s read from a shard since the last call (None: not being read)."""
        run = self.runs.get(shard_id)
        return None if run is None else run.throughput(self._clock.now())

    # -- leases -----------------------------------------------------------------------------

    def leasable(self) -> set[str]:
        """Shards a lease may be taken for: listed, and not finished."""
        return {
            shard_id
            for shard_id, state in self.lineage.states().items()
            if state in (ShardState.WAITING_FOR_PARENT, ShardState.READING, ShardState.ENDING)
        }

    async def _create_leases(self) -> None:
        """Give every shard still to be read a lease row (unowned, at its start position),
        parents first. Every worker tries; the conditional create lets one of them win. A
        failure stops the round (keeping the order); the next discovery tries again."""
        leases = self.leases
        if leases is None:
            return
        created = False
        try:
            for decision in self.lineage.waiting():
                node, start = decision.node, decision.start
                if isinstance(start, InitialPosition) and not leases.has_row(node.shard_id):
                    created |= await leases.create(
                        node.shard_id, start.sentinel, node.parents, node.hash_range
                    )
        except Exception:
            logger.warning("creating leases of %s failed", self.stream, exc_info=True)
        if created:
            leases.poke()

    def settle(self) -> None:
        """Apply the lease events that came since the last look (before a record is handed
        out: a shard whose lease is gone delivers nothing more)."""
        leases = self.leases
        if leases is not None and leases.has_events:
            for event in leases.take_events():
                self._apply(event)

    async def _lease_event_loop(self) -> None:
        leases = self.leases
        assert leases is not None
        try:
            while True:
                for event in await leases.next_events():
                    self._apply(event)
        except Exception as exc:  # a bug in the scheduler: the consumer stops with it
            self.fail(exc)

    def _apply(self, event: LeaseEvent) -> None:
        if isinstance(event, LeaseAcquired):
            self.start_ready()
        elif isinstance(event, LeaseLost):
            self._revoke(event.shard_id)
        elif isinstance(event, HandOffAsked):
            self._hand_off(event.shard_id)
        elif isinstance(event, TableScanned):
            self._scanned(event.rows)
        elif isinstance(event, LeasesFailed):
            self.fail(event.error)

    def _scanned(self, rows: tuple[Checkpoint, ...]) -> None:
        """A scan of the lease table: shards other workers finished unblock their children;
        leases of shards not listed yet (another worker saw a reshard first) ask for a
        listing."""
        self.lineage.observe({row.shard_id: row.value for row in rows})
        unknown = {row.shard_id for row in rows if self.lineage.state(row.shard_id) is None}
        if unknown - self._unknown_leases:
            self._refresh.set()
        self._unknown_leases = unknown
        self.start_ready()

    def _revoke(self, shard_id: str) -> None:
        """The shard's lease is lost: from now on none of its records reaches the user (the
        queued ones and the rest of the batch being iterated are dropped) and no checkpoint
        of it is written (the lease manager refuses)."""
        run = self.runs.pop(shard_id, None)
        self.lineage.release(shard_id)
        if run is not None:
            self.feed(run, ShardEvent.LEASE_LOST)

    def _hand_off(self, shard_id: str) -> None:
        """Another worker asked for the shard's lease: stop delivering it now (as a lost
        lease), give what was delivered ``handoff_timeout`` (less a renewal interval) to be
        acked, write the final checkpoint and hand the lease over."""
        leases = self.leases
        assert leases is not None
        run = self.runs.pop(shard_id, None)
        self.lineage.release(shard_id)
        if run is None:
            leases.hand_over_soon(shard_id)
            return
        self.feed(run, ShardEvent.HANDOFF_ASKED)
        task = asyncio.create_task(self._finish_hand_off(run), name=f"kinesis-hand-off-{shard_id}")
        self.handoffs.add(task)
        task.add_done_callback(self.handoffs.discard)

    async def _finish_hand_off(self, run: ShardRun) -> None:
        leases = self.leases
        assert leases is not None
        config = leases.config
        wait = max(config.handoff_every - config.renew_every, config.handoff_every / 2)
        drained = await run.acks(self._clock, wait)
        actions = self.feed(run, ShardEvent.DRAINED if drained else ShardEvent.ACK_TIMEOUT)
        if Action.HAND_OVER not in actions:
            return
        shard_id = run.shard_id
        try:
            value = run.frontier.checkpoint
            window = None if value is None else run.window_at(value)
            handed = await leases.hand_over(shard_id, value, run.node.parents, window)
        except Exception:
            logger.warning(
                "handing the lease of %s over failed; the other worker takes it after the "
                "hand-off timeout",
                shard_id,
                exc_info=True,
            )
            handed = False
        self.feed(run, ShardEvent.CHECKPOINTED if handed else ShardEvent.LEASE_LOST)

    async def _parent_poll_loop(self) -> None:
        """Held shards waiting for parents that other workers read: look at those parents'
        rows every ``parent_poll_interval`` (the KCL's BlockOnParentShardTask)."""
        leases = self.leases
        assert leases is not None
        await rounds(
            lambda: self._clock.sleep(leases.config.parent_poll_interval),
            self._look_at_parents,
            "reading parent leases",
            fatal=lambda exc: None,
            fail=self.fail,
        )

    async def _look_at_parents(self) -> None:
        leases = self.leases
        assert leases is not None
        waiting = [
            node
            for shard_id in leases.held()
            if self.lineage.state(shard_id) is ShardState.WAITING_FOR_PARENT
            and (node := self.lineage.node(shard_id)) is not None
        ]
        parents = {
            parent
            for node in waiting
            for parent in node.parents
            if self.lineage.state(parent) is ShardState.WAITING_FOR_PARENT
        }
        app, name = self.config.application_name, self.stream.name
        rows = await asyncio.gather(*(self._store.get(app, name, p) for p in parents))
        self.lineage.observe({row.shard_id: row.value for row in rows if row is not None})
        self.start_ready()
