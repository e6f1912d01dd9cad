"""botocore's DEBUG logs of real requests (to moto) with a session token: every record of every
logger is captured, and neither the token, nor the secret key, nor a request signature is in
any of them. botocore does log the signed headers: the test checks it saw them, masked."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import re
import traceback
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from kinesis_core.aws.client import create_botocore_client, create_kinesis_client
from kinesis_core.aws.config import ClientConfig
from kinesis_core.producer import Producer

pytestmark = pytest.mark.integration

KEY_ID = "AKIALOGTEST000000001"
SECRET = "secret/" + uuid.uuid4().hex
TOKEN = "IQoJb3JpZ2luX2VjE" + uuid.uuid4().hex + "/+=="
SIGNATURE = re.compile(r"Signature[=:]\s*[0-9a-f]{64}")
"""A SigV4 signature, in a header (``Signature=``) or on botocore.auth's line of its own."""


class Everything(logging.Handler):
    """Every record of every logger, as a handler would print it."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[tuple[str, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        text = self.format(record)
        if record.exc_info:
            text += "".join(traceback.format_exception(*record.exc_info))
        self.lines.append((record.name, text))


@pytest.fixture
def debug_logs() -> Iterator[Everything]:
    handler = Everything()
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        yield handler
    finally:
        root.removeHandler(handler)
        root.setLevel(level)


def test_debug_logs_of_real_requests_show_no_token_secret_or_signature(
    moto_server: Any, debug_logs: Everything
) -> None:
    config = dataclasses.replace(
        moto_server.client_config(),
        aws_access_key_id=KEY_ID,
        aws_secret_access_key=SECRET,
        aws_session_token=TOKEN,
    )
    stream = moto_server.create_stream(f"logs-{uuid.uuid4().hex[:8]}", shards=1)
    try:
        sync = create_botocore_client(config, "kinesis")
        try:
            sync.list_shards(StreamName=stream.name)
        finally:
            sync.close()

        async def main() -> None:
            async with create_kinesis_client(config) as client:
                await client.list_streams()
            async with Producer(stream.name, client_config=config) as producer:
                assert (await producer.put(b"x", "k")).success

        asyncio.run(main())
    finally:
        stream.delete()
        stream.close()
    assert debug_logs.lines
    leaks = [
        name
        for name, text in debug_logs.lines
        if TOKEN in text or SECRET in text or SIGNATURE.search(text)
    ]
    assert leaks == []
    # botocore did log the signed requests (so the test saw what it had to): masked.
    masked = [text for name, text in debug_logs.lines if "x-amz-security-token" in text.lower()]
    assert masked
    assert all("***" in text for text in masked)
    # botocore.auth logs each signature on a line of its own ("Signature:\n<64 hex>"): masked.
    signatures = [text for name, text in debug_logs.lines if text.startswith("Signature:")]
    assert signatures
    assert all(text == "Signature:\n***" for text in signatures)
    assert any("PutRecords" in text for _, text in debug_logs.lines)
    assert KEY_ID in "".join(text for _, text in debug_logs.lines)  # not a secret: kept


def test_a_config_handed_to_a_client_has_its_secrets_masked_anywhere_in_botocore_logs(
    debug_logs: Everything,
) -> None:
    config = ClientConfig(
        region_name="us-east-1",
        endpoint_url="http://127.0.0.1:1",
        aws_access_key_id=KEY_ID,
        aws_secret_access_key=SECRET,
        aws_session_token=TOKEN,
    )
    create_botocore_client(config, "kinesis").close()
    logging.getLogger("botocore.credentials").debug("odd place for %s and %s", SECRET, TOKEN)
    ((_, text),) = [(n, t) for n, t in debug_logs.lines if "odd place" in t]
    assert text.endswith("odd place for *** and ***")
