"""The shard reader's state machine: every state and event of the transition table, events a
state refuses, and the synchronous driver's "no event yet" that the machine never sees."""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Executor, Future
from itertools import product
from typing import Any

import pytest
from botocore.exceptions import ClientError

from kinesis_core.aws.calls import Call
from kinesis_core.aws.classify import ErrorKind
from kinesis_core.consumer import TRIM_HORIZON
from kinesis_core.consumer.incarnation import StreamFacts
from kinesis_core.consumer.lineage import ShardNode
from kinesis_core.consumer.links import PENDING
from kinesis_core.consumer.polling import GetIterator, GetRecords, PollingRead
from kinesis_core.consumer.reading import ShardReadError, SyncShardReader
from kinesis_core.consumer.subscription import (
    NextEvent,
    Subscribe,
    SubscribeEvent,
    SubscriptionOptions,
    SubscriptionRead,
)
from kinesis_core.consumer.transport import (
    MAX_UNEXPLAINED,
    TRANSITIONS,
    Failed,
    ReadEvent,
    ReadProtocolError,
    ReadState,
    StreamView,
    Wait,
    transition,
)
from kinesis_core.shards.hashing import MAX_HASH_KEY
from kinesis_core.shards.info import ShardInfo

S, E = ReadState, ReadEvent

EXPECTED = {
    (S.CONNECTING, E.CONNECTED, S.READING),
    (S.CONNECTING, E.LOOKED_UP, S.CONNECTING),
    (S.CONNECTING, E.DISCONNECTED, S.CONNECTING),
    (S.CONNECTING, E.RETRY, S.CONNECTING),
    (S.CONNECTING, E.REFUSED, S.CHECKING),
    (S.CONNECTING, E.DOUBTED_CONSUMER, S.CHECKING_CONSUMER),
    (S.CONNECTING, E.SHARD_ENDED, S.ENDED),
    (S.CONNECTING, E.GAVE_UP, S.FAILED),
    (S.READING, E.DATA, S.READING),
    (S.READING, E.LOOKED_UP, S.READING),
    (S.READING, E.DISCONNECTED, S.CONNECTING),
    (S.READING, E.RETRY, S.READING),
    (S.READING, E.REFUSED, S.CHECKING),
    (S.READING, E.DOUBTED_CONSUMER, S.CHECKING_CONSUMER),
    (S.READING, E.SHARD_ENDED, S.ENDED),
    (S.READING, E.GAVE_UP, S.FAILED),
    (S.CHECKING_CONSUMER, E.CONSUMER_THERE, S.CHECKING),
    (S.CHECKING_CONSUMER, E.RETRY, S.CONNECTING),
    (S.CHECKING_CONSUMER, E.GAVE_UP, S.FAILED),
    (S.CHECKING, E.RESTART, S.CONNECTING),
    (S.CHECKING, E.RESUME, S.READING),
    (S.CHECKING, E.RETRY, S.CHECKING),
    (S.CHECKING, E.SHARD_ENDED, S.ENDED),
    (S.CHECKING, E.GAVE_UP, S.FAILED),
}
"""The table, spelled out: a change to it must change this too."""


@pytest.mark.parametrize("state", list(ReadState))
@pytest.mark.parametrize("event", list(ReadEvent))
def test_every_event_in_every_state_goes_where_the_table_says_or_raises(
    state: ReadState, event: ReadEvent
) -> None:
    allowed = {(s, e): t for s, e, t in EXPECTED}
    if (state, event) in allowed:
        assert transition(state, event) is allowed[state, event]
    else:
        with pytest.raises(ReadProtocolError, match=f"{event.name} is not allowed while"):
            transition(state, event)


def test_the_table_is_the_one_spelled_out_and_only_ended_and_failed_are_final() -> None:
    assert set(TRANSITIONS) == set(product(ReadState, ReadEvent))  # every pair, one entry
    table = {(s, e, t) for (s, e), t in TRANSITIONS.items() if t is not None}
    assert table == EXPECTED
    final = {s for s in ReadState if all(TRANSITIONS[s, e] is None for e in ReadEvent)}
    assert final == {S.ENDED, S.FAILED}
    reached, frontier = {S.CONNECTING}, [S.CONNECTING]
    while frontier:
        state = frontier.pop()
        for event in ReadEvent:
            target = TRANSITIONS[state, event]
            if target is not None and target not in reached:
                reached.add(target)
                frontier.append(target)
    assert reached == set(ReadState)


