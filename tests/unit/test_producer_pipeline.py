"""The sans-I/O Pipeline on its own, with the time as an argument: backoff after failed
requests and failed shards, expiry messages, invalid records bisected out, auth errors that stop
everything, aggregates waiting for the shard map, and preserve_order."""

from __future__ import annotations

from typing import Any

import pytest

from kinesis_core.aws.backoff import Backoff, BackoffTracker
from kinesis_core.producer.config import ProducerConfig
from kinesis_core.producer.items import PutBatch
from kinesis_core.producer.metrics import ProducerMetrics
from kinesis_core.producer.pipeline import Pipeline
from kinesis_core.producer.result import EXPIRED, WRONG_SHARD
from kinesis_core.producer.retrier import SendOutcome
from kinesis_core.shards.hashing import MAX_HASH_KEY
from tests.fakes.producer import RecordingSink

HALF = (MAX_HASH_KEY + 1) // 2
LOW, HIGH = "low", "high"
RANGES: dict[str, tuple[int, int]] = {LOW: (0, HALF - 1), HIGH: (HALF, MAX_HASH_KEY)}
IN_LOW = [str(i * 1000) for i in range(1, 200)]
"""Explicit hash keys of the low shard."""
IN_HIGH = [str(HALF + i * 1000) for i in range(1, 200)]


class Setup:
    """A pipeline over two shards, one sink, and a deterministic backoff (the full ceiling)."""

    def __init__(self, **config: Any) -> None:
        options: dict[str, Any] = {
            "record_max_buffered_time": 0.01,
            "rate_limit": 100_000,
            "retry_backoff_base": 0.1,
            "retry_backoff_max": 1.0,
        }
        options.update(config)
        self.ranges = dict(RANGES)
        self.pipeline = Pipeline(
            ProducerConfig(**options),
            predict=self.predict,
            hash_range=self.ranges.get,
            metrics=ProducerMetrics("s"),
        )
        self.pipeline.backoff = BackoffTracker(
            Backoff(
                self.pipeline.config.retry_backoff_base, self.pipeline.config.retry_backoff_max
            ),
            random=lambda: 1.0,
        )
        self.sink = RecordingSink()
        self.count = 0

    def predict(self, hash_key: int) -> str | None:
        return LOW if hash_key < HALF else HIGH

    def put(self, ehks: list[str], now: float) -> list[int]:
        """Admit records with these explicit hash keys; returns their indexes."""
        first = self.count
        records = [(b"r%d" % (first + i), f"k{first + i}", ehk) for i, ehk in enumerate(ehks)]
        self.count += len(records)
        pipeline = self.pipeline
        sub = pipeline.submission(records, now)
        pipeline.offer(sub)
        pipeline.admit(now)
        # A submission numbers its records by their position in its list; they report to the
        # one RecordingSink here, which also counts a second outcome for a record.
        pipeline.sinks[sub.sink.key] = _Offset(self.sink, first)
        return list(range(first, first + len(records)))

    def ready_now(self, now: float) -> None:
        self.pipeline.flush()  # nothing lingers while a flush waits
        self.pipeline.poll(now)

    def take(self, now: float, sending: int = 0) -> PutBatch | None:
        return self.pipeline.next_batch(now, sending)

    def indexes(self, batch: PutBatch) -> list[int]:
        return [self._index(ur) for kr in batch.records for ur in kr.records]

    def _index(self, ur: Any) -> int:
        sink = self.pipeline.sinks[ur.sink]
        assert isinstance(sink, _Offset)
        return sink.offset + ur.index


class _Offset:
    """Reports indexes shifted by ``offset`` to one RecordingSink (several admits, one sink)."""

    def __init__(self, sink: RecordingSink, offset: int) -> None:
        self.sink = sink
        self.offset = offset

    def succeeded(self, index: int, *args: Any) -> None:
        self.sink.succeeded(index + self.offset, *args)

    def succeeded_run(self, indexes: list[int], *args: Any) -> None:
        self.sink.succeeded_run([i + self.offset for i in indexes], *args)

    def failed(self, index: int, *args: Any) -> None:
        self.sink.failed(index + self.offset, *args)


