"""Engine-agnostic core of kinesis-connectors: sans-I/O state machines plus thin asyncio drivers.

Nothing in this package imports Apache Beam or Faust.
"""

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

__all__ = [
    "MAX_HASH_KEY",
    "ConfigurationError",
    "EmulatorError",
    "KinesisConnectorError",
    "ValidationError",
    "hash_key",
    "parse_explicit_hash_key",
    "validate_partition_key",
    "validate_record",
]
