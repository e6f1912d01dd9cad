"""The stream's maximum record size, learned from DescribeStreamSummary (sans-I/O).

Since late 2025 a stream takes records up to ``MaxRecordSizeInKiB`` (1 to 10 MiB; 1 MiB by
default). The producer's driver asks for it with the shard map and before it refuses a record,
and the pipeline validates against what it last heard.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from kinesis_core.errors import ConfigurationError
from kinesis_core.shards.hashing import LARGEST_RECORD_BYTES, MAX_RECORD_BYTES


class RecordSizeLimit:
    """The stream's maximum record size (data plus partition key), sans-I/O.

    ``bytes`` is what DescribeStreamSummary last reported (``MaxRecordSizeInKiB``), or the
    Kinesis default of 1 MiB until one answers, when the answer has no such field (a server
    older than late 2025, moto) and when the call failed (``error`` says why; the last value
    stays). A record over it may still fit a limit raised since (``UpdateMaxRecordSize``), so
    the driver asks again before refusing one: at most one such check every ``min_interval``
    seconds (``next_check``; the checks of shard-map refreshes do not count), and a record is
    refused only by a check that started after it came (``checked_since``).
    """

    def __init__(self, *, min_interval: float = 1.0) -> None:
        if min_interval < 0:
            raise ConfigurationError("min_interval", f"must be >= 0 seconds, got {min_interval}")
        self.min_interval = min_interval
        self.bytes = MAX_RECORD_BYTES
        self.reported = False
        """Whether the stream reported its limit (False: ``bytes`` is the default)."""
        self.error: str | None = None
        """Why the last check failed (None when it answered)."""
        self._last_start = -math.inf
        self._answered_from = -math.inf

    def next_check(self, now: float) -> float:
        """Seconds until the next check may start."""
        return max(0.0, self._last_start + self.min_interval - now)

    def started(self, now: float) -> None:
        """A DescribeStreamSummary asked for by a record starts now (``next_check`` paces
        those)."""
        self._last_start = max(self._last_start, now)

    def answered(self, summary: Mapping[str, Any], started_at: float) -> bool:
        """The ``StreamDescriptionSummary`` of a check that started at ``started_at``; True when
        the limit changed."""
        kib = summary.get("MaxRecordSizeInKiB")
        reported = False
        new = MAX_RECORD_BYTES
        if isinstance(kib, int) and not isinstance(kib, bool) and kib > 0:
            reported = True
            new = min(kib * 1024, LARGEST_RECORD_BYTES)
        changed = new != self.bytes
        self.bytes = new
        self.reported = reported
        self.error = None
        self._answered_from = max(self._answered_from, started_at)
        return changed

    def failed(self, reason: str, started_at: float) -> None:
        """The check that started at ``started_at`` failed (``reason``); the limit stays."""
        self.error = reason
        self._answered_from = max(self._answered_from, started_at)

    def checked_since(self, when: float) -> bool:
        """Whether a check that started at or after ``when`` has finished."""
        return self._answered_from >= when

    def explain(self, size: int, stream: str) -> str:
        """Why a record of ``size`` bytes is refused, and what to do about it."""
        kib = self.bytes // 1024
        if size > LARGEST_RECORD_BYTES:
            return (
                f"data plus partition key is {size} bytes, over {LARGEST_RECORD_BYTES} bytes "
                "(10 MiB), the most any Kinesis stream takes: put the data in S3 and send a "
                "pointer to it instead (docs/producer.md, Large records)"
            )
        if self.error is not None and not self.reported:
            source = (
                f"the default maximum record size, assumed because the stream's own could not "
                f"be learned ({self.error}; the producer needs kinesis:DescribeStreamSummary)"
            )
        elif self.reported:
            source = "its maximum record size (MaxRecordSizeInKiB, checked after the record came)"
        else:
            source = "its maximum record size (the default: DescribeStreamSummary reports none)"
        return (
            f"data plus partition key is {size} bytes, over the {kib} KiB ({self.bytes} "
            f"bytes) stream {stream!r} takes, {source}: raise it with UpdateMaxRecordSize "
            f"(aws kinesis update-max-record-size --stream-arn ARN --max-record-size-in-ki-b "
            f"{max(1024, -(-size // 1024))}; up to 10240), which a running producer picks up, or "
            "put the data in S3 and send a pointer to it (docs/producer.md, Large records)"
        )
