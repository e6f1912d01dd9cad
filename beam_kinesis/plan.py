"""The read plan of ``ReadFromKinesis``, as values and pure functions: restrictions, the
initial restriction and its split, checkpoint keys, what a bundle commits, and the wire form.

Sans-I/O and free of Beam (the purity test holds it to that): the Beam ``RestrictionTracker``
and ``Coder`` that wrap these values are in :mod:`beam_kinesis.restriction`.

A :class:`KinesisRestriction` owns the hash keys ``[lo, hi]``. It emits only records whose
hash key lies in that range, and holds a :class:`ShardCursor` for every shard it still has to
read there. A cursor stores positions, never shard iterators (they expire after five
minutes): the last (sequence number, sub-sequence number) this restriction consumed, or, for a
shard not started yet, where to start (AT_TIMESTAMP or TRIM_HORIZON).

Parent before child with no coordination between restrictions: when a shard ends, the
restriction that read it adopts the children whose ranges meet its own. A child waits
(``waiting_for``) for every parent whose range meets the restriction's range, and for no other:
a merged child that straddles two restrictions is read by both, each after its own parent
ended, and each emits only its own keys. Per-key order holds because a key of this range only
ever lived in the parents that meet this range, and this restriction read those to their end
first. See docs/beam-read.md.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from itertools import pairwise
from typing import Any, NamedTuple

from kinesis_core.checkpoint.base import SHARD_END, CheckpointValue, checkpoint_order
from kinesis_core.consumer.lineage import ShardNode
from kinesis_core.records import Position
from kinesis_core.shards.hashing import MAX_HASH_KEY

CODER_VERSION = 2
"""Version 2 added each cursor's ``backlog``; version 1 restrictions still decode."""
PART_SEPARATOR = "@"
"""Checkpoint key of a part of a shard: ``<shard id>@<lo>-<hi>`` (decimal hash keys)."""


class ShardRef(NamedTuple):
    """A shard and its hash-key range: a parent a cursor waits for."""

    shard_id: str
    lo: int
    hi: int


class ShardCursor(NamedTuple):
    """One shard of a restriction: where its reading stands."""

    shard_id: str
    lo: int
    hi: int
    parents: tuple[str, ...]
    waiting_for: tuple[ShardRef, ...]
    """Parents meeting the restriction's range that have not ended yet; read only when empty."""
    position: Position | None
    """The last position consumed here (emitted or filtered out), None before the first."""
    start: int | None
    """Where to start when ``position`` is None: AT_TIMESTAMP (epoch microseconds) or, for
    None, TRIM_HORIZON."""
    watermark: int | None
    """Epoch microseconds no later record of this shard is expected before, None if unknown."""
    backlog: int | None = None
    """Estimated bytes of this shard not read yet (:mod:`beam_kinesis.backlog`), None before
    its first response."""

    @property
    def readable(self) -> bool:
        return not self.waiting_for


class KinesisRestriction(NamedTuple):
    """Hash keys ``[lo, hi]`` and the cursors of the shards to read in that range."""

    lo: int
    hi: int
    cursors: tuple[ShardCursor, ...]
    """Sorted by shard id."""
    child_start: int | None
    """Start of a child adopted when its parent ends: AT_TIMESTAMP micros, None = TRIM_HORIZON."""
    records_left: int | None = None
    """What is left of ``max_records``; None: no limit."""
    deadline: int | None = None
    """Epoch microseconds after which a bounded read stops (set by its first process call)."""
    done: bool = False
    """Nothing more to do: the primary of a checkpoint, or a bounded read that stopped."""
    created_ms: int | None = None
    """The creation time (epoch ms) of the stream the positions belong to (its incarnation):
    what the positions are checkpointed with; None in restrictions encoded before it was
    kept."""


def overlaps(lo: int, hi: int, other_lo: int, other_hi: int) -> bool:
    return lo <= other_hi and other_lo <= hi


def restriction_watermark(restriction: KinesisRestriction) -> int | None:
    """The minimum over the readable shards' watermarks; None while any of them is unknown.

    Waiting children are left out: their records arrive after their parents' records.
    """
    marks = [c.watermark for c in restriction.cursors if c.readable]
    if not marks or None in marks:
        return None
    return min(m for m in marks if m is not None)


def restriction_backlog(restriction: KinesisRestriction) -> int:
    """The estimated bytes left to read in ``restriction``: the sum of its cursors' backlogs
    (a cursor not read yet counts 0)."""
    return sum(c.backlog or 0 for c in restriction.cursors)


def parent_refs(child: ShardNode, ended: ShardRef, known: Mapping[str, ShardRef]) -> list[ShardRef]:
    """The parents of ``child`` with their ranges. ChildShards gives the child's range only;
    the other parent of a merge owns the part of it the ended parent does not."""
    lo, hi = child.hash_range
    refs = []
    for parent in child.parents:
        if parent == ended.shard_id:
            refs.append(ended)
        elif parent in known:
            refs.append(known[parent])
        elif len(child.parents) == 2 and ended.lo <= lo:
            refs.append(ShardRef(parent, ended.hi + 1, hi))
        elif len(child.parents) == 2:
            refs.append(ShardRef(parent, lo, ended.lo - 1))
        else:
            refs.append(ShardRef(parent, lo, hi))
    return refs


