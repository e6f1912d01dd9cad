"""The splittable DoFn of ``ReadFromKinesis`` and its restriction provider.

The initial restriction describes the stream and lists its shards (and the stored positions,
with a checkpoint store, checked against the stream's creation time by the core's
:func:`~kinesis_core.consumer.checkpointer.settle_incarnation`); ``split`` cuts it into one
restriction per shard (:mod:`beam_kinesis.restriction`). Each ``process`` call runs a
:class:`~beam_kinesis._read_loop.ReadLoop` over the shard readers of this DoFn instance
(:mod:`beam_kinesis._shard_readers`), self-checkpoints when the loop asks, and registers a
bundle finalizer that writes the committed positions to the checkpoint store.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Iterator
from typing import Any

import apache_beam as beam
from apache_beam.io.watermark_estimators import ManualWatermarkEstimator
from apache_beam.transforms.core import RestrictionProvider, WatermarkEstimatorProvider
from apache_beam.utils.timestamp import Duration, Timestamp

from beam_kinesis._first_calls import FirstCalls, SharedFirstCalls
from beam_kinesis._metrics import BeamMetrics
from beam_kinesis._read_loop import ReadLoop
from beam_kinesis._read_spec import ReadSpec, micros, now_micros
from beam_kinesis._shard_readers import ShardReaders
from beam_kinesis.discovery import parents_ended
from beam_kinesis.plan import (
    KinesisRestriction,
    commit_values,
    decode_restriction,
    initial_restriction,
    partition,
    restriction_backlog,
)
from beam_kinesis.restriction import (
    DeadlineClaim,
    KinesisRestrictionCoder,
    KinesisRestrictionTracker,
    ParentsEndedClaim,
    StopClaim,
)
from kinesis_core.aws.calls import DescribeStreamSummary, ListShards
from kinesis_core.aws.client import create_botocore_client
from kinesis_core.aws.exceptions import error_kind
from kinesis_core.aws.executor import LISTING_RETRY, SyncExecutor
from kinesis_core.checkpoint import Checkpoint, CheckpointStore, CheckpointValue
from kinesis_core.consumer import Checkpointer
from kinesis_core.consumer.checkpointer import settle_incarnation
from kinesis_core.consumer.incarnation import StreamFacts
from kinesis_core.consumer.lineage import ShardNode
from kinesis_core.consumer.positions import LATEST
from kinesis_core.errors import KinesisServiceError
from kinesis_core.runtime.loop_thread import LoopThread
from kinesis_core.shards.info import ShardInfo
from kinesis_core.stream import StreamRef

logger = logging.getLogger(__name__)

_STORE_TIMEOUT = 60.0
PARENT_CHECK_INTERVAL = 0.5
"""Seconds between two looks at the checkpoint store of a discovered shard waiting for its
parents' SHARD_END."""
_PARENT_NAP = 0.1
"""Seconds a waiting shard's call sleeps before it defers (for runners that ignore the
delay)."""


def start_restriction(spec: ReadSpec, element: str) -> tuple[KinesisRestriction, list[ShardNode]]:
    """The whole-stream restriction a read starts from, and the listing it was made from:
    describe the stream, list its shards (and the stored positions, with a checkpoint store,
    checked against the stream's creation time)."""
    now = now_micros()
    position = spec.initial_position
    if position.timestamp is not None:
        start: int | None = micros(position.timestamp)
        child_start = start
    elif position == LATEST:
        # Resolved once, here: a restart of the restriction before its first record must
        # not skip what arrived in between, as a second LATEST iterator would.
        start, child_start = now, None
    else:
        start = child_start = None
    stream = StreamRef.of(element)
    store = spec.checkpoint_store() if spec.checkpoint_store is not None else None
    try:
        client = create_botocore_client(spec.client_config, "kinesis")
        try:
            facts, rows, shards = _look(spec, client, stream, store)
        finally:
            client.close()
        if store is not None:
            rows = LoopThread.get().run(
                settle_incarnation(
                    store,
                    spec.application_name,
                    stream.name,
                    rows,
                    facts=facts,
                    shards=shards,
                    on_stream_recreated=spec.on_stream_recreated,
                    initial_position=position,
                ),
                _STORE_TIMEOUT,
            )
    finally:
        if store is not None:
            LoopThread.get().run(store.close(), _STORE_TIMEOUT)
    nodes = [ShardNode.from_shard_info(s) for s in shards]
    whole = initial_restriction(
        nodes,
        {row.shard_id: row.value for row in rows},
        start=start,
        child_start=child_start,
        records_left=spec.max_records,
        created_ms=facts.created_ms,
    )
    return whole, nodes


