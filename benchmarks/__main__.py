"""Run the benchmarks and print one table: python -m benchmarks [--quick] [--only NAME] [--strict]

Each benchmark measures this project against the peers it replaces, in the same run on the
same machine, and the table shows the ratios. A line on stderr says when each benchmark
starts and ends, with its key ratio (plain lines: one per benchmark is all the progress there
is to show, and they read well in a CI log, where a progress bar does not). Each benchmark
runs in a process of its own, so that none measures the heap another one left.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import pkgutil
import platform
import sys
import time
from collections.abc import Sequence

import benchmarks
from benchmarks._isolated import BenchmarkFailed, measure
from benchmarks._table import LEGEND, Row, headline, misses, render
from kinesis_core.aws.noise import silence_third_party_noise


def discover() -> list[str]:
    """Names (without the ``bench_`` prefix) of the benchmark modules, sorted."""
    return sorted(
        info.name.removeprefix("bench_")
        for info in pkgutil.iter_modules(benchmarks.__path__)
        if info.name.startswith("bench_")
    )


def build_parser(names: Sequence[str]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description=(__doc__ or "").split("\n\n")[1],
        epilog=LEGEND,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--quick", action="store_true", help="small smoke-test volumes")
    parser.add_argument(
        "--only",
        action="append",
        choices=names,
        metavar="NAME",
        help=f"run this benchmark only (repeatable); one of: {', '.join(names)}",
    )
    parser.add_argument("--json", action="store_true", help="print the rows as JSON instead")
    parser.add_argument(
        "--strict", action="store_true", help="exit with status 1 if a target is missed"
    )
    return parser


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    silence_third_party_noise()
    names = discover()
    args = build_parser(names).parse_args(argv)
    if args.only:
        names = [name for name in names if name in args.only]

    rows: list[Row] = []
    failed: list[str] = []
    began = time.monotonic()
    for index, name in enumerate(names, 1):
        step = f"[{index}/{len(names)}] {name}"
        progress(f"{step} ...")
        started = time.monotonic()
        try:
            measured = measure(name, args.quick)
        except BenchmarkFailed as exc:
            print(exc, file=sys.stderr)
            failed.append(name)
            progress(f"{step}: FAILED after {time.monotonic() - started:.0f} s (traceback above)")
            continue
        rows.extend(measured)
        progress(f"{step}: {time.monotonic() - started:.0f} s; {headline(measured)}")

    missed = misses(rows)
    if args.json:
        print(json.dumps([dataclasses.asdict(row) for row in rows], indent=2))
    else:
        from google.protobuf.internal import api_implementation

        print(
            f"Python {platform.python_version()} ({platform.machine()}), "
            f"protobuf backend {api_implementation.Type()}"
            f"{', quick run' if args.quick else ''}; {time.monotonic() - began:.0f} s\n"
        )
        print(render(rows))
        print(f"\n{LEGEND}")
    if failed:
        print(f"\nfailed: {', '.join(failed)}", file=sys.stderr)
    if missed:
        targets = "; ".join(f"{row.group}: {row.subject} {v.text}" for row, v in missed)
        print(f"\nmissed targets: {targets}", file=sys.stderr)
    if failed or (args.strict and missed):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
