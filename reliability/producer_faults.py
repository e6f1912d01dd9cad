"""The producer under faults: every record lands or fails with its attempts, none lost.

A fault proxy in front of moto throttles, fails, resets, stalls and truncates PutRecords calls
(truncation makes the ambiguous case: written, but the answer never arrived) and fails single
records inside successful answers. Then, with every PutRecords throttled, a second batch with a
short TTL must come back failed with ``Expired``, its attempts and the last error, within its
TTL. Between the two, a smaller batch goes through the same faults with ``preserve_order=True``:
no record of it may land before a record of its key put earlier. The stream is read back as a
KCL reader sees it and reconciled record by record:

- each record has exactly one terminal result (the producer's own counters agree);
- a success names a (shard, sequence, sub-sequence) that holds exactly that record;
- a failure carries an error code, a message and its attempts, and arrived within the TTL
  (plus one request timeout: a request in flight when the TTL runs out is waited for);
- lost = neither; extra copies in the stream are counted as duplicates.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import time
from collections import Counter
from collections.abc import Sequence

from kinesis_core.aws.config import ClientConfig
from kinesis_core.local.fault_proxy import FaultProxy
from kinesis_core.local.faults import FaultConfig, FaultKind, FaultRule
from kinesis_core.producer import EXPIRED, BatchResult, Producer, ProducerConfig, RecordResult
from kinesis_core.records import KinesisRecord
from reliability._common import (
    MakeStream,
    ShardPosition,
    faults_injected,
    kcl_view,
    payload,
    record_id,
    shard_position,
    via,
)
from reliability.result import SuiteResult

NAME = "producer under faults"
CHUNK = 1_000
WINDOW = 5
"""Batches of CHUNK records in flight at once."""
EXPIRY_RECORDS = 200
REQUEST_TIMEOUT = 2.0
EXPIRY_TTL = 2.0
SLACK = 1.0
"""Seconds a result may come after TTL plus one request timeout (timers, a busy machine)."""

FAULTS = FaultConfig.from_rates(
    throttle=0.04,
    limit_exceeded=0.1,
    internal_error=0.03,
    service_unavailable=0.02,
    reset=0.02,
    stall=0.005,
    truncate=0.02,
    put_record_throttle=0.05,
    put_record_internal_error=0.02,
    latency_ms=1,
    latency_jitter_ms=4,
    stall_seconds=REQUEST_TIMEOUT * 3,
)
ALL_THROTTLED = FaultConfig((FaultRule(FaultKind.THROTTLE, 1.0, frozenset({"PutRecords"})),))

Entry = tuple[bytes, str, int | None]


def make_records(first: int, count: int, rng: random.Random) -> list[Entry]:
    """Mostly small records, some with explicit hash keys, about 1% too big to aggregate."""
    out: list[Entry] = []
    for i in range(first, first + count):
        roll = rng.random()
        size = rng.randint(52_000, 64_000) if roll < 0.01 else rng.randint(20, 300)
        ehk = rng.randrange(2**128) if roll > 0.9 else None
        out.append((payload(i, size), f"key-{rng.randrange(2_000)}", ehk))
    return out


async def _produce(
    client_config: ClientConfig,
    stream_name: str,
    batches: Sequence[list[Entry]],
    producer_config: ProducerConfig,
) -> tuple[list[tuple[float, BatchResult]], int, int]:
    """Submit the batches, at most ``WINDOW`` unfinished at a time (as an application paces
    itself: the TTL measures the producer, not a queue of our own); return (submit time,
    result) per batch and the producer's own count of records received and of outcomes."""
    async with Producer(
        stream_name, client_config=client_config, producer_config=producer_config
    ) as p:
        submitted: list[tuple[float, asyncio.Future[BatchResult]]] = []
        for batch in batches:
            if len(submitted) >= WINDOW:
                await submitted[-WINDOW][1]
            submitted.append((time.monotonic(), await p.submit_many(batch)))
        results = [(at, await future) for at, future in submitted]
        await p.flush()
        metrics = p.metrics()
    return (
        results,
        metrics.user_records_received,
        metrics.user_records_put + metrics.user_records_failed,
    )


