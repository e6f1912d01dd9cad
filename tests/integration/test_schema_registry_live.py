"""The Glue Schema Registry end to end: records on kinesis-mock, the registry on moto's server.

Avro, JSON Schema and Protobuf records, zlib-compressed ones too, round-trip through the core
Producer and Consumer, through Faust (a sink and a channel with Glue codecs) and through Beam
(WriteToKinesis with a Glue serializer, DecodeGlueRecords into Rows). Each stream also holds a
record that is not in the format and one whose schema was deleted from the registry: nothing
is lost, each is counted and reported (passed through, or Beam's failed output). The PyPI
``aws-glue-schema-registry`` serde decodes our records and we decode its; throttled registry
calls are retried (fault proxy), and a compatibility refusal names the schema and its rule
(moto does not check compatibility: the refusal is put into its answer)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import apache_beam as beam
import pytest
from aiobotocore.session import AioSession
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing.util import assert_that, equal_to
from apache_beam.yaml.yaml_transform import expand_pipeline
from faust_apps import kafka_free_app, wait_until

from beam_kinesis import ReadFromKinesis, WriteToKinesis
from beam_kinesis.schema_registry import DecodeGlueRecords, GlueRowSerializer
from faust_kinesis import KinesisChannel, KinesisSink
from faust_kinesis.schema_registry import glue_codec
from kinesis_core.checkpoint import MemoryCheckpointStore
from kinesis_core.consumer import TRIM_HORIZON, Consumer, ConsumerConfig
from kinesis_core.local import DUMMY_ACCESS_KEY_ID, DUMMY_SECRET_ACCESS_KEY, LocalStream
from kinesis_core.local.faults import FaultConfig, FaultKind, FaultRule
from kinesis_core.producer import Producer
from kinesis_schema_registry import (
    AvroSchema,
    GlueDeserializer,
    GlueRecord,
    GlueSerializer,
    JsonSchema,
    ProtobufSchema,
    RegistryConfig,
    SchemaCompatibilityError,
    SchemaRegistry,
)
from tests.helpers.beam import pipeline
from tests.helpers.glue import (
    AVRO_USER,
    JSON_USER,
    PROTO_USER,
    USER,
    ProtoUser,
    create_registry,
    glue_client,
)

pytestmark = pytest.mark.integration

AVRO_V2 = AVRO_USER.replace("]}", ',{"name":"email","type":["null","string"],"default":null}]}')
PLAIN = b"a record written without a schema"


def registry_config(moto_server: Any, name: str, **options: Any) -> RegistryConfig:
    create_registry(moto_server.endpoint_url, name)
    return RegistryConfig(
        registry_name=name,
        client_config=moto_server.client_config(),
        endpoint_url=moto_server.endpoint_url,
        auto_register=True,
        **options,
    )


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def write_mixed(stream: LocalStream, config: RegistryConfig, moto_server: Any) -> None:
    """Through the core Producer with serializers: Avro (plain and zlib), JSON (zlib) and
    Protobuf records, one record without a schema, and one of a schema deleted afterwards."""
    async with SchemaRegistry(config) as registry:
        avro = GlueSerializer(registry, AvroSchema(AVRO_USER), "users")
        async with Producer(stream.name, client_config=stream.client_config, serializer=avro) as p:
            (
                await p.put_many([(USER, "k1"), ({"name": "Bo", "age": 4}, "k2")])
            ).raise_for_failures()
        proto = GlueSerializer(registry, ProtobufSchema(ProtoUser, PROTO_USER), "users-proto")
        async with Producer(stream.name, client_config=stream.client_config, serializer=proto) as p:
            assert (await p.put(ProtoUser(name="Cy", age=5), "k3")).success
        zlib_avro = GlueSerializer(registry, AvroSchema(AVRO_V2), "users", compressed=True)
        json = GlueSerializer(registry, JsonSchema(JSON_USER), "users-json", compressed=True)
        gone = GlueSerializer(registry, AvroSchema(AVRO_USER), "users-gone")
        raw = [
            (await zlib_avro.serialize([{"name": "Di", "age": 6, "email": "d@x"}]))[0],
            (await json.serialize([{"name": "Ed", "age": 7}]))[0],
            PLAIN,
            (await gone.serialize([{"name": "Fay", "age": 8}]))[0],
        ]
        async with Producer(stream.name, client_config=stream.client_config) as p:
            (await p.put_many([(data, f"r{i}") for i, data in enumerate(raw)])).raise_for_failures()
    glue = glue_client(moto_server.endpoint_url)
    glue.delete_schema(SchemaId={"RegistryName": config.registry_name, "SchemaName": "users-gone"})


EXPECTED = [
    USER,
    {"name": "Bo", "age": 4},
    ProtoUser(name="Cy", age=5),
    {"name": "Di", "age": 6, "email": "d@x"},
    {"name": "Ed", "age": 7},
]


def test_producer_to_consumer_every_format_mixed_and_deleted(
    kinesis_stream: Any, moto_server: Any
) -> None:
    stream = kinesis_stream(shards=1)
    config = registry_config(moto_server, unique("core"))

    async def main() -> tuple[list[GlueRecord], GlueDeserializer]:
        await write_mixed(stream, config, moto_server)
        async with SchemaRegistry(config) as registry:  # a new process: nothing cached
            deserializer = GlueDeserializer(registry, protobuf={"users-proto": ProtoUser})
            got: list[GlueRecord] = []
            async with Consumer(
                stream.name,
                client_config=stream.client_config,
                checkpoint_store=MemoryCheckpointStore(),
                consumer_config=ConsumerConfig(initial_position=TRIM_HORIZON, idle_interval=0.2),
                deserializer=deserializer,
            ) as consumer:
                async for record in consumer:
                    assert isinstance(record, GlueRecord)
                    got.append(record)
                    record.ack()
                    if len(got) == 7:
                        break
            # One GetSchemaVersion per version (four, and the deleted one), none per record.
            assert registry.calls == {"get_schema_version": 5}
        return got, deserializer

    got, deserializer = asyncio.run(asyncio.wait_for(main(), 120))
    assert [r.value for r in got[:5]] == EXPECTED
    assert [r.schema_version.data_format.value for r in got[:5]] == [  # type: ignore[union-attr]
        "AVRO",
        "AVRO",
        "PROTOBUF",
        "AVRO",
        "JSON",
    ]
    assert (got[5].value, got[5].failure and got[5].failure.split(":")[0]) == (PLAIN, "not_glue")
    assert got[6].value == got[6].data
    assert (got[6].failure or "").startswith("unavailable")
    stats = deserializer.stats
    assert (stats.decoded, stats.not_glue, stats.unavailable) == (5, 1, 1)


def test_faust_sink_and_channel_with_glue_codecs(
    kinesis_stream: Any, moto_server: Any, tmp_path: Path
) -> None:
    stream = kinesis_stream(shards=1)
    config = registry_config(moto_server, unique("faust"))

    async def main() -> tuple[list[Any], GlueDeserializer]:
        await write_mixed(stream, config, moto_server)
        registry = SchemaRegistry(config)
        deserializer = GlueDeserializer(registry, protobuf={"users-proto": ProtoUser})
        writer = GlueSerializer(registry, AvroSchema(AVRO_USER), "users", compressed=True)
        app = kafka_free_app("gsr", tmp_path / "data")
        feed = app.channel()
        sink = KinesisSink(
            app,
            stream.name,
            partition_key="name",
            value_serializer=glue_codec(serializer=writer),
            client_config=stream.client_config,
        )
        channel = KinesisChannel(
            app,
            stream.name,
            client_config=stream.client_config,
            checkpoint_store=MemoryCheckpointStore(),
            initial_position="TRIM_HORIZON",
            value_serializer=glue_codec(deserializer=deserializer),
        )
        got: list[Any] = []

        @app.agent(feed, sink=[sink])
        async def write(values: Any) -> Any:
            async for value in values:
                yield value

        @app.agent(channel)
        async def read(values: Any) -> None:
            async for value in values:
                got.append(value)

        await app.start()
        try:
            await feed.send(value={"name": "Gus", "age": 9})
            await wait_until(lambda: len(got) == 8, 60, "every record")
        finally:
            await app.stop()
            registry.close()
        return got, deserializer

    got, deserializer = asyncio.run(main())
    assert got[:5] == EXPECTED
    assert got[5] == PLAIN  # passed through as the KCL does: the bytes, unchanged
    assert isinstance(got[6], bytes)  # the deleted schema's record, undecoded
    assert got[7] == {"name": "Gus", "age": 9}
    assert (deserializer.stats.decoded, deserializer.stats.passed_through) == (6, 2)


def test_beam_writes_rows_and_reads_rows_with_the_schema_derived(
    kinesis_stream: Any, moto_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", DUMMY_ACCESS_KEY_ID)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", DUMMY_SECRET_ACCESS_KEY)
    stream = kinesis_stream(shards=1)
    config = registry_config(moto_server, unique("beam"))
    asyncio.run(write_mixed(stream, config, moto_server))

    with pipeline(stream, "in_memory") as p:
        rows = p | beam.Create([beam.Row(name="Hal", age=10)])
        _ = rows | WriteToKinesis(
            stream.name,
            partition_key="name",
            serializer=GlueRowSerializer(config, AvroSchema(AVRO_USER), "users", compressed=True),
        )

    reader = AvroSchema(AVRO_V2)
    with pipeline(stream, "in_memory") as p:
        records = p | ReadFromKinesis(
            stream.name, initial_position=TRIM_HORIZON, idle_interval=0.2, stop_when_caught_up=True
        )
        decoded = records | DecodeGlueRecords(config, reader_schema=reader, protobuf=ProtoUser)
        assert [name for name, _ in decoded.rows.element_type._fields] == ["name", "age", "email"]
        named = decoded.rows | beam.Select("name", "email") | beam.Map(tuple)
        assert_that(
            named,
            equal_to(
                [
                    ("Ann", None),
                    ("Bo", None),
                    ("Cy", None),
                    ("Di", "d@x"),
                    ("Ed", None),
                    ("Hal", None),
                ]
            ),
            label="rows",
        )
        failed = decoded.failed | beam.Map(
            lambda f: (f.record.data == PLAIN, f.reason.split(":")[0])
        )
        assert_that(failed, equal_to([(True, "not_glue"), (False, "unavailable")]), label="failed")


def test_beam_yaml_decodes_into_rows_and_names_what_it_cannot(
    moto_stream: Any, moto_server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", DUMMY_ACCESS_KEY_ID)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", DUMMY_SECRET_ACCESS_KEY)
    stream: LocalStream = moto_stream(shards=1)
    config = registry_config(moto_server, unique("yaml"))

    async def write() -> None:
        async with SchemaRegistry(config) as registry:
            users = GlueSerializer(registry, JsonSchema(JSON_USER), "users", compressed=True)
            async with Producer(
                stream.name, client_config=stream.client_config, serializer=users
            ) as p:
                assert (await p.put({"name": "Ann", "age": 30}, "k")).success
        async with Producer(stream.name, client_config=stream.client_config) as p:
            assert (await p.put(PLAIN, "k")).success

    asyncio.run(write())
    spec = f"""
