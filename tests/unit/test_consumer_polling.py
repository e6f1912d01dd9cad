"""The polling shard reader's machine: rate, backoff, expiry, resume inside an aggregate, end."""

from __future__ import annotations

from typing import Any

import pytest

from kinesis_core.aggregation import encode_aggregate
from kinesis_core.aws.backoff import Backoff, Jitter
from kinesis_core.aws.classify import ErrorKind
from kinesis_core.consumer import LATEST, TRIM_HORIZON, AtTimestamp
from kinesis_core.consumer.incarnation import StreamFacts, StreamRecreatedError
from kinesis_core.consumer.lineage import ShardNode
from kinesis_core.consumer.polling import GetIterator, GetRecords, PollingOptions, PollingRead
from kinesis_core.consumer.positions import resume_params
from kinesis_core.consumer.transport import (
    MAX_UNEXPLAINED,
    CheckStream,
    Ended,
    Failed,
    ReadState,
    StreamView,
    Wait,
)
from kinesis_core.errors import ConfigurationError
from kinesis_core.records import SubRecord
from kinesis_core.shards.hashing import MAX_HASH_KEY, hash_key
from kinesis_core.shards.info import ShardInfo

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
    ).records
    assert [r.position for r in records] == [(500, 3), (500, 4), (501, 0)]
    assert [r.data for r in records] == [b"500-3", b"500-4", b"plain"]


def test_without_deaggregation_an_aggregate_comes_as_one_record_of_its_kpl_bytes() -> None:
    whole = aggregate(500, 5)
    machine = PollingRead(NODE, (499, 0), deaggregate=False)
    reading(machine)
    machine.next_action(1)
    response = {"Records": [raw(499, b"read"), whole, raw(501, b"plain")], "NextShardIterator": "x"}
    records = machine.on_records(1, response).records
    assert [r.position for r in records] == [(500, 0), (501, 0)]
    assert [r.data for r in records] == [whole["Data"], b"plain"]
    assert not any(r.aggregated for r in records)
    assert machine.last_sequence == 501


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
    records = machine.on_records(3, response).records
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
    options = PollingOptions(backoff=Backoff(0.5, 2.0, Jitter.EQUAL))
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


def _empty(machine: PollingRead, now: float, millis: int = 0) -> float:
    """Answer the GetRecords due at ``now`` with nothing; the time the next one is due."""
    assert isinstance(machine.next_action(now), GetRecords)
    machine.on_records(now, {"Records": [], "MillisBehindLatest": millis, "NextShardIterator": "n"})
    wait = machine.next_action(now)
    assert isinstance(wait, Wait)
    return wait.until


def test_an_idle_shard_waits_longer_each_time_up_to_the_bound_and_wakes_at_a_record() -> None:
    options = PollingOptions(idle_interval=1.0, max_idle_interval=5.0)
    machine = PollingRead(NODE, TRIM_HORIZON, options)
    reading(machine)
    now, waits = 1.0, []
    for _ in range(5):
        due = _empty(machine, now)
        waits.append(due - now)
        now = due
    assert waits == [1.0, 2.0, 4.0, 5.0, 5.0]
    # a shard behind the tip is not idle: the doubling starts over
    due = _empty(machine, now, millis=3000)
    assert due - now == pytest.approx(options.min_interval)
    now = _empty(machine, due)
    assert now - due == 1.0
    assert isinstance(machine.next_action(now), GetRecords)
    machine.on_records(
        now, {"Records": [raw(1, b"x")], "MillisBehindLatest": 0, "NextShardIterator": "n"}
    )
    assert _empty(machine, now + 0.2) - (now + 0.2) == 1.0


def test_without_a_bound_every_idle_wait_is_the_idle_interval() -> None:
    machine = PollingRead(NODE, TRIM_HORIZON, PollingOptions(idle_interval=1.0))
    reading(machine)
    now = 1.0
    for _ in range(4):
        due = _empty(machine, now)
        assert due - now == 1.0
        now = due


def test_shard_end_reports_the_children() -> None:
    machine = PollingRead(NODE, TRIM_HORIZON)
    reading(machine)
    machine.next_action(1)
    child = {
        "ShardId": "shard-2",
        "ParentShards": ["shard-1"],
        "HashKeyRange": {"StartingHashKey": "0", "EndingHashKey": str(MAX_HASH_KEY)},
    }
    records = machine.on_records(1, {"Records": [raw(3, b"last")], "ChildShards": [child]}).records
    assert [r.data for r in records] == [b"last"]
    assert machine.state is ReadState.ENDED
    action = machine.next_action(5)
    assert isinstance(action, Ended)
    assert not action.gone
    assert [c.shard_id for c in action.children] == ["shard-2"]


CREATED = StreamFacts(1_700_000_000_000, 24)
LISTED = [ShardInfo("shard-1", 0, MAX_HASH_KEY, starting_sequence_number=100)]


def view(shards: list[ShardInfo] = LISTED, facts: StreamFacts = CREATED) -> StreamView:
    return StreamView(shards, facts)


