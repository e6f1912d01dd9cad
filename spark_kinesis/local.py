"""A local Spark session for trials, tests and benchmarks: ``local[N]`` with no UI, its Python
workers on this interpreter, ``format("kinesis")`` registered."""

from __future__ import annotations

import os
import sys
from typing import Any


def session(app: str, *, slots: int = 2) -> Any:
    """The local session named ``app`` with ``slots`` task slots (``getOrCreate``: the running
    one if there is one). ``PYSPARK_PYTHON`` is set to this interpreter unless it is set: the
    workers must import this package and pyarrow."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from spark_kinesis.source import register

    spark = (
        SparkSession.builder.master(f"local[{slots}]")
        .appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", str(slots))
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark
