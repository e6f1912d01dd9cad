"""The records ReadFromKinesis emits carry their Beam schema in practice: schema transforms
(``beam.Select``, ``GroupBy`` on fields) and the DataFrame API work on them as they come out of
the source. (``SqlTransform`` needs a Java expansion service, not available here.) The sink
side (rows with a field as the partition key) is in tests/unit/test_beam_write.py."""

from __future__ import annotations

from typing import Any

import apache_beam as beam
import pytest
from apache_beam.dataframe.convert import to_dataframe, to_pcollection
from apache_beam.testing.util import assert_that, equal_to

from beam_kinesis import KinesisRecord, ReadFromKinesis
from kinesis_core.consumer import TRIM_HORIZON
from kinesis_core.local import DUMMY_ACCESS_KEY_ID, DUMMY_SECRET_ACCESS_KEY, LocalStream
from tests.helpers.beam import KEYS, pipeline, put_round

pytestmark = pytest.mark.integration


@pytest.fixture(autouse=True)
def worker_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", DUMMY_ACCESS_KEY_ID)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", DUMMY_SECRET_ACCESS_KEY)


def test_select_group_by_and_dataframes_on_the_records_read(kinesis_stream: Any) -> None:
    stream: LocalStream = kinesis_stream(shards=2)
    for n in range(3):
        put_round(stream, n)  # every key once per round: 48 records
    p = pipeline(stream, "in_memory")
    records = p | ReadFromKinesis(
        stream.name, initial_position=TRIM_HORIZON, idle_interval=0.2, stop_when_caught_up=True
    )
    assert records.element_type is KinesisRecord

    selected = records | beam.Select("partition_key", "data")
    assert_that(
        selected | beam.Map(lambda row: (row.partition_key, row.data)),
        equal_to([(key, f"{key}:{n}".encode()) for key in KEYS for n in range(3)]),
        label="Select",
    )
    counted = records | beam.GroupBy("partition_key").aggregate_field(
        "data", beam.combiners.CountCombineFn(), "count"
    )
    assert_that(
        counted | beam.Map(lambda row: (row.partition_key, row.count)),
        equal_to([(key, 3) for key in KEYS]),
        label="GroupBy",
    )
    frame = to_dataframe(records | "Fields" >> beam.Select("partition_key", "shard_id"))
    per_key = frame.groupby("partition_key").count()
    assert_that(
        to_pcollection(per_key, include_indexes=True)
        | beam.Map(lambda row: (row.partition_key, row.shard_id)),
        equal_to([(key, 3) for key in KEYS]),
        label="DataFrame",
    )
    p.run().wait_until_finish()
