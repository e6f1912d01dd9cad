"""Beam YAML transforms: ``type: ReadFromKinesis``, ``type: WriteToKinesis`` and
``type: DecodeGlueRecords``.

Beam YAML finds Python transforms through a ``providers:`` entry of ``type: python`` that maps
a transform name to a fully qualified constructor; its ``config:`` becomes the keyword
arguments. Put this block in the pipeline file (examples/beam_kinesis.yaml)::

    providers:
      - type: python
        config: {}
        transforms:
          ReadFromKinesis: beam_kinesis.yaml_provider.ReadFromKinesis
          WriteToKinesis: beam_kinesis.yaml_provider.WriteToKinesis
          DecodeGlueRecords: beam_kinesis.yaml_provider.DecodeGlueRecords

``ReadFromKinesis`` is :class:`beam_kinesis.ReadFromKinesis` itself: its records are schema'd
rows (``data``, ``partition_key``, ``shard_id``, ...). ``WriteToKinesis`` takes rows, with
field names for the key and the data (``partition_key: user_id``, ``data_field: payload``).
A record that fails for good fails the bundle, unless ``error_handling: {output: NAME}`` names
an output for them: rows of ``element`` (the input row), ``error_code`` and ``msg``, the way
Beam YAML's own transforms report bad records. Where Kinesis is comes from the pipeline options
(``--kinesis_region_name``, ``--kinesis_endpoint_url``), credentials from the workers.
``DecodeGlueRecords`` turns the records of AWS Glue Schema Registry producers into rows of its
``reader_schema`` (an Avro record or a JSON Schema object, ``data_format: AVRO`` or ``JSON``;
docs/schema-registry.md); a record it cannot decode fails the bundle, unless
``error_handling: {output: NAME}`` names an output for them (``element``, the record, and
``msg``, why).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import apache_beam as beam
from apache_beam.pvalue import Row
from apache_beam.typehints.row_type import RowTypeConstraint

from beam_kinesis.read import ReadFromKinesis
from beam_kinesis.write import FailedRecord, OnFailure, WriteToKinesis as _WriteToKinesis
from kinesis_core.errors import ConfigurationError

__all__ = ["DecodeGlueRecords", "ReadFromKinesis", "WriteToKinesis"]


def _error_row(failed: FailedRecord) -> Row:
    return Row(element=failed.element, error_code=failed.error_code, msg=failed.error_message)  # type: ignore[no-untyped-call]


class WriteToKinesis(beam.PTransform):  # type: ignore[type-arg]
    """Rows to a Kinesis stream, for Beam YAML (module docstring)."""

    def __init__(
        self,
        stream: str,
        *,
        error_handling: Mapping[str, Any] | None = None,
        **options: Any,
    ) -> None:
        super().__init__()
        self._errors: str | None = None
        if error_handling is not None:
            output = error_handling.get("output") if isinstance(error_handling, Mapping) else None
            if not isinstance(output, str) or not output:
                raise ConfigurationError(
                    "error_handling", f"must be {{output: NAME}}, got {error_handling!r}"
                )
            self._errors = output
        on_failure: OnFailure = "output" if self._errors else "raise"
        self._write = _WriteToKinesis(stream, on_failure=on_failure, **options)

    def expand(self, pcoll: Any) -> dict[str, Any]:
        result = pcoll | self._write
        if self._errors is None:
            return {}
        row_type = RowTypeConstraint.from_fields(
            [("element", pcoll.element_type), ("error_code", str), ("msg", str)]
        )
        rows = beam.Map(_error_row).with_output_types(row_type)  # type: ignore[no-untyped-call]
        return {self._errors: result.failed_records | "ErrorRows" >> rows}


def _undecoded_row(failed: Any) -> Row:
    return Row(element=failed.record, msg=failed.reason)  # type: ignore[no-untyped-call]


def _refuse(failed: Any) -> None:
    raise ValueError(f"a record was not decoded ({failed.reason}): {failed.record!r}")


class DecodeGlueRecords(beam.PTransform):  # type: ignore[type-arg]
    """Glue Schema Registry records to rows, for Beam YAML (module docstring)."""

    def __init__(
        self,
        *,
        reader_schema: str,
        data_format: str = "AVRO",
        registry_name: str = "default-registry",
        endpoint_url: str | None = None,
        region_name: str | None = None,
        error_handling: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__()
        from beam_kinesis.schema_registry import DecodeGlueRecords as _Decode
        from kinesis_core.aws.config import ClientConfig
        from kinesis_schema_registry import AvroSchema, JsonSchema, RegistryConfig

        formats = {"AVRO": AvroSchema, "JSON": JsonSchema}
        if data_format not in formats:
            raise ConfigurationError("data_format", f"must be AVRO or JSON, got {data_format!r}")
        output = error_handling.get("output") if isinstance(error_handling, Mapping) else None
        if error_handling is not None and (not isinstance(output, str) or not output):
            raise ConfigurationError(
                "error_handling", f"must be {{output: NAME}}, got {error_handling!r}"
            )
        self._errors = output
        config = RegistryConfig(
            registry_name=registry_name,
            client_config=ClientConfig(region_name=region_name),
            endpoint_url=endpoint_url,
        )
        self._decode = _Decode(config, reader_schema=formats[data_format](reader_schema))

    def expand(self, pcoll: Any) -> Any:
        result = pcoll | self._decode
        if self._errors is None:
            _ = result.failed | "Refuse" >> beam.Map(_refuse)  # type: ignore[no-untyped-call]
            return result.rows
        row_type = RowTypeConstraint.from_fields([("element", pcoll.element_type), ("msg", str)])
        rows = beam.Map(_undecoded_row).with_output_types(row_type)  # type: ignore[no-untyped-call]
        return {"output": result.rows, self._errors: result.failed | "ErrorRows" >> rows}
