"""The Spark source and sink on Spark itself (local[2]: tasks in two Python worker processes)
against kinesis-mock: a streaming read -> transform -> write while shards split and merge, a
driver killed with SIGKILL and restarted from its checkpoint; and a batch write and read of a
million records (on moto: volume). One session serves the module (it takes ~20 s to start)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kinesis_core.local import LocalStream, StreamFactory
from spark_kinesis.local import session
from tests.helpers.spark import options

pytestmark = pytest.mark.integration

KEYS = 12


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    spark = session("kinesis-tests")
    yield spark
    spark.stop()


def put(stream: LocalStream, first: int, count: int) -> None:
    """Records ``first`` .. ``first + count - 1``, "key:n" with n counting per key."""
    for i in range(first, first + count):
        key = f"k{i % KEYS}"
        stream.put(f"{key}:{i // KEYS}".encode(), key)


def wait_until(
    check: Callable[[], bool], what: str, timeout: float = 90.0, every: float = 0.5
) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(every)


def test_a_streaming_query_follows_a_split_and_a_merge_in_order(
    spark: Any, kinesis_stream: StreamFactory, tmp_path: Path
) -> None:
    source = kinesis_stream(3)
    target = kinesis_stream(1)
    read = options(source.name, source.client_config)
    write = {**options(target.name, target.client_config), "preserveOrder": "true"}
    write["aggregation"] = "false"
    put(source, 0, 60)
    query = (
        spark.readStream.format("kinesis")
        .options(**read)
        .option("maxRecordsPerTrigger", "40")
        .load()
        .selectExpr(
            "partition_key",
            "to_json(struct(CAST(data AS STRING) AS value, shard_id, sequence_number,"
            " sub_sequence_number)) AS data",
        )
        .writeStream.format("kinesis")
        .options(**write)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(processingTime="300 milliseconds")
        .start()
    )
    try:
        shards = [s["ShardId"] for s in source.shards()]
        put(source, 60, 60)
        source.split(shards[0])
        put(source, 120, 60)
        source.merge(shards[1], shards[2])
        put(source, 180, 60)
        wait_until(lambda: len(target.records()) >= 240, "240 records in the target")
        time.sleep(2)  # anything more (a duplicate) would land by now
    finally:
        query.stop()
    assert query.exception() is None
    written = [json.loads(r["Data"]) for r in target.records()]
    values = [w["value"] for w in written]
    assert len(values) == 240, "lost or duplicated records"
    assert set(values) == {f"k{i % KEYS}:{i // KEYS}" for i in range(240)}, "lost records"
    by_key: dict[str, list[int]] = defaultdict(list)
    for value in values:
        key, n = value.split(":")
        by_key[key].append(int(n))
    assert all(ns == sorted(ns) for ns in by_key.values()), "a key out of order"
    # Parents first: in the target, every record of a parent shard comes before the first
    # record of any of its children.
    lineage = {
        s["ShardId"]: (s.get("ParentShardId"), s.get("AdjacentParentShardId"))
        for s in source.shards()
    }
    where = {w["shard_id"]: i for i, w in reversed(list(enumerate(written)))}
    last = {w["shard_id"]: i for i, w in enumerate(written)}
    children = [s for s, parents in lineage.items() if any(parents) and s in where]
    assert children, "no child shard was read"
    for child in children:
        for parent in filter(None, lineage[child]):
            assert last[parent] < where[child], f"{child} read before its parent {parent} ended"


def _committed(log: Path) -> int:
    """Batches in a query's commit (or offset) log."""
    if not log.exists():
        return 0
    return len([p for p in log.iterdir() if not p.name.startswith(".")])


def _file_sink_values(path: Path) -> list[str]:
    """The values in the files a JSON file sink committed (its ``_spark_metadata`` log, which
    Spark's own reader of the folder follows too), read without a Spark job."""
    log = path / "_spark_metadata"
    if not log.exists():
        return []
    values = []
    for entry in sorted(p for p in log.iterdir() if not p.name.startswith(".")):
        for line in entry.read_text().splitlines()[1:]:
            added = json.loads(line)
            if added["action"] == "add":
                data = Path(added["path"].removeprefix("file:")).read_text()
                values += [json.loads(row)["value"] for row in data.splitlines()]
    return values


