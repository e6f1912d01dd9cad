"""Records up to 10 MiB on kinesis-mock: written by the core producer and the blocking producer
with default settings, read back intact by the consumer by polling and by fan-out; refused
alone on a 1 MiB stream; taken without a restart once the stream's limit is raised.

kinesis-mock is slow per byte (about 1.3 s per MiB written and 0.4 s per MiB read here), so each
stream carries one 3 MiB and one 9.5 MiB record among small ones, and each is read as few times
as the cases need. The Beam and Faust ends are in test_beam_write_runners.py and
test_faust_sink.py.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kinesis_core.aggregation import deaggregate
from kinesis_core.checkpoint import MemoryCheckpointStore
from kinesis_core.consumer import TRIM_HORIZON, Consumer, ConsumerConfig, EnhancedFanOut
from kinesis_core.errors import RecordTooLargeError
from kinesis_core.local import LocalStream
from kinesis_core.producer import VALIDATION_ERROR, BlockingProducer, Producer
from tests.helpers.large_records import MIB, large_records

pytestmark = pytest.mark.integration


async def read_back(
    stream: LocalStream, count: int, fan_out: EnhancedFanOut | None = None
) -> list[tuple[bytes, str]]:
    """``count`` records of ``stream`` from TRIM_HORIZON, by polling or by fan-out (within
    two minutes)."""
    return await asyncio.wait_for(_read(stream, count, fan_out), 120)


async def _read(
    stream: LocalStream, count: int, fan_out: EnhancedFanOut | None
) -> list[tuple[bytes, str]]:
    config = ConsumerConfig(
        application_name=f"large-{'efo' if fan_out else 'polling'}",
        initial_position=TRIM_HORIZON,
        idle_interval=0.2,
        enhanced_fan_out=fan_out or False,
    )
    got: list[tuple[bytes, str]] = []
    async with Consumer(
        stream.name,
        consumer_config=config,
        client_config=stream.client_config,
        checkpoint_store=MemoryCheckpointStore(),
    ) as consumer:
        async for record in consumer:
            got.append((record.data, record.partition_key))
            record.ack()
            if len(got) == count:
                break
    return got


def fan_out() -> EnhancedFanOut:
    return EnhancedFanOut(consumer_name="large-reader", tags={"purpose": "large-records"})


def test_the_producers_write_large_records_the_consumer_reads_by_polling_and_fan_out(
    kinesis_stream: Any,
) -> None:
    """Producer -> one stream, read by polling; BlockingProducer -> another, read by fan-out
    (whose consumer is registered with tags). Default settings everywhere."""
    core = kinesis_stream(shards=1, max_record_size_kib=10240)
    blocking = kinesis_stream(shards=1, max_record_size_kib=10240)
    core_sent = large_records("core")
    blocking_sent = large_records("blocking")

    async def write_core() -> None:
        async with Producer(core.name, client_config=core.client_config) as producer:
            assert producer.record_bytes == 10 * MIB  # learned from the stream
            (await producer.put_many(core_sent)).raise_for_failures()

    asyncio.run(write_core())
    with BlockingProducer(blocking.name, client_config=blocking.client_config) as producer:
        futures = [producer.submit(data, key) for data, key in blocking_sent]
        assert all(f.result(60).success for f in futures)

    polled = asyncio.run(read_back(core, len(core_sent)))
    assert sorted(polled) == sorted(core_sent)
    fanned = asyncio.run(read_back(blocking, len(blocking_sent), fan_out()))
    assert sorted(fanned) == sorted(blocking_sent)


def test_on_a_1_mib_stream_a_2_mib_record_fails_alone_with_the_streams_limit(
    kinesis_stream: Any,
) -> None:
    stream = kinesis_stream(shards=1)  # the default maximum record size: 1 MiB
    big = b"x" * (2 * MIB)
    around = [(b"before", "a"), (big, "big"), (b"after", "b"), (b"y" * (MIB - 1), "c")]

    async def main() -> None:
        async with Producer(stream.name, client_config=stream.client_config) as producer:
            batch = await producer.put_many(around)
            assert [i for i, _ in batch.failures] == [1]
            failure = batch.failures[0][1]
            assert failure.error_code == VALIDATION_ERROR
            message = failure.error_message or ""
            assert "2097155 bytes" in message
            assert f"over the 1024 KiB (1048576 bytes) stream {stream.name!r} takes" in message
            assert "UpdateMaxRecordSize" in message
            assert "max-record-size-in-ki-b 2049" in message  # the KiB it needs
            with pytest.raises(RecordTooLargeError, match="1024 KiB"):
                await producer.put(big, "big")

    asyncio.run(main())
    written = deaggregate(stream.records(), stream.shards()[0]["ShardId"])
    assert sorted(r.data for r in written) == [b"after", b"before", b"y" * (MIB - 1)]


def test_a_running_producer_takes_larger_records_once_the_limit_is_raised(
    kinesis_stream: Any,
) -> None:
    stream = kinesis_stream(shards=1)
    record = b"z" * (2 * MIB)

    async def main() -> None:
        async with Producer(stream.name, client_config=stream.client_config) as producer:
            with pytest.raises(RecordTooLargeError):
                await producer.put(record, "k")
            await asyncio.to_thread(stream.update_max_record_size, 4096)
            result = await producer.put(record, "k")  # the same producer, no restart
            assert result.success
            assert producer.record_bytes == 4 * MIB

    asyncio.run(main())
    assert [r["Data"] for r in stream.records()] == [record]


def test_the_example_runs_against_the_local_emulators() -> None:
    example = Path(__file__).parents[2] / "examples" / "large_records.py"
    done = subprocess.run(
        [sys.executable, str(example)], capture_output=True, text=True, timeout=180, check=False
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "the stream takes records of up to 4 MiB"
    assert lines[1].startswith("refused: data plus partition key is 6291466 bytes, over the 4096")
    assert lines[2] == "wrote 7 records, the largest 3.0 MiB"
    assert lines[3] == "read back 7 payloads intact, the 6 MiB one through S3"