NODE = ShardNode("shard-1", (), (0, MAX_HASH_KEY), True)
RECORDS = {"Records": [], "MillisBehindLatest": 0, "NextShardIterator": "n"}
CLOSED = ShardInfo("shard-1", 0, MAX_HASH_KEY, starting_sequence_number=1, ending_sequence_number=9)
CHILD = {
    "ShardId": "shard-2",
    "ParentShards": ["shard-1"],
    "HashKeyRange": {"StartingHashKey": "0", "EndingHashKey": str(MAX_HASH_KEY)},
}


def test_a_response_the_machine_did_not_ask_for_is_refused_and_changes_nothing() -> None:
    machine = PollingRead(NODE, TRIM_HORIZON)
    assert isinstance(machine.next_action(0), GetIterator)
    with pytest.raises(ReadProtocolError, match="DATA is not allowed while CONNECTING"):
        machine.on_response(0, GetRecords("it", 10), RECORDS)
    assert machine.state is ReadState.CONNECTING
    machine.on_iterator(None)  # the shard has nothing more to give, if it is closed
    assert machine.state is ReadState.CHECKING
    machine.on_stream_view(0, StreamView([CLOSED], StreamFacts(1)))
    assert machine.state is ReadState.ENDED
    with pytest.raises(ReadProtocolError, match="CONNECTED is not allowed while ENDED"):
        machine.on_iterator("it")


def test_an_event_after_the_end_of_a_subscription_shard_is_refused() -> None:
    machine = SubscriptionRead(NODE, TRIM_HORIZON)
    machine.on_response(0, machine.next_action(0), object())
    machine.on_response(0, NextEvent(), SubscribeEvent([], None, 0, [CHILD]))  # the last event
    assert machine.state is ReadState.ENDED
    with pytest.raises(ReadProtocolError, match="shard-1: DATA is not allowed while ENDED"):
        machine.on_response(0, NextEvent(), SubscribeEvent([], "c", 0))


class Link:
    """A synchronous link that answers from a script (an exception is raised)."""

    def __init__(self, *answers: Any) -> None:
        self.answers = list(answers)
        self.calls: list[Call] = []

    def call(self, call: Call) -> Any:
        self.calls.append(call)
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    def close(self) -> None:
        pass


class _ListClock:
    """A BlockingClock whose time is ``now[0]``."""

    def __init__(self, now: list[float]) -> None:
        self._now = now

    def now(self) -> float:
        return self._now[0]

    def sleep(self, seconds: float) -> None:
        self._now[0] += seconds


@pytest.mark.parametrize("flavour", ["time function", "blocking clock"])
def test_no_event_yet_is_the_synchronous_drivers_and_it_looks_again_shortly(
    flavour: str,
) -> None:
    """A synchronous link never blocks on a subscription: it answers PENDING when no event is
    waiting, and the driver waits ``pending_interval`` before it asks again; the machine is
    not told (it was, before: the driver's PENDING lived in the pure machine). The driver's
    clock is a bare time function or a BlockingClock."""
    now = [1.0]
    machine = SubscriptionRead(NODE, TRIM_HORIZON, SubscriptionOptions(pending_interval=0.05))
    event = SubscribeEvent([{"SequenceNumber": "1", "Data": b"x", "PartitionKey": "k"}], "1", 0)
    clock = _ListClock(now) if flavour == "blocking clock" else (lambda: now[0])
    reader = SyncShardReader(
        machine, Link(object(), PENDING, event), pending_interval=0.05, clock=clock
    )
    subscribe = reader.next_action(now[0])
    assert isinstance(subscribe, Subscribe)
    reader.step(subscribe)
    assert reader.next_action(now[0]) == NextEvent()
    assert reader.step(NextEvent()).records == []
    assert machine.state is ReadState.READING
    assert reader.next_action(1.01) == Wait(1.05)
    assert machine.next_action(1.01) == NextEvent()  # the machine knows nothing of it
    now[0] = 1.05
    assert reader.next_action(now[0]) == NextEvent()
    assert [r.data for r in reader.step(NextEvent()).records] == [b"x"]


