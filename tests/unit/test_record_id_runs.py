"""Automatic record ids as runs (docs/effectively-once.md): one ``kc.run`` tag where a run of
consecutive counters starts, no tag on the records that continue it; caller ids in ``kc.id``
tags of their own. A record's id = its own ``kc.id`` if any, else the id its ``kc.run`` starts,
else the open run's next counter, else none. Written by ``AggregateBuilder`` and the producer's
aggregator, read by ``deaggregate`` on its column path and record by record, and by
aws-kinesis-agg, which reads past the tags."""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

import pytest
from hypothesis import given, settings, strategies as st

from kinesis_core import aggregation
from kinesis_core._kpl_messages import AggregatedRecord
from kinesis_core.aggregation import (
    RECORD_ID_TAG,
    RUN_TAG,
    AggregateBuilder,
    Tag,
    deaggregate,
    encode_aggregate,
)
from kinesis_core.consumer.lineage import ShardNode
from kinesis_core.consumer.subscription import NextEvent, SubscribeEvent, SubscriptionRead
from kinesis_core.errors import ValidationError
from kinesis_core.producer.aggregator import Aggregator
from kinesis_core.producer.items import UserRecord
from kinesis_core.records import SubRecord, WireRecord
from kinesis_core.shards.hashing import MAX_HASH_KEY, MAX_RECORD_BYTES, hash_key
from tests.fakes.kinesis import Entry, FakeKinesis, client_error
from tests.helpers.producer import producer, records, run
from tests.unit.test_aggregation_interop import batches, kagg_deaggregate

SEQUENCE = "49590338271490256608559692538361571095921575989136588898"
_COUNTER = re.compile(r"(.+):(0|[1-9][0-9]*)", re.DOTALL)


def model_ids(record_tags: list[list[Tag]]) -> list[str | None]:
    """The rule, written out independently of the reader."""
    out: list[str | None] = []
    run_origin: str | None = None
    following = 0
    for tags in record_tags:
        own = [value for key, value in tags if key == RECORD_ID_TAG and value is not None]
        runs = [value for key, value in tags if key == RUN_TAG]
        if own:
            out.append(own[0])
            run_origin = None
        elif runs:
            match = None if runs[0] is None else _COUNTER.fullmatch(runs[0])
            out.append(None if match is None else runs[0])
            run_origin = None if match is None else match[1]
            following = 0 if match is None else int(match[2]) + 1
        elif run_origin is not None:
            out.append(f"{run_origin}:{following}")
            following += 1
        else:
            out.append(None)
    return out


def read(blob: bytes, container_key: str = "container") -> list[Any]:
    return deaggregate([WireRecord(SEQUENCE, blob, container_key)], "shardId-000000000000")


def tag_counts(blob: bytes) -> list[int]:
    message = AggregatedRecord()
    message.ParseFromString(blob[4:-16])
    return [len(record.tags) for record in message.records]


# -- the rule, on any tags ------------------------------------------------------------------

run_values = st.one_of(
    st.builds(
        lambda origin, counter: f"{origin}:{counter}",
        st.sampled_from(["S.0", "S.1", "a:b", "é"]),
        st.integers(0, 10**20),
    ),
    st.sampled_from(["", "x", "x:", ":5", "x:01", "x:-1", "x:1a", "x:\u0661"]),
)
one_tag = st.one_of(
    st.tuples(st.just(RUN_TAG), st.none() | run_values),
    st.tuples(st.just(RECORD_ID_TAG), st.none() | st.text(min_size=1, max_size=8)),
    st.tuples(st.sampled_from(["other", "", "kc.ru"]), st.none() | st.text(max_size=8)),
)


@st.composite
def aggregate_tags(draw: st.DrawFn, n: int) -> list[list[Tag]]:
    """Tags for ``n`` records: often one tag on the first record only (the column path),
    otherwise any tags anywhere (record by record)."""
    if draw(st.booleans()):
        return [[draw(one_tag)], *([] for _ in range(n - 1))]
    return draw(st.lists(st.lists(one_tag, max_size=3), min_size=n, max_size=n))


