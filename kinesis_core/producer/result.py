"""What a caller gets back: one terminal result per record, with every attempt it took.

``put`` resolves to a :class:`RecordResult`. ``put_many`` resolves to one :class:`BatchResult`
for the whole batch: it keeps its outcomes in a few flat lists (no object per record) and makes
a :class:`RecordResult` only when one is asked for.

The sinks at the bottom are how the pipeline reports outcomes: it calls ``succeeded`` or
``failed`` once per record index, and a :class:`BatchSink` says when its last record is done.
A second outcome for the same index is ignored, so the clean-up after a crash can fail
"everything unfinished" without ever giving a record two results. Everything here is a value:
resolving the caller's future is the driver's job.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol, cast

from kinesis_core.classify import INTERNAL, RECORD_COUNT_MISMATCH
from kinesis_core.errors import KinesisConnectorError
from kinesis_core.records import Position

VALIDATION_ERROR = "ValidationError"
"""Error code of a record refused by ``put_many`` because its data or keys broke a limit."""
EXPIRED = "Expired"
"""Error code of a record still not written when its TTL ran out."""
WRONG_SHARD = "Wrong Shard"
"""Attempt code of a record that landed outside the shard its aggregate was predicted for."""
SHUTDOWN = "ShutdownTimeout"
"""Error code of a record still unfinished when ``close(timeout=...)`` gave up."""
PRODUCER_CLOSED = "ProducerClosed"
"""Error code of the records of a ``put_many`` batch not yet accepted when the producer closed."""
CANCELLED = "Cancelled"
"""Error code of the records of a ``put_many`` not yet accepted when its caller was cancelled."""
THROTTLED = "ProvisionedThroughputExceededException"
"""The error code of a throttled record (what ``fail_if_throttled`` fails records with);
:func:`kinesis_core.classify.classify` decides which codes count as throttling."""

__all__ = [
    "CANCELLED",
    "EXPIRED",
    "INTERNAL",
    "PRODUCER_CLOSED",
    "RECORD_COUNT_MISMATCH",
    "SHUTDOWN",
    "THROTTLED",
    "VALIDATION_ERROR",
    "WRONG_SHARD",
    "Attempt",
    "BatchResult",
    "BatchSink",
    "ElidedAttempts",
    "History",
    "ProducerClosedError",
    "ProducerCrashedError",
    "ProducerFailedError",
    "PutFailedError",
    "Record",
    "RecordResult",
    "RecordSink",
    "add_attempt",
    "attempt_count",
]


class ProducerClosedError(KinesisConnectorError, RuntimeError):
    """The producer is closing or closed; it accepts no more records."""


class ProducerCrashedError(KinesisConnectorError, RuntimeError):
    """A task of the producer failed; its outstanding records failed with code ``Internal``."""


class ProducerFailedError(ProducerClosedError):
    """The producer stopped after an error that no retry fixes (credentials or permissions):
    its outstanding records failed with that error's code, and it accepts no more."""

    def __init__(self, message: str, code: str) -> None:
        super().__init__(message)
        self.code = code


class Record(NamedTuple):
    """One user record for ``put_many``; plain ``(data, partition_key[, ehk])`` tuples work too."""

    data: bytes
    partition_key: str
    explicit_hash_key: str | int | None = None


@dataclass(frozen=True, slots=True)
class Attempt:
    """One trip of a record through a PutRecords call (or an expiry check)."""

    started_at: float
    """``time.monotonic()`` when the request started."""
    ended_at: float
    success: bool
    error_code: str | None = None
    error_message: str | None = None
    shard_id: str | None = None
    """Shard the record landed in, when Kinesis said so (also for a wrong-shard attempt)."""

    @property
    def duration(self) -> float:
        return self.ended_at - self.started_at


KEEP_FIRST = 3
KEEP_LAST = 3
"""A record's history keeps its first and its last attempts; the ones between are counted."""


