"""The bad-input catalogue: each kind of bad input gets a clear error naming its cause, and
nothing else is harmed.

Every case runs next to a bystander: a producer on a healthy stream that keeps putting good
records meanwhile (in the same event loop). The input cases also put good records in the very
batch that holds the bad one. At the end every good record must be in the healthy stream where
its result says. A check passes when the error the user sees names the cause: the field and
the limit for bad records, the stream and the service's error for stream problems.

The two cases where the core retries for 30 s before giving up (a producer starting against
wrong credentials or an endpoint that is down) run only with ``slow=True``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from kinesis_core.aggregation import MAGIC, encode_aggregate
from kinesis_core.checkpoint import MemoryCheckpointStore
from kinesis_core.client import ClientConfig, create_botocore_client
from kinesis_core.consumer import TRIM_HORIZON, Consumer
from kinesis_core.errors import ConfigurationError, ValidationError
from kinesis_core.hashing import MAX_RECORD_BYTES
from kinesis_core.local import KinesisMock, MotoServer
from kinesis_core.local._server import free_port
from kinesis_core.local.fault_proxy import FaultProxy
from kinesis_core.local.streams import LocalStream
from kinesis_core.producer import Producer, ProducerConfig, RecordResult
from kinesis_core.records import SubRecord
from reliability._common import MakeStream, kcl_view, shard_position, via
from reliability.result import SuiteResult

NAME = "bad-input catalogue"
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
    return f"{type(exc).__name__}: {exc}"


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


async def _malformed_entry(env: Env) -> list[Check]:
    label = "malformed put_many entry"
    async with env.producer() as p:
        first, last = env.good_record(), env.good_record()
        batch = await p.put_many([first, "not a tuple", None, last])
        env.good.extend([(first[0], batch[0]), (last[0], batch[3])])
    return [
        Check(
            label,
            f"put_many entry {i}",
            result_text(batch[i]),
            named(result_text(batch[i]), "ValidationError", "tuple"),
        )
        for i in (1, 2)
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
        Producer(stream.name, client_config=stream.client_config, config=SHORT_TTL) as p,
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


async def _creating_stream(env: Env) -> list[Check]:
    """kinesis-mock keeps new streams CREATING for a while; the records cannot be written
    before their TTL runs out, the consumer cannot read."""
    label = "stream still being created"
    with KinesisMock(status_delay=3 * SHORT_TTL.record_ttl) as server:
        config = server.client_config()
        client = create_botocore_client(config, "kinesis")
        try:
            for name in ("creating-p", "creating-c"):
                client.create_stream(StreamName=name, ShardCount=1)
        finally:
            client.close()
        async with Producer("creating-p", client_config=config, config=SHORT_TTL) as p:
            seen_p = result_text(await p.put(b"early", "k"))
        seen_c = await _expect_raise(_start_consumer("creating-c", config, wait=5))
    needles = ("ResourceInUseException", "not currently ACTIVE")
    return [
        Check(label, "Producer.put", seen_p, named(seen_p, *needles)),
        Check(label, "Consumer", seen_c, named(seen_c, *needles)),
    ]


class AuthMoto(MotoServer):
    """moto checking credentials against its IAM (none exist, so every key is refused)."""

    def _environment(self) -> dict[str, str]:
        return {"INITIAL_NO_AUTH_ACTION_COUNT": "0"}


def _wrong_credentials(slow: bool) -> CaseFn:
    async def run(env: Env) -> list[Check]:
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
            if slow:
                seen = await _expect_raise(_start_producer("any", config))
                checks.append(Check(label, "Producer.start", seen, named(seen, *needles)))
        return checks

    return run


def _endpoint_down(slow: bool) -> CaseFn:
    async def run(env: Env) -> list[Check]:
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
            async with Producer(env.healthy.name, client_config=config, config=SHORT_TTL) as p:
                gone = proxy.endpoint_url
                await proxy.stop()
                seen = result_text(await p.put(b"into the void", "k"))
        finally:
            await proxy.stop()
        checks.append(
            Check(label, "Producer.put", seen, named(seen, "Expired", "Could not connect", gone))
        )
        if slow:
            seen = await _expect_raise(_start_producer(env.healthy.name, down))
            checks.append(Check(label, "Producer.start", seen, named(seen, *needles)))
        return checks

    return run


async def _bad_configuration(env: Env) -> list[Check]:
    label = "bad configuration"
    attempts: list[tuple[str, Callable[[], object], tuple[str, ...]]] = [
        ("ProducerConfig", lambda: ProducerConfig(record_ttl=0.0), ("record_ttl",)),
        ("ClientConfig", lambda: ClientConfig(endpoint_url="localhost:4567"), ("endpoint_url",)),
        ("Consumer", lambda: Consumer("s", checkpoint_interval=0), ("checkpoint_interval",)),
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


def _corrupt_md5(blob: bytes) -> bytes:
    return blob[:-1] + bytes([blob[-1] ^ 0xFF])


def _truncated(blob: bytes) -> bytes:
    return blob[: len(blob) // 2]


def cases(*, slow: bool = False) -> dict[str, CaseFn]:
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
        "stream still being created": _creating_stream,
        "wrong credentials": _wrong_credentials(slow),
        "endpoint that is down": _endpoint_down(slow),
        "bad configuration": _bad_configuration,
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


def run_case(env: Env, name: str, *, slow: bool = False) -> list[Check]:
    """One case of the catalogue (for tests that want one case per test)."""
    return asyncio.run(_guarded(env, cases(slow=slow)[name]))


def check_bystanders(env: Env) -> tuple[int, int]:
    """(good records found where their result says, good records lost)."""
    at = {shard_position(r): r.data for r in kcl_view(env.healthy)}
    found = sum(
        1
        for data, r in env.good
        if r.shard_id and r.position and at.get((r.shard_id, *r.position)) == data
    )
    return found, len(env.good) - found


def bad_input(
    make_stream: MakeStream,
    *,
    slow: bool = False,
    only: Sequence[str] | None = None,
) -> SuiteResult:
    result = SuiteResult(NAME)
    started = time.monotonic()
    env = Env(make_stream, make_stream(2))
    checks: list[Check] = []
    for name in only or list(cases(slow=slow)):
        checks.extend(run_case(env, name, slow=slow))
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
    if not slow:
        result.note(
            "left out (slow=False): Producer.start against wrong credentials and "
            "against an endpoint that is down (each retries for 30 s)"
        )
    result.seconds = time.monotonic() - started
    return result
