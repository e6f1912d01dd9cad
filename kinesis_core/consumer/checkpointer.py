"""The only writer of a consumer's checkpoint rows, with compare-and-set and no going back."""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import Sequence
from typing import Any

from kinesis_core.checkpoint.base import (
    Checkpoint,
    CheckpointConflictError,
    CheckpointStore,
    CheckpointValue,
    checkpoint_order,
)


class SharedCheckpointsWarning(UserWarning):
    """Another consumer writes the same checkpoint rows: both read every shard."""


class Checkpointer:
    """The store rows of one (application, stream), and the only writer of them.

    Writes are serialized per shard. A lost compare-and-set adopts the stored row; the write is
    retried only if the stored value is still behind, so a checkpoint never moves backwards.

    With ``exclusive`` (a lease-less Consumer, which reads every shard), a lost
    compare-and-set means a second consumer of the same application reading the same shards,
    each delivering every record: the first one seen raises :class:`SharedCheckpointsWarning`.
    The Beam source's writers are not exclusive: a restriction moves between DoFn instances.
    """

    def __init__(
        self, store: CheckpointStore, application: str, stream: str, *, exclusive: bool = False
    ) -> None:
        self.store = store
        self.application = application
        self.stream = stream
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
    ) -> bool:
        """Store ``value`` unless the stored one is already there or ahead; True (the
        signature of :meth:`LeaseManager.write`, which may refuse)."""
        lock = self._locks.setdefault(shard_id, asyncio.Lock())
        async with lock:
            for _ in range(5):
                current = self._rows.get(shard_id)
                if current is not None and (
                    current.value == value
                    or checkpoint_order(value) < checkpoint_order(current.value)
                ):
                    return True
                # Child ids only when there are some (at SHARD_END): stores written against
                # the first version of the protocol do not take them.
                extra: dict[str, Any] = {"child_shard_ids": children} if children else {}
                try:
                    self._rows[shard_id] = await self.store.put(
                        self.application,
                        self.stream,
                        shard_id,
                        value,
                        expected=current,
                        parent_shard_ids=parents,
                        **extra,
                    )
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

