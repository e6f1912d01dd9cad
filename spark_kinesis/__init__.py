"""Amazon Kinesis Data Streams for Spark Structured Streaming and batch jobs, on the shared
core: ``format("kinesis")`` as a source and a sink (docs/spark.md).

Register the data source once per session, then read and write::

    import spark_kinesis

    spark_kinesis.register(spark)
    df = spark.readStream.format("kinesis").option("streamName", "events").load()

The exports load on first use (:mod:`kinesis_core._lazy`): the offset and option rules
(:mod:`spark_kinesis.offsets`, :mod:`spark_kinesis.options`) import without PySpark.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kinesis_core._lazy import lazy_exports

if TYPE_CHECKING:
    from spark_kinesis.options import SinkSpec as SinkSpec, SourceSpec as SourceSpec
    from spark_kinesis.sink import (
        FailedRecord as FailedRecord,
        KinesisWriteError as KinesisWriteError,
    )
    from spark_kinesis.source import (
        SCHEMA as SCHEMA,
        KinesisDataSource as KinesisDataSource,
        register as register,
    )

_EXPORTS = {
    "SCHEMA": "spark_kinesis.source",
    "FailedRecord": "spark_kinesis.sink",
    "KinesisDataSource": "spark_kinesis.source",
    "KinesisWriteError": "spark_kinesis.sink",
    "SinkSpec": "spark_kinesis.options",
    "SourceSpec": "spark_kinesis.options",
    "register": "spark_kinesis.source",
}

__getattr__, __dir__, __all__ = lazy_exports(__name__, _EXPORTS)
