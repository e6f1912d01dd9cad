"""scripts/demo, the README's main job: every part passes and says so, quietly.

The demo starts its own kinesis-mock; a smaller core volume keeps this test short.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


def test_the_demo_reports_each_part_and_the_overall_result() -> None:
    before = set(os.listdir(REPO))
    done = subprocess.run(
        [sys.executable, "-m", "examples.demo", "--records", "600", "--users", "40"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    lines = done.stdout.splitlines()
    starts = [line for line in lines if re.fullmatch(r"\[\d/3\] \w+: .* \.\.\.", line)]
    ends = [line for line in lines if re.fullmatch(r"\[\d/3\] \w+: ok in [\d.]+ s: .+", line)]
    assert [line.split(":")[0] for line in starts] == ["[1/3] core", "[2/3] beam", "[3/3] faust"]
    assert [line.split(":")[0] for line in ends] == ["[1/3] core", "[2/3] beam", "[3/3] faust"]
    for start, end in zip(starts, ends, strict=True):
        assert lines.index(start) < lines.index(end)
    last = re.fullmatch(
        r"demo: OK — 3 parts, (\d+) records written, (\d+) read, 0 lost, in \d+ s", lines[-1]
    )
    assert last is not None, lines[-1]
    assert int(last.group(1)) == int(last.group(2)) > 600
    assert "WARNING" not in output  # no third-party noise (Beam's apitools line)
    assert set(os.listdir(REPO)) == before  # no Faust data dir, no checkpoint file


def test_bad_volumes_are_refused() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "examples.demo", "--records", "1"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "--records must be >= 2" in done.stderr
