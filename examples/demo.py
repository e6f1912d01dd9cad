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
A line says when each part starts and how it ended; the last line is the overall result
(``demo: OK ...`` or ``demo: FAILED ...``, with exit status 1).
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
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kinesis_core import ClientConfig
from kinesis_core.aggregation import deaggregate
from kinesis_core.aws.noise import silence_third_party_noise
from kinesis_core.checkpoint import SQLiteCheckpointStore
from kinesis_core.consumer import TRIM_HORIZON, Consumer
from kinesis_core.local import KinesisMock, LocalStream
from kinesis_core.producer import Producer, ProducerConfig
from kinesis_core.telemetry import Telemetry


def make_records(count: int, users: int, start: int) -> list[tuple[bytes, str]]:
    return [
        (
            json.dumps({"user": f"user-{i % users}", "seq": i}).encode(),
            f"user-{i % users}",
        )
        for i in range(start, start + count)
    ]


async def produce(
    stream: LocalStream, total: int, users: int, telemetry: Telemetry | None = None
) -> dict[str, int]:
    """Write ``total`` records in two halves, splitting the busiest shard in between."""
    per_shard: collections.Counter[str] = collections.Counter()
    failed = 0
    half = total // 2
    config = ProducerConfig(telemetry=telemetry)
    async with Producer(
        stream.name, client_config=stream.client_config, producer_config=config
    ) as producer:
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
    stream: LocalStream,
    config: ClientConfig,
    store_path: Path,
    total: int,
    telemetry: Telemetry | None = None,
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
        telemetry=telemetry,
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


@dataclass(frozen=True)
class Part:
    """What one part of the demo did: records written, records read back, and the verdict."""

    written: int
    read: int
    ok: bool
    summary: str

    @property
    def lost(self) -> int:
        return max(0, self.written - self.read)


async def run_core(
    server: KinesisMock, total: int, users: int, telemetry: Telemetry | None = None
) -> Part:
    """The core part; ``telemetry`` turns the producer's and consumer's metrics on
    (examples/metrics_prometheus.py)."""
    with tempfile.TemporaryDirectory() as tmp:
        stream = server.create_stream("demo", shards=4)
        print(f"  stream {stream.name!r} with 4 shards created")

        began = time.perf_counter()
        print(f"  producing {total} records from {users} users ...", flush=True)
        written = await produce(stream, total, users, telemetry)
        produce_s = time.perf_counter() - began

        began = time.perf_counter()
        print("  consuming from TRIM_HORIZON ...", flush=True)
        read, duplicates = await consume(
            stream, stream.client_config, Path(tmp) / "checkpoints.sqlite3", total, telemetry
        )
        consume_s = time.perf_counter() - began

        print(f"\n  {'shard':<22} {'written':>8} {'read':>8}")
        for shard in sorted(set(written) | set(read)):
            print(f"  {shard:<22} {written.get(shard, 0):>8} {read.get(shard, 0):>8}")
        got = sum(read.values()) - duplicates
        count = sum(written.values())
        print(
            f"  written {count} in {produce_s:.1f} s, read {got} distinct ({duplicates} "
            f"duplicates) in {consume_s:.1f} s"
        )
        return Part(
            count, got, got == total, f"{count} written, {got} read, {duplicates} duplicates"
        )


def run_beam(server: KinesisMock) -> Part:
    from examples.beam_read_window_count import run_demo

    result = run_demo(server.endpoint_url)
    counted = sum(result.counts.values())
    ok = counted == result.written and result.written > 0
    summary = f"{result.written} clicks written, {counted} counted in {len(result.counts)} rows"
    return Part(result.written, counted, ok, summary)


