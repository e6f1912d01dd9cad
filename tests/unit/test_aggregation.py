"""The KPL aggregation codec: exact sizes, corrupt input, the KCL range filter, round-trips."""

from __future__ import annotations

import hashlib
from datetime import datetime, timezone
from typing import Any

import pytest
from hypothesis import given, settings, strategies as st

from kinesis_core._kpl_messages import MESSAGES
from kinesis_core.aggregation import (
    DEFAULT_MAX_SIZE,
    MAGIC,
    AggregateBuilder,
    Tag,
    _columns,
    _columns_by_record,
    deaggregate,
    decode_aggregate,
    encode_aggregate,
    is_aggregated,
)
from kinesis_core.errors import NotAckableError, ValidationError
from kinesis_core.records import KinesisRecord, SubRecord
from kinesis_core.shards.hashing import (
    LARGEST_RECORD_BYTES,
    MAX_HASH_KEY,
    MAX_RECORD_BYTES,
    hash_key,
)

AggregatedRecord: Any = MESSAGES["aws.kinesis.protobuf.AggregatedRecord"]
SEQUENCE = "49590338271490256608559692538361571095921575989136588898"  # 56 digits

partition_keys = st.text(st.characters(blacklist_categories=["Cs"]), min_size=1, max_size=256)
explicit_hash_keys = st.none() | st.integers(0, MAX_HASH_KEY).map(str)
sub_records = st.builds(SubRecord, partition_keys, explicit_hash_keys, st.binary(max_size=300))
tags = st.lists(st.tuples(st.text(max_size=20), st.none() | st.text(max_size=20)), max_size=3)


def frame(body: bytes) -> bytes:
    return MAGIC + body + hashlib.md5(body).digest()


def reference_size(records: list[SubRecord]) -> int:
    """What the records weigh as one Kinesis record, serialized by upb (not by our encoder)."""
    if len(records) == 1:
        return len(records[0].data) + len(records[0].partition_key.encode())
    message = AggregatedRecord()
    pks: dict[str, int] = {}
    ehks: dict[str, int] = {}
    for pk, ehk, data in records:
        record = message.records.add(partition_key_index=pks.setdefault(pk, len(pks)), data=data)
        if ehk is not None:
            record.explicit_hash_key_index = ehks.setdefault(ehk, len(ehks))
    message.partition_key_table.extend(pks)
    message.explicit_hash_key_table.extend(ehks)
    body_size: int = message.ByteSize()
    return 20 + body_size + len(records[0].partition_key.encode())


def get_records_entry(data: bytes, partition_key: str = "container", seq: str = SEQUENCE) -> Any:
    return {
        "Data": data,
        "PartitionKey": partition_key,
        "SequenceNumber": seq,
        "ApproximateArrivalTimestamp": datetime(2026, 1, 1, tzinfo=timezone.utc),
    }


# ---- builder: sizes and limits -------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(st.lists(sub_records, min_size=1, max_size=40), st.integers(1, 4000))
def test_builder_size_is_exact_and_never_over_max(records: list[SubRecord], max_size: int) -> None:
    builder = AggregateBuilder(max_size)
    added: list[SubRecord] = []
    for record in records:
        fits = builder.fits(*record)
        assert builder.try_add(*record) is fits
        if fits:
            added.append(record)
        else:
            # It was refused only because it would really have gone over.
            assert reference_size([*added, record]) > (max_size if added else LARGEST_RECORD_BYTES)
        if not added:
            assert builder.size == 0
            continue
        built = builder.build()
        assert builder.count == len(added)
        assert builder.size == len(built) + len(builder.container_partition_key.encode())
        assert builder.size == reference_size(added)
        if builder.count > 1:
            assert builder.size <= max_size
            assert decode_aggregate(built) == added


def test_builder_fills_exactly_to_the_record_limit_counting_the_partition_key() -> None:
    partition_key = "\U0001f600" * 256  # 256 characters, 1024 bytes of UTF-8
    builder = AggregateBuilder(MAX_RECORD_BYTES)
    while MAX_RECORD_BYTES - builder.size > 20_000:
        builder.add(partition_key, None, b"x" * 10_000)
    # A record of d bytes (128 <= d < 16_000, known key, no EHK) grows the body by d + 8.
    builder.add(partition_key, None, b"x" * (MAX_RECORD_BYTES - builder.size - 5_000 - 8))
    assert builder.size == MAX_RECORD_BYTES - 5_000
    # One byte too many: refused, although it would fit if the partition key were not counted.
    assert not builder.fits(partition_key, None, b"x" * (5_000 - 7))
    builder.add(partition_key, None, b"x" * (5_000 - 8))
    assert builder.size == MAX_RECORD_BYTES == len(builder.build()) + 1024