pipeline:
  transforms:
    - type: ReadFromKinesis
      config:
        stream: {stream.name}
        initial_position: TRIM_HORIZON
        stop_when_caught_up: true
    - type: DecodeGlueRecords
      input: ReadFromKinesis
      config:
        registry_name: {config.registry_name}
        endpoint_url: {moto_server.endpoint_url}
        region_name: {stream.client_config.region_name}
        data_format: JSON
        reader_schema: '{JSON_USER}'
        error_handling: {{output: bad}}
    - type: MapToFields
      name: Older
      input: DecodeGlueRecords
      config:
        language: python
        fields:
          name: name
          next_age: age + 1
    - type: WriteToJson
      input: Older
      config:
        path: {tmp_path / "rows"}
    - type: MapToFields
      name: Bad
      input: DecodeGlueRecords.bad
      config:
        language: python
        fields:
          why: msg
    - type: WriteToJson
      input: Bad
      config:
        path: {tmp_path / "bad"}
providers:
  - type: python
    config: {{}}
    transforms:
      ReadFromKinesis: beam_kinesis.yaml_provider.ReadFromKinesis
      DecodeGlueRecords: beam_kinesis.yaml_provider.DecodeGlueRecords
"""
    options = PipelineOptions(
        [
            f"--kinesis_endpoint_url={stream.endpoint_url}",
            f"--kinesis_region_name={stream.client_config.region_name}",
        ]
    )
    with beam.Pipeline(runner=FnApiRunner(), options=options) as p:
        expand_pipeline(p, spec)

    def lines(prefix: str) -> list[Any]:
        return [
            json.loads(x) for f in tmp_path.glob(f"{prefix}*") for x in f.read_text().splitlines()
        ]

    assert lines("rows") == [{"name": "Ann", "next_age": 31}]
    (bad,) = lines("bad")
    assert bad["why"].startswith("not_glue: header version byte is 97, not 3")


@pytest.mark.peer("aws-glue-schema-registry")
def test_the_pypi_serde_decodes_ours_and_we_decode_its(moto_server: Any) -> None:
    from aws_schema_registry import DataAndSchema, SchemaRegistryClient
    from aws_schema_registry.avro import AvroSchema as PeerAvro
    from aws_schema_registry.jsonschema import JsonSchema as PeerJson
    from aws_schema_registry.serde import KafkaDeserializer, KafkaSerializer

    name = unique("peer")
    config = registry_config(moto_server, name)
    glue = glue_client(moto_server.endpoint_url)
    peer_client = SchemaRegistryClient(glue, registry_name=name, wait_interval_seconds=0.01)
    theirs = KafkaSerializer(peer_client)
    their_reader = KafkaDeserializer(peer_client)
    registry = SchemaRegistry(config)
    try:
        ours = GlueDeserializer(registry)
        for peer_schema in (PeerAvro(AVRO_USER), PeerJson(JSON_USER)):
            topic = f"theirs-{peer_schema.data_format}"  # the schema's name
            data = theirs.serialize(topic, DataAndSchema(USER, peer_schema))
            assert ours.loads(data) == USER
        for schema in (AvroSchema(AVRO_USER), JsonSchema(JSON_USER)):
            for compressed in (False, True):
                ours_name = f"ours-{schema.data_format.value}"
                serializer = GlueSerializer(registry, schema, ours_name, compressed=compressed)
                assert their_reader.deserialize(ours_name, serializer.dumps(USER)).data == USER
        assert ours.stats.decoded == 2
    finally:
        registry.close()


def test_throttled_calls_are_retried_and_refusals_name_schema_and_rule(
    moto_server: Any, fault_proxy: Any
) -> None:
    name = unique("faults")
    config = registry_config(moto_server, name)
    throttle = FaultRule(FaultKind.THROTTLE, 0.5, frozenset({"GetSchemaVersion"}))
    proxy = fault_proxy(moto_server.endpoint_url, FaultConfig(rules=(throttle,)), seed=3)

    async def main() -> None:
        async with SchemaRegistry(config) as registry:
            first = await GlueSerializer(registry, AvroSchema(AVRO_USER), "users").prepare()
        through_proxy = RegistryConfig(
            registry_name=name,
            client_config=moto_server.client_config(),
            endpoint_url=proxy.endpoint_url,
        )
        for _ in range(4):  # four processes' first looks, some throttled
            async with SchemaRegistry(through_proxy) as registry:
                assert (await registry.version(first.version_id)).definition == AVRO_USER
        assert proxy.stats().total(FaultKind.THROTTLE) > 0

        session = AioSession()
        async with session.create_client(
            "glue",
            region_name="us-east-1",
            endpoint_url=moto_server.endpoint_url,
            aws_access_key_id=DUMMY_ACCESS_KEY_ID,
            aws_secret_access_key=DUMMY_SECRET_ACCESS_KEY,
        ) as client:

            def refuse(parsed: dict[str, Any], **_: Any) -> None:
                parsed["Status"] = "FAILURE"  # what Glue says of an incompatible version

            client.meta.events.register("after-call.glue.RegisterSchemaVersion", refuse)
            breaking = AvroSchema(AVRO_USER.replace('"int"', '"string"'))
            registry = SchemaRegistry(config, client=client)
            with pytest.raises(SchemaCompatibilityError) as caught:
                await GlueSerializer(registry, breaking, "users").prepare()
        assert (caught.value.schema_name, caught.value.compatibility) == ("users", "BACKWARD")
        assert f"schema {name}/users" in str(caught.value)
        assert "breaks its compatibility rule BACKWARD" in str(caught.value)

    asyncio.run(asyncio.wait_for(main(), 60))


def test_the_example_runs() -> None:
    example = Path(__file__).parents[2] / "examples" / "schema_registry.py"
    done = subprocess.run(
        [sys.executable, str(example)], capture_output=True, text=True, timeout=180, check=False
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("Java-style producer: 7 records, schema version ")
    assert sorted(line for line in lines if line.startswith("Beam")) == [
        "Beam, failed output: not_glue: header version byte is 119, not 3",
        "Beam: c-0 spent 50.00",
        "Beam: c-1 spent 70.00",
        "Beam: c-2 spent 90.00",
    ]
    assert "Faust: 7 records read, 6 enriched and written back" in lines
    consumed = [line for line in lines if line.startswith("Consumer: ")]
    assert consumed[-1] == (
        "Consumer: {'order_id': 5, 'customer': 'c-2', 'amount': 60.0, 'total_with_tax': 72.0}"
    )
    assert len(consumed) == 6
