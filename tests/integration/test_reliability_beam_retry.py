"""The Beam retried-bundle row of ``python -m reliability``, small: a pipeline on the portable
runner writes 1,500 elements in one bundle with ``WriteToKinesis(record_id_fn=...)``; its SDK
worker is SIGKILLed mid-bundle after the first 1,000 records are in the stream, and the job runs
again. Read back by the core consumer: the retry's copies are there without dedup, and with
``ConsumerConfig(deduplicate=True)`` nothing is lost and nothing is read twice."""

from __future__ import annotations

from pathlib import Path

import pytest

from kinesis_core.local import StreamFactory
from reliability.beam_retry import beam_retry

pytestmark = pytest.mark.integration


def test_a_retried_write_bundle_leaves_no_duplicate_at_a_deduplicating_consumer(
    moto_stream: StreamFactory, tmp_path: Path
) -> None:
    result = beam_retry(moto_stream, tmp_path, elements=1_500)
    print(*result.notes, sep="\n")
    assert result.problems == []
    assert result.written_before_kill == 1_000  # the kill was mid-bundle, after two chunks
    assert result.lost == 0
    assert result.delivered == result.attempted
    assert result.raw.duplicates == 1_000  # the retry wrote those again
    assert result.deduplicated.duplicates == 0
    assert result.deduplicated.duplicate_numbers == 0
    assert result.deduplicated.dropped == 1_000
