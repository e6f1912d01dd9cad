"""The demo's metrics through OpenTelemetry's Prometheus exporter, and what a scrape returns.

Runs the core part of the demo (examples/demo.py: a producer and a consumer against
kinesis-mock while a shard splits) with telemetry on, serves the metrics the way Prometheus
scrapes them (OpenTelemetry's ``PrometheusMetricReader`` and prometheus_client's HTTP server,
on 127.0.0.1 only), then fetches ``/metrics`` over HTTP and prints the connectors' lines:
every sample but the histograms' ``_bucket`` lines, without the ``otel_scope_*`` labels the
exporter adds to each (``--raw`` prints the scrape as it came).

Needs the SDK and the exporter besides the ``otel`` extra::

    pip install 'kinesis-connectors[otel]' opentelemetry-sdk opentelemetry-exporter-prometheus
    python -m examples.metrics_prometheus --records 400

``--serve SECONDS`` keeps the endpoint up that long afterwards, to point a Prometheus at it.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import time
import urllib.request

from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.sdk.metrics import MeterProvider
from prometheus_client import start_http_server

from examples.demo import run_core
from kinesis_core.aws.noise import silence_third_party_noise
from kinesis_core.local import KinesisMock
from kinesis_core.telemetry import Telemetry

PREFIXES = ("messaging_", "aws_kinesis_")
"""The connectors' metric families as Prometheus names them (dots become underscores)."""
SCOPE_LABELS = re.compile(r',?otel_scope_\w+="[^"]*"')


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        return str(response.read().decode())


def main() -> None:
    silence_third_party_noise()
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=1000)
    parser.add_argument("--users", type=int, default=100)
    parser.add_argument("--port", type=int, default=0, help="0: any free port")
    parser.add_argument("--serve", type=float, default=0.0, metavar="SECONDS")
    parser.add_argument("--raw", action="store_true", help="print the whole scrape")
    args = parser.parse_args()

    provider = MeterProvider(metric_readers=[PrometheusMetricReader()])
    server, _ = start_http_server(args.port, addr="127.0.0.1")
    port = server.server_port
    print(f"metrics: http://127.0.0.1:{port}/metrics", flush=True)
    # One series per shard: the demo's stream has a handful of them.
    telemetry = Telemetry(meter_provider=provider, shard_attribute=True)
    with KinesisMock() as mock:
        part = asyncio.run(run_core(mock, args.records, args.users, telemetry))
    print(f"\ndemo: {part.summary}\n\nGET /metrics (the connectors' lines):")
    for line in scrape(port).splitlines():
        if args.raw:
            print(line)
        elif line.startswith(PREFIXES) and "_bucket{" not in line:
            print(SCOPE_LABELS.sub("", line).replace("{,", "{"))
    if args.serve:
        print(f"\nserving for {args.serve:g} s", flush=True)
        time.sleep(args.serve)
    server.shutdown()
    provider.shutdown()
    raise SystemExit(0 if part.ok else 1)


if __name__ == "__main__":
    main()
