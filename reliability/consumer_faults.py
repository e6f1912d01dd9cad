"""The consumer under faults: everything delivered at least once, checkpoints never ahead of acks.

Records (KPL aggregates and plain ones) go into a kinesis-mock stream, half before the consumer
starts and half while it reads. The consumer reads through a fault proxy that throttles,
fails, expires iterators, resets, stalls and truncates its calls; its checkpoint store fails
some writes too. The application acks most records at once and holds the others back to ack
them later, out of order. Half-way the consumer is closed with records still unacked, and a
new one resumes from the stored checkpoints.

Checks: every record written is delivered at least once (lost = never delivered); every
checkpoint written covers only records acked before the write (the store is wrapped and each
put is compared, at the end, with the stream as a KCL reader sees it); duplicates are counted.

With ``fan_out``, the consumers read by enhanced fan-out: the proxy also cuts subscriptions
mid-stream and delays their chunks, and subscriptions are renewed every few seconds.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from kinesis_core.checkpoint import (
    Checkpoint,
    CheckpointValue,
    MemoryCheckpointStore,
    checkpoint_order,
)
from kinesis_core.consumer import TRIM_HORIZON, Consumer, EnhancedFanOut
from kinesis_core.local.fault_proxy import FaultProxy
from kinesis_core.local.faults import FaultConfig, FaultKind, FaultRule
from kinesis_core.local.streams import LocalStream
from kinesis_core.producer import Producer, ProducerConfig
from kinesis_core.records import KinesisRecord, Position
from reliability._common import (
    MakeStream,
    faults_injected,
    kcl_view,
    payload,
    positions_by_shard,
    record_id,
    via,
)
from reliability.result import SuiteResult

NAME = "consumer under faults"
NAME_FAN_OUT = "consumer under faults (fan-out)"
READ_TIMEOUT = 2.0
STORE_FAILURE_RATE = 0.1
HOLD_BACK = 0.3
"""Share of records the application acks later, out of order."""

FAULTS = FaultConfig(
    rules=(
        FaultRule(FaultKind.THROTTLE, 0.08),
        FaultRule(FaultKind.LIMIT_EXCEEDED, 0.2),
        FaultRule(FaultKind.INTERNAL_ERROR, 0.04),
        FaultRule(FaultKind.SERVICE_UNAVAILABLE, 0.03),
        FaultRule(FaultKind.EXPIRED_ITERATOR, 0.08),
        FaultRule(FaultKind.RESET, 0.03),
        FaultRule(FaultKind.STALL, 0.01),
        FaultRule(FaultKind.TRUNCATE, 0.03),
        FaultRule(FaultKind.LATENCY, 1.0),
    ),
    latency_ms=1,
    latency_jitter_ms=4,
    stall_seconds=READ_TIMEOUT * 1.5,
)


FAULTS_FAN_OUT = FaultConfig(
    rules=(
        FaultRule(FaultKind.THROTTLE, 0.05),
        FaultRule(FaultKind.LIMIT_EXCEEDED, 0.1),
        FaultRule(FaultKind.INTERNAL_ERROR, 0.04),
        FaultRule(FaultKind.SERVICE_UNAVAILABLE, 0.03),
        FaultRule(FaultKind.RESET, 0.03),
        FaultRule(FaultKind.STREAM_CUT, 0.3),
        FaultRule(FaultKind.STREAM_DELAY, 0.3),
        FaultRule(FaultKind.LATENCY, 1.0),
    ),
    latency_ms=1,
    latency_jitter_ms=4,
    stream_cut_after_events=2,
    stream_delay_ms=300,
)
"""Subscriptions cut after two events (a third of them) and slowed down; the listings and
registration calls throttled, failed and reset."""


@dataclass
class Ledger:
    """What the application saw: deliveries, and a clock that ticks once per ack."""

    deliveries: list[tuple[int, KinesisRecord]] = field(default_factory=list)
    """(phase: which consumer, record)."""
    phase: int = 0
    acks: int = 0
    acked_at: dict[tuple[str, Position], int] = field(default_factory=dict)
    """(shard, position) -> the ack clock right after its first ack."""
    ids: set[int] = field(default_factory=set)
    final_write_failed: int = 0
    resumed_from: dict[str, CheckpointValue] = field(default_factory=dict)
    """The stored checkpoints the second consumer started from."""

    def delivered(self, record: KinesisRecord) -> None:
        self.deliveries.append((self.phase, record))
        self.ids.add(record_id(record.data))

    def ack(self, record: KinesisRecord) -> None:
        record.ack()
        self.acks += 1
        self.acked_at.setdefault((record.shard_id, record.position), self.acks)


@dataclass(frozen=True)
class Write:
    shard_id: str
    value: CheckpointValue
    acks: int
    """The ack clock when the write was made."""


class RecordingStore(MemoryCheckpointStore):
    """A memory store that fails some writes (before writing) and records every one it made."""

    def __init__(self, clock: Callable[[], int], rng: random.Random, failure_rate: float) -> None:
        super().__init__()
        self._clock = clock
        self._rng = rng
        self._failure_rate = failure_rate
        self.writes: list[Write] = []
        self.failures = 0

    async def put(
        self, application: str, stream: str, shard_id: str, value: CheckpointValue, **options: Any
    ) -> Checkpoint:
        if self._rng.random() < self._failure_rate:
            self.failures += 1
            raise ConnectionError("injected: the checkpoint store is unreachable")
        acks = self._clock()
        row = await super().put(application, stream, shard_id, value, **options)
        self.writes.append(Write(shard_id, value, acks))
        return row


def make_records(first: int, count: int, rng: random.Random) -> list[tuple[bytes, str]]:
    """Small records (aggregated) and about 3% bigger than an aggregate (sent plain)."""
    return [
        (
            payload(i, 1_500 if rng.random() < 0.03 else rng.randint(20, 300)),
            f"k{rng.randrange(500)}",
        )
        for i in range(first, first + count)
    ]


async def _produce(stream: LocalStream, records: list[tuple[bytes, str]]) -> set[int]:
    """Write ``records`` without faults; return the ids of those written."""
    config = ProducerConfig(aggregation_max_size=1_024)
    async with Producer(
        stream.name, client_config=stream.client_config, producer_config=config
    ) as p:
        batch = await p.put_many(records)
    return {record_id(data) for (data, _), r in zip(records, batch, strict=True) if r.success}


async def _consume(
    consumer: Consumer,
    ledger: Ledger,
    rng: random.Random,
    done: Callable[[], bool],
    deadline: float,
    held: list[KinesisRecord],
) -> None:
    """Deliver until ``done()`` or the deadline, acking most records at once and the held
    ones later in random order."""
    await consumer.start()
    try:
        while not done() and time.monotonic() < deadline:
            try:
                record = await asyncio.wait_for(consumer.__anext__(), 1.0)
            except asyncio.TimeoutError:
                continue
            ledger.delivered(record)
            if rng.random() < HOLD_BACK:
                held.append(record)
            else:
                ledger.ack(record)
            if len(held) > 25 or rng.random() < 0.05:
                rng.shuffle(held)
                for _ in range(len(held) // 2):
                    ledger.ack(held.pop())
    finally:
        try:
            await consumer.close()
        except ConnectionError:
            ledger.final_write_failed += 1  # the injected store failure hit the last flush


async def _run(
    stream: LocalStream,
    proxy_url: str,
    records: int,
    rng: random.Random,
    ledger: Ledger,
    store: RecordingStore,
    deadline: float,
    fan_out: bool,
) -> set[int]:
    first, second = records // 2, records - records // 2
    written = await _produce(stream, make_records(0, first, rng))
    options: dict[str, Any] = {
        "client_config": via(
            stream.client_config, proxy_url, read_timeout=READ_TIMEOUT, connect_timeout=1.0
        ),
        "checkpoint_store": store,
        "initial_position": TRIM_HORIZON,
        "checkpoint_interval": 0.2,
        "shard_refresh_interval": 1.0,
        "close_timeout": 0.3,
        "idle_interval": 0.2,
        "max_records_per_call": 5,  # many calls: many faults
    }
    if fan_out:
        options["enhanced_fan_out"] = EnhancedFanOut(
            consumer_name="reliability",
            max_subscription_seconds=5.0,
            closed_check_interval=1.0,
            max_failures=60,
        )
    producing = asyncio.create_task(_produce(stream, make_records(first, second, rng)))
    held: list[KinesisRecord] = []

    def halfway() -> bool:
        if len(ledger.ids) < first:
            return False
        # Closed with a few records still unacked: the next consumer reads them again.
        while len(held) > 3:
            ledger.ack(held.pop())
        return True

    await _consume(Consumer(stream.name, **options), ledger, rng, halfway, deadline, held)
    written |= await producing
    held.clear()
    ledger.phase = 1
    ledger.resumed_from = {
        row.shard_id: row.value for row in await store.list("default", stream.name)
    }
    await _consume(
        Consumer(stream.name, **options),
        ledger,
        rng,
        lambda: ledger.ids >= written,
        deadline,
        held,
    )
    return written


def consumer_under_faults(
    make_stream: MakeStream,
    *,
    records: int = 2_000,
    seed: int = 2,
    shards: int = 4,
    timeout: float = 120.0,
    fan_out: bool = False,
) -> SuiteResult:
    result = SuiteResult(NAME_FAN_OUT if fan_out else NAME)
    started = time.monotonic()
    rng = random.Random(seed)  # noqa: S311 - a seeded simulation, not cryptography
    stream = make_stream(shards)
    ledger = Ledger()
    store = RecordingStore(lambda: ledger.acks, random.Random(seed + 1), STORE_FAILURE_RATE)  # noqa: S311
    faults = FAULTS_FAN_OUT if fan_out else FAULTS
    with FaultProxy(stream.endpoint_url, faults, seed=seed) as proxy:
        written = asyncio.run(
            _run(
                stream, proxy.endpoint_url, records, rng, ledger, store, started + timeout, fan_out
            )
        )
        stats = proxy.stats()
    result.faults = faults_injected(stats) + store.failures
    result.note(
        f"{stats.summary()}; checkpoint writes failed: {store.failures} (the final one at "
        f"close: {ledger.final_write_failed})"
    )
    result.attempted = len(written)
    result.delivered = len(ledger.ids & written)
    result.lost = len(written - ledger.ids)
    result.duplicated = len(ledger.deliveries) - len(ledger.ids)
    if records - len(written):
        result.note(f"{records - len(written)} records could not be written (no faults there)")
    _check_redeliveries(result, ledger)
    _check_checkpoints(result, store.writes, ledger, positions_by_shard(kcl_view(stream)))
    result.seconds = time.monotonic() - started
    return result


def _check_redeliveries(result: SuiteResult, ledger: Ledger) -> None:
    """One consumer never delivers a record twice (expired iterators and retries resume after
    the last record read); the second one re-delivers only what was not checkpointed."""
    seen: list[set[tuple[str, Position]]] = [set(), set()]
    twice = checkpointed_again = 0
    for phase, record in ledger.deliveries:
        key = (record.shard_id, record.position)
        if key in seen[phase]:
            twice += 1
        seen[phase].add(key)
        stored = ledger.resumed_from.get(record.shard_id)
        if phase and key in seen[0] and isinstance(stored, tuple) and record.position <= stored:
            checkpointed_again += 1
    if twice:
        result.problem(f"{twice} records delivered twice by the same consumer")
    if checkpointed_again:
        result.problem(f"{checkpointed_again} checkpointed records delivered again after restart")
    result.note(
        f"restart: {len(seen[0] & seen[1])} records delivered before and after it, none of "
        "them at or below the stored checkpoint"
        if not checkpointed_again
        else "restart: checkpointed records came back"
    )


def _check_checkpoints(
    result: SuiteResult,
    writes: Sequence[Write],
    ledger: Ledger,
    truth: dict[str, list[Position]],
) -> None:
    """Every write covers only records acked before it; stored values never go backwards."""
    ahead = 0
    last: dict[str, CheckpointValue] = {}
    for write in writes:
        previous = last.get(write.shard_id)
        if previous is not None and checkpoint_order(write.value) < checkpoint_order(previous):
            result.problem(
                f"checkpoint of {write.shard_id} moved back: {previous} -> {write.value}"
            )
        last[write.shard_id] = write.value
        covered = truth.get(write.shard_id, [])
        if isinstance(write.value, tuple):
            covered = [p for p in covered if p <= write.value]
        elif write.value.value != "SHARD_END":
            continue
        for position in covered:
            acked = ledger.acked_at.get((write.shard_id, position))
            if acked is None or acked > write.acks:
                ahead += 1
                if ahead <= 3:
                    result.problem(
                        f"checkpoint {write.value} of {write.shard_id} written before "
                        f"{position} was acked"
                    )
                break
    result.note(f"{len(writes)} checkpoint writes checked against the acks; {ahead} ahead")
