"""KPL-equivalent Kinesis producer: asyncio driver, blocking facade, sans-I/O pipeline stages.

put -> predict shard -> per-shard Aggregator -> Limiter -> Collector -> Sender -> Retrier.
See docs/producer.md.
"""

from kinesis_core.producer.blocking import BlockingProducer
from kinesis_core.producer.config import ProducerConfig
from kinesis_core.producer.metrics import Distribution, MetricsHook, MetricsSnapshot
from kinesis_core.producer.partitioning import (
    BalancedHashKeys,
    KeyFn,
    key_from,
    random_partition_key,
)
from kinesis_core.producer.producer import Producer
from kinesis_core.producer.result import (
    CANCELLED,
    EXPIRED,
    INTERNAL,
    PRODUCER_CLOSED,
    SHUTDOWN,
    THROTTLED,
    VALIDATION_ERROR,
    WRONG_SHARD,
    Attempt,
    BatchResult,
    ElidedAttempts,
    ProducerClosedError,
    ProducerCrashedError,
    ProducerFailedError,
    PutFailedError,
    Record,
    RecordResult,
)

__all__ = [
    "CANCELLED",
    "EXPIRED",
    "INTERNAL",
    "PRODUCER_CLOSED",
    "SHUTDOWN",
    "THROTTLED",
    "VALIDATION_ERROR",
    "WRONG_SHARD",
    "Attempt",
    "BalancedHashKeys",
    "BatchResult",
    "BlockingProducer",
    "Distribution",
    "ElidedAttempts",
    "KeyFn",
    "MetricsHook",
    "MetricsSnapshot",
    "Producer",
    "ProducerClosedError",
    "ProducerConfig",
    "ProducerCrashedError",
    "ProducerFailedError",
    "PutFailedError",
    "Record",
    "RecordResult",
    "key_from",
    "random_partition_key",
]
