"""Run the benchmarks and print one table: ``python -m benchmarks [--quick] [--only NAME]``."""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import pkgutil
import platform
import sys
import traceback
from collections.abc import Sequence

import benchmarks
from benchmarks._table import Row, render


def discover() -> list[str]:
    """Names (without the ``bench_`` prefix) of the benchmark modules, sorted."""
    return sorted(
        info.name.removeprefix("bench_")
        for info in pkgutil.iter_modules(benchmarks.__path__)
        if info.name.startswith("bench_")
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small smoke-test volumes")
    parser.add_argument(
        "--only", action="append", metavar="NAME", help="run bench_NAME only (repeatable)"
    )
    parser.add_argument("--json", action="store_true", help="print the rows as JSON instead")
    args = parser.parse_args(argv)

    names = discover()
    if args.only:
        unknown = sorted(set(args.only) - set(names))
        if unknown:
            parser.error(f"no benchmark named {', '.join(unknown)}; known: {', '.join(names)}")
        names = [name for name in names if name in args.only]

    rows: list[Row] = []
    failed: list[str] = []
    for name in names:
        try:
            module = importlib.import_module(f"benchmarks.bench_{name}")
            rows.extend(module.run(args.quick))
        except Exception:
            traceback.print_exc()
            failed.append(name)

    if args.json:
        print(json.dumps([dataclasses.asdict(row) for row in rows], indent=2))
    else:
        from google.protobuf.internal import api_implementation

        print(
            f"Python {platform.python_version()} ({platform.machine()}), "
            f"protobuf backend {api_implementation.Type()}"
            f"{', quick run' if args.quick else ''}\n"
        )
        print(render(rows))
    if failed:
        print(f"\nfailed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
