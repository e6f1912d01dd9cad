"""KPL-equivalent Kinesis producer: asyncio driver, blocking facade, sans-I/O pipeline stages.

put -> predict shard -> per-shard Aggregator -> Limiter -> Collector -> Sender -> Retrier.
See docs/producer.md.
"""

from typing import TYPE_CHECKING

from kinesis_core._lazy import lazy_exports

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

__getattr__, __dir__, __all__ = lazy_exports(__name__, __file__)
