"""Consumer throughput: kinesis_core's Consumer against async-kinesis 3.0.1, same data, same run.

Data: an 8-shard moto stream pre-filled with raw 100-byte records (async-kinesis's aggregation
is not KPL-compatible, so the comparison uses plain records), and a second 8-shard stream with
the same kind of user records packed in KPL aggregates (51,200 bytes, one shard each).

Two sources:

* ``moto``: the moto server (a subprocess). moto serializes every record through its generic
  service-model serializer, about 50 microseconds per record, so no consumer gets much more
  than about 20,000 plain records/s out of it. Aggregates are one Kinesis record for hundreds of
  user records, so there the consumer's own speed shows.
* ``replay``: the same GetRecords bodies moto produced, recorded once and served from memory by
  a small aiohttp server in another process (the other calls are forwarded to moto). This is
  what each consumer costs on its own.

The readers' pacing to the shard's 2 MiB/s of reads (``max_read_bytes_per_second``) is off: these
servers do not limit reads, and the benchmark measures consumers (async-kinesis has no such
pacing).

Measured: user records per second from the first delivery to the last (start-up excluded:
client creation, listing, first iterators), each record (or batch) acked,
TRIM_HORIZON, memory checkpoints; and the same per CPU-second of the consumer's process (the
servers run in other processes), which stays put when other work shares the machine. Ours per
record (``async for record``; ``record.ack()``) and in batches (``async for batch in
c.batches()``; ``batch.ack()``). async-kinesis with ``shard_fetch_rate=5`` (the service limit,
its default is 1) and its plain string processor. The 10x target applies where the consumers,
not moto, set the pace: on the replay.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import os
import pickle
import random
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from multiprocessing.connection import Connection
from typing import Any, NamedTuple

import aiohttp
from aiohttp import web

from benchmarks._serve import serve_until_told, served
from benchmarks._table import Row
from benchmarks.peers import why_missing
from kinesis_core.aggregation import AggregateBuilder
from kinesis_core.checkpoint import MemoryCheckpointStore
from kinesis_core.consumer import TRIM_HORIZON, Consumer
from kinesis_core.local import LOCAL_REGION, LocalStream, MotoServer, local_client_config
from kinesis_core.shards.hashing import hash_key

OURS = "kinesis_core"
PEER = "async-kinesis"
SHARDS = 8
RECORD_BYTES = 100
_TARGET = "X-Amz-Target"
_JSON = "application/x-amz-json-1.1"


def _records(count: int, seed: int) -> list[tuple[str, bytes]]:
    """Printable payloads: async-kinesis's string processor decodes them as UTF-8."""
    rng = random.Random(seed)
    alphabet = b"abcdefghijklmnopqrstuvwxyz0123456789"
    return [
        (f"user-{rng.randrange(1 << 30)}", bytes(rng.choices(alphabet, k=RECORD_BYTES)))
        for _ in range(count)
    ]


def _fill_raw(stream: LocalStream, count: int) -> None:
    client = stream.boto_client()
    records = _records(count, 1)
    for i in range(0, count, 500):
        client.put_records(
            StreamName=stream.name,
            Records=[{"Data": data, "PartitionKey": pk} for pk, data in records[i : i + 500]],
        )


def _fill_aggregated(stream: LocalStream, count: int) -> None:
    """KPL aggregates, each inside one shard's hash range, as a KPL producer writes them."""
    shards = stream.shards()
    ranges = sorted(
        (int(s["HashKeyRange"]["StartingHashKey"]), int(s["HashKeyRange"]["EndingHashKey"]))
        for s in shards
    )
    per_shard: dict[tuple[int, int], list[tuple[str, bytes]]] = {r: [] for r in ranges}
    for pk, data in _records(count, 2):
        key = hash_key(pk)
        per_shard[next(r for r in ranges if r[0] <= key <= r[1])].append((pk, data))
    entries = []
    for records in per_shard.values():
        builder = AggregateBuilder()
        for pk, data in records:
            if not builder.try_add(pk, None, data):
                entries.append(_entry(builder))
                builder.clear()
                builder.add(pk, None, data)
        if builder.count:
            entries.append(_entry(builder))
    for i in range(0, len(entries), 100):
        stream.boto_client().put_records(StreamName=stream.name, Records=entries[i : i + 100])


def _entry(builder: AggregateBuilder) -> dict[str, Any]:
    return {
        "Data": builder.build(),
        "PartitionKey": builder.container_partition_key,
        "ExplicitHashKey": builder.container_explicit_hash_key,
    }


# -- the replay server ------------------------------------------------------------------------


