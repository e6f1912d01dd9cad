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
from typing import Any

import apache_beam as beam
import faust
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.transforms.display import DisplayData

from beam_kinesis import ReadFromKinesis, WriteToKinesis, compat
from beam_kinesis.options import CredentialsInPipelineWarning, client_config_from_options
from faust_kinesis import KinesisChannel, KinesisSink
from kinesis_core.aws.botocore_private import http_session
from kinesis_core.aws.client import create_botocore_client, create_kinesis_client
from kinesis_core.aws.config import ClientConfig
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


URL_PASSWORD = "urlpw-" + uuid.uuid4().hex
WITH_PASSWORD = f"http://alice:{URL_PASSWORD}@127.0.0.1:4567"


@pytest.mark.parametrize(
    ("enter", "field"),
    [
        (lambda: ClientConfig(endpoint_url=WITH_PASSWORD), "endpoint_url"),
        (lambda: ClientConfig(dynamodb_endpoint_url=WITH_PASSWORD), "dynamodb_endpoint_url"),
        (lambda: ClientConfig.from_env({"AWS_ENDPOINT_URL": WITH_PASSWORD}), "endpoint_url"),
        (
            lambda: ClientConfig.from_env({"AWS_ENDPOINT_URL_DYNAMODB": WITH_PASSWORD}),
            "dynamodb_endpoint_url",
        ),
        (
            lambda: client_config_from_options(
                PipelineOptions([f"--kinesis_endpoint_url={WITH_PASSWORD}"])
            ),
            "--kinesis_endpoint_url",
        ),
        (
            lambda: client_config_from_options(
                PipelineOptions([f"--kinesis_dynamodb_endpoint_url={WITH_PASSWORD}"])
            ),
            "--kinesis_dynamodb_endpoint_url",
        ),
        (
            lambda: compat.ReadDataFromKinesis(
                "clicks", None, None, "us-east-1", service_endpoint=WITH_PASSWORD
            ),
            "service_endpoint",
        ),
    ],
    ids=["field", "dynamodb-field", "env", "dynamodb-env", "beam", "beam-dynamodb", "compat"],
)
def test_an_endpoint_with_a_password_is_refused_where_it_enters_without_showing_it(
    enter: Any, field: str
) -> None:
    """``user:password@`` in an endpoint URL: refused when the config is made, naming the
    field and never the password (before, it was accepted, printed by the config's repr and
    botocore's DEBUG lines, and every call failed after 30 s of retries)."""
    with pytest.raises(ConfigurationError) as raised:
        enter()
    assert raised.value.field == field
    assert "user:password@" in str(raised.value)
    assert "http://***@127.0.0.1:4567" in str(raised.value)
    shown = "".join(traceback.format_exception(raised.value))
    assert URL_PASSWORD not in shown


@pytest.mark.parametrize("service", ["kinesis", "dynamodb"])
def test_an_endpoint_with_a_password_that_botocore_would_find_itself_is_refused(
    service: str, monkeypatch: pytest.MonkeyPatch, all_logs: Everything
) -> None:
    """A config that names no endpoint lets botocore find one (``AWS_ENDPOINT_URL_<SERVICE>``,
    ``AWS_ENDPOINT_URL``, the AWS config file): making the client checks it as the field."""
    monkeypatch.setenv(f"AWS_ENDPOINT_URL_{service.upper()}", WITH_PASSWORD)
    with pytest.raises(ConfigurationError) as raised:
        create_botocore_client(ClientConfig(region_name="us-east-1"), service)  # type: ignore[arg-type]
    assert raised.value.field == (
        "endpoint_url" if service == "kinesis" else "dynamodb_endpoint_url"
    )
    assert "from AWS_ENDPOINT_URL" in str(raised.value)
    assert URL_PASSWORD not in "".join(traceback.format_exception(raised.value))
    assert [name for name, text in all_logs.lines if URL_PASSWORD in text] == []


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
    caplog.set_level(logging.WARNING, logger="kinesis_core.aws.client")

    async def verify_of(config: ClientConfig) -> object:
        async with create_kinesis_client(config) as client:
            return http_session(client)._verify

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
