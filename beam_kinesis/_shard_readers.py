"""The transport side of ``ReadFromKinesis``: one shard reader per cursor, kept across bundles.

A :class:`ShardReaders` belongs to one DoFn instance (``setup`` to ``teardown``). For a
restriction's cursor it makes the core's sans-I/O reader and its link to the core's synchronous
executor (:class:`~kinesis_core.aws.executor.SyncExecutor`), stepped by a
:class:`~kinesis_core.consumer.reading.SyncShardReader`: polling
(:mod:`kinesis_core.consumer.polling`), or with enhanced fan-out a subscription
(:mod:`kinesis_core.consumer.subscription`) that lives on the process's event loop thread and
reads a couple of events ahead. The listings, the look at the stream after a refusal and the
fan-out start (registration, HTTP/2 client) are the core's too. It keeps the readers that
stopped exactly where their cursors are for the next bundle of the same restriction, so a shard
iterator and its rate-limit timers, or an open subscription, carry over instead of starting
again each bundle. A polling reader can send its next call ahead on the instance's
read-ahead thread (:meth:`~kinesis_core.consumer.reading.SyncShardReader.read_ahead`), and a
kept reader keeps such a call in flight: its answer is the one to the reader's next call from
the position it was kept at. The read loop (:mod:`beam_kinesis._read_loop`) never sees which
transport runs.

A shard that straddles two restrictions (a merged child) is read by both; a consumer may hold
only one subscription per shard, so such a shard is polled even in fan-out mode.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import datetime, timezone
from typing import Any, Protocol

from beam_kinesis._read_spec import ReadSpec
from beam_kinesis.backlog import ByteRate
from beam_kinesis.plan import (
    KinesisRestriction,
    ShardCursor,
)
from kinesis_core.aws import fastparse
from kinesis_core.aws.calls import Call, ListShards
from kinesis_core.aws.client import create_botocore_client
from kinesis_core.aws.executor import LISTING_MAX_AGE, LISTING_RETRY, SyncExecutor
from kinesis_core.consumer.lineage import ShardNode
from kinesis_core.consumer.links import LoopFanOut, SyncLink, sync_link
from kinesis_core.consumer.polling import MIN_CALL_INTERVAL, PollingOptions, PollingRead
from kinesis_core.consumer.positions import TRIM_HORIZON, AtTimestamp, InitialPosition
from kinesis_core.consumer.reading import SyncShardReader
from kinesis_core.consumer.subscription import SubscriptionRead
from kinesis_core.fanout.consumers import open_fan_out_on_loop
from kinesis_core.records import Position
from kinesis_core.runtime.loop_thread import LoopThread
from kinesis_core.shards.info import ShardInfo
from kinesis_core.stream import StreamRef
from kinesis_core.telemetry.metered import MeteredSyncTransport
from kinesis_core.telemetry.recorder import NO_RECORDER, ConsumerRecorder

KEEP_SECONDS = 290.0
"""How long an unused polling reader is kept: a shard iterator expires after five minutes."""
KEEP_SUBSCRIPTION_SECONDS = 15.0
"""How long an unused subscription is kept: a restriction that moved to another worker must
find it closed there (the service allows one subscription per shard and consumer)."""


class EarlierAnswers(Protocol):
    """Where a new reader takes the answers to its first calls, sent ahead before it existed
    (:class:`beam_kinesis._first_calls.FirstCalls`, which builds readers' machines from this
    module: a protocol here keeps the import one way)."""

    def take(
        self,
        spec: ReadSpec,
        created_ms: int | None,
        shard_id: str,
        call: Call,
        recorder: ConsumerRecorder = ...,
    ) -> Future[Any] | None: ...


Reader = SyncShardReader


def start_of(cursor: ShardCursor) -> Position | InitialPosition:
    """Where a new reader of ``cursor``'s shard starts."""
    if cursor.position is not None:
        return cursor.position
    if cursor.start is not None:
        return AtTimestamp(datetime.fromtimestamp(cursor.start / 1e6, timezone.utc))
    return TRIM_HORIZON


def straddles(restriction: KinesisRestriction, cursor: ShardCursor) -> bool:
    """The shard's range reaches past the restriction's (a merged child read by two)."""
    return cursor.lo < restriction.lo or cursor.hi > restriction.hi


def _node(cursor: ShardCursor) -> ShardNode:
    return ShardNode(cursor.shard_id, cursor.parents, (cursor.lo, cursor.hi), True)


def polling_machine(
    spec: ReadSpec, restriction: KinesisRestriction, cursor: ShardCursor
) -> PollingRead:
    """The polling machine of a new reader of ``cursor``'s shard in ``restriction``."""
    # A straddling shard is polled by two restrictions: they share its 5 calls/s and its
    # reads per second.
    sharing = 2 if straddles(restriction, cursor) else 1
    min_interval = sharing * MIN_CALL_INTERVAL
    options = PollingOptions(
        limit=spec.max_records_per_call,
        min_interval=min_interval,
        idle_interval=max(spec.idle_interval, min_interval),
        max_bytes_per_second=spec.max_read_bytes_per_second / sharing,
    )
    return PollingRead(
        _node(cursor),
        start_of(cursor),
        options,
        incarnation=restriction.created_ms,
        stream=spec.stream,
    )


