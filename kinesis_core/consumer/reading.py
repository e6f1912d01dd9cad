"""The drivers of a shard reader's machine: the asyncio loop of the core consumer (and the Faust
channel), and the synchronous step of engines such as Beam's DoFns.

Both do the same and nothing else: ask the machine for its next action, hand a call to the
shard's link to an executor (:mod:`kinesis_core.aws.executor`), classify an error through the one
error table, feed the outcome back, and pass on what the :class:`~.transport.Outcome` says
(records to deliver, a warning to log). :func:`run_shard_read` runs a machine until its shard
ends, handing each non-empty batch to the consumer (which may block: that is the
backpressure). :class:`SyncShardReader` takes one step at a time for a driver that
round-robins over shards, and can send a shard's next call ahead, on an executor's thread,
while the driver works; a fan-out link's "no event yet" stays with it (the machine never hears
of it).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor, Future
from typing import Any, NoReturn

from kinesis_core.aws.calls import Call, Wait
from kinesis_core.aws.classify import ErrorKind, error_details, error_message
from kinesis_core.aws.exceptions import error_kind
from kinesis_core.consumer.frontier import RecordBatch, ShardFrontier
from kinesis_core.consumer.links import PENDING, AsyncLink, SyncLink
from kinesis_core.consumer.transport import (
    NOTHING,
    Ack,
    Action,
    Ended,
    Failed,
    Outcome,
    ShardRead,
)
from kinesis_core.errors import KinesisConnectorError, KinesisServiceError
from kinesis_core.records import KinesisRecord
from kinesis_core.runtime.clock import SYSTEM_CLOCK, Clock, TimeSource, time_of

logger = logging.getLogger(__name__)


class ShardReadError(KinesisServiceError):
    """A shard's reader gave up (a :class:`~.transport.Failed` action)."""


def reader_failure(
    machine: ShardRead, failed: Failed, last: BaseException | None, where: str = ""
) -> KinesisConnectorError:
    """What to raise (``from last``, the last error the machine took) for a reader that gave
    up: the machine's own error, or a :class:`ShardReadError` with the reason and the last
    error's code and message."""
    if failed.error is not None:
        return failed.error
    code, status = error_details(last) if last is not None else (None, None)
    detail = ""
    if last is not None:
        detail = f"; last error: {code + ': ' if code else ''}{error_message(last)}"
    of = f" of {where}" if where else ""
    return ShardReadError(
        f"gave up reading {machine.shard_id}{of}: {failed.reason}{detail}",
        code=code,
        kind=machine.last_error or ErrorKind.FATAL,
        http_status=status,
    )


def _raise_failed(
    machine: ShardRead, failed: Failed, last: BaseException | None, where: str
) -> NoReturn:
    raise reader_failure(machine, failed, last, where) from last


def _wrap(exc: Exception, machine: ShardRead, call: Call, where: str) -> KinesisServiceError:
    """A service error no reader recovers from, as a :class:`KinesisServiceError` naming the
    call and the shard."""
    what = f"{type(call).__name__} on {machine.shard_id}" + (f" of {where}" if where else "")
    return KinesisServiceError.wrap(exc, what)


def _log_warning(outcome: Outcome) -> None:
    if outcome.warning is not None:
        logger.warning("%s", outcome.warning)


async def run_shard_read(
    machine: ShardRead,
    link: AsyncLink,
    frontier: ShardFrontier,
    emit: Callable[[RecordBatch], Awaitable[None]],
    *,
    clock: Clock = SYSTEM_CLOCK,
    where: str = "",
    admit: Callable[[list[KinesisRecord]], list[KinesisRecord]] | None = None,
) -> Ended:
    """Drive ``machine`` until its shard ends; every non-empty batch is registered in
    ``frontier`` and then handed to ``emit``; ``admit`` (deduplication) first takes out what
    must not be delivered. Errors no reader recovers from raise as
    :class:`KinesisServiceError` (``where`` names the stream in their messages); a machine that
    gives up raises :class:`ShardReadError`."""
    last: BaseException | None = None
    while True:
        action = machine.next_action(clock.now())
        if isinstance(action, Ended):
            return action
        if isinstance(action, Failed):
            _raise_failed(machine, action, last, "")
        if isinstance(action, Wait):
            await clock.sleep(max(action.until - clock.now(), 0.0))
            continue
        try:
            response = await link.call(action)
        except Exception as exc:
            kind = error_kind(exc)
            if kind is None:
                raise
            if not machine.handles(action, kind):
                raise _wrap(exc, machine, action, where) from exc
            last = exc
            machine.on_error(clock.now(), action, kind)
            continue
        batch = frontier.new_batch()
        outcome = machine.on_response(clock.now(), action, response, batch.record_ack)
        _log_warning(outcome)
        # The raw response (one dict per record) must not stay alive while emit blocks.
        del response
        records = outcome.records
        if records and admit is not None:
            records = admit(records)
        if records:
            frontier.add(batch, records, outcome.millis_behind_latest)
            try:
                await emit(batch)
            except BaseException:
                # Not handed over (cancelled while the queue was full): nobody can ack it.
                frontier.discard(batch)
                raise


