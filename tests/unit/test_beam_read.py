"""ReadFromKinesis's DoFn driven by hand against an in-memory fake of the Kinesis API: what a
process() call outputs and claims, its self-checkpoints, bounded stops, watermarks, errors,
children, finalizer commits, and the transform's validation. No server, no pipeline run."""

from __future__ import annotations

import asyncio
import itertools
import time
from datetime import datetime, timedelta, timezone
from typing import Any

import apache_beam as beam
import pytest
from apache_beam.internal import pickler
from apache_beam.io.watermark_estimators import ManualWatermarkEstimator
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.portability.fn_api_runner.fn_runner import FnApiRunner
from apache_beam.runners.sdf_utils import RestrictionTrackerView, ThreadsafeRestrictionTracker
from apache_beam.transforms.core import _BundleFinalizerParam
from apache_beam.utils.timestamp import Timestamp
from botocore.exceptions import ClientError

import beam_kinesis._discover_fn as discover_fn_module
import beam_kinesis._read_fn as read_fn_module
import beam_kinesis._shard_readers as shard_readers_module
from beam_kinesis._discover_fn import UnboundedDiscoverFn
from beam_kinesis._read_fn import (
    BoundedReadFn,
    BoundedShardReadFn,
    ReadFn,
    RestrictionWatermark,
    UnboundedReadFn,
    start_restriction,
)
from beam_kinesis._read_spec import to_timestamp
from beam_kinesis.discovery import Discovery, new_shards, shard_restrictions, started
from beam_kinesis.plan import (
    KinesisRestriction,
    ShardCursor,
    ShardRef,
    decode_restriction,
    encode_restriction,
)
from beam_kinesis.read import ReadFromKinesis
from beam_kinesis.record import KinesisRecord
from kinesis_core.aggregation import encode_aggregate
from kinesis_core.aws.classify import ErrorKind
from kinesis_core.aws.config import ClientConfig
from kinesis_core.checkpoint import SHARD_END, MemoryCheckpointStore
from kinesis_core.consumer import LATEST, TRIM_HORIZON, AtTimestamp, ConsumerConfig
from kinesis_core.consumer.reading import ShardReadError
from kinesis_core.errors import ConfigurationError, KinesisServiceError, ValidationError
from kinesis_core.records import SubRecord
from kinesis_core.shards.hashing import MAX_HASH_KEY, hash_key
from tests.fakes.kinesis import FakeKinesis, FakeShard, client_error

HALF = MAX_HASH_KEY // 2
T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
SECOND = 1_000_000


def key_in(lo: int, hi: int, prefix: str = "k") -> str:
    """A partition key whose hash key lies in [lo, hi]."""
    for i in itertools.count():
        if lo <= hash_key(f"{prefix}{i}") <= hi:
            return f"{prefix}{i}"
    raise AssertionError


LOW_KEY = key_in(0, HALF, "low")
HIGH_KEY = key_in(HALF + 1, MAX_HASH_KEY, "high")


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeKinesis:
    fake = FakeKinesis(
        [FakeShard("s0", 0, HALF), FakeShard("s1", HALF + 1, MAX_HASH_KEY)], arrival=T0
    )
    monkeypatch.setattr(read_fn_module, "create_botocore_client", lambda *a, **kw: fake.sync)
    monkeypatch.setattr(shard_readers_module, "create_botocore_client", lambda *a, **kw: fake.sync)
    return fake


def make_fn(*, unbounded: bool = False, **kw: Any) -> ReadFn:
    """The DoFn as a worker has it (after setup); bounded by stop_when_caught_up unless
    ``unbounded``."""
    if not unbounded:
        kw.setdefault("stop_when_caught_up", True)
    kw.setdefault("initial_position", TRIM_HORIZON)
    kw.setdefault("idle_interval", 0.2)
    transform = ReadFromKinesis("stream", client_config=ClientConfig(region_name="us-east-1"), **kw)
    spec = transform._spec
    fn = BoundedReadFn(spec) if spec.bounded else UnboundedReadFn(spec)
    fn.setup()
    return fn


