"""The Faust message of a Kinesis record, and how its acks reach the record.

faust-streaming's compiled stream iterator (the default) acks by writing ``message.refcount``
and ``message.acked`` directly; it never calls ``Message.on_final_ack``. So the hooks are the
two attributes themselves: properties over the base class's slots. A decrement of
``refcount`` or the ``acked`` flag turning True is a release of the event; the release that
sets ``acked`` is the final one, and :func:`~faust_kinesis.acks.decide` says what it means.
"""

from __future__ import annotations

from collections.abc import Callable
from sys import exc_info as _exc_info
from typing import TYPE_CHECKING, Protocol

from faust.types import TP, Message

from faust_kinesis.acks import Outcome
from faust_kinesis.faust_internals import ACKED, REFCOUNT
from kinesis_core.record_ids import derived_record_id
from kinesis_core.records import KinesisRecord

if TYPE_CHECKING:
    from kinesis_core.records import Position

# The slots' accessors, bound once: ``ACKED.__set__`` looks the method up and makes a
# method-wrapper object on every call, several times per event.
_get_acked = ACKED.__get__
_set_acked = ACKED.__set__
_get_refcount = REFCOUNT.__get__
_set_refcount = REFCOUNT.__set__


class Run(Protocol):
    """What a message needs from the consumer run that delivered it."""

    def finish(self, message: KinesisMessage, exception_in_flight: bool) -> None:
        """The event's final release happened: decide and act on its outcome."""
        ...

    def settle(self, message: KinesisMessage, outcome: Outcome) -> None:
        """The event ended without a final release (cleared, or a sink write failed)."""
        ...

    @property
    def stream_created_ms(self) -> int | None:
        """The creation time of the stream read (epoch ms: its incarnation), once known."""
        ...


class KinesisMessage(Message):
    """A Kinesis record as a Faust message: ``topic`` is the stream, ``partition`` the shard's
    number, ``offset`` the sequence number; ``record``, ``shard_id`` and ``position`` say
    exactly where it came from (aggregated records share a sequence number)."""

    __slots__ = ("_run", "failed", "outputs", "record", "record_ack", "settled")

    def __init__(
        self,
        record: KinesisRecord,
        tp: TP,
        key: bytes,
        timestamp: float,
        run: Run,
        record_ack: Callable[[KinesisRecord], None] = KinesisRecord.ack,
        offset: int | None = None,
        refcount: int = 0,
        generation_id: int | None = None,
    ) -> None:
        """``offset``: the record's sequence number as an int, when the caller has it (the
        records of an aggregate share it). ``refcount``: the releases expected (one per
        subscriber whose queue gets the event); ``generation_id``: the consumer generation
        Faust checks when the event is taken."""
        # The base __init__ is skipped on purpose: it would go through the properties below,
        # and this runs once per record.
        self.record = record
        self.record_ack = record_ack
        """Acks ``record``: the ``ack_record`` of its batch when the reader knows it (one
        call instead of the record's ``ack`` and its batch's weak reference)."""
        self._run = run
        self.failed = False
        """A release before the final one was made while an exception was in flight (the
        final release checks for itself)."""
        self.settled = False
        """The event's outcome is decided (final release, drop or failure)."""
        self.outputs = 0
        """How many outputs were derived from it (``next_record_id``)."""
        self.topic = tp.topic
        self.partition = tp.partition
        self.tp = tp
        self.offset = record.position[0] if offset is None else offset  # Faust's are ints
        self.timestamp = timestamp
        self.timestamp_type = 1
        self.headers = None
        self.key = key
        data = self.value = record.data
        self.checksum = None
        self.serialized_key_size = len(key)
        self.serialized_value_size = len(data)
        _set_acked(self, False)
        _set_refcount(self, refcount)
        self.tracked = True
        self.time_in = None
        self.time_out = None
        self.time_total = None
        self.generation_id = generation_id

    def next_record_id(self) -> str:
        """The derived record id of the next output made from this event
        (:func:`~kinesis_core.record_ids.derived_record_id`: the record's stream incarnation,
        shard, position and the output's index among this event's outputs), the same
        whenever the record is processed again. The incarnation is 0 while the stream's
        creation time is not known (the consumer describes the stream before it reads)."""
        record = self.record
        index = self.outputs
        self.outputs = index + 1
        return derived_record_id(
            self._run.stream_created_ms or 0,
            record.shard_id,
            record.sequence_number,
            record.sub_sequence_number,
            index,
        )

    def _release(self, value: bool) -> None:
        if value and not self.settled and not _get_acked(self):
            _set_acked(self, True)
            self.settled = True
            self._run.finish(self, _exc_info()[0] is not None)
            return
        _set_acked(self, value)

    def _decrement(self, value: int) -> None:
        # A release to 0 needs no mark: the final ack follows it at once, in the same
        # context, and sees the exception itself.
        if value and value < _get_refcount(self) and _exc_info()[0] is not None:
            self.failed = True
        _set_refcount(self, value)

    # Read straight from the slots (no Python call per read); written through the hooks.
    acked = property(_get_acked, _release)
    refcount = property(_get_refcount, _decrement)

    def drop(self) -> None:
        """Faust threw the event away before it was processed."""
        self._end(Outcome.DROPPED)

    def fail(self) -> None:
        """Something that held the event (a sink's write) failed for good."""
        self._end(Outcome.FAILED)

    def _end(self, outcome: Outcome) -> None:
        if not self.settled:
            self.settled = True
            self._run.settle(self, outcome)

    @property
    def shard_id(self) -> str:
        return self.record.shard_id

    @property
    def sequence_number(self) -> str:
        return self.record.sequence_number

    @property
    def sub_sequence_number(self) -> int:
        return self.record.sub_sequence_number

    @property
    def position(self) -> Position:
        return self.record.position

    @property
    def partition_key(self) -> str:
        return self.record.partition_key

    def __repr__(self) -> str:
        return f"<KinesisMessage: {self.topic} {self.shard_id} position={self.position}>"