def _look(
    spec: ReadSpec, client: Any, stream: StreamRef, store: CheckpointStore | None
) -> tuple[StreamFacts, list[Checkpoint], list[ShardInfo]]:
    """The stream's facts, the stored rows and the shards to start from (all of them when
    there are rows; else those the start position can read, by the core consumer's rule:
    :meth:`~kinesis_core.consumer.InitialPosition.shard_filter`). Service errors raise as
    a :class:`KinesisServiceError` naming the stream, as the core consumer's start does."""
    position = spec.initial_position
    executor = SyncExecutor(client)
    try:
        facts = StreamFacts.from_response(executor.execute(DescribeStreamSummary(stream)))
        rows: list[Checkpoint] = []
        if store is not None:
            rows = LoopThread.get().run(
                store.list(spec.application_name, stream.name), _STORE_TIMEOUT
            )
        shard_filter = None if rows else position.shard_filter()
        shards = executor.execute(ListShards(stream, shard_filter), LISTING_RETRY)
        if not rows and position == LATEST:
            shards = [s for s in shards if s.is_open]  # moto ignores ShardFilter
    except Exception as exc:
        if error_kind(exc) is None:
            raise
        raise KinesisServiceError.wrap(exc, f"starting to read {stream}") from exc
    return facts, rows, shards


