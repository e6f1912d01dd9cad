"""A stand-in for the producer's callers in its sans-I/O tests."""

from __future__ import annotations

from kinesis_core.producer.result import Attempt


class RecordingSink:
    """A RecordSink that keeps every outcome, and counts a second outcome for an index."""

    def __init__(self) -> None:
        self.ok: dict[int, tuple[str, str, int, tuple[Attempt, ...]]] = {}
        self.bad: dict[int, tuple[str, str, tuple[Attempt, ...]]] = {}
        self.duplicates = 0

    def succeeded(
        self, index: int, shard_id: str, seq: str, sub: int, attempts: tuple[Attempt, ...]
    ) -> None:
        self.duplicates += index in self.ok or index in self.bad
        self.ok[index] = (shard_id, seq, sub, attempts)

    def succeeded_run(
        self,
        indexes: list[int],
        first_sub: int,
        shard_id: str,
        seq: str,
        attempts: tuple[Attempt, ...],
    ) -> None:
        for sub, index in enumerate(indexes, first_sub):
            self.succeeded(index, shard_id, seq, sub, attempts)

    def failed(self, index: int, code: str, message: str, attempts: tuple[Attempt, ...]) -> None:
        self.duplicates += index in self.ok or index in self.bad
        self.bad[index] = (code, message, attempts)
