"""The consumer's periodic rounds: a failed round is logged and the next one comes; an error
no round fixes ends them and is handed on."""

from __future__ import annotations

import asyncio
import logging

import pytest

from kinesis_core.consumer.rounds import rounds


class Gone(Exception):
    pass


def test_a_failed_round_is_logged_and_an_error_no_round_fixes_ends_them(
    caplog: pytest.LogCaptureFixture,
) -> None:
    outcomes: list[BaseException | None] = [None, OSError("flaky"), None, Gone("table gone")]
    done: list[int] = []
    failed: list[BaseException] = []

    async def wait() -> None:
        await asyncio.sleep(0)

    async def work() -> None:
        outcome = outcomes[len(done)]
        done.append(len(done))
        if outcome is not None:
            raise outcome

    async def main() -> None:
        await rounds(
            wait,
            work,
            "the work",
            fatal=lambda exc: exc if isinstance(exc, Gone) else None,
            fail=failed.append,
        )

    with caplog.at_level(logging.WARNING, logger="kinesis_core.consumer.rounds"):
        asyncio.run(main())
    assert done == [0, 1, 2, 3]  # the round after the failed one came
    assert [type(e) for e in failed] == [Gone]
    assert [r.getMessage() for r in caplog.records] == [
        "the work failed; trying again at the next round"
    ]