def answered(batch: PutBatch, start: float, end: float, **by_shard: str) -> SendOutcome:
    """Every record written where predicted, except shards mapped to an error code."""
    entries: list[dict[str, Any]] = []
    for i, kr in enumerate(batch.records):
        code = by_shard.get(kr.shard_id or "")
        if code:
            entries.append({"ErrorCode": code, "ErrorMessage": f"{code} here"})
        else:
            entries.append({"SequenceNumber": str(100 + i), "ShardId": kr.shard_id})
    return SendOutcome(start, end, records=entries)


def failed(start: float, end: float, code: str, status: int | None = None) -> SendOutcome:
    return SendOutcome(start, end, error=(code, f"{code} said no"), status=status)


# -- request-level failures: the endpoint backs off, then probes one request at a time ---------


def test_after_a_failed_request_requests_wait_then_go_one_at_a_time() -> None:
    s = Setup()
    s.put(IN_LOW[:3], 0.0)
    s.ready_now(0.0)
    first = s.take(0.0)
    assert first is not None
    s.pipeline.on_outcome(first, failed(0.0, 0.01, "Internal"), 0.01)  # ceiling 0.1 s
    s.ready_now(0.02)
    assert s.pipeline.ready
    assert s.take(0.02) is None  # backing off
    assert s.pipeline.next_deadline(0.02) == pytest.approx(0.11)
    probe = s.take(0.11)
    assert probe is not None
    s.put(IN_HIGH[:2], 0.12)
    s.ready_now(0.12)
    assert s.take(0.12, sending=1) is None  # one probe at a time
    s.pipeline.on_outcome(probe, answered(probe, 0.11, 0.13), 0.13)
    assert s.take(0.13, sending=1) is not None  # the endpoint answered: full speed again
    assert sorted(s.sink.ok) == [0, 1, 2]


def test_consecutive_failed_requests_double_the_wait_up_to_the_cap() -> None:
    s = Setup()
    s.put(IN_LOW[:1], 0.0)
    now = 0.0
    waits = []
    for _ in range(6):
        s.ready_now(now)
        batch = s.take(now)
        assert batch is not None
        s.pipeline.on_outcome(batch, failed(now, now, "ServiceUnavailable", 503), now)
        s.ready_now(now)
        gate = s.pipeline.next_deadline(now)
        assert gate is not None
        waits.append(round(gate - now, 6))
        now = gate
    assert waits == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]


def test_requests_in_flight_when_the_endpoint_died_count_as_one_failure() -> None:
    s = Setup(collection_max_count=1, aggregation_enabled=False)
    s.put([IN_LOW[0], IN_HIGH[0], IN_LOW[1]], 0.0)
    s.ready_now(0.0)
    batches = [s.take(0.0, i) for i in range(3)]
    for batch in batches:
        assert batch is not None
        s.pipeline.on_outcome(batch, failed(0.0, 0.5, "Internal"), 0.5)
    assert s.pipeline.backoff.failures("requests") == 1


# -- per-record failures: only that shard backs off --------------------------------------------


def test_a_shard_whose_records_failed_is_held_while_the_other_goes_on() -> None:
    s = Setup()
    s.put([IN_LOW[0], IN_HIGH[0]], 0.0)
    s.ready_now(0.0)
    batch = s.take(0.0)
    assert batch is not None
    s.pipeline.on_outcome(batch, answered(batch, 0.0, 0.01, low="InternalFailure"), 0.01)
    assert sorted(s.sink.ok) == [1]
    s.put([IN_HIGH[1]], 0.02)
    s.ready_now(0.02)
    batch = s.take(0.02)
    assert batch is not None
    assert s.indexes(batch) == [2]  # the low shard's retry waits out its backoff
    assert s.pipeline.limiter.held(LOW, 0.05)
    s.ready_now(0.11)  # 0.01 + 0.1
    batch = s.take(0.11)
    assert batch is not None
    assert s.indexes(batch) == [0]


def test_throttling_slows_the_shard_down_without_backing_off_the_endpoint() -> None:
    s = Setup()
    s.put([IN_LOW[0]], 0.0)
    s.ready_now(0.0)
    batch = s.take(0.0)
    assert batch is not None
    s.pipeline.on_outcome(
        batch, answered(batch, 0.0, 0.01, low="ProvisionedThroughputExceededException"), 0.01
    )
    assert s.pipeline.limiter.multiplier(LOW) == 0.5
    assert not s.pipeline.limiter.held(LOW, 0.01)
    assert s.pipeline.backoff.failures("requests") == 0


