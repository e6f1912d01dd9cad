"""BlockingProducer: the same results from synchronous threads, one loop thread per process."""

from __future__ import annotations

import concurrent.futures
import threading

import pytest

from kinesis_core.errors import ValidationError
from kinesis_core.producer import (
    VALIDATION_ERROR,
    BlockingProducer,
    ProducerClosedError,
    ProducerConfig,
    RecordResult,
)
from kinesis_core.runtime.loop_thread import LoopThread, loop_thread_count
from tests.fakes.kinesis import FakeKinesis

CONFIG = ProducerConfig(record_max_buffered_time=0.01, rate_limit=100_000)


def test_put_and_put_many_from_many_threads() -> None:
    fake = FakeKinesis(shards=4)
    with BlockingProducer("stream", client=fake, producer_config=CONFIG) as producer:

        def work(t: int) -> list[bool]:
            single = producer.put(f"single-{t}".encode(), f"t{t}")
            batch = producer.put_many([(f"{t}-{i}".encode(), f"t{t}-{i}") for i in range(200)])
            futures = [producer.submit(b"x", f"f{t}-{i}") for i in range(20)]
            return [single.success, batch.ok, *(f.result(5).success for f in futures)]

        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            outcomes = [ok for oks in pool.map(work, range(8)) for ok in oks]
        assert all(outcomes)
        assert producer.metrics().user_records_put == 8 * (1 + 200 + 20)
        assert producer.outstanding_records == 0
    written = {r.data for r in fake.read_all()}
    assert {f"{t}-{i}".encode() for t in range(8) for i in range(200)} <= written
    assert producer.closed


def test_results_are_the_async_producers() -> None:
    fake = FakeKinesis(shards=2)
    with BlockingProducer("stream", client=fake, producer_config=CONFIG) as producer:
        result = producer.put(b"data", "key", timeout=5)
        batch = producer.submit_many([(b"a", "k"), ("not bytes", "k")]).result(5)
    assert result.success
    assert result.shard_id is not None
    assert result.sequence_number is not None
    assert batch[0].success
    assert batch.failures[0][0] == 1
    assert batch.failures[0][1].error_code == VALIDATION_ERROR


def test_a_malformed_entry_of_put_many_says_what_is_wrong() -> None:
    with BlockingProducer("stream", client=FakeKinesis(), producer_config=CONFIG) as producer:
        batch = producer.put_many([(b"a", "k"), (b"b",)], timeout=5)
    assert batch[0].success
    assert batch[1].error_code == VALIDATION_ERROR
    assert batch[1].error_message == (
        "record: must be a (data, partition_key[, explicit_hash_key[, record_id]]) tuple; "
        "got a tuple of 1 element: partition_key (element 1) is missing"
    )


def test_bad_input_raises_in_the_callers_thread() -> None:
    fake = FakeKinesis()
    with BlockingProducer("stream", client=fake, producer_config=CONFIG) as producer:
        with pytest.raises(ValidationError, match="partition_key"):
            producer.submit(b"x", "")
        assert producer.put(b"x", "fine").success


def test_put_after_close_is_refused() -> None:
    producer = BlockingProducer("stream", client=FakeKinesis(), producer_config=CONFIG)
    producer.flush(timeout=5)
    producer.close()
    with pytest.raises(ProducerClosedError):
        producer.put(b"x", "k")
    with pytest.raises(ProducerClosedError):
        producer.put_many([(b"x", "k")])


def test_one_event_loop_thread_serves_every_producer() -> None:
    with (
        BlockingProducer("a", client=FakeKinesis(), producer_config=CONFIG) as one,
        BlockingProducer("b", client=FakeKinesis(), producer_config=CONFIG) as two,
    ):
        assert one._thread is two._thread
        assert loop_thread_count() == 1


def test_calling_from_a_result_callback_is_refused_not_deadlocked() -> None:
    fake = FakeKinesis()
    errors: list[BaseException] = []
    done = threading.Event()
    with BlockingProducer("stream", client=fake, producer_config=CONFIG) as producer:

        def callback(_: object) -> None:
            try:
                producer.put(b"nested", "k")
            except RuntimeError as exc:
                errors.append(exc)
            done.set()

        producer.submit(b"x", "k").add_done_callback(callback)
        assert done.wait(5)
    assert errors
    assert "event-loop thread" in str(errors[0])


def test_single_submits_from_threads_stay_within_the_budget() -> None:
    fake = FakeKinesis(shards=2, delay=0.005)
    config = ProducerConfig(
        record_max_buffered_time=0.01, rate_limit=100_000, max_outstanding_records=200
    )
    seen: list[int] = []
    with BlockingProducer("stream", client=fake, producer_config=config) as producer:

        def work(t: int) -> list[concurrent.futures.Future[RecordResult]]:
            futures = []
            for i in range(500):
                futures.append(producer.submit(b"x" * 50, f"{t}-{i}"))
                seen.append(producer.outstanding_records)
            return futures

        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            futures = [f for fs in pool.map(work, range(4)) for f in fs]
        results = [f.result(10) for f in futures]
    assert all(r.success for r in results)
    assert max(seen) <= 200
    assert len(fake.read_all()) == 2000


def test_threads_hand_records_over_without_waiting_for_the_loop() -> None:
    """``submit_many`` and ``submit`` return while the loop thread is busy elsewhere: a thread
    admits its records under a lock and the loop takes them when it comes round. (Every batch
    call used to wait for the loop to take it: most of a Beam DoFn's time,
    docs/performance-history.md.)"""
    fake = FakeKinesis(shards=2)
    with BlockingProducer("stream", client=fake, producer_config=CONFIG) as producer:
        busy, release, done = threading.Event(), threading.Event(), threading.Event()

        def occupy_the_loop() -> None:
            busy.set()
            release.wait(10)
            done.set()

        LoopThread.get().loop.call_soon_threadsafe(occupy_the_loop)
        assert busy.wait(5)
        batch = producer.submit_many([(b"a", "k1"), (b"b", "k2")])
        single = producer.submit(b"c", "k3")
        handed_over_while_busy = not done.is_set()
        outstanding = producer.outstanding_records
        release.set()
        assert handed_over_while_busy
        assert outstanding == 3  # admitted: counted in the budget before the loop took them
        assert batch.result(5).ok
        assert single.result(5).success
    assert {r.data for r in fake.read_all()} == {b"a", b"b", b"c"}