def run_faust(server: KinesisMock, orders_to_write: int = 100, timeout: float = 90.0) -> Part:
    """Run the example Faust worker until every enriched order is in the output stream."""
    suffix = time.strftime("%H%M%S")
    orders = server.create_stream(f"orders-{suffix}", shards=2)
    enriched = server.create_stream(f"orders-enriched-{suffix}", shards=1)
    env = {
        **os.environ,
        **server.client_environment(),
        "ORDERS_STREAM": orders.name,
        "ENRICHED_STREAM": enriched.name,
        "ORDERS_TO_WRITE": str(orders_to_write),
        "PYTHONPATH": str(Path(__file__).resolve().parent.parent),
    }
    print(f"  faust worker: {orders.name} -> enrich (concurrency 4) -> {enriched.name}")
    began = time.monotonic()
    got: dict[int, dict[str, object]] = {}
    with tempfile.TemporaryDirectory() as tmp, open(Path(tmp) / "worker.log", "wb") as log:
        # Faust keeps its data (the checkpoints here) in a folder of its own: a temporary one.
        command = [sys.executable, "-m", "faust", "--datadir", str(Path(tmp) / "data")]
        worker = subprocess.Popen(
            [
                *command,
                "--quiet",
                "-A",
                "examples.faust_app",
                "worker",
                "--without-web",
                "-l",
                "error",
            ],
            env=env,
            cwd=tmp,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            reported = began
            while len(got) < orders_to_write and time.monotonic() - began < timeout:
                time.sleep(1.0)
                if worker.poll() is not None:
                    print(f"  the worker exited with status {worker.returncode}:")
                    print((Path(tmp) / "worker.log").read_text(errors="replace")[-3000:])
                    break
                for record in deaggregate(enriched.records(), enriched.name):
                    order = json.loads(record.data)
                    got[order["order_id"]] = order
                if time.monotonic() - reported >= 5.0 and len(got) < orders_to_write:
                    reported = time.monotonic()
                    print(
                        f"  {reported - began:.0f} s: {len(got)} of {orders_to_write} orders "
                        "enriched so far",
                        flush=True,
                    )
        finally:
            worker.terminate()
            worker.wait(timeout=30)
    tiers = collections.Counter(str(order["tier"]) for order in got.values())
    print(f"  tiers of the enriched orders: {dict(sorted(tiers.items()))}")
    ok = len(got) == orders_to_write
    return Part(orders_to_write, len(got), ok, f"{len(got)} of {orders_to_write} orders enriched")


PARTS = {
    "core": "Producer and Consumer of kinesis_core while a shard splits",
    "beam": "ReadFromKinesis -> windowed counts -> WriteToKinesis (reads for 10 s)",
    "faust": "KinesisChannel -> agent -> KinesisSink (about 15 s)",
}


def main() -> None:
    silence_third_party_noise()
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=5000, help="core: records (>= 2)")
    parser.add_argument("--users", type=int, default=300, help="core: partition keys (>= 1)")
    parser.add_argument("--only", choices=tuple(PARTS))
    args = parser.parse_args()
    if args.records < 2 or args.users < 1:
        parser.error(f"--records must be >= 2 and --users >= 1, got {args.records}, {args.users}")
    names = [name for name in PARTS if args.only in (None, name)]
    runs: dict[str, Callable[[KinesisMock], Part]] = {
        "core": lambda server: asyncio.run(run_core(server, args.records, args.users)),
        "beam": run_beam,
        "faust": run_faust,
    }
    parts: list[Part] = []
    began = time.monotonic()
    with KinesisMock() as server:
        print(f"demo: kinesis-mock is up at {server.endpoint_url}", flush=True)
        for index, name in enumerate(names, 1):
            label = f"[{index}/{len(names)}] {name}"
            print(f"\n{label}: {PARTS[name]} ...", flush=True)
            started = time.monotonic()
            try:
                part = runs[name](server)
            except Exception as exc:
                traceback.print_exc()
                part = Part(0, 0, False, f"failed: {exc!r}")
            verdict = "ok" if part.ok else "FAILED"
            took = time.monotonic() - started
            print(f"{label}: {verdict} in {took:.1f} s: {part.summary}", flush=True)
            parts.append(part)
    ok = all(part.ok for part in parts)
    print(
        f"\ndemo: {'OK' if ok else 'FAILED'} — {len(parts)} parts, "
        f"{sum(p.written for p in parts)} records written, {sum(p.read for p in parts)} read, "
        f"{sum(p.lost for p in parts)} lost, in {time.monotonic() - began:.0f} s",
        flush=True,
    )
    raise SystemExit(0 if ok else 1)


if __name__ == "__main__":
    main()
