"""Stream incarnations (sans-I/O): which stored rows belong to another incarnation of the
stream, and every outcome of judging a refused position."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from kinesis_core.checkpoint import Checkpoint, Sentinel
from kinesis_core.consumer.config import ConsumerConfig
from kinesis_core.consumer.incarnation import (
    Refusal,
    StreamFacts,
    StreamRecreatedError,
    epoch_ms,
    judge_refusal,
    recreated_at_start,
    reset_message,
    stale_rows,
    timestamp_text,
)
from kinesis_core.errors import ConfigurationError, KinesisConnectorError
from kinesis_core.shards.info import ShardInfo

CREATED = datetime(2026, 3, 1, 12, 0, 0, 250_000, tzinfo=timezone.utc)
NOW = epoch_ms(CREATED)
BEFORE = NOW - 90_000
FACTS = StreamFacts(NOW, 24)
OPEN = ShardInfo("shard-0", 0, 99, starting_sequence_number=1000)
CLOSED = ShardInfo("shard-1", 100, 199, starting_sequence_number=1000, ending_sequence_number=2000)


def test_creation_times_are_epoch_milliseconds() -> None:
    assert NOW == 1_772_366_400_250
    assert epoch_ms(CREATED.replace(tzinfo=None)) == NOW
    assert epoch_ms(CREATED.astimezone(timezone(timedelta(hours=2)))) == NOW
    assert timestamp_text(NOW) == "2026-03-01T12:00:00.250Z"
    response = {
        "StreamDescriptionSummary": {"StreamCreationTimestamp": CREATED, "RetentionPeriodHours": 48}
    }
    assert StreamFacts.from_response(response) == StreamFacts(NOW, 48)


def test_stale_rows_are_those_of_another_incarnation() -> None:
    same = Checkpoint("shard-0", (1500, 0), stream_created_ms=NOW)
    other = Checkpoint("shard-1", (1500, 0), stream_created_ms=BEFORE)
    legacy = Checkpoint("shard-0", (1500, 0))
    sentinel = Checkpoint("shard-0", Sentinel.TRIM_HORIZON, stream_created_ms=BEFORE)
    assert stale_rows([same, legacy], NOW, [OPEN, CLOSED]) == []
    assert stale_rows([same, other, sentinel], NOW) == [other, sentinel]


def test_a_row_without_an_incarnation_is_stale_only_outside_its_shards_sequence_numbers() -> None:
    before_start = Checkpoint("shard-0", (999, 0))
    after_end = Checkpoint("shard-1", (2001, 0))
    inside = Checkpoint("shard-1", (2000, 5))
    unlisted = Checkpoint("shard-9", (1, 0))
    part_key = Checkpoint("shard-0@0-49", (1, 0))
    at_end = Checkpoint("shard-1", Sentinel.SHARD_END)
    rows = [before_start, after_end, inside, unlisted, part_key, at_end]
    assert stale_rows(rows, NOW, [OPEN, CLOSED]) == [before_start, after_end]


def test_a_row_of_this_incarnation_is_never_stale_whatever_the_listing_says() -> None:
    """kinesis-mock lists a closed shard's ending sequence number as 2**63 - 1, below its
    records' numbers: the row says which stream it is of, so the listing is not asked."""
    mock_closed = ShardInfo(
        "shard-1", 100, 199, starting_sequence_number=1000, ending_sequence_number=2**63 - 1
    )
    row = Checkpoint("shard-1", (2**180, 3), stream_created_ms=NOW)
    assert stale_rows([row], NOW, [mock_closed]) == []
    assert stale_rows([Checkpoint("shard-1", (2**180, 3))], NOW, [mock_closed]) != []


