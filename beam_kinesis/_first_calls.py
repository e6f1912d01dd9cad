"""The first calls of new restrictions, sent ahead by the process that splits them.

A restriction's first ``process`` call has nothing to output until its first GetShardIterator
and GetRecords answer, and a DoFn sees its restrictions one at a time. But the runner splits
(and sizes) the restrictions before it processes them, so ``split`` hands the new
restrictions to :data:`FIRST_CALLS`: one thread of this process sends each restriction's
first GetShardIterator and GetRecords, one restriction after the other, while the runner
processes the restrictions before it. A reader that a ``process`` call opens later in this
process takes those answers (:meth:`FirstCalls.take`, given to the core's
:class:`~kinesis_core.consumer.reading.SyncShardReader` as ``earlier``) if its machine makes
exactly the same calls: the same shard, the same starting position, the iterator of the
answer taken, the same limit. Nothing is claimed until the read loop outputs an answer in its
turn, so an answer that is never taken (the restriction went to another process, was split,
or checkpointed before its first call) is simply dropped: the restriction reads from its
cursor as it would have.

The cost: answers wait in memory (at most :data:`MAX_PENDING_BYTES` of record data, the
next restriction's calls wait for room), and an answer dropped unused was read for nothing
(:data:`EXPIRY` after it came, or as soon as its restriction's reader asks for another call):
on AWS its bytes count against the shard's 2 MiB/s of reads and its calls against the 5
GetRecords per second, as the reader's own calls do. The drops are counted in the Beam metric
``aws.kinesis.beam.read.early_calls_wasted``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Hashable, Iterable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from beam_kinesis._read_spec import ReadSpec
from beam_kinesis._shard_readers import ShardReaders, polling_machine
from beam_kinesis.plan import KinesisRestriction, ShardCursor
from kinesis_core.aws.calls import Call
from kinesis_core.aws.config import ClientConfig
from kinesis_core.aws.exceptions import error_kind
from kinesis_core.aws.executor import SyncExecutor
from kinesis_core.consumer.links import sync_link
from kinesis_core.consumer.polling import GetIterator, GetRecords, PollingRead
from kinesis_core.records import wire_records
from kinesis_core.stream import StreamRef
from kinesis_core.telemetry.metered import error_type
from kinesis_core.telemetry.names import operation_name
from kinesis_core.telemetry.recorder import NO_RECORDER, ConsumerRecorder

logger = logging.getLogger(__name__)

MAX_PENDING_BYTES = 64 * 2**20
"""Record data of the answers waiting to be taken, at most (a GetRecords answer is up to
10 MB on AWS)."""
EXPIRY = 60.0
"""Seconds an answer waits to be taken before it is dropped (a shard iterator is valid for
five minutes)."""


def _key(spec: ReadSpec, created_ms: int | None, shard_id: str, call: Call) -> Hashable | None:
    """What identifies ``call`` of ``shard_id``'s reader, in the stream created at
    ``created_ms``."""
    if isinstance(call, GetIterator):
        params = tuple(sorted(call.params.items()))
        return (spec.client_config, spec.stream, created_ms, shard_id, params)
    if isinstance(call, GetRecords):
        return (spec.client_config, call.iterator, call.limit)
    return None


@dataclass
class _Answer:
    key: Hashable
    future: Future[Any] = field(default_factory=Future)
    came: float = float("inf")
    """``time.monotonic()`` when the answer came (its expiry counts from there)."""
    nbytes: int = 0
    seconds: float = 0.0
    """How long the call took."""
    error: str | None = None
    """The ``error.type`` of the call's error, if it raised one."""


@dataclass
class _Task:
    spec: ReadSpec
    shard_id: str
    machine: PollingRead
    call: GetIterator
    key: Hashable
    queued: float


