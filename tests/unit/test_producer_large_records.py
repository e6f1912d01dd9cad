"""Records up to 10 MiB through the Producer and the BlockingProducer, against an in-memory
Kinesis: the stream's limit learned and asked again before a record is refused, the cap,
large records never aggregated and sent alone, and the memory budget with large records."""

from __future__ import annotations

import asyncio
import gc
import tracemalloc
from typing import Any

import pytest

from benchmarks.bench_large_records import LazyRecords
from kinesis_core.aggregation import is_aggregated
from kinesis_core.errors import RecordTooLargeError, ValidationError
from kinesis_core.producer import VALIDATION_ERROR, BlockingProducer, ProducerConfig
from kinesis_core.producer.config import PAYLOAD_COPIES, RECORD_OVERHEAD_BYTES
from tests.fakes.kinesis import Entry, FakeKinesis
from tests.helpers.producer import FAST, producer, run

MIB = 1024 * 1024


def test_a_record_over_the_streams_limit_is_refused_after_the_stream_is_asked_again() -> None:
    fake = FakeKinesis(shards=2)  # reports no MaxRecordSizeInKiB: 1 MiB

    async def main() -> None:
        async with producer(fake) as p:
            assert p.record_bytes == MIB
            assert fake.count("DescribeStreamSummary") == 1  # at start
            with pytest.raises(RecordTooLargeError) as refused:
                await p.put(b"x" * (2 * MIB), "k")
            assert fake.count("DescribeStreamSummary") == 2  # asked again before refusing
            message = str(refused.value)
            assert message.startswith("data: data plus partition key is 2097153 bytes")
            assert "1024 KiB" in message
            assert "'stream'" in message
            assert "UpdateMaxRecordSize" in message
            assert "S3" in message
            assert isinstance(refused.value, ValidationError)
            assert (await p.put(b"x" * (MIB - 1), "k")).success  # the limit itself is fine

    run(main)


def test_a_raised_limit_is_taken_without_a_restart() -> None:
    fake = FakeKinesis(shards=2)

    async def main() -> None:
        async with producer(fake) as p:
            with pytest.raises(RecordTooLargeError):
                await p.put(b"x" * (3 * MIB), "k")
            fake.max_record_size_kib = 10240  # UpdateMaxRecordSize
            result = await p.put(b"x" * (3 * MIB), "k")
            assert result.success
            assert p.record_bytes == 10 * MIB
            batch = await p.put_many([(b"x" * (9 * MIB), "a"), (b"y", "b")])
            assert batch.ok

    run(main)
    written = sorted(len(r.data) for r in fake.read_all())
    assert written == [1, 3 * MIB, 9 * MIB]


def test_put_many_refuses_an_oversized_record_alone_and_writes_the_others() -> None:
    fake = FakeKinesis(shards=2)
    fake.max_record_size_kib = 1024

    async def main() -> Any:
        async with producer(fake) as p:
            big, huge = b"x" * (2 * MIB), b"y" * (11 * MIB)
            return await p.put_many([(b"before", "a"), (big, "big"), (b"after", "b"), (huge, "c")])

    batch = run(main)
    assert [i for i, _ in batch.failures] == [1, 3]
    assert {r.error_code for _, r in batch.failures} == {VALIDATION_ERROR}
    big, huge = (r.error_message or "" for _, r in batch.failures)
    assert "over the 1024 KiB" in big
    assert "MaxRecordSizeInKiB" in big
    assert "10 MiB" in huge
    assert "the most any Kinesis stream takes" in huge
    assert batch[0].success
    assert batch[2].success
    assert fake.count("DescribeStreamSummary") == 2  # one look for both (the 11 MiB one needs none)
    assert sorted(r.data for r in fake.read_all()) == [b"after", b"before"]


def test_max_record_bytes_caps_below_the_streams_limit() -> None:
    fake = FakeKinesis(shards=2)
    fake.max_record_size_kib = 10240

    async def main() -> None:
        async with producer(fake, max_record_bytes=2 * MIB) as p:
            assert p.record_bytes == 2 * MIB
            with pytest.raises(RecordTooLargeError, match=r"max_record_bytes=2097152 of the"):
                await p.put(b"x" * (3 * MIB), "k")
            batch = await p.put_many([(b"x" * (3 * MIB), "k")])
            assert "max_record_bytes" in (batch[0].error_message or "")
            # the stream's limit is not what refused it
            assert fake.count("DescribeStreamSummary") == 1

    run(main)


