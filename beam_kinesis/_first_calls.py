"""The first calls of new restrictions, sent ahead by the process that splits them.

A restriction's first ``process`` call has nothing to output until its first GetShardIterator
and GetRecords answer, and a DoFn sees its restrictions one at a time. But the runner splits
(and sizes) the restrictions before it processes them, so ``split`` hands the new
restrictions to the transform's :class:`FirstCalls`: one thread of this process sends each
restriction's first GetShardIterator and GetRecords, one restriction after the other, while
the runner processes the restrictions before it. The calls are the restriction's own reader
machine's, stepped by the core's driver (:class:`~kinesis_core.consumer.reading.SyncShardReader`:
the GetShardIterator answer is fed to the machine, its GetRecords is read ahead and left for
the reader that takes it). A reader that a ``process`` call opens later in this process takes
those answers (:meth:`FirstCalls.take`, given to its own ``SyncShardReader`` as ``earlier``)
if its machine makes exactly the same calls: the same shard, the same starting position, the
iterator of the answer taken, the same limit. Nothing is claimed until the read loop outputs
an answer in its turn, so an answer that is never taken (the restriction went to another
process, was split, or checkpointed before its first call) is simply dropped: the
restriction reads from its cursor as it would have.

The runner splits on one copy of the DoFn (the restriction provider of its split stage, never
set up) and processes on others, all unpickled from the one the transform built.
:class:`SharedFirstCalls`, drawn when the DoFn is built and pickled with it, finds the same
:class:`FirstCalls` for every copy in a process (:class:`apache_beam.utils.shared.Shared`):
one per transform and process, alive while a copy holds it.

The cost: answers wait in memory (at most :data:`MAX_PENDING_BYTES` of record data, the
next restriction's calls wait for room), and an answer dropped unused was read for nothing
(:data:`EXPIRY` after it came, or as soon as its restriction's reader asks for another call):
on AWS its bytes count against the shard's 2 MiB/s of reads and its calls against the 5
GetRecords per second, as the reader's own calls do. The drops are counted in the Beam metric
``aws.kinesis.beam.read.early_calls_wasted``.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable, Iterable
from concurrent.futures import Executor, Future
from dataclasses import dataclass, field
from typing import Any, ParamSpec, TypeVar

from apache_beam.utils.shared import Shared

from beam_kinesis._read_spec import ReadSpec
from beam_kinesis._shard_readers import ShardReaders, polling_machine
from beam_kinesis.plan import KinesisRestriction, ShardCursor
from kinesis_core.aws.calls import Call
from kinesis_core.aws.config import ClientConfig
from kinesis_core.aws.exceptions import error_kind
from kinesis_core.aws.executor import SyncExecutor
from kinesis_core.consumer.links import SyncLink, sync_link
from kinesis_core.consumer.polling import GetIterator, GetRecords
from kinesis_core.consumer.reading import SyncShardReader
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


_P = ParamSpec("_P")
_T = TypeVar("_T")


class _Later(Executor):
    """Holds the call a reader reads ahead on it until :meth:`run` sends it on the caller's
    thread: the sending thread registers the call's answer in between."""

    def __init__(self) -> None:
        self._held: tuple[Future[Any], Callable[[], Any]] | None = None

    def submit(self, fn: Callable[_P, _T], /, *args: _P.args, **kwargs: _P.kwargs) -> Future[_T]:
        future: Future[_T] = Future()
        self._held = (future, functools.partial(fn, *args, **kwargs))
        return future

    def run(self) -> None:
        """Send the call held (its future then holds the answer, or the error it raised)."""
        held, self._held = self._held, None
        if held is None:
            return
        future, send = held
        try:
            future.set_result(send())
        except Exception as exc:
            future.set_exception(exc)


class _Link:
    """A shard's link on the sending thread's client for its configuration (made there by the
    first call of a restriction of that configuration, and kept for the next ones)."""

    def __init__(self, calls: FirstCalls, spec: ReadSpec, shard_id: str) -> None:
        self._calls = calls
        self._spec = spec
        self._shard_id = shard_id
        self._link: SyncLink | None = None

    def call(self, call: Call) -> Any:
        if self._link is None:
            executor = self._calls.executor(self._spec)
            self._link = sync_link(executor, StreamRef.of(self._spec.stream), self._shard_id)
        return self._link.call(call)

    def close(self) -> None:
        if self._link is not None:
            self._link.close()


@dataclass
class _Task:
    spec: ReadSpec
    shard_id: str
    reader: SyncShardReader
    """The restriction's machine in the core's driver, its first call read ahead on ``later``
    (decided when the task was made, sent when the thread comes to it)."""
    later: _Later
    key: Hashable
    queued: float


class FirstCalls:
    """The first calls sent ahead for one transform in this process, and their answers until
    a reader takes them."""

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
        """The sending thread's clients, one per configuration (:meth:`executor`)."""

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

    def _task(
        self,
        spec: ReadSpec,
        restriction: KinesisRestriction,
        cursor: ShardCursor,
        now: float,
    ) -> _Task | None:
        machine = polling_machine(spec, restriction, cursor)
        later = _Later()
        link = _Link(self, spec, cursor.shard_id)
        reader = SyncShardReader(machine, link, where=spec.stream, ahead=later)
        reader.read_ahead(now)
        first = reader.in_flight
        if first is None or not isinstance(first[0], GetIterator):
            return None
        key = _key(spec, restriction.created_ms, cursor.shard_id, first[0])
        return _Task(spec, cursor.shard_id, reader, later, key, now)

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
                self._send(task, answer)
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

    def executor(self, spec: ReadSpec) -> SyncExecutor:
        """The sending thread's executor for ``spec``'s client configuration (its client is
        kept for the next restrictions: making one is costly)."""
        config = spec.client_config
        readers = self._readers.get(config)
        if readers is None:
            readers = self._readers[config] = ShardReaders(spec)
        return readers.executor

    def _send(self, task: _Task, answer: _Answer) -> None:
        """Step the task's reader: its first call (GetShardIterator) goes, and its answer is fed
        to the machine; the GetRecords the machine asks for next is read ahead and left
        untaken, for the reader that takes it. Each answer is registered before its call goes,
        so a reader that asks meanwhile waits for it."""
        reader = task.reader
        in_flight = reader.in_flight
        assert in_flight is not None, "a task's first call is read ahead when it is made"
        call, future = in_flight
        try:
            while True:
                started = time.perf_counter()
                task.later.run()
                answer.seconds = time.perf_counter() - started
                error = future.exception()
                if error is not None:
                    if error_kind(error) is None:
                        raise error
                    answer.error = error_type(error)
                    self._came(answer, error)  # the reader's machine takes it as its call's error
                    return
                if isinstance(call, GetRecords):
                    sent, response = future.result()
                    # Kept converted: the reader that takes it then does not convert again.
                    records = response["Records"] = wire_records(response.get("Records") or ())
                    self._came(answer, (sent, response), sum(len(r.data) for r in records))
                    return
                reader.step(call)
                reader.read_ahead(time.monotonic())
                following = reader.in_flight
                if following is None or not isinstance(following[0], GetRecords):
                    self._came(answer, future.result())
                    return
                then = self._register(_key(task.spec, None, task.shard_id, following[0]))
                self._came(answer, future.result())
                answer, (call, future) = then, following
        finally:
            reader.close()


class SharedFirstCalls:
    """The handle every copy of one ReadFn carries to its transform's :class:`FirstCalls` in
    this process (its key is drawn once, when the DoFn is built, and pickled with it)."""

    def __init__(self) -> None:
        self._shared = Shared()  # type: ignore[no-untyped-call]

    def acquire(self) -> FirstCalls:
        """This transform's :class:`FirstCalls` in this process (made by the first copy that
        asks; kept while a copy holds it)."""
        first_calls: FirstCalls = self._shared.acquire(FirstCalls)
        return first_calls
