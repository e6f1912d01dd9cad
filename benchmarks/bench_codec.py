"""KPL aggregation codec: kinesis_core against aws-kinesis-agg 1.2.3 and aiokpl 0.2.0.

Workload: 100-byte records over 256 partition keys, 51,200-byte aggregates (the KPL default).

* encode: the work of aws-kinesis-agg's ``RecordAggregator.add_user_record``: add records,
  emit each full aggregate with its container partition key and explicit hash key.
* encode+predict: the same, plus what a producer must do first: hash the partition key (MD5)
  and find its shard (bisect over the sorted end keys of a 16-shard map), one aggregator per
  shard.
* deaggregate: GetRecords batches of 20 of those aggregates (about 1 MB, one shard each) to user
  records. Ours builds ``KinesisRecord`` objects and applies the KCL hash-range filter;
  aws-kinesis-agg (``iter_deaggregate_records(data_format='Boto3')``) builds dicts and has no
  filter; aiokpl (``decode_aggregated``) only decodes blobs.
* decode: blob to a list of user records (``decode_aggregate``, aiokpl ``decode_aggregated``).
* deaggregate with record ids: the same records aggregated with automatic record ids, as the
  producer writes them with ``record_ids=True`` (one run of consecutive counters per aggregate,
  docs/effectively-once.md), against the same without ids, in turns; every id is checked.
  ``KinesisRecord.record_id`` of a run's record is made when first read: a second pair reads
  every record's id, as a deduplicating reader does.

aiokpl has no synchronous aggregator; its ``AggregatedBatch`` (estimated sizes) is driven here
the way its ``Reducer`` drives it, without the locks and timers.
"""

from __future__ import annotations

import random
from bisect import bisect_left
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

import aiokpl.aggregation as aiokpl_codec
import aws_kinesis_agg.aggregator as kagg_aggregator
import aws_kinesis_agg.deaggregator as kagg_deaggregator
from aiokpl.aggregator import AggregatedBatch, _BufferedRecord

from benchmarks._table import Row, best_rates
from kinesis_core.aggregation import (
    DEFAULT_MAX_SIZE,
    AggregateBuilder,
    deaggregate,
    decode_aggregate,
)
from kinesis_core.shards.hashing import MAX_HASH_KEY, hash_key

OURS = "kinesis_core"
OURS_IDS = "kinesis_core, record ids"
OURS_READ = "kinesis_core (no ids), each id read"
OURS_IDS_READ = "kinesis_core, record ids, each id read"
SESSION = "AbCdEfGhIjKl"
KAGG = "aws-kinesis-agg"
AIOKPL = "aiokpl"
RECORD_BYTES = 100
PARTITION_KEYS = 256
SHARDS = 16
BATCH_AGGREGATES = 20

Records = list[tuple[str, bytes]]
Contents = tuple[str, str | None, bytes]


def _records(count: int) -> Records:
    rng = random.Random(7)
    keys = [f"user-{i:05d}" for i in range(PARTITION_KEYS)]
    return [(keys[i % PARTITION_KEYS], rng.randbytes(RECORD_BYTES)) for i in range(count)]


def _shard_ranges() -> list[tuple[int, int]]:
    step = (MAX_HASH_KEY + 1) // SHARDS
    return [
        (i * step, MAX_HASH_KEY if i == SHARDS - 1 else (i + 1) * step - 1) for i in range(SHARDS)
    ]


_END_KEYS = [end for _, end in _shard_ranges()]


def _predict(partition_key: str) -> int:
    return bisect_left(_END_KEYS, hash_key(partition_key))


# ---- encode -------------------------------------------------------------------------------


def _ours_emit(builder: AggregateBuilder) -> Contents:
    contents = (
        builder.container_partition_key,
        builder.container_explicit_hash_key,
        builder.build(),
    )
    builder.clear()
    return contents


def ours_encode(records: Records, predict: bool) -> list[Contents]:
    out: list[Contents] = []
    builders: dict[int, AggregateBuilder] = {}
    for partition_key, data in records:
        shard = _predict(partition_key) if predict else 0
        builder = builders.get(shard)
        if builder is None:
            builder = builders[shard] = AggregateBuilder(DEFAULT_MAX_SIZE)
        if not builder.try_add(partition_key, None, data):
            out.append(_ours_emit(builder))
            builder.add(partition_key, None, data)
    out.extend(_ours_emit(builder) for builder in builders.values() if builder.count)
    return out


