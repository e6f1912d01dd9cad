"""The bad-input catalogue: each kind of bad input gets a clear error naming its cause, and
nothing else is harmed.

Every case runs next to a bystander: a producer on a healthy stream that keeps putting good
records meanwhile (in the same event loop). The input cases also put good records in the very
batch that holds the bad one. At the end every good record must be in the healthy stream where
its result says. A check passes when the error the user sees names the cause: the field and
the limit for bad records, the stream and the service's error for stream problems, the file for
a checkpoint store; and, where it says so, when the error comes within seconds (a producer
starting against wrong credentials or a dead endpoint retried for 30 s before).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import re
import sqlite3
import sys
import tempfile
import time
import traceback
import uuid
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kinesis_core.aggregation import MAGIC, encode_aggregate
from kinesis_core.aws.client import create_botocore_client, create_kinesis_client
from kinesis_core.aws.config import ClientConfig
from kinesis_core.checkpoint import MemoryCheckpointStore, SQLiteCheckpointStore
from kinesis_core.consumer import (
    TRIM_HORIZON,
    AtTimestamp,
    Consumer,
    EnhancedFanOut,
    SharedCheckpointsWarning,
)
from kinesis_core.errors import ConfigurationError, ValidationError
from kinesis_core.fanout import deregister_consumer
from kinesis_core.local import KinesisMock, MotoServer
from kinesis_core.local._server import free_port
from kinesis_core.local.fault_proxy import FaultProxy
from kinesis_core.local.streams import LocalStream
from kinesis_core.producer import Producer, ProducerConfig, RecordResult
from kinesis_core.records import SubRecord
from kinesis_core.shards.hashing import LARGEST_RECORD_BYTES, MAX_RECORD_BYTES
from reliability._common import MakeStream, kcl_view, shard_position, unchecked_key, via
from reliability.result import SuiteResult

NAME = "bad-input catalogue"
SIGNATURE = re.compile(r"Signature[=:]\s*[0-9a-fA-F]{64}")
"""A SigV4 signature in a log record: in a header, or on botocore.auth's line of its own."""
SHORT_TTL = ProducerConfig(record_ttl=2.0, record_max_buffered_time=0.05, request_timeout=2.0)
HANG = 10.0
"""Seconds a consumer may stay silent after its stream was deleted before we call it a hang."""


@dataclass(frozen=True)
class Check:
    """One bad input and what the user got back."""

    case: str
    where: str
    seen: str
    ok: bool


def named(seen: str, *needles: str) -> bool:
    """True when ``seen`` names every one of ``needles`` (case-insensitive)."""
    return all(needle.lower() in seen.lower() for needle in needles)


def error_text(exc: BaseException) -> str:
    """The exception as the user sees it, with the base class a user catches when it is a
    subclass of one (``RecordTooLargeError (a ValidationError): ...``)."""
    name = type(exc).__name__
    for base in (ValidationError, ConfigurationError):
        if isinstance(exc, base) and type(exc) is not base:
            name = f"{name} (a {base.__name__})"
    return f"{name}: {exc}"


def result_text(result: RecordResult) -> str:
    if result.success:
        return f"written to {result.shard_id} (no error)"
    return f"{result.error_code}: {result.error_message} ({len(result.attempts)} attempts)"


@dataclass
class Env:
    """What the cases share: the healthy stream, a way to make others, and the good records."""

    make_stream: MakeStream
    healthy: LocalStream
    good: list[tuple[bytes, RecordResult]] = field(default_factory=list)
    counter: int = 0

    def good_record(self) -> tuple[bytes, str]:
        self.counter += 1
        return (b"good-%d" % self.counter, f"good-{self.counter}")

    @contextlib.asynccontextmanager
    async def producer(self) -> AsyncIterator[Producer]:
        async with Producer(self.healthy.name, client_config=self.healthy.client_config) as p:
            yield p

    async def bystander(self, stop: asyncio.Event) -> None:
        """Good records into the healthy stream while a case runs."""
        async with self.producer() as p:
            while not stop.is_set():
                data, key = self.good_record()
                self.good.append((data, await p.put(data, key)))
                await asyncio.sleep(0.05)


CaseFn = Callable[[Env], Awaitable[list[Check]]]


def _input_case(label: str, bad: tuple[Any, ...], *needles: str) -> CaseFn:
    """A bad record: ``put`` raises ValidationError naming it, and inside a ``put_many`` it
    fails alone while the good records around it are written."""

    async def run(env: Env) -> list[Check]:
        async with env.producer() as p:
            try:
                written = await p.put(*bad)
                seen = f"no error: {result_text(written)}"
            except Exception as exc:
                seen = error_text(exc)
            checks = [Check(label, "Producer.put", seen, named(seen, "ValidationError", *needles))]
            first, last = env.good_record(), env.good_record()
            batch = await p.put_many([first, bad, last])
            env.good.extend([(first[0], batch[0]), (last[0], batch[2])])
            seen = result_text(batch[1])
            checks.append(
                Check(label, "Producer.put_many", seen, named(seen, "ValidationError", *needles))
            )
        return checks

    return run


def key_of_raw(element: dict[str, bytes]) -> str:
    """The partition key of a Beam element: its raw key bytes, decoded the way file names and
    other OS text are (``surrogateescape``), which turns a byte that is no UTF-8 into a lone
    surrogate."""
    return element["key"].decode("utf-8", "surrogateescape")


def _data_of(element: dict[str, bytes]) -> bytes:
    return element["data"]


def _failure_line(failed: Any) -> str:
    return f"{failed.error_code}: {failed.error_message}"


