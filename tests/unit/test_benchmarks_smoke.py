"""The benchmarks command: it runs, reports progress, prints a table that fits 120 columns and
explains itself, and ``--strict`` fails on a missed target.

Benchmarks never assert timings; the codec benchmark (no server, a few seconds) is the one run
for real here, the rest of the command is checked with rows made up for the purpose.
"""

from __future__ import annotations

import json
import subprocess
import sys
import types
from pathlib import Path

import pytest

import benchmarks.__main__ as bench_main
from benchmarks._isolated import BenchmarkFailed, measure, measure_here
from benchmarks._table import LEGEND, WIDTH, Row, headline, misses, render, verdicts

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


@pytest.mark.slow
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
        "codec: aggregate+encode": 4.5,
        "codec: aggregate+encode+predict": 2.0,
        "codec: deaggregate": 2.0,
        "codec: deaggregate with record ids": 0.9,
    }


@pytest.mark.slow
def test_dedup_window_benchmark_prints_the_window_of_each_kind_of_id() -> None:
    """Pure computation: automatic ids stay a few hundred bytes however long the traffic, and
    the window is bound by its count; a caller's ids and derived ids fill the 128 KiB (those of
    aggregated inputs, in runs, hold seconds of traffic; the others under one)."""
    rows = measure_here("dedup_window", True)
    sizes = {row.subject[:3]: row.value or 0.0 for row in rows if row.unit == "B"}
    held = {row.subject[:3]: row.value or 0.0 for row in rows if row.unit == "s"}
    assert set(sizes) == set(held) == {"(a)", "(b)", "(c)", "(d)", "(e)"}
    for kind in ("(a)", "(b)"):
        assert 0 < sizes[kind] < 1_000
        assert held[kind] == 1_000.0  # max_ids 10,000,000 at 10,000 records/s
    for kind in ("(c)", "(d)", "(e)"):
        assert 120_000 < sizes[kind] <= 128 * 1024
    assert held["(d)"] > 10
    assert 0 < held["(c)"] < 1
    assert 0 < held["(e)"] < 1


@pytest.mark.slow
def test_schema_registry_benchmark_quick_run() -> None:
    """The Glue Schema Registry row, on moto: both serdes measured, and the registry asked
    once per schema version for all the records."""
    done = run_benchmarks("--quick", "--only", "schema_registry", "--json")
    assert done.returncode == 0, done.stderr
    rows = {
        (row["group"].split(":")[1].split()[0], row["subject"]): row
        for row in json.loads(done.stdout)
    }
    ours = rows[("Avro", "kinesis_schema_registry")]
    assert ours["baseline"] == "aws-glue-schema-registry"
    assert ours["target"] == 2.0
    assert rows[("Avro", "aws-glue-schema-registry")]["value"] > 0
    calls = rows[("registry", "kinesis_schema_registry")]
    assert calls["value"] == calls["maximum"] == 3


@pytest.mark.slow
def test_large_records_benchmark_quick_run() -> None:
    """The large-record row: a stand-in server, no emulator; a few seconds in quick mode."""
    done = run_benchmarks("--quick", "--only", "large_records", "--json")
    assert done.returncode == 0, done.stderr
    rows = {row["subject"]: row for row in json.loads(done.stdout)}
    for mib in (1, 5):
        loop, ours = (
            rows[f"boto3 put_record loop, {mib} MiB"],
            rows[f"kinesis_core Producer, {mib} MiB"],
        )
        assert loop["unit"] == ours["unit"] == "MiB/s"
        assert loop["value"] > 0
        assert ours["value"] > 0
        assert ours["baseline"] == loop["subject"]
        assert ours["target"] == 1.0
    memory = rows["peak RSS, 12 x 5 MiB put at once"]
    assert memory["unit"] == "MB"
    assert memory["maximum"] > 256
    assert memory["value"] > 0


@pytest.mark.slow
def test_table_progress_and_legend() -> None:
    done = run_benchmarks("--quick", "--only", "codec")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert max(len(line) for line in lines) <= WIDTH
    assert lines[2].split() == ["subject", "value", "vs", "baseline", "target"]
    assert "codec: aggregate+encode" in lines
    assert any("x aws-kinesis-agg" in line for line in lines)
    assert LEGEND in done.stdout
    assert "MISS = not met" in LEGEND
    assert "not checked = " in LEGEND
    progress = done.stderr.splitlines()
    assert progress[0] == "[1/1] codec ..."
    assert progress[1].startswith("[1/1] codec: ")
    assert "kinesis_core" in progress[1]
    assert "x aws-kinesis-agg (>= 4.5x " in progress[1]
    assert "WARNING" not in done.stderr  # no third-party noise (Beam's apitools line)


@pytest.mark.slow
def test_help_lists_the_benchmarks_without_markup() -> None:
    done = run_benchmarks("--help")
    assert done.returncode == 0
    assert "``" not in done.stdout
    for name in bench_main.discover():
        assert name in done.stdout
    assert "--strict" in done.stdout
    assert "MISS" in done.stdout


@pytest.mark.slow
def test_unknown_names_are_refused_with_the_known_ones() -> None:
    missing = run_benchmarks("--only", "no-such-benchmark")
    assert missing.returncode == 2
    assert "no-such-benchmark" in missing.stderr
    assert "codec" in missing.stderr


def rows_with_a_miss() -> list[Row]:
    return [
        Row(
            "group a", "ours", 300.0, "rec/s", "peer", 2.0, "a note that is long enough to go below"
        ),
        Row("group a", "peer", 200.0, "rec/s"),
        Row("group a", "absent peer", None, "rec/s", note="absent-peer is not installed here"),
        Row("group a", "ours vs absent", 300.0, "rec/s", "absent peer", 1.0),
        Row("memory", "peak RSS", 120.0, "MB", maximum=100.0),
        Row("speed", "ours", 5_000.0, "rec/s", minimum=1_000.0),
    ]