def test_a_reader_that_gives_up_raises_with_the_last_error_it_took() -> None:
    """The synchronous driver (the Beam source's) keeps the last error, as the asyncio one
    does: the ShardReadError names it, with its code, and has it as its cause (the Beam
    source raised the reason alone before)."""
    refused = ClientError(
        {"Error": {"Code": "ResourceNotFoundException", "Message": "no shard"}}, "GetShardIterator"
    )
    now = [0.0]
    view = StreamView([ShardInfo("shard-1", 0, MAX_HASH_KEY)], StreamFacts(1, 24))
    link = Link(*([refused, view] * MAX_UNEXPLAINED))
    machine = PollingRead(NODE, TRIM_HORIZON, rng=lambda: 0.0)
    reader = SyncShardReader(machine, link, clock=lambda: now[0], where="orders")
    while True:
        action = reader.next_action(now[0])
        if isinstance(action, Wait):
            now[0] = action.until
        elif isinstance(action, Failed):
            break
        else:
            reader.step(action)
    error = reader.failure(action)
    assert isinstance(error, ShardReadError)
    assert str(error).startswith("gave up reading shard-1 of orders: 5 failures in a row")
    assert str(error).endswith("last error: ResourceNotFoundException: no shard")
    assert error.code == "ResourceNotFoundException"
    assert error.__cause__ is refused


class Later(Executor):
    """An executor that runs a submitted call only when the test says so (a call in flight)."""

    def __init__(self) -> None:
        self.jobs: list[tuple[Future[Any], Callable[..., Any], tuple[Any, ...]]] = []

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        future: Future[Any] = Future()
        self.jobs.append((future, fn, args))
        return future

    def run(self) -> None:
        future, fn, args = self.jobs.pop(0)
        try:
            future.set_result(fn(*args))
        except Exception as exc:
            future.set_exception(exc)


def _connected(link: Link, ahead: Executor | None) -> SyncShardReader:
    """A polling reader that got its iterator ("it-0") at t=0."""
    reader = SyncShardReader(PollingRead(NODE, TRIM_HORIZON), link, clock=lambda: 0.0, ahead=ahead)
    reader.step(reader.next_action(0.0))
    return reader


def test_a_call_read_ahead_is_the_next_action_until_a_step_takes_its_answer() -> None:
    """read_ahead sends the machine's due call on the executor; until a step takes the answer,
    the reader's next action is that call (the machine was asked once, as without it), and
    ``sent`` says when it went."""
    answer = {"Records": [{"SequenceNumber": "1", "Data": b"x", "PartitionKey": "k"}]}
    link = Link({"ShardIterator": "it-0"}, {**answer, "NextShardIterator": "it-1"})
    later = Later()
    reader = _connected(link, later)
    before = time.time()
    assert reader.read_ahead(0.0)
    after = time.time()
    call = GetRecords("it-0", 10_000)
    assert link.calls[-1:] != [call]  # not sent yet: in flight on the executor
    assert reader.reading_ahead
    assert not reader.read_ahead(0.0)  # one at a time
    assert reader.next_action(5.0) is reader.next_action(9.0)
    assert reader.next_action(5.0) == call
    later.run()
    assert link.calls[-1] == call
    outcome = reader.step(reader.next_action(5.0))
    assert [r.data for r in outcome.records] == [b"x"]
    assert not reader.reading_ahead
    assert before <= reader.sent <= after  # when it went, not when it was taken
    assert len(link.calls) == 2  # the answer taken, no second call
    assert reader.next_action(0.1) == Wait(0.2)  # spaced from when it was sent


def test_read_ahead_sends_nothing_when_nothing_is_due_or_without_an_executor() -> None:
    link = Link({"ShardIterator": "it-0"})
    reader = _connected(link, Later())
    reader.next_action(0.0)  # GetRecords at 0.0: the next one is due at 0.2
    assert not reader.read_ahead(0.1)
    assert not reader.reading_ahead
    assert reader.next_action(0.1) == Wait(0.2)
    plain = _connected(Link({"ShardIterator": "it-0"}), None)
    assert not plain.read_ahead(0.0)
    assert plain.next_action(0.0) == GetRecords("it-0", 10_000)


