"""What the lease manager hands out: one event per change of this worker's leases.

The lease manager does not call into the consumer; it queues these events in the order they
happened, and the consumer's scheduler takes them (:meth:`~.manager.LeaseManager.take_events`,
:meth:`~.manager.LeaseManager.next_events`) and feeds each shard's machine
(:class:`~kinesis_core.consumer.shard_consumer.ShardConsumer`) from them.
"""

from __future__ import annotations

from dataclasses import dataclass

from kinesis_core.checkpoint.base import Checkpoint


@dataclass(frozen=True, slots=True)
class LeaseAcquired:
    """The lease is this worker's now (taken, or handed over to it): its shard may start."""

    shard_id: str


@dataclass(frozen=True, slots=True)
class LeaseLost:
    """The lease is no longer this worker's (taken without a hand-off, or not renewed within
    the failover time): its shard stops at once, and no checkpoint of it is written."""

    shard_id: str


@dataclass(frozen=True, slots=True)
class HandOffAsked:
    """Another worker asked for the lease: stop delivering, wait for the acks, then
    :meth:`~.manager.LeaseManager.hand_over` (only with ``graceful_handoff``)."""

    shard_id: str


@dataclass(frozen=True, slots=True)
class TableScanned:
    """Rows read from the lease table: every row of the application and stream (a scan), or
    the rows a leader newly assigned to this worker."""

    rows: tuple[Checkpoint, ...]


@dataclass(frozen=True, slots=True)
class LeasesFailed:
    """The store raised an error no retry fixes: every lease ended (a :class:`LeaseLost`
    came before for each held one) and no lease is taken any more."""

    error: BaseException


LeaseEvent = LeaseAcquired | LeaseLost | HandOffAsked | TableScanned | LeasesFailed
