"""kinesis_core.cli: hash-key, allocate, skew, and how subcommands plug in."""

from __future__ import annotations

import argparse
import io
import subprocess
import sys
from pathlib import Path

import pytest

from kinesis_core import cli
from kinesis_core.aws.config import ClientConfig
from kinesis_core.cli import COMMANDS, Command, Handler, main
from kinesis_core.shards.info import ShardInfo

SEED_1 = "261578874264819908609102035485573088411"
SEED_2 = "266003691477286198901011725417809479212"


def run_ok(capsys: pytest.CaptureFixture[str], *argv: str) -> list[str]:
    assert main(list(argv)) == 0
    out, err = capsys.readouterr()
    assert err == ""
    return out.splitlines()


def run_usage_error(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    with pytest.raises(SystemExit) as info:
        main(list(argv))
    assert info.value.code == 2
    return capsys.readouterr().err


def test_hash_key(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_ok(capsys, "hash-key", "1", "2") == [SEED_1, SEED_2]


def test_hash_key_refuses_a_bad_partition_key(capsys: pytest.CaptureFixture[str]) -> None:
    err = run_usage_error(capsys, "hash-key", "x" * 257)
    assert "kinesis-connectors hash-key: error: partition_key: has 257 characters" in err


def test_allocate(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_ok(capsys, "allocate", "3") == [str(2**127), str(2**126), str(3 * 2**126)]
    seed = ["64", "32", "96", "16", "80", "48", "112"]
    assert run_ok(capsys, "allocate", "7", "--bits", "7") == seed


def test_allocate_balances_against_existing_keys(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    expected = ["64", "96", "80", "112", "72", "48", "104", "16"]
    assert (
        run_ok(capsys, "allocate", "8", "--bits", "7", "--existing", "0", "32", "9", "57")
        == expected
    )
    keys = tmp_path / "keys.txt"
    keys.write_text("0\n32\n\n9 \r\n57\n", encoding="utf-8")
    assert run_ok(capsys, "allocate", "8", "--bits", "7", "--existing-file", str(keys)) == expected
    assert (
        run_ok(
            capsys, "allocate", "8", "--bits", "7", "--existing", "0", "--existing-file", str(keys)
        )
        == expected
    )


def test_allocate_errors(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert "key: must lie in [0, 2**7 - 1], got 128" in run_usage_error(
        capsys, "allocate", "1", "--bits", "7", "--existing", "128"
    )
    assert "n: must be >= 0" in run_usage_error(capsys, "allocate", "-1")
    assert "invalid int value: 'x'" in run_usage_error(capsys, "allocate", "x")
    missing = str(tmp_path / "missing.txt")
    assert "cannot read" in run_usage_error(capsys, "allocate", "1", "--existing-file", missing)


def test_skew_with_keys(capsys: pytest.CaptureFixture[str]) -> None:
    lines = run_ok(capsys, "skew", "--shards", "2", "--keys", *[str(i) for i in range(1, 15)])
    assert lines[1].split()[-2:] == ["3", "21.4%"]
    assert lines[2].split()[-2:] == ["11", "78.6%"]
    assert lines[-1].startswith("max/mean: 1.571 ")


def test_skew_with_a_keys_file_and_stdin(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    keys = tmp_path / "keys.txt"
    keys.write_text("".join(f"{i}\n" for i in range(1, 15)), encoding="utf-8")
    assert run_ok(capsys, "skew", "--shards", "2", "--keys-file", str(keys))[-1].startswith(
        "max/mean: 1.571 "
    )
    monkeypatch.setattr(sys, "stdin", io.StringIO(keys.read_text(encoding="utf-8")))
    assert run_ok(capsys, "skew", "--shards", "2", "--keys-file", "-")[-1].startswith(
        "max/mean: 1.571 "
    )


def test_skew_with_hash_keys(capsys: pytest.CaptureFixture[str]) -> None:
    lines = run_ok(capsys, "skew", "--shards", "4", "--hash-keys", "--keys", "0", str(2**127))
    assert [line.split()[-2] for line in lines[1:5]] == ["1", "0", "1", "0"]
    assert lines[-1].startswith("max/mean: 2.000 ")


def test_skew_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert "one of the arguments --keys --keys-file is required" in run_usage_error(
        capsys, "skew", "--shards", "2"
    )
    assert "one of the arguments --shards --stream is required" in run_usage_error(
        capsys, "skew", "--keys", "a"
    )
    assert "not allowed with argument" in run_usage_error(
        capsys, "skew", "--shards", "2", "--stream", "s", "--keys", "a"
    )
    assert "--shards: must be >= 1, got 0" in run_usage_error(
        capsys, "skew", "--shards", "0", "--keys", "a"
    )
    assert "hash_key: must be a decimal" in run_usage_error(
        capsys, "skew", "--shards", "2", "--hash-keys", "--keys", "abc"
    )
    assert "required: COMMAND" in run_usage_error(capsys)


def test_skew_of_a_stream_uses_its_open_shards(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[tuple[str, ClientConfig]] = []

    async def fake(stream: str, config: ClientConfig) -> list[ShardInfo]:
        seen.append((stream, config))
        return [ShardInfo("only", 0, 2**128 - 1), ShardInfo("old", 0, 5, ending_sequence_number=1)]

    monkeypatch.setattr(cli, "_stream_shards", fake)
    lines = run_ok(
        capsys, "skew", "--stream", "s", "--endpoint-url", "http://127.0.0.1:1", "--keys", "a", "b"
    )
    assert [(s, c.endpoint_url) for s, c in seen] == [("s", "http://127.0.0.1:1")]
    run_ok(capsys, "skew", "--stream", "s", "--region", "eu-west-3", "--keys", "a")
    assert seen[-1][1].region_name == "eu-west-3"
    assert lines[1].split()[0] == "only"
    assert lines[-1].startswith("max/mean: 1.000 (2 records over 1 shards")


def test_skew_of_a_stream_that_cannot_be_listed(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    async def failing(stream: str, config: ClientConfig) -> list[ShardInfo]:
        raise OSError("connection refused")

    monkeypatch.setattr(cli, "_stream_shards", failing)
    assert main(["skew", "--stream", "s", "--keys", "a"]) == 1
    err = capsys.readouterr().err
    assert "cannot list the shards of stream 's': connection refused" in err


def test_skew_of_a_stream_refuses_a_bad_endpoint(capsys: pytest.CaptureFixture[str]) -> None:
    err = run_usage_error(
        capsys, "skew", "--stream", "s", "--endpoint-url", "localhost:1", "--keys", "a"
    )
    assert "endpoint_url: must start with http:// or https://" in err


def test_other_modules_can_add_subcommands(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def register(parser: argparse.ArgumentParser) -> Handler:
        parser.add_argument("word")
        return lambda args: print(args.word.upper()) or 3

    monkeypatch.setitem(COMMANDS, "shout", Command("shout a word", register))
    assert main(["shout", "hi"]) == 3
    assert capsys.readouterr().out == "HI\n"


def test_python_dash_m_kinesis_core() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "kinesis_core", "hash-key", "1"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, SEED_1 + "\n", "")
