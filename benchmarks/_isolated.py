"""One benchmark in a process of its own: none measures the heap another one left."""

from __future__ import annotations

import importlib
import multiprocessing
import traceback
from multiprocessing.connection import Connection

from benchmarks._table import Row
from kinesis_core.aws.noise import silence_third_party_noise


class BenchmarkFailed(Exception):
    """A benchmark raised (the message is its traceback) or its process died."""


def measure_here(name: str, quick: bool) -> list[Row]:
    """Run one benchmark in this process."""
    module = importlib.import_module(f"benchmarks.bench_{name}")
    rows: list[Row] = module.run(quick)
    return rows


def _child(name: str, quick: bool, conn: Connection) -> None:
    silence_third_party_noise()
    try:
        conn.send(("rows", measure_here(name, quick)))
    except BaseException:
        conn.send(("failed", traceback.format_exc()))
    finally:
        conn.close()


def measure(name: str, quick: bool) -> list[Row]:
    """Run one benchmark in a process of its own. In one process, a benchmark measured the heap
    and the state the ones before it left: the garbage collector walked what Beam's pipelines
    left behind, and the consumer's replay measured half its own rate after the Beam and
    capacity rows."""
    context = multiprocessing.get_context("spawn")
    receiver, sender = context.Pipe(duplex=False)
    process = context.Process(target=_child, args=(name, quick, sender), name=f"bench-{name}")
    process.start()
    sender.close()
    try:
        kind, payload = receiver.recv()
    except EOFError:
        process.join()
        kind, payload = "failed", f"its process ended with exit code {process.exitcode}"
    finally:
        receiver.close()
        process.join()
    if kind == "failed":
        raise BenchmarkFailed(payload)
    rows: list[Row] = payload
    return rows