def test_large_records_are_never_aggregated_and_go_alone() -> None:
    fake = FakeKinesis(shards=1)
    fake.max_record_size_kib = 10240
    smalls = [(f"s{i}".encode(), f"k{i}") for i in range(40)]
    sent = [*smalls[:20], (b"L" * (3 * MIB), "large"), *smalls[20:], (b"H" * (9 * MIB), "h")]

    async def main() -> Any:
        async with producer(fake, record_max_buffered_time=0.2) as p:
            return await p.put_many(sent)

    batch = run(main, limit=20.0)
    assert batch.ok
    entries = [e for request in fake.requests for e in request]
    large = [e for e in entries if len(e["Data"]) > MIB]
    assert sorted(len(e["Data"]) for e in large) == [3 * MIB, 9 * MIB]
    assert not any(is_aggregated(e["Data"]) for e in large)  # raw
    for request in fake.requests:
        size = sum(len(e["Data"]) + len(e["PartitionKey"]) for e in request)
        assert size <= 5 * MIB or len(request) == 1  # the 9 MiB one alone in its request
    aggregated = [e for e in entries if is_aggregated(e["Data"])]
    assert aggregated  # the small ones still share aggregates
    assert sum(r.sub_sequence_number is not None for r in batch) == len(sent)


def test_a_kinesis_record_over_the_streams_limit_never_forms_from_small_ones() -> None:
    # An aggregation_max_size above the stream's limit is bounded by the limit.
    fake = FakeKinesis(shards=1)

    async def main() -> Any:
        async with producer(fake, aggregation_max_size=4 * MIB, record_max_buffered_time=0.2) as p:
            return await p.put_many([(b"x" * 100_000, f"k{i}") for i in range(30)])

    assert run(main).ok
    sizes = [len(e["Data"]) + len(e["PartitionKey"]) for r in fake.requests for e in r]
    assert max(sizes) <= MIB
    assert len(sizes) < 30


class Forgetful(FakeKinesis):
    """Keeps no data: what the producer holds is all that is held."""

    async def put_records(self, *, Records: list[Entry], **kwargs: Any) -> dict[str, Any]:
        return await super().put_records(
            Records=[{**entry, "Data": b""} for entry in Records], **kwargs
        )


@pytest.mark.slow
def test_a_hundred_9_mib_records_put_at_once_stay_within_the_budget() -> None:
    fake = Forgetful(shards=4, delay=0.01)
    fake.max_record_size_kib = 10240
    budget = 128 * MIB
    cost = PAYLOAD_COPIES * (9 * MIB + 3) + RECORD_OVERHEAD_BYTES
    peaks: list[int] = []

    async def main() -> Any:
        async with producer(fake, max_outstanding_bytes=budget) as p:

            async def watch() -> None:
                while True:
                    peaks.append(p.outstanding_bytes)
                    await asyncio.sleep(0)

            watcher = asyncio.ensure_future(watch())
            try:
                return await p.put_many(LazyRecords(100, 9 * MIB))
            finally:
                watcher.cancel()

    gc.collect()
    tracemalloc.start()
    try:
        batch = run(main, limit=60.0)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert batch.ok
    assert len(batch) == 100
    assert max(peaks) <= budget
    assert max(peaks) >= 2 * cost  # it did fill the budget (several records at once)
    # The data itself: at most what the budget lets in (budget / cost records), plus the one
    # record being made, plus slack for the interpreter; far below 100 x 9 MiB.
    assert peak <= (budget // cost + 2) * 9 * MIB + 4 * MIB


def test_blocking_producer_asks_the_stream_again_in_the_callers_call() -> None:
    fake = FakeKinesis(shards=2)
    config = ProducerConfig(**FAST)
    with BlockingProducer("stream", client=fake, producer_config=config) as blocking:
        with pytest.raises(RecordTooLargeError, match="1024 KiB"):
            blocking.put(b"x" * (2 * MIB), "k")
        fake.max_record_size_kib = 4096
        assert blocking.put(b"x" * (2 * MIB), "k", timeout=10).success
        batch = blocking.put_many([(b"x" * (5 * MIB), "a"), (b"x" * (3 * MIB), "b")], timeout=10)
        assert [i for i, _ in batch.failures] == [0]
        assert "4096 KiB" in (batch.failures[0][1].error_message or "")
        assert batch[1].success
