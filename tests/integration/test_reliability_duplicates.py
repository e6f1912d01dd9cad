"""The duplicates row of ``python -m reliability``, small (kinesis-mock, a split in each): a
producer with record ids losing 10% of its PutRecords answers after the write (and all of them
while the stream splits, so that retries land in the children), and a Faust pipeline with a
KinesisSink(record_ids=True) SIGKILLed twice while its input splits. Duplicates are there for a
plain reader; a deduplicating Consumer (restarted once, on its SQLite file) loses nothing and
delivers no duplicate, by record id or by payload."""

from __future__ import annotations

from pathlib import Path

import pytest

from kinesis_core.local import StreamFactory
from reliability.duplicates import Scenario, faust_scenario, producer_scenario

pytestmark = pytest.mark.integration


def check(scenario: Scenario) -> None:
    print(scenario.summary(), *scenario.notes, sep="\n")
    assert scenario.problems == []
    assert scenario.lost == 0
    assert scenario.delivered == scenario.attempted
    assert scenario.duplicates > 0  # a plain reader sees the copies the faults wrote
    dedup = scenario.deduplicated
    assert dedup.before_restart is not None
    assert dedup.duplicates == 0
    assert dedup.duplicate_numbers == 0
    assert dedup.dropped >= scenario.duplicates  # re-read after the restart: dropped again


@pytest.mark.parametrize("lost_during_split", [0.1, 1.0], ids=["10%", "all-during-split"])
def test_a_producer_losing_answers_across_a_split_leaves_no_duplicate_at_a_deduplicating_reader(
    kinesis_stream: StreamFactory, tmp_path: Path, lost_during_split: float
) -> None:
    scenario = producer_scenario(
        kinesis_stream, tmp_path, records=300, seed=7, lost_during_split=lost_during_split
    )
    check(scenario)
    assert scenario.faults > 0
    if lost_during_split == 1.0:  # retries into the children: only the parents' windows catch
        assert scenario.left_without_lineage > 0


def test_a_faust_pipeline_killed_twice_leaves_no_duplicate_at_a_deduplicating_reader(
    kinesis_stream: StreamFactory, tmp_path: Path
) -> None:
    check(faust_scenario(kinesis_stream, tmp_path, records=300, seed=7))
