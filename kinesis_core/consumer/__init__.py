"""The consumer: reads every shard of a stream (parents before children), deaggregates, and
checkpoints per shard over the contiguously acked records.

Also what other engines build their own drivers from (the Beam source uses these): the
sans-I/O shard readers behind the read-transport seam (:mod:`.transport`, :mod:`.polling`),
the transports and the step function that execute them (:mod:`.reading`), and the
:class:`Checkpointer`, the one writer of checkpoint rows.
"""

from typing import TYPE_CHECKING

from kinesis_core._lazy import lazy_exports

# name -> the module defining it, imported on first use (kinesis_core/_lazy.py)
_EXPORTS = {
    "Checkpointer": "kinesis_core.consumer.checkpointer",
    "SharedCheckpointsWarning": "kinesis_core.consumer.checkpointer",
    "ConsumerConfig": "kinesis_core.consumer.config",
    "EnhancedFanOut": "kinesis_core.consumer.config",
    "Consumer": "kinesis_core.consumer.consumer",
    "RecordBatch": "kinesis_core.consumer.frontier",
    "ShardFrontier": "kinesis_core.consumer.frontier",
    "Lineage": "kinesis_core.consumer.lineage",
    "ShardNode": "kinesis_core.consumer.lineage",
    "ShardState": "kinesis_core.consumer.lineage",
    "LATEST": "kinesis_core.consumer.positions",
    "TRIM_HORIZON": "kinesis_core.consumer.positions",
    "AtTimestamp": "kinesis_core.consumer.positions",
    "InitialPosition": "kinesis_core.consumer.positions",
    "parse_initial_position": "kinesis_core.consumer.positions",
    "ShardReadError": "kinesis_core.consumer.reading",
    "Deduplicate": "kinesis_core.consumer.shard_dedup",
    "ShardStatus": "kinesis_core.consumer.status",
}

if TYPE_CHECKING:
    from kinesis_core.consumer.checkpointer import (
        Checkpointer as Checkpointer,
        SharedCheckpointsWarning as SharedCheckpointsWarning,
    )
    from kinesis_core.consumer.config import (
        ConsumerConfig as ConsumerConfig,
        EnhancedFanOut as EnhancedFanOut,
    )
    from kinesis_core.consumer.consumer import (
        Consumer as Consumer,
    )
    from kinesis_core.consumer.frontier import (
        RecordBatch as RecordBatch,
        ShardFrontier as ShardFrontier,
    )
    from kinesis_core.consumer.lineage import (
        Lineage as Lineage,
        ShardNode as ShardNode,
        ShardState as ShardState,
    )
    from kinesis_core.consumer.positions import (
        LATEST as LATEST,
        TRIM_HORIZON as TRIM_HORIZON,
        AtTimestamp as AtTimestamp,
        InitialPosition as InitialPosition,
        parse_initial_position as parse_initial_position,
    )
    from kinesis_core.consumer.reading import ShardReadError as ShardReadError
    from kinesis_core.consumer.shard_dedup import Deduplicate as Deduplicate
    from kinesis_core.consumer.status import (
        ShardStatus as ShardStatus,
    )

__getattr__, __dir__, __all__ = lazy_exports(__name__, _EXPORTS)