@settings(max_examples=200, deadline=None)
@given(batches(min_size=1), st.data())
def test_every_record_gets_the_id_the_rule_gives_whatever_its_tags(
    records: list[SubRecord], data: st.DataObject
) -> None:
    record_tags = data.draw(aggregate_tags(len(records)))
    out = read(encode_aggregate(records, record_tags))
    assert [(r.partition_key, r.explicit_hash_key, r.data) for r in out] == records
    assert [r.record_id for r in out] == model_ids(record_tags)


def test_the_rule_by_example() -> None:
    subs = [SubRecord(f"k{i}", None, b"x") for i in range(9)]
    tags: list[list[Tag]] = [
        [(RUN_TAG, "S.3:7")],
        [],
        [("other", "v")],
        [(RECORD_ID_TAG, "order-1")],  # an id of its own closes the run
        [],
        [(RUN_TAG, "S.3:20")],
        [],
        [(RUN_TAG, None)],  # no value: no id, and the run is closed
        [],
    ]
    assert [r.record_id for r in read(encode_aggregate(subs, tags))] == [
        "S.3:7",
        "S.3:8",
        "S.3:9",
        "order-1",
        None,
        "S.3:20",
        "S.3:21",
        None,
        None,
    ]


def test_one_run_tag_at_the_start_takes_the_column_path(monkeypatch: pytest.MonkeyPatch) -> None:
    def not_this_way(body: bytes) -> None:
        raise AssertionError("read record by record")

    monkeypatch.setattr(aggregation, "_columns_by_record", not_this_way)
    subs = [SubRecord(f"k{i}", None, bytes([i % 256])) for i in range(300)]
    builder = AggregateBuilder(MAX_RECORD_BYTES)
    for i, (pk, ehk, data) in enumerate(subs):
        assert builder.try_add(pk, ehk, data, origin="AbCdEfGhIjKl.3", counter=1000 + i)
    blob = builder.build()
    assert tag_counts(blob) == [1] + [0] * 299
    assert [r.record_id for r in read(blob)] == [f"AbCdEfGhIjKl.3:{1000 + i}" for i in range(300)]
    plain = encode_aggregate(subs[:2])
    assert [r.record_id for r in read(plain)] == [None, None]
    own = encode_aggregate(subs[:3], [[(RECORD_ID_TAG, "x")], [], []])
    assert [r.record_id for r in read(own)] == ["x", None, None]


def test_a_tag_on_another_record_than_the_first_is_read_record_by_record() -> None:
    subs = [SubRecord(f"k{i}", None, b"x") for i in range(3)]
    blob = encode_aggregate(subs, [[], [(RUN_TAG, "o:5")], []])
    assert [r.record_id for r in read(blob)] == [None, "o:5", "o:6"]


# -- written by the builder -----------------------------------------------------------------

ORIGINS = ["AbCdEfGhIjKl.0", "AbCdEfGhIjKl.1", "ZyXwVuTsRqPo.0"]


@st.composite
def id_plans(draw: st.DrawFn, n: int) -> list[tuple[str, Any]]:
    """An id for each of ``n`` records as a producer gives them: mostly runs of consecutive
    automatic counters, with gaps, retries (a counter again), other origins, caller ids and
    records without an id among them."""
    counters = dict.fromkeys(ORIGINS, 0)
    origin = ORIGINS[0]
    plan: list[tuple[str, Any]] = []
    for _ in range(n):
        step = draw(st.sampled_from(["next"] * 6 + ["gap", "retry", "origin", "caller", "none"]))
        if step == "caller":
            plan.append(("caller", draw(st.text(min_size=1, max_size=12))))
            continue
        if step == "none":
            plan.append(("none", None))
            continue
        if step == "origin":
            origin = draw(st.sampled_from(ORIGINS))
        elif step == "gap":
            counters[origin] += draw(st.integers(1, 10**6))
        elif step == "retry":
            counters[origin] = draw(st.integers(0, counters[origin]))
        plan.append(("auto", (origin, counters[origin])))
        counters[origin] += 1
    return plan