def ours_encode_with_ids(records: Records) -> list[Contents]:
    """``ours_encode`` with prediction, each record with its automatic id: the session's origin
    for its shard and the shard's next counter."""
    out: list[Contents] = []
    builders: dict[int, AggregateBuilder] = {}
    counters: dict[int, int] = {}
    for partition_key, data in records:
        shard = _predict(partition_key)
        builder = builders.get(shard)
        if builder is None:
            builder = builders[shard] = AggregateBuilder(DEFAULT_MAX_SIZE)
        counter = counters[shard] = counters.get(shard, -1) + 1
        origin = f"{SESSION}.{shard}"
        if not builder.try_add(partition_key, None, data, origin=origin, counter=counter):
            out.append(_ours_emit(builder))
            builder.try_add(partition_key, None, data, origin=origin, counter=counter)
    out.extend(_ours_emit(builder) for builder in builders.values() if builder.count)
    return out


def kagg_encode(records: Records, predict: bool) -> list[Contents]:
    out: list[Contents] = []
    aggregators: dict[int, Any] = {}
    for partition_key, data in records:
        shard = _predict(partition_key) if predict else 0
        aggregator = aggregators.get(shard)
        if aggregator is None:
            aggregator = aggregators[shard] = kagg_aggregator.RecordAggregator(DEFAULT_MAX_SIZE)
        full = aggregator.add_user_record(partition_key, data)
        if full is not None:
            out.append(full.get_contents())
    for aggregator in aggregators.values():
        rest = aggregator.clear_and_get()
        if rest is not None:
            out.append(rest.get_contents())
    return out


def _aiokpl_emit(batch: AggregatedBatch) -> Contents:
    return (batch.routing_partition_key(), batch.routing_explicit_hash_key(), batch.to_blob())


def aiokpl_encode(records: Records, predict: bool) -> list[Contents]:
    out: list[Contents] = []
    batches: dict[int, AggregatedBatch] = {}
    for partition_key, data in records:
        key = hash_key(partition_key) if predict else 0
        shard = bisect_left(_END_KEYS, key) if predict else 0
        batch = batches.get(shard)
        if batch is None:
            batch = batches[shard] = AggregatedBatch(predicted_shard=shard)
        item = _BufferedRecord(aiokpl_codec.UserRecord(partition_key, data), 0.0, key)
        batch.add(item)
        if batch.size > DEFAULT_MAX_SIZE:
            batch.remove_last()
            out.append(_aiokpl_emit(batch))
            batch = batches[shard] = AggregatedBatch(predicted_shard=shard)
            batch.add(item)
    out.extend(_aiokpl_emit(batch) for batch in batches.values() if batch.count)
    return out


# ---- decode -------------------------------------------------------------------------------


def _getrecords_batches(
    records: Records, ids: bool = False
) -> list[tuple[int, list[dict[str, Any]]]]:
    """Per-shard aggregates as GetRecords responses: (shard, Records entries); with ``ids``,
    records with automatic ids."""
    per_shard: dict[int, list[bytes]] = {}
    encoded = ours_encode_with_ids(records) if ids else ours_encode(records, predict=True)
    for partition_key, _, blob in encoded:
        per_shard.setdefault(_predict(partition_key), []).append(blob)
    sequence = iter(range(49 * 10**54, 50 * 10**54, 2**40))
    batches = []
    for shard, blobs in sorted(per_shard.items()):
        for start in range(0, len(blobs), BATCH_AGGREGATES):
            entries = [
                {
                    "Data": blob,
                    "PartitionKey": "a",
                    "SequenceNumber": str(next(sequence)),
                    "ApproximateArrivalTimestamp": None,
                }
                for blob in blobs[start : start + BATCH_AGGREGATES]
            ]
            batches.append((shard, entries))
    return batches


