"""The steps of an executor's run (kinesis_core.aws.run), without an executor: pages in order,
a wait after a retried failure and the same request again, and a give-up that carries the
history of the attempts before it."""

from __future__ import annotations

from collections.abc import Generator, Mapping
from typing import Any

from kinesis_core.aws.classify import ErrorKind
from kinesis_core.aws.retry import RetryPolicy
from kinesis_core.aws.run import GIVE_UP, Done, Run, Send, Wait

POLICY = RetryPolicy(base=1.0, cap=4.0, attempts=3)


def _pages() -> Generator[Mapping[str, Any], Any, list[str]]:
    first = yield {"Page": 1}
    second = yield {"Page": 2, "After": first}
    return [first, second]


def _top() -> float:
    return 1.0


def test_a_calls_pages_are_sent_in_turn_and_the_answer_is_what_they_return() -> None:
    run = Run(_pages(), None)
    assert run.start() == Send({"Page": 1})
    assert run.answered("a") == Send({"Page": 2, "After": "a"})
    assert run.answered("b") == Done(["a", "b"])


def test_an_operation_is_one_request_without_arguments() -> None:
    run = Run(None, None)
    assert run.start() == Send({})
    assert run.answered(42) == Done(42)


def test_without_a_policy_a_failure_gives_up_at_once() -> None:
    run = Run(None, None)
    run.start()
    error = TimeoutError("slow")
    assert run.failed(0.0, error, ErrorKind.TRANSIENT, unreachable=False) is GIVE_UP
    assert not hasattr(error, "__notes__")


def test_a_retried_failure_waits_then_sends_the_same_page_again() -> None:
    run = Run(_pages(), POLICY.begin(0.0, _top))
    run.start()
    assert run.answered("a") == Send({"Page": 2, "After": "a"})
    assert run.failed(1.0, TimeoutError(), ErrorKind.THROTTLED, unreachable=False) == Wait(1.0)
    assert run.waited() == Send({"Page": 2, "After": "a"})
    assert run.answered("b") == Done(["a", "b"])


def test_a_give_up_after_retries_carries_their_history() -> None:
    run = Run(None, POLICY.begin(0.0, _top))
    run.start()
    steps = [
        run.failed(float(t), TimeoutError(f"try {t}"), ErrorKind.TRANSIENT, unreachable=False)
        for t in range(2)
    ]
    assert steps == [Wait(1.0), Wait(2.0)]
    error = TimeoutError("try 2")
    assert run.failed(2.0, error, ErrorKind.TRANSIENT, unreachable=False) is GIVE_UP
    assert error.__notes__ == [  # type: ignore[attr-defined]
        "retried: 3 failed attempts over 2.0 s (TimeoutError x3); the last: TimeoutError: try 2"
    ]


def test_a_kind_the_policy_does_not_retry_gives_up_without_history() -> None:
    run = Run(None, POLICY.begin(0.0, _top))
    run.start()
    error = PermissionError("denied")
    assert run.failed(0.0, error, ErrorKind.AUTH, unreachable=False) is GIVE_UP
    assert not hasattr(error, "__notes__")
