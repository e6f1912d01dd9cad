"""The transport side of ``ReadFromKinesis``: one shard reader per cursor, kept across bundles.

A :class:`ShardReaders` belongs to one DoFn instance (``setup`` to ``teardown``). For a
restriction's cursor it makes the core's sans-I/O reader and the synchronous transport that
executes its calls: polling (:mod:`kinesis_core.consumer.polling`), or with enhanced fan-out
a subscription (:mod:`kinesis_core.consumer.subscription`) that lives on the process's event
loop thread and reads a couple of events ahead. It keeps the readers that stopped exactly
where their cursors are for the next bundle of the same restriction, so a shard iterator and
its rate-limit timers, or an open subscription, carry over instead of starting again each
bundle. The read loop (:mod:`beam_kinesis._read_loop`) never sees which transport runs.

A shard that straddles two restrictions (a merged child) is read by both; a consumer may hold
only one subscription per shard, so such a shard is polled even in fan-out mode.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

from beam_kinesis._read_spec import ReadSpec
from beam_kinesis.restriction import KinesisRestriction, ShardCursor
from kinesis_core.client import create_botocore_client, create_kinesis_client
from kinesis_core.consumer import fastparse
from kinesis_core.consumer.lineage import ShardNode
from kinesis_core.consumer.polling import MIN_CALL_INTERVAL, PollingOptions, PollingRead
from kinesis_core.consumer.positions import TRIM_HORIZON, AtTimestamp, InitialPosition
from kinesis_core.consumer.reading import (
    VIEW_MAX_AGE,
    SyncPolling,
    SyncSubscribing,
    shard_check,
    sync_list_shards,
    sync_stream_view,
)
from kinesis_core.consumer.subscription import ShardCheck, SubscriptionRead
from kinesis_core.consumer.transport import ShardRead, StreamView, SyncTransport
from kinesis_core.loop_thread import LoopThread
from kinesis_core.records import Position
from kinesis_core.shard_map import ShardInfo
from kinesis_core.stream import StreamRef
from kinesis_core.telemetry.metered import MeteredSyncTransport
from kinesis_core.telemetry.recorder import NO_RECORDER, ConsumerRecorder

KEEP_SECONDS = 290.0
"""How long an unused polling reader is kept: a shard iterator expires after five minutes."""
KEEP_SUBSCRIPTION_SECONDS = 15.0
"""How long an unused subscription is kept: a restriction that moved to another worker must
find it closed there (the service allows one subscription per shard and consumer)."""
_LOOP_TIMEOUT = 60.0

Reader = tuple[ShardRead, SyncTransport]


class ShardReaders:
    """Readers of the shards this DoFn instance reads, and the client they share."""

    def __init__(self, spec: ReadSpec, recorder: ConsumerRecorder = NO_RECORDER) -> None:
        self._spec = spec
        self._recorder = recorder
        self._stream = StreamRef.of(spec.stream)
        # The readers retry on their own terms (rate, backoff, expired iterators).
        self.client: Any = create_botocore_client(spec.client_config, "kinesis", max_attempts=1)
        fastparse.install(self.client)
        self._kept: dict[tuple[int, int, str], tuple[Position | None, Reader, float]] = {}
        self._fan_out: _FanOut | None = None
        self._wake = threading.Event()
        self._listing: tuple[float, list[ShardInfo]] = (float("-inf"), [])
        self._view: tuple[float, StreamView | None] = (float("-inf"), None)

    def open(self, restriction: KinesisRestriction, cursor: ShardCursor) -> Reader:
        """The kept reader of this shard if it stopped exactly where the cursor is, else a new
        one starting from the cursor."""
        kept = self._kept.pop((restriction.lo, restriction.hi, cursor.shard_id), None)
        if kept is not None:
            if kept[0] == cursor.position:
                return kept[1]
            kept[1][1].close()
        start: Position | InitialPosition
        if cursor.position is not None:
            start = cursor.position
        elif cursor.start is not None:
            start = AtTimestamp(datetime.fromtimestamp(cursor.start / 1e6, timezone.utc))
        else:
            start = TRIM_HORIZON
        straddles = cursor.lo < restriction.lo or cursor.hi > restriction.hi
        # A straddling shard is polled by two restrictions: they share its 5 calls/s and its
        # reads per second.
        sharing = 2 if straddles else 1
        min_interval = sharing * MIN_CALL_INTERVAL
        options = PollingOptions(
            limit=self._spec.max_records_per_call,
            min_interval=min_interval,
            idle_interval=max(self._spec.idle_interval, min_interval),
            max_bytes_per_second=self._spec.max_read_bytes_per_second / sharing,
        )
        node = ShardNode(cursor.shard_id, cursor.parents, (cursor.lo, cursor.hi), True)
        efo = self._spec.fan_out
        if efo is not None and not straddles:
            fan_out = self._fan_out
            if fan_out is None:
                fan_out = self._fan_out = _FanOut(self._spec, self._stream)
            transport = SyncSubscribing(
                LoopThread.get(),
                fan_out.client,
                fan_out.consumer_arn,
                cursor.shard_id,
                self._check,
                self._wake,
                fan_out.kinesis,
            )
            return SubscriptionRead(node, start, efo.subscription), self._metered(
                transport, cursor.shard_id
            )
        machine = PollingRead(
            node, start, options, incarnation=restriction.created_ms, stream=self._spec.stream
        )
        polling = SyncPolling(self.client, self._stream, cursor.shard_id, self.view)
        return machine, self._metered(polling, cursor.shard_id)

    def _metered(self, transport: SyncTransport, shard_id: str) -> SyncTransport:
        """``transport`` with its calls timed, when this reader's metrics are on."""
        if not self._recorder.enabled:
            return transport
        return MeteredSyncTransport(transport, self._recorder, shard_id)

    def view(self) -> StreamView:
        """A polling reader's look at the stream after a refusal (one served to every shard
        of this DoFn instance for :data:`VIEW_MAX_AGE` seconds)."""
        at, view = self._view
        if view is None or time.monotonic() - at > VIEW_MAX_AGE:
            view = sync_stream_view(self.client, self._stream)
            self._view = (time.monotonic(), view)
        return view

    def _check(self, shard_id: str) -> ShardCheck:
        """A fan-out reader's look-up of its shard, in a listing at most half the check
        interval old (one ListShards serves every shard of this DoFn instance)."""
        efo = self._spec.fan_out
        assert efo is not None
        at, shards = self._listing
        if time.monotonic() - at > efo.closed_check_interval / 2:
            shards = self.list_shards()
            self._listing = (time.monotonic(), shards)
        return shard_check(shards, shard_id)

    def keep(
        self, final: KinesisRestriction, readers: Mapping[str, Reader], reusable: set[str]
    ) -> None:
        """After a bundle: keep the ``reusable`` readers (they consumed exactly what was
        claimed) for the restriction's next bundle, close the others, and forget those not
        reused within :data:`KEEP_SECONDS` (the restriction went to another worker, or ended)."""
        now = time.monotonic()
        keep = KEEP_SECONDS if self._spec.fan_out is None else KEEP_SUBSCRIPTION_SECONDS
        for key in [k for k, v in self._kept.items() if now - v[2] > keep]:
            self._kept.pop(key)[1][1].close()
        positions = {cursor.shard_id: cursor.position for cursor in final.cursors}
        for shard_id, reader in readers.items():
            if shard_id in reusable and shard_id in positions:
                self._kept[(final.lo, final.hi, shard_id)] = (positions[shard_id], reader, now)
            else:
                reader[1].close()

    def wait(self, seconds: float) -> None:
        """Sleep until something may be due, or until a subscription receives an event."""
        if self._fan_out is None:
            time.sleep(max(seconds, 0.0))
        else:
            self._wake.wait(max(seconds, 0.0))
            self._wake.clear()

    def list_shards(self, shard_filter: Mapping[str, Any] | None = None) -> list[ShardInfo]:
        """ListShards through the core's paginating helper, on the synchronous client."""
        return sync_list_shards(self.client, self._stream, shard_filter)

    def close(self) -> None:
        for _, reader, _ in self._kept.values():
            reader[1].close()
        self._kept.clear()
        if self._fan_out is not None:
            self._fan_out.close()
            self._fan_out = None
        self.client.close()


