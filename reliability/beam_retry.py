"""A Beam write bundle retried after its worker was SIGKILLed mid-bundle, read by record id.

A pipeline on the portable runner (:mod:`reliability._portable`: a job service and a worker
pool, the SDK worker a process of its own) writes ``elements`` keyed elements to a moto stream
with ``WriteToKinesis(record_id_fn=element_id)``, all in one bundle: an ``Impulse`` expanded
to the elements, fused with the sink. The first attempt holds the bundle at element ``hold``
(a marker file says it is the first), after the sink handed the elements before it to the
producer in full chunks (``CHUNK_RECORDS``); once the stream holds those records, the SDK
worker is SIGKILLed from outside. The job service retries no bundle and the job hangs: it is
cancelled and the job runs again (what Flink's restart or Dataflow's work item retry
amounts to), writing every element again under the same ids.

Then the stream is read twice with the core Consumer from the trim horizon
(:func:`reliability._reader.read_stream`):

- **raw**: every record as delivered; its duplicates are the copies the retry wrote (must be
  more than 0, or the kill was not mid-bundle);
- **deduplicated**: ``ConsumerConfig(deduplicate=True)``, its checkpoints in a SQLite file:
  lost (elements never read) must be 0, and duplicates 0 by record id and by element.

Elements with the same key go to the same shard, so a copy lands in the shard of its first
write, where that shard's window holds its id.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import apache_beam as beam

from beam_kinesis import WriteToKinesis
from beam_kinesis.write import CHUNK_RECORDS
from kinesis_core.local.streams import LocalStream
from reliability._common import MakeStream, kcl_view, payload, record_id
from reliability._portable import Portable, Service, run, run_until_a_worker_is_killed
from reliability._reader import Read, read_stream
from reliability.result import SuiteResult

NAME = "beam retried bundle"
KEYS = 16
HOLD_SECONDS = 120.0
"""Longest the first attempt holds its bundle, waiting to be killed."""


def element_record(n: int) -> tuple[str, bytes]:
    """Element ``n`` as the sink takes it: (partition key, data)."""
    return (f"key-{n % KEYS}", payload(n, 40))


def element_id(element: tuple[str, bytes]) -> str:
    """The record id of an element: a function of the element alone, the same on a retry."""
    return f"beam-retry:{record_id(element[1])}"


class HoldFirstAttempt(beam.DoFn):
    """Passes elements on. At element ``hold``, the first attempt (no ``marker`` yet) creates
    the marker and holds its bundle (at most HOLD_SECONDS) for its worker to be killed; an
    attempt that finds the marker passes."""

    def __init__(self, hold: int, marker: str) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.hold = hold
        self.marker = marker

    def process(self, element: int) -> Iterator[int]:
        if element == self.hold and not os.path.exists(self.marker):
            Path(self.marker).touch()
            time.sleep(HOLD_SECONDS)
        yield element


@dataclass
class Retried(SuiteResult):
    """The row, with both reads and how many records the killed attempt wrote."""

    written_before_kill: int = 0
    raw: Read = field(default_factory=Read)
    deduplicated: Read = field(default_factory=Read)

    def summary(self) -> str:
        return (
            f"{self.attempted:,} elements, one bundle; the killed attempt wrote "
            f"{self.written_before_kill:,} before its worker was SIGKILLed; duplicates "
            f"without dedup {self.raw.duplicates:,}; at a deduplicating consumer: lost "
            f"{self.lost}, duplicates {self.deduplicated.duplicates} by record id, "
            f"{self.deduplicated.duplicate_numbers} by element ({self.deduplicated.dropped:,} "
            "dropped)"
        )


def _pipeline(
    portable: Portable,
    stream: LocalStream,
    elements: int,
    hold: int,
    marker: Path,
    jobs: Service | None = None,
) -> beam.Pipeline:
    p = portable.pipeline(stream, jobs=jobs)
    _ = (
        p
        | beam.Impulse()
        | beam.FlatMap(lambda _: range(elements))  # type: ignore[no-untyped-call]
        | beam.ParDo(HoldFirstAttempt(hold, str(marker)))  # type: ignore[no-untyped-call]
        | beam.Map(element_record)  # type: ignore[no-untyped-call]
        | WriteToKinesis(stream.name, keyed=True, record_id_fn=element_id, on_failure="raise")
    )
    return p


def _ids_in(stream: LocalStream) -> set[str | None]:
    return {r.record_id for r in kcl_view(stream)}


def beam_retry(
    make_stream: MakeStream, workdir: Path, *, elements: int = 6_000, shards: int = 4
) -> Retried:
    """The row: ``elements`` (at least 1,500), held and killed two thirds of the way in."""
    result = Retried(NAME, faults=1, attempted=elements)
    started = time.monotonic()
    hold = 2 * elements // 3
    flushed = hold // CHUNK_RECORDS * CHUNK_RECORDS
    marker = workdir / "first-attempt"
    expected = {element_id(element_record(n)) for n in range(elements)}
    numbers = set(range(elements))
    before = {element_id(element_record(n)) for n in range(flushed)}
    stream = make_stream(shards)
    portable = Portable(workdir)
    try:
        run_until_a_worker_is_killed(
            portable,
            lambda jobs: _pipeline(portable, stream, elements, hold, marker, jobs),
            lambda: marker.exists() and before <= _ids_in(stream),
        )
        result.written_before_kill = len(_ids_in(stream))
        run(_pipeline(portable, stream, elements, hold, marker))
        result.raw = read_stream(stream, numbers)
        result.deduplicated = read_stream(stream, numbers, store=workdir / "dedup.sqlite3")
        kcl = Counter(r.record_id for r in kcl_view(stream))
    finally:
        portable.stop()
        stream.close()
    _reconcile(result, expected, kcl)
    result.seconds = time.monotonic() - started
    result.note(result.summary())
    return result


def _reconcile(result: Retried, expected: set[str], kcl: Counter[str | None]) -> None:
    deduplicated = result.deduplicated
    result.delivered = len(expected & set(deduplicated.copies))
    missing = expected - set(deduplicated.copies)
    result.lost = len(missing)
    result.duplicated = result.raw.duplicates
    if missing:
        result.problem(f"{len(missing)} elements never read, e.g. {sorted(missing)[:5]}")
    if not 0 < result.written_before_kill < len(expected):
        result.problem(
            f"the killed attempt wrote {result.written_before_kill} of {len(expected)} records:"
            " the kill was not mid-bundle"
        )
    if result.raw.duplicates == 0:
        result.problem("no duplicates without dedup: the retry wrote nothing again")
    if deduplicated.duplicates or deduplicated.duplicate_numbers:
        result.problem(
            f"{deduplicated.duplicates} duplicates by record id, "
            f"{deduplicated.duplicate_numbers} by element, at the deduplicating consumer"
        )
    if result.raw.copies != kcl:
        result.problem("the consumer without dedup read other records than a KCL reader")
    unknown = set(kcl) - set(expected)
    if unknown:
        result.problem(f"{len(unknown)} ids no element has, e.g. {sorted(map(str, unknown))[:5]}")
    for record in (*result.raw.records, *deduplicated.records):
        if record.record_id != element_id((record.partition_key, record.data)):
            result.problem(f"record {record.record_id} carries another element's data")
            break
