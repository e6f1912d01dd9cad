"""The producer's suites of ``python -m reliability`` (smaller volumes, a shorter outage): under
faults every record lands where its result says or fails with its attempts within its TTL;
resharding costs few duplicates; a long outage keeps memory inside the budget and recovers;
refused credentials fail every record within seconds. None is lost."""

from __future__ import annotations

import pytest

from kinesis_core.local import StreamFactory
from reliability.producer_auth import producer_auth
from reliability.producer_faults import EXPIRY_RECORDS, producer_under_faults
from reliability.producer_outage import producer_outage
from reliability.producer_reshard import producer_reshard
from reliability.result import render

pytestmark = pytest.mark.integration


def test_producer_under_faults_loses_nothing(moto_stream: StreamFactory) -> None:
    result = producer_under_faults(moto_stream, records=5_000, seed=11)
    print(render([result]))
    assert result.faults > 100
    assert result.lost == 0
    assert result.problems == []
    assert result.delivered + result.failed == result.attempted
    # Only the records put while every PutRecords call was throttled fail (with Expired).
    assert result.failed == EXPIRY_RECORDS


def test_resharding_2_4_2_costs_at_most_one_percent_duplicates(
    kinesis_stream: StreamFactory,
) -> None:
    result = producer_reshard(kinesis_stream, records=1_500)
    print(render([result]))
    assert result.lost == 0
    assert result.problems == []
    assert result.delivered == result.attempted
    assert result.duplicated <= 0.01 * result.attempted


def test_a_long_outage_keeps_memory_in_the_budget_and_recovers(moto_stream: StreamFactory) -> None:
    result = producer_outage(moto_stream, outage=8.0, before=3.0, after=2.0)
    print(render([result]))
    assert result.lost == 0
    assert result.failed == 0
    assert result.problems == []
    assert result.delivered == result.attempted


def test_refused_credentials_fail_within_seconds() -> None:
    result = producer_auth()
    print(render([result]))
    assert result.lost == 0
    assert result.problems == []
    assert result.failed > 0
    assert result.delivered > 0
