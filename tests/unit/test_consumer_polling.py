"""The polling shard reader's machine: rate, backoff, expiry, resume inside an aggregate, end."""

from __future__ import annotations

from typing import Any

import pytest

from kinesis_core.aggregation import encode_aggregate
from kinesis_core.classify import ErrorKind
from kinesis_core.consumer import LATEST, TRIM_HORIZON, AtTimestamp
from kinesis_core.consumer.lineage import ShardNode
from kinesis_core.consumer.polling import GetIterator, GetRecords, PollingOptions, PollingRead
from kinesis_core.consumer.transport import Backoff, Ended, ReadState, Wait
from kinesis_core.errors import ConfigurationError
from kinesis_core.hashing import MAX_HASH_KEY, hash_key
from kinesis_core.records import SubRecord

NODE = ShardNode("shard-1", (), (0, MAX_HASH_KEY), True)
CALL = GetRecords("it-0", 10_000)


def raw(seq: int, data: bytes, pk: str = "pk") -> dict[str, Any]:
    return {"SequenceNumber": str(seq), "Data": data, "PartitionKey": pk}


def aggregate(seq: int, count: int) -> dict[str, Any]:
    subs = [SubRecord(f"k{i}", None, f"{seq}-{i}".encode()) for i in range(count)]
    return raw(seq, encode_aggregate(subs), "k0")


def reading(machine: PollingRead, now: float = 0.0) -> None:
    action = machine.next_action(now)
    assert isinstance(action, GetIterator)
    machine.on_iterator("it-0")


def test_calls_are_spaced_to_five_per_second_per_api() -> None:
    machine = PollingRead(NODE, TRIM_HORIZON)
    first = machine.next_action(10.0)
    assert first == GetIterator({"ShardIteratorType": "TRIM_HORIZON"})
    assert machine.next_action(10.05) == Wait(10.2)
    machine.on_iterator("it-1")
    assert machine.next_action(10.05) == GetRecords("it-1", 10_000)
    assert machine.next_action(10.1) == Wait(pytest.approx(10.25))
    machine.on_error(10.1, CALL, ErrorKind.EXPIRED)
    assert machine.next_action(10.1) == Wait(10.2)
    assert isinstance(machine.next_action(10.2), GetIterator)


def test_initial_positions() -> None:
    assert PollingRead(NODE, LATEST).next_action(0) == GetIterator({"ShardIteratorType": "LATEST"})
    at = AtTimestamp(1_700_000_000.5)
    action = PollingRead(NODE, at).next_action(0)
    assert isinstance(action, GetIterator)
    assert action.params["ShardIteratorType"] == "AT_TIMESTAMP"
    assert action.params["Timestamp"].timestamp() == 1_700_000_000.5


def test_shard_filters_of_initial_positions() -> None:
    at = AtTimestamp(1_700_000_000)
    assert LATEST.shard_filter() == {"Type": "AT_LATEST"}
    assert TRIM_HORIZON.shard_filter() is None
    assert at.shard_filter() == {"Type": "FROM_TIMESTAMP", "Timestamp": at.timestamp}


def test_resume_inside_an_aggregate_skips_what_was_checkpointed() -> None:
    machine = PollingRead(NODE, (500, 2))
    assert machine.next_action(0) == GetIterator(
        {"ShardIteratorType": "AT_SEQUENCE_NUMBER", "StartingSequenceNumber": "500"}
    )
    machine.on_iterator("it")
    machine.next_action(1)
    records = machine.on_records(
        1, {"Records": [aggregate(500, 5), raw(501, b"plain")], "NextShardIterator": "it2"}
    )
    assert [r.position for r in records] == [(500, 3), (500, 4), (501, 0)]
    assert [r.data for r in records] == [b"500-3", b"500-4", b"plain"]