def test_an_error_of_a_call_read_ahead_is_taken_as_a_synchronous_one() -> None:
    """The error the call raised on the executor's thread reaches the machine at the step,
    classified by the same table (a throttled GetRecords: back off, the same iterator)."""
    throttled = ClientError(
        {"Error": {"Code": "ProvisionedThroughputExceededException", "Message": "slow"}},
        "GetRecords",
    )
    link = Link({"ShardIterator": "it-0"}, throttled)
    later = Later()
    reader = _connected(link, later)
    assert reader.read_ahead(0.0)
    later.run()
    outcome = reader.step(reader.next_action(0.0))
    assert outcome.records == []
    assert reader.machine.last_error is ErrorKind.THROTTLED
    action = reader.next_action(10.0)
    assert action == GetRecords("it-0", 10_000)


def test_stepping_another_call_while_one_is_in_flight_is_refused() -> None:
    link = Link({"ShardIterator": "it-0"})
    reader = _connected(link, Later())
    assert reader.read_ahead(0.0)
    with pytest.raises(ValueError, match="is in flight"):
        reader.step(GetRecords("it-9", 1))


def test_closing_a_reader_drops_the_call_in_flight() -> None:
    """Its answer is never fed to the machine: the reader stays where it was."""
    later = Later()
    reader = _connected(Link({"ShardIterator": "it-0"}, {"Records": []}), later)
    assert reader.read_ahead(0.0)
    reader.close()
    assert not reader.reading_ahead
    later.run()
    assert reader.machine.state is ReadState.READING


def _done(result: Any) -> Future[Any]:
    future: Future[Any] = Future()
    if isinstance(result, Exception):
        future.set_exception(result)
    else:
        future.set_result(result)
    return future


ITERATOR = GetIterator({"ShardIteratorType": "TRIM_HORIZON"})


def test_answers_sent_earlier_are_taken_for_the_exact_calls_and_the_asking_stops_at_a_miss() -> (
    None
):
    """``earlier`` gives the answers of a reader's first calls sent before it existed: the
    reader takes them instead of calling (``sent`` is when they went), for the calls its
    machine makes; the first call without one is sent by the reader, and ``earlier`` is not
    asked again."""
    records = GetRecords("it-0", 10_000)
    answer = {"Records": [{"SequenceNumber": "1", "Data": b"x", "PartitionKey": "k"}]}
    sent_early = [
        (ITERATOR, _done((100.0, {"ShardIterator": "it-0"}))),
        (records, _done((101.0, {**answer, "NextShardIterator": "it-1"}))),
        (GetRecords("it-other", 10_000), _done((102.0, {"Records": []}))),
    ]
    asked: list[Call] = []

    def earlier(call: Call) -> Future[Any] | None:
        asked.append(call)
        return next((future for sent, future in sent_early if sent == call), None)

    link = Link({"Records": [], "NextShardIterator": "it-2"}, {"Records": []})
    reader = SyncShardReader(
        PollingRead(NODE, TRIM_HORIZON), link, clock=lambda: 0.0, earlier=earlier
    )
    reader.step(reader.next_action(0.0))
    assert reader.sent == 100.0
    outcome = reader.step(reader.next_action(0.0))
    assert [r.data for r in outcome.records] == [b"x"]
    assert reader.sent == 101.0
    assert link.calls == []  # both answers taken, nothing sent
    third = reader.next_action(1.0)
    assert third == GetRecords("it-1", 10_000)
    reader.step(third)
    assert link.calls == [third]  # no earlier answer for it: the reader sent it
    reader.step(reader.next_action(2.0))
    assert asked == [ITERATOR, records, third]  # not asked after the first miss


def test_an_error_sent_earlier_is_the_machines_error_of_that_call() -> None:
    """A call sent earlier that failed is the reader's failed call: its machine takes the
    error (here a throttled GetRecords: it backs off) as if it had made the call."""
    throttled = ClientError(
        {"Error": {"Code": "ProvisionedThroughputExceededException", "Message": "slow"}},
        "GetRecords",
    )
    answers = {
        "GetIterator": _done((0.0, {"ShardIterator": "it-0"})),
        "GetRecords": _done(throttled),
    }
    link = Link()
    reader = SyncShardReader(
        PollingRead(NODE, TRIM_HORIZON, rng=lambda: 0.0),
        link,
        clock=lambda: 0.0,
        earlier=lambda call: answers.pop(type(call).__name__, None),
    )
    reader.step(reader.next_action(0.0))
    outcome = reader.step(reader.next_action(0.0))
    assert outcome.error is ErrorKind.THROTTLED
    assert isinstance(reader.next_action(0.0), Wait)
    assert link.calls == []
