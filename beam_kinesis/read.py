"""``ReadFromKinesis``: a pure-Python splittable DoFn that reads a Kinesis stream.

``p | ReadFromKinesis("orders", initial_position=TRIM_HORIZON)`` gives one
:class:`~beam_kinesis.record.KinesisRecord` per user record (KPL aggregates are taken apart),
timestamped with its arrival time. The element is the stream; each restriction owns a
hash-key range and the shards to read in it (:mod:`beam_kinesis.restriction`): one per shard
open at the start position, each adopting the children of the shards it finishes.

A ``process`` call polls its shards with a synchronous botocore client (one per DoFn
instance), driven by the core's sans-I/O :class:`ShardReaderMachine` (rate limits, backoff,
expired iterators, resuming inside an aggregate, the shard's hash-range filter). It claims every
record before it outputs it, and self-checkpoints (``defer_remainder``) every
``self_checkpoint_interval`` seconds. With a checkpoint store, the positions of a bundle are
written from its bundle finalizer, i.e. only after the runner committed the bundle.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import os
import time
from collections.abc import Callable, Generator, Iterator, Mapping
from datetime import datetime, timedelta, timezone
from typing import Any

import apache_beam as beam
from apache_beam.io.watermark_estimators import ManualWatermarkEstimator
from apache_beam.metrics.metric import Metrics
from apache_beam.options.pipeline_options import DirectOptions
from apache_beam.transforms.core import RestrictionProvider
from apache_beam.transforms.display import DisplayDataItem
from apache_beam.transforms.window import TimestampedValue
from apache_beam.utils.timestamp import Duration, Timestamp

from beam_kinesis.options import client_config_from_options, warn_if_credentials
from beam_kinesis.record import KinesisRecord
from beam_kinesis.restriction import (
    DeadlineClaim,
    EndClaim,
    IdleClaim,
    KinesisRestriction,
    KinesisRestrictionCoder,
    KinesisRestrictionTracker,
    RecordClaim,
    ShardCursor,
    ShardRef,
    SkipClaim,
    StopClaim,
    commit_values,
    initial_restriction,
    partition,
    restriction_watermark,
)
from kinesis_core.checkpoint import CheckpointStore, CheckpointValue, SQLiteCheckpointStore
from kinesis_core.classify import ErrorKind
from kinesis_core.client import ClientConfig, create_botocore_client, error_kind
from kinesis_core.consumer import fastparse
from kinesis_core.consumer.consumer import Checkpointer
from kinesis_core.consumer.lineage import ShardNode
from kinesis_core.consumer.positions import LATEST, TRIM_HORIZON, AtTimestamp, InitialPosition
from kinesis_core.consumer.reader import (
    MAX_GET_RECORDS_LIMIT,
    MIN_CALL_INTERVAL,
    Ended,
    GetIterator,
    ReaderOptions,
    ReaderState,
    ShardReaderMachine,
    Wait,
    handled_by_reader,
)
from kinesis_core.errors import ConfigurationError, ValidationError
from kinesis_core.hashing import hash_key
from kinesis_core.producer.blocking import LoopThread
from kinesis_core.records import KinesisRecord as CoreRecord
from kinesis_core.records import Position
from kinesis_core.shard_map import list_all_shards
from kinesis_core.stream import StreamRef

logger = logging.getLogger(__name__)

METRICS_NAMESPACE = "ReadFromKinesis"
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_MICROSECOND = timedelta(microseconds=1)
_STORE_TIMEOUT = 60.0
_MAX_SECONDS = 365 * 24 * 3600.0
_MACHINE_TTL = 290.0
"""Seconds a cached shard reader is kept: its iterator expires after five minutes anyway."""

CheckpointStoreFactory = Callable[[], CheckpointStore]
TimestampFn = Callable[[KinesisRecord], Any]


def _micros(value: datetime) -> int:
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    return (value - _EPOCH) // _MICROSECOND


def _now_micros() -> int:
    return _micros(datetime.now(timezone.utc))


def to_timestamp(value: Any) -> Timestamp:
    """A Beam Timestamp from a Timestamp, an aware (or UTC naive) datetime, or epoch seconds."""
    if isinstance(value, Timestamp):
        return value
    if isinstance(value, datetime):
        return Timestamp(micros=_micros(value))
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return Timestamp.of(value)
    raise ValidationError(
        "timestamp_fn", f"must return a Timestamp, datetime or epoch seconds, got {value!r:.60}"
    )


@dataclasses.dataclass(frozen=True)
class _ReadSpec:
    """Everything the workers need, picklable: no client, thread or store in it."""

    stream: str
    client_config: ClientConfig
    initial_position: InitialPosition
    with_metadata: bool
    timestamp_fn: TimestampFn | None
    max_records: int | None
    max_read_time: float | None
    stop_when_caught_up: bool
    idle_threshold: float
    checkpoint_store: CheckpointStoreFactory | None
    application_name: str
    self_checkpoint_interval: float | None
    """None: never self-checkpoint (bounded reads on a runner that drops residuals)."""
    idle_interval: float
    max_records_per_call: int

    @property
    def bounded(self) -> bool:
        return (
            self.max_records is not None
            or self.max_read_time is not None
            or self.stop_when_caught_up
        )


def _store_factory(
    store: CheckpointStoreFactory | str | os.PathLike[str] | None,
) -> CheckpointStoreFactory | None:
    if store is None or callable(store):
        return store
    if isinstance(store, (str, os.PathLike)):
        return functools.partial(SQLiteCheckpointStore, os.fspath(store))
    raise ValidationError(
        "checkpoint_store",
        "must be a SQLite file path or a picklable zero-argument callable returning a "
        f"CheckpointStore (a store object cannot travel to the workers), got {store!r:.60}",
    )


def _initial_position(value: InitialPosition | str) -> InitialPosition:
    if isinstance(value, InitialPosition):
        return value
    named = {"TRIM_HORIZON": TRIM_HORIZON, "LATEST": LATEST}
    if isinstance(value, str) and value.upper() in named:
        return named[value.upper()]
    raise ValidationError(
        "initial_position",
        f"must be TRIM_HORIZON, LATEST or AtTimestamp(t), got {value!r:.60}",
    )


def _check_seconds(field: str, value: float | None, *, minimum: float = 0.0) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValidationError(field, f"must be a number of seconds, got {value!r:.60}")
    if not minimum <= value <= _MAX_SECONDS:
        raise ValidationError(
            field, f"must be in [{minimum:g}, {_MAX_SECONDS:g}] seconds, got {value!r}"
        )


class ReadFromKinesis(beam.PTransform):  # type: ignore[type-arg]
    """Read a Kinesis stream (name or ARN) into a PCollection of ``KinesisRecord``.

    Unbounded by default. ``max_records`` (in total; the read then runs as one restriction so
    the count is exact), ``max_read_time`` (seconds each restriction reads, from its first
    poll) and ``stop_when_caught_up`` (stop once every shard returned an empty read at its tip)
    make it bounded, for batch jobs and tests; the first one reached ends the read.

    Elements are :class:`KinesisRecord` rows, or the data ``bytes`` with
    ``with_metadata=False``. Their timestamps are the arrival times, or
    ``timestamp_fn(record)`` (a Timestamp, datetime or epoch seconds). The watermark of each
    restriction is the minimum over its shards of the latest timestamp read; a shard that is
    caught up (a successful empty read at its tip) raises its part to now minus
    ``idle_threshold`` seconds, so idle shards do not hold windows back. Errors never move it.

    ``checkpoint_store``: a SQLite file path, or a picklable zero-argument callable returning a
    :class:`CheckpointStore`. Positions are written to it only from a bundle finalizer (after
    the runner durably committed the bundle), under ``application_name``; a new job given the
    same store starts from there instead of ``initial_position``.
    """

    def __init__(
        self,
        stream: str,
        *,
        client_config: ClientConfig | None = None,
        initial_position: InitialPosition | str = LATEST,
        with_metadata: bool = True,
        timestamp_fn: TimestampFn | None = None,
        max_records: int | None = None,
        max_read_time: float | None = None,
        stop_when_caught_up: bool = False,
        idle_threshold: float = 10.0,
        checkpoint_store: CheckpointStoreFactory | str | os.PathLike[str] | None = None,
        application_name: str = "default",
        self_checkpoint_interval: float = 1.0,
        idle_interval: float = 1.0,
        max_records_per_call: int = MAX_GET_RECORDS_LIMIT,
    ) -> None:
        super().__init__()
        if not isinstance(stream, str) or not stream:
            raise ValidationError("stream", f"must be a stream name or ARN, got {stream!r:.60}")
        if max_records is not None and (
            isinstance(max_records, bool) or not isinstance(max_records, int) or max_records < 1
        ):
            raise ValidationError("max_records", f"must be an int >= 1, got {max_records!r}")
        _check_seconds("max_read_time", max_read_time)
        _check_seconds("idle_threshold", idle_threshold)
        _check_seconds("self_checkpoint_interval", self_checkpoint_interval, minimum=0.01)
        _check_seconds("idle_interval", idle_interval, minimum=MIN_CALL_INTERVAL)
        if not 1 <= max_records_per_call <= MAX_GET_RECORDS_LIMIT:
            raise ValidationError(
                "max_records_per_call",
                f"must be in [1, {MAX_GET_RECORDS_LIMIT}], got {max_records_per_call!r}",
            )
        if timestamp_fn is not None and not callable(timestamp_fn):
            raise ValidationError("timestamp_fn", f"must be callable, got {timestamp_fn!r:.60}")
        if not application_name:
            raise ValidationError("application_name", "must not be empty")
        if client_config is not None:
            warn_if_credentials(client_config, "ReadFromKinesis")
        self._client_config = client_config
        self._spec = _ReadSpec(
            stream=stream,
            client_config=client_config or ClientConfig(),
            initial_position=_initial_position(initial_position),
            with_metadata=with_metadata,
            timestamp_fn=timestamp_fn,
            max_records=max_records,
            max_read_time=max_read_time,
            stop_when_caught_up=stop_when_caught_up,
            idle_threshold=idle_threshold,
            checkpoint_store=_store_factory(checkpoint_store),
            application_name=application_name,
            self_checkpoint_interval=self_checkpoint_interval,
            idle_interval=idle_interval,
            max_records_per_call=max_records_per_call,
        )

    def expand(self, pbegin: Any) -> Any:
        pipeline = pbegin.pipeline
        spec = dataclasses.replace(
            self._spec,
            client_config=client_config_from_options(pipeline.options, self._client_config),
        )
        if _drops_sdf_residuals(pipeline):
            if not spec.bounded:
                raise ConfigurationError(
                    "ReadFromKinesis: an unbounded read cannot run on the FnApiRunner with "
                    "direct_num_workers != 1: that runner drops the residuals of splittable "
                    "DoFns (its ParallelBundleManager keeps only metrics and errors of the "
                    "parallel bundles), so the read would stop after the first checkpoint. Use "
                    "--direct_num_workers=1, another runner, or a bounded read."
                )
            spec = dataclasses.replace(spec, self_checkpoint_interval=None)
        fn: _ReadFn = _BoundedReadFn(spec) if spec.bounded else _UnboundedReadFn(spec)
        output_type = KinesisRecord if spec.with_metadata else bytes
        stream = beam.Map(_constant, spec.stream)  # type: ignore[no-untyped-call]
        read = beam.ParDo(fn).with_output_types(output_type)  # type: ignore[no-untyped-call]
        return pbegin | "Impulse" >> beam.Impulse() | "Stream" >> stream | "Read" >> read

    def display_data(self) -> dict[str, Any]:
        return _display_data(self._spec)


def _item(value: Any, label: str) -> Any:
    return DisplayDataItem(value, label=label)  # type: ignore[no-untyped-call]


def _constant(_: Any, value: str) -> str:
    return value


def _display_data(spec: _ReadSpec) -> dict[str, Any]:
    items: dict[str, Any] = {
        "stream": _item(spec.stream, "Stream"),
        "initial_position": _item(repr(spec.initial_position), "Start position"),
        "with_metadata": _item(spec.with_metadata, "Outputs KinesisRecord"),
        "idle_threshold": _item(spec.idle_threshold, "Idle threshold (s)"),
        "application_name": _item(spec.application_name, "Application"),
    }
    if spec.client_config.region_name is not None:
        items["region"] = _item(spec.client_config.region_name, "Region")
    if spec.client_config.endpoint_url is not None:
        items["endpoint_url"] = _item(spec.client_config.endpoint_url, "Endpoint")
    if spec.max_records is not None:
        items["max_records"] = _item(spec.max_records, "Max records")
    if spec.max_read_time is not None:
        items["max_read_time"] = _item(spec.max_read_time, "Max read time (s)")
    if spec.stop_when_caught_up:
        items["stop_when_caught_up"] = _item(True, "Stop when caught up")
    if spec.checkpoint_store is not None:
        items["checkpoint_store"] = _item(repr(spec.checkpoint_store), "Checkpoint store")
    return items


def _drops_sdf_residuals(pipeline: Any) -> bool:
    """The Python FnApiRunner (also behind the DirectRunner) with more than one worker loses
    self-checkpoint residuals: its ParallelBundleManager merges only the metrics and errors of
    the parallel bundles (Beam 2.77)."""
    from apache_beam.runners.direct.direct_runner import SwitchingDirectRunner
    from apache_beam.runners.portability.fn_api_runner.fn_runner import FnApiRunner

    if not isinstance(pipeline.runner, (SwitchingDirectRunner, FnApiRunner)):
        return False
    return bool(pipeline.options.view_as(DirectOptions).direct_num_workers != 1)


def _list_shards(client: Any, stream: str, shard_filter: Mapping[str, Any] | None) -> list[Any]:
    """ListShards through the core's paginating helper, on a synchronous client."""

    async def call(**kwargs: Any) -> Any:
        return client.list_shards(**kwargs)

    return asyncio.run(list_all_shards(call, stream, shard_filter))


