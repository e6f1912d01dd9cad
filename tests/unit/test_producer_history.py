"""The bounded attempt history: the first and the last attempts kept, the ones between counted,
and what a caller sees of them in a result."""

from __future__ import annotations

import sys

from kinesis_core.producer.result import (
    KEEP_FIRST,
    KEEP_LAST,
    Attempt,
    BatchResult,
    BatchSink,
    ElidedAttempts,
    History,
    RecordResult,
    add_attempt,
    attempt_count,
    last_failure,
    split_history,
)


def attempt(i: int, code: str | None = "InternalFailure") -> Attempt:
    return Attempt(float(i), i + 0.5, code is None, code, None if code is None else f"#{i}")


def history_of(n: int, codes: list[str] | None = None) -> History:
    history: History = ()
    for i in range(n):
        history = add_attempt(history, attempt(i, codes[i] if codes else "InternalFailure"))
    return history


def test_a_short_history_keeps_every_attempt() -> None:
    history = history_of(KEEP_FIRST + KEEP_LAST)
    assert history == tuple(attempt(i) for i in range(6))
    assert split_history(history) == (history, None)
    assert attempt_count(history) == 6


def test_a_long_history_keeps_the_first_and_last_attempts_and_counts_the_rest() -> None:
    codes = ["InternalFailure"] * 3 + ["ServiceUnavailable"] * 90 + ["Internal"] * 6 + [None]
    history = history_of(100, codes)
    assert len(history) == KEEP_FIRST + 1 + KEEP_LAST
    kept, elided = split_history(history)
    assert kept == (
        *(attempt(i, codes[i]) for i in range(3)),
        *(attempt(i, codes[i]) for i in range(97, 100)),
    )
    assert elided == ElidedAttempts(94, 3.0, 96.5, (("ServiceUnavailable", 90), ("Internal", 4)))
    assert attempt_count(history) == 100
    assert str(elided) == "94 more attempts over 93.5 s: 90 x ServiceUnavailable, 4 x Internal"
    assert last_failure(history) == attempt(98, "Internal")


def test_the_history_grows_by_at_most_one_entry_per_attempt_and_never_past_seven() -> None:
    history: History = ()
    for i in range(1000):
        history = add_attempt(history, attempt(i))
        assert len(history) == min(i + 1, KEEP_FIRST + 1 + KEEP_LAST)
        assert attempt_count(history) == i + 1
        assert history[-1] == attempt(i)


def test_a_ten_minute_outage_costs_a_bounded_history() -> None:
    """Retried every 2.5 s on average for 10 minutes: 240 attempts, the size of seven."""
    long = history_of(240)
    short = history_of(7)
    assert sys.getsizeof(long) == sys.getsizeof(short)
    (elided,) = (a for a in long if isinstance(a, ElidedAttempts))
    assert elided.count == 240 - KEEP_FIRST - KEEP_LAST


def test_results_show_the_kept_attempts_and_the_elided_count() -> None:
    history = history_of(20)
    result = RecordResult.of(False, None, None, None, history, "Expired", "ttl")
    assert len(result.attempts) == KEEP_FIRST + KEEP_LAST
    assert all(isinstance(a, Attempt) for a in result.attempts)
    assert result.elided is not None
    assert result.elided.count == 14
    assert result.attempt_count == 20
    short = RecordResult.of(True, "s", 1, 0, history_of(2))
    assert (short.elided, short.attempt_count) == (None, 2)


def test_a_batch_result_splits_histories_too() -> None:
    sink = BatchSink(2)
    sink.succeeded(0, "s", 5, 0, history_of(30))
    sink.failed(1, "Expired", "ttl", history_of(3))
    batch = sink.result()
    assert isinstance(batch, BatchResult)
    assert batch[0].attempt_count == 30
    assert batch[0].elided is not None
    assert len(batch[0].attempts) == 6
    assert batch[1].elided is None
    assert batch.failures[0][1].attempt_count == 3
