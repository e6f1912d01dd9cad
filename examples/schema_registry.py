"""Records a Java producer wrote with the AWS Glue Schema Registry, read and written in Python.

Starts moto's server on 127.0.0.1 (it serves Kinesis and the Glue Schema Registry on one
port), then:

* plays a Java producer: registers the Avro schema ``orders`` in the registry ``shop``, as
  the Java serde would, and writes records laid out byte by byte as AWS's Java serializer lays
  them out (version byte 3, compression byte 0 or 5, the schema version's 16-byte UUID, the
  Avro payload), with plain PutRecords, no library of ours;
* reads them with a Beam pipeline into Rows whose Beam schema comes from the Avro schema
  (``DecodeGlueRecords``), a record written without a schema going to the failed output;
* reads them with a Faust agent (a ``KinesisChannel`` with a Glue codec), which writes each
  order back enriched, as Avro records of a new schema, ``orders-enriched``, registered on
  first use (``auto_register=True``);
* reads the enriched records with the core Consumer and its deserializer.

Run: ``.venv/bin/python examples/schema_registry.py`` (about 15 s).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import struct
import tempfile
import uuid
import zlib
from pathlib import Path
from typing import Any

import apache_beam as beam
import boto3
import faust
from apache_beam.options.pipeline_options import PipelineOptions

from beam_kinesis import ReadFromKinesis
from beam_kinesis.schema_registry import DecodeGlueRecords
from faust_kinesis import KinesisChannel, KinesisSink
from faust_kinesis.schema_registry import glue_codec
from kinesis_core import create_botocore_client
from kinesis_core.checkpoint import MemoryCheckpointStore
from kinesis_core.consumer import TRIM_HORIZON, Consumer
from kinesis_core.local import (
    DUMMY_ACCESS_KEY_ID,
    DUMMY_SECRET_ACCESS_KEY,
    LOCAL_REGION,
    MotoServer,
)
from kinesis_schema_registry import (
    AvroSchema,
    GlueDeserializer,
    GlueSerializer,
    RegistryConfig,
    SchemaRegistry,
)

REGISTRY = "shop"
ORDER = {
    "type": "record",
    "name": "Order",
    "namespace": "com.example.shop",
    "fields": [
        {"name": "order_id", "type": "long"},
        {"name": "customer", "type": {"type": "string", "avro.java.string": "String"}},
        {"name": "amount", "type": "double"},
    ],
}
ENRICHED = {
    "type": "record",
    "name": "EnrichedOrder",
    "namespace": "com.example.shop",
    "fields": [*ORDER["fields"], {"name": "total_with_tax", "type": "double"}],
}
ORDERS = [{"order_id": i, "customer": f"c-{i % 3}", "amount": 10.0 * (i + 1)} for i in range(6)]


def java_style_record(version_id: str, order: dict[str, Any], compressed: bool) -> bytes:
    """What AWS's Java serializer writes: the 18-byte header, then the Avro binary payload
    (encoded here by hand: zig-zag varints, length-prefixed UTF-8, little-endian doubles)."""

    def long(n: int) -> bytes:
        n = (n << 1) ^ (n >> 63)
        out = bytearray()
        while n > 0x7F:
            out.append((n & 0x7F) | 0x80)
            n >>= 7
        out.append(n)
        return bytes(out)

    name = order["customer"].encode()
    payload = long(order["order_id"]) + long(len(name)) + name + struct.pack("<d", order["amount"])
    if compressed:
        payload = zlib.compress(payload)
    return bytes((3, 5 if compressed else 0)) + uuid.UUID(version_id).bytes + payload


def play_java_producer(moto: MotoServer) -> None:
    glue = boto3.client(
        "glue",
        endpoint_url=moto.endpoint_url,
        region_name=LOCAL_REGION,
        aws_access_key_id=DUMMY_ACCESS_KEY_ID,
        aws_secret_access_key=DUMMY_SECRET_ACCESS_KEY,
    )
    glue.create_registry(RegistryName=REGISTRY)
    version_id = glue.create_schema(
        RegistryId={"RegistryName": REGISTRY},
        SchemaName="orders",
        DataFormat="AVRO",
        Compatibility="BACKWARD",
        SchemaDefinition=json.dumps(ORDER),
    )["SchemaVersionId"]
    kinesis = create_botocore_client(moto.client_config(), "kinesis")
    records = [
        {"Data": java_style_record(version_id, o, compressed=i % 2 == 1), "PartitionKey": str(i)}
        for i, o in enumerate(ORDERS)
    ]
    records.append({"Data": b"written without a schema", "PartitionKey": "x"})
    assert kinesis.put_records(StreamName="orders", Records=records)["FailedRecordCount"] == 0
    kinesis.close()
    print(f"Java-style producer: {len(records)} records, schema version {version_id}")


def read_with_beam(moto: MotoServer, config: RegistryConfig) -> None:
    options = PipelineOptions(
        [f"--kinesis_endpoint_url={moto.endpoint_url}", f"--kinesis_region_name={LOCAL_REGION}"]
    )
    with beam.Pipeline(runner="DirectRunner", options=options) as p:
        records = p | ReadFromKinesis(
            "orders", initial_position=TRIM_HORIZON, idle_interval=0.2, stop_when_caught_up=True
        )
        decoded = records | DecodeGlueRecords(config, reader_schema=AvroSchema(ORDER))
        _ = (
            decoded.rows
            | beam.Select("customer", "amount")
            | beam.GroupBy("customer").aggregate_field("amount", sum, "total")
            | beam.Map(lambda row: print(f"Beam: {row.customer} spent {row.total:.2f}"))
        )
        _ = decoded.failed | beam.Map(lambda f: print(f"Beam, failed output: {f.reason[:60]}"))


async def enrich_with_faust(moto: MotoServer, config: RegistryConfig, datadir: Path) -> None:
    registry = SchemaRegistry(config)
    app = faust.App("orders-enricher", web_enabled=False, datadir=str(datadir))
    app.boot_strategy.enable_kafka = False
    client_config = moto.client_config()
    orders = KinesisChannel(
        app,
        "orders",
        client_config=client_config,
        checkpoint_store=MemoryCheckpointStore(),
        initial_position="TRIM_HORIZON",
        value_serializer=glue_codec(deserializer=GlueDeserializer(registry)),
    )
    enriched = KinesisSink(
        app,
        "orders-enriched",
        partition_key="customer",
        client_config=client_config,
        value_serializer=glue_codec(
            serializer=GlueSerializer(registry, AvroSchema(ENRICHED), "orders-enriched")
        ),
    )
    done = asyncio.Event()
    seen: list[Any] = []

    @app.agent(orders, sink=[enriched])
    async def enrich(values: Any) -> Any:
        async for order in values:
            seen.append(order)
            if len(seen) == len(ORDERS) + 1:
                done.set()
            if isinstance(order, bytes):  # not in the registry's format: passed through
                print(f"Faust: passed through undecoded: {order!r}")
                continue
            yield {**order, "total_with_tax": round(order["amount"] * 1.2, 2)}

    await app.start()
    try:
        await asyncio.wait_for(done.wait(), 30)
    finally:  # stopping the app flushes the sink's writes
        await app.stop()
        registry.close()
    print(f"Faust: {len(seen)} records read, {len(ORDERS)} enriched and written back")


async def read_enriched(moto: MotoServer, config: RegistryConfig) -> None:
    async with (
        SchemaRegistry(config) as registry,
        Consumer(
            "orders-enriched",
            client_config=moto.client_config(),
            checkpoint_store=MemoryCheckpointStore(),
            initial_position=TRIM_HORIZON,
            idle_interval=0.2,
            deserializer=GlueDeserializer(registry),
        ) as consumer,
    ):
        got = []
        async for record in consumer:
            got.append(record.value)
            record.ack()
            if len(got) == len(ORDERS):
                break
    for value in sorted(got, key=lambda v: v["order_id"]):
        print(f"Consumer: {value}")


def main() -> None:
    logging.basicConfig(level=logging.WARNING)
    with MotoServer() as moto, tempfile.TemporaryDirectory() as datadir:
        os.environ.update(moto.client_environment())  # Beam's workers: dummy credentials
        moto.create_stream("orders", shards=1)
        moto.create_stream("orders-enriched", shards=1)
        config = RegistryConfig(
            registry_name=REGISTRY,
            client_config=moto.client_config(),
            endpoint_url=moto.endpoint_url,  # moto serves Glue too
            auto_register=True,
        )
        play_java_producer(moto)
        read_with_beam(moto, config)
        asyncio.run(enrich_with_faust(moto, config, Path(datadir)))
        asyncio.run(read_enriched(moto, config))


if __name__ == "__main__":
    main()
