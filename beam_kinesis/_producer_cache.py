"""One producer per worker process and configuration, shared by every DoFn instance and thread.

A producer is an event-loop thread, a shard map that polls ListShards and a connection pool:
too much to make per DoFn instance (a Dataflow worker runs dozens of threads) and too much to
leak. So producers are reference-counted: ``acquire`` in ``DoFn.setup``, ``release`` in
``teardown``; the last release closes the producer (flushed, client released). Beam's
``apache_beam.utils.shared`` keeps objects by weak reference and has no release hook, so a
producer dropped by it would never be closed and its background tasks would run on.

A producer that crashed or was closed under a DoFn is ``discard``-ed: the next ``acquire``
makes a fresh one. After a fork the child starts with an empty cache (the parent's producers
belong to the parent's event-loop thread).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Hashable

from kinesis_core.producer import BlockingProducer, MetricsSnapshot

logger = logging.getLogger(__name__)


class _Entry:
    __slots__ = ("lock", "producer", "refs", "reported")

    def __init__(self, producer: BlockingProducer) -> None:
        self.producer = producer
        self.refs = 0
        self.lock = threading.Lock()
        self.reported: MetricsSnapshot | None = None


_lock = threading.Lock()
_entries: dict[Hashable, _Entry] = {}


def _forget_after_fork() -> None:
    global _lock
    _lock = threading.Lock()
    _entries.clear()


os.register_at_fork(after_in_child=_forget_after_fork)


class ProducerHandle:
    """A DoFn's claim on a shared producer."""

    __slots__ = ("_entry", "_key", "_released")

    def __init__(self, key: Hashable, entry: _Entry) -> None:
        self._key = key
        self._entry = entry
        self._released = False

    @property
    def producer(self) -> BlockingProducer:
        return self._entry.producer

    def release(self) -> None:
        """Give the claim up; the last claim closes the producer (flushing what is left)."""
        if self._released:
            return
        self._released = True
        entry = self._entry
        with _lock:
            entry.refs -= 1
            last = entry.refs == 0
            if last and _entries.get(self._key) is entry:
                del _entries[self._key]
        if last:
            _close(entry.producer)

    def discard(self) -> None:
        """The producer is broken (crashed or closed): forget it so that the next acquire
        makes a new one, and close it. Other DoFns still holding it fail their bundle and
        re-acquire."""
        entry = self._entry
        with _lock:
            if _entries.get(self._key) is entry:
                del _entries[self._key]
        _close(entry.producer)

    def metrics_delta(self) -> MetricsSnapshot:
        """The producer's counters since the last delta any holder took, so that every
        request, retry and error is reported to Beam exactly once per process."""
        entry = self._entry
        with entry.lock:
            now = entry.producer.metrics()
            before, entry.reported = entry.reported, now
        return now if before is None else now.since(before)


def acquire(key: Hashable, factory: Callable[[], BlockingProducer]) -> ProducerHandle:
    """The process's producer for ``key``, made by ``factory`` if there is none (or only a
    closed one). The factory runs under the cache's lock: DoFns set up at once in several
    threads make one producer, not one each."""
    with _lock:
        entry = _entries.get(key)
        if entry is None or entry.producer.closed:
            entry = _entries[key] = _Entry(factory())
        entry.refs += 1
    return ProducerHandle(key, entry)


def live_producers() -> list[str]:
    """Stream names of the producers this process holds now (for tests and diagnostics)."""
    with _lock:
        return [entry.producer.stream_name for entry in _entries.values()]


def _close(producer: BlockingProducer) -> None:
    try:
        producer.close()
    except Exception:
        logger.exception("closing the Kinesis producer of %r failed", producer.stream_name)
