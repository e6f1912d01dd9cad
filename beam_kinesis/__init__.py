"""Apache Beam connectors for Kinesis Data Streams, pure Python, on the kinesis_core producer.

``pcoll | WriteToKinesis("orders")`` (see docs/beam-write.md); ``KinesisOptions`` configures
where Kinesis is from the command line.
"""

from beam_kinesis.options import CredentialsInPipelineWarning, KinesisOptions
from beam_kinesis.write import (
    FAILED_RECORDS,
    FailedRecord,
    KinesisWriteError,
    KinesisWriteResult,
    WriteToKinesis,
)

__all__ = [
    "FAILED_RECORDS",
    "CredentialsInPipelineWarning",
    "FailedRecord",
    "KinesisOptions",
    "KinesisWriteError",
    "KinesisWriteResult",
    "WriteToKinesis",
]
