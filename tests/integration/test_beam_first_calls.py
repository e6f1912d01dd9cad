"""ReadFromKinesis's first calls sent ahead (beam_kinesis._first_calls), against moto: ``split``
sends each new restriction's GetShardIterator and GetRecords on this process's thread, a
``process`` call's reader takes the answers when its machine makes exactly those calls, and
nothing is lost or repeated when it does not (a runner's checkpoint, a restriction that moved
on), when the memory cap holds the next calls back, or when answers are dropped untaken."""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

import pytest

from beam_kinesis._first_calls import FirstCalls, SharedFirstCalls
from beam_kinesis._read_fn import ReadFn
from beam_kinesis.plan import KinesisRestriction
from beam_kinesis.read import ReadFromKinesis
from kinesis_core.aws.calls import Call
from kinesis_core.consumer import TRIM_HORIZON
from kinesis_core.local import LocalStream
from tests.helpers.beam import SdfDriver, pipeline
from tests.integration.test_beam_read_ahead import (  # noqa: F401 (an autouse fixture)
    PER_SHARD,
    _data,
    _fill,
    _fn,
    _run_out,
    worker_environment,
)

pytestmark = pytest.mark.integration


class Spied(FirstCalls):
    """A FirstCalls that records what its readers asked for and whether it had the answer."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.asked: list[tuple[str, str, bool]] = []
        self.dropped = 0

    def wasted(self) -> int:
        wasted = super().wasted()
        self.dropped += wasted
        return wasted

    def take(self, spec: Any, created_ms: int | None, shard_id: str, call: Call, **kw: Any) -> Any:
        future = super().take(spec, created_ms, shard_id, call, **kw)
        self.asked.append((shard_id, type(call).__name__, future is not None))
        return future


def settled(calls: FirstCalls) -> None:
    """Wait until every call sent ahead has its answer (the calls held back by the memory cap
    aside)."""
    for _ in range(500):
        with calls._lock:
            answers = calls._answers.values()
            if (answers or not calls._tasks) and all(a.future.done() for a in answers):
                return
        time.sleep(0.01)
    raise AssertionError("the calls sent ahead did not finish")


class Given(SharedFirstCalls):
    """A handle that gives every copy of the DoFn the test's FirstCalls."""

    def __init__(self, first_calls: FirstCalls) -> None:
        self.first_calls = first_calls

    def acquire(self) -> FirstCalls:
        return self.first_calls


def _split(fn: ReadFn, stream: LocalStream) -> list[KinesisRestriction]:
    return list(fn.split(stream.name, fn.initial_restriction(stream.name)))


def test_split_sends_the_first_calls_and_process_takes_their_answers(moto_stream: Any) -> None:
    """Each restriction's reader takes its GetShardIterator and first GetRecords answers
    from the calls ``split`` sent, then calls on its own; every record comes out once."""
    stream: LocalStream = moto_stream(shards=2)
    data = _fill(stream)
    spied = Spied()
    fn = _fn(stream, first_calls=Given(spied))
    outputs: list[bytes] = []
    try:
        parts = _split(fn, stream)
        settled(spied)
        for part in parts:
            driver = SdfDriver(fn, stream.name, part)
            _run_out(driver)
            outputs += _data(driver)
    finally:
        fn.teardown()
    assert Counter(outputs) == Counter(data)
    for shard in [s["ShardId"] for s in stream.shards()]:
        asked = [(call, hit) for s, call, hit in spied.asked if s == shard]
        assert asked[:2] == [("GetIterator", True), ("GetRecords", True)]
    assert spied.wasted() == 0


def test_a_runner_checkpoint_at_the_first_claim_of_an_answer_sent_ahead_loses_nothing(
    moto_stream: Any,
) -> None:
    """The runner checkpoints before the first claim of a restriction whose first answer was
    sent ahead: nothing of it was claimed, and the residual reads every record once."""
    stream: LocalStream = moto_stream(shards=1)
    data = _fill(stream, shards=1)
    spied = Spied()
    fn = _fn(stream, first_calls=Given(spied))
    try:
        (part,) = _split(fn, stream)
        settled(spied)
        driver = SdfDriver(fn, stream.name, part)
        driver.call(checkpoint_after=0)
        assert driver.outputs == []
        assert ("GetRecords", True) in [(c, hit) for _, c, hit in spied.asked]
        _run_out(driver)
    finally:
        fn.teardown()
    assert Counter(_data(driver)) == Counter(data)


