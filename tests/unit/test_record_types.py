"""The two record types with one name agree: ``beam_kinesis.KinesisRecord`` (a NamedTuple, so
that Beam infers its schema) has the fields of the core ``KinesisRecord`` with the same types,
except the arrival time, which each engine spells its own way (Beam's ``Timestamp``)."""

from __future__ import annotations

import typing
from datetime import datetime, timedelta, timezone

from apache_beam.utils.timestamp import Timestamp

from beam_kinesis.record import KinesisRecord as BeamRecord
from kinesis_core.aggregation import deaggregate, encode_aggregate
from kinesis_core.records import KinesisRecord as CoreRecord, SubRecord, WireRecord

SEQUENCE = "49590338271490256608559692538361571095921575989136588898"


def test_the_beam_element_has_the_core_records_fields_and_types() -> None:
    arrival = datetime(2026, 1, 1, tzinfo=timezone.utc)
    entry = {
        "Data": encode_aggregate([SubRecord("k", "7", b"a"), SubRecord("k", None, b"b")]),
        "PartitionKey": "k",
        "SequenceNumber": SEQUENCE,
        "ApproximateArrivalTimestamp": arrival,
    }
    core = deaggregate([entry], "shardId-000000000000")[0]
    hints = typing.get_type_hints(BeamRecord)
    assert hints.pop("approximate_arrival_timestamp") is Timestamp
    for field, hint in hints.items():
        assert isinstance(getattr(core, field), typing.get_args(hint) or hint), field
    beam = BeamRecord(
        **{f: getattr(core, f) for f in hints}, approximate_arrival_timestamp=Timestamp(0)
    )
    assert (beam.sequence_number, beam.position) == (core.sequence_number, core.position)
    assert core.position == (int(SEQUENCE), 0)


def test_the_arrival_time_is_kept_as_sent_and_given_in_both_forms() -> None:
    def record(arrival: float | datetime | None) -> CoreRecord:
        return CoreRecord(b"x", "k", None, SEQUENCE, 0, "shardId-000000000000", arrival, False)

    seconds = 1_795_314_817.648
    from_seconds = record(seconds)
    assert from_seconds.approximate_arrival_seconds == seconds
    stamp = from_seconds.approximate_arrival_timestamp
    assert stamp == datetime.fromtimestamp(seconds, timezone.utc)
    assert stamp is not None
    assert stamp.utcoffset() == timedelta(0)
    assert from_seconds.approximate_arrival_timestamp is stamp  # made once
    assert from_seconds.approximate_arrival_seconds == seconds

    from_datetime = record(datetime(2026, 1, 1, tzinfo=timezone.utc))
    assert from_datetime.approximate_arrival_seconds == 1_767_225_600.0
    assert record(None).approximate_arrival_timestamp is None
    assert record(None).approximate_arrival_seconds is None


def test_the_sub_records_of_an_aggregate_share_its_arrival_seconds() -> None:
    entry = WireRecord(
        SEQUENCE,
        encode_aggregate([SubRecord(str(i), None, b"v") for i in range(3)]),
        "k",
        1_795_314_817.5,
    )
    records = deaggregate([entry], "shardId-000000000000")
    assert len(records) == 3
    assert len({id(r.approximate_arrival_seconds) for r in records}) == 1
