"""``python -m kinesis_core.local``: run a local Kinesis from a shell, or install kinesis-mock.

    python -m kinesis_core.local install
    python -m kinesis_core.local up --stream demo:4 [--stream big:1:10240] [--server moto]
    python -m kinesis_core.local faults --upstream http://127.0.0.1:PORT --throttle 0.1 ...

``up`` prints the endpoint and the variables to export, then runs until SIGINT or SIGTERM.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from collections.abc import Sequence
from types import FrameType
from typing import TextIO

from kinesis_core.errors import EmulatorError, ValidationError
from kinesis_core.local import fault_cli
from kinesis_core.local._server import (
    LocalServer,
)
from kinesis_core.local.kinesis_mock import (
    KINESIS_LOCAL_VERSION,
    KinesisMock,
    install_kinesis_local,
)
from kinesis_core.local.moto_server import MotoServer

SERVERS = ("kinesis-mock", "moto")


def _stream_spec(text: str) -> tuple[str, int, int | None]:
    """``name[:shards[:max_record_kib]]`` (4 shards and the default 1 MiB limit unless given)."""
    name, _, rest = text.partition(":")
    shards, _, kib = rest.partition(":")
    if not name:
        raise argparse.ArgumentTypeError(f"{text!r}: the stream name is empty")
    try:
        count = int(shards) if shards else 4
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: shards must be an integer") from None
    if count < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: shards must be >= 1")
    if not kib:
        return name, count, None
    try:
        max_kib = int(kib)
    except ValueError:
        max_kib = 0
    if not 1024 <= max_kib <= 10240:
        raise argparse.ArgumentTypeError(
            f"{text!r}: the maximum record size is 1024 to 10240 KiB (MaxRecordSizeInKiB)"
        )
    return name, count, max_kib


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m kinesis_core.local",
        description="A local Kinesis API server on 127.0.0.1 (kinesis-mock or moto).",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser(
        "install",
        help=f"install kinesis-local {KINESIS_LOCAL_VERSION} (kinesis-mock) into the user cache",
    )
    up = commands.add_parser("up", help="start a server, create streams, run until Ctrl-C")
    up.add_argument(
        "--server",
        choices=SERVERS,
        default="kinesis-mock",
        help="kinesis-mock (Node.js; faithful resharding) or moto (fast; also DynamoDB)",
    )
    up.add_argument(
        "--stream",
        dest="streams",
        action="append",
        type=_stream_spec,
        default=[],
        metavar="NAME[:SHARDS[:MAX_RECORD_KIB]]",
        help=(
            "create this stream (4 shards unless given; records up to MAX_RECORD_KIB, "
            "1024 to 10240, kinesis-mock only); repeatable"
        ),
    )
    up.add_argument("--port", type=int, help="the HTTP port (default: a free one)")
    up.add_argument(
        "--persist-path",
        metavar="DIR",
        help="kinesis-mock only: keep streams and records in DIR across restarts",
    )
    faults = commands.add_parser(
        "faults", help="a fault-injecting proxy in front of a server (docs/fault-injection.md)"
    )
    fault_cli.add_arguments(faults)
    return parser


def _install(out: TextIO) -> int:
    package = install_kinesis_local()
    print(
        f"kinesis-local {KINESIS_LOCAL_VERSION} (kinesis-mock) is installed in {package}", file=out
    )
    return 0


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def _up(args: argparse.Namespace, out: TextIO) -> int:
    server: LocalServer
    if args.server == "moto":
        if args.persist_path is not None:
            raise EmulatorError("--persist-path needs --server kinesis-mock (moto keeps no data)")
        server = MotoServer(port=args.port)
    else:
        server = KinesisMock(port=args.port, persist_path=args.persist_path)
    # SIGTERM ends the run the way Ctrl-C does: through the finally blocks that stop the server.
    signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        with server:
            print(f"{server.kind} is up at {server.endpoint_url} (pid {server.pid})", file=out)
            for name, shards, max_kib in args.streams:
                server.create_stream(name, shards, max_record_size_kib=max_kib).close()
                limit = "" if max_kib is None else f", records up to {max_kib} KiB"
                print(f"created stream {name} with {shards} shards{limit}", file=out)
            print("# in another shell:", file=out)
            for key, value in server.client_environment().items():
                print(f"export {key}={value}", file=out)
            print("Press Ctrl-C to stop.", file=out, flush=True)
            while server.running:
                time.sleep(0.2)
            server.ensure_running()  # it died: raise with its log
    except KeyboardInterrupt:
        print(f"{server.kind} stopped.", file=out, flush=True)
    return 0


def main(argv: Sequence[str] | None = None, out: TextIO = sys.stdout) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "install":
            return _install(out)
        if args.command == "faults":
            return fault_cli.run(args)
        return _up(args, out)
    except ValidationError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except EmulatorError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