# -- what an expired record says it was waiting for --------------------------------------------


def expire_all(s: Setup, now: float) -> dict[int, tuple[str, str]]:
    s.pipeline.poll(now)
    return {i: (code, message) for i, (code, message, _) in s.sink.bad.items()}


def test_expired_while_the_endpoint_backs_off_names_the_backoff_and_the_last_error() -> None:
    s = Setup(record_ttl=1.0, retry_backoff_max=10.0, retry_backoff_base=5.0)
    s.put(IN_LOW[:1], 0.0)
    s.ready_now(0.0)
    batch = s.take(0.0)
    assert batch is not None
    s.pipeline.on_outcome(batch, failed(0.0, 0.1, "Internal"), 0.1)
    s.ready_now(0.2)
    assert s.take(0.2) is None
    (code, message), *_ = expire_all(s, 1.0).values()
    assert code == EXPIRED
    assert "waiting for a retry backoff after failed requests" in message
    assert "last error: Internal: Internal said no" in message


def test_expired_waiting_for_a_free_connection_says_so_and_that_it_was_never_sent() -> None:
    s = Setup(record_ttl=1.0)
    s.put(IN_LOW[:1], 0.0)
    s.ready_now(0.0)  # ready, but the driver never had a free connection to take it
    assert s.pipeline.next_deadline(0.0) == pytest.approx(1.0)
    (code, message), *_ = expire_all(s, 1.0).values()
    assert code == EXPIRED
    assert "waiting for a free connection" in message
    assert "it was never sent" in message


def test_expired_in_a_held_shard_names_its_backoff() -> None:
    s = Setup(record_ttl=1.0, retry_backoff_base=5.0, retry_backoff_max=5.0)
    s.put(IN_LOW[:1], 0.0)
    s.ready_now(0.0)
    batch = s.take(0.0)
    assert batch is not None
    s.pipeline.on_outcome(batch, answered(batch, 0.0, 0.1, low="InternalFailure"), 0.1)
    s.ready_now(0.2)
    (code, message), *_ = expire_all(s, 1.0).values()
    assert code == EXPIRED
    assert "waiting for a retry backoff of shard low" in message
    assert "last error: InternalFailure: InternalFailure here" in message


def test_expired_in_the_limiter_names_the_rate_limit() -> None:
    s = Setup(record_ttl=1.0, rate_limit=1, aggregation_enabled=False)  # 10 records/s
    s.put(IN_LOW[:30], 0.0)
    s.ready_now(0.0)
    sent = s.take(0.0)
    assert sent is not None
    assert s.indexes(sent) == list(range(10))  # the bucket's 10 went at once
    expired = expire_all(s, 1.0)
    assert sorted(expired) == list(range(10, 30))
    assert {m for _, m in expired.values()} == {
        "record TTL of 1 s ran out while waiting for the rate limiter of shard low "
        "(rate_limit 1 %); it was never sent"
    }


def test_a_record_retried_while_the_stream_is_created_says_it_waited_for_the_stream() -> None:
    s = Setup(record_ttl=1.0)
    s.put(IN_LOW[:1], 0.0)
    s.ready_now(0.0)
    batch = s.take(0.0)
    assert batch is not None
    s.pipeline.on_outcome(batch, failed(0.0, 1.0, "ResourceInUseException", 400), 1.0)
    ((code, message, _),) = s.sink.bad.values()
    assert code == EXPIRED
    assert "waiting for the stream to become ACTIVE" in message
    assert "ResourceInUseException" in message


def test_a_record_waiting_out_the_backoff_after_the_stream_was_busy_says_so() -> None:
    s = Setup(record_ttl=1.0, retry_backoff_base=5.0, retry_backoff_max=5.0)
    s.put(IN_LOW[:1], 0.0)
    s.ready_now(0.0)
    batch = s.take(0.0)
    assert batch is not None
    s.pipeline.on_outcome(batch, failed(0.0, 0.1, "ResourceInUseException", 400), 0.1)
    s.ready_now(0.2)
    assert s.take(0.2) is None  # the requests back off
    ((code, message),) = expire_all(s, 1.0).values()
    assert code == EXPIRED
    assert "waiting for the stream to become ACTIVE" in message
    assert "last error: ResourceInUseException" in message


