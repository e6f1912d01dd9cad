"""A stream read back with the core Consumer from the trim horizon, plainly or deduplicating
(``ConsumerConfig(deduplicate=True)``, its checkpoints and windows in a SQLite file), and
optionally restarted halfway: what the duplicates and Beam-retry rows count at their reader."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from kinesis_core.checkpoint import MemoryCheckpointStore, SQLiteCheckpointStore
from kinesis_core.consumer import TRIM_HORIZON, Consumer
from kinesis_core.local.streams import LocalStream
from kinesis_core.records import KinesisRecord, Position
from reliability._common import record_id

QUIET = 1.5
"""Seconds without a record, once every expected record was delivered, after which a read
stops."""
APPLICATION = "default"
"""The consumer's ``application_name`` (its default): the checkpoint rows' key."""


@dataclass
class Read:
    """What a consumer delivered, in order, over its sessions."""

    records: list[KinesisRecord] = field(default_factory=list)
    dropped: int = 0
    """Copies the consumer dropped as duplicates (its status), summed over its sessions."""
    before_restart: int | None = None
    """Records delivered by the first session when the reader restarted."""
    window_bytes: int = 0
    """The largest dedup window stored in a checkpoint row at the end."""
    timed_out: bool = False
    """The read stopped at its timeout before every expected record came."""

    @property
    def copies(self) -> Counter[str | None]:
        """Times each record id was delivered."""
        return Counter(r.record_id for r in self.records)

    @property
    def duplicates(self) -> int:
        """Extra copies delivered, by record id."""
        return sum(n - 1 for n in self.copies.values())

    @property
    def duplicate_numbers(self) -> int:
        """Extra copies delivered, by the number at the start of the payload."""
        return len(self.records) - len(self.numbers())

    def numbers(self) -> set[int]:
        """The record numbers (payloads' prefixes) delivered."""
        return {record_id(r.data) for r in self.records}

    def caught_across_restart(self, stream: list[KinesisRecord]) -> int:
        """Records of ``stream`` (every user record in it) the second session had to drop with
        the windows the first one stored: copies of an id the first delivered, in a shard after
        the first's last delivered record there (its checkpoint)."""
        if self.before_restart is None:
            return 0
        first = self.records[: self.before_restart]
        ids = {r.record_id for r in first}
        last: dict[str, Position] = {}
        for r in first:
            last[r.shard_id] = max(last.get(r.shard_id, r.position), r.position)
        return sum(
            1
            for r in stream
            if r.record_id in ids and (r.shard_id not in last or r.position > last[r.shard_id])
        )


def read_stream(
    stream: LocalStream,
    expected: set[int],
    *,
    store: Path | None = None,
    restart_after: int | set[int] | None = None,
    timeout: float = 30.0,
) -> Read:
    """Every record of ``stream`` the consumer delivers (each acked), until every number of
    ``expected`` was delivered and no record came for QUIET seconds (the writes are over), or
    ``timeout`` seconds passed (``timed_out``: what was not delivered counts as lost).

    With ``store`` (a SQLite file) the consumer deduplicates and checkpoints there; without,
    it delivers every copy (a memory store). With ``restart_after``, the consumer closes once
    it delivered that many records, or every number of that set (the close writes their
    checkpoint and window), and a new one on the same store reads on."""
    out = Read()
    deadline = time.monotonic() + timeout

    async def session(stop_after: int | set[int] | None) -> None:
        async with Consumer(
            stream.name,
            client_config=stream.client_config,
            checkpoint_store=MemoryCheckpointStore() if store is None else store,
            initial_position=TRIM_HORIZON,
            shard_refresh_interval=0.5,
            idle_interval=0.2,
            deduplicate=store is not None,
        ) as consumer:
            missing = expected - out.numbers()
            before = set(stop_after) - out.numbers() if isinstance(stop_after, set) else None
            count = stop_after if isinstance(stop_after, int) else None
            everything, arrived = asyncio.Event(), asyncio.Event()

            async def consume() -> None:
                async for record in consumer:
                    arrived.set()
                    record.ack()
                    out.records.append(record)
                    number = record_id(record.data)
                    missing.discard(number)
                    if not missing:
                        everything.set()
                    if before is not None:
                        before.discard(number)
                        if not before:
                            return
                    elif count is not None and len(out.records) >= count:
                        return

            task = asyncio.create_task(consume())
            waiter = asyncio.create_task(everything.wait())
            left = deadline - time.monotonic()
            await asyncio.wait({task, waiter}, timeout=left, return_when=asyncio.FIRST_COMPLETED)
            out.timed_out = not (task.done() or waiter.done())
            while not (task.done() or out.timed_out):
                arrived.clear()
                try:
                    await asyncio.wait_for(arrived.wait(), QUIET)
                except asyncio.TimeoutError:
                    break
            waiter.cancel()
            if task.done():
                task.result()  # the consumer's error, if it failed
            task.cancel()
            await asyncio.gather(task, waiter, return_exceptions=True)
            out.dropped += sum(s.duplicates for s in consumer.status())

    async def main() -> None:
        if restart_after is not None:
            await session(restart_after)
            out.before_restart = len(out.records)
        if not out.timed_out:
            await session(None)
        if store is not None:
            async with SQLiteCheckpointStore(store) as rows:
                windows = [r.dedup_window for r in await rows.list(APPLICATION, stream.name)]
            out.window_bytes = max((len(w.encode()) for w in windows if w), default=0)

    asyncio.run(main())
    return out
