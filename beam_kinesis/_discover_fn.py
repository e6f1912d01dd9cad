"""The shard discovery of ``ReadFromKinesis(shard_discovery_interval=...)``: a splittable DoFn
that outputs one encoded one-shard restriction per shard, once, read by
:class:`~beam_kinesis._read_fn.ShardReadFn` (:mod:`beam_kinesis.discovery` has the logic).

Its first call starts as the adopting read does (the stream's facts, the stored positions, the
start position's listing: :func:`~beam_kinesis._read_fn.start_restriction`) and outputs one
restriction per shard to read first; each later call lists the shards (the core's executor,
:data:`~kinesis_core.aws.executor.LISTING_RETRY`) and outputs the new descendants, then
self-checkpoints until the next listing is due. Its watermark is the time of the last listing
minus ``idle_threshold``: a shard it outputs later was created after that listing, so its
records are not older than that.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import apache_beam as beam
from apache_beam.io.watermark_estimators import ManualWatermarkEstimator
from apache_beam.transforms.core import RestrictionProvider
from apache_beam.transforms.window import TimestampedValue
from apache_beam.utils.timestamp import Duration, Timestamp

from beam_kinesis._metrics import BeamMetrics
from beam_kinesis._read_fn import start_restriction
from beam_kinesis._read_spec import ReadSpec, now_micros
from beam_kinesis.discovery import (
    Discovery,
    DiscoveryCoder,
    DiscoveryDeadlineClaim,
    DiscoveryStopClaim,
    DiscoveryTracker,
    EmitClaim,
    StartClaim,
    new_shards,
    shard_restrictions,
    started,
)
from beam_kinesis.plan import (
    KinesisRestriction,
    encode_restriction,
)
from kinesis_core.aws.calls import ListShards
from kinesis_core.aws.client import create_botocore_client
from kinesis_core.aws.exceptions import error_kind
from kinesis_core.aws.executor import LISTING_RETRY, SyncExecutor
from kinesis_core.consumer.lineage import ShardNode
from kinesis_core.errors import KinesisServiceError
from kinesis_core.stream import StreamRef

_NAP = 0.1
"""Seconds a call that finds no listing due sleeps before it defers."""


class DiscoverFn(beam.DoFn, RestrictionProvider):
    """Outputs every shard to read, once, as an encoded one-shard restriction."""

    def __init__(self, spec: ReadSpec) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        assert spec.shard_discovery_interval is not None
        self._spec = spec
        self._interval = spec.shard_discovery_interval

    def setup(self) -> None:
        self._due = float("-inf")
        self._metrics = BeamMetrics()
        self._client = create_botocore_client(self._spec.client_config, "kinesis")
        self._executor = SyncExecutor(self._client)

    def teardown(self) -> None:
        client = getattr(self, "_client", None)
        if client is not None:
            client.close()
            self._client = None

    # -- restriction provider -------------------------------------------------------------

    def initial_restriction(self, element: str) -> Discovery:
        return Discovery(None)

    def create_tracker(self, restriction: Discovery) -> DiscoveryTracker:
        return DiscoveryTracker(restriction, bounded=self._spec.bounded)

    def restriction_size(self, element: str, restriction: Discovery) -> float:
        return 0.0 if restriction.done else 1.0

    def truncate(self, element: str, restriction: Discovery) -> None:
        """On drain, stop at once."""
        return None

    def restriction_coder(self) -> DiscoveryCoder:
        return DiscoveryCoder()

    # -- processing -----------------------------------------------------------------------

    def _discover(self, element: str, tracker: Any, watermark: Any) -> Iterator[Any]:
        discovery: Discovery = tracker.current_restriction()
        if discovery.done:
            return
        spec = self._spec
        if spec.max_read_time is not None and discovery.deadline is None:
            deadline = now_micros() + int(spec.max_read_time * 1e6)
            tracker.try_claim(DiscoveryDeadlineClaim(deadline))
            discovery = discovery._replace(deadline=deadline)
        if discovery.deadline is not None and now_micros() >= discovery.deadline:
            tracker.try_claim(DiscoveryStopClaim())
            return
        if discovery.emitted is not None and time.monotonic() < self._due:
            # Runners that ignore the defer delay re-invoke at once: wait a little here.
            time.sleep(min(self._due - time.monotonic(), _NAP))
            tracker.defer_remainder(Duration(seconds=max(self._due - time.monotonic(), 0.0)))
            return
        self._due = time.monotonic() + self._interval
        listed_at = now_micros()
        found: list[KinesisRestriction]
        if discovery.emitted is None:
            whole, nodes = start_restriction(spec, element)
            emitted = started(whole, nodes)
            tracker.try_claim(StartClaim(emitted, whole.child_start, whole.created_ms))
            found = shard_restrictions(whole)
            found += new_shards(
                nodes,
                emitted,
                child_start=whole.child_start,
                created_ms=whole.created_ms,
            )
            mark = None
        else:
            stream = StreamRef.of(element)
            try:
                shards = self._executor.execute(ListShards(stream), LISTING_RETRY)
            except Exception as exc:
                if error_kind(exc) is None:
                    raise
                raise KinesisServiceError.wrap(exc, f"listing the shards of {stream}") from exc
            nodes = [ShardNode.from_shard_info(s) for s in shards]
            current = watermark.current_watermark()
            mark = None if current is None else current.micros
            found = new_shards(
                nodes,
                discovery.emitted,
                child_start=discovery.child_start,
                created_ms=discovery.created_ms,
                watermark=mark,
            )
        ids = frozenset(r.cursors[0].shard_id for r in found)
        if not tracker.try_claim(EmitClaim(ids, frozenset(n.shard_id for n in nodes))):
            return
        for restriction in found:
            encoded = encode_restriction(restriction)
            yield encoded if mark is None else TimestampedValue(encoded, Timestamp(micros=mark))
        self._metrics.discovered(len(found))
        new_mark = Timestamp(micros=listed_at - int(spec.idle_threshold * 1e6))
        current_mark = watermark.current_watermark()
        if current_mark is None or new_mark > current_mark:
            watermark.set_watermark(new_mark)
        if spec.bounded and (discovery.deadline is None or now_micros() >= discovery.deadline):
            # stop_when_caught_up alone lists once; max_read_time lists until its time is up.
            tracker.try_claim(DiscoveryStopClaim())
            return
        tracker.defer_remainder(Duration(seconds=self._interval))


_RESTRICTION = beam.DoFn.RestrictionParam()
_WATERMARK = beam.DoFn.WatermarkEstimatorParam(
    ManualWatermarkEstimator.default_provider()  # type: ignore[no-untyped-call]
)


class BoundedDiscoverFn(DiscoverFn):
    def process(
        self, element: str, tracker: Any = _RESTRICTION, watermark: Any = _WATERMARK
    ) -> Iterator[Any]:
        return self._discover(element, tracker, watermark)


class UnboundedDiscoverFn(DiscoverFn):
    @beam.DoFn.unbounded_per_element()  # type: ignore[no-untyped-call, untyped-decorator]
    def process(
        self, element: str, tracker: Any = _RESTRICTION, watermark: Any = _WATERMARK
    ) -> Iterator[Any]:
        return self._discover(element, tracker, watermark)
