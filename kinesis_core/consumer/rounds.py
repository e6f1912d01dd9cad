"""The Consumer's periodic work (discovery, checkpoint flushes, looks at other workers'
parents): a round after each wait. A failed round is logged and the next one comes at its
time, doing the whole work again: no call is retried here (the calls inside a round go through
the executor, under its retry policies). An error no round can fix ends the rounds."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

logger = logging.getLogger(__name__)


async def rounds(
    wait: Callable[[], Awaitable[object]],
    work: Callable[[], Awaitable[object]],
    what: str,
    *,
    fatal: Callable[[Exception], BaseException | None],
    fail: Callable[[BaseException], None],
) -> None:
    """``work`` after each ``wait``, until it raises an error that ``fatal`` turns into the
    error to stop with (then ``fail`` is told, and the rounds end); ``what`` names the work in
    the log line of a failed round."""
    while True:
        await wait()
        try:
            await work()
        except Exception as exc:
            error = fatal(exc)
            if error is not None:
                fail(error)
                return
            logger.warning("%s failed; trying again at the next round", what, exc_info=True)
