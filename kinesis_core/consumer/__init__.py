"""The consumer: reads every shard of a stream (parents before children), deaggregates, and
checkpoints per shard over the contiguously acked records.

Also what other engines build their own drivers from (the Beam source uses these): the
sans-I/O shard readers behind the read-transport seam (:mod:`.transport`, :mod:`.polling`),
the transports and the step function that execute them (:mod:`.reading`), and the
:class:`Checkpointer`, the one writer of checkpoint rows.
"""

from kinesis_core.consumer.checkpointer import Checkpointer, SharedCheckpointsWarning
from kinesis_core.consumer.config import ConsumerConfig
from kinesis_core.consumer.consumer import Consumer
from kinesis_core.consumer.frontier import RecordBatch, ShardFrontier
from kinesis_core.consumer.lineage import Lineage, ShardNode, ShardState
from kinesis_core.consumer.positions import (
    LATEST,
    TRIM_HORIZON,
    AtTimestamp,
    InitialPosition,
    parse_initial_position,
)
from kinesis_core.consumer.status import ShardStatus

__all__ = [
    "LATEST",
    "TRIM_HORIZON",
    "AtTimestamp",
    "Checkpointer",
    "Consumer",
    "ConsumerConfig",
    "InitialPosition",
    "Lineage",
    "RecordBatch",
    "ShardFrontier",
    "ShardNode",
    "ShardState",
    "ShardStatus",
    "SharedCheckpointsWarning",
    "parse_initial_position",
]
