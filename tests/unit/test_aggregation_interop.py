"""Our aggregates against the official schema, aws-kinesis-agg 1.2.3 and aiokpl 0.2.0, both ways."""

from __future__ import annotations

import base64
import importlib
import sys
from types import ModuleType
from typing import Any

import aiokpl
from hypothesis import given, settings, strategies as st

from kinesis_core._kpl_messages import MESSAGES
from kinesis_core.aggregation import (
    MAGIC,
    RECORD_ID_TAG,
    AggregateBuilder,
    Tag,
    deaggregate,
    decode_aggregate,
    encode_aggregate,
)
from kinesis_core.records import SubRecord
from kinesis_core.shards.hashing import MAX_HASH_KEY, MAX_RECORD_BYTES


def _import_aws_kinesis_agg() -> tuple[ModuleType, ModuleType, ModuleType]:
    """aws-kinesis-agg puts its own directory on sys.path when imported; undo that."""
    saved = sys.path[:]
    try:
        return (
            importlib.import_module("aws_kinesis_agg.aggregator"),
            importlib.import_module("aws_kinesis_agg.deaggregator"),
            importlib.import_module("aws_kinesis_agg.messages_pb2"),
        )
    finally:
        sys.path[:] = saved


kagg_aggregator, kagg_deaggregator, official = _import_aws_kinesis_agg()

partition_keys = st.text(st.characters(blacklist_categories=["Cs"]), min_size=1, max_size=64)
ehks = st.integers(0, MAX_HASH_KEY).map(str)
tags = st.lists(st.tuples(st.text(max_size=10), st.none() | st.text(max_size=10)), max_size=2)


@st.composite
def batches(draw: st.DrawFn, min_size: int = 2) -> list[SubRecord]:
    """Records that all have an EHK or all have none (aws-kinesis-agg mishandles a mix)."""
    with_ehk = draw(st.booleans())
    return draw(
        st.lists(
            st.builds(
                SubRecord,
                partition_keys,
                ehks if with_ehk else st.none(),
                st.binary(max_size=200),
            ),
            min_size=min_size,
            max_size=40,
        )
    )


def boto3_entry(data: bytes) -> dict[str, Any]:
    return {
        "Data": data,
        "PartitionKey": "container",
        "SequenceNumber": "49590338271490256608559692538361571095921575989136588898",
        "ApproximateArrivalTimestamp": None,
    }


def kagg_deaggregate(blob: bytes) -> list[SubRecord]:
    return [
        SubRecord(
            r["kinesis"]["partitionKey"],
            r["kinesis"]["explicitHashKey"],
            base64.b64decode(r["kinesis"]["data"]),
        )
        for r in kagg_deaggregator.iter_deaggregate_records(boto3_entry(blob), data_format="Boto3")
    ]


def test_our_schema_is_the_official_messages_proto() -> None:
    def fields(descriptor: Any) -> list[tuple[str, int, bool, bool, int, str]]:
        return [
            (
                f.name,
                f.number,
                f.is_required,
                f.is_repeated,
                f.type,
                f.message_type.name if f.message_type else "",
            )
            for f in descriptor.fields
        ]

    for name in ("Tag", "Record", "AggregatedRecord"):
        ours = MESSAGES[f"aws.kinesis.protobuf.{name}"].DESCRIPTOR
        theirs = getattr(official, name).DESCRIPTOR
        assert ours.full_name == theirs.full_name
        assert fields(ours) == fields(theirs)


@settings(max_examples=60, deadline=None)
@given(batches(), st.data())
def test_our_aggregates_parse_with_the_official_schema(
    records: list[SubRecord], data: st.DataObject
) -> None:
    record_tags = data.draw(st.lists(tags, min_size=len(records), max_size=len(records)))
    blob = encode_aggregate(records, record_tags)
    body = blob[4:-16]
    message = official.AggregatedRecord()
    message.ParseFromString(body)
    assert message.IsInitialized()
    # Canonical protobuf: upb re-serializes the message to the very same bytes.
    assert message.SerializeToString() == body
    ours = MESSAGES["aws.kinesis.protobuf.AggregatedRecord"]()
    ours.ParseFromString(body)
    assert ours.SerializeToString() == body
    decoded = []
    for record in message.records:
        ehk = (
            message.explicit_hash_key_table[record.explicit_hash_key_index]
            if record.HasField("explicit_hash_key_index")
            else None
        )
        decoded.append(
            (
                SubRecord(
                    message.partition_key_table[record.partition_key_index], ehk, record.data
                ),
                [(t.key, t.value if t.HasField("value") else None) for t in record.tags],
            )
        )
    assert decoded == list(zip(records, record_tags, strict=True))


@settings(max_examples=60, deadline=None)
@given(batches())
def test_our_aggregates_deaggregate_with_aws_kinesis_agg(records: list[SubRecord]) -> None:
    builder = AggregateBuilder(MAX_RECORD_BYTES)
    for record in records:
        builder.add(*record)
    assert kagg_deaggregate(builder.build()) == records


record_ids = st.text(st.characters(blacklist_categories=["Cs"]), min_size=1, max_size=40)