def test_the_start_error_names_the_store_the_stream_and_both_creation_times() -> None:
    stale = [Checkpoint(f"shard-{i}", (5, 0), stream_created_ms=BEFORE) for i in range(5)]
    error = recreated_at_start(
        "SQLiteCheckpointStore('c.sqlite3')", "billing", "orders", stale, NOW, "TRIM_HORIZON"
    )
    assert isinstance(error, KinesisConnectorError)
    text = str(error)
    for needle in (
        "SQLiteCheckpointStore('c.sqlite3')",
        "'billing'",
        "'orders'",
        timestamp_text(BEFORE),
        timestamp_text(NOW),
        "5 shard rows",
        "shard-0, shard-1, shard-2, ...",
        "on_stream_recreated='reset'",
        "TRIM_HORIZON",
    ):
        assert needle in text
    assert (error.stored_created_ms, error.created_ms, error.stream) == ((BEFORE,), NOW, "orders")
    legacy = recreated_at_start("s", "a", "orders", [Checkpoint("shard-0", (1, 0))], NOW, "LATEST")
    assert "written before stream identities were kept" in str(legacy)
    assert legacy.stored_created_ms == ()


def test_the_reset_warning_says_what_it_does() -> None:
    stale = [Checkpoint("shard-0", (5, 0), stream_created_ms=BEFORE)]
    text = reset_message("MemoryCheckpointStore()", "a", "orders", stale, NOW, "LATEST")
    for needle in (timestamp_text(BEFORE), timestamp_text(NOW), "start over", "LATEST"):
        assert needle in text


@pytest.mark.parametrize(
    ("shard_id", "sequence_number", "facts", "incarnation", "refusal"),
    [
        # The stream was deleted and created again while it was read.
        ("shard-0", 1500, FACTS, BEFORE, Refusal.RECREATED),
        ("shard-0", None, FACTS, BEFORE, Refusal.RECREATED),
        # Not listed any more: past the retention period.
        ("shard-9", 1500, FACTS, NOW, Refusal.GONE),
        ("shard-9", None, FACTS, None, Refusal.GONE),
        # Listed, and no position was refused: connect again.
        ("shard-0", None, FACTS, NOW, Refusal.RETRY),
        # A position outside the listed shard's sequence numbers.
        ("shard-0", 999, FACTS, NOW, Refusal.RECREATED),
        ("shard-1", 2001, FACTS, None, Refusal.RECREATED),
        # A position of the shard the service refuses: older than the trim horizon.
        ("shard-0", 1500, FACTS, NOW, Refusal.TRIMMED),
        ("shard-1", 2000, StreamFacts(NOW), None, Refusal.TRIMMED),
    ],
)
def test_every_verdict_on_a_refusal(
    shard_id: str,
    sequence_number: int | None,
    facts: StreamFacts,
    incarnation: int | None,
    refusal: Refusal,
) -> None:
    shards = [OPEN, CLOSED]
    verdict = judge_refusal(shard_id, sequence_number, shards, facts, incarnation, "orders")
    assert verdict.refusal is refusal
    assert f"{shard_id} of orders" in verdict.message
    assert (verdict.error is not None) == (refusal is Refusal.RECREATED)
    if verdict.error is not None:
        assert isinstance(verdict.error, StreamRecreatedError)
        assert verdict.error.created_ms == NOW
        assert "on_stream_recreated" in verdict.message


def test_the_trimmed_warning_says_how_far_behind() -> None:
    verdict = judge_refusal("shard-0", 1500, [OPEN], FACTS, NOW, "orders")
    assert "1500" in verdict.message
    assert "more than the stream's retention of 24 h behind" in verdict.message
    assert "TRIM_HORIZON" in verdict.message


def test_the_option_is_checked() -> None:
    assert ConsumerConfig().on_stream_recreated == "fail"
    assert ConsumerConfig(on_stream_recreated="reset").on_stream_recreated == "reset"
    with pytest.raises(ConfigurationError, match="on_stream_recreated: must be 'fail' or 'reset'"):
        ConsumerConfig(on_stream_recreated="ignore")  # type: ignore[arg-type]