def test_a_lone_record_may_exceed_max_size_but_not_the_largest_record_limit() -> None:
    builder = AggregateBuilder(1000)
    assert not builder.fits("pk", None, b"x" * (LARGEST_RECORD_BYTES - 1))
    assert not builder.try_add("pk", None, b"x" * (LARGEST_RECORD_BYTES - 1))
    assert builder.count == 0
    builder.add("pk", None, b"x" * (LARGEST_RECORD_BYTES - 2))
    assert builder.size == LARGEST_RECORD_BYTES
    assert not builder.fits("pk", None, b"")
    assert builder.build() == b"x" * (LARGEST_RECORD_BYTES - 2)


def test_aggregates_may_weigh_up_to_10_mib() -> None:
    builder = AggregateBuilder(LARGEST_RECORD_BYTES)
    chunk = b"x" * (MAX_RECORD_BYTES - 100)
    while builder.try_add("pk", None, chunk):
        pass
    assert builder.count == 10
    assert MAX_RECORD_BYTES * 9 < builder.size <= LARGEST_RECORD_BYTES
    assert len(decode_aggregate(builder.build())) == 10


@pytest.mark.parametrize("max_size", [0, -1, LARGEST_RECORD_BYTES + 1, 1.5, True, "51200"])
def test_max_size_is_validated(max_size: Any) -> None:
    with pytest.raises(ValidationError) as caught:
        AggregateBuilder(max_size)
    assert caught.value.field == "max_size"
    if isinstance(max_size, int) and not isinstance(max_size, bool):
        assert str(LARGEST_RECORD_BYTES) in str(caught.value)


def test_default_max_size_is_the_kpl_default() -> None:
    assert AggregateBuilder().max_size == DEFAULT_MAX_SIZE == 51_200


def test_add_refuses_what_does_not_fit_and_changes_nothing() -> None:
    builder = AggregateBuilder(100)
    builder.add("a", None, b"1" * 30)
    builder.add("b", None, b"2" * 30)
    size, built = builder.size, builder.build()
    with pytest.raises(ValueError, match="does not fit"):
        builder.add("c", "123", b"3" * 30)
    assert not builder.try_add("a", None, b"3" * 30)
    assert (builder.count, builder.size, builder.build()) == (2, size, built)


def test_empty_builder() -> None:
    builder = AggregateBuilder()
    assert (builder.count, builder.size) == (0, 0)
    with pytest.raises(ValueError, match="empty"):
        builder.build()
    with pytest.raises(ValueError, match="empty"):
        _ = builder.container_partition_key


def test_single_record_goes_out_raw_and_routes_by_its_hash_key() -> None:
    builder = AggregateBuilder()
    builder.add("user-1", None, b"payload")
    assert builder.build() == b"payload"
    assert builder.size == len(b"payload") + len(b"user-1")
    assert builder.container_partition_key == "user-1"
    assert builder.container_explicit_hash_key == str(hash_key("user-1"))


def test_container_routes_by_the_first_record() -> None:
    builder = AggregateBuilder()
    builder.add("first", "42", b"a")
    builder.add("second", None, b"b")
    assert builder.container_partition_key == "first"
    assert builder.container_explicit_hash_key == "42"
    assert is_aggregated(builder.build())


def test_clear_starts_a_new_aggregate() -> None:
    builder = AggregateBuilder()
    for i in range(300):  # pk indexes past one varint byte
        builder.add(f"pk-{i}", None, b"x" * 100)
    builder.clear()
    assert (builder.count, builder.size) == (0, 0)
    builder.add("z", None, b"1")
    builder.add("y", "7", b"2")
    assert decode_aggregate(builder.build()) == [
        SubRecord("z", None, b"1"),
        SubRecord("y", "7", b"2"),
    ]


