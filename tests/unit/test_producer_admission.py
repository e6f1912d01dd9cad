"""The admission machine (kinesis_core/producer/admission.py) on its own, every state x event,
and the pipeline around it: one way in, validation as far as the budget has room, and what it
decided handed out as outputs, never called back into a driver."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from itertools import product
from typing import Any

import pytest

from kinesis_core.errors import RecordTooLargeError, ValidationError
from kinesis_core.producer.admission import (
    LOW_WATER,
    STANDINGS,
    TRANSITIONS,
    Action,
    Admission,
    AdmissionError,
    Event,
    Flush,
    Standing,
    State,
    Step,
    Submission,
)
from kinesis_core.producer.config import ProducerConfig, record_cost, records_cost
from kinesis_core.producer.items import UserRecord
from kinesis_core.producer.metrics import ProducerMetrics
from kinesis_core.producer.pipeline import NOTHING, Pipeline
from kinesis_core.producer.result import (
    PRODUCER_CLOSED,
    VALIDATION_ERROR,
    BatchResult,
    BatchSink,
    Record,
)
from kinesis_core.producer.retrier import SendOutcome
from kinesis_core.shards.hashing import MAX_HASH_KEY, hash_key

MAX_RECORDS = 100
"""The budget of the machine's tests, in records (the byte budget is far away)."""


def validated(n: int, size: int = 10) -> Submission:
    """A submission of ``n`` records, every one validated already."""
    records = [UserRecord(i, b"x" * size, "k", None, 0, i, (), 0.0) for i in range(n)]
    sub = Submission(records, BatchSink(n))
    sub.records = list(records)
    sub.next = n
    sub.cost = records_cost(n * (size + 1), n)
    return sub


@dataclass
class Machine:
    """An admission in a given state: ``first`` admitted (and its inbox taken), ``flush``
    waiting for it, and in ``FULL`` one submission, ``waiting``, behind the full budget."""

    admission: Admission
    first: Submission
    flush: Flush
    waiting: Submission | None = None


def open_machine() -> Machine:
    admission = Admission(MAX_RECORDS, 10**9)
    first = validated(50)
    assert admission.offer(first) == (Standing.ADMITTED, True)
    flush = admission.flush()
    assert flush is not None
    admission.take_inbox()
    return Machine(admission, first, flush)


def full_machine() -> Machine:
    admission = Admission(MAX_RECORDS, 10**9)
    first = validated(MAX_RECORDS)
    admission.offer(first)
    flush = admission.flush()
    assert flush is not None
    waiting = validated(10)
    assert admission.offer(waiting) == (Standing.WAITING, False)
    admission.take_inbox()
    return Machine(admission, first, flush, waiting)


def stopped_machine() -> Machine:
    machine = open_machine()
    assert machine.admission.stop("closed") == []
    return machine


SETUPS: dict[State, Callable[[], Machine]] = {
    State.OPEN: open_machine,
    State.FULL: full_machine,
    State.STOPPED: stopped_machine,
}


def offer(n: int) -> Callable[[Machine], object]:
    def event(m: Machine) -> object:
        sub = validated(n)
        standing, wake = m.admission.offer(sub)
        admitted = sum(len(records) for _, records in m.admission.take_inbox())
        assert standing is sub.standing
        return standing, wake, admitted

    return event


def release(n: int | None) -> Callable[[Machine], object]:
    def event(m: Machine) -> object:
        count = m.admission.records if n is None else n
        let_in = m.admission.release(count, record_cost(b"x" * 10, "k") * count)
        return [sub is m.waiting for sub in let_in], [s.standing for s in let_in]

    return event


def withdraw(m: Machine) -> object:
    sub = m.waiting if m.waiting is not None else validated(1)
    let_in = m.admission.withdraw(sub)
    return sub.standing, let_in


def flush(m: Machine) -> object:
    return type(m.admission.flush()).__name__


