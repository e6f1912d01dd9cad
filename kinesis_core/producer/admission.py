"""Admission, sans-I/O: the memory budget, the callers waiting for room, and flush epochs.

Every record enters the producer here, whichever call brought it (``put``, ``put_many``, a
blocking caller's thread, a Beam chunk), inside a :class:`Submission`: the validated records of
one call and the sink that reports them. The machine decides and says what it decided; it
calls nothing, and the drivers execute its answers:

- ``offer(sub)``: ``ADMITTED`` (its records wait in the inbox for the pipeline to take them),
  ``WAITING`` (queued, first come first served, with the prefix that fitted already admitted)
  or ``REFUSED`` (the producer stopped); and whether the event loop must be woken to take the
  inbox (once per burst of offers, not once per offer).
- ``release(records, bytes)``: records finished; returns the waiting submissions now wholly
  admitted, whose callers the driver wakes. A waiting submission is validated as far as the
  budget has room, no further (its caller's records are not all held at once): ``hungry``
  names the first in line when it needs its next records validated before it can go on.
- ``flush()``: a :class:`Flush` to wait for (None when nothing accepted so far is unfinished);
  ``finished(sinks)``: the flushes whose records are all finished now.
- ``withdraw(sub)``: its caller stopped waiting; ``stop(reason)``: every waiting submission is
  refused, and so is every later offer.

Two machines, each one table and a ``handle``, as a shard's life is in
:mod:`kinesis_core.consumer.shard_consumer`. The admission's :class:`State` moves by
:data:`TRANSITIONS` (an :class:`Event` in, the next state and the :class:`Action` to carry out
out; :meth:`Admission.handle`): ``OPEN`` (nobody waits for room), ``FULL`` (someone does:
later offers queue behind them) and ``STOPPED`` (closing, closed, failed or crashed). A
submission's :class:`Standing` moves by :data:`STANDINGS` (a :class:`Step` in, the next
standing out; :meth:`Submission.handle`).

The budget counts the records admitted and not finished (the inbox's too) and their
cost (:func:`~kinesis_core.producer.config.records_cost`). A new offer takes what fits the
whole budget; waiting submissions are let in once the budget is below ``LOW_WATER`` again,
not record by record. An empty budget takes any one record, so a record bigger than the
budget still goes.

A blocking caller offers from its own thread while the event loop releases room, so every
method runs under ``lock``, which the driver supplies (a ``threading.Lock``; by default none).
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Any

from kinesis_core.producer.config import record_cost
from kinesis_core.producer.items import UserRecord

if TYPE_CHECKING:
    from kinesis_core.producer.result import BatchSink

LOW_WATER = 0.9
"""Waiting submissions are let in once the budget is below this fraction again."""


class State(enum.Enum):
    """Where the admission stands."""

    OPEN = "open"
    """Offers are taken as far as the budget has room; nobody waits."""
    FULL = "full"
    """Submissions wait for room; a new offer queues behind them."""
    STOPPED = "stopped"
    """Nothing is taken any more (the producer is closing, closed, failed or crashed)."""


class Event(enum.Enum):
    """What happens to the admission."""

    OFFER = "offer"
    """A submission is offered."""
    QUEUE = "queue"
    """The submission offered did not wholly fit (or others wait): it waits in line."""
    ROOM = "room"
    """Room may have come: records finished, a waiting caller left, or the first in line had
    more records validated."""
    EMPTIED = "emptied"
    """The last submission in line left it (wholly admitted, or withdrawn)."""
    STOP = "stop"
    """The producer stops taking records."""


class Action(enum.Enum):
    """What the admission does on an event."""

    TAKE = "take"
    """Admit what fits the budget of the submission offered."""
    REFUSE = "refuse"
    """Refuse the submission offered."""
    LET_IN = "let_in"
    """Admit the submissions in line, first come first served, while the budget is below
    the low-water mark."""
    REFUSE_WAITING = "refuse_waiting"
    """Refuse every submission in line."""


class AdmissionError(RuntimeError):
    """An event the admission's state, or a step a submission's standing, does not expect (a
    bug in the admission's driver)."""


S, E, A = State, Event, Action

TRANSITIONS: Mapping[tuple[State, Event], tuple[State, tuple[Action, ...]] | None] = {
    # open: offers are taken as far as the budget has room
    (S.OPEN, E.OFFER): (S.OPEN, (A.TAKE,)),
    (S.OPEN, E.QUEUE): (S.FULL, ()),
    (S.OPEN, E.ROOM): (S.OPEN, ()),
    (S.OPEN, E.EMPTIED): None,
    (S.OPEN, E.STOP): (S.STOPPED, ()),
    # full: a new offer queues behind the ones waiting (one with no record left goes through)
    (S.FULL, E.OFFER): (S.FULL, ()),
    (S.FULL, E.QUEUE): (S.FULL, ()),
    (S.FULL, E.ROOM): (S.FULL, (A.LET_IN,)),
    (S.FULL, E.EMPTIED): (S.OPEN, ()),
    (S.FULL, E.STOP): (S.STOPPED, (A.REFUSE_WAITING,)),
    # stopped: nothing is taken; what was admitted still finishes
    (S.STOPPED, E.OFFER): (S.STOPPED, (A.REFUSE,)),
    (S.STOPPED, E.QUEUE): None,
    (S.STOPPED, E.ROOM): (S.STOPPED, ()),
    (S.STOPPED, E.EMPTIED): None,
    (S.STOPPED, E.STOP): (S.STOPPED, ()),
}
"""(state, event) -> (next state, actions), or None: the event is a bug in that state
(:class:`AdmissionError`)."""

del S, E, A


class Standing(enum.Enum):
    """Where one submission stands."""

    NEW = "new"
    """Not offered yet."""
    WAITING = "waiting"
    """Some of its records wait for room (the ones before them are admitted)."""
    ADMITTED = "admitted"
    """Every record is admitted (in the inbox or in the pipeline)."""
    REFUSED = "refused"
    """The producer stopped before every record was admitted: the rest failed."""
    WITHDRAWN = "withdrawn"
    """Its caller stopped waiting: the records not admitted failed."""


class Step(enum.Enum):
    """What happens to one submission."""

    ADMIT = "admit"
    """Its last records are admitted."""
    QUEUE = "queue"
    """Offered while the budget has no room for all of it (or others wait): it waits."""
    REFUSE = "refuse"
    """The producer stopped before all of it was admitted."""
    WITHDRAW = "withdraw"
    """Its caller stopped waiting (a no-op unless it waits)."""


_N, _W, _A, _R, _X = (
    Standing.NEW,
    Standing.WAITING,
    Standing.ADMITTED,
    Standing.REFUSED,
    Standing.WITHDRAWN,
)

STANDINGS: Mapping[tuple[Standing, Step], Standing | None] = {
    (_N, Step.ADMIT): _A,
    (_N, Step.QUEUE): _W,
    (_N, Step.REFUSE): _R,
    (_N, Step.WITHDRAW): _N,
    (_W, Step.ADMIT): _A,
    (_W, Step.QUEUE): None,
    (_W, Step.REFUSE): _R,
    (_W, Step.WITHDRAW): _X,
    (_A, Step.ADMIT): None,
    (_A, Step.QUEUE): None,
    (_A, Step.REFUSE): None,
    (_A, Step.WITHDRAW): _A,
    (_R, Step.ADMIT): None,
    (_R, Step.QUEUE): None,
    (_R, Step.REFUSE): None,
    (_R, Step.WITHDRAW): _R,
    (_X, Step.ADMIT): None,
    (_X, Step.QUEUE): None,
    (_X, Step.REFUSE): None,
    (_X, Step.WITHDRAW): _X,
}
"""Every (standing, step): the next standing, or None: the step is a bug
(:class:`AdmissionError`). A decided submission is offered once."""


class Submission:
    """The records of one call, on their way in.

    ``source`` is what the caller gave, validated from the start up to ``next`` (the pipeline
    validates as far as the budget has room); ``records`` are the user records validated and
    not admitted yet (it holds none once admitted), and ``cost`` what they count.
    Records that failed validation are failed in ``sink`` already; ``too_large`` holds
    ``(index, record)`` pairs set aside for a fresh look at the stream's maximum record size
    (``final``: none is set aside, they are refused). ``indexes`` are the records' indexes in
    the sink when they are not their positions in ``source``. ``waker`` is the driver's (a
    future it resolves once the submission is decided); ``error`` is the refusal of a single
    record that its caller raises.
    """

    __slots__ = (
        "cost",
        "error",
        "final",
        "held",
        "indexes",
        "next",
        "records",
        "sink",
        "source",
        "standing",
        "too_large",
        "waited",
        "waker",
    )

    def __init__(
        self,
        source: Sequence[Any],
        sink: BatchSink,
        indexes: list[int] | None = None,
        *,
        final: bool = False,
    ) -> None:
        self.source = source
        self.sink = sink
        self.indexes = indexes
        self.final = final
        self.next = 0
        self.records: list[UserRecord] = []
        self.cost = 0
        self.too_large: list[tuple[int, Any]] = []
        self.standing = Standing.NEW
        self.waited = False
        """Whether it was queued: its records then start their TTL when admitted."""
        self.held = False
        """Its next record did not fit the room when validated: it waits for records to
        finish before it is validated again."""
        self.waker: Any = None
        self.error: Exception | None = None

    def handle(self, step: Step) -> Standing:
        """Feed one step; return the standing it leads to."""
        standing = STANDINGS[self.standing, step]
        if standing is None:
            raise AdmissionError(
                f"submission: {step.value} is not expected while {self.standing.value}"
            )
        self.standing = standing
        return standing

    @property
    def hungry(self) -> bool:
        """Every record validated so far is admitted, and more are to be validated (unless
        ``held``)."""
        return not self.records and self.next < len(self.source) and not self.held

    @property
    def complete(self) -> bool:
        """Every record is admitted (or failed validation, or set aside)."""
        return not self.records and self.next == len(self.source)

    @property
    def unsettled(self) -> bool:
        """Whether its caller still has to wait (for room, or for the stream's limit), or, for
        a single record refused, to raise why."""
        standing = self.standing
        return (
            standing is Standing.WAITING
            or bool(self.too_large)
            or (standing is Standing.REFUSED and self.sink.single)
        )


class Flush:
    """A caller waiting until every record accepted before ``epoch`` ended is finished."""

    __slots__ = ("epoch", "waker")

    def __init__(self, epoch: int) -> None:
        self.epoch = epoch
        self.waker: Any = None


Slice = tuple[Submission, list[UserRecord]]
"""``(submission, records)``: records of a submission, admitted together."""


class Admission:
    """The budget, the waiting submissions, the inbox and the flush epochs (module docstring)."""

    def __init__(
        self,
        max_records: int,
        max_bytes: int,
        lock: AbstractContextManager[Any] | None = None,
    ) -> None:
        self.max_records = max_records
        self.max_bytes = max_bytes
        self._low_records = LOW_WATER * max_records
        self._low_bytes = LOW_WATER * max_bytes
        self.lock: AbstractContextManager[Any] = lock if lock is not None else nullcontext()
        self.records = 0
        """Records admitted and not finished (the budget's count)."""
        self.bytes = 0
        """Their cost."""
        self.waiting: deque[Submission] = deque()
        self.inbox: list[Slice] = []
        """Admitted records the pipeline has not taken yet, in the order they were admitted."""
        self.signalled = False
        """Whether the loop was told to take the inbox since it last did."""
        self.epoch = 0
        self.pending: dict[int, int] = {}
        """Unfinished sinks, by the flush epoch they were accepted in."""
        self.flushes: list[Flush] = []
        self.stopped: str | None = None
        """Why nothing is taken any more (None until stopped)."""
        self.state = State.OPEN

    def handle(self, event: Event) -> tuple[Action, ...]:
        """Feed one event; return what the admission must do now."""
        result = TRANSITIONS[self.state, event]
        if result is None:
            raise AdmissionError(
                f"admission: {event.value} is not expected while {self.state.value}"
            )
        self.state, actions = result
        return actions

    @property
    def room(self) -> tuple[int, int]:
        """Records and bytes the budget has room for now (a snapshot when read unlocked)."""
        return self.max_records - self.records, self.max_bytes - self.bytes

    @property
    def urgent(self) -> bool:
        """Whether anyone waits (for room or for a flush): nothing should linger then."""
        return bool(self.waiting or self.flushes)

    # -- events ------------------------------------------------------------------------------

    def offer(self, sub: Submission) -> tuple[Standing, bool]:
        """Take ``sub`` in as far as the budget has room (nothing while others wait); returns
        its standing, and whether the loop must be woken to take the inbox."""
        with self.lock:
            actions = self.handle(Event.OFFER)
            if Action.REFUSE in actions:
                return sub.handle(Step.REFUSE), False
            sink = sub.sink
            if sink.epoch < 0:
                sink.epoch = epoch = self.epoch
                self.pending[epoch] = self.pending.get(epoch, 0) + 1
            if Action.TAKE in actions:
                self._take(sub)
            if sub.complete:
                sub.handle(Step.ADMIT)
            else:
                self.handle(Event.QUEUE)
                sub.handle(Step.QUEUE)
                sub.waited = True
                self.waiting.append(sub)
            wake = (bool(self.inbox) or self._hungry() is not None) and not self.signalled
            if wake:
                self.signalled = True
            return sub.standing, wake

    def wait_for(self, sub: Submission, waker: Any) -> bool:
        """Give a waiting ``sub`` the ``waker`` its driver resolves when it is decided; False
        (and no waker) if it is decided already."""
        with self.lock:
            if sub.standing is not Standing.WAITING:
                return False
            sub.waker = waker
            return True

    def take_inbox(self) -> list[Slice]:
        """The admitted records, for the pipeline to take."""
        with self.lock:
            inbox, self.inbox = self.inbox, []
            self.signalled = False
            return inbox

    def release(self, records: int, nbytes: int) -> list[Submission]:
        """``records`` records of cost ``nbytes`` finished; returns the waiting submissions
        now wholly admitted."""
        with self.lock:
            self.records -= records
            self.bytes -= nbytes
            if self.waiting:
                self.waiting[0].held = False
            return self._room()

    def let_in(self) -> list[Submission]:
        """Admit what waits as far as the budget and the records validated allow; returns the
        submissions now wholly admitted (after ``hungry``'s were validated further)."""
        with self.lock:
            return self._room()

    def hungry(self) -> Submission | None:
        """The first in line, if the budget would let more of it in but every record of it
        validated so far is admitted: the pipeline validates its next records."""
        with self.lock:
            return self._hungry()

    def withdraw(self, sub: Submission) -> list[Submission]:
        """``sub``'s caller stopped waiting: its records not admitted stay out. Returns the
        submissions behind it now wholly admitted."""
        with self.lock:
            if sub.standing is Standing.WAITING:
                self.waiting.remove(sub)
                if not self.waiting:
                    self.handle(Event.EMPTIED)
            sub.handle(Step.WITHDRAW)
            return self._room()

    def stop(self, reason: str) -> list[Submission]:
        """Take nothing any more (``reason`` says why); returns the waiting submissions, now
        refused."""
        with self.lock:
            actions = self.handle(Event.STOP)
            if self.stopped is None:
                self.stopped = reason
            if Action.REFUSE_WAITING not in actions:
                return []
            refused = list(self.waiting)
            self.waiting.clear()
            for sub in refused:
                sub.handle(Step.REFUSE)
            return refused

    def flush(self) -> Flush | None:
        """A flush of everything accepted so far; None if all of it is finished already."""
        with self.lock:
            epoch = self.epoch
            self.epoch += 1
            if not self.pending or min(self.pending) > epoch:
                return None
            flush = Flush(epoch)
            self.flushes.append(flush)
            return flush

    def forget(self, flush: Flush) -> None:
        """Its caller stopped waiting for ``flush`` (done, timed out or cancelled)."""
        with self.lock:
            if flush in self.flushes:
                self.flushes.remove(flush)

    def take_flushes(self) -> list[Flush]:
        """Every flush, done or not (a crash: nothing more will finish)."""
        with self.lock:
            flushes, self.flushes = self.flushes, []
            return flushes

    def finished(self, sinks: Iterable[BatchSink]) -> list[Flush]:
        """Every record of ``sinks`` is finished; returns the flushes done now."""
        with self.lock:
            pending = self.pending
            for sink in sinks:
                left = pending[sink.epoch] - 1
                if left:
                    pending[sink.epoch] = left
                else:
                    del pending[sink.epoch]
            if not self.flushes:
                return []
            oldest = min(pending, default=self.epoch)
            done = [f for f in self.flushes if f.epoch < oldest]
            if done:
                self.flushes = [f for f in self.flushes if f.epoch >= oldest]
            return done

    # -- internals (under the lock) ----------------------------------------------------------

    def _take(self, sub: Submission) -> None:
        """Admit the validated records of ``sub`` that fit the budget, in their order."""
        records = sub.records
        if not records:
            return
        room_records, room_bytes = self.room
        if len(records) <= room_records and sub.cost <= room_bytes:
            taken, cost = records, sub.cost  # the usual case: all of them, no count per record
            sub.records = []
        else:
            stop, cost = 0, 0
            last = min(len(records), max(room_records, 0))
            while stop < last:
                ur = records[stop]
                more = record_cost(ur.data, ur.partition_key)
                if cost + more > room_bytes:
                    break
                cost += more
                stop += 1
            if not stop:
                if self.records:
                    return
                ur = records[0]  # an empty budget takes any one record
                stop, cost = 1, record_cost(ur.data, ur.partition_key)
            taken, sub.records = records[:stop], records[stop:]
        self.inbox.append((sub, taken))
        self.records += len(taken)
        self.bytes += cost
        sub.cost -= cost

    def _room(self) -> list[Submission]:
        """Room may have come: let in what the state says to; returns the submissions now
        wholly admitted."""
        if Action.LET_IN not in self.handle(Event.ROOM):
            return []
        admitted = []
        waiting = self.waiting
        while waiting and self._below_low_water():
            sub = waiting[0]
            self._take(sub)
            if not sub.complete:
                break
            waiting.popleft()
            sub.handle(Step.ADMIT)
            admitted.append(sub)
        if not waiting:
            self.handle(Event.EMPTIED)
        return admitted

    def _hungry(self) -> Submission | None:
        waiting = self.waiting
        if waiting and waiting[0].hungry and self._below_low_water():
            return waiting[0]
        return None

    def _below_low_water(self) -> bool:
        return not self.records or (
            self.records <= self._low_records and self.bytes <= self._low_bytes
        )