@dataclass(frozen=True, slots=True)
class ElidedAttempts:
    """The attempts left out of a long history (between the first and the last ones kept):
    how many, over which time, and how many failed with each error code."""

    count: int
    first_started_at: float
    last_ended_at: float
    codes: tuple[tuple[str, int], ...]
    """(error code, attempts) pairs, most frequent first."""

    def __str__(self) -> str:
        codes = ", ".join(f"{n} x {code}" for code, n in self.codes)
        return (
            f"{self.count} more attempts over {self.last_ended_at - self.first_started_at:.1f} s"
            + (f": {codes}" if codes else "")
        )

    def plus(self, attempt: Attempt) -> ElidedAttempts:
        """These and one more."""
        codes = Counter(dict(self.codes))
        codes[attempt.error_code or "success"] += 1
        return ElidedAttempts(
            self.count + 1,
            min(self.first_started_at, attempt.started_at),
            max(self.last_ended_at, attempt.ended_at),
            tuple(codes.most_common()),
        )


History = tuple[Attempt | ElidedAttempts, ...]
"""A record's attempts as the pipeline keeps them: at most ``KEEP_FIRST`` attempts, then one
:class:`ElidedAttempts` once any were left out, then at most ``KEEP_LAST`` attempts. So a
record retried for ten minutes holds seven entries, not hundreds."""

_FULL = KEEP_FIRST + KEEP_LAST


def add_attempt(history: History, attempt: Attempt) -> History:
    """``history`` with ``attempt`` appended, the oldest of the last ones counted if full."""
    if len(history) < _FULL:
        return (*history, attempt)
    head = history[:KEEP_FIRST]
    middle = history[KEEP_FIRST]
    tail = history[KEEP_FIRST + 1 :] if isinstance(middle, ElidedAttempts) else history[KEEP_FIRST:]
    dropped = tail[0]
    assert isinstance(dropped, Attempt)
    if isinstance(middle, ElidedAttempts):
        elided = middle.plus(dropped)
    else:
        elided = ElidedAttempts(0, dropped.started_at, dropped.ended_at, ()).plus(dropped)
    return (*head, elided, *tail[1:], attempt)


def split_history(history: History) -> tuple[tuple[Attempt, ...], ElidedAttempts | None]:
    """The attempts kept, and what was left out between them (None if nothing was)."""
    if len(history) <= _FULL:  # nothing left out below that: every entry is an Attempt
        return cast("tuple[Attempt, ...]", history), None
    elided = history[KEEP_FIRST]
    assert isinstance(elided, ElidedAttempts)
    kept = history[:KEEP_FIRST] + history[KEEP_FIRST + 1 :]
    return cast("tuple[Attempt, ...]", kept), elided


def attempt_count(history: History) -> int:
    """How many attempts ``history`` stands for, the elided ones included."""
    if len(history) <= _FULL:
        return len(history)
    elided = history[KEEP_FIRST]
    assert isinstance(elided, ElidedAttempts)
    return len(history) - 1 + elided.count


def last_failure(history: History) -> Attempt | None:
    """The latest failed attempt of ``history`` (None if there is none)."""
    for attempt in reversed(history):
        if isinstance(attempt, Attempt) and not attempt.success:
            return attempt
    return None


