"""How lean senders learn a route: a key's first call goes through botocore, and the calls made
while it is on its way wait for it (LeanRequests.call), with the route learned from botocore's
``before-send`` event as on a real client; no network (a recording HTTP session answers)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
from botocore.awsrequest import AWSRequest

from kinesis_core.aws.botocore_private import request_signer
from kinesis_core.aws.client import create_kinesis_client
from kinesis_core.aws.config import ClientConfig
from kinesis_core.aws.lean_requests import LeanRequests, Route

AUTH = (
    "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20261126/eu-west-1/kinesis/aws4_request, "
    "SignedHeaders=content-type;host;x-amz-date;x-amz-target, Signature=abc"
)
CONFIG = ClientConfig(
    region_name="eu-west-1",
    endpoint_url="http://127.0.0.1:9",
    aws_access_key_id="AKIDEXAMPLE",
    aws_secret_access_key="secret",
)


class _Lean(LeanRequests):
    OPERATION = "DescribeLimits"

    def route_key(self, request: Any) -> Any:
        return request.body.decode()


class _Calls:
    """A lean sender on a real client, with botocore calls that the test lets go (``release``:
    sent, as botocore's ``before-send`` event says) and answers (``answer``), and a record of
    which way every call went."""

    def __init__(self, client: Any) -> None:
        self.lean = _Lean(client, request_signer(client), None)
        self._client = client
        self.release = asyncio.Event()
        self.answer = asyncio.Event()
        self.answer.set()
        self.by_botocore: list[str] = []
        self.by_lean: list[tuple[str, str]] = []
        self.signs = True
        self.unsent_failures = 0
        self.fails = False

    async def _botocore(self, key: str) -> str:
        self.by_botocore.append(key)
        await self.release.wait()
        if self.unsent_failures:
            self.unsent_failures -= 1
            raise ConnectionError(f"{key}: no credentials")
        request = AWSRequest(
            method="POST", url=f"https://{key}.example/", data=key.encode(), headers={}
        ).prepare()
        if self.signs:
            request.headers["Authorization"] = AUTH
        await self._client.meta.events.emit(
            f"before-send.kinesis.{_Lean.OPERATION}", request=request
        )
        await self.answer.wait()
        if self.fails:
            raise ConnectionError(f"{key}: refused")
        return "botocore"

    async def _lean(self, key: str, route: Route) -> str:
        self.by_lean.append((key, route.url))
        return "lean"

    def call(self, key: str) -> Coroutine[Any, Any, str]:
        return self.lean.call(
            key, lambda: self._botocore(key), lambda route: self._lean(key, route)
        )


def _run(test: Callable[[_Calls], Coroutine[Any, Any, None]]) -> None:
    async def main() -> None:
        async with create_kinesis_client(CONFIG, max_attempts=1) as client:
            await test(_Calls(client))

    asyncio.run(main())


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def test_calls_made_during_a_keys_first_call_wait_for_it_and_go_the_lean_way() -> None:
    async def test(calls: _Calls) -> None:
        started = [asyncio.ensure_future(calls.call("s")) for _ in range(50)]
        await _settle()
        assert calls.by_botocore == ["s"], "only the first call goes through botocore"
        assert not any(task.done() for task in started)
        calls.release.set()
        assert await asyncio.gather(*started) == ["botocore"] + ["lean"] * 49
        assert calls.by_lean == [("s", "https://s.example/")] * 49
        assert await calls.call("s") == "lean"
        assert calls.by_botocore == ["s"]

    _run(test)


def test_each_key_learns_its_own_route_without_waiting_for_the_others() -> None:
    async def test(calls: _Calls) -> None:
        started = [asyncio.ensure_future(calls.call(key)) for key in ("a", "b", "a", "b")]
        await _settle()
        assert calls.by_botocore == ["a", "b"]
        calls.release.set()
        assert await asyncio.gather(*started) == ["botocore", "botocore", "lean", "lean"]
        assert calls.by_lean == [("a", "https://a.example/"), ("b", "https://b.example/")]

    _run(test)


def test_when_the_first_call_learns_nothing_the_calls_stop_waiting() -> None:
    """A route that cannot be learned (a client that does not sign with SigV4) must not make
    its calls go one at a time: after the first, they all go through botocore at once."""

    async def test(calls: _Calls) -> None:
        calls.signs = False
        first = [asyncio.ensure_future(calls.call("s")) for _ in range(3)]
        await _settle()
        calls.release.set()
        assert await asyncio.gather(*first) == ["botocore"] * 3
        calls.release.clear()
        later = [asyncio.ensure_future(calls.call("s")) for _ in range(4)]
        await _settle()
        assert len(calls.by_botocore) == 3 + 4, "later calls waited for one another"
        calls.signs = True
        calls.release.set()
        assert await asyncio.gather(*later) == ["botocore"] * 4
        assert await calls.call("s") == "lean", "a route botocore shows later is used"

    _run(test)


def test_the_waiting_calls_go_as_soon_as_the_first_call_is_sent() -> None:
    """They need the route, not the first call's answer (a GetRecords of up to 10 MiB)."""

    async def test(calls: _Calls) -> None:
        calls.answer.clear()
        first = asyncio.ensure_future(calls.call("s"))
        waiting = [asyncio.ensure_future(calls.call("s")) for _ in range(3)]
        await _settle()
        calls.release.set()
        assert await asyncio.wait_for(asyncio.gather(*waiting), 5) == ["lean"] * 3
        assert not first.done()
        calls.answer.set()
        assert await first == "botocore"

    _run(test)


def test_a_first_call_that_fails_once_sent_fails_alone() -> None:
    async def test(calls: _Calls) -> None:
        calls.fails = True
        started = [asyncio.ensure_future(calls.call("s")) for _ in range(3)]
        await _settle()
        calls.release.set()
        results = await asyncio.gather(*started, return_exceptions=True)
        assert isinstance(results[0], ConnectionError)
        assert results[1:] == ["lean", "lean"], "the route was learned before the failure"

    _run(test)


def test_a_first_call_that_fails_unsent_hands_the_learning_to_one_waiting_call() -> None:
    async def test(calls: _Calls) -> None:
        calls.unsent_failures = 1
        calls.answer.clear()
        first = asyncio.ensure_future(calls.call("s"))
        waiting = [asyncio.ensure_future(calls.call("s")) for _ in range(3)]
        await _settle()
        calls.release.set()
        await _settle()
        assert first.done()
        assert isinstance(first.exception(), ConnectionError)
        assert calls.by_botocore == ["s", "s"], "one waiting call took the learning over"
        calls.answer.set()
        assert sorted(await asyncio.gather(*waiting)) == ["botocore", "lean", "lean"]

    _run(test)


def test_a_cancelled_call_does_not_hold_up_the_others() -> None:
    async def test(calls: _Calls) -> None:
        first = asyncio.ensure_future(calls.call("s"))
        waiting = [asyncio.ensure_future(calls.call("s")) for _ in range(2)]
        await _settle()
        waiting[0].cancel()
        calls.release.set()
        assert await first == "botocore"
        assert await waiting[1] == "lean"
        with pytest.raises(asyncio.CancelledError):
            await waiting[0]

    _run(test)


def test_a_cancelled_first_call_releases_the_waiting_calls() -> None:
    async def test(calls: _Calls) -> None:
        first = asyncio.ensure_future(calls.call("s"))
        waiting = asyncio.ensure_future(calls.call("s"))
        await _settle()
        first.cancel()
        await _settle()
        assert calls.by_botocore == ["s", "s"], "the waiting call went on through botocore"
        calls.release.set()
        assert await waiting == "botocore"
        with pytest.raises(asyncio.CancelledError):
            await first

    _run(test)


def test_a_first_call_that_hangs_holds_the_others_only_so_long() -> None:
    """A first call stuck on a connection that never answers (or in botocore's retries) must
    not hold every shard's start: past ``first_call_wait`` the waiting calls go through
    botocore themselves."""

    async def test(calls: _Calls) -> None:
        calls.lean.first_call_wait = 0.05
        first = asyncio.ensure_future(calls.call("s"))
        waiting = [asyncio.ensure_future(calls.call("s")) for _ in range(3)]
        await _settle()
        assert calls.by_botocore == ["s"]
        await asyncio.sleep(0.2)
        assert calls.by_botocore == ["s"] * 4, "the waiting calls went on through botocore"
        calls.release.set()
        assert await asyncio.gather(first, *waiting) == ["botocore"] * 4
        assert await calls.call("s") == "lean"

    _run(test)
