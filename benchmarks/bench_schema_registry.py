"""Glue Schema Registry serde: kinesis_schema_registry against the PyPI aws-glue-schema-registry
1.1.3 (the Kafka serde AWS's Python users have), the registry on moto's server.

Workload: records of an Avro schema of six fields (a long, strings, an optional string, a
double, an array of strings), about 50 bytes of Avro each, in three schema versions (the
second and third add optional fields), written a third with each version.

* serialize+deserialize: each record serialized by the serializer of its version, then the
  whole list deserialized: ours ``GlueSerializer.dumps`` and ``GlueDeserializer.loads``,
  theirs ``KafkaSerializer.serialize`` and ``KafkaDeserializer.deserialize`` (``.data``). The
  registry was asked before the timed runs (both cache every version).
* registry calls: the calls a fresh deserializer (a new process) makes to the registry to read
  all the records, per subject: the target is one per schema version.
"""

from __future__ import annotations

import json
import logging
import os
import random
from collections import Counter
from typing import Any

import boto3
from aws_schema_registry import DataAndSchema, SchemaRegistryClient
from aws_schema_registry.avro import AvroSchema as PeerAvroSchema
from aws_schema_registry.serde import KafkaDeserializer, KafkaSerializer

from benchmarks._table import Row, best_rates
from kinesis_core.local import LOCAL_REGION, MotoServer
from kinesis_schema_registry import (
    AvroSchema,
    GlueDeserializer,
    GlueSerializer,
    RegistryConfig,
    SchemaRegistry,
)

OURS = "kinesis_schema_registry"
PEER = "aws-glue-schema-registry"
VERSIONS = 3
REGISTRY = "bench"
SCHEMA = "orders"

_FIELDS: list[dict[str, Any]] = [
    {"name": "id", "type": "long"},
    {"name": "customer", "type": "string"},
    {"name": "email", "type": ["null", "string"], "default": None},
    {"name": "amount", "type": "double"},
    {"name": "currency", "type": "string"},
    {"name": "tags", "type": {"type": "array", "items": "string"}},
]


def _definition(version: int) -> str:
    extra = [
        {"name": f"note{i}", "type": ["null", "string"], "default": None} for i in range(version)
    ]
    return json.dumps({"type": "record", "name": "Order", "fields": _FIELDS + extra})


def _values(count: int) -> list[tuple[int, dict[str, Any]]]:
    rng = random.Random(7)
    out = []
    for i in range(count):
        version = i % VERSIONS
        value: dict[str, Any] = {
            "id": i,
            "customer": f"customer-{rng.randrange(10_000):05d}",
            "email": None if i % 2 else f"user{i}@example.com",
            "amount": round(rng.random() * 1000, 2),
            "currency": "EUR",
            "tags": ["web", "promo"][: i % 3],
        }
        value.update({f"note{n}": None for n in range(version)})
        out.append((version, value))
    return out


class _Counted:
    """A boto3 client whose calls are counted (the peer's registry calls)."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.calls: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.client, name)

        def call(**kwargs: Any) -> Any:
            self.calls[name] += 1
            return method(**kwargs)

        return call


def run(quick: bool) -> list[Row]:
    count = 3_000 if quick else 100_000
    repeat = 2 if quick else 5
    logging.getLogger("aws_schema_registry").setLevel(logging.ERROR)
    values = _values(count)
    with MotoServer() as moto:
        glue = boto3.client(
            "glue",
            endpoint_url=moto.endpoint_url,
            region_name=LOCAL_REGION,
            aws_access_key_id=os.environ.get("AWS_ACCESS_KEY_ID", "testing"),
            aws_secret_access_key=os.environ.get("AWS_SECRET_ACCESS_KEY", "testing"),
        )
        glue.create_registry(RegistryName=REGISTRY)
        config = RegistryConfig(
            registry_name=REGISTRY,
            client_config=moto.client_config(),
            endpoint_url=moto.endpoint_url,
            auto_register=True,
        )
        writer = SchemaRegistry(config)
        ours = [GlueSerializer(writer, AvroSchema(_definition(v)), SCHEMA) for v in range(VERSIONS)]
        records = [ours[version].dumps(value) for version, value in values]

        reader = SchemaRegistry(config)
        deserializer = GlueDeserializer(reader)
        decoded = [deserializer.loads(r) for r in records]
        assert decoded == [value for _, value in values]
        our_calls = sum(reader.calls.values())

        counted = _Counted(glue)
        peer_client = SchemaRegistryClient(counted, registry_name=REGISTRY)
        peer_writer = KafkaSerializer(peer_client)
        peer_schemas = [PeerAvroSchema(_definition(v)) for v in range(VERSIONS)]
        peer_records = [
            peer_writer.serialize(SCHEMA, DataAndSchema(value, peer_schemas[version]))
            for version, value in values
        ]
        counted.calls.clear()
        peer_reader = KafkaDeserializer(peer_client)
        assert [peer_reader.deserialize(SCHEMA, r).data for r in records] == decoded
        peer_calls = sum(counted.calls.values())

        fresh = GlueDeserializer(reader)
        fresh_peer = KafkaDeserializer(peer_client)

        def ours_round_trip() -> None:
            loads = fresh.loads
            for record in [ours[version].dumps(value) for version, value in values]:
                loads(record)

        def peer_round_trip() -> None:
            serialize = peer_writer.serialize
            deserialize = fresh_peer.deserialize
            for record in [
                serialize(SCHEMA, DataAndSchema(value, peer_schemas[version]))
                for version, value in values
            ]:
                deserialize(SCHEMA, record)

        assert len(peer_records) == len(records)
        rates = best_rates({OURS: ours_round_trip, PEER: peer_round_trip}, count, repeat=repeat)
        writer.close()
        reader.close()
    group = "schema registry: Avro serialize+deserialize"
    calls = f"schema registry: registry calls to read {count:,} records of {VERSIONS} versions"
    return [
        Row(group, OURS, rates[OURS], "records/s", baseline=PEER, target=2.0, note="3 versions"),
        Row(group, PEER, rates[PEER], "records/s", note="KafkaSerializer/KafkaDeserializer"),
        Row(calls, OURS, float(our_calls), "calls", maximum=float(VERSIONS), note="per process"),
        Row(calls, PEER, float(peer_calls), "calls", note="its lru_cache, per deserializer"),
    ]