def test_resume_skip_holds_across_an_expiry_before_the_first_record() -> None:
    machine = PollingRead(NODE, (500, 0))
    reading(machine)
    machine.next_action(1)
    machine.on_error(1, CALL, ErrorKind.EXPIRED)
    assert machine.state is ReadState.CONNECTING
    assert machine.next_action(2) == GetIterator(
        {"ShardIteratorType": "AT_SEQUENCE_NUMBER", "StartingSequenceNumber": "500"}
    )
    machine.on_iterator("it")
    machine.next_action(3)
    response = {"Records": [raw(500, b"a"), raw(502, b"b")], "NextShardIterator": "x"}
    records = machine.on_records(3, response)
    assert [r.position for r in records] == [(502, 0)]


def test_expired_iterator_resumes_after_the_last_record_read() -> None:
    machine = PollingRead(NODE, TRIM_HORIZON)
    reading(machine)
    machine.next_action(1)
    machine.on_records(1, {"Records": [raw(7, b"a"), aggregate(9, 3)], "NextShardIterator": "n"})
    machine.next_action(2)
    machine.on_error(2, CALL, ErrorKind.EXPIRED)
    assert machine.next_action(3) == GetIterator(
        {"ShardIteratorType": "AFTER_SEQUENCE_NUMBER", "StartingSequenceNumber": "9"}
    )


def test_throttling_backs_off_exponentially_and_resets() -> None:
    options = PollingOptions(backoff=Backoff(0.5, 2.0))
    machine = PollingRead(NODE, TRIM_HORIZON, options, rng=lambda: 1.0)
    reading(machine)
    now = 1.0
    waits = []
    for _ in range(4):
        assert isinstance(machine.next_action(now), GetRecords)
        machine.on_error(now, CALL, ErrorKind.THROTTLED)
        action = machine.next_action(now)
        assert isinstance(action, Wait)
        waits.append(round(action.until - now, 3))
        now = action.until
    assert waits == [0.5, 1.0, 2.0, 2.0]
    machine.next_action(now)
    machine.on_records(now, {"Records": [], "MillisBehindLatest": 5, "NextShardIterator": "n"})
    machine.on_error(now, CALL, ErrorKind.TRANSIENT)
    assert machine.next_action(now) == Wait(now + 0.5)
    assert machine.last_error is ErrorKind.TRANSIENT


def test_an_idle_caught_up_shard_is_polled_slowly() -> None:
    machine = PollingRead(NODE, TRIM_HORIZON, PollingOptions(idle_interval=1.5))
    reading(machine)
    machine.next_action(1)
    machine.on_records(1.01, {"Records": [], "MillisBehindLatest": 0, "NextShardIterator": "n"})
    assert machine.millis_behind_latest == 0
    assert machine.next_action(1.2) == Wait(2.51)
    machine.next_action(2.51)
    machine.on_records(2.6, {"Records": [], "MillisBehindLatest": 9000, "NextShardIterator": "n"})
    assert machine.next_action(2.6) == Wait(2.71)


def test_shard_end_reports_the_children() -> None:
    machine = PollingRead(NODE, TRIM_HORIZON)
    reading(machine)
    machine.next_action(1)
    child = {
        "ShardId": "shard-2",
        "ParentShards": ["shard-1"],
        "HashKeyRange": {"StartingHashKey": "0", "EndingHashKey": str(MAX_HASH_KEY)},
    }
    records = machine.on_records(1, {"Records": [raw(3, b"last")], "ChildShards": [child]})
    assert [r.data for r in records] == [b"last"]
    assert machine.state is ReadState.ENDED
    action = machine.next_action(5)
    assert isinstance(action, Ended)
    assert not action.gone
    assert [c.shard_id for c in action.children] == ["shard-2"]