async def _record_bodies(
    endpoint: str, stream: str, shard_ids: list[str]
) -> dict[str, list[bytes]]:
    """Every GetRecords body of each shard from TRIM_HORIZON, as moto wrote it, with the next
    iterator rewritten to the replay server's own."""
    headers = {
        "Content-Type": _JSON,
        "Authorization": "AWS4-HMAC-SHA256 Credential=testing/20260101/us-east-1/kinesis/"
        "aws4_request, SignedHeaders=host, Signature=0",
    }

    async def call(session: aiohttp.ClientSession, op: str, body: dict[str, Any]) -> bytes:
        async with session.post(
            endpoint, data=json.dumps(body), headers={**headers, _TARGET: f"Kinesis_20131202.{op}"}
        ) as response:
            response.raise_for_status()
            return await response.read()

    bodies: dict[str, list[bytes]] = {}
    async with aiohttp.ClientSession() as session:
        for shard_id in shard_ids:
            raw = await call(
                session,
                "GetShardIterator",
                {"StreamName": stream, "ShardId": shard_id, "ShardIteratorType": "TRIM_HORIZON"},
            )
            iterator = json.loads(raw)["ShardIterator"]
            pages: list[bytes] = []
            while True:
                raw = await call(
                    session, "GetRecords", {"ShardIterator": iterator, "Limit": 10_000}
                )
                page = json.loads(raw)
                if not page["Records"]:
                    break
                iterator = page["NextShardIterator"]
                page["NextShardIterator"] = f"replay|{shard_id}|{len(pages) + 1}"
                pages.append(json.dumps(page).encode())
            bodies[shard_id] = pages
    return bodies


def _replay_main(path: str, moto_url: str, conn: Connection) -> None:
    with open(path, "rb") as f:
        bodies: dict[str, list[bytes]] = pickle.load(f)
    asyncio.run(_replay_serve(bodies, moto_url, conn))


async def _replay_serve(bodies: dict[str, list[bytes]], moto_url: str, conn: Connection) -> None:
    async with aiohttp.ClientSession() as forward:

        async def handle(request: web.Request) -> web.Response:
            body = await request.read()
            op = request.headers.get(_TARGET, "").rpartition(".")[2]
            if op == "GetShardIterator":
                shard_id = json.loads(body)["ShardId"]
                reply = json.dumps({"ShardIterator": f"replay|{shard_id}|0"}).encode()
                return web.Response(body=reply, content_type=_JSON)
            if op == "GetRecords":
                iterator = json.loads(body)["ShardIterator"]
                _, shard_id, index = iterator.split("|")
                pages = bodies[shard_id]
                if int(index) < len(pages):
                    return web.Response(body=pages[int(index)], content_type=_JSON)
                empty = {"Records": [], "NextShardIterator": iterator, "MillisBehindLatest": 0}
                return web.Response(body=json.dumps(empty).encode(), content_type=_JSON)
            headers = {k: v for k, v in request.headers.items() if k.lower() != "host"}
            async with forward.post(moto_url, data=body, headers=headers) as response:
                return web.Response(
                    body=await response.read(), status=response.status, content_type=_JSON
                )

        await serve_until_told(handle, conn)


@contextlib.contextmanager
def _replay(bodies: dict[str, list[bytes]], moto_url: str) -> Iterator[str]:
    with tempfile.NamedTemporaryFile(suffix=".pickle", delete=False) as f:
        pickle.dump(bodies, f)
    try:
        with served(_replay_main, f.name, moto_url) as url:
            yield url
    finally:
        os.unlink(f.name)


# -- the consumers ----------------------------------------------------------------------------


class _Rate(NamedTuple):
    wall: float
    cpu: float


class _Clock:
    """Starts at the first delivery: what is timed is the steady flow, not the start-up
    (client creation, listing shards, first iterators), for both consumers alike."""

    def __init__(self) -> None:
        self.wall = self.cpu = 0.0
        self.counted = 0

    def delivered(self, records: int) -> None:
        if not self.wall:
            self.wall, self.cpu = time.perf_counter(), time.process_time()
            return  # the first delivery opens the clock; it is not counted
        self.counted += records

    def rate(self) -> _Rate:
        wall = time.perf_counter() - self.wall
        cpu = time.process_time() - self.cpu
        return _Rate(self.counted / wall, self.counted / cpu)


