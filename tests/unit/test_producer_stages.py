"""The sans-I/O stages of the producer: token buckets, limiter, collector, aggregator."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings, strategies as st

from kinesis_core.aggregation import decode_aggregate
from kinesis_core.producer.aggregator import Aggregator
from kinesis_core.producer.collector import Collector
from kinesis_core.producer.items import KinesisRecordOut, UserRecord
from kinesis_core.producer.limiter import BURST_BYTES, MIN_MULTIPLIER, Limiter, TokenBucket
from kinesis_core.shards.hashing import hash_key

SINK = 0


def kr(
    shard: str | None = "s0", size: int = 100, deadline: float = 1.0, expiration: float = 30.0
) -> KinesisRecordOut:
    return KinesisRecordOut(b"x", "k", None, [], shard, size, deadline, expiration, 0.0, 0, 0)


def ur(
    i: int, data: bytes = b"d" * 100, arrival: float = 0.0, ehk: str | None = None
) -> UserRecord:
    pk = f"key-{i}"
    h = int(ehk) if ehk is not None else hash_key(pk)
    return UserRecord(h, data, pk, ehk, SINK, i, (), arrival)


# -- token bucket ------------------------------------------------------------------------


def test_bucket_starts_full_and_refills_with_time() -> None:
    bucket = TokenBucket(rate=10.0, capacity=10.0, now=0.0)
    assert bucket.can_take(10)
    bucket.tokens -= 10
    assert not bucket.can_take(1)
    assert bucket.wait_time(5) == pytest.approx(0.5)
    bucket.refill(0.5)
    assert bucket.can_take(5)
    bucket.refill(100.0)
    assert bucket.tokens == 10.0  # capped at capacity


def test_bucket_lets_an_oversized_item_through_when_full_and_goes_into_debt() -> None:
    bucket = TokenBucket(rate=10.0, capacity=10.0, now=0.0)
    assert bucket.can_take(25)
    bucket.tokens -= 25
    assert bucket.wait_time(25) == pytest.approx(2.5)  # back to full, not to 25


# -- limiter -----------------------------------------------------------------------------


def test_limiter_allows_the_rate_limit_per_shard_then_queues_in_order() -> None:
    limiter = Limiter(100)  # 1000 records/s per shard, bucket of 1000
    first = [kr(size=10) for _ in range(1000)]
    assert all(limiter.put(k, 0.0) for k in first)
    late = [kr(size=10) for _ in range(3)]
    assert [limiter.put(k, 0.0) for k in late] == [False, False, False]
    assert limiter.put(kr("s1"), 0.0)  # another shard has its own buckets
    assert limiter.queued == 3
    wake = limiter.next_wakeup()
    assert wake is not None
    assert wake == pytest.approx(0.001)
    released, expired = limiter.drain(0.002)
    assert released == late[:2]
    assert expired == []
    released, _ = limiter.drain(0.01)
    assert released == late[2:]
    assert limiter.next_wakeup() is None


MIB = 1024 * 1024


def test_limiter_counts_bytes_too() -> None:
    limiter = Limiter(100)  # 1 MiB/s, a burst of 10 MiB
    assert limiter.put(kr(size=6 * MIB), 0.0)
    assert not limiter.put(kr(size=6 * MIB), 0.0)  # 4 MiB left of the burst
    released, _ = limiter.drain(1.9)
    assert released == []
    released, _ = limiter.drain(2.0)
    assert len(released) == 1


# -- the byte burst (the KPL 1.0.6 model: a bucket of 10 MiB refilled at the byte rate) ------


def test_a_shard_starts_with_a_full_10_mib_burst_whatever_the_rate() -> None:
    for percent in (1, 100, 150, 900):
        limiter = Limiter(percent)
        shard = limiter.shard("s0", 0.0)
        assert shard.bytes.capacity == shard.bytes.tokens == BURST_BYTES == 10 * MIB
        assert shard.bytes.rate == percent / 100 * MIB
    fast = Limiter(10_000).shard("s0", 0.0)  # one second at that rate is more than the burst
    assert fast.bytes.capacity == 100 * MIB


def test_a_few_large_records_go_at_once_up_to_the_burst() -> None:
    limiter = Limiter(100)
    assert [limiter.put(kr(size=n * MIB), 0.0) for n in (3, 5, 2)] == [True, True, True]
    assert not limiter.put(kr(size=1), 0.0)  # 10 MiB spent: even one byte waits
    assert limiter.next_wakeup() == pytest.approx(1 / MIB)


def test_a_large_record_waits_for_the_burst_to_refill_and_holds_its_shard_in_order() -> None:
    limiter = Limiter(100)
    assert limiter.put(kr(size=int(9.5 * MIB)), 0.0)
    large = kr(size=3 * MIB)
    small = kr(size=100)
    assert not limiter.put(large, 0.0)
    assert not limiter.put(small, 0.0)  # behind the large one: the shard's order holds
    assert limiter.put(kr("s1", size=9 * MIB), 0.0)  # another shard has its own burst
    wake = limiter.next_wakeup()
    assert wake == pytest.approx(2.5)  # 0.5 MiB left, 2.5 MiB more at 1 MiB/s
    assert limiter.drain(2.49) == ([], [])
    released, expired = limiter.drain(2.5)
    assert released == [large]
    assert expired == []
    assert limiter.next_wakeup() == pytest.approx(2.5 + 100 / MIB)
    released, _ = limiter.drain(2.6)
    assert released == [small]
    assert limiter.next_wakeup() is None


def test_a_stream_of_large_records_is_paced_at_the_byte_rate_after_the_burst() -> None:
    limiter = Limiter(150)  # 1.5 MiB/s
    records = [kr(size=5 * MIB, expiration=1e9) for _ in range(8)]
    sent_at: list[float] = []
    for record in records:
        if limiter.put(record, 0.0):
            sent_at.append(0.0)
    while (wake := limiter.next_wakeup()) is not None:
        released, expired = limiter.drain(wake)
        assert expired == []
        sent_at.extend(wake for _ in released)
    assert sent_at[:2] == [0.0, 0.0]  # the burst
    gaps = [b - a for a, b in itertools.pairwise(sent_at[1:])]
    assert gaps == pytest.approx([5 / 1.5] * 6)  # then one every 5 MiB / 1.5 MiB/s


def test_refilling_stops_at_the_burst() -> None:
    limiter = Limiter(100)
    assert limiter.put(kr(size=10 * MIB), 0.0)
    shard = limiter.shard("s0", 0.0)
    shard.refill(4.0, limiter.records_per_second, limiter.bytes_per_second)
    assert shard.bytes.tokens == pytest.approx(4 * MIB)
    shard.refill(3600.0, limiter.records_per_second, limiter.bytes_per_second)
    assert shard.bytes.tokens == 10 * MIB
    assert [limiter.put(kr(size=5 * MIB), 3600.0) for _ in range(3)] == [True, True, False]


def test_throttling_spends_the_burst_and_halves_its_refill() -> None:
    limiter = Limiter(100)
    assert limiter.put(kr(size=MIB), 0.0)  # 9 MiB of burst left
    limiter.throttled("s0", 0.0)
    assert not limiter.put(kr(size=MIB), 0.0)
    assert limiter.next_wakeup() == pytest.approx(2.0)  # 1 MiB at 0.5 MiB/s


def test_rate_limit_percent_scales_the_buckets() -> None:
    limiter = Limiter(150)
    assert limiter.records_per_second == 1500
    assert limiter.bytes_per_second == 1.5 * 1024 * 1024
    assert sum(limiter.put(kr(size=1), 0.0) for _ in range(2000)) == 1500


def test_limiter_hands_back_records_that_expire_while_waiting() -> None:
    limiter = Limiter(100)
    for _ in range(1000):
        limiter.put(kr(size=1), 0.0)
    stale = kr(size=1, expiration=0.0005)
    fresh = kr(size=1, expiration=99.0)
    limiter.put(stale, 0.0)
    limiter.put(fresh, 0.0)
    released, expired = limiter.drain(0.001)
    assert expired == [stale]
    assert released == [fresh]


def test_unpredicted_records_bypass_the_limiter() -> None:
    limiter = Limiter(1)
    assert all(limiter.put(kr(None), 0.0) for _ in range(10_000))


def test_throttling_halves_the_shard_rate_once_per_interval_and_it_recovers() -> None:
    limiter = Limiter(100)
    limiter.throttled("s0", 1.0)
    assert limiter.multiplier("s0") == 0.5
    limiter.throttled("s0", 1.01)  # same burst of errors: no second cut
    assert limiter.multiplier("s0") == pytest.approx(0.5, abs=0.002)
    for i in range(20):
        limiter.throttled("s0", 2.0 + i * 0.2)
    assert limiter.multiplier("s0") == pytest.approx(MIN_MULTIPLIER, abs=0.03)
    assert limiter.multiplier("s1") == 1.0
    limiter.shard("s0", 10.0).refill(100.0, 1000, 1024 * 1024)
    assert limiter.multiplier("s0") == 1.0


def test_a_throttled_shard_sends_more_slowly() -> None:
    limiter = Limiter(100)
    limiter.throttled("s0", 0.0)  # tokens emptied, rate 500/s
    assert not limiter.put(kr(size=1), 0.0)
    wake = limiter.next_wakeup()
    assert wake is not None
    assert wake == pytest.approx(0.002)


def test_non_adaptive_limiter_ignores_throttling() -> None:
    limiter = Limiter(100, adaptive=False)
    limiter.throttled("s0", 0.0)
    assert limiter.multiplier("s0") == 1.0


def test_take_all_empties_the_queues() -> None:
    limiter = Limiter(1)
    records = [kr(size=1) for _ in range(20)]
    for k in records:
        limiter.put(k, 0.0)
    taken = limiter.take_all()
    assert len(taken) == 20 - 10  # 10 went through (1% of 1000 is the bucket)
    assert limiter.queued == 0
    assert limiter.next_wakeup() is None


def test_a_held_shard_waits_out_its_backoff_then_drains_in_order() -> None:
    limiter = Limiter(100)
    limiter.hold("s0", until=0.5, now=0.0)
    first, second = kr(), kr()
    assert not limiter.put(first, 0.0)
    assert not limiter.put(second, 0.1)
    assert limiter.put(kr("s1"), 0.1)  # only s0 is held
    assert limiter.held("s0", 0.4)
    assert limiter.next_wakeup() == pytest.approx(0.5)
    assert limiter.drain(0.4) == ([], [])
    released, _ = limiter.drain(0.5)
    assert released == [first, second]
    assert not limiter.held("s0", 0.5)


def test_one_at_a_time_releases_a_shards_next_record_only_after_unblock() -> None:
    limiter = Limiter(100, one_at_a_time=True)
    first, second, third = kr(), kr(), kr()
    assert limiter.put(first, 0.0)
    assert limiter.blocked("s0")
    assert not limiter.put(second, 0.0)
    assert not limiter.put(third, 0.0)
    assert limiter.put(kr("s1"), 0.0)  # its own shard
    assert limiter.drain(1.0) == ([], [])
    limiter.unblock("s0", 1.0)
    assert limiter.next_wakeup() == pytest.approx(1.0)
    released, _ = limiter.drain(1.0)
    assert released == [second]  # and blocked again
    limiter.unblock("s0", 1.1)
    released, _ = limiter.drain(1.1)
    assert released == [third]


def test_push_front_puts_a_retry_ahead_of_the_queue_and_expiry_still_works() -> None:
    limiter = Limiter(100, one_at_a_time=True)
    assert limiter.put(kr(), 0.0)
    later = kr()
    assert not limiter.put(later, 0.0)
    retry = kr(expiration=0.5)
    limiter.push_front(retry, 0.1)
    assert limiter.next_wakeup() == pytest.approx(0.5)  # blocked: only the expiry is due
    limiter.unblock("s0", 0.2)
    released, _ = limiter.drain(0.2)
    assert released == [retry]
    stale = kr(expiration=0.3)
    limiter.push_front(stale, 0.25)
    released, expired = limiter.drain(0.3)
    assert (released, expired) == ([], [stale])
    limiter.unblock("s0", 0.4)
    released, _ = limiter.drain(0.4)
    assert released == [later]


# -- collector ---------------------------------------------------------------------------


def test_collector_closes_a_request_at_500_records() -> None:
    collector = Collector(500, 5 * 1024 * 1024, linger=0.02)
    batches = [collector.add(kr(size=10), 0.0) for _ in range(1001)]
    full = [b for b in batches if b is not None]
    assert [len(b.records) for b in full] == [500, 500]
    assert len(collector) == 1


def test_collector_closes_a_request_before_it_goes_over_the_size() -> None:
    collector = Collector(500, 5 * 1024 * 1024, linger=0.02)
    size = 1024 * 1024
    out = [collector.add(kr(size=size), 0.0) for _ in range(6)]
    closed = [b for b in out if b is not None]
    assert len(closed) == 1
    assert len(closed[0].records) == 5
    assert closed[0].size == 5 * size


def test_collector_waits_for_the_deadline_plus_linger() -> None:
    collector = Collector(500, 5 * 1024 * 1024, linger=0.02)
    assert collector.add(kr(deadline=0.0), 1.0) is None
    assert collector.next_deadline() == pytest.approx(1.02)
    assert collector.poll(1.01) is None
    batch = collector.poll(1.02)
    assert batch is not None
    assert len(batch.records) == 1
    assert collector.next_deadline() is None
    collector.add(kr(deadline=5.0), 1.0)
    flushed = collector.flush()
    assert flushed is not None
    assert len(flushed.records) == 1
    assert collector.flush() is None


def test_collector_fills_a_request_up_to_10_mib_counting_partition_keys() -> None:
    collector = Collector(500, 10 * MIB, linger=0.02)
    sizes = [3 * MIB, 2 * MIB, 4 * MIB, MIB - 1]  # sizes are data plus partition key
    assert [collector.add(kr(size=n), 0.0) for n in sizes] == [None] * 4
    full = collector.add(kr(size=1), 0.0)  # exactly 10 MiB: full, closed at once
    assert full is not None
    assert full.size == 10 * MIB
    assert len(full.records) == 5
    assert len(collector) == 0


def test_a_record_bigger_than_the_request_size_goes_alone_at_once() -> None:
    collector = Collector(500, 5 * MIB, linger=0.02)
    assert collector.add(kr(size=MIB), 0.0) is None
    before = collector.add(kr(size=int(9.5 * MIB)), 0.0)  # closes the open request...
    assert before is not None
    assert before.size == MIB
    assert collector.next_deadline() == 0.0  # ...and is full itself: due now
    alone = collector.poll(0.0)
    assert alone is not None
    assert [r.size for r in alone.records] == [int(9.5 * MIB)]
    alone = collector.add(kr(size=6 * MIB), 0.0)  # into an empty request: closed at once
    assert alone is not None
    assert alone.size == 6 * MIB


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.one_of(st.integers(1, 60_000), st.integers(1, 10 * MIB)), min_size=1, max_size=300),
    st.sampled_from([52_224, MIB, 5 * MIB, 10 * MIB]),
    st.integers(1, 500),
)
def test_no_request_ever_goes_over_what_put_records_takes(
    sizes: list[int], max_size: int, max_count: int
) -> None:
    collector = Collector(max_count, max_size, linger=0.02)
    requests = []
    for n in sizes:
        out = collector.add(kr(size=n), 0.0)
        if out is not None:
            requests.append(out)
        due = collector.poll(0.0) if collector.next_deadline() == 0.0 else None
        if due is not None:
            requests.append(due)
    last = collector.flush()
    if last is not None:
        requests.append(last)
    assert [r.size for q in requests for r in q.records] == sizes  # all of them, in order
    for request in requests:
        assert len(request.records) <= max_count
        assert request.size == sum(r.size for r in request.records) <= 10 * MIB
        if len(request.records) > 1:
            assert request.size <= max_size  # only a record alone goes over max_size


# -- aggregator --------------------------------------------------------------------------


def aggregator(**kw: object) -> Aggregator:
    options: dict[str, object] = {
        "enabled": True,
        "max_size": 51_200,
        "max_count": 4_294_967_295,
        "record_ttl": 30.0,
    }
    options.update(kw)
    return Aggregator(**options)  # type: ignore[arg-type]


def test_records_of_a_shard_share_an_aggregate_sealed_under_the_max_size() -> None:
    agg = aggregator()
    records = [ur(i) for i in range(2000)]
    for r in records:
        agg.add(r, "s0", 0.0, 0.1)
    sealed = agg.sealed
    assert len(sealed) >= 4
    for k in sealed:
        assert k.size <= 51_200
        assert len(k.data) + len(k.partition_key.encode()) == k.size
        assert k.shard_id == "s0"
        subs = decode_aggregate(k.data)
        assert subs is not None
        assert [s.data for s in subs] == [r.data for r in k.records]
        assert k.partition_key == k.records[0].partition_key
        assert k.explicit_hash_key == str(k.records[0].hash_key)  # routes by the first record
    agg.flush()
    assert sum(len(k.records) for k in agg.sealed) == 2000
    assert agg.next_deadline() is None


def test_aggregates_never_mix_shards() -> None:
    agg = aggregator()
    for i in range(10):
        agg.add(ur(i), f"s{i % 3}", 0.0, 0.1)
    agg.flush()
    assert sorted(len(k.records) for k in agg.sealed) == [3, 3, 4]
    assert all(len({r.index % 3 for r in k.records}) == 1 for k in agg.sealed)


def test_max_count_seals_the_aggregate() -> None:
    agg = aggregator(max_count=3)
    for i in range(7):
        agg.add(ur(i), "s0", 0.0, 0.1)
    assert [len(k.records) for k in agg.sealed] == [3, 3]
    assert agg.buffered == 1


def test_deadline_seals_an_aggregate_and_keeps_the_earliest_one() -> None:
    agg = aggregator()
    agg.add(ur(0), "s0", 0.0, 0.1)
    agg.add(ur(1), "s0", 0.05, 0.15)
    agg.add(ur(2), "s1", 0.05, 0.15)
    agg.add(ur(3), "s1", 0.06, 0.08)  # a retry: an earlier deadline wins
    assert agg.next_deadline() == pytest.approx(0.08)
    agg.poll(0.07)
    assert agg.sealed == []
    agg.poll(0.08)
    assert [k.shard_id for k in agg.sealed] == ["s1"]
    assert agg.next_deadline() == pytest.approx(0.1)
    agg.poll(0.1)
    assert [k.shard_id for k in agg.sealed] == ["s1", "s0"]
    assert agg.sealed[1].buffered_since == pytest.approx(0.025)


def test_expiration_is_the_oldest_records() -> None:
    agg = aggregator(record_ttl=10.0)
    agg.add(ur(0, arrival=5.0), "s0", 5.0, 6.0)
    agg.add(ur(1, arrival=1.0), "s0", 5.0, 6.0)
    agg.flush()
    assert agg.sealed[0].expiration == 11.0


def test_unpredicted_and_unaggregated_records_go_alone() -> None:
    agg = aggregator()
    agg.add(ur(0), None, 0.0, 0.1)
    off = aggregator(enabled=False)
    off.add(ur(1, ehk="12345"), "s0", 0.0, 0.1)
    (single,) = agg.sealed
    assert single.shard_id is None
    assert single.data == b"d" * 100
    assert single.explicit_hash_key is None
    assert single.partition_key == "key-0"
    assert single.size == 100 + len("key-0")
    (plain,) = off.sealed
    assert plain.shard_id == "s0"
    assert plain.explicit_hash_key == "12345"


def test_a_record_over_the_aggregate_size_is_sealed_alone_at_once_after_the_open_one() -> None:
    agg = aggregator(max_size=51_200)
    small = [ur(i, data=b"s" * 100) for i in range(3)]
    for r in small[:2]:
        agg.add(r, "s0", 0.0, 0.1)
    large = ur(9, data=b"L" * (3 * MIB))
    agg.add(large, "s0", 0.0, 0.1)
    # No waiting for the deadline, and the open aggregate went first (the shard's order).
    assert [k.records for k in agg.sealed] == [small[:2], [large]]
    assert agg.sealed[1].data is large.data  # raw, not copied, not framed
    agg.add(small[2], "s0", 0.0, 0.1)
    assert agg.buffered == 1  # small records aggregate again after it
    exact = ur(8, data=b"e" * (51_200 - len("key-8")))  # the limit exactly: alone in a builder
    agg.add(exact, "s1", 0.0, 0.1)
    assert agg.buffered == 2


def test_a_new_aggregate_size_applies_from_each_shards_next_aggregate() -> None:
    agg = aggregator(max_size=51_200)
    agg.add(ur(0), "s0", 0.0, 0.1)
    agg.max_size = 2 * MIB  # e.g. aggregation_max_size of 8 MiB on a stream that took 2 MiB
    big = ur(1, data=b"b" * (60 * 1024))
    agg.add(big, "s0", 0.0, 0.1)  # over the open aggregate's 51,200: seals it...
    agg.add(big, "s0", 0.0, 0.1)  # ...and the next one is 2 MiB
    agg.add(big, "s1", 0.0, 0.1)
    agg.add(big, "s1", 0.0, 0.1)
    agg.flush()
    assert [len(k.records) for k in agg.sealed] == [1, 2, 2]


def test_a_record_over_the_aggregate_size_goes_alone_and_raw() -> None:
    agg = aggregator(max_size=1000)
    agg.add(ur(0, data=b"s" * 10), "s0", 0.0, 0.1)
    agg.add(ur(1, data=b"b" * 5000), "s0", 0.0, 0.1)
    agg.add(ur(2, data=b"s" * 10), "s0", 0.0, 0.1)
    agg.flush()
    assert [len(k.records) for k in agg.sealed] == [1, 1, 1]
    assert agg.sealed[1].data == b"b" * 5000  # raw: no aggregate framing


def test_take_all_returns_buffered_records() -> None:
    agg = aggregator()
    for i in range(5):
        agg.add(ur(i), f"s{i}", 0.0, 0.1)
    assert sorted(r.index for r in agg.take_all()) == [0, 1, 2, 3, 4]
    assert agg.buffered == 0
    assert agg.next_deadline() is None


def test_seal_now_aggregates_records_apart_from_the_open_aggregate() -> None:
    agg = aggregator(max_size=400)
    agg.add(ur(0), "s0", 0.0, 1.0)  # the open aggregate keeps it
    retries = [ur(i, arrival=0.5) for i in range(1, 6)]
    sealed = agg.seal_now("s0", retries, 1.0, 1.05)
    assert [[r.index for r in k.records] for k in sealed] == [[1, 2, 3], [4, 5]]
    assert all(k.shard_id == "s0" and k.deadline == 1.05 for k in sealed)
    assert sealed[0].expiration == pytest.approx(30.5)
    assert agg.buffered == 1
    assert agg.sealed == []
    plain = agg.seal_now("s0", retries[:2], 1.0, 1.05, plain=True)
    assert [len(k.records) for k in plain] == [1, 1]
    assert plain[0].data == retries[0].data


def test_alone_sends_each_record_as_a_plain_kinesis_record() -> None:
    agg = aggregator()
    agg.alone([ur(1), ur(2)], "s0", 0.0, 0.5)
    assert [(k.data, k.partition_key, len(k.records)) for k in agg.sealed] == [
        (b"d" * 100, "key-1", 1),
        (b"d" * 100, "key-2", 1),
    ]
