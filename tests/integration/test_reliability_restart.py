"""kinesis-mock stopped for seconds and started again (with persistence), as in
``python -m reliability``: a producer and a consumer (polling, or by enhanced fan-out) running
all along resume by themselves and nothing is lost."""

from __future__ import annotations

from pathlib import Path

import pytest

from reliability.result import render
from reliability.server_restart import server_restart

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("fan_out", [False, True], ids=["polling", "fan-out"])
def test_producer_and_consumer_resume_after_a_server_restart(tmp_path: Path, fan_out: bool) -> None:
    result = server_restart(tmp_path, outage=3.0, before=2.0, after=2.0, fan_out=fan_out)
    print(render([result]))
    assert result.attempted > 0
    assert result.lost == 0
    assert result.failed == 0  # the record TTL is longer than the outage
    assert result.delivered == result.attempted
    assert result.problems == []
