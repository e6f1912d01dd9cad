"""Engine-agnostic core of kinesis-connectors: sans-I/O state machines plus thin asyncio drivers.

Nothing in this package imports Apache Beam or Faust. The producer, consumer and checkpoint
stores live in the subpackages ``kinesis_core.producer``, ``kinesis_core.consumer`` and
``kinesis_core.checkpoint``; the local emulator in ``kinesis_core.local``.
"""

from typing import TYPE_CHECKING

from kinesis_core._lazy import lazy_exports

# name -> the module defining it, imported on first use (kinesis_core/_lazy.py)
_EXPORTS = {
    "MAGIC": "kinesis_core.aggregation",
    "AggregateBuilder": "kinesis_core.aggregation",
    "deaggregate": "kinesis_core.aggregation",
    "decode_aggregate": "kinesis_core.aggregation",
    "encode_aggregate": "kinesis_core.aggregation",
    "is_aggregated": "kinesis_core.aggregation",
    "BalancedKeyAllocator": "kinesis_core.shards.allocator",
    "SHARD_END": "kinesis_core.checkpoint",
    "Checkpoint": "kinesis_core.checkpoint",
    "CheckpointConflictError": "kinesis_core.checkpoint",
    "CheckpointStore": "kinesis_core.checkpoint",
    "DynamoDBCheckpointStore": "kinesis_core.checkpoint",
    "LeaseStore": "kinesis_core.checkpoint",
    "MemoryCheckpointStore": "kinesis_core.checkpoint",
    "SQLiteCheckpointStore": "kinesis_core.checkpoint",
    "ErrorKind": "kinesis_core.aws.classify",
    "ClientConfig": "kinesis_core.aws.config",
    "create_botocore_client": "kinesis_core.aws.client",
    "create_dynamodb_client": "kinesis_core.aws.client",
    "create_kinesis_client": "kinesis_core.aws.client",
    "LATEST": "kinesis_core.consumer",
    "TRIM_HORIZON": "kinesis_core.consumer",
    "AtTimestamp": "kinesis_core.consumer",
    "Consumer": "kinesis_core.consumer",
    "ConsumerConfig": "kinesis_core.consumer",
    "Deduplicate": "kinesis_core.consumer",
    "EnhancedFanOut": "kinesis_core.consumer",
    "InitialPosition": "kinesis_core.consumer",
    "RecordBatch": "kinesis_core.consumer",
    "ShardState": "kinesis_core.consumer",
    "ShardStatus": "kinesis_core.consumer",
    "ConfigurationError": "kinesis_core.errors",
    "EmulatorError": "kinesis_core.errors",
    "KinesisConnectorError": "kinesis_core.errors",
    "KinesisServiceError": "kinesis_core.errors",
    "ValidationError": "kinesis_core.errors",
    "MAX_HASH_KEY": "kinesis_core.shards.hashing",
    "hash_key": "kinesis_core.shards.hashing",
    "parse_explicit_hash_key": "kinesis_core.shards.hashing",
    "validate_partition_key": "kinesis_core.shards.hashing",
    "validate_record": "kinesis_core.shards.hashing",
    "LeaseConfig": "kinesis_core.lease",
    "LifecycleError": "kinesis_core.lifecycle",
    "Attempt": "kinesis_core.producer",
    "BatchResult": "kinesis_core.producer",
    "BlockingProducer": "kinesis_core.producer",
    "Producer": "kinesis_core.producer",
    "ProducerClosedError": "kinesis_core.producer",
    "ProducerConfig": "kinesis_core.producer",
    "ProducerCrashedError": "kinesis_core.producer",
    "ProducerFailedError": "kinesis_core.producer",
    "Record": "kinesis_core.producer",
    "RecordResult": "kinesis_core.producer",
    "KinesisRecord": "kinesis_core.records",
    "Position": "kinesis_core.records",
    "SubRecord": "kinesis_core.records",
    "ShardInfo": "kinesis_core.shards.info",
    "ShardMap": "kinesis_core.shards.shard_map",
    "ShardMapDriver": "kinesis_core.producer.shard_map_driver",
    "ShardMapState": "kinesis_core.shards.shard_map",
    "ShardMapTimeoutError": "kinesis_core.producer.shard_map_driver",
    "list_all_shards": "kinesis_core.aws.executor",
    "uniform_shards": "kinesis_core.shards.info",
    "SkewReport": "kinesis_core.shards.skew",
    "skew_report": "kinesis_core.shards.skew",
    "StreamRef": "kinesis_core.stream",
}

if TYPE_CHECKING:
    from kinesis_core.aggregation import (
        MAGIC as MAGIC,
        AggregateBuilder as AggregateBuilder,
        deaggregate as deaggregate,
        decode_aggregate as decode_aggregate,
        encode_aggregate as encode_aggregate,
        is_aggregated as is_aggregated,
    )
    from kinesis_core.aws.classify import ErrorKind as ErrorKind
    from kinesis_core.aws.client import (
        create_botocore_client as create_botocore_client,
        create_dynamodb_client as create_dynamodb_client,
        create_kinesis_client as create_kinesis_client,
    )
    from kinesis_core.aws.config import ClientConfig as ClientConfig
    from kinesis_core.aws.executor import list_all_shards as list_all_shards
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
    from kinesis_core.consumer import (
        LATEST as LATEST,
        TRIM_HORIZON as TRIM_HORIZON,
        AtTimestamp as AtTimestamp,
        Consumer as Consumer,
        ConsumerConfig as ConsumerConfig,
        Deduplicate as Deduplicate,
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
    from kinesis_core.producer.shard_map_driver import (
        ShardMapDriver as ShardMapDriver,
        ShardMapTimeoutError as ShardMapTimeoutError,
    )
    from kinesis_core.records import (
        KinesisRecord as KinesisRecord,
        Position as Position,
        SubRecord as SubRecord,
    )
    from kinesis_core.shards.allocator import (
        BalancedKeyAllocator as BalancedKeyAllocator,
    )
    from kinesis_core.shards.hashing import (
        MAX_HASH_KEY as MAX_HASH_KEY,
        hash_key as hash_key,
        parse_explicit_hash_key as parse_explicit_hash_key,
        validate_partition_key as validate_partition_key,
        validate_record as validate_record,
    )
    from kinesis_core.shards.info import ShardInfo as ShardInfo, uniform_shards as uniform_shards
    from kinesis_core.shards.shard_map import ShardMap as ShardMap, ShardMapState as ShardMapState
    from kinesis_core.shards.skew import (
        SkewReport as SkewReport,
        skew_report as skew_report,
    )
    from kinesis_core.stream import StreamRef as StreamRef

__getattr__, __dir__, __all__ = lazy_exports(__name__, _EXPORTS)