# ---- round trips ---------------------------------------------------------------------------


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(sub_records, tags), min_size=1, max_size=30))
def test_encode_decode_round_trip_with_tags(items: list[tuple[SubRecord, list[Tag]]]) -> None:
    records = [record for record, _ in items]
    blob = encode_aggregate(records, [record_tags for _, record_tags in items])
    assert is_aggregated(blob)
    assert decode_aggregate(blob) == records
    assert decode_aggregate(encode_aggregate(records)) == records


@settings(max_examples=50, deadline=None)
@given(st.lists(sub_records, min_size=2, max_size=50))
def test_builder_round_trip(records: list[SubRecord]) -> None:
    builder = AggregateBuilder(MAX_RECORD_BYTES)
    for record in records:
        builder.add(*record)
    assert builder.build() == encode_aggregate(records)
    assert decode_aggregate(builder.build()) == records


def test_builder_encodes_every_varint_width_of_index_and_length() -> None:
    # Key-table indexes past one and two varint bytes, data lengths around the 1-byte header
    # limit, long keys, and known keys: the fast path of try_add against encode_aggregate.
    records = [
        SubRecord(
            f"{i:x}" if i % 500 else "k" * 130 + str(i),
            None,
            bytes(118 + i % 8 if i % 50 == 0 else i % 4),
        )
        for i in range(17_000)
    ]
    records += [SubRecord(r.partition_key, None, b"again") for r in records[::97]]
    builder = AggregateBuilder(MAX_RECORD_BYTES)
    for record in records:
        builder.add(*record)
    assert builder.build() == encode_aggregate(records)
    assert builder.size == reference_size(records)


def test_a_run_of_records_is_added_while_it_fits_as_try_add_adds_them() -> None:
    keys = [f"k{i % 7}" if i % 3 else f"new{i}" for i in range(40)]
    datas = [bytes(i * 37 % 130) for i in range(40)]
    one_by_one = AggregateBuilder(2_000)
    by_run = AggregateBuilder(2_000)
    for builder in (one_by_one, by_run):
        assert builder.try_add("first", None, b"x")
    added = 0
    while one_by_one.try_add(keys[added], None, datas[added]):
        added += 1
    assert 5 < added < 40
    assert by_run.add_run(keys, datas, 0, 5) == 5  # stop bounds the run
    assert by_run.add_run(keys, datas, 5, 40) == added  # the first that does not fit
    assert (by_run.count, by_run.size, by_run.build()) == (
        one_by_one.count,
        one_by_one.size,
        one_by_one.build(),
    )
    data_size = 1 + sum(map(len, datas[:added]))
    payload = data_size + len("first") + sum(map(len, keys[:added]))
    for builder in (one_by_one, by_run):
        assert (builder.data_size, builder.payload) == (data_size, payload)
        builder.clear()
        assert (builder.data_size, builder.payload) == (0, 0)
    with pytest.raises(ValueError, match="empty"):
        AggregateBuilder().add_run(keys, datas, 0, 1)


@pytest.mark.parametrize(
    ("keys", "sizes", "max_size"),
    [
        ([f"{i:016x}" for i in range(600)], [100] * 600, 51_200),  # fills up past index 128
        ([f"{i:x}" for i in range(300)], [i % 123 for i in range(300)], 60_000),  # all fit
        ([f"{i:x}" for i in range(20)], [10] * 20, 200),  # the run ends inside its first keys
        ([f"k{i}" for i in range(40)] + ["k3"], [5] * 41, 9_000),  # a key seen in the run
        (["é" * 70 + str(i) for i in range(30)], [1] * 30, 9_000),  # UTF-8 keys of 128+ bytes
        ([f"{i}" for i in range(30)], [1] * 29 + [123], 9_000),  # data of a 2-byte length
        (["first"] + [f"{i}" for i in range(30)], [1] * 31, 9_000),  # a key the table holds
    ],
)
def test_a_run_added_column_by_column_is_what_try_add_makes(
    keys: list[str], sizes: list[int], max_size: int
) -> None:
    datas = [bytes([i % 256]) * n for i, n in enumerate(sizes)]
    one_by_one = AggregateBuilder(max_size)
    by_run = AggregateBuilder(max_size)
    for builder in (one_by_one, by_run):
        assert builder.try_add("first", None, b"x")
    added = 0
    while added < len(keys) and one_by_one.try_add(keys[added], None, datas[added]):
        added += 1
    assert by_run.add_run(keys, datas, 0, len(keys)) == added
    assert by_run.add_run(keys, datas, added, len(keys)) == added  # full: nothing more
    assert (by_run.count, by_run.size, by_run.data_size, by_run.payload, by_run.build()) == (
        one_by_one.count,
        one_by_one.size,
        one_by_one.data_size,
        one_by_one.payload,
        one_by_one.build(),
    )
    assert decode_aggregate(by_run.build()) == [SubRecord("first", None, b"x")] + [
        SubRecord(key, None, data) for key, data in zip(keys[:added], datas[:added], strict=True)
    ]