def add(builder: AggregateBuilder, record: SubRecord, planned: tuple[str, Any]) -> bool:
    kind, value = planned
    if kind == "caller":
        return builder.try_add(*record, record_id=value)
    if kind == "auto":
        return builder.try_add(*record, origin=value[0], counter=value[1])
    return builder.try_add(*record)


def expected_id(planned: tuple[str, Any]) -> str | None:
    kind, value = planned
    if kind == "caller":
        return str(value)
    return f"{value[0]}:{value[1]}" if kind == "auto" else None


@settings(max_examples=150, deadline=None)
@given(batches(min_size=1), st.data(), st.sampled_from([300, 2_000, MAX_RECORD_BYTES]))
def test_the_builder_writes_ids_that_read_back_exactly(
    records: list[SubRecord], data: st.DataObject, max_size: int
) -> None:
    """Records go into aggregates as an aggregator puts them (a full one is sealed and the
    record starts the next): every record read back has the id it was given, ours and
    aws-kinesis-agg read every record's data and keys, and each size is exact."""
    plan = data.draw(id_plans(len(records)))
    builder = AggregateBuilder(max_size)
    blobs: list[tuple[bytes, str]] = []
    expected: list[tuple[SubRecord, str | None]] = []

    def seal() -> None:
        if builder.count:
            blobs.append((builder.build(), builder.container_partition_key))
            builder.clear()

    for record, planned in zip(records, plan, strict=True):
        if not add(builder, record, planned):
            seal()
            if not add(builder, record, planned):
                continue  # too big for this max_size with its tags
        expected.append((record, expected_id(planned)))
        assert builder.size == len(builder.build()) + len(builder.container_partition_key.encode())
    seal()
    out = [r for blob, key in blobs for r in read(blob, key)]
    assert [(r.partition_key, r.data, r.record_id) for r in out] == [
        (record.partition_key, record.data, record_id) for record, record_id in expected
    ]
    for r, (record, _) in zip(out, expected, strict=True):
        assert r.explicit_hash_key == record.explicit_hash_key or not r.aggregated  # raw: no EHK
    for blob, _ in blobs:
        if blob.startswith(aggregation.MAGIC):
            assert kagg_deaggregate(blob) == [
                (r.partition_key, r.explicit_hash_key, r.data) for r in read(blob)
            ]


def test_a_run_costs_one_tag_and_a_counter_that_does_not_follow_starts_another() -> None:
    builder = AggregateBuilder()
    for counter in [*range(5, 10), 3, 4, 5, 30]:
        assert builder.try_add("k", None, b"x", origin="o", counter=counter)
    assert builder.try_add("k", None, b"x", origin="p", counter=31)
    assert builder.try_add("k", None, b"x", record_id="mine")
    assert builder.try_add("k", None, b"x", origin="p", counter=32)
    assert builder.try_add("k", None, b"x")
    blob = builder.build()
    assert tag_counts(blob) == [1, 0, 0, 0, 0, 1, 0, 0, 1, 1, 1, 1, 1]
    assert [r.record_id for r in read(blob)] == [
        *(f"o:{c}" for c in (5, 6, 7, 8, 9, 3, 4, 5, 30)),
        "p:31",
        "mine",
        "p:32",
        None,
    ]


def test_add_run_continues_the_open_run() -> None:
    builder = AggregateBuilder()
    keys = [f"key-{i}" for i in range(40)]
    assert builder.try_add(keys[0], None, b"first", origin="o", counter=100)
    assert builder.add_run(keys, [b"d"] * 40, 1, 40) == 40
    assert builder.try_add("k", None, b"x", origin="o", counter=140)  # follows: no tag
    assert builder.try_add("k", None, b"x", origin="o", counter=140)  # again: a new run
    blob = builder.build()
    assert sum(tag_counts(blob)) == 2
    assert [r.record_id for r in read(blob)] == [f"o:{c}" for c in range(100, 141)] + ["o:140"]


