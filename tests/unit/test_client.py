"""ClientConfig and the client factory: environment handling, secret hiding, HTTP options.

Clients are created but never called: botocore connects only on the first request.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import pickle
from pathlib import Path
from typing import Any

import botocore.loaders
import pytest

from kinesis_core.aws.botocore_private import http_session, request_signer
from kinesis_core.aws.client import (
    create_botocore_client,
    create_dynamodb_client,
    create_kinesis_client,
)
from kinesis_core.aws.config import ClientConfig
from kinesis_core.errors import ConfigurationError, ValidationError

SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
TOKEN = "FQoGZXIvYXdzEXAMPLETOKEN"


@pytest.fixture(autouse=True)
def clean_aws_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No AWS variable of the machine leaks in, no ~/.aws file is read, no IMDS call is made."""
    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


def creds(**fields: Any) -> ClientConfig:
    return ClientConfig(aws_access_key_id="AKIDEXAMPLE", aws_secret_access_key=SECRET, **fields)


# -- from_env ---------------------------------------------------------------------------------


def test_from_env_reads_region_endpoints_and_profile() -> None:
    config = ClientConfig.from_env(
        {
            "AWS_DEFAULT_REGION": "eu-west-1",
            "AWS_REGION": "us-west-2",
            "AWS_ENDPOINT_URL": "http://127.0.0.1:1",
            "AWS_ENDPOINT_URL_KINESIS": "http://127.0.0.1:2",
            "AWS_PROFILE": "dev",
        }
    )
    assert config.region_name == "eu-west-1"
    assert config.endpoint_url == "http://127.0.0.1:2"
    assert config.dynamodb_endpoint_url == "http://127.0.0.1:1"  # the global one
    assert config.profile_name == "dev"
    assert config.aws_access_key_id is None


def test_from_env_falls_back_to_aws_region_and_service_endpoints() -> None:
    config = ClientConfig.from_env(
        {
            "AWS_DEFAULT_REGION": "",
            "AWS_REGION": "us-west-2",
            "AWS_ENDPOINT_URL_DYNAMODB": "http://127.0.0.1:3",
        }
    )
    assert config.region_name == "us-west-2"
    assert config.endpoint_url is None
    assert config.dynamodb_endpoint_url == "http://127.0.0.1:3"


def test_from_env_honours_ignore_configured_endpoint_urls() -> None:
    config = ClientConfig.from_env(
        {
            "AWS_ENDPOINT_URL_KINESIS": "http://127.0.0.1:2",
            "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS": "true",
        }
    )
    assert config.endpoint_url is None
    assert config.dynamodb_endpoint_url is None


