"""Checkpoint stores: where a consumer remembers, per shard, how far it has processed."""

from kinesis_core.checkpoint.base import (
    SHARD_END,
    Checkpoint,
    CheckpointConflictError,
    CheckpointStore,
    CheckpointValue,
    Sentinel,
    checkpoint_order,
)
from kinesis_core.checkpoint.memory import MemoryCheckpointStore
from kinesis_core.checkpoint.sqlite import SQLiteCheckpointStore

__all__ = [
    "SHARD_END",
    "Checkpoint",
    "CheckpointConflictError",
    "CheckpointStore",
    "CheckpointValue",
    "MemoryCheckpointStore",
    "SQLiteCheckpointStore",
    "Sentinel",
    "checkpoint_order",
]
