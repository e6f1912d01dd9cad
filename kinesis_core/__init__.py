"""Engine-agnostic core of kinesis-connectors: sans-I/O state machines plus thin asyncio drivers.

Nothing in this package imports Apache Beam or Faust. The producer, consumer and checkpoint
stores live in the subpackages ``kinesis_core.producer``, ``kinesis_core.consumer`` and
``kinesis_core.checkpoint``; the local emulator in ``kinesis_core.local``.
"""

from kinesis_core.aggregation import (
    MAGIC,
    AggregateBuilder,
    deaggregate,
    decode_aggregate,
    encode_aggregate,
    is_aggregated,
)
from kinesis_core.allocator import BalancedKeyAllocator
from kinesis_core.checkpoint import (
    SHARD_END,
    Checkpoint,
    CheckpointConflictError,
    CheckpointStore,
    DynamoDBCheckpointStore,
    LeaseStore,
    MemoryCheckpointStore,
    SQLiteCheckpointStore,
)
from kinesis_core.client import (
    ClientConfig,
    create_botocore_client,
    create_dynamodb_client,
    create_kinesis_client,
)
from kinesis_core.consumer import (
    LATEST,
    TRIM_HORIZON,
    AtTimestamp,
    Consumer,
    InitialPosition,
    RecordBatch,
    ShardState,
    ShardStatus,
)
from kinesis_core.errors import (
    ConfigurationError,
    EmulatorError,
    KinesisConnectorError,
    ValidationError,
)
from kinesis_core.hashing import (
    MAX_HASH_KEY,
    hash_key,
    parse_explicit_hash_key,
    validate_partition_key,
    validate_record,
)
from kinesis_core.lease import LeaseConfig
from kinesis_core.producer import (
    Attempt,
    BatchResult,
    BlockingProducer,
    Producer,
    ProducerClosedError,
    ProducerConfig,
    ProducerCrashedError,
    Record,
    RecordResult,
)
from kinesis_core.records import KinesisRecord, Position, SubRecord
from kinesis_core.shard_map import (
    ShardInfo,
    ShardMap,
    ShardMapDriver,
    ShardMapState,
    ShardMapTimeoutError,
    list_all_shards,
    uniform_shards,
)
from kinesis_core.skew import SkewReport, skew_report

__all__ = [
    "LATEST",
    "MAGIC",
    "MAX_HASH_KEY",
    "SHARD_END",
    "TRIM_HORIZON",
    "AggregateBuilder",
    "AtTimestamp",
    "Attempt",
    "BalancedKeyAllocator",
    "BatchResult",
    "BlockingProducer",
    "Checkpoint",
    "CheckpointConflictError",
    "CheckpointStore",
    "ClientConfig",
    "ConfigurationError",
    "Consumer",
    "DynamoDBCheckpointStore",
    "EmulatorError",
    "InitialPosition",
    "KinesisConnectorError",
    "KinesisRecord",
    "LeaseConfig",
    "LeaseStore",
    "MemoryCheckpointStore",
    "Position",
    "Producer",
    "ProducerClosedError",
    "ProducerConfig",
    "ProducerCrashedError",
    "Record",
    "RecordBatch",
    "RecordResult",
    "SQLiteCheckpointStore",
    "ShardInfo",
    "ShardMap",
    "ShardMapDriver",
    "ShardMapState",
    "ShardMapTimeoutError",
    "ShardState",
    "ShardStatus",
    "SkewReport",
    "SubRecord",
    "ValidationError",
    "create_botocore_client",
    "create_dynamodb_client",
    "create_kinesis_client",
    "deaggregate",
    "decode_aggregate",
    "encode_aggregate",
    "hash_key",
    "is_aggregated",
    "list_all_shards",
    "parse_explicit_hash_key",
    "skew_report",
    "uniform_shards",
    "validate_partition_key",
    "validate_record",
]
