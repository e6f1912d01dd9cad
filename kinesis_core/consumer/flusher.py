"""The Consumer's checkpoint flusher: every ``checkpoint_interval``, each shard's contiguous
acked prefix that moved goes to the store (compare-and-set: an older position never overwrites
a newer one; with leases, fenced by the lease's counter); SHARD_END once a shard's every record
is acked, tried until it is written (its children wait for it)."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping

from kinesis_core.aws.backoff import Jitter
from kinesis_core.aws.classify import ErrorKind
from kinesis_core.aws.executor import AsyncExecutor
from kinesis_core.aws.retry import RetryPolicy
from kinesis_core.checkpoint.base import SHARD_END, CheckpointStore, CheckpointTableGoneError
from kinesis_core.checkpoint.sqlite import SQLiteCheckpointStore
from kinesis_core.consumer.checkpointer import Checkpointer
from kinesis_core.consumer.rounds import rounds
from kinesis_core.consumer.shard_run import ShardRun
from kinesis_core.errors import ConfigurationError
from kinesis_core.lease.manager import LeaseManager
from kinesis_core.runtime.clock import Clock

logger = logging.getLogger(__name__)

SHARD_END_RETRY = RetryPolicy(
    base=0.2, cap=10.0, jitter=Jitter.EQUAL, attempts=None, unknown=ErrorKind.TRANSIENT
)
"""Writing SHARD_END, which the children wait for: tried again until it is written, whatever
the store raised."""


class CheckpointFlusher:
    """Writes the checkpoints of the shards in ``runs`` through ``checkpointer``."""

    def __init__(
        self,
        checkpointer: Checkpointer | LeaseManager,
        runs: Mapping[str, ShardRun],
        clock: Clock,
        interval: float,
        where: str,
    ) -> None:
        self.checkpointer = checkpointer
        self._runs = runs
        self._clock = clock
        self._interval = interval
        self._where = where

    async def run(self, fail: Callable[[BaseException], None]) -> None:
        """Flush every interval; a failed flush is logged and the next one writes what it
        missed; a checkpoint table that is gone stops the consumer (``fail``)."""
        await rounds(
            lambda: self._clock.sleep(self._interval),
            self.flush,
            f"checkpoint flush of {self._where}",
            fatal=lambda exc: exc if isinstance(exc, CheckpointTableGoneError) else None,
            fail=fail,
        )

    async def flush(self) -> None:
        """Write every shard's contiguous acked prefix that moved since the last write."""
        for run in list(self._runs.values()):
            await self.write(run)

    async def write(self, run: ShardRun) -> None:
        value = run.frontier.checkpoint
        if value is not None:
            await self.checkpointer.write(
                run.shard_id, value, run.node.parents, run.children, run.window_at(value)
            )

    async def write_shard_end(self, run: ShardRun, executor: AsyncExecutor) -> bool:
        """SHARD_END with the shard's children, retried (:data:`SHARD_END_RETRY`) until the
        store takes it; False if this worker may not write it (its lease is gone)."""
        window = run.window_at(SHARD_END)
        return await executor.attempt(
            lambda: self.checkpointer.write(
                run.shard_id, SHARD_END, run.node.parents, run.children, window
            ),
            SHARD_END_RETRY,
            f"writing SHARD_END of {run.shard_id}",
        )


DEFAULT_CHECKPOINT_PATH = "kinesis-checkpoints.sqlite3"


def checkpoint_store_of(given: object) -> CheckpointStore:
    """The store a Consumer was given: a store, a path to a SQLite file, or None (the default
    file); anything else is refused, naming the argument."""
    if given is None:
        return SQLiteCheckpointStore(DEFAULT_CHECKPOINT_PATH)
    if isinstance(given, (str, os.PathLike)):
        return SQLiteCheckpointStore(given)
    if isinstance(given, CheckpointStore):
        return given
    raise ConfigurationError(
        "checkpoint_store",
        "must be a checkpoint store (SQLiteCheckpointStore, DynamoDBCheckpointStore, "
        f"MemoryCheckpointStore, ...) or the path of a SQLite file, got {type(given).__name__}",
    )
