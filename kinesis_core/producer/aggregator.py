"""Per-shard aggregation: user records predicted for one shard share one KPL aggregate.

Each shard has one open :class:`~kinesis_core.aggregation.AggregateBuilder`. A record joins the
open aggregate of its predicted shard; the aggregate is sealed into a Kinesis record when the next
record does not fit (the builder's exact size, ``aggregation_max_size``), when it holds
``aggregation_max_count`` records, when its earliest deadline passes (``poll``), or on ``flush``.
Records with no predicted shard, records too big for an aggregate, and every record when
aggregation is off go out as plain Kinesis records: an aggregate is only ever made of records
predicted for the same shard, so a KCL reader keeps all of it. A record bigger than
``max_size`` on its own is never aggregated and never waits: it seals the shard's open aggregate
(which keeps the shard's order) and is sealed at once, alone.

``max_size`` may change while records flow (the stream's maximum record size is learned at run
time and bounds it): a shard's builder takes the new size once its aggregate is sealed.

With ``record_ids`` every record carries its id in its aggregate's tags
(docs/effectively-once.md): a caller's id in a tag of its own; automatic ids as runs, one tag
on the record that starts a run and none on the records whose counters follow (a run of
records with consecutive counters goes in by runs, as records without ids do). A record that
goes alone goes as a one-record aggregate, so that it keeps its id; only a record too big to
be framed within the stream's maximum record size (``record_limit``) goes raw, without its id.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from kinesis_core.aggregation import AggregateBuilder
from kinesis_core.producer.items import KinesisRecordOut, UserRecord
from kinesis_core.shards.hashing import LARGEST_RECORD_BYTES

_INF = float("inf")


class _ShardBuffer:
    __slots__ = ("builder", "deadline", "expiration", "records", "since_sum")

    def __init__(self, builder: AggregateBuilder) -> None:
        self.builder = builder
        self.records: list[UserRecord] = []
        self.deadline = _INF
        self.expiration = _INF
        self.since_sum = 0.0


class Aggregator:
    """Sans-I/O: ``add``, ``extend``, ``poll`` and ``flush`` append to ``sealed``."""

    def __init__(
        self,
        *,
        enabled: bool,
        max_size: int,
        max_count: int,
        record_ttl: float,
        builder_factory: Callable[[int], AggregateBuilder] = AggregateBuilder,
        record_ids: bool = False,
    ) -> None:
        self.enabled = enabled
        self.record_ids = record_ids
        """Tag records with their ids, and frame a record sent alone."""
        self.record_limit = LARGEST_RECORD_BYTES
        """The stream's maximum record size (a framed record sent alone stays within it)."""
        self.max_size = max_size
        self.max_count = max_count
        self.record_ttl = record_ttl
        self._builder_factory = builder_factory
        self._buffers: dict[str, _ShardBuffer] = {}
        self._min_deadline = _INF
        self.sealed: list[KinesisRecordOut] = []
        """Kinesis records sealed and not yet taken by the caller (it clears the list)."""

    def add(self, ur: UserRecord, shard_id: str | None, now: float, deadline: float) -> None:
        """Buffer ``ur`` for ``shard_id`` (None: unknown); it must be sent by ``deadline``."""
        self.extend(shard_id, (ur,), now, deadline)

    def extend(
        self,
        shard_id: str | None,
        urs: Sequence[UserRecord],
        now: float,
        deadline: float,
        run: bool = False,
    ) -> None:
        """Buffer a run of records predicted for ``shard_id`` that share their arrival time.

        One call per shard and batch; records without explicit hash keys (the usual case) go
        into the shard's aggregate by runs (``AggregateBuilder.add_run``), one call per
        aggregate filled rather than one per record. With ``record_ids``, that holds for a
        ``run``: records with automatic ids of one origin and consecutive counters, and no
        caller's id; other records with ids go record by record.
        """
        if shard_id is None or not self.enabled:
            for ur in urs:
                self._single(ur, shard_id, now, deadline)
            return
        max_size = self.max_size
        buf = self._buffers.get(shard_id)
        if buf is None:
            buf = self._buffers[shard_id] = _ShardBuffer(self._builder_factory(max_size))
        elif not buf.records and buf.builder.max_size != max_size:
            buf.builder = self._builder_factory(max_size)
        expiration = urs[0].arrival + self.record_ttl
        if self.record_ids and not run:
            self._extend_each(buf, shard_id, urs, now, deadline, expiration)
            return
        # Comprehensions, not map(attrgetter): a struct's field is read twice as fast that way.
        keys = [ur.partition_key for ur in urs if ur.explicit_hash_key is None]
        if len(keys) != len(urs):
            self._extend_each(buf, shard_id, urs, now, deadline, expiration)
            return
        max_count = self.max_count
        datas = [ur.data for ur in urs]
        total = len(urs)
        pos = 0
        added = 0
        if run and buf.records:
            # The first record continues the open aggregate's run of ids, or starts one in it
            # with a tag; the rest of the run then follows with no tag.
            if not self._try_add(buf, urs[0]):
                self._seal(shard_id, buf)
            else:
                pos = added = 1
        while pos < total:
            records = buf.records
            if not records:
                added = self._start(buf, urs[pos], shard_id, now, deadline)
                pos += 1
                continue
            end = buf.builder.add_run(keys, datas, pos, min(total, pos + max_count - len(records)))
            records += urs[pos:end]
            added += end - pos
            pos = end
            if pos < total:  # the next record does not fit, or the aggregate is full
                self._settle(buf, added, now, deadline, expiration)
                self._seal(shard_id, buf)
                added = 0
        if added:
            self._settle(buf, added, now, deadline, expiration)

    def _extend_each(
        self,
        buf: _ShardBuffer,
        shard_id: str,
        urs: Sequence[UserRecord],
        now: float,
        deadline: float,
        expiration: float,
    ) -> None:
        """``extend`` record by record, for a run holding explicit hash keys or record ids."""
        added = 0
        for ur in urs:
            if buf.records:
                if self._try_add(buf, ur):
                    added += 1
                    continue
                self._settle(buf, added, now, deadline, expiration)
                self._seal(shard_id, buf)
            added = self._start(buf, ur, shard_id, now, deadline)
        if added:
            self._settle(buf, added, now, deadline, expiration)

    def _try_add(self, buf: _ShardBuffer, ur: UserRecord) -> bool:
        """Add ``ur`` to ``buf``'s aggregate if it has room (count and size)."""
        if len(buf.records) < self.max_count and buf.builder.try_add(
            ur.partition_key,
            ur.explicit_hash_key,
            ur.data,
            ur.record_id,
            ur.id_origin,
            ur.id_counter,
        ):
            buf.records.append(ur)
            return True
        return False

    def _start(
        self, buf: _ShardBuffer, ur: UserRecord, shard_id: str, now: float, deadline: float
    ) -> int:
        """Start ``buf``'s empty aggregate with ``ur``; returns 1, or 0 when ``ur`` is bigger
        than an aggregate may weigh: then it is never aggregated and goes alone at once."""
        pk = ur.partition_key
        if len(ur.data) + len(pk.encode()) <= self.max_size and buf.builder.try_add(
            pk, ur.explicit_hash_key, ur.data, ur.record_id, ur.id_origin, ur.id_counter
        ):
            buf.records.append(ur)
            return 1
        self._single(ur, shard_id, now, deadline)
        return 0

    def _settle(
        self, buf: _ShardBuffer, added: int, now: float, deadline: float, expiration: float
    ) -> None:
        """Account ``added`` records just put in ``buf``: timing sums, deadline, expiration."""
        buf.since_sum += now * added
        if deadline < buf.deadline:
            buf.deadline = deadline
            if deadline < self._min_deadline:
                self._min_deadline = deadline
        if expiration < buf.expiration:
            buf.expiration = expiration

    def poll(self, now: float) -> None:
        """Seal every aggregate whose deadline has come."""
        if self._min_deadline > now:
            return
        next_deadline = _INF
        for shard_id, buf in list(self._buffers.items()):
            if not buf.records:
                del self._buffers[shard_id]
            elif buf.deadline <= now:
                self._seal(shard_id, buf)
            elif buf.deadline < next_deadline:
                next_deadline = buf.deadline
        self._min_deadline = next_deadline

    def flush(self) -> None:
        """Seal every open aggregate now."""
        for shard_id, buf in self._buffers.items():
            if buf.records:
                self._seal(shard_id, buf)
        self._min_deadline = _INF

    def next_deadline(self) -> float | None:
        """Earliest deadline of an open aggregate (may be early: ``poll`` then finds nothing)."""
        return None if self._min_deadline == _INF else self._min_deadline

    def take_all(self) -> list[UserRecord]:
        """Empty every open aggregate (shutdown or crash) and return its records."""
        out: list[UserRecord] = []
        for buf in self._buffers.values():
            out.extend(buf.records)
        self._buffers.clear()
        self._min_deadline = _INF
        return out

    @property
    def buffered(self) -> int:
        """User records in open aggregates."""
        return sum(len(buf.records) for buf in self._buffers.values())

    def alone(
        self, urs: Sequence[UserRecord], shard_id: str | None, now: float, deadline: float
    ) -> None:
        """Send each of ``urs`` as a plain Kinesis record of its own (the records of an
        aggregate the service refused, sent one by one to find the one it refuses)."""
        for ur in urs:
            self._single(ur, shard_id, now, deadline)

    def seal_now(
        self,
        shard_id: str | None,
        urs: Sequence[UserRecord],
        now: float,
        deadline: float,
        *,
        plain: bool = False,
    ) -> list[KinesisRecordOut]:
        """Aggregate ``urs`` among themselves, in order (each alone with ``plain``), and return
        the sealed Kinesis records at once, leaving the shard's open aggregate alone: retries
        that must not be overtaken by records buffered after them (``preserve_order``)."""
        if shard_id is None or plain or not self.enabled:
            return [self._plain(ur, shard_id, now, deadline) for ur in urs]
        out: list[KinesisRecordOut] = []
        buf = _ShardBuffer(self._builder_factory(self.max_size))
        for ur in urs:
            if not self._try_add(buf, ur):
                if buf.records:
                    out.append(self._build(shard_id, buf))
                if not self._try_add(buf, ur):
                    out.append(self._plain(ur, shard_id, now, deadline))
                    continue
            buf.since_sum += now
            buf.deadline = min(buf.deadline, deadline)
            buf.expiration = min(buf.expiration, ur.arrival + self.record_ttl)
        if buf.records:
            out.append(self._build(shard_id, buf))
        return out

    def _seal(self, shard_id: str, buf: _ShardBuffer) -> None:
        self.sealed.append(self._build(shard_id, buf))

    def _build(self, shard_id: str, buf: _ShardBuffer) -> KinesisRecordOut:
        """The Kinesis record of ``buf``'s aggregate; empties ``buf``."""
        builder = buf.builder
        records = buf.records
        kr = KinesisRecordOut(
            builder.build(),
            builder.container_partition_key,
            builder.container_explicit_hash_key,
            records,
            shard_id,
            builder.size,
            buf.deadline,
            buf.expiration,
            buf.since_sum / len(records),
            builder.data_size,
            builder.payload,
        )
        builder.clear()
        if builder.max_size != self.max_size:
            buf.builder = self._builder_factory(self.max_size)
        buf.records = []
        buf.deadline = _INF
        buf.expiration = _INF
        buf.since_sum = 0.0
        return kr

    def _single(self, ur: UserRecord, shard_id: str | None, now: float, deadline: float) -> None:
        self.sealed.append(self._plain(ur, shard_id, now, deadline))

    def _plain(
        self, ur: UserRecord, shard_id: str | None, now: float, deadline: float
    ) -> KinesisRecordOut:
        pk = ur.partition_key
        data = ur.data
        if self.record_ids and (ur.record_id is not None or ur.id_origin is not None):
            builder = self._builder_factory(self.record_limit)
            if builder.try_add(
                pk, ur.explicit_hash_key, data, ur.record_id, ur.id_origin, ur.id_counter
            ):
                return KinesisRecordOut(
                    builder.build(),
                    pk,
                    ur.explicit_hash_key,
                    [ur],
                    shard_id,
                    builder.size,
                    deadline,
                    ur.arrival + self.record_ttl,
                    now,
                    len(data),
                    len(data) + len(pk),
                )
        return KinesisRecordOut(
            data,
            pk,
            ur.explicit_hash_key,
            [ur],
            shard_id,
            len(data) + len(pk.encode("utf-8")),
            deadline,
            ur.arrival + self.record_ttl,
            now,
            len(data),
            len(data) + len(pk),
        )
