"""The checkpoint store protocol and the lease-shaped record every store keeps.

A checkpoint row has the shape of a KCL lease (shard id, checkpoint, owner, counter, parent and
child ids, hash range), so the DynamoDB store keeps the KCL lease-table schema and the same
rows serve as leases between workers. Each row also says which incarnation of the stream its
position belongs to (the stream's creation time): a stream deleted and created again under the
same name has the same shard ids and other sequence numbers. The rules every store must enforce
live here, in two pure functions (:func:`apply_put` for checkpoints, :func:`apply_lease` for
renew, take and release), so the stores cannot drift apart.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from kinesis_core.errors import KinesisConnectorError, ValidationError
from kinesis_core.records import Position


class Sentinel(str, enum.Enum):
    """Checkpoint values that are not a record position (the KCL's SentinelCheckpoint)."""

    TRIM_HORIZON = "TRIM_HORIZON"
    LATEST = "LATEST"
    AT_TIMESTAMP = "AT_TIMESTAMP"
    SHARD_END = "SHARD_END"

    def __str__(self) -> str:
        return self.value


SHARD_END = Sentinel.SHARD_END

CheckpointValue = Position | Sentinel
"""A position ``(sequence_number, sub_sequence_number)`` or a sentinel."""


def checkpoint_order(value: CheckpointValue) -> tuple[int, int, int]:
    """Sort key of a checkpoint value, as the KCL orders them.

    The start sentinels sort below every real position, SHARD_END above all of them.
    """
    if isinstance(value, Sentinel):
        return (2, 0, 0) if value is Sentinel.SHARD_END else (0, 0, 0)
    return (1, value[0], value[1])


def validate_checkpoint_value(value: object, field: str = "checkpoint") -> CheckpointValue:
    """Refuse anything that is neither a sentinel nor a pair of non-negative ints."""
    if isinstance(value, Sentinel):
        return value
    if (
        isinstance(value, tuple)
        and len(value) == 2
        and all(type(v) is int and v >= 0 for v in value)
    ):
        return (value[0], value[1])
    raise ValidationError(
        field,
        "must be a Sentinel or a (sequence_number, sub_sequence_number) pair of "
        f"non-negative ints, got {value!r:.80}",
    )


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """One shard's stored state: a KCL lease without the lease-table plumbing.

    ``counter`` grows by one on every successful write; it is the compare-and-set token
    (the KCL's ``leaseCounter``). ``owner`` is the worker holding the lease (None: nobody,
    or a consumer that runs without leases). ``child_shard_ids`` are written at SHARD_END.
    ``stream_created_ms`` is the creation time (epoch milliseconds) of the incarnation of the
    stream whose position ``value`` is; None in rows written before incarnations were kept.
    ``checkpoint_owner`` is set while a lease is handed over (the KCL 3.x ``checkpointOwner``):
    ``owner`` is then the worker taking it, and ``checkpoint_owner`` the one still holding it,
    which writes the final checkpoint (that write clears it). ``throughput_kbps`` is what its
    owner read from the shard, in KiB a second, at its last renewal (the KCL 3.x
    ``throughputKBps``; None: never measured). ``dedup_window`` is the shard's dedup window
    as of ``value`` (:meth:`~kinesis_core.consumer.dedup.DedupWindow.dumps`: the ids of the
    records delivered up to it), kept by a consumer that deduplicates; None: none kept.
    """

    shard_id: str
    value: CheckpointValue
    counter: int = 0
    owner: str | None = None
    parent_shard_ids: tuple[str, ...] = ()
    child_shard_ids: tuple[str, ...] = ()
    hash_range: tuple[int, int] | None = None
    stream_created_ms: int | None = None
    checkpoint_owner: str | None = None
    throughput_kbps: float | None = None
    dedup_window: str | None = None

    @property
    def position(self) -> Position | None:
        """The checkpointed record position, or None for a sentinel."""
        return None if isinstance(self.value, Sentinel) else self.value

    @property
    def is_shard_end(self) -> bool:
        return self.value is Sentinel.SHARD_END

    @property
    def holder(self) -> str | None:
        """The worker that reads the shard now: the checkpoint owner during a hand-off, the
        owner otherwise (the KCL 3.x ``actualOwner``)."""
        return self.checkpoint_owner or self.owner


class CheckpointConflictError(KinesisConnectorError):
    """A compare-and-set write lost: the stored row is not the one the writer expected,
    or the write would move the checkpoint backwards. ``current`` is the row as stored."""

    def __init__(self, shard_id: str, current: Checkpoint | None, reason: str) -> None:
        super().__init__(f"checkpoint of {shard_id} not written: {reason}")
        self.shard_id = shard_id
        self.current = current


class CheckpointTableGoneError(KinesisConnectorError):
    """The table a store opened is gone: the DynamoDB lease table was deleted, or the SQLite
    file was deleted or replaced by another file at its path, since this store first used it.
    Its rows, and every lease in them, went with it; another worker starting on the new table
    would read every shard again. No retry fixes it: a consumer stops delivering and raises
    it. ``table`` names the table or file."""

    def __init__(self, table: str, message: str) -> None:
        super().__init__(message)
        self.table = table


def _check_expected(current: Checkpoint | None, shard_id: str, expected: Checkpoint) -> Checkpoint:
    """The stored row, if it is still the one the writer expected (same counter, owner and
    checkpoint owner)."""
    if current is None:
        raise CheckpointConflictError(shard_id, None, "the expected row does not exist")
    if (current.counter, current.owner, current.checkpoint_owner) != (
        expected.counter,
        expected.owner,
        expected.checkpoint_owner,
    ):
        raise CheckpointConflictError(
            shard_id,
            current,
            f"counter is {current.counter} (owner {current.owner}"
            f"{_handing(current)}), expected {expected.counter} (owner {expected.owner}"
            f"{_handing(expected)})",
        )
    return current


def _handing(row: Checkpoint) -> str:
    return "" if row.checkpoint_owner is None else f", handed over by {row.checkpoint_owner}"


def same_incarnation(row: Checkpoint, stream_created_ms: int | None) -> bool:
    """Whether ``row`` may belong to the incarnation of the stream created at
    ``stream_created_ms``: the same creation time, or one of them unknown (a row written before
    incarnations were kept is taken to be of the current one)."""
    return row.stream_created_ms is None or stream_created_ms in (None, row.stream_created_ms)


def apply_put(
    current: Checkpoint | None,
    shard_id: str,
    value: CheckpointValue,
    expected: Checkpoint | None,
    parent_shard_ids: Sequence[str],
    child_shard_ids: Sequence[str] = (),
    hash_range: tuple[int, int] | None = None,
    stream_created_ms: int | None = None,
    dedup_window: str | None = None,
) -> Checkpoint:
    """The row a conditional put leaves behind, or CheckpointConflictError.

    The write succeeds only if the stored row is the expected one (same counter and owner;
    ``expected=None`` means "no row yet") and the new value is not below the stored one.
    Parent ids, child ids, the hash range and the incarnation keep their stored values unless
    given. A write for another incarnation of the stream (``stream_created_ms`` given and not
    the stored one) starts the row over: its value may be below the stored one (which belongs
    to a stream that no longer exists), and the old shard's parents, children and range go.
    Every checkpoint clears ``checkpoint_owner``: the final checkpoint of a hand-off is what
    completes it. ``dedup_window`` replaces the stored window when given; otherwise the stored
    one stays (its ids were all delivered before the new value), except at a new incarnation.
    """
    value = validate_checkpoint_value(value)
    if expected is None:
        if current is not None:
            raise CheckpointConflictError(shard_id, current, "a row exists, none was expected")
        return Checkpoint(
            shard_id,
            value,
            1,
            None,
            tuple(parent_shard_ids),
            tuple(child_shard_ids),
            hash_range,
            stream_created_ms,
            dedup_window=dedup_window,
        )
    current = _check_expected(current, shard_id, expected)
    if not same_incarnation(current, stream_created_ms):
        return Checkpoint(
            shard_id,
            value,
            current.counter + 1,
            current.owner,
            tuple(parent_shard_ids),
            tuple(child_shard_ids),
            hash_range,
            stream_created_ms,
            None,
            dedup_window=dedup_window,
        )
    if checkpoint_order(value) < checkpoint_order(current.value):
        raise CheckpointConflictError(
            shard_id, current, f"{value} is behind the stored {current.value}"
        )
    return dataclasses.replace(
        current,
        value=value,
        counter=current.counter + 1,
        parent_shard_ids=tuple(parent_shard_ids) or current.parent_shard_ids,
        child_shard_ids=tuple(child_shard_ids) or current.child_shard_ids,
        hash_range=hash_range or current.hash_range,
        stream_created_ms=(
            current.stream_created_ms if stream_created_ms is None else stream_created_ms
        ),
        checkpoint_owner=None,
        dedup_window=current.dedup_window if dedup_window is None else dedup_window,
    )


def apply_lease(
    current: Checkpoint | None,
    shard_id: str,
    expected: Checkpoint,
    owner: str | None,
    checkpoint_owner: str | None = None,
    throughput_kbps: float | None = None,
) -> Checkpoint:
    """The row a conditional lease write leaves behind, or CheckpointConflictError.

    One rule for the lease operations: renew (``owner`` unchanged), take (a new owner),
    release (``owner=None``) and ask for a hand-off (a new ``owner`` and ``checkpoint_owner``
    the current one, who goes on renewing the row as it is until it writes its final
    checkpoint). Each bumps the counter, which is how other workers see that the lease is
    alive, and each needs the stored row to be the expected one. ``throughput_kbps`` (a
    renewal's measure) replaces the stored one when given.
    """
    current = _check_expected(current, shard_id, expected)
    return dataclasses.replace(
        current,
        counter=current.counter + 1,
        owner=owner,
        checkpoint_owner=checkpoint_owner,
        throughput_kbps=current.throughput_kbps if throughput_kbps is None else throughput_kbps,
    )


@runtime_checkable
class CheckpointStore(Protocol):
    """Where a consumer keeps one row per (application, stream, shard).

    Every method is a coroutine, so a network store (DynamoDB) fits the same shape; ``put`` is
    a compare-and-set on the row's counter that never lets a checkpoint move backwards.
    """

    async def get(self, application: str, stream: str, shard_id: str) -> Checkpoint | None:
        """The stored row of one shard, or None."""
        ...

    async def list(self, application: str, stream: str) -> list[Checkpoint]:
        """Every stored row of a stream, in no particular order."""
        ...

    async def put(
        self,
        application: str,
        stream: str,
        shard_id: str,
        value: CheckpointValue,
        *,
        expected: Checkpoint | None,
        parent_shard_ids: Sequence[str] = (),
        child_shard_ids: Sequence[str] = (),
        hash_range: tuple[int, int] | None = None,
        stream_created_ms: int | None = None,
        dedup_window: str | None = None,
    ) -> Checkpoint:
        """Write ``value`` if the row is still ``expected``; return the new row.

        ``stream_created_ms`` is the creation time of the stream ``value`` belongs to, and
        ``dedup_window`` the shard's dedup window as of ``value`` (see :func:`apply_put`).
        Raises CheckpointConflictError (carrying the stored row) otherwise.
        """
        ...

    async def close(self) -> None:
        """Release files, threads or connections."""
        ...


@runtime_checkable
class LeaseStore(CheckpointStore, Protocol):
    """A checkpoint store whose rows can also be held as leases by several workers."""

    async def update_lease(
        self,
        application: str,
        stream: str,
        shard_id: str,
        *,
        expected: Checkpoint,
        owner: str | None,
        checkpoint_owner: str | None = None,
        throughput_kbps: float | None = None,
    ) -> Checkpoint:
        """Renew, take, release or ask to hand over a lease (see :func:`apply_lease`); return
        the new row.

        Raises CheckpointConflictError (carrying the stored row) if the row is not ``expected``.
        """
        ...

    async def heartbeat(
        self, application: str, stream: str, worker_id: str, *, leaving: bool = False
    ) -> None:
        """Say that ``worker_id`` is alive (its worker row's counter +1), or remove its row
        (``leaving``). Workers count each other from these rows before they hold a lease."""
        ...

    async def workers(self, application: str, stream: str) -> dict[str, int]:
        """The worker rows: worker id -> its counter."""
        ...

    async def forget_worker(
        self, application: str, stream: str, worker_id: str, counter: int
    ) -> None:
        """Remove the row of a worker that died, if its counter is still ``counter``."""
        ...


@runtime_checkable
class AssignedLeaseStore(LeaseStore, Protocol):
    """A lease store whose reads cost what a worker owns, not what the table holds (DynamoDB):
    one worker, elected through a row of the table, reads the whole table and assigns the
    leases; every other worker finds its own leases through an index on the owner. A lease
    manager on such a store works that way (:mod:`kinesis_core.lease.manager`); on a store
    without these methods (SQLite, memory: their reads are cheap) every worker reads the
    table."""

    async def owned(self, application: str, stream: str, worker_id: str) -> list[str]:
        """The shard ids of the leases whose owner is ``worker_id`` (an index: eventually
        consistent, so a caller reads each row before it acts on it)."""
        ...

    async def beat(self, application: str, stream: str, worker_id: str) -> int:
        """:meth:`LeaseStore.heartbeat`, returning how many times the leader said it assigned
        ``worker_id`` leases (:meth:`nudge`)."""
        ...

    async def nudge(self, application: str, stream: str, worker_id: str) -> None:
        """Tell ``worker_id`` (at its next :meth:`beat`) that leases were assigned to it."""
        ...

    async def snapshot(
        self, application: str, stream: str
    ) -> tuple[list[Checkpoint], dict[str, int]]:
        """Every lease and every worker row (:meth:`LeaseStore.list` and
        :meth:`LeaseStore.workers`) in one read of the table."""
        ...

    async def leader(self, application: str, stream: str) -> tuple[str | None, int]:
        """The leader row: the worker it names (None: no row) and its counter."""
        ...

    async def claim_leader(
        self, application: str, stream: str, worker_id: str, expected: int | None
    ) -> int | None:
        """Make (or keep) ``worker_id`` the leader if the leader row's counter is still
        ``expected`` (None: no row yet); the new counter, or None if the row moved."""
        ...

    async def resign_leader(self, application: str, stream: str, worker_id: str) -> None:
        """Remove the leader row if it names ``worker_id``."""
        ...
