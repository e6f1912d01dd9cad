"""The ``kinesis-connectors`` command (also ``python -m kinesis_core``).

Each subcommand is a :class:`Command` in :data:`COMMANDS`: a one-line help and a function that
adds its arguments to its own parser and returns the handler to run. Another module adds a
subcommand by adding an entry there.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, NamedTuple

from kinesis_core.aws.executor import list_all_shards
from kinesis_core.aws.noise import silence_third_party_noise
from kinesis_core.errors import ConfigurationError, KinesisConnectorError, ValidationError
from kinesis_core.shards.allocator import BalancedKeyAllocator
from kinesis_core.shards.hashing import hash_key, validate_partition_key
from kinesis_core.shards.info import AT_LATEST, ShardInfo
from kinesis_core.shards.skew import skew_report
from kinesis_core.stream import StreamRef

if TYPE_CHECKING:
    from kinesis_core.aws.config import ClientConfig

Handler = Callable[[argparse.Namespace], int]
"""Runs a parsed subcommand; returns the exit status."""


class Command(NamedTuple):
    help: str
    register: Callable[[argparse.ArgumentParser], Handler]


def _read_lines(path: str) -> list[str]:
    """Non-empty lines of a file ('-' for stdin), without their line ends."""
    try:
        if path == "-":
            text = sys.stdin.read()
        else:
            with open(path, encoding="utf-8") as f:
                text = f.read()
    except OSError as exc:
        raise ValidationError("--keys-file", f"cannot read {path!r}: {exc.strerror}") from exc
    return [line for line in text.splitlines() if line]


def _hash_key_command(parser: argparse.ArgumentParser) -> Handler:
    parser.add_argument("partition_keys", nargs="+", metavar="PK", help="partition keys")

    def run(args: argparse.Namespace) -> int:
        keys = [hash_key(validate_partition_key(pk)) for pk in args.partition_keys]
        print("\n".join(map(str, keys)))
        return 0

    return run


def _allocate_command(parser: argparse.ArgumentParser) -> Handler:
    parser.add_argument("count", type=int, metavar="N", help="how many new keys to print")
    parser.add_argument(
        "--existing",
        nargs="+",
        action="extend",
        default=[],
        metavar="KEY",
        help="explicit hash keys already in use (decimal); new keys balance against them",
    )
    parser.add_argument(
        "--existing-file", metavar="FILE", help="file of keys in use, one per line ('-': stdin)"
    )
    parser.add_argument(
        "--bits", type=int, default=128, help="size of the key space in bits (Kinesis: 128)"
    )

    def run(args: argparse.Namespace) -> int:
        existing = list(args.existing)
        if args.existing_file is not None:
            existing += [line.strip() for line in _read_lines(args.existing_file)]
        allocator = BalancedKeyAllocator(existing, bits=args.bits)
        print("\n".join(map(str, allocator.allocate(args.count))))
        return 0

    return run


async def _stream_shards(stream: str, config: ClientConfig) -> list[ShardInfo]:
    from kinesis_core.aws.client import create_kinesis_client

    async with create_kinesis_client(config) as client:
        return await list_all_shards(client, stream, AT_LATEST)


def _skew_command(parser: argparse.ArgumentParser) -> Handler:
    shards = parser.add_mutually_exclusive_group(required=True)
    shards.add_argument("--shards", type=int, metavar="N", help="an even split into N shards")
    shards.add_argument("--stream", metavar="NAME", help="the open shards of a stream (or ARN)")
    parser.add_argument("--endpoint-url", help="Kinesis endpoint for --stream (e.g. an emulator)")
    parser.add_argument("--region", help="AWS region for --stream")
    keys = parser.add_mutually_exclusive_group(required=True)
    keys.add_argument("--keys", nargs="+", metavar="K", help="the keys")
    keys.add_argument("--keys-file", metavar="FILE", help="one key per line ('-': stdin)")
    parser.add_argument(
        "--hash-keys",
        action="store_true",
        help="the keys are explicit hash keys (decimal), not partition keys",
    )

    def run(args: argparse.Namespace) -> int:
        keys = args.keys if args.keys is not None else _read_lines(args.keys_file)
        if args.shards is not None:
            if args.shards < 1:
                raise ConfigurationError("--shards", f"must be >= 1, got {args.shards}")
            shard_list: Sequence[ShardInfo] | int = args.shards
        else:
            from kinesis_core.aws.config import ClientConfig

            overrides = {"endpoint_url": args.endpoint_url, "region_name": args.region}
            config = ClientConfig.from_env(**{k: v for k, v in overrides.items() if v is not None})
            try:
                shard_list = asyncio.run(_stream_shards(args.stream, config))
            except Exception as exc:
                raise KinesisConnectorError(
                    f"cannot list the shards of stream {args.stream!r}: {exc}"
                ) from exc
        if args.hash_keys:
            report = skew_report(shard_list, hash_keys=[k.strip() for k in keys])
        else:
            report = skew_report(shard_list, partition_keys=keys)
        print(report.format_table())
        return 0

    return run


def _status_command(parser: argparse.ArgumentParser) -> Handler:
    parser.add_argument("stream", metavar="STREAM", help="stream name or ARN")
    parser.add_argument(
        "--application",
        metavar="NAME",
        help="the consumer's application_name (default: 'default'; with --dynamodb-table, "
        "the table's name, as the KCL names lease tables)",
    )
    store = parser.add_mutually_exclusive_group()
    store.add_argument("--store", metavar="PATH", help="a SQLite checkpoint file (read only)")
    store.add_argument("--dynamodb-table", metavar="NAME", help="a DynamoDB lease table")
    parser.add_argument(
        "--endpoint-url", metavar="URL", help="Kinesis endpoint (e.g. a local emulator)"
    )
    parser.add_argument("--dynamodb-endpoint-url", metavar="URL", help="DynamoDB endpoint")
    parser.add_argument("--region", help="AWS region")
    parser.add_argument(
        "--json", action="store_true", help="print JSON (schema: docs/operations.md)"
    )
    parser.add_argument(
        "--watch",
        nargs="?",
        type=float,
        const=2.0,
        metavar="SECONDS",
        help="refresh every SECONDS (default 2) until Ctrl-C",
    )
    parser.add_argument(
        "--no-lag", action="store_true", help="skip the GetRecords call per shard that measures lag"
    )

    def run(args: argparse.Namespace) -> int:
        # A command line that is wrong in itself exits 2 (ConfigurationError); what it names
        # but cannot be read (the stream, the store, the credentials to reach them) exits 1.
        if args.watch is not None and args.watch <= 0:
            raise ConfigurationError("--watch", f"must be > 0 seconds, got {args.watch:g}")
        if args.application == "":
            raise ConfigurationError(
                "--application",
                "must not be empty: give the consumers' application_name, or leave the option "
                "out for 'default' (with --dynamodb-table: the table's name)",
            )
        StreamRef.of(args.stream, "STREAM")
        from kinesis_core.aws.config import ClientConfig

        overrides = {
            "endpoint_url": args.endpoint_url,
            "dynamodb_endpoint_url": args.dynamodb_endpoint_url,
            "region_name": args.region,
        }
        config = ClientConfig.from_env(**{k: v for k, v in overrides.items() if v is not None})
        try:
            asyncio.run(_status(args, config))
        except KeyboardInterrupt:
            return 0
        except Exception as exc:
            # A ConfigurationError found while reading (a store or a profile that is not
            # there) is no bad argument: it exits 1 too.
            if isinstance(exc, KinesisConnectorError) and not isinstance(exc, ConfigurationError):
                raise
            hint = ""
            if isinstance(exc, ConfigurationError) and exc.field == "application_name":
                hint = " (give --application the name of the application whose table it is)"
            raise KinesisConnectorError(
                f"cannot read the status of stream {args.stream!r}: {exc}{hint}"
            ) from exc
        return 0

    return run


async def _status(args: argparse.Namespace, config: ClientConfig) -> None:
    """Print the status once, or every ``--watch`` seconds until interrupted."""
    from kinesis_core.aws.client import create_kinesis_client
    from kinesis_core.checkpoint import (
        CheckpointStore,
        DynamoDBCheckpointStore,
        SQLiteCheckpointStore,
    )
    from kinesis_core.status import read_status

    async with contextlib.AsyncExitStack() as stack:
        client = await stack.enter_async_context(create_kinesis_client(config))
        store: CheckpointStore | None = None
        label = None
        application = args.application or args.dynamodb_table or "default"
        if args.store is not None:
            store = SQLiteCheckpointStore(args.store, read_only=True)
            label = f"SQLite file {args.store}"
        elif args.dynamodb_table is not None:
            store = DynamoDBCheckpointStore(
                args.dynamodb_table, client_config=config, create_table=False
            )
            label = f"DynamoDB table {args.dynamodb_table}"
        if store is not None:
            stack.push_async_callback(store.close)
        clear = args.watch is not None and not args.json and sys.stdout.isatty()
        previous = None
        while True:
            status = await read_status(
                args.stream,
                client=client,
                store=store,
                application=application,
                store_label=label,
                measure_lags=not args.no_lag,
            )
            if args.json:
                document = status.to_json()
                print(json.dumps(document) if args.watch else json.dumps(document, indent=2))
            else:
                text = status.format_text(previous)
                print(("\x1b[H\x1b[2J" if clear else "") + text, flush=True)
                previous = status
            if args.watch is None:
                return
            if not clear and not args.json:
                print(flush=True)
            await asyncio.sleep(args.watch)


COMMANDS: dict[str, Command] = {
    "hash-key": Command("print the hash key of each partition key", _hash_key_command),
    "allocate": Command("print balanced explicit hash keys", _allocate_command),
    "skew": Command("records per shard for a set of keys, and the max/mean ratio", _skew_command),
    "status": Command(
        "a stream's shard tree with an application's checkpoints, leases and lag",
        _status_command,
    ),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kinesis-connectors",
        description="Tools of the kinesis-connectors core: partition keys, hash keys, shards.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, command in COMMANDS.items():
        child = sub.add_parser(name, help=command.help, description=command.help)
        child.set_defaults(handler=command.register(child), parser=child)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one subcommand; exit status 2 for bad input, 1 for a failure."""
    silence_third_party_noise()
    args = build_parser().parse_args(argv)
    try:
        status: int = args.handler(args)
    except (ValidationError, ConfigurationError) as exc:
        args.parser.error(str(exc))
    except KinesisConnectorError as exc:
        print(f"{args.parser.prog}: error: {exc}", file=sys.stderr)
        return 1
    return status
