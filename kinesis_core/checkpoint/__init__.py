"""Checkpoint stores: where a consumer remembers, per shard, how far it has processed.

Every store's rows can also be held as leases by several consumer workers (memory: within one
process; SQLite: the processes of one host; DynamoDB: anywhere, in the KCL's table format).
"""

from typing import TYPE_CHECKING

from kinesis_core._lazy import lazy_exports

# name -> the module defining it, imported on first use (kinesis_core/_lazy.py)
_EXPORTS = {
    "SHARD_END": "kinesis_core.checkpoint.base",
    "Checkpoint": "kinesis_core.checkpoint.base",
    "CheckpointConflictError": "kinesis_core.checkpoint.base",
    "CheckpointStore": "kinesis_core.checkpoint.base",
    "CheckpointTableGoneError": "kinesis_core.checkpoint.base",
    "CheckpointValue": "kinesis_core.checkpoint.base",
    "LeaseStore": "kinesis_core.checkpoint.base",
    "Sentinel": "kinesis_core.checkpoint.base",
    "checkpoint_order": "kinesis_core.checkpoint.base",
    "DynamoDBCheckpointStore": "kinesis_core.checkpoint.dynamodb",
    "MemoryCheckpointStore": "kinesis_core.checkpoint.memory",
    "SQLiteCheckpointStore": "kinesis_core.checkpoint.sqlite",
}

if TYPE_CHECKING:
    from kinesis_core.checkpoint.base import (
        SHARD_END as SHARD_END,
        Checkpoint as Checkpoint,
        CheckpointConflictError as CheckpointConflictError,
        CheckpointStore as CheckpointStore,
        CheckpointTableGoneError as CheckpointTableGoneError,
        CheckpointValue as CheckpointValue,
        LeaseStore as LeaseStore,
        Sentinel as Sentinel,
        checkpoint_order as checkpoint_order,
    )
    from kinesis_core.checkpoint.dynamodb import (
        DynamoDBCheckpointStore as DynamoDBCheckpointStore,
    )
    from kinesis_core.checkpoint.memory import (
        MemoryCheckpointStore as MemoryCheckpointStore,
    )
    from kinesis_core.checkpoint.sqlite import (
        SQLiteCheckpointStore as SQLiteCheckpointStore,
    )

__getattr__, __dir__, __all__ = lazy_exports(__name__, _EXPORTS)
