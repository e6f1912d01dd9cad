"""Spark for the tests: the data source options of a local stream, and a driver program
(``python -m tests.helpers.spark OPTIONS CHECKPOINT OUTPUT``) that streams a stream into a JSON
file sink until it is killed."""

from __future__ import annotations

import json
import sys

from kinesis_core.aws.config import ClientConfig
from spark_kinesis.local import session


def options(name: str, config: ClientConfig) -> dict[str, str]:
    """The data source options that name stream ``name`` on a local server."""
    assert config.endpoint_url
    assert config.region_name
    found = {"streamName": name, "endpointUrl": config.endpoint_url, "region": config.region_name}
    if config.aws_access_key_id and config.aws_secret_access_key:
        found["awsAccessKeyId"] = config.aws_access_key_id
        found["awsSecretKey"] = config.aws_secret_access_key
    return found


def main() -> None:
    """Stream the records of the stream (options as JSON) into a JSON file sink until killed."""
    source, checkpoint, output = sys.argv[1:4]
    spark = session("kinesis-driver")
    query = (
        spark.readStream.format("kinesis")
        .options(**json.loads(source))
        .load()
        .selectExpr("CAST(data AS STRING) AS value", "shard_id", "sequence_number")
        .writeStream.format("json")
        .option("checkpointLocation", checkpoint)
        .option("path", output)
        .trigger(processingTime="500 milliseconds")
        .start()
    )
    query.awaitTermination()


if __name__ == "__main__":
    main()
