"""``KinesisOptions``: where Kinesis is, set from the command line the Beam way.

``python my_job.py --kinesis_region_name=eu-west-1 --kinesis_endpoint_url=http://...``. The
options carry no credentials on purpose: workers find theirs through the default chain
(environment, shared config files, instance or task role), so no secret is ever written into
the pipeline. Only a ``ClientConfig`` with keys passed explicitly in code carries them, and
:func:`warn_if_credentials` says so.
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any

from apache_beam.options.pipeline_options import PipelineOptions

from kinesis_core.aws.config import ClientConfig
from kinesis_core.errors import ConfigurationError

__all__ = [
    "CredentialsInPipelineWarning",
    "KinesisOptions",
    "client_config_from_options",
    "warn_if_credentials",
]

_OPTION_FIELDS = {
    "kinesis_region_name": "region_name",
    "kinesis_endpoint_url": "endpoint_url",
    "kinesis_dynamodb_endpoint_url": "dynamodb_endpoint_url",
    "kinesis_profile_name": "profile_name",
    "kinesis_verify": "verify",
}
"""Option name -> ClientConfig field."""


class CredentialsInPipelineWarning(UserWarning):
    """Explicit AWS keys were given: they are pickled into the pipeline sent to the runner."""


class KinesisOptions(PipelineOptions):
    """Command-line options of the Kinesis transforms (``PipelineOptions.view_as(...)``).

    An option left unset stays unset in the ``ClientConfig``; the worker then resolves it the
    way botocore does (``AWS_DEFAULT_REGION``, ``AWS_ENDPOINT_URL_KINESIS``, the profile's
    config), on the worker, not on the machine that launched the job.
    """

    @classmethod
    def _add_argparse_args(cls, parser: Any) -> None:
        parser.add_argument(
            "--kinesis_region_name",
            default=None,
            help="AWS region of the Kinesis stream (default: the workers' AWS configuration).",
        )
        parser.add_argument(
            "--kinesis_endpoint_url",
            default=None,
            help="Kinesis endpoint, e.g. http://127.0.0.1:4567 for a local emulator or a VPC "
            "endpoint (default: the region's endpoint, or AWS_ENDPOINT_URL_KINESIS on workers).",
        )
        parser.add_argument(
            "--kinesis_dynamodb_endpoint_url",
            default=None,
            help="DynamoDB endpoint for lease and checkpoint tables (default: the region's).",
        )
        parser.add_argument(
            "--kinesis_profile_name",
            default=None,
            help="Profile of the workers' shared AWS config files to take credentials and "
            "region from (default: AWS_PROFILE, else the default chain).",
        )
        parser.add_argument(
            "--kinesis_verify",
            default=None,
            help="TLS certificate verification: 'true' (default), 'false' (local emulators "
            "only), or the path of a CA bundle on the workers.",
        )


def _parse_verify(value: str) -> bool | str:
    lowered = value.strip().lower()
    if lowered in ("true", "yes", "1"):
        return True
    if lowered in ("false", "no", "0"):
        return False
    return value


def client_config_from_options(
    options: PipelineOptions | None, base: ClientConfig | None = None
) -> ClientConfig:
    """The ``ClientConfig`` a transform ships to its workers.

    Fields set in ``base`` (a config passed to the transform in code) win; the command-line
    options fill the fields ``base`` leaves at their defaults; whatever is still unset is
    resolved on each worker. Nothing is read from this machine's environment, so the
    launcher's credentials, region or endpoint never leak into the pipeline.
    """
    config = base if base is not None else ClientConfig()
    if options is None:
        return config
    view = options.view_as(KinesisOptions)
    defaults = {f.name: f.default for f in dataclasses.fields(ClientConfig)}
    changes: dict[str, Any] = {}
    for option, field in _OPTION_FIELDS.items():
        value = getattr(view, option, None)
        if value is None or getattr(config, field) != defaults[field]:
            continue
        changes[field] = _parse_verify(value) if field == "verify" else value
    try:
        return dataclasses.replace(config, **changes) if changes else config
    except ConfigurationError as exc:
        if exc.field not in changes:
            raise
        given = next(o for o, f in _OPTION_FIELDS.items() if f == exc.field)
        raise ConfigurationError(f"--{given}", exc.reason) from None


def warn_if_credentials(config: ClientConfig, transform: str) -> None:
    """Warn when ``config`` carries keys: they travel inside the pickled pipeline."""
    if config.aws_access_key_id is None:
        return
    warnings.warn(
        f"{transform}: the ClientConfig carries explicit AWS credentials; they will be pickled "
        "into the pipeline and sent to the runner and every worker. Prefer the workers' default "
        "credential chain (an instance or task role, environment variables, a profile via "
        "--kinesis_profile_name) and leave aws_access_key_id unset.",
        CredentialsInPipelineWarning,
        stacklevel=3,
    )