def test_an_automatic_id_must_have_the_counter_shape() -> None:
    builder = AggregateBuilder()
    with pytest.raises(ValidationError, match="origin: an automatic id must be ORIGIN:COUNTER"):
        builder.try_add("k", None, b"x", origin="o", counter=-1)
    with pytest.raises(ValidationError, match="record_id: must be 1 to 128 bytes"):
        builder.try_add("k", None, b"x", origin="o" * 130, counter=1)
    assert builder.count == 0


# -- read back: resume inside an aggregate, the hash-range filter ---------------------------


@settings(max_examples=60, deadline=None)
@given(batches(min_size=1), st.data())
def test_a_resume_inside_an_aggregate_gives_the_ids_of_the_whole_aggregate(
    records: list[SubRecord], data: st.DataObject
) -> None:
    """A reader that resumes after sub-record ``k`` of an aggregate whose run started at its
    first record gets the ids the whole aggregate gives: the run counts from the first."""
    plan = data.draw(id_plans(len(records)))
    builder = AggregateBuilder(MAX_RECORD_BYTES)
    for record, planned in zip(records, plan, strict=True):
        assert add(builder, record, planned)
    blob = builder.build()
    ids = [expected_id(planned) for planned in plan]
    k = data.draw(st.integers(0, len(records) - 1))
    node = ShardNode("shard-1", (), (0, MAX_HASH_KEY), True)
    machine = SubscriptionRead(node, (5, k))
    action = machine.next_action(0.0)
    machine.on_response(0.0, action, object())
    entry = {"SequenceNumber": "5", "Data": blob, "PartitionKey": records[0].partition_key}
    out = machine.on_response(0.0, NextEvent(), SubscribeEvent([entry], "c", 0, None))
    assert [(r.sub_sequence_number, r.record_id) for r in out.records] == [
        (sub, ids[sub]) for sub in range(k + 1, len(records))
    ]


