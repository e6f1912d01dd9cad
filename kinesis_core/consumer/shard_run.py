"""What the Consumer keeps per shard it reads: the lineage node, the frontier of acks, the
reader's machine and task, and the shard's life (:class:`~.shard_consumer.ShardConsumer`)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from kinesis_core.checkpoint.base import CheckpointValue
from kinesis_core.consumer.frontier import ShardFrontier
from kinesis_core.consumer.lineage import ShardNode
from kinesis_core.consumer.shard_consumer import ShardConsumer
from kinesis_core.consumer.shard_dedup import ShardDedup
from kinesis_core.consumer.transport import ShardRead
from kinesis_core.runtime.clock import Clock, wait_event


@dataclass(eq=False)
class ShardRun:
    node: ShardNode
    frontier: ShardFrontier
    machine: ShardRead
    task: asyncio.Task[None] | None = field(default=None, repr=False)
    children: tuple[str, ...] = ()
    """Known at the shard's end; written with SHARD_END."""
    shard: ShardConsumer = field(init=False)
    """The shard's life: what to do at its end, a hand-off, a loss, a close."""
    drained: asyncio.Event = field(init=False, default_factory=asyncio.Event)
    """Set by the frontier once every delivered record is acked (while someone waits)."""
    measured_at: float = 0.0
    """When the shard's throughput was last measured (or its run started)."""
    read_bytes: int = 0
    """Bytes read since then (throughput assignment only)."""
    dedup: ShardDedup | None = None
    """The shard's deduplication (``ConsumerConfig(deduplicate=...)``), once it started."""

    def __post_init__(self) -> None:
        self.shard = ShardConsumer(self.node.shard_id)

    @property
    def shard_id(self) -> str:
        return self.node.shard_id

    def window_at(self, value: CheckpointValue) -> str | None:
        """The dedup window to store with a checkpoint at ``value`` (None: not deduplicating)."""
        return None if self.dedup is None else self.dedup.window_at(value)

    def count(self, read: int) -> None:
        """Bytes read (throughput assignment)."""
        self.read_bytes += read

    def throughput(self, now: float) -> float | None:
        """KiB/s read since the last call (None: no time passed)."""
        elapsed, self.measured_at = now - self.measured_at, now
        read, self.read_bytes = self.read_bytes, 0
        return read / 1024 / elapsed if elapsed > 0 else None

    async def acks(self, clock: Clock, timeout: float | None = None) -> bool:
        """Wait for every delivered record to be acked (at most ``timeout`` seconds); True
        if they were."""
        self.drained.clear()
        self.frontier.when_drained(self.drained.set)
        if timeout is None:
            await self.drained.wait()
            return True
        return await wait_event(clock, self.drained, timeout)