def finish(m: Machine) -> object:
    done = m.admission.finished([m.first.sink])
    return [f is m.flush for f in done]


def stop(m: Machine) -> object:
    refused = m.admission.stop("stopped again")
    return [s.standing for s in refused], m.admission.stopped


EVENTS: dict[str, Callable[[Machine], object]] = {
    "offer what fits": offer(5),
    "offer more than the room": offer(80),
    "release one record": release(1),
    "release every record": release(None),
    "withdraw": withdraw,
    "flush": flush,
    "finish the first sink": finish,
    "stop": stop,
}

ADMITTED, WAITING, REFUSED, WITHDRAWN, NEW = (
    Standing.ADMITTED,
    Standing.WAITING,
    Standing.REFUSED,
    Standing.WITHDRAWN,
    Standing.NEW,
)
OPEN, FULL, STOPPED = State.OPEN, State.FULL, State.STOPPED

TABLE: dict[tuple[State, str], tuple[State, object]] = {
    # state, event: the state after it, what the event answered
    (OPEN, "offer what fits"): (OPEN, (ADMITTED, True, 5)),
    (OPEN, "offer more than the room"): (FULL, (WAITING, True, 50)),  # the prefix that fits
    (OPEN, "release one record"): (OPEN, ([], [])),
    (OPEN, "release every record"): (OPEN, ([], [])),
    (OPEN, "withdraw"): (OPEN, (NEW, [])),  # not waiting: nothing to withdraw
    (OPEN, "flush"): (OPEN, "Flush"),
    (OPEN, "finish the first sink"): (OPEN, [True]),
    (OPEN, "stop"): (STOPPED, ([], "stopped again")),
    (FULL, "offer what fits"): (FULL, (WAITING, False, 0)),  # behind the one waiting
    (FULL, "offer more than the room"): (FULL, (WAITING, False, 0)),
    (FULL, "release one record"): (FULL, ([], [])),  # above the low-water mark
    (FULL, "release every record"): (OPEN, ([True], [ADMITTED])),
    (FULL, "withdraw"): (OPEN, (WITHDRAWN, [])),
    (FULL, "flush"): (FULL, "Flush"),
    (FULL, "finish the first sink"): (FULL, [True]),
    (FULL, "stop"): (STOPPED, ([REFUSED], "stopped again")),
    (STOPPED, "offer what fits"): (STOPPED, (REFUSED, False, 0)),
    (STOPPED, "offer more than the room"): (STOPPED, (REFUSED, False, 0)),
    (STOPPED, "release one record"): (STOPPED, ([], [])),
    (STOPPED, "release every record"): (STOPPED, ([], [])),
    (STOPPED, "withdraw"): (STOPPED, (NEW, [])),
    (STOPPED, "flush"): (STOPPED, "Flush"),  # what was accepted still finishes
    (STOPPED, "finish the first sink"): (STOPPED, [True]),
    (STOPPED, "stop"): (STOPPED, ([], "closed")),  # the first reason stays
}


def test_the_table_covers_every_state_and_event() -> None:
    assert set(TABLE) == set(product(State, EVENTS))


@pytest.mark.parametrize(("state", "event"), list(product(State, EVENTS)))
def test_every_state_and_event(state: State, event: str) -> None:
    machine = SETUPS[state]()
    assert machine.admission.state is state
    answer = EVENTS[event](machine)
    after, expected = TABLE[state, event]
    assert (machine.admission.state, answer) == (after, expected)
    admission = machine.admission
    assert admission.records <= admission.max_records
    assert admission.urgent == bool(admission.waiting or admission.flushes)
    # The explicit state says what the admission holds.
    assert (admission.state is State.FULL) == bool(admission.waiting)
    assert (admission.state is State.STOPPED) == (admission.stopped is not None)


# The admission's own machine: every (state, event) pair of its table.

