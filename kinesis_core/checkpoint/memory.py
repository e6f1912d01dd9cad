"""A checkpoint store in a dict: for tests and for consumers that may replay from the start."""

from __future__ import annotations

from collections.abc import Sequence

from kinesis_core.checkpoint.base import Checkpoint, CheckpointValue, apply_lease, apply_put


class MemoryCheckpointStore:
    """Checkpoints that live as long as the object (shared by consumers in one process, which
    may also share its rows as leases)."""

    def __init__(self) -> None:
        self._rows: dict[tuple[str, str, str], Checkpoint] = {}
        self._workers: dict[tuple[str, str], dict[str, int]] = {}

    async def get(self, application: str, stream: str, shard_id: str) -> Checkpoint | None:
        return self._rows.get((application, stream, shard_id))

    async def list(self, application: str, stream: str) -> list[Checkpoint]:
        return [
            row
            for (app, name, _), row in self._rows.items()
            if app == application and name == stream
        ]

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
        key = (application, stream, shard_id)
        row = apply_put(
            self._rows.get(key),
            shard_id,
            value,
            expected,
            parent_shard_ids,
            child_shard_ids,
            hash_range,
            stream_created_ms,
            dedup_window,
        )
        self._rows[key] = row
        return row

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
        key = (application, stream, shard_id)
        row = apply_lease(
            self._rows.get(key), shard_id, expected, owner, checkpoint_owner, throughput_kbps
        )
        self._rows[key] = row
        return row

    async def heartbeat(
        self, application: str, stream: str, worker_id: str, *, leaving: bool = False
    ) -> None:
        workers = self._workers.setdefault((application, stream), {})
        if leaving:
            workers.pop(worker_id, None)
        else:
            workers[worker_id] = workers.get(worker_id, 0) + 1

    async def workers(self, application: str, stream: str) -> dict[str, int]:
        return dict(self._workers.get((application, stream), {}))

    async def forget_worker(
        self, application: str, stream: str, worker_id: str, counter: int
    ) -> None:
        workers = self._workers.get((application, stream), {})
        if workers.get(worker_id) == counter:
            del workers[worker_id]

    async def close(self) -> None:
        """Nothing to release; the rows stay readable."""

    def __repr__(self) -> str:
        return "MemoryCheckpointStore()"

    async def __aenter__(self) -> MemoryCheckpointStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