async def _ours(
    endpoint: str,
    stream: str,
    count: int,
    *,
    batches: bool,
    limit: int = 10_000,
    **options: Any,
) -> _Rate:
    """Our rate reading ``count`` records of ``stream`` (``options``: more of the Consumer's)."""
    config = local_client_config(endpoint, max_pool_connections=SHARDS * 2)
    seen = 0
    clock = _Clock()
    async with Consumer(
        stream,
        client_config=config,
        checkpoint_store=MemoryCheckpointStore(),
        initial_position=TRIM_HORIZON,
        max_records_per_call=limit,
        max_read_bytes_per_second=math.inf,
        close_timeout=0,
        **options,
    ) as consumer:
        if batches:
            async for batch in consumer.batches():
                clock.delivered(len(batch))
                seen += len(batch)
                batch.ack()
                if seen >= count:
                    break
        else:
            async for record in consumer:
                clock.delivered(1)
                seen += 1
                record.ack()
                if seen >= count:
                    break
        rate = clock.rate()
    return rate


async def _peer(endpoint: str, stream: str, count: int) -> _Rate:
    from kinesis import Consumer as AsyncKinesisConsumer
    from kinesis.processors import StringProcessor

    seen = 0
    clock = _Clock()
    async with AsyncKinesisConsumer(
        stream,
        endpoint_url=endpoint,
        region_name=LOCAL_REGION,
        iterator_type="TRIM_HORIZON",
        processor=StringProcessor(),
        record_limit=10_000,
        shard_fetch_rate=5,
        max_queue_size=20_000,
    ) as consumer:
        while seen < count:
            async for _ in consumer:
                clock.delivered(1)
                seen += 1
                if seen >= count:
                    break
        rate = clock.rate()
    return rate


def _best(runs: int, fn: Callable[[], Awaitable[_Rate]]) -> _Rate:
    rates = [asyncio.run(fn()) for _ in range(runs)]
    return _Rate(max(r.wall for r in rates), max(r.cpu for r in rates))


Measured = tuple[str, _Rate | None, str | None, float | None, str, float | None]
"""subject, rate (None: not measured), baseline, target ratio, note, minimum records/s"""


def _rows(group: str, rates: list[Measured]) -> list[Row]:
    """Each subject twice: records/s, and records per CPU-second in a group of its own."""
    return [
        Row(group, subject, rate and rate.wall, "rec/s", baseline, target, note, minimum)
        for subject, rate, baseline, target, note, minimum in rates
    ] + [
        Row(
            f"{group}, per CPU-second",
            subject,
            rate and rate.cpu,
            "rec/cpu-s",
            baseline,
            target,
            note,
        )
        for subject, rate, baseline, target, note, _ in rates
    ]


def run(quick: bool) -> list[Row]:
    raw_count = 40_000 if quick else 120_000
    kpl_count = 100_000 if quick else 800_000
    runs = 1 if quick else 2
    # async-kinesis takes its credentials from the environment, and logs each connection it
    # loses while closing.
    logging.getLogger("kinesis").setLevel(logging.ERROR)
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    rows: list[Row] = []
    with MotoServer() as moto:
        raw = moto.create_stream("raw", SHARDS)
        _fill_raw(raw, raw_count)
        _fill_aggregated(moto.create_stream("kpl", SHARDS), kpl_count)
        shard_ids = [s["ShardId"] for s in raw.shards()]
        bodies = asyncio.run(_record_bodies(moto.endpoint_url, "raw", shard_ids))

        absent = why_missing(PEER)

        def measure(group: str, endpoint: str, target: float | None, note: str) -> None:
            peer = None if absent else _best(runs, lambda: _peer(endpoint, "raw", raw_count))
            per_record = _best(runs, lambda: _ours(endpoint, "raw", raw_count, batches=False))
            batch = _best(runs, lambda: _ours(endpoint, "raw", raw_count, batches=True))
            rows.extend(
                _rows(
                    group,
                    [
                        (PEER, peer, None, None, absent or "", None),
                        (f"{OURS} per record", per_record, PEER, None, "", None),
                        (f"{OURS} batches", batch, PEER, target, note, None),
                    ],
                )
            )

        measure(f"consume moto, {raw_count:,} x 100 B", moto.endpoint_url, None, "moto-bound")
        with _replay(bodies, moto.endpoint_url) as replay_url:
            measure(f"consume replay, {raw_count:,} x 100 B", replay_url, 10.0, "")
        # 100 aggregates of 51,200 bytes: about 5 MB per GetRecords (Kinesis caps it at 10 MiB).
        kpl = _best(
            runs, lambda: _ours(moto.endpoint_url, "kpl", kpl_count, batches=True, limit=100)
        )
        kpl_records = _best(
            runs, lambda: _ours(moto.endpoint_url, "kpl", kpl_count, batches=False, limit=100)
        )
        rows.extend(
            _rows(
                f"consume moto, {kpl_count:,} x 100 B in KPL aggregates",
                [
                    (f"{OURS} batches", kpl, None, None, "", 200_000),
                    (f"{OURS} per record", kpl_records, f"{OURS} batches", None, "", None),
                ],
            )
        )
    return rows
