"""A Spark Structured Streaming job on Kinesis: read JSON orders, enrich them, write them back.

- a batch job writes ``ORDERS`` orders (JSON, keyed by customer) into ``orders``;
- a streaming query reads ``orders`` (a task per shard and micro-batch, at most 500 records
  per batch), adds a ``total_with_tax`` field and writes the orders, keyed by customer, to
  ``orders-enriched``, with its checkpoint in ``CHECKPOINT`` (default: a folder under the
  system's temporary folder). Stop it and run it again, and it goes on after the last
  committed batch;
- the program stops the query once every order went through, reads ``orders-enriched`` back
  with a batch job, and prints the count per customer.

Run it against the local emulator, from the repository root::

    python -m kinesis_core.local up --stream orders:2 --stream orders-enriched:1
    # in another shell, export the variables it printed, then:
    python -m examples.spark_enrich

The endpoint, region and credentials come from the standard AWS variables that ``local up``
prints (``AWS_ENDPOINT_URL_KINESIS``, ...), or from the default chain on AWS.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

ORDERS = int(os.environ.get("ORDERS", "2000"))
ORDERS_STREAM = os.environ.get("ORDERS_STREAM", "orders")
ENRICHED_STREAM = os.environ.get("ENRICHED_STREAM", "orders-enriched")
CHECKPOINT = os.environ.get(
    "CHECKPOINT", str(Path(tempfile.gettempdir()) / "spark-enrich-checkpoint")
)


def main() -> None:
    from spark_kinesis.local import session

    spark = session("spark-enrich")
    (
        spark.range(ORDERS)
        .selectExpr(
            "CONCAT('customer-', id % 10) AS partition_key",
            "to_json(named_struct('order_id', id, 'customer', CONCAT('customer-', id % 10),"
            " 'amount', id % 97 + 0.5)) AS data",
        )
        .write.format("kinesis")
        .option("streamName", ORDERS_STREAM)
        .mode("append")
        .save()
    )

    orders = (
        spark.readStream.format("kinesis")
        .option("streamName", ORDERS_STREAM)
        .option("maxRecordsPerTrigger", "500")
        .load()
        .selectExpr("partition_key", "CAST(data AS STRING) AS json")
    )
    enriched = orders.selectExpr(
        "partition_key",
        "to_json(named_struct('order', from_json(json, 'order_id LONG, customer STRING,"
        " amount DOUBLE'), 'total_with_tax', get_json_object(json, '$.amount') * 1.2)) AS data",
    )
    query = (
        enriched.writeStream.format("kinesis")
        .option("streamName", ENRICHED_STREAM)
        .option("checkpointLocation", CHECKPOINT)
        .start()
    )
    query.processAllAvailable()
    query.stop()

    back = spark.read.format("kinesis").option("streamName", ENRICHED_STREAM).load()
    for row in back.groupBy("partition_key").count().orderBy("partition_key").collect():
        print(f"{row.partition_key}: {row['count']}")
    spark.stop()


if __name__ == "__main__":
    main()