@dataclass(frozen=True, slots=True)
class RecordResult:
    """Terminal outcome of one user record."""

    success: bool
    shard_id: str | None
    sequence_number: str | None
    """Sequence number of the Kinesis record that carries this user record: the decimal str
    the service sends, as a consumed record's (compare ``position``, never the strings)."""
    sub_sequence_number: int | None
    """Index of this user record inside its aggregate (0 for a plain record)."""
    attempts: tuple[Attempt, ...]
    """The first and the last attempts (all of them unless there were more than six)."""
    error_code: str | None = None
    error_message: str | None = None
    elided: ElidedAttempts | None = None
    """The attempts left out of ``attempts`` (between the first and the last ones), if any."""

    @classmethod
    def of(
        cls,
        success: bool,
        shard_id: str | None,
        sequence_number: str | None,
        sub_sequence_number: int | None,
        history: History,
        error_code: str | None = None,
        error_message: str | None = None,
    ) -> RecordResult:
        """A result from a history as the pipeline keeps it."""
        attempts, elided = split_history(history)
        return cls(
            success,
            shard_id,
            sequence_number,
            sub_sequence_number,
            attempts,
            error_code,
            error_message,
            elided,
        )

    @property
    def attempt_count(self) -> int:
        """Every attempt the record took, the elided ones included."""
        return len(self.attempts) + (self.elided.count if self.elided is not None else 0)

    @property
    def position(self) -> Position | None:
        """(sequence, sub-sequence), the position a consumer checkpoints; None on failure."""
        if self.sequence_number is None or self.sub_sequence_number is None:
            return None
        return (int(self.sequence_number), self.sub_sequence_number)


class PutFailedError(KinesisConnectorError):
    """Raised by ``raise_for_failures``: some records of a batch (or one record) failed."""

    def __init__(self, failures: list[tuple[int, RecordResult]]) -> None:
        first = ", ".join(f"#{i}: {r.error_code}: {r.error_message}" for i, r in failures[:3])
        more = f" (and {len(failures) - 3} more)" if len(failures) > 3 else ""
        super().__init__(f"{len(failures)} record(s) failed: {first}{more}")
        self.failures = failures


class BatchResult:
    """Outcome of every record of one ``put_many`` call, by index.

    ``failures`` says which records failed and why; ``shard_ids``, ``sequence_numbers`` and
    ``sub_sequence_numbers`` say where each record that succeeded was written.
    """

    __slots__ = ("_attempts", "_failures", "sequence_numbers", "shard_ids", "sub_sequence_numbers")

    def __init__(
        self,
        shard_ids: list[str | None],
        sequence_numbers: list[str | None],
        sub_sequence_numbers: list[int | None],
        attempts: list[History],
        failures: dict[int, RecordResult],
    ) -> None:
        self.shard_ids = shard_ids
        self.sequence_numbers = sequence_numbers
        self.sub_sequence_numbers = sub_sequence_numbers
        self._attempts = attempts
        self._failures = failures

    def __len__(self) -> int:
        return len(self.shard_ids)

    def __getitem__(self, index: int) -> RecordResult:
        if index < 0:
            index += len(self.shard_ids)
        failed = self._failures.get(index)
        if failed is not None:
            return failed
        return RecordResult.of(
            True,
            self.shard_ids[index],
            self.sequence_numbers[index],
            self.sub_sequence_numbers[index],
            self._attempts[index],
        )

    def __iter__(self) -> Iterator[RecordResult]:
        return (self[i] for i in range(len(self.shard_ids)))

    @property
    def ok(self) -> bool:
        """True when every record of the batch was written."""
        return not self._failures

    @property
    def failed_count(self) -> int:
        return len(self._failures)

    @property
    def succeeded_count(self) -> int:
        return len(self.shard_ids) - len(self._failures)

    @property
    def failures(self) -> list[tuple[int, RecordResult]]:
        """(index in the batch, result) of every failed record, in index order."""
        return sorted(self._failures.items())

    def raise_for_failures(self) -> None:
        """Raise :class:`PutFailedError` if any record failed."""
        if self._failures:
            raise PutFailedError(self.failures)

    def __repr__(self) -> str:
        return f"BatchResult(records={len(self)}, failed={self.failed_count})"


class RecordSink(Protocol):
    """Where the pipeline reports the terminal outcome of a record, by its index."""

    def succeeded(
        self,
        index: int,
        shard_id: str,
        sequence_number: str,
        sub_sequence_number: int,
        attempts: History,
    ) -> None: ...

    def succeeded_run(
        self,
        indexes: list[int],
        first_sub: int,
        shard_id: str,
        sequence_number: str,
        attempts: History,
    ) -> None:
        """``succeeded`` for a run of records of one aggregate (sub-sequence numbers
        ``first_sub``, ``first_sub + 1``, ...) with the same attempts: one call per run
        instead of one per record."""

    def failed(self, index: int, code: str, message: str, attempts: History) -> None: ...


