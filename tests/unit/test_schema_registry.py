"""kinesis_schema_registry without a server: golden records both ways, the header's checks,
Protobuf's message index, the registry client's caches, retries, registration and refusals
(on an in-memory Glue), the deserializer's pass-through, and the PyPI peer's codec on our
bytes and ours on its bytes. The registry on moto's server, through Kinesis, is in
tests/integration/test_schema_registry_live.py."""

from __future__ import annotations

import asyncio
import logging
import uuid
import zlib
from typing import Any

import pytest
from aws_schema_registry import codec as peer_codec
from aws_schema_registry.avro import AvroSchema as PeerAvroSchema

from kinesis_core.aws.retry import RetryPolicy
from kinesis_core.errors import ValidationError
from kinesis_schema_registry import (
    AvroSchema,
    GlueDeserializer,
    GlueSerializer,
    JsonSchema,
    NotGlueRecordError,
    ProtobufSchema,
    RegistryConfig,
    SchemaCompatibilityError,
    SchemaNotRegisteredError,
    SchemaRegistry,
    SchemaVersion,
    wire,
)
from kinesis_schema_registry.formats import DataFormat
from tests.fakes.glue import FakeGlue, client_error
from tests.helpers.glue import (
    AVRO_GOLDEN,
    AVRO_USER,
    AVRO_ZLIB_GOLDEN,
    JSON_GOLDEN,
    JSON_USER,
    MESSAGES,
    PROTO_GOLDEN,
    PROTO_USER,
    USER,
    VERSION_BYTES,
    VERSION_ID,
    ProtoUser,
)

FAST = RetryPolicy(base=0.001, cap=0.01, attempts=5)


def registry_with(fake: FakeGlue, **options: Any) -> SchemaRegistry:
    return SchemaRegistry(RegistryConfig(registry_name="r", retry=FAST, **options), client=fake)


def known(version_id: uuid.UUID, data_format: DataFormat, definition: str) -> SchemaRegistry:
    """A registry that already knows one version (no call needed)."""
    fake = FakeGlue()
    fake.schemas[("r", "users")] = {"format": data_format.value, "compatibility": "BACKWARD"}
    fake.versions[str(version_id)] = {
        "SchemaVersionId": str(version_id),
        "SchemaDefinition": definition,
        "DataFormat": data_format.value,
        "SchemaArn": "arn:aws:glue:us-east-1:123456789012:schema/r/users",
        "VersionNumber": 1,
        "Status": "AVAILABLE",
    }
    fake.schemas[("r", "users")]["versions"] = [fake.versions[str(version_id)]]
    return registry_with(fake)


# -- golden records, both ways -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("schema", "value", "golden", "compressed"),
    [
        (AvroSchema(AVRO_USER), USER, AVRO_GOLDEN, False),
        (JsonSchema(JSON_USER), USER, JSON_GOLDEN, False),
        (ProtobufSchema(ProtoUser, PROTO_USER), ProtoUser(name="Ann", age=30), PROTO_GOLDEN, False),
        (AvroSchema(AVRO_USER), USER, AVRO_ZLIB_GOLDEN, True),
    ],
    ids=["avro", "json", "protobuf", "avro-zlib"],
)
def test_golden_records_both_ways(schema: Any, value: Any, golden: bytes, compressed: bool) -> None:
    registry = known(VERSION_ID, schema.data_format, schema.definition)

    async def main() -> tuple[bytes, Any]:
        serializer = GlueSerializer(registry, schema, "users", compressed=compressed)
        (ours,) = await GlueSerializer.serialize(serializer, [value])
        deserializer = GlueDeserializer(registry, protobuf=ProtoUser)
        return ours, (await deserializer.decode_async(golden)).value

    ours, decoded = asyncio.run(main())
    if compressed:  # a zlib stream's bytes depend on the compressor: compare what it holds
        assert ours[: wire.HEADER_SIZE] == golden[: wire.HEADER_SIZE]
        assert zlib.decompress(ours[wire.HEADER_SIZE :]) == zlib.decompress(
            golden[wire.HEADER_SIZE :]
        )
    else:
        assert ours == golden
    assert decoded == value