def _write_with_beam(stream: LocalStream, elements: list[dict[str, bytes]]) -> list[str]:
    """``WriteToKinesis`` of the elements on the in-process runner; returns its failed records
    as "code: message" lines. (A str with a lone surrogate cannot even be a Beam element: its
    coder refuses it. It comes to be inside the pipeline, as here.)"""
    import apache_beam as beam
    from apache_beam.runners.portability.fn_api_runner.fn_runner import FnApiRunner

    from beam_kinesis import WriteToKinesis
    from beam_kinesis.options import CredentialsInPipelineWarning

    with tempfile.TemporaryDirectory() as folder:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", CredentialsInPipelineWarning)
            with beam.Pipeline(runner=FnApiRunner()) as p:
                result = (
                    p
                    | beam.Create(elements)  # type: ignore[no-untyped-call]
                    | WriteToKinesis(
                        stream.name,
                        partition_key=key_of_raw,
                        serializer=_data_of,
                        client_config=stream.client_config,
                    )
                )
                _ = (
                    result.failed_records
                    | beam.Map(_failure_line)  # type: ignore[no-untyped-call]
                    | beam.io.WriteToText(str(Path(folder) / "failed"))
                )
        return [
            line
            for path in sorted(Path(folder).glob("failed*"))
            for line in path.read_text(encoding="utf-8", errors="backslashreplace").splitlines()
        ]


async def _lone_surrogate(env: Env) -> list[Check]:
    """A key with a lone surrogate (text decoded with errors="surrogateescape", a JSON
    "\\ud800"): no UTF-8 form. ``put``, ``put_many`` and ``WriteToKinesis`` each refuse it
    with a ValidationError naming the key (for ``WriteToKinesis``: the key function); the good
    records around it are written."""
    label = "lone surrogate in a partition key"
    checks = await _input_case(label, (b"x", "user-\udcff"), "partition_key", "lone surrogate")(env)
    first, last = env.good_record(), env.good_record()
    elements = [
        {"key": first[1].encode(), "data": first[0]},
        {"key": b"user-\xff", "data": b"bad"},
        {"key": last[1].encode(), "data": last[0]},
    ]
    failed = await asyncio.to_thread(_write_with_beam, env.healthy, elements)
    seen = "; ".join(failed) or "no failed record"
    in_stream = {r.data for r in kcl_view(env.healthy)}
    good_written = first[0] in in_stream and last[0] in in_stream
    checks.append(
        Check(
            label,
            "WriteToKinesis",
            seen if good_written else f"{seen}; the good records around it were not written",
            len(failed) == 1
            and good_written
            and named(seen, "ValidationError", "key_of_raw", "lone surrogate"),
        )
    )
    return checks


async def _refused_by_the_service(env: Env) -> list[Check]:
    """50 good records and one the service refuses (a key too long for it, let past our checks:
    any limit the service enforces that they do not know) in one
    PutRecords request, aggregation off: the 50 are written, the one fails at once with the
    service's message (before the fix every record of the request expired after the TTL)."""
    label = "a record the service refuses"
    config = ProducerConfig(aggregation_enabled=False, record_ttl=30.0)
    async with Producer(
        env.healthy.name, client_config=env.healthy.client_config, producer_config=config
    ) as p:
        loop = asyncio.get_running_loop()
        started = loop.time()
        good = [env.good_record() for _ in range(50)]
        futures = [await p.submit(data, key) for data, key in good[:25]]
        too_long = "k" * 300
        with unchecked_key(too_long):
            refused = await p.submit(b"refused", too_long)
        futures += [await p.submit(data, key) for data, key in good[25:]]
        results = await asyncio.gather(*futures)
        bad = await refused
        seconds = loop.time() - started
    env.good.extend((data, r) for (data, _), r in zip(good, results, strict=True))
    written = sum(r.success for r in results)
    seen = f"{written} of 50 good records written; the refused one: {result_text(bad)}"
    return [
        Check(
            label,
            "Producer.put (50 + 1 in one request)",
            f"{seen}, after {seconds:.1f} s (TTL 30 s)",
            written == 50
            and seconds < 10
            and named(result_text(bad), "InvalidArgumentException", "256 in length"),
        )
    ]


async def _stream_by_arn(env: Env) -> list[Check]:
    """A producer given the stream's ARN names it by ARN in every call (it sent the ARN as
    the stream name before, which the service refuses)."""
    label = "stream named by its ARN"
    client = create_botocore_client(env.healthy.client_config, "kinesis")
    try:
        summary = client.describe_stream_summary(StreamName=env.healthy.name)
        arn = summary["StreamDescriptionSummary"]["StreamARN"]
    finally:
        client.close()
    data, key = env.good_record()
    async with Producer(arn, client_config=env.healthy.client_config) as p:
        result = await p.put(data, key)
    env.good.append((data, result))
    return [Check(label, "Producer(arn).put", result_text(result), result.success)]