class ShardReaders:
    """Readers of the shards this DoFn instance reads, and the client and executor they
    share."""

    def __init__(
        self,
        spec: ReadSpec,
        recorder: ConsumerRecorder = NO_RECORDER,
        first_calls: EarlierAnswers | None = None,
    ) -> None:
        self._spec = spec
        self._first_calls = first_calls
        self._recorder = recorder
        self._stream = StreamRef.of(spec.stream)
        # The readers retry on their own terms (rate, backoff, expired iterators).
        self.client: Any = create_botocore_client(spec.client_config, "kinesis", max_attempts=1)
        fastparse.install(self.client)
        efo = spec.fan_out
        self.executor = SyncExecutor(
            self.client,
            listing_max_age=LISTING_MAX_AGE if efo is None else efo.closed_check_interval / 2,
        )
        self._kept: dict[tuple[int, int, str], tuple[Position | None, Reader, float]] = {}
        self._fan_out: LoopFanOut | None = None
        self._close_fan_out: Callable[[], None] = lambda: None
        self._wake = threading.Event()
        self._rates: dict[str, ByteRate] = {}
        self._ahead: ThreadPoolExecutor | None = None

    def open(self, restriction: KinesisRestriction, cursor: ShardCursor) -> Reader:
        """The kept reader of this shard if it stopped exactly where the cursor is, else a new
        one starting from the cursor."""
        kept = self._kept.pop((restriction.lo, restriction.hi, cursor.shard_id), None)
        if kept is not None:
            if kept[0] == cursor.position:
                return kept[1]
            kept[1].close()
        start = start_of(cursor)
        spec = self._spec
        efo = spec.fan_out
        if efo is not None and not straddles(restriction, cursor):
            if self._fan_out is None:
                self._fan_out, self._close_fan_out = open_fan_out_on_loop(
                    LoopThread.get(), spec.client_config, self._stream, efo
                )
            subscription = efo.subscription
            link = self._metered(
                sync_link(
                    self.executor, self._stream, cursor.shard_id, self._fan_out, wake=self._wake
                ),
                cursor.shard_id,
            )
            machine = SubscriptionRead(
                _node(cursor),
                start,
                subscription,
                incarnation=restriction.created_ms,
                stream=spec.stream,
            )
            return SyncShardReader(
                machine, link, pending_interval=subscription.pending_interval, where=spec.stream
            )
        polling = polling_machine(spec, restriction, cursor)
        link = self._metered(
            sync_link(self.executor, self._stream, cursor.shard_id), cursor.shard_id
        )
        if self._ahead is None:
            self._ahead = ThreadPoolExecutor(1, thread_name_prefix="kinesis-read-ahead")
        earlier = None
        if self._first_calls is not None:
            earlier = functools.partial(
                self._first_calls.take,
                spec,
                restriction.created_ms,
                cursor.shard_id,
                recorder=self._recorder,
            )
        return SyncShardReader(polling, link, where=spec.stream, ahead=self._ahead, earlier=earlier)

    def _metered(self, link: SyncLink, shard_id: str) -> SyncLink:
        """``link`` with its calls timed, when this reader's metrics are on."""
        if not self._recorder.enabled:
            return link
        return MeteredSyncTransport(link, self._recorder, shard_id)

    def keep(
        self, final: KinesisRestriction, readers: Mapping[str, Reader], reusable: set[str]
    ) -> None:
        """After a bundle: keep the ``reusable`` readers (they consumed exactly what was
        claimed) for the restriction's next bundle, close the others, and forget those not
        reused within :data:`KEEP_SECONDS` (the restriction went to another worker, or ended)."""
        now = time.monotonic()
        keep = KEEP_SECONDS if self._spec.fan_out is None else KEEP_SUBSCRIPTION_SECONDS
        for key in [k for k, v in self._kept.items() if now - v[2] > keep]:
            self._kept.pop(key)[1].close()
        positions = {cursor.shard_id: cursor.position for cursor in final.cursors}
        for shard_id, reader in readers.items():
            if shard_id in reusable and shard_id in positions:
                self._kept[(final.lo, final.hi, shard_id)] = (positions[shard_id], reader, now)
            else:
                reader.close()

    def rate(self, shard_id: str) -> ByteRate:
        """The write rate this instance learnt of ``shard_id`` (kept as long as the instance:
        a shard ends once, and a restriction that moves starts learning again)."""
        rate = self._rates.get(shard_id)
        if rate is None:
            rate = self._rates[shard_id] = ByteRate()
        return rate

    def wait(self, seconds: float) -> None:
        """Sleep until something may be due, or until a subscription receives an event."""
        self._wake.wait(max(seconds, 0.0))
        self._wake.clear()

    def list_shards(self, shard_filter: Mapping[str, Any] | None = None) -> list[ShardInfo]:
        """ListShards (every page), on the synchronous client."""
        call = ListShards(self._stream, shard_filter)
        shards: list[ShardInfo] = self.executor.execute(call, LISTING_RETRY)
        return shards

    def close(self) -> None:
        for _, reader, _ in self._kept.values():
            reader.close()
        self._kept.clear()
        if self._fan_out is not None:
            self._fan_out = None
            self._close_fan_out()
        if self._ahead is not None:
            # A call in flight finishes on its own; nobody takes its answer.
            self._ahead.shutdown(wait=False, cancel_futures=True)
            self._ahead = None
        self.client.close()
