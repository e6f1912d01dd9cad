"""Credentials refused: the producer says so within seconds, never after its 30 s TTL.

On a moto server that checks credentials (against its IAM, where none exist, so every key is
refused) once told to (``/moto-api/reset-auth``):

- a producer starts with credentials the server refuses: ``start()`` must raise, naming the
  error, within a few seconds (it retried for 30 s before);
- a producer writing happily has its credentials refused from one moment on (the server starts
  checking): every record it holds must fail at once with the server's error code, and the
  next ``put`` must raise, naming it.

Counted: records written before the refusal (read back from the stream, delivered), records
failed with the auth error (failed), none lost.
"""

from __future__ import annotations

import asyncio
import time
import urllib.request
from dataclasses import dataclass

from kinesis_core.aws.classify import ErrorKind, classify
from kinesis_core.errors import KinesisConnectorError
from kinesis_core.local import MotoServer
from kinesis_core.local.streams import LocalStream
from kinesis_core.producer import (
    BatchResult,
    Producer,
    ProducerConfig,
    ProducerFailedError,
    RecordResult,
)
from reliability._common import kcl_view, payload, shard_position
from reliability.result import SuiteResult

NAME = "producer auth fail-fast"
TTL = 30.0
FAST = 5.0
"""Seconds within which the error must come (the TTL is 30 s)."""


def _check_credentials(server: MotoServer, check: bool) -> None:
    """Have moto check credentials from the next request on (or stop checking)."""
    value = b"0" if check else b"inf"
    request = urllib.request.Request(  # noqa: S310 - the local server's http:// URL
        f"{server.endpoint_url}/moto-api/reset-auth",
        data=value,
        method="POST",
        headers={"Content-Type": "text/plain"},  # not a form: moto reads the raw body
    )
    with urllib.request.urlopen(request, timeout=10) as answer:  # noqa: S310
        answer.read()


@dataclass
class _Refused:
    seconds: float
    error: str


async def _start_refused(server: MotoServer, stream: LocalStream) -> _Refused:
    started = time.monotonic()
    try:
        async with Producer(stream.name, client_config=server.client_config()):
            pass
    except KinesisConnectorError as exc:
        return _Refused(time.monotonic() - started, f"{type(exc).__name__}: {exc}")
    return _Refused(time.monotonic() - started, "no error")


async def _refused_while_writing(
    server: MotoServer, stream: LocalStream
) -> tuple[list[BatchResult], _Refused, str]:
    config = ProducerConfig(record_ttl=TTL, record_max_buffered_time=0.05)
    batches: list[asyncio.Future[BatchResult]] = []
    async with Producer(
        stream.name, client_config=server.client_config(), producer_config=config
    ) as p:
        n = 0
        refused_at = None
        while True:
            if refused_at is None and n >= 2_000:
                await asyncio.to_thread(_check_credentials, server, True)
                refused_at = time.monotonic()
            try:
                records = [(payload(i, 100), f"key-{i}") for i in range(n, n + 100)]
                batches.append(await p.submit_many(records))
            except ProducerFailedError as exc:
                after_put = f"{type(exc).__name__}: {exc}"
                break
            n += 100
            await asyncio.sleep(0.02)
            if refused_at is not None and time.monotonic() - refused_at > TTL:
                after_put = "put was still accepted a TTL after the refusal"
                break
        results = list(await asyncio.gather(*batches))
    assert refused_at is not None
    last = max(
        (r.attempts[-1].ended_at for b in results for r in b if not r.success and r.attempts),
        default=refused_at,
    )
    failed = next((r for b in results for r in b if not r.success), None)
    error = f"{failed.error_code}: {failed.error_message}" if failed else "no record failed"
    return results, _Refused(last - refused_at, error), after_put


def producer_auth() -> SuiteResult:
    result = SuiteResult(NAME, faults=2)
    started = time.monotonic()
    with MotoServer() as server:
        stream = server.create_stream("auth", shards=2)
        try:
            _check_credentials(server, True)
            at_start = asyncio.run(_start_refused(server, stream))
            _check_credentials(server, False)
            results, while_writing, after_put = asyncio.run(_refused_while_writing(server, stream))
            _check_credentials(server, False)
            _reconcile(result, stream, [r for b in results for r in b])
        finally:
            _check_credentials(server, False)
            stream.delete()
            stream.close()
    result.note(
        f"start with refused credentials: raised after {at_start.seconds:.2f} s: "
        f"{at_start.error[:160]}"
    )
    result.note(
        f"credentials refused while writing: every record held failed within "
        f"{while_writing.seconds:.2f} s of the refusal (TTL {TTL:g} s): {while_writing.error[:120]}"
    )
    result.note(f"the next put: {after_put[:160]}")
    if at_start.seconds > FAST or "InvalidClientTokenId" not in at_start.error:
        result.problem(f"start() did not name the refused credentials within {FAST:g} s")
    if while_writing.seconds > FAST:
        result.problem(f"records held failed {while_writing.seconds:.1f} s after the refusal")
    if "ProducerFailedError" not in after_put:
        result.problem(f"put after the refusal: {after_put}")
    result.seconds = time.monotonic() - started
    return result


def _reconcile(result: SuiteResult, stream: LocalStream, results: list[RecordResult]) -> None:
    at = {shard_position(r): r.data for r in kcl_view(stream)}
    for i, r in enumerate(results):
        result.attempted += 1
        if r.success and r.shard_id and r.position:
            if at.get((r.shard_id, *r.position)) == payload(i, 100):
                result.delivered += 1
                continue
        elif r.error_code and classify(r.error_code) is ErrorKind.AUTH:
            result.failed += 1
            continue
        elif r.error_code:
            result.problem(f"record {i} failed with {r.error_code}, not the auth error")
            result.failed += 1
            continue
        result.lost += 1
