"""Shard discovery of ``ReadFromKinesis(shard_discovery_interval=...)``: one element per shard.

Sans-I/O: plain values and pure functions, plus the Beam ``RestrictionTracker`` and ``Coder``
of the discovery's own splittable DoFn. Nothing here talks to Kinesis or sleeps.

The discovery reads the stream's listing every interval and outputs, once, every shard that
descends from a shard it output before (or from the shards the read starts from): each becomes
a one-shard :class:`~beam_kinesis.restriction.KinesisRestriction`, read by its own restriction
wherever the runner puts it. A shard with parents waits (``waiting_for``) until every parent's
SHARD_END is in the checkpoint store, which a parent's bundle finalizer writes only once the
runner committed the bundle that read the parent's last record: parent before child per key,
across workers. The discovery's restriction is the set of shards it output, so a resumed
discovery outputs none of them again (as Beam's ``Watch`` keeps what it output).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import NamedTuple

from apache_beam.io.iobase import RestrictionProgress, RestrictionTracker

from beam_kinesis.plan import (
    KinesisRestriction,
    ShardCursor,
    ShardRef,
    stored_values,
)
from beam_kinesis.restriction import DeterministicCoder
from kinesis_core.checkpoint.base import SHARD_END, CheckpointValue
from kinesis_core.consumer.lineage import ShardNode
from kinesis_core.records import Position


class Discovery(NamedTuple):
    """What the discovery has output, and when a bounded one stops."""

    emitted: frozenset[str] | None
    """Shards output (or ended before the start, their children output instead); None before
    the first listing."""
    deadline: int | None = None
    """Epoch microseconds after which a bounded discovery stops."""
    done: bool = False
    child_start: int | None = None
    """Where shards found later start: AT_TIMESTAMP micros, None = TRIM_HORIZON."""
    created_ms: int | None = None
    """The creation time of the stream the start found (its incarnation)."""


class StartClaim(NamedTuple):
    """The first listing: what it counts as output, and what shards found later inherit."""

    emitted: frozenset[str]
    child_start: int | None
    created_ms: int | None


class EmitClaim(NamedTuple):
    """These shards are about to be output."""

    shard_ids: frozenset[str]
    listed: frozenset[str] | None = None
    """The shard ids of the listing, to forget emitted shards no longer listed; None: keep."""


class DiscoveryDeadlineClaim(NamedTuple):
    deadline_micros: int


class DiscoveryStopClaim(NamedTuple):
    """A bounded discovery is complete."""


DiscoveryClaim = StartClaim | EmitClaim | DiscoveryDeadlineClaim | DiscoveryStopClaim


def shard_restrictions(whole: KinesisRestriction) -> list[KinesisRestriction]:
    """The start of a discovery: the whole-stream restriction cut into one restriction per
    cursor, each owning exactly its shard's range (no shard straddles two restrictions)."""
    return [
        whole._replace(lo=c.lo, hi=c.hi, cursors=(c,), records_left=None) for c in whole.cursors
    ]


def started(whole: KinesisRestriction, listing: Iterable[ShardNode]) -> frozenset[str]:
    """What the start counts as output: the cursors of ``whole`` and their ancestors in the
    listing (ended before the start, or not readable from the start position)."""
    nodes = {n.shard_id: n for n in listing}
    seen: set[str] = set()
    queue = [c.shard_id for c in whole.cursors]
    while queue:
        shard_id = queue.pop()
        if shard_id in seen:
            continue
        seen.add(shard_id)
        node = nodes.get(shard_id)
        if node is not None:
            queue.extend(node.parents)
    return frozenset(seen)


def new_shards(
    listing: Sequence[ShardNode],
    emitted: frozenset[str],
    *,
    child_start: int | None,
    created_ms: int | None,
    watermark: int | None = None,
) -> list[KinesisRestriction]:
    """The listed shards not output yet that descend from an output one (children before
    grandchildren are found in the same pass), each as a one-shard restriction waiting for its
    listed parents, its watermark starting at ``watermark`` (the discovery's). Shards
    descending from nothing output (closed before a LATEST start) are never output."""
    nodes = {n.shard_id: n for n in listing}
    out: list[KinesisRestriction] = []
    known = set(emitted)
    changed = True
    while changed:
        changed = False
        for node in sorted(listing, key=lambda n: n.shard_id):
            if node.shard_id in known or not any(p in known for p in node.parents):
                continue
            known.add(node.shard_id)
            changed = True
            waiting = tuple(
                sorted(ShardRef(p, *nodes[p].hash_range) for p in node.parents if p in nodes)
            )
            lo, hi = node.hash_range
            cursor = ShardCursor(
                node.shard_id, lo, hi, node.parents, waiting, None, child_start, watermark
            )
            out.append(KinesisRestriction(lo, hi, (cursor,), child_start, created_ms=created_ms))
    return out


