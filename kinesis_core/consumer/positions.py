"""Where a consumer starts reading a shard it has no checkpoint for, and the positions it
resumes from."""

from __future__ import annotations

import math
from datetime import datetime, timezone
from typing import Any

from kinesis_core.checkpoint.base import Sentinel
from kinesis_core.errors import ConfigurationError


class InitialPosition:
    """TRIM_HORIZON, LATEST or AtTimestamp(t): the start of a shard without a checkpoint."""

    __slots__ = ("sentinel", "timestamp")

    def __init__(self, sentinel: Sentinel, timestamp: datetime | None = None) -> None:
        if sentinel is Sentinel.SHARD_END:
            raise ConfigurationError("initial_position", "SHARD_END is not a start position")
        if (sentinel is Sentinel.AT_TIMESTAMP) != (timestamp is not None):
            raise ConfigurationError(
                "initial_position", "a timestamp goes with AT_TIMESTAMP and only with it"
            )
        self.sentinel = sentinel
        self.timestamp = timestamp

    def iterator_params(self) -> dict[str, Any]:
        """The GetShardIterator arguments for this position."""
        if self.timestamp is not None:
            return {"ShardIteratorType": "AT_TIMESTAMP", "Timestamp": self.timestamp}
        return {"ShardIteratorType": self.sentinel.value}

    def shard_filter(self) -> dict[str, Any] | None:
        """The ListShards ShardFilter of the shards this position can read anything from:
        the open ones for LATEST, those not closed before the timestamp for AT_TIMESTAMP."""
        if self.timestamp is not None:
            return {"Type": "FROM_TIMESTAMP", "Timestamp": self.timestamp}
        if self.sentinel is Sentinel.LATEST:
            return {"Type": "AT_LATEST"}
        return None

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, InitialPosition):
            return NotImplemented
        return (self.sentinel, self.timestamp) == (other.sentinel, other.timestamp)

    def __hash__(self) -> int:
        return hash((self.sentinel, self.timestamp))

    def __repr__(self) -> str:
        if self.timestamp is not None:
            return f"AtTimestamp({self.timestamp.isoformat()})"
        return str(self.sentinel)


class AtTimestamp(InitialPosition):
    """Start at the first record that arrived at or after ``timestamp``.

    A naive datetime is read as UTC; a float or int is seconds since the epoch.
    """

    __slots__ = ()

    def __init__(self, timestamp: datetime | float) -> None:
        if isinstance(timestamp, bool) or not isinstance(timestamp, (datetime, int, float)):
            raise ConfigurationError(
                "timestamp", f"must be a datetime or epoch seconds, got {type(timestamp).__name__}"
            )
        if not isinstance(timestamp, datetime):
            timestamp = _from_epoch(timestamp)
        elif timestamp.tzinfo is None:
            timestamp = timestamp.replace(tzinfo=timezone.utc)
        super().__init__(Sentinel.AT_TIMESTAMP, timestamp)


MAX_EPOCH_SECONDS = 253_402_300_799
"""9999-12-31T23:59:59Z, the last second a datetime holds."""


def _from_epoch(seconds: float) -> datetime:
    """The UTC datetime of epoch ``seconds``; ConfigurationError naming the range (and the
    likely mistake, milliseconds) when there is none."""
    if not (math.isfinite(seconds) and 0 <= seconds <= MAX_EPOCH_SECONDS):
        hint = (
            " (milliseconds? pass seconds: AtTimestamp(t / 1000))"
            if math.isfinite(seconds) and 0 <= seconds / 1000 <= MAX_EPOCH_SECONDS
            else ""
        )
        raise ConfigurationError(
            "timestamp",
            f"AtTimestamp takes a datetime or epoch seconds from 0 to {MAX_EPOCH_SECONDS} "
            f"(the years 1970 to 9999), got {seconds!r}{hint}",
        )
    return datetime.fromtimestamp(seconds, tz=timezone.utc)


TRIM_HORIZON = InitialPosition(Sentinel.TRIM_HORIZON)
"""The oldest record still in the shard."""
LATEST = InitialPosition(Sentinel.LATEST)
"""Only records written after the reader starts."""


_NAMED = {"TRIM_HORIZON": TRIM_HORIZON, "LATEST": LATEST}
_ACCEPTED = (
    "TRIM_HORIZON or LATEST (the constants of kinesis_core.consumer, or those names as strings "
    "in any case), AtTimestamp(t), or a datetime"
)


def parse_initial_position(value: object, field: str = "initial_position") -> InitialPosition:
    """The start position ``value`` names; the one parser behind every ``initial_position``
    argument (core, Beam and Faust), so they all accept the same spellings.

    Accepts the constants, the strings ``"TRIM_HORIZON"``/``"LATEST"`` in any case, an
    :class:`AtTimestamp`, or a datetime (naive means UTC).
    """
    if isinstance(value, InitialPosition):
        return value
    if isinstance(value, str):
        named = _NAMED.get(value.strip().upper())
        if named is not None:
            return named
    if isinstance(value, datetime):
        return AtTimestamp(value)
    raise ConfigurationError(field, f"must be {_ACCEPTED}; got {value!r:.80}")


def resume_params(sequence_number: int, *, after: bool) -> dict[str, Any]:
    """GetShardIterator arguments to continue at (or just after) a sequence number."""
    return {
        "ShardIteratorType": "AFTER_SEQUENCE_NUMBER" if after else "AT_SEQUENCE_NUMBER",
        "StartingSequenceNumber": str(sequence_number),
    }
