"""``ReadFromKinesis``: a pure-Python splittable DoFn that reads a Kinesis stream.

``p | ReadFromKinesis("orders", initial_position=TRIM_HORIZON)`` gives one
:class:`~beam_kinesis.record.KinesisRecord` per user record (KPL aggregates are taken apart),
timestamped with its arrival time. The element is the stream; each restriction owns a
hash-key range and the shards to read in it (:mod:`beam_kinesis.restriction`): one per shard
open at the start position, each adopting the children of the shards it finishes.

This module is the transform: its arguments, their checks and its expansion. The DoFn is in
:mod:`beam_kinesis._read_fn`, its per-call read loop in :mod:`beam_kinesis._read_loop`, and the
shard readers (the transport: the core's sans-I/O readers and a synchronous botocore client) in
:mod:`beam_kinesis._shard_readers`. A ``process`` call claims each GetRecords answer's
records (one claim of the last position they consume) before it outputs them, and
self-checkpoints (``defer_remainder``) every ``self_checkpoint_interval`` seconds. With a
checkpoint store, the positions of a bundle are written from its bundle finalizer, i.e. only
after the runner committed the bundle.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from datetime import datetime
from typing import Any

import apache_beam as beam
from apache_beam.options.pipeline_options import DirectOptions

from beam_kinesis._discover_fn import BoundedDiscoverFn, UnboundedDiscoverFn
from beam_kinesis._read_fn import (
    BoundedReadFn,
    BoundedShardReadFn,
    ReadFn,
    ShardReadFn,
    UnboundedReadFn,
)
from beam_kinesis._read_spec import CheckpointStoreFactory, ReadSpec, TimestampFn
from beam_kinesis.options import client_config_from_options, warn_if_credentials
from beam_kinesis.record import KinesisRecord
from kinesis_core.aws.config import ClientConfig
from kinesis_core.aws.overrides import with_overrides
from kinesis_core.checkpoint import SQLiteCheckpointStore
from kinesis_core.consumer import ConsumerConfig, EnhancedFanOut, InitialPosition
from kinesis_core.errors import ConfigurationError
from kinesis_core.stream import StreamRef

_MAX_SECONDS = 365 * 24 * 3600.0


def _store_factory(
    store: CheckpointStoreFactory | str | os.PathLike[str] | None,
) -> CheckpointStoreFactory | None:
    if store is None or callable(store):
        return store
    if isinstance(store, (str, os.PathLike)):
        return functools.partial(SQLiteCheckpointStore, os.fspath(store))
    raise ConfigurationError(
        "checkpoint_store",
        "must be a SQLite file path or a picklable zero-argument callable returning a "
        f"CheckpointStore (a store object cannot travel to the workers), got {store!r:.60}",
    )


_NOT_FOR_BEAM = {
    "checkpoint_interval": "positions are written from bundle finalizers, after each commit",
    "shard_refresh_interval": "restrictions adopt children from ChildShards at a shard's end",
    "close_timeout": "the runner decides when a bundle ends",
    "auto_ack": "a record is committed with its bundle",
    "max_queued_batches": "the runner's bundles are the backpressure",
    "leases": "the runner distributes the restrictions over its workers",
}
"""ConsumerConfig fields the Beam source has no use for, and why."""


def _consumer_config(config: ConsumerConfig | None, **given: Any) -> ConsumerConfig:
    """``config`` with the transform's own keyword arguments on top; refuses settings that
    mean nothing here rather than ignoring them."""
    base = config if config is not None else ConsumerConfig()
    if not isinstance(base, ConsumerConfig):
        raise ConfigurationError(
            "consumer_config", f"must be a ConsumerConfig, got {type(base).__name__}"
        )
    default = ConsumerConfig()
    for name, why in _NOT_FOR_BEAM.items():
        if getattr(base, name) != getattr(default, name):
            raise ConfigurationError(
                "consumer_config", f"{name} does not apply to ReadFromKinesis: {why}"
            )
    overrides = {name: value for name, value in given.items() if value is not None}
    return with_overrides(base, overrides, "ReadFromKinesis")


def _check_seconds(field: str, value: float | None, *, minimum: float = 0.0) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigurationError(field, f"must be a number of seconds, got {value!r:.60}")
    if not minimum <= value <= _MAX_SECONDS:
        raise ConfigurationError(
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

    ``consumer_arn`` / ``consumer_name``: read by enhanced fan-out (SubscribeToShard, HTTP/2)
    as this registered consumer, or as the consumer of this name (registered if missing);
    see docs/efo.md. A subscription is kept across the bundles of its restriction; the
    positions and checkpoints are the same as with polling.

    ``on_stream_recreated``: what the start does when the store holds positions of an earlier
    stream of the same name (deleted and created again): ``"fail"`` (the default) raises
    :class:`~kinesis_core.consumer.incarnation.StreamRecreatedError`, ``"reset"`` reads those
    shards from ``initial_position``, with a WARNING (docs/checkpoints.md).

    ``shard_discovery_interval``: read every shard by its own restriction (the runner spreads
    them over its workers), children born after the start too: a discovery lists the shards
    this often and outputs each new one; a child waits until its parents' SHARD_END is in the
    ``checkpoint_store`` (required). Without it, a shard's children are adopted by the
    restriction that read it, and no store is needed. See docs/beam-read.md.

    ``first_calls_ahead``: when the runner splits the read into restrictions, send each
    polled restriction's first GetShardIterator and GetRecords at once, from one thread of that
    process, so that a restriction has its first answer when the runner comes to it (the
    default). An answer no reader of that process takes is dropped, and its calls were made
    for nothing: count them with the ``aws.kinesis.beam.read.early_calls_wasted`` counter, and
    set False where the reads a stream allows per shard are scarce and restrictions are
    processed elsewhere than where they were split (docs/beam-read.md).

    ``consumer_config``: a :class:`~kinesis_core.consumer.ConsumerConfig` shared with the core
    consumer or a Faust channel; its ``application_name``, ``initial_position``,
    ``idle_interval``, ``max_records_per_call``, ``max_read_bytes_per_second``,
    ``enhanced_fan_out`` and ``on_stream_recreated`` apply (the keyword arguments of the same
    names override them), and settings that mean nothing to a Beam source (leases, auto_ack,
    ...) are refused rather than ignored. ``initial_position`` takes what
    :func:`~kinesis_core.consumer.parse_initial_position` takes.
    """

    def __init__(
        self,
        stream: str | StreamRef,
        *,
        consumer_config: ConsumerConfig | None = None,
        client_config: ClientConfig | None = None,
        initial_position: InitialPosition | str | datetime | None = None,
        with_metadata: bool = True,
        timestamp_fn: TimestampFn | None = None,
        max_records: int | None = None,
        max_read_time: float | None = None,
        stop_when_caught_up: bool = False,
        idle_threshold: float = 10.0,
        checkpoint_store: CheckpointStoreFactory | str | os.PathLike[str] | None = None,
        application_name: str | None = None,
        self_checkpoint_interval: float = 1.0,
        idle_interval: float | None = None,
        max_records_per_call: int | None = None,
        consumer_arn: str | None = None,
        consumer_name: str | None = None,
        on_stream_recreated: str | None = None,
        shard_discovery_interval: float | None = None,
        first_calls_ahead: bool = True,
    ) -> None:
        super().__init__()
        ref = StreamRef.of(stream)
        fan_out: EnhancedFanOut | None = None
        if consumer_arn is not None or consumer_name is not None:
            base = consumer_config.fan_out if consumer_config is not None else None
            fan_out = dataclasses.replace(
                base or EnhancedFanOut(), consumer_arn=consumer_arn, consumer_name=consumer_name
            )
        consumer = _consumer_config(
            consumer_config,
            initial_position=initial_position,
            application_name=application_name,
            idle_interval=idle_interval,
            max_records_per_call=max_records_per_call,
            enhanced_fan_out=fan_out,
            on_stream_recreated=on_stream_recreated,
        )
        if consumer.fan_out is not None and consumer.fan_out.deregister_on_close:
            raise ConfigurationError(
                "consumer_config",
                "deregister_on_close does not apply to ReadFromKinesis: no worker knows when "
                "the job ends; deregister the consumer after the job",
            )
        if max_records is not None and (
            isinstance(max_records, bool) or not isinstance(max_records, int) or max_records < 1
        ):
            raise ConfigurationError("max_records", f"must be an int >= 1, got {max_records!r}")
        _check_seconds("max_read_time", max_read_time)
        _check_seconds("idle_threshold", idle_threshold)
        _check_seconds("self_checkpoint_interval", self_checkpoint_interval, minimum=0.01)
        _check_seconds("shard_discovery_interval", shard_discovery_interval, minimum=0.1)
        if shard_discovery_interval is not None:
            if checkpoint_store is None:
                raise ConfigurationError(
                    "shard_discovery_interval",
                    "needs a checkpoint_store: a discovered child shard waits there for its "
                    "parents' SHARD_END, which another restriction, maybe on another worker, "
                    "commits",
                )
            if max_records is not None:
                raise ConfigurationError(
                    "shard_discovery_interval",
                    "cannot count max_records over restrictions that read in parallel; use "
                    "max_read_time or stop_when_caught_up",
                )
        if timestamp_fn is not None and not callable(timestamp_fn):
            raise ConfigurationError("timestamp_fn", f"must be callable, got {timestamp_fn!r:.60}")
        if client_config is not None:
            warn_if_credentials(client_config, "ReadFromKinesis")
        self._client_config = client_config
        self._spec = ReadSpec(
            stream=str(ref),
            client_config=client_config or ClientConfig(),
            initial_position=consumer.initial_position,
            with_metadata=with_metadata,
            timestamp_fn=timestamp_fn,
            max_records=max_records,
            max_read_time=max_read_time,
            stop_when_caught_up=stop_when_caught_up,
            idle_threshold=idle_threshold,
            checkpoint_store=_store_factory(checkpoint_store),
            application_name=consumer.application_name,
            self_checkpoint_interval=self_checkpoint_interval,
            idle_interval=consumer.idle_interval,
            max_records_per_call=consumer.max_records_per_call,
            fan_out=consumer.fan_out,
            max_read_bytes_per_second=consumer.max_read_bytes_per_second,
            on_stream_recreated=consumer.on_stream_recreated,
            shard_discovery_interval=shard_discovery_interval,
            first_calls_ahead=first_calls_ahead,
        )

    def expand(self, pbegin: Any) -> Any:
        pipeline = pbegin.pipeline
        spec = dataclasses.replace(
            self._spec,
            client_config=client_config_from_options(pipeline.options, self._client_config),
        )
        if spec.discovers and not spec.bounded and _in_process_runner(pipeline):
            raise ConfigurationError(
                "shard_discovery_interval",
                "an unbounded shard discovery cannot run on the FnApiRunner (nor on the "
                "DirectRunner, which falls back to it): that runner starts a stage only once "
                "the stages before it ended, and the discovery never ends, so no shard would "
                "be read. Use Prism (PrismRunner), Flink or Dataflow, a bounded read, or no "
                "discovery (children adopted by their parent's restriction).",
            )
        if _drops_sdf_residuals(pipeline):
            if spec.discovers:
                raise ConfigurationError(
                    "shard_discovery_interval",
                    "a shard discovery cannot run on the FnApiRunner with direct_num_workers "
                    "!= 1: that runner drops the residuals of splittable DoFns, so the "
                    "discovery would stop after its first listing",
                )
            if not spec.bounded:
                raise ConfigurationError(
                    "direct_num_workers",
                    "ReadFromKinesis: an unbounded read cannot run on the FnApiRunner with "
                    "direct_num_workers != 1: that runner drops the residuals of splittable "
                    "DoFns (its ParallelBundleManager keeps only metrics and errors of the "
                    "parallel bundles), so the read would stop after the first checkpoint. Use "
                    "--direct_num_workers=1, another runner, or a bounded read.",
                )
            spec = dataclasses.replace(spec, self_checkpoint_interval=None)
        output_type = KinesisRecord if spec.with_metadata else bytes
        stream = beam.Map(_constant, spec.stream)  # type: ignore[no-untyped-call]
        start = pbegin | "Impulse" >> beam.Impulse() | "Stream" >> stream
        fn: ReadFn
        if spec.discovers:
            discover = BoundedDiscoverFn(spec) if spec.bounded else UnboundedDiscoverFn(spec)
            fn = BoundedShardReadFn(spec) if spec.bounded else ShardReadFn(spec)
            shards = beam.ParDo(discover).with_output_types(bytes)  # type: ignore[no-untyped-call]
            start = start | "Discover" >> shards
        else:
            fn = BoundedReadFn(spec) if spec.bounded else UnboundedReadFn(spec)
        read = beam.ParDo(fn).with_output_types(output_type)  # type: ignore[no-untyped-call]
        return start | "Read" >> read

    def display_data(self) -> dict[str, Any]:
        return self._spec.display_data()


def _constant(_: Any, value: str) -> str:
    return value


def _in_process_runner(pipeline: Any) -> bool:
    """The Python FnApiRunner, or the DirectRunner, which runs on it when it cannot start
    Prism."""
    from apache_beam.runners.direct.direct_runner import SwitchingDirectRunner
    from apache_beam.runners.portability.fn_api_runner.fn_runner import FnApiRunner

    return isinstance(pipeline.runner, (SwitchingDirectRunner, FnApiRunner))


def _drops_sdf_residuals(pipeline: Any) -> bool:
    """The Python FnApiRunner (also behind the DirectRunner) with more than one worker loses
    self-checkpoint residuals: its ParallelBundleManager merges only the metrics and errors of
    the parallel bundles (Beam 2.77)."""
    if not _in_process_runner(pipeline):
        return False
    return bool(pipeline.options.view_as(DirectOptions).direct_num_workers != 1)