def test_runs_column_by_column_and_by_the_loop_share_one_key_table() -> None:
    # Runs of new keys (column by column), then a run repeating a key of the first (the
    # loop, which must find its index), then new keys again, then a key of each kind.
    runs = [
        [f"a{i}" for i in range(20)],
        [f"b{i}" for i in range(20)],
        [f"c{i}" for i in range(10)] + ["a3"] + [f"c{i}" for i in range(10, 20)],
        [f"d{i}" for i in range(200)],
        ["b7", "d150", "c15", "first"] + [f"e{i}" for i in range(10)],
    ]
    one_by_one = AggregateBuilder(60_000)
    by_run = AggregateBuilder(60_000)
    for builder in (one_by_one, by_run):
        assert builder.try_add("first", None, b"x")
    records: list[SubRecord] = [SubRecord("first", None, b"x")]
    for keys in runs:
        datas = [key.encode() * 3 for key in keys]
        for key, data in zip(keys, datas, strict=True):
            assert one_by_one.try_add(key, None, data)
        assert by_run.add_run(keys, datas, 0, len(keys)) == len(keys)
        records += [SubRecord(key, None, data) for key, data in zip(keys, datas, strict=True)]
        assert (by_run.size, by_run.build()) == (one_by_one.size, one_by_one.build())
    assert by_run.build() == encode_aggregate(records)
    assert decode_aggregate(by_run.build()) == records


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(sub_records, st.none() | tags), min_size=1, max_size=20))
def test_column_views_agree_with_the_official_schema(
    items: list[tuple[SubRecord, list[Tag] | None]],
) -> None:
    records = [record for record, _ in items]
    with_tags = [record_tags or [] for _, record_tags in items]
    body = encode_aggregate(records, with_tags)[4:-16]
    fast, general = _columns(body), _columns_by_record(body)
    assert fast is not None
    assert general is not None
    assert fast[0] == general[0] == [record.partition_key for record in records]
    assert (fast[1] or [None] * len(records)) == general[1]
    assert fast[2] == general[2]


def test_encode_aggregate_arguments() -> None:
    with pytest.raises(ValueError, match="at least one"):
        encode_aggregate([])
    with pytest.raises(ValueError, match="tag lists"):
        encode_aggregate([SubRecord("a", None, b"")], [])


# ---- corrupt input passes through raw ------------------------------------------------------


GOOD = encode_aggregate([SubRecord("a", None, b"one"), SubRecord("b", "5", b"two")])
BODY = GOOD[4:-16]


def _without_pk_index() -> bytes:
    message = AggregatedRecord(partition_key_table=["a"])
    message.records.add(data=b"x")  # the required partition_key_index is missing
    body: bytes = message.SerializePartialToString()
    return body


