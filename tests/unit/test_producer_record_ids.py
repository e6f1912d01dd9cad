"""Record ids in the producer (ProducerConfig.record_ids): every user record carries one in its
KPL aggregate's tags, the caller's or an automatic one, on every trip."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from kinesis_core.aggregation import (
    MAGIC,
    MAX_RECORD_ID_BYTES,
    RECORD_ID_TAG,
    AggregateBuilder,
    deaggregate,
    validate_record_id,
)
from kinesis_core.errors import ConfigurationError, ValidationError
from kinesis_core.producer import BlockingProducer, ProducerConfig, Record
from kinesis_core.producer.result import VALIDATION_ERROR
from kinesis_core.record_ids import split_counter
from kinesis_core.records import WireRecord
from tests.fakes.kinesis import Entry, FakeKinesis, client_error
from tests.helpers.producer import producer, records, run


def test_record_ids_are_off_by_default_and_need_aggregation() -> None:
    assert ProducerConfig().record_ids is False
    with pytest.raises(ConfigurationError, match="record_ids=True needs aggregation_enabled"):
        ProducerConfig(record_ids=True, aggregation_enabled=False)
    with pytest.raises(ConfigurationError, match="record_ids: must be a bool"):
        ProducerConfig(record_ids="yes")  # type: ignore[arg-type]


def test_without_record_ids_nothing_carries_an_id_and_one_record_goes_raw() -> None:
    fake = FakeKinesis(shards=2)

    async def main() -> Any:
        async with producer(fake) as p:
            await p.put(b"alone", "k")

    run(main)
    (read,) = fake.read_all()
    assert read.record_id is None
    assert not read.aggregated
    assert fake.requests[0][0]["Data"] == b"alone"


def test_automatic_ids_are_unique_and_count_per_shard_from_the_session() -> None:
    fake = FakeKinesis(shards=4)
    sent = records(300)

    async def main() -> Any:
        async with producer(fake, record_ids=True) as p:
            await p.put_many(sent)
            return p.session

    session = run(main)
    read = fake.read_all()
    assert sorted((r.data, r.partition_key) for r in read) == sorted(sent)
    ids = [r.record_id for r in read]
    assert None not in ids
    assert len(set(ids)) == len(ids)
    for shard_id in {r.shard_id for r in read}:
        split = [split_counter(r.record_id or "") for r in read if r.shard_id == shard_id]
        origins = {s[0] for s in split if s}
        assert origins == {f"{session}.{int(shard_id.rsplit('-', 1)[1])}"}
        assert sorted(s[1] for s in split if s) == list(range(len(split)))


def test_a_record_sent_alone_goes_as_a_one_record_aggregate_with_its_id() -> None:
    fake = FakeKinesis(shards=1)

    async def main() -> Any:
        async with producer(fake, record_ids=True) as p:
            return await p.put(b"alone", "k", record_id="order-17")

    result = run(main)
    assert result.success
    (entry,) = fake.requests[0]
    assert entry["Data"].startswith(MAGIC)
    (read,) = fake.read_all()
    assert (read.data, read.partition_key, read.record_id) == (b"alone", "k", "order-17")
    assert read.aggregated


def test_caller_ids_travel_with_put_and_put_many() -> None:
    fake = FakeKinesis(shards=2)

    async def main() -> Any:
        async with producer(fake, record_ids=True) as p:
            await p.put(b"a", "k1", record_id="id-a")
            await p.put_many(
                [
                    (b"b", "k2", None, "id-b"),
                    Record(b"c", "k3", record_id="id-c"),
                    Record(b"d", "k4"),
                    (b"e", "k5"),
                ]
            )
            return p.session

    session = run(main)
    by_data = {r.data: r.record_id for r in fake.read_all()}
    assert by_data[b"a"] == "id-a"
    assert by_data[b"b"] == "id-b"
    assert by_data[b"c"] == "id-c"
    assert (by_data[b"d"] or "").startswith(session)
    assert (by_data[b"e"] or "").startswith(session)


def test_caller_ids_shaped_origin_counter_travel_as_runs() -> None:
    """Derived ids (``ORIGIN:COUNTER``) of consecutive counters take one tag per run, read back
    as they were given; the reader gets the run (``id_run``) and deduplicates it at once."""
    fake = FakeKinesis(shards=1)
    given = [f"1700.3.abc:{n}" for n in range(50)] + ["1700.3.abc.7:1", "order-1", "x:01"]

    async def main() -> None:
        async with producer(fake, record_ids=True) as p:
            await p.put_many([(f"r{i}".encode(), "k", None, rid) for i, rid in enumerate(given)])

    run(main)
    read = fake.read_all()
    assert {id(r.id_run) for r in read[:50]} == {id(read[0].id_run)}  # one run, one tag
    assert read[0].id_run == ("1700.3.abc:", 0)
    assert [r.id_run for r in read[51:]] == ["order-1", "x:01"]  # not canonical: its own tag
    assert [r.record_id for r in read] == given


def test_the_blocking_producer_takes_caller_ids() -> None:
    fake = FakeKinesis(shards=2)
    config = ProducerConfig(record_max_buffered_time=0.01, record_ids=True)
    with BlockingProducer("stream", client=fake, producer_config=config) as blocking:
        assert blocking.put(b"a", "k1", record_id="id-a").success
        assert blocking.submit(b"b", "k2", record_id="id-b").result(5).success
        with pytest.raises(ValidationError, match="record_id"):
            blocking.put(b"c", "k3", record_id="")
    assert {r.data: r.record_id for r in fake.read_all()} == {b"a": "id-a", b"b": "id-b"}


@pytest.mark.parametrize(
    ("record_id", "message"),
    [
        (17, "record_id: must be a str, got int"),
        (b"bytes", "record_id: must be a str, got bytes"),
        ("", f"record_id: must be 1 to {MAX_RECORD_ID_BYTES} bytes in UTF-8, got 0"),
        (
            "é" * 65,
            f"record_id: must be 1 to {MAX_RECORD_ID_BYTES} bytes in UTF-8, got 130",
        ),
        ("\ud800", "record_id: must be encodable as UTF-8"),
    ],
)
def test_a_bad_caller_id_is_refused_naming_the_field_and_the_limit(
    record_id: Any, message: str
) -> None:
    with pytest.raises(ValidationError, match=message):
        validate_record_id(record_id)
    fake = FakeKinesis(shards=1)

    async def main() -> Any:
        async with producer(fake, record_ids=True) as p:
            with pytest.raises(ValidationError, match=message):
                await p.put(b"x", "k", record_id=record_id)
            return await p.put_many([(b"x", "k", None, record_id), (b"y", "k")])

    batch = run(main)
    ((index, failed),) = batch.failures
    assert index == 0
    assert failed.error_code == VALIDATION_ERROR
    assert message in (failed.error_message or "")
    assert [r.data for r in fake.read_all()] == [b"y"]


def test_a_caller_id_with_record_ids_off_is_refused() -> None:
    async def main() -> Any:
        async with producer(FakeKinesis(shards=1)) as p:
            await p.put(b"x", "k", record_id="id")

    with pytest.raises(ValidationError, match=r"record_id: .*needs ProducerConfig\(record_ids"):
        run(main)


def test_a_retried_record_keeps_its_id() -> None:
    """The answer of the first PutRecords is lost after the write (the duplicates a reader
    removes): the retry carries the very same ids."""
    fake = FakeKinesis(shards=2)

    def written_then_lost(entries: list[Entry]) -> dict[str, Any]:
        fake.accept(entries)
        raise client_error("InternalFailure", "answer lost")

    fake.script.append(written_then_lost)
    sent = records(40)

    async def main() -> Any:
        async with producer(fake, record_ids=True) as p:
            return await p.put_many(sent)

    batch = run(main)
    assert not batch.failures
    read = fake.read_all()
    assert len(read) == 2 * len(sent)
    ids = Counter(r.record_id for r in read)
    assert set(ids.values()) == {2}
    assert len(ids) == len(sent)
    by_id = {r.record_id: (r.data, r.partition_key) for r in read}
    assert sorted(by_id.values()) == sorted(sent)


def test_a_record_too_big_to_frame_within_the_stream_limit_goes_raw_without_its_id() -> None:
    fake = FakeKinesis(shards=1)
    fake.max_record_size_kib = 1024
    data = b"x" * (1024 * 1024 - 1)

    async def main() -> Any:
        async with producer(fake, record_ids=True) as p:
            return await p.put(data, "k", record_id="big")

    assert run(main).success
    (read,) = fake.read_all()
    assert (read.data, read.record_id, read.aggregated) == (data, None, False)


def test_the_tagged_builder_knows_its_exact_size() -> None:
    builder = AggregateBuilder(300)
    assert builder.try_add("k", None, b"a" * 50, "id-1")
    assert builder.size == len(builder.build()) + 1
    assert builder.data_size == 50
    while builder.try_add("k2", None, b"b" * 20, "id-2"):
        assert builder.size == len(builder.build()) + 1
    assert builder.size <= 300
    builder.clear()
    assert builder.try_add("k", None, b"raw")
    assert builder.build() == b"raw"


def test_a_first_tagged_record_over_max_size_is_refused_not_sent_raw() -> None:
    builder = AggregateBuilder(100)
    assert not builder.try_add("k", None, b"x" * 90, "an-id")
    assert builder.count == 0
    assert builder.try_add("k", None, b"x" * 40, "an-id")


def test_the_id_tag_is_the_documented_key() -> None:
    builder = AggregateBuilder()
    builder.try_add("k", None, b"x", "the-id")
    assert RECORD_ID_TAG == "kc.id"
    assert b"\x0a\x05kc.id\x12\x06the-id" in builder.build()
    (read,) = deaggregate([WireRecord("1", builder.build(), "k")], "shardId-0")
    assert read.record_id == "the-id"


def test_many_tagged_records_of_every_size_decode_as_they_were_added() -> None:
    """Key-table indexes over 127, data and ids whose lengths take two-byte varints."""
    builder = AggregateBuilder(1024 * 1024)
    added = []
    for i in range(400):
        record = (f"key-{i % 300}", None, bytes([i % 256]) * (i % 260), "é" * (i % 65) or "x")
        assert builder.try_add(*record)
        added.append(record)
        assert builder.size == len(builder.build()) + len("key-0")
    out = deaggregate([WireRecord("1", builder.build(), "key-0")], "shardId-0")
    assert [(r.partition_key, r.explicit_hash_key, r.data, r.record_id) for r in out] == added
    assert builder.data_size == sum(len(data) for _, _, data, _ in added)
