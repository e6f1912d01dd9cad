"""Command line of the fault-injecting proxy: put it in front of kinesis-mock or moto.

    python -m kinesis_core.local.fault_cli --upstream http://127.0.0.1:4567 --seed 7 \\
        --throttle 0.1 --put-record-throttle 0.05 --reset 0.01@GetRecords

    python -m kinesis_core.local.fault_cli --upstream http://127.0.0.1:4567 --shard-limits

prints the endpoint to give to your clients and runs until SIGINT or SIGTERM, then prints what it
injected. SIGUSR1 pauses or resumes injection, SIGUSR2 prints the counters so far.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from collections.abc import Callable, Sequence

from kinesis_core.errors import EmulatorError, KinesisConnectorError, ValidationError
from kinesis_core.local.fault_proxy import FaultProxy
from kinesis_core.local.faults import RECORD_KINDS, REQUEST_KINDS, FaultConfig, FaultKind, FaultRule
from kinesis_core.local.shard_limits import ShardLimits
from kinesis_core.runtime.timeouts import within

_HELP = {
    FaultKind.THROTTLE: "ProvisionedThroughputExceededException (400) for the whole request",
    FaultKind.LIMIT_EXCEEDED: "LimitExceededException (400), control-plane calls by default",
    FaultKind.INTERNAL_ERROR: "HTTP 500 InternalFailure",
    FaultKind.SERVICE_UNAVAILABLE: "HTTP 503 ServiceUnavailable",
    FaultKind.EXPIRED_ITERATOR: "ExpiredIteratorException (400) on GetRecords",
    FaultKind.RESET: "close the connection with a TCP reset, no answer",
    FaultKind.STALL: "hold the connection for --stall-seconds without answering, then close it",
    FaultKind.TRUNCATE: "send the headers and part of the upstream answer, then close",
    FaultKind.PUT_RECORD_THROTTLE: "per PutRecords record: ProvisionedThroughputExceededException",
    FaultKind.PUT_RECORD_INTERNAL_ERROR: "per PutRecords record: InternalFailure",
    FaultKind.STREAM_CUT: "SubscribeToShard: forward the event stream, then close the "
    "connection after --stream-cut-after-events events (or --stream-cut-after-bytes bytes)",
    FaultKind.EMPTY_ANSWER: "HTTP 200 with the body {} (SubscribeToShard: one event {})",
    FaultKind.NOT_JSON: "HTTP 200 with a body that is not JSON (SubscribeToShard: one such event)",
    FaultKind.HTML_PAGE: "HTTP 200 with a captive portal's HTML page",
    FaultKind.SHORT_BODY: "send upstream's answer 5 bytes short of its Content-Length, then close",
    FaultKind.BINARY_5XX: "HTTP 500 with a body that is not UTF-8",
    FaultKind.DRIP: "send upstream's answer one byte every --drip-seconds",
    FaultKind.LOST_ANSWER: "forward (the service writes), then reset the connection without "
    "the answer; PutRecords by default",
}


def _rate(text: str) -> tuple[float, frozenset[str]]:
    """'0.1' or '0.1@PutRecords,GetRecords' -> (rate, operations)."""
    rate_text, _, ops = text.partition("@")
    try:
        rate = float(rate_text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a rate: {rate_text!r}") from None
    if not 0.0 <= rate <= 1.0:
        raise argparse.ArgumentTypeError(f"a rate is a probability in [0, 1], got {rate}")
    return rate, frozenset(op for op in ops.split(",") if op)


DESCRIPTION = (
    "Fault-injecting HTTP proxy for the Kinesis and DynamoDB APIs of a local emulator. Each rate "
    "is a probability per request (per record for --put-record-*), optionally narrowed to "
    "operations or services: RATE[@OP[,OP...]], e.g. 0.2@GetRecords,Kinesis. Repeat a flag for "
    "different rates on different operations."
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m kinesis_core.local.fault_cli", description=DESCRIPTION
    )
    add_arguments(parser)
    return parser


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The proxy's options, on any parser (a subcommand of another CLI, too)."""
    parser.add_argument(
        "--upstream", required=True, help="the emulator, e.g. http://127.0.0.1:4567"
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--port", type=int, default=0, help="port to listen on (0: any free one)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the fault sequence")
    for kind in (*REQUEST_KINDS, *RECORD_KINDS):
        parser.add_argument(
            "--" + kind.value.replace("_", "-"),
            dest=kind.value,
            type=_rate,
            action="append",
            default=[],
            metavar="RATE[@OPS]",
            help=_HELP[kind],
        )
    parser.add_argument("--latency-ms", type=float, default=0.0, help="delay added to requests")
    parser.add_argument("--latency-jitter-ms", type=float, default=0.0, help="plus uniform jitter")
    parser.add_argument(
        "--latency-rate",
        type=_rate,
        action="append",
        default=[],
        metavar="RATE[@OPS]",
        help="fraction of requests delayed (default 1 once --latency-ms/--latency-jitter-ms > 0)",
    )
    parser.add_argument("--stall-seconds", type=float, default=30.0, help="duration of a stall")
    parser.add_argument(
        "--drip-seconds", type=float, default=1.0, help="seconds between two bytes of a --drip"
    )
    parser.add_argument(
        "--stream-cut-after-events",
        type=int,
        default=1,
        metavar="N",
        help="events a --stream-cut lets through before it cuts (default 1)",
    )
    parser.add_argument(
        "--stream-cut-after-bytes",
        type=int,
        default=None,
        metavar="N",
        help="cut after N body bytes instead (usually in the middle of an event)",
    )
    parser.add_argument(
        "--stream-delay-ms",
        type=float,
        default=0.0,
        help="hold every chunk of an event stream (SubscribeToShard) this long",
    )
    parser.add_argument(
        "--stream-delay-rate",
        type=_rate,
        action="append",
        default=[],
        metavar="RATE[@OPS]",
        help="fraction of subscriptions whose chunks are delayed (default 1 once "
        "--stream-delay-ms > 0)",
    )
    parser.add_argument(
        "--only",
        default="",
        metavar="OPS",
        help="comma-separated operations or services that rules without their own @OPS apply to",
    )
    limits = ShardLimits()
    parser.add_argument(
        "--shard-limits",
        action="store_true",
        help="throttle the writes over each shard's limits as AWS does (1,000 records/s and "
        "1 MiB/s per shard unless the options below say otherwise)",
    )
    parser.add_argument(
        "--shard-records-per-second",
        type=float,
        default=limits.records_per_second,
        metavar="N",
        help="with --shard-limits: records per second per shard (default %(default)g)",
    )
    parser.add_argument(
        "--shard-bytes-per-second",
        type=float,
        default=limits.bytes_per_second,
        metavar="N",
        help="with --shard-limits: data plus partition key bytes per second per shard "
        "(default %(default)g)",
    )
    parser.add_argument(
        "--shard-burst-seconds",
        type=float,
        default=limits.burst_seconds,
        metavar="S",
        help="with --shard-limits: how many seconds' worth a shard takes at once "
        "(default %(default)g)",
    )
    parser.add_argument(
        "--stats-interval",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="print the counters every SECONDS (0: only at exit)",
    )


def config_from_args(args: argparse.Namespace) -> FaultConfig:
    """The FaultConfig the parsed arguments describe (raises ValidationError if inconsistent)."""
    only = frozenset(op for op in args.only.split(",") if op)
    rules: list[FaultRule] = []
    for kind in (*REQUEST_KINDS, *RECORD_KINDS):
        for rate, ops in getattr(args, kind.value):
            rules.append(FaultRule(kind, rate, ops or only))
    if args.latency_ms > 0 or args.latency_jitter_ms > 0:
        for rate, ops in args.latency_rate or [(1.0, frozenset())]:
            rules.append(FaultRule(FaultKind.LATENCY, rate, ops or only))
    if args.stream_delay_ms > 0:
        for rate, ops in args.stream_delay_rate or [(1.0, frozenset())]:
            rules.append(FaultRule(FaultKind.STREAM_DELAY, rate, ops or only))
    limits = None
    if args.shard_limits:
        limits = ShardLimits(
            args.shard_records_per_second, args.shard_bytes_per_second, args.shard_burst_seconds
        )
    return FaultConfig(
        tuple(rules),
        args.latency_ms,
        args.latency_jitter_ms,
        args.stall_seconds,
        stream_cut_after_events=args.stream_cut_after_events,
        stream_cut_after_bytes=args.stream_cut_after_bytes,
        stream_delay_ms=args.stream_delay_ms,
        shard_limits=limits,
        drip_seconds=args.drip_seconds,
    )


def _describe(config: FaultConfig) -> str:
    parts = []
    for rule in config.rules:
        ops = "@" + ",".join(sorted(rule.operations)) if rule.operations else ""
        names = {FaultKind.LATENCY: "latency_rate", FaultKind.STREAM_DELAY: "stream_delay_rate"}
        name = names.get(rule.kind, rule.kind.value)
        parts.append(f"{name}={rule.rate:g}{ops}")
    if config.latency_ms or config.latency_jitter_ms:
        parts.append(f"latency={config.latency_ms:g}ms+{config.latency_jitter_ms:g}ms jitter")
    if any(rule.kind is FaultKind.STREAM_CUT for rule in config.rules):
        after = config.stream_cut_after_bytes
        parts.append(
            f"stream_cut after {after} bytes"
            if after is not None
            else f"stream_cut after {config.stream_cut_after_events} events"
        )
    if config.stream_delay_ms:
        parts.append(f"stream_delay={config.stream_delay_ms:g}ms per chunk")
    if (limits := config.shard_limits) is not None:
        parts.append(
            f"shard_limits={limits.records_per_second:g} records/s and "
            f"{limits.bytes_per_second:g} bytes/s per shard, burst {limits.burst_seconds:g} s"
        )
    return " ".join(parts) or "none (pure pass-through)"


async def _serve(args: argparse.Namespace, config: FaultConfig) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    proxy = FaultProxy(args.upstream, config, seed=args.seed, host=args.host, port=args.port)

    def toggle() -> None:
        if proxy.paused:
            proxy.resume()
        else:
            proxy.pause()
        print("injection", "paused" if proxy.paused else "resumed", flush=True)

    try:
        await proxy.start()
    except OSError as exc:
        raise EmulatorError(
            f"fault proxy: cannot listen on {args.host}:{args.port}: {exc}"
        ) from exc
    try:
        loop.add_signal_handler(signal.SIGINT, stop.set)
        loop.add_signal_handler(signal.SIGTERM, stop.set)
        if hasattr(signal, "SIGUSR1"):
            loop.add_signal_handler(signal.SIGUSR1, toggle)
            loop.add_signal_handler(
                signal.SIGUSR2, lambda: print(proxy.stats().summary(), flush=True)
            )
        print(f"endpoint: {proxy.endpoint_url}", flush=True)
        print(f"upstream: {args.upstream}", flush=True)
        print(f"seed: {args.seed}", flush=True)
        print(f"faults: {_describe(config)}", flush=True)
        print("# point your clients at the proxy, e.g. in another shell:", flush=True)
        print(f"export AWS_ENDPOINT_URL_KINESIS={proxy.endpoint_url}", flush=True)
        interval = args.stats_interval if args.stats_interval > 0 else None
        while not stop.is_set():
            try:
                async with within(interval):
                    await stop.wait()
            except asyncio.TimeoutError:
                print(proxy.stats().summary(), flush=True)
        print(proxy.stats().summary(), flush=True)
    finally:
        await proxy.stop()


def run(args: argparse.Namespace) -> int:
    """Serve until SIGINT or SIGTERM; raises ValidationError for inconsistent rates."""
    asyncio.run(_serve(args, config_from_args(args)))
    return 0


def register(parser: argparse.ArgumentParser) -> Callable[[argparse.Namespace], int]:
    """Hook for a subcommand of kinesis_core.cli (Command(help, register))."""
    add_arguments(parser)
    return run


def main(argv: Sequence[str] | None = None) -> int:
    """Run the proxy until interrupted; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return run(args)
    except ValidationError as exc:
        parser.error(str(exc))
    except KinesisConnectorError as exc:
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