class Bundle:
    """One process() call the way the SDK harness makes it."""

    def __init__(
        self, fn: ReadFn, restriction: KinesisRestriction, watermark: Timestamp | None = None
    ) -> None:
        self.tracker = ThreadsafeRestrictionTracker(fn.create_tracker(restriction))
        self.estimator = ManualWatermarkEstimator(watermark)
        self.finalizer = _BundleFinalizerParam()
        self.outputs = list(
            fn.process(
                "stream", self.finalizer, RestrictionTrackerView(self.tracker), self.estimator
            )  # type: ignore[attr-defined]
        )
        self.tracker.check_done()

    @property
    def elements(self) -> list[Any]:
        return [o.value for o in self.outputs]

    @property
    def residual(self) -> KinesisRestriction | None:
        status = self.tracker.deferred_status()
        return None if status is None else status[0]

    @property
    def restriction(self) -> KinesisRestriction:
        return self.tracker.current_restriction()  # type: ignore[no-any-return]


def whole(fn: ReadFn) -> KinesisRestriction:
    return fn.initial_restriction("stream")


def parts(fn: ReadFn) -> list[KinesisRestriction]:
    return list(fn.split("stream", whole(fn)))


# -- output and claims ----------------------------------------------------------------------------


def test_reads_every_record_in_shard_order_and_stops_when_caught_up(fake: FakeKinesis) -> None:
    seqs = [
        fake.put(LOW_KEY, f"r{i}".encode(), shard="s0", at=T0 + timedelta(seconds=i))
        for i in range(3)
    ]
    fn = make_fn()
    (low, high) = parts(fn)
    bundle = Bundle(fn, low)
    assert [e.data for e in bundle.elements] == [b"r0", b"r1", b"r2"]
    first = bundle.elements[0]
    assert isinstance(first, KinesisRecord)
    assert first == KinesisRecord(
        b"r0", LOW_KEY, None, "s0", str(seqs[0]), 0, Timestamp.of(T0.timestamp())
    )
    assert [o.timestamp for o in bundle.outputs] == [
        Timestamp.of(T0.timestamp() + i) for i in range(3)
    ]
    assert bundle.residual is None
    assert bundle.restriction.done
    assert bundle.restriction.cursors[0].position == (seqs[2], 0)
    assert Bundle(fn, high).elements == []


def test_kpl_aggregates_come_out_as_user_records(fake: FakeKinesis) -> None:
    subs = [SubRecord(LOW_KEY, None, b"a"), SubRecord(LOW_KEY, None, b"b")]
    seq = fake.put(LOW_KEY, encode_aggregate(subs), shard="s0")
    fn = make_fn()
    bundle = Bundle(fn, parts(fn)[0])
    assert [(e.data, e.sub_sequence_number, e.sequence_number) for e in bundle.elements] == [
        (b"a", 0, str(seq)),
        (b"b", 1, str(seq)),
    ]


def test_bytes_and_a_timestamp_fn(fake: FakeKinesis) -> None:
    fake.put(LOW_KEY, b"x", shard="s0")
    fn = make_fn(with_metadata=False, timestamp_fn=lambda r: 42.5)
    bundle = Bundle(fn, parts(fn)[0])
    assert bundle.elements == [b"x"]
    assert bundle.outputs[0].timestamp == Timestamp.of(42.5)


def test_max_records_ends_inside_an_aggregate(fake: FakeKinesis) -> None:
    subs = [SubRecord(LOW_KEY, None, bytes([65 + i])) for i in range(5)]
    seq = fake.put(LOW_KEY, encode_aggregate(subs), shard="s0")
    fn = make_fn(max_records=3)
    (only,) = parts(fn)
    bundle = Bundle(fn, only)
    assert [(e.data, e.sub_sequence_number) for e in bundle.elements] == [
        (b"A", 0),
        (b"B", 1),
        (b"C", 2),
    ]
    assert bundle.restriction.cursors[0].position == (seq, 2)
    assert bundle.restriction.records_left == 0