def test_from_env_uses_os_environ_and_overrides_win(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_DEFAULT_REGION", "ap-south-1")
    monkeypatch.setenv("AWS_ENDPOINT_URL_KINESIS", "http://127.0.0.1:2")
    config = ClientConfig.from_env(endpoint_url="http://127.0.0.1:9", read_timeout=7.0)
    assert config.region_name == "ap-south-1"
    assert config.endpoint_url == "http://127.0.0.1:9"
    assert config.read_timeout == 7.0


# -- resolution at client creation --------------------------------------------------------------


def test_unset_fields_resolve_like_botocore_when_the_client_is_made(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-central-1")
    monkeypatch.setenv("AWS_ENDPOINT_URL_KINESIS", "http://127.0.0.1:2")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDENV")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    kinesis = create_botocore_client(ClientConfig(), "kinesis")
    dynamodb = create_botocore_client(ClientConfig(), "dynamodb")
    try:
        assert kinesis.meta.region_name == "eu-central-1"
        assert kinesis.meta.endpoint_url == "http://127.0.0.1:2"
        assert dynamodb.meta.endpoint_url == "https://dynamodb.eu-central-1.amazonaws.com"
        assert request_signer(kinesis)._credentials.access_key == "AKIDENV"
    finally:
        kinesis.close()
        dynamodb.close()


def test_aws_region_is_a_fallback_region(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_REGION", "sa-east-1")
    client = create_botocore_client(creds(), "kinesis")
    try:
        assert client.meta.region_name == "sa-east-1"
        assert client.meta.endpoint_url == "https://kinesis.sa-east-1.amazonaws.com"
    finally:
        client.close()


def test_explicit_fields_win_over_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-central-1")
    monkeypatch.setenv("AWS_ENDPOINT_URL_KINESIS", "http://127.0.0.1:2")
    config = creds(region_name="us-west-1", endpoint_url="http://127.0.0.1:5")
    client = create_botocore_client(config, "kinesis")
    try:
        assert client.meta.region_name == "us-west-1"
        assert client.meta.endpoint_url == "http://127.0.0.1:5"
        assert request_signer(client)._credentials.access_key == "AKIDEXAMPLE"
    finally:
        client.close()


def test_profile_supplies_region_and_credentials(tmp_path: Path) -> None:
    (tmp_path / "config").write_text("[profile dev]\nregion = eu-north-1\n")
    (tmp_path / "credentials").write_text(
        f"[dev]\naws_access_key_id = AKIDPROFILE\naws_secret_access_key = {SECRET}\n"
    )
    client = create_botocore_client(ClientConfig(profile_name="dev"), "kinesis")
    try:
        assert client.meta.region_name == "eu-north-1"
        assert request_signer(client)._credentials.access_key == "AKIDPROFILE"
    finally:
        client.close()


def test_missing_region_is_a_clear_error() -> None:
    with pytest.raises(ConfigurationError, match="AWS_DEFAULT_REGION"):
        create_botocore_client(creds(), "kinesis")


# -- HTTP options and retries -------------------------------------------------------------------


def test_timeouts_pool_and_retries_reach_the_async_client() -> None:
    config = creds(
        region_name="us-east-1",
        endpoint_url="http://127.0.0.1:1",
        connect_timeout=2.5,
        read_timeout=11.0,
        max_pool_connections=7,
    )

    async def main() -> None:
        async with create_kinesis_client(config, max_attempts=1) as client:
            options = client.meta.config
            assert options.connect_timeout == 2.5
            assert options.read_timeout == 11.0
            assert options.max_pool_connections == 7
            # One attempt in total: botocore's own retries are off.
            assert options.retries == {"mode": "standard", "total_max_attempts": 1}
        async with create_kinesis_client(config) as client:
            assert "total_max_attempts" not in (client.meta.config.retries or {})

    asyncio.run(main())


def test_clients_share_what_botocore_loaded_for_their_data_path(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The second client of a data path reads no model file; another data path reads its own."""
    read: list[str] = []
    load_file = botocore.loaders.JSONFileLoader.load_file

    def counting(self: Any, file_path: str) -> Any:
        read.append(file_path)
        return load_file(self, file_path)

    monkeypatch.setattr(botocore.loaders.JSONFileLoader, "load_file", counting)
    config = creds(region_name="us-east-1", endpoint_url="http://127.0.0.1:1")

    async def make(data_path: Path) -> int:
        monkeypatch.setenv("AWS_DATA_PATH", str(data_path))
        before = len(read)
        async with create_kinesis_client(config):
            pass
        return len(read) - before

    async def main() -> None:
        assert await make(tmp_path / "one") > 0
        assert await make(tmp_path / "one") == 0
        assert await make(tmp_path / "two") > 0

    asyncio.run(main())
    # The synchronous clients share the loaders too.
    monkeypatch.setenv("AWS_DATA_PATH", str(tmp_path / "one"))
    before = len(read)
    create_botocore_client(config, "kinesis").close()
    assert len(read) == before


def test_dynamodb_client_uses_the_dynamodb_endpoint() -> None:
    config = creds(
        region_name="us-east-1",
        endpoint_url="http://127.0.0.1:1",
        dynamodb_endpoint_url="http://127.0.0.1:2",
    )

    async def main() -> None:
        async with create_dynamodb_client(config, max_attempts=4) as client:
            assert client.meta.service_model.service_name == "dynamodb"
            assert client.meta.endpoint_url == "http://127.0.0.1:2"
            assert client.meta.config.retries["total_max_attempts"] == 4

    asyncio.run(main())


def test_max_attempts_must_be_positive() -> None:
    with pytest.raises(ConfigurationError, match="max_attempts"):
        create_botocore_client(creds(region_name="us-east-1"), "kinesis", max_attempts=0)


# -- TLS verification ---------------------------------------------------------------------------


def test_verify_is_on_by_default_and_off_only_explicitly_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    assert ClientConfig().verify is True
    caplog.set_level(logging.WARNING, logger="kinesis_core.aws.client")
    on = create_botocore_client(creds(region_name="us-east-1"), "kinesis")
    on.close()
    assert not caplog.records

    off = create_botocore_client(
        creds(region_name="us-east-1", endpoint_url="https://127.0.0.1:4567", verify=False),
        "kinesis",
    )
    try:
        assert http_session(off)._verify is False
    finally:
        off.close()
    assert len(caplog.records) == 1
    assert "verification is OFF" in caplog.records[0].getMessage()
    assert "https://127.0.0.1:4567" in caplog.records[0].getMessage()


def test_verify_accepts_a_ca_bundle_path(tmp_path: Path) -> None:
    bundle = tmp_path / "ca.pem"
    bundle.write_text("")
    client = create_botocore_client(creds(region_name="us-east-1", verify=str(bundle)), "kinesis")
    try:
        assert http_session(client)._verify == str(bundle)
    finally:
        client.close()


# -- secrets ------------------------------------------------------------------------------------


def test_repr_str_and_pickled_repr_never_show_secrets(caplog: pytest.LogCaptureFixture) -> None:
    config = creds(region_name="us-east-1", aws_session_token=TOKEN)
    restored = pickle.loads(pickle.dumps(config))
    replaced = dataclasses.replace(config, read_timeout=3.0)
    for shown in (repr(config), str(config), f"{config}", repr(restored), repr(replaced)):
        assert SECRET not in shown
        assert TOKEN not in shown
        assert "aws_secret_access_key='***'" in shown
        assert "aws_access_key_id='AKIDEXAMPLE'" in shown
    # The pickle carries them (a Beam worker needs them to sign requests).
    assert restored == config
    assert restored.aws_secret_access_key == SECRET

    caplog.set_level(logging.DEBUG, logger="kinesis_core.aws.client")
    create_botocore_client(config, "kinesis").close()
    assert caplog.records
    assert all(SECRET not in r.getMessage() and TOKEN not in r.getMessage() for r in caplog.records)


def test_unset_secrets_show_as_none() -> None:
    assert "aws_secret_access_key=None" in repr(ClientConfig())


# -- validation ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"endpoint_url": "127.0.0.1:4567"}, "endpoint_url"),
        ({"dynamodb_endpoint_url": "ftp://x"}, "dynamodb_endpoint_url"),
        ({"connect_timeout": 0}, "connect_timeout"),
        ({"read_timeout": -1.0}, "read_timeout"),
        ({"max_pool_connections": 0}, "max_pool_connections"),
        ({"aws_access_key_id": "AKID"}, "aws_access_key_id"),
        ({"aws_secret_access_key": SECRET}, "aws_access_key_id"),
        ({"aws_session_token": TOKEN}, "aws_session_token"),
        ({"verify": 5}, "verify"),
        ({"verify": None}, "verify"),
        ({"region_name": 5}, "region_name"),
        ({"endpoint_url": b"http://x"}, "endpoint_url"),
        ({"profile_name": ["default"]}, "profile_name"),
        ({"aws_access_key_id": 1, "aws_secret_access_key": SECRET}, "aws_access_key_id"),
        ({"aws_access_key_id": "AKID", "aws_secret_access_key": 7}, "aws_secret_access_key"),
        ({"connect_timeout": "5"}, "connect_timeout"),
        ({"read_timeout": True}, "read_timeout"),
        ({"max_pool_connections": 2.5}, "max_pool_connections"),
        ({"max_pool_connections": True}, "max_pool_connections"),
    ],
)
def test_bad_values_are_refused_naming_the_field(fields: dict[str, Any], field: str) -> None:
    """Bad configuration: ConfigurationError, its message starting with the field's name."""
    with pytest.raises(ConfigurationError) as info:
        ClientConfig(**fields)
    assert not isinstance(info.value, ValidationError)
    assert str(info.value).startswith(f"{field}: ")
    assert SECRET not in str(info.value)


@pytest.mark.parametrize(
    ("fields", "field", "allowed"),
    [
        ({"endpoint_url": "http://127.0.0.1:99999"}, "endpoint_url", "port 1 to 65535"),
        ({"endpoint_url": "http://127.0.0.1:0"}, "endpoint_url", "port 1 to 65535"),
        ({"dynamodb_endpoint_url": "http://localhost:x"}, "dynamodb_endpoint_url", "port"),
        ({"endpoint_url": "http://"}, "endpoint_url", "a host"),
        ({"endpoint_url": "https://:4567"}, "endpoint_url", "a host"),
        ({"endpoint_url": "http://local host:4567"}, "endpoint_url", "a host"),
        ({"region_name": "us east 1"}, "region_name", "letters, digits and hyphens"),
        ({"region_name": ""}, "region_name", "letters, digits and hyphens"),
        ({"region_name": "us-east-1/"}, "region_name", "letters, digits and hyphens"),
    ],
)
def test_values_botocore_would_refuse_only_later_are_refused_when_the_config_is_made(
    fields: dict[str, Any], field: str, allowed: str
) -> None:
    with pytest.raises(ConfigurationError) as info:
        ClientConfig(**fields)
    assert info.value.field == field
    assert str(info.value).startswith(f"{field}: ")
    assert allowed in str(info.value)
    assert repr(next(iter(fields.values()))) in str(info.value)


def test_good_endpoints_and_regions_pass() -> None:
    for url in (
        "http://127.0.0.1:4567",
        "https://kinesis.us-east-1.amazonaws.com",
        "http://[::1]:1",
    ):
        assert ClientConfig(endpoint_url=url).endpoint_url == url
    for region in ("us-east-1", "cn-north-1", "us-gov-west-1", "local"):
        assert ClientConfig(region_name=region).region_name == region


def test_a_region_from_the_environment_or_a_profile_is_checked_too(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    with pytest.raises(ConfigurationError, match=r"region_name: .*'eu west 1'"):
        ClientConfig.from_env({"AWS_DEFAULT_REGION": "eu west 1"})
    (tmp_path / "config").write_text("[profile spaced]\nregion = eu west 1\n")
    with pytest.raises(ConfigurationError) as info:
        create_botocore_client(creds(profile_name="spaced"), "kinesis")
    assert info.value.field == "region_name"
    assert "'eu west 1'" in str(info.value)


def test_a_missing_ca_bundle_is_refused_when_a_client_is_made(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    missing = str(tmp_path / "no-such-ca.pem")
    config = creds(region_name="us-east-1", endpoint_url="https://127.0.0.1:1", verify=missing)
    with pytest.raises(ConfigurationError) as info:
        create_botocore_client(config, "kinesis")
    assert info.value.field == "verify"
    assert missing in str(info.value)
    assert "True (botocore's bundle) or False" in str(info.value)

    async def make() -> None:
        async with create_kinesis_client(config):
            pass

    with pytest.raises(ConfigurationError, match=r"verify: .*no-such-ca.pem"):
        asyncio.run(make())
    # The same for a bundle named by AWS_CA_BUNDLE (what verify=True uses).
    monkeypatch.setenv("AWS_CA_BUNDLE", missing)
    with pytest.raises(ConfigurationError, match=r"verify: .*no-such-ca.pem.*AWS_CA_BUNDLE"):
        create_botocore_client(creds(region_name="us-east-1"), "kinesis")


def test_a_missing_profile_is_refused_when_a_client_is_made(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "config").write_text("[profile dev]\nregion = eu-north-1\n")
    with pytest.raises(ConfigurationError) as info:
        create_botocore_client(
            ClientConfig(profile_name="prod", region_name="us-east-1"), "kinesis"
        )
    assert info.value.field == "profile_name"
    assert "'prod'" in str(info.value)
    assert "['dev']" in str(info.value)  # the profiles there are
    assert str(tmp_path / "config") in str(info.value)
    # AWS_PROFILE, which botocore reads itself when profile_name is None, the same.
    monkeypatch.setenv("AWS_PROFILE", "staging")
    with pytest.raises(ConfigurationError, match=r"profile_name: .*'staging'.*AWS_PROFILE"):
        create_botocore_client(creds(region_name="us-east-1"), "kinesis")


def test_a_secret_of_the_wrong_type_is_refused_without_showing_it() -> None:
    with pytest.raises(ConfigurationError) as info:
        ClientConfig(aws_access_key_id="AKID", aws_secret_access_key=12345678)  # type: ignore[arg-type]
    assert str(info.value) == "aws_secret_access_key: must be a str or None, got int"


def test_config_is_frozen_and_keyword_only() -> None:
    config = ClientConfig(region_name="us-east-1")
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.region_name = "eu-west-1"  # type: ignore[misc]
    with pytest.raises(TypeError):
        ClientConfig("us-east-1")  # type: ignore[call-arg]
