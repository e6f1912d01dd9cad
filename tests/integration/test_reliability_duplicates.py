"""The duplicates row of ``python -m reliability``, small (kinesis-mock, a split in each): a
producer with record ids losing 10% of its PutRecords answers after the write (and all of them
while the stream splits, so that retries land in the children), and a Faust
pipeline with a KinesisSink(record_ids=True) SIGKILLed twice while its input splits. Read by
record id: nothing lost, duplicates there without dedup, and none left after a dedup window of
the documented bounds that follows the shards' lineage (run offline over what was read, until
the consumer deduplicates)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kinesis_core.local import StreamFactory
from reliability.duplicates import faust_scenario, producer_scenario

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("lost_during_split", [0.1, 1.0], ids=["10%", "all-during-split"])
def test_a_producer_losing_answers_across_a_split_duplicates_only_what_a_window_catches(
    kinesis_stream: StreamFactory, lost_during_split: float
) -> None:
    scenario = producer_scenario(
        kinesis_stream, records=300, seed=7, lost_during_split=lost_during_split
    )
    print(scenario.summary(), *scenario.notes, sep="\n")
    assert scenario.problems == []
    assert scenario.faults > 0
    assert scenario.lost == 0
    assert scenario.delivered == scenario.attempted
    assert scenario.duplicates > 0  # the retries after a lost answer wrote again
    assert scenario.left == 0
    if lost_during_split == 1.0:  # retries into the children: only the parents' windows catch
        assert scenario.left_without_lineage > 0


def test_a_faust_pipeline_killed_twice_duplicates_only_what_a_window_catches(
    kinesis_stream: StreamFactory, tmp_path: Path
) -> None:
    scenario = faust_scenario(kinesis_stream, tmp_path, records=300, seed=7)
    print(scenario.summary(), *scenario.notes, sep="\n")
    assert scenario.problems == []
    assert scenario.lost == 0
    assert scenario.delivered == scenario.attempted
    assert scenario.duplicates > 0  # the inputs processed again after the kills
    assert scenario.left == 0
