"""How many bytes a shard still holds behind a reader: the backlog the runner sizes work by.

Sans-I/O. Kinesis says how far behind the tip a response is in time (``MillisBehindLatest``),
not in bytes; KafkaIO's ``getSize`` has offsets, this has a rate. :class:`ByteRate` learns the
shard's write rate from what the reader reads: bytes per millisecond of arrival time (the
records' ``ApproximateArrivalTimestamp``), decayed so that the recent past counts most. The
backlog is then ``MillisBehindLatest`` times that rate. (A polling reader outputs all of a
response before its next call; the events a fan-out subscription reads ahead, two at most, are
not counted.)
"""

from __future__ import annotations

DECAY = 0.8
"""Weight of the past in the rate at each response (about the last five responses count)."""


class ByteRate:
    """The write rate of one shard, learnt from the responses read from it."""

    __slots__ = ("_bytes", "_last_ms", "_millis")

    def __init__(self) -> None:
        self._bytes = 0.0
        self._millis = 0.0
        self._last_ms: int | None = None

    def observe(self, nbytes: int, first_ms: int, last_ms: int) -> None:
        """A response's records: ``nbytes`` of data that arrived between ``first_ms`` and
        ``last_ms`` (epoch milliseconds). The span counts from the previous response's last
        arrival, so the gaps between responses count as time too."""
        since = first_ms if self._last_ms is None else min(self._last_ms, first_ms)
        self._bytes = DECAY * self._bytes + nbytes
        self._millis = DECAY * self._millis + max(last_ms - since, 0)
        self._last_ms = max(last_ms, self._last_ms or last_ms)

    @property
    def bytes_per_ms(self) -> float | None:
        """None before the first record; records all stamped in the same millisecond count
        as written over one millisecond."""
        if self._last_ms is None:
            return None
        return self._bytes / max(self._millis, 1.0)


def backlog_bytes(millis_behind_latest: int | None, rate: ByteRate) -> int:
    """The estimated bytes not read yet: ``millis_behind_latest`` (None: unknown, taken as
    caught up) times the learnt rate (none learnt yet: nothing known behind)."""
    per_ms = rate.bytes_per_ms
    if not millis_behind_latest or per_ms is None:
        return 0
    return int(millis_behind_latest * per_ms)