def test_a_killed_driver_resumes_from_its_checkpoint_with_nothing_lost_or_repeated(
    spark: Any, kinesis_stream: StreamFactory, tmp_path: Path
) -> None:
    stream = kinesis_stream(2)
    source = {**options(stream.name, stream.client_config), "maxRecordsPerTrigger": "30"}
    checkpoint, output = tmp_path / "checkpoint", tmp_path / "output"
    command = [
        sys.executable,
        "-m",
        "tests.helpers.spark",
        json.dumps(source),
        str(checkpoint),
        str(output),
    ]
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    root = Path(__file__).parents[2]
    put(stream, 0, 120)
    # The driver is the Python process and its JVM: a session of their own, killed together.
    first = subprocess.Popen(
        command, cwd=root, env=env, stdout=subprocess.DEVNULL, start_new_session=True
    )
    try:
        commits, planned = checkpoint / "commits", checkpoint / "offsets"
        # Killed with a batch planned (its offsets written) and not committed: the restarted
        # driver runs it again from the same offsets.
        wait_until(
            lambda: 2 <= _committed(commits) < _committed(planned),
            "a batch planned after 2 committed ones",
            every=0.02,
        )
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
    done_before = len(_file_sink_values(output))
    assert 0 < done_before < 120, f"the kill was not mid-stream ({done_before} rows written)"
    put(stream, 120, 40)
    second = subprocess.Popen(
        command, cwd=root, env=env, stdout=subprocess.DEVNULL, start_new_session=True
    )
    try:
        wait_until(lambda: len(_file_sink_values(output)) >= 160, "160 rows in the sink")
        time.sleep(2)  # a duplicate batch would be committed by now
        rows = spark.read.json(str(output)).collect()
    finally:
        os.killpg(second.pid, signal.SIGKILL)
        second.wait()
    values = [row["value"] for row in rows]
    assert sorted(values) == sorted(f"k{i % KEYS}:{i // KEYS}" for i in range(160))


MILLION = 1_000_000


def test_a_batch_job_writes_a_million_records_and_reads_them_back(
    spark: Any, moto_stream: StreamFactory
) -> None:
    # moto: kinesis-mock takes longer than the producer's request timeout to answer a
    # PutRecords of 500 full aggregates.
    stream = moto_stream(2)
    opts = options(stream.name, stream.client_config)
    (
        spark.range(MILLION, numPartitions=2)
        .selectExpr(
            "CAST(id AS STRING) AS partition_key", "CAST(CAST(id AS STRING) AS BINARY) AS data"
        )
        .write.format("kinesis")
        .options(**opts)
        .mode("append")
        .save()
    )
    back = spark.read.format("kinesis").options(**opts).load()
    stats = back.selectExpr(
        "count(*) AS n",
        "count(DISTINCT data) AS distinct",
        "min(CAST(CAST(data AS STRING) AS LONG)) AS lo",
        "max(CAST(CAST(data AS STRING) AS LONG)) AS hi",
    ).collect()[0]
    assert (stats.n, stats.distinct, stats.lo, stats.hi) == (MILLION, MILLION, 0, MILLION - 1)


def test_a_query_reads_through_a_stream_consumer(
    spark: Any, kinesis_stream: StreamFactory, tmp_path: Path
) -> None:
    stream = kinesis_stream(2)
    put(stream, 0, 50)
    query = (
        spark.readStream.format("kinesis")
        .options(**options(stream.name, stream.client_config))
        .option("consumerName", "spark-query")
        .option("maxRecordsPerTrigger", "30")
        .load()
        .selectExpr("CAST(data AS STRING) AS value")
        .writeStream.format("memory")
        .queryName("by_fan_out")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    try:
        query.awaitTermination(120)
    finally:
        query.stop()
    values = [row.value for row in spark.sql("SELECT value FROM by_fan_out").collect()]
    assert sorted(values) == sorted(f"k{i % KEYS}:{i // KEYS}" for i in range(50))
    client = stream.boto_client()
    arn = client.describe_stream_summary(StreamName=stream.name)["StreamDescriptionSummary"][
        "StreamARN"
    ]
    consumers = client.list_stream_consumers(StreamARN=arn)["Consumers"]
    assert [c["ConsumerName"] for c in consumers] == ["spark-query"]
