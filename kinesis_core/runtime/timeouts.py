"""Deadlines on awaits that never swallow a cancellation.

``asyncio.wait_for`` on Python 3.10 and 3.11 returns the awaited result when its task is
cancelled in the same step as that result arrives (CPython gh-86296, fixed in 3.12): a shard
reader cancelled just as its answer came goes on reading, and whoever awaits its end (a
consumer closing) waits forever. :func:`within` is a context manager around the await itself,
so a cancellation reaches the awaited call as it is: ``asyncio.timeout`` on 3.11 and later, and
on 3.10 its backport ``async_timeout.timeout``. Expiry raises ``asyncio.TimeoutError`` on all.
"""

from __future__ import annotations

import sys

if sys.version_info >= (3, 11):
    from asyncio import timeout as within
else:  # pragma: no cover (the 3.10 leg of the version matrix)
    from async_timeout import timeout as within

__all__ = ["within"]