def _rows(
    group: str,
    items: int,
    repeat: int,
    subjects: list[tuple[str, Callable[[], object], str]],
    baseline: str,
    target: float | None,
) -> Iterator[Row]:
    """Measure the subjects (in turns); ours carries the target ratio against ``baseline``."""
    rates = best_rates({subject: fn for subject, fn, _ in subjects}, items, repeat=repeat)
    for subject, _, note in subjects:
        yield Row(
            group,
            subject,
            rates[subject],
            "records/s",
            baseline=None if subject == baseline else baseline,
            target=target if subject == OURS else None,
            note=note,
        )


def run(quick: bool) -> list[Row]:
    count = 2_000 if quick else 100_000
    repeat = 2 if quick else 5
    records = _records(count)
    ranges = _shard_ranges()
    batches = _getrecords_batches(records)
    blobs = [entry["Data"] for _, entries in batches for entry in entries]
    decoded = sum(len(decode_aggregate(blob) or ()) for blob in blobs)
    assert decoded == count

    def ours_deaggregate() -> None:
        for shard, entries in batches:
            deaggregate(entries, f"shardId-{shard:012d}", ranges[shard])

    id_batches = _getrecords_batches(records, ids=True)
    read_ids = [
        r.record_id
        for shard, entries in id_batches
        for r in deaggregate(entries, f"shardId-{shard:012d}", ranges[shard])
    ]
    assert len(set(read_ids)) == count
    assert all(r.startswith(SESSION) for r in read_ids if r is not None)

    def ours_deaggregate_ids() -> None:
        for shard, entries in id_batches:
            deaggregate(entries, f"shardId-{shard:012d}", ranges[shard])

    def read_each_id(batches: list[tuple[int, list[dict[str, Any]]]]) -> None:
        for shard, entries in batches:
            for record in deaggregate(entries, f"shardId-{shard:012d}", ranges[shard]):
                record.record_id  # noqa: B018 (made when read)

    def kagg_deaggregate() -> None:
        for _, entries in batches:
            list(kagg_deaggregator.iter_deaggregate_records(entries, data_format="Boto3"))

    def aiokpl_deaggregate() -> None:
        for _, entries in batches:
            for entry in entries:
                aiokpl_codec.decode_aggregated(entry["Data"])

    rows: list[Row] = []
    for predict, target in ((False, 4.5), (True, 2.0)):
        rows += _rows(
            "codec: aggregate+encode" + ("+predict" if predict else ""),
            count,
            repeat,
            [
                (OURS, partial(ours_encode, records, predict), ""),
                (KAGG, partial(kagg_encode, records, predict), ""),
                (AIOKPL, partial(aiokpl_encode, records, predict), "estimated sizes"),
            ],
            KAGG,
            target,
        )
    rows += _rows(
        "codec: deaggregate",
        count,
        repeat,
        [
            (OURS, ours_deaggregate, "KinesisRecord, KCL range filter"),
            (KAGG, kagg_deaggregate, "dicts, no filter"),
            (AIOKPL, aiokpl_deaggregate, "decode only, no filter"),
        ],
        KAGG,
        2.0,
    )
    group = "codec: deaggregate with record ids"
    rates = best_rates(
        {
            OURS: ours_deaggregate,
            OURS_IDS: ours_deaggregate_ids,
            OURS_READ: partial(read_each_id, batches),
            OURS_IDS_READ: partial(read_each_id, id_batches),
        },
        count,
        repeat=repeat,
    )
    rows.append(Row(group, OURS, rates[OURS], "records/s", note="no ids"))
    rows.append(
        Row(
            group,
            OURS_IDS,
            rates[OURS_IDS],
            "records/s",
            baseline=OURS,
            target=0.9,
            note="automatic ids, one run per aggregate; in turns with the first",
        )
    )
    rows.append(Row(group, OURS_READ, rates[OURS_READ], "records/s", note="a loop over them"))
    rows.append(
        Row(
            group,
            OURS_IDS_READ,
            rates[OURS_IDS_READ],
            "records/s",
            baseline=OURS_READ,
            note="the same loop, each id made when read",
        )
    )
    rows += _rows(
        "codec: decode",
        count,
        repeat,
        [
            (OURS, lambda: [decode_aggregate(blob) for blob in blobs], "decode_aggregate"),
            (AIOKPL, lambda: [aiokpl_codec.decode_aggregated(blob) for blob in blobs], ""),
        ],
        AIOKPL,
        None,
    )
    return rows
