"""The consumer life-cycle machine and its driver, consumer ARNs, and FanOutClient's argument
checks."""

from __future__ import annotations

import asyncio
import pickle
import sys

import pytest

from kinesis_core.aws.config import ClientConfig
from kinesis_core.consumer import EnhancedFanOut
from kinesis_core.errors import ConfigurationError
from kinesis_core.fanout import (
    FanOutClient,
    RegisteredConsumer,
    check_consumer_of_stream,
    deregister_consumer,
    parse_consumer_arn,
    register_consumer,
)
from kinesis_core.fanout.registration import (
    LIMIT_RETRIES,
    Active,
    ConsumerActivation,
    ConsumerRegistrationError,
    Operation,
    Send,
    Wait,
)
from tests.fakes.clock import RecordingClock
from tests.fakes.fanout import CONSUMER_ARN
from tests.fakes.kinesis import client_error

STREAM = "arn:aws:kinesis:us-east-1:123456789012:stream/orders"


def machine(**kwargs: object) -> ConsumerActivation:
    options: dict[str, object] = {
        "consumer_name": "reader",
        "stream": STREAM,
        "now": 0.0,
        "timeout": 10.0,
        "rng": lambda: 1.0,
    }
    options.update(kwargs)
    return ConsumerActivation(**options)  # type: ignore[arg-type]


def wait_out(m: ConsumerActivation, now: float) -> tuple[float, Send | Active]:
    action = m.next_action(now)
    assert isinstance(action, Wait)
    assert m.next_action(action.until - 0.001) == action  # nothing before its time
    after = m.next_action(action.until)
    assert isinstance(after, (Send, Active))
    return action.until, after


def test_register_creating_then_describe_until_active() -> None:
    m = machine()
    assert m.next_action(0.0) == Send(Operation.REGISTER)
    m.on_consumer(CONSUMER_ARN, "CREATING", 0.0)
    now, action = wait_out(m, 0.0)
    assert action == Send(Operation.DESCRIBE)
    m.on_consumer(CONSUMER_ARN, "CREATING", now)
    later, action = wait_out(m, now)
    assert later - now > now  # backs off (doubling)
    m.on_consumer(CONSUMER_ARN, "ACTIVE", later)
    assert m.next_action(later) == Active(CONSUMER_ARN)


def test_register_active_at_once() -> None:
    m = machine()
    m.on_consumer(CONSUMER_ARN, "ACTIVE", 0.0)
    assert m.next_action(0.0) == Active(CONSUMER_ARN)


def test_existing_name_is_reused() -> None:
    m = machine()
    m.on_in_use(0.0)
    assert m.next_action(0.0) == Send(Operation.DESCRIBE)
    m.on_consumer(CONSUMER_ARN, "ACTIVE", 0.0)
    assert m.next_action(0.0) == Active(CONSUMER_ARN)


def test_deleting_consumer_of_the_name_is_waited_out_then_registered_again() -> None:
    m = machine()
    m.on_in_use(0.0)
    m.on_consumer(CONSUMER_ARN, "DELETING", 0.0)
    now, action = wait_out(m, 0.0)
    assert action == Send(Operation.DESCRIBE)
    m.on_not_found(now)
    _, action = wait_out(m, now)
    assert action == Send(Operation.REGISTER)


def test_twenty_consumers_is_a_clear_error_once_retries_show_it_is_no_rate() -> None:
    m = machine()
    now = 0.0
    names = [f"c{i}" for i in range(20)]
    for _ in range(LIMIT_RETRIES):  # an On-demand Advantage stream takes 50: a rate passes
        m.on_limit_exceeded(Operation.REGISTER, now)
        assert m.next_action(now) == Send(Operation.LIST)
        m.on_listed(names, now)
        now, action = wait_out(m, now)
        assert action == Send(Operation.REGISTER)
    m.on_limit_exceeded(Operation.REGISTER, now)
    with pytest.raises(ConsumerRegistrationError) as info:
        m.on_listed(names, now)
    message = str(info.value)
    assert "already has 20 registered consumers" in message
    assert "20 (provisioned and On-demand Standard) or 50 (On-demand Advantage)" in message
    assert "deregister one of ['c0', 'c1', 'c10'" in message


