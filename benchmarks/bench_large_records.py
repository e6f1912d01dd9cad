"""Large records: the producer against a plain boto3 ``put_record`` loop, same data, same run.

Data: records of 1 MiB and of 5 MiB (random bytes, random partition keys) for a 4-shard stream
whose maximum record size is 10 MiB. The server is a small Kinesis stand-in in another process
(aiohttp): it answers ListShards and DescribeStreamSummary (``MaxRecordSizeInKiB`` 10240), and
takes PutRecord and PutRecords as Kinesis does: it parses every body, decodes every record's
data, checks the limits (10 MiB a record, 10 MiB and 500 records a request), routes each record
to the shard of its hash key and answers with sequence numbers. Neither local emulator serves
here: kinesis-mock writes about 1 MiB/s (both subjects would measure it), and moto refuses
records over 1 MiB. So what is measured is each client's own cost per MiB (botocore's
serialization, the producer's pipeline, the round trips), not what a shard takes (1 MiB/s).

* boto3 put_record loop: one boto3 client, one ``put_record`` per record, in order, which is
  what a user writes without a producer.
* kinesis_core Producer: ``put_many`` of the same records, default settings but two:
  ``rate_limit`` (as in the producer benchmark: the per-shard limiter paces 1.5 MiB/s per
  shard, the service's limit, which the stand-in does not have) and ``max_connections=4``: the
  stand-in is one process that reads every body it is sent at once and parses them one at a
  time, so 24 uploads of 5 MiB in flight only finish later together (measured: 54 MiB/s at 24,
  80 at 4, 66 at 1, where AWS would take them side by side).

Measured: MiB/s from the first record handed over to the last result (the client made and the
producer started before), best of the runs, per record size; target: the producer at >= 1x the
loop. Memory: a fresh process puts 100 records of 5 MiB in one ``put_many`` (each made when the
producer takes it, so the caller holds none) through the default 256 MiB budget; its peak RSS
(``VmHWM``) against the budget plus 150 MB.
"""

from __future__ import annotations

import asyncio
import json
import random
import subprocess
import sys
import time
from base64 import b64decode
from collections.abc import Sequence
from multiprocessing.connection import Connection
from typing import Any

import boto3
from aiohttp import web

from benchmarks._serve import serve_until_told, served
from benchmarks._table import Row
from benchmarks.bench_producer import _peak_rss_kib
from kinesis_core.local import local_client_config
from kinesis_core.producer import Producer, ProducerConfig
from kinesis_core.shards.hashing import LARGEST_RECORD_BYTES, MAX_PUT_RECORDS_BYTES, hash_key
from kinesis_core.shards.info import uniform_shards
from kinesis_core.shards.shard_map import ShardTable

GROUP = "producer, large records (stand-in server, 4 shards)"
MEMORY_GROUP = "producer memory, large records"
LOOP = "boto3 put_record loop"
OURS = "kinesis_core Producer"
STREAM = "large"
SHARDS = 4
MIB = 1024 * 1024
MEMORY_RECORDS = 100
MEMORY_BUDGET = 256 * MIB
MEMORY_SLACK_MB = 150
_JSON = "application/x-amz-json-1.1"


# -- the stand-in server ---------------------------------------------------------------------


def _serve_main(conn: Connection) -> None:
    asyncio.run(_serve(conn))


async def _serve(conn: Connection) -> None:
    shards = uniform_shards(SHARDS)
    table = ShardTable(shards)
    sequence = iter(range(10**15, 10**16))

    def size(entry: dict[str, Any]) -> int:
        """Data plus partition key, the data decoded as Kinesis decodes it."""
        return len(b64decode(entry["Data"])) + len(entry["PartitionKey"].encode())

    def land(entry: dict[str, Any], size: int) -> dict[str, Any]:
        if size > LARGEST_RECORD_BYTES:
            raise ValueError("record over 10 MiB")
        key = entry["PartitionKey"]
        ehk = entry.get("ExplicitHashKey")
        owner = table.owner(int(ehk) if ehk is not None else hash_key(key))
        assert owner is not None
        return {"SequenceNumber": str(next(sequence)), "ShardId": owner.shard_id}

    async def handle(request: web.Request) -> web.Response:
        body = json.loads(await request.read())
        op = request.headers.get("X-Amz-Target", "").rpartition(".")[2]
        if op == "ListShards":
            reply: dict[str, Any] = {
                "Shards": [
                    {
                        "ShardId": s.shard_id,
                        "HashKeyRange": {
                            "StartingHashKey": str(s.start_hash_key),
                            "EndingHashKey": str(s.end_hash_key),
                        },
                        "SequenceNumberRange": {"StartingSequenceNumber": "0"},
                    }
                    for s in shards
                ]
            }
        elif op == "DescribeStreamSummary":
            reply = {
                "StreamDescriptionSummary": {
                    "StreamName": STREAM,
                    "StreamARN": f"arn:aws:kinesis:us-east-1:000000000000:stream/{STREAM}",
                    "StreamStatus": "ACTIVE",
                    "OpenShardCount": SHARDS,
                    "MaxRecordSizeInKiB": LARGEST_RECORD_BYTES // 1024,
                }
            }
        elif op == "PutRecord":
            reply = land(body, size(body))
        elif op == "PutRecords":
            records = body["Records"]
            sizes = [size(r) for r in records]
            if len(records) > 500 or sum(sizes) > MAX_PUT_RECORDS_BYTES:
                raise ValueError("request over 500 records or 10 MiB")
            landed = [land(r, n) for r, n in zip(records, sizes, strict=True)]
            reply = {"FailedRecordCount": 0, "Records": landed}
        else:
            raise ValueError(f"the stand-in does not serve {op}")
        return web.Response(body=json.dumps(reply).encode(), content_type=_JSON)

    await serve_until_told(handle, conn)


