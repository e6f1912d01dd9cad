"""The benchmarks framework runs, and the codec benchmark yields a sane row for every subject.

Benchmarks never assert timings; this only checks that ``python -m benchmarks`` works.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def run_benchmarks(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "benchmarks", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_codec_benchmark_quick_run() -> None:
    done = run_benchmarks("--quick", "--only", "codec", "--json")
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    groups = {row["group"] for row in rows}
    assert {
        "codec: aggregate+encode",
        "codec: aggregate+encode+predict",
        "codec: deaggregate",
    } <= groups
    subjects = {(row["group"], row["subject"]) for row in rows}
    for row in rows:
        assert row["value"] > 0, row
        assert row["unit"] == "records/s"
        if row["baseline"] is not None:
            assert (row["group"], row["baseline"]) in subjects, row
    targets = {row["group"]: row["target"] for row in rows if row["target"] is not None}
    assert targets == {
        "codec: aggregate+encode": 3.0,
        "codec: aggregate+encode+predict": 2.0,
        "codec: deaggregate": 2.0,
    }


def test_table_output_and_unknown_names() -> None:
    done = run_benchmarks("--quick", "--only", "codec")
    assert done.returncode == 0, done.stderr
    header, rule = done.stdout.splitlines()[2:4]
    assert header.split() == ["benchmark", "subject", "value", "vs", "baseline", "target"]
    assert set(rule) <= {"-", " "}
    assert "x aws-kinesis-agg" in done.stdout
    missing = run_benchmarks("--only", "no-such-benchmark")
    assert missing.returncode != 0
    assert "codec" in missing.stderr
