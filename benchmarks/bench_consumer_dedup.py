"""The consumer's deduplication cost: the core Consumer with ``deduplicate=True`` against the same
without, on the same stream, in the same run.

Data: two 8-shard moto streams, each written by our Producer with ``record_ids=True``
(aggregated, 100-byte records, random partition keys):

* automatic ids: each aggregate carries one run of consecutive counters, which the window takes
  in one step (``ShardDedup.admit`` -> ``DedupWindow.seen_run``);
* caller-given ids (``put(..., record_id=str(uuid4()))``): each record's id is an entry of its
  own, taken one by one (``DedupWindow.seen``).

Read as in the consumer benchmark's KPL rows (``bench_consumer``): batches (``async for batch
in consumer.batches()``; ``batch.ack()``), 100 aggregates per GetRecords, TRIM_HORIZON, memory
checkpoints (with dedup each one stores the shard's window), reads unpaced; user records per
second from the first delivery to the last, and per CPU-second of the consumer's process (moto
runs in another). With and without dedup take turns (``TURNS`` rounds) and each keeps its best.
Every record arrives with dedup on too (none of these ids repeats): the read would not end
otherwise. Target: with dedup keeps 90% of the rate of without, per CPU-second (the consumer's
own cost; the wall-clock rate also waits on moto).
"""

from __future__ import annotations

import asyncio
import random
import uuid
from typing import Any

from benchmarks._table import Row
from benchmarks.bench_consumer import SHARDS, _ours, _Rate
from kinesis_core.local import LocalStream, MotoServer
from kinesis_core.producer import Producer, ProducerConfig

RECORD_BYTES = 100
TURNS = 3
TURNS_QUICK = 2
BATCH = 5_000
LIMIT = 10
"""Aggregates per GetRecords: about 4,100 records, so that a read takes many calls per shard."""
READ_TIMEOUT = 600.0
"""Seconds a read may take at most: a record dropped by mistake would make it wait forever."""
AUTOMATIC = "automatic ids"
GIVEN = "caller-given ids (uuid4)"
OFF = "kinesis_core batches, dedup off"
ON = "kinesis_core batches, deduplicate=True"


def _records(count: int, seed: int) -> list[tuple[bytes, str]]:
    rng = random.Random(seed)
    return [(rng.randbytes(RECORD_BYTES), f"{rng.getrandbits(64):016x}") for _ in range(count)]


async def _write(stream: LocalStream, items: list[Any]) -> None:
    config = ProducerConfig(record_ids=True, rate_limit=10_000, max_outstanding_records=200_000)
    async with Producer(
        stream.name, client_config=stream.client_config, producer_config=config
    ) as producer:
        futures = [
            await producer.submit_many(items[i : i + BATCH]) for i in range(0, len(items), BATCH)
        ]
        for batch in await asyncio.gather(*futures):
            batch.raise_for_failures()


def _fill(server: MotoServer, name: str, count: int, given_ids: bool) -> LocalStream:
    stream = server.create_stream(name, SHARDS)
    records = _records(count, 3)
    if given_ids:
        rng = random.Random(5)
        items: list[Any] = [
            (data, key, None, str(uuid.UUID(int=rng.getrandbits(128), version=4)))
            for data, key in records
        ]
    else:
        items = records
    asyncio.run(_write(stream, items))
    return stream


def _read(endpoint: str, stream: str, count: int, dedup: bool) -> _Rate:
    return asyncio.run(
        asyncio.wait_for(
            _ours(endpoint, stream, count, batches=True, limit=LIMIT, deduplicate=dedup),
            READ_TIMEOUT,
        )
    )


def _in_turns(endpoint: str, stream: str, count: int, turns: int) -> dict[str, _Rate]:
    """The best wall-clock and CPU rates of each subject over ``turns`` rounds in turns."""
    best = {OFF: _Rate(0.0, 0.0), ON: _Rate(0.0, 0.0)}
    for _ in range(turns):
        for subject, dedup in ((OFF, False), (ON, True)):
            rate = _read(endpoint, stream, count, dedup)
            best[subject] = _Rate(
                max(best[subject].wall, rate.wall), max(best[subject].cpu, rate.cpu)
            )
    return best


def run(quick: bool) -> list[Row]:
    count = 200_000 if quick else 800_000
    turns = TURNS_QUICK if quick else TURNS
    rows: list[Row] = []
    with MotoServer() as moto:
        for kind, given in ((AUTOMATIC, False), (GIVEN, True)):
            stream = _fill(moto, "given" if given else "automatic", count, given)
            best = _in_turns(moto.endpoint_url, stream.name, count, turns)
            group = f"consume moto with dedup, {count:,} x 100 B in KPL aggregates, {kind}"
            for suffix, unit, field in (
                ("", "rec/s", "wall"),
                (", per CPU-second", "rec/cpu-s", "cpu"),
            ):
                rows.append(Row(group + suffix, OFF, getattr(best[OFF], field), unit))
                rows.append(
                    Row(
                        group + suffix,
                        ON,
                        getattr(best[ON], field),
                        unit,
                        baseline=OFF,
                        target=0.9 if field == "cpu" else None,
                        note="in turns with the first",
                    )
                )
    return rows