def test_fifty_consumers_is_the_limit_at_once() -> None:
    m = machine()
    m.on_limit_exceeded(Operation.REGISTER, 0.0)
    with pytest.raises(ConsumerRegistrationError, match="already has 50 registered consumers"):
        m.on_listed([f"c{i}" for i in range(50)], 0.0)


def test_rate_limit_on_register_is_retried() -> None:
    m = machine()
    m.on_limit_exceeded(Operation.REGISTER, 0.0)
    m.on_listed(["other"], 0.0)
    _, action = wait_out(m, 0.0)
    assert action == Send(Operation.REGISTER)


def test_limit_with_our_name_listed_describes_it() -> None:
    m = machine()
    m.on_limit_exceeded(Operation.REGISTER, 0.0)
    m.on_listed([f"c{i}" for i in range(19)] + ["reader"], 0.0)
    assert m.next_action(0.0) == Send(Operation.DESCRIBE)


def test_throttled_describe_backs_off() -> None:
    m = machine()
    m.on_in_use(0.0)
    m.on_limit_exceeded(Operation.DESCRIBE, 0.0)
    _, action = wait_out(m, 0.0)
    assert action == Send(Operation.DESCRIBE)
    m.on_transient_error(Operation.DESCRIBE, 1.0)
    _, action = wait_out(m, 1.0)
    assert action == Send(Operation.DESCRIBE)


def test_gives_up_at_the_deadline_with_the_last_status() -> None:
    m = machine(timeout=1.0)
    m.on_consumer(CONSUMER_ARN, "CREATING", 0.0)
    now = 0.0
    while now < 1.0:
        now, _ = wait_out(m, now)
        assert now <= 1.0  # never waits past the deadline
        if now < 1.0:
            m.on_consumer(CONSUMER_ARN, "CREATING", now)
    with pytest.raises(ConsumerRegistrationError, match=r"still CREATING after 1 s"):
        m.on_consumer(CONSUMER_ARN, "CREATING", now)


def test_by_arn_only_describes_and_a_missing_arn_fails() -> None:
    m = machine(consumer_arn=CONSUMER_ARN)
    assert m.next_action(0.0) == Send(Operation.DESCRIBE)
    with pytest.raises(ConsumerRegistrationError, match="must name a registered consumer"):
        m.on_not_found(0.0)


def test_by_arn_deleting_fails() -> None:
    m = machine(consumer_arn=CONSUMER_ARN)
    with pytest.raises(ConsumerRegistrationError, match="being deregistered"):
        m.on_consumer(CONSUMER_ARN, "DELETING", 0.0)


def test_parse_consumer_arn() -> None:
    parsed = parse_consumer_arn(CONSUMER_ARN)
    assert (parsed.region, parsed.account_id, parsed.stream_name, parsed.consumer_name) == (
        "us-east-1",
        "123456789012",
        "orders",
        "reader",
    )
    assert parsed.creation_timestamp == 1700000000
    assert parsed.stream_arn == STREAM
    china = "arn:aws-cn:kinesis:cn-north-1:123456789012:stream/s/consumer/c:1"
    assert parse_consumer_arn(china).partition == "aws-cn"


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "arn:aws:kinesis:us-east-1:123456789012:stream/orders",
        "arn:aws:kinesis:us-east-1:1234:stream/orders/consumer/reader:1",
        "arn:aws:sqs:us-east-1:123456789012:stream/orders/consumer/reader:1",
        "arn:aws:kinesis:us-east-1:123456789012:stream/orders/consumer/reader",
        CONSUMER_ARN + " ",
    ],
)
def test_bad_consumer_arns(bad: str) -> None:
    with pytest.raises(ConfigurationError, match="consumer_arn: must look like"):
        parse_consumer_arn(bad)


def test_consumer_of_another_stream() -> None:
    assert check_consumer_of_stream(CONSUMER_ARN, STREAM).consumer_name == "reader"
    with pytest.raises(ConfigurationError, match=r"is a consumer of .*stream/orders, not of"):
        check_consumer_of_stream(CONSUMER_ARN, STREAM + "-2")


