"""Wrappers that time the calls of a shard reader's link and of a checkpoint store and
tell a :class:`~kinesis_core.telemetry.recorder.ConsumerRecorder`. A consumer with telemetry
off never makes them: its links and store are used as they are."""

from __future__ import annotations

import time
from typing import Any

from kinesis_core.aws.classify import error_details
from kinesis_core.telemetry.names import SubscriptionOutcome, operation_name
from kinesis_core.telemetry.recorder import ConsumerRecorder


def error_type(exc: BaseException) -> str:
    """``error.type`` of an exception: the AWS error code, else the exception's class name."""
    return error_details(exc)[0] or type(exc).__name__


class _CallMeter:
    """Times one shard's calls, the same for both transports (polling, fan-out)."""

    __slots__ = ("opened", "recorder", "shard_id")

    def __init__(self, recorder: ConsumerRecorder, shard_id: str) -> None:
        self.recorder = recorder
        self.shard_id = shard_id
        self.opened = False

    def done(self, operation: str, started: float, exc: BaseException | None) -> None:
        error = None if exc is None else error_type(exc)
        recorder = self.recorder
        recorder.operation(self.shard_id, operation, time.perf_counter() - started, error)
        if operation == "SubscribeToShard":
            if error is not None:
                outcome = SubscriptionOutcome.REFUSED
            elif self.opened:
                outcome = SubscriptionOutcome.RENEWED
            else:
                outcome = SubscriptionOutcome.OPENED
                self.opened = True
            recorder.subscription(self.shard_id, outcome, error)


class MeteredTransport:
    """A shard reader's link to an executor (:class:`~kinesis_core.consumer.links.AsyncLink`) whose
    calls are timed."""

    def __init__(self, inner: Any, recorder: ConsumerRecorder, shard_id: str) -> None:
        self._inner = inner
        self._meter = _CallMeter(recorder, shard_id)

    async def call(self, call: Any) -> Any:
        operation = operation_name(call)
        if operation is None:
            return await self._inner.call(call)
        started = time.perf_counter()
        try:
            response = await self._inner.call(call)
        except Exception as exc:
            self._meter.done(operation, started, exc)
            raise
        self._meter.done(operation, started, None)
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()


class MeteredSyncTransport:
    """A synchronous link (:class:`~kinesis_core.consumer.links.SyncLink`, the Beam source's) whose
    calls are timed."""

    def __init__(self, inner: Any, recorder: ConsumerRecorder, shard_id: str) -> None:
        self._inner = inner
        self._meter = _CallMeter(recorder, shard_id)

    def call(self, call: Any) -> Any:
        operation = operation_name(call)
        if operation is None:
            return self._inner.call(call)
        started = time.perf_counter()
        try:
            response = self._inner.call(call)
        except Exception as exc:
            self._meter.done(operation, started, exc)
            raise
        self._meter.done(operation, started, None)
        return response

    def close(self) -> None:
        self._inner.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class MeteredStore:
    """A checkpoint store (and lease store) whose calls are timed; everything else is the
    wrapped store's."""

    def __init__(self, inner: Any, recorder: ConsumerRecorder) -> None:
        self.inner = inner
        self._recorder = recorder
        self._kind = type(inner).__name__

    async def _timed(self, operation: str, method: Any, *args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            result = await method(*args, **kwargs)
        except Exception as exc:
            seconds = time.perf_counter() - started
            self._recorder.store_call(self._kind, operation, seconds, error_type(exc))
            raise
        self._recorder.store_call(self._kind, operation, time.perf_counter() - started, None)
        return result

    async def get(self, *args: Any, **kwargs: Any) -> Any:
        return await self._timed("get", self.inner.get, *args, **kwargs)

    async def list(self, *args: Any, **kwargs: Any) -> Any:
        return await self._timed("list", self.inner.list, *args, **kwargs)

    async def put(self, *args: Any, **kwargs: Any) -> Any:
        return await self._timed("put", self.inner.put, *args, **kwargs)

    async def update_lease(self, *args: Any, **kwargs: Any) -> Any:
        return await self._timed("update_lease", self.inner.update_lease, *args, **kwargs)

    async def heartbeat(self, *args: Any, **kwargs: Any) -> Any:
        return await self._timed("heartbeat", self.inner.heartbeat, *args, **kwargs)

    async def workers(self, *args: Any, **kwargs: Any) -> Any:
        return await self._timed("workers", self.inner.workers, *args, **kwargs)

    async def forget_worker(self, *args: Any, **kwargs: Any) -> Any:
        return await self._timed("forget_worker", self.inner.forget_worker, *args, **kwargs)

    async def close(self) -> None:
        await self.inner.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)