def parents_ended(
    cursor: ShardCursor, checkpoints: Mapping[str, CheckpointValue]
) -> tuple[bool, Position | None]:
    """Whether every parent ``cursor`` waits for is at SHARD_END in the stored rows (whole or
    part rows covering its range), and the stored position of the shard itself, if any."""
    ranges = {ref.shard_id: (ref.lo, ref.hi) for ref in cursor.waiting_for}
    ranges[cursor.shard_id] = (cursor.lo, cursor.hi)
    values = stored_values(ranges, checkpoints)
    ended = all(values[ref.shard_id] is SHARD_END for ref in cursor.waiting_for)
    own = values[cursor.shard_id]
    return ended, own if isinstance(own, tuple) else None


class DiscoveryTracker(RestrictionTracker):
    """Claims of the discovery; ``try_split(0)`` (its self-checkpoint) gives (primary done,
    residual to go on from); other fractions are refused."""

    def __init__(self, restriction: Discovery, *, bounded: bool = False) -> None:
        self._emitted = restriction.emitted
        self._deadline = restriction.deadline
        self._done = restriction.done
        self._child_start = restriction.child_start
        self._created_ms = restriction.created_ms
        self._bounded = bounded

    def current_restriction(self) -> Discovery:
        return self._snapshot(self._done)

    def _snapshot(self, done: bool) -> Discovery:
        return Discovery(self._emitted, self._deadline, done, self._child_start, self._created_ms)

    def try_claim(self, position: DiscoveryClaim) -> bool:
        if self._done:
            return False
        if isinstance(position, StartClaim):
            self._emitted = position.emitted
            self._child_start = position.child_start
            self._created_ms = position.created_ms
        elif isinstance(position, EmitClaim):
            emitted = self._emitted or frozenset()
            if position.listed is not None:
                emitted = emitted & position.listed
            self._emitted = emitted | position.shard_ids
        elif isinstance(position, DiscoveryDeadlineClaim):
            self._deadline = position.deadline_micros
        elif isinstance(position, DiscoveryStopClaim):
            self._done = True
        else:
            raise ValueError(f"not a discovery claim: {position!r}")
        return True

    def try_split(self, fraction_of_remainder: float) -> tuple[Discovery, Discovery] | None:
        if self._done or fraction_of_remainder != 0:
            return None
        primary, residual = self._snapshot(True), self._snapshot(False)
        self._done = True
        return primary, residual

    def check_done(self) -> None:
        if not self._done:
            raise ValueError("the shard discovery was neither checkpointed nor stopped")

    def current_progress(self) -> RestrictionProgress:
        return RestrictionProgress(  # type: ignore[no-untyped-call]
            completed=0.0, remaining=0.0 if self._done else 1.0
        )

    def is_bounded(self) -> bool:
        return self._bounded


def encode_discovery(discovery: Discovery) -> bytes:
    emitted = None if discovery.emitted is None else sorted(discovery.emitted)
    document = {
        "v": 1,
        "emitted": emitted,
        "deadline": discovery.deadline,
        "done": discovery.done,
        "child_start": discovery.child_start,
        "created_ms": discovery.created_ms,
    }
    return json.dumps(document, sort_keys=True, separators=(",", ":")).encode()


def decode_discovery(encoded: bytes) -> Discovery:
    document = json.loads(encoded)
    if document.get("v") != 1:
        raise ValueError(f"unknown shard discovery encoding version {document.get('v')!r}")
    emitted = document["emitted"]
    return Discovery(
        None if emitted is None else frozenset(emitted),
        document["deadline"],
        document["done"],
        document["child_start"],
        document["created_ms"],
    )


class DiscoveryCoder(DeterministicCoder):
    """Deterministic JSON, shard ids sorted."""

    def encode(self, value: Discovery) -> bytes:
        return encode_discovery(value)

    def decode(self, encoded: bytes) -> Discovery:
        return decode_discovery(encoded)