CONFIG = ClientConfig(region_name="us-east-1", aws_access_key_id="a", aws_secret_access_key="b")


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"max_subscription_seconds": 0}, "max_subscription_seconds"),
        ({"max_subscription_seconds": 301}, "max_subscription_seconds"),
        ({"max_buffered_bytes": 1000}, "max_buffered_bytes"),
        ({"http_version": "h3"}, "http_version"),
        ({"max_streams_per_connection": 0}, "max_streams_per_connection"),
    ],
)
def test_client_options_are_checked(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(ConfigurationError, match=f"^{field}: "):
        FanOutClient(CONFIG, **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("consumer_arn", "shard_id", "position", "field"),
    [
        ("nope", "shardId-000000000000", {"Type": "LATEST"}, "consumer_arn"),
        (CONSUMER_ARN, "", {"Type": "LATEST"}, "shard_id"),
        (CONSUMER_ARN, "shard/1", {"Type": "LATEST"}, "shard_id"),
        (CONSUMER_ARN, "shardId-000000000000", {"Type": "FIRST"}, "starting_position"),
        (CONSUMER_ARN, "shardId-000000000000", {"Type": "AT_SEQUENCE_NUMBER"}, "starting_position"),
        (
            CONSUMER_ARN,
            "shardId-000000000000",
            {"Type": "AFTER_SEQUENCE_NUMBER", "SequenceNumber": "12a"},
            "starting_position",
        ),
        (CONSUMER_ARN, "shardId-000000000000", {"Type": "AT_TIMESTAMP"}, "starting_position"),
    ],
)
def test_subscribe_arguments_are_checked_before_anything_is_sent(
    consumer_arn: str, shard_id: str, position: dict[str, str], field: str
) -> None:
    async def main() -> None:
        client = FanOutClient(CONFIG)
        try:
            with pytest.raises(ConfigurationError, match=f"^{field}: "):
                await client.subscribe(consumer_arn, shard_id, position)
            assert client.subscriptions == 0
        finally:
            await client.aclose()

    asyncio.run(main())


def test_missing_h2_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import kinesis_core.fanout

    for module in ("connection", "http2", "http11"):
        monkeypatch.delitem(sys.modules, f"kinesis_core.fanout.{module}", raising=False)
        monkeypatch.delattr(kinesis_core.fanout, module, raising=False)
    monkeypatch.setitem(sys.modules, "h2", None)
    with pytest.raises(ConfigurationError, match=r"pip install 'kinesis-connectors\[efo\]'"):
        FanOutClient(CONFIG)


def test_consumer_tags_are_checked_and_kept_as_pairs() -> None:
    efo = EnhancedFanOut(consumer_name="reader", tags={"team": "data", "env": ""})
    assert efo.tags == (("team", "data"), ("env", ""))
    assert hash(efo) == hash(EnhancedFanOut(consumer_name="reader", tags=efo.tags))
    assert pickle.loads(pickle.dumps(efo)) == efo
    assert EnhancedFanOut().tags == ()
    bad: list[tuple[object, str]] = [
        ({f"k{i}": "v" for i in range(51)}, "at most 50 tags"),
        ({"": "v"}, "1 to 128 characters"),
        ({"k" * 129: "v"}, "1 to 128 characters"),
        ({"aws:owner": "v"}, "not starting with 'aws:'"),
        ({"k": "v" * 257}, "at most 256 characters"),
        ({"k": 7}, "at most 256 characters"),
        ((("k", "a"), ("k", "b")), "appears twice"),
        (("k",), "must map keys to values"),
    ]
    for tags, message in bad:
        with pytest.raises(ConfigurationError, match=f"^tags: .*{message}"):
            EnhancedFanOut(tags=tags)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="registered by name, not one given by ARN"):
        EnhancedFanOut(consumer_arn=CONSUMER_ARN, tags={"team": "data"})