async def _session_token_in_logs(env: Env) -> list[Check]:
    """DEBUG logging of every logger while a producer with a session token writes: botocore
    logs the signed request headers and each signature; the token, the secret key and every
    signature must be masked in every record."""
    label = "session token or signature in DEBUG logs"
    token = "FQoGZXIvYXdzE" + uuid.uuid4().hex
    secret = "secret-" + uuid.uuid4().hex
    config = dataclasses.replace(
        env.healthy.client_config,
        aws_access_key_id="AKIAEXAMPLEEXAMPLE01",
        aws_secret_access_key=secret,
        aws_session_token=token,
    )
    lines: list[tuple[str, str]] = []

    class Capture(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            text = record.getMessage()
            if record.exc_info:
                text += "".join(traceback.format_exception(*record.exc_info))
            lines.append((record.name, text))

    root = logging.getLogger()
    handler, level = Capture(logging.DEBUG), root.level
    # The handlers already there keep showing only what they showed before.
    others = [(h, h.level) for h in root.handlers]
    for other, other_level in others:
        other.setLevel(max(other_level, level))
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        data, key = env.good_record()
        async with Producer(env.healthy.name, client_config=config) as p:
            result = await p.put(data, key)
        env.good.append((data, result))
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
        for other, other_level in others:
            other.setLevel(other_level)
    leaks = sorted(
        {name for name, text in lines if token in text or secret in text or SIGNATURE.search(text)}
    )
    signed = sum("x-amz-security-token" in text.lower() for _, text in lines)
    signatures = sum(text.startswith("Signature:") for _, text in lines)
    seen = (
        f"token, secret and signatures in no record ({len(lines)} DEBUG records, {signed} with "
        f"the x-amz-security-token header, {signatures} botocore.auth 'Signature:' lines, "
        "masked)"
        if not leaks
        else f"the token, secret or a signature shown by: {', '.join(leaks)}"
    )
    return [Check(label, "botocore DEBUG logs", seen, not leaks and signed > 0 and signatures > 0)]


async def _sqlite_store_path(env: Env) -> list[Check]:
    label = "checkpoint store at a bad path"
    checks = []
    with tempfile.TemporaryDirectory() as folder:
        not_a_database = Path(folder) / "notes.txt"
        not_a_database.write_bytes(b"not a database " * 100)
        for path, needle in (
            (Path(folder) / "missing" / "c.sqlite3", "unable to open database file"),
            (not_a_database, "file is not a database"),
        ):
            try:
                async with SQLiteCheckpointStore(path) as store:
                    await store.get("app", "stream", "shardId-000000000000")
                seen = "no error"
            except sqlite3.Error as exc:
                seen = error_text(exc)
            checks.append(
                Check(label, "SQLiteCheckpointStore", seen, named(seen, needle, str(path)))
            )
    return checks


async def _shared_store(env: Env) -> list[Check]:
    """Two consumers of one application on one SQLite file, without leases: each reads every
    shard and delivers every record (nothing is lost), and the first checkpoint one finds
    written by the other says so."""
    label = "two consumers sharing a store without leases"
    stream = env.make_stream(1)
    for n in range(6):
        stream.put(b"shared-%d" % n, f"k{n}")
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "shared.sqlite3"

        async def read_all(consumer: Consumer) -> list[bytes]:
            got = []
            async for record in consumer:
                got.append(record.data)
                record.ack()
                if len(got) == 6:
                    await consumer.checkpoint()
                    return got
            return got

        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", SharedCheckpointsWarning)
            async with (
                SQLiteCheckpointStore(path) as one,
                SQLiteCheckpointStore(path) as two,
                Consumer(
                    stream.name,
                    client_config=stream.client_config,
                    checkpoint_store=one,
                    initial_position=TRIM_HORIZON,
                    idle_interval=0.2,
                ) as first,
                Consumer(
                    stream.name,
                    client_config=stream.client_config,
                    checkpoint_store=two,
                    initial_position=TRIM_HORIZON,
                    idle_interval=0.2,
                ) as second,
            ):
                a = await asyncio.wait_for(read_all(first), 30)
                b = await asyncio.wait_for(read_all(second), 30)
    said = [str(w.message) for w in caught if issubclass(w.category, SharedCheckpointsWarning)]
    seen = f"SharedCheckpointsWarning: {said[0]}" if said else "no warning"
    both = len(a) == len(b) == 6
    return [Check(label, "Consumer", seen, both and named(seen, "another consumer", "leases=True"))]


async def _read_one(stream: LocalStream, store: SQLiteCheckpointStore, **options: Any) -> bytes:
    """Start a consumer on ``store`` (application "bad-input") and read one record."""
    async with Consumer(
        stream.name,
        client_config=stream.client_config,
        checkpoint_store=store,
        application_name="bad-input",
        initial_position=TRIM_HORIZON,
        idle_interval=0.2,
        checkpoint_interval=0.1,
        **options,
    ) as consumer:
        record = await asyncio.wait_for(consumer.__anext__(), HANG)
        record.ack()
        await consumer.checkpoint()
        return record.data


def _read_with_beam(stream: LocalStream, store_path: Path) -> str:
    """``ReadFromKinesis`` with a checkpoint store until caught up; what it raised."""
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions
    from apache_beam.runners.portability.fn_api_runner.fn_runner import FnApiRunner

    from beam_kinesis import ReadFromKinesis
    from beam_kinesis.options import CredentialsInPipelineWarning

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", CredentialsInPipelineWarning)
            with beam.Pipeline(runner=FnApiRunner(), options=PipelineOptions([])) as p:
                _ = p | ReadFromKinesis(
                    stream.name,
                    client_config=stream.client_config,
                    initial_position=TRIM_HORIZON,
                    checkpoint_store=str(store_path),
                    application_name="bad-input",
                    stop_when_caught_up=True,
                )
    except Exception as exc:
        return error_text(exc)
    return "no error"


async def _recreated_stream(env: Env) -> list[Check]:
    """A store holding positions of a stream that was deleted and created again under the same
    name (same shard ids, new sequence numbers): the core consumer and ReadFromKinesis stop at
    start with StreamRecreatedError naming the store, the stream and both creation times;
    with on_stream_recreated="reset" the new stream is read from the initial position. (The
    core consumer skipped an open shard, and Beam stored SHARD_END for it, before.)"""
    label = "stream deleted and created again"
    stream = await asyncio.to_thread(env.make_stream, 1)
    await asyncio.to_thread(stream.put, b"old", "k")
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "c.sqlite3"
        async with SQLiteCheckpointStore(path) as store:
            await _read_one(stream, store)
            await asyncio.to_thread(stream.recreate, 1)
            await asyncio.to_thread(stream.put, b"new", "k")
            seen, seconds = await _timed_raise(_read_one(stream, store))
            needles = ("StreamRecreatedError", str(path), stream.name, "on_stream_recreated")
            checks = [
                Check(
                    label,
                    "Consumer.start",
                    f"{seen} (after {seconds:.1f} s)",
                    named(seen, *needles) and seconds < FAST,
                )
            ]
        seen = await asyncio.to_thread(_read_with_beam, stream, path)
        checks.append(Check(label, "ReadFromKinesis", seen, named(seen, *needles)))
        async with SQLiteCheckpointStore(path) as store:
            try:
                seen = f"read {await _read_one(stream, store, on_stream_recreated='reset')!r}"
            except Exception as exc:
                seen = error_text(exc)
    reset = "Consumer, on_stream_recreated='reset'"
    checks.append(Check(label, reset, seen, seen == "read b'new'"))
    return checks


async def _refused_position(env: Env) -> list[Check]:
    """A stored position of a listed shard that the service refuses (a row written before
    stream creation times were kept, at a sequence number past every record: kinesis-mock
    answers ResourceNotFound): read from TRIM_HORIZON, with a warning naming the shard (the
    shard was taken for gone and skipped before)."""
    label = "stored position the service refuses"
    stream = await asyncio.to_thread(env.make_stream, 1)
    await asyncio.to_thread(stream.put, b"kept", "k")
    (shard,) = await asyncio.to_thread(stream.shards)
    start = int(shard["SequenceNumberRange"]["StartingSequenceNumber"])
    logged: list[str] = []
    handler = _Collect(logged)
    logger = logging.getLogger("kinesis_core")
    logger.addHandler(handler)
    # The runner without -v sets the root logger to CRITICAL: the warning must still come here.
    level = logger.level
    logger.setLevel(logging.WARNING)
    try:
        with tempfile.TemporaryDirectory() as folder:
            async with SQLiteCheckpointStore(Path(folder) / "c.sqlite3") as store:
                await store.put(
                    "bad-input", stream.name, shard["ShardId"], (start + 10**20, 0), expected=None
                )
                try:
                    seen = f"read {await _read_one(stream, store)!r}"
                except Exception as exc:
                    seen = error_text(exc)
    finally:
        logger.setLevel(level)
        logger.removeHandler(handler)
    warned = [line for line in logged if "trim horizon" in line]
    seen = f"{seen}; warned: {warned[0] if warned else 'nothing'}"
    ok = seen.startswith("read b'kept'") and named(seen, shard["ShardId"], "TRIM_HORIZON")
    return [Check(label, "Consumer", seen, ok)]


class _Collect(logging.Handler):
    def __init__(self, into: list[str]) -> None:
        super().__init__(logging.WARNING)
        self.into = into

    def emit(self, record: logging.LogRecord) -> None:
        self.into.append(record.getMessage())


async def _malformed_entry(env: Env) -> list[Check]:
    """Entries that are no record: each fails alone, saying what it got (its type, or which
    element is missing or how many are too many)."""
    label = "malformed put_many entry"
    malformed: list[tuple[Any, tuple[str, ...]]] = [
        ("not a tuple", ("got str",)),
        (None, ("got None",)),
        ((b"b",), ("a tuple of 1 element", "partition_key (element 1) is missing")),
        ((b"b", "k", None, "id", "extra"), ("a tuple of 5 elements", "one too many (at most 4)")),
    ]
    async with env.producer() as p:
        first, last = env.good_record(), env.good_record()
        batch = await p.put_many([first, *(entry for entry, _ in malformed), last])
        env.good.extend([(first[0], batch[0]), (last[0], batch[len(malformed) + 1])])
    return [
        Check(
            label,
            f"put_many entry {entry!r}",
            result_text(batch[i]),
            named(result_text(batch[i]), "ValidationError", "tuple", *needles),
        )
        for i, (entry, needles) in enumerate(malformed, 1)
    ]


def _aggregate_case(label: str, spoil: Callable[[bytes], bytes]) -> CaseFn:
    """A record that starts with the KPL magic but does not check out is delivered unchanged
    as a plain record (the KCL's rule), and the records around it are delivered intact."""

    async def run(env: Env) -> list[Check]:
        stream = await asyncio.to_thread(env.make_stream, 1)
        blob = spoil(encode_aggregate([SubRecord(f"a{i}", None, b"sub-%d" % i) for i in range(5)]))
        for data in (b"before", blob, b"after"):
            await asyncio.to_thread(stream.put, data, "k")
        async with Consumer(
            stream.name,
            client_config=stream.client_config,
            checkpoint_store=MemoryCheckpointStore(),
            initial_position=TRIM_HORIZON,
            idle_interval=0.2,
        ) as consumer:
            got = [await asyncio.wait_for(consumer.__anext__(), 10) for _ in range(3)]
            for record in got:
                record.ack()
        raw = got[1]
        ok = [r.data for r in got] == [b"before", blob, b"after"] and not raw.aggregated
        seen = (
            "delivered unchanged as a plain record between its neighbours"
            if ok
            else f"delivered {[(r.data[:12], r.aggregated) for r in got]}"
        )
        return [Check(label, "Consumer", seen, ok)]

    return run


async def _expect_raise(awaitable: Awaitable[Any]) -> str:
    try:
        await awaitable
    except Exception as exc:
        return error_text(exc)
    return "no error"


async def _start_producer(name: str, config: ClientConfig) -> None:
    async with Producer(name, client_config=config):
        pass


async def _start_consumer(name: str, config: ClientConfig, wait: float = 0.0) -> None:
    """Start a consumer and ask for one record (errors of the readers surface there)."""
    async with Consumer(
        name,
        client_config=config,
        checkpoint_store=MemoryCheckpointStore(),
        initial_position=TRIM_HORIZON,
    ) as consumer:
        if wait:
            await asyncio.wait_for(consumer.__anext__(), wait)


async def _missing_stream(env: Env) -> list[Check]:
    label = "stream that does not exist"
    name = f"{env.healthy.name}-missing"
    config = env.healthy.client_config
    seen_p = await _expect_raise(_start_producer(name, config))
    seen_c = await _expect_raise(_start_consumer(name, config, wait=5))
    needles = (name, "ResourceNotFoundException")
    return [
        Check(label, "Producer.start", seen_p, named(seen_p, *needles)),
        Check(label, "Consumer.start", seen_c, named(seen_c, *needles)),
    ]


async def _deleted_stream(env: Env) -> list[Check]:
    label = "stream deleted while in use"
    stream = await asyncio.to_thread(env.make_stream, 1)
    await asyncio.to_thread(stream.put, b"first", "k")
    async with (
        Producer(stream.name, client_config=stream.client_config, producer_config=SHORT_TTL) as p,
        Consumer(
            stream.name,
            client_config=stream.client_config,
            checkpoint_store=MemoryCheckpointStore(),
            initial_position=TRIM_HORIZON,
            idle_interval=0.2,
            shard_refresh_interval=1.0,
        ) as consumer,
    ):
        first = await asyncio.wait_for(consumer.__anext__(), 10)
        first.ack()
        await asyncio.to_thread(stream.delete)
        seen_p = result_text(await p.put(b"late", "k"))
        try:
            record = await asyncio.wait_for(consumer.__anext__(), HANG)
            seen_c = f"no error: delivered {record.data[:20]!r}"
        except StopAsyncIteration:
            seen_c = "the iteration ended without an error"
        except asyncio.TimeoutError:
            seen_c = (
                f"no error after {HANG:g} s: the iterator neither raises nor ends (the readers "
                "log 'shard ... is gone; not reading it' and discovery keeps failing)"
            )
        except Exception as exc:
            seen_c = error_text(exc)
    return [
        Check(label, "Producer.put", seen_p, named(seen_p, "ResourceNotFoundException")),
        Check(label, "Consumer", seen_c, named(seen_c, "ResourceNotFoundException")),
    ]


async def _deregistered_consumer(env: Env) -> list[Check]:
    """The stream consumer of a fan-out reader is deregistered while it reads: the next
    subscribe gets ResourceNotFoundException, DescribeStreamConsumer says the consumer is gone,
    and the iteration raises within seconds, naming it (20 backed-off resubscriptions, about
    109 s, before)."""
    label = "fan-out consumer deregistered while in use"
    stream = await asyncio.to_thread(env.make_stream, 1)
    await asyncio.to_thread(stream.put, b"first", "k")
    efo = EnhancedFanOut(consumer_name="deregistered", max_subscription_seconds=2.0)
    async with Consumer(
        stream.name,
        client_config=stream.client_config,
        checkpoint_store=MemoryCheckpointStore(),
        initial_position=TRIM_HORIZON,
        enhanced_fan_out=efo,
    ) as consumer:
        first = await asyncio.wait_for(consumer.__anext__(), 30)
        first.ack()
        assert consumer.consumer_arn is not None
        async with create_kinesis_client(stream.client_config) as client:
            await deregister_consumer(client, consumer.consumer_arn)
        started = time.monotonic()
        try:
            record = await asyncio.wait_for(consumer.__anext__(), HANG)
            seen = f"no error: delivered {record.data[:20]!r}"
        except asyncio.TimeoutError:
            seen = f"no error after {HANG:g} s"
        except Exception as exc:
            seen = error_text(exc)
        seconds = time.monotonic() - started
    return [
        Check(
            label,
            "Consumer (fan-out)",
            f"{seen} (after {seconds:.1f} s)",
            named(seen, "ShardReadError", "stream consumer 'deregistered'", stream.name, "gone")
            and seconds < FAST,
        )
    ]


async def _creating_stream(env: Env) -> list[Check]:
    """kinesis-mock keeps new streams CREATING for a while: the records cannot be written
    before their TTL runs out (they fail, saying why); a consumer waits (its readers retry
    ResourceInUse with backoff) and reads what is written once the stream is ACTIVE."""
    label = "stream still being created"
    with KinesisMock(status_delay=3 * SHORT_TTL.record_ttl) as server:
        config = server.client_config()
        client = create_botocore_client(config, "kinesis")
        try:
            for name in ("creating-p", "creating-c"):
                client.create_stream(StreamName=name, ShardCount=1)
            async with Producer("creating-p", client_config=config, producer_config=SHORT_TTL) as p:
                seen_p = result_text(await p.put(b"early", "k"))
            reading = asyncio.create_task(_first_record("creating-c", config))
            await asyncio.to_thread(
                client.get_waiter("stream_exists").wait,
                StreamName="creating-c",
                WaiterConfig={"Delay": 0.5, "MaxAttempts": 60},
            )
            await asyncio.to_thread(
                client.put_record, StreamName="creating-c", Data=b"late", PartitionKey="k"
            )
            try:
                seen_c = f"read {await asyncio.wait_for(reading, 30)!r} once the stream was ACTIVE"
            except Exception as exc:
                seen_c = error_text(exc)
        finally:
            client.close()
    needles = ("ResourceInUseException", "not currently ACTIVE")
    return [
        Check(label, "Producer.put", seen_p, named(seen_p, *needles)),
        Check(label, "Consumer", seen_c, seen_c.startswith("read b'late'")),
    ]


async def _first_record(name: str, config: ClientConfig) -> bytes:
    async with Consumer(
        name,
        client_config=config,
        checkpoint_store=MemoryCheckpointStore(),
        initial_position=TRIM_HORIZON,
        idle_interval=0.2,
    ) as consumer:
        record = await consumer.__anext__()
        record.ack()
        return record.data


class AuthMoto(MotoServer):
    """moto checking credentials against its IAM (none exist, so every key is refused)."""

    def _environment(self) -> dict[str, str]:
        return {"INITIAL_NO_AUTH_ACTION_COUNT": "0"}


FAST = 10.0
"""Seconds within which the error of a start that cannot succeed must come (it took 30)."""


async def _timed_raise(awaitable: Awaitable[Any]) -> tuple[str, float]:
    started = time.monotonic()
    seen = await _expect_raise(awaitable)
    return seen, time.monotonic() - started


async def _wrong_credentials(env: Env) -> list[Check]:
    label = "wrong credentials"
    with AuthMoto() as server:
        config = dataclasses.replace(
            server.client_config(),
            aws_access_key_id="AKIAWRONGWRONGWRONG0",
            aws_secret_access_key="not-the-secret",  # noqa: S106 - a wrong one, on purpose
        )
        needles = ("security token", "invalid")
        seen = await _expect_raise(_start_consumer("any", config, wait=5))
        checks = [Check(label, "Consumer.start", seen, named(seen, *needles))]
        seen, seconds = await _timed_raise(_start_producer("any", config))
        checks.append(
            Check(
                label,
                "Producer.start",
                f"{seen} (after {seconds:.1f} s)",
                named(seen, *needles) and seconds < FAST,
            )
        )
    return checks


async def _endpoint_down(env: Env) -> list[Check]:
    label = "endpoint that is down"
    url = f"http://127.0.0.1:{free_port()}"
    down = via(env.healthy.client_config, url, connect_timeout=1.0)
    needles = ("Could not connect", url)
    seen = await _expect_raise(_start_consumer(env.healthy.name, down, wait=5))
    checks = [Check(label, "Consumer.start", seen, named(seen, *needles))]
    # A producer whose endpoint goes away after it started.
    proxy = FaultProxy(env.healthy.endpoint_url)
    await proxy.start()
    try:
        config = via(env.healthy.client_config, proxy.endpoint_url, connect_timeout=1.0)
        async with Producer(env.healthy.name, client_config=config, producer_config=SHORT_TTL) as p:
            gone = proxy.endpoint_url
            await proxy.stop()
            seen = result_text(await p.put(b"into the void", "k"))
    finally:
        await proxy.stop()
    checks.append(
        Check(label, "Producer.put", seen, named(seen, "Expired", "Could not connect", gone))
    )
    seen, seconds = await _timed_raise(_start_producer(env.healthy.name, down))
    checks.append(
        Check(
            label,
            "Producer.start",
            f"{seen} (after {seconds:.1f} s)",
            named(seen, *needles) and seconds < FAST,
        )
    )
    return checks


async def _bad_configuration(env: Env) -> list[Check]:
    label = "bad configuration"
    five: Any = 5  # a value of the wrong type, as an untyped caller would pass it
    attempts: list[tuple[str, Callable[[], object], tuple[str, ...]]] = [
        ("ProducerConfig", lambda: ProducerConfig(record_ttl=0.0), ("record_ttl",)),
        ("ClientConfig", lambda: ClientConfig(endpoint_url="localhost:4567"), ("endpoint_url",)),
        ("ClientConfig", lambda: ClientConfig(verify=five), ("ConfigurationError", "verify")),
        (
            "ClientConfig",
            lambda: ClientConfig(region_name=five),
            ("ConfigurationError", "region_name"),
        ),
        (
            "ProducerConfig",
            lambda: ProducerConfig(max_record_bytes=LARGEST_RECORD_BYTES + 1),
            ("ConfigurationError", "max_record_bytes", str(LARGEST_RECORD_BYTES)),
        ),
        ("Consumer", lambda: Consumer("s", checkpoint_interval=0), ("checkpoint_interval",)),
        (
            "ClientConfig",
            lambda: ClientConfig(endpoint_url="http://127.0.0.1:99999"),
            ("ConfigurationError", "endpoint_url", "port 1 to 65535", "99999"),
        ),
        (
            "ClientConfig",
            lambda: ClientConfig(endpoint_url="http://"),
            ("ConfigurationError", "endpoint_url", "must name a host"),
        ),
        (
            "ClientConfig",
            lambda: ClientConfig(endpoint_url="http://user:hunter2@127.0.0.1:4567"),
            ("ConfigurationError", "endpoint_url", "user:password@", "'http://***@127.0.0.1:4567'"),
        ),
        (
            "ClientConfig",
            lambda: ClientConfig(region_name="us east 1"),
            ("ConfigurationError", "region_name", "letters, digits and hyphens", "'us east 1'"),
        ),
        (
            "Consumer",
            lambda: Consumer("s", idle_interval=float("inf")),
            ("ConfigurationError", "idle_interval", "finite", "inf"),
        ),
        (
            "AtTimestamp",
            lambda: AtTimestamp(1e12),
            ("ConfigurationError", "timestamp", "epoch seconds from 0 to", "milliseconds"),
        ),
        (
            "AtTimestamp",
            lambda: AtTimestamp(float("nan")),
            ("ConfigurationError", "timestamp", "epoch seconds from 0 to", "nan"),
        ),
    ]
    checks = []
    for where, make, needles in attempts:
        try:
            make()
            seen = "no error"
        except (ConfigurationError, ValidationError) as exc:
            seen = error_text(exc)
        checks.append(Check(label, where, seen, named(seen, *needles)))
    return checks


async def _local_files(env: Env) -> list[Check]:
    """A profile or a CA bundle that is not on this machine: ``start`` refuses it at once,
    naming the field (before: botocore's raw ProfileNotFound; 30 s of retries for the
    bundle, whose path no message named)."""
    label = "missing profile or CA bundle"
    checks = []
    profile = f"no-such-profile-{uuid.uuid4().hex[:6]}"
    bundle = "/no/such/ca-bundle.pem"
    healthy = env.healthy.client_config
    for config, needles in (
        (
            dataclasses.replace(healthy, profile_name=profile),
            ("profile_name", f"no profile '{profile}'"),
        ),
        (dataclasses.replace(healthy, verify=bundle), ("verify", f"'{bundle}' does not exist")),
    ):
        for where, start in (
            ("Consumer.start", _start_consumer(env.healthy.name, config)),
            ("Producer.start", _start_producer(env.healthy.name, config)),
        ):
            seen, seconds = await _timed_raise(start)
            checks.append(
                Check(
                    label,
                    where,
                    f"{seen} (after {seconds:.1f} s)",
                    named(seen, "ConfigurationError", *needles) and seconds < FAST,
                )
            )
    return checks


async def _status_command(env: Env) -> list[Check]:
    """``kinesis-connectors status`` run as a user runs it, with a store that is a directory,
    a missing one, and an empty ``--application``: the exit status the docs give (1: cannot be
    read, 2: a wrong command line) and a message naming the cause (before: the directory "does
    not exist", an empty application became ``default``, and every store problem exited 2)."""
    label = "status command: bad store or application"
    config = env.healthy.client_config
    environ = {
        **os.environ,
        "AWS_ENDPOINT_URL_KINESIS": config.endpoint_url or "",
        "AWS_DEFAULT_REGION": config.region_name or "",
        "AWS_ACCESS_KEY_ID": config.aws_access_key_id or "",
        "AWS_SECRET_ACCESS_KEY": config.aws_secret_access_key or "",
    }
    checks = []
    with tempfile.TemporaryDirectory() as folder:
        missing = str(Path(folder) / "missing.sqlite3")
        for args, status, needles in (
            (("--store", folder), 1, (f"{folder!r} is a directory, not a checkpoint file",)),
            (("--store", missing), 1, (f"{missing!r} does not exist",)),
            (("--store", missing, "--application", ""), 2, ("--application: must not be empty",)),
        ):
            process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "kinesis_core",
                "status",
                env.healthy.name,
                *args,
                env=environ,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.PIPE,
            )
            _, stderr = await process.communicate()
            said = stderr.decode().strip().splitlines()
            seen = f"exit {process.returncode}: {said[-1] if said else ''}"
            checks.append(
                Check(
                    label,
                    f"status {' '.join(args)}",
                    seen,
                    process.returncode == status and named(seen, *needles),
                )
            )
    return checks


