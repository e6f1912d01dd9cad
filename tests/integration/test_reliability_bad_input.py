"""The bad-input catalogue of ``python -m reliability``, one test per kind: each bad input gets
a clear error naming its cause (within seconds where it says so), and a producer putting good
records meanwhile (some in the very batch that holds the bad record) loses none.
"""

from __future__ import annotations

import pytest

from kinesis_core.local import StreamFactory
from reliability.bad_input import Env, cases, check_bystanders, run_case

pytestmark = pytest.mark.integration


def test_the_catalogue_has_at_least_twenty_five_kinds() -> None:
    assert len(cases()) >= 25


@pytest.mark.parametrize("name", list(cases()))
def test_bad_input_gets_a_clear_error_and_harms_nothing_else(
    name: str, kinesis_stream: StreamFactory
) -> None:
    env = Env(kinesis_stream, kinesis_stream(2))
    checks = run_case(env, name)
    unclear = [f"{c.where}: {c.seen}" for c in checks if not c.ok]
    assert checks
    assert unclear == []
    found, lost = check_bystanders(env)
    assert lost == 0
    assert found == len(env.good)
