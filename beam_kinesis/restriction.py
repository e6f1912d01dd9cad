"""The Beam side of a ``ReadFromKinesis`` restriction: the claims a ``process()`` call makes,
the ``RestrictionTracker`` that takes them, and the ``Coder`` of the restriction.

The restriction itself, its planning and its checkpoint keys are plain values and pure
functions in :mod:`beam_kinesis.plan`; nothing here talks to Kinesis or sleeps.
"""

from __future__ import annotations

from typing import NamedTuple

from apache_beam.coders import Coder
from apache_beam.io.iobase import RestrictionProgress, RestrictionTracker

from beam_kinesis.plan import (
    KinesisRestriction,
    ShardCursor,
    ShardRef,
    decode_restriction,
    encode_restriction,
    overlaps,
    parent_refs,
)
from kinesis_core.consumer.lineage import ShardNode
from kinesis_core.records import Position

# -- claims: the events a process() call feeds the tracker ------------------------------------


class RecordClaim(NamedTuple):
    """Records about to be output: ``records`` of them (one response's, at most what is left of
    ``max_records``), consuming the shard up to and including this position (records outside
    the range up to there are consumed without output); ``timestamp_micros`` is the newest of
    their timestamps."""

    shard_id: str
    sequence_number: int
    sub_sequence_number: int
    timestamp_micros: int
    records: int = 1


class SkipClaim(NamedTuple):
    """Records consumed but not output (outside this restriction's range): move past them."""

    shard_id: str
    sequence_number: int
    sub_sequence_number: int


class IdleClaim(NamedTuple):
    """A successful empty read at the tip of the shard: its watermark may move up to this."""

    shard_id: str
    watermark_micros: int


class EndClaim(NamedTuple):
    """The shard reached its end (or vanished): adopt the children that meet this range.

    ``known`` gives parent ranges the caller knows (from ListShards); others are derived.
    """

    shard_id: str
    children: tuple[ShardNode, ...]
    known: tuple[ShardRef, ...] = ()


class BacklogClaim(NamedTuple):
    """A response of the shard was read: ``read_bytes`` of data came out of it, and about
    ``backlog_bytes`` are left behind it."""

    shard_id: str
    backlog_bytes: int
    read_bytes: int


class ParentsEndedClaim(NamedTuple):
    """Every parent the shard waited for has ended (SHARD_END committed in the checkpoint
    store): read it, after ``position`` if the store has one for it."""

    shard_id: str
    position: Position | None


class DeadlineClaim(NamedTuple):
    """Set the deadline of a bounded read (``max_read_time`` counts from the first call)."""

    deadline_micros: int


class StopClaim(NamedTuple):
    """A bounded read is complete: nothing is left to do."""


Claim = (
    RecordClaim
    | SkipClaim
    | IdleClaim
    | EndClaim
    | BacklogClaim
    | ParentsEndedClaim
    | DeadlineClaim
    | StopClaim
)


class _Cursor:
    """The mutable twin of a ShardCursor inside a tracker."""

    __slots__ = (
        "backlog",
        "hi",
        "lo",
        "parents",
        "position",
        "shard_id",
        "start",
        "waiting_for",
        "watermark",
    )

    def __init__(self, cursor: ShardCursor) -> None:
        self.shard_id = cursor.shard_id
        self.lo = cursor.lo
        self.hi = cursor.hi
        self.parents = cursor.parents
        self.waiting_for = cursor.waiting_for
        self.position = cursor.position
        self.start = cursor.start
        self.watermark = cursor.watermark
        self.backlog = cursor.backlog

    def freeze(self) -> ShardCursor:
        return ShardCursor(
            self.shard_id,
            self.lo,
            self.hi,
            self.parents,
            self.waiting_for,
            self.position,
            self.start,
            self.watermark,
            self.backlog,
        )


