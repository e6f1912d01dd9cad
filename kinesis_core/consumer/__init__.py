"""The consumer: reads every shard of a stream (parents before children), deaggregates, and
checkpoints per shard over the contiguously acked records."""

from kinesis_core.consumer.consumer import Consumer
from kinesis_core.consumer.frontier import RecordBatch, ShardFrontier
from kinesis_core.consumer.lineage import Lineage, ShardNode, ShardState
from kinesis_core.consumer.positions import LATEST, TRIM_HORIZON, AtTimestamp, InitialPosition
from kinesis_core.consumer.status import ShardStatus

__all__ = [
    "LATEST",
    "TRIM_HORIZON",
    "AtTimestamp",
    "Consumer",
    "InitialPosition",
    "Lineage",
    "RecordBatch",
    "ShardFrontier",
    "ShardNode",
    "ShardState",
    "ShardStatus",
]
