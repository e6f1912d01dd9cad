"""What a Faust ack of a Kinesis event means: the decision and the bookkeeping, without Faust.

Faust acks an event in more situations than "the agent processed it":

- an auto-ack stream acks the event an agent was working on when the agent raised, was
  cancelled or stopped, because the stream's async generator is closed then, and its
  ``finally`` clause acks (the exception in flight is ``GeneratorExit``);
- ``async with event:`` acks in ``__aexit__`` even when the block raised;
- the pure-Python stream acks an event it skipped without processing, when flow control is
  suspended or the event is from an older consumer generation.

:func:`decide` sorts these out; :class:`Ledger` counts the events of one consumer run still in
Faust's hands, so that a shutdown or a re-delivery can wait for them. Sans-I/O: no Faust, no
clock, no awaits.
"""

from __future__ import annotations

import enum


class Outcome(enum.Enum):
    """How a delivered event ended, as far as its checkpoint is concerned."""

    ACKED = "acked"
    """Processed: its record is acked, the shard's checkpoint may move past it."""
    FAILED = "failed"
    """Processing did not finish (safe mode): the checkpoint stays before it."""
    DROPPED = "dropped"
    """Never processed (Faust cleared or skipped it): it must be delivered again."""


def decide(
    *,
    failed: bool,
    exception_in_flight: bool,
    safe: bool,
    flow_active: bool,
    same_generation: bool,
) -> Outcome:
    """The outcome of a final ack.

    ``failed``: an earlier release of the event (another subscriber, a sink) was made while an
    exception was in flight. ``exception_in_flight``: an exception is being handled where the
    final ack happens (``sys.exc_info()``). ``flow_active`` / ``same_generation``: Faust's own
    test for "deliver this event" still holds; when it does not, the pure-Python stream acks
    without processing, so the ack is not one.
    """
    if not flow_active or not same_generation:
        return Outcome.DROPPED
    if safe and (failed or exception_in_flight):
        return Outcome.FAILED
    return Outcome.ACKED


class Ledger:
    """The events of one consumer run: delivered, and how many ended which way.

    A run ends with a re-delivery (a new consumer starts from the checkpoints) or with the
    shutdown; after :meth:`close`, outcomes no longer count: the records belong to a consumer
    that is gone.
    """

    __slots__ = ("acked", "closed", "delivered", "dropped", "failed", "in_flight")

    def __init__(self) -> None:
        self.delivered = 0
        self.acked = 0
        self.failed = 0
        self.dropped = 0
        self.in_flight = 0
        """Delivered events with no outcome yet (queued in Faust or being processed)."""
        self.closed = False

    def deliver(self, count: int = 1) -> None:
        self.delivered += count
        self.in_flight += count

    def settle(self, outcome: Outcome) -> bool:
        """Count one event's outcome; False once the run is closed (ignore the outcome)."""
        if self.closed:
            return False
        self.in_flight -= 1
        if outcome is Outcome.ACKED:
            self.acked += 1
        elif outcome is Outcome.FAILED:
            self.failed += 1
        else:
            self.dropped += 1
        return True

    def close(self) -> None:
        self.closed = True

    def add(self, other: Ledger) -> None:
        """Add another run's counts to these (totals over runs)."""
        self.delivered += other.delivered
        self.acked += other.acked
        self.failed += other.failed
        self.dropped += other.dropped
        self.in_flight += other.in_flight