def refused(
    machine: PollingRead, call: Any, kind: ErrorKind = ErrorKind.NOT_FOUND, now: float = 0.0
) -> None:
    """``call`` fails with ``kind``: the machine asks for a look at the stream at once."""
    machine.on_error(now, call, kind)
    assert machine.state is ReadState.CHECKING
    assert machine.next_action(now) == CheckStream()


def test_a_shard_no_longer_listed_ends_as_gone() -> None:
    machine = PollingRead(NODE, TRIM_HORIZON, incarnation=CREATED.created_ms)
    machine.next_action(0)
    refused(machine, CALL)
    machine.on_response(0, CheckStream(), view(shards=[]))
    assert machine.next_action(0) == Ended((), True)
    for kind in (ErrorKind.FATAL, ErrorKind.AUTH, ErrorKind.INVALID):
        with pytest.raises(ValueError, match="raised by the driver"):
            machine.on_error(0, CALL, kind)


def test_a_listed_shard_is_never_gone_a_lost_iterator_connects_again() -> None:
    machine = PollingRead(NODE, (500, 0), incarnation=CREATED.created_ms)
    reading(machine)
    machine.next_action(1)
    machine.on_records(1, {"Records": [raw(600, b"a")], "NextShardIterator": "it-1"})
    refused(machine, CALL)
    machine.on_response(1, CheckStream(), view())
    assert machine.state is ReadState.CONNECTING
    action = machine.next_action(100)
    assert action == GetIterator(
        {"ShardIteratorType": "AFTER_SEQUENCE_NUMBER", "StartingSequenceNumber": "600"}
    )


def test_a_refused_position_older_than_the_trim_horizon_reads_from_trim_horizon() -> None:
    machine = PollingRead(NODE, (500, 3), incarnation=CREATED.created_ms, stream="orders")
    first = machine.next_action(0)
    assert first == GetIterator(
        {"ShardIteratorType": "AT_SEQUENCE_NUMBER", "StartingSequenceNumber": "500"}
    )
    refused(machine, first, ErrorKind.INVALID)
    warning = machine.on_response(0, CheckStream(), view()).warning
    assert warning is not None
    assert "shard-1 of orders" in warning
    assert "500" in warning
    assert "trim horizon" in warning
    assert "24 h" in warning
    assert machine.next_action(1) == GetIterator({"ShardIteratorType": "TRIM_HORIZON"})
    assert machine.on_iterator("it-1").warning is None  # said once
    machine.next_action(2)
    # Nothing of the old checkpoint is skipped any more: every record comes.
    records = machine.on_records(
        2, {"Records": [raw(400, b"kept")], "NextShardIterator": "n"}
    ).records
    assert [r.data for r in records] == [b"kept"]


def test_a_position_of_another_incarnation_fails_with_stream_recreated() -> None:
    machine = PollingRead(NODE, (500, 0), incarnation=CREATED.created_ms - 60_000)
    refused(machine, machine.next_action(0))
    machine.on_response(0, CheckStream(), view())
    action = machine.next_action(0)
    assert isinstance(action, Failed)
    assert isinstance(action.error, StreamRecreatedError)
    assert action.error.created_ms == CREATED.created_ms
    assert "deleted and created again" in str(action.error)


def test_a_position_outside_the_shard_fails_with_stream_recreated() -> None:
    machine = PollingRead(NODE, (50, 0), incarnation=CREATED.created_ms)
    refused(machine, machine.next_action(0))
    machine.on_response(0, CheckStream(), view())
    action = machine.next_action(0)
    assert isinstance(action, Failed)
    assert isinstance(action.error, StreamRecreatedError)


def test_a_deleted_stream_fails_the_reader() -> None:
    machine = PollingRead(NODE, TRIM_HORIZON, stream="orders")
    refused(machine, machine.next_action(0))
    machine.on_error(0, CheckStream(), ErrorKind.NOT_FOUND)
    action = machine.next_action(0)
    assert isinstance(action, Failed)
    assert "orders no longer exists" in action.reason


def test_a_look_at_the_stream_that_is_throttled_is_tried_again_after_a_backoff() -> None:
    machine = PollingRead(NODE, TRIM_HORIZON, rng=lambda: 0.0)
    refused(machine, machine.next_action(0))
    machine.on_error(0, CheckStream(), ErrorKind.THROTTLED)
    assert machine.next_action(0) == Wait(0.1)
    assert machine.next_action(0.1) == CheckStream()


def test_invalid_argument_is_the_machines_only_for_a_position() -> None:
    machine = PollingRead(NODE, TRIM_HORIZON)
    at_start = machine.next_action(0)
    assert isinstance(at_start, GetIterator)
    assert not machine.handles(at_start, ErrorKind.INVALID)
    assert not machine.handles(CALL, ErrorKind.INVALID)
    resume = GetIterator(resume_params(5, after=True))
    assert machine.handles(resume, ErrorKind.INVALID)
    assert machine.handles(CALL, ErrorKind.NOT_FOUND)


