"""The dedup window's size per shard at 10,000 records/s, by the kind of record ids: pure
computation with ``DedupWindow`` under its default bounds (``max_age`` 600 s, ``max_ids``
10,000,000, ``max_bytes`` 128 KiB), no server.

Traffic: one shard, 10,000 records/s in aggregates of 100 records (an aggregate's records share
their arrival time, one aggregate every 10 ms), each record's id taken as a deduplicating
consumer takes it (a run of ``ORIGIN:COUNTER`` ids in one step, the callers' ids of an
aggregate together, as a chunk, any other id one by one):

* (a) automatic ids from one producer: one run of consecutive counters per aggregate;
* (b) automatic ids from 10 producers, their aggregates interleaved in the shard;
* (c) caller-given ids, ``str(uuid4())``;
* (d) derived ids (``derived_record_id``, one output per input) of inputs that were aggregated:
  100 inputs share a sequence number, with sub-sequence numbers 0 to 99: one run per input
  aggregate (an output aggregate holding the outputs of one input aggregate, as the Faust
  sink's ``derived_partition_key`` routes them);
* (e) derived ids of inputs not aggregated: a sequence number each, sub-sequence number 0.

Ids taken one by one (c, e) fill the 128 KiB within a second, after which the window forgets
the oldest as it takes each new one: of those, the first aggregate (the window counts arrival
times from it) and the last ``TAIL`` seconds of the ``SECONDS`` are taken, which leaves the
window all ``SECONDS`` would leave (checked: it holds less than ``TAIL`` seconds).

Printed for each: the window's serialised bytes (``dumps``, what the checkpoint row stores)
after 60 s of traffic, and how many seconds of the newest traffic the window holds (every id of
it): after 60 s, and for (a) and (b), whose bytes do not grow with the traffic, after
``LONG_SECONDS``, when ``max_ids`` binds.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from benchmarks._table import Row
from kinesis_core.consumer.dedup import (
    DEFAULT_MAX_AGE,
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_IDS,
    DedupWindow,
)
from kinesis_core.record_ids import automatic_origin, derived_record_id, split_counter

RATE = 10_000
"""Records per second into the shard."""
AGGREGATE = 100
"""Records per aggregate: one arrival time each."""
SECONDS = 60
LONG_SECONDS = 1_100
"""Seconds of traffic for the ids whose window does not grow: past ``max_ids`` / ``RATE``."""
TAIL = 2
"""Seconds of traffic at the end of the ``SECONDS`` whose ids are taken one by one (the
docstring): the window of ``max_bytes`` holds less than this."""
START = 1_767_225_600.0
"""The first arrival (epoch seconds)."""
SHARD = "shardId-000000000003"
PRODUCERS = 10
INCARNATION = 1_767_225_000_000
SEQUENCE = 49_590_338_271_490_256_608_559_692_538_361_571_095_921_575_989_136_588_898
"""A Kinesis sequence number (56 digits); the next ones follow at ``SEQUENCE_STEP``."""
SEQUENCE_STEP = 2**64 + 17
GROUP = (
    f"dedup window per shard after {SECONDS} s at {RATE:,} records/s, default bounds"
    " (lower is better)"
)
HELD_GROUP = f"seconds of traffic one shard's window holds at {RATE:,} records/s, default bounds"


def _session(n: int) -> str:
    return f"Session{n:05d}"


def _arrival(aggregate: int) -> float:
    return START + aggregate * AGGREGATE / RATE


@dataclass(frozen=True)
class Traffic:
    """A shard's records, the ``i``-th with ``record_id(i)``; ``run(k)``: the ``k``-th
    aggregate's automatic ids as ``(origin, low, high)``, or None for ids taken one by one."""

    subject: str
    record_id: Callable[[int], str]
    run: Callable[[int], tuple[str, int, int]] | None = None
    seconds: int = SECONDS


def _one_producer() -> Traffic:
    origin = automatic_origin(_session(0), SHARD)

    def run(k: int) -> tuple[str, int, int]:
        return origin, k * AGGREGATE, (k + 1) * AGGREGATE - 1

    return Traffic(
        "(a) automatic ids, 1 producer", lambda i: f"{origin}:{i}", run, seconds=LONG_SECONDS
    )