# -- a record the service refuses is found by halving its request -------------------------------


def test_an_invalid_request_is_halved_until_the_refused_record_fails_alone() -> None:
    s = Setup(aggregation_enabled=False)
    s.put(IN_LOW[:4] + IN_HIGH[:4] + IN_LOW[4:7], 0.0)
    bad = 5
    s.ready_now(0.0)
    now = 0.0
    requests = 0
    while True:
        batch = s.take(now)
        if batch is None:
            break
        requests += 1
        if bad in s.indexes(batch):
            outcome = failed(now, now + 0.01, "InvalidArgumentException", 400)
        else:
            outcome = answered(batch, now, now + 0.01)
        now += 0.01
        s.pipeline.on_outcome(batch, outcome, now)
    assert sorted(s.sink.ok) == [i for i in range(11) if i != bad]
    ((code, message, attempts),) = s.sink.bad.values()
    assert (code, message) == ("InvalidArgumentException", "InvalidArgumentException said no")
    assert len(attempts) == 4  # 11 -> 5/6 -> 2/3 -> 1/2 -> 1: one attempt per halving
    assert requests <= 2 * 4 + 1
    assert now < 1.0  # at once, not after the TTL
    assert s.pipeline.outstanding_records == 0


def test_an_aggregate_refused_on_its_own_is_taken_apart() -> None:
    s = Setup()
    s.put(IN_LOW[:5], 0.0)
    bad = 2
    s.ready_now(0.0)
    now = 0.0
    while (batch := s.take(now)) is not None or s.pipeline.aggregator.buffered:
        if batch is None:
            s.ready_now(now)
            continue
        refused = bad in s.indexes(batch)
        now += 0.01
        s.pipeline.on_outcome(
            batch,
            failed(now, now, "InvalidArgumentException", 400)
            if refused
            else answered(batch, now, now),
            now,
        )
        s.ready_now(now)
    assert sorted(s.sink.ok) == [0, 1, 3, 4]
    assert list(s.sink.bad) == [bad]


def test_a_record_refused_in_a_successful_response_fails_alone_and_is_never_retried() -> None:
    s = Setup(aggregation_enabled=False)
    s.put([IN_LOW[0], IN_HIGH[0]], 0.0)
    s.ready_now(0.0)
    batch = s.take(0.0)
    assert batch is not None
    s.pipeline.on_outcome(batch, answered(batch, 0.0, 0.01, low="KMSDisabledException"), 0.01)
    assert list(s.sink.bad) == [0]
    assert s.sink.bad[0][0] == "KMSDisabledException"
    assert list(s.sink.ok) == [1]
    assert s.pipeline.outstanding_records == 0


# -- auth errors stop the producer at once -----------------------------------------------------


@pytest.mark.parametrize(
    ("code", "status"),
    [("AccessDeniedException", 400), ("UnrecognizedClientException", 400), ("403", 403)],
)
def test_an_auth_error_fails_every_record_held_at_once(code: str, status: int) -> None:
    s = Setup(collection_max_count=1)
    s.put([IN_LOW[0], IN_HIGH[0]], 0.0)
    s.ready_now(0.0)
    first, second = s.take(0.0), s.take(0.0, 1)
    assert first is not None
    assert second is not None
    s.put([IN_LOW[1]], 0.01)  # still in the aggregator
    s.pipeline.on_outcome(first, failed(0.0, 0.02, code, status), 0.02)
    assert s.pipeline.failure == (code, f"{code} said no")
    assert sorted(s.sink.bad) == [0, 1, 2]
    assert {c for c, _, _ in s.sink.bad.values()} == {code}
    assert s.pipeline.outstanding_records == 0
    s.pipeline.on_outcome(second, answered(second, 0.0, 0.03), 0.03)  # late: ignored
    assert not s.sink.ok
    assert s.sink.duplicates == 0