def test_answers_nobody_takes_are_dropped_and_counted_as_wasted(moto_stream: Any) -> None:
    """Answers that waited longer than the expiry are dropped (the reader calls on its own)
    and counted as wasted."""
    stream: LocalStream = moto_stream(shards=1)
    data = _fill(stream, shards=1)
    spied = Spied()
    fn = _fn(stream, first_calls=Given(spied))
    try:
        (part,) = _split(fn, stream)
        settled(spied)
        spied._expiry = 0.0  # the answers came, and waited too long
        driver = SdfDriver(fn, stream.name, part)
        _run_out(driver)
    finally:
        fn.teardown()
    assert Counter(_data(driver)) == Counter(data)
    assert spied.asked[0] == (part.cursors[0].shard_id, "GetIterator", False)
    spied.wasted()
    assert spied.dropped == 2  # GetShardIterator's answer and GetRecords'


def test_the_memory_cap_holds_the_next_restrictions_calls_until_an_answer_is_taken(
    moto_stream: Any,
) -> None:
    """With room for one answer, the second restriction's calls wait until the first
    restriction's answer is taken; both restrictions read every record once."""
    stream: LocalStream = moto_stream(shards=2)
    data = _fill(stream)
    spied = Spied(max_bytes=1)
    fn = _fn(stream, first_calls=Given(spied))
    outputs: list[bytes] = []
    try:
        first, second = _split(fn, stream)
        settled(spied)
        with spied._lock:
            assert len(spied._tasks) == 1  # the second restriction's calls wait
        for part in (first, second):
            driver = SdfDriver(fn, stream.name, part)
            _run_out(driver)
            outputs += _data(driver)
    finally:
        fn.teardown()
    assert Counter(outputs) == Counter(data)
    assert len(outputs) == 2 * PER_SHARD


def test_no_call_is_sent_ahead_when_first_calls_ahead_is_off(moto_stream: Any) -> None:
    """``first_calls_ahead=False``: ``split`` sends nothing, and each reader makes its own
    calls from the start without looking for answers; every record comes out once."""
    stream: LocalStream = moto_stream(shards=1)
    data = _fill(stream, shards=1)
    spied = Spied()
    fn = _fn(stream, first_calls_ahead=False, first_calls=Given(spied))
    try:
        (part,) = _split(fn, stream)
        with spied._lock:
            assert not spied._tasks
            assert not spied._answers
        driver = SdfDriver(fn, stream.name, part)
        _run_out(driver)
    finally:
        fn.teardown()
    assert Counter(_data(driver)) == Counter(data)
    assert spied.asked == []  # no reader looks for answers sent ahead


def test_the_split_and_process_stages_of_a_pipeline_share_the_transforms_first_calls(
    moto_stream: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On the in-process runner, the copy of the DoFn that splits (never set up) and the
    copies that process find one FirstCalls for the transform: the readers take the answers
    ``split`` sent. (``split`` here waits for its answers before it returns, so that the
    readers find them come.)"""
    stream: LocalStream = moto_stream(shards=2)
    data = _fill(stream)
    seen: set[int] = set()
    hits: list[tuple[str, bool]] = []
    send, take = FirstCalls.send, FirstCalls.take

    def sent(self: FirstCalls, *args: Any) -> None:
        seen.add(id(self))
        send(self, *args)
        settled(self)

    def taken(
        self: FirstCalls, spec: Any, created_ms: Any, shard_id: str, call: Call, **kw: Any
    ) -> Any:
        seen.add(id(self))
        future = take(self, spec, created_ms, shard_id, call, **kw)
        hits.append((type(call).__name__, future is not None))
        return future

    monkeypatch.setattr(FirstCalls, "send", sent)
    monkeypatch.setattr(FirstCalls, "take", taken)
    p = pipeline(stream, "in_memory")
    _ = p | ReadFromKinesis(
        stream.name, initial_position=TRIM_HORIZON, stop_when_caught_up=True, idle_interval=0.2
    )
    p.run().wait_until_finish()
    assert len(seen) == 1
    assert hits.count(("GetIterator", True)) == 2  # each shard's reader took its answers
    assert hits.count(("GetRecords", True)) == 2
    assert len(data) == 2 * PER_SHARD
