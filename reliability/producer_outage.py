"""A long outage under the producer: memory stays inside the budget, the endpoint is not
hammered, and everything is written once the endpoint is back.

A producer writes to moto through a proxy at a steady rate. The proxy then goes away (its port
refuses connections) for ``outage`` seconds (10 minutes in the full run) and comes back on the
same port. The record TTL is longer than the outage, so the producer keeps every record it
accepted and retries it with backoff; its budget (``max_outstanding_bytes``) fills and the
caller waits. Measured: the process's resident memory over the outage against the budget plus a
fixed margin (every record's attempt history is bounded, so it does not grow with the
outage's length), the PutRecords attempts per second while the endpoint was gone, the longest
history of one record, how long after the endpoint came back the first record and the last one
were written, and the caller's submit rate before and during the outage. Every record accepted
must then be in the stream where its result says (none failed: the TTL outlasts the outage).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

import psutil

from kinesis_core.local._server import free_port
from kinesis_core.local.fault_proxy import FaultProxy
from kinesis_core.local.streams import LocalStream
from kinesis_core.producer import BatchResult, Producer, ProducerConfig, RecordResult
from reliability._common import MakeStream, kcl_view, payload, shard_position, via
from reliability.result import SuiteResult

NAME = "producer long outage"
RECORD_BYTES = 1_000
BATCH = 50
PERIOD = 0.1
"""Seconds between two submit_many calls of the caller (500 records/s)."""
BUDGET = 32 * 2**20
MARGIN = 64 * 2**20
"""The fixed margin over the budget that the process may grow by during the outage."""


@dataclass
class _Run:
    stream: LocalStream
    config: ProducerConfig
    proxy: FaultProxy
    outage: float
    submitted: list[tuple[float, asyncio.Future[BatchResult]]] = field(default_factory=list)
    accepted: list[float] = field(default_factory=list)
    """When each submit_many call returned (its records accepted)."""
    rss: list[tuple[float, int]] = field(default_factory=list)
    budget_full_at: float | None = None
    stop: asyncio.Event = field(default_factory=asyncio.Event)

    async def produce(self, producer: Producer) -> None:
        n = 0
        while not self.stop.is_set():
            batch = [(payload(i, RECORD_BYTES), f"key-{i % 997}") for i in range(n, n + BATCH)]
            n += BATCH
            at = time.monotonic()
            self.submitted.append((at, await producer.submit_many(batch)))
            self.accepted.append(time.monotonic())
            await asyncio.sleep(PERIOD)

    async def sample(self, producer: Producer) -> None:
        process = psutil.Process()
        while not self.stop.is_set():
            now = time.monotonic()
            self.rss.append((now, process.memory_info().rss))
            if self.budget_full_at is None and producer.outstanding_bytes > 0.85 * BUDGET:
                self.budget_full_at = now
            await asyncio.sleep(0.5)


def _rate(times: list[float], start: float, end: float) -> float:
    """Records accepted per second in [start, end)."""
    calls = sum(1 for t in times if start <= t < end)
    return calls * BATCH / max(end - start, 1e-9)


async def _outage(run: _Run, result: SuiteResult, before: float, after: float) -> None:
    client_config = via(run.stream.client_config, run.proxy.endpoint_url, connect_timeout=1.0)
    async with Producer(
        run.stream.name, client_config=client_config, producer_config=run.config
    ) as p:
        tasks = [asyncio.create_task(run.produce(p)), asyncio.create_task(run.sample(p))]
        await asyncio.sleep(before)
        baseline = max(rss for _, rss in run.rss)
        requests_before = p.metrics().put_records_requests
        await run.proxy.stop()
        down_at = time.monotonic()
        await asyncio.sleep(run.outage)
        requests = p.metrics().put_records_requests - requests_before
        peak = max(rss for t, rss in run.rss if t >= down_at)
        await run.proxy.start()
        up_at = time.monotonic()
        await asyncio.gather(*(future for at, future in run.submitted if at < up_at))
        drained = time.monotonic() - up_at
        await asyncio.sleep(after)
        run.stop.set()
        await asyncio.gather(*tasks)
    results = [r for _, future in run.submitted for r in await future]
    first_written = min(
        (r.attempts[-1].ended_at for r in results if r.success and r.attempts[-1].ended_at > up_at),
        default=float("inf"),
    )
    grown = peak - baseline
    result.note(
        f"outage {run.outage:g} s: resident memory grew {grown / 2**20:.0f} MB over its level "
        f"before the outage (limit: the {BUDGET / 2**20:.0f} MiB budget + a "
        f"{MARGIN / 2**20:.0f} MB margin); longest history of one record: "
        f"{max(len(r.attempts) + (r.elided is not None) for r in results)} entries for "
        f"{max(r.attempt_count for r in results)} attempts"
    )
    full = [
        rss
        for t, rss in run.rss
        if run.budget_full_at is not None and run.budget_full_at <= t <= up_at
    ]
    if run.budget_full_at is not None and len(full) > 1:
        result.note(
            f"the budget was full for {up_at - run.budget_full_at:.0f} s of the outage; "
            f"resident memory meanwhile moved by {(max(full) - min(full)) / 2**20:.1f} MB"
        )
    result.note(
        f"{requests} PutRecords attempts while the endpoint was gone "
        f"({requests / run.outage:.2f} per second); after it came back the first record was "
        f"written within {first_written - up_at:.1f} s, every record within {drained:.1f} s"
    )
    result.note(
        f"the caller's submit rate: {_rate(run.accepted, down_at - before, down_at):.0f} "
        f"records/s before the outage, {_rate(run.accepted, down_at, down_at + 5):.0f} in its "
        "first 5 s (until the budget fills, then the caller waits)"
    )
    if grown > BUDGET + MARGIN:
        result.problem(f"memory grew {grown / 2**20:.0f} MB: over the budget plus the margin")
    if drained >= run.config.record_ttl:
        result.problem(f"records were still outstanding {drained:.0f} s after the outage")
    _reconcile(result, run.stream, results)


def _reconcile(result: SuiteResult, stream: LocalStream, results: list[RecordResult]) -> None:
    at = {shard_position(r): r.data for r in kcl_view(stream)}
    for i, r in enumerate(results):
        result.attempted += 1
        if r.success and r.shard_id and r.position:
            if at.get((r.shard_id, *r.position)) == payload(i, RECORD_BYTES):
                result.delivered += 1
                continue
        elif r.error_code and r.attempts:
            result.failed += 1
            continue
        result.lost += 1
    if result.failed:
        result.problem(f"{result.failed} records failed although the TTL outlasts the outage")


def producer_outage(
    make_stream: MakeStream, *, outage: float = 600.0, before: float = 5.0, after: float = 5.0
) -> SuiteResult:
    result = SuiteResult(NAME, faults=1)
    started = time.monotonic()
    stream = make_stream(4)
    config = ProducerConfig(
        record_ttl=outage + 120.0,
        max_outstanding_bytes=BUDGET,
        request_timeout=2.0,
        connect_timeout=1.0,
    )
    proxy = FaultProxy(stream.endpoint_url, port=free_port())
    run = _Run(stream, config, proxy, outage)

    async def main() -> None:
        await proxy.start()
        try:
            await _outage(run, result, before, after)
        finally:
            await proxy.stop()

    try:
        asyncio.run(main())
    finally:
        stream.close()
    result.seconds = time.monotonic() - started
    return result
