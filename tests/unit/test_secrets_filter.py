"""The filter that masks credentials in botocore's logs."""

from __future__ import annotations

import itertools

from kinesis_core.aws.log_filter import SecretsFilter


def test_a_secret_that_begins_with_another_is_masked_whole_whatever_the_order() -> None:
    secrets = ["secret", "secret/9f2c41d0", "secret/9f2c41d0/+=="]
    for order in itertools.permutations(secrets):
        masking = SecretsFilter()
        for secret in order:
            masking.add_secret(secret)
        text = "odd place for secret/9f2c41d0 and secret/9f2c41d0/+== and secret"
        assert masking.mask(text) == "odd place for *** and *** and ***"


def test_credentials_in_botocore_shapes_are_masked_without_being_registered() -> None:
    masking = SecretsFilter()
    assert masking.mask("{'SecretAccessKey': 'abc'}") == "{'SecretAccessKey': '***'}"
    assert masking.mask("Signature=0123456789abcdef0123") == "Signature=***"
