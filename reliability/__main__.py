"""The reliability suites and their table: ``python -m reliability [--quick] [--only NAME]``.

Starts its own servers on 127.0.0.1 (moto for volume, kinesis-mock where fidelity matters),
runs every suite (or the ones named), prints the table and exits non-zero if a record was lost
or a suite failed.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from kinesis_core.aws.noise import silence_third_party_noise
from kinesis_core.local import KinesisMock, LocalServer, MotoServer, StreamFactory
from reliability.bad_input import bad_input
from reliability.consumer_faults import consumer_under_faults
from reliability.crash_loops import crash_loop
from reliability.duplicates import duplicates
from reliability.lease_scaleout import lease_scale_out
from reliability.malformed_answers import consumer_under_malformed_answers
from reliability.producer_auth import producer_auth
from reliability.producer_faults import producer_under_faults
from reliability.producer_outage import producer_outage
from reliability.producer_reshard import producer_reshard
from reliability.result import SuiteResult, render
from reliability.server_restart import server_restart


@dataclass
class Context:
    """What a suite may ask for: the volume, a seed, servers started on first use, a folder."""

    quick: bool
    seed: int
    workdir: Path
    stack: contextlib.ExitStack

    def __post_init__(self) -> None:
        self._factories: dict[str, StreamFactory] = {}

    def streams(self, kind: type[LocalServer]) -> StreamFactory:
        """Streams on a moto or kinesis-mock server, started the first time it is asked for."""
        factory = self._factories.get(kind.__name__)
        if factory is None:
            server = self.stack.enter_context(kind())
            factory = self.stack.enter_context(
                StreamFactory(server.client_config(), prefix="reliability")
            )
            self._factories[kind.__name__] = factory
        return factory

    def folder(self, name: str) -> Path:
        path = self.workdir / name
        path.mkdir()
        return path


Suite = Callable[[Context], SuiteResult]


def _suites() -> dict[str, Suite]:
    def pick(c: Context, quick: int, full: int) -> int:
        return quick if c.quick else full

    return {
        "producer": lambda c: producer_under_faults(
            c.streams(MotoServer), records=pick(c, 5_000, 50_000), seed=c.seed
        ),
        "reshard": lambda c: producer_reshard(
            c.streams(KinesisMock), records=pick(c, 1_500, 3_000)
        ),
        "outage": lambda c: producer_outage(c.streams(MotoServer), outage=pick(c, 20, 600)),
        "auth": lambda c: producer_auth(),
        "consumer": lambda c: consumer_under_faults(
            c.streams(KinesisMock), records=pick(c, 600, 3_000), seed=c.seed
        ),
        "restart": lambda c: server_restart(
            c.folder("restart"), outage=pick(c, 3, 6), before=3.0, after=3.0
        ),
        "bad-input": lambda c: bad_input(c.streams(KinesisMock)),
        "malformed": lambda c: consumer_under_malformed_answers(
            c.streams(KinesisMock), records=pick(c, 200, 600), seed=c.seed
        ),
        "consumer-fan-out": lambda c: consumer_under_faults(
            c.streams(KinesisMock), records=pick(c, 600, 3_000), seed=c.seed, fan_out=True
        ),
        "leases": lambda c: lease_scale_out(
            c.streams(KinesisMock),
            _dynamodb(c),
            c.folder("leases"),
            seconds=pick(c, 40, 60),
            seed=c.seed,
        ),
        "restart-fan-out": lambda c: server_restart(
            c.folder("restart-fan-out"), outage=pick(c, 3, 6), before=3.0, after=3.0, fan_out=True
        ),
        "duplicates": lambda c: duplicates(
            c.streams(KinesisMock),
            c.folder("duplicates"),
            producer_records=pick(c, 600, 3_000),
            faust_records=pick(c, 600, 3_000),
            seed=c.seed,
        ),
        "beam-retry": lambda c: _beam_retry(c, elements=pick(c, 1_500, 6_000)),
        **{
            f"crash-{kind}": _crash_loop(kind, pick)
            for kind in ("consumer", "fan-out", "beam", "faust")
        },
    }


def _dynamodb(c: Context) -> str:
    """The DynamoDB endpoint of the moto server."""
    endpoint = c.streams(MotoServer).client_config.dynamodb_endpoint_url
    assert endpoint is not None
    return endpoint


def _beam_retry(c: Context, elements: int) -> SuiteResult:
    """The Beam retried-bundle row; Beam is imported only when it runs (its import logs a
    warning on the console)."""
    from reliability.beam_retry import beam_retry

    return beam_retry(c.streams(MotoServer), c.folder("beam-retry"), elements=elements)


def _crash_loop(kind: str, pick: Callable[[Context, int, int], int]) -> Suite:
    return lambda c: crash_loop(
        kind,
        c.streams(KinesisMock),
        c.folder(f"crash-{kind}"),
        rounds=pick(c, 3, 20),
        seed=c.seed,
    )


@contextlib.contextmanager
def _context(quick: bool, seed: int) -> Iterator[Context]:
    with (
        contextlib.ExitStack() as stack,
        tempfile.TemporaryDirectory(prefix="reliability-") as workdir,
    ):
        yield Context(quick, seed, Path(workdir), stack)


def main(argv: Sequence[str] | None = None) -> int:
    silence_third_party_noise()
    suites = _suites()
    parser = argparse.ArgumentParser(prog="python -m reliability", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small volumes, 3 crash rounds")
    parser.add_argument(
        "--only",
        action="append",
        metavar="NAME",
        choices=list(suites),
        help=f"run this suite only (repeatable): {', '.join(suites)}",
    )
    parser.add_argument("--seed", type=int, default=7, help="seed of every random choice")
    parser.add_argument("-v", "--verbose", action="store_true", help="show the core's warnings")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.WARNING if args.verbose else logging.CRITICAL,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )
    names = [name for name in suites if not args.only or name in args.only]
    results: list[SuiteResult] = []
    with _context(args.quick, args.seed) as context:
        for name in names:
            print(f"==> {name}", file=sys.stderr, flush=True)
            started = time.monotonic()
            try:
                results.append(suites[name](context))
            except Exception:
                crashed = SuiteResult(name, seconds=time.monotonic() - started)
                crashed.problem(f"the suite crashed:\n{traceback.format_exc()}")
                results.append(crashed)
    print(f"\nreliability suites (seed {args.seed}{', quick' if args.quick else ''})\n")
    print(render(results))
    return 0 if all(r.passed for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