class ReadFn(beam.DoFn, RestrictionProvider):
    """The splittable DoFn and its own restriction provider.

    ``first_calls``: the handle to the first calls sent ahead that every copy of this DoFn
    shares in a process (by default its own: one per DoFn built, that is per transform)."""

    def __init__(self, spec: ReadSpec, first_calls: SharedFirstCalls | None = None) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self._spec = spec
        self._readers: ShardReaders | None = None
        self._shared_first_calls = first_calls if first_calls is not None else SharedFirstCalls()
        self._first_calls: FirstCalls | None = None

    def _calls_ahead(self) -> FirstCalls:
        """This transform's first calls sent ahead in this process, held by this copy from
        its first use (``split`` of a copy never set up, or ``setup``) to ``teardown``."""
        if self._first_calls is None:
            self._first_calls = self._shared_first_calls.acquire()
        return self._first_calls

    # -- life cycle -----------------------------------------------------------------------

    def setup(self) -> None:
        spec = self._spec
        self._metrics = BeamMetrics()
        first_calls = self._calls_ahead() if spec.first_calls_ahead else None
        self._readers = ShardReaders(spec, self._metrics, first_calls)
        self._store: CheckpointStore | None = None
        self._checkpointer: Checkpointer | None = None
        if spec.checkpoint_store is not None:
            self._store = spec.checkpoint_store()
            self._checkpointer = Checkpointer(
                self._store,
                spec.application_name,
                StreamRef.of(spec.stream).name,
                recorder=self._metrics,
            )

    def teardown(self) -> None:
        if self._readers is not None:
            self._readers.close()
            self._readers = None
        self._first_calls = None
        store, self._store = getattr(self, "_store", None), None
        if store is not None:
            try:
                LoopThread.get().run(store.close(), _STORE_TIMEOUT)
            except Exception:
                logger.warning("closing the checkpoint store failed", exc_info=True)

    def display_data(self) -> dict[str, Any]:
        return self._spec.display_data()

    # -- restriction provider -------------------------------------------------------------

    def initial_restriction(self, element: str) -> KinesisRestriction:
        """Describe the stream, list its shards (and the stored positions, with a checkpoint
        store, checked against the stream's creation time) and build the whole-stream
        restriction that ``split`` cuts into one per shard."""
        return start_restriction(self._spec, element)[0]

    def split(self, element: str, restriction: KinesisRestriction) -> Iterator[KinesisRestriction]:
        """One restriction per shard (the whole one with ``max_records``), whose first calls
        this process sends ahead (:mod:`beam_kinesis._first_calls`) unless
        ``first_calls_ahead`` is off."""
        parts = [restriction] if self._spec.max_records is not None else partition(restriction)
        if self._spec.first_calls_ahead:
            self._calls_ahead().send(self._spec, parts)
        yield from parts

    def create_tracker(self, restriction: KinesisRestriction) -> KinesisRestrictionTracker:
        return KinesisRestrictionTracker(restriction, bounded=self._spec.bounded)

    def restriction_size(self, element: Any, restriction: KinesisRestriction) -> float:
        """The estimated bytes left to read (at least one while not done): the runner's
        backlog, to size and scale on."""
        return 0.0 if restriction.done else float(max(restriction_backlog(restriction), 1))

    def truncate(self, element: str, restriction: KinesisRestriction) -> None:
        """On drain, stop at once: what was claimed is committed, nothing more is read."""
        return None

    def restriction_coder(self) -> KinesisRestrictionCoder:
        return KinesisRestrictionCoder()

    # -- processing -----------------------------------------------------------------------

    def _read(
        self,
        bundle_finalizer: Any,
        tracker: Any,
        watermark: Any,
    ) -> Iterator[Any]:
        restriction: KinesisRestriction = tracker.current_restriction()
        if restriction.done:
            return
        spec = self._spec
        if spec.max_read_time is not None and restriction.deadline is None:
            deadline = now_micros() + int(spec.max_read_time * 1e6)
            tracker.try_claim(DeadlineClaim(deadline))
            restriction = restriction._replace(deadline=deadline)
        if any(not c.readable for c in restriction.cursors) and spec.discovers:
            if not self._wait_for_parents(tracker, restriction):
                if not tracker.current_restriction().done:
                    tracker.defer_remainder(Duration(seconds=PARENT_CHECK_INTERVAL))
                return
            if spec.max_read_time is not None:
                # max_read_time counts from the first poll: the wait was not reading.
                tracker.try_claim(DeadlineClaim(now_micros() + int(spec.max_read_time * 1e6)))
            restriction = tracker.current_restriction()
        readers = self._readers
        assert readers is not None, "setup() was not called"
        self._metrics.restriction_shards(len(restriction.cursors))
        if self._first_calls is not None:
            self._metrics.early_calls_wasted(self._first_calls.wasted())
        run = ReadLoop(spec, readers, self._metrics, restriction, tracker, watermark)
        for outputs in run.poll():
            yield from outputs
        final: KinesisRestriction = tracker.current_restriction()
        if run.defer is not None:
            tracker.defer_remainder(Duration(micros=int(run.defer * 1e6)))
        readers.keep(final, run.readers, run.clean)
        if self._checkpointer is not None:
            values = commit_values(final, run.before, run.ended)
            if values:
                bundle_finalizer.register(functools.partial(self._commit, final.created_ms, values))

    def _wait_for_parents(self, tracker: Any, restriction: KinesisRestriction) -> bool:
        """A discovered shard waits until the checkpoint store has SHARD_END for its parents
        (committed by the bundles that read them): one look per call, the next one
        :data:`PARENT_CHECK_INTERVAL` later (the defer delay); its watermark holds meanwhile.
        True once it may be read; False to wait on, or stopped: a bounded read that waited
        ``max_read_time`` (its parents stopped before their end)."""
        store = self._store
        assert store is not None, "a discovering read has a checkpoint store"
        (cursor,) = restriction.cursors
        stream = StreamRef.of(self._spec.stream).name
        while True:
            rows = LoopThread.get().run(
                store.list(self._spec.application_name, stream), _STORE_TIMEOUT
            )
            ended, position = parents_ended(cursor, {row.shard_id: row.value for row in rows})
            if ended:
                tracker.try_claim(ParentsEndedClaim(cursor.shard_id, position))
                return True
            if restriction.deadline is not None and now_micros() >= restriction.deadline:
                tracker.try_claim(StopClaim())
                return False
            if self._spec.self_checkpoint_interval is not None:
                # Runners that ignore the defer delay call again at once: nap, do not spin.
                time.sleep(_PARENT_NAP)
                return False
            time.sleep(PARENT_CHECK_INTERVAL)

    def _commit(
        self, created_ms: int | None, values: list[tuple[str, CheckpointValue, tuple[str, ...]]]
    ) -> None:
        """The bundle finalizer: the runner committed the bundle, its positions (of the stream
        created at ``created_ms``) may be stored."""
        checkpointer = self._checkpointer
        assert checkpointer is not None

        async def write() -> None:
            checkpointer.stream_created_ms = created_ms
            for key, value, parents in values:
                await checkpointer.write(key, value, parents)

        try:
            LoopThread.get().run(write(), _STORE_TIMEOUT)
        except Exception:
            # Beam does not retry finalizers; the next bundle's commit writes further on.
            logger.warning("writing Kinesis checkpoints failed", exc_info=True)


