"""KPL aggregates between async-kinesis 3.0.1 and this project, both ways.

An application moving from async-kinesis (or running beside it) reads with one library what
the other wrote: async-kinesis's KPL string processor must take our aggregates apart, and our
consumer its aggregates. async-kinesis 3 needs Python 3.11: on 3.10 these tests are deselected
by the ``peer`` marker (tests/conftest.py), with the reason in the summary.
"""

from __future__ import annotations

from typing import Any

import pytest

from kinesis_core.aggregation import AggregateBuilder, deaggregate

pytestmark = pytest.mark.peer("async-kinesis")

TEXTS = ["order 1", "ünïcödé order 2", "", "x" * 10_000]


def processor() -> Any:
    from kinesis.processors import KPLStringProcessor

    return KPLStringProcessor()


def test_async_kinesis_reads_our_aggregates() -> None:
    builder = AggregateBuilder()
    for i, text in enumerate(TEXTS):
        builder.add(f"pk-{i}", None, text.encode())
    assert list(processor().parse(builder.build())) == TEXTS


def test_we_read_async_kinesis_aggregates() -> None:
    kpl = processor()
    items = [item for text in TEXTS for item in kpl.add_item(text)]
    items += list(kpl.get_items())
    assert len(items) == 1  # everything fits one aggregate
    entry = {"Data": items[0].data, "SequenceNumber": "7", "PartitionKey": "a"}
    records = deaggregate([entry], "shardId-000000000000")
    assert [r.data.decode() for r in records] == TEXTS
    assert [r.sub_sequence_number for r in records] == list(range(len(TEXTS)))
    assert {r.partition_key for r in records} == {"a"}  # async-kinesis's one container key
    assert all(r.aggregated for r in records)