class _Counters:
    """The Beam metrics of a read; per-shard gauges are made on first use."""

    def __init__(self) -> None:
        self.records: Any = Metrics.counter(METRICS_NAMESPACE, "records")
        self.bytes: Any = Metrics.counter(METRICS_NAMESPACE, "bytes")
        self.get_records_calls: Any = Metrics.counter(METRICS_NAMESPACE, "get_records_calls")
        self.throttles: Any = Metrics.counter(METRICS_NAMESPACE, "throttles")
        self.errors: Any = Metrics.counter(METRICS_NAMESPACE, "transient_errors")
        self._gauges: dict[str, Any] = {}

    def gauge(self, name: str, shard_id: str) -> Any:
        key = f"{name}.{shard_id}"
        gauge = self._gauges.get(key)
        if gauge is None:
            gauge = self._gauges[key] = Metrics.gauge(METRICS_NAMESPACE, key)
        return gauge


class _ReadFn(beam.DoFn, RestrictionProvider):
    """The splittable DoFn and its own restriction provider."""

    def __init__(self, spec: _ReadSpec) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self._spec = spec
        self._client: Any = None

    # -- life cycle -----------------------------------------------------------------------

    def setup(self) -> None:
        spec = self._spec
        # The reader machines retry on their own terms (rate, backoff, expired iterators).
        self._client = create_botocore_client(spec.client_config, "kinesis", max_attempts=1)
        fastparse.install(self._client)
        self._machines: dict[
            tuple[int, int, str], tuple[Position | None, ShardReaderMachine, float]
        ] = {}
        self._counters = _Counters()
        self._store: CheckpointStore | None = None
        self._checkpointer: Checkpointer | None = None
        if spec.checkpoint_store is not None:
            self._store = spec.checkpoint_store()
            self._checkpointer = Checkpointer(self._store, spec.application_name, spec.stream)

    def teardown(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
        store, self._store = getattr(self, "_store", None), None
        if store is not None:
            try:
                LoopThread.get().run(store.close(), _STORE_TIMEOUT)
            except Exception:
                logger.warning("closing the checkpoint store failed", exc_info=True)

    def display_data(self) -> dict[str, Any]:
        return _display_data(self._spec)

    # -- restriction provider -------------------------------------------------------------

    def initial_restriction(self, element: str) -> KinesisRestriction:
        """List the shards (and the stored positions, with a checkpoint store) and build the
        whole-stream restriction that ``split`` cuts into one per shard."""
        spec = self._spec
        now = _now_micros()
        position = spec.initial_position
        if position.timestamp is not None:
            start: int | None = _micros(position.timestamp)
            child_start = start
        elif position == LATEST:
            # Resolved once, here: a restart of the restriction before its first record must
            # not skip what arrived in between, as a second LATEST iterator would.
            start, child_start = now, None
        else:
            start = child_start = None
        checkpoints = self._stored_checkpoints(element)
        client = create_botocore_client(spec.client_config, "kinesis")
        try:
            if checkpoints:
                shards = _list_shards(client, element, None)
            elif position.timestamp is not None:
                shard_filter = {"Type": "AT_TIMESTAMP", "Timestamp": position.timestamp}
                shards = _list_shards(client, element, shard_filter)
            elif position == LATEST:
                listed = _list_shards(client, element, {"Type": "AT_LATEST"})
                shards = [s for s in listed if s.is_open]  # moto ignores ShardFilter
            else:
                shards = _list_shards(client, element, {"Type": "AT_TRIM_HORIZON"})
        finally:
            client.close()
        return initial_restriction(
            [ShardNode.from_shard_info(s) for s in shards],
            checkpoints,
            start=start,
            child_start=child_start,
            records_left=spec.max_records,
        )

    def _stored_checkpoints(self, stream: str) -> dict[str, CheckpointValue]:
        factory = self._spec.checkpoint_store
        if factory is None:
            return {}
        store = factory()

        async def read() -> dict[str, CheckpointValue]:
            try:
                rows = await store.list(self._spec.application_name, stream)
            finally:
                await store.close()
            return {row.shard_id: row.value for row in rows}

        return LoopThread.get().run(read(), _STORE_TIMEOUT)

    def split(self, element: str, restriction: KinesisRestriction) -> Iterator[KinesisRestriction]:
        if self._spec.max_records is not None:
            yield restriction
        else:
            yield from partition(restriction)

    def create_tracker(self, restriction: KinesisRestriction) -> KinesisRestrictionTracker:
        return KinesisRestrictionTracker(restriction, bounded=self._spec.bounded)

    def restriction_size(self, element: str, restriction: KinesisRestriction) -> float:
        return 0.0 if restriction.done else float(len(restriction.cursors))

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
            deadline = _now_micros() + int(spec.max_read_time * 1e6)
            tracker.try_claim(DeadlineClaim(deadline))
            restriction = restriction._replace(deadline=deadline)
        run = _Run(self, restriction, tracker, watermark)
        yield from run.poll()
        final: KinesisRestriction = tracker.current_restriction()
        if run.defer is not None:
            tracker.defer_remainder(Duration(micros=int(run.defer * 1e6)))
        self._keep_machines(final, run)
        if self._checkpointer is not None:
            values = commit_values(final, run.before, run.ended)
            if values:
                bundle_finalizer.register(functools.partial(self._commit, values))

    def _machine(self, restriction: KinesisRestriction, cursor: ShardCursor) -> ShardReaderMachine:
        """The cached reader of this shard if it stopped exactly where the cursor is (its
        iterator and rate-limit timers then carry over), else a new one from the cursor."""
        key = (restriction.lo, restriction.hi, cursor.shard_id)
        cached = self._machines.pop(key, None)
        if cached is not None and cached[0] == cursor.position:
            return cached[1]
        start: Position | InitialPosition
        if cursor.position is not None:
            start = cursor.position
        elif cursor.start is not None:
            start = AtTimestamp(datetime.fromtimestamp(cursor.start / 1e6, timezone.utc))
        else:
            start = TRIM_HORIZON
        straddles = cursor.lo < restriction.lo or cursor.hi > restriction.hi
        # A straddling shard is polled by two restrictions: they share its 5 calls/s.
        min_interval = 2 * MIN_CALL_INTERVAL if straddles else MIN_CALL_INTERVAL
        options = ReaderOptions(
            limit=self._spec.max_records_per_call,
            min_interval=min_interval,
            idle_interval=max(self._spec.idle_interval, min_interval),
        )
        node = ShardNode(cursor.shard_id, cursor.parents, (cursor.lo, cursor.hi), True)
        return ShardReaderMachine(node, start, options)

    def _keep_machines(self, final: KinesisRestriction, run: _Run) -> None:
        """Keep the readers that stopped where their cursors are, for the next bundle of this
        restriction; forget those not reused within an iterator's lifetime (the restriction
        went to another worker, or ended)."""
        now = time.monotonic()
        for key in [k for k, v in self._machines.items() if now - v[2] > _MACHINE_TTL]:
            del self._machines[key]
        for cursor in final.cursors:
            machine = run.machines.get(cursor.shard_id)
            if machine is not None and cursor.shard_id in run.clean:
                key = (final.lo, final.hi, cursor.shard_id)
                self._machines[key] = (cursor.position, machine, now)

    def _commit(self, values: list[tuple[str, CheckpointValue, tuple[str, ...]]]) -> None:
        """The bundle finalizer: the runner committed the bundle, its positions may be stored."""
        checkpointer = self._checkpointer
        assert checkpointer is not None

        async def write() -> None:
            for key, value, parents in values:
                await checkpointer.write(key, value, parents)

        try:
            LoopThread.get().run(write(), _STORE_TIMEOUT)
        except Exception:
            # Beam does not retry finalizers; the next bundle's commit writes further on.
            logger.warning("writing Kinesis checkpoints failed", exc_info=True)


class _Run:
    """One ``process`` call: poll the readable shards until the self-checkpoint time, a
    bounded stop, or a refused claim."""

    def __init__(
        self,
        fn: _ReadFn,
        restriction: KinesisRestriction,
        tracker: Any,
        watermark: Any,
    ) -> None:
        self.fn = fn
        self.spec = fn._spec
        self.client = fn._client
        self.counters = fn._counters
        self.tracker = tracker
        self.watermark = watermark
        self.lo = restriction.lo
        self.hi = restriction.hi
        self.records_left = restriction.records_left
        self.deadline = None if restriction.deadline is None else restriction.deadline / 1e6
        self.before = {c.shard_id: c.position for c in restriction.cursors}
        self.cursors = {c.shard_id: c for c in restriction.cursors}
        self.machines: dict[str, ShardReaderMachine] = {}
        self.clean: set[str] = set()
        """Shards whose machine consumed exactly what was claimed (reusable next call)."""
        self.caught_up: set[str] = set()
        self.ended: list[ShardCursor] = []
        self.defer: float | None = None
        self._start_readers(restriction)

    def _start_readers(self, restriction: KinesisRestriction) -> None:
        for cursor in restriction.cursors:
            if cursor.readable and cursor.shard_id not in self.machines:
                self.machines[cursor.shard_id] = self.fn._machine(restriction, cursor)
                self.clean.add(cursor.shard_id)

    def _bounded_stop_due(self) -> bool:
        if self.deadline is not None and time.time() >= self.deadline:
            return True
        return (
            self.spec.stop_when_caught_up
            and bool(self.machines)
            and self.caught_up >= self.machines.keys()
            and all(c.readable for c in self.cursors.values())
        )

    def poll(self) -> Generator[Any, None, None]:
        """Round-robin over the shards whose next call is due; sleep only while nothing is.

        Returns (setting ``defer``) at the self-checkpoint time, or early once this call did
        some work and nothing is due before that time. A call that finds nothing due at all
        sleeps until something is: runners that ignore the defer delay re-invoke at once, and
        this keeps them from spinning through empty bundles.
        """
        interval = self.spec.self_checkpoint_interval
        checkpoint_at = float("inf") if interval is None else time.monotonic() + interval
        worked = False
        while self.cursors:
            if self._bounded_stop_due():
                self.tracker.try_claim(StopClaim())
                return
            if not self.machines:
                waiting = {c.shard_id: c.waiting_for for c in self.cursors.values()}
                raise RuntimeError(f"no shard to read: every shard waits for a parent {waiting}")
            now = time.monotonic()
            next_due = float("inf")
            called = False
            for shard_id in list(self.machines):
                machine = self.machines[shard_id]
                action = machine.next_action(now)
                if isinstance(action, Wait):
                    next_due = min(next_due, action.until)
                    continue
                called = True
                if isinstance(action, Ended):
                    if not self._end(shard_id, action):
                        return
                elif (yield from self._call(shard_id, machine, action)) is not None:
                    return
                now = time.monotonic()
            worked = worked or called
            now = time.monotonic()
            if now >= checkpoint_at:
                self.defer = 0.0
                return
            if called:
                continue
            if worked and next_due >= checkpoint_at:
                self.defer = next_due - now
                return
            wake = min(next_due, checkpoint_at)
            if self.deadline is not None:
                wake = min(wake, now + max(self.deadline - time.time(), 0.0))
            time.sleep(max(wake - now, 0.0))

    def _call(
        self, shard_id: str, machine: ShardReaderMachine, action: Any
    ) -> Generator[Any, None, str | None]:
        """One GetShardIterator or GetRecords call and what follows from it. Returns (as the
        generator's value) None to go on, or "stop" after a refused claim or a bounded stop."""
        client = self.client
        try:
            if isinstance(action, GetIterator):
                response = client.get_shard_iterator(
                    **StreamRef.of(self.spec.stream).params(), ShardId=shard_id, **action.params
                )
            else:
                self.counters.get_records_calls.inc()
                response = client.get_records(ShardIterator=action.iterator, Limit=action.limit)
        except Exception as exc:
            kind = error_kind(exc)
            if kind is None or not handled_by_reader(kind):
                raise
            if kind is ErrorKind.THROTTLED:
                self.counters.throttles.inc()
            elif kind in (ErrorKind.TRANSIENT, ErrorKind.IN_USE):
                self.counters.errors.inc()
            self.caught_up.discard(shard_id)
            machine.on_error(time.monotonic(), kind)
            return None
        if isinstance(action, GetIterator):
            machine.on_iterator(response.get("ShardIterator"))
            return None
        raw = response.get("Records") or ()
        records = machine.on_records(time.monotonic(), response)
        millis = response.get("MillisBehindLatest")
        del response
        if millis is not None:
            self.counters.gauge("millis_behind_latest", shard_id).set(millis)
        if records:
            stopped = yield from self._emit(shard_id, records)
            if stopped:
                return "stop"
        if millis == 0 and len(raw) < action.limit and machine.state is not ReaderState.ENDED:
            self.caught_up.add(shard_id)
            if not raw:
                idle = int((time.time() - self.spec.idle_threshold) * 1e6)
                if not self.tracker.try_claim(IdleClaim(shard_id, idle)):
                    self.clean.discard(shard_id)
                    return "stop"
        else:
            self.caught_up.discard(shard_id)
        self._advance_watermark()
        return None

    def _emit(self, shard_id: str, records: list[CoreRecord]) -> Generator[Any, None, bool]:
        """Claim and output the records of one response that lie in this restriction's range.
        Returns True when a claim was refused (checkpointed by the runner, or out of
        ``max_records``)."""
        cursor = self.cursors[shard_id]
        lo, hi = self.lo, self.hi
        inside = lo <= cursor.lo and cursor.hi <= hi
        in_range: dict[str, bool] = {}
        with_metadata = self.spec.with_metadata
        timestamp_fn = self.spec.timestamp_fn
        try_claim = self.tracker.try_claim
        left = self.records_left
        last_seq = -1
        seq_text = ""
        arrival: Any = None
        ts = Timestamp(0)
        micros = 0
        emitted = 0
        nbytes = 0
        skipped: Position | None = None
        # tuple.__new__ builds the NamedTuples in C, without their Python-level __new__.
        new_tuple = tuple.__new__
        for record in records:
            if not inside:
                ehk = record.explicit_hash_key
                if ehk is not None:
                    ok = lo <= int(ehk) <= hi
                else:
                    pk = record.partition_key
                    cached = in_range.get(pk)
                    ok = cached if cached is not None else lo <= hash_key(pk) <= hi
                    in_range[pk] = ok
                if not ok:
                    skipped = (record.sequence_number, record.sub_sequence_number)
                    continue
            seq = record.sequence_number
            if seq != last_seq:
                last_seq = seq
                seq_text = str(seq)
                if record.approximate_arrival_timestamp is not arrival:
                    arrival = record.approximate_arrival_timestamp
                    micros = _micros(arrival) if arrival is not None else _now_micros()
                    ts = Timestamp(micros=micros)
            sub = record.sub_sequence_number
            element = new_tuple(
                KinesisRecord,
                (
                    record.data,
                    record.partition_key,
                    record.explicit_hash_key,
                    shard_id,
                    seq_text,
                    sub,
                    ts,
                ),
            )
            out_ts, out_micros = ts, micros
            if timestamp_fn is not None:
                out_ts = to_timestamp(timestamp_fn(element))
                out_micros = out_ts.micros
            if not try_claim(new_tuple(RecordClaim, (shard_id, seq, sub, out_micros))):
                self.clean.discard(shard_id)
                self._count(emitted, nbytes)
                return True
            skipped = None
            yield TimestampedValue(element if with_metadata else record.data, out_ts)
            emitted += 1
            nbytes += len(record.data)
            if left is not None:
                left -= 1
                if left == 0:
                    self._count(emitted, nbytes)
                    self.records_left = 0
                    self.clean.discard(shard_id)
                    return True
        self.records_left = left
        self._count(emitted, nbytes)
        if skipped is not None and not try_claim(SkipClaim(shard_id, *skipped)):
            self.clean.discard(shard_id)
            return True
        return False

    def _count(self, emitted: int, nbytes: int) -> None:
        if emitted:
            self.counters.records.inc(emitted)
            self.counters.bytes.inc(nbytes)

    def _end(self, shard_id: str, ended: Ended) -> bool:
        """The shard ended (or vanished): adopt its children. False if the claim was refused."""
        cursor = self.cursors[shard_id]
        children = ended.children
        known: tuple[ShardRef, ...] = ()
        if not children:
            # No ChildShards (a vanished shard, or a service that does not send them): ask
            # ListShards who the children are.
            listing = _list_shards(self.client, self.spec.stream, None)
            children = tuple(ShardNode.from_shard_info(s) for s in listing if shard_id in s.parents)
            known = tuple(ShardRef(s.shard_id, s.start_hash_key, s.end_hash_key) for s in listing)
        if not self.tracker.try_claim(EndClaim(shard_id, children, known)):
            return False
        del self.machines[shard_id]
        self.clean.discard(shard_id)
        self.caught_up.discard(shard_id)
        self.ended.append(cursor)
        restriction: KinesisRestriction = self.tracker.current_restriction()
        self.cursors = {c.shard_id: c for c in restriction.cursors}
        self._start_readers(restriction)
        self._advance_watermark(restriction)
        return True

    def _advance_watermark(self, restriction: KinesisRestriction | None = None) -> None:
        current = restriction or self.tracker.current_restriction()
        mark = restriction_watermark(current)
        for cursor in current.cursors:
            if cursor.watermark is not None and cursor.readable:
                self.counters.gauge("watermark_millis", cursor.shard_id).set(
                    cursor.watermark // 1000
                )
        if mark is None:
            return
        new = Timestamp(micros=mark)
        now = self.watermark.current_watermark()
        if now is None or new > now:
            self.watermark.set_watermark(new)


_FINALIZER = beam.DoFn.BundleFinalizerParam
_RESTRICTION = beam.DoFn.RestrictionParam()
_WATERMARK = beam.DoFn.WatermarkEstimatorParam(
    ManualWatermarkEstimator.default_provider()  # type: ignore[no-untyped-call]
)


class _BoundedReadFn(_ReadFn):
    def process(
        self,
        element: str,
        bundle_finalizer: Any = _FINALIZER,
        tracker: Any = _RESTRICTION,
        watermark: Any = _WATERMARK,
    ) -> Iterator[Any]:
        return self._read(bundle_finalizer, tracker, watermark)


class _UnboundedReadFn(_ReadFn):
    @beam.DoFn.unbounded_per_element()  # type: ignore[no-untyped-call, untyped-decorator]
    def process(
        self,
        element: str,
        bundle_finalizer: Any = _FINALIZER,
        tracker: Any = _RESTRICTION,
        watermark: Any = _WATERMARK,
    ) -> Iterator[Any]:
        return self._read(bundle_finalizer, tracker, watermark)