def producer_under_faults(
    make_stream: MakeStream, *, records: int = 20_000, seed: int = 1, shards: int = 4
) -> SuiteResult:
    result = SuiteResult(NAME)
    started = time.monotonic()
    rng = random.Random(seed)  # noqa: S311 - a seeded simulation, not cryptography
    stream = make_stream(shards)
    main = [make_records(i, min(CHUNK, records - i), rng) for i in range(0, records, CHUNK)]
    expiry = [make_records(records, EXPIRY_RECORDS, rng)]
    ordered_count = max(500, records // 10)
    first_ordered = records + EXPIRY_RECORDS
    ordered = [
        make_records(i, min(CHUNK, first_ordered + ordered_count - i), rng)
        for i in range(first_ordered, first_ordered + ordered_count, CHUNK)
    ]
    # Small aggregates and requests: many more PutRecords calls, so many more faults per record.
    main_config = ProducerConfig(
        request_timeout=REQUEST_TIMEOUT, aggregation_max_size=1024, collection_max_count=5
    )
    expiry_config = dataclasses.replace(
        main_config, record_ttl=EXPIRY_TTL, record_max_buffered_time=0.05
    )
    with FaultProxy(stream.endpoint_url, FAULTS, seed=seed) as proxy:
        client_config = via(stream.client_config, proxy.endpoint_url)
        outcomes, received, finished = asyncio.run(
            _produce(client_config, stream.name, main, main_config)
        )
        in_order, received_3, finished_3 = asyncio.run(
            _produce(
                client_config,
                stream.name,
                ordered,
                dataclasses.replace(main_config, preserve_order=True),
            )
        )
        received += received_3
        finished += finished_3
        proxy.configure(ALL_THROTTLED)
        expired, received_2, finished_2 = asyncio.run(
            _produce(client_config, stream.name, expiry, expiry_config)
        )
        result.faults = faults_injected(proxy.stats())
        result.note(proxy.stats().summary())
    if received + received_2 != finished + finished_2:
        result.problem(
            f"the producer received {received + received_2} records and reported "
            f"{finished + finished_2} terminal outcomes"
        )
    attempted = [entry for batch in main + ordered + expiry for entry in batch]
    result.attempted = len(attempted)
    results: list[tuple[float, float, RecordResult]] = []
    for ttl, batch_outcomes in (
        (main_config.record_ttl, outcomes),
        (main_config.record_ttl, in_order),
        (EXPIRY_TTL, expired),
    ):
        for submitted_at, batch in batch_outcomes:
            results.extend((submitted_at, ttl, r) for r in batch)
    if len(results) != len(attempted):
        result.problem(f"{len(attempted)} records put, {len(results)} results")
    _reconcile(result, attempted, results, kcl_view(stream))
    if not all(not r.success and r.error_code == EXPIRED for _, _, r in results[-EXPIRY_RECORDS:]):
        result.problem("records put while every PutRecords was throttled did not all expire")
    start = len(attempted) - EXPIRY_RECORDS - ordered_count
    result.note(_key_order(attempted[:start], results[:start]))
    behind, checked = _behind(attempted[start:-EXPIRY_RECORDS], results[start:-EXPIRY_RECORDS])
    result.note(
        f"with preserve_order=True: {behind} of {checked} records landed before a record of "
        "the same key put earlier"
    )
    if behind:
        result.problem(f"preserve_order: {behind} records overtook an earlier one of their key")
    result.seconds = time.monotonic() - started
    return result


def _reconcile(
    result: SuiteResult,
    attempted: Sequence[Entry],
    results: Sequence[tuple[float, float, RecordResult]],
    stream_records: Sequence[KinesisRecord],
) -> None:
    at: dict[ShardPosition, bytes] = {}
    copies: Counter[int] = Counter()
    for record in stream_records:
        at[shard_position(record)] = record.data
        copies[record_id(record.data)] += 1
    claimed: Counter[ShardPosition] = Counter(
        (r.shard_id, *r.position) for _, _, r in results if r.shard_id and r.position
    )
    shared = late = failed_but_written = max_attempts = 0
    codes: Counter[str] = Counter()
    for (data, _, _), (submitted_at, ttl, r) in zip(attempted, results, strict=False):
        max_attempts = max(max_attempts, len(r.attempts))
        result.duplicated += max(copies[record_id(data)] - 1, 0)
        if r.attempts and r.attempts[-1].ended_at - submitted_at > ttl + REQUEST_TIMEOUT + SLACK:
            late += 1
        if r.success:
            assert r.shard_id is not None
            assert r.position is not None
            where = (r.shard_id, *r.position)
            if at.get(where) == data:
                result.delivered += 1
                continue
            result.lost += 1
            shared += claimed[where] > 1
            if result.lost <= 3:
                result.problem(
                    f"record {record_id(data)} was reported written at {where}, where a KCL "
                    f"reader finds {'nothing' if where not in at else 'another record'}; "
                    f"attempts: {[(a.error_code, a.shard_id) for a in r.attempts]}"
                )
        elif r.error_code and r.error_message and r.attempts:
            result.failed += 1
            codes[r.error_code] += 1
            failed_but_written += copies[record_id(data)] > 0
        else:
            result.lost += 1
            result.problem(f"record {record_id(data)} failed without a code or attempts: {r!r}")
    unknown = set(copies) - {record_id(data) for data, _, _ in attempted}
    if unknown:
        result.problem(f"{len(unknown)} records in the stream were never put")
    if shared:
        result.problem(
            f"{shared} of the lost records share their reported position with another record: "
            "the server acknowledged two writes with one sequence number and kept one"
        )
    if late:
        result.problem(
            f"{late} records got their result more than TTL + one request timeout after put"
        )
    result.note(
        f"failures by code: {dict(codes) or 'none'}; most attempts of one record: {max_attempts}"
    )
    if failed_but_written:
        result.note(
            f"{failed_but_written} records reported failed were written anyway (an answer cut "
            "short, then the TTL ran out): counted failed, not lost"
        )


def _key_order(
    attempted: Sequence[Entry], results: Sequence[tuple[float, float, RecordResult]]
) -> str:
    """How often a record landed before a record of the same key put earlier (retries reorder:
    without ``preserve_order`` the producer, like the KPL, keeps no order per key once a record
    is retried)."""
    behind, checked = _behind(attempted, results)
    return (
        f"order per key: {behind} of {checked} records landed before a record of the same key "
        "put earlier"
    )


def _behind(
    attempted: Sequence[Entry], results: Sequence[tuple[float, float, RecordResult]]
) -> tuple[int, int]:
    """(records that landed before a record of their key put earlier, records checked)."""
    last: dict[str, ShardPosition] = {}
    behind = checked = 0
    for (_, key, ehk), (_, _, r) in zip(attempted, results, strict=False):
        if ehk is not None or r.shard_id is None or r.position is None:
            continue
        where = (r.shard_id, *r.position)
        checked += 1
        if key in last and where < last[key]:
            behind += 1
        last[key] = max(where, last.get(key, where))
    return behind, checked