ADMISSION: dict[tuple[State, Event], tuple[State, tuple[Action, ...]] | None] = {
    # state, event: the state after it and the actions; None: AdmissionError, state unchanged
    (OPEN, Event.OFFER): (OPEN, (Action.TAKE,)),
    (OPEN, Event.QUEUE): (FULL, ()),
    (OPEN, Event.ROOM): (OPEN, ()),
    (OPEN, Event.EMPTIED): None,  # nobody was in line
    (OPEN, Event.STOP): (STOPPED, ()),
    (FULL, Event.OFFER): (FULL, ()),  # behind the line: nothing taken
    (FULL, Event.QUEUE): (FULL, ()),
    (FULL, Event.ROOM): (FULL, (Action.LET_IN,)),
    (FULL, Event.EMPTIED): (OPEN, ()),
    (FULL, Event.STOP): (STOPPED, (Action.REFUSE_WAITING,)),
    (STOPPED, Event.OFFER): (STOPPED, (Action.REFUSE,)),
    (STOPPED, Event.QUEUE): None,  # nothing waits once stopped
    (STOPPED, Event.ROOM): (STOPPED, ()),
    (STOPPED, Event.EMPTIED): None,
    (STOPPED, Event.STOP): (STOPPED, ()),
}


def test_the_admission_table_covers_every_state_and_event() -> None:
    every = set(product(State, Event))
    assert set(TRANSITIONS) == every
    assert set(ADMISSION) == every


@pytest.mark.parametrize(("state", "event"), list(product(State, Event)))
def test_every_admission_state_and_event(state: State, event: Event) -> None:
    admission = Admission(MAX_RECORDS, 10**9)
    admission.state = state
    expected = ADMISSION[state, event]
    if expected is None:
        with pytest.raises(AdmissionError, match=f"{event.value} is not expected"):
            admission.handle(event)
        assert admission.state is state  # a refused event changes nothing
        return
    actions = admission.handle(event)
    assert (admission.state, actions) == expected
    # Only a stop leads to STOPPED, and nothing leaves it.
    assert (admission.state is STOPPED) == (state is STOPPED or event is Event.STOP)
    # An offer is taken only while nobody waits, refused only once stopped.
    assert (Action.TAKE in actions) == ((state, event) == (OPEN, Event.OFFER))
    assert (Action.REFUSE in actions) == ((state, event) == (STOPPED, Event.OFFER))
    # Only a line that exists is let in or refused.
    if Action.LET_IN in actions or Action.REFUSE_WAITING in actions:
        assert state is FULL


# One submission's standing: every (standing, step) pair.

SUBMISSION: dict[tuple[Standing, Step], Standing | None] = {
    # standing, step: the standing after it; None: AdmissionError, standing unchanged
    (NEW, Step.ADMIT): ADMITTED,
    (NEW, Step.QUEUE): WAITING,
    (NEW, Step.REFUSE): REFUSED,
    (NEW, Step.WITHDRAW): NEW,
    (WAITING, Step.ADMIT): ADMITTED,
    (WAITING, Step.QUEUE): None,
    (WAITING, Step.REFUSE): REFUSED,
    (WAITING, Step.WITHDRAW): WITHDRAWN,
    (ADMITTED, Step.ADMIT): None,
    (ADMITTED, Step.QUEUE): None,
    (ADMITTED, Step.REFUSE): None,
    (ADMITTED, Step.WITHDRAW): ADMITTED,
    (REFUSED, Step.ADMIT): None,
    (REFUSED, Step.QUEUE): None,
    (REFUSED, Step.REFUSE): None,
    (REFUSED, Step.WITHDRAW): REFUSED,
    (WITHDRAWN, Step.ADMIT): None,
    (WITHDRAWN, Step.QUEUE): None,
    (WITHDRAWN, Step.REFUSE): None,
    (WITHDRAWN, Step.WITHDRAW): WITHDRAWN,
}


def test_the_standing_table_covers_every_standing_and_step() -> None:
    every = set(product(Standing, Step))
    assert set(STANDINGS) == every
    assert set(SUBMISSION) == every


