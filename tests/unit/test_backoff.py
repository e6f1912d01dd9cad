"""kinesis_core.aws.backoff: the full-jitter schedule, per key, reset by a success."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, strategies as st

from kinesis_core.aws.backoff import Backoff, BackoffTracker, ceiling
from kinesis_core.errors import ConfigurationError


def test_the_ceiling_doubles_from_base_up_to_the_cap() -> None:
    assert [ceiling(0.05, 5.0, n) for n in range(9)] == [
        0.0,
        0.05,
        0.1,
        0.2,
        0.4,
        0.8,
        1.6,
        3.2,
        5.0,
    ]
    assert ceiling(0.05, 5.0, 10_000) == 5.0  # no overflow however long the outage


def test_each_delay_is_the_random_fraction_of_its_ceiling() -> None:
    draws = iter([1.0, 0.5, 0.25, 0.0, 1.0])
    backoff = BackoffTracker(Backoff(0.1, 1.0), random=lambda: next(draws))
    delays = [backoff.failed("shard", now=100.0) for _ in range(5)]
    assert delays == pytest.approx([0.1, 0.1, 0.1, 0.0, 1.0])  # 1x0.1, .5x0.2, .25x0.4, 0, 1x1
    assert backoff.failures("shard") == 5
    assert backoff.until("shard") == pytest.approx(101.0)


def test_until_and_waiting_follow_the_last_failure() -> None:
    backoff = BackoffTracker(Backoff(1.0, 8.0), random=lambda: 0.5)
    assert backoff.until("k") == float("-inf")
    assert not backoff.waiting("k", 0.0)
    backoff.failed("k", now=10.0)  # 0.5 x 1
    assert backoff.waiting("k", 10.4)
    assert not backoff.waiting("k", 10.5)
    backoff.failed("k", now=11.0)  # 0.5 x 2
    assert backoff.until("k") == 12.0


def test_keys_back_off_independently_and_a_success_resets_one() -> None:
    backoff = BackoffTracker(Backoff(1.0, 8.0), random=lambda: 1.0)
    for _ in range(3):
        backoff.failed("a", now=0.0)
    backoff.failed("b", now=0.0)
    assert (backoff.failures("a"), backoff.failures("b")) == (3, 1)
    backoff.succeeded("a")
    assert backoff.failures("a") == 0
    assert not backoff.waiting("a", 0.0)
    assert backoff.failed("a", now=0.0) == 1.0  # the schedule starts over
    assert backoff.until("b") == 1.0


@given(
    base=st.floats(min_value=0.001, max_value=1.0),
    factor=st.floats(min_value=1.0, max_value=1000.0),
    failures=st.integers(min_value=1, max_value=200),
    seed=st.integers(min_value=0, max_value=2**32),
)
def test_full_jitter_stays_within_zero_and_the_ceiling(
    base: float, factor: float, failures: int, seed: int
) -> None:
    cap = base * factor
    backoff = BackoffTracker(Backoff(base, cap), random=random.Random(seed).random)
    for n in range(1, failures + 1):
        delay = backoff.failed("k", now=0.0)
        assert 0.0 <= delay <= ceiling(base, cap, n) <= cap


def test_the_mean_delay_is_half_the_ceiling() -> None:
    """Full jitter: clients that failed together spread out instead of coming back together."""
    rng = random.Random(3)
    delays = []
    for _ in range(2000):
        backoff = BackoffTracker(Backoff(0.05, 5.0), random=rng.random)
        for _ in range(7):
            delay = backoff.failed("k", now=0.0)
        delays.append(delay)
    mean = sum(delays) / len(delays)
    assert 1.45 < mean < 1.75  # half of the 7th ceiling, 3.2 s
    assert min(delays) < 0.1 < 3.1 < max(delays)


@pytest.mark.parametrize(("base", "cap"), [(0.0, 1.0), (-1.0, 1.0), (2.0, 1.0)])
def test_bad_settings_are_refused(base: float, cap: float) -> None:
    with pytest.raises(ConfigurationError, match="base"):
        Backoff(base, cap)