def test_a_vanished_shard_ends_as_gone() -> None:
    machine = PollingRead(NODE, TRIM_HORIZON)
    machine.next_action(0)
    machine.on_error(0, CALL, ErrorKind.NOT_FOUND)
    assert machine.next_action(0) == Ended((), True)
    for kind in (ErrorKind.FATAL, ErrorKind.AUTH, ErrorKind.INVALID):
        with pytest.raises(ValueError, match="raised by the driver"):
            machine.on_error(0, CALL, kind)


def test_hash_range_filter_drops_aggregates_that_straddle_the_shard() -> None:
    inside = next(f"k{i}" for i in range(1000) if hash_key(f"k{i}") <= MAX_HASH_KEY // 2)
    outside = next(f"k{i}" for i in range(1000) if hash_key(f"k{i}") > MAX_HASH_KEY // 2)
    node = ShardNode("shard-1", (), (0, MAX_HASH_KEY // 2), True)
    machine = PollingRead(node, TRIM_HORIZON)
    reading(machine)
    machine.next_action(1)
    mixed = encode_aggregate([SubRecord(inside, None, b"a"), SubRecord(outside, None, b"b")])
    good = encode_aggregate([SubRecord(inside, None, b"c"), SubRecord(inside, None, b"d")])
    records = machine.on_records(
        1,
        {
            "Records": [raw(1, mixed, inside), raw(2, good, inside), raw(3, b"plain", outside)],
            "NextShardIterator": "n",
        },
    )
    assert [r.data for r in records] == [b"c", b"d", b"plain"]


def test_options_are_checked() -> None:
    with pytest.raises(ConfigurationError, match="5 calls/s"):
        PollingOptions(min_interval=0.1)
    with pytest.raises(ConfigurationError, match="limit"):
        PollingOptions(limit=10_001)
    with pytest.raises(ConfigurationError, match="idle_interval"):
        PollingOptions(idle_interval=0.1)
    with pytest.raises(ConfigurationError, match="max_bytes_per_second"):
        PollingOptions(max_bytes_per_second=0)


MIB = 1024 * 1024


def test_after_a_10_mib_response_the_next_call_waits_5_seconds_from_the_call() -> None:
    machine = PollingRead(NODE, TRIM_HORIZON)
    reading(machine)
    call = machine.next_action(1.0)
    assert isinstance(call, GetRecords)
    big = raw(1, b"x" * (10 * MIB))
    machine.on_response(3.0, call, {"Records": [big], "NextShardIterator": "it-1"})
    assert machine.next_action(3.0) == Wait(pytest.approx(6.0))  # 10 MiB at 2 MiB/s
    assert isinstance(machine.next_action(6.0), GetRecords)


def test_small_responses_keep_five_calls_a_second_and_a_megabyte_waits_half_a_second() -> None:
    machine = PollingRead(NODE, TRIM_HORIZON)
    reading(machine)
    call = machine.next_action(1.0)
    machine.on_response(1.01, call, {"Records": [raw(1, b"x" * 300_000)], "NextShardIterator": "i"})
    assert machine.next_action(1.01) == Wait(pytest.approx(1.2))  # 0.14 s of data: 5 calls/s
    call = machine.next_action(1.2)
    assert isinstance(call, GetRecords)
    machine.on_response(1.25, call, {"Records": [raw(2, b"x" * MIB)], "NextShardIterator": "i"})
    assert machine.next_action(1.25) == Wait(pytest.approx(1.7))
    call = machine.next_action(1.7)
    machine.on_response(1.75, call, {"Records": [], "NextShardIterator": "i"})
    assert isinstance(machine.next_action(1.9), GetRecords)  # nothing read: nothing to pay


def test_the_read_pace_is_an_option() -> None:
    machine = PollingRead(NODE, TRIM_HORIZON, PollingOptions(max_bytes_per_second=float("inf")))
    reading(machine)
    call = machine.next_action(1.0)
    machine.on_response(
        1.0, call, {"Records": [raw(1, b"x" * (10 * MIB))], "NextShardIterator": "i"}
    )
    assert machine.next_action(1.0) == Wait(pytest.approx(1.2))
