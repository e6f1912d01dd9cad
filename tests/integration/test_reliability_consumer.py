"""The consumer under faults, polling and by enhanced fan-out (subscriptions cut mid-stream and
delayed), as in ``python -m reliability`` (smaller volume): everything delivered at least once,
every checkpoint written at or below the records acked by then."""

from __future__ import annotations

import pytest

from kinesis_core.local import StreamFactory
from reliability.consumer_faults import consumer_under_faults
from reliability.result import render

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("fan_out", [False, True], ids=["polling", "fan-out"])
def test_consumer_under_faults_delivers_everything_and_never_checkpoints_ahead(
    kinesis_stream: StreamFactory, fan_out: bool
) -> None:
    result = consumer_under_faults(kinesis_stream, records=600, seed=12, fan_out=fan_out)
    print(render([result]))
    assert result.faults > 10
    assert result.attempted == 600
    assert result.lost == 0
    assert result.delivered == result.attempted
    assert result.problems == []