# -- the stream's KMS key unusable: the request fails, no split, no retry, no stop -----------


@pytest.mark.parametrize(
    "code",
    [
        "KMSDisabledException",
        "KMSInvalidStateException",
        "KMSNotFoundException",
        "KMSOptInRequired",
    ],
)
def test_a_kms_key_error_fails_the_whole_request_without_splitting_it(code: str) -> None:
    s = Setup()
    s.put([*IN_LOW[:3], *IN_HIGH[:2]], 0.0)  # two aggregates, one request
    s.ready_now(0.0)
    batch = s.take(0.0)
    assert batch is not None
    assert len(batch.records) == 2
    s.pipeline.on_outcome(batch, failed(0.0, 0.01, code, 400), 0.01)
    assert sorted(s.sink.bad) == [0, 1, 2, 3, 4]
    assert {c for c, _, _ in s.sink.bad.values()} == {code}
    assert all(len(attempts) == 1 for _, _, attempts in s.sink.bad.values())
    assert not s.pipeline.ready  # no halves sent again, no records taken apart
    assert s.pipeline.outstanding_records == 0
    assert s.pipeline.failure is None  # the producer goes on: a key fixed lets records through
    s.put(IN_LOW[3:4], 0.02)
    s.ready_now(0.02)
    later = s.take(0.02)
    assert later is not None
    s.pipeline.on_outcome(later, answered(later, 0.02, 0.03), 0.03)
    assert list(s.sink.ok) == [5]


def test_kms_throttling_is_retried() -> None:
    s = Setup()
    s.put(IN_LOW[:2], 0.0)
    s.ready_now(0.0)
    batch = s.take(0.0)
    assert batch is not None
    s.pipeline.on_outcome(batch, failed(0.0, 0.01, "KMSThrottlingException", 400), 0.01)
    assert not s.sink.bad
    assert s.pipeline.outstanding_records == 2
    assert s.pipeline.limiter.multiplier(LOW) == 0.5


# -- an aggregate written to a shard the map does not know waits for it ------------------------


def test_a_landing_on_an_unknown_shard_waits_then_counts_as_written_when_in_range() -> None:
    s = Setup()
    s.put(IN_LOW[:3], 0.0)
    s.ready_now(0.0)
    batch = s.take(0.0)
    assert batch is not None
    entries = [{"SequenceNumber": "9", "ShardId": "child"}]
    invalidations = s.pipeline.on_outcome(batch, SendOutcome(0.0, 0.01, records=entries), 0.01)
    assert invalidations == [(0.0, LOW)]
    assert not s.sink.ok
    assert s.pipeline.outstanding_records == 3  # neither finished nor retried
    assert s.pipeline.resolve_landings(0.02) == {"child"}
    s.ranges["child"] = (0, HALF - 1)
    assert s.pipeline.resolve_landings(0.03) == set()
    assert {i: v[:3] for i, v in s.sink.ok.items()} == {
        0: ("child", "9", 0),
        1: ("child", "9", 1),
        2: ("child", "9", 2),
    }
    assert s.pipeline.outstanding_records == 0


def test_a_landing_out_of_range_is_retried_whole() -> None:
    s = Setup()
    s.put([IN_LOW[0], IN_LOW[150]], 0.0)
    s.ready_now(0.0)
    batch = s.take(0.0)
    assert batch is not None
    entries = [{"SequenceNumber": "9", "ShardId": "child"}]
    s.pipeline.on_outcome(batch, SendOutcome(0.0, 0.01, records=entries), 0.01)
    s.ranges["child"] = (0, int(IN_LOW[100]))  # holds the first record only
    s.pipeline.resolve_landings(0.02)
    s.ready_now(0.03)
    retried = s.take(0.03)
    assert retried is not None
    assert s.indexes(retried) == [0, 1]
    last = retried.records[0].records[0].attempts[-1]
    assert (last.error_code, last.shard_id) == (WRONG_SHARD, "child")