def test_the_header_is_checked_field_by_field() -> None:
    assert wire.decode(AVRO_GOLDEN) == (VERSION_ID, bytes.fromhex("06416e6e3c"))
    assert wire.split(AVRO_ZLIB_GOLDEN) == (VERSION_BYTES, bytes.fromhex("06416e6e3c"))
    with pytest.raises(NotGlueRecordError, match="shorter than the 18-byte header"):
        wire.split(b"\x03\x00abc")
    with pytest.raises(NotGlueRecordError, match="header version byte is 0, not 3"):
        wire.split(b"\x00" * 20)
    with pytest.raises(NotGlueRecordError, match=r"compression byte is 1, not 0 \(none\) or 5"):
        wire.split(b"\x03\x01" + bytes(18))
    with pytest.raises(NotGlueRecordError, match="does not decompress"):
        wire.split(b"\x03\x05" + bytes(18))


def test_protobuf_message_index_is_javas_order() -> None:
    # MessageIndexFinder's documented example: B = 0, B.A = 1, B.A.D = 2, B.C = 3 (then User).
    indexes = {name: ProtobufSchema(cls, PROTO_USER).index for name, cls in MESSAGES.items()}
    assert indexes == {"demo.B": 0, "demo.B.A": 1, "demo.B.A.D": 2, "demo.B.C": 3, "demo.User": 4}
    assert wire.encode_varint(300) == b"\xac\x02"
    assert wire.decode_varint(b"\xac\x02rest") == (300, 2)


def test_values_that_break_the_schema_are_refused_naming_the_field() -> None:
    with pytest.raises(ValidationError, match=r"age: 'x' is not of type 'integer'.*rule 'type'"):
        JsonSchema(JSON_USER).encoder()({"name": "Ann", "age": "x"})
    with pytest.raises(ValidationError, match="does not fit AvroSchema"):
        AvroSchema(AVRO_USER).encoder()({"name": "Ann", "age": "x"})
    with pytest.raises(ValidationError, match="must be a User message, got dict"):
        ProtobufSchema(ProtoUser, PROTO_USER).encoder()(USER)


# -- the PyPI peer's codec -------------------------------------------------------------------


def test_the_peer_decodes_our_records_and_we_decode_its() -> None:
    peer_schema = PeerAvroSchema(AVRO_USER)
    registry = known(VERSION_ID, DataFormat.AVRO, AVRO_USER)
    ours = GlueSerializer(registry, AvroSchema(AVRO_USER), "users", compressed=True)
    asyncio.run(ours.prepare())
    data, version = peer_codec.decode(ours.dumps(USER))
    assert (version, peer_schema.read(data)) == (VERSION_ID, USER)
    theirs = peer_codec.encode(peer_schema.write(USER), VERSION_ID, compression=True)
    deserializer = GlueDeserializer(registry)
    assert asyncio.run(deserializer.decode_async(theirs)).value == USER


# -- the registry client ---------------------------------------------------------------------


def test_one_call_per_schema_version_however_many_records() -> None:
    fake = FakeGlue()
    ids = [fake.add_schema("r", "users", "AVRO", AVRO_USER)]
    evolved = AVRO_USER.replace("]}", ',{"name":"email","type":["null","string"],"default":null}]}')
    ids.append(fake.add_schema("r", "users2", "AVRO", evolved))
    registry = registry_with(fake)
    encoders = [AvroSchema(AVRO_USER).encoder(), AvroSchema(evolved).encoder()]
    values = [USER, {**USER, "email": None}]
    records = [
        wire.encode(encoders[i % 2](values[i % 2]), uuid.UUID(ids[i % 2])) for i in range(1000)
    ]

    async def main() -> list[Any]:
        deserializer = GlueDeserializer(registry)
        # A batch's records ask at the same time: one call per version all the same.
        return await asyncio.gather(*(deserializer.decode_async(r) for r in records[:10])) + [
            await deserializer.decode_async(r) for r in records[10:]
        ]

    decoded = asyncio.run(main())
    assert [d.value for d in decoded] == [values[i % 2] for i in range(1000)]
    assert fake.calls == {"GetSchemaVersion": 2}
    assert registry.calls == {"get_schema_version": 2}


