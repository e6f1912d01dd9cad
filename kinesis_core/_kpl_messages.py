"""The KPL ``messages.proto`` schema (the aggregation part), built at import time.

There is no protoc here, so the descriptor is assembled from a ``FileDescriptorProto`` and
the classes come from ``message_factory``; they run on the upb backend like generated code.
A private descriptor pool keeps us clear of anyone else's registration of the same names
(``aws_kinesis_agg.messages_pb2`` registers ``aws.kinesis.protobuf`` in the default pool).

Only decoding uses these classes: upb parses an aggregate far faster than Python can walk
the bytes. Encoding is hand-written in ``aggregation``, which is faster than these classes
(docs/aggregation.md).

Besides the official messages, two *views* read the same bytes column-wise, without one Python
object per record: ``AggregatedRecordView`` declares ``records`` as ``bytes``, and
``RecordColumns`` declares every Record field as repeated, so parsing the concatenated Record
messages (a protobuf merge) yields one list per field.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, cast

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

_PACKAGE = "aws.kinesis.protobuf"
_F = descriptor_pb2.FieldDescriptorProto


class TagMessage(Protocol):
    """``Tag``: a key and an optional value on a record (``bytes`` for a string that is not
    valid UTF-8, as upb hands it back)."""

    key: str | bytes
    value: str | bytes

    def HasField(self, field_name: str) -> bool: ...
    def ParseFromString(self, serialized: bytes) -> int: ...
    def IsInitialized(self) -> bool: ...


class RecordMessage(Protocol):
    """``Record``: one user record inside an aggregate."""

    partition_key_index: int
    explicit_hash_key_index: int
    data: bytes
    tags: Sequence[TagMessage]

    def HasField(self, field_name: str) -> bool: ...


class AggregatedRecordViewMessage(Protocol):
    """``AggregatedRecord`` with each record left as its serialized bytes."""

    partition_key_table: Sequence[str | bytes]
    explicit_hash_key_table: Sequence[str | bytes]
    records: Sequence[bytes]

    def ParseFromString(self, serialized: bytes) -> int: ...


class RecordColumnsMessage(Protocol):
    """Any number of ``Record`` messages merged into one, field by field."""

    partition_key_index: Sequence[int]
    explicit_hash_key_index: Sequence[int]
    data: Sequence[bytes]
    tags: Sequence[bytes]

    def ParseFromString(self, serialized: bytes) -> int: ...


class AggregatedRecordMessage(Protocol):
    """``AggregatedRecord``: key tables plus records.

    Table entries are ``str``, except that upb hands back ``bytes`` for a proto2 string that
    is not valid UTF-8.
    """

    partition_key_table: Sequence[str | bytes]
    explicit_hash_key_table: Sequence[str | bytes]
    records: Sequence[RecordMessage]

    def ParseFromString(self, serialized: bytes) -> int: ...
    def IsInitialized(self) -> bool: ...


def _file_descriptor() -> descriptor_pb2.FileDescriptorProto:
    """messages.proto of the KPL (Tag, Record, AggregatedRecord), proto2, field for field,
    plus the two views."""
    fdp = descriptor_pb2.FileDescriptorProto(
        name="kinesis_core/kpl_messages.proto", package=_PACKAGE, syntax="proto2"
    )
    schema: list[tuple[str, list[tuple[int, str, int, int, str]]]] = [
        (
            "Tag",
            [
                (1, "key", _F.LABEL_REQUIRED, _F.TYPE_STRING, ""),
                (2, "value", _F.LABEL_OPTIONAL, _F.TYPE_STRING, ""),
            ],
        ),
        (
            "Record",
            [
                (1, "partition_key_index", _F.LABEL_REQUIRED, _F.TYPE_UINT64, ""),
                (2, "explicit_hash_key_index", _F.LABEL_OPTIONAL, _F.TYPE_UINT64, ""),
                (3, "data", _F.LABEL_REQUIRED, _F.TYPE_BYTES, ""),
                (4, "tags", _F.LABEL_REPEATED, _F.TYPE_MESSAGE, f".{_PACKAGE}.Tag"),
            ],
        ),
        (
            "AggregatedRecord",
            [
                (1, "partition_key_table", _F.LABEL_REPEATED, _F.TYPE_STRING, ""),
                (2, "explicit_hash_key_table", _F.LABEL_REPEATED, _F.TYPE_STRING, ""),
                (3, "records", _F.LABEL_REPEATED, _F.TYPE_MESSAGE, f".{_PACKAGE}.Record"),
            ],
        ),
        (
            "AggregatedRecordView",
            [
                (1, "partition_key_table", _F.LABEL_REPEATED, _F.TYPE_STRING, ""),
                (2, "explicit_hash_key_table", _F.LABEL_REPEATED, _F.TYPE_STRING, ""),
                (3, "records", _F.LABEL_REPEATED, _F.TYPE_BYTES, ""),
            ],
        ),
        (
            "RecordColumns",
            [
                (1, "partition_key_index", _F.LABEL_REPEATED, _F.TYPE_UINT64, ""),
                (2, "explicit_hash_key_index", _F.LABEL_REPEATED, _F.TYPE_UINT64, ""),
                (3, "data", _F.LABEL_REPEATED, _F.TYPE_BYTES, ""),
                (4, "tags", _F.LABEL_REPEATED, _F.TYPE_BYTES, ""),
            ],
        ),
    ]
    for message_name, fields in schema:
        message = fdp.message_type.add(name=message_name)
        for number, name, label, type_, type_name in fields:
            field = message.field.add(name=name, number=number, label=label, type=type_)
            if type_name:
                field.type_name = type_name
    return fdp


MESSAGES = message_factory.GetMessages([_file_descriptor()], pool=descriptor_pool.DescriptorPool())
"""Message classes by full name (``aws.kinesis.protobuf.Record`` etc.)."""

AggregatedRecord = cast(
    "Callable[[], AggregatedRecordMessage]", MESSAGES[f"{_PACKAGE}.AggregatedRecord"]
)
KplTag = cast("Callable[[], TagMessage]", MESSAGES[f"{_PACKAGE}.Tag"])
"""The KPL's ``Tag`` message (the reader parses the one tag of an aggregate's first record)."""
AggregatedRecordView = cast(
    "Callable[[], AggregatedRecordViewMessage]", MESSAGES[f"{_PACKAGE}.AggregatedRecordView"]
)
RecordColumns = cast("Callable[[], RecordColumnsMessage]", MESSAGES[f"{_PACKAGE}.RecordColumns"])
