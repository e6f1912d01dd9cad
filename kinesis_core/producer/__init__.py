"""KPL-equivalent Kinesis producer: asyncio driver, blocking facade, sans-I/O pipeline stages.

put -> validate -> admission (the memory budget) -> predict shard -> per-shard Aggregator ->
Limiter -> Collector -> Sender -> Retrier.
See docs/producer.md.
"""

from typing import TYPE_CHECKING

from kinesis_core._lazy import lazy_exports

# name -> the module defining it, imported on first use (kinesis_core/_lazy.py)
_EXPORTS = {
    "BlockingProducer": "kinesis_core.producer.blocking",
    "ProducerConfig": "kinesis_core.producer.config",
    "Distribution": "kinesis_core.producer.metrics",
    "MetricsHook": "kinesis_core.producer.metrics",
    "MetricsSnapshot": "kinesis_core.producer.metrics",
    "BalancedHashKeys": "kinesis_core.producer.partitioning",
    "KeyFn": "kinesis_core.producer.partitioning",
    "field_getter": "kinesis_core.producer.partitioning",
    "key_from": "kinesis_core.producer.partitioning",
    "random_partition_key": "kinesis_core.producer.partitioning",
    "random_partition_keys": "kinesis_core.producer.partitioning",
    "Producer": "kinesis_core.producer.producer",
    "CANCELLED": "kinesis_core.producer.result",
    "EXPIRED": "kinesis_core.producer.result",
    "INTERNAL": "kinesis_core.producer.result",
    "PRODUCER_CLOSED": "kinesis_core.producer.result",
    "SHUTDOWN": "kinesis_core.producer.result",
    "THROTTLED": "kinesis_core.producer.result",
    "VALIDATION_ERROR": "kinesis_core.producer.result",
    "WRONG_SHARD": "kinesis_core.producer.result",
    "Attempt": "kinesis_core.producer.result",
    "BatchResult": "kinesis_core.producer.result",
    "ElidedAttempts": "kinesis_core.producer.result",
    "ProducerClosedError": "kinesis_core.producer.result",
    "ProducerCrashedError": "kinesis_core.producer.result",
    "ProducerFailedError": "kinesis_core.producer.result",
    "PutFailedError": "kinesis_core.producer.result",
    "Record": "kinesis_core.producer.result",
    "RecordResult": "kinesis_core.producer.result",
}

if TYPE_CHECKING:
    from kinesis_core.producer.blocking import (
        BlockingProducer as BlockingProducer,
    )
    from kinesis_core.producer.config import (
        ProducerConfig as ProducerConfig,
    )
    from kinesis_core.producer.metrics import (
        Distribution as Distribution,
        MetricsHook as MetricsHook,
        MetricsSnapshot as MetricsSnapshot,
    )
    from kinesis_core.producer.partitioning import (
        BalancedHashKeys as BalancedHashKeys,
        KeyFn as KeyFn,
        field_getter as field_getter,
        key_from as key_from,
        random_partition_key as random_partition_key,
        random_partition_keys as random_partition_keys,
    )
    from kinesis_core.producer.producer import (
        Producer as Producer,
    )
    from kinesis_core.producer.result import (
        CANCELLED as CANCELLED,
        EXPIRED as EXPIRED,
        INTERNAL as INTERNAL,
        PRODUCER_CLOSED as PRODUCER_CLOSED,
        SHUTDOWN as SHUTDOWN,
        THROTTLED as THROTTLED,
        VALIDATION_ERROR as VALIDATION_ERROR,
        WRONG_SHARD as WRONG_SHARD,
        Attempt as Attempt,
        BatchResult as BatchResult,
        ElidedAttempts as ElidedAttempts,
        ProducerClosedError as ProducerClosedError,
        ProducerCrashedError as ProducerCrashedError,
        ProducerFailedError as ProducerFailedError,
        PutFailedError as PutFailedError,
        Record as Record,
        RecordResult as RecordResult,
    )

__getattr__, __dir__, __all__ = lazy_exports(__name__, _EXPORTS)