@pytest.mark.parametrize(("standing", "step"), list(product(Standing, Step)))
def test_every_standing_and_step(standing: Standing, step: Step) -> None:
    sub = validated(1)
    sub.standing = standing
    after = SUBMISSION[standing, step]
    if after is None:
        with pytest.raises(AdmissionError, match=f"{step.value} is not expected"):
            sub.handle(step)
        assert sub.standing is standing
    else:
        assert sub.handle(step) is after
        assert sub.standing is after


def test_records_waiting_are_let_in_below_the_low_water_mark_in_order() -> None:
    admission = Admission(MAX_RECORDS, 10**9)
    admission.offer(validated(MAX_RECORDS))
    first, second = validated(20), validated(5)
    admission.offer(first)
    admission.offer(second)
    admission.take_inbox()
    kept = int(LOW_WATER * MAX_RECORDS) + 1
    assert admission.release(MAX_RECORDS - kept, 0) == []  # still above the mark
    assert admission.release(1, 0) == []  # at the mark: 10 of the first fit, in order
    (taken,) = admission.take_inbox()
    assert taken[0] is first
    assert [ur.hash_key for ur in taken[1]] == list(range(10))
    assert admission.records == MAX_RECORDS
    assert admission.state is State.FULL
    assert admission.release(MAX_RECORDS, 0) == [first, second]
    assert [len(records) for _, records in admission.take_inbox()] == [10, 5]
    assert admission.state is State.OPEN


def test_an_empty_budget_takes_a_record_bigger_than_the_budget() -> None:
    admission = Admission(MAX_RECORDS, 1000)
    big = validated(2, size=5000)
    assert admission.offer(big) == (Standing.WAITING, True)
    assert admission.records == 1
    assert admission.release(1, record_cost(b"x" * 5000, "k")) == [big]


def test_the_loop_is_woken_once_per_burst_of_offers() -> None:
    admission = Admission(MAX_RECORDS, 10**9)
    wakes = [admission.offer(validated(1))[1] for _ in range(3)]
    assert wakes == [True, False, False]
    assert len(admission.take_inbox()) == 3
    assert admission.offer(validated(1))[1] is True


def test_a_flush_waits_for_the_sinks_accepted_before_it_only() -> None:
    admission = Admission(MAX_RECORDS, 10**9)
    before, after = validated(1), validated(1)
    admission.offer(before)
    flush = admission.flush()
    admission.offer(after)
    assert admission.finished([after.sink]) == []
    assert admission.finished([before.sink]) == [flush]
    assert admission.flush() is None  # nothing accepted is unfinished


# -- the pipeline: one way in, decisions as outputs ---------------------------------------------


