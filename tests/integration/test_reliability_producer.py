"""The producer under faults, as in ``python -m reliability`` (smaller volume): every record
lands where its result says or fails with its attempts within its TTL; none is lost."""

from __future__ import annotations

import pytest

from kinesis_core.local import StreamFactory
from reliability.producer_faults import EXPIRY_RECORDS, producer_under_faults
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