_FINALIZER = beam.DoFn.BundleFinalizerParam
_RESTRICTION = beam.DoFn.RestrictionParam()


class RestrictionWatermark(WatermarkEstimatorProvider):
    """A manual watermark estimator that starts at the least watermark of the restriction's
    cursors (waiting ones included), or unknown while any is unknown: a discovered child
    starts at the discovery's watermark and holds there while it waits for its parents."""

    def initial_estimator_state(self, element: Any, restriction: KinesisRestriction) -> Any:
        marks = [c.watermark for c in restriction.cursors]
        if not marks or None in marks:
            return None
        return Timestamp(micros=min(m for m in marks if m is not None))

    def create_watermark_estimator(self, estimator_state: Any) -> ManualWatermarkEstimator:
        return ManualWatermarkEstimator(estimator_state)  # type: ignore[no-untyped-call]


_WATERMARK = beam.DoFn.WatermarkEstimatorParam(RestrictionWatermark())


class BoundedReadFn(ReadFn):
    def process(
        self,
        element: str,
        bundle_finalizer: Any = _FINALIZER,
        tracker: Any = _RESTRICTION,
        watermark: Any = _WATERMARK,
    ) -> Iterator[Any]:
        return self._read(bundle_finalizer, tracker, watermark)


class UnboundedReadFn(ReadFn):
    @beam.DoFn.unbounded_per_element()  # type: ignore[no-untyped-call, untyped-decorator]
    def process(
        self,
        element: str,
        bundle_finalizer: Any = _FINALIZER,
        tracker: Any = _RESTRICTION,
        watermark: Any = _WATERMARK,
    ) -> Iterator[Any]:
        return self._read(bundle_finalizer, tracker, watermark)


class _OneShard(ReadFn):
    """The restriction hooks of a read fed by a shard discovery: each element is an encoded
    one-shard restriction, its own initial restriction, never split."""

    def initial_restriction(self, element: Any) -> KinesisRestriction:
        return decode_restriction(element)

    def split(self, element: Any, restriction: KinesisRestriction) -> Iterator[KinesisRestriction]:
        yield restriction


class ShardReadFn(_OneShard, UnboundedReadFn):
    """Reads the shards a discovery outputs (unbounded)."""


class BoundedShardReadFn(_OneShard, BoundedReadFn):
    """Reads the shards a discovery outputs (bounded)."""
