"""kinesis_core.aws.retry: what is retried (the error table), how long each wait is (the backoff
schedule, full or equal jitter), when an operation gives up, and the history it keeps."""

from __future__ import annotations

from typing import Any

import pytest

from kinesis_core.aws.backoff import Jitter
from kinesis_core.aws.classify import ErrorKind
from kinesis_core.aws.retry import NotYet, RetryPolicy, not_yet
from kinesis_core.errors import ConfigurationError


class Refused(Exception):
    """An error answer as botocore's ClientError carries it (duck-typed)."""

    def __init__(self, code: str) -> None:
        super().__init__(code)
        self.response: dict[str, Any] = {"Error": {"Code": code, "Message": f"{code} said no"}}


THROTTLED = Refused("ThrottlingException")


def delays(policy: RetryPolicy, failures: int, draw: float = 1.0) -> list[float | None]:
    retry = policy.begin(0.0, rng=lambda: draw)
    return [retry.failed(0.0, THROTTLED, ErrorKind.THROTTLED) for _ in range(failures)]


def test_waits_follow_the_backoff_ceiling_with_the_chosen_jitter() -> None:
    full = RetryPolicy(base=0.5, cap=2.0, attempts=None)
    assert delays(full, 4) == [0.5, 1.0, 2.0, 2.0]
    assert delays(full, 2, draw=0.0) == [0.0, 0.0]
    equal = RetryPolicy(base=0.5, cap=2.0, jitter=Jitter.EQUAL, attempts=None)
    assert delays(equal, 3, draw=0.0) == [0.25, 0.5, 1.0]


def test_it_gives_up_after_the_attempts_and_a_success_starts_the_count_again() -> None:
    policy = RetryPolicy(attempts=3)
    assert delays(policy, 3)[-1] is None  # the third attempt failed: no fourth
    retry = policy.begin(0.0, rng=lambda: 1.0)
    retry.failed(0.0, THROTTLED, ErrorKind.THROTTLED)
    retry.failed(0.0, THROTTLED, ErrorKind.THROTTLED)
    retry.succeeded()  # a page of a listing came back
    assert retry.failed(0.0, THROTTLED, ErrorKind.THROTTLED) == 0.2  # the schedule restarts


def test_the_deadline_cuts_the_last_wait_and_then_gives_up() -> None:
    retry = RetryPolicy(base=1.0, cap=8.0, attempts=None, deadline=5.0).begin(100.0, lambda: 1.0)
    assert retry.failed(100.0, THROTTLED, ErrorKind.THROTTLED) == 1.0
    assert retry.failed(104.5, THROTTLED, ErrorKind.THROTTLED) == pytest.approx(0.5)
    assert retry.failed(105.0, THROTTLED, ErrorKind.THROTTLED) is None
    assert retry.pause(106.0) is None


@pytest.mark.parametrize(
    "kind", [ErrorKind.AUTH, ErrorKind.INVALID, ErrorKind.NOT_FOUND, ErrorKind.FATAL, None]
)
def test_what_no_wait_fixes_is_not_retried(kind: ErrorKind | None) -> None:
    retry = RetryPolicy(attempts=None).begin(0.0)
    assert retry.failed(0.0, Refused("X"), kind) is None


def test_unknown_failures_are_retried_only_when_the_policy_says_what_they_are() -> None:
    bug = ValueError("the store's disk is full")
    assert RetryPolicy().begin(0.0).failed(0.0, bug, None) is None
    forever = RetryPolicy(attempts=None, unknown=ErrorKind.TRANSIENT).begin(0.0, lambda: 1.0)
    assert [forever.failed(0.0, bug, None) for _ in range(3)] == [0.2, 0.4, 0.8]


def test_a_function_of_the_failure_tells_which_unknown_failures_are_retried() -> None:
    policy = RetryPolicy(attempts=None, unknown=not_yet)
    retry = policy.begin(0.0, lambda: 1.0)
    assert retry.failed(0.0, NotYet("CREATING"), None) == 0.2
    assert retry.failed(0.0, ValueError("a bug"), None) is None
    assert retry.failed(0.0, NotYet("CREATING"), ErrorKind.AUTH) is None  # the table's kind first


def test_no_answer_at_all_gives_up_after_its_own_count() -> None:
    retry = RetryPolicy(attempts=None, unreachable_attempts=2).begin(0.0)
    cut = ConnectionRefusedError("nothing listens")
    assert retry.failed(0.0, THROTTLED, ErrorKind.THROTTLED) is not None
    assert retry.failed(0.0, cut, ErrorKind.TRANSIENT, unreachable=True) is not None
    assert retry.failed(0.0, cut, ErrorKind.TRANSIENT, unreachable=True) is None


def test_give_up_ends_the_retries_whatever_the_kind_and_counts_every_failure() -> None:
    asked: list[tuple[str, int]] = []  # (the failure, the attempts so far)

    def give_up(error: BaseException, attempts: int) -> bool:
        asked.append((str(error), attempts))
        return str(error) == "ResourceNotFoundException" or attempts >= 3

    retry = RetryPolicy(attempts=None, give_up=give_up).begin(0.0)
    assert retry.failed(0.0, THROTTLED, ErrorKind.THROTTLED) is not None
    retry.succeeded()  # the count of give_up is the run's, not the streak's
    assert retry.failed(0.0, THROTTLED, ErrorKind.THROTTLED) is not None
    assert retry.failed(0.0, THROTTLED, ErrorKind.THROTTLED) is None
    assert [attempts for _, attempts in asked] == [1, 2, 3]
    fresh = RetryPolicy(attempts=None, give_up=give_up).begin(0.0)
    assert fresh.failed(0.0, Refused("ResourceNotFoundException"), ErrorKind.THROTTLED) is None


def test_the_history_keeps_the_first_and_the_last_attempts_and_counts_the_codes() -> None:
    retry = RetryPolicy(attempts=None).begin(10.0)
    for i in range(9):
        retry.failed(10.0 + i, THROTTLED, ErrorKind.THROTTLED)
    retry.failed(20.0, Refused("InternalFailure"), ErrorKind.TRANSIENT)
    kept = retry.attempts
    assert [a.number for a in kept] == [1, 6, 7, 8, 9, 10]
    assert kept[-1].code == "InternalFailure"
    assert kept[-1].at == 10.0
    assert retry.history() == (
        "10 failed attempts over 10.0 s (ThrottlingException x9, InternalFailure); "
        "the last: InternalFailure said no"
    )


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"base": 0}, "base"),
        ({"base": 2.0, "cap": 1.0}, "base"),
        ({"attempts": 0}, "attempts"),
        ({"attempts": True}, "attempts"),
        ({"unreachable_attempts": 0}, "unreachable_attempts"),
        ({"deadline": -1}, "deadline"),
    ],
)
def test_a_bad_policy_names_the_field(kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        RetryPolicy(**kwargs)
    assert info.value.field == field