class FirstCalls:
    """The first calls sent ahead, and their answers until a reader takes them (one per
    process: :data:`FIRST_CALLS`)."""

    def __init__(self, max_bytes: int = MAX_PENDING_BYTES, expiry: float = EXPIRY) -> None:
        self._max_bytes = max_bytes
        self._expiry = expiry
        self._lock = threading.Condition()
        self._tasks: deque[_Task] = deque()
        self._queued: dict[Hashable, _Task] = {}
        self._answers: dict[Hashable, _Answer] = {}
        self._bytes = 0
        self._wasted = 0
        self._thread: threading.Thread | None = None
        self._readers: dict[ClientConfig, ShardReaders] = {}
        """Their clients, one per configuration, kept for the next restrictions (making a
        client costs about 50 ms of CPU)."""

    def send(self, spec: ReadSpec, restrictions: Iterable[KinesisRestriction]) -> None:
        """Send the first calls of the polled shards of ``restrictions`` ahead, in order."""
        if spec.fan_out is not None:
            return
        now = time.monotonic()
        tasks = []
        for restriction in restrictions:
            if restriction.done or restriction.records_left == 0:
                continue
            for cursor in restriction.cursors:
                if cursor.readable:
                    tasks.append(self._task(spec, restriction, cursor, now))
        with self._lock:
            for task in tasks:
                if task is None or task.key in self._queued or task.key in self._answers:
                    continue
                self._queued[task.key] = task
                self._tasks.append(task)
            if self._tasks and self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="kinesis-first-calls", daemon=True
                )
                self._thread.start()

    @staticmethod
    def _task(
        spec: ReadSpec,
        restriction: KinesisRestriction,
        cursor: ShardCursor,
        now: float,
    ) -> _Task | None:
        machine = polling_machine(spec, restriction, cursor)
        call = machine.next_action(now)
        if not isinstance(call, GetIterator):
            return None
        key = _key(spec, restriction.created_ms, cursor.shard_id, call)
        return _Task(spec, cursor.shard_id, machine, call, key, now)

    def take(
        self,
        spec: ReadSpec,
        created_ms: int | None,
        shard_id: str,
        call: Call,
        recorder: ConsumerRecorder = NO_RECORDER,
    ) -> Future[Any] | None:
        """The answer to ``call`` of ``shard_id``'s reader (of the stream created at
        ``created_ms``; a future of ``(sent, response)``,
        or of None if it was not sent after all), if it was sent ahead; a call still waiting
        to be sent is not sent. The call's time goes to ``recorder`` once it is answered."""
        key = _key(spec, created_ms, shard_id, call)
        if key is None:
            return None
        with self._lock:
            self._expire(time.monotonic())
            if self._queued.pop(key, None) is not None:
                return None
            answer = self._answers.pop(key, None)
            if answer is None:
                return None
            self._bytes -= answer.nbytes
            self._lock.notify_all()
        operation = operation_name(call)
        if recorder.enabled and operation is not None:

            def timed(future: Future[Any]) -> None:
                if future.exception() is not None or future.result() is not None:
                    recorder.operation(shard_id, operation, answer.seconds, answer.error)

            answer.future.add_done_callback(timed)
        return answer.future

    def wasted(self) -> int:
        """Answers dropped untaken since the last look."""
        with self._lock:
            self._expire(time.monotonic())
            wasted, self._wasted = self._wasted, 0
            return wasted

    def _expire(self, now: float) -> None:
        for key in [k for k, a in self._answers.items() if now - a.came > self._expiry]:
            answer = self._answers.pop(key)
            self._bytes -= answer.nbytes
            self._wasted += 1
            self._lock.notify_all()

    def _next(self) -> tuple[_Task, _Answer] | None:
        """The next task to send once there is room for its answers, and its first answer;
        None when there is none, and nothing waits to expire."""
        with self._lock:
            while True:
                now = time.monotonic()
                self._expire(now)
                while self._tasks and self._tasks[0].key not in self._queued:
                    self._tasks.popleft()  # taken by its reader before it was sent
                if self._tasks and now - self._tasks[0].queued > self._expiry:
                    self._queued.pop(self._tasks.popleft().key)
                    continue
                if self._tasks and self._bytes < self._max_bytes:
                    task = self._tasks.popleft()
                    del self._queued[task.key]
                    # From here a reader that asks waits for the answer.
                    self._answers[task.key] = answer = _Answer(task.key)
                    return task, answer
                if not self._tasks and not self._answers:
                    self._thread = None
                    return None
                waits = [a.came + self._expiry for a in self._answers.values()]
                if self._tasks:
                    waits.append(self._tasks[0].queued + self._expiry)
                self._lock.wait(max(min(waits) - now, 0.0) + 0.01)

    def _run(self) -> None:
        while (sending := self._next()) is not None:
            task, answer = sending
            try:
                config = task.spec.client_config
                readers = self._readers.get(config)
                if readers is None:
                    readers = self._readers[config] = ShardReaders(task.spec)
                self._send(task, answer, readers.executor)
            except Exception:
                logger.warning("sending a restriction's first calls ahead failed", exc_info=True)
                if not answer.future.done():
                    self._came(answer, None)  # the reader sends it itself

    def _register(self, key: Hashable) -> _Answer:
        answer = _Answer(key)
        with self._lock:
            self._answers[key] = answer
        return answer

    def _came(self, answer: _Answer, result: Any, nbytes: int = 0) -> None:
        """The answer came: ``(sent, response)``, the service error the call raised, or None
        (not sent)."""
        with self._lock:
            answer.came = time.monotonic()
            if self._answers.get(answer.key) is answer:
                answer.nbytes = nbytes
                self._bytes += nbytes
        if isinstance(result, Exception):
            answer.future.set_exception(result)
        else:
            answer.future.set_result(result)

    def _send(self, task: _Task, answer: _Answer, executor: SyncExecutor) -> None:
        """GetShardIterator, then the GetRecords its machine asks for next; each answer is
        registered before the call goes, so a reader that asks meanwhile waits for it."""
        link = sync_link(executor, StreamRef.of(task.spec.stream), task.shard_id)
        machine = task.machine
        call: Call = task.call
        while True:
            sent, started = time.time(), time.perf_counter()
            try:
                response = link.call(call)
            except Exception as exc:
                if error_kind(exc) is None:
                    raise
                answer.seconds, answer.error = time.perf_counter() - started, error_type(exc)
                self._came(answer, exc)  # the reader's machine takes it as its call's error
                return
            answer.seconds = time.perf_counter() - started
            if isinstance(call, GetRecords):
                # Kept converted: the reader that takes the answer then does not convert again.
                records = response["Records"] = wire_records(response.get("Records") or ())
                self._came(answer, (sent, response), sum(len(r.data) for r in records))
                return
            machine.on_response(time.monotonic(), call, response)
            following = machine.next_action(time.monotonic())
            if not isinstance(following, GetRecords):
                self._came(answer, (sent, response))
                return
            then = self._register(_key(task.spec, None, task.shard_id, following))
            self._came(answer, (sent, response))
            answer, call = then, following


FIRST_CALLS = FirstCalls()
"""This process's first calls sent ahead."""