def test_tags_go_with_the_registration_only() -> None:
    class Client:
        def __init__(self) -> None:
            self.calls: list[tuple[str, dict[str, object]]] = []

        async def describe_stream_summary(self, **kw: object) -> dict[str, object]:
            return {"StreamDescriptionSummary": {"StreamARN": STREAM}}

        async def register_stream_consumer(self, **kw: object) -> dict[str, object]:
            self.calls.append(("register", kw))
            return {
                "Consumer": {
                    "ConsumerARN": CONSUMER_ARN,
                    "ConsumerStatus": "ACTIVE",
                    "ConsumerName": "reader",
                }
            }

    async def main() -> None:
        client = Client()
        async with RegisteredConsumer(client, STREAM, consumer_name="reader", tags={"t": "1"}):
            pass
        async with RegisteredConsumer(client, STREAM, consumer_name="reader"):
            pass
        assert client.calls == [
            ("register", {"StreamARN": STREAM, "ConsumerName": "reader", "Tags": {"t": "1"}}),
            ("register", {"StreamARN": STREAM, "ConsumerName": "reader"}),
        ]

    asyncio.run(main())


# -- the driver: each call's failures retried by the executor, on its clock -----------------


class _Scripted:
    """A Kinesis client whose calls answer from ``script[operation]`` in turn (an exception
    is raised); the last answer then on."""

    def __init__(self, **script: list[object]) -> None:
        self.script = script
        self.calls: list[str] = []

    def __getattr__(self, operation: str) -> object:
        if operation not in self.script:
            raise AttributeError(operation)

        async def call(**params: object) -> object:
            self.calls.append(operation)
            answers = self.script[operation]
            answer = answers.pop(0) if len(answers) > 1 else answers[0]
            if isinstance(answer, Exception):
                raise answer
            return answer

        return call


def _described(status: str) -> dict[str, object]:
    return {
        "ConsumerDescription": {
            "ConsumerName": "reader",
            "ConsumerARN": CONSUMER_ARN,
            "ConsumerStatus": status,
            "StreamARN": STREAM,
        }
    }


def test_deregistering_waits_on_the_clock_until_the_consumer_is_gone() -> None:
    gone = client_error("ResourceNotFoundException", "no such consumer", "Describe")
    busy = client_error("ThrottlingException", "slow down", "Describe")
    client = _Scripted(
        deregister_stream_consumer=[{}],
        describe_stream_consumer=[_described("DELETING"), busy, _described("DELETING"), gone],
    )
    clock = RecordingClock()
    clock.run(deregister_consumer(client, CONSUMER_ARN, clock=clock))
    assert client.calls.count("describe_stream_consumer") == 4
    assert len(clock.waits) == 3


def test_deregistering_gives_up_at_the_timeout_naming_the_status() -> None:
    client = _Scripted(
        deregister_stream_consumer=[{}], describe_stream_consumer=[_described("DELETING")]
    )
    clock = RecordingClock()
    with pytest.raises(ConsumerRegistrationError, match="still DELETING 10 s after") as info:
        clock.run(deregister_consumer(client, CONSUMER_ARN, timeout=10.0, clock=clock))
    assert sum(clock.waits) == pytest.approx(10.0)
    assert any("failed attempts" in note for note in info.value.__cause__.__notes__)  # type: ignore[union-attr]


def test_a_registration_retries_server_errors_through_the_executor() -> None:
    hiccup = client_error("InternalFailure", "hiccup", "Register", 500)
    client = _Scripted(
        register_stream_consumer=[
            hiccup,
            hiccup,
            {"Consumer": _described("ACTIVE")["ConsumerDescription"]},
        ],
    )
    clock = RecordingClock()
    consumer = clock.run(register_consumer(client, STREAM, "reader", clock=clock))
    assert consumer.status == "ACTIVE"
    assert client.calls == ["register_stream_consumer"] * 3
    assert len(clock.waits) == 2


def test_a_registration_whose_errors_outlast_the_timeout_gives_up_with_their_history() -> None:
    hiccup = client_error("InternalFailure", "hiccup", "Register", 500)
    client = _Scripted(register_stream_consumer=[hiccup])
    clock = RecordingClock()
    with pytest.raises(ConsumerRegistrationError, match="not registered after 5 s") as info:
        clock.run(register_consumer(client, STREAM, "reader", timeout=5.0, clock=clock))
    assert sum(clock.waits) == pytest.approx(5.0)
    assert any("failed attempts" in note for note in info.value.__context__.__notes__)  # type: ignore[union-attr]
