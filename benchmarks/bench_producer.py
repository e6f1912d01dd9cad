"""Producer throughput, CPU and memory: kinesis_core's Producer against aiokpl and async-kinesis.

End to end, same run: 100-byte records with random 16-hex-digit partition keys, aggregation on,
into a fresh 16-shard stream on a moto server (``kinesis_core.local.MotoServer``, a subprocess:
its CPU is not ours). Measured from the first record handed over until every record is
confirmed (ours, aiokpl: every record's result; async-kinesis, which reports no per-record
result: until its flush returns). CPU is this process's ``time.process_time`` over the same
interval. The limiters are set far above what moto can take: the benchmark measures producers.

* ours: ``submit_many`` in batches of 5,000 (no future per record), ``rate_limit=10_000`` (%).
* ours with ``preserve_order=True``: the same, with one Kinesis record (one aggregate) per shard
  in flight, so that each key's order holds across retries; its row shows the price.
* ours with explicit hash keys: the same records, each with an explicit hash key from a
  ``BalancedKeyAllocator`` of 4,096 keys (how the balanced allocator's users write,
  docs/partitioning.md): the aggregator's per-record path instead of its runs of keys.
* ours with record ids: the same records with ``record_ids=True`` (an automatic id each,
  written as runs, docs/effectively-once.md) against the same without, in turns (``TURNS``
  rounds, each on a fresh stream); target: with ids keeps 90% of the rate of without, in
  records per second and per CPU-second of this process (moto, in its own, sets most of the
  wall-clock time). Its CPU per record is in the CPU group too.
* aiokpl 0.2.0: ``await put_record`` per record, then ``await outcome.wait()`` for each; its
  rate limits at 10**7 records and 10**10 bytes per second per shard.
* async-kinesis 3.0.1: ``await put`` per record with its KPL string processor (aws-kinesis-agg
  aggregates, one container partition key for all records: no shard prediction, no per-record
  results), rate and bandwidth limits raised.

Telemetry: ours with OpenTelemetry metrics on (``ProducerConfig(telemetry=...)``, an SDK
``MeterProvider`` with an in-memory reader, collected once at the end and checked) against ours
with them off, on one stream, taking turns (``best_rates``: the fastest of a few runs each), so
that load from elsewhere on the machine hits both; target: on keeps 95% of the rate of off.

The peers are much slower per record, so they run on fewer records (rates, not totals, are
compared). Ours and async-kinesis take turns (``TURNS`` rounds, each on a fresh stream) and each
keeps its best rate and its lowest CPU: a burst of load from elsewhere on a shared machine then
hits both rather than one (a single run of each once gave 1.05x, and 1.83x before it); aiokpl,
at about a thousand records a second, runs once.

Memory: a fresh Python process produces 2,000,000 records (generated on the fly, in batches of
10,000) through a 64 MiB budget (``max_outstanding_bytes``); its peak RSS (``VmHWM``)
is compared with the budget plus 100 MB.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import resource
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

from benchmarks._table import Row, best_rates
from benchmarks.peers import why_missing
from kinesis_core.aws.config import ClientConfig
from kinesis_core.local import LocalStream, MotoServer
from kinesis_core.producer import Producer, ProducerConfig
from kinesis_core.shards.allocator import BalancedKeyAllocator

GROUP = "producer e2e (moto, 16 shards, 100 B, aggregated)"
OURS = "kinesis_core Producer"
ORDERED = "kinesis_core Producer, preserve_order=True"
EXPLICIT_GROUP = "producer with explicit hash keys (moto, 16 shards, 100 B, aggregated)"
EXPLICIT = "kinesis_core Producer, explicit hash keys"
EXPLICIT_KEYS = 4_096
IDS_GROUP = "producer with record ids (moto, 16 shards, 100 B, aggregated)"
IDS_OFF = "kinesis_core Producer, record ids off"
IDS_ON = "kinesis_core Producer, record ids on"
TELEMETRY_GROUP = "producer with OpenTelemetry metrics (moto, 16 shards, 100 B, aggregated)"
METRICS_OFF = "kinesis_core Producer, telemetry off"
METRICS_ON = "kinesis_core Producer, telemetry on"
AIOKPL = "aiokpl"
ASYNC_KINESIS = "async-kinesis"
SHARDS = 16
RECORD_BYTES = 100
BATCH = 5_000
MEMORY_BUDGET = 64 * 1024 * 1024
MEMORY_SLACK_MB = 100
MEMORY_BATCH = 10_000
TURNS = 3
TURNS_QUICK = 2
"""Rounds in which ours and async-kinesis take turns (see the module's docstring)."""

Records = list[tuple[bytes, str]]
Subject = Callable[[LocalStream, Any], Awaitable[None]]


def _records(count: int, seed: int = 7) -> Records:
    rng = random.Random(seed)
    return [(rng.randbytes(RECORD_BYTES), f"{rng.getrandbits(64):016x}") for _ in range(count)]


def _our_config(**overrides: Any) -> ProducerConfig:
    options: dict[str, Any] = {"rate_limit": 10_000, "max_outstanding_records": 200_000}
    options.update(overrides)
    return ProducerConfig(**options)


async def _ours(stream: LocalStream, records: Records, **overrides: Any) -> None:
    async with Producer(
        stream.name, client_config=stream.client_config, producer_config=_our_config(**overrides)
    ) as producer:
        futures = [
            await producer.submit_many(records[i : i + BATCH])
            for i in range(0, len(records), BATCH)
        ]
        for batch in await asyncio.gather(*futures):
            batch.raise_for_failures()


async def _ours_ordered(stream: LocalStream, records: Records) -> None:
    await _ours(stream, records, preserve_order=True)


async def _ours_with_ids(stream: LocalStream, records: Records) -> None:
    await _ours(stream, records, record_ids=True)


def _with_explicit_hash_keys(records: Records) -> list[tuple[bytes, str, str]]:
    keys = [str(key) for key in BalancedKeyAllocator().allocate(EXPLICIT_KEYS)]
    return [(data, key, keys[i % EXPLICIT_KEYS]) for i, (data, key) in enumerate(records)]


async def _aiokpl(stream: LocalStream, records: Records) -> None:
    import aiokpl

    cc = stream.client_config
    config = aiokpl.Config(
        region=cc.region_name or "us-east-1",
        endpoint_url=cc.endpoint_url,
        aws_access_key_id=cc.aws_access_key_id,
        aws_secret_access_key=cc.aws_secret_access_key,
        rate_limit_records_per_sec_per_shard=1e7,
        rate_limit_bytes_per_sec_per_shard=1e10,
        max_outstanding_records=200_000,
    )
    async with aiokpl.Producer(config) as producer:
        outcomes = [
            await producer.put_record(stream=stream.name, partition_key=key, data=data)
            for data, key in records
        ]
        for outcome in outcomes:
            if not (await outcome.wait()).success:
                raise RuntimeError("aiokpl failed a record")


async def _async_kinesis(stream: LocalStream, records: Records) -> None:
    from kinesis import Producer as AsyncKinesisProducer
    from kinesis.processors import KPLStringProcessor

    cc = stream.client_config
    os.environ.setdefault("AWS_ACCESS_KEY_ID", cc.aws_access_key_id or "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", cc.aws_secret_access_key or "testing")
    items = [data.hex() for data, _ in records]  # its string processor takes text
    async with AsyncKinesisProducer(
        stream.name,
        endpoint_url=cc.endpoint_url,
        region_name=cc.region_name,
        processor=KPLStringProcessor(),
        put_rate_limit_per_shard=1_000_000,
        put_bandwidth_limit_per_shard=1_000_000,
        max_queue_size=100_000,
    ) as producer:
        for item in items:
            await producer.put(item)
        await producer.flush()


def _measure(server: MotoServer, subject: Subject, records: Any) -> tuple[float, float]:
    """(records/s, CPU seconds per million records) of one subject on a fresh stream."""
    stream = server.create_stream(f"bench-producer-{random.getrandbits(32):08x}", shards=SHARDS)
    try:
        wall, cpu = time.perf_counter(), time.process_time()
        asyncio.run(subject(stream, records))
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    finally:
        stream.delete()
        stream.close()
    return len(records) / wall, cpu / len(records) * 1e6


def _measure_in_turns(
    server: MotoServer, subjects: dict[str, tuple[Subject, Any]], turns: int
) -> dict[str, tuple[float, float]]:
    """(best records/s, lowest CPU s per million) of each subject over ``turns`` rounds in
    which the subjects take turns, each run on a fresh stream."""
    best: dict[str, tuple[float, float]] = {}
    for _ in range(turns):
        for name, (subject, records) in subjects.items():
            rate, cpu = _measure(server, subject, records)
            best_rate, best_cpu = best.get(name, (0.0, float("inf")))
            best[name] = (max(best_rate, rate), min(best_cpu, cpu))
    return best


def _measure_telemetry(server: MotoServer, records: Records, repeat: int) -> dict[str, float]:
    """Records/s of ours with telemetry off and on, taking turns on one stream."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    from kinesis_core.telemetry import Telemetry

    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    telemetry = Telemetry(meter_provider=provider)
    stream = server.create_stream(f"bench-telemetry-{random.getrandbits(32):08x}", shards=SHARDS)
    try:
        rates = best_rates(
            {
                METRICS_OFF: lambda: asyncio.run(_ours(stream, records)),
                METRICS_ON: lambda: asyncio.run(_ours(stream, records, telemetry=telemetry)),
            },
            len(records),
            repeat=repeat,
            warmup=0,
        )
        sent = [
            point.value
            for resource in reader.get_metrics_data().resource_metrics
            for scope in resource.scope_metrics
            for metric in scope.metrics
            if metric.name == "messaging.client.sent.messages"
            for point in metric.data.data_points
        ]
        if sum(sent) != repeat * len(records):
            raise RuntimeError(f"telemetry counted {sum(sent)} records sent, not {repeat} runs")
    finally:
        provider.shutdown()
        stream.delete()
        stream.close()
    return rates


def _generate(count: int) -> Iterator[Records]:
    rng = random.Random(11)
    for start in range(0, count, MEMORY_BATCH):
        n = min(MEMORY_BATCH, count - start)
        yield [(rng.randbytes(RECORD_BYTES), f"{rng.getrandbits(64):016x}") for _ in range(n)]


async def _produce_for_memory(stream: str, client_config: ClientConfig, count: int) -> int:
    config = _our_config(max_outstanding_records=10**9, max_outstanding_bytes=MEMORY_BUDGET)
    written = 0

    def tally(future: asyncio.Future[Any]) -> None:
        nonlocal written
        written += future.result().succeeded_count

    async with Producer(stream, client_config=client_config, producer_config=config) as producer:
        for batch in _generate(count):
            (await producer.submit_many(batch)).add_done_callback(tally)
        await producer.flush()
    return written


def _memory_child(endpoint_url: str, stream: str, count: int) -> None:
    """Entry point of the memory subprocess: produce, print peak RSS and counts as JSON."""
    from kinesis_core.local import local_client_config

    start = time.perf_counter()
    written = asyncio.run(_produce_for_memory(stream, local_client_config(endpoint_url), count))
    print(
        json.dumps(
            {
                "records": written,
                "seconds": time.perf_counter() - start,
                "peak_rss_mb": _peak_rss_kib() / 1024,
            }
        )
    )


def _peak_rss_kib() -> int:
    """This process's peak RSS in KiB.

    Linux's ``ru_maxrss`` carries over the parent's RSS across fork and exec, so a child of a
    big benchmark process would report the parent's size; ``VmHWM`` belongs to the new program.
    """
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _measure_memory(server: MotoServer, count: int) -> dict[str, Any]:
    stream = server.create_stream(f"bench-memory-{random.getrandbits(32):08x}", shards=SHARDS)
    try:
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "benchmarks.bench_producer",
                "--memory-child",
                server.endpoint_url,
                stream.name,
                str(count),
            ],
            check=True,
            capture_output=True,
            text=True,
        )
    finally:
        stream.delete()
        stream.close()
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def run(quick: bool) -> list[Row]:
    ours_n, aiokpl_n, async_kinesis_n, ordered_n = (
        (100_000, 3_000, 30_000, 50_000) if quick else (1_000_000, 20_000, 200_000, 300_000)
    )
    memory_n = 200_000 if quick else 2_000_000
    telemetry_n = ours_n // 2
    ids_n = ours_n
    counts = {OURS: ours_n, AIOKPL: aiokpl_n, ASYNC_KINESIS: async_kinesis_n}
    subjects: dict[str, Subject] = {OURS: _ours, AIOKPL: _aiokpl, ASYNC_KINESIS: _async_kinesis}
    absent = {name: why for name in (AIOKPL, ASYNC_KINESIS) if (why := why_missing(name))}
    rows: list[Row] = []
    with MotoServer() as server:
        data = _records(ours_n)
        measured = _measure_in_turns(
            server,
            {
                subject: (fn, data[: counts[subject]])
                for subject, fn in subjects.items()
                if subject in (OURS, ASYNC_KINESIS) and subject not in absent
            },
            TURNS_QUICK if quick else TURNS,
        )
        if AIOKPL not in absent:
            measured[AIOKPL] = _measure(server, _aiokpl, data[:aiokpl_n])
        ordered = _measure(server, _ours_ordered, data[:ordered_n])
        explicit = _measure_in_turns(
            server,
            {
                OURS: (_ours, data[:ordered_n]),
                EXPLICIT: (_ours, _with_explicit_hash_keys(data[:ordered_n])),
            },
            TURNS_QUICK if quick else TURNS,
        )
        with_ids = _measure_in_turns(
            server,
            {IDS_OFF: (_ours, data[:ids_n]), IDS_ON: (_ours_with_ids, data[:ids_n])},
            TURNS_QUICK if quick else TURNS,
        )
        telemetry = _measure_telemetry(server, data[:telemetry_n], 3 if quick else 5)
        memory = _measure_memory(server, memory_n)
    for subject in subjects:
        rate, _ = measured.get(subject, (None, None))
        rows.append(
            Row(
                GROUP,
                subject,
                rate,
                "records/s",
                baseline=AIOKPL if subject == OURS else None,
                target=20.0 if subject == OURS else None,
                note=absent.get(subject, f"{counts[subject]:,} records"),
                minimum=100_000 if subject == OURS else None,
            )
        )
    rows.append(
        Row(
            GROUP,
            f"{OURS} vs {ASYNC_KINESIS}",
            measured[OURS][0],
            "records/s",
            baseline=ASYNC_KINESIS,
            note="same as the first row, ratio to async-kinesis",
        )
    )
    rows.append(
        Row(
            GROUP,
            ORDERED,
            ordered[0],
            "records/s",
            baseline=OURS,
            note=f"{ordered_n:,} records; one aggregate per shard in flight, ratio to the default",
        )
    )
    rows.append(
        Row(EXPLICIT_GROUP, OURS, explicit[OURS][0], "records/s", note=f"{ordered_n:,} records")
    )
    rows.append(
        Row(
            EXPLICIT_GROUP,
            EXPLICIT,
            explicit[EXPLICIT][0],
            "records/s",
            baseline=OURS,
            target=0.8,
            note=f"the same records, {EXPLICIT_KEYS:,} balanced keys; in turns with the first",
        )
    )
    rows.append(
        Row(IDS_GROUP, IDS_OFF, with_ids[IDS_OFF][0], "records/s", note=f"{ids_n:,} records")
    )
    rows.append(
        Row(
            IDS_GROUP,
            IDS_ON,
            with_ids[IDS_ON][0],
            "records/s",
            baseline=IDS_OFF,
            target=0.9,
            note="the same records, an automatic id each; in turns with the first",
        )
    )
    for subject in (IDS_OFF, IDS_ON):
        rows.append(
            Row(
                f"{IDS_GROUP}, per CPU-second",
                subject,
                1e6 / with_ids[subject][1],
                "records/cpu-s",
                baseline=IDS_OFF if subject == IDS_ON else None,
                target=0.9 if subject == IDS_ON else None,
                note="the lowest CPU of the same runs; moto's is not counted"
                if subject == IDS_ON
                else "",
            )
        )
    rows.append(
        Row(
            TELEMETRY_GROUP,
            METRICS_OFF,
            telemetry[METRICS_OFF],
            "records/s",
            note=f"{telemetry_n:,} records",
        )
    )
    rows.append(
        Row(
            TELEMETRY_GROUP,
            METRICS_ON,
            telemetry[METRICS_ON],
            "records/s",
            baseline=METRICS_OFF,
            target=0.95,
            note="fastest of alternating runs; ratio to telemetry off",
        )
    )
    cpus = {subject: measured[subject][1] for subject in subjects if subject in measured}
    cpus[ORDERED] = ordered[1]
    cpus[IDS_OFF] = with_ids[IDS_OFF][1]
    cpus[IDS_ON] = with_ids[IDS_ON][1]
    for subject in [*subjects, ORDERED, IDS_OFF, IDS_ON]:
        cpu = cpus.get(subject)
        rows.append(
            Row(
                "producer CPU (lower is better)",
                subject,
                cpu,
                "CPU s / 1M records",
                note=absent.get(subject, ""),
            )
        )
    limit = MEMORY_BUDGET / 2**20 + MEMORY_SLACK_MB
    rows.append(
        Row(
            "producer memory",
            f"peak RSS, {memory['records']:,} records",
            memory["peak_rss_mb"],
            "MB",
            note=f"budget 64 MiB + {MEMORY_SLACK_MB} MB; "
            f"{memory['records'] / memory['seconds']:,.0f} records/s",
            maximum=limit,
        )
    )
    return rows


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--memory-child":
        _memory_child(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    else:
        from benchmarks._table import render

        print(render(run(quick="--quick" in sys.argv)))
