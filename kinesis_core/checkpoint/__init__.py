"""Checkpoint stores: where a consumer remembers, per shard, how far it has processed.

Every store's rows can also be held as leases by several consumer workers (memory: within one
process; SQLite: the processes of one host; DynamoDB: anywhere, in the KCL's table format).
"""

from kinesis_core.checkpoint.base import (
    SHARD_END,
    Checkpoint,
    CheckpointConflictError,
    CheckpointStore,
    CheckpointValue,
    LeaseStore,
    Sentinel,
    checkpoint_order,
)
from kinesis_core.checkpoint.dynamodb import DynamoDBCheckpointStore
from kinesis_core.checkpoint.memory import MemoryCheckpointStore
from kinesis_core.checkpoint.sqlite import SQLiteCheckpointStore

__all__ = [
    "SHARD_END",
    "Checkpoint",
    "CheckpointConflictError",
    "CheckpointStore",
    "CheckpointValue",
    "DynamoDBCheckpointStore",
    "LeaseStore",
    "MemoryCheckpointStore",
    "SQLiteCheckpointStore",
    "Sentinel",
    "checkpoint_order",
]
