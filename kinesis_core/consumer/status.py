"""What ``Consumer.status()`` reports per shard: state, position, lag and unacked records."""

from __future__ import annotations

from dataclasses import dataclass

from kinesis_core.checkpoint.base import CheckpointValue
from kinesis_core.consumer.lineage import ShardState
from kinesis_core.records import Position


@dataclass(frozen=True, slots=True)
class ShardStatus:
    shard_id: str
    state: ShardState
    parent_shard_ids: tuple[str, ...]
    position: Position | None
    """The newest record read from the shard (delivered or queued for delivery)."""
    checkpoint: CheckpointValue | None
    """The value last written to the checkpoint store."""
    millis_behind_latest: int | None
    """How far the last response (GetRecords, or a fan-out event) was behind the shard's tip."""
    pending_acks: int
    """Records read and not yet acked."""
    transport: str | None = None
    """How the shard is read: ``"polling"`` or ``"subscription"`` (None when not read here)."""
    connects: int = 0
    """Shard iterators got (polling) or subscriptions opened, renewals included."""
    bad_answers: int = 0
    """Answers that ended the shard without a word of its children while a listing showed it
    open, or had no records at all (docs/reliability.md, "Malformed answers"); answers that
    did not parse are failed calls (error code ``MalformedResponse``)."""
    duplicates: int = 0
    """Records dropped as duplicates since the shard's reading started here
    (``ConsumerConfig(deduplicate=...)``)."""