def test_a_landing_whose_range_stays_unknown_is_given_up_only_if_sent_before_the_listing() -> None:
    s = Setup()
    s.put(IN_LOW[:2], 0.0)
    s.ready_now(0.0)
    batch = s.take(0.0)
    assert batch is not None
    entries = [{"SequenceNumber": "9", "ShardId": "ghost"}]
    s.pipeline.on_outcome(batch, SendOutcome(1.0, 1.01, records=entries), 1.01)
    assert s.pipeline.resolve_landings(1.1, final="gone", sent_before=0.5) == {"ghost"}
    assert s.pipeline.resolve_landings(1.2, final="gone", sent_before=1.1) == set()
    s.ready_now(1.3)
    retried = s.take(1.3)
    assert retried is not None
    assert s.indexes(retried) == [0, 1]
    last = retried.records[0].records[0].attempts[-1]
    assert last.error_code == WRONG_SHARD
    assert "gone" in (last.error_message or "")


def test_a_landing_expires_saying_it_waited_for_the_shard_map() -> None:
    s = Setup(record_ttl=1.0)
    s.put(IN_LOW[:2], 0.0)
    s.ready_now(0.0)
    batch = s.take(0.0)
    assert batch is not None
    entries = [{"SequenceNumber": "9", "ShardId": "child"}]
    s.pipeline.on_outcome(batch, SendOutcome(0.0, 0.01, records=entries), 0.01)
    assert s.pipeline.next_deadline(0.01) == pytest.approx(1.0)
    s.pipeline.poll(1.0)
    code, message, _ = s.sink.bad[0]
    assert code == EXPIRED
    assert "the shard map to learn the hash key range of child" in message
    assert not s.pipeline.landings
    assert s.pipeline.outstanding_records == 0


# -- preserve_order: one record per shard in flight, retries first ------------------------------


def test_preserve_order_keeps_one_record_per_shard_in_flight() -> None:
    s = Setup(preserve_order=True, aggregation_enabled=False)
    s.put(IN_LOW[:3] + IN_HIGH[:2], 0.0)
    s.ready_now(0.0)
    batch = s.take(0.0)
    assert batch is not None
    assert sorted(s.indexes(batch)) == [0, 3]  # the first of each shard
    s.ready_now(0.01)
    assert s.take(0.01, 1) is None  # nothing else until their outcome is known
    s.pipeline.on_outcome(batch, answered(batch, 0.0, 0.02), 0.02)
    s.ready_now(0.02)
    batch = s.take(0.02)
    assert batch is not None
    assert sorted(s.indexes(batch)) == [1, 4]


def test_preserve_order_sends_a_retried_record_before_later_ones_of_its_shard() -> None:
    s = Setup(preserve_order=True, aggregation_enabled=False, retry_backoff_base=0.001)
    s.put(IN_LOW[:4], 0.0)
    order: list[int] = []
    now = 0.0
    failures = {0: 2, 2: 1}  # record 0 fails twice, record 2 once
    while len(s.sink.ok) < 4:
        s.ready_now(now)
        batch = s.take(now)
        if batch is None:
            now += 0.01
            continue
        (index,) = s.indexes(batch)
        if failures.get(index):
            failures[index] -= 1
            outcome = answered(batch, now, now + 0.001, low="InternalFailure")
        else:
            order.append(index)
            outcome = answered(batch, now, now + 0.001)
        now += 0.002
        s.pipeline.on_outcome(batch, outcome, now)
    assert order == [0, 1, 2, 3]


def test_preserve_order_retries_an_aggregate_ahead_of_records_put_after_it() -> None:
    s = Setup(preserve_order=True, retry_backoff_base=0.001)
    s.put(IN_LOW[:3], 0.0)
    s.ready_now(0.0)
    first = s.take(0.0)
    assert first is not None
    s.put(IN_LOW[3:6], 0.001)  # buffered behind the aggregate in flight
    s.ready_now(0.002)
    assert s.take(0.002, 1) is None
    s.pipeline.on_outcome(
        first, answered(first, 0.0, 0.003, low="ProvisionedThroughputExceededException"), 0.003
    )
    seen = []
    now = 0.01
    while len(seen) < 6:
        s.ready_now(now)
        batch = s.take(now)
        if batch is None:
            now += 0.05
            continue
        seen.extend(s.indexes(batch))
        s.pipeline.on_outcome(batch, answered(batch, now, now + 0.001), now + 0.001)
    assert seen == [0, 1, 2, 3, 4, 5]