class SyncShardReader:
    """One shard's machine and its link, stepped by a synchronous engine.

    :meth:`next_action` is the machine's, except after a fan-out link answered
    :data:`~kinesis_core.consumer.links.PENDING` (no event yet): then it waits
    ``pending_interval`` seconds. :meth:`step` executes a call and feeds the outcome back;
    errors no reader recovers from raise as :class:`KinesisServiceError` (``where`` names the
    stream in their messages), and :meth:`failure` is what to raise for a machine that gave
    up, with the last error it took.

    With ``ahead`` (an executor), :meth:`read_ahead` sends the machine's next call on it at
    once, while the engine does other work; until :meth:`step` takes its answer (or the error
    it raised), :meth:`next_action` returns that call, so the machine's decisions are made in
    the same order as without it. The machine only ever runs on the engine's thread.

    With ``earlier``, the reader's first calls may have been sent before it existed (by a
    machine started from the same position, making the same calls): ``earlier(call)`` gives
    the future of such a call's ``(sent, response)`` (None as its result: it was not sent
    after all), or None. :meth:`step` takes that answer instead of calling, and asks again
    until ``earlier`` has none: only the answers to the exact calls the machine makes are
    taken, so its decisions are the same as without them.
    """

    def __init__(
        self,
        machine: ShardRead,
        link: SyncLink,
        *,
        pending_interval: float = 0.05,
        clock: TimeSource = time.monotonic,
        where: str = "",
        ahead: Executor | None = None,
        earlier: Callable[[Call], Future[Any] | None] | None = None,
    ) -> None:
        self.machine = machine
        self.link = link
        self._pending_interval = pending_interval
        self._clock = time_of(clock)
        self._where = where
        self._pending_until = float("-inf")
        self._last: BaseException | None = None
        self._ahead = ahead
        self._earlier = earlier
        self._in_flight: tuple[Call, Future[Any]] | None = None
        self.sent = 0.0
        """When (``time.time()``) the call of the last :meth:`step` was sent: earlier than
        the step when it was read ahead."""

    @property
    def reading_ahead(self) -> bool:
        """A call sent by :meth:`read_ahead` waits for :meth:`step` to take its answer."""
        return self._in_flight is not None

    @property
    def in_flight(self) -> tuple[Call, Future[Any]] | None:
        """The call :meth:`read_ahead` sent and the future of its ``(sent, response)``, until
        :meth:`step` takes it: a driver may instead hand that answer to another reader of the
        same position (as that reader's ``earlier``)."""
        return self._in_flight

    def next_action(self, now: float) -> Action:
        if self._in_flight is not None:
            return self._in_flight[0]
        if now < self._pending_until:
            return Wait(self._pending_until)
        return self.machine.next_action(now)

    def read_ahead(self, now: float) -> bool:
        """Send the machine's next call now on the ``ahead`` executor, if it has a call due
        and none is in flight (or take its answer sent ``earlier``); True if one went. Its
        answer waits for :meth:`step`."""
        if self._ahead is None or self._in_flight is not None:
            return False
        action = self.next_action(now)
        if not isinstance(action, Call):
            return False  # Wait, Ended, Failed: the machine gives them again when asked
        future = self._early(action) or self._ahead.submit(self._send, action, time.time())
        self._in_flight = (action, future)
        return True

    def _send(self, call: Call, sent: float | None = None) -> tuple[float, Any]:
        """``(sent, response)``: ``sent`` (when the call was handed over, or now) first."""
        return time.time() if sent is None else sent, self.link.call(call)

    def _early(self, call: Call) -> Future[Any] | None:
        """The answer to ``call`` sent before this reader existed, if any; the first call
        without one ends the asking."""
        earlier = self._earlier
        if earlier is None:
            return None
        future = earlier(call)
        if future is None:
            self._earlier = None
        return future

    def step(self, call: Call, ack: Ack | None = None) -> Outcome:
        """Execute ``call`` (take its answer, if it was read ahead) and feed its response or
        error to the machine."""
        machine = self.machine
        in_flight, self._in_flight = self._in_flight, None
        if in_flight is not None and in_flight[0] is not call:
            raise ValueError(f"stepped {call!r} while {in_flight[0]!r} is in flight")
        try:
            future = self._early(call) if in_flight is None else in_flight[1]
            answer = None if future is None else future.result()
            self.sent, response = self._send(call) if answer is None else answer
        except Exception as exc:
            kind = error_kind(exc)
            if kind is None:
                raise
            if not machine.handles(call, kind):
                raise _wrap(exc, machine, call, self._where) from exc
            self._last = exc
            return machine.on_error(self._clock(), call, kind)
        if response is PENDING:
            self._pending_until = self._clock() + self._pending_interval
            return NOTHING
        outcome = machine.on_response(self._clock(), call, response, ack)
        _log_warning(outcome)
        return outcome

    def failure(self, failed: Failed) -> KinesisConnectorError:
        """What to raise for the machine's :class:`~.transport.Failed` action (with
        ``__cause__`` the last error the machine took)."""
        error = reader_failure(self.machine, failed, self._last, self._where)
        error.__cause__ = self._last
        return error

    def close(self) -> None:
        """Close the link; a call in flight is dropped (its answer was not consumed: the
        machine's position is where it was before the call)."""
        self._in_flight = None
        self.link.close()