def test_unexplained_not_found_gives_up_after_a_few_tries() -> None:
    machine = PollingRead(NODE, TRIM_HORIZON, rng=lambda: 0.0)
    now = 0.0
    for _ in range(MAX_UNEXPLAINED):
        action = machine.next_action(now)
        while isinstance(action, Wait):
            now = action.until
            action = machine.next_action(now)
        assert isinstance(action, GetIterator)
        refused(machine, action, now=now)
        machine.on_response(now, CheckStream(), view())
    action = machine.next_action(now)
    assert isinstance(action, Failed)
    assert "ListShards still lists" in action.reason


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
    ).records
    assert [r.data for r in records] == [b"c", b"d", b"plain"]


def test_options_are_checked() -> None:
    with pytest.raises(ConfigurationError, match="5 calls/s"):
        PollingOptions(min_interval=0.1)
    with pytest.raises(ConfigurationError, match="limit"):
        PollingOptions(limit=10_001)
    with pytest.raises(ConfigurationError, match="idle_interval"):
        PollingOptions(idle_interval=0.1)
    for bound in (0.5, float("inf")):
        with pytest.raises(ConfigurationError) as raised:
            PollingOptions(idle_interval=1.0, max_idle_interval=bound)
        assert raised.value.field == "max_idle_interval"
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


OPEN = ShardInfo("shard-1", 0, MAX_HASH_KEY, starting_sequence_number=1)
CLOSED = ShardInfo("shard-1", 0, MAX_HASH_KEY, starting_sequence_number=1, ending_sequence_number=9)
CHILD = ShardInfo(
    "shard-2", 0, MAX_HASH_KEY, parent_shard_id="shard-1", starting_sequence_number=10
)


def look(machine: PollingRead, now: float, *shards: ShardInfo) -> None:
    """Answer the CheckStream the machine asks for (when due) with a listing of ``shards``."""
    action = machine.next_action(now)
    while isinstance(action, Wait):
        now = action.until
        action = machine.next_action(now)
    assert isinstance(action, CheckStream)
    machine.on_stream_view(now, StreamView(list(shards), StreamFacts(1)))


def test_an_answer_that_ends_an_open_shard_without_children_is_bad_and_read_again() -> None:
    machine = PollingRead(NODE, TRIM_HORIZON)
    reading(machine)
    call = machine.next_action(0.0)
    assert isinstance(call, GetRecords)
    outcome = machine.on_response(0.0, call, {"Records": []})  # the body {} on the lean path
    assert not outcome.records
    assert machine.state is ReadState.CHECKING
    look(machine, 0.0, OPEN)
    assert machine.state is ReadState.READING
    assert machine.bad_answers == 1
    assert machine.last_error is ErrorKind.TRANSIENT
    action = machine.next_action(0.0)
    assert isinstance(action, Wait)  # backed off
    again = machine.next_action(action.until)
    assert again == call  # the same iterator: nothing skipped
    outcome = machine.on_response(
        action.until,
        again,
        {"Records": [raw(5, b"a")], "NextShardIterator": "it-1", "MillisBehindLatest": 0},
    )
    assert [r.data for r in outcome.records] == [b"a"]
    assert machine.failures == 0


def test_an_answer_with_records_that_ends_an_open_shard_reads_on_after_them() -> None:
    machine = PollingRead(NODE, TRIM_HORIZON)
    reading(machine)
    outcome = machine.on_response(0.0, machine.next_action(0.0), {"Records": [raw(5, b"a")]})
    assert [r.data for r in outcome.records] == [b"a"]
    look(machine, 0.0, OPEN)
    assert machine.state is ReadState.CONNECTING
    action = machine.next_action(100.0)
    assert action == GetIterator(resume_params(5, after=True))


def test_a_null_iterator_without_children_ends_a_shard_the_listing_shows_closed() -> None:
    machine = PollingRead(NODE, TRIM_HORIZON)
    reading(machine)
    machine.on_response(0.0, machine.next_action(0.0), {"Records": [], "MillisBehindLatest": 0})
    look(machine, 0.0, CLOSED, CHILD)
    ended = machine.next_action(0.0)
    assert isinstance(ended, Ended)
    assert [c.shard_id for c in ended.children] == ["shard-2"]
    assert machine.bad_answers == 0


@pytest.mark.parametrize("answer", [{}, {"NextShardIterator": "it-1"}, {"Records": "x"}, None])
def test_an_answer_without_records_is_bad_and_the_same_call_goes_again(answer: Any) -> None:
    machine = PollingRead(NODE, TRIM_HORIZON)
    reading(machine)
    call = machine.next_action(0.0)
    outcome = machine.on_response(0.0, call, answer)
    assert outcome.error is ErrorKind.TRANSIENT
    assert machine.state is ReadState.READING
    assert machine.bad_answers == 1
    action = machine.next_action(0.0)
    assert isinstance(action, Wait)
    assert machine.next_action(action.until) == call


def test_a_get_shard_iterator_without_an_iterator_ends_only_a_closed_shard() -> None:
    machine = PollingRead(NODE, TRIM_HORIZON)
    assert isinstance(machine.next_action(0.0), GetIterator)
    machine.on_iterator(None)
    look(machine, 0.0, OPEN)
    assert machine.state is ReadState.CONNECTING
    assert machine.bad_answers == 1
