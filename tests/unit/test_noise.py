"""Beam's import-time 'apitools not found' warning is dropped where our commands start, and
nothing else is."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.slow  # each test starts Python and imports Beam

APITOOLS = "apitools not found, and bigquery client libraries are not available"


def stderr_of(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return done.stderr


def test_beam_warns_at_import_unless_silenced() -> None:
    assert APITOOLS in stderr_of("import apache_beam")
    silenced = stderr_of(
        """
        from kinesis_core.aws.noise import silence_third_party_noise
        silence_third_party_noise()
        silence_third_party_noise()  # idempotent
        import logging
        import apache_beam
        assert len(logging.getLogger().filters) == 1
        """
    )
    assert APITOOLS not in silenced


def test_other_warnings_still_show() -> None:
    err = stderr_of(
        f"""
        import logging
        from kinesis_core.aws.noise import silence_third_party_noise
        silence_third_party_noise()
        logging.warning("{APITOOLS} (root, dropped)")
        logging.warning("another root warning")
        logging.getLogger("kinesis_core.producer").warning("{APITOOLS} (ours, shown)")
        """
    )
    assert "(root, dropped)" not in err
    assert "another root warning" in err
    assert "(ours, shown)" in err
