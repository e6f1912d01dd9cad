"""The consumer under malformed answers, as in ``python -m reliability`` (quick volume): on
the lean and botocore polling paths and by fan-out, nothing lost, no SHARD_END stored for an
open shard, the consumer still running."""

from __future__ import annotations

import pytest

from kinesis_core.local import StreamFactory
from reliability.malformed_answers import consumer_under_malformed_answers
from reliability.result import render

pytestmark = pytest.mark.integration


def test_consumer_under_malformed_answers_loses_nothing_and_ends_no_open_shard(
    kinesis_stream: StreamFactory,
) -> None:
    result = consumer_under_malformed_answers(kinesis_stream, records=200, seed=5)
    print(render([result]))
    assert result.attempted == 600  # 200 per path
    assert result.lost == 0
    assert result.delivered == result.attempted
    assert result.problems == []