# -- the subjects ----------------------------------------------------------------------------


def _records(count: int, size: int, seed: int) -> list[tuple[bytes, str]]:
    rng = random.Random(seed)
    return [(rng.randbytes(size), f"{rng.getrandbits(64):016x}") for _ in range(count)]


def _loop(endpoint: str, records: list[tuple[bytes, str]]) -> float:
    config = local_client_config(endpoint)
    client = boto3.session.Session().client(
        "kinesis",
        endpoint_url=endpoint,
        region_name=config.region_name,
        aws_access_key_id=config.aws_access_key_id,
        aws_secret_access_key=config.aws_secret_access_key,
    )
    try:
        start = time.perf_counter()
        for data, key in records:
            client.put_record(StreamName=STREAM, Data=data, PartitionKey=key)
        return time.perf_counter() - start
    finally:
        client.close()


CONFIG = {"rate_limit": 10_000, "max_connections": 4}
"""The producer's settings here (see the module's docstring)."""


async def _ours(endpoint: str, records: list[tuple[bytes, str]]) -> float:
    config = ProducerConfig(**CONFIG)
    async with Producer(
        STREAM, client_config=local_client_config(endpoint), producer_config=config
    ) as producer:
        start = time.perf_counter()
        (await producer.put_many(records)).raise_for_failures()
        return time.perf_counter() - start


# -- memory ----------------------------------------------------------------------------------


class LazyRecords(Sequence[tuple[bytes, str]]):
    """``count`` records of ``size`` random bytes, each made when it is asked for: a caller
    that holds none of them (the producer's own memory shows)."""

    def __init__(self, count: int, size: int) -> None:
        self.count = count
        self.size = size

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index: Any) -> Any:
        if not isinstance(index, int) or not 0 <= index < self.count:
            raise IndexError(index)
        return (random.Random(index).randbytes(self.size), f"key-{index}")


async def _produce_for_memory(endpoint: str, count: int) -> None:
    config = ProducerConfig(**CONFIG, max_outstanding_bytes=MEMORY_BUDGET)
    async with Producer(
        STREAM, client_config=local_client_config(endpoint), producer_config=config
    ) as producer:
        (await producer.put_many(LazyRecords(count, 5 * MIB))).raise_for_failures()


def _memory_child(endpoint: str, count: int) -> None:
    """Entry point of the memory subprocess: produce, print the peak RSS as JSON."""
    start = time.perf_counter()
    asyncio.run(_produce_for_memory(endpoint, count))
    seconds = time.perf_counter() - start
    print(json.dumps({"seconds": seconds, "peak_rss_mb": _peak_rss_kib() / 1024}))


def _measure_memory(endpoint: str, count: int) -> dict[str, Any]:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.bench_large_records",
            "--memory-child",
            endpoint,
            str(count),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def run(quick: bool) -> list[Row]:
    counts = {1: 8, 5: 3} if quick else {1: 48, 5: 16}
    runs = 1 if quick else 5
    memory_count = 12 if quick else MEMORY_RECORDS
    rows: list[Row] = []
    with served(_serve_main) as endpoint:
        for mib, count in counts.items():
            records = _records(count, mib * MIB, seed=mib)
            best = {LOOP: float("inf"), OURS: float("inf")}
            for _ in range(runs):
                best[LOOP] = min(best[LOOP], _loop(endpoint, records))
                best[OURS] = min(best[OURS], asyncio.run(_ours(endpoint, records)))
            total = mib * count
            note = f"{count} records of {mib} MiB"
            rows.append(Row(GROUP, f"{LOOP}, {mib} MiB", total / best[LOOP], "MiB/s", note=note))
            rows.append(
                Row(
                    GROUP,
                    f"{OURS}, {mib} MiB",
                    total / best[OURS],
                    "MiB/s",
                    baseline=f"{LOOP}, {mib} MiB",
                    target=1.0,
                    note=note,
                )
            )
        memory = _measure_memory(endpoint, memory_count)
    budget_mb = MEMORY_BUDGET / 1e6
    rows.append(
        Row(
            MEMORY_GROUP,
            f"peak RSS, {memory_count} x 5 MiB put at once",
            memory["peak_rss_mb"],
            "MB",
            note=f"budget {MEMORY_BUDGET // MIB} MiB + {MEMORY_SLACK_MB} MB; "
            f"{memory_count * 5 / memory['seconds']:.0f} MiB/s",
            maximum=budget_mb + MEMORY_SLACK_MB,
        )
    )
    return rows


if __name__ == "__main__" and len(sys.argv) == 4 and sys.argv[1] == "--memory-child":
    _memory_child(sys.argv[2], int(sys.argv[3]))
