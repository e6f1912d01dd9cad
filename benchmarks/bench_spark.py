"""Spark throughput: ``format("kinesis")`` against what a user writes by hand with boto3 in the
same Spark session.

One local[2] session, a 4-shard moto stream per subject, records of 100 bytes (1,000,000;
20,000 with ``--quick``):

* write: ``df.write.format("kinesis")`` (a producer per Python worker, KPL aggregation) against
  ``df.foreachPartition`` with a boto3 client per partition and ``put_records`` per 500 rows,
  failed entries resent. The boto3 sink writes at most 20,000 rows (``BOTO3_ROWS``): moto
  numbers each new raw record by listing the shard's records, so past a few thousand per shard
  a run would time moto's quadratic slowdown, not boto3 (the rate per row is what is
  compared);
* read: the records the write made (KPL aggregates), read back into a DataFrame and counted:
  the streaming source (a query into the ``noop`` sink, ``processAllAvailable``: the driver's
  ends, from probes near the shards' tips of the backlog and a look at its last 0.1 s, and the
  tasks' read), the
  batch source, and ``mapPartitions`` over the shard ids with a boto3 client, GetRecords from
  TRIM_HORIZON to the tip and aws-kinesis-agg's deaggregation (which a stream of KPL aggregates
  needs), made into a DataFrame of the same columns;
* the server's floor: every GetRecords answer of the aggregates fetched by boto3 in one
  process, no row made: the rate at which moto hands the records out, which bounds what any
  reader of them, and so any ratio to the hand-written one, can reach;
* read of plain records (what most boto3 producers write: one Kinesis record per row), 50,000
  of them (``PLAIN_ROWS``; 20,000 with ``--quick``) written by the sink with aggregation off
  (moto's quadratic numbering bounds the volume: the write takes some 20 s): the same two
  sources against the same ``mapPartitions`` reader without the deaggregation.

Measured: rows per second of the whole action, the Spark job's start included, best of the
runs (one with ``--quick``).
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

from benchmarks._table import Row
from kinesis_core.local import LOCAL_REGION, MotoServer
from spark_kinesis.local import session

SHARDS = 4
RECORD_BYTES = 100
BOTO3_ROWS = 20_000
PLAIN_ROWS = 50_000
OURS_WRITE = "format('kinesis') write"
BOTO3_WRITE = "foreachPartition + boto3 put_records"
OURS_STREAM = "readStream.format('kinesis')"
OURS_BATCH = "read.format('kinesis')"
BOTO3_READ = "mapPartitions + boto3 GetRecords + aws-kinesis-agg"
PLAIN = " (plain records)"
BOTO3_PLAIN_READ = "mapPartitions + boto3 GetRecords (plain records)"
FETCH_ONLY = "boto3 GetRecords alone, one process (the server's floor)"
TARGET = 5.0


def _rows(spark: Any, count: int) -> Any:
    """``count`` rows of a 100-byte payload (the row's number, padded) and a partition key, in
    2 partitions, cached so that every subject writes the same rows without making them."""
    df = spark.range(count, numPartitions=2).selectExpr(
        f"CAST(lpad(CAST(id AS STRING), {RECORD_BYTES}, 'x') AS BINARY) AS data",
        "CAST(id AS STRING) AS partition_key",
    )
    cached = df.cache()
    assert cached.count() == count
    return cached


def _boto3_writer(endpoint_url: str, stream: str) -> Callable[[Iterator[Any]], None]:
    def write(rows: Iterator[Any]) -> None:
        import boto3

        client = boto3.client("kinesis", endpoint_url=endpoint_url, region_name=LOCAL_REGION)
        batch: list[dict[str, Any]] = []

        def put(entries: list[dict[str, Any]]) -> None:
            while entries:
                response = client.put_records(StreamName=stream, Records=entries)
                entries = [
                    e for e, r in zip(entries, response["Records"], strict=True) if "ErrorCode" in r
                ]

        for row in rows:
            batch.append({"Data": bytes(row.data), "PartitionKey": row.partition_key})
            if len(batch) == 500:
                put(batch)
                batch = []
        put(batch)

    return write


def _boto3_reader(
    endpoint_url: str, stream: str, *, aggregated: bool = True
) -> Callable[[Iterator[str]], Iterator[Any]]:
    def read(shard_ids: Iterator[str]) -> Iterator[Any]:
        import base64

        import boto3
        from aws_kinesis_agg.deaggregator import iter_deaggregate_records

        client = boto3.client("kinesis", endpoint_url=endpoint_url, region_name=LOCAL_REGION)
        for shard_id in shard_ids:
            iterator = client.get_shard_iterator(
                StreamName=stream, ShardId=shard_id, ShardIteratorType="TRIM_HORIZON"
            )["ShardIterator"]
            while iterator:
                page = client.get_records(ShardIterator=iterator, Limit=10_000)
                if aggregated:
                    for record in iter_deaggregate_records(page["Records"], data_format="Boto3"):
                        user = record["kinesis"]  # Lambda's form: the data in base64
                        yield (
                            base64.b64decode(user["data"]),
                            user["partitionKey"],
                            user["sequenceNumber"],
                            shard_id,
                        )
                else:
                    for plain in page["Records"]:
                        yield (
                            plain["Data"],
                            plain["PartitionKey"],
                            plain["SequenceNumber"],
                            shard_id,
                        )
                if not page["Records"] and page.get("MillisBehindLatest", 0) == 0:
                    break
                iterator = page.get("NextShardIterator")

    return read


def _fetch_only(endpoint_url: str, stream: str) -> int:
    """Every GetRecords answer of the stream, fetched and parsed by botocore, with no row made:
    how fast the server hands out the records, which no reader of them can beat."""
    import boto3

    client = boto3.client("kinesis", endpoint_url=endpoint_url, region_name=LOCAL_REGION)
    kinesis_records = 0
    for shard in range(SHARDS):
        iterator = client.get_shard_iterator(
            StreamName=stream, ShardId=f"shardId-{shard:012d}", ShardIteratorType="TRIM_HORIZON"
        )["ShardIterator"]
        while iterator:
            page = client.get_records(ShardIterator=iterator, Limit=10_000)
            kinesis_records += len(page["Records"])
            if not page["Records"] and page.get("MillisBehindLatest", 0) == 0:
                break
            iterator = page.get("NextShardIterator")
    return kinesis_records


def _timed(action: Callable[[], int], expected: int) -> float:
    started = time.perf_counter()
    got = action()
    seconds = time.perf_counter() - started
    assert got == expected, f"{got} rows, expected {expected}"
    return expected / seconds


def run(quick: bool) -> list[Row]:
    count = 20_000 if quick else 1_000_000
    boto_rows = min(count, BOTO3_ROWS)
    plain_rows = min(count, PLAIN_ROWS)
    repeat = 1 if quick else 2
    # The boto3 subjects' clients, in the Python workers the session starts, find these.
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    spark = session("bench-spark")
    rates: dict[str, float] = {}
    try:
        with MotoServer() as moto:
            endpoint = moto.endpoint_url
            options = {
                "endpointUrl": endpoint,
                "region": LOCAL_REGION,
                "awsAccessKeyId": "testing",
                "awsSecretKey": "testing",
            }
            rows = _rows(spark, count)
            boto_df = rows.limit(boto_rows).repartition(2).cache()
            assert boto_df.count() == boto_rows
            written: list[Any] = []
            for _ in range(repeat):
                ours = moto.create_stream(f"ours-{uuid.uuid4().hex[:8]}", SHARDS)
                boto = moto.create_stream(f"boto-{uuid.uuid4().hex[:8]}", SHARDS)

                def ours_write(name: str = ours.name) -> int:
                    rows.write.format("kinesis").options(**options, streamName=name).mode(
                        "append"
                    ).save()
                    return count

                def boto3_write(name: str = boto.name) -> int:
                    boto_df.foreachPartition(_boto3_writer(endpoint, name))
                    return boto_rows

                for name, action, expected in (
                    (OURS_WRITE, ours_write, count),
                    (BOTO3_WRITE, boto3_write, boto_rows),
                ):
                    rates[name] = max(rates.get(name, 0.0), _timed(action, expected))
                boto.delete()
                written.append(ours)
            for older in written[:-1]:
                older.delete()
            plain = moto.create_stream(f"plain-{uuid.uuid4().hex[:8]}", SHARDS)
            rows.limit(plain_rows).write.format("kinesis").options(
                **options, streamName=plain.name, aggregation="false", recordTtlSeconds="600"
            ).mode("append").save()

            def ours_stream(stream: str) -> int:
                query = (
                    spark.readStream.format("kinesis")
                    .options(**options, streamName=stream)
                    .load()
                    .writeStream.format("noop")
                    .start()
                )
                query.processAllAvailable()
                total = sum(p["numInputRows"] for p in query.recentProgress)
                query.stop()
                return int(total)

            def ours_batch(stream: str) -> int:
                df = spark.read.format("kinesis").options(**options, streamName=stream).load()
                return int(df.count())

            def boto3_read(stream: str, aggregated: bool = True) -> int:
                shard_ids = [f"shardId-{i:012d}" for i in range(SHARDS)]
                rdd = spark.sparkContext.parallelize(shard_ids, SHARDS).mapPartitions(
                    _boto3_reader(endpoint, stream, aggregated=aggregated)
                )
                df = spark.createDataFrame(
                    rdd, "data binary, partition_key string, sequence_number string, shard string"
                )
                return int(df.count())

            reads: list[tuple[str, Callable[[], int], int]] = [
                (OURS_STREAM, partial(ours_stream, written[-1].name), count),
                (OURS_BATCH, partial(ours_batch, written[-1].name), count),
                (BOTO3_READ, partial(boto3_read, written[-1].name), count),
                (OURS_STREAM + PLAIN, partial(ours_stream, plain.name), plain_rows),
                (OURS_BATCH + PLAIN, partial(ours_batch, plain.name), plain_rows),
                (BOTO3_PLAIN_READ, partial(boto3_read, plain.name, False), plain_rows),
            ]
            for _ in range(repeat):
                for name, reading, expected in reads:
                    rates[name] = max(rates.get(name, 0.0), _timed(reading, expected))
                started = time.perf_counter()
                assert _fetch_only(endpoint, written[-1].name) > 0
                rates[FETCH_ONLY] = max(
                    rates.get(FETCH_ONLY, 0.0), count / (time.perf_counter() - started)
                )
    finally:
        spark.stop()
    write = f"spark write, {count:,} x {RECORD_BYTES} B, {SHARDS} shards"
    read = f"spark read, {count:,} x {RECORD_BYTES} B, {SHARDS} shards"
    plain_read = f"spark read, {plain_rows:,} plain records x {RECORD_BYTES} B, {SHARDS} shards"
    return [
        Row(write, BOTO3_WRITE, rates[BOTO3_WRITE], "rows/s", note=f"{boto_rows:,} rows"),
        Row(write, OURS_WRITE, rates[OURS_WRITE], "rows/s", BOTO3_WRITE, TARGET),
        Row(read, BOTO3_READ, rates[BOTO3_READ], "rows/s"),
        Row(
            read,
            FETCH_ONLY,
            rates[FETCH_ONLY],
            "rows/s",
            BOTO3_READ,
            note="the answers' user records per second; bounds every reader's ratio",
        ),
        Row(
            read,
            OURS_STREAM,
            rates[OURS_STREAM],
            "rows/s",
            BOTO3_READ,
            TARGET,
            note="driver probes + task read",
        ),
        Row(read, OURS_BATCH, rates[OURS_BATCH], "rows/s", BOTO3_READ),
        Row(plain_read, BOTO3_PLAIN_READ, rates[BOTO3_PLAIN_READ], "rows/s"),
        Row(
            plain_read,
            OURS_STREAM + PLAIN,
            rates[OURS_STREAM + PLAIN],
            "rows/s",
            BOTO3_PLAIN_READ,
            TARGET,
            note="driver probes + task read",
        ),
        Row(plain_read, OURS_BATCH + PLAIN, rates[OURS_BATCH + PLAIN], "rows/s", BOTO3_PLAIN_READ),
    ]
