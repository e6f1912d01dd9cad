"""What a Spark Python worker keeps between tasks: the source's client and executor, the sink's
producer (an event-loop thread, a shard map, a connection pool), one per configuration.

Spark reuses a Python worker for task after task (``spark.python.worker.reuse``, on by
default), one task at a time; making these per task would cost a client, a listing and new
connections every micro-batch. A thing that broke is :func:`forget`-ten and made again by the
next task. After a fork the child starts empty (the parent's threads are not in it).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

_T = TypeVar("_T")

_lock = threading.Lock()
_kept: dict[Hashable, Any] = {}


def _forget_after_fork() -> None:
    global _lock
    _lock = threading.Lock()
    _kept.clear()


os.register_at_fork(after_in_child=_forget_after_fork)


def shared(key: Hashable, make: Callable[[], _T]) -> _T:
    """The process's thing for ``key``, made by ``make`` the first time."""
    with _lock:
        if key not in _kept:
            _kept[key] = make()
        value: _T = _kept[key]
        return value


def forget(key: Hashable) -> None:
    """Drop the thing for ``key`` (it broke); the next :func:`shared` makes a new one."""
    with _lock:
        _kept.pop(key, None)
