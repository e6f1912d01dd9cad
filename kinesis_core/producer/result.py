"""What a caller gets back: one terminal result per record, with every attempt it took.

``put`` resolves to a :class:`RecordResult`. ``put_many`` resolves to one :class:`BatchResult`
for the whole batch: it keeps one entry per run of records written together (an aggregate's
share of the batch) and the failures, numbers the records only when one is asked for, and
makes a :class:`RecordResult` only then.

The sinks at the bottom are how the pipeline reports outcomes: it calls ``succeeded_run`` once
per run of a batch's records in a Kinesis record (``succeeded`` for one record) and ``failed``
once per record index, and a :class:`BatchSink` says when its last record is done. An outcome
for a record that has one already is ignored, so the clean-up after a crash can fail
"everything unfinished" without ever giving a record two results. Everything here is a value:
resolving the caller's future is the driver's job.
"""

from __future__ import annotations

from array import array
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import chain, count as counting, repeat
from operator import sub
from typing import Any, NamedTuple, Protocol, cast

from kinesis_core.aws.classify import INTERNAL, RECORD_COUNT_MISMATCH
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
:func:`kinesis_core.aws.classify.classify` decides which codes count as throttling."""

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
    """One user record for ``put_many``; plain ``(data, partition_key[, ehk[, record_id]])``
    tuples work too. ``record_id`` needs ``ProducerConfig(record_ids=True)``."""

    data: bytes
    partition_key: str
    explicit_hash_key: str | int | None = None
    record_id: str | None = None


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


class Runs:
    """Records that succeeded together, run after run: each run's indexes in the batch, the
    sub-sequence number of its first record (the others' follow on), its shard, sequence
    number and attempts.

    Kept in columns: the indexes of every run in one array of machine ints, the rest one
    entry per run in arrays and lists, so that a run adds no object (a tuple or a list per
    run would be tracked by the garbage collector and walked by every full collection while
    the result lives: at 1,024 shards, a batch's records come back in runs of a few).
    """

    __slots__ = ("ends", "firsts", "histories", "indexes", "sequence_numbers", "shard_ids")

    def __init__(self) -> None:
        self.indexes: array[int] = array("q")
        self.ends: array[int] = array("q")
        """Where each run's indexes end in ``indexes``."""
        self.firsts: array[int] = array("q")
        self.shard_ids: list[str] = []
        self.sequence_numbers: list[str] = []
        self.histories: list[History] = []

    def add(
        self,
        indexes: Iterable[int],
        first_sub: int,
        shard_id: str,
        sequence_number: str,
        attempts: History,
    ) -> None:
        self.indexes.extend(indexes)
        self.ends.append(len(self.indexes))
        self.firsts.append(first_sub)
        self.shard_ids.append(shard_id)
        self.sequence_numbers.append(sequence_number)
        self.histories.append(attempts)

    def __iter__(self) -> Iterator[tuple[array[int], int, str, str, History]]:
        """(indexes, first sub-sequence number, shard, sequence number, attempts) of each run."""
        indexes = self.indexes
        start = 0
        for end, first, shard_id, sequence_number, history in zip(
            self.ends,
            self.firsts,
            self.shard_ids,
            self.sequence_numbers,
            self.histories,
            strict=True,
        ):
            yield indexes[start:end], first, shard_id, sequence_number, history
            start = end


class BatchResult:
    """Outcome of every record of one ``put_many`` call, by index.

    ``failures`` says which records failed and why; ``shard_ids``, ``sequence_numbers`` and
    ``sub_sequence_numbers`` say where each record that succeeded was written. It keeps one
    entry per run of records written together (an aggregate's share of the batch) and numbers
    the records only when one of these, or a record's result, is first asked for: the counts,
    ``ok`` and ``failures`` need no numbering.
    """

    __slots__ = ("_count", "_failures", "_numbered", "_runs")

    def __init__(self, count: int, runs: Runs, failures: dict[int, RecordResult]) -> None:
        self._count = count
        self._runs = runs
        """Every index at most once, over the runs and ``failures`` together."""
        self._failures = failures
        self._numbered: (
            tuple[list[str | None], list[str | None], list[int | None], list[History]] | None
        ) = None

    def _columns(
        self,
    ) -> tuple[list[str | None], list[str | None], list[int | None], list[History]]:
        """Shard, sequence number, sub-sequence number and attempts by index (None and ()
        for a failed record), made on first use."""
        if self._numbered is None:
            n = self._count
            shard_ids: list[str | None] = [None] * n
            sequence_numbers: list[str | None] = [None] * n
            subs: list[int | None] = [None] * n
            attempts: list[History] = [()] * n
            for indexes, first_sub, shard_id, sequence_number, history in self._runs:
                # ``any`` drives the ``map``s in C; ``__setitem__`` returns None throughout.
                any(map(shard_ids.__setitem__, indexes, repeat(shard_id)))
                any(map(sequence_numbers.__setitem__, indexes, repeat(sequence_number)))
                any(map(subs.__setitem__, indexes, counting(first_sub)))
                any(map(attempts.__setitem__, indexes, repeat(history)))
            self._numbered = (shard_ids, sequence_numbers, subs, attempts)
        return self._numbered

    def carriers(self) -> Iterator[tuple[str, str, int]]:
        """(shard, sequence number, how many of the batch's records it carries) of each
        Kinesis record the batch was written in, without numbering the records. A Kinesis
        record may come more than once (an aggregate that took two runs of the batch)."""
        runs = self._runs
        ends = runs.ends
        sizes = map(sub, ends, chain((0,), ends))
        return zip(runs.shard_ids, runs.sequence_numbers, sizes, strict=True)

    @property
    def shard_ids(self) -> list[str | None]:
        """The shard of each record by index (None for a failed record)."""
        return self._columns()[0]

    @property
    def sequence_numbers(self) -> list[str | None]:
        """The sequence number of the Kinesis record that carries each record, by index."""
        return self._columns()[1]

    @property
    def sub_sequence_numbers(self) -> list[int | None]:
        """Each record's index inside its aggregate (0 for a plain record), by index."""
        return self._columns()[2]

    def __len__(self) -> int:
        return self._count

    def __getitem__(self, index: int) -> RecordResult:
        if index < 0:
            index += self._count
        if not 0 <= index < self._count:
            raise IndexError(f"record index {index} out of range for {self._count} records")
        failed = self._failures.get(index)
        if failed is not None:
            return failed
        shard_ids, sequence_numbers, subs, attempts = self._columns()
        return RecordResult.of(
            True, shard_ids[index], sequence_numbers[index], subs[index], attempts[index]
        )

    def __iter__(self) -> Iterator[RecordResult]:
        return (self[i] for i in range(self._count))

    @property
    def ok(self) -> bool:
        """True when every record of the batch was written."""
        return not self._failures

    @property
    def failed_count(self) -> int:
        return len(self._failures)

    @property
    def succeeded_count(self) -> int:
        return self._count - len(self._failures)

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
    """Sink of ``count`` records: keeps one entry per run of records that succeeded together
    and a dict of the failed ones (the :class:`BatchResult` numbers them when asked) and, once
    its last record is finished, puts itself on ``done`` (the pipeline's list of finished
    sinks) for ``result``. The first outcome of a record stands.

    It holds no callback: the driver resolves ``future``, which the pipeline never touches
    (an asyncio future for :class:`Producer` callers, a ``concurrent.futures`` one for
    :class:`BlockingProducer` callers), with ``result()`` after the pipeline's event is over.
    Records refer to their sink by ``key`` (an int) rather than by reference: a tuple of ints,
    strings and bytes is not tracked by the garbage collector, which then does not walk the
    hundreds of thousands of records a busy producer holds.
    """

    __slots__ = (
        "_marks",
        "count",
        "done",
        "epoch",
        "failures",
        "future",
        "key",
        "remaining",
        "runs",
        "single",
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
        self.count = count
        self.runs = Runs()
        self.failures: dict[int, RecordResult] = {}
        self.remaining = count
        """Records without an outcome."""
        self._marks: bytearray | None = None
        """1 at the index of every record with an outcome, from the first failure on (see
        ``succeeded_run``)."""
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
        self.succeeded_run([index], sub_sequence_number, shard_id, sequence_number, attempts)

    def succeeded_run(
        self,
        indexes: list[int],
        first_sub: int,
        shard_id: str,
        sequence_number: str,
        attempts: History,
    ) -> None:
        """One entry for the run, whatever its length. A record succeeds once (the pipeline
        answers each Kinesis record once, and a record is in one Kinesis record at a time), so
        only a failure can come before a success for the same record: the clean-up after a
        crash fails every record of the requests in flight, some of which may have succeeded.
        Until a record fails, a run is taken as it is; from then on (``_marks``), the records
        of a run that have an outcome already are left out of it."""
        if not self.remaining:
            return  # every record has its outcome: the first stands
        marks = self._marks
        if marks is not None:
            # ``any`` drives the ``map``s in C (``__setitem__`` returns None throughout).
            if any(map(marks.__getitem__, indexes)):
                for sub, index in enumerate(indexes, first_sub):
                    if not marks[index]:
                        self.succeeded_run([index], sub, shard_id, sequence_number, attempts)
                return
            any(map(marks.__setitem__, indexes, repeat(1)))
        self.runs.add(indexes, first_sub, shard_id, sequence_number, attempts)
        self.remaining -= len(indexes)
        if not self.remaining:
            self._finish()

    def failed(self, index: int, code: str, message: str, attempts: History) -> None:
        marks = self._marks
        if marks is None:
            marks = self._marks = bytearray(self.count)
            any(map(marks.__setitem__, self.runs.indexes, repeat(1)))
        if marks[index]:
            return  # it has its outcome already: the first stands
        marks[index] = 1
        self.failures[index] = RecordResult.of(False, None, None, None, attempts, code, message)
        self.remaining -= 1
        if not self.remaining:
            self._finish()

    def result(self) -> BatchResult | RecordResult:
        """The outcome of every record (``single``: of the one record), by index."""
        result = BatchResult(self.count, self.runs, self.failures)
        return result[0] if self.single else result

    def _finish(self) -> None:
        if self.done is not None:
            self.done.append(self)
