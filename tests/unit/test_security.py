"""Security across the packages: secrets never in reprs, error messages, logs or the pickled
Beam pipeline; TLS verification on unless turned off explicitly, and then warned about.

Only ``ClientConfig`` (masked repr) and the botocore clients made from it hold credentials, so
these cover every way one could leak: every object that keeps a config, every error a config
or a failed call raises, every log line on the way, and the pipeline proto Beam ships.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import pickle
import traceback
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path

import apache_beam as beam
import faust
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.transforms.display import DisplayData

from beam_kinesis import ReadFromKinesis, WriteToKinesis
from beam_kinesis.options import CredentialsInPipelineWarning, client_config_from_options
from faust_kinesis import KinesisChannel, KinesisSink
from kinesis_core.client import ClientConfig, create_botocore_client, create_kinesis_client
from kinesis_core.errors import ConfigurationError
from kinesis_core.local._server import free_port

KEY_ID = "AKIASECURITYTEST0001"
SECRET = "secret-" + uuid.uuid4().hex
TOKEN = "token-" + uuid.uuid4().hex


def with_keys(**fields: object) -> ClientConfig:
    return ClientConfig(
        region_name="us-east-1",
        aws_access_key_id=KEY_ID,
        aws_secret_access_key=SECRET,
        aws_session_token=TOKEN,
        **fields,  # type: ignore[arg-type]
    )


def shows_a_secret(text: str) -> bool:
    return SECRET in text or TOKEN in text


class Everything(logging.Handler):
    """Every record of every logger, formatted as a handler would print it."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[tuple[str, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if record.exc_info:
            text += "".join(traceback.format_exception(*record.exc_info))
        self.lines.append((record.name, text))


@pytest.fixture
def all_logs() -> Iterator[Everything]:
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


def assert_clean_logs(handler: Everything) -> None:
    """No secret key and no session token in any record, botocore's DEBUG ones included (it
    logs the signed request headers; our filter masks them)."""
    assert handler.lines
    assert [name for name, text in handler.lines if shows_a_secret(text)] == []


# -- reprs and error messages ----------------------------------------------------------------


def test_reprs_of_everything_holding_credentials_hide_them(tmp_path: Path) -> None:
    config = with_keys()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CredentialsInPipelineWarning)
        read = ReadFromKinesis("orders", client_config=config)
        write = WriteToKinesis("orders", client_config=config)
    app = faust.App("security-test", web_enabled=False, datadir=str(tmp_path))
    app.boot_strategy.enable_kafka = False
    channel = KinesisChannel(app, "orders", client_config=config)
    sink = KinesisSink(app, "orders", client_config=config)
    shown = [
        repr(config),
        str(config),
        f"{config!r} {config}",
        repr([config, {"config": config}]),
        repr(dataclasses.replace(config, read_timeout=1.0)),
        repr(pickle.loads(pickle.dumps(config))),
        repr(read._spec),
        repr(write._spec),
        repr(DisplayData.create_from(read).items),
        repr(DisplayData.create_from(write).items),
        repr(channel),
        str(channel),
        repr(sink),
    ]
    assert [text for text in shown if shows_a_secret(text)] == []


@pytest.mark.parametrize(
    "fields",
    [
        {"aws_secret_access_key": SECRET},
        {"aws_session_token": TOKEN},
        {"aws_secret_access_key": SECRET, "aws_session_token": TOKEN},
        {
            "aws_access_key_id": KEY_ID,
            "aws_secret_access_key": SECRET,
            "aws_session_token": TOKEN,
            "endpoint_url": "localhost:4567",
        },
        {
            "aws_access_key_id": KEY_ID,
            "aws_secret_access_key": SECRET,
            "aws_session_token": TOKEN,
            "read_timeout": -1.0,
        },
    ],
)
def test_configuration_errors_never_quote_secrets(fields: dict[str, object]) -> None:
    with pytest.raises(ConfigurationError) as caught:
        ClientConfig(**fields)  # type: ignore[arg-type]
    text = "".join(traceback.format_exception(caught.value))
    assert not shows_a_secret(text)


def test_failed_calls_and_their_logs_never_show_secrets(all_logs: Everything) -> None:
    """A call that cannot connect: the error, its traceback and every log line on the way."""
    config = with_keys(endpoint_url=f"http://127.0.0.1:{free_port()}", connect_timeout=0.5)
    errors: list[BaseException] = []
    client = create_botocore_client(config, "kinesis", max_attempts=1)
    try:
        client.list_shards(StreamName="orders")
    except Exception as exc:
        errors.append(exc)
    finally:
        client.close()

    async def call() -> None:
        async with create_kinesis_client(config, max_attempts=1) as aio:
            await aio.list_shards(StreamName="orders")

    try:
        asyncio.run(call())
    except Exception as exc:
        errors.append(exc)
    assert len(errors) == 2
    for exc in errors:
        assert not shows_a_secret(repr(exc))
        assert not shows_a_secret("".join(traceback.format_exception(exc)))
    assert_clean_logs(all_logs)


# -- the pickled Beam pipeline ---------------------------------------------------------------


def test_a_beam_pipeline_never_carries_the_launchers_credentials(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", KEY_ID)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    monkeypatch.setenv("AWS_SESSION_TOKEN", TOKEN)
    pipeline = beam.Pipeline(options=PipelineOptions(["--kinesis_region_name=eu-west-1"]))
    with warnings.catch_warnings():
        warnings.simplefilter("error", CredentialsInPipelineWarning)
        records = pipeline | ReadFromKinesis("orders", client_config=ClientConfig())
        _ = records | beam.Map(lambda r: r.data) | WriteToKinesis("copy")
    proto = pipeline.to_runner_api().SerializeToString()
    assert b"eu-west-1" in proto  # the pickled DoFns and their configs are in there...
    assert SECRET.encode() not in proto  # ...without the credentials
    assert TOKEN.encode() not in proto
    assert KEY_ID.encode() not in proto


@pytest.mark.parametrize("transform", [ReadFromKinesis, WriteToKinesis])
def test_explicit_credentials_in_a_beam_transform_are_warned_about(transform: type) -> None:
    with pytest.warns(CredentialsInPipelineWarning, match="pickled into the pipeline"):
        transform("orders", client_config=with_keys())


# -- TLS ---------------------------------------------------------------------------------------


@pytest.mark.slow
def test_tls_verification_is_on_unless_turned_off_explicitly(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="kinesis_core.client")

    async def verify_of(config: ClientConfig) -> object:
        async with create_kinesis_client(config) as client:
            return client._endpoint.http_session._verify

    endpoint = "https://127.0.0.1:4567"
    defaults = [
        ClientConfig(region_name="us-east-1", endpoint_url=endpoint),
        ClientConfig.from_env({"AWS_DEFAULT_REGION": "us-east-1"}, endpoint_url=endpoint),
        client_config_from_options(
            PipelineOptions([f"--kinesis_endpoint_url={endpoint}"]),
            ClientConfig(region_name="us-east-1"),
        ),
    ]
    for config in defaults:
        assert config.verify is True
        assert asyncio.run(verify_of(config)) not in (False, None)
    assert not caplog.records

    off = client_config_from_options(
        PipelineOptions(["--kinesis_verify=false", f"--kinesis_endpoint_url={endpoint}"]),
        ClientConfig(region_name="us-east-1"),
    )
    assert off.verify is False
    assert asyncio.run(verify_of(off)) is False
    assert [r.levelname for r in caplog.records] == ["WARNING"]
    assert "verification is OFF" in caplog.records[0].getMessage()
    assert endpoint in caplog.records[0].getMessage()