def test_to_timestamp_accepts_timestamps_datetimes_and_seconds() -> None:
    assert to_timestamp(Timestamp.of(3)) == Timestamp.of(3)
    assert to_timestamp(T0) == Timestamp.of(T0.timestamp())
    assert to_timestamp(T0.replace(tzinfo=None)) == Timestamp.of(T0.timestamp())
    assert to_timestamp(7) == Timestamp.of(7)
    with pytest.raises(ValidationError, match="timestamp_fn"):
        to_timestamp("soon")


def test_a_straddling_shard_is_filtered_to_the_restriction_range(fake: FakeKinesis) -> None:
    """A merged child read by two restrictions: each emits its own keys, sub-record by
    sub-record inside an aggregate, and moves past the others."""
    fake.reshard("s0", merged := FakeShard("m", 0, MAX_HASH_KEY, ("s0", "s1")))
    fake.reshard("s1", merged)
    aggregate = encode_aggregate(
        [SubRecord(LOW_KEY, None, b"low-a"), SubRecord(HIGH_KEY, None, b"high-a")]
    )
    fake.put(LOW_KEY, aggregate, shard="m")
    fake.put(LOW_KEY, b"low-b", shard="m")
    last = fake.put(HIGH_KEY, b"high-b", shard="m")
    fn = make_fn()
    low, high = parts(fn)
    got_low = Bundle(fn, low)
    got_high = Bundle(fn, high)
    assert [e.data for e in got_low.elements] == [b"low-a", b"low-b"]
    assert [e.data for e in got_high.elements] == [b"high-a", b"high-b"]
    # The low side skipped past the last (high) record: it will not read it again.
    assert got_low.restriction.cursors[0].position == (last, 0)


# -- checkpoints ----------------------------------------------------------------------------------


def test_self_checkpoint_defers_the_rest_and_reuses_the_iterator(fake: FakeKinesis) -> None:
    fake.put(LOW_KEY, b"a", shard="s0")
    fn = make_fn(unbounded=True, self_checkpoint_interval=0.01)
    first = Bundle(fn, parts(fn)[0])
    assert [e.data for e in first.elements] == [b"a"]
    residual = first.residual
    assert residual is not None
    assert not residual.done
    assert first.restriction.done
    assert residual.cursors == first.restriction.cursors
    fake.put(LOW_KEY, b"b", shard="s0")
    iterators = fake.count("GetShardIterator", "s0")
    got: list[bytes] = []
    for _ in range(100):  # what a runner does: process the residual, then its residual...
        bundle = Bundle(fn, residual)
        got += [e.data for e in bundle.elements]
        residual = bundle.residual
        assert residual is not None
        if got:
            break
    assert got == [b"b"]
    assert fake.count("GetShardIterator", "s0") == iterators


def test_a_checkpoint_while_a_response_is_output_keeps_the_response_in_the_primary(
    fake: FakeKinesis,
) -> None:
    """A response's records are claimed together: a runner's checkpoint in the middle of their
    output leaves them all to the primary, and the residual goes on after the last of them."""
    seqs = [fake.put(LOW_KEY, f"r{i}".encode(), shard="s0") for i in range(3)]
    fn = make_fn(unbounded=True)
    tracker = ThreadsafeRestrictionTracker(fn.create_tracker(parts(fn)[0]))
    outputs = fn.process(
        "stream",
        _BundleFinalizerParam(),
        RestrictionTrackerView(tracker),
        ManualWatermarkEstimator(None),
    )  # type: ignore[attr-defined]
    first = next(outputs)
    split = tracker.try_split(0)  # what a runner's checkpoint calls, from another thread
    assert split is not None
    primary, residual = split
    got = [first.value.data] + [o.value.data for o in outputs]
    assert got == [b"r0", b"r1", b"r2"]
    assert primary.done
    assert residual.cursors[0].position == (seqs[2], 0)
    fake.put(LOW_KEY, b"r3", shard="s0")
    again = Bundle(make_fn(), residual)
    assert [e.data for e in again.elements] == [b"r3"]