_WITHOUT_EFO_EXTRA = """
import asyncio, json, sys
sys.modules["h2"] = None  # as if the efo extra (h2) were not installed
from kinesis_core.aws.config import ClientConfig
from kinesis_core.consumer import Consumer, EnhancedFanOut
from kinesis_core.checkpoint import MemoryCheckpointStore
from kinesis_core.stream import StreamRef
from beam_kinesis import ReadFromKinesis
from kinesis_core.fanout.consumers import open_fan_out_on_loop
from kinesis_core.runtime.loop_thread import LoopThread

stream, config = sys.argv[1], ClientConfig(**json.loads(sys.argv[2]))


async def core():
    async with Consumer(
        stream,
        client_config=config,
        checkpoint_store=MemoryCheckpointStore(),
        enhanced_fan_out=EnhancedFanOut(consumer_name="core-without-h2"),
    ):
        pass


def beam():
    spec = ReadFromKinesis(stream, consumer_name="beam-without-h2", client_config=config)._spec
    open_fan_out_on_loop(LoopThread.get(), spec.client_config, StreamRef.of(stream), spec.fan_out)


seen = {}
for where, start in (("Consumer.start", lambda: asyncio.run(core())), ("ReadFromKinesis", beam)):
    try:
        start()
        seen[where] = "no error"
    except Exception as exc:
        seen[where] = f"{type(exc).__name__}: {exc}"
print(json.dumps(seen))
"""