@settings(max_examples=60, deadline=None)
@given(batches(min_size=1), st.data())
def test_aws_kinesis_agg_reads_every_record_of_our_tagged_aggregates(
    records: list[SubRecord], data: st.DataObject
) -> None:
    """Record ids ride in tags that aws-kinesis-agg (and the KCL) read past: it gets every
    record's data and keys unchanged, a one-record aggregate included; ours gets the ids.
    Caller ids and automatic ids (runs, with gaps) mixed."""
    ids: list[str] = []
    builder = AggregateBuilder(MAX_RECORD_BYTES)
    counter = data.draw(st.integers(0, 10**12))
    for record in records:
        if data.draw(st.booleans()):
            ids.append(data.draw(record_ids))
            assert builder.try_add(*record, ids[-1])
        else:
            counter += data.draw(st.sampled_from([1, 1, 1, 2, 100]))
            ids.append(f"AbCdEfGhIjKl.3:{counter}")
            assert builder.try_add(*record, origin="AbCdEfGhIjKl.3", counter=counter)
    blob = builder.build()
    assert blob.startswith(MAGIC)
    assert kagg_deaggregate(blob) == records
    out = deaggregate([boto3_entry(blob)], "shardId-0")
    assert [(r.partition_key, r.explicit_hash_key, r.data) for r in out] == records
    assert [r.record_id for r in out] == ids


id_tags = st.lists(
    st.tuples(
        st.sampled_from([RECORD_ID_TAG, "other", ""]), st.none() | st.text(min_size=1, max_size=8)
    ),
    max_size=3,
)


@settings(max_examples=100, deadline=None)
@given(batches(min_size=1), st.data())
def test_a_records_id_is_its_first_id_tag_with_a_value_whatever_else_it_carries(
    records: list[SubRecord], data: st.DataObject
) -> None:
    """Either way of reading (the tag column, or record by record) gives each record the value
    of its first ``kc.id`` tag that has one, and None when none has."""
    record_tags = data.draw(st.lists(id_tags, min_size=len(records), max_size=len(records)))
    out = deaggregate([boto3_entry(encode_aggregate(records, record_tags))], "shardId-0")
    assert [(r.partition_key, r.explicit_hash_key, r.data) for r in out] == records
    expected = [
        next((v for k, v in tags if k == RECORD_ID_TAG and v is not None), None)
        for tags in record_tags
    ]
    assert [r.record_id for r in out] == expected


def test_two_id_tags_on_one_record_are_not_taken_for_the_next_records() -> None:
    records = [SubRecord("a", None, b"1"), SubRecord("b", None, b"2")]
    blob = encode_aggregate(records, [[(RECORD_ID_TAG, "x"), (RECORD_ID_TAG, "y")], []])
    assert [r.record_id for r in deaggregate([boto3_entry(blob)], "shardId-0")] == ["x", None]


def test_aws_kinesis_agg_mixed_ehk_bug_does_not_affect_us() -> None:
    records = [SubRecord("pk1", "12345", b"a"), SubRecord("pk2", None, b"b")]
    blob = encode_aggregate(records)
    assert [r.explicit_hash_key for r in kagg_deaggregate(blob)] == ["12345", "12345"]
    assert decode_aggregate(blob) == records


@settings(max_examples=40, deadline=None)
@given(batches(min_size=1), st.sampled_from([300, 5_000, 51_200]))
def test_aws_kinesis_agg_aggregates_deaggregate_with_ours(
    records: list[SubRecord], max_size: int
) -> None:
    aggregator = kagg_aggregator.RecordAggregator(max_size)
    blobs = []
    for pk, ehk, data in records:
        full = aggregator.add_user_record(pk, data, ehk)
        if full is not None:
            blobs.append(full.get_contents()[2])
    blobs.append(aggregator.clear_and_get().get_contents()[2])
    assert [r for blob in blobs for r in decode_aggregate(blob) or []] == records
    out = deaggregate([boto3_entry(b) for b in blobs], "shardId-0", (0, MAX_HASH_KEY))
    assert [(r.partition_key, r.explicit_hash_key, r.data) for r in out] == records
    assert all(r.aggregated for r in out)


@settings(max_examples=60, deadline=None)
@given(batches(), st.data())
def test_aiokpl_aggregates_match_ours_byte_for_byte(
    records: list[SubRecord], data: st.DataObject
) -> None:
    record_tags: list[list[Tag]] = data.draw(
        st.lists(tags, min_size=len(records), max_size=len(records))
    )
    theirs = aiokpl.encode_aggregated(
        [
            aiokpl.UserRecord(
                pk, payload, ehk, tuple(aiokpl.Tag(key, value) for key, value in record_tag)
            )
            for (pk, ehk, payload), record_tag in zip(records, record_tags, strict=True)
        ]
    )
    assert decode_aggregate(theirs) == records
    assert theirs == encode_aggregate(records, record_tags)
    decoded = aiokpl.decode_aggregated(encode_aggregate(records, record_tags))
    assert [(d.partition_key, d.explicit_hash_key, d.data) for d in decoded] == records
    assert [[(t.key, t.value) for t in d.tags] for d in decoded] == record_tags
