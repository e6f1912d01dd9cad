"""The fan-out shard reader's machine: subscribe rate, events, renewal from the continuation,
resume inside an aggregate, errors with backoff and a limit, the end of a shard."""

from __future__ import annotations

import itertools
import random
from typing import Any

import pytest

from kinesis_core.aggregation import encode_aggregate
from kinesis_core.aws.backoff import Backoff, Jitter
from kinesis_core.aws.classify import ErrorKind
from kinesis_core.consumer import LATEST, TRIM_HORIZON, AtTimestamp
from kinesis_core.consumer.incarnation import StreamFacts, StreamRecreatedError
from kinesis_core.consumer.lineage import ShardNode
from kinesis_core.consumer.subscription import (
    CheckConsumer,
    CheckShard,
    ConsumerCheck,
    NextEvent,
    ShardCheck,
    Subscribe,
    SubscribeEvent,
    SubscriptionOptions,
    SubscriptionRead,
    event_from_api,
)
from kinesis_core.consumer.transport import (
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
ARN = "arn:aws:kinesis:us-east-1:123456789012:stream/orders/consumer/reader:1700000000"


def raw(seq: int, data: bytes, pk: str = "pk") -> dict[str, Any]:
    return {"SequenceNumber": str(seq), "Data": data, "PartitionKey": pk}


def event(
    *records: dict[str, Any], cont: str | None = "c", millis: int = 0, children: Any = None
) -> SubscribeEvent:
    return SubscribeEvent(list(records), cont, millis, children)


def subscribed(machine: SubscriptionRead, now: float = 0.0) -> Subscribe:
    action = machine.next_action(now)
    assert isinstance(action, Subscribe)
    machine.on_response(now, action, object())
    return action


def test_initial_positions_and_a_checkpoint() -> None:
    def first(start: Any) -> dict[str, Any]:
        action = SubscriptionRead(NODE, start).next_action(0)
        assert isinstance(action, Subscribe)
        return action.starting_position

    assert first(TRIM_HORIZON) == {"Type": "TRIM_HORIZON"}
    assert first(LATEST) == {"Type": "LATEST"}
    at = AtTimestamp(1_700_000_000.5)
    assert first(at) == {"Type": "AT_TIMESTAMP", "Timestamp": at.timestamp}
    assert first((42, 3)) == {"Type": "AT_SEQUENCE_NUMBER", "SequenceNumber": "42"}


def test_events_are_read_one_at_a_time_and_deaggregated() -> None:
    machine = SubscriptionRead(NODE, TRIM_HORIZON)
    subscribed(machine)
    assert machine.state is ReadState.READING
    assert machine.next_action(0.1) == NextEvent()
    agg = encode_aggregate([SubRecord("a", None, b"1"), SubRecord("b", None, b"2")])
    out = machine.on_response(0.1, NextEvent(), event(raw(5, agg), raw(6, b"3"), millis=9))
    assert [(r.data, r.sequence_number, r.sub_sequence_number) for r in out.records] == [
        (b"1", "5", 0),
        (b"2", "5", 1),
        (b"3", "6", 0),
    ]
    assert machine.millis_behind_latest == 9
    assert out.millis_behind_latest == 9
    assert out.data
    assert not out.caught_up
    assert not out.idle
    assert machine.next_action(0.1) == NextEvent()


def test_renewal_starts_after_the_continuation_and_respects_the_subscribe_rate() -> None:
    machine = SubscriptionRead(NODE, TRIM_HORIZON)
    subscribed(machine, now=10.0)
    machine.on_response(10.2, NextEvent(), event(raw(5, b"x"), cont="77"))
    ended = machine.on_response(10.3, NextEvent(), None)  # the subscription ended
    assert machine.state is ReadState.CONNECTING
    assert not ended.data
    assert machine.next_action(10.4) == CheckConsumer(shared=True)  # still registered?
    machine.on_response(10.4, CheckConsumer(shared=True), ACTIVE)
    assert machine.next_action(10.5) == Wait(11.1)  # 1.1 s after the subscribe was answered
    again = machine.next_action(11.1)
    assert again == Subscribe({"Type": "AFTER_SEQUENCE_NUMBER", "SequenceNumber": "77"})
    assert machine.connects == 2


@pytest.mark.parametrize("seed", range(5))
def test_subscribe_calls_are_paced_from_the_answer_to_the_previous_one(seed: int) -> None:
    """The service counts SubscribeToShard calls where it receives them, somewhere between
    when one was sent and when its answer came back. The next call is sent no earlier than
    ``subscribe_interval`` (1.1 s: the 1 s the service allows, and a margin) after that
    answer, so two calls arrive at least 1.1 s apart however long each takes (before, the next
    was paced 1.0 s from when the previous was decided: an AWS-like server saw them
    0.972-0.998 s apart and refused them with LimitExceededException)."""
    draw = random.Random(seed)
    machine = SubscriptionRead(NODE, TRIM_HORIZON, rng=draw.random)
    now, sequence = 0.0, 0
    calls: list[tuple[float, float]] = []  # (sent, answered)
    while len(calls) < 40:
        action = machine.next_action(now)
        if isinstance(action, Wait):
            now = action.until
        elif isinstance(action, CheckConsumer):
            machine.on_response(now, action, ACTIVE)
        elif isinstance(action, Subscribe):
            sent, now = now, now + draw.uniform(0.0, 0.8)  # the call takes its time
            calls.append((sent, now))
            if draw.random() < 0.3:
                machine.on_error(now, action, draw.choice([ErrorKind.IN_USE, ErrorKind.THROTTLED]))
            else:
                machine.on_response(now, action, object())
        else:
            assert isinstance(action, NextEvent)
            now += draw.uniform(0.0, 0.3)
            sequence += 1
            ended = draw.random() < 0.5  # the server ends the subscription, or an event comes
            machine.on_response(now, action, None if ended else event(raw(sequence, b"x")))
    gaps = [sent - answered for (_, answered), (sent, _) in itertools.pairwise(calls)]
    assert min(gaps) >= 1.1 - 1e-9


def test_resume_inside_an_aggregate_skips_what_the_checkpoint_covers() -> None:
    machine = SubscriptionRead(NODE, (5, 1))
    subscribed(machine)
    subs = [SubRecord(f"k{i}", None, f"s{i}".encode()) for i in range(4)]
    out = machine.on_response(0, NextEvent(), event(raw(5, encode_aggregate(subs), "k0")))
    assert [r.data for r in out.records] == [b"s2", b"s3"]
    later = machine.on_response(0, NextEvent(), event(raw(9, b"next")))
    assert [r.data for r in later.records] == [b"next"]


def test_the_hash_range_filter_applies_as_with_polling() -> None:
    inside = next(f"k{i}" for i in range(1000) if hash_key(f"k{i}") <= MAX_HASH_KEY // 2)
    outside = next(f"k{i}" for i in range(1000) if hash_key(f"k{i}") > MAX_HASH_KEY // 2)
    machine = SubscriptionRead(ShardNode("shard-1", (), (0, MAX_HASH_KEY // 2), True), TRIM_HORIZON)
    subscribed(machine)
    mixed = encode_aggregate([SubRecord(inside, None, b"a"), SubRecord(outside, None, b"b")])
    out = machine.on_response(0, NextEvent(), event(raw(1, mixed, inside), raw(2, b"c")))
    assert [r.data for r in out.records] == [b"c"]


def test_an_empty_event_at_the_tip_is_idle() -> None:
    machine = SubscriptionRead(NODE, TRIM_HORIZON)
    subscribed(machine)
    out = machine.on_response(0, NextEvent(), event(millis=0))
    assert out.records == []
    assert out.caught_up
    assert out.idle
    assert out.data
    out = machine.on_response(0, NextEvent(), event(raw(1, b"x"), millis=0))
    assert out.caught_up
    assert not out.idle


def test_the_last_event_ends_the_shard_with_its_children() -> None:
    machine = SubscriptionRead(NODE, TRIM_HORIZON)
    subscribed(machine)
    child = {
        "ShardId": "shard-2",
        "ParentShards": ["shard-1"],
        "HashKeyRange": {"StartingHashKey": "0", "EndingHashKey": str(MAX_HASH_KEY)},
    }
    out = machine.on_response(0, NextEvent(), event(raw(3, b"last"), cont=None, children=[child]))
    assert [r.data for r in out.records] == [b"last"]
    assert not out.caught_up
    action = machine.next_action(5)
    assert isinstance(action, Ended)
    assert not action.gone
    assert [c.shard_id for c in action.children] == ["shard-2"]


@pytest.mark.parametrize(
    "kind",
    [ErrorKind.IN_USE, ErrorKind.THROTTLED, ErrorKind.TRANSIENT, ErrorKind.NOT_FOUND],
)
def test_errors_back_off_and_resubscribe_from_where_the_events_left_off(kind: ErrorKind) -> None:
    machine = SubscriptionRead(NODE, TRIM_HORIZON, rng=lambda: 0.0)
    subscribed(machine, now=100.0)
    machine.on_response(100.1, NextEvent(), event(raw(8, b"x"), cont="8"))
    machine.on_error(100.2, NextEvent(), kind)
    if kind is ErrorKind.NOT_FOUND:  # is the consumer gone? No: the stream says why
        assert machine.next_action(100.2) == CheckConsumer()
        machine.on_response(100.2, CheckConsumer(), ACTIVE)
        assert machine.next_action(100.2) == CheckStream()
        machine.on_response(100.2, CheckStream(), LISTED)  # listed: the backoff holds
    else:  # the subscription was cut: is the consumer still registered? (after the backoff)
        check = machine.next_action(100.2)
        assert isinstance(check, Wait)
        assert machine.next_action(check.until) == CheckConsumer(shared=True)
        machine.on_response(check.until, CheckConsumer(shared=True), ACTIVE)
    assert machine.state is ReadState.CONNECTING
    assert machine.last_error is kind
    assert machine.next_action(100.2) == Wait(101.1)  # the subscribe rate holds
    action = machine.next_action(101.1)
    assert action == Subscribe({"Type": "AFTER_SEQUENCE_NUMBER", "SequenceNumber": "8"})


def test_backoff_grows_and_an_event_resets_it() -> None:
    options = SubscriptionOptions(backoff=Backoff(0.5, 4.0, Jitter.EQUAL))
    machine = SubscriptionRead(NODE, TRIM_HORIZON, options, rng=lambda: 0.999999)
    now = 0.0
    delays = []
    for _ in range(5):
        action = machine.next_action(now)
        while isinstance(action, Wait):
            now = action.until
            action = machine.next_action(now)
        machine.on_error(now, action, ErrorKind.IN_USE)
        wait = machine.next_action(now)
        assert isinstance(wait, Wait)
        delays.append(round(wait.until - now, 3))
    assert delays == [1.1, 1.1, 2.0, 4.0, 4.0]  # the subscribe rate floors the first two
    subscribed(machine, now=now + 10)
    machine.on_response(now + 10, NextEvent(), event())
    assert machine.failures == 0


ACTIVE = ConsumerCheck(ARN, "reader", "orders", "ACTIVE")
CREATED = StreamFacts(1_700_000_000_000, 24)
LISTED = StreamView([ShardInfo("shard-1", 0, MAX_HASH_KEY, starting_sequence_number=1)], CREATED)


def test_giving_up_after_max_failures_says_why() -> None:
    machine = SubscriptionRead(NODE, TRIM_HORIZON, SubscriptionOptions(max_failures=3))
    now = 0.0
    for _ in range(3):
        action = machine.next_action(now)
        if isinstance(action, CheckConsumer):  # after each ResourceNotFound: still ACTIVE
            machine.on_response(now, action, ACTIVE)
            machine.on_response(now, machine.next_action(now), LISTED)  # and the shard listed
            action = machine.next_action(now)
        while isinstance(action, Wait):
            now = action.until
            action = machine.next_action(now)
        assert isinstance(action, Subscribe)
        machine.on_error(now, action, ErrorKind.NOT_FOUND)
    final = machine.next_action(now + 100)
    assert isinstance(final, Failed)
    assert "SubscribeToShard failed 3 times in a row (not_found)" in final.reason
    assert "does the consumer still exist" in final.reason
    assert machine.state is ReadState.FAILED


@pytest.mark.parametrize("status", [None, "DELETING"])
@pytest.mark.parametrize("call", [Subscribe({"Type": "LATEST"}), NextEvent()])
def test_a_consumer_that_is_gone_fails_the_reader_at_once(status: str | None, call: Any) -> None:
    """ResourceNotFound (from the subscribe, or mid-stream): the consumer is described before
    any backoff, and a consumer that is gone fails the reader with a message naming it and
    its stream (it took 20 backed-off resubscriptions, about 109 s, before)."""
    machine = SubscriptionRead(NODE, TRIM_HORIZON, rng=lambda: 0.0)
    subscribed(machine, now=5.0)
    machine.on_error(5.5, call, ErrorKind.NOT_FOUND)
    assert machine.next_action(5.5) == CheckConsumer()
    machine.on_response(5.6, CheckConsumer(), ConsumerCheck(ARN, "reader", "orders", status))
    failed = machine.next_action(5.6)
    assert isinstance(failed, Failed)
    assert failed.reason == (
        f"stream consumer 'reader' of stream 'orders' is gone ({status or 'not found'} by "
        f"DescribeStreamConsumer, {ARN}): it was deregistered, or its stream deleted, while "
        "this reader subscribed as it"
    )
    assert machine.state is ReadState.FAILED
    assert machine.failures == 1


@pytest.mark.parametrize("status", ["ACTIVE", "CREATING"])
def test_a_consumer_still_there_keeps_the_backoff(status: str) -> None:
    machine = SubscriptionRead(NODE, TRIM_HORIZON, rng=lambda: 0.0)
    subscribed(machine, now=5.0)
    machine.on_error(5.5, NextEvent(), ErrorKind.NOT_FOUND)
    assert machine.next_action(5.5) == CheckConsumer()
    machine.on_response(5.6, CheckConsumer(), ConsumerCheck(ARN, "reader", "orders", status))
    assert machine.next_action(5.6) == CheckStream()
    machine.on_response(5.6, CheckStream(), LISTED)
    wait = machine.next_action(5.6)
    assert wait == Wait(6.1)  # the subscribe rate (1.1 s after 5.0) over the 0.25 s backoff
    assert isinstance(machine.next_action(6.1), Subscribe)
    assert machine.failures == 1


def test_a_failed_consumer_check_backs_off_and_is_not_repeated_until_the_next_not_found() -> None:
    machine = SubscriptionRead(NODE, TRIM_HORIZON, rng=lambda: 0.0)
    subscribed(machine, now=5.0)
    machine.on_error(5.5, NextEvent(), ErrorKind.NOT_FOUND)
    assert machine.next_action(5.5) == CheckConsumer()
    machine.on_error(5.6, CheckConsumer(), ErrorKind.THROTTLED)
    action = machine.next_action(5.6)
    assert isinstance(action, Wait)
    assert isinstance(machine.next_action(action.until), Subscribe)
    assert machine.failures == 2
    # Other errors never describe the consumer.
    machine.on_error(action.until, Subscribe({"Type": "LATEST"}), ErrorKind.IN_USE)
    assert isinstance(machine.next_action(action.until), Wait)


def test_a_consumer_deregistered_under_an_open_subscription_fails_within_the_interval() -> None:
    """A server may keep a live subscription open after its consumer was deregistered
    (kinesis-mock does, for up to the subscription's five minutes): every
    ``closed_check_interval`` seconds of reading, the reader looks at its consumer between
    events, and one that is gone fails it naming the ARN (before, nothing noticed it until
    the subscription ended)."""
    machine = SubscriptionRead(NODE, TRIM_HORIZON)
    subscribed(machine, now=0.0)
    looks = []
    now, status = 0.0, "ACTIVE"
    while machine.state is ReadState.READING:
        action = machine.next_action(now)
        if isinstance(action, CheckConsumer):
            assert action.shared
            looks.append(now)
            status = "ACTIVE" if now < 60 else "DELETING"
            machine.on_response(now, action, ConsumerCheck(ARN, "reader", "orders", status))
        else:
            assert action == NextEvent()
            machine.on_response(now, action, event(millis=1000))  # an open shard, events
            now += 1.0
    assert looks == [30.0, 60.0]
    failed = machine.next_action(now)
    assert isinstance(failed, Failed)
    assert ARN in failed.reason
    assert "stream consumer 'reader' of stream 'orders' is gone (DELETING" in failed.reason


def test_a_renewal_looks_at_the_consumer_before_subscribing_again() -> None:
    machine = SubscriptionRead(NODE, TRIM_HORIZON)
    subscribed(machine, now=0.0)
    machine.on_response(0.5, NextEvent(), event(raw(1, b"x"), cont="1"))
    machine.on_response(2.0, NextEvent(), None)  # the subscription ended
    assert machine.next_action(2.0) == CheckConsumer(shared=True)
    machine.on_response(2.1, CheckConsumer(shared=True), ConsumerCheck(ARN, "r", "orders", None))
    failed = machine.next_action(2.1)
    assert isinstance(failed, Failed)
    assert f"not found by DescribeStreamConsumer, {ARN}" in failed.reason
    assert machine.connects == 1


def test_a_failed_periodic_look_keeps_the_subscription_and_comes_again() -> None:
    options = SubscriptionOptions(closed_check_interval=10.0)
    machine = SubscriptionRead(NODE, TRIM_HORIZON, options, rng=lambda: 0.0)
    subscribed(machine, now=0.0)
    assert machine.next_action(10.0) == CheckConsumer(shared=True)
    machine.on_error(10.0, CheckConsumer(shared=True), ErrorKind.THROTTLED)
    assert machine.state is ReadState.READING
    wait = machine.next_action(10.0)
    assert isinstance(wait, Wait)
    assert machine.next_action(wait.until) == CheckConsumer(shared=True)
    machine.on_response(wait.until, CheckConsumer(shared=True), ACTIVE)
    assert machine.next_action(wait.until) == NextEvent()
    assert machine.connects == 1


@pytest.mark.parametrize("kind", [ErrorKind.AUTH, ErrorKind.INVALID, ErrorKind.FATAL])
def test_errors_no_retry_fixes_belong_to_the_driver(kind: ErrorKind) -> None:
    machine = SubscriptionRead(NODE, TRIM_HORIZON)
    with pytest.raises(ValueError, match="raised by the driver"):
        machine.on_error(0, Subscribe({"Type": "LATEST"}), kind)


def test_options_are_checked() -> None:
    with pytest.raises(ConfigurationError, match=r"^subscribe_interval: must be >= 1 s"):
        SubscriptionOptions(subscribe_interval=0.5)
    with pytest.raises(ConfigurationError, match=r"^max_failures"):
        SubscriptionOptions(max_failures=0)
    with pytest.raises(ConfigurationError, match=r"^pending_interval"):
        SubscriptionOptions(pending_interval=0)
    with pytest.raises(ConfigurationError, match="backoff"):
        Backoff(5, 1)


def test_events_from_the_api_shape() -> None:
    parsed = event_from_api(
        {"Records": [raw(1, b"x")], "ContinuationSequenceNumber": "1", "MillisBehindLatest": 0}
    )
    assert parsed == SubscribeEvent([raw(1, b"x")], "1", 0)
    assert event_from_api({}).records == ()


CHILD = ShardNode("shard-2", ("shard-1",), (0, MAX_HASH_KEY), True)


def test_a_server_that_never_ends_the_shard_is_covered_by_a_listing() -> None:
    """kinesis-mock keeps a closed shard's subscription open with empty events."""
    options = SubscriptionOptions(closed_check_interval=5.0)
    machine = SubscriptionRead(NODE, TRIM_HORIZON, options)
    subscribed(machine, now=0.0)
    machine.on_response(1.0, NextEvent(), event(raw(1, b"a"), millis=0))
    assert machine.next_action(1.0) == NextEvent()  # records came: no look-up yet
    machine.on_response(2.0, NextEvent(), event(millis=0))  # idle at the tip
    assert machine.next_action(2.0) == CheckShard()
    machine.on_response(2.1, CheckShard(), ShardCheck(listed=True, closed=False))
    assert machine.next_action(2.1) == NextEvent()
    machine.on_response(3.0, NextEvent(), event(millis=0))
    assert machine.next_action(3.0) == NextEvent()  # the next look-up is due at 7.0
    machine.on_response(7.0, NextEvent(), event(millis=0))
    assert machine.next_action(7.0) == CheckConsumer(shared=True)  # due at 5.0: still there
    machine.on_response(7.0, CheckConsumer(shared=True), ACTIVE)
    assert machine.next_action(7.0) == CheckShard()
    machine.on_response(7.1, CheckShard(), ShardCheck(listed=True, closed=True, children=(CHILD,)))
    # Records written before the close may still come: the shard ends only at the tip.
    late = machine.on_response(8.0, NextEvent(), event(raw(2, b"late"), millis=0))
    assert [r.data for r in late.records] == [b"late"]
    assert machine.next_action(8.0) == NextEvent()
    machine.on_response(9.0, NextEvent(), event(millis=0))
    assert machine.next_action(9.0) == Ended((CHILD,), False)


def test_a_shard_closed_from_the_start_ends_at_its_tip() -> None:
    closed = ShardNode("shard-1", (), (0, MAX_HASH_KEY), False)
    machine = SubscriptionRead(closed, TRIM_HORIZON)
    subscribed(machine)
    machine.on_response(0, NextEvent(), event(raw(1, b"a"), millis=100))
    assert machine.next_action(0) == NextEvent()
    machine.on_response(0, NextEvent(), event(millis=0))
    assert machine.next_action(0) == Ended((), False)


def test_a_shard_missing_from_the_listing_is_gone() -> None:
    machine = SubscriptionRead(NODE, TRIM_HORIZON)
    subscribed(machine)
    machine.on_response(0, NextEvent(), event(millis=0))
    assert machine.next_action(0) == CheckShard()
    machine.on_response(0, CheckShard(), ShardCheck(listed=False, closed=False))
    assert machine.next_action(0) == Ended((), True)


# -- what a refusal means: the polling reader's rule (issue 26) ---------------------------------


def not_found_with_the_consumer_there(machine: SubscriptionRead, now: float = 5.5) -> None:
    """A ResourceNotFound mid-stream, the consumer still ACTIVE: the stream is looked at."""
    machine.on_error(now, NextEvent(), ErrorKind.NOT_FOUND)
    assert machine.next_action(now) == CheckConsumer()
    machine.on_response(now, CheckConsumer(), ACTIVE)
    assert machine.state is ReadState.CHECKING
    assert machine.next_action(now) == CheckStream()


def test_a_shard_not_found_and_no_longer_listed_is_gone() -> None:
    """Before, a fan-out reader whose shard was trimmed away subscribed again and again
    (20 backed-off failures) and then failed the consumer; a polling reader ends it as gone."""
    machine = SubscriptionRead(NODE, TRIM_HORIZON, incarnation=CREATED.created_ms)
    subscribed(machine, now=5.0)
    not_found_with_the_consumer_there(machine)
    machine.on_response(5.6, CheckStream(), StreamView([], CREATED))
    assert machine.next_action(5.6) == Ended((), True)


def test_a_stream_created_again_fails_the_fan_out_reader() -> None:
    machine = SubscriptionRead(
        NODE, TRIM_HORIZON, incarnation=CREATED.created_ms - 60_000, stream="orders"
    )
    subscribed(machine, now=5.0)
    not_found_with_the_consumer_there(machine)
    machine.on_response(5.6, CheckStream(), LISTED)
    failed = machine.next_action(5.6)
    assert isinstance(failed, Failed)
    assert isinstance(failed.error, StreamRecreatedError)
    assert "deleted and created again" in str(failed.error)


@pytest.mark.parametrize("kind", [ErrorKind.INVALID, ErrorKind.NOT_FOUND])
def test_a_refused_subscribe_position_older_than_the_trim_horizon_reads_from_there(
    kind: ErrorKind,
) -> None:
    machine = SubscriptionRead(NODE, (500, 3), incarnation=CREATED.created_ms, stream="orders")
    first = machine.next_action(0)
    assert first == Subscribe({"Type": "AT_SEQUENCE_NUMBER", "SequenceNumber": "500"})
    assert machine.handles(first, ErrorKind.INVALID)
    assert not machine.handles(Subscribe({"Type": "LATEST"}), ErrorKind.INVALID)
    machine.on_error(0.1, first, kind)
    if kind is ErrorKind.NOT_FOUND:
        machine.on_response(0.1, machine.next_action(0.1), ACTIVE)  # the consumer is there
    assert machine.next_action(0.1) == CheckStream()
    out = machine.on_response(0.1, CheckStream(), LISTED)
    assert out.warning is not None
    assert "trim horizon" in out.warning
    assert machine.next_action(2.0) == Subscribe({"Type": "TRIM_HORIZON"})
    machine.on_response(2.0, Subscribe({"Type": "TRIM_HORIZON"}), object())
    kept = machine.on_response(2.1, NextEvent(), event(raw(400, b"kept")))
    assert [r.data for r in kept.records] == [b"kept"]  # the old checkpoint skips nothing


OPEN = ShardInfo("shard-1", 0, MAX_HASH_KEY, starting_sequence_number=1)
CLOSED = ShardInfo("shard-1", 0, MAX_HASH_KEY, starting_sequence_number=1, ending_sequence_number=9)


def test_an_event_that_ends_an_open_shard_without_children_is_bad_and_resubscribes() -> None:
    machine = SubscriptionRead(NODE, TRIM_HORIZON)
    subscribed(machine)
    machine.on_response(0.0, NextEvent(), event(raw(5, b"a"), cont="5"))
    outcome = machine.on_response(0.0, NextEvent(), event(cont=None))  # the payload {}
    assert not outcome.records
    assert machine.state is ReadState.CHECKING
    check = machine.next_action(0.0)
    assert isinstance(check, CheckStream)
    outcome = machine.on_response(0.0, check, StreamView([OPEN], StreamFacts(1)))
    assert outcome.error is ErrorKind.TRANSIENT
    assert machine.bad_answers == 1
    action = machine.next_action(0.0)
    while isinstance(action, Wait):
        action = machine.next_action(action.until)
    assert isinstance(action, Subscribe)
    assert action.starting_position == {"Type": "AFTER_SEQUENCE_NUMBER", "SequenceNumber": "5"}


def test_an_event_without_continuation_ends_a_shard_the_listing_shows_closed() -> None:
    machine = SubscriptionRead(NODE, TRIM_HORIZON)
    subscribed(machine)
    machine.on_response(0.0, NextEvent(), event(cont=None))
    check = machine.next_action(0.0)
    assert isinstance(check, CheckStream)
    machine.on_response(0.0, check, StreamView([CLOSED], StreamFacts(1)))
    assert isinstance(machine.next_action(0.0), Ended)
    assert machine.bad_answers == 0
