"""The two record types with one name agree: ``beam_kinesis.KinesisRecord`` (a NamedTuple, so
that Beam infers its schema) has the fields of the core ``KinesisRecord`` with the same types,
except the arrival time, which each engine spells its own way (Beam's ``Timestamp``)."""

from __future__ import annotations

import typing
from datetime import datetime, timezone

from apache_beam.utils.timestamp import Timestamp

from beam_kinesis.record import KinesisRecord as BeamRecord
from kinesis_core.aggregation import deaggregate, encode_aggregate
from kinesis_core.records import SubRecord

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
