"""The Beam YAML provider: the example pipeline (examples/beam_kinesis.yaml) run as users run
it, with ``python -m apache_beam.yaml.main``, reads a kinesis-mock stream (bounded), filters and
writes to a second stream; and WriteToKinesis's error_handling output carries bad rows."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.yaml.yaml_transform import expand_pipeline

from kinesis_core.local import DUMMY_ACCESS_KEY_ID, DUMMY_SECRET_ACCESS_KEY, LocalStream
from tests.helpers.beam import read_back

pytestmark = pytest.mark.integration

EXAMPLE = Path(__file__).parents[2] / "examples" / "beam_kinesis.yaml"


@pytest.fixture(autouse=True)
def worker_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", DUMMY_ACCESS_KEY_ID)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", DUMMY_SECRET_ACCESS_KEY)


def test_the_example_yaml_pipeline_reads_filters_and_writes(kinesis_stream: Any) -> None:
    source: LocalStream = kinesis_stream(shards=2)
    sink: LocalStream = kinesis_stream(shards=1)
    entries = [("u-1", b"a"), ("u-2", b"b"), ("u-1", b"c")]
    source.boto_client().put_records(
        StreamName=source.name,
        Records=[{"PartitionKey": key, "Data": data} for key, data in entries],
    )
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "apache_beam.yaml.main",
            f"--yaml_pipeline_file={EXAMPLE}",
            "--jinja_variables=" + json.dumps({"source": source.name, "sink": sink.name}),
            f"--kinesis_endpoint_url={source.endpoint_url}",
            f"--kinesis_region_name={source.client_config.region_name}",
            "--runner=DirectRunner",
            "--prism_location=/nonexistent/prism",  # no download: the in-process runner
        ],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
        env={**os.environ, "PYTHONPATH": str(EXAMPLE.parents[1])},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    got = read_back(sink, {b"a", b"c"})
    assert sorted(r.data for r in got) == [b"a", b"c"]
    assert {r.partition_key for r in got} <= {s["ShardId"] for s in source.shards()}


def test_write_error_handling_output_names_the_bad_rows(moto_stream: Any, tmp_path: Path) -> None:
    stream: LocalStream = moto_stream(shards=1)
    spec = f"""
pipeline:
  transforms:
    - type: Create
      config:
        elements:
          - {{user_id: "u-1", payload: "hello"}}
          - {{user_id: "", payload: "empty key"}}
    - type: WriteToKinesis
      input: Create
      config:
        stream: {stream.name}
        partition_key: user_id
        data_field: payload
        error_handling: {{output: bad}}
    - type: MapToFields
      name: Bad
      input: WriteToKinesis.bad
      config:
        language: python
        fields:
          code: error_code
          payload: element.payload
    - type: WriteToJson
      input: Bad
      config:
        path: {tmp_path / "bad"}
providers:
  - type: python
    config: {{}}
    transforms:
      WriteToKinesis: beam_kinesis.yaml_provider.WriteToKinesis
"""
    options = PipelineOptions(
        [
            f"--kinesis_endpoint_url={stream.endpoint_url}",
            f"--kinesis_region_name={stream.client_config.region_name}",
        ]
    )
    with beam.Pipeline(runner=FnApiRunner(), options=options) as p:
        expand_pipeline(p, spec)
    bad = [json.loads(line) for f in tmp_path.glob("bad*") for line in f.read_text().splitlines()]
    assert bad == [{"code": "ValidationError", "payload": "empty key"}]
    assert [r.data for r in read_back(stream, {b"hello"})] == [b"hello"]
