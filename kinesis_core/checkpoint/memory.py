"""A checkpoint store in a dict: for tests and for consumers that may replay from the start."""

from __future__ import annotations

from collections.abc import Sequence

from kinesis_core.checkpoint.base import Checkpoint, CheckpointValue, apply_put


class MemoryCheckpointStore:
    """Checkpoints that live as long as the object (shared by consumers in one process)."""

    def __init__(self) -> None:
        self._rows: dict[tuple[str, str, str], Checkpoint] = {}

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
    ) -> Checkpoint:
        key = (application, stream, shard_id)
        row = apply_put(self._rows.get(key), shard_id, value, expected, parent_shard_ids)
        self._rows[key] = row
        return row

    async def close(self) -> None:
        """Nothing to release; the rows stay readable."""

    async def __aenter__(self) -> MemoryCheckpointStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