# -- the initial restriction and the initial split --------------------------------------------


def checkpoint_key(cursor: ShardCursor | ShardRef, lo: int, hi: int) -> str:
    """The checkpoint-store key of ``cursor``'s progress in a restriction owning [lo, hi]: the
    shard id when the whole shard lies inside, ``shard@lo-hi`` for the part inside otherwise
    (a straddling merged shard is read by two restrictions, each with its own position)."""
    if lo <= cursor.lo and cursor.hi <= hi:
        return cursor.shard_id
    return f"{cursor.shard_id}{PART_SEPARATOR}{max(lo, cursor.lo)}-{min(hi, cursor.hi)}"


def parse_checkpoint_key(key: str) -> tuple[str, tuple[int, int] | None]:
    """``(shard id, None)`` for a whole-shard key, ``(shard id, (lo, hi))`` for a part key."""
    shard_id, sep, part = key.partition(PART_SEPARATOR)
    if not sep:
        return shard_id, None
    lo, _, hi = part.partition("-")
    return shard_id, (int(lo), int(hi))


def resume_value(
    lo: int, hi: int, rows: Sequence[tuple[int, int, CheckpointValue]]
) -> CheckpointValue | None:
    """Where every key of a shard's range [lo, hi] is done, from whole and part rows.

    Each row (row_lo, row_hi, value) says: the keys in its range are consumed up to value. A
    key covered by several rows takes the furthest; the shard takes the least over its keys;
    a key no row covers makes it None (start from the beginning).
    """
    cuts = {lo, hi + 1}
    for row_lo, row_hi, _ in rows:
        cuts.update(p for p in (row_lo, row_hi + 1) if lo < p <= hi)
    points = sorted(cuts)
    result: CheckpointValue | None = None
    for start, stop in pairwise(points):
        covering = [v for row_lo, row_hi, v in rows if row_lo <= start and stop - 1 <= row_hi]
        if not covering:
            return None
        best = max(covering, key=checkpoint_order)
        if result is None or checkpoint_order(best) < checkpoint_order(result):
            result = best
    return result


def stored_values(
    ranges: Mapping[str, tuple[int, int]], checkpoints: Mapping[str, CheckpointValue]
) -> dict[str, CheckpointValue | None]:
    """Where each shard of ``ranges`` (shard id -> its hash range) is done, from the stored
    rows (whole-shard and part keys, see :func:`resume_value`); None where nothing is."""
    rows: dict[str, list[tuple[int, int, CheckpointValue]]] = defaultdict(list)
    for key, stored in checkpoints.items():
        shard_id, part = parse_checkpoint_key(key)
        hash_range = ranges.get(shard_id)
        if hash_range is not None:
            rows[shard_id].append((*(part or hash_range), stored))
    return {
        shard_id: resume_value(*hash_range, rows[shard_id]) if shard_id in rows else None
        for shard_id, hash_range in ranges.items()
    }


def initial_restriction(
    shards: Iterable[ShardNode],
    checkpoints: Mapping[str, CheckpointValue],
    *,
    start: int | None,
    child_start: int | None,
    records_left: int | None = None,
    created_ms: int | None = None,
) -> KinesisRestriction:
    """The whole key space with the shards to read first, from a listing and stored rows
    (of the stream created at ``created_ms``).

    The listing's roots (shards with no listed parent) start at ``start``; a shard whose every
    key is checkpointed at SHARD_END hands over to its children, which start at
    ``child_start``; a checkpointed position resumes after it. A child waits for its listed
    parents that have not ended.
    """
    nodes = {node.shard_id: node for node in shards}
    values = stored_values({k: n.hash_range for k, n in nodes.items()}, checkpoints)
    children: dict[str, list[ShardNode]] = defaultdict(list)
    for node in nodes.values():
        for parent in node.parents:
            children[parent].append(node)
    roots = sorted(
        (n for n in nodes.values() if not any(p in nodes for p in n.parents)),
        key=lambda n: n.shard_id,
    )
    queue = list(roots)
    root_ids = frozenset(n.shard_id for n in roots)
    seen = set(root_ids)
    cursors = []
    for node in queue:
        value = values[node.shard_id]
        if value is SHARD_END:
            for child in sorted(children[node.shard_id], key=lambda n: n.shard_id):
                if child.shard_id not in seen:
                    seen.add(child.shard_id)
                    queue.append(child)
            continue
        waiting = tuple(
            sorted(
                ShardRef(p, *nodes[p].hash_range)
                for p in node.parents
                if p in nodes and values[p] is not SHARD_END
            )
        )
        lo, hi = node.hash_range
        cursors.append(
            ShardCursor(
                node.shard_id,
                lo,
                hi,
                node.parents,
                waiting,
                value if isinstance(value, tuple) else None,
                start if node.shard_id in root_ids else child_start,
                None,
            )
        )
    cursors.sort(key=lambda c: c.shard_id)
    return KinesisRestriction(
        0, MAX_HASH_KEY, tuple(cursors), child_start, records_left, created_ms=created_ms
    )