def test_a_residual_read_on_another_worker_resumes_after_the_last_record(fake: FakeKinesis) -> None:
    subs = [SubRecord(LOW_KEY, None, bytes([65 + i])) for i in range(3)]
    fake.put(LOW_KEY, encode_aggregate(subs), shard="s0")
    fn = make_fn(unbounded=True, self_checkpoint_interval=0.01, max_records_per_call=1)
    first = Bundle(fn, parts(fn)[0])
    assert first.residual is not None
    other = make_fn(unbounded=True, self_checkpoint_interval=0.01)
    fake.put(LOW_KEY, b"D", shard="s0")
    # Cut the residual inside the aggregate: a new worker re-reads it and skips what is done.
    cursor = first.residual.cursors[0]
    inside = first.residual._replace(cursors=(cursor._replace(position=(cursor.position[0], 0)),))
    again = Bundle(other, inside)
    assert [e.data for e in again.elements] == [b"B", b"C", b"D"]


def test_max_records_is_exact_over_all_shards(fake: FakeKinesis) -> None:
    for i in range(4):
        fake.put(LOW_KEY, f"l{i}".encode(), shard="s0")
        fake.put(HIGH_KEY, f"h{i}".encode(), shard="s1")
    fn = make_fn(max_records=5)
    (only,) = parts(fn)  # max_records reads as one restriction
    bundle = Bundle(fn, only)
    assert len(bundle.elements) == 5
    assert bundle.residual is None
    assert bundle.restriction.records_left == 0


def test_max_read_time_counts_from_the_first_call(fake: FakeKinesis) -> None:
    fake.put(LOW_KEY, b"a", shard="s0")
    fn = make_fn(max_read_time=0.3)
    low = parts(fn)[0]
    assert low.deadline is None
    bundle = Bundle(fn, low)
    assert [e.data for e in bundle.elements] == [b"a"]
    assert bundle.restriction.deadline is not None
    assert bundle.residual is None


def test_a_done_restriction_reads_nothing(fake: FakeKinesis) -> None:
    fn = make_fn()
    low = parts(fn)[0]._replace(done=True)
    assert Bundle(fn, low).outputs == []
    assert fake.count("GetRecords", "s0") == 0


# -- resharding -----------------------------------------------------------------------------------


