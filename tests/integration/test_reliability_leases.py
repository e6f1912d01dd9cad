"""The leases row of ``python -m reliability --quick``: workers with leases on a DynamoDB table
(moto) joining, one SIGKILLed, one stopped, a replacement, a split of the kinesis-mock stream,
while our producer with record ids writes through a fault proxy that loses 5% of its PutRecords
answers after the write. The workers deduplicate: the ids written twice never reach the
application, and what is delivered twice is the killed worker's deliveries after its last
checkpoint (the at-least-once part); nothing is lost. The row's bounds of time (balance, failover)
and of the re-deliveries' share are printed, not asserted: they depend on the machine's load."""

from __future__ import annotations

from pathlib import Path

import pytest

from kinesis_core.local import MotoServer, StreamFactory
from reliability.lease_scaleout import lease_scale_out
from reliability.result import render

pytestmark = pytest.mark.integration


def test_deduplicating_workers_under_scale_out_deliver_no_copy_that_entered_the_stream(
    kinesis_stream: StreamFactory, moto_server: MotoServer, tmp_path: Path
) -> None:
    dynamodb = moto_server.client_config().dynamodb_endpoint_url
    assert dynamodb is not None
    result = lease_scale_out(kinesis_stream, dynamodb, tmp_path, seconds=40, seed=7)
    print(render([result]))
    # The row's bounds of time and share depend on the machine's load; the rest may not fail.
    assert [p for p in result.problems if p not in result.bounds] == []
    assert result.faults > 3  # answers lost besides the kill, the stop and the split
    assert result.lost == 0
    assert result.failed == 0
    assert result.delivered == result.attempted
    assert result.entered > 0  # ids written twice after a lost answer
    assert result.leaked == 0  # none of them reached the application
    assert result.planned == 0
    assert result.checkpointed == 0  # re-deliveries only of what followed the last checkpoint