def test_throttling_is_retried_by_the_policy() -> None:
    fake = FakeGlue()
    version_id = fake.add_schema("r", "users", "AVRO", AVRO_USER)
    throttled = client_error("ThrottlingException", "Rate exceeded", "GetSchemaVersion")
    fake.fail["GetSchemaVersion"] = [throttled, throttled]
    version = asyncio.run(registry_with(fake).version(uuid.UUID(version_id)))
    assert (version.schema_name, version.registry_name) == ("users", "r")
    assert fake.calls["GetSchemaVersion"] == 3


def test_writers_look_a_definition_up_once_and_register_only_when_asked() -> None:
    fake = FakeGlue()
    schema = AvroSchema(AVRO_USER)

    async def main() -> None:
        with pytest.raises(SchemaNotRegisteredError, match="r/users has no version"):
            await registry_with(fake).version_of(schema, "users")
        registry = registry_with(fake, auto_register=True, compatibility="FULL")
        first = await registry.version_of(schema, "users")  # creates the schema
        assert fake.schemas[("r", "users")]["compatibility"] == "FULL"
        assert await registry.version_of(schema, "users") is first  # cached
        evolved = AvroSchema(AVRO_USER.replace('"int"', '"long"'))
        second = await registry.version_of(evolved, "users")  # a new version
        assert second.version_id != first.version_id

    asyncio.run(main())
    assert fake.calls == {
        "GetSchemaByDefinition": 3,
        "RegisterSchemaVersion": 2,
        "CreateSchema": 1,
    }


@pytest.mark.parametrize("refusal", ["FAILURE", "InvalidInputException", "PENDING"])
def test_a_compatibility_refusal_names_the_schema_and_the_rule(refusal: str) -> None:
    fake = FakeGlue()
    fake.add_schema("r", "users", "AVRO", AVRO_USER)
    if refusal == "InvalidInputException":
        fake.fail["RegisterSchemaVersion"] = [
            client_error(refusal, "Compatibility check failed", "RegisterSchemaVersion")
        ]
    else:
        fake.status = refusal
    registry = registry_with(fake, auto_register=True)
    evolved = AvroSchema(AVRO_USER.replace('"int"', '"string"'))
    if refusal == "PENDING":  # the check ends AVAILABLE: no refusal
        version = asyncio.run(registry.version_of(evolved, "users"))
        assert version.version_number == 2
        return
    with pytest.raises(SchemaCompatibilityError) as caught:
        asyncio.run(registry.version_of(evolved, "users"))
    assert (caught.value.schema_name, caught.value.compatibility) == ("users", "BACKWARD")
    assert "schema r/users" in str(caught.value)
    assert "compatibility rule BACKWARD" in str(caught.value)


# -- the deserializer's pass-through -----------------------------------------------------------