class _FanOut:
    """The registered consumer and the HTTP/2 client of one DoFn instance, made on the
    process's event-loop thread (their asyncio objects belong to that loop)."""

    def __init__(self, spec: ReadSpec, stream: StreamRef) -> None:
        self._spec = spec
        self._stream = stream
        self._exit = contextlib.AsyncExitStack()
        self.consumer_arn = ""
        self.client: Any = None
        """The FanOutClient."""
        self.kinesis: Any = None
        """The aiobotocore Kinesis client (registration, DescribeStreamConsumer)."""
        LoopThread.get().run(self._start(), _LOOP_TIMEOUT)

    async def _start(self) -> None:
        from kinesis_core.fanout import FanOutClient, RegisteredConsumer

        efo = self._spec.fan_out
        assert efo is not None
        config = self._spec.client_config
        # Made first: it refuses to be made without h2 and h11, and nothing may be registered
        # then (a consumer costs money and counts toward the stream's 20).
        fanout = FanOutClient(
            config,
            max_subscription_seconds=efo.max_subscription_seconds,
            max_buffered_bytes=efo.max_buffered_bytes,
            http_version=efo.http_version,
        )
        try:
            client = self.kinesis = await self._exit.enter_async_context(
                create_kinesis_client(config)
            )
            registered = await self._exit.enter_async_context(
                RegisteredConsumer(
                    client,
                    str(self._stream),
                    consumer_name=efo.consumer_name,
                    consumer_arn=efo.consumer_arn,
                    tags=efo.tags,
                    timeout=efo.register_timeout,
                )
            )
            self.consumer_arn = registered.consumer_arn
            self.client = await self._exit.enter_async_context(fanout)
        except BaseException:
            await self._exit.aclose()
            raise

    def close(self) -> None:
        LoopThread.get().run(self._exit.aclose(), _LOOP_TIMEOUT)