def _producers() -> Traffic:
    origins = [automatic_origin(_session(n), SHARD) for n in range(PRODUCERS)]

    def run(k: int) -> tuple[str, int, int]:
        low = k // PRODUCERS * AGGREGATE
        return origins[k % PRODUCERS], low, low + AGGREGATE - 1

    def record_id(i: int) -> str:
        origin, low, _ = run(i // AGGREGATE)
        return f"{origin}:{low + i % AGGREGATE}"

    return Traffic(
        f"(b) automatic ids, {PRODUCERS} producers interleaved",
        record_id,
        run,
        seconds=LONG_SECONDS,
    )


def _uuid4(i: int) -> str:
    """A uuid4 string, the same for the same ``i`` (the traffic is read back by index)."""
    return str(uuid.UUID(bytes=hashlib.md5(i.to_bytes(8, "big")).digest(), version=4))


def _derived_aggregated() -> Traffic:
    def record_id(i: int) -> str:
        sequence = SEQUENCE + i // AGGREGATE * SEQUENCE_STEP
        return derived_record_id(INCARNATION, SHARD, sequence, i % AGGREGATE)

    def run(k: int) -> tuple[str, int, int]:
        split = split_counter(record_id(k * AGGREGATE))
        assert split is not None
        return split[0], 0, AGGREGATE - 1

    return Traffic("(d) derived ids, inputs aggregated", record_id, run)


def _derived_alone(i: int) -> str:
    return derived_record_id(INCARNATION, SHARD, SEQUENCE + i * SEQUENCE_STEP, 0)


TRAFFIC = [
    _one_producer(),
    _producers(),
    Traffic("(c) caller-given ids, uuid4", _uuid4),
    _derived_aggregated(),
    Traffic("(e) derived ids, inputs not aggregated", _derived_alone),
]


def _feed(window: DedupWindow, traffic: Traffic, first: int, last: int) -> None:
    """Take the ids of aggregates ``first`` to ``last - 1``."""
    for k in range(first, last):
        arrival = _arrival(k)
        if traffic.run is not None:
            window.seen_run(*traffic.run(k), arrival)
            continue
        ids = [traffic.record_id(i) for i in range(k * AGGREGATE, (k + 1) * AGGREGATE)]
        if ":" not in "".join(ids):  # a caller's ids: taken together, as the consumer does
            if window.seen_ids(ids, arrival) is not None:
                raise AssertionError(f"{traffic.subject}: aggregate {k} has a duplicate")
            continue
        for i in range(k * AGGREGATE, (k + 1) * AGGREGATE):
            if window.seen(traffic.record_id(i), arrival):
                raise AssertionError(f"{traffic.subject}: record {i} taken for a duplicate")


def _held(window: DedupWindow, traffic: Traffic, aggregates: int) -> int:
    """How many of the newest records the window holds every id of. An aggregate's first id is
    its oldest one, which the window forgets first."""
    k = aggregates - 1
    while k >= 0 and traffic.record_id(k * AGGREGATE) in window:
        k -= 1
    if k < 0:
        return aggregates * AGGREGATE
    i = (k + 1) * AGGREGATE - 1
    while i >= k * AGGREGATE and traffic.record_id(i) in window:
        i -= 1
    return aggregates * AGGREGATE - 1 - i


@dataclass(frozen=True)
class Measured:
    bytes_: int
    entries: int
    ids: int
    held: int
    """Records at ``SECONDS``."""
    held_long: int
    """Records at ``traffic.seconds``."""
    bytes_long: int


def measure(traffic: Traffic) -> Measured:
    """The window after ``SECONDS`` and ``traffic.seconds`` of traffic."""
    window = DedupWindow(
        max_age=DEFAULT_MAX_AGE, max_ids=DEFAULT_MAX_IDS, max_bytes=DEFAULT_MAX_BYTES
    )
    per_second = RATE // AGGREGATE
    short = SECONDS * per_second
    if traffic.run is None:  # the first aggregate, then the last TAIL seconds (the docstring)
        _feed(window, traffic, 0, 1)
        _feed(window, traffic, short - TAIL * per_second, short)
    else:
        _feed(window, traffic, 0, short)
    text = window.dumps().encode()
    found = (len(text), window.entries, len(window), _held(window, traffic, short))
    if traffic.run is None and found[-1] >= TAIL * RATE:
        raise AssertionError(f"{traffic.subject}: the window holds more than {TAIL} s")
    long = traffic.seconds * per_second
    _feed(window, traffic, short, long)
    return Measured(*found, _held(window, traffic, long), len(window.dumps().encode()))


def run(quick: bool) -> list[Row]:
    """The same with ``quick``: it takes a few seconds."""
    found = {traffic.subject: (traffic, measure(traffic)) for traffic in TRAFFIC}
    rows: list[Row] = []
    for subject, (_, m) in found.items():
        per_id = f"; {m.bytes_ / m.ids:.1f} B per id" if m.entries == m.ids else ""
        entries = f"{m.entries:,} {'entry' if m.entries == 1 else 'entries'}"
        rows.append(
            Row(
                GROUP,
                subject,
                m.bytes_,
                "B",
                note=f"{entries}, {m.ids:,} ids{per_id}",
            )
        )
    for subject, (traffic, m) in found.items():
        if m.held_long > m.held:
            note = (
                f"{m.held / RATE:,.0f} s after {SECONDS} s; after {traffic.seconds} s"
                f" {m.held_long / RATE:,.0f} s: max_ids ({DEFAULT_MAX_IDS:,}) binds,"
                f" bytes stay {m.bytes_long:,} B"
            )
            held = m.held_long
        else:
            held = m.held
            note = f"max_bytes ({DEFAULT_MAX_BYTES:,} B) binds: {m.held:,} records"
        rows.append(Row(HELD_GROUP, subject, held / RATE, "s", note=note))
    return rows
