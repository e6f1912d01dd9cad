"""The Consumer: shard discovery, one reader task per shard, delivery, acks and checkpoints.

Everything that decides lives in the sans-I/O pieces (:mod:`.lineage`, :mod:`.frontier`,
:mod:`.reader`); this module only runs tasks and moves batches between them:

- discovery: ListShards (paginated) plus the stored checkpoints feed the lineage, which says
  which shards may start and from where (parents before children);
- one reader task per started shard: batches go into one bounded queue (backpressure), and are
  registered in the shard's frontier before they are queued;
- the flusher: every ``checkpoint_interval`` the frontier's contiguous acked prefix goes to the
  store with compare-and-set, so an older position never overwrites a newer one;
- at a shard's end: wait until all its records are acked, write SHARD_END, then start the
  children;
- close: stop reading, forget what was never delivered, wait (up to ``close_timeout``) for the
  acks of what was delivered, write the final checkpoints.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from kinesis_core.checkpoint.base import (
    SHARD_END,
    Checkpoint,
    CheckpointConflictError,
    CheckpointStore,
    CheckpointValue,
    checkpoint_order,
)
from kinesis_core.checkpoint.sqlite import SQLiteCheckpointStore
from kinesis_core.client import ClientConfig, create_kinesis_client
from kinesis_core.consumer import fastparse
from kinesis_core.consumer.frontier import RecordBatch, ShardFrontier
from kinesis_core.consumer.lineage import Lineage, ShardNode, ShardState
from kinesis_core.consumer.positions import LATEST, InitialPosition
from kinesis_core.consumer.reader import (
    ErrorKind,
    ReaderOptions,
    ShardReaderMachine,
    error_kind,
    run_shard_reader,
)
from kinesis_core.consumer.status import ShardStatus
from kinesis_core.errors import ConfigurationError
from kinesis_core.records import KinesisRecord
from kinesis_core.shard_map import list_all_shards

logger = logging.getLogger(__name__)

DEFAULT_CHECKPOINT_PATH = "kinesis-checkpoints.sqlite3"
_START_ATTEMPTS = 5
_DRAIN_POLL = 0.02
"""Seconds between looks at a frontier while waiting for acks. Acks are plain synchronous
calls that must stay cheap per record, so nothing wakes a waiter on each; waiting for acks
happens only at a shard's end and on close, where a short poll costs nothing."""


class _Checkpointer:
    """The store rows of one (application, stream), and the only writer of them.

    Writes are serialized per shard. A lost compare-and-set adopts the stored row; the write is
    retried only if the stored value is still behind, so a checkpoint never moves backwards.
    """

    def __init__(self, store: CheckpointStore, application: str, stream: str) -> None:
        self.store = store
        self.application = application
        self.stream = stream
        self._rows: dict[str, Checkpoint] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    def row(self, shard_id: str) -> Checkpoint | None:
        return self._rows.get(shard_id)

    def observe(self, row: Checkpoint) -> None:
        current = self._rows.get(row.shard_id)
        if current is None or row.counter > current.counter:
            self._rows[row.shard_id] = row

    async def write(
        self, shard_id: str, value: CheckpointValue, parents: Sequence[str] = ()
    ) -> None:
        lock = self._locks.setdefault(shard_id, asyncio.Lock())
        async with lock:
            for _ in range(5):
                current = self._rows.get(shard_id)
                if current is not None and (
                    current.value == value
                    or checkpoint_order(value) < checkpoint_order(current.value)
                ):
                    return
                try:
                    self._rows[shard_id] = await self.store.put(
                        self.application,
                        self.stream,
                        shard_id,
                        value,
                        expected=current,
                        parent_shard_ids=parents,
                    )
                    return
                except CheckpointConflictError as exc:
                    if exc.current is None:
                        self._rows.pop(shard_id, None)
                    else:
                        self._rows[shard_id] = exc.current
            raise CheckpointConflictError(
                shard_id, self._rows.get(shard_id), "the stored row kept changing under us"
            )


@dataclass(eq=False)
class _ShardRun:
    node: ShardNode
    frontier: ShardFrontier
    machine: ShardReaderMachine
    task: asyncio.Task[None] | None = field(default=None, repr=False)