def test_the_hash_range_filter_drops_whole_aggregates_and_keeps_ids_of_the_others() -> None:
    inside = [f"k{i}" for i in range(200) if hash_key(f"k{i}") <= MAX_HASH_KEY // 2][:6]
    outside = next(f"k{i}" for i in range(200) if hash_key(f"k{i}") > MAX_HASH_KEY // 2)
    blobs = []
    for start, keys in ((0, inside[:3]), (3, [inside[3], outside]), (5, inside[4:])):
        builder = AggregateBuilder()
        for i, key in enumerate(keys):
            assert builder.try_add(key, None, b"x", origin="o", counter=start + i)
        blobs.append(builder.build())
    entries = [WireRecord(str(i + 1), blob, "c") for i, blob in enumerate(blobs)]
    out = deaggregate(entries, "shardId-000000000000", (0, MAX_HASH_KEY // 2))
    assert [(r.sequence_number, r.record_id) for r in out] == [
        ("1", "o:0"),
        ("1", "o:1"),
        ("1", "o:2"),
        ("3", "o:5"),
        ("3", "o:6"),
    ]


# -- the producer's aggregator and the producer ---------------------------------------------


def user_record(i: int, origin: str | None, counter: int = 0, record_id: str | None = None) -> Any:
    pk = f"key-{i}"
    return UserRecord(hash_key(pk), b"d" * 20, pk, None, 0, i, (), 0.0, record_id, origin, counter)


def aggregator(max_count: int = 500) -> Aggregator:
    return Aggregator(
        enabled=True, max_size=51_200, max_count=max_count, record_ttl=30.0, record_ids=True
    )


def sealed_ids(agg: Aggregator) -> list[tuple[int, list[int], list[str | None]]]:
    """Per sealed Kinesis record: its user records' indexes, tags per record, ids read."""
    out = []
    for kr in agg.sealed:
        out.append(
            (
                [ur.index for ur in kr.records],
                tag_counts(kr.data),
                [r.record_id for r in read(kr.data)],
            )
        )
    return out


def test_the_aggregator_puts_a_run_in_with_one_tag_across_batches() -> None:
    agg = aggregator()
    agg.extend("s", [user_record(i, "o", i) for i in range(0, 30)], 0.0, 1.0, run=True)
    agg.extend("s", [user_record(i, "o", i) for i in range(30, 60)], 0.0, 1.0, run=True)
    agg.flush()
    ((indexes, tags, ids),) = sealed_ids(agg)
    assert indexes == list(range(60))
    assert tags == [1] + [0] * 59
    assert ids == [f"o:{i}" for i in range(60)]


def test_a_retry_in_the_open_aggregate_starts_a_run_and_the_next_batch_another() -> None:
    agg = aggregator()
    agg.extend("s", [user_record(i, "o", i) for i in range(10)], 0.0, 1.0, run=True)
    agg.add(user_record(99, "o", 3), "s", 0.0, 1.0)  # a retry of counter 3
    agg.add(user_record(98, None, record_id="caller"), "s", 0.0, 1.0)
    agg.extend("s", [user_record(i, "o", i) for i in range(10, 20)], 0.0, 1.0, run=True)
    agg.flush()
    ((indexes, tags, ids),) = sealed_ids(agg)
    assert indexes == [*range(10), 99, 98, *range(10, 20)]
    assert tags == [1] + [0] * 9 + [1, 1, 1] + [0] * 9
    assert ids == [
        *(f"o:{i}" for i in range(10)),
        "o:3",
        "caller",
        *(f"o:{i}" for i in range(10, 20)),
    ]


def test_a_full_aggregate_seals_and_the_next_starts_its_run_where_the_last_stopped() -> None:
    agg = aggregator(max_count=25)
    agg.extend("s", [user_record(i, "o", i) for i in range(20)], 0.0, 1.0, run=True)
    agg.extend("s", [user_record(i, "o", i) for i in range(20, 60)], 0.0, 1.0, run=True)
    agg.flush()
    sealed = sealed_ids(agg)
    assert [indexes for indexes, _, _ in sealed] == [
        list(range(0, 25)),
        list(range(25, 50)),
        list(range(50, 60)),
    ]
    assert [sum(tags) for _, tags, _ in sealed] == [1, 1, 1]
    assert [i for _, _, ids in sealed for i in ids] == [f"o:{i}" for i in range(60)]


def test_the_producer_writes_one_tag_per_aggregate_of_automatic_ids() -> None:
    fake = FakeKinesis(shards=2)
    sent = records(400)

    async def main() -> Any:
        async with producer(fake, record_ids=True) as p:
            await p.put_many(sent)

    run(main)
    blobs = [entry["Data"] for request in fake.requests for entry in request]
    assert blobs
    assert all(tag_counts(blob)[0] == 1 and sum(tag_counts(blob)) == 1 for blob in blobs)
    read_back = fake.read_all()
    assert sorted((r.data, r.partition_key) for r in read_back) == sorted(sent)
    assert len({r.record_id for r in read_back}) == len(sent)


def test_a_retried_batch_mixed_with_caller_ids_keeps_every_id() -> None:
    """The first answer is lost after the write; the retries are re-aggregated with records
    put after them: every copy carries its record's id, and no two records share one."""
    fake = FakeKinesis(shards=2)

    def written_then_lost(entries: list[Entry]) -> dict[str, Any]:
        fake.accept(entries)
        raise client_error("InternalFailure", "answer lost")

    fake.script.append(written_then_lost)
    first = [(b"a%d" % i, f"k{i}", None, f"caller-{i}" if i % 7 == 0 else None) for i in range(60)]
    then = [(b"b%d" % i, f"k{i}") for i in range(60)]

    async def main() -> Any:
        async with producer(fake, record_ids=True) as p:
            batch = await p.submit_many(first)
            await p.put_many(then)
            return await batch

    assert not run(main).failures
    read_back = fake.read_all()
    by_data: dict[bytes, set[str | None]] = {}
    for r in read_back:
        by_data.setdefault(r.data, set()).add(r.record_id)
    assert all(len(ids) == 1 for ids in by_data.values())
    ids = {data: next(iter(found)) for data, found in by_data.items()}
    assert len(ids) == 120
    assert len(set(ids.values())) == 120
    assert all(ids[b"a%d" % i] == f"caller-{i}" for i in range(0, 60, 7))
    assert Counter(r.data for r in read_back)[b"a1"] == 2