def test_verdicts_misses_and_headline() -> None:
    rows = rows_with_a_miss()
    assert [v.text for v in verdicts(rows[0], rows)] == [">= 2x MISS"]
    assert [(v.text, v.ok) for v in verdicts(rows[3], rows)] == [(">= 1x not checked", None)]
    assert [v.text for v in verdicts(rows[4], rows)] == ["<= 100 MB MISS"]
    assert [v.text for v in verdicts(rows[5], rows)] == [">= 1,000 rec/s ok"]
    assert [(row.subject, v.ok) for row, v in misses(rows)] == [
        ("ours", False),
        ("peak RSS", False),
    ]
    assert headline(rows) == "ours 1.50x peer (>= 2x MISS)"
    assert headline(rows[1:3]) == "peer 200 rec/s"


def test_render_says_what_was_not_measured_and_fits_the_width() -> None:
    text = render(rows_with_a_miss())
    assert max(len(line) for line in text.splitlines()) <= WIDTH
    assert "not measured" in text
    assert "absent-peer is not installed here" in text
    assert "(absent peer not measured)" in text
    assert "<= 100 MB MISS" in text
    assert ">= 1x not checked" in text
    # however long the cells, no line is wider than the width
    huge = Row("g" * 150, "s" * 60, 1e9, "records per second", "s" * 60, 1.0, "a note " * 40)
    lines = render([*rows_with_a_miss(), huge]).splitlines()
    assert max(len(line) for line in lines) <= WIDTH


def test_strict_fails_on_a_missed_target(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fake = types.ModuleType("benchmarks.bench_fake")
    fake.run = lambda quick: rows_with_a_miss()  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "benchmarks.bench_fake", fake)
    monkeypatch.setattr(bench_main, "discover", lambda: ["fake"])
    monkeypatch.setattr(bench_main, "measure", measure_here)  # the fake is here only
    assert bench_main.main([]) == 0
    assert bench_main.main(["--strict"]) == 1
    err = capsys.readouterr().err
    assert "missed targets: group a: ours >= 2x MISS" in err
    assert "[1/1] fake: " in err


def test_a_benchmark_runs_in_a_process_of_its_own_and_its_failure_says_why() -> None:
    with pytest.raises(BenchmarkFailed, match=r"No module named 'benchmarks\.bench_x'"):
        measure("x", quick=True)


@pytest.mark.slow
def test_scale_benchmark_quick_run() -> None:
    """The cost-growth benchmark at 4 and 64 shards on moto: every cell measured."""
    done = run_benchmarks("--quick", "--only", "scale", "--json")
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    cells = {(row["group"], row["subject"]): row for row in rows}
    for group in (
        "producer, 100 B records",
        "producer CPU",
        "consumer, 100 B",
        "consumer, against a server that answers from memory",
        "consumer CPU (lower",
        "consumer CPU, each shard's start included",
    ):
        for shards in ("4 shards", "64 shards"):
            [row] = [r for (g, s), r in cells.items() if group in g and s.startswith(shards)]
            assert row["value"] > 0, row
    idle = [row for row in rows if "idle consumer" in row["group"]]
    assert {row["subject"] for row in idle} == {
        f"{n} shards{what}"
        for n in (4, 64)
        for what in (": client CPU", ": GC time", ": max event-loop lag", "")
    }
    calls = {row["subject"]: row["value"] for row in idle if row["unit"] == "calls/s"}
    assert calls["64 shards"] > calls["4 shards"] > 0  # every shard is polled
    assert all(row["value"] >= 0 for row in idle)
    assert not any(row["subject"].startswith(("256", "1,024")) for row in rows)  # --quick: small


def test_a_quoted_baseline_is_printed_beside_the_ratio() -> None:
    rows = [
        Row("g", "ours", 100.0, "el/s", "engine", quote_baseline=True),
        Row("g", "engine", 250.0, "el/s"),
        Row("g", "plain", 50.0, "el/s", "engine"),
    ]
    text = render(rows)
    assert "0.40x engine at 250 el/s" in text
    assert "0.20x engine\n" in text + "\n"
    assert headline(rows) == "ours 0.40x engine at 250 el/s"


@pytest.mark.slow
def test_producer_benchmark_quick_run_measures_telemetry_on_against_off() -> None:
    """The producer benchmark on moto, with its row of the producer with OpenTelemetry
    metrics on, measured in the same run as with them off."""
    done = run_benchmarks("--quick", "--only", "producer", "--json")
    assert done.returncode == 0, done.stderr
    rows = {row["subject"]: row for row in json.loads(done.stdout)}
    off = rows["kinesis_core Producer, telemetry off"]
    on = rows["kinesis_core Producer, telemetry on"]
    assert off["value"] > 0
    assert on["value"] > 0
    assert on["group"] == off["group"]
    assert (on["baseline"], on["target"]) == (off["subject"], 0.95)
    explicit = rows["kinesis_core Producer, explicit hash keys"]
    assert explicit["value"] > 0
    assert (explicit["baseline"], explicit["target"]) == ("kinesis_core Producer", 0.8)
    (ids,) = [
        row
        for row in json.loads(done.stdout)
        if row["subject"] == "kinesis_core Producer, record ids on" and row["unit"] == "records/s"
    ]
    assert ids["value"] > 0
    assert (ids["baseline"], ids["target"]) == ("kinesis_core Producer, record ids off", 0.9)