class Consumer:
    """Reads every shard of a stream, parents before children, with acks and checkpoints.

    ::

        async with Consumer("orders", client_config=config, initial_position=TRIM_HORIZON) as c:
            async for record in c:
                handle(record)
                record.ack()

    A record's checkpoint moves only once it and every record before it in its shard are
    acked. ``auto_ack=True`` acks a record (or a batch, with :meth:`batches`) when the next one
    is asked for, i.e. after the loop body ran; the last one before the loop stopped is not
    acked (it is read again after a restart). Checkpoints are keyed by
    (``application_name``, stream, shard); the default store is a SQLite file,
    ``kinesis-checkpoints.sqlite3`` in the working directory. Acks must come from the event
    loop's thread.
    """

    def __init__(
        self,
        stream: str,
        *,
        client_config: ClientConfig | None = None,
        client: Any = None,
        checkpoint_store: CheckpointStore | None = None,
        application_name: str = "default",
        initial_position: InitialPosition = LATEST,
        checkpoint_interval: float = 5.0,
        shard_refresh_interval: float = 30.0,
        close_timeout: float = 30.0,
        auto_ack: bool = False,
        max_queued_batches: int = 8,
        max_records_per_call: int = 10_000,
        idle_interval: float = 1.0,
    ) -> None:
        if not stream:
            raise ConfigurationError("stream must be a stream name or ARN")
        if not isinstance(initial_position, InitialPosition):
            raise ConfigurationError(
                "initial_position must be TRIM_HORIZON, LATEST or AtTimestamp(t), "
                f"got {initial_position!r}"
            )
        for name, value in (
            ("checkpoint_interval", checkpoint_interval),
            ("shard_refresh_interval", shard_refresh_interval),
        ):
            if value <= 0:
                raise ConfigurationError(f"{name} must be > 0 seconds, got {value}")
        if close_timeout < 0:
            raise ConfigurationError(f"close_timeout must be >= 0 seconds, got {close_timeout}")
        if max_queued_batches < 1:
            raise ConfigurationError(f"max_queued_batches must be >= 1, got {max_queued_batches}")
        self.stream = stream
        self.application_name = application_name
        self.initial_position = initial_position
        self.checkpoint_interval = checkpoint_interval
        self.shard_refresh_interval = shard_refresh_interval
        self.close_timeout = close_timeout
        self.auto_ack = auto_ack
        self._reader_options = ReaderOptions(
            limit=max_records_per_call, idle_interval=idle_interval
        )
        self._client_config = client_config
        self._client = client
        self._owns_store = checkpoint_store is None
        self._store: CheckpointStore = checkpoint_store or SQLiteCheckpointStore(
            DEFAULT_CHECKPOINT_PATH
        )
        self._checkpointer = _Checkpointer(self._store, application_name, stream)
        self._lineage = Lineage(initial_position)
        self._shards: dict[str, _ShardRun] = {}
        self._queue: asyncio.Queue[RecordBatch | None] = asyncio.Queue(max_queued_batches)
        self._exit = contextlib.AsyncExitStack()
        self._tasks: list[asyncio.Task[None]] = []
        self._refresh = asyncio.Event()
        self._failure: BaseException | None = None
        self._current: RecordBatch | None = None
        self._delivered = 0
        self._started = False
        self._closed = False

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
        if self._started:
            raise RuntimeError("Consumer already started")
        self._started = True
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
            await self._first_discovery()
        except BaseException:
            await self._exit.aclose()
            if self._owns_store:
                await self._store.close()
            raise
        self._tasks.append(asyncio.create_task(self._discovery_loop(), name="kinesis-discovery"))
        self._tasks.append(asyncio.create_task(self._flush_loop(), name="kinesis-checkpoints"))

    async def close(self) -> None:
        """Stop reading, wait for the acks of delivered records, write the final checkpoints."""
        if self._closed or not self._started:
            self._closed = True
            return
        self._closed = True
        tasks = self._tasks + [run.task for run in self._shards.values() if run.task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._forget_undelivered()
        # With auto_ack no ack can come once the loop stopped asking for records.
        deadline = time.monotonic() + (0.0 if self.auto_ack else self.close_timeout)
        while time.monotonic() < deadline and not all(  # noqa: ASYNC110 (see _DRAIN_POLL)
            run.frontier.drained for run in self._shards.values()
        ):
            await asyncio.sleep(_DRAIN_POLL)
        try:
            await self._flush()
        finally:
            await self._exit.aclose()
            if self._owns_store:
                await self._store.close()

    def _forget_undelivered(self) -> None:
        """Batches still queued never reached the user: they cannot be acked, so the frontier
        stops before them. Same for the unread tail of the batch being iterated."""
        while not self._queue.empty():
            batch = self._queue.get_nowait()
            if batch is not None:
                self._shards[batch.shard_id].frontier.discard(batch)
        if self._current is not None:
            self._shards[self._current.shard_id].frontier.truncate(self._current, self._delivered)
        self._queue.put_nowait(None)

    def _fail(self, exc: BaseException) -> None:
        """A reader or the discovery hit an error no retry fixes: stop, and let the iterator
        raise it."""
        if self._failure is not None:
            return
        self._failure = exc
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
            if self.auto_ack and i:
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
            if self.auto_ack:
                batch.ack()

    async def _next_batch(self) -> RecordBatch | None:
        if not self._started:
            raise RuntimeError("start the Consumer first (async with Consumer(...) as c)")
        batch = await self._queue.get()
        if batch is None:
            self._queue.put_nowait(None)
            if self._failure is not None:
                raise self._failure
        return batch

    # -- discovery and readers --------------------------------------------------------------

    async def _discover(self, *, first: bool = False) -> None:
        rows = await self._store.list(self.application_name, self.stream)
        shard_filter = self.initial_position.shard_filter() if first and not rows else None
        shards = await list_all_shards(self._client, self.stream, shard_filter)
        for row in rows:
            self._checkpointer.observe(row)
        self._lineage.update(
            [ShardNode.from_shard_info(info) for info in shards],
            {row.shard_id: row.value for row in rows},
        )
        self._start_ready()

    async def _first_discovery(self) -> None:
        """Discovery at start: transient errors and throttling are retried a few times, the
        rest (no such stream, access denied) raise from ``start``.

        An application with no checkpoints yet lists only the shards its initial position can
        read (the KCL's rule for an empty lease table). Every later listing is complete: a
        filtered one could hide a parent that must be read before its children.
        """
        delay = 0.2
        for attempt in range(1, _START_ATTEMPTS + 1):
            try:
                await self._discover(first=True)
                return
            except Exception as exc:
                retryable = error_kind(exc) in (ErrorKind.THROTTLED, ErrorKind.TRANSIENT)
                if not retryable or attempt == _START_ATTEMPTS:
                    raise
                logger.warning("listing the shards of %s failed; retrying", self.stream)
                await asyncio.sleep(delay)
                delay *= 2

    async def _discovery_loop(self) -> None:
        while True:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._refresh.wait(), self.shard_refresh_interval)
            self._refresh.clear()
            try:
                await self._discover()
            except Exception:
                logger.warning("shard discovery of %s failed; retrying", self.stream, exc_info=True)

    def _start_ready(self) -> None:
        if self._closed or self._failure is not None:
            return
        for decision in self._lineage.take_ready():
            node, start = decision.node, decision.start
            frontier = ShardFrontier(
                node.shard_id, start if isinstance(start, tuple) else start.sentinel
            )
            run = _ShardRun(node, frontier, ShardReaderMachine(node, start, self._reader_options))
            run.task = asyncio.create_task(
                self._read_shard(run), name=f"kinesis-reader-{node.shard_id}"
            )
            self._shards[node.shard_id] = run

    async def _read_shard(self, run: _ShardRun) -> None:
        shard_id = run.node.shard_id
        try:
            ended = await run_shard_reader(
                run.machine, self._client, self.stream, run.frontier, self._queue.put
            )
            if ended.gone:
                logger.warning("shard %s of %s is gone; not reading it", shard_id, self.stream)
                self._lineage.shard_gone(shard_id)
            else:
                self._lineage.add_children(ended.children)
                self._lineage.reader_done(shard_id)
                run.frontier.end()
                await self._finish_shard(run)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._fail(exc)
            return
        self._start_ready()
        self._refresh.set()

    async def _finish_shard(self, run: _ShardRun) -> None:
        """SHARD_END goes to the store only after every record of the shard is acked; the
        children start only after it is stored."""
        while not run.frontier.drained:  # noqa: ASYNC110 (see _DRAIN_POLL)
            await asyncio.sleep(_DRAIN_POLL)
        delay = 0.2
        while True:
            try:
                await self._checkpointer.write(run.node.shard_id, SHARD_END, run.node.parents)
                break
            except Exception:
                logger.warning(
                    "writing SHARD_END of %s failed; retrying", run.node.shard_id, exc_info=True
                )
                await asyncio.sleep(delay)
                delay = min(delay * 2, 10.0)
        self._lineage.shard_ended(run.node.shard_id)

    # -- checkpoints ------------------------------------------------------------------------

    async def _flush_loop(self) -> None:
        while True:
            await asyncio.sleep(self.checkpoint_interval)
            try:
                await self._flush()
            except Exception:
                logger.warning("checkpoint flush of %s failed", self.stream, exc_info=True)

    async def _flush(self) -> None:
        """Write every shard's contiguous acked prefix that moved since the last write."""
        for shard_id, run in list(self._shards.items()):
            value = run.frontier.checkpoint
            if value is not None:
                await self._checkpointer.write(shard_id, value, run.node.parents)

    async def checkpoint(self) -> None:
        """Write the checkpoints now instead of at the next ``checkpoint_interval``."""
        await self._flush()

    # -- status -----------------------------------------------------------------------------

    def status(self) -> list[ShardStatus]:
        """Per shard: state, newest position read, stored checkpoint, lag and unacked count."""
        out = []
        for shard_id, state in sorted(self._lineage.states().items()):
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
                )
            )
        return out

    def shard_states(self) -> dict[str, ShardState]:
        return self._lineage.states()
