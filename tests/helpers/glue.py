"""Glue Schema Registry test material: golden records, a Protobuf message class, registries on
moto's server.

The golden records are derived by hand from AWS's documented format and the Java serde's
constants (``AWSSchemaRegistryConstants``: header version 3, compression 0 or 5, the 16-byte
schema version id most significant bits first; ``ProtobufWireFormatEncoder``: the message index
as a varint before a Protobuf message), not from this project's encoder.
"""

from __future__ import annotations

import uuid
from typing import Any

import boto3
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from kinesis_core.local import DUMMY_ACCESS_KEY_ID, DUMMY_SECRET_ACCESS_KEY

VERSION_ID = uuid.UUID("b7b4a7f0-2ad8-4a5b-9a0c-7d1e3f405162")
VERSION_BYTES = bytes.fromhex("b7b4a7f02ad84a5b9a0c7d1e3f405162")

AVRO_USER = (
    '{"type":"record","name":"User","namespace":"demo","fields":['
    '{"name":"name","type":"string"},{"name":"age","type":"int"}]}'
)
JSON_USER = (
    '{"$schema":"http://json-schema.org/draft-07/schema#","type":"object",'
    '"properties":{"name":{"type":"string"},"age":{"type":"integer"}},'
    '"required":["name","age"]}'
)
PROTO_USER = """syntax = "proto3";
package demo;
message User { string name = 1; int32 age = 2; }
message B { message C {} message A { message D {} } }
"""
USER = {"name": "Ann", "age": 30}

# Avro binary of USER: "Ann" is its zig-zag length 3 (0x06) and the bytes; 30 is zig-zag 60.
AVRO_GOLDEN = bytes.fromhex("0300b7b4a7f02ad84a5b9a0c7d1e3f40516206416e6e3c")
JSON_GOLDEN = bytes.fromhex("0300b7b4a7f02ad84a5b9a0c7d1e3f405162") + b'{"name":"Ann","age":30}'
# Protobuf: message index 4 (demo.B, demo.B.A, demo.B.A.D, demo.B.C, demo.User sorted by full
# name), then field 1 (tag 0x0a, length 3, "Ann") and field 2 (tag 0x10, 30).
PROTO_GOLDEN = bytes.fromhex("0300b7b4a7f02ad84a5b9a0c7d1e3f405162040a03416e6e101e")
# The Avro payload as a zlib stream (what java.util.zip.Deflater writes at the default level).
AVRO_ZLIB_GOLDEN = bytes.fromhex("0305b7b4a7f02ad84a5b9a0c7d1e3f405162789c6373cccbb3010003890160")


def _message_classes() -> dict[str, Any]:
    """demo.User and demo.B.A as generated classes, built from a file descriptor (no protoc)."""
    proto = descriptor_pb2.FileDescriptorProto(name="demo_user.proto", package="demo")
    proto.syntax = "proto3"
    user = proto.message_type.add(name="User")
    user.field.add(name="name", number=1, type=9, label=1)  # string
    user.field.add(name="age", number=2, type=5, label=1)  # int32
    b = proto.message_type.add(name="B")
    b.nested_type.add(name="C")
    b.nested_type.add(name="A").nested_type.add(name="D")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return {
        name: message_factory.GetMessageClass(pool.FindMessageTypeByName(name))
        for name in ("demo.User", "demo.B", "demo.B.A", "demo.B.A.D", "demo.B.C")
    }


MESSAGES = _message_classes()
ProtoUser = MESSAGES["demo.User"]
# Pickled by reference, as a generated module's class is (Beam ships DoFns that name it).
ProtoUser.__module__, ProtoUser.__qualname__ = __name__, "ProtoUser"


def glue_client(endpoint_url: str) -> Any:
    """A boto3 Glue client on a local server (moto)."""
    return boto3.client(
        "glue",
        endpoint_url=endpoint_url,
        region_name="us-east-1",
        aws_access_key_id=DUMMY_ACCESS_KEY_ID,
        aws_secret_access_key=DUMMY_SECRET_ACCESS_KEY,
    )


def create_registry(endpoint_url: str, name: str) -> Any:
    """A new registry on the server; returns its boto3 Glue client."""
    client = glue_client(endpoint_url)
    client.create_registry(RegistryName=name)
    return client