def narrow(restriction: KinesisRestriction, lo: int, hi: int) -> KinesisRestriction:
    """The part of ``restriction`` that owns [lo, hi]: the cursors meeting it, each waiting
    only for the parents that meet it."""
    cursors = []
    for c in restriction.cursors:
        if overlaps(c.lo, c.hi, lo, hi):
            waiting = tuple(w for w in c.waiting_for if overlaps(w.lo, w.hi, lo, hi))
            cursors.append(c._replace(waiting_for=waiting))
    return restriction._replace(lo=lo, hi=hi, cursors=tuple(cursors))


def partition(restriction: KinesisRestriction) -> list[KinesisRestriction]:
    """The initial split: one restriction per readable shard's range (the shards open at the
    start position), plus one per gap no readable shard covers. Unsplittable (returned whole)
    if readable ranges overlap, which a consistent listing never gives."""
    lo, hi = restriction.lo, restriction.hi
    ranges = sorted(
        (max(c.lo, lo), min(c.hi, hi))
        for c in restriction.cursors
        if c.readable and overlaps(c.lo, c.hi, lo, hi)
    )
    segments = []
    next_key = lo
    for start, stop in ranges:
        if start < next_key:
            return [restriction]
        if start > next_key:
            segments.append((next_key, start - 1))
        segments.append((start, stop))
        next_key = stop + 1
    if next_key <= hi:
        segments.append((next_key, hi))
    return [narrow(restriction, start, stop) for start, stop in segments]


def commit_values(
    restriction: KinesisRestriction,
    before: Mapping[str, Position | None],
    ended: Iterable[ShardCursor],
) -> list[tuple[str, CheckpointValue, tuple[str, ...]]]:
    """What a bundle's finalizer writes: (key, value, parents) for every shard whose position
    moved since ``before`` (shard id -> position at the start of the bundle) and SHARD_END for
    every shard that ended in the bundle."""
    out: list[tuple[str, CheckpointValue, tuple[str, ...]]] = []
    lo, hi = restriction.lo, restriction.hi
    for c in restriction.cursors:
        if c.position is not None and before.get(c.shard_id) != c.position:
            out.append((checkpoint_key(c, lo, hi), c.position, c.parents))
    for c in ended:
        out.append((checkpoint_key(c, lo, hi), SHARD_END, c.parents))
    return out


# -- the coder -----------------------------------------------------------------------------------


def _position_json(position: Position | None) -> list[Any] | None:
    return None if position is None else [str(position[0]), position[1]]


def encode_restriction(restriction: KinesisRestriction) -> bytes:
    """Deterministic JSON: cursors sorted by shard id, hash keys and sequence numbers as
    decimal strings (they exceed every fixed-width integer), times as integer microseconds."""
    document = {
        "v": CODER_VERSION,
        "lo": str(restriction.lo),
        "hi": str(restriction.hi),
        "child_start": restriction.child_start,
        "records_left": restriction.records_left,
        "deadline": restriction.deadline,
        "done": restriction.done,
        "created_ms": restriction.created_ms,
        "cursors": [
            [
                c.shard_id,
                str(c.lo),
                str(c.hi),
                list(c.parents),
                [[w.shard_id, str(w.lo), str(w.hi)] for w in sorted(c.waiting_for)],
                _position_json(c.position),
                c.start,
                c.watermark,
                c.backlog,
            ]
            for c in sorted(restriction.cursors, key=lambda c: c.shard_id)
        ],
    }
    return json.dumps(document, sort_keys=True, separators=(",", ":")).encode()


def decode_restriction(encoded: bytes) -> KinesisRestriction:
    document = json.loads(encoded)
    if document.get("v") not in (1, CODER_VERSION):
        raise ValueError(f"unknown Kinesis restriction encoding version {document.get('v')!r}")
    cursors = tuple(
        ShardCursor(
            shard_id,
            int(lo),
            int(hi),
            tuple(parents),
            tuple(ShardRef(w, int(wlo), int(whi)) for w, wlo, whi in waiting),
            None if position is None else (int(position[0]), position[1]),
            start,
            watermark,
            *backlog,
        )
        for shard_id, lo, hi, parents, waiting, position, start, watermark, *backlog in document[
            "cursors"
        ]
    )
    return KinesisRestriction(
        int(document["lo"]),
        int(document["hi"]),
        cursors,
        document["child_start"],
        document["records_left"],
        document["deadline"],
        document["done"],
        document.get("created_ms"),
    )
