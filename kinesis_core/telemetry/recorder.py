"""What a consumer reports, as calls at the points where it happens: :class:`ConsumerRecorder`.

The base class reports nothing (telemetry off); :mod:`kinesis_core.telemetry.otel` reports to
OpenTelemetry and the Beam source reports Beam metrics, under the names of
:mod:`kinesis_core.telemetry.names`. The hooks in the consumer, the lease manager, the
checkpointer and the Faust channel call these methods; the hot ones (one call per batch) only
when :attr:`enabled`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, TypeVar

from kinesis_core.telemetry.names import LeaseChange, SubscriptionOutcome

if TYPE_CHECKING:
    from kinesis_core.records import KinesisRecord

_T = TypeVar("_T")


class ConsumerRecorder:
    """Reports nothing: what a consumer with telemetry off has."""

    enabled = False

    def transport(self, inner: _T, shard_id: str) -> _T:
        """A shard reader's transport, with its calls timed when telemetry is on."""
        return inner

    def store(self, inner: _T) -> _T:
        """A checkpoint store, with its calls timed when telemetry is on."""
        return inner

    def close(self) -> None:
        """The consumer closed: its counts so far stay in the totals."""

    def delivered(self, shard_id: str, records: Sequence[KinesisRecord], now: float) -> None:
        """``records`` were handed to the application at ``now`` (``time.time()``)."""

    def processed(self, seconds: float) -> None:
        """The application took ``seconds`` over one batch before asking for the next."""

    def lag(self, shard_id: str, millis_behind_latest: int) -> None:
        """A read of the shard said how far behind the tip it is."""

    def operation(self, shard_id: str, operation: str, seconds: float, error: str | None) -> None:
        """A reader's call of ``operation`` took ``seconds`` (``error``: its error type)."""

    def subscription(
        self, shard_id: str, outcome: SubscriptionOutcome, error: str | None = None
    ) -> None:
        """A SubscribeToShard call of enhanced fan-out, and how it went."""

    def checkpoint(self, shard_id: str) -> None:
        """A checkpoint of the shard was written to the store."""

    def duplicates(self, shard_id: str, records: int) -> None:
        """``records`` read from the shard were dropped as duplicates."""

    def lease(self, change: LeaseChange) -> None:
        """A lease changed hands (taken, stolen, lost, released, handed over)."""

    def store_call(self, kind: str, operation: str, seconds: float, error: str | None) -> None:
        """A call of the checkpoint store (``kind``: its class name)."""


NO_RECORDER = ConsumerRecorder()
"""The recorder of a consumer without telemetry."""
