"""Record ids through a real server (moto): the producer's ids arrive in the aggregates' tags,
a record alone goes as a one-record aggregate, and aws-kinesis-agg reads every record of the
stream with its data and keys unchanged."""

from __future__ import annotations

import asyncio
import base64
import importlib
import sys
from typing import Any

import pytest

from kinesis_core.aggregation import MAGIC
from kinesis_core.producer import Producer, ProducerConfig
from kinesis_core.record_ids import split_counter
from tests.helpers.streams import user_records

pytestmark = pytest.mark.integration


def _aws_kinesis_agg_deaggregate(record: dict[str, Any]) -> list[tuple[str, bytes]]:
    saved = sys.path[:]  # aws-kinesis-agg puts its own directory on sys.path when imported
    try:
        deaggregator = importlib.import_module("aws_kinesis_agg.deaggregator")
    finally:
        sys.path[:] = saved
    return [
        (r["kinesis"]["partitionKey"], base64.b64decode(r["kinesis"]["data"]))
        for r in deaggregator.iter_deaggregate_records(record, data_format="Boto3")
    ]


def test_ids_arrive_in_the_tags_and_aws_kinesis_agg_reads_every_record(moto_stream: Any) -> None:
    stream = moto_stream(shards=2)
    sent = [(f"value-{i}".encode(), f"key-{i % 37}") for i in range(400)]

    async def main() -> str:
        async with Producer(
            stream.name,
            client_config=stream.client_config,
            producer_config=ProducerConfig(record_ids=True, record_max_buffered_time=0.05),
        ) as producer:
            (await producer.put_many(sent)).raise_for_failures()
            assert (await producer.put(b"alone", "alone-key", record_id="order-17")).success
            return producer.session

    session = asyncio.run(main())
    raw = stream.records()
    assert all(r["Data"].startswith(MAGIC) for r in raw)  # the record alone too
    ours = user_records(stream)
    theirs = [kr for r in raw for kr in _aws_kinesis_agg_deaggregate(r)]
    everything = [*sent, (b"alone", "alone-key")]
    assert sorted((r.data, r.partition_key) for r in ours) == sorted(everything)
    assert sorted((data, key) for key, data in theirs) == sorted(everything)
    ids = {r.data: r.record_id for r in ours}
    assert ids[b"alone"] == "order-17"
    automatic = [split_counter(ids[data] or "") for data, _ in sent]
    assert all(a is not None and a[0].startswith(f"{session}.") for a in automatic)
    assert len(set(ids.values())) == len(everything)