def test_records_it_cannot_decode_pass_through_counted(caplog: pytest.LogCaptureFixture) -> None:
    fake = FakeGlue()
    version_id = uuid.UUID(fake.add_schema("r", "users", "AVRO", AVRO_USER))
    registry = registry_with(fake, unavailable_ttl=60)
    good = wire.encode(AvroSchema(AVRO_USER).encoder()(USER), version_id)
    gone = wire.encode(b"\x06Ann<", uuid.UUID(int=7))
    broken = wire.encode(b"\xff", version_id)
    records = [good, b'{"plain": "json"}', gone, gone, broken, good]
    deserializer = GlueDeserializer(registry)
    caplog.set_level(logging.WARNING)

    async def main() -> list[Any]:
        return [await deserializer.decode_async(r) for r in records]

    decoded = asyncio.run(main())
    assert [d.value for d in decoded] == [USER, records[1], gone, gone, broken, USER]
    assert [(d.failure or "").split(":")[0] for d in decoded] == [
        "",
        "not_glue",
        "unavailable",
        "unavailable",
        "undecodable",
        "",
    ]
    stats = deserializer.stats
    assert (stats.decoded, stats.not_glue, stats.unavailable, stats.undecodable) == (2, 1, 2, 1)
    assert fake.calls["GetSchemaVersion"] == 2  # the missing version asked for once
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 3  # the first of each kind
    assert f"schema version {uuid.UUID(int=7)} is not in the registry" in warnings[1]


def test_a_reader_schema_resolves_every_writer_version() -> None:
    evolved = AVRO_USER.replace("]}", ',{"name":"email","type":["null","string"],"default":null}]}')
    registry = known(VERSION_ID, DataFormat.AVRO, AVRO_USER)
    deserializer = GlueDeserializer(registry, reader_schema=AvroSchema(evolved))
    assert asyncio.run(deserializer.decode_async(AVRO_GOLDEN)).value == {**USER, "email": None}
    assert isinstance(registry.cached_version(VERSION_BYTES), SchemaVersion)


def test_a_registry_that_cannot_answer_is_not_asked_per_record() -> None:
    fake = FakeGlue()
    version_id = uuid.UUID(fake.add_schema("r", "users", "AVRO", AVRO_USER))
    down = client_error("InternalServiceException", "down", "GetSchemaVersion", status=500)
    fake.fail["GetSchemaVersion"] = [down] * 5  # FAST's five attempts, all refused
    deserializer = GlueDeserializer(registry_with(fake, unavailable_ttl=60))
    record = wire.encode(AvroSchema(AVRO_USER).encoder()(USER), version_id)

    async def main() -> list[Any]:
        return [await deserializer.decode_async(record) for _ in range(100)]

    decoded = asyncio.run(main())
    assert all(d.value == record for d in decoded)
    assert (decoded[0].failure or "").startswith("unavailable: cannot get schema version")
    assert deserializer.stats.unavailable == 100
    assert fake.calls["GetSchemaVersion"] == 5  # one look, retried; not one per record


def test_a_schema_created_meanwhile_by_another_writer_gets_the_new_version() -> None:
    fake = FakeGlue()
    fake.add_schema("r", "users", "AVRO", AVRO_USER)
    # Our RegisterSchemaVersion saw no schema; by our CreateSchema another writer had made it.
    fake.fail["RegisterSchemaVersion"] = [
        client_error("EntityNotFoundException", "Schema is not found.", "RegisterSchemaVersion")
    ]
    fake.status = "FAILURE"
    registry = registry_with(fake, auto_register=True)
    evolved = AvroSchema(AVRO_USER.replace('"int"', '"long"'))
    with pytest.raises(SchemaCompatibilityError, match="rule BACKWARD"):
        asyncio.run(registry.version_of(evolved, "users"))
    assert fake.calls["CreateSchema"] == 1
    assert fake.calls["RegisterSchemaVersion"] == 2


def test_a_known_version_with_an_unknown_compression_byte_is_not_read_as_plain() -> None:
    registry = known(VERSION_ID, DataFormat.AVRO, AVRO_USER)
    deserializer = GlueDeserializer(registry)
    odd = AVRO_GOLDEN[:1] + b"\x07" + AVRO_GOLDEN[2:]

    async def main() -> list[Any]:
        return [await deserializer.decode_async(data) for data in (AVRO_GOLDEN, odd)]

    good, bad = asyncio.run(main())
    assert good.value == USER
    assert (bad.value, bad.failure) == (
        odd,
        "not_glue: compression byte is 7, not 0 (none) or 5 (zlib)",
    )
    assert deserializer.loads(odd) == odd
