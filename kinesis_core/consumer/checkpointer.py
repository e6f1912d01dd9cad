"""The only writer of a consumer's checkpoint rows, with compare-and-set and no going back;
and the check at start that stored rows belong to the stream as it is now."""

from __future__ import annotations

import asyncio
import functools
import logging
import warnings
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from kinesis_core.checkpoint.base import (
    Checkpoint,
    CheckpointConflictError,
    CheckpointStore,
    CheckpointValue,
    checkpoint_order,
    same_incarnation,
)
from kinesis_core.consumer.incarnation import (
    OnStreamRecreated,
    StreamFacts,
    recreated_at_start,
    reset_message,
    stale_rows,
)
from kinesis_core.consumer.positions import InitialPosition
from kinesis_core.shards.info import ShardInfo
from kinesis_core.telemetry.recorder import NO_RECORDER, ConsumerRecorder

logger = logging.getLogger(__name__)

_T = TypeVar("_T")


class SharedCheckpointsWarning(UserWarning):
    """Another consumer writes the same checkpoint rows: both read every shard."""


async def landed(write: Awaitable[_T], keep: Callable[[_T], None]) -> _T:
    """Await a store write that cancellation must not cut off halfway; ``keep`` takes the
    row it wrote, whether or not the caller was cancelled meanwhile.

    A write may land after its caller was cancelled (an SQLite write runs to its commit on its
    own thread; a request already sent is applied). A writer that forgot it would expect the
    old row next time and lose its compare-and-set to itself. So a cancelled caller first
    waits for the write to finish and keeps its row, then is cancelled.
    """
    task = asyncio.ensure_future(write)
    try:
        row = await asyncio.shield(task)
    except asyncio.CancelledError:
        await asyncio.wait({task})
        if not task.cancelled() and task.exception() is None:
            keep(task.result())
        raise
    keep(row)
    return row


class Checkpointer:
    """The store rows of one (application, stream), and the only writer of them.

    Writes are serialized per shard. A lost compare-and-set adopts the stored row; the write is
    retried only if the stored value is still behind, so a checkpoint never moves backwards.
    A write cancelled in flight is waited for (:func:`landed`), so the next one expects the row
    it left.

    ``stream_created_ms`` (set once the stream was described) goes with every write: the
    incarnation of the stream the positions belong to.

    With ``exclusive`` (a lease-less Consumer, which reads every shard), a lost
    compare-and-set means a second consumer of the same application reading the same shards,
    each delivering every record: the first one seen raises :class:`SharedCheckpointsWarning`.
    The Beam source's writers are not exclusive: a restriction moves between DoFn instances.
    """

    def __init__(
        self,
        store: CheckpointStore,
        application: str,
        stream: str,
        *,
        exclusive: bool = False,
        recorder: ConsumerRecorder = NO_RECORDER,
    ) -> None:
        self.store = store
        self.recorder = recorder
        self.application = application
        self.stream = stream
        self.stream_created_ms: int | None = None
        self._rows: dict[str, Checkpoint] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._warned = not exclusive

    def row(self, shard_id: str) -> Checkpoint | None:
        return self._rows.get(shard_id)

    def observe(self, row: Checkpoint) -> None:
        current = self._rows.get(row.shard_id)
        if current is None or row.counter > current.counter:
            self._rows[row.shard_id] = row

    async def write(
        self,
        shard_id: str,
        value: CheckpointValue,
        parents: Sequence[str] = (),
        children: Sequence[str] = (),
        dedup_window: str | None = None,
    ) -> bool:
        """Store ``value`` (with the shard's dedup window as of it) unless the stored one is
        already there or ahead; True (the signature of :meth:`LeaseManager.write`, which may
        refuse)."""
        lock = self._locks.setdefault(shard_id, asyncio.Lock())
        created = self.stream_created_ms
        async with lock:
            for _ in range(5):
                current = self._rows.get(shard_id)
                if (
                    current is not None
                    and same_incarnation(current, created)
                    and (
                        current.value == value
                        or checkpoint_order(value) < checkpoint_order(current.value)
                    )
                ):
                    return True
                # Child ids only when there are some (at SHARD_END): stores written against
                # the first version of the protocol do not take them.
                extra: dict[str, Any] = {"child_shard_ids": children} if children else {}
                if dedup_window is not None:
                    extra["dedup_window"] = dedup_window
                try:
                    await landed(
                        self.store.put(
                            self.application,
                            self.stream,
                            shard_id,
                            value,
                            expected=current,
                            parent_shard_ids=parents,
                            stream_created_ms=created,
                            **extra,
                        ),
                        functools.partial(self._rows.__setitem__, shard_id),
                    )
                    self.recorder.checkpoint(shard_id)
                    return True
                except CheckpointConflictError as exc:
                    self._another_writer(shard_id, exc.current)
                    if exc.current is None:
                        self._rows.pop(shard_id, None)
                    else:
                        self._rows[shard_id] = exc.current
            raise CheckpointConflictError(
                shard_id, self._rows.get(shard_id), "the stored row kept changing under us"
            )

    def _another_writer(self, shard_id: str, stored: Checkpoint | None) -> None:
        if self._warned:
            return
        self._warned = True
        owner = f" (owner {stored.owner})" if stored is not None and stored.owner else ""
        warnings.warn(
            f"the checkpoint of {shard_id} ({self.application!r}, stream {self.stream!r}) was "
            f"written by another consumer{owner} meanwhile. Consumers of one application that "
            "share a store without leases each read every shard and deliver every record: "
            "give each its own application_name, or share the shards with leases=True "
            "(docs/leases.md).",
            SharedCheckpointsWarning,
            stacklevel=2,
        )


async def settle_incarnation(
    store: CheckpointStore,
    application: str,
    stream: str,
    rows: Sequence[Checkpoint],
    *,
    facts: StreamFacts,
    shards: Sequence[ShardInfo],
    on_stream_recreated: OnStreamRecreated,
    initial_position: InitialPosition,
) -> list[Checkpoint]:
    """The stored ``rows`` of (application, stream), checked against the stream as it is now
    (``facts`` and a complete listing, ``shards``) before any reader uses them: the one check
    at start of the core consumer, the Faust channel and the Beam source.

    Rows of another incarnation (:func:`~.incarnation.stale_rows`) raise
    :class:`~.incarnation.StreamRecreatedError` ("fail"), or are written over with the
    initial position and the current creation time, with a WARNING ("reset"). Returns the rows
    to read from.
    """
    stale = stale_rows(rows, facts.created_ms, shards)
    if not stale:
        return list(rows)
    initial = repr(initial_position)
    args = (repr(store), application, stream, stale, facts.created_ms, initial)
    if on_stream_recreated == "fail":
        raise recreated_at_start(*args)
    logger.warning("%s", reset_message(*args))
    fresh = {row.shard_id: row for row in rows}
    for row in stale:
        try:
            fresh[row.shard_id] = await store.put(
                application,
                stream,
                row.shard_id,
                initial_position.sentinel,
                expected=row,
                stream_created_ms=facts.created_ms,
            )
        except CheckpointConflictError as exc:
            # Another reader of this application reset (or wrote) it meanwhile.
            current = exc.current
            if current is None or not same_incarnation(current, facts.created_ms):
                raise
            fresh[row.shard_id] = current
    return list(fresh.values())
