"""The Retrier: every row of seed 003's classification table, attempt histories, the sender's
error mapping and RecordCountMismatch."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from botocore.exceptions import ClientError

from kinesis_core.producer.config import record_cost
from kinesis_core.producer.items import KinesisRecordOut, PutBatch, UserRecord
from kinesis_core.producer.metrics import ProducerMetrics
from kinesis_core.producer.result import (
    EXPIRED,
    INTERNAL,
    RECORD_COUNT_MISMATCH,
    THROTTLED,
    WRONG_SHARD,
    Attempt,
    BatchResult,
    BatchSink,
    RecordSink,
)
from kinesis_core.producer.retrier import Retrier, RetryDecisions, SendOutcome
from kinesis_core.producer.sender import error_of, send_batch
from tests.fakes.kinesis import client_error
from tests.fakes.producer import RecordingSink

LOW = (0, 99)
HIGH = (100, 199)
RANGES = {"low": LOW, "high": HIGH, "parent": (0, 199), "child": (0, 99)}


SINKS: dict[int, RecordSink] = {}
"""The registry records refer to their sinks through (the pipeline keeps one like it)."""


def make(*, fail_if_throttled: bool = False, ttl: float = 30.0) -> tuple[Retrier, ProducerMetrics]:
    metrics = ProducerMetrics("s")
    retrier = Retrier(
        sinks=SINKS,
        hash_range=RANGES.get,
        metrics=metrics,
        record_ttl=ttl,
        retry_delay=0.05,
        fail_if_throttled=fail_if_throttled,
    )
    return retrier, metrics


def aggregate(
    sink: RecordingSink, hashes: list[int], shard: str | None, first: int = 0
) -> KinesisRecordOut:
    key = len(SINKS)
    SINKS[key] = sink
    records = [
        UserRecord(h, b"data", f"pk{first + i}", None, key, first + i, (), 10.0)
        for i, h in enumerate(hashes)
    ]
    return KinesisRecordOut(
        b"agg", "pk", None, records, shard, 10, 10.1, 40.0, 10.0, *counts(records)
    )


def counts(records: list[UserRecord]) -> tuple[int, int]:
    """What the aggregator counts for an aggregate's records: data bytes, and data bytes plus
    partition key code points."""
    data = sum(len(ur.data) for ur in records)
    return data, data + sum(len(ur.partition_key) for ur in records)


def batch(*krs: KinesisRecordOut) -> PutBatch:
    return PutBatch(list(krs), sum(k.size for k in krs))


def ok(shard: str, seq: int) -> dict[str, Any]:
    return {"SequenceNumber": str(seq), "ShardId": shard}


def err(code: str, message: str = "m") -> dict[str, Any]:
    return {"ErrorCode": code, "ErrorMessage": message}


def outcome(records: list[dict[str, Any]] | None = None, error: tuple[str, str] | None = None):
    return SendOutcome(started_at=11.0, ended_at=11.5, records=records, error=error)


NOW = 12.0


# -- request-level failures ----------------------------------------------------------------


def test_request_throttled_with_fail_if_throttled_fails_every_record() -> None:
    retrier, metrics = make(fail_if_throttled=True)
    sink = RecordingSink()
    b = batch(aggregate(sink, [1, 2], "low"), aggregate(sink, [150], "high", first=2))
    decisions = retrier.handle(b, outcome(error=(THROTTLED, "slow down")), NOW)
    assert decisions.retries == []
    assert sorted(sink.bad) == [0, 1, 2]
    code, message, attempts = sink.bad[0]
    assert (code, message) == (THROTTLED, "slow down")
    assert attempts == (Attempt(11.0, 11.5, False, THROTTLED, "slow down"),)
    assert decisions.throttled == {"low", "high"}
    assert retrier.released_records == 3
    assert metrics.errors_by_code == {THROTTLED: 2}


@pytest.mark.parametrize(
    ("code", "fail_if_throttled"),
    [("InternalFailure", True), ("ServiceUnavailable", False), (THROTTLED, False)],
)
def test_other_request_failures_retry_every_record(code: str, fail_if_throttled: bool) -> None:
    retrier, _ = make(fail_if_throttled=fail_if_throttled)
    sink = RecordingSink()
    b = batch(aggregate(sink, [1, 2], "low"), aggregate(sink, [150], "high", first=2))
    decisions = retrier.handle(b, outcome(error=(code, "oops")), NOW)
    assert not sink.ok
    assert not sink.bad
    assert sorted(r.index for r in decisions.retries) == [0, 1, 2]
    assert all(r.attempts == (Attempt(11.0, 11.5, False, code, "oops"),) for r in decisions.retries)
    assert decisions.retry_deadline == pytest.approx(NOW + 0.05)
    assert retrier.released_records == 0
    assert decisions.throttled == ({"low", "high"} if code == THROTTLED else set())


def test_record_count_mismatch_is_a_request_failure_and_retries() -> None:
    retrier, metrics = make()
    sink = RecordingSink()
    b = batch(aggregate(sink, [1], "low"), aggregate(sink, [150], "high", first=1))
    decisions = retrier.handle(b, outcome(records=[ok("low", 1)]), NOW)
    assert [r.attempts[-1].error_code for r in decisions.retries] == [RECORD_COUNT_MISMATCH] * 2
    assert "sent 2 records, the response has 1" in (
        decisions.retries[0].attempts[-1].error_message or ""
    )
    assert metrics.errors_by_code == {RECORD_COUNT_MISMATCH: 2}


# -- per-record outcomes -------------------------------------------------------------------


def test_success_where_predicted_finishes_with_shard_sequence_and_sub_sequence() -> None:
    retrier, metrics = make()
    sink = RecordingSink()
    b = batch(aggregate(sink, [1, 2, 3], "low"), aggregate(sink, [150], None, first=3))
    decisions = retrier.handle(b, outcome(records=[ok("low", 7), ok("high", 8)]), NOW)
    assert decisions.retries == []
    assert decisions.invalidations == []
    assert {i: v[:3] for i, v in sink.ok.items()} == {
        0: ("low", "7", 0),
        1: ("low", "7", 1),
        2: ("low", "7", 2),
        3: ("high", "8", 0),  # nothing predicted: any shard is right
    }
    assert sink.ok[0][3] == (Attempt(11.0, 11.5, True, shard_id="low"),)
    assert metrics.user_records_put == 4
    assert metrics.kinesis_records_put == 2
    assert metrics.user_records_put_by_shard == {"low": 3, "high": 1}
    assert retrier.released_records == 4


def test_success_in_a_child_whose_range_holds_every_record_finishes_and_invalidates() -> None:
    retrier, _ = make()
    sink = RecordingSink()
    b = batch(aggregate(sink, [1, 50, 99], "parent"))
    decisions = retrier.handle(b, outcome(records=[ok("child", 3)]), NOW)
    assert sorted(sink.ok) == [0, 1, 2]
    assert decisions.retries == []
    assert decisions.invalidations == [(11.0, "parent")]


def test_wrong_shard_retries_every_record_of_the_aggregate_and_invalidates_once() -> None:
    retrier, metrics = make()
    sink = RecordingSink()
    # 5 and 60 are inside "child" (0..99), 150 is not: the KCL would drop the whole aggregate.
    b = batch(aggregate(sink, [5, 60, 150], "parent"))
    decisions = retrier.handle(b, outcome(records=[ok("child", 3)]), NOW)
    assert not sink.ok
    assert not sink.bad
    assert sorted(r.index for r in decisions.retries) == [0, 1, 2]
    attempt = decisions.retries[0].attempts[-1]
    assert attempt.error_code == WRONG_SHARD
    assert attempt.shard_id == "child"
    assert decisions.invalidations == [(11.0, "parent")]
    assert metrics.errors_by_code == {WRONG_SHARD: 1}


def test_a_plain_record_on_an_unexpected_shard_is_written_never_put_again() -> None:
    """Kinesis put it where its own hash key belongs: right by definition, known range or not."""
    retrier, metrics = make()
    sink = RecordingSink()
    decisions = retrier.handle(
        batch(aggregate(sink, [5], "low")), outcome(records=[ok("brand-new", 1)]), NOW
    )
    assert decisions.retries == []
    assert decisions.landings == []
    assert sink.ok[0][:3] == ("brand-new", "1", 0)
    assert decisions.invalidations == [(11.0, "low")]
    assert WRONG_SHARD not in metrics.errors_by_code


def test_an_aggregate_on_a_shard_of_unknown_range_waits_for_the_map_then_is_decided() -> None:
    retrier, _ = make()
    sink = RecordingSink()
    decisions = retrier.handle(
        batch(aggregate(sink, [5, 60], "parent")), outcome(records=[ok("brand-new", 4)]), NOW
    )
    assert decisions.retries == []
    assert not sink.ok
    assert not sink.bad
    assert decisions.invalidations == [(11.0, "parent")]
    (landing,) = decisions.landings
    assert (landing.shard_id, landing.sequence_number) == ("brand-new", "4")
    later = RetryDecisions(retry_deadline=NOW)
    assert not retrier.resolve(landing, NOW, later)  # still unknown: nothing done
    RANGES["brand-new"] = (0, 99)  # the refreshed map knows it now: both records in range
    try:
        assert retrier.resolve(landing, NOW, later)
    finally:
        del RANGES["brand-new"]
    assert later.retries == []
    assert {i: v[:3] for i, v in sink.ok.items()} == {
        0: ("brand-new", "4", 0),
        1: ("brand-new", "4", 1),
    }


def test_an_aggregate_whose_landing_range_cannot_be_learned_is_put_again() -> None:
    retrier, metrics = make()
    sink = RecordingSink()
    decisions = retrier.handle(
        batch(aggregate(sink, [5, 60], "parent")), outcome(records=[ok("gone", 4)]), NOW
    )
    later = RetryDecisions(retry_deadline=NOW)
    retrier.give_up(decisions.landings[0], NOW, later, "not in a full listing")
    assert sorted(r.index for r in later.retries) == [0, 1]
    attempt = later.retries[0].attempts[-1]
    assert attempt.error_code == WRONG_SHARD
    assert "not in a full listing" in (attempt.error_message or "")
    assert metrics.errors_by_code == {WRONG_SHARD: 1}


def test_record_throttled_with_fail_if_throttled_fails() -> None:
    retrier, _ = make(fail_if_throttled=True)
    sink = RecordingSink()
    b = batch(aggregate(sink, [1, 2], "low"), aggregate(sink, [150], "high", first=2))
    decisions = retrier.handle(b, outcome(records=[err(THROTTLED, "rate"), ok("high", 4)]), NOW)
    assert sorted(sink.bad) == [0, 1]
    assert sorted(sink.ok) == [2]
    assert sink.bad[0][:2] == (THROTTLED, "rate")
    assert decisions.retries == []
    assert decisions.throttled == {"low"}


@pytest.mark.parametrize("fail_if_throttled", [True, False])
def test_other_record_failures_retry(fail_if_throttled: bool) -> None:
    retrier, metrics = make(fail_if_throttled=fail_if_throttled)
    sink = RecordingSink()
    b = batch(aggregate(sink, [1, 2], "low"), aggregate(sink, [150], "high", first=2))
    decisions = retrier.handle(
        b, outcome(records=[err("InternalFailure", "boom"), ok("high", 4)]), NOW
    )
    assert sorted(r.index for r in decisions.retries) == [0, 1]
    assert sorted(sink.ok) == [2]
    assert metrics.errors_by_code == {"InternalFailure": 1}


def test_record_throttled_without_fail_if_throttled_retries_and_slows_the_shard() -> None:
    retrier, _ = make()
    sink = RecordingSink()
    decisions = retrier.handle(
        batch(aggregate(sink, [1], "low")), outcome(records=[err(THROTTLED)]), NOW
    )
    assert len(decisions.retries) == 1
    assert decisions.throttled == {"low"}


# -- expiry and history --------------------------------------------------------------------


def test_a_retry_past_the_ttl_fails_with_a_second_expired_attempt() -> None:
    retrier, metrics = make(ttl=1.0)  # the records arrived at 10.0; now is 12.0
    sink = RecordingSink()
    decisions = retrier.handle(
        batch(aggregate(sink, [1, 2], "low")), outcome(records=[err("InternalFailure", "x")]), NOW
    )
    assert decisions.retries == []
    code, message, attempts = sink.bad[0]
    assert code == EXPIRED
    assert "InternalFailure: x" in message
    assert [a.error_code for a in attempts] == ["InternalFailure", EXPIRED]
    assert metrics.user_record_expired == 2
    assert metrics.user_records_failed == 2


def test_attempt_history_carries_over_to_the_final_result() -> None:
    retrier, metrics = make()
    sink = RecordingSink()
    kr = aggregate(sink, [1], "low")
    first = retrier.handle(batch(kr), outcome(records=[err("InternalFailure")]), NOW)
    retried = KinesisRecordOut(
        b"x", "pk", None, first.retries, "low", 10, 13.0, 40.0, 12.0, *counts(first.retries)
    )
    second = SendOutcome(12.5, 12.6, records=[ok("low", 9)])
    retrier.handle(batch(retried), second, 13.0)
    attempts = sink.ok[0][3]
    assert [a.success for a in attempts] == [False, True]
    assert attempts[0].error_code == "InternalFailure"
    assert metrics.retries_per_record.max == 1


def test_fail_records_and_expire_release_the_budget() -> None:
    retrier, _ = make()
    sink = RecordingSink()
    kr = aggregate(sink, [1, 2], "low")
    retrier.expire(kr, NOW, "Expiration reached while waiting in limiter")
    assert [sink.bad[i][0] for i in (0, 1)] == [EXPIRED, EXPIRED]
    assert retrier.released_records == 2
    assert retrier.released_bytes == record_cost(b"data", "pk0") + record_cost(b"data", "pk1")


def test_an_aggregate_of_several_callers_and_retries_numbers_sub_records_in_order() -> None:
    # One Kinesis record holding runs of two callers' records (the per-run fast path), then
    # one also holding a retried record (the per-record path): same results, same accounting.
    retrier, metrics = make()
    a, b = RecordingSink(), RecordingSink()
    first, second = aggregate(a, [1, 2], "low"), aggregate(b, [3, 4], "low")
    third = aggregate(a, [5], "low", first=2)
    together = first.records + second.records + third.records
    mixed = KinesisRecordOut(
        b"agg", "pk", None, together, "low", 10, 10.1, 40.0, 10.0, *counts(together)
    )
    retrier.handle(batch(mixed), outcome(records=[ok("low", 7)]), NOW)
    assert {i: v[:3] for i, v in a.ok.items()} == {
        0: ("low", "7", 0),
        1: ("low", "7", 1),
        2: ("low", "7", 4),
    }
    assert {i: v[:3] for i, v in b.ok.items()} == {0: ("low", "7", 2), 1: ("low", "7", 3)}
    costs = sum(record_cost(ur.data, ur.partition_key) for ur in mixed.records)
    assert (retrier.released_records, retrier.released_bytes) == (5, costs)
    assert (metrics.user_records_put, metrics.user_records_data_put) == (5, 20)

    c = RecordingSink()
    fresh = aggregate(c, [1], "low")
    failed = retrier.handle(
        batch(aggregate(c, [2], "low", first=1)), outcome(records=[err("X")]), NOW
    )
    joined = fresh.records + failed.retries
    both = KinesisRecordOut(
        b"agg", "pk", None, joined, "low", 10, 13.0, 40.0, 12.0, *counts(joined)
    )
    retrier.handle(batch(both), SendOutcome(12.5, 12.6, records=[ok("low", 9)]), 13.0)
    assert {i: (v[2], [x.success for x in v[3]]) for i, v in c.ok.items()} == {
        0: (0, [True]),
        1: (1, [False, True]),
    }
    assert metrics.retries_per_record.max == 1


def test_batch_sink_runs_keep_the_first_outcome_and_resolve_once() -> None:
    done: list[BatchSink] = []
    sink = BatchSink(4, done)
    sink.failed(1, "Bad", "refused", ())
    sink.succeeded_run([0, 1], 0, "low", 7, ())
    assert not done
    sink.succeeded_run([0, 2, 3], 5, "high", 8, ())  # 0 already finished: ignored
    result = sink.result()
    assert isinstance(result, BatchResult)
    assert result.shard_ids == ["low", None, "high", "high"]
    assert result.sub_sequence_numbers == [0, None, 6, 7]
    assert result.failures[0][0] == 1
    assert done == [sink]


def test_batch_sink_ignores_a_failure_after_a_success_and_numbers_its_runs_when_asked() -> None:
    # The clean-up after a crash fails every record of the requests in flight, some of which
    # succeeded already: their success stands, and the sink finishes once, when the last
    # record that had no outcome fails.
    done: list[BatchSink] = []
    sink = BatchSink(5, done)
    sink.succeeded_run([4, 0, 2], 0, "low", "7", ())
    sink.failed(0, INTERNAL, "crashed", ())
    sink.failed(2, INTERNAL, "crashed", ())
    assert (sink.remaining, done) == (2, [])
    sink.succeeded_run([1], 3, "high", "8", ())
    sink.failed(3, INTERNAL, "crashed", ())
    sink.failed(4, INTERNAL, "crashed", ())
    assert (sink.remaining, done) == (0, [sink])
    result = sink.result()
    assert isinstance(result, BatchResult)
    assert (len(result), result.succeeded_count, result.failed_count) == (5, 4, 1)
    assert [i for i, _ in result.failures] == [3]
    assert list(result.carriers()) == [("low", "7", 3), ("high", "8", 1)]
    assert result.shard_ids == ["low", "high", "low", None, "low"]
    assert result.sequence_numbers == ["7", "8", "7", None, "7"]
    assert result.sub_sequence_numbers == [1, 3, 2, None, 0]
    assert [r.position for r in result] == [(7, 1), (8, 3), (7, 2), None, (7, 0)]
    assert result[-1].shard_id == "low"
    with pytest.raises(IndexError):
        result[5]


# -- the sender's error mapping ------------------------------------------------------------


def test_error_mapping() -> None:
    assert error_of(client_error("ProvisionedThroughputExceededException", "slow")) == (
        THROTTLED,
        "slow",
        400,
    )
    assert error_of(ConnectionResetError("reset")) == (
        INTERNAL,
        "ConnectionResetError: reset",
        None,
    )
    code, message, status = error_of(asyncio.TimeoutError())
    assert (code, status) == (INTERNAL, None)
    assert "timeout" in message


def test_error_mapping_keeps_the_status_and_reads_an_xml_error_body() -> None:
    """botocore reports an XML error body (moto's auth layer) with the status as its code."""
    body = (
        '<?xml version="1.0"?><ErrorResponse><Errors><Error><Code>InvalidClientTokenId</Code>'
        "<Message>The security token included in the request is invalid.</Message>"
    )
    error = ClientError(
        {"Error": {"Code": "403", "Message": body}, "ResponseMetadata": {"HTTPStatusCode": 403}},
        "PutRecords",
    )
    assert error_of(error) == (
        "InvalidClientTokenId",
        "The security token included in the request is invalid.",
        403,
    )
    denied = ClientError(
        {
            "Error": {"Code": "AccessDeniedException", "Message": "no"},
            "ResponseMetadata": {"HTTPStatusCode": 400},
        },
        "PutRecords",
    )
    assert error_of(denied) == ("AccessDeniedException", "no", 400)


class _Client:
    def __init__(self, result: Any) -> None:
        self.result = result

    async def put_records(self, **kwargs: Any) -> Any:
        if isinstance(self.result, BaseException):
            raise self.result
        if self.result == "hang":
            await asyncio.sleep(10)
        return self.result


def _send(result: Any, timeout: float = 1.0) -> SendOutcome:
    sink = RecordingSink()
    b = batch(aggregate(sink, [1], "low"))
    clock = iter(range(100)).__next__
    return asyncio.run(send_batch(_Client(result), "s", b, timeout, lambda: float(clock())))


def test_send_batch_maps_errors_and_never_raises() -> None:
    assert _send(client_error("AccessDeniedException", "no")).error == (
        "AccessDeniedException",
        "no",
    )
    assert _send(OSError("down")).error == (INTERNAL, "OSError: down")
    assert _send({"nothing": 1}).error == (INTERNAL, "KeyError: 'Records'")
    timed_out = _send("hang", timeout=0.01).error
    assert timed_out is not None
    assert timed_out[0] == INTERNAL
    fine = _send({"Records": [ok("low", 1)]})
    assert fine.error is None
    assert fine.records == [ok("low", 1)]
    assert fine.started_at < fine.ended_at


def test_send_batch_sends_data_keys_and_explicit_hash_keys() -> None:
    sent: list[dict[str, Any]] = []

    class Capture:
        async def put_records(self, **kwargs: Any) -> dict[str, Any]:
            sent.append(kwargs)
            return {"Records": [ok("low", 1), ok("low", 2)]}

    a = KinesisRecordOut(b"one", "pk1", "42", [], "low", 6, 0.0, 1.0, 0.0, 0, 0)
    b = KinesisRecordOut(b"two", "pk2", None, [], None, 6, 0.0, 1.0, 0.0, 0, 0)
    asyncio.run(send_batch(Capture(), "stream", batch(a, b), 1.0, lambda: 0.0))
    assert sent == [
        {
            "StreamName": "stream",
            "Records": [
                {"Data": b"one", "PartitionKey": "pk1", "ExplicitHashKey": "42"},
                {"Data": b"two", "PartitionKey": "pk2"},
            ],
        }
    ]