def test_children_are_read_after_their_parent(fake: FakeKinesis) -> None:
    fake.put(LOW_KEY, b"parent", shard="s0")
    fake.reshard(
        "s0", FakeShard("c1", 0, HALF // 2, ("s0",)), FakeShard("c2", HALF // 2 + 1, HALF, ("s0",))
    )
    fake.put(LOW_KEY, b"child-1", shard="c1")
    fake.put(LOW_KEY, b"child-2", shard="c2")
    fn = make_fn()
    low = parts(fn)[0]
    fake.shards["c1"].records[0]["PartitionKey"] = key_in(0, HALF // 2)
    fake.shards["c2"].records[0]["PartitionKey"] = key_in(HALF // 2 + 1, HALF)
    bundle = Bundle(fn, low)
    assert next(e.data for e in bundle.elements) == b"parent"
    assert sorted(e.data for e in bundle.elements[1:]) == [b"child-1", b"child-2"]
    assert [c.shard_id for c in bundle.restriction.cursors] == ["c1", "c2"]


def test_without_child_shards_the_children_come_from_list_shards(fake: FakeKinesis) -> None:
    fake.child_shards = False
    fake.reshard("s0", FakeShard("c1", 0, HALF, ("s0",)))
    fake.put(LOW_KEY, b"child", shard="c1")
    fn = make_fn()
    bundle = Bundle(fn, parts(fn)[0])
    assert [e.data for e in bundle.elements] == [b"child"]
    assert None in fake.shard_filters


# -- watermarks and errors ------------------------------------------------------------------------


def test_an_idle_shard_lets_the_watermark_advance(fake: FakeKinesis) -> None:
    fake.put(LOW_KEY, b"a", shard="s0", at=T0)
    fn = make_fn(idle_threshold=5.0)
    restriction = parts(fn)[0]._replace(hi=MAX_HASH_KEY)
    restriction = restriction._replace(cursors=(*restriction.cursors, parts(fn)[1].cursors[0]))
    bundle = Bundle(fn, restriction)
    mark = bundle.estimator.current_watermark()
    # s0's record (T0, long ago) bounds it; the idle s1 moved up to about now - 5 s.
    assert mark == Timestamp.of(T0.timestamp())
    s1 = {c.shard_id: c for c in bundle.restriction.cursors}["s1"]
    assert s1.watermark is not None
    assert abs(s1.watermark / SECOND - (datetime.now(timezone.utc).timestamp() - 5.0)) < 60


def test_an_idle_watermark_counts_from_when_the_call_was_sent(
    fake: FakeKinesis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A record may arrive while an empty answer is on its way: the idle shard's watermark must
    not pass the time the call went out (it did: it counted from the answer)."""
    answer = fake.sync.get_records

    def slow(**params: Any) -> dict[str, Any]:
        response = answer(**params)
        time.sleep(0.5)
        return response

    monkeypatch.setattr(fake.sync, "get_records", slow)
    fn = make_fn(idle_threshold=0.0)
    sent_before = time.time()
    bundle = Bundle(fn, parts(fn)[1])
    (s1,) = bundle.restriction.cursors
    assert s1.watermark is not None
    assert s1.watermark / SECOND < sent_before + 0.5


def test_errors_never_move_the_watermark(fake: FakeKinesis) -> None:
    fake.faults["GetRecords", "s0"] = [
        client_error("ProvisionedThroughputExceededException", operation="GetRecords")
    ] * 3
    fn = make_fn(unbounded=True, self_checkpoint_interval=0.05)
    bundle = Bundle(fn, parts(fn)[0])
    assert bundle.estimator.current_watermark() is None
    assert bundle.restriction.cursors[0].watermark is None
    assert bundle.residual is not None


def test_expired_iterators_are_replaced_after_the_last_record(fake: FakeKinesis) -> None:
    fake.put(LOW_KEY, b"a", shard="s0")
    fake.put(LOW_KEY, b"b", shard="s0")
    fake.faults["GetRecords", "s0"] = [
        client_error("ExpiredIteratorException", operation="GetRecords")
    ]
    fn = make_fn()
    bundle = Bundle(fn, parts(fn)[0])
    assert [e.data for e in bundle.elements] == [b"a", b"b"]
    assert fake.count("GetShardIterator", "s0") == 2


def test_fatal_errors_fail_the_bundle(fake: FakeKinesis) -> None:
    fake.faults["GetRecords", "s0"] = [
        client_error("AccessDeniedException", operation="GetRecords")
    ]
    fn = make_fn()
    with pytest.raises(KinesisServiceError, match="GetRecords on s0 of stream failed") as info:
        Bundle(fn, parts(fn)[0])
    assert info.value.code == "AccessDeniedException"
    assert info.value.kind is ErrorKind.AUTH
    assert isinstance(info.value.__cause__, ClientError)


# -- one restriction per shard (shard discovery) ------------------------------------------------


def test_a_discovered_child_waits_for_its_parents_end_in_the_store(fake: FakeKinesis) -> None:
    store = MemoryCheckpointStore()
    fake.put(HIGH_KEY, b"parent", shard="s1")
    fake.reshard("s1", FakeShard("c", HALF + 1, MAX_HASH_KEY, ("s1",)))
    fake.put(HIGH_KEY, b"child", shard="c")
    spec = ReadFromKinesis(
        "stream",
        client_config=ClientConfig(region_name="us-east-1"),
        initial_position=TRIM_HORIZON,
        checkpoint_store=lambda: store,
        shard_discovery_interval=1.0,
        stop_when_caught_up=True,
        self_checkpoint_interval=0.05,
    )._spec
    fn = BoundedShardReadFn(spec)
    fn.setup()
    whole, nodes = start_restriction(spec, "stream")
    by_shard = {r.cursors[0].shard_id: r for r in shard_restrictions(whole)}
    (child,) = new_shards(
        nodes, started(whole, nodes), child_start=None, created_ms=None, watermark=5 * SECOND
    )
    assert fn.initial_restriction(encode_restriction(child)) == child
    assert list(fn.split(b"", child)) == [child]

    waiting = Bundle(fn, child, RestrictionWatermark().initial_estimator_state(b"", child))
    assert waiting.outputs == []
    assert waiting.estimator.current_watermark() == Timestamp(5)  # held where it started
    assert waiting.residual is not None
    assert not waiting.residual.cursors[0].readable

    parent = Bundle(fn, by_shard["s1"])
    assert [e.data for e in parent.elements] == [b"parent"]
    assert parent.restriction.cursors == ()  # ended; the discovery outputs the child
    assert Bundle(fn, waiting.residual).outputs == []  # not committed yet
    parent.finalizer.finalize_bundle()
    assert [e.data for e in Bundle(fn, waiting.residual).elements] == [b"child"]


def test_the_discovery_outputs_each_shard_once_and_children_as_they_appear(
    fake: FakeKinesis, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(discover_fn_module, "create_botocore_client", lambda *a, **kw: fake.sync)
    spec = ReadFromKinesis(
        "stream",
        client_config=ClientConfig(region_name="us-east-1"),
        initial_position=TRIM_HORIZON,
        checkpoint_store=lambda: MemoryCheckpointStore(),
        shard_discovery_interval=0.1,
        idle_threshold=2.0,
    )._spec
    fn = UnboundedDiscoverFn(spec)
    fn.setup()

    def call(discovery: Discovery, estimator: ManualWatermarkEstimator) -> tuple[list[Any], Any]:
        tracker = ThreadsafeRestrictionTracker(fn.create_tracker(discovery))
        out = list(fn.process("stream", RestrictionTrackerView(tracker), estimator))
        residual = tracker.deferred_status()
        assert residual is not None  # an unbounded discovery always goes on
        return out, residual[0]

    estimator = ManualWatermarkEstimator(None)
    first, discovery = call(fn.initial_restriction("stream"), estimator)
    assert [decode_restriction(e).cursors[0].shard_id for e in first] == ["s0", "s1"]
    mark = estimator.current_watermark()
    assert mark is not None  # the listing time minus idle_threshold
    time.sleep(0.1)
    assert call(discovery, estimator)[0] == []
    fake.reshard("s1", FakeShard("c", HALF + 1, MAX_HASH_KEY, ("s1",)))
    time.sleep(0.1)
    (found,), discovery = call(discovery, estimator)
    child = decode_restriction(found.value)
    assert child.cursors[0].shard_id == "c"
    assert child.cursors[0].waiting_for == (ShardRef("s1", HALF + 1, MAX_HASH_KEY),)
    # The child starts at (and its element carries) the discovery's watermark.
    assert found.timestamp <= estimator.current_watermark()
    assert child.cursors[0].watermark == found.timestamp.micros
    assert discovery.emitted == frozenset({"s0", "s1", "c"})
    assert fn.restriction_size("stream", discovery) == 1.0
    assert fn.truncate("stream", discovery) is None
    fake.faults["ListShards"].append(client_error("AccessDeniedException"))
    time.sleep(0.1)
    with pytest.raises(KinesisServiceError, match="listing the shards of stream failed"):
        call(discovery, estimator)
    fn.teardown()


def test_a_discovery_needs_a_checkpoint_store_and_no_max_records() -> None:
    with pytest.raises(ConfigurationError, match="shard_discovery_interval: needs a checkpoint"):
        ReadFromKinesis("s", shard_discovery_interval=1.0)
    with pytest.raises(ConfigurationError, match="shard_discovery_interval: cannot count"):
        ReadFromKinesis("s", shard_discovery_interval=1.0, checkpoint_store="x", max_records=5)
    unbounded = ReadFromKinesis("s", shard_discovery_interval=1.0, checkpoint_store="x")
    with pytest.raises(ConfigurationError, match="never ends"):
        beam.Pipeline(runner=FnApiRunner()) | unbounded
    parallel = PipelineOptions(["--direct_num_workers=2"])
    bounded = ReadFromKinesis(
        "s", shard_discovery_interval=1.0, checkpoint_store="x", max_read_time=1.0
    )
    with pytest.raises(ConfigurationError, match="first listing"):
        beam.Pipeline(runner=FnApiRunner(), options=parallel) | bounded


def test_a_reader_that_gives_up_raises_with_its_last_error(fake: FakeKinesis) -> None:
    fn = make_fn()
    low = parts(fn)[0]
    fake.faults["GetRecords", "s0"] = [
        client_error("ResourceNotFoundException", operation="GetRecords")
    ]
    fake.faults["ListShards"].append(client_error("ResourceNotFoundException"))
    with pytest.raises(ShardReadError, match="no longer exists") as info:
        Bundle(fn, low)
    assert "last error: ResourceNotFoundException" in str(info.value)
    assert isinstance(info.value.__cause__, ClientError)


# -- checkpoint store -----------------------------------------------------------------------------


def test_positions_reach_the_store_only_when_the_bundle_is_finalized(fake: FakeKinesis) -> None:
    store = MemoryCheckpointStore()
    fake.put(LOW_KEY, b"a", shard="s0")
    last = fake.put(LOW_KEY, b"b", shard="s0")
    fake.reshard("s1", FakeShard("c", HALF + 1, MAX_HASH_KEY, ("s1",)))
    fn = make_fn(checkpoint_store=lambda: store)
    low, high = parts(fn)
    bundles = [Bundle(fn, low), Bundle(fn, high)]

    def rows() -> dict[str, Any]:
        return {r.shard_id: r.value for r in asyncio.run(store.list("default", "stream"))}

    assert rows() == {}
    for bundle in bundles:
        bundle.finalizer.finalize_bundle()
    assert rows() == {"s0": (last, 0), "s1": SHARD_END}
    fn.teardown()

    # A new job resumes from the store: s0 after b, s1's child from its start.
    fake.put(LOW_KEY, b"c", shard="s0")
    fake.put(HIGH_KEY, b"child", shard="c")
    again = make_fn(checkpoint_store=lambda: store)
    resumed = whole(again)
    assert {c.shard_id: c.position for c in resumed.cursors} == {"s0": (last, 0), "c": None}
    got = [e.data for r in again.split("stream", resumed) for e in Bundle(again, r).elements]
    assert got == [b"c", b"child"]


def test_initial_restriction_resolves_latest_once(fake: FakeKinesis) -> None:
    fn = make_fn(initial_position=LATEST)
    r = whole(fn)
    assert {c.start for c in r.cursors} == {r.cursors[0].start}
    assert r.cursors[0].start is not None
    assert r.child_start is None
    assert {"Type": "AT_LATEST"} in fake.shard_filters


def test_initial_restriction_at_a_timestamp(fake: FakeKinesis) -> None:
    fake.put(LOW_KEY, b"old", shard="s0", at=T0)
    fake.put(LOW_KEY, b"new", shard="s0", at=T0 + timedelta(hours=1))
    position = AtTimestamp(T0 + timedelta(minutes=1))
    fn = make_fn(initial_position=position)
    r = whole(fn)
    assert r.child_start == r.cursors[0].start
    # The core consumer's rule: the shards open at or after the time (FROM_TIMESTAMP).
    assert [f for f in fake.shard_filters if f] == [position.shard_filter()]
    assert position.shard_filter() == {"Type": "FROM_TIMESTAMP", "Timestamp": position.timestamp}
    assert [e.data for e in Bundle(fn, next(iter(fn.split("stream", r)))).elements] == [b"new"]


# -- the transform --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"stream": ""}, "stream"),
        ({"max_records": 0}, "max_records"),
        ({"max_records": True}, "max_records"),
        ({"max_read_time": -1}, "max_read_time"),
        ({"idle_threshold": "x"}, "idle_threshold"),
        ({"idle_interval": 0.05}, "idle_interval"),
        ({"self_checkpoint_interval": 0}, "self_checkpoint_interval"),
        ({"max_records_per_call": 10_001}, "max_records_per_call"),
        ({"initial_position": "EARLIEST"}, "initial_position"),
        ({"timestamp_fn": 3}, "timestamp_fn"),
        ({"checkpoint_store": 3}, "checkpoint_store"),
        ({"application_name": ""}, "application_name"),
    ],
)
def test_bad_arguments_name_the_field(kwargs: dict[str, Any], field: str) -> None:
    args = {"stream": "s", **kwargs}
    with pytest.raises(ConfigurationError) as info:
        ReadFromKinesis(args.pop("stream"), **args)
    assert info.value.field == field
    assert str(info.value).startswith(f"{field}: ")


def test_a_consumer_config_is_shared_and_keywords_override_it() -> None:
    config = ConsumerConfig(
        application_name="app", initial_position="trim_horizon", max_records_per_call=500
    )
    read = ReadFromKinesis("s", consumer_config=config, max_records_per_call=100)
    spec = read._spec
    assert (spec.application_name, spec.initial_position) == ("app", TRIM_HORIZON)
    assert spec.max_records_per_call == 100
    start = datetime(2026, 1, 1, tzinfo=timezone.utc)
    assert ReadFromKinesis("s", initial_position=start)._spec.initial_position == AtTimestamp(start)


@pytest.mark.parametrize(
    "config",
    [ConsumerConfig(leases=True), ConsumerConfig(auto_ack=True), ConsumerConfig(close_timeout=1)],
)
def test_consumer_settings_that_mean_nothing_to_beam_are_refused(config: ConsumerConfig) -> None:
    with pytest.raises(ConfigurationError, match=r"^consumer_config: .* does not apply"):
        ReadFromKinesis("s", consumer_config=config)


def test_bounded_modes_give_a_bounded_pcollection() -> None:
    p = beam.Pipeline(runner=FnApiRunner())
    assert (p | "b" >> ReadFromKinesis("s", stop_when_caught_up=True)).is_bounded
    assert (p | "b2" >> ReadFromKinesis("s", max_read_time=1)).is_bounded
    assert (p | "b3" >> ReadFromKinesis("s", max_records=1)).is_bounded
    assert not (p | "u" >> ReadFromKinesis("s")).is_bounded


def test_unbounded_reads_are_refused_where_the_runner_drops_residuals() -> None:
    p = beam.Pipeline(runner=FnApiRunner(), options=PipelineOptions(["--direct_num_workers=2"]))
    with pytest.raises(ConfigurationError, match="direct_num_workers"):
        _ = p | ReadFromKinesis("s")
    bounded = p | "b" >> ReadFromKinesis("s", stop_when_caught_up=True)
    assert bounded.is_bounded


def test_display_data_describes_the_read() -> None:
    items = ReadFromKinesis(
        "orders",
        max_records=3,
        checkpoint_store="/tmp/x.db",
        client_config=ClientConfig(region_name="eu-west-1"),
    ).display_data()
    assert items["stream"].value == "orders"
    assert items["max_records"].value == 3
    assert items["region"].value == "eu-west-1"
    assert "checkpoint_store" in items


def test_the_restriction_provider_hooks(fake: FakeKinesis) -> None:
    fn = make_fn()
    r = parts(fn)[0]
    assert fn.restriction_size("stream", r) == 1.0
    assert fn.restriction_size("stream", r._replace(done=True)) == 0.0
    assert fn.truncate("stream", r) is None
    assert fn.restriction_coder().decode(fn.restriction_coder().encode(r)) == r
    assert isinstance(r.cursors[0], ShardCursor)


def test_the_copies_of_one_read_share_its_first_calls_and_another_read_has_its_own() -> None:
    """The runner splits on one copy of the DoFn and processes on others, unpickled from the
    one the transform built: they find one FirstCalls in the process; another read (another
    DoFn built) has its own."""
    spec = ReadFromKinesis("stream", stop_when_caught_up=True)._spec
    fn = BoundedReadFn(spec)
    splitting, processing = (pickler.loads(pickler.dumps(fn)) for _ in range(2))
    shared = splitting._calls_ahead()  # a split-stage copy is never set up
    assert processing._calls_ahead() is shared
    assert fn._calls_ahead() is shared
    assert BoundedReadFn(spec)._calls_ahead() is not shared