class KinesisRestrictionTracker(RestrictionTracker):
    """Claims, self-checkpoints and bounded stops of one restriction.

    ``try_split(0)`` (what ``defer_remainder`` calls) returns (primary, residual): the primary
    is the same positions marked done, the residual the same positions to go on from. Splits at
    any other fraction are refused (None): a restriction is split only at the start, by range.
    """

    def __init__(self, restriction: KinesisRestriction, *, bounded: bool = False) -> None:
        self._lo = restriction.lo
        self._hi = restriction.hi
        self._child_start = restriction.child_start
        self._left = restriction.records_left
        self._deadline = restriction.deadline
        self._done = restriction.done
        self._created_ms = restriction.created_ms
        self._bounded = bounded
        self._cursors = {c.shard_id: _Cursor(c) for c in restriction.cursors}
        self._read_bytes = 0

    def current_restriction(self) -> KinesisRestriction:
        return self._snapshot(self._done)

    def _snapshot(self, done: bool) -> KinesisRestriction:
        cursors = tuple(self._cursors[k].freeze() for k in sorted(self._cursors))
        return KinesisRestriction(
            self._lo,
            self._hi,
            cursors,
            self._child_start,
            self._left,
            self._deadline,
            done,
            self._created_ms,
        )

    @property
    def _finished(self) -> bool:
        return self._done or self._left == 0 or not self._cursors

    def try_claim(self, position: Claim) -> bool:
        """Record claims return False once the restriction is checkpointed, stopped or out of
        ``max_records``; then the caller must not output and should return. A record claim
        for more records than are left of ``max_records`` is an error."""
        if type(position) is RecordClaim:  # once per response: kept short
            if self._done or self._left == 0:
                return False
            shard_id, seq, sub, ts, records = position
            if self._left is not None and records > self._left:
                raise ValueError(
                    f"{shard_id}: claimed {records} records with {self._left} left of max_records"
                )
            cursor = self._cursors.get(shard_id)
            last = None if cursor is None else cursor.position
            if cursor is None or cursor.waiting_for or (last is not None and (seq, sub) <= last):
                cursor = self._advance(shard_id, seq, sub)  # raises the right error
            cursor.position = (seq, sub)
            if cursor.watermark is None or ts > cursor.watermark:
                cursor.watermark = ts
            if self._left is not None:
                self._left -= records
            return True
        if self._done:
            return False
        if isinstance(position, SkipClaim):
            self._advance(*position)
        elif isinstance(position, IdleClaim):
            cursor = self._readable(position.shard_id)
            if cursor.watermark is None or position.watermark_micros > cursor.watermark:
                cursor.watermark = position.watermark_micros
        elif isinstance(position, EndClaim):
            self._end(position)
        elif isinstance(position, BacklogClaim):
            self._readable(position.shard_id).backlog = position.backlog_bytes
            self._read_bytes += position.read_bytes
        elif isinstance(position, ParentsEndedClaim):
            cursor = self._cursors.get(position.shard_id)
            if cursor is None:
                raise ValueError(f"{position.shard_id} is not a shard of this restriction")
            cursor.waiting_for = ()
            if cursor.position is None:
                cursor.position = position.position
        elif isinstance(position, DeadlineClaim):
            self._deadline = position.deadline_micros
        elif isinstance(position, StopClaim):
            self._done = True
        else:
            raise ValueError(f"not a Kinesis restriction claim: {position!r}")
        return True

    def _readable(self, shard_id: str) -> _Cursor:
        cursor = self._cursors.get(shard_id)
        if cursor is None:
            raise ValueError(f"{shard_id} is not a shard of this restriction")
        if cursor.waiting_for:
            waiting = [ref.shard_id for ref in cursor.waiting_for]
            raise ValueError(f"{shard_id} is waiting for its parents {waiting}")
        return cursor

    def _advance(self, shard_id: str, seq: int, sub: int) -> _Cursor:
        cursor = self._readable(shard_id)
        position = (seq, sub)
        if cursor.position is not None and position <= cursor.position:
            raise ValueError(
                f"{shard_id}: claimed {position} at or before the last claim {cursor.position}"
            )
        cursor.position = position
        return cursor

    def _end(self, claim: EndClaim) -> None:
        ended = self._readable(claim.shard_id)
        del self._cursors[claim.shard_id]
        for cursor in self._cursors.values():
            if cursor.waiting_for:
                cursor.waiting_for = tuple(
                    ref for ref in cursor.waiting_for if ref.shard_id != claim.shard_id
                )
        ref = ShardRef(ended.shard_id, ended.lo, ended.hi)
        known = {k.shard_id: k for k in claim.known}
        for child in claim.children:
            lo, hi = child.hash_range
            if not overlaps(lo, hi, self._lo, self._hi):
                continue
            existing = self._cursors.get(child.shard_id)
            if existing is not None:
                if ended.watermark is not None and (
                    existing.watermark is None or ended.watermark > existing.watermark
                ):
                    existing.watermark = ended.watermark
                continue
            waiting = tuple(
                sorted(
                    parent
                    for parent in parent_refs(child, ref, known)
                    if parent.shard_id != ended.shard_id
                    and overlaps(parent.lo, parent.hi, self._lo, self._hi)
                )
            )
            self._cursors[child.shard_id] = _Cursor(
                ShardCursor(
                    child.shard_id,
                    lo,
                    hi,
                    child.parents,
                    waiting,
                    None,
                    self._child_start,
                    ended.watermark,
                )
            )

    def try_split(
        self, fraction_of_remainder: float
    ) -> tuple[KinesisRestriction, KinesisRestriction] | None:
        if self._finished or fraction_of_remainder != 0:
            return None
        primary = self._snapshot(True)
        residual = self._snapshot(False)
        self._done = True
        return primary, residual

    def check_done(self) -> None:
        if not self._finished:
            raise ValueError(
                f"restriction [{self._lo}, {self._hi}] still has shards to read "
                f"({', '.join(sorted(self._cursors))}) and was neither checkpointed nor stopped"
            )

    def current_progress(self) -> RestrictionProgress:
        """In bytes: the data read by this tracker, and the estimated backlog left (at least
        one byte while the restriction is not finished: a runner must not take it for done)."""
        remaining = 0.0
        if not self._finished:
            remaining = float(max(sum(c.backlog or 0 for c in self._cursors.values()), 1))
        return RestrictionProgress(  # type: ignore[no-untyped-call]
            completed=float(self._read_bytes), remaining=remaining
        )

    def is_bounded(self) -> bool:
        return self._bounded


# -- the coder -----------------------------------------------------------------------------------


class DeterministicCoder(Coder):
    """A coder whose byte form is deterministic; all instances of a subclass are equal."""

    def is_deterministic(self) -> bool:
        return True

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other)

    def __hash__(self) -> int:
        return hash(type(self))


class KinesisRestrictionCoder(DeterministicCoder):
    """The restriction's wire form (see :func:`encode_restriction`)."""

    def encode(self, value: KinesisRestriction) -> bytes:
        return encode_restriction(value)

    def decode(self, encoded: bytes) -> KinesisRestriction:
        return decode_restriction(encoded)