class Untouchable:
    """A future that fails the test if anything but the driver's code touches it."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the pipeline touched the caller's future ({name})")


def pipeline(**config: Any) -> Pipeline:
    options = {"record_max_buffered_time": 0.01, "rate_limit": 100_000, **config}
    return Pipeline(
        ProducerConfig(**options),
        predict=lambda _: "shard",
        hash_range=lambda _: (0, MAX_HASH_KEY),
        metrics=ProducerMetrics("s"),
    )


def written(p: Pipeline, now: float) -> None:
    """Send what is ready and answer every request: each record written."""
    p.flush()
    p.poll(now)
    while (batch := p.next_batch(now)) is not None:
        entries = [{"SequenceNumber": "7", "ShardId": "shard"} for _ in batch.records]
        p.on_outcome(batch, SendOutcome(now, now, records=entries), now)


def test_a_finished_sink_is_an_output_of_the_event_not_a_callback() -> None:
    p = pipeline()
    sub = p.submission([(b"a", "k1"), (b"b", "k2")], 0.0, Untouchable())
    assert p.offer(sub) == (Standing.ADMITTED, True)
    p.admit(0.0)
    assert p.outputs() is NOTHING
    written(p, 0.1)
    results, decided, flushed = p.outputs()
    assert results == [sub.sink]
    assert (decided, len(flushed)) == ([], 1)
    result = sub.sink.result()
    assert isinstance(result, BatchResult)
    assert result.ok
    assert p.outputs() is NOTHING
    assert p.outstanding_records == 0
    assert p.sinks == {}


def test_records_that_fail_validation_are_failed_in_the_submission_with_their_errors() -> None:
    p = pipeline(max_record_bytes=100)
    records: list[Any] = [(b"ok", "k"), ("text", "k"), (b"x" * 200, "k"), (b"ok", "")]
    sub = p.submission(records, 0.0)
    assert [ur.index for ur in sub.records] == [0]
    failures = {i: (r.error_code, r.error_message) for i, r in sub.sink.failures.items()}
    assert failures == {
        1: (VALIDATION_ERROR, "data: must be bytes, got str"),
        2: (
            VALIDATION_ERROR,
            "data: data plus partition key is 201 bytes, over max_record_bytes=100 of the "
            "ProducerConfig (the stream takes up to 1048576 bytes)",
        ),
        3: (VALIDATION_ERROR, failures[3][1]),
    }
    assert failures[3][1].startswith("partition_key:")
    assert sub.too_large == []


def test_a_single_record_raises_what_refused_it_and_a_large_one_is_set_aside() -> None:
    p = pipeline()
    with pytest.raises(ValidationError, match="partition_key"):
        p.submission([(b"x", "", None)], 0.0, single=True)
    large = (b"x" * (2 * 1024 * 1024), "k", None)  # a raised stream limit would take it
    sub = p.submission([large], 0.0, single=True)
    assert (sub.records, sub.too_large) == ([], [(0, large)])
    p.offer(sub)
    rest = p.admit_too_large(sub, 0.0)  # the stream's limit is still 1 MiB
    assert isinstance(rest.error, RecordTooLargeError)
    assert "1024 KiB" in str(rest.error)
    assert sub.sink.failures[0].error_code == VALIDATION_ERROR


def _one_by_one(p: Pipeline, records: list[Any]) -> Submission:
    """The submission of ``records`` validated by the loop, one record at a time (a lazy
    sequence never takes the column-wise path)."""

    class Lazy(list[Any]):
        pass

    return p.submission(Lazy(records), 0.0)


@pytest.mark.parametrize(
    "records",
    [
        [(b"a" * 10, "k1"), (b"", "\u00e9" * 128), (b"c", "k1")],  # pairs; 128 code points
        [Record(b"a", "k"), Record(b"b", "\U0001f600" * 128)],  # Records without an EHK
        [[b"a", "k"], [b"b", "j"]],  # lists
    ],
)
def test_a_plain_batch_is_validated_at_once_into_the_same_records(
    records: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    def one_by_one(*_: Any) -> int:
        raise AssertionError("validated one record at a time")

    p = pipeline()
    with monkeypatch.context() as patched:
        patched.setattr("kinesis_core.producer.pipeline.validate_record", one_by_one)
        sub = p.submission(records, 0.0)
    assert sub.records == _one_by_one(pipeline(), records).records
    assert [ur.hash_key for ur in sub.records] == [hash_key(r[1]) for r in records]
    assert (sub.next, sub.sink.failures) == (len(records), {})
    assert sub.cost == records_cost(sum(len(r[0]) + len(r[1]) for r in records), len(records))


@pytest.mark.parametrize(
    ("bad", "field"),
    [
        ((b"x", "k" * 129), None),  # more than 128 code points: counted in UTF-16, taken
        ((b"x", "\U0001f600" * 129), "partition_key"),  # 258 UTF-16 code units
        ((b"x", "\ud800"), "partition_key"),  # a lone surrogate
        ((b"x", ""), "partition_key"),
        ((bytearray(b"x"), "k"), None),  # bytes-like: taken, as bytes
        ((b"x", "k", "12"), None),  # an explicit hash key
        ((b"x" * 600, "k"), "data"),  # over max_record_bytes
        (("x", "k"), "data"),
        ((b"x",), "record"),
    ],
)
def test_one_record_off_the_plain_shape_sends_the_batch_through_the_loop(
    bad: Any, field: str | None
) -> None:
    p = pipeline(max_record_bytes=600)
    records = [(b"a", "k"), bad, (b"b", "k")]
    sub = p.submission(records, 0.0)
    assert sub.records == _one_by_one(pipeline(max_record_bytes=600), records).records
    if field is None:
        assert [ur.index for ur in sub.records] == [0, 1, 2]
    else:
        assert [ur.index for ur in sub.records] == [0, 2]
        assert sub.sink.failures[1].error_message.startswith(f"{field}:")


def test_the_ttl_of_records_that_waited_for_room_starts_when_they_are_accepted() -> None:
    p = pipeline(max_outstanding_records=100)
    first = p.submission([(b"x", f"a{i}") for i in range(150)], 0.0)
    assert p.offer(first)[0] is Standing.WAITING
    p.admit(0.0)
    p.admission.release(5, 0)  # room for 5, but above the low-water mark: nothing let in
    second = p.submission([(b"y", "b0"), (b"y", "b1")], 2.0)  # validated, behind the first
    assert len(second.records) == 2
    assert p.offer(second)[0] is Standing.WAITING
    p.admission.release(90, 0)
    p.admit(3.0)
    arrivals = {(ur.sink, ur.arrival) for ur in p.aggregator.take_all()}
    assert arrivals == {(first.sink.key, 0.0), (first.sink.key, 3.0), (second.sink.key, 3.0)}


def test_a_plain_batch_takes_only_what_the_budget_has_room_for() -> None:
    p = pipeline(max_outstanding_records=3)
    sub = p.submission([(b"x", f"k{i}") for i in range(10)], 0.0)
    assert (len(sub.records), sub.next) == (3, 3)


class Counted(list[tuple[bytes, str]]):
    """Records that count how many times each was read."""

    def __init__(self, n: int, size: int) -> None:
        super().__init__((b"x" * size, f"k{i}") for i in range(n))
        self.reads: list[int] = []

    def __getitem__(self, index: Any) -> Any:
        self.reads.append(index)
        return super().__getitem__(index)


def test_a_batch_is_validated_only_as_far_as_the_budget_has_room() -> None:
    p = pipeline(max_outstanding_records=3)
    records = Counted(10, 1000)
    sub = p.submission(records, 0.0)
    assert len(sub.records) == 3  # the fourth was read, did not fit, and was let go
    assert records.reads == [0, 1, 2, 3]
    assert p.offer(sub)[0] is Standing.WAITING
    p.admit(0.0)
    assert p.outstanding_records == 3
    written(p, 0.1)  # three finish: the loop validates the next ones when it polls
    assert p.next_deadline(0.1) == float("-inf")
    p.poll(0.1)
    assert p.outstanding_records == 3
    assert records.reads[4:] == [3, 4, 5, 6]
    assert sub.next == 6


def test_stopping_refuses_the_waiting_and_fails_what_they_did_not_get_in() -> None:
    p = pipeline(max_outstanding_records=2)
    sub = p.submission([(b"a", "k1"), (b"b", "k2"), (b"c", "k3")], 0.0)
    p.offer(sub)
    p.admit(0.0)
    p.stop("closed by the test")
    results, decided, _ = p.outputs()
    assert decided == [sub]
    assert sub.standing is Standing.REFUSED
    assert results == []  # two records are still in, and will finish
    failure = sub.sink.failures[2]
    assert (failure.error_code, failure.error_message) == (
        PRODUCER_CLOSED,
        "not accepted: closed by the test",
    )
    later = p.submission([(b"d", "k4")], 0.0)
    assert p.offer(later) == (Standing.REFUSED, False)