async def _without_efo_extra(env: Env) -> list[Check]:
    """Fan-out where h2 cannot be imported (a process without the ``efo`` extra): the
    core consumer and a Beam worker fail with the pip command before they register a consumer
    (on AWS one costs money and counts toward the 20 a stream may have); before, both
    registered theirs, then failed."""
    label = "fan-out without the efo extra"
    stream = await asyncio.to_thread(env.make_stream, 1)
    config = stream.client_config
    fields = {
        name: getattr(config, name)
        for name in ("region_name", "endpoint_url", "aws_access_key_id", "aws_secret_access_key")
    }
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _WITHOUT_EFO_EXTRA,
        stream.name,
        json.dumps(fields),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await process.communicate()
    if process.returncode != 0:
        return [Check(label, "a process without h2", err.decode()[-500:], False)]
    seen: dict[str, str] = json.loads(out.decode().strip().splitlines()[-1])
    client = create_botocore_client(config, "kinesis")
    try:
        arn = client.describe_stream_summary(StreamName=stream.name)
        listed = client.list_stream_consumers(
            StreamARN=arn["StreamDescriptionSummary"]["StreamARN"]
        )
    finally:
        client.close()
    registered = sorted(c["ConsumerName"] for c in listed["Consumers"])
    said = f"; registered: {registered}" if registered else "; nothing registered"
    return [
        Check(
            label,
            where,
            text + said,
            named(text, "ConfigurationError", "h2", "pip install 'kinesis-connectors[efo]'")
            and not registered,
        )
        for where, text in seen.items()
    ]