class BatchSink:
    """Sink of ``count`` >= 1 records: fills flat lists and, once its last record is finished,
    puts itself on ``done`` (the pipeline's list of finished sinks) for ``result``. The first
    outcome of a record stands.

    It holds no callback: the driver resolves ``future``, which the pipeline never touches
    (an asyncio future for :class:`Producer` callers, a ``concurrent.futures`` one for
    :class:`BlockingProducer` callers), with ``result()`` after the pipeline's event is over.
    Records refer to their sink by ``key`` (an int) rather than by reference: a tuple of ints,
    strings and bytes is not tracked by the garbage collector, which then does not walk the
    hundreds of thousands of records a busy producer holds.
    """

    __slots__ = (
        "attempts",
        "done",
        "epoch",
        "failures",
        "future",
        "key",
        "remaining",
        "sequence_numbers",
        "shard_ids",
        "single",
        "sub_sequence_numbers",
    )

    def __init__(
        self,
        count: int,
        done: list[BatchSink] | None = None,
        *,
        key: int = -1,
        future: Any = None,
        single: bool = False,
    ) -> None:
        self.shard_ids: list[str | None] = [None] * count
        self.sequence_numbers: list[str | None] = [None] * count
        self.sub_sequence_numbers: list[int | None] = [None] * count
        self.attempts: list[History] = [()] * count
        self.failures: dict[int, RecordResult] = {}
        self.remaining = count
        self.done = done
        """Where it goes when its last record is finished; None until the pipeline took it
        (outcomes known before, at validation, are the caller's to see)."""
        self.key = key
        self.epoch = -1
        """The flush epoch it was accepted in (-1: not yet)."""
        self.future = future
        self.single = single

    def succeeded(
        self,
        index: int,
        shard_id: str,
        sequence_number: str,
        sub_sequence_number: int,
        attempts: History,
    ) -> None:
        if self.shard_ids[index] is not None or index in self.failures:
            return  # already finished: the first outcome stands
        self.shard_ids[index] = shard_id
        self.sequence_numbers[index] = sequence_number
        self.sub_sequence_numbers[index] = sub_sequence_number
        self.attempts[index] = attempts
        self.remaining -= 1
        if not self.remaining:
            self._finish()

    def succeeded_run(
        self,
        indexes: list[int],
        first_sub: int,
        shard_id: str,
        sequence_number: str,
        attempts: History,
    ) -> None:
        shard_ids = self.shard_ids
        sequence_numbers = self.sequence_numbers
        sub_sequence_numbers = self.sub_sequence_numbers
        all_attempts = self.attempts
        failures = self.failures
        done = 0
        for sub, index in enumerate(indexes, first_sub):
            if shard_ids[index] is not None or index in failures:
                continue  # already finished: the first outcome stands
            shard_ids[index] = shard_id
            sequence_numbers[index] = sequence_number
            sub_sequence_numbers[index] = sub
            all_attempts[index] = attempts
            done += 1
        if done:
            self.remaining -= done
            if not self.remaining:
                self._finish()

    def failed(self, index: int, code: str, message: str, attempts: History) -> None:
        if self.shard_ids[index] is not None or index in self.failures:
            return
        self.failures[index] = RecordResult.of(False, None, None, None, attempts, code, message)
        self.attempts[index] = attempts
        self.remaining -= 1
        if not self.remaining:
            self._finish()

    def result(self) -> BatchResult | RecordResult:
        """The outcome of every record (``single``: of the one record), by index."""
        result = BatchResult(
            self.shard_ids,
            self.sequence_numbers,
            self.sub_sequence_numbers,
            self.attempts,
            self.failures,
        )
        return result[0] if self.single else result

    def _finish(self) -> None:
        if self.done is not None:
            self.done.append(self)
