"""Apache Beam connectors for Kinesis Data Streams, pure Python, on the kinesis_core producer.

``pcoll | WriteToKinesis("orders")`` (docs/beam-write.md) and
``pipeline | ReadFromKinesis("orders")`` (docs/beam-read.md); ``KinesisOptions`` configures
where Kinesis is from the command line.
"""

from beam_kinesis.options import CredentialsInPipelineWarning, KinesisOptions
from beam_kinesis.read import ReadFromKinesis
from beam_kinesis.record import KinesisRecord
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
    "KinesisRecord",
    "KinesisWriteError",
    "KinesisWriteResult",
    "ReadFromKinesis",
    "WriteToKinesis",
]