CORRUPT = {
    "empty": b"",
    "short": b"abc",
    "magic only": MAGIC,
    "magic and digest only": frame(b""),
    "not magic": b"\xf3\x89\x9a\xc3" + GOOD[4:],
    "truncated": GOOD[:-1],
    "bad md5": GOOD[:-1] + bytes([GOOD[-1] ^ 1]),
    "flipped body byte": GOOD[:10] + bytes([GOOD[10] ^ 0x40]) + GOOD[11:],
    "bad protobuf": frame(b"\xff\xff\xff"),
    "truncated protobuf": frame(BODY[:-2]),
    "missing required field": frame(_without_pk_index()),
    "pk index out of range": frame(b"\x0a\x01a" + b"\x1a\x05\x08\x01\x1a\x01x"),
    "ehk index out of range": frame(b"\x0a\x01a\x12\x011" + b"\x1a\x07\x08\x00\x10\x01\x1a\x01x"),
    "ehk not a number": frame(b"\x0a\x01a\x12\x01z" + b"\x1a\x07\x08\x00\x10\x00\x1a\x01x"),
    "ehk above 2**128-1": encode_aggregate([SubRecord("a", str(2**128), b"x")]),
    # Records that take the general (one object per record) path: a tag, or mixed EHKs.
    "bad tag": frame(b"\x0a\x01a" + b"\x1a\x09\x08\x00\x1a\x01x\x22\x02\xff\xff"),
    "tag without key": frame(b"\x0a\x01a" + b"\x1a\x09\x08\x00\x1a\x01x\x22\x02\x12\x00"),
    "mixed, ehk index out of range": frame(
        b"\x0a\x01a\x12\x011" + b"\x1a\x07\x08\x00\x10\x01\x1a\x01x" + b"\x1a\x05\x08\x00\x1a\x01y"
    ),
    "mixed, ehk not a number": frame(
        b"\x0a\x01a\x12\x01z" + b"\x1a\x07\x08\x00\x10\x00\x1a\x01x" + b"\x1a\x05\x08\x00\x1a\x01y"
    ),
}


@pytest.mark.parametrize("blob", CORRUPT.values(), ids=CORRUPT.keys())
def test_corrupt_aggregates_pass_through_raw(blob: bytes) -> None:
    assert decode_aggregate(blob) is None
    [record] = deaggregate([get_records_entry(blob, "the-pk")], "shardId-000000000001", (0, 1))
    assert record.data == blob
    assert record.partition_key == "the-pk"
    assert record.explicit_hash_key is None
    assert record.aggregated is False
    assert record.position == (int(SEQUENCE), 0)


def test_is_aggregated() -> None:
    assert is_aggregated(GOOD)
    for name in ("empty", "magic and digest only", "not magic", "truncated", "bad md5"):
        assert not is_aggregated(CORRUPT[name])


def test_unknown_fields_and_tags_are_skipped() -> None:
    body = (
        b"\x0a\x01a"
        + b"\x1a\x0c\x08\x00\x1a\x01x\x22\x05\x0a\x01k\x12\x00"  # a record with a tag
        + b"\x28\x07"  # field 5, varint: not in the schema
    )
    assert decode_aggregate(frame(body)) == [SubRecord("a", None, b"x")]


def test_a_repeated_field_takes_its_last_value() -> None:
    # Valid protobuf (a merge): the fast path sees two indexes for one record and defers.
    body = b"\x0a\x01a\x0a\x01b" + b"\x1a\x07\x08\x00\x08\x01\x1a\x01x"
    assert decode_aggregate(frame(body)) == [SubRecord("b", None, b"x")]


def test_invalid_utf8_in_a_key_table_reads_as_replacement_characters() -> None:
    body = b"\x0a\x02a\xff" + b"\x1a\x05\x08\x00\x1a\x01x"
    assert decode_aggregate(frame(body)) == [SubRecord("a\ufffd", None, b"x")]


def test_empty_aggregate_has_no_records() -> None:
    blob = frame(AggregatedRecord(partition_key_table=["a"]).SerializeToString())
    assert decode_aggregate(blob) == []
    assert deaggregate([get_records_entry(blob)], "shardId-0") == []


# ---- EHKs: HasField semantics --------------------------------------------------------------


def test_records_without_an_ehk_index_have_no_ehk() -> None:
    # aws-kinesis-agg reports "12345" for both records (its bug 4).
    blob = encode_aggregate([SubRecord("pk1", "12345", b"a"), SubRecord("pk2", None, b"b")])
    assert decode_aggregate(blob) == [SubRecord("pk1", "12345", b"a"), SubRecord("pk2", None, b"b")]


def test_an_explicit_index_zero_is_an_ehk() -> None:
    message = AggregatedRecord(partition_key_table=["a"], explicit_hash_key_table=["99"])
    message.records.add(partition_key_index=0, data=b"without")
    message.records.add(partition_key_index=0, explicit_hash_key_index=0, data=b"with")
    assert decode_aggregate(frame(message.SerializeToString())) == [
        SubRecord("a", None, b"without"),
        SubRecord("a", "99", b"with"),
    ]


# ---- deaggregate: positions and the KCL range filter ---------------------------------------