def _corrupt_md5(blob: bytes) -> bytes:
    return blob[:-1] + bytes([blob[-1] ^ 0xFF])


def _truncated(blob: bytes) -> bytes:
    return blob[: len(blob) // 2]


def cases() -> dict[str, CaseFn]:
    """Every kind of bad input, by name."""
    mib = MAX_RECORD_BYTES
    return {
        "oversized data": _input_case("oversized data", (b"x" * (mib + 1), "k"), "data", str(mib)),
        "data plus key over 1 MiB": _input_case(
            "data plus key over 1 MiB", (b"x" * (mib - 4), "k" * 10), "partition key", str(mib)
        ),
        "empty partition key": _input_case(
            "empty partition key", (b"x", ""), "partition_key", "empty"
        ),
        "over-long partition key": _input_case(
            "over-long partition key", (b"x", "k" * 257), "partition_key", "257", "256"
        ),
        "partition key over 256 as Kinesis counts (129 emoji)": _input_case(
            "partition key over 256 as Kinesis counts (129 emoji)",
            (b"x", "\N{GRINNING FACE}" * 129),
            "partition_key",
            "258",
            "256",
            "UTF-16",
        ),
        "lone surrogate in a partition key": _lone_surrogate,
        "a record the service refuses": _refused_by_the_service,
        "explicit hash key out of range": _input_case(
            "explicit hash key out of range",
            (b"x", "k", 2**128),
            "explicit_hash_key",
            "2**128 - 1",
        ),
        "explicit hash key not a decimal": _input_case(
            "explicit hash key not a decimal",
            (b"x", "k", "0x1f"),
            "explicit_hash_key",
            "decimal",
        ),
        "data of the wrong type": _input_case(
            "data of the wrong type", ("text", "k"), "data", "bytes", "str"
        ),
        "partition key of the wrong type": _input_case(
            "partition key of the wrong type", (b"x", 42), "partition_key", "str", "int"
        ),
        "explicit hash key of the wrong type": _input_case(
            "explicit hash key of the wrong type", (b"x", "k", 1.5), "explicit_hash_key", "float"
        ),
        "malformed put_many entry": _malformed_entry,
        "corrupt aggregate (bad MD5)": _aggregate_case("corrupt aggregate (bad MD5)", _corrupt_md5),
        "truncated aggregate": _aggregate_case("truncated aggregate", _truncated),
        "magic bytes then garbage": _aggregate_case(
            "magic bytes then garbage", lambda _: MAGIC + b"\xff\x00garbage" + b"0" * 16
        ),
        "stream that does not exist": _missing_stream,
        "stream deleted while in use": _deleted_stream,
        "fan-out consumer deregistered while in use": _deregistered_consumer,
        "stream still being created": _creating_stream,
        "stream named by its ARN": _stream_by_arn,
        "wrong credentials": _wrong_credentials,
        "endpoint that is down": _endpoint_down,
        "bad configuration": _bad_configuration,
        "missing profile or CA bundle": _local_files,
        "session token or signature in DEBUG logs": _session_token_in_logs,
        "checkpoint store at a bad path": _sqlite_store_path,
        "status command: bad store or application": _status_command,
        "fan-out without the efo extra": _without_efo_extra,
        "two consumers sharing a store without leases": _shared_store,
        "stream deleted and created again": _recreated_stream,
        "stored position the service refuses": _refused_position,
    }


async def _guarded(env: Env, case: CaseFn) -> list[Check]:
    """Run a case next to the bystander producer."""
    stop = asyncio.Event()
    bystander = asyncio.create_task(env.bystander(stop))
    try:
        return await case(env)
    finally:
        stop.set()
        await bystander


def run_case(env: Env, name: str) -> list[Check]:
    """One case of the catalogue (for tests that want one case per test)."""
    return asyncio.run(_guarded(env, cases()[name]))


def check_bystanders(env: Env) -> tuple[int, int]:
    """(good records found where their result says, good records lost)."""
    at = {shard_position(r): r.data for r in kcl_view(env.healthy)}
    found = sum(
        1
        for data, r in env.good
        if r.shard_id and r.position and at.get((r.shard_id, *r.position)) == data
    )
    return found, len(env.good) - found


def bad_input(make_stream: MakeStream, *, only: Sequence[str] | None = None) -> SuiteResult:
    result = SuiteResult(NAME)
    started = time.monotonic()
    env = Env(make_stream, make_stream(2))
    checks: list[Check] = []
    for name in only or list(cases()):
        checks.extend(run_case(env, name))
    result.faults = len({c.case for c in checks})
    good, lost = check_bystanders(env)
    result.attempted = len(checks) + len(env.good)
    result.delivered = good
    result.lost = lost
    result.failed = sum(1 for c in checks if c.ok)
    for c in checks:
        if not c.ok:
            result.problem(f"{c.case} / {c.where}: no clear error naming the cause; got: {c.seen}")
    result.note(
        f"{result.faults} kinds, {len(checks)} bad inputs ({result.failed} with a clear error), "
        f"{len(env.good)} good records put meanwhile ({good} written where their result says)"
    )
    result.seconds = time.monotonic() - started
    return result
