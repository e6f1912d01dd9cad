"""ClientConfig values that only the machine making a client can check (a profile, a CA bundle):
``start()`` of a consumer and of a producer refuses them at once, against moto, with a
ConfigurationError naming the field, before any call is made (they raised botocore's
ProfileNotFound, or retried a missing CA bundle's error for the whole ``start_timeout``).
A server whose TLS certificate fails verification is reported at once too."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from pathlib import Path
from typing import Any

import pytest

from kinesis_core.aws.config import ClientConfig
from kinesis_core.checkpoint import MemoryCheckpointStore
from kinesis_core.consumer import TRIM_HORIZON, Consumer
from kinesis_core.errors import ConfigurationError, KinesisConnectorError
from kinesis_core.local import KinesisMock, local_client_config
from kinesis_core.producer import Producer

pytestmark = pytest.mark.integration


async def start_consumer(stream: str, config: ClientConfig) -> None:
    async with Consumer(
        stream,
        client_config=config,
        checkpoint_store=MemoryCheckpointStore(),
        initial_position=TRIM_HORIZON,
    ):
        pass


async def start_producer(stream: str, config: ClientConfig) -> None:
    async with Producer(stream, client_config=config):
        pass


@pytest.mark.parametrize("start", [start_consumer, start_producer])
@pytest.mark.parametrize(
    ("fields", "field", "named"),
    [
        ({"profile_name": "no-such-profile"}, "profile_name", "'no-such-profile'"),
        ({"verify": "/no/such/ca-bundle.pem"}, "verify", "'/no/such/ca-bundle.pem'"),
    ],
)
def test_a_missing_profile_or_ca_bundle_fails_start_at_once(
    moto_stream: Any,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    start: Any,
    fields: dict[str, Any],
    field: str,
    named: str,
) -> None:
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))
    (tmp_path / "config").write_text("[profile dev]\nregion = us-east-1\n")
    stream = moto_stream(shards=1)
    config = dataclasses.replace(stream.client_config, **fields)
    with pytest.raises(ConfigurationError) as info:
        asyncio.run(start(stream.name, config))
    assert info.value.field == field
    assert named in str(info.value)
    # The same config with the field put right reaches the stream.
    asyncio.run(start(stream.name, stream.client_config))


@pytest.mark.parametrize("start", [start_consumer, start_producer])
def test_a_certificate_that_fails_verification_fails_start_at_once(
    kinesis_mock: KinesisMock, start: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """kinesis-mock's TLS port has a self-signed certificate: with verification on, ``start()``
    raises CERTIFICATE_VERIFY_FAILED and what to do after the first attempt, with no retry
    (before, both retried it for 30 s: 23 attempts by the consumer, 5 ListShards by the
    producer's shard map)."""
    stream = kinesis_mock.create_stream("tls-refused", 1)
    config = local_client_config(kinesis_mock.tls_endpoint_url, verify=True)
    try:
        with (
            caplog.at_level(logging.WARNING, logger="kinesis_core"),
            pytest.raises(KinesisConnectorError) as info,
        ):
            asyncio.run(start(stream.name, config))
    finally:
        stream.delete()
        stream.close()
    message = str(info.value)
    assert "CERTIFICATE_VERIFY_FAILED" in message
    assert "ClientConfig(verify=...) or AWS_CA_BUNDLE" in message
    assert "retried" not in message
    assert [r.getMessage() for r in caplog.records if "retrying in" in r.getMessage()] == []
