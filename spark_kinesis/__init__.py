"""Amazon Kinesis Data Streams for Spark Structured Streaming and batch jobs, on the shared
core: ``format("kinesis")`` as a source and a sink (docs/spark.md).

Register the data source once per session, then read and write::

    import spark_kinesis

    spark_kinesis.register(spark)
    df = spark.readStream.format("kinesis").option("streamName", "events").load()
"""

from spark_kinesis.options import SinkSpec, SourceSpec
from spark_kinesis.sink import FailedRecord, KinesisWriteError
from spark_kinesis.source import SCHEMA, KinesisDataSource, register

__all__ = [
    "SCHEMA",
    "FailedRecord",
    "KinesisDataSource",
    "KinesisWriteError",
    "SinkSpec",
    "SourceSpec",
    "register",
]
