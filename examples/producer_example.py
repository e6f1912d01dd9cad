"""Produce to Kinesis with the core producer, then read the records back as a KCL reader would.

Starts a moto server on 127.0.0.1 (a subprocess), makes a 4-shard stream, and shows:
``put`` (one record and its result), ``submit`` (many single records in flight),
``put_many`` (a batch, a bad record failing alone), the metrics, and the ``BlockingProducer``
for synchronous code. Run: ``.venv/bin/python examples/producer_example.py``.
"""

from __future__ import annotations

import asyncio
import json
from collections import defaultdict
from typing import Any

from kinesis_core import ClientConfig
from kinesis_core.aggregation import deaggregate
from kinesis_core.local.moto_server import MotoServer
from kinesis_core.local.streams import LocalStream
from kinesis_core.producer import (
    BalancedHashKeys,
    BlockingProducer,
    Producer,
    ProducerConfig,
    key_from,
)


async def produce(stream: str, client_config: ClientConfig) -> None:
    config = ProducerConfig(record_max_buffered_time=0.05)
    async with Producer(stream, client_config=client_config, producer_config=config) as producer:
        one = await producer.put(b"hello", partition_key="greeting")
        print(f"put: {one.shard_id} sequence {one.sequence_number} after {len(one.attempts)} try")

        futures = [
            await producer.submit(f"event {i}".encode(), f"user-{i % 7}") for i in range(100)
        ]
        results = await asyncio.gather(*futures)
        print(f"submit: {sum(r.success for r in results)} of {len(results)} written")

        orders = [{"order": i, "customer": f"c-{i % 25}"} for i in range(5000)]
        by_customer = key_from("customer")
        batch: list[Any] = [(json.dumps(o).encode(), by_customer(o)) for o in orders]
        batch.append((b"bad", ""))  # an empty partition key fails alone
        result = await producer.put_many(batch)
        print(f"put_many: {result.succeeded_count} written, failures: {result.failures[:1]}")

        metrics = producer.metrics()
        per_record = metrics.user_records_per_kinesis_record.mean or 0.0
        print(
            f"metrics: {metrics.user_records_put} user records in "
            f"{metrics.kinesis_records_put} Kinesis records ({per_record:.0f} per aggregate), "
            f"{metrics.put_records_requests} PutRecords calls"
        )


def produce_blocking(stream: str, client_config: ClientConfig) -> None:
    tenants = BalancedHashKeys()  # a few entities, evenly over the shards
    rows = [
        (f"reading {i}".encode(), f"tenant-{i % 4}", tenants(f"tenant-{i % 4}")) for i in range(400)
    ]
    with BlockingProducer(stream, client_config=client_config) as producer:
        result = producer.put_many(rows)
        result.raise_for_failures()
        print(f"blocking put_many: {len(result)} written to shards {sorted(set(result.shard_ids))}")


def read_back(stream: LocalStream) -> None:
    ranges = {
        s["ShardId"]: (
            int(s["HashKeyRange"]["StartingHashKey"]),
            int(s["HashKeyRange"]["EndingHashKey"]),
        )
        for s in stream.shards()
    }
    by_shard: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for record in stream.records():
        by_shard[record["ShardId"]].append(record)
    total = sum(
        len(deaggregate(records, shard_id, ranges[shard_id]))
        for shard_id, records in by_shard.items()
    )
    print(f"a KCL-style reader finds {total} user records")


def main() -> None:
    with MotoServer() as server:
        stream = server.create_stream("producer-example", shards=4)
        try:
            asyncio.run(produce(stream.name, stream.client_config))
            produce_blocking(stream.name, stream.client_config)
            read_back(stream)
        finally:
            stream.close()


if __name__ == "__main__":
    main()
