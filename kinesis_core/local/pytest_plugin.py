"""pytest fixtures for testing against a local Kinesis; opt in with
``pytest -p kinesis_core.local.pytest_plugin`` (or ``addopts`` / ``pytest_plugins``).

- ``kinesis_mock`` / ``moto_server``: a server per test session (``KinesisMock`` / ``MotoServer``,
  with ``endpoint_url`` and ``client_config()``), started on first use and always stopped at the
  end of the session, whatever happened.
- ``kinesis_stream`` / ``moto_stream``: ``make(shards=4, name=None, *,
  max_record_size_kib=None) -> LocalStream``, a fresh, uniquely named stream per call, deleted
  after the test (``max_record_size_kib``: records up to that size, kinesis-mock only).
- ``fault_proxy``: ``make(upstream_url, config=None, seed=0) -> FaultProxy``, a fault-injecting
  proxy in front of a server, stopped after the test (its counters are printed).

A server that cannot start (no Node.js, no ``moto[server]``) fails the tests that use it with a
message saying what to install; it never skips them. Imports are lazy, so installing this
package costs other test suites nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from kinesis_core.local import KinesisMock, LocalServer, MotoServer, StreamFactory
    from kinesis_core.local.fault_proxy import FaultProxy
    from kinesis_core.local.faults import FaultConfig


@pytest.fixture(scope="session")
def kinesis_mock() -> Iterator[KinesisMock]:
    """kinesis-mock for the whole session (installed into the user cache on first use)."""
    from kinesis_core.local import KinesisMock

    with KinesisMock() as server:
        yield server


@pytest.fixture(scope="session")
def moto_server() -> Iterator[MotoServer]:
    """moto's server for the whole session: Kinesis and DynamoDB on one endpoint."""
    from kinesis_core.local import MotoServer

    with MotoServer() as server:
        yield server


def _streams(server: LocalServer, request: pytest.FixtureRequest) -> Iterator[StreamFactory]:
    from kinesis_core.local import StreamFactory

    server.ensure_running()  # a server that crashed earlier fails here, with its log
    factory = StreamFactory(server.client_config(), prefix=request.node.name)
    try:
        yield factory
    finally:
        factory.close(delete=server.running)


@pytest.fixture
def kinesis_stream(
    kinesis_mock: KinesisMock, request: pytest.FixtureRequest
) -> Iterator[StreamFactory]:
    """``make(shards=4, name=None, *, max_record_size_kib=None) -> LocalStream`` on
    kinesis-mock (resharding, lineage, records up to 10 MiB)."""
    yield from _streams(kinesis_mock, request)


@pytest.fixture
def moto_stream(moto_server: MotoServer, request: pytest.FixtureRequest) -> Iterator[StreamFactory]:
    """``make(shards=4, name=None) -> LocalStream`` on moto (volume; DynamoDB on the same
    endpoint via ``stream.client_config.dynamodb_endpoint_url``)."""
    yield from _streams(moto_server, request)


@pytest.fixture
def fault_proxy() -> Iterator[Callable[..., FaultProxy]]:
    """``make(upstream_url, config=None, seed=0) -> FaultProxy`` running in a thread; every proxy
    made is stopped after the test and its injected-fault counters are printed."""
    from kinesis_core.local.fault_proxy import FaultProxy

    proxies: list[FaultProxy] = []

    def make(upstream_url: str, config: FaultConfig | None = None, seed: int = 0) -> FaultProxy:
        proxy = FaultProxy(upstream_url, config, seed=seed)
        proxy.start_in_thread()
        proxies.append(proxy)
        return proxy

    try:
        yield make
    finally:
        for proxy in proxies:
            proxy.stop_in_thread()
            print(proxy.stats().summary())
