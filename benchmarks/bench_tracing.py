"""Trace context's price: the producer with ``trace_context`` off, on outside any span, and on
inside a span (every record's JSON gets the span's context), in one run.

End to end as the producer benchmark (``bench_producer``): 100-byte JSON objects with random
16-hex-digit partition keys, aggregation on, ``submit_many`` in batches of 5,000, into a
16-shard stream on a moto server. The three take turns on one stream, in a rotating order
(whoever runs first in a round is not always the same one); each keeps its fastest run and its
least CPU (this process's ``time.process_time``: moto's CPU is not ours) per record. Off does
strictly less than "on, no span" (which looks up the current context once per call and finds
nothing to carry), so the second row bounds what off costs: target 0.95 of off, i.e. within
noise. The third row is the price of carrying it (a splice per record), shown, not targeted.
"""

from __future__ import annotations

import asyncio
import gc
import json
import random
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any

from benchmarks._table import Row
from benchmarks.bench_producer import _ours
from kinesis_core.local import MotoServer

GROUP = "producer trace context (moto, 16 shards, 100 B JSON, aggregated)"
CPU_GROUP = "producer trace context, CPU (lower is better)"
OFF = "trace_context off (the default)"
ON_NO_SPAN = "trace_context on, no current span"
ON_SPAN = "trace_context on, inside a span"
SHARDS = 16

Records = list[tuple[bytes, str]]


def _records(count: int, seed: int = 5) -> Records:
    rng = random.Random(seed)
    return [
        (
            json.dumps({"id": i, "payload": rng.randbytes(35).hex()}).encode(),
            f"{rng.getrandbits(64):016x}",
        )
        for i in range(count)
    ]


def _best(
    subjects: Mapping[str, Callable[[], object]], repeat: int
) -> dict[str, tuple[float, float]]:
    """(fastest wall seconds, least CPU seconds) of each subject over ``repeat`` rounds, the
    order rotating from round to round."""
    names = list(subjects)
    best = {name: (float("inf"), float("inf")) for name in names}
    for round_ in range(repeat):
        shift = round_ % len(names)
        for name in names[shift:] + names[:shift]:
            gc.collect()
            wall, cpu = time.perf_counter(), time.process_time()
            subjects[name]()
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            best[name] = (min(best[name][0], wall), min(best[name][1], cpu))
    return best


def run(quick: bool) -> list[Row]:
    from opentelemetry.sdk.trace import TracerProvider

    count = 50_000 if quick else 300_000
    records = _records(count)
    tracer: Any = TracerProvider().get_tracer("bench")

    def in_span() -> None:
        with tracer.start_as_current_span("put"):
            asyncio.run(_ours(stream, records, trace_context=True))

    with MotoServer() as server:
        stream = server.create_stream(f"bench-tracing-{random.getrandbits(32):08x}", SHARDS)
        try:
            best = _best(
                {
                    OFF: lambda: asyncio.run(_ours(stream, records)),
                    ON_NO_SPAN: lambda: asyncio.run(_ours(stream, records, trace_context=True)),
                    ON_SPAN: in_span,
                },
                repeat=3 if quick else 6,
            )
        finally:
            stream.delete()
            stream.close()
    rates = {name: count / wall for name, (wall, _) in best.items()}
    cpu = {name: cpu / count * 1e6 for name, (_, cpu) in best.items()}
    return [
        Row(GROUP, OFF, rates[OFF], "records/s", note=f"{count:,} records"),
        Row(
            GROUP,
            ON_NO_SPAN,
            rates[ON_NO_SPAN],
            "records/s",
            baseline=OFF,
            target=0.95,
            note="off does less than this: the ratio bounds what off costs",
        ),
        Row(
            GROUP,
            ON_SPAN,
            rates[ON_SPAN],
            "records/s",
            baseline=OFF,
            note="every record carries the span's context",
        ),
        *(
            Row(CPU_GROUP, name, cpu[name], "CPU s / 1M records")
            for name in (OFF, ON_NO_SPAN, ON_SPAN)
        ),
    ]


if __name__ == "__main__":
    from benchmarks._table import render

    print(render(run(quick="--quick" in sys.argv)))
