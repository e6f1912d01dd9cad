"""The core's codec hooks on the in-memory Kinesis: ``Producer(serializer=)`` serializes what
every put call is given, ``Consumer(deserializer=)`` decodes each batch before delivery, and
the records it delivers in their place are acked and checkpointed like the originals."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import Any

import msgspec

from kinesis_core.checkpoint import MemoryCheckpointStore
from kinesis_core.consumer import RecordBatch
from kinesis_core.producer import Producer, ProducerConfig
from kinesis_core.records import KinesisRecord
from tests.fakes.kinesis import FakeKinesis
from tests.helpers.consumer import consumer


class JsonSerializer:
    async def serialize(self, values: Sequence[Any]) -> list[bytes]:
        await asyncio.sleep(0)  # may ask a registry
        return [json.dumps(v).encode() for v in values]


class Decoded(KinesisRecord, gc=False):
    value: Any = None


class JsonDeserializer:
    async def deserialize(self, batch: RecordBatch) -> None:
        for i in range(len(batch)):
            record = batch.records[i]
            decoded = batch.records[i] = Decoded(*msgspec.structs.astuple(record))
            decoded.value = json.loads(record.data)


def test_values_in_values_out_acked_and_checkpointed() -> None:
    fake = FakeKinesis(shards=1)
    store = MemoryCheckpointStore()

    async def main() -> list[Any]:
        config = ProducerConfig(record_max_buffered_time=0.01)
        async with Producer(
            "stream", client=fake, producer_config=config, serializer=JsonSerializer()
        ) as producer:
            assert (await producer.put({"n": 0}, "k")).success
            assert (await (await producer.submit({"n": 1}, "k"))).success
            assert (await producer.put_many([({"n": 2}, "k"), ({"n": 3}, "k", 7)])).ok
            (await (await producer.submit_many([({"n": 4}, "k")]))).raise_for_failures()
        got: list[Any] = []
        async with consumer(fake, store, deserializer=JsonDeserializer()) as c:
            async for record in c:
                assert isinstance(record, Decoded)
                got.append(record.value)
                record.ack()
                if len(got) == 5:
                    break
            await c.checkpoint()
        return got

    assert asyncio.run(main()) == [{"n": n} for n in range(5)]
    assert [r.data for r in fake.read_all()] == [json.dumps({"n": n}).encode() for n in range(5)]
    (row,) = asyncio.run(store.list("default", "stream"))
    assert row.position == fake.read_all()[-1].position
