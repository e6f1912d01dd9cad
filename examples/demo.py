"""The main job: the connectors against a local Kinesis emulator (kinesis-mock on 127.0.0.1).

1. The core: produce records from a few hundred users (KPL-aggregated per predicted shard)
   while one shard is split in the middle, then read them back with the consumer (parents
   before children, acks, SQLite checkpoints) and reconcile.
2. Beam: a streaming pipeline reads click events with ReadFromKinesis while they are written
   and a shard splits half-way, counts them per window and user, writes the counts back with
   WriteToKinesis, and prints the windowed counts (examples/beam_read_window_count.py).
3. Faust: a ``faust worker`` (examples/faust_app.py, no Kafka) writes orders into one stream,
   an agent enriches them and a KinesisSink writes them to another; the demo reads that
   stream back and checks every order arrived.

Run it with ``scripts/demo`` (``--records N`` for the core's volume, ``--only core|beam|faust``).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kinesis_core.aggregation import deaggregate
from kinesis_core.checkpoint import SQLiteCheckpointStore
from kinesis_core.client import ClientConfig
from kinesis_core.consumer import TRIM_HORIZON, Consumer
from kinesis_core.local import (
    DUMMY_ACCESS_KEY_ID,
    DUMMY_SECRET_ACCESS_KEY,
    LOCAL_REGION,
    KinesisMock,
    LocalStream,
)
from kinesis_core.producer import Producer


def make_records(count: int, users: int, start: int) -> list[tuple[bytes, str]]:
    return [
        (
            json.dumps({"user": f"user-{i % users}", "seq": i}).encode(),
            f"user-{i % users}",
        )
        for i in range(start, start + count)
    ]


async def produce(stream: LocalStream, total: int, users: int) -> dict[str, int]:
    """Write ``total`` records in two halves, splitting the busiest shard in between."""
    per_shard: collections.Counter[str] = collections.Counter()
    failed = 0
    half = total // 2
    async with Producer(stream.name, client_config=stream.client_config) as producer:
        for start, count in ((0, half), (half, total - half)):
            if start:
                busiest = per_shard.most_common(1)[0][0]
                children = await asyncio.to_thread(stream.split, busiest)
                print(f"  split {busiest} into {', '.join(children)} while producing")
            result = await producer.put_many(make_records(count, users, start))
            failed += len(result.failures)
            per_shard.update(s for s in result.shard_ids if s is not None)
        metrics = producer.metrics()
    print(f"  {total - failed} records written, {failed} failed")
    per_kinesis_record = metrics.user_records_per_kinesis_record.mean or 0.0
    print(f"  {per_kinesis_record:.1f} user records per Kinesis record (KPL aggregation)")
    return dict(per_shard)


async def consume(
    stream: LocalStream, config: ClientConfig, store_path: Path, total: int
) -> tuple[dict[str, int], int]:
    """Read until every record was seen once; return records per shard and duplicates."""
    per_shard: collections.Counter[str] = collections.Counter()
    seen: set[int] = set()
    duplicates = 0
    store = SQLiteCheckpointStore(store_path)
    async with Consumer(
        stream.name,
        client_config=config,
        checkpoint_store=store,
        application_name="demo",
        initial_position=TRIM_HORIZON,
        checkpoint_interval=0.5,
    ) as consumer:
        async for batch in consumer.batches():
            for record in batch:
                seq = json.loads(record.data)["seq"]
                if seq in seen:
                    duplicates += 1
                seen.add(seq)
                per_shard[record.shard_id] += 1
            batch.ack()
            if len(seen) >= total:
                break
    print("  shards and their final checkpoints (sequence number ends in ..., sub-sequence):")
    for status in consumer.status():
        parents = ",".join(status.parent_shard_ids) or "-"
        checkpoint = status.checkpoint
        if isinstance(checkpoint, tuple):
            checkpoint = f"...{str(checkpoint[0])[-8:]}, {checkpoint[1]}"
        print(f"    {status.shard_id:<22} {status.state.name:<8} {parents:<22} {checkpoint}")
    return dict(per_shard), duplicates


async def run_core(server: KinesisMock, total: int, users: int) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        stream = server.create_stream("demo", shards=4)
        print(f"stream {stream.name!r} with 4 shards created")

        began = time.perf_counter()
        print(f"producing {total} records from {users} users ...")
        written = await produce(stream, total, users)
        produce_s = time.perf_counter() - began

        began = time.perf_counter()
        print("consuming from TRIM_HORIZON ...")
        read, duplicates = await consume(
            stream, stream.client_config, Path(tmp) / "checkpoints.sqlite3", total
        )
        consume_s = time.perf_counter() - began

        print()
        print(f"{'shard':<22} {'written':>8} {'read':>8}")
        for shard in sorted(set(written) | set(read)):
            print(f"{shard:<22} {written.get(shard, 0):>8} {read.get(shard, 0):>8}")
        got = sum(read.values()) - duplicates
        print(
            f"\nwritten {sum(written.values())} in {produce_s:.1f} s, read {got} distinct "
            f"({duplicates} duplicates) in {consume_s:.1f} s"
        )
        lost = total - got
        print("nothing lost" if lost == 0 else f"LOST {lost} records")
        return 0 if lost == 0 else 1


def run_beam(server: KinesisMock) -> int:
    from examples.beam_read_window_count import run_demo

    counts = run_demo(server.endpoint_url)
    return 0 if counts else 1


def run_faust(server: KinesisMock, orders_to_write: int = 100, timeout: float = 90.0) -> int:
    """Run the example Faust worker until every enriched order is in the output stream."""
    suffix = time.strftime("%H%M%S")
    orders = server.create_stream(f"orders-{suffix}", shards=2)
    enriched = server.create_stream(f"orders-enriched-{suffix}", shards=1)
    env = {
        **os.environ,
        "AWS_ENDPOINT_URL_KINESIS": server.endpoint_url,
        "AWS_DEFAULT_REGION": LOCAL_REGION,
        "AWS_ACCESS_KEY_ID": DUMMY_ACCESS_KEY_ID,
        "AWS_SECRET_ACCESS_KEY": DUMMY_SECRET_ACCESS_KEY,
        "ORDERS_STREAM": orders.name,
        "ENRICHED_STREAM": enriched.name,
        "ORDERS_TO_WRITE": str(orders_to_write),
        "PYTHONPATH": str(Path(__file__).resolve().parent.parent),
    }
    command = [sys.executable, "-m", "faust", "--quiet", "-A", "examples.faust_app", "worker"]
    print(f"  faust worker: {orders.name} -> enrich (concurrency 4) -> {enriched.name}")
    began = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp, open(Path(tmp) / "worker.log", "wb") as log:
        worker = subprocess.Popen(
            [*command, "--without-web", "-l", "error"],
            env=env,
            cwd=tmp,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            got: dict[int, dict[str, object]] = {}
            while len(got) < orders_to_write and time.monotonic() - began < timeout:
                time.sleep(1.0)
                if worker.poll() is not None:
                    print(f"  the worker exited with status {worker.returncode}:")
                    print((Path(tmp) / "worker.log").read_text(errors="replace")[-3000:])
                    break
                for record in deaggregate(enriched.records(), enriched.name):
                    order = json.loads(record.data)
                    got[order["order_id"]] = order
        finally:
            worker.terminate()
            worker.wait(timeout=30)
    tiers = collections.Counter(str(order["tier"]) for order in got.values())
    print(
        f"  {len(got)} of {orders_to_write} orders enriched and written back in "
        f"{time.monotonic() - began:.1f} s; tiers: {dict(tiers)}"
    )
    return 0 if len(got) == orders_to_write else 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=5000)
    parser.add_argument("--users", type=int, default=300)
    parser.add_argument("--only", choices=("core", "beam", "faust"))
    args = parser.parse_args()
    status = 0
    with KinesisMock() as server:
        print(f"kinesis-mock listening on {server.endpoint_url}")
        if args.only in (None, "core"):
            print("\n=== 1. kinesis_core: Producer and Consumer ===")
            status |= asyncio.run(run_core(server, args.records, args.users))
        if args.only in (None, "beam"):
            print("\n=== 2. Beam: ReadFromKinesis -> windowed counts -> WriteToKinesis ===")
            status |= run_beam(server)
        if args.only in (None, "faust"):
            print("\n=== 3. Faust: KinesisChannel -> agent -> KinesisSink ===")
            status |= run_faust(server)
    raise SystemExit(status)


if __name__ == "__main__":
    main()
