"""``python -m kinesis_core.local up --stream NAME[:SHARDS[:MAX_RECORD_KIB]]``: the argument."""

from __future__ import annotations

import pytest

from kinesis_core.local.__main__ import build_parser


@pytest.mark.parametrize(
    ("spec", "parsed"),
    [
        ("demo", ("demo", 4, None)),
        ("demo:2", ("demo", 2, None)),
        ("big:1:10240", ("big", 1, 10240)),
        ("big::1024", ("big", 4, 1024)),
    ],
)
def test_a_stream_takes_shards_and_a_maximum_record_size(
    spec: str, parsed: tuple[str, int, int | None]
) -> None:
    args = build_parser().parse_args(["up", "--stream", spec])
    assert args.streams == [parsed]


@pytest.mark.parametrize("spec", ["big:1:1023", "big:1:10241", "big:1:10MiB", ":1", "big:0"])
def test_a_bad_stream_is_refused_saying_why(spec: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["up", "--stream", spec])
    err = capsys.readouterr().err
    assert repr(spec) in err