def test_deaggregate_positions_and_fields() -> None:
    acked: list[KinesisRecord] = []
    blob = encode_aggregate([SubRecord(f"k{i}", None, bytes([i])) for i in range(3)])
    entries = [
        get_records_entry(b"plain", "p", seq="100"),
        get_records_entry(blob, "container", seq=SEQUENCE),
        get_records_entry(
            b"after", "q", seq="99999999999999999999999999999999999999999999999999999999"
        ),
    ]
    out = deaggregate(entries, "shardId-000000000007", ack=acked.append)
    assert [r.position for r in out] == [
        (100, 0),
        (int(SEQUENCE), 0),
        (int(SEQUENCE), 1),
        (int(SEQUENCE), 2),
        (10**56 - 1, 0),
    ]
    assert [r.aggregated for r in out] == [False, True, True, True, False]
    assert [r.partition_key for r in out] == ["p", "k0", "k1", "k2", "q"]
    assert [r.data for r in out] == [b"plain", b"\x00", b"\x01", b"\x02", b"after"]
    assert {r.shard_id for r in out} == {"shardId-000000000007"}
    assert {r.approximate_arrival_timestamp for r in out} == {
        datetime(2026, 1, 1, tzinfo=timezone.utc)
    }
    assert [r.sequence_number for r in out] == ["100", SEQUENCE, SEQUENCE, SEQUENCE, "9" * 56]
    out[2].ack()
    assert acked == [out[2]]


def test_a_record_no_consumer_delivered_cannot_be_acked() -> None:
    [record] = deaggregate([get_records_entry(b"plain", "p", seq="100")], "shardId-000000000007")
    with pytest.raises(NotAckableError, match="was not delivered by a Consumer") as raised:
        record.ack()
    assert "shardId-000000000007" in str(raised.value)
    assert not isinstance(raised.value, ValidationError)


def test_range_filter_drops_the_whole_aggregate() -> None:
    keys = [f"user-{i}" for i in range(20)]
    low = min(keys, key=hash_key)
    hash_range = (hash_key(low), MAX_HASH_KEY)
    inside = encode_aggregate([SubRecord(k, None, b"") for k in keys])
    outside = encode_aggregate([SubRecord(k, None, b"") for k in keys] + [SubRecord("x", "0", b"")])
    entries = [get_records_entry(inside), get_records_entry(outside), get_records_entry(b"plain")]
    out = deaggregate(entries, "shardId-0", hash_range)
    assert len(out) == 21
    assert out[-1].data == b"plain"
    # Just below the lowest key: every aggregate holding that key goes.
    narrower = (hash_key(low) + 1, MAX_HASH_KEY)
    assert [r.data for r in deaggregate(entries, "shardId-0", narrower)] == [b"plain"]
    # Without a range nothing is filtered.
    assert len(deaggregate(entries, "shardId-0")) == 42
    # The top of the range is inclusive too, and a key just above it drops its aggregates.
    high = hash_key(max(keys, key=hash_key))
    assert len(deaggregate(entries[:1], "shardId-0", (0, high))) == 20
    assert deaggregate(entries[:1], "shardId-0", (0, high - 1)) == []


def test_range_filter_uses_the_ehk_over_the_partition_key_and_is_inclusive() -> None:
    start, end = 1000, 2000
    far_key = next(k for k in map(str, range(100)) if not start <= hash_key(k) <= end)
    kept = encode_aggregate([SubRecord(far_key, "1000", b"a"), SubRecord(far_key, "2000", b"b")])
    dropped = [
        encode_aggregate([SubRecord("k", "1500", b"a"), SubRecord(far_key, "999", b"b")]),
        encode_aggregate([SubRecord("k", "1500", b"a"), SubRecord(far_key, "2001", b"b")]),
        encode_aggregate([SubRecord("k", "1500", b"a"), SubRecord(far_key, None, b"b")]),
    ]
    out = deaggregate([get_records_entry(b) for b in [kept, *dropped]], "s", (start, end))
    assert [(r.data, r.explicit_hash_key) for r in out] == [(b"a", "1000"), (b"b", "2000")]


def test_plain_records_are_never_filtered() -> None:
    out = deaggregate([get_records_entry(b"x", "anything")], "shardId-0", (0, 0))
    assert [r.data for r in out] == [b"x"]
