"""Engine-agnostic core of kinesis-connectors: sans-I/O state machines plus thin asyncio drivers.

Nothing in this package imports Apache Beam or Faust. The producer, consumer and checkpoint
stores live in the subpackages ``kinesis_core.producer``, ``kinesis_core.consumer`` and
``kinesis_core.checkpoint``; the local emulator in ``kinesis_core.local``.
"""

from typing import TYPE_CHECKING

from kinesis_core._lazy import lazy_exports

if TYPE_CHECKING:
    from kinesis_core.aggregation import (
        MAGIC as MAGIC,
        AggregateBuilder as AggregateBuilder,
        deaggregate as deaggregate,
        decode_aggregate as decode_aggregate,
        encode_aggregate as encode_aggregate,
        is_aggregated as is_aggregated,
    )
    from kinesis_core.allocator import (
        BalancedKeyAllocator as BalancedKeyAllocator,
    )
    from kinesis_core.checkpoint import (
        SHARD_END as SHARD_END,
        Checkpoint as Checkpoint,
        CheckpointConflictError as CheckpointConflictError,
        CheckpointStore as CheckpointStore,
        DynamoDBCheckpointStore as DynamoDBCheckpointStore,
        LeaseStore as LeaseStore,
        MemoryCheckpointStore as MemoryCheckpointStore,
        SQLiteCheckpointStore as SQLiteCheckpointStore,
    )
    from kinesis_core.classify import ErrorKind as ErrorKind, classify as classify
    from kinesis_core.client import (
        ClientConfig as ClientConfig,
        create_botocore_client as create_botocore_client,
        create_dynamodb_client as create_dynamodb_client,
        create_kinesis_client as create_kinesis_client,
    )
    from kinesis_core.consumer import (
        LATEST as LATEST,
        TRIM_HORIZON as TRIM_HORIZON,
        AtTimestamp as AtTimestamp,
        Consumer as Consumer,
        ConsumerConfig as ConsumerConfig,
        EnhancedFanOut as EnhancedFanOut,
        InitialPosition as InitialPosition,
        RecordBatch as RecordBatch,
        ShardState as ShardState,
        ShardStatus as ShardStatus,
    )
    from kinesis_core.errors import (
        ConfigurationError as ConfigurationError,
        EmulatorError as EmulatorError,
        KinesisConnectorError as KinesisConnectorError,
        KinesisServiceError as KinesisServiceError,
        ValidationError as ValidationError,
    )
    from kinesis_core.hashing import (
        MAX_HASH_KEY as MAX_HASH_KEY,
        hash_key as hash_key,
        parse_explicit_hash_key as parse_explicit_hash_key,
        validate_partition_key as validate_partition_key,
        validate_record as validate_record,
    )
    from kinesis_core.lease import (
        LeaseConfig as LeaseConfig,
    )
    from kinesis_core.lifecycle import LifecycleError as LifecycleError
    from kinesis_core.producer import (
        Attempt as Attempt,
        BatchResult as BatchResult,
        BlockingProducer as BlockingProducer,
        Producer as Producer,
        ProducerClosedError as ProducerClosedError,
        ProducerConfig as ProducerConfig,
        ProducerCrashedError as ProducerCrashedError,
        ProducerFailedError as ProducerFailedError,
        Record as Record,
        RecordResult as RecordResult,
    )
    from kinesis_core.records import (
        KinesisRecord as KinesisRecord,
        Position as Position,
        SubRecord as SubRecord,
    )
    from kinesis_core.shard_map import (
        ShardInfo as ShardInfo,
        ShardMap as ShardMap,
        ShardMapDriver as ShardMapDriver,
        ShardMapState as ShardMapState,
        ShardMapTimeoutError as ShardMapTimeoutError,
        list_all_shards as list_all_shards,
        uniform_shards as uniform_shards,
    )
    from kinesis_core.skew import (
        SkewReport as SkewReport,
        skew_report as skew_report,
    )
    from kinesis_core.stream import StreamRef as StreamRef

__getattr__, __dir__, __all__ = lazy_exports(__name__, __file__)
