"""The fault plan's streaming faults: where StreamCutter cuts, which requests they hit, the CLI."""

from __future__ import annotations

import pytest

from kinesis_core.errors import ConfigurationError
from kinesis_core.local.fault_cli import build_parser, config_from_args
from kinesis_core.local.faults import (
    Action,
    FaultConfig,
    FaultKind,
    FaultPlan,
    FaultRule,
    StreamCutter,
)
from tests.fakes.fanout import initial_response, record, subscribe_event

SUBSCRIBE = "Kinesis_20131202.SubscribeToShard"
STREAM = initial_response() + subscribe_event([record(1, b"a")], "1") + subscribe_event([], "1")
FIRST = len(initial_response())
SECOND = FIRST + len(subscribe_event([record(1, b"a")], "1"))


def cut(stream: bytes, chunk_size: int, **kwargs: int) -> bytes:
    cutter = StreamCutter(**kwargs)  # type: ignore[arg-type]
    out = bytearray()
    for i in range(0, len(stream), chunk_size):
        forwarded, done = cutter.feed(stream[i : i + chunk_size])
        out += forwarded
        if done:
            assert cutter.feed(b"more") == (b"", True)
            return bytes(out)
    raise AssertionError("never cut")


@pytest.mark.parametrize("chunk_size", [1, 3, 7, 64, 10_000])
@pytest.mark.parametrize(("events", "end"), [(0, 0), (1, FIRST), (2, SECOND)])
def test_cut_after_events_ends_exactly_after_that_message(
    chunk_size: int, events: int, end: int
) -> None:
    assert cut(STREAM, chunk_size, after_events=events) == STREAM[:end]


@pytest.mark.parametrize("chunk_size", [1, 5, 10_000])
def test_cut_after_bytes(chunk_size: int) -> None:
    assert cut(STREAM, chunk_size, after_bytes=FIRST + 9) == STREAM[: FIRST + 9]


def test_whichever_comes_first() -> None:
    assert cut(STREAM, 4, after_events=2, after_bytes=10) == STREAM[:10]
    assert cut(STREAM, 4, after_events=1, after_bytes=len(STREAM)) == STREAM[:FIRST]


def test_a_stream_shorter_than_the_limit_passes_whole() -> None:
    cutter = StreamCutter(after_events=5)
    assert cutter.feed(STREAM) == (STREAM, False)
    assert cutter.events == 3


def test_cutter_needs_a_limit() -> None:
    with pytest.raises(ValueError, match="after_events or after_bytes"):
        StreamCutter()


def test_stream_cut_hits_subscribe_to_shard_only() -> None:
    plan = FaultPlan(FaultConfig.from_rates(stream_cut=1.0, stream_cut_after_events=3))
    decision = plan.decide(SUBSCRIBE, b"{}")
    assert decision.action is Action.FORWARD
    assert decision.kind is FaultKind.STREAM_CUT
    assert decision.stream_cut == (3, None)
    other = plan.decide("Kinesis_20131202.GetRecords", b"{}")
    assert other.kind is None
    assert other.stream_cut is None
    assert plan.stats().injected == {(FaultKind.STREAM_CUT, "SubscribeToShard"): 1}


def test_stream_cut_after_bytes_wins_over_events() -> None:
    config = FaultConfig.from_rates(stream_cut=1.0, stream_cut_after_bytes=100)
    assert FaultPlan(config).decide(SUBSCRIBE, b"{}").stream_cut == (None, 100)


def test_stream_delay_applies_per_chunk_and_combines_with_a_cut() -> None:
    config = FaultConfig.from_rates(stream_cut=1.0, stream_delay_ms=250)
    plan = FaultPlan(config)
    decision = plan.decide(SUBSCRIBE, b"{}")
    assert decision.chunk_delay == 0.25
    assert decision.stream_cut == (1, None)
    assert plan.decide("Kinesis_20131202.PutRecords", b"{}").chunk_delay == 0.0
    assert plan.stats().by_kind() == {FaultKind.STREAM_CUT: 1, FaultKind.STREAM_DELAY: 1}


def test_truncate_never_buffers_an_event_stream() -> None:
    plan = FaultPlan(FaultConfig.from_rates(truncate=1.0))
    assert plan.decide(SUBSCRIBE, b"{}").action is Action.FORWARD
    assert plan.decide("Kinesis_20131202.ListShards", b"{}").action is Action.TRUNCATE
    filtered = FaultPlan(FaultConfig((FaultRule(FaultKind.TRUNCATE, 1.0, frozenset({"Kinesis"})),)))
    assert filtered.decide(SUBSCRIBE, b"{}").action is Action.FORWARD


def test_request_faults_still_apply_to_subscribe_to_shard() -> None:
    plan = FaultPlan(FaultConfig.from_rates(limit_exceeded=1.0))
    decision = plan.decide(SUBSCRIBE, b"{}", "application/x-amz-json-1.1")
    assert decision.action is Action.RESPOND
    assert decision.response is not None
    assert b"LimitExceededException" in decision.response.body
    reset = FaultPlan(FaultConfig.from_rates(reset=1.0)).decide(SUBSCRIBE, b"{}")
    assert reset.action is Action.RESET


def test_same_seed_same_stream_faults() -> None:
    config = FaultConfig.from_rates(stream_cut=0.5, stream_delay_ms=10, stream_delay_rate=0.5)

    def run(seed: int) -> list[tuple[FaultKind | None, float]]:
        plan = FaultPlan(config, seed)
        return [(d.kind, d.chunk_delay) for d in (plan.decide(SUBSCRIBE, b"") for _ in range(50))]

    assert run(7) == run(7)
    assert {kind for kind, _ in run(7)} == {None, FaultKind.STREAM_CUT}
    assert {delay for _, delay in run(7)} == {0.0, 0.01}


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"stream_cut_after_events": -1}, "stream_cut_after_events"),
        ({"stream_cut_after_bytes": -1}, "stream_cut_after_bytes"),
        ({"stream_delay_ms": -5.0}, "stream_delay_ms"),
    ],
)
def test_bad_stream_settings(kwargs: dict[str, float], field: str) -> None:
    with pytest.raises(ConfigurationError, match=f"^{field}: must be >= 0"):
        FaultConfig(**kwargs)  # type: ignore[arg-type]


def test_cli_stream_flags() -> None:
    args = build_parser().parse_args(
        [
            "--upstream",
            "http://127.0.0.1:4567",
            "--stream-cut",
            "0.3",
            "--stream-cut-after-events",
            "4",
            "--stream-delay-ms",
            "50",
            "--stream-delay-rate",
            "0.5",
        ]
    )
    config = config_from_args(args)
    assert config.stream_cut_after_events == 4
    assert config.stream_cut_after_bytes is None
    assert config.stream_delay_ms == 50
    assert {(r.kind, r.rate) for r in config.rules} == {
        (FaultKind.STREAM_CUT, 0.3),
        (FaultKind.STREAM_DELAY, 0.5),
    }
