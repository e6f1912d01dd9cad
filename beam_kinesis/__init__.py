"""Apache Beam connectors for Kinesis Data Streams, pure Python, on the kinesis_core producer.

``pcoll | WriteToKinesis("orders")`` (docs/beam-write.md) and
``pipeline | ReadFromKinesis("orders")`` (docs/beam-read.md); ``KinesisOptions`` configures
where Kinesis is from the command line.
Both report Beam metrics under one namespace, ``METRICS_NAMESPACE`` (docs/operations.md).
"""

from beam_kinesis._metrics import NAMESPACE as METRICS_NAMESPACE
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
    "METRICS_NAMESPACE",
    "CredentialsInPipelineWarning",
    "FailedRecord",
    "KinesisOptions",
    "KinesisRecord",
    "KinesisWriteError",
    "KinesisWriteResult",
    "ReadFromKinesis",
    "WriteToKinesis",
]
